"""Device plugin suite: wall time per profile on the local backend (without the fuzz), fuzz throughput, and the
reference plugin's GetPreferredAllocation latency on 8 GPUs (real gRPC) and on a 72-GPU NVLink domain.

- Suite wall time: the whole suite in a child pytest as a certification runs it (testbed up, plugin start, every
  check, teardown), with the isolation fuzz deselected; target under 60 s on a 2-core machine.
- Fuzz throughput: the four isolation state machines on edge-pcie; steps per second over all of them (a step is
  one rule: admit, free, fault, heal, restart).
- GetPreferredAllocation: the reference plugin on a dgx-h100 node through the harness's gRPC client (p50/p99 of
  k = 2, 4, 8 over all 8 GPUs); and the plugin's allocator on the NVL72 rack as one 72-GPU matrix (the model's
  bonds between any two GPUs of the domain), which is what a plugin seeing a whole NVLink domain would search.
"""

from __future__ import annotations

import json
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
    print("suite wall time per profile, local backend, isolation fuzz deselected (target < 60 s)")
    for profile in PROFILES:
        took, doc = suite(profile, "-k", "not test_isolation")
        tests = doc.get("tests", [])
        passed = sum(1 for t in tests if t["outcome"] == "passed")  # type: ignore[index]
        row(profile, f"{took:6.1f} s", f"{passed}/{len(tests)} checks passed")


def fuzz_throughput(examples: int = 6, steps: int = 12) -> None:
    print(f"isolation fuzz on edge-pcie ({examples} runs x up to {steps} steps per requirement)")
    took, doc = suite("edge-pcie", "-k", "test_isolation", "--dp-fuzz-examples", str(examples),
                      "--dp-fuzz-steps", str(steps))
    total_steps = 0
    seconds = 0.0
    for t in doc.get("tests", []):  # type: ignore[union-attr]
        for e in t["evidence"]:
            if e["label"] == "budget":
                total_steps += int(e["value"]["steps run"])
                seconds += float(e["value"]["seconds"])
        row(t["nodeid"].split("::")[-1], t["outcome"])
    row("steps run / seconds in the machines", f"{total_steps} / {seconds:.1f} s",
        f"{total_steps / seconds:.1f} steps/s" if seconds else "-")
    row("whole run (testbed, plugin, 4 machines)", f"{took:.1f} s")


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
    which = set(sys.argv[1:]) or {"latency", "domain", "suite", "fuzz"}
    if "latency" in which:
        preferred_latency()
    if "domain" in which:
        domain_latency()
    if "suite" in which:
        suite_times()
    if "fuzz" in which:
        fuzz_throughput()
    if not re.match(r"^[a-z ]*$", " ".join(sorted(which))):
        raise SystemExit("usage: bench_device_plugin.py [latency] [domain] [suite] [fuzz]")


if __name__ == "__main__":
    main()
