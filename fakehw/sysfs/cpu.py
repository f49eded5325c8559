"""CPUs: ``/sys/devices/system/cpu`` (topology and caches per CPU) and ``/proc/cpuinfo`` per architecture.

Linux numbers the first thread of every core first and SMT siblings after them (the model's ``Cpu.cpu_id``);
caches L1d/L1i/L2 are per core, L3 per socket or per NUMA node (``l3SharedBy``) or, on a part with one per core
complex (AMD's CCX/CCD), per group of its cores; each cache's associativity, line and sharing are its part's
(fakehw/model/cpu_parts.py). ``/proc/cpuinfo`` follows the
node's architecture: the x86 fields hwloc and lscpu read, arm64's implementer/part lines, and riscv64's
``isa`` string (base ISA then the extensions joined by ``_``), as the kernel prints them.
"""

from __future__ import annotations

from fakehw.model.cpu_parts import DEFAULT_PART, CacheLevel, part_of
from fakehw.model.system import Cpu, Node
from fakehw.model.units import format_cpulist
from fakehw.sysfs.common import RISCV_MMU, cpumask, kb, page_size
from fakehw.sysfs.tree import Section

FALLBACK_WAYS = 16
"""The associativity of a cache whose lines its part's usual one does not divide into whole sets. A cache is whole
KiB (the model refuses anything else: CacheSpec), so 16 lines of 64 bytes divide it: 16 ways always do."""
CPU_DIR = "sys/devices/system/cpu"


def _ways(size: int, level: CacheLevel) -> int:
    """An associativity that divides the cache into whole sets (kernel data always does): the part's, else
    :data:`FALLBACK_WAYS` (a profile that gives a known part caches of another size)."""
    lines = size // level.line
    return level.ways if lines % level.ways == 0 else FALLBACK_WAYS


