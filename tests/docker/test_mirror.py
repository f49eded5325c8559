"""Base images survive a bad Debian mirror: its index is checked before debootstrap, the next suite or mirror is
tried, and the error names the mirror's problem in a few lines. No real network: a local HTTP mirror serves the
fault seen on 2026-11-24 (trixie's riscv64 ``Packages.xz``/``.gz`` of another size than InRelease lists, by-hash
404) while its other suites are consistent.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import lzma
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from testbed.archive import DebianSource, Release, check_index
from testbed.images import (
    MIRROR_FAULT,
    BaseSources,
    ImageBuilder,
    ImageInputError,
    MirrorError,
)

BIN = Path(sys.executable).parent
NATIVE = {"x86_64": "amd64", "riscv64": "riscv64", "aarch64": "arm64"}.get(os.uname().machine, "amd64")
PACKAGES = "".join(f"Package: pkg{i}\nVersion: 1.{i}\nArchitecture: all\nFilename: pool/main/p/pkg{i}.deb\n"
                   f"Size: {1000 + i}\nSHA256: {hashlib.sha256(str(i).encode()).hexdigest()}\n\n"
                   for i in range(400)).encode()


@dataclass(frozen=True)
class LocalMirror:
    url: str
    root: Path
    keyring: Path | None

    def served(self, suite: str, arch: str, name: str) -> Path:
        return self.root / "dists" / suite / "main" / f"binary-{arch}" / name


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _release(suite: str, arches: list[str], files: dict[str, bytes]) -> str:
    lines = [f"Origin: Debian\nSuite: {suite}\nCodename: {suite}\nArchitectures: {' '.join(arches)}\n"
             "Components: main\nAcquire-By-Hash: yes\nSHA256:"]
    lines += [f" {hashlib.sha256(data).hexdigest()} {len(data):>9} {path}" for path, data in sorted(files.items())]
    return "\n".join(lines) + "\n"


def _sign(release: str, home: Path, out: Path) -> Path | None:
    """Clear-sign ``release`` into ``out`` with a throwaway key; the keyring debootstrap checks it with (None
    without gpg: then the InRelease is unsigned, enough for everything but debootstrap)."""
    if shutil.which("gpg") is None:
        out.write_text(release)
        return None
    home.mkdir(mode=0o700, exist_ok=True)
    gpg = ["gpg", "--batch", "--quiet", "--homedir", str(home), "--pinentry-mode", "loopback", "--passphrase", ""]
    if not (home / "pubring.kbx").exists():
        subprocess.run([*gpg, "--quick-gen-key", "fakehw test mirror <mirror@fakehw.invalid>", "ed25519", "sign",
                        "never"], check=True, capture_output=True)
        keyring = home / "keyring.gpg"
        keyring.write_bytes(subprocess.run([*gpg, "--export"], check=True, capture_output=True).stdout)
    subprocess.run([*gpg, "--clearsign", "--output", str(out), "-"], input=release.encode(), check=True,
                   capture_output=True)
    return home / "keyring.gpg"


def _suite(root: Path, suite: str, arches: list[str], broken: set[str], home: Path) -> Path | None:
    """Write ``dists/<suite>``: every arch's Packages(.xz,.gz) listed by an InRelease; for ``broken`` arches the
    .xz and .gz served are not what InRelease lists, and the by-hash copies are missing."""
    listed: dict[str, bytes] = {}
    for arch in arches:
        directory = root / "dists" / suite / "main" / f"binary-{arch}"
        directory.mkdir(parents=True)
        body = PACKAGES + f"Package: only-{arch}\nVersion: 1\n\n".encode()
        variants = {"Packages": body, "Packages.xz": lzma.compress(body), "Packages.gz": gzip.compress(body, mtime=0)}
        for name, data in variants.items():
            listed[f"main/binary-{arch}/{name}"] = data
            if name == "Packages":
                continue  # listed, not served (as on Debian's mirrors)
            if arch in broken:  # a mirror half-way through a sync: an older file of another size
                (directory / name).write_bytes(data[: len(data) - 1836])
            else:
                (directory / name).write_bytes(data)
                by_hash = directory / "by-hash" / "SHA256"
                by_hash.mkdir(parents=True, exist_ok=True)
                (by_hash / hashlib.sha256(data).hexdigest()).write_bytes(data)
    return _sign(_release(suite, arches, listed), home, root / "dists" / suite / "InRelease")


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[LocalMirror]:
    """trixie: riscv64 inconsistent, the native architecture too; forky and sid: consistent (as seen that day,
    but with the native architecture broken in trixie as well, so a real debootstrap can be shown failing)."""
    root = tmp_path / "debian"
    home = tmp_path / "gnupg"
    arches = sorted({"amd64", "arm64", "riscv64", NATIVE})
    keyring = _suite(root, "trixie", arches, {"riscv64", NATIVE}, home)
    _suite(root, "forky", arches, set(), home)
    _suite(root, "sid", arches, set(), home)

    def handler(*args: Any, **kwargs: Any) -> _Quiet:
        return _Quiet(*args, directory=str(tmp_path), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield LocalMirror(f"http://127.0.0.1:{server.server_address[1]}/debian", root, keyring)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        _stop_gpg_agent(home)


def _stop_gpg_agent(home: Path) -> None:
    """gpg starts an agent for the signing key's home and leaves it running: stop it with the mirror."""
    if shutil.which("gpgconf") is not None and home.exists():
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False, capture_output=True)


