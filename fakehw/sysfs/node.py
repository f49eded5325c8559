"""NUMA: ``/sys/devices/system/node`` and ``/proc/meminfo``.

Every NUMA node of the model is present (as on GH200, whose reserved nodes show with no memory). Its CPUs,
distances (row N of the model's SLIT) and firmware HMAT access figures (``accessN/initiators``: MB/s and ns from
the nearest CPU nodes, with a link to each) never change, so they are a static section; memory is runtime state (a
CXL memdev going offline takes its regions' memory out of their node, a region created at run time adds it) and
lives in a dynamic section with what depends on it: ``has_memory``, ``meminfo``, ``numastat``, and a CXL node's
access figures, which the CXL driver sets when a region's memory comes online and which carry no initiator link
(firmware's HMAT describes no CXL window; drivers/acpi/numa/hmat.c updates generic targets' attributes only).

HMAT figures are shown only where the kernel has them (:func:`fakehw.sysfs.memory.hmat_performance`): CPU nodes
and coherent GPU memory when the firmware publishes an HMAT, not MIG-reserved nodes nor empty CXL windows (whose
figures made hwloc 2.12 take the DRAM node for HBM). A CPU-less node's initiators are the CPU nodes nearest to it:
the GPU's node for HBM, else the closest by distance (every one of them on a tie).
"""
from __future__ import annotations

from collections.abc import Mapping

from fakehw.model.system import Cpu, Initiator, Node, NumaNode
from fakehw.model.units import format_cpulist
from fakehw.sysfs.common import (
    RISCV_MMU,
    cpumask,
    default_hugepage_kb,
    hugepage_sizes_kb,
    kb,
    meminfo_line,
    page_size,
)
from fakehw.sysfs.memory import hmat_performance
from fakehw.sysfs.tree import Section

NODE_DIR = "sys/devices/system/node"


def initiators_of(node: Node, numa: NumaNode) -> tuple[int, ...]:
    """The CPU nodes whose CPUs reach ``numa`` best: itself when it has CPUs, the GPU's node for its HBM, else the
    CPU nodes nearest by distance, all of them when several are as near (drivers/acpi/numa/hmat.c,
    hmat_register_target_initiators, links every initiator with the best figures). CXL nodes get none (their
    figures come from the CXL driver, without initiator links). Never empty: every CPU is in a NUMA node (the model
    refuses a CPU in none) and a node's distance row covers every node, so some CPU node is nearest."""
    if numa.cpus:
        return (numa.id,)
    if numa.kind == "hbm" and numa.gpu is not None:
        gpu = node.gpu(numa.gpu)
        if gpu is not None:
            return (gpu.numa,)
    ids = [n.id for n in node.numa]
    row = node.distances[ids.index(numa.id)]
    near = [(dist, other.id) for other, dist in zip(node.numa, row, strict=False) if other.cpus]
    best = min((dist for dist, _ in near), default=None)
    return tuple(i for dist, i in near if dist == best)


