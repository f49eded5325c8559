"""Finding 1: a state directory, record or token file planted by someone else is refused, naming path and problem.

The attack: ``/tmp/fakehw-<uid>`` is predictable, so another local user creates it first and plants a
``cluster.json`` whose ``root`` and ``agent_pid`` point at anything; the victim's ``testbed down`` deleted the
directory of the attacker's choosing and sent SIGTERM to the process of the attacker's choosing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehw.agent.trust import UntrustedPathError, read_token_file
from testbed import cli as testbed_cli

OTHER_UID = 12345
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="making files owned by another user needs root")


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process the attacker wants signalled."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A directory the attacker wants deleted."""
    path = tmp_path / "precious"
    path.mkdir()
    (path / "data").write_text("keep me\n")
    return path


def plant(state_dir: Path, root: Path, pid: int, owner: int | None = None) -> Path:
    """A cluster record as an attacker would plant it."""
    cluster = state_dir / "default"
    cluster.mkdir(parents=True, exist_ok=True)
    record: dict[str, object] = {"name": "default", "backend": "local", "profile": "dgx-h100", "nodes": ["dgx-h100-0"],
              "node_count": None, "root": str(root), "created": 0.0, "agent_pid": pid, "agent_socket": None,
              "extra": {}}
    (cluster / "cluster.json").write_text(json.dumps(record))
    if owner is not None:
        for path in (state_dir, cluster, cluster / "cluster.json"):
            os.chown(path, owner, owner)
    return cluster


def run_testbed(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = testbed_cli.main(list(argv))
    return code, capsys.readouterr().err


def assert_untouched(victim: Path, bystander: subprocess.Popen[bytes]) -> None:
    assert (victim / "data").read_text() == "keep me\n", "the planted root was deleted"
    assert bystander.poll() is None, "the planted pid was signalled"


@needs_root
@pytest.mark.parametrize("command", [["down", "--name", "default"], ["down", "--all"], ["list"], ["status"],
                                     ["up", "--profile", "dgx-h100"]])
def test_a_state_dir_created_by_another_user_is_refused(tmp_path: Path, victim: Path, command: list[str],
                                                        bystander: subprocess.Popen[bytes],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "fakehw-0"
    state.mkdir()
    plant(state, victim, bystander.pid, owner=OTHER_UID)
    code, err = run_testbed(capsys, *command, "--state-dir", str(state))
    assert code == 2
    assert f"refusing to trust {state}: the directory belongs to uid {OTHER_UID}" in err, err
    assert_untouched(victim, bystander)


@needs_root
def test_a_record_planted_by_another_user_in_my_state_dir_is_refused(tmp_path: Path, victim: Path,
                                                                     bystander: subprocess.Popen[bytes],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    cluster = plant(state, cluster_root := tmp_path / "state" / "default", bystander.pid)
    assert cluster == cluster_root
    os.chown(cluster / "cluster.json", OTHER_UID, OTHER_UID)
    code, err = run_testbed(capsys, "down", "--name", "default", "--state-dir", str(state))
    assert code == 2 and f"{cluster / 'cluster.json'}: the file belongs to uid {OTHER_UID}" in err, err
    assert bystander.poll() is None


def test_a_state_dir_others_can_write_is_refused(tmp_path: Path, victim: Path,
                                                 bystander: subprocess.Popen[bytes],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "shared"
    state.mkdir()
    plant(state, victim, bystander.pid)
    state.chmod(0o777)
    code, err = run_testbed(capsys, "down", "--all", "--state-dir", str(state))
    assert code == 2 and "writable by group and others (mode 0777); chmod go-w" in err, err
    assert_untouched(victim, bystander)


def test_a_symlinked_state_dir_is_refused(tmp_path: Path, victim: Path, bystander: subprocess.Popen[bytes],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    plant(real, victim, bystander.pid)
    link = tmp_path / "fakehw-link"
    link.symlink_to(real)
    code, err = run_testbed(capsys, "down", "--name", "default", "--state-dir", str(link))
    assert code == 2 and "it is a symbolic link" in err, err
    assert_untouched(victim, bystander)


def test_a_record_whose_root_is_elsewhere_is_refused(tmp_path: Path, victim: Path,
                                                     bystander: subprocess.Popen[bytes],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    plant(state, victim, bystander.pid)  # my own file, but it names another directory as its root
    code, err = run_testbed(capsys, "down", "--name", "default", "--state-dir", str(state))
    assert code == 2 and f"its root '{victim}' is not the directory it lives in" in err, err
    assert_untouched(victim, bystander)


def test_a_recorded_pid_that_is_not_the_agent_is_never_signalled(tmp_path: Path,
                                                                 bystander: subprocess.Popen[bytes],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    cluster = plant(state, tmp_path / "state" / "default", bystander.pid)  # a well-formed record, a stale pid
    code, err = run_testbed(capsys, "down", "--name", "default", "--state-dir", str(state))
    assert code == 0, err
    assert bystander.poll() is None, "a pid that is not this cluster's agent was signalled"
    assert not cluster.exists()


@needs_root
def test_the_agent_refuses_a_state_dir_of_another_user(tmp_path: Path) -> None:
    state = tmp_path / "planted"
    state.mkdir()
    os.chown(state, OTHER_UID, OTHER_UID)
    proc = subprocess.run([sys.executable, "-m", "fakehw.cli", "agent", "--profile", "dgx-h100", "--state-dir",
                           str(state)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"refusing to trust {state}: the directory belongs to uid {OTHER_UID}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in state.iterdir()) == [], "nothing is written into a refused state dir"


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123\n")
    token.chmod(0o644)
    with pytest.raises(UntrustedPathError, match=r"readable by group or others \(mode 0644\); chmod 600"):
        read_token_file(token)
    proc = subprocess.run([sys.executable, "-m", "fakehw.cli", "agent", "--profile", "dgx-h100", "--state-dir",
                           str(tmp_path / "s"), "--listen", "127.0.0.1:1", "--token-file", str(token)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"refusing to trust {token}" in proc.stderr and "Traceback" not in proc.stderr
    token.chmod(0o600)
    assert read_token_file(token) == "0123456789abcdef0123"
    link = tmp_path / "token-link"
    link.symlink_to(token)
    with pytest.raises(UntrustedPathError, match="symbolic link"):
        read_token_file(link)


@needs_root
def test_a_token_file_of_another_user_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123\n")
    token.chmod(0o600)
    os.chown(token, OTHER_UID, OTHER_UID)
    with pytest.raises(UntrustedPathError, match=f"belongs to uid {OTHER_UID}"):
        read_token_file(token)
