"""nvidia-ml-py sweeps: every device and system getter of the bindings, called as a user would.

Oracles: the bindings themselves (nvidia-ml-py 13.615.71, the newest, and 12.535.161, which stays supported) and
the public headers: a getter the profile's driver branch has must not answer FUNCTION_NOT_FOUND; one it lacks
(newer than the branch per fakehw/nvml/nvml_symbols.txt, checked against the headers in test_symbols.py) must,
as pynvml's loader finds nothing in that branch's real library. Nothing may crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fakehw.nvml import library_dir
from fakehw.nvml.build import symbol_table
from tests.nvml import references
from tests.nvml.helpers import NodeSnap, with_driver

SWEEP = Path(__file__).with_name("sweep.py")
FUNCTION_NOT_FOUND = 13
NEWEST_BRANCH_RELEASE = "615.10.01"
"""A release of the newest branch (615, nvml.h 13.4): every function of the header exists."""


def sweep(snapshot: Path, version: str) -> dict[str, Any]:
    env = dict(os.environ, FAKEHW_NVML_SNAPSHOT=str(snapshot), LD_LIBRARY_PATH=str(library_dir()),
               PYTHONPATH=str(references.bindings(version)))
    env.pop("FAKEHW_VISIBLE_DEVICES", None)
    proc = subprocess.run([sys.executable, str(SWEEP)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    last = proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else []
    assert proc.returncode == 0, f"the sweep died (exit {proc.returncode}) at {last}:\n{proc.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def pynvml_symbol(name: str, results: dict[str, Any]) -> str:
    """The C function a pynvml getter calls (the binding's name unless it adds a suffix of its own)."""
    return name


@pytest.mark.parametrize("version", references.BINDINGS)
@pytest.mark.parametrize(("profile", "node_index"), [("dgx-h100", 0), ("gb200-nvl72", 7)])
def test_sweep_at_the_newest_branch(node_snapshot: Callable[..., NodeSnap], tmp_path: Path, version: str,
                                    profile: str, node_index: int) -> None:
    """On a driver of the newest branch every getter the bindings offer is there: no FUNCTION_NOT_FOUND."""
    snap = node_snapshot(with_driver(tmp_path, profile, NEWEST_BRANCH_RELEASE), node_index)
    out = sweep(snap.path, version)
    results = out["results"]
    harness = {k: v for k, v in results.items() if str(v).startswith("harness")}
    assert harness == {}, "the sweep could not call these (fix the sweep, not the fake)"
    not_found = sorted(k for k, v in results.items() if v == FUNCTION_NOT_FOUND)
    answered = sum(1 for v in results.values() if v == "ok")
    print(f"\nnvidia-ml-py {version} on {profile} (615): {len(results)} getters, {answered} answered, "
          f"{len(results) - answered - len(not_found)} with an NVML error, {len(not_found)} FUNCTION_NOT_FOUND")
    assert not_found == []
    assert answered > 100


@pytest.mark.parametrize("version", references.BINDINGS)
@pytest.mark.parametrize(("profile", "node_index"), [("dgx-h100", 0), ("gb200-nvl72", 7)])
def test_sweep_at_the_profile_driver(node_snapshot: Callable[..., NodeSnap], version: str, profile: str,
                                     node_index: int) -> None:
    """On the profile's own driver (580, as the captured H100 and GB200 run) exactly the getters of later
    branches answer FUNCTION_NOT_FOUND, as they would against the real 580 library."""
    snap = node_snapshot(profile, node_index)
    branch = snap.system.driver.branch
    results = sweep(snap.path, version)["results"]
    table = symbol_table()
    not_found = sorted(k for k, v in results.items() if v == FUNCTION_NOT_FOUND)
    assert all(table.get(name, 0) > branch for name in not_found), not_found
    expected_missing = sorted(k for k in results if table.get(k, 0) > branch)
    assert not_found == expected_missing
    print(f"\nnvidia-ml-py {version} on {profile} ({branch}): FUNCTION_NOT_FOUND only for the "
          f"{len(not_found)} getters of later branches: {', '.join(not_found) or 'none'}")
