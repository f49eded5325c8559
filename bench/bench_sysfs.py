"""The fake root tree: a node's first render per profile, full render of one GB200 tray and of a ~1,000-node
fleet, and incremental re-renders.

Figures are printed, nothing is asserted. File counts are entries of the tree (files, symlinks, directories
declared, device nodes). The fleet is GB200 NVL72 trays: 1,008 of them (56 racks; the profile needs whole
racks of 18). Trays after the first of a template hard-link their static content (CPU topology and caches, NUMA
and driver files) from the first tray's tree, so the fleet figure shows what sharing buys.

The first-render rows split a node's first render (what ``fakehw render``, an agent's eager start and the first
``testbed exec`` on a node pay) into wall time, CPU in Python (user) and in the kernel, and time the writing
thread was runnable but waited for a CPU (other load: ``/proc/thread-self/schedstat``), with the load average
before it. On these machines the kernel part is mostly ext4's inode allocation (docs/testbed.md).

Usage: ``python bench/bench_sysfs.py [--dir DIR] [--fleet N] [--parts first,tray,incremental,agent,fleet]
[--profiles P,...]`` (DIR defaults to the system temp dir; the filesystem matters: ext4 under load is 5-10x
slower per file than tmpfs, and on the journal-less ext4 here 10-40x).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import row

from fakehw.agent.faults import CxlOffline, FallenOffBus
from fakehw.agent.service import AgentService
from fakehw.agent.state import ActiveFault, derive_state
from fakehw.model import load_profile
from fakehw.model.system import Node, System
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir
from fakehw.sysfs import render_tree
from fakehw.sysfs.tree import WriteStats


def render(system: System, node: Node, out: Path, faults: list[ActiveFault] | None = None) -> WriteStats:
    state = derive_state(node, faults or [])
    return render_tree(RenderContext(system, node, state, True), OutputDir(out / node.name))


def _cpu_wait() -> float:
    """Seconds this thread has been runnable without a CPU (the second field of its schedstat); 0 if unknown."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def first_render(base: Path, profiles: list[str]) -> None:
    """One node of each profile rendered into a new directory (its first render, no template sibling to link)."""
    for name in profiles:
        system = load_profile(name)
        node = system.nodes[0]
        out = base / f"first-{name}"
        load = os.getloadavg()[0]
        before, waited, start = resource.getrusage(resource.RUSAGE_SELF), _cpu_wait(), time.perf_counter()
        stats = render(system, node, out)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        row(f"first render, one {name} node", f"{wall:6.2f} s", f"user {after.ru_utime - before.ru_utime:5.2f} s",
            f"kernel {after.ru_stime - before.ru_stime:5.2f} s", f"waiting for a CPU {_cpu_wait() - waited:5.2f} s",
            f"{stats.written:>6} entries", f"load {load:.1f}")
        shutil.rmtree(out)


def tray(base: Path) -> None:
    system = load_profile("gb200-nvl72")
    node = system.nodes[0]
    times, files = [], 0
    for i in range(3):
        out = base / f"tray-{i}"
        start = time.perf_counter()
        stats = render(system, node, out)
        times.append(time.perf_counter() - start)
        files = stats.written
        shutil.rmtree(out)
    row("one gb200-nvl72 tray, full render", f"{statistics.median(times):6.2f} s", f"{files:>7} files",
        f"{files / statistics.median(times):8.0f} files/s")


def fleet(base: Path, count: int) -> None:
    start = time.perf_counter()
    system = load_profile("gb200-nvl72", nodes=count)
    expand = time.perf_counter() - start
    out = base / "fleet"
    total = 0
    start = time.perf_counter()
    first = 0.0
    for i, node in enumerate(system.nodes):
        t = time.perf_counter()
        total += render(system, node, out).written
        if i == 0:
            first = time.perf_counter() - t
    elapsed = time.perf_counter() - start
    row(f"fleet of {count} gb200 trays, full render", f"{elapsed:6.1f} s", f"{total:>9} files",
        f"{total / elapsed:8.0f} files/s")
    row("  first tray (writes) / later trays (links)", f"{first:6.2f} s",
        f"{(elapsed - first) / max(1, count - 1) * 1e3:6.1f} ms per tray", f"(model expansion {expand:.1f} s)")
    start = time.perf_counter()
    shutil.rmtree(out)
    row("  removing the fleet's trees", f"{time.perf_counter() - start:6.1f} s")


def incremental(base: Path) -> None:
    system = load_profile("gb200-nvl72")
    node = system.nodes[0]
    out = base / "incr"
    render(system, node, out)
    fault = [ActiveFault("f-1", node.name, FallenOffBus(device="gpu2"), 0.0)]
    for label, faults in (("no change (re-render)", []), ("gpu2 falls off the bus", fault),
                          ("gpu2 healed", [])):
        start = time.perf_counter()
        stats = render(system, node, out, faults)
        row(f"gb200 tray: {label}", f"{(time.perf_counter() - start) * 1e3:6.1f} ms",
            f"{stats.written:>4} written", f"{stats.removed:>4} removed", f"{stats.unchanged:>5} compared",
            f"{stats.skipped_sections} static sections skipped")
    cxl = load_profile("cxl-pool")
    host = cxl.nodes[0]
    render(cxl, host, out)
    offline = [ActiveFault("f-2", host.name, CxlOffline(device="mem0"), 0.0)]
    for label, faults in (("cxl-offline mem0 (boot view)", offline), ("mem0 back", [])):
        start = time.perf_counter()
        stats = render(cxl, host, out, faults)
        row(f"cxl-pool host: {label}", f"{(time.perf_counter() - start) * 1e3:6.1f} ms",
            f"{stats.written:>4} written", f"{stats.removed:>4} removed", f"{stats.unchanged:>5} compared")


def agent(base: Path) -> None:
    """Through the agent (journal, NVML snapshot, state.json and the tree): fault to rendered files."""
    system = load_profile("cxl-pool")
    svc = AgentService(system, base / "agent")
    try:
        node = "cxl-host-0"
        for label, call in (
            ("agent: inject cxl-offline mem0", lambda: svc.inject(node, {"kind": "cxl-offline", "device": "mem0"})),
            ("agent: heal it", lambda: svc.heal(node=node, device="mem0")),
            ("agent: create a 2-way region", lambda: svc.platform.create_region(
                node, {"window": "cfmws2", "targets": ["mem1", "mem5"], "size": "2GiB"})),
            ("agent: reserve 1 GiB of a pool", lambda: svc.platform.grant(
                node, "cxl-local", {"tenant": "bench", "size": "1GiB"}, "reservation")),
        ):
            start = time.perf_counter()
            call()
            row(label, f"{(time.perf_counter() - start) * 1e3:6.1f} ms", "(journaled, all renderers)")
    finally:
        svc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="where to render (default: the system temp dir)")
    parser.add_argument("--fleet", type=int, default=1008, help="trays in the fleet (a multiple of 18)")
    parser.add_argument("--parts", default="first,tray,incremental,agent,fleet", help="which rows, comma-separated")
    parser.add_argument("--profiles", default="riscv-nvlink-fusion,gb200-nvl72,dgx-h100",
                        help="profiles of the first-render rows, comma-separated")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    base = Path(tempfile.mkdtemp(prefix="fhw-bench-sysfs-", dir=args.dir))
    try:
        print(f"fake root tree (rendering under {base})")
        if "first" in parts:
            first_render(base, args.profiles.split(","))
        if "tray" in parts:
            tray(base)
        if "incremental" in parts:
            incremental(base)
        if "agent" in parts:
            agent(base)
        if "fleet" in parts:
            fleet(base, args.fleet)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
