"""Memory as the kernel's NUMA, hotplug and tiering code shows it, judged by real readers and real captures.

Expected values come from outside the model: the kernel's constants and documentation (memory tiers, block
sizes), captures of real machines (memory tiers of kmem memory, numactl output, an asymmetric SLIT), and what
util-linux lsmem, numactl's numastat and hwloc 2.12 print.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fakehw.agent.faults import CxlOffline
from fakehw.agent.state import ActiveFault, derive_state
from fakehw.model import System, load_profile
from fakehw.model.system import Node
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir
from fakehw.sysfs import ROOT_DIR, render_tree
from fakehw.sysfs.hwloc import lstopo, newer_lstopo

Rendered = Callable[[str], list[tuple[System, Node, Path]]]
CAPTURES = Path(__file__).parent / "captures"
TIERS = "sys/devices/virtual/memory_tiering"
MiB = 1 << 20


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def tiers(root: Path) -> dict[str, str]:
    return {d.name: (d / "nodelist").read_text().strip() for d in sorted((root / TIERS).glob("memory_tier*"))}


def render_profile(text: str, tmp: Path, faults: list[ActiveFault] | None = None) -> tuple[System, Node, Path]:
    """A profile written to ``tmp`` and its first node's tree rendered there."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "profile.yaml"
    path.write_text(text)
    system = load_profile(path)
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, faults or []), True), OutputDir(tmp / node.name))
    return system, node, tmp / node.name / ROOT_DIR


NO_HMAT = """\
name: cxl-pool-no-hmat
extends: cxl-pool
description: cxl-pool on firmware without an HMAT
groups:
  - name: cxl-host
    node:
      numa: {hmat: false}
"""


def test_without_hmat_kmem_memory_sits_in_tier_22_below_dram_in_tier_4(fast_tmp: Path) -> None:
    """With no performance data, DRAM gets the default abstract distance 576 (memory_tier4) and memory that dax
    kmem onlines gets 5 x 576 (memory_tier22), as real hosts show: "memory_tier4/nodelist 0-2,
    memory_tier22/nodelist 3" (a QEMU CXL/pmem guest quoted on linux-mm), "memory_tier4 0-1, memory_tier22 2"
    (a native CXL host's topology log). Nodes without memory are in no tier, and nothing carries HMAT files."""
    _, _, root = render_profile(NO_HMAT, fast_tmp)
    assert tiers(root) == {"memory_tier22": "1-2", "memory_tier4": "0"}
    assert not list((root / "sys/devices/system/node").glob("node*/access*"))
    assert (root / "sys/kernel/mm/numa/demotion_enabled").read_text() == "false\n"


def test_hmat_places_slower_memory_in_lower_tiers(rendered: Rendered) -> None:
    """With HMAT figures the kernel ranks memory by latency and bandwidth against the DRAM nodes
    (mm/memory-tiers.c, mt_perf_to_adistance): DRAM stays in memory_tier4 and CXL memory lands in tiers with
    higher numbers, switch-attached pooled memory further than direct-attached memory; empty CXL windows
    (NUMA nodes 3 and 4) are in no tier. GB200: both Graces in tier 4, each GPU's memory, which a Grace reaches
    over C2C, in one further tier; the MIG-reserved nodes in none."""
    ((_, _, root),) = rendered("cxl-pool")
    by_node = {n: int(t.removeprefix("memory_tier")) for t, ns in tiers(root).items() for n in _expand(ns)}
    assert by_node[0] == 4 and set(by_node) == {0, 1, 2}
    assert 4 < by_node[1] < by_node[2]  # region0 (direct, 2-way) before the pooled device behind its switch
    ((_, _, root),) = rendered("gb200-nvl72")
    got = tiers(root)
    assert got["memory_tier4"] == "0-1"
    hbm = [t for t, ns in got.items() if ns == "2,10,18,26"]
    assert len(got) == 2 and len(hbm) == 1 and int(hbm[0].removeprefix("memory_tier")) > 4


def _expand(nodelist: str) -> list[int]:
    out: list[int] = []
    for part in nodelist.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def test_a_cxl_node_leaves_its_tier_and_its_blocks_go_when_its_region_does(fast_tmp: Path) -> None:
    """When mem0 goes offline, region0 (2-way, one target on mem0) is no longer in NUMA node 1: the node drops
    out of memory tiering (clear_node_memory_tier on MEM_OFFLINE) and its memory blocks are removed."""
    text = (Path(__file__).parents[2] / "fakehw/profiles/cxl-pool.yaml").read_text()
    _, node, root = render_profile(text, fast_tmp / "a")
    blocks = {p.name for p in (root / "sys/devices/system/node/node1").glob("memory*")}
    assert blocks and 1 in _expand(",".join(tiers(root).values()))
    fault = [ActiveFault("f-1", node.name, CxlOffline(device="mem0"), 0.0)]
    _, _, after = render_profile(text, fast_tmp / "b", fault)
    assert 1 not in _expand(",".join(tiers(after).values()))
    assert not list((after / "sys/devices/system/node/node1").glob("memory*"))
    assert not any((after / "sys/devices/system/memory" / b).exists() for b in blocks)