def test_inconsistent_index_is_found_and_described(mirror: LocalMirror) -> None:
    check = check_index(DebianSource(mirror.url, "trixie"), "riscv64")
    assert not check.ok
    served = mirror.served("trixie", "riscv64", "Packages.xz").stat().st_size
    listed = served + 1836
    assert check.problem is not None
    # Each variant debootstrap would try (smallest first), by hash and by name, and what was wrong with it.
    assert f"Packages.xz by-hash HTTP 404, file is {served:,} bytes, listed {listed:,}" in check.problem
    assert "Packages.gz by-hash HTTP 404" in check.problem
    assert check.problem.startswith("InRelease disagrees with the index")
    assert check_index(DebianSource(mirror.url, "forky"), "riscv64").ok
    if NATIVE != "arm64":  # one architecture's broken index says nothing about another's
        assert check_index(DebianSource(mirror.url, "trixie"), "arm64").ok
    missing = check_index(DebianSource(mirror.url, "bookworm"), "riscv64")
    assert missing.problem == "no Release: HTTP 404"
    nothing = check_index(DebianSource("http://127.0.0.1:9/debian", "trixie"), "riscv64", timeout=5)
    assert nothing.problem is not None and nothing.problem.startswith("no Release: unreachable")


def test_release_parsing_reads_a_clear_signed_inrelease(mirror: LocalMirror) -> None:
    text = (mirror.root / "dists" / "forky" / "InRelease").read_text()
    release = Release.parse(text)
    assert release.suite == "forky" and release.acquire_by_hash
    assert "riscv64" in release.architectures
    variants = [f.path for f in release.packages_variants("riscv64")]
    assert variants == ["main/binary-riscv64/Packages.xz", "main/binary-riscv64/Packages.gz",
                        "main/binary-riscv64/Packages"]
    with pytest.raises(ValueError, match="no SHA256"):
        Release.parse("Suite: x\n")


def test_fallback_picks_the_next_consistent_suite(mirror: LocalMirror) -> None:
    lines: list[str] = []
    builder = ImageBuilder(log=lines.append, sources=BaseSources(("trixie", "forky", "sid"), (mirror.url,)))
    source, checks = builder.choose_source("riscv64")
    assert source == DebianSource(mirror.url, "forky")
    assert [c.ok for c in checks] == [False, True]
    assert len(lines) == 1 and lines[0].startswith(f"images: skipping trixie/riscv64 on {mirror.url}: InRelease")
    # Suites before mirrors: trixie is tried on every mirror before forky.
    two = BaseSources(("trixie", "forky"), ("http://a.invalid/debian", mirror.url)).candidates()
    assert [(s.suite, s.mirror) for s in two] == [("trixie", "http://a.invalid/debian"), ("trixie", mirror.url),
                                                   ("forky", "http://a.invalid/debian"), ("forky", mirror.url)]


def test_sources_setting_environment_and_bad_values(tmp_path: Path) -> None:
    setting = tmp_path / "sources.toml"
    setting.write_text('suites = ["forky"]\nmirrors = ["http://m1.example/debian/"]\n')
    assert BaseSources.load(setting, environ={}) == BaseSources(("forky",), ("http://m1.example/debian",))
    env = {"FAKEHW_DEBIAN_SUITES": "sid, trixie", "FAKEHW_DEBIAN_MIRRORS": "http://m2.example/debian"}
    assert BaseSources.load(setting, environ=env) == BaseSources(("sid", "trixie"), ("http://m2.example/debian",))
    cli = BaseSources.load(setting, environ=env, suites=["trixie"], mirrors=["file:///srv/debian"])
    assert cli == BaseSources(("trixie",), ("file:///srv/debian",))
    default = BaseSources.load(tmp_path / "absent.toml", environ={})
    assert default.suites == ("trixie", "forky", "sid") and default.mirrors[-1] == "http://deb.debian.org/debian"
    for text, message in (('suites = "trixie"', "suites must be a list of strings"),
                          ('mirror = ["x"]', "unknown setting mirror"),
                          ("suites = [", "not a readable TOML file"),
                          ('keyring = "/no/such.gpg"', "keyring /no/such.gpg: no such file")):
        setting.write_text(text)
        with pytest.raises(ImageInputError, match=re.escape(message)):
            BaseSources.load(setting, environ={})
    setting.write_text("")
    for env, message in (({"FAKEHW_DEBIAN_SUITES": "../etc"}, "not a Debian suite name"),
                         ({"FAKEHW_DEBIAN_MIRRORS": "ftp://x/debian"}, "expected an http://")):
        with pytest.raises(ImageInputError, match=re.escape(message)):
            BaseSources.load(setting, environ=env)


