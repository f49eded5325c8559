"""``testbed host setup``: idempotent, quick when done, and exact about what to install when it cannot act."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import host
from testbed.host import Finding, HostReport, HostSetup, OsInfo, debian_mirror, major_version

BIN = Path(sys.executable).parent


def test_setup_on_a_ready_machine_is_quick_and_reports_everything(docker_engine: None) -> None:
    start = time.monotonic()
    proc = subprocess.run([str(BIN / "testbed"), "host", "setup"], capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "did " not in proc.stdout, "a second run must find everything in place and change nothing"
    for item in ("docker engine:", "buildx plugin:", "docker engine running:", "containerd image store",
                 "riscv64 emulation: qemu-riscv64"):
        assert f"ok       {item}" in proc.stdout, proc.stdout
    assert "ready: node images can be built" in proc.stdout
    assert elapsed < 10, f"host setup took {elapsed:.1f} s on a machine that has everything"


def test_check_as_a_user_without_root_reports_and_changes_nothing(docker_engine: None) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (to drop to another user) and setpriv")
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(BIN / "testbed"),
                           "host", "setup"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": "/tmp"})
    # nobody cannot talk to the engine: setup says so and prints the commands, and does not try anything.
    assert proc.returncode == 1, proc.stdout
    assert "did " not in proc.stdout
    assert "MISSING  docker engine running: no engine answers" in proc.stdout
    assert "to finish, run as root (or: sudo .venv/bin/testbed host setup):" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_missing_pieces_become_exact_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a bare Debian 12 machine, as a user: every missing piece is named with the command that provides it."""
    monkeypatch.setattr(host, "installed_version", lambda _pkg: None)
    monkeypatch.setattr(host, "engine_info", lambda: None)
    monkeypatch.setattr(host, "binfmt_entry", lambda _arch: None)
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.setattr(host, "_run", lambda argv, **_kw: subprocess.CompletedProcess(argv, 127, "", "not found"))
    monkeypatch.setattr(host, "DAEMON_JSON", Path("/nonexistent/daemon.json"))
    setup = HostSetup(platforms=("amd64", "riscv64"), act=True, os_info=OsInfo("debian", "bookworm"),
                      log=lambda _m: None)
    report = setup.run()
    assert not report.ready and not report.acted and report.actions == []
    text = report.render()
    mirror = debian_mirror()
    assert f"echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {mirror} trixie main'" in text
    assert "install -y --no-install-recommends docker.io docker-buildx containerd" in text
    assert "Dir::Etc::SourceList=/var/lib/fakehw/apt/trixie.list" in text
    assert "apt-get install -y --no-install-recommends qemu-user-static" in text
    assert "apt-get install -y --no-install-recommends debootstrap" in text
    assert '{"features": {"containerd-snapshotter": true}}' in text
    assert "update-binfmts --enable qemu-riscv64" in text or "mount -t binfmt_misc" in text
    names = {f.name for f in report.missing}
    assert {"docker engine", "buildx package", "qemu-user-static", "debootstrap", "docker engine running"} <= names


def test_online_runners_do_not_need_debootstrap_and_unknown_systems_get_a_pointer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "installed_version", lambda _pkg: None)
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.setattr(host, "engine_info", lambda: None)
    monkeypatch.setattr(host, "_run", lambda argv, **_kw: subprocess.CompletedProcess(argv, 127, "", "not found"))
    report = HostSetup(platforms=("amd64",), act=False, base_images=False, os_info=OsInfo("fedora", "")).run()
    names = {f.name for f in report.missing}
    assert "debootstrap" not in names and "qemu-user-static" not in names
    assert "https://docs.docker.com/engine/install/" in report.render()


def test_report_rendering_and_versions() -> None:
    report = HostReport([Finding("a", True, "fine"), Finding("b", False, "gone", ("apt-get install b",)),
                         Finding("c", False, "gone too", ("apt-get install b",))], ["did a thing"], acted=True)
    text = report.render()
    assert text.splitlines()[0] == "  did      did a thing"
    assert text.count("apt-get install b") == 1  # each command once
    assert "could not be fixed automatically" in text
    assert major_version("26.1.5+dfsg1-9+deb13u1") == 26
    assert major_version("5:27.3.1-1~ubuntu.24.04~noble") == 27
    assert major_version(None) == 0 and major_version("garbage") == 0


def test_daemon_json_keeps_other_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(json.dumps({"log-driver": "local", "features": {"buildkit": True}}))
    monkeypatch.setattr(host, "DAEMON_JSON", path)
    report = HostReport()
    assert HostSetup(log=lambda _m: None)._write_daemon_json(report) is True
    assert json.loads(path.read_text()) == {"log-driver": "local",
                                            "features": {"buildkit": True, "containerd-snapshotter": True}}
    assert HostSetup(log=lambda _m: None)._write_daemon_json(report) is False
    assert len(report.actions) == 1


def test_mirror_is_read_from_deb822_and_one_line_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\nComponents: main\n")
    assert debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://other.example/debian bookworm main\n")
    assert debian_mirror(tmp_path) == "http://other.example/debian"
    assert debian_mirror(tmp_path / "none") == "http://deb.debian.org/debian"


def test_the_docker_packages_come_from_the_configured_mirror(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mirror setting of the base images (FAKEHW_DEBIAN_MIRRORS) is also where trixie's Docker comes from."""
    monkeypatch.setenv("FAKEHW_DEBIAN_MIRRORS", "http://mirror.example/debian/, http://other.example/debian")
    line = HostSetup(act=False, os_info=OsInfo("debian", "bookworm"))._trixie_line()
    assert line.endswith("] http://mirror.example/debian trixie main")
    monkeypatch.delenv("FAKEHW_DEBIAN_MIRRORS")
    assert " trixie main" in HostSetup(act=False, os_info=OsInfo("debian", "bookworm"))._trixie_line()
