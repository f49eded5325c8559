"""Ray: the Ray suite against real Ray on dgx-h100, and a probe without the fake NVML (what the checks catch)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.scratch import cluster_scratch

SUITE = Path(__file__).resolve().parents[2] / "conformance" / "suites" / "ray"
SCRATCH = cluster_scratch()
"""The suite's cluster on tmpfs where it has room and lets device nodes open (its node is some 28,000 files): the
probe runs in the node's view, which binds what it uses under /dev/shm again (testbed.nodeview.kept_paths). Ray's
session directory, named on the probe's command line, is then made in the view's own /dev/shm and ends with it."""
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="ray is not installed (pip install 'fakehw[ray]')")


@needs_ray
@pytest.mark.slow
def test_ray_suite_passes_on_dgx_h100(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", "-q",
                           "--import-mode=importlib", "--profile", "dgx-h100", "--conformance-results", str(results),
                           "--conformance-complete"], capture_output=True, text=True, timeout=900, check=False,
                           env={**os.environ, **SCRATCH.env})
    assert results.is_file(), proc.stdout[-4000:] + proc.stderr[-2000:]
    doc = json.loads(results.read_text())
    statuses = {k: v["status"] for k, v in doc["requirements"].items()}
    assert statuses == dict.fromkeys(("RAY-GPU-001", "RAY-GPU-002", "RAY-GPU-003", "RAY-GPU-004"), "passed"), \
        proc.stdout[-4000:]


@needs_ray
@pytest.mark.slow
def test_without_the_fake_nvml_ray_sees_no_gpu() -> None:
    """The same probe outside any node's environment: Ray finds no NVML and offers no GPU (RAY-GPU-001 would fail)."""
    temp = tempfile.mkdtemp(prefix="fhw-ray-", dir="/tmp")
    try:
        proc = subprocess.run([sys.executable, "-m", "testbed.ray.probe", "--temp-dir", temp], capture_output=True,
                              text=True, timeout=300, check=False,
                              env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "RAY_USAGE_STATS_ENABLED": "0"})
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("{"))
    resources = json.loads(line)["resources"]
    assert resources.get("GPU", 0) == 0 and not any(k.startswith("accelerator_type:") for k in resources)
