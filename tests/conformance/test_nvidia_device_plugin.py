"""NVIDIA's device plugin (v0.20.0, prebuilt, unmodified) certified through ``conformance run --target
device-plugin=cmd:<binary>`` as a vendor runs it: no wrapper (the harness runs it in the node's view, where the
kubelet's plugin directory, the node's /sys and a driver root are at the real paths).

The per-level verdicts are pinned per profile, and so is every requirement it fails, each with the upstream
behaviour that causes it (read in NVIDIA/k8s-device-plugin v0.20.0) and words its failure message must contain,
so the report names the behaviour. docs/certifying-nvidia-plugin.md explains the same table to vendors; a test
keeps the two in step.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testbed import nodeview
from tests.conformance.nvidia_tools import REPO, ToolsMissing, binary
from tests.scratch import cluster_scratch

pytestmark = pytest.mark.slow
SCRATCH = cluster_scratch()
"""The runs' clusters on tmpfs where it has room and lets device nodes open, as the device plugin suite's own runs
(tests/conformance/test_device_plugin_suite.py): each node is some 28,000 files, which this machine's ext4 makes and
deletes at 30-400 us of kernel CPU each (docs/testbed.md); the plugin runs in a node view, which binds what it uses
under /dev/shm again (testbed.nodeview.kept_paths)."""

RUN_TIMEOUT_S = 900.0
DOC = REPO / "docs" / "certifying-nvidia-plugin.md"


@dataclass(frozen=True)
class Cause:
    words: str
    """Words the failure message must contain (it names the behaviour)."""
    upstream: str
    """What NVIDIA's plugin does that fails the requirement (v0.20.0 source)."""


EXITS_ON_LOST_GPU = ("building the device map fails when a GPU answers GPU_IS_LOST (internal/rm/device_map.go), "
                     "so starting the plugins fails and main exits (cmd/nvidia-device-plugin/main.go)")
CAUSES = {
    "DP-INV-004": Cause("GPU is lost", "restarted while a GPU is off the bus it exits: " + EXITS_ON_LOST_GPU),
    "DP-CHAOS-003": Cause("Allocate handed out", "Allocate only checks that the device IDs are known "
                          "(rm.ValidateRequest in internal/plugin/server.go), not that the GPU is still there"),
    "DP-CHAOS-005": Cause("GPU is lost", "a kubelet restart (kubelet.sock re-created) restarts its plugins, which "
                          "enumerate the GPUs again: " + EXITS_ON_LOST_GPU),
    "DP-HEALTH-003": Cause("not Healthy 10 s after healing", "a device marked Unhealthy is never marked Healthy "
                           "again (FIXME in ListAndWatch, internal/plugin/server.go); recommended only"),
    "DP-HEALTH-004": Cause("busy loop", "when nvmlEventSetWait fails (GPU_IS_LOST after Xid 79 or a GPU off the "
                           "bus) checkHealth marks every device Unhealthy and loops without waiting "
                           "(internal/rm/health.go)"),
    "DP-ISO-002": Cause("listed the GPU Healthy again", "a restarted plugin builds its devices anew, all Healthy; "
                        "a fault seen before the restart is forgotten (Xid events are not replayed, and ECC state "
                        "is not read at start)"),
}


@dataclass(frozen=True)
class Pinned:
    profile: str
    args: tuple[str, ...] = ()
    levels: dict[str, str] = field(default_factory=lambda: {"core": "fail", "topology": "pass",
                                                            "resilience": "fail", "isolation": "fail"})
    failed: frozenset[str] = frozenset(CAUSES)
    not_applicable: frozenset[str] = frozenset({"DP-POOL-001", "DP-POOL-002", "DP-ISO-004"})
    na_words: str = "has no memory pools"


PINNED = (
    Pinned("dgx-h100"),
    Pinned("edge-pcie"),
    Pinned("gb200-nvl72", na_words="does not implement the memory-pool extension"),
    Pinned("dgx-a100", ("--mig-strategy=mixed",)),
)


