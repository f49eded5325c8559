"""Memory as the kernel's hotplug and tiering code present it: memory blocks and memory tiers.

Memory blocks (``/sys/devices/system/memory``, Documentation/admin-guide/mm/memory-hotplug.rst): physical memory
in blocks of ``block_size_bytes`` (hex), each ``memoryN`` (N = physical address / block size) with ``phys_index``,
``state`` and ``online``, ``valid_zones``, ``removable``, ``phys_device`` and a ``nodeM`` link, linked from its
NUMA node as ``nodeM/memoryN``. The block size is the kernel's for the architecture: 2 GiB on x86 servers with
64 GiB or more (arch/x86/mm/init_64.c, probe_memory_block_size), 512 MiB on arm64 with 64 KiB pages (its
SECTION_SIZE_BITS of 29; GB200 trays run 64 KiB pages), 128 MiB on riscv64.

Where memory sits in physical address space (:func:`boot_ranges`): boot RAM of every NUMA node in node order
from address 0, around the x86 32-bit MMIO hole (2-4 GiB, where the PCI BARs of :mod:`fakehw.sysfs.pcilayout`
are) and around the CXL fixed memory windows; GPU memory of coherent platforms (GH200/GB200 HBM, onlined
movable by the NVIDIA driver) above all of it. CXL RAM comes and goes with regions at run time: its blocks are
the region's host physical range in its window (:func:`hotplug_ranges`), added by dax kmem when the region is
active and each ``online`` or ``offline`` as daxctl leaves it (``offline`` below: block numbers).

Memory tiers (``/sys/devices/virtual/memory_tiering/memory_tierN/nodelist``, mm/memory-tiers.c): every node with
memory gets an abstract distance; tier N holds the nodes whose distance is in [N*128, N*128+128)
(MEMTIER_CHUNK_BITS 7). Default DRAM is 576 (tier 4). With HMAT performance for the nodes that have CPUs, a node
with HMAT (or CXL-computed) performance gets DRAM * latency ratio * bandwidth ratio (mt_perf_to_adistance, in the
kernel's unsigned 32-bit arithmetic); dax kmem memory without it gets 5 x DRAM (2880, tier 22). Nodes without
memory (MIG-reserved GPU nodes, empty CXL windows) are in no tier.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from fakehw.agent.cxl import NodeCxlView, window_bases
from fakehw.model.memblock import block_size, kmem_blocks
from fakehw.model.system import Initiator, Node, NumaNode
from fakehw.model.units import format_cpulist
from fakehw.sysfs.tree import Section

MEMORY_DIR = "sys/devices/system/memory"
NODE_DIR = "sys/devices/system/node"
TIER_DIR = "sys/devices/virtual/memory_tiering"
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
MEMTIER_CHUNK_BITS = 7
MEMTIER_ADISTANCE_DRAM = (4 << MEMTIER_CHUNK_BITS) + (1 << (MEMTIER_CHUNK_BITS - 1))
"""576: include/linux/memory-tiers.h."""
MEMTIER_DEFAULT_DAX_ADISTANCE = MEMTIER_ADISTANCE_DRAM * 5
"""2880: drivers/dax/kmem.c, for kmem memory no algorithm can place."""
X86_MMIO_HOLE = (2 * GiB, 4 * GiB)
Zone = Literal["Normal", "Movable"]


@dataclass(frozen=True, slots=True)
class MemoryRange:
    """Physical memory of one NUMA node: ``[start, start + size)``, in ``zone`` once online."""

    numa: int
    start: int
    size: int
    zone: Zone
    source: str
    """``boot``, ``gpu:<name>`` or ``cxl:<region>``."""

    def blocks(self, block: int) -> range:
        return range(self.start // block, (self.start + self.size + block - 1) // block)


def _reserved(node: Node) -> list[tuple[int, int]]:
    """Physical ranges RAM never occupies: the x86 MMIO hole and the CXL windows."""
    out = [X86_MMIO_HOLE] if node.cpu.arch == "amd64" else []
    bases = window_bases(node.cxl)
    out += [(bases[w.name], bases[w.name] + w.size) for w in node.cxl.windows]
    return sorted(out)


def _place(size: int, cursor: int, reserved: list[tuple[int, int]], block: int) -> tuple[list[tuple[int, int]], int]:
    """``size`` bytes from ``cursor`` on, in pieces that skip the reserved ranges; returns pieces and end."""
    pieces: list[tuple[int, int]] = []
    left = -(-size // block) * block
    while left > 0:
        cursor = -(-cursor // block) * block
        clash = next(((lo, hi) for lo, hi in reserved if lo < cursor + left and hi > cursor), None)
        if clash is None:
            pieces.append((cursor, left))
            return pieces, cursor + left
        lo, hi = clash
        if lo > cursor:
            piece = (lo - cursor) // block * block
            if piece:
                pieces.append((cursor, piece))
                left -= piece
        cursor = hi
    return pieces, cursor


def boot_ranges(node: Node) -> tuple[MemoryRange, ...]:
    """Boot RAM and coherent GPU memory of the node, in physical address order."""
    block = block_size(node)
    reserved = _reserved(node)
    out: list[MemoryRange] = []
    cursor = 0
    for n in node.numa:
        if n.kind in ("dram", "lpddr") and n.memory:
            pieces, cursor = _place(n.memory, cursor, reserved, block)
            out += [MemoryRange(n.id, s, size, "Normal", "boot") for s, size in pieces]
    top = max([cursor, *(hi for _, hi in reserved)])
    cursor = -(-top // TiB) * TiB
    for n in node.numa:
        if n.kind == "hbm" and n.memory:
            pieces, cursor = _place(n.memory, cursor, reserved, block)
            out += [MemoryRange(n.id, s, size, "Movable", f"gpu:{n.gpu}") for s, size in pieces]
    return tuple(out)


def hotplug_ranges(node: Node, view: NodeCxlView) -> tuple[tuple[MemoryRange, frozenset[int]], ...]:
    """CXL RAM that dax kmem added: every active RAM region bound to kmem with a target NUMA node, at its window
    address shrunk to whole blocks, with the numbers of its blocks that are offline (bit i of the region's
    ``online`` is the i-th block)."""
    bases = window_bases(node.cxl)
    block = block_size(node)
    out = []
    for rv in view.regions:
        r = rv.region
        if not (rv.active and r.mode == "ram" and r.dax == "kmem" and rv.target_node is not None
                and r.window in bases):
            continue
        span = kmem_blocks(bases[r.window] + r.hpa_offset, r.size, block)
        if not span:
            continue
        offline = frozenset(n for i, n in enumerate(span) if not r.online >> i & 1)
        out.append((MemoryRange(rv.target_node, span.start * block, len(span) * block, "Movable", f"cxl:{r.name}"),
                    offline))
    return tuple(sorted(out, key=lambda m: m[0].start))


def _zone_name(node: Node, r: MemoryRange, index: int, block: int) -> str:
    """What an online block's ``valid_zones`` shows: its zone; a block spanning DMA and DMA32 shows none."""
    if r.zone == "Movable":
        return "Movable"
    end = (index + 1) * block
    if node.cpu.arch == "amd64":
        if index * block < 16 * MiB:
            return "none"
        if end <= 4 * GiB:
            return "DMA32"
    elif end <= 4 * GiB:
        return "DMA"
    return "Normal"