def test_debootstraps_own_mirror_errors_are_classified() -> None:
    """The messages of the installed debootstrap (its source, not ours): mirror faults are told from a package
    list naming a package that does not exist (the project's fault)."""
    functions = Path("/usr/share/debootstrap/functions")
    if not functions.is_file():
        pytest.skip("debootstrap is not installed ('testbed host setup' installs it)")
    formats = dict(re.findall(r'(?:error 1|warning) ([A-Z]+) "([^"]+)"', functions.read_text()))
    for ident in ("COULDNTDL", "COULDNTDLPKGS", "CORRUPTFILE", "NOGETREL", "INVALIDREL", "MISSINGRELENTRY",
                  "BADRELSIG", "UNKNOWNRELSIG", "WRONGSUITE"):
        message = formats[ident].replace("%s", "x").split("\\n")[0]
        assert MIRROR_FAULT.search(message), (ident, message)
    assert not MIRROR_FAULT.search(formats["LEFTOVERDEBS"].replace("%s", "python3"))


def _as_root_with_debootstrap() -> None:
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.skip("needs root and debootstrap ('testbed host setup' installs it)")


def test_cli_reports_an_inconsistent_mirror_in_a_few_lines(mirror: LocalMirror, tmp_path: Path) -> None:
    _as_root_with_debootstrap()
    env = {**os.environ, "FAKEHW_IMAGE_WORK": str(tmp_path / "work")}
    proc = subprocess.run([str(BIN / "testbed"), "images", "base", "--rebuild", "--platform", f"linux/{NATIVE}",
                           "--suite", "trixie", "--mirror", mirror.url], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr
    errors = proc.stderr[proc.stderr.index(f"testbed: linux/{NATIVE}:"):].splitlines()
    assert errors[0].endswith("index (the mirror's fault, not this project's):")
    assert errors[1].startswith(f"  trixie/{NATIVE} on {mirror.url}: InRelease disagrees with the index: "
                                "Packages.xz by-hash HTTP 404, file is")
    assert "FAKEHW_DEBIAN_MIRRORS" in errors[2]
    assert len(proc.stderr.splitlines()) <= 6, proc.stderr
    bad = subprocess.run([str(BIN / "testbed"), "images", "base", "--mirror", "ftp://x"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "expected an http://" in bad.stderr and "Traceback" not in bad.stderr


class _IntactForTheCheck:
    """What the index check reads when the mirror was consistent a moment ago: the files InRelease lists."""

    def __init__(self, mirror: LocalMirror) -> None:
        self.mirror = mirror

    def __call__(self, url: str, timeout: float) -> BinaryIO:
        import io
        import urllib.request

        path = url.removeprefix(self.mirror.url + "/")
        if path.endswith(("Packages.xz", "Packages.gz")):
            body = PACKAGES + f"Package: only-{path.split('binary-')[1].split('/')[0]}\nVersion: 1\n\n".encode()
            return io.BytesIO(lzma.compress(body) if path.endswith(".xz") else gzip.compress(body, mtime=0))
        response: BinaryIO = urllib.request.urlopen(url, timeout=timeout)
        return response


def test_a_mirror_that_breaks_during_debootstrap_is_the_mirrors_fault(mirror: LocalMirror, tmp_path: Path) -> None:
    """The index was consistent when checked and is not when debootstrap fetches it (a sync started): the real
    debootstrap fails on the local mirror, and that is reported as the mirror's problem in one line per source,
    its whole log kept in a file; the next source is tried."""
    _as_root_with_debootstrap()
    if mirror.keyring is None:
        pytest.skip("needs gpg to sign the local mirror's InRelease")
    lines: list[str] = []
    builder = ImageBuilder(log=lines.append, progress="quiet", work_dir=tmp_path / "work",
                           sources=BaseSources(("trixie",), (mirror.url,), str(mirror.keyring)),
                           opener=_IntactForTheCheck(mirror))
    with pytest.raises(MirrorError) as caught:
        builder.base_image(NATIVE, rebuild=True)
    message = str(caught.value).splitlines()
    assert len(message) == 3, message
    log = builder.debootstrap_log(NATIVE)
    assert message[1] == (f"  trixie/{NATIVE} on {mirror.url}: debootstrap: Couldn't download "
                          f"{mirror.url}/dists/trixie/main/binary-{NATIVE}/Packages (log: {log})")
    text = log.read_text()
    assert "Valid Release signature" in text and "Retrying failed download" in text
    assert not [p for p in (tmp_path / "work").glob("fakehw-base-*") if p.is_dir()]  # the scratch root is gone
