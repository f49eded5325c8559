"""The catalogue is versioned: the shipped catalogue is its recorded current version, published versions never change,
and a report is checked for completeness against the version it records."""

from __future__ import annotations

import difflib
import itertools
import json
import shutil
from pathlib import Path

import pytest

from conformance import catalogue_versions as cv
from conformance.requirements import catalogue

VERSIONS = Path(__file__).parents[2] / "conformance" / "catalogue" / "versions.json"


def test_the_catalogue_is_its_recorded_current_version() -> None:
    now = cv.stamp()
    recorded = cv.published()[now.version]
    assert recorded.digest == now.digest, (
        f"the requirement catalogue changed since version {now.version} was recorded: run "
        "`python -m conformance.catalogue_versions --bump` (published versions never change)")
    live = {r.id for r in catalogue().requirements if not r.retired}
    assert set(recorded.requirements) == live


def test_published_versions_only_grow_and_are_self_consistent() -> None:
    versions = cv.published()
    numbers = sorted(int(v) for v in versions)
    assert numbers == list(range(1, len(numbers) + 1))
    for version in versions.values():
        assert cv.digest(version.requirements) == version.digest
    for older, newer in itertools.pairwise(numbers):
        assert versions[str(older)].digest != versions[str(newer)].digest, "a version recorded twice"


def test_a_hand_edited_version_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.loads(VERSIONS.read_text())
    first = data["versions"]["1"]["requirements"]
    first[next(iter(first))][3] = not first[next(iter(first))][3]
    edited = tmp_path / "versions.json"
    edited.write_text(json.dumps(data))
    monkeypatch.setattr(cv, "_versions_path", lambda: edited)
    cv._published.cache_clear()
    try:
        with pytest.raises(cv.CatalogueVersionError, match="version 1: its digest does not match"):
            cv.published()
    finally:
        cv._published.cache_clear()


@pytest.mark.parametrize("version", ["1a", "v2", "", "\u00b2"])
def test_a_version_that_is_not_a_number_is_refused(version: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Versions are numbered 1, 2, ... (``--bump`` records max + 1, and a report from an unknown version is told
    the newest known by number): a hand-edited versions.json with a version that is not a decimal number (even
    with a valid body; a superscript two is a digit to Python but no number to int()) is refused naming it, not
    a ValueError later."""
    data = json.loads(VERSIONS.read_text())
    data["versions"][version] = data["versions"]["1"]
    edited = tmp_path / "versions.json"
    edited.write_text(json.dumps(data))
    monkeypatch.setattr(cv, "_versions_path", lambda: edited)
    cv._published.cache_clear()
    try:
        with pytest.raises(cv.CatalogueVersionError, match=f"version {version!r} is not a number"):
            cv.published()
    finally:
        cv._published.cache_clear()


def test_bump_records_a_new_version_only_when_the_catalogue_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "versions.json"
    shutil.copyfile(VERSIONS, copy)
    monkeypatch.setattr(cv, "_versions_path", lambda: copy)
    cv._published.cache_clear()
    try:
        assert cv.main(["--bump"]) == 2
        assert "nothing to record" in capsys.readouterr().err
        extra = tmp_path / "extra"
        extra.mkdir()
        (extra / "vendor.yaml").write_text("target: vendor\nrequirements:\n  - {id: VN-XTRA-001, title: t, "
                                           "rationale: r, category: c, level: core}\n")
        monkeypatch.setenv("FAKEHW_EXTRA_REQUIREMENTS", str(extra))
        assert cv.main([]) == 1
        assert "changed since version" in capsys.readouterr().err
        before = cv.current_version()
        assert cv.main(["--bump"]) == 0
        after = json.loads(copy.read_text())
        assert after["current"] == str(int(before) + 1)
        assert after["versions"][after["current"]]["requirements"]["VN-XTRA-001"] == ["vendor", "c", "core", True]
        assert after["versions"][before] == json.loads(VERSIONS.read_text())["versions"][before]
        assert cv.main([]) == 0
    finally:
        cv._published.cache_clear()


def test_a_bump_adds_lines_to_the_published_file_and_rewrites_none(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Published versions never change, and versions.json is reviewed as a git diff (the module's docstring: one line
    per requirement, "diffs of a new version stay readable"). So a bump, which rewrites the whole file, must write the
    published versions byte for byte as they are in the shipped file: the diff of a bump is the new version's lines
    and the ``current`` line, and no line of an older version. Expected lines: the shipped versions.json itself."""
    copy = tmp_path / "versions.json"
    shutil.copyfile(VERSIONS, copy)
    monkeypatch.setattr(cv, "_versions_path", lambda: copy)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "vendor.yaml").write_text("target: vendor\nrequirements:\n  - {id: VN-XTRA-001, title: t, "
                                       "rationale: r, category: c, level: core}\n")
    monkeypatch.setenv("FAKEHW_EXTRA_REQUIREMENTS", str(extra))
    cv._published.cache_clear()
    try:
        before = cv.current_version()
        cv.bump()
    finally:
        cv._published.cache_clear()
    shipped = VERSIONS.read_text().splitlines()
    bumped = copy.read_text().splitlines()
    opcodes = difflib.SequenceMatcher(None, shipped, bumped, autojunk=False).get_opcodes()
    removed = [line for tag, i1, i2, _, _ in opcodes if tag in ("replace", "delete") for line in shipped[i1:i2]]
    # The current version's number goes; at most the closing brace of the last version also changes (JSON now
    # follows it with a comma), unless the diff matches it to another version's.
    assert f' "current": "{before}",' in removed and set(removed) <= {f' "current": "{before}",', "  }"}, removed
    assert any(line.rstrip(",") == '    "VN-XTRA-001": ["vendor", "c", "core", true]' for line in bumped)


