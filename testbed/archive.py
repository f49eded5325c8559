"""Debian archive indexes: does a mirror serve a suite's package index for an architecture as its Release says?

``debootstrap`` downloads a suite's ``InRelease``, then ``main/binary-<arch>/Packages`` (the smallest compressed
variant first, by hash when the suite offers ``Acquire-By-Hash``), and checks each file's size and SHA256 against
what ``InRelease`` lists. Mirrors are not atomic: while one syncs (or when it is broken for hours, as on
2026-11-24 for trixie riscv64: ``Packages.xz`` 9,385,284 bytes served, 9,387,120 listed, by-hash 404) the check
fails ten times per variant, and debootstrap gives up after minutes and hundreds of log lines.

:func:`check_index` does the same check first, in seconds, with the same order of variants, so an image build can
fall back to another suite or mirror and say in one line what was wrong. It does not check the ``InRelease``
signature: debootstrap does, against the archive keyring, on the source this module picked.
"""

from __future__ import annotations

import hashlib
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

FETCH_TIMEOUT_S = 30.0
CHUNK = 1 << 16
VARIANTS = ("", ".xz", ".gz", ".bz2")
"""Suffixes of ``Packages`` debootstrap can use (it has xz, gzip and bzip2); it tries them smallest first."""

Opener = Callable[[str, float], BinaryIO]
"""Opens a URL for reading (raising :class:`urllib.error.URLError` or :class:`OSError`); tests pass their own."""


def _urlopen(url: str, timeout: float) -> BinaryIO:
    response: BinaryIO = urllib.request.urlopen(url, timeout=timeout)
    return response


@dataclass(frozen=True)
class DebianSource:
    """One place debootstrap can take a suite from: a mirror's base URL and a suite name (or codename)."""

    mirror: str
    suite: str

    def url(self, path: str) -> str:
        return f"{self.mirror.rstrip('/')}/dists/{self.suite}/{path}"

    def __str__(self) -> str:
        return f"{self.suite} from {self.mirror}"


@dataclass(frozen=True)
class IndexFile:
    """A file a Release lists: its path below ``dists/<suite>/``, size and SHA256."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Release:
    """What a suite's ``InRelease`` (or ``Release``) says, as far as an image build needs it."""

    suite: str
    codename: str
    architectures: tuple[str, ...]
    acquire_by_hash: bool
    files: dict[str, IndexFile] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Release:
        """Parse a Release file; a clear-signed ``InRelease`` is read between its armour lines."""
        lines = _strip_signature(text.splitlines())
        fields: dict[str, str] = {}
        files: dict[str, IndexFile] = {}
        section = ""
        for line in lines:
            if line[:1] in (" ", "\t"):
                if section == "SHA256":
                    parts = line.split()
                    if len(parts) == 3 and parts[1].isdigit():
                        files[parts[2]] = IndexFile(parts[2], int(parts[1]), parts[0].lower())
                continue
            key, sep, value = line.partition(":")
            if not sep:
                continue
            section = key.strip()
            fields[section] = value.strip()
        if not files:
            raise ValueError("no SHA256 file list (not a Release file?)")
        return cls(suite=fields.get("Suite", ""), codename=fields.get("Codename", ""),
                   architectures=tuple(fields.get("Architectures", "").split()),
                   acquire_by_hash=fields.get("Acquire-By-Hash", "").lower() == "yes", files=files)

    def packages_variants(self, arch: str, component: str = "main") -> list[IndexFile]:
        """The listed variants of ``<component>/binary-<arch>/Packages``, smallest first (debootstrap's order)."""
        stem = f"{component}/binary-{arch}/Packages"
        found = [self.files[stem + suffix] for suffix in VARIANTS if stem + suffix in self.files]
        return sorted(found, key=lambda f: f.size)


def _strip_signature(lines: list[str]) -> list[str]:
    if not lines or not lines[0].startswith("-----BEGIN PGP SIGNED MESSAGE-----"):
        return lines
    body: list[str] = []
    started = False
    for line in lines[1:]:
        if not started:
            started = line == ""  # the armour headers (Hash: ...) end at the first empty line
            continue
        if line.startswith("-----BEGIN PGP SIGNATURE-----"):
            break
        body.append(line[2:] if line.startswith("- ") else line)
    return body


