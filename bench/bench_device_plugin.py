"""Device plugin suite: wall time per profile on the local backend (isolation fuzz included), fuzz throughput,
NVIDIA's plugin through the whole suite, and the reference plugin's GetPreferredAllocation latency on 8 GPUs (real
gRPC) and on a 72-GPU NVLink domain.

- Suite wall time: the whole suite in a child pytest as a certification runs it (testbed up, plugin start, every
  check including the isolation fuzz at its default budget, teardown); target under 60 s on a 2-core machine.
- Fuzz throughput: the isolation campaign on edge-pcie; steps per second (a step is one rule: admit, free, fault,
  heal, restart).
- NVIDIA's plugin (``nvidia``; needs root and the prebuilt v0.20.0 binary, see tests/conformance/nvidia_tools.py):
  ``conformance run`` wall time per profile, with its verdict per level.
- GetPreferredAllocation: the reference plugin on a dgx-h100 node through the harness's gRPC client (p50/p99 of
  k = 2, 4, 8 over all 8 GPUs); and the plugin's allocator on the NVL72 rack as one 72-GPU matrix (the model's
  bonds between any two GPUs of the domain), which is what a plugin seeing a whole NVLink domain would search.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import percentile, row

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "conformance" / "suites" / "device_plugin"
PROFILES = ("dgx-h100", "gb200-nvl72", "edge-pcie", "riscv-nvlink-fusion")
REFERENCE = f"{shlex.quote(sys.executable)} -m testbed.reference.device_plugin"


def suite(profile: str, *extra: str) -> tuple[float, dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "r.json"
        argv = [sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", "-q", "--profile", profile,
                "--target", f"device-plugin=cmd:{REFERENCE}", "--conformance-results", str(results), *extra]
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, text=True, check=False)
        took = time.perf_counter() - start
        return took, json.loads(results.read_text()) if results.exists() else {}


def suite_times() -> None:
    print("suite wall time per profile, local backend, isolation fuzz included (target < 60 s)")
    for profile in PROFILES:
        load = os.getloadavg()[0]  # the machine is shared: a figure means little without the load it ran under
        took, doc = suite(profile)
        tests = doc.get("tests", [])
        passed = sum(1 for t in tests if t["outcome"] == "passed")  # type: ignore[index]
        moot = sum(1 for t in tests if t["outcome"] == "not-applicable")  # type: ignore[index]
        row(profile, f"{took:6.1f} s", f"{passed}/{len(tests)} checks passed, {moot} not applicable",
            f"load {load:.1f} -> {os.getloadavg()[0]:.1f}")


def fuzz_throughput(examples: int = 6, steps: int = 12) -> None:
    print(f"isolation fuzz on edge-pcie (one campaign for the four requirements: {examples} runs x up to {steps} "
          "steps)")
    took, doc = suite("edge-pcie", "-k", "test_isolation", "--dp-fuzz-examples", str(examples),
                      "--dp-fuzz-steps", str(steps))
    budget: dict[str, object] = {}
    for t in doc.get("tests", []):  # type: ignore[union-attr]
        for e in t["evidence"]:
            if e["label"] == "budget":
                budget = e["value"]
        row(t["nodeid"].split("::")[-1], t["outcome"])
    total_steps, seconds = int(budget.get("steps run", 0)), float(budget.get("seconds", 0.0))  # type: ignore[arg-type]
    row("steps run / seconds in the campaign", f"{total_steps} / {seconds:.1f} s",
        f"{total_steps / seconds:.1f} steps/s" if seconds else "-")
    row("whole run (testbed, plugin, campaign)", f"{took:.1f} s")


def nvidia_plugin() -> None:
    """NVIDIA's plugin through ``conformance run`` as a vendor runs it (it was 5-21 min per profile before the
    waits became event-driven)."""
    sys.path.insert(0, str(ROOT))
    from tests.conformance.nvidia_tools import ToolsMissing, binary

    try:
        plugin = binary("nvidia-device-plugin")
    except ToolsMissing as exc:
        print(f"NVIDIA's plugin: skipped ({exc})")
        return
    print("NVIDIA's device plugin v0.20.0 through conformance run (the whole suite)")
    cases = (("dgx-h100", ""), ("edge-pcie", ""), ("gb200-nvl72", ""), ("dgx-a100", " --mig-strategy=mixed"))
    for profile, args in cases:
        with tempfile.TemporaryDirectory() as tmp:
            argv = [sys.executable, "-m", "conformance.cli", "run", "--target",
                    f"device-plugin=cmd:{shlex.quote(str(plugin))}{args}", "--profile", profile, "--out", tmp]
            start = time.perf_counter()
            subprocess.run(argv, capture_output=True, text=True, check=False)
            took = time.perf_counter() - start
            report = Path(tmp) / "report.json"
            levels = json.loads(report.read_text())["verdicts"]["levels"] if report.exists() else {}
            row(profile + args, f"{took:6.1f} s", " ".join(f"{k} {v['verdict']}" for k, v in levels.items()))


def preferred_latency() -> None:
    from testbed.api import Testbed
    from testbed.kubelet.kubelet import Kubelet, short_tmp_dir
    from testbed.kubelet.launcher import CommandLauncher

    print("GetPreferredAllocation latency, reference plugin on a dgx-h100 node (8 GPUs, real gRPC)")
    state = Path(tempfile.mkdtemp(prefix="fhw-b-", dir="/tmp"))
    tb = Testbed.up("dgx-h100", name="bench", state_dir=state)
    plugin_dir = short_tmp_dir()
    kubelet = Kubelet(plugin_dir)
    kubelet.start()
    node = tb.nodes()[0]
    proc = CommandLauncher(REFERENCE, node.name, node.env, plugin_dir / "logs").start(plugin_dir)
    try:
        ep = kubelet.wait_endpoint("nvidia.com/gpu", process=proc)
        assert ep.latest is not None
        ids = [d.id for d in ep.latest.devices]
        for k in (2, 4, 8):
            samples = []
            for i in range(200):
                available = ids[i % len(ids):] + ids[: i % len(ids)]
                start = time.perf_counter()
                kubelet.preferred("nvidia.com/gpu", available, k)
                samples.append((time.perf_counter() - start) * 1000)
            row(f"k={k} of 8", f"p50 {percentile(samples, 50):6.2f} ms", f"p99 {percentile(samples, 99):6.2f} ms")
    finally:
        proc.stop()
        kubelet.stop()
        tb.down()
        shutil.rmtree(plugin_dir, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)


def domain_latency() -> None:
    from fakehw.model import load_profile
    from fakehw.model.topology import domain_bond
    from testbed.reference.device_plugin.allocator import TopologyMatrix, best_set

    print("allocator on the GB200 NVL72 rack as one 72-GPU NVLink domain (in process)")
    system = load_profile("gb200-nvl72")
    gpus = list(system.gpus())
    n = len(gpus)
    levels_of = {node.name: system.topology.nodes[node.name].levels for node in system.nodes}
    bonds = tuple(tuple(0 if a == b else domain_bond(gpus[a], gpus[b]) for b in range(n)) for a in range(n))
    levels = tuple(tuple(0 if a == b else int(levels_of[gpus[a].node][gpus[a].index][gpus[b].index])
                         if gpus[a].node == gpus[b].node else 60 for b in range(n)) for a in range(n))
    matrix = TopologyMatrix(bonds, levels)
    for k in (2, 4, 8, 16, 36):
        samples = []
        for i in range(20):
            candidates = list(range(n))[i:] + list(range(n))[:i]
            start = time.perf_counter()
            best_set(matrix, candidates, k)
            samples.append((time.perf_counter() - start) * 1000)
        row(f"k={k} of 72", f"p50 {percentile(samples, 50):7.2f} ms", f"p99 {percentile(samples, 99):7.2f} ms")


def main() -> None:
    which = set(sys.argv[1:]) or {"latency", "domain", "suite", "fuzz", "nvidia"}
    if "latency" in which:
        preferred_latency()
    if "domain" in which:
        domain_latency()
    if "suite" in which:
        suite_times()
    if "fuzz" in which:
        fuzz_throughput()
    if "nvidia" in which:
        nvidia_plugin()
    if not re.match(r"^[a-z ]*$", " ".join(sorted(which))):
        raise SystemExit("usage: bench_device_plugin.py [latency] [domain] [suite] [fuzz] [nvidia]")


if __name__ == "__main__":
    main()
