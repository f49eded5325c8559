"""Fixtures and options of the Ray suite.

    pytest conformance/suites/ray --profile dgx-h100 [--target ray=python:/path/to/python]

For every node type of the profile (one node per group with GPUs), a Ray head node is started twice with that
node's environment: once as it is (with concurrent one-GPU tasks) and once with CUDA_VISIBLE_DEVICES naming half of
its GPUs. The checks compare what Ray reported with the model.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.pytest_plugin import TargetSpec
from conformance.suites.scheduler.support import teardown
from fakehw.model.system import Node
from testbed.api import Testbed
from testbed.cluster import scratch_dir

MAX_TASKS = 4


@dataclass(frozen=True)
class RayView:
    node: Node
    full: dict[str, Any]
    limited: dict[str, Any]
    visible: tuple[int, ...]
    """The GPU indices given to the second run in CUDA_VISIBLE_DEVICES."""


def _python(spec: TargetSpec | None) -> str:
    text = spec.spec if spec is not None else "python"
    if text == "python":
        return sys.executable
    if text.startswith("python:"):
        return text[len("python:"):]
    raise pytest.UsageError(f"--target ray={text}: use ray=python or ray=python:/path/to/python (with ray installed)")


def _probe(tb: Testbed, node: str, python: str, temp: Path, tasks: int, env: dict[str, str]) -> dict[str, Any]:
    argv = [python, "-m", "testbed.ray.probe", "--tasks", str(tasks), "--temp-dir", str(temp)]
    proc = tb.exec(node, argv, env={"RAY_USAGE_STATS_ENABLED": "0", **env}, timeout=300)
    lines = [ln for ln in proc.stdout.decode(errors="replace").splitlines() if ln.startswith("{")]
    if not lines:
        raise AssertionError(f"the Ray probe on {node} printed nothing (exit {proc.returncode}):\n"
                             f"{proc.stderr.decode(errors='replace')[-3000:]}")
    data: dict[str, Any] = json.loads(lines[-1])
    if "error" in data:
        pytest.skip(str(data["error"]))
    return data


@pytest.fixture(scope="session")
def ray_views(conformance_targets: dict[str, TargetSpec], conformance_profile: str, conformance_backend: str,
              conformance_manifest: dict[str, Any]) -> Iterator[list[RayView]]:
    python = _python(conformance_targets.get("ray"))
    check = subprocess.run([python, "-c", "import ray; print(ray.__version__)"], capture_output=True, text=True,
                           check=False)
    if check.returncode != 0:
        pytest.skip(f"ray is not importable by {python}: {check.stderr.strip()[-300:]} (pip install 'fakehw[ray]')")
    conformance_manifest.setdefault("component_versions", {})["ray"] = check.stdout.strip()
    state = scratch_dir("fhw-ry-", for_node_view=True)  # the probe runs in the node's view
    temp = scratch_dir("fhw-ray-", for_node_view=True)
    tb = Testbed.up(conformance_profile, backend=conformance_backend, name="ry", state_dir=state)
    try:
        nodes: dict[str, Node] = {}
        for n in tb.system.nodes:
            if n.gpus and n.group not in {x.group for x in nodes.values()}:
                nodes[n.name] = n
        views: list[RayView] = []
        for name, node in nodes.items():
            full = _probe(tb, name, python, temp / f"{len(views)}a", min(len(node.gpus), MAX_TASKS), {})
            visible = tuple(range(1, len(node.gpus), 2)) or (0,)
            limited = _probe(tb, name, python, temp / f"{len(views)}b", len(visible),
                             {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in visible)})
            views.append(RayView(node, full, limited, visible))
        yield views
    finally:
        teardown(tb, state)
        shutil.rmtree(temp, ignore_errors=True)
