"""Each profile's CPU caches as the real part has them (issue #16: every part was given Sapphire Rapids' ways).

The expected figures are the vendors' (cited at each table), written out here, not read from
fakehw/model/cpu_parts.py: ``cache/indexN`` (Documentation/ABI/testing/sysfs-devices-system-cpu) shows a cache's
``size``, ``ways_of_associativity``, ``number_of_sets`` and ``coherency_line_size`` as CPUID leaf 4 (x86) or the
firmware's cache description (arm64 ACPI PPTT) gives them, ``size = ways * sets * line``, and ``shared_cpu_list``
the CPUs that share one instance. util-linux ``lscpu -C``, where installed, reads the fake tree (``--sysroot``)
and must print the same geometry, and ``lscpu`` the same number of L3 instances.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.agent.state import derive_state
from fakehw.model import System, load_profile
from fakehw.model.cpu_parts import part_of
from fakehw.model.system import Node
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir
from fakehw.sysfs import ROOT_DIR, render_tree
from fakehw.sysfs.cpu import cpuinfo

Rendered = Callable[[str], list[tuple[System, Node, Path]]]
CPUS = "sys/devices/system/cpu"
Row = tuple[str, int, int, int]
"""A cache as ``lscpu -C`` names it: name, one instance's size in bytes, ways, sets (64-byte lines throughout)."""

KIB, MIB = 1024, 1024 * 1024

ZEN2_EPYC_7742: list[Row] = [("L1d", 32 * KIB, 8, 64), ("L1i", 32 * KIB, 8, 64), ("L2", 512 * KIB, 8, 1024),
                             ("L3", 16 * MIB, 16, 16384)]
"""AMD Software Optimization Guide for Family 17h Models 30h+ (pub. 56305), 2.6: L1I/L1D 32 KB 8-way, L2 512 KB
8-way, L3 16 MB 16-way per 4-core CCX."""
ZEN4_EPYC_9354: list[Row] = [("L1d", 32 * KIB, 8, 64), ("L1i", 32 * KIB, 8, 64), ("L2", 1 * MIB, 8, 2048),
                             ("L3", 32 * MIB, 16, 32768)]
"""AMD Software Optimization Guide for Zen 4 (pub. 57647): L1I/L1D 32 KB 8-way, L2 1 MB 8-way, L3 32 MB 16-way per
CCD; the EPYC 9354's 256 MB are 8 CCDs of 4 cores."""
CASCADE_LAKE_8259CL: list[Row] = [("L1d", 32 * KIB, 8, 64), ("L1i", 32 * KIB, 8, 64), ("L2", 1 * MIB, 16, 1024),
                                  ("L3", 36608 * KIB, 11, 53248)]
"""Intel optimization reference manual, Skylake Server cache parameters: L1 32 KB 8-way, L2 1 MB 16-way, L3
1.375 MB per core 11-way (the 8259CL's 35.75 MB: 26 slices)."""
NEOVERSE_V2: list[Row] = [("L1d", 64 * KIB, 4, 256), ("L1i", 64 * KIB, 4, 256), ("L2", 1 * MIB, 8, 2048)]
"""Arm Neoverse V2 Core TRM (102375): L1 I and D 64 KB 4-way, L2 (1 MB on Grace) 8-way."""
QEMU_ICELAKE_L2_L3: list[Row] = [("L2", 4 * MIB, 16, 4096), ("L3", 16 * MIB, 16, 16384)]
"""QEMU target/i386/cpu.c, legacy_l2_cache and legacy_l3_cache (a CPU model without cache_info, as Icelake-Server):
4 MiB 16-way 4096 sets, 16 MiB 16-way 16384 sets."""
REDWOOD_COVE_L1I: list[Row] = [("L1i", 64 * KIB, 16, 64)]
"""Intel optimization reference manual, Redwood Cove (Granite Rapids): L1I 64 KB 16-way."""

EXPECTED: dict[str, tuple[list[Row], int | None, str | None]] = {
    "dgx-a100": (ZEN2_EPYC_7742, 32, "0-3,128-131"),
    "l40s-server": (ZEN4_EPYC_9354, 16, "0-3,64-67"),
    "t4-cloud": (CASCADE_LAKE_8259CL, 1, "0-3"),
    "gh200": (NEOVERSE_V2, 1, "0-71"),
    "cxl-test": (QEMU_ICELAKE_L2_L3, 2, "0-3"),
    "cxl-pool": (REDWOOD_COVE_L1I, 1, "0-127"),
}
"""Per profile: the caches of its part, its L3 instances on the node, and cpu0's L3 ``shared_cpu_list`` (a CCX is
4 cores and their SMT siblings, Linux numbering every core's first thread first)."""


def _read(path: Path) -> str:
    return path.read_text().strip()