def node_static_section(node: Node) -> Section:
    """Every NUMA node's CPUs, ``distance`` row and firmware HMAT figures. ``node.distances`` is square over
    ``node.numa`` (the model synthesizes the rows when a profile gives none and refuses a matrix that is not), so
    row i is node i's SLIT row."""
    sec = Section("node-static")
    ncpu = node.cpu.logical_cpus
    ids = [n.id for n in node.numa]
    every = format_cpulist(ids)
    sec.text(f"{NODE_DIR}/possible", every)
    sec.text(f"{NODE_DIR}/online", every)
    sec.text(f"{NODE_DIR}/has_cpu", format_cpulist(n.id for n in node.numa if n.cpus))
    sec.text(f"{NODE_DIR}/has_generic_initiator", "")
    for i, n in enumerate(node.numa):
        d = f"{NODE_DIR}/node{n.id}"
        sec.text(f"{d}/cpumap", cpumask(n.cpus, ncpu))
        sec.text(f"{d}/cpulist", format_cpulist(n.cpus))
        row = node.distances[i]
        sec.text(f"{d}/distance", " ".join(str(x) for x in row))
        for c in n.cpus:
            sec.link(f"{d}/cpu{c}", f"sys/devices/system/cpu/cpu{c}")
        for size in hugepage_sizes_kb(node.cpu.arch):
            for name in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
                sec.text(f"{d}/hugepages/hugepages-{size}kB/{name}", 0, 0o644 if name == "nr_hugepages" else 0o444)
        sec.link(f"sys/bus/node/devices/node{n.id}", d)
        perf = hmat_performance(node, n, n.memory)
        if perf is None or n.kind == "cxl":
            continue  # CXL nodes get their figures from the CXL driver when memory comes online: dynamic
        _access_files(sec, d, perf)
        for access, init in ((a, i) for a in ACCESS_CLASSES for i in initiators_of(node, n)):
            sec.link(f"{d}/{access}/initiators/node{init}", f"{NODE_DIR}/node{init}")
            sec.link(f"{NODE_DIR}/node{init}/{access}/targets/node{n.id}", d)
    return sec


ACCESS_CLASSES = ("access0", "access1")


def _access_files(sec: Section, d: str, perf: Initiator) -> None:
    for access in ACCESS_CLASSES:
        base = f"{d}/{access}/initiators"
        sec.text(f"{base}/read_bandwidth", perf.read_bandwidth_mbs)
        sec.text(f"{base}/write_bandwidth", perf.write_bandwidth_mbs)
        sec.text(f"{base}/read_latency", perf.read_latency_ns)
        sec.text(f"{base}/write_latency", perf.write_latency_ns)


def thread_size(arch: str) -> int:
    """Bytes of a task's kernel stack (THREAD_SIZE), the unit ``KernelStack`` grows by: 16 KiB on x86-64
    (asm/page_64_types.h, THREAD_SIZE_ORDER 2) and riscv64 (asm/thread_info.h, THREAD_SIZE_ORDER 2); one page on
    arm64 with 64 KiB pages (asm/memory.h: a vmapped stack is at least a page, THREAD_SHIFT = PAGE_SHIFT)."""
    return max(16384, page_size(arch))


PTE_BYTES = 8
"""Bytes of one page-table entry: 64-bit descriptors on x86-64 (SDM vol. 3A 4.5), arm64 (VMSAv8-64) and RISC-V
Sv39/Sv48/Sv57 (the privileged spec's 8-byte PTEs), so a one-page table holds ``page // 8`` entries: 512 with 4 KiB
pages, 8192 with arm64's 64 KiB granule."""


def counted_table_levels(cpu: Cpu) -> int:
    """Levels of user page tables ``PageTables`` counts. It is NR_PAGETABLE, which 6.8 adds in the constructors of
    the PTE, PMD and PUD levels (include/linux/mm.h: pagetable_pte_ctor, pagetable_pmd_ctor, pagetable_pud_ctor);
    the top level comes with the mm (pgd_alloc: __get_free_pages on x86 and riscv, a kmem_cache object on arm64
    64K) and x86's and riscv's P4D from get_zeroed_page (p4d_alloc_one), neither through those. x86-64 walks 4 or
    5 levels (SDM vol. 3A 4.5) and RISC-V Sv48/Sv57 4 or 5 (the fake's harts run Sv57, RISCV_MMU), so all three
    are below the top; arm64 with a 64 KiB granule and 48-bit VAs walks 3 (PGD, PMD, PTE: the PUD folded), so
    two."""
    return 2 if cpu.arch == "arm64" else 3