def test_resolving_a_recorded_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = cv.stamp()
    assert cv.resolve(now).requirements == cv.published()[now.version].requirements
    with pytest.raises(cv.CatalogueVersionError, match="catalogue version '99' is unknown to this verifier"):
        cv.resolve(cv.CatalogueStamp("99", now.digest))
    with pytest.raises(cv.CatalogueVersionError, match="modified or extended catalogue"):
        cv.resolve(cv.CatalogueStamp(now.version, "0" * 64))
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "vendor.yaml").write_text("target: vendor\nrequirements:\n  - {id: VN-XTRA-001, title: t, rationale: r, "
                                       "category: c, level: core}\n")
    monkeypatch.setenv("FAKEHW_EXTRA_REQUIREMENTS", str(extra))
    extended = cv.stamp()
    assert extended.version == now.version and extended.digest != now.digest
    assert "VN-XTRA-001" in cv.resolve(extended).requirements
    monkeypatch.delenv("FAKEHW_EXTRA_REQUIREMENTS")
    with pytest.raises(cv.CatalogueVersionError, match="set FAKEHW_EXTRA_REQUIREMENTS to the same files"):
        cv.resolve(extended)


def test_a_report_from_a_newer_catalogue_names_the_newest_version_known() -> None:
    """A report judged against a catalogue version this verifier has never heard of (made by a newer fakehw) is
    refused, and the message says how far this verifier's knowledge goes: the highest version number in
    conformance/catalogue/versions.json, compared as a number (version 10 is after version 9)."""
    newest = max(int(v) for v in json.loads(VERSIONS.read_text())["versions"])
    with pytest.raises(cv.CatalogueVersionError) as refused:
        cv.resolve(cv.CatalogueStamp(str(newest + 90), "0" * 64))
    assert f"catalogue version '{newest + 90}' is unknown to this verifier (it knows versions up to {newest})" in \
        str(refused.value), str(refused.value)


def test_an_older_version_is_not_its_successors_catalogue() -> None:
    """A report records the version and digest it was judged against; only the current version may be this
    installation's own (extended) catalogue. An older version number with the current catalogue's digest is
    neither that version (its published digest differs) nor this catalogue (whose version is the current one):
    refused, quoting both digests."""
    now = cv.stamp()
    first = cv.published()["1"]
    assert first.digest != now.digest
    with pytest.raises(cv.CatalogueVersionError) as refused:
        cv.resolve(cv.CatalogueStamp("1", now.digest))
    assert str(refused.value).startswith(f"catalogue digest {now.digest[:16]}... is not that of catalogue version 1 "
                                         f"({first.digest[:16]}...)")
    assert cv.resolve(cv.CatalogueStamp("1", first.digest)).requirements == first.requirements