def _sysfs_rows(cpu: Path) -> dict[str, Row]:
    """cpuN's caches as lscpu names them (L1d, L1i, L2, L3), from ``cache/indexN``."""
    rows = {}
    for index in sorted(cpu.glob("cache/index[0-9]*")):
        level, kind = _read(index / "level"), _read(index / "type")
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        size = _read(index / "size")
        assert size.endswith("K") and _read(index / "coherency_line_size") == "64", (index, size)
        rows[name] = (name, int(size[:-1]) * KIB, int(_read(index / "ways_of_associativity")),
                      int(_read(index / "number_of_sets")))
    return rows


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_a_profiles_caches_have_its_parts_geometry(rendered: Rendered, profile: str) -> None:
    """Every CPU's cache leaves have the part's size, ways and sets; cpu0's L3 is shared by the CPUs of its
    instance (one CCX/CCD on AMD, the socket elsewhere); ``lscpu -C`` prints the same and ``lscpu`` counts the
    part's L3 instances."""
    rows, instances, l3_cpus = EXPECTED[profile]
    (_, node, root), *_ = rendered(profile)
    for c in (0, node.cpu.logical_cpus - 1):
        got = _sysfs_rows(root / CPUS / f"cpu{c}")
        assert [got[name] for name, *_ in rows] == rows, (profile, c)
    assert _read(root / CPUS / "cpu0/cache/index3/shared_cpu_list") == l3_cpus, profile
    if shutil.which("lscpu") is None:
        return
    proc = subprocess.run(["lscpu", "-J", "-B", "-C", "--sysroot", str(root)], capture_output=True, text=True,
                          timeout=60, check=True)
    printed = {c["name"]: (c["name"], int(c["one-size"]), int(c["ways"]), int(c["sets"]))
               for c in json.loads(proc.stdout)["caches"]}
    assert [printed[name] for name, *_ in rows] == rows, profile
    proc = subprocess.run(["lscpu", "-J", "--sysroot", str(root)], capture_output=True, text=True, timeout=60,
                          check=True)
    fields = {e["field"].rstrip(":"): e["data"] for e in json.loads(proc.stdout)["lscpu"]}
    if node.cpu.arch == "amd64":  # lscpu summarises caches from x86 cpuinfo only on an x86 host
        assert fields["L3 cache"].endswith(f"({instances} instance{'s' if instances != 1 else ''})"), fields


def test_the_dgx_a100_l3s_are_one_per_ccx_with_their_own_ids(rendered: Rendered) -> None:
    """An EPYC 7742 has an L3 per CCX of 4 cores (AMD SOG 56305, 2.6), so cpu0-3 and their SMT siblings 128-131
    share one, cpu4 is in the next, and socket 1's first CCX (cpu64) is another; the ABI's ``id`` tells them apart
    (Documentation/ABI/testing/sysfs-devices-system-cpu: unique among the caches of one level and type). hwloc,
    where installed, reading the tree (HWLOC_FSROOT) counts the 32 L3s."""
    (_, _, root), *_ = rendered("dgx-a100")
    index3 = {c: root / CPUS / f"cpu{c}/cache/index3" for c in (0, 3, 4, 64, 131)}
    lists = {c: _read(p / "shared_cpu_list") for c, p in index3.items()}
    assert lists == {0: "0-3,128-131", 3: "0-3,128-131", 4: "4-7,132-135", 64: "64-67,192-195",
                     131: "0-3,128-131"}
    ids = {c: _read(p / "id") for c, p in index3.items()}
    assert ids[0] == ids[3] == ids[131] and len({ids[0], ids[4], ids[64]}) == 3, ids
    assert {_read(p / "size") for p in index3.values()} == {"16384K"}
    if shutil.which("hwloc-calc") is None:
        return
    proc = subprocess.run(["hwloc-calc", "--number-of", "L3", "all"], capture_output=True, text=True, timeout=60,
                          check=True, env={**os.environ, "HWLOC_FSROOT": str(root)})
    assert proc.stdout.strip() == "32", proc.stdout  # hwloc reading the tree: 2 sockets of 16 CCX