def block_files(sec: Section, node: Node, r: MemoryRange, offline: Collection[int] = ()) -> None:
    """The ``memoryN`` directories of ``r`` and their node links. A GB200 tray has some 3,400 blocks (512 MiB of
    1.7 TB), so a block carries what lsmem, chmem and daxctl read (state, online, valid_zones, removable,
    phys_index, its node) and not the attributes nothing reads here (phys_device, uevent, the subsystem and
    /sys/bus/memory links): each entry costs every node of a fleet a file."""
    block = block_size(node)
    for index in r.blocks(block):
        d = f"{MEMORY_DIR}/memory{index}"
        online = index not in offline
        sec.text(f"{d}/phys_index", f"{index:08x}")
        sec.text(f"{d}/removable", 1)
        sec.text(f"{d}/state", "online" if online else "offline", 0o644)
        sec.text(f"{d}/online", 1 if online else 0, 0o644)
        sec.text(f"{d}/valid_zones", _zone_name(node, r, index, block) if online else "Normal Movable")
        sec.link(f"{d}/node{r.numa}", f"{NODE_DIR}/node{r.numa}")
        sec.link(f"{NODE_DIR}/node{r.numa}/memory{index}", d)


def memory_static_section(node: Node) -> Section:
    """Block size, the onlining policy and the blocks of boot RAM and GPU memory (never changing)."""
    sec = Section("memory-static")
    sec.text(f"{MEMORY_DIR}/block_size_bytes", f"{block_size(node):x}")
    hotplug = any(n.kind in ("hbm", "cxl") for n in node.numa)
    # CXL hosts: the profile's policy (cxl.hotplugOnline; the agent hot-adds by it). Otherwise coherent GPU
    # memory is onlined movable (NVIDIA's guidance), and the kernel's default is offline.
    policy = node.cxl.hotplug_online if node.cxl.windows else "online_movable" if hotplug else "offline"
    sec.text(f"{MEMORY_DIR}/auto_online_blocks", policy, 0o644)
    for r in boot_ranges(node):
        block_files(sec, node, r)
    return sec


