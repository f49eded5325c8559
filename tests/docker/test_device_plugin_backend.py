"""The device plugin suite on the Docker backend: the reference plugin inside a node container, certified by the
harness on the host, as ``conformance run --backend docker`` runs it (pytest in a child process, results file).

Here, not in tests/conformance/test_device_plugin_suite.py, because this run drives the shared Docker engine:
every file under tests/docker/ is one unit of work run on one xdist worker (tests/conftest.py), and the suite's
twenty local runs, which need no Docker, no longer queue behind the Docker tests on that worker.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testbed.images import MIRROR_FAULT_MESSAGE as MIRROR_FAULT
from testbed.images import ImageRef
from tests.conformance.dp_suite_runs import ALL_IDS, REFERENCE_BUDGET, Run, execute, suite_argv

pytestmark = pytest.mark.slow


def test_the_reference_plugin_in_a_node_container_passes_every_requirement(node_image_amd64: ImageRef,
                                                                             tmp_path: Path) -> None:
    """edge-pcie in the Docker backend; inside the node container the reference plugin is the image's own (its
    venv's python first on PATH). ``node_image_amd64`` waits for this session's node image (the child finds it by
    its content tag) and skips or fails as every Docker test does where the engine cannot run."""
    results = tmp_path / "docker-edge-pcie.json"
    run = execute(Run("docker-edge-pcie", suite_argv("edge-pcie", "python -m testbed.reference.device_plugin",
                                                     results, "--backend", "docker", *REFERENCE_BUDGET), results))
    if MIRROR_FAULT in run.output:  # the node image could not be made: Debian's mirror is at fault, not the project
        line = next(ln for ln in run.output.splitlines() if MIRROR_FAULT in ln)
        pytest.skip(f"the node image could not be built: {line.strip()}")
    statuses = run.statuses()
    bad = {k: v for k, v in statuses.items() if v not in ("passed", "not-applicable")}
    assert set(statuses) == ALL_IDS and not bad, f"{bad}\n{run.failure_messages()}\n{run.output[-3000:]}"
    env = run.doc()["environment"]
    assert env["backend"] == "docker"
    # The report names what ran: the node image by tag and content digest, and the engine's version.
    assert re.fullmatch(r"fakehw/node:amd64-[0-9a-f]{12}@sha256:[0-9a-f]{64}", env["images"]["amd64"]), env
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", env["docker"]), env