def page_table_pages(mapped: int, page: int, levels: int) -> int:
    """Page-table pages ``PageTables`` counts for ``mapped`` pages mapped with base-page entries (the fake has no
    transparent huge page: ``AnonHugePages``, ``FilePmdMapped`` 0): the fake maps a node's pages as one dense range,
    so each of the ``levels`` counted levels holds just enough tables for the entries below it (ceil(n / entries)
    leaves, then ceil of that / entries, ...)."""
    entries = page // PTE_BYTES
    total, tables = 0, mapped
    for _ in range(levels):
        tables = -(-tables // entries)
        total += tables
    return total


def _numastat(numa: NumaNode, total: int, page: int) -> str:
    """``nodeN/numastat`` (drivers/base/node.c): page allocation counters; the fake kernel's pages are local."""
    pages = _used(numa, total) // page
    counters = (("numa_hit", pages), ("numa_miss", 0), ("numa_foreign", 0), ("interleave_hit", 0),
                ("local_node", pages), ("other_node", 0))
    return "".join(f"{name} {value}\n" for name, value in counters)


def _used(numa: NumaNode, total: int) -> int:
    """Memory the (fake) kernel and page cache hold: 2% of a node with CPUs, nothing on CPU-less nodes."""
    return total // 50 if numa.cpus else 0


def node_dynamic_section(node: Node, memory: Mapping[int, int]) -> Section:
    """``has_memory``, each node's ``meminfo``/``numastat`` and ``/proc/meminfo``. Memory is counted in whole
    pages, as the kernel does (a node's managed pages; the machine's totals are its nodes' summed). The used pages
    split so the counters relate as the kernel's do: the page cache (``FilePages``; the machine's ``Cached`` plus
    ``Buffers``) is the file LRU lists and ``Shmem`` (every page-cache folio goes onto an LRU list, mm/filemap.c
    filemap_add_folio; on a machine at rest none is in flight), the anon LRU lists hold the anonymous pages and
    ``Shmem``, and everything allocated fits in what is used."""
    sec = Section("node-memory")
    page = page_size(node.cpu.arch)
    # N_MEMORY is a node with present pages (mm/mm_init.c, free_area_init: node_present_pages), so less than a page
    # of memory is none, as its MemTotal of 0 kB says
    with_memory = [n.id for n in node.numa if memory.get(n.id, 0) >= page]
    normal = [n.id for n in node.numa if n.id in with_memory and n.kind in ("dram", "lpddr")]
    sec.text(f"{NODE_DIR}/has_memory", format_cpulist(with_memory))
    sec.text(f"{NODE_DIR}/has_normal_memory", format_cpulist(normal))
    k = kb(page)
    stack = thread_size(node.cpu.arch) // page  # pages of one kernel stack: KernelStack counts whole stacks
    levels = counted_table_levels(node.cpu)
    machine: dict[str, int] = {}
    for n in node.numa:
        total = memory.get(n.id, 0)
        pages, used = total // page, _used(n, total) // page
        anon, mapped = used // 8 + used // 16 - used // 64, used // 32  # the user pages page tables map
        p = f"Node {n.id} "
        lines = [
            ("MemTotal", pages), ("MemFree", pages - used), ("MemUsed", used), ("SwapCached", 0),
            ("Active", used // 2), ("Inactive", used // 4), ("Active(anon)", used // 8),
            ("Inactive(anon)", used // 16), ("Active(file)", used // 2 - used // 8),
            ("Inactive(file)", used // 4 - used // 16), ("Unevictable", 0), ("Mlocked", 0), ("Dirty", 0),
            ("Writeback", 0), ("FilePages", used // 2 - used // 8 + used // 4 - used // 16 + used // 64),
            ("Mapped", mapped), ("AnonPages", anon), ("Shmem", used // 64),
            ("KernelStack", used // 256 // stack * stack),
            ("PageTables", page_table_pages(anon + mapped, page, levels)),
            ("SecPageTables", 0),
            ("NFS_Unstable", 0), ("Bounce", 0),
            ("WritebackTmp", 0), ("KReclaimable", used // 16), ("Slab", used // 10),
            ("SReclaimable", used // 16), ("SUnreclaim", used // 10 - used // 16),
            ("AnonHugePages", 0), ("ShmemHugePages", 0), ("ShmemPmdMapped", 0), ("FileHugePages", 0),
            ("FilePmdMapped", 0),
        ]
        for label, value in lines:
            machine[label] = machine.get(label, 0) + value
        text = "".join(meminfo_line(label, value * k, p) for label, value in lines)
        text += "".join(meminfo_line(label, 0, p, unit=False)
                        for label in ("HugePages_Total", "HugePages_Free", "HugePages_Surp"))
        sec.file(f"{NODE_DIR}/node{n.id}/meminfo", text)
        sec.file(f"{NODE_DIR}/node{n.id}/numastat", _numastat(n, total, page))
        perf = hmat_performance(node, n, total)
        if n.kind == "cxl" and perf is not None:
            # What the CXL driver sets once a region's memory is online (cxl_region_update_coordinates): the
            # figures, no initiator links (those come from firmware HMAT, which knows nothing of CXL windows).
            _access_files(sec, f"{NODE_DIR}/node{n.id}", perf)
    sec.file("proc/meminfo", proc_meminfo(machine, page, node.cpu))
    return sec


X86_VMALLOC_TOTAL_KB = {4: 32 * 2**30 - 1, 5: 12800 * 2**30 - 1}
"""x86-64's ``VmallocTotal`` (VMALLOC_TOTAL >> 10) with 4- and 5-level paging: the vmalloc/ioremap space is 32 TB
and 12.5 PB (Documentation/arch/x86/x86_64/mm.rst); the kernel pages with 5 levels where the CPU has LA57."""
ARM64_VMALLOC_TOTAL_KB = (2**64 - 2**38 - 2**28 - (2**64 - 2**47 + 2**31)) >> 10
"""arm64's ``VmallocTotal`` with 64 KiB pages and 48-bit VAs (Ubuntu 24.04's -64k kernel: ARM64_VA_BITS 48): the
vmalloc area runs from MODULES_END (the 2 GiB module area above _PAGE_END(48), 6.5 on) to VMEMMAP_START less
256 MiB, VMEMMAP_START being -(1 << (VA_BITS - (PAGE_SHIFT - STRUCT_PAGE_MAX_SHIFT))) = -(1 << 38)
(arch/arm64/include/asm/memory.h, pgtable.h): 137168158720 kB. (With 4 KiB pages VMEMMAP_START is -(1 << 42),
Documentation/arch/arm64/memory.rst's 124 TB vmalloc line, and real 6.x machines print 133141626880 kB.)"""
RISCV_VMALLOC_TOTAL_KB = {"sv39": 2**26, "sv48": 2**35, "sv57": 2**44}
"""RISC-V's ``VmallocTotal`` per paging mode: VMALLOC_SIZE is a quarter of the kernel half of the address space and
VMALLOC_END is PAGE_OFFSET itself (arch/riscv/include/asm/pgtable.h), so the sizes are exact: 64 GB, 32 TB and
16 PB (Documentation/arch/riscv/vm-layout.rst's vmalloc/ioremap lines; sv39 boards print 67108864 kB). The
kernel uses the widest mode the hart has, the ``mmu`` line of /proc/cpuinfo."""


PERCPU_UNIT = 256 * 1024
"""Populated per-CPU memory of each possible CPU (``Percpu`` is pcpu_nr_pages: populated pages times units, one
unit per possible CPU, mm/percpu.c). The first chunk is always populated: distributions' x86 kernels log
``percpu: Embedded 63 pages/cpu`` at boot (some 256 KiB with what modules add), so never 0."""


def vmalloc_total_kb(cpu: Cpu) -> int:
    """``VmallocTotal`` (VMALLOC_TOTAL >> 10, fs/proc/meminfo.c) of the node's kernel."""
    if cpu.arch == "amd64":
        return X86_VMALLOC_TOTAL_KB[5 if "la57" in cpu.isa else 4]
    if cpu.arch == "arm64":
        return ARM64_VMALLOC_TOTAL_KB
    return RISCV_VMALLOC_TOTAL_KB[RISCV_MMU]


def proc_meminfo(nodes: Mapping[str, int], page: int, cpu: Cpu) -> str:
    """``/proc/meminfo`` of a machine whose nodes' meminfo counters sum to ``nodes`` (in pages). The node counters
    are those sums (global_node_page_state adds the nodes' vmstat), ``Cached`` the summed page cache (FilePages)
    less ``Buffers`` and the swap cache, as fs/proc/meminfo.c computes it. Page counts are printed as
    fs/proc/meminfo.c does (``pages << (PAGE_SHIFT - 10)``: whole pages in kB); VmallocTotal and x86's DirectMap
    lines are in their own units (bytes >> 10; 4 KiB, 2 MiB and 1 GiB mappings). Only x86 reports its direct map
    (arch_report_meminfo, arch/x86/mm/pat/set_memory.c); arm64 and RISC-V print no DirectMap lines.
    ``VmallocUsed`` is vmalloc_nr_pages() (since 5.3; mm/vmalloc.c counts every page __vmalloc_area_node maps);
    with CONFIG_VMAP_STACK, the default on x86-64, arm64 and riscv64, every task's kernel stack is such an
    allocation (kernel/fork.c alloc_thread_stack_node), so it holds at least ``KernelStack``: the fake has no other
    vmalloc user and shows exactly that. ``VmallocChunk`` has printed 0 since 4.4."""
    total, free = nodes["MemTotal"], nodes["MemFree"]
    used = total - free
    buffers = used // 64

    def summed(*labels: str) -> list[tuple[str, int]]:
        return [(label, nodes[label]) for label in labels]

    lines = [
        ("MemTotal", total), ("MemFree", free), ("MemAvailable", free + used // 2), ("Buffers", buffers),
        ("Cached", nodes["FilePages"] - buffers), ("SwapCached", 0),
        *summed("Active", "Inactive", "Active(anon)", "Inactive(anon)", "Active(file)", "Inactive(file)",
                "Unevictable", "Mlocked"),
        ("SwapTotal", 0), ("SwapFree", 0), ("Zswap", 0), ("Zswapped", 0),
        *summed("Dirty", "Writeback", "AnonPages", "Mapped", "Shmem", "KReclaimable", "Slab", "SReclaimable",
                "SUnreclaim", "KernelStack", "PageTables", "SecPageTables", "NFS_Unstable", "Bounce", "WritebackTmp"),
        ("CommitLimit", total // 2), ("Committed_AS", used // 4),
    ]
    k = kb(page)
    text = "".join(meminfo_line(label, value * k) for label, value in lines)
    x86 = cpu.arch == "amd64"
    text += meminfo_line("VmallocTotal", vmalloc_total_kb(cpu))
    text += "".join(meminfo_line(label, value * k) for label, value in (
        ("VmallocUsed", nodes["KernelStack"]), ("VmallocChunk", 0), ("Percpu", cpu.logical_cpus * PERCPU_UNIT // page),
        ("HardwareCorrupted", 0),
        *summed("AnonHugePages", "ShmemHugePages", "ShmemPmdMapped", "FileHugePages", "FilePmdMapped")))
    text += "".join(meminfo_line(label, 0, unit=False)
                    for label in ("HugePages_Total", "HugePages_Free", "HugePages_Rsvd", "HugePages_Surp"))
    text += meminfo_line("Hugepagesize", default_hugepage_kb(page)) + meminfo_line("Hugetlb", 0)
    if x86:  # the direct map: the first GiB in 4 KiB pages (1048576 kB), the rest half in 2 MiB, half in 1 GiB pages
        gib = (total * page) >> 30
        text += meminfo_line("DirectMap4k", 1048576) + meminfo_line("DirectMap2M", (gib - gib // 2) << 20) \
            + meminfo_line("DirectMap1G", (gib // 2) << 20)
    return text