def memory_dynamic_section(node: Node, view: NodeCxlView, memory: Mapping[int, int]) -> Section:
    """CXL memory blocks now (online or offline as daxctl or a write to ``state`` left them) and the memory
    tiers."""
    sec = Section("memory")
    for r, offline in hotplug_ranges(node, view):
        block_files(sec, node, r, offline)
    for tier, nodes in sorted(memory_tiers(node, memory).items()):
        sec.text(f"{TIER_DIR}/memory_tier{tier}/nodelist", format_cpulist(nodes))
        sec.link(f"{TIER_DIR}/memory_tier{tier}/subsystem", "sys/bus/memory_tiering")
        sec.link(f"sys/bus/memory_tiering/devices/memory_tier{tier}", f"{TIER_DIR}/memory_tier{tier}")
    sec.text("sys/kernel/mm/numa/demotion_enabled", "false", 0o644)
    return sec


# --------------------------------------------------------------------------------------------------- tiers


def hmat_performance(node: Node, numa: NumaNode, memory: int) -> Initiator | None:
    """The access performance the kernel knows for a node: firmware HMAT for nodes with CPUs and for coherent GPU
    memory; for CXL memory, what the CXL driver computes (CDAT and the link, which needs the HMAT's generic port)
    once a region is online in it. Nothing without an HMAT."""
    perf = numa.initiator
    if not node.hmat:
        return None
    if not (perf.read_bandwidth_mbs or perf.write_bandwidth_mbs) or not (perf.read_latency_ns or
                                                                         perf.write_latency_ns):
        return None
    if numa.kind == "reserved" or (numa.kind == "cxl" and not memory):
        return None
    return perf


def _u32(value: int) -> int:
    return value & 0xFFFF_FFFF


def perf_to_adistance(perf: Initiator, dram: Initiator) -> int:
    """mt_perf_to_adistance: DRAM * (latency / DRAM latency) * (DRAM bandwidth / bandwidth), evaluated as C does
    with unsigned 32-bit operands (left to right) and the result stored in an int."""
    value = _u32(MEMTIER_ADISTANCE_DRAM * (perf.read_latency_ns + perf.write_latency_ns))
    value //= dram.read_latency_ns + dram.write_latency_ns
    value = _u32(value * (dram.read_bandwidth_mbs + dram.write_bandwidth_mbs))
    value //= perf.read_bandwidth_mbs + perf.write_bandwidth_mbs
    return value - (1 << 32) if value >= 1 << 31 else value


def default_dram_performance(node: Node, memory: Mapping[int, int]) -> Initiator | None:
    """mt_set_default_dram_perf over the nodes with CPUs and memory: the first one's HMAT performance, or None
    when they have none or differ by more than 10% (the kernel then disables performance-based distances)."""
    ref: Initiator | None = None
    for n in node.numa:
        if not (n.cpus and memory.get(n.id, 0)):
            continue
        perf = hmat_performance(node, n, memory.get(n.id, 0))
        if perf is None:
            continue
        if ref is None:
            ref = perf
            continue
        pairs = ((perf.read_latency_ns, ref.read_latency_ns), (perf.write_latency_ns, ref.write_latency_ns),
                 (perf.read_bandwidth_mbs, ref.read_bandwidth_mbs),
                 (perf.write_bandwidth_mbs, ref.write_bandwidth_mbs))
        if any(abs(a - b) * 10 > b for a, b in pairs):
            return None
    return ref


def abstract_distance(node: Node, numa: NumaNode, memory: int, dram: Initiator | None) -> int:
    """The node's abstract distance as the kernel assigns it when its memory comes online."""
    base = MEMTIER_DEFAULT_DAX_ADISTANCE if numa.kind == "cxl" else MEMTIER_ADISTANCE_DRAM
    perf = hmat_performance(node, numa, memory)
    if dram is None or perf is None:
        return base
    return perf_to_adistance(perf, dram)


def memory_tiers(node: Node, memory: Mapping[int, int]) -> dict[int, tuple[int, ...]]:
    """Tier id -> the NUMA nodes in it, for the nodes with memory now."""
    dram = default_dram_performance(node, memory)
    tiers: dict[int, list[int]] = {}
    for n in node.numa:
        if memory.get(n.id, 0) > 0:
            adist = max(0, abstract_distance(node, n, memory[n.id], dram))  # absurd HMAT figures cannot go below 0
            tiers.setdefault(adist >> MEMTIER_CHUNK_BITS, []).append(n.id)
    return {t: tuple(ids) for t, ids in tiers.items()}
