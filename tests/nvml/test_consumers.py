"""Third-party consumers from PyPI list the model's GPUs: gpustat (--json) and nvitop (--once)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.nvml.helpers import NodeSnap, subprocess_env


def tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return path


@pytest.mark.parametrize("profile", ["dgx-h100", "gb200-nvl72"])
def test_gpustat_json(node_snapshot: Callable[..., NodeSnap], profile: str) -> None:
    snap = node_snapshot(profile, faults=[{"kind": "thermal", "device": "gpu1", "temperature_c": 88}])
    out = subprocess.run([tool("gpustat"), "--json"], env=subprocess_env(snap.path), capture_output=True, text=True,
                         timeout=60, check=True).stdout
    doc = json.loads(out)
    assert doc["driver_version"] == snap.system.driver.version
    gpus = doc["gpus"]
    assert [(g["index"], g["uuid"], g["name"]) for g in gpus] == \
        [(g.index, g.uuid, g.sku.name) for g in snap.node.gpus]
    for g, model in zip(gpus, snap.node.gpus, strict=True):
        state = snap.state.gpu(model.name)
        assert state is not None
        assert g["memory.total"] == model.sku.memory_mib
        assert g["temperature.gpu"] == state.temperature_c
        assert g["enforced.power.limit"] == state.power_limit_w


def test_nvitop_once(node_snapshot: Callable[..., NodeSnap]) -> None:
    snap = node_snapshot("dgx-a100")
    proc = subprocess.run([tool("nvitop"), "--once", "--colorful", "never"], env=subprocess_env(snap.path),
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0 and "--colorful" in proc.stderr:
        proc = subprocess.run([tool("nvitop"), "--once"], env=subprocess_env(snap.path), capture_output=True,
                              text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for gpu in snap.node.gpus:
        short = gpu.sku.name.removeprefix("NVIDIA ")[:12]
        assert any(gpu.address.nvml_bus_id in line for line in lines), gpu.address.nvml_bus_id
        assert any(short in line for line in lines), short
    assert snap.system.driver.version in proc.stdout
