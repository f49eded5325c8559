"""Catalogue versions: which requirements a certification had to check, for every published catalogue version.

A report records the catalogue version and digest its verdicts were judged against. ``conformance verify`` looks
the version up in ``catalogue/versions.json`` (shipped with the package, never rewritten) and checks that every
requirement of the report's targets in that version is in the report with a status, at the level and with the
``required`` flag that version gave it. Without this a forger could delete the requirements a component failed
(or mark them recommended) and re-derive a "certified" verdict from what is left.

The digest covers what decides a verdict: each live requirement's id, target, category, level and required flag.
Titles and rationales may be reworded without a new version; adding, retiring or re-levelling a requirement needs
one. ``python -m conformance.catalogue_versions --bump`` records the current catalogue as the next version
(``tests/conformance/test_catalogue_versions.py`` fails until it is run).

Vendor requirements (``$FAKEHW_EXTRA_REQUIREMENTS``) change the digest; such a report verifies where the same
extra files are installed (the verifier's own catalogue then has the recorded version and digest).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from conformance.requirements import LEVELS, Catalogue, Level, catalogue

VERSIONS_FILE = "versions.json"


@dataclass(frozen=True, slots=True)
class Entry:
    """What a verdict depends on for one requirement."""

    target: str
    category: str
    level: Level
    required: bool

    def to_json(self) -> list[object]:
        return [self.target, self.category, self.level, self.required]


@dataclass(frozen=True)
class CatalogueVersion:
    version: str
    digest: str
    requirements: Mapping[str, Entry]

    def for_targets(self, targets: Iterable[str]) -> dict[str, Entry]:
        wanted = set(targets)
        return {i: e for i, e in self.requirements.items() if e.target in wanted}


@dataclass(frozen=True, slots=True)
class CatalogueStamp:
    """What a report records: the version it was judged against and the digest of that catalogue."""

    version: str
    digest: str


class CatalogueVersionError(ValueError):
    """A recorded catalogue this verifier cannot reproduce; the message says which and what to do."""


def entries(cat: Catalogue) -> dict[str, Entry]:
    return {r.id: Entry(r.target, r.category, r.level, r.required) for r in cat.requirements if not r.retired}


def digest(reqs: Mapping[str, Entry]) -> str:
    canonical = json.dumps({k: v.to_json() for k, v in sorted(reqs.items())}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _versions_path() -> Path:
    return Path(str(resources.files("conformance").joinpath("catalogue", VERSIONS_FILE)))


def _parse_entry(req_id: str, raw: object) -> Entry:
    if (not isinstance(raw, list) or len(raw) != 4 or not all(isinstance(x, str) for x in raw[:3])
            or raw[2] not in LEVELS or not isinstance(raw[3], bool)):
        raise CatalogueVersionError(f"{VERSIONS_FILE}: {req_id}: expected [target, category, level, required]")
    return Entry(raw[0], raw[1], raw[2], raw[3])


@cache
def _published() -> tuple[str, dict[str, CatalogueVersion]]:
    data = json.loads(_versions_path().read_text())
    out = {}
    for version, body in data["versions"].items():
        if not version.isdecimal():
            raise CatalogueVersionError(f"{VERSIONS_FILE}: version {version!r} is not a number (versions are "
                                        "numbered 1, 2, ... by --bump)")
        reqs = {i: _parse_entry(i, e) for i, e in body["requirements"].items()}
        if digest(reqs) != body["digest"]:
            raise CatalogueVersionError(f"{VERSIONS_FILE}: version {version}: its digest does not match its "
                                        "requirements (the file was edited by hand)")
        out[version] = CatalogueVersion(version, body["digest"], reqs)
    return str(data["current"]), out


def published() -> dict[str, CatalogueVersion]:
    """Every published catalogue version, oldest first."""
    return dict(_published()[1])


def current_version() -> str:
    return _published()[0]


def stamp() -> CatalogueStamp:
    """The catalogue this process judges with: the current version number and the digest of what it holds."""
    return CatalogueStamp(current_version(), digest(entries(catalogue())))


def resolve(recorded: CatalogueStamp) -> CatalogueVersion:
    """The requirements of a recorded catalogue: a published version, or this installation's own catalogue when
    it has the same version and digest (a catalogue extended with vendor requirements)."""
    known = published().get(recorded.version)
    if known is not None and known.digest == recorded.digest:
        return known
    local = entries(catalogue())
    if recorded.version == current_version() and digest(local) == recorded.digest:
        return CatalogueVersion(recorded.version, recorded.digest, local)
    if known is None:
        newest = max(published(), key=int)
        raise CatalogueVersionError(f"catalogue version {recorded.version!r} is unknown to this verifier (it knows "
                                    f"versions up to {newest}): verify with the fakehw release that made the report")
    raise CatalogueVersionError(
        f"catalogue digest {recorded.digest[:16]}... is not that of catalogue version {recorded.version} "
        f"({known.digest[:16]}...): the report was judged against a modified or extended catalogue (for vendor "
        "requirements, set FAKEHW_EXTRA_REQUIREMENTS to the same files)")


# --------------------------------------------------------------------------------------------------- maintenance


def bump(path: Path | None = None) -> str:
    """Record the current catalogue as a new version (refused when it equals the current one)."""
    path = path or _versions_path()
    data = json.loads(path.read_text())
    reqs = entries(catalogue())
    now = digest(reqs)
    if data["versions"][data["current"]]["digest"] == now:
        raise CatalogueVersionError(f"the catalogue is still version {data['current']}: nothing to record")
    version = str(max(int(v) for v in data["versions"]) + 1)
    data["versions"][version] = {"digest": now, "requirements": {k: v.to_json() for k, v in sorted(reqs.items())}}
    data["current"] = version
    path.write_text(_dumps(data))
    _published.cache_clear()
    return version


def _dumps(data: Mapping[str, object]) -> str:
    """versions.json with one line per requirement (diffs of a new version stay readable)."""
    text = json.dumps(data, indent=1, sort_keys=True)
    return re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.catalogue_versions",
                                     description="Show whether the requirement catalogue matches its recorded "
                                                 "version; --bump records it as the next version.")
    parser.add_argument("--bump", action="store_true", help="record the current catalogue as a new version")
    args = parser.parse_args(argv)
    try:
        if args.bump:
            print(f"catalogue version {bump()} recorded in conformance/catalogue/{VERSIONS_FILE}")
            return 0
        now = stamp()
        recorded = published()[now.version]
        if recorded.digest != now.digest:
            print(f"the catalogue changed since version {now.version} was recorded: run with --bump",
                  file=sys.stderr)
            return 1
        print(f"catalogue version {now.version} (sha256 {now.digest})")
        return 0
    except CatalogueVersionError as exc:
        print(f"catalogue_versions: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