def test_every_known_parts_declared_sizes_are_its_profiles() -> None:
    """The part table's per-instance sizes and the profiles that name the part agree (the profile's L3 is its
    socket's or NUMA node's: the instance times the instances in it), and each declared cache divides into whole
    sets at its ways (the kernel's figures always do), so the renderer shows the part's ways, never its fallback."""
    seen = set()
    for profile in ("dgx-a100", "l40s-server", "t4-cloud", "gh200", "gb200-nvl72", "dgx-h100", "edge-pcie",
                    "dgx-b200", "cxl-test", "cxl-pool", "riscv-nvlink-fusion"):
        node = load_profile(profile).nodes[0]
        part = part_of(node.cpu.model)
        assert part is not None, (profile, node.cpu.model)
        seen.add(part)
        caches = node.cpu.caches
        assert (caches.l1d, caches.l1i, caches.l2) == (part.l1d.size, part.l1i.size, part.l2.size), profile
        domain_cores = (node.cpu.cores_per_socket if caches.l3_shared_by == "socket"
                        else len(node.numa[0].cpus) // node.cpu.threads_per_core)
        per_domain = domain_cores // part.l3.cores if part.l3.cores else 1
        assert caches.l3 == part.l3.size * per_domain, profile
        for level in (part.l1d, part.l1i, part.l2, part.l3):
            assert level.sets * level.ways * level.line == level.size, (profile, level)
    assert len(seen) == 10


@pytest.mark.parametrize(("profile", "size"), (("dgx-a100", "512 KB"), ("l40s-server", "1024 KB"),
                                               ("t4-cloud", "36608 KB")))
def test_x86_cpuinfo_cache_size_is_the_l2_on_amd_and_the_l3_on_intel(rendered: Rendered, profile: str,
                                                                      size: str) -> None:
    """``/proc/cpuinfo``'s ``cache size`` is x86_cache_size: the L3 on Intel (init_intel_cacheinfo, from leaf 4:
    the 8259CL's 35.75 MB), but on AMD the core's L2 as CPUID 0x80000006 reports it (cpu_detect_cache_sizes; an
    EPYC 7742's /proc/cpuinfo reads ``cache size : 512 KB``, a Zen 4's 1024 KB)."""
    (_, _, root), *_ = rendered(profile)
    sizes = {line.split(":", 1)[1].strip() for line in (root / "proc/cpuinfo").read_text().splitlines()
             if line.startswith("cache size")}
    assert sizes == {size}, profile


def test_an_intel_cpu_without_an_l3_shows_its_l2_as_cache_size() -> None:
    """init_intel_cacheinfo sets x86_cache_size to the L3 if there is one, else the L2 (a t4-cloud node with its
    L3 taken out, as the model accepts ``l3: 0``: its 1 MB L2)."""
    node = load_profile("t4-cloud").nodes[0]
    node = dataclasses.replace(node, cpu=dataclasses.replace(node.cpu, caches=dataclasses.replace(node.cpu.caches,
                                                                                                  l3=0)))
    sizes = {line.split(":", 1)[1].strip() for line in cpuinfo(node).splitlines() if line.startswith("cache size")}
    assert sizes == {"1024 KB"}


@pytest.mark.parametrize("profile", ("dgx-h100", "dgx-a100", "t4-cloud"))
def test_an_x86_cluster_is_its_l2_and_its_id_a_number_unique_to_it(rendered: Rendered, profile: str) -> None:
    """On x86 a CPU's cluster is the CPUs that share its L2 (arch/x86/kernel/smpboot.c: cpu_clustergroup_mask is
    cpu_l2c_shared_mask) and ``topology/cluster_id`` is that L2's id (topology_cluster_id: topo.l2c_id, the APIC id
    above the L2's sharing bits, unique in the system), printed as a decimal integer (drivers/base/topology.c,
    ``%d``). So ``cluster_cpus_list`` is the L2's ``shared_cpu_list``, every CPU of a cluster has its id and no
    other cluster has it."""
    (_, node, root), *_ = rendered(profile)
    owner: dict[str, str] = {}
    for c in range(node.cpu.logical_cpus):
        cpu = root / CPUS / f"cpu{c}"
        cluster, ident = _read(cpu / "topology/cluster_cpus_list"), _read(cpu / "topology/cluster_id")
        assert ident.isdigit(), (profile, c, ident)
        assert cluster == _read(cpu / "cache/index2/shared_cpu_list"), (profile, c)
        assert owner.setdefault(ident, cluster) == cluster, (profile, c, ident)


def test_a_cache_its_parts_ways_do_not_divide_still_multiplies_out_to_its_size(fast_tmp: Path) -> None:
    """A profile may give a known part a cache of another size (a t4-cloud node with a 32 MiB L3: 524288 lines,
    which the Cascade Lake's 11 ways do not divide); what the kernel shows still obeys ``size = ways * sets *
    coherency_line_size`` (drivers/base/cacheinfo.c; CPUID leaf 4 is whole sets of whole lines), so the leaf
    shows some associativity that divides it, not the part's 11 with a truncated set count."""
    system = load_profile("t4-cloud")
    node = system.nodes[0]
    node = dataclasses.replace(node, cpu=dataclasses.replace(node.cpu, caches=dataclasses.replace(node.cpu.caches,
                                                                                                  l3=32 * MIB)))
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    index = fast_tmp / node.name / ROOT_DIR / CPUS / "cpu0/cache/index3"
    ways, sets = int(_read(index / "ways_of_associativity")), int(_read(index / "number_of_sets"))
    assert (_read(index / "size"), ways * sets * int(_read(index / "coherency_line_size"))) == ("32768K", 32 * MIB)


def test_a_riscv_harts_uarch_is_a_devicetree_compatible_string(rendered: Rendered) -> None:
    """arch/riscv/kernel/cpu.c (c_show) prints ``uarch`` as the hart's device-tree node's first ``compatible``
    string, and the Devicetree Specification (2.3.1, compatible) has it "manufacturer,model", consisting only of
    lowercase letters, digits and dashes, starting with a letter, the single comma after the vendor prefix."""
    (_, node, root), *_ = rendered("riscv-nvlink-fusion")
    values = {line.split(":", 1)[1].strip() for line in (root / "proc/cpuinfo").read_text().splitlines()
              if line.startswith("uarch")}
    assert len(values) == 1, values
    assert re.fullmatch(r"[a-z][a-z0-9-]*,[a-z][a-z0-9-]*", values.pop()), node.cpu.model
