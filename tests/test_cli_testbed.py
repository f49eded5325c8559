"""``testbed`` as a newcomer meets it: ``up`` needs no flag, one cluster needs no ``--name``, ``exec`` runs the
project's python and the real nvidia-smi, a wrong fault id or backend option is exit 2 with a message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehw.nvml.smi import SmiUnavailable, find_real_nvidia
from tests.scratch import cluster_scratch_base

BIN = Path(sys.executable).parent
STATE_BASE = cluster_scratch_base() or "/tmp"
"""Where the clusters' state goes: short (the agent's unix socket is inside), and tmpfs when it has room and lets the
node's device files open (a node view runs nvidia-smi): a node is rendered on its first ``exec``, some 28,000 files,
30-400 us of kernel CPU each on this machine's ext4 and 9 us on tmpfs (docs/testbed.md)."""


def _testbed(state: Path, *args: str, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "FAKEHW_STATE_DIR": str(state), **(env or {})}
    return subprocess.run([str(BIN / "testbed"), *args], capture_output=True, text=True, timeout=300, env=full,
                          cwd=cwd)


@pytest.fixture(scope="module")
def one_cluster() -> Iterator[Path]:
    """``testbed up`` with no option at all: dgx-h100, local backend, cluster 'default'."""
    short = Path(tempfile.mkdtemp(prefix="fhw-cli-", dir=STATE_BASE))
    up = _testbed(short, "up")
    assert up.returncode == 0, up.stderr
    assert "profile dgx-h100 on the local backend" in up.stderr and "cluster default is up" in up.stdout
    yield short
    _testbed(short, "down", "--all")
    shutil.rmtree(short, ignore_errors=True)


def test_one_cluster_needs_no_name_and_a_wrong_fault_id_is_an_error(one_cluster: Path) -> None:
    status = _testbed(one_cluster, "status")
    assert status.returncode == 0 and "cluster default: profile dgx-h100" in status.stdout
    injected = _testbed(one_cluster, "inject", "dgx-h100-0", "xid", "gpu3", "code=79")
    assert injected.returncode == 0, injected.stderr
    fault = injected.stdout.split(":")[0]
    missing = _testbed(one_cluster, "heal", "f-999")
    assert missing.returncode == 2
    assert missing.stderr.strip() == ("testbed: error: cluster default has no active fault f-999 ('testbed faults' "
                                      "lists them)")
    healed = _testbed(one_cluster, "heal", fault)
    assert healed.returncode == 0 and healed.stdout.startswith(f"healed {fault}: xid on dgx-h100-0/gpu3")


def test_exec_runs_the_projects_python_from_anywhere(one_cluster: Path, tmp_path: Path) -> None:
    """No venv active, a PATH without it, another directory: 'python' is still the project's (fakehw, pynvml)."""
    env = {"PATH": "/usr/bin:/bin", "VIRTUAL_ENV": ""}
    code = "import fakehw, pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount(), fakehw.__file__)"
    proc = _testbed(one_cluster, "exec", "dgx-h100-0", "--", "python", "-c", code, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    count, where = proc.stdout.split()
    assert count == "8"  # dgx-h100: 8 GPUs
    assert Path(where).resolve().is_relative_to(Path(__file__).resolve().parents[1])


def test_exec_nvidia_smi_on_a_driver_debian_does_not_ship_says_how_to_pin_one(one_cluster: Path) -> None:
    """dgx-h100 runs the H100 capture's driver 580, whose nvidia-smi NVIDIA ships only in its driver packages:
    no real binary can be had here, and the message says how to run a node on one that can."""
    proc = _testbed(one_cluster, "exec", "dgx-h100-0", "--", "nvidia-smi", "-L")
    assert proc.returncode != 0
    assert "no real nvidia-smi of branch 580" in proc.stderr and "testbed up --driver 535.261.03" in proc.stderr


def test_up_driver_pins_the_driver_and_the_real_nvidia_smi_of_it_runs(tmp_path: Path) -> None:
    """``testbed up --driver 535.261.03``: every node runs 535, which Debian's real nvidia-smi 535 accepts (it
    refuses any other NVML version: 'Failed to initialize NVML: Driver/library version mismatch')."""
    state = Path(tempfile.mkdtemp(prefix="fhw-drv-", dir=STATE_BASE))
    try:
        bad = _testbed(state, "up", "--driver", "536.1.1")
        assert bad.returncode == 2 and "--driver: driver 536.1.1 is of branch 536" in bad.stderr, bad.stderr
        up = _testbed(state, "up", "--driver", "535.261.03")
        assert up.returncode == 0, up.stderr
        proc = _testbed(state, "exec", "dgx-h100-0", "--", "nvidia-smi", "-L")
        try:
            find_real_nvidia(535)
        except SmiUnavailable:
            assert proc.returncode != 0
            assert "tools/fetch-real-nvidia.sh has not run" in proc.stderr, proc.stderr
            return
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.strip().splitlines()
        assert len(lines) == 8 and all(line.startswith(f"GPU {i}: NVIDIA H100") for i, line in enumerate(lines))
        smi = _testbed(state, "exec", "dgx-h100-0", "--", "nvidia-smi", "--query-gpu=driver_version",
                       "--format=csv,noheader")
        assert smi.stdout.split() == ["535.261.03"] * 8, smi.stdout
    finally:
        _testbed(state, "down", "--all")
        shutil.rmtree(state, ignore_errors=True)


def test_names_are_asked_for_only_when_they_are_ambiguous() -> None:
    state = Path(tempfile.mkdtemp(prefix="fhw-cli2-", dir=STATE_BASE))
    try:
        assert _testbed(state, "status").stderr.strip().endswith(
            "no cluster 'default' (start one with 'testbed up --profile P --name default')")
        for name in ("a", "b"):
            up = _testbed(state, "up", "--profile", "edge-pcie", "--name", name)
            assert up.returncode == 0, up.stderr
        which = _testbed(state, "status")
        assert which.returncode == 2
        assert which.stderr.strip() == "testbed: error: 2 clusters exist (a, b): say which with --name"
        assert _testbed(state, "status", "--name", "b").returncode == 0
        assert _testbed(state, "down", "--all").returncode == 0
    finally:
        shutil.rmtree(state, ignore_errors=True)


@pytest.mark.parametrize(("args", "message"), [
    (["up", "--backend", "kubeconfig"], "the kubeconfig backend needs --kubeconfig FILE"),
    (["up", "--backend", "kubeconfig", "--kubeconfig", "/no/such/kubeconfig"],
     "needs a kubeconfig file (testbed up --backend kubeconfig --kubeconfig FILE); /no/such/kubeconfig does not "
     "exist"),
    (["up", "--kubeconfig", "/etc/hostname"], "--kubeconfig is for the kubeconfig backend, not local"),
    (["up", "--image", "fakehw/node:amd64"], "--image is for the docker backend, not local"),
    (["up", "--backend", "docker", "--image", "amd64"], "image amd64 is not in the local image store"),
    (["up", "--backend", "kind", "--kind-path", "/no/such/kind"], "--kind-path /no/such/kind: no such file"),
])
def test_backend_options_are_checked(args: list[str], message: str) -> None:
    state = Path(tempfile.mkdtemp(prefix="fhw-bo-", dir="/tmp"))  # short: agent sockets live below it
    try:
        proc = _testbed(state, *args)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    if "docker" in args and "not in the local image store" not in proc.stderr and "docker" in proc.stderr.lower():
        pytest.skip(f"no Docker engine here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert message in proc.stderr and "Traceback" not in proc.stderr