@dataclass(frozen=True)
class IndexCheck:
    """Whether ``source`` serves a consistent index for ``arch``; ``problem`` says in one line what is wrong."""

    source: DebianSource
    arch: str
    problem: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.problem is None

    def describe(self) -> str:
        state = "consistent" if self.problem is None else self.problem
        return f"{self.source.suite}/{self.arch} on {self.source.mirror}: {state}"


def check_index(source: DebianSource, arch: str, component: str = "main", timeout: float = FETCH_TIMEOUT_S,
                opener: Opener | None = None) -> IndexCheck:
    """Fetch the suite's Release and the ``Packages`` index of ``arch`` the way debootstrap would, and compare."""
    start = time.monotonic()
    problem = _problem(source, arch, component, timeout, opener or _urlopen)
    return IndexCheck(source, arch, problem, time.monotonic() - start)


def _problem(source: DebianSource, arch: str, component: str, timeout: float, opener: Opener) -> str | None:
    try:
        text, name = _fetch_release(source, timeout, opener)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"no Release: {_reason(exc)}"
    try:
        release = Release.parse(text)
    except ValueError as exc:
        return f"{name} unreadable: {exc}"
    if release.architectures and arch not in release.architectures:
        return f"{name} lists no {arch} (it has {', '.join(release.architectures)})"
    variants = release.packages_variants(arch, component)
    if not variants:
        return f"{name} lists no {component}/binary-{arch}/Packages"
    faults = []
    for entry in variants:
        fault = _variant_fault(source, entry, release.acquire_by_hash, timeout, opener)
        if fault is None:
            return None
        faults.append(fault)
    return f"{name} disagrees with the index: " + "; ".join(faults)


def _fetch_release(source: DebianSource, timeout: float, opener: Opener) -> tuple[str, str]:
    try:
        return _read_all(opener(source.url("InRelease"), timeout)).decode("utf-8", "replace"), "InRelease"
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
    return _read_all(opener(source.url("Release"), timeout)).decode("utf-8", "replace"), "Release"


def _read_all(stream: BinaryIO) -> bytes:
    with stream:
        return stream.read()


def _variant_fault(source: DebianSource, entry: IndexFile, by_hash: bool, timeout: float,
                   opener: Opener) -> str | None:
    """None if the variant can be had intact (by hash first when offered, then by name), else what was wrong."""
    urls = []
    if by_hash:
        directory = entry.path.rsplit("/", 1)[0]
        urls.append(("by-hash", source.url(f"{directory}/by-hash/SHA256/{entry.sha256}")))
    urls.append(("", source.url(entry.path)))
    seen = []
    for how, url in urls:
        try:
            size, digest = _measure(opener(url, timeout), entry.size)
        except (urllib.error.URLError, OSError) as exc:
            seen.append(f"{how or 'file'} {_reason(exc)}")
            continue
        if size == entry.size and digest == entry.sha256:
            return None
        if size != entry.size:
            seen.append(f"{how or 'file'} is {_bytes(size)} bytes, listed {_bytes(entry.size)}")
        else:
            seen.append(f"{how or 'file'} SHA256 {digest[:12]}..., listed {entry.sha256[:12]}...")
    return f"{entry.path.rsplit('/', 1)[-1]} " + ", ".join(seen)


def _measure(stream: BinaryIO, expected: int) -> tuple[int, str]:
    """Size and SHA256 of what ``stream`` serves (stops reading past ``expected`` + 1: the size is wrong then)."""
    h = hashlib.sha256()
    size = 0
    with stream:
        while size <= expected:
            chunk = stream.read(CHUNK)
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _bytes(n: int) -> str:
    return f"{n:,}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return f"unreachable ({exc.reason})"
    return str(exc) or type(exc).__name__


def first_consistent(sources: Iterable[DebianSource], arch: str, log: Callable[[str], None] | None = None,
                     opener: Opener | None = None, timeout: float = FETCH_TIMEOUT_S) -> tuple[DebianSource | None,
                                                                                            list[IndexCheck]]:
    """The first of ``sources`` whose index for ``arch`` is consistent (None if none is), and every check made."""
    checks: list[IndexCheck] = []
    for source in sources:
        check = check_index(source, arch, opener=opener, timeout=timeout)
        checks.append(check)
        if log is not None and not check.ok:
            log(f"images: skipping {check.describe()}")
        if check.ok:
            return source, checks
    return None, checks