def _l3_groups(node: Node, cores: int) -> dict[int, tuple[int, ...]]:
    """The CPUs that share each CPU's L3: its socket's or NUMA node's (the profile's ``l3SharedBy``), split into
    groups of ``cores`` consecutive cores (with their SMT siblings) where the part has an L3 per core complex."""
    cpu = node.cpu
    domains: dict[int, tuple[int, ...]] = {}
    if cpu.caches.l3_shared_by == "numa":
        for n in node.numa:
            for c in n.cpus:
                domains[c] = n.cpus
    else:
        for s in range(cpu.sockets):
            members = tuple(sorted(c for c in range(cpu.logical_cpus) if cpu.socket_of(c) == s))
            for c in members:
                domains[c] = members
    if not cores:
        return domains
    # a domain is within one socket (a NUMA node holds one socket's cores), so core numbers tell its groups apart
    return {c: tuple(m for m in members if cpu.core_of(m) // cores == cpu.core_of(c) // cores)
            for c, members in domains.items()}


NR_CPUS = {"amd64": 8192, "arm64": 512, "riscv64": 512}
"""The kernel's CONFIG_NR_CPUS per architecture (``kernel_max`` is NR_CPUS - 1). The fake runs Ubuntu 24.04's 6.8
kernel (``OSRelease`` 6.8.0): its config annotations (debian.master/config/annotations) build amd64 with 8192
(MAXSMP) and arm64, the -64k flavour too, with 512. Their riscv64 kernel has 32, too few for the 64-core host the
RISC-V profile models, so the fake's RISC-V kernel is built with 512, the most arch/riscv/Kconfig allows
(``range 2 512 if !RISCV_SBI_V01``)."""


def kernel_max(arch: str) -> int:
    """``/sys/devices/system/cpu/kernel_max``: the highest CPU number the kernel could ever have."""
    return NR_CPUS[arch] - 1


def boot_cpu_hotpluggable(arch: str) -> bool:
    """Whether cpu0 can go offline, and so has an ``online`` attribute (drivers/base/cpu.c sets offline_disabled
    for a CPU that is not hotpluggable; drivers/base/core.c then shows no ``online``). x86-64 cannot offline its
    boot CPU (arch_cpu_is_hotpluggable: cpu > 0); arm64 marks every CPU PSCI can turn off hotpluggable
    (arch/arm64/kernel/setup.c, cpu_can_disable: no trusted OS is resident on it) and RISC-V every CPU SBI HSM
    can stop (arch/riscv/kernel/setup.c, cpu_has_hotplug), the boot CPU included."""
    return arch != "amd64"


def has_die_files(arch: str) -> bool:
    """Whether ``topology/`` has ``die_id`` and ``die_cpus``: drivers/base/topology.c creates them only under
    TOPOLOGY_DIE_SYSFS, which include/linux/topology.h defines where the architecture defines topology_die_id and
    topology_die_cpumask (Documentation/admin-guide/cputopology.rst). x86 does (asm/topology.h; a package without a
    CPUID die level is die 0); arm64 and riscv64 do not in 6.8."""
    return arch == "amd64"


def cpu_section(node: Node) -> Section:
    cpu = node.cpu
    sec = Section("cpu")
    n = cpu.logical_cpus
    everything = format_cpulist(range(n))
    for name in ("online", "possible", "present"):
        sec.text(f"{CPU_DIR}/{name}", everything)
    sec.text(f"{CPU_DIR}/offline", "")
    sec.text(f"{CPU_DIR}/isolated", "")
    sec.text(f"{CPU_DIR}/kernel_max", kernel_max(cpu.arch))
    sec.text(f"{CPU_DIR}/smt/active", 1 if cpu.threads_per_core > 1 else 0)
    sec.text(f"{CPU_DIR}/smt/control", "on" if cpu.threads_per_core > 1 else "notsupported")
    numa_of = {c: nn.id for nn in node.numa for c in nn.cpus}
    caches = cpu.caches
    part = part_of(cpu.model) or DEFAULT_PART
    l3 = _l3_groups(node, part.l3.cores)
    l3_domain = _l3_groups(node, 0)
    l3_ids: dict[tuple[int, ...], int] = {}
    pkg_cpus = {s: tuple(c for c in range(n) if cpu.socket_of(c) == s) for s in range(cpu.sockets)}
    pkg_mask = {s: (cpumask(v, n), format_cpulist(v)) for s, v in pkg_cpus.items()}
    for c in range(n):
        base = f"{CPU_DIR}/cpu{c}"
        socket = cpu.socket_of(c)
        core = cpu.core_of(c)
        siblings = cpu.thread_siblings(c)
        sib_mask, sib_list = cpumask(siblings, n), format_cpulist(siblings)
        p_mask, p_list = pkg_mask[socket]
        topo = f"{base}/topology"
        sec.text(f"{topo}/physical_package_id", socket)
        sec.text(f"{topo}/core_id", core)
        sec.text(f"{topo}/cluster_id", socket * cpu.cores_per_socket + core)
        groups = [("core_cpus", sib_mask, sib_list), ("thread_siblings", sib_mask, sib_list),
                  ("cluster_cpus", sib_mask, sib_list), ("package_cpus", p_mask, p_list),
                  ("core_siblings", p_mask, p_list)]
        if has_die_files(cpu.arch):  # one die per package: die 0, the package's CPUs
            sec.text(f"{topo}/die_id", 0)
            groups.append(("die_cpus", p_mask, p_list))
        for name, mask, lst in groups:
            sec.text(f"{topo}/{name}", mask)
            sec.text(f"{topo}/{name}_list", lst)
        if c or boot_cpu_hotpluggable(cpu.arch):
            sec.text(f"{base}/online", 1, 0o644)
        if c in numa_of:
            sec.link(f"{base}/node{numa_of[c]}", f"sys/devices/system/node/node{numa_of[c]}")
        sec.link(f"sys/bus/cpu/devices/cpu{c}", base)
        core_index = socket * cpu.cores_per_socket + core
        l3_members = l3.get(c, siblings)
        l3_id = l3_ids.setdefault(l3_members, len(l3_ids))
        # the profile's l3 is its socket's or NUMA node's; a part with an L3 per core complex has a share of it
        l3_size = caches.l3 * len(l3_members) // len(l3_domain.get(c, l3_members))
        index = 0
        for level, kind, size, geometry, shared, cid in (
            (1, "Data", caches.l1d, part.l1d, siblings, core_index),
            (1, "Instruction", caches.l1i, part.l1i, siblings, core_index),
            (2, "Unified", caches.l2, part.l2, siblings, core_index),
            (3, "Unified", l3_size, part.l3, l3_members, l3_id),
        ):
            if not size:
                continue  # no leaf for a cache the CPU lacks; the kernel numbers the leaves it has from 0, no gap
            d = f"{base}/cache/index{index}"
            index += 1
            w = _ways(size, geometry)
            sec.text(f"{d}/level", level)
            sec.text(f"{d}/type", kind)
            sec.text(f"{d}/size", f"{kb(size)}K")
            sec.text(f"{d}/coherency_line_size", geometry.line)
            sec.text(f"{d}/ways_of_associativity", w)
            sec.text(f"{d}/number_of_sets", size // (geometry.line * w))
            sec.text(f"{d}/physical_line_partition", 1)
            sec.text(f"{d}/shared_cpu_map", cpumask(shared, n))
            sec.text(f"{d}/shared_cpu_list", format_cpulist(shared))
            sec.text(f"{d}/id", cid)
    sec.file("proc/cpuinfo", cpuinfo(node))
    return sec


def _x86_cpuinfo(cpu: Cpu, node: Node) -> str:
    flags = " ".join(cpu.isa)
    bogomips = f"{cpu.frequency_mhz * 2:.2f}"
    # show_cpuinfo's "cache size" is x86_cache_size: init_intel_cacheinfo (arch/x86/kernel/cpu/cacheinfo.c) sets it
    # to the L3's leaf 4 size (the L2's where there is no L3); on AMD it stays what cpu_detect_cache_sizes read from
    # CPUID 0x80000006 ECX, the core's L2 (an EPYC 7742 shows 512 KB)
    amd = cpu.vendor == "AuthenticAMD"
    cache_size = kb(cpu.caches.l2 if amd or not cpu.caches.l3 else cpu.caches.l3)
    # CPUID 0x80000008's linear address width (get_cpu_address_sizes): 57 on a CPU with 5-level paging (LA57,
    # which a 5-level kernel shows in the flags), 48 on one without
    virtual_bits = 57 if "la57" in cpu.isa else 48
    out = []
    for c in range(cpu.logical_cpus):
        socket, core = cpu.socket_of(c), cpu.core_of(c)
        apic = socket * 256 + core * 2 + c // cpu.cores
        out.append(
            f"processor\t: {c}\n"
            f"vendor_id\t: {cpu.vendor}\n"
            f"cpu family\t: {cpu.family}\n"
            f"model\t\t: {cpu.model_id}\n"
            f"model name\t: {cpu.model}\n"
            f"stepping\t: {cpu.stepping}\n"
            f"microcode\t: 0x2b000590\n"
            f"cpu MHz\t\t: {cpu.frequency_mhz:.3f}\n"
            f"cache size\t: {cache_size} KB\n"
            f"physical id\t: {socket}\n"
            f"siblings\t: {cpu.cores_per_socket * cpu.threads_per_core}\n"
            f"core id\t\t: {core}\n"
            f"cpu cores\t: {cpu.cores_per_socket}\n"
            f"apicid\t\t: {apic}\n"
            f"initial apicid\t: {apic}\n"
            f"fpu\t\t: yes\n"
            f"fpu_exception\t: yes\n"
            f"cpuid level\t: 32\n"
            f"wp\t\t: yes\n"
            f"flags\t\t: {flags}\n"
            f"bugs\t\t: spectre_v1 spectre_v2 spec_store_bypass swapgs eibrs_pbrsb\n"
            f"bogomips\t: {bogomips}\n"
            f"clflush size\t: 64\n"
            f"cache_alignment\t: 64\n"
            f"address sizes\t: 46 bits physical, {virtual_bits} bits virtual\n"
            f"power management:\n\n"
        )
    return "".join(out)


def _arm_cpuinfo(cpu: Cpu) -> str:
    features = " ".join(cpu.isa)
    block = (f"BogoMIPS\t: 2000.00\nFeatures\t: {features}\nCPU implementer\t: 0x{cpu.family:02x}\n"
             f"CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0x{cpu.model_id:03x}\n"
             f"CPU revision\t: {cpu.stepping}\n\n")
    return "".join(f"processor\t: {c}\n{block}" for c in range(cpu.logical_cpus))


def riscv_isa(cpu: Cpu) -> str:
    """The kernel's ISA string: the base (``rv64imafdcvh``) then every extension, joined by ``_``."""
    if not cpu.isa:
        return "rv64imafdc"
    return "_".join(cpu.isa)


def _riscv_cpuinfo(cpu: Cpu, node: Node) -> str:
    isa = riscv_isa(cpu)
    vendor = cpu.vendor.lower().replace(" ", "-")
    out = []
    for c in range(cpu.logical_cpus):
        out.append(
            f"processor\t: {c}\n"
            f"hart\t\t: {c}\n"
            f"isa\t\t: {isa}\n"
            f"mmu\t\t: {RISCV_MMU}\n"
            f"uarch\t\t: {vendor},{cpu.model.split(' ')[0]}\n"
            f"mvendorid\t: 0x{cpu.family:x}\n"
            f"marchid\t\t: 0x{cpu.model_id:x}\n"
            f"mimpid\t\t: 0x{cpu.stepping:x}\n"
            f"hart isa\t: {isa}\n\n"
        )
    return "".join(out)


def cpuinfo(node: Node) -> str:
    cpu = node.cpu
    if cpu.arch == "amd64":
        return _x86_cpuinfo(cpu, node)
    if cpu.arch == "arm64":
        return _arm_cpuinfo(cpu)
    return _riscv_cpuinfo(cpu, node)


UNAME_MACHINE = {"amd64": "x86_64", "arm64": "aarch64", "riscv64": "riscv64"}


def hwloc_info(node: Node) -> str:
    """``/proc/hwloc-nofile-info``: what hwloc-gather-topology saves for an offline root (uname, page size), so
    hwloc reading this tree with HWLOC_FSROOT parses cpuinfo for the node's architecture, not the host's."""
    page = page_size(node.cpu.arch)
    return (f"OSName: Linux\nOSRelease: 6.8.0-fakehw\nOSVersion: #1 SMP fakehw\nHostName: {node.hostname}\n"
            f"Architecture: {UNAME_MACHINE[node.cpu.arch]}\nFallbackNbProcessors: {node.cpu.logical_cpus}\n"
            f"PageSize: {page}\n")