@dataclass
class Run:
    pinned: Pinned
    out: Path
    returncode: int | None = None
    seconds: float = 0.0
    output: str = ""

    def report(self) -> dict[str, Any]:
        path = self.out / "report.json"
        if not path.is_file():
            pytest.fail(f"{self.pinned.profile}: no report (exit {self.returncode}):\n{self.output[-3000:]}")
        data: dict[str, Any] = json.loads(path.read_text())
        return data


def _run(plugin: Path, pinned: Pinned, out: Path) -> Run:
    run = Run(pinned, out)
    command = shlex.join([str(plugin), *pinned.args])
    argv = [sys.executable, "-m", "conformance.cli", "run", "--target", f"device-plugin=cmd:{command}",
            "--profile", pinned.profile, "--out", str(out)]
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
                              env={**os.environ, **SCRATCH.env, "FAKEHW_STATE_DIR": str(out.parent / "state")})
        run.returncode, run.output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        run.output = f"timed out after {RUN_TIMEOUT_S:g} s: {exc}"
    run.seconds = time.monotonic() - started
    return run


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Future[Run]]]:
    if nodeview.unavailable() is not None:
        pytest.skip(f"NVIDIA's plugin serves in /var/lib/kubelet/device-plugins: {nodeview.unavailable()}")
    try:
        plugin = binary("nvidia-device-plugin")
    except ToolsMissing as exc:
        pytest.skip(str(exc))
    work = Path(tempfile.mkdtemp(prefix="fhw-nvdp-"))
    # All four runs at once (FAKEHW_DP_PARALLEL): a run mostly waits (fault bounds, restarts, the failing checks'
    # full timeouts), as the device plugin suite's runs do (tests/conformance/test_device_plugin_suite.py).
    pool = ThreadPoolExecutor(max_workers=int(os.environ.get("FAKEHW_DP_PARALLEL", str(len(PINNED)))))
    futures = {p.profile: pool.submit(_run, plugin, p, work / p.profile) for p in PINNED}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)
    shutil.rmtree(work, ignore_errors=True)


def _messages(report: dict[str, Any]) -> dict[str, str]:
    return {r["id"]: r["message"] for r in report["results"]}


@pytest.mark.parametrize("pinned", PINNED, ids=[p.profile for p in PINNED])
def test_nvidia_plugin_verdicts_are_pinned(runs: dict[str, Future[Run]], pinned: Pinned) -> None:
    run = runs[pinned.profile].result()
    report = run.report()
    if "--mig-strategy=mixed" in pinned.args and any("missing MIG GPU instance capability path" in m
                                                      for m in _messages(report).values()):
        pytest.skip("this fakehw renders no MIG capability files (/proc/driver/nvidia/capabilities/gpuN/mig)")
    statuses = {r["id"]: r["status"] for r in report["results"]}
    levels = {k: v["verdict"] for k, v in report["verdicts"]["levels"].items()}
    failed = {k for k, v in statuses.items() if v in ("failed", "error")}
    na = {k for k, v in statuses.items() if v == "not-applicable"}
    messages = _messages(report)
    assert failed == pinned.failed, (
        f"{pinned.profile}: newly failing {sorted(failed - pinned.failed)}, no longer failing "
        f"{sorted(pinned.failed - failed)}:\n" + "\n".join(f"{k}: {messages[k][:600]}" for k in sorted(failed)))
    assert levels == pinned.levels
    assert na == pinned.not_applicable and all(pinned.na_words in messages[k] for k in na), {k: messages[k] for k in na}
    assert all(statuses[k] == "failed" for k in failed), "a failure is a failed check, not a harness error"
    unnamed = {k: messages[k][:400] for k in failed if CAUSES[k].words not in messages[k]}
    assert not unnamed, f"failure messages that do not name the behaviour: {unnamed}"
    assert "Traceback" not in "".join(messages.values())
    assert report["verdicts"]["overall"] == "not-certified" and run.returncode == 1
    versions = [c.get("version") or "" for c in report["manifest"]["components"]]
    assert any("v0.20.0" in v and "sha256:" in v for v in versions), versions


def test_the_vendor_document_tells_the_same_story() -> None:
    """docs/certifying-nvidia-plugin.md names every pinned failure with its cause, per profile."""
    text = DOC.read_text()
    for req in CAUSES:
        assert req in text, f"{DOC.name} does not explain {req}"
    for pinned in PINNED:
        assert pinned.profile in text
