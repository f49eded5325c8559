"""The component under test runs as another user: it cannot write the harness's output and never sees its secrets;
the device plugin suite still certifies the reference plugin that way (as ``nobody``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli import main as conformance_main
from conformance.suites.device_plugin.component import component_version
from testbed import component_user
from testbed.component_user import COMPONENT_USER_ENV, ComponentUserError, lookup, wrap
from tests.scratch import cluster_scratch

ROOT = Path(__file__).parents[2]
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
SYSTEM_PYTHON = Path("/usr/bin/python3")


def test_secrets_never_reach_the_component(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COMPONENT_USER_ENV, raising=False)
    env = {"PATH": "/usr/bin", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "t", "ACTIONS_ID_TOKEN_REQUEST_URL": "u",
           "GITHUB_TOKEN": "g", "FAKEHW_SIGN_KEY_PASSWORD": "p", "ACTIONS_RUNTIME_TOKEN": "r"}
    argv, clean = wrap(["plugin", "--x"], env)
    assert argv == ["plugin", "--x"] and clean == {"PATH": "/usr/bin"}


def test_unusable_users_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ComponentUserError, match="does not exist"):
        lookup("no-such-user-fakehw")
    with pytest.raises(ComponentUserError, match="is root"):
        lookup("root")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ComponentUserError, match="needs the harness to run as root"):
        lookup("nobody")


def test_conformance_run_checks_the_user_before_anything_runs(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert conformance_main(["run", "--target", "extender=reference", "--component-user", "no-such-user-fakehw",
                             "--out", str(tmp_path / "out")]) == 2
    assert "component user 'no-such-user-fakehw' does not exist" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory other users can reach (pytest's tmp_path lives under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="fhw-cu-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@ROOT_ONLY
def test_the_component_cannot_write_the_harness_output(public_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = public_dir / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    shared = public_dir / "plugins"
    shared.mkdir()
    monkeypatch.setenv(COMPONENT_USER_ENV, "nobody")
    component_user.hand_over(shared)
    script = (f"id -u; echo x > {out}/results.json && echo WROTE-RESULTS; echo x > {out}/new && echo WROTE-NEW; "
              f"echo y > {shared}/plugin.sock && echo WROTE-SHARED; echo ${{ACTIONS_ID_TOKEN_REQUEST_TOKEN:-none}}")
    argv, env = wrap(["/bin/sh", "-c", script], {**os.environ, "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "secret"})
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    lines = proc.stdout.split()
    assert lines[0] == str(lookup("nobody").uid)
    assert "WROTE-RESULTS" not in lines and "WROTE-NEW" not in lines, proc.stdout
    assert "WROTE-SHARED" in lines and lines[-1] == "none"
    assert proc.stderr.count("Permission denied") == 2, proc.stderr
    assert (out / "results.json").read_text() == "{}"


@ROOT_ONLY
def test_asking_the_component_its_version_runs_it_as_the_component_user(public_dir: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite asks ``PROGRAM --version`` for the report: that is the vendor's code running, so it runs as the
    component user too (as root it could write the harness's output before the suite starts)."""
    program = public_dir / "plugin"
    program.write_text("#!/bin/sh\necho \"plugin 1.0 uid $(id -u)\"\n")
    program.chmod(0o755)
    monkeypatch.setenv(COMPONENT_USER_ENV, "nobody")
    said = component_version(str(program))
    assert said is not None and said.startswith(f"plugin 1.0 uid {lookup('nobody').uid} (sha256:"), said
    monkeypatch.delenv(COMPONENT_USER_ENV)
    assert component_version(str(program)) == said.replace(f"uid {lookup('nobody').uid}", "uid 0")


@ROOT_ONLY
@pytest.mark.slow
@pytest.mark.skipif(not SYSTEM_PYTHON.is_file(), reason="needs Debian's python3 (the harness's may be private)")
def test_the_reference_plugin_works_as_another_user(tmp_path: Path) -> None:
    """Registration (kubelet restarts included) and allocation with the plugin run as ``nobody`` on edge-pcie (by
    Debian's python3, which nobody can execute, with this checkout's packages on PYTHONPATH): the plugin reaches
    its NVML snapshot, serves its socket in the handed-over directory and answers. The rest of the suite is left
    out to keep the test short (the reference plugin as root certifies fully elsewhere). Health recovery could
    not pass this way: the reference plugin asks the node agent whether an Xid has cleared (its stand-in for
    DCGM), and the agent's control socket is root's alone, as it must be (it injects and heals faults). The cluster
    is on tmpfs where it can be (tests.scratch.cluster_scratch): nobody then reaches its snapshot through the mount
    points the node view makes for it in its own /dev/shm (testbed.nodeview.kept_paths)."""
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{site}", **cluster_scratch().env}
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--target",
                    f"device-plugin=cmd:{SYSTEM_PYTHON} -m testbed.reference.device_plugin", "--component-user",
                    "nobody", "--profile", "edge-pcie", "--out", str(out), "-k", "registration or allocation"],
                   env=env, capture_output=True, text=True, timeout=1200, check=False)
    report = json.loads((out / "report.json").read_text())
    ran = {r["id"]: r["status"] for r in report["results"] if r["status"] != "not-run"}
    core = {f"DP-REG-00{i}" for i in range(1, 6)} | {f"DP-ALLOC-00{i}" for i in range(1, 5)}
    assert {ran.get(i) for i in core} == {"passed"}, ran
    assert set(ran.values()) <= {"passed", "not-applicable"}, ran
    assert report["manifest"]["runner"]["isolation"].startswith("user nobody (uid ")
    assert out.stat().st_uid == 0 and (out / "results.json").stat().st_mode & 0o022 == 0