def _lsmem(root: Path) -> list[dict[str, Any]]:
    """util-linux lsmem's ranges (JSON, sizes in bytes) of the tree at ``root``."""
    if shutil.which("lsmem") is None:
        pytest.skip("util-linux lsmem is not installed")
    proc = _run(["lsmem", "-J", "-b", "--sysroot", str(root), "-o", "RANGE,SIZE,STATE,NODE,ZONES"])
    assert proc.returncode == 0, proc.stderr
    ranges: list[dict[str, Any]] = json.loads(proc.stdout)["memory"]
    return ranges


def test_lsmem_reads_a_gb200_tray_in_512_mib_blocks(rendered: Rendered) -> None:
    """arm64 with 64 KiB pages (GB200's default: getconf PAGE_SIZE 65536 in NVIDIA's TensorRT-LLM blog) has
    memory blocks of 512 MiB (arch/arm64 SECTION_SIZE_BITS 29). Every NUMA node with memory is online in whole
    blocks: the sizes numactl -H shows on a real tray (captures/), rounded up to a block; GPU memory is in
    ZONE_MOVABLE (onlined movable, as NVIDIA's coherent-memory guidance asks)."""
    ((_, _, root),) = rendered("gb200-nvl72")
    assert (root / "sys/devices/system/memory/block_size_bytes").read_text() == "20000000\n"
    sizes = {int(m.group(1)): int(m.group(2)) * MiB
             for m in re.finditer(r"^node (\d+) size: (\d+) MB$", (CAPTURES / "gb200-tray-numactl-H.txt").read_text(),
                                  re.M)}
    online: dict[int, int] = {}
    zones: dict[int, set[str]] = {}
    for r in _lsmem(root):
        assert r["state"] == "online"
        online[int(r["node"])] = online.get(int(r["node"]), 0) + int(r["size"])
        zones.setdefault(int(r["node"]), set()).update(r["zones"].split("/"))
    block = 512 * MiB
    for n, size in sizes.items():
        assert online.get(n, 0) == -(-size // block) * block, f"node {n}"
    for n in (2, 10, 18, 26):
        assert zones[n] == {"Movable"}
    assert "Normal" in zones[0] and "Movable" not in zones[0]


def test_lsmem_reads_a_dgx_h100_in_2_gib_blocks(rendered: Rendered) -> None:
    """x86 bare metal with 64 GiB or more uses 2 GiB memory blocks (arch/x86/mm/init_64.c); 2 TB of DDR5 (the
    DGX H100 user guide) is online in them, none of it in the 2-4 GiB MMIO hole."""
    ((_, _, root),) = rendered("dgx-h100")
    assert (root / "sys/devices/system/memory/block_size_bytes").read_text() == "80000000\n"
    ranges = _lsmem(root)
    assert sum(int(r["size"]) for r in ranges) == 2 * 2**40
    for r in ranges:
        start, end = (int(x, 16) for x in r["range"].split("-"))
        assert end < 2 * 2**30 or start >= 4 * 2**30


@pytest.mark.root
def test_numastat_reads_every_node(rendered: Rendered) -> None:
    """numactl's numastat reads nodeN/numastat and nodeN/meminfo of every node (34 on a GB200 tray)."""
    if shutil.which("numastat") is None:
        pytest.skip("numastat (numactl) is not installed")
    from testbed.nodeview import NodeView, command, unavailable

    if unavailable():
        pytest.skip(f"no node view: {unavailable()}")
    ((_, tray, root),) = rendered("gb200-nvl72")
    proc = _run(command(NodeView(str(root)), ["numastat"]))
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[0].split()
    assert header == [f"node{n.id}" for n in tray.numa]
    hits = next(line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("numa_hit"))
    assert int(hits[0]) > 0 and int(hits[3]) == 0  # a Grace's kernel allocations; a MIG-reserved node has none


def test_hwloc_2_12_labels_ddr_as_dram_not_hbm(rendered: Rendered) -> None:
    """hwloc 2.12 guesses memory kinds from HMAT figures. HMAT on empty CXL window nodes made it call the
    host's DDR5 node "HBM" (issue 14); with figures only where the kernel has them it calls the CXL nodes
    CXL-DRAM and leaves the DDR node unlabelled, and a GH200's GPU memory stays GPUMemory."""
    newer = newer_lstopo()
    if newer is None:
        pytest.skip("hwloc 2.12 is not cached (tools/fetch-real-hwloc.sh)")
    ((_, _, root),) = rendered("cxl-pool")
    numa = lstopo(root, which=newer).numa()
    assert numa[0].subtype in (None, "DRAM")
    assert numa[1].subtype == numa[2].subtype == "CXL-DRAM"
    assert all(numa[n].subtype != "HBM" for n in numa)
    ((_, _, root),) = rendered("gh200")
    numa = lstopo(root, which=newer).numa()
    assert numa[1].subtype == "GPUMemory" and numa[0].subtype != "HBM"
