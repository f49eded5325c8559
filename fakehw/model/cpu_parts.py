"""The cache geometry of the CPU parts the profiles name, declared once per part from the vendor's public documents.

A profile says how big a node's caches are (``cpu.caches``); what the kernel also shows for each cache leaf in
``/sys/devices/system/cpu/cpuN/cache/indexM`` (Documentation/ABI/testing/sysfs-devices-system-cpu:
``ways_of_associativity``, ``coherency_line_size``, ``number_of_sets``, ``shared_cpu_list``) is a property of the
part, not of the profile, so it is declared here, keyed by the model name ``/proc/cpuinfo`` shows. The kernel's
figures obey ``size = ways * sets * line`` (x86: CPUID leaf 4, arch/x86/kernel/cpu/cacheinfo.c; arm64 ACPI PPTT and
riscv device-tree cache nodes: drivers/base/cacheinfo.c), so ``sets`` is derived, never declared.

A part not listed here is rendered with :data:`DEFAULT_PART`'s associativity (a Golden Cove's, what every part got
before parts were told apart).
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True, slots=True)
class CacheLevel:
    """One cache of a part: the size of one instance, its associativity and line, and how many cores share it."""

    size: int
    """Bytes in one instance of the cache (one core's L2, one CCX's L3)."""
    ways: int
    line: int = 64
    cores: int = 1
    """Cores that share one instance: 1 for a private cache, 4 for a Zen 2 CCX's L3; 0 for the profile's L3 domain
    (a socket, or a NUMA node with ``l3SharedBy: numa``)."""

    @property
    def sets(self) -> int:
        """``number_of_sets``: the kernel's size / (ways * line), whole when the part's figures are right."""
        return self.size // (self.ways * self.line)


@dataclass(frozen=True, slots=True)
class CpuPart:
    """A CPU part's four caches, and the ``/proc/cpuinfo`` model names it goes by."""

    models: tuple[str, ...]
    l1d: CacheLevel
    l1i: CacheLevel
    l2: CacheLevel
    l3: CacheLevel


# Intel 64 and IA-32 Architectures Optimization Reference Manual (order no. 248966), "Cache parameters" tables of
# each core: Golden Cove (Sapphire Rapids) and Raptor Cove (Emerald Rapids) L1D 48 KB 12-way, L1I 32 KB 8-way,
# server L2 2 MB 16-way; Redwood Cove (Granite Rapids) L1I 64 KB 16-way; Skylake Server / Cascade Lake L1D and L1I
# 32 KB 8-way, L2 1 MB 16-way, L3 1.375 MB per core 11-way. 64-byte lines throughout.
_GOLDEN_COVE_L1D = CacheLevel(48 * KIB, 12)
_GOLDEN_COVE_L1I = CacheLevel(32 * KIB, 8)
_GOLDEN_COVE_L2 = CacheLevel(2 * MIB, 16)

SAPPHIRE_RAPIDS_8480C = CpuPart(
    # Intel ARK, Xeon Platinum 8480C: 56 cores, 105 MB L3 (1.875 MB per core), one per socket; 15-way as CPUID
    # leaf 4 reports it on these machines (lscpu -C: L3 105M 15 ways 114688 sets).
    ("Intel(R) Xeon(R) Platinum 8480C",),
    _GOLDEN_COVE_L1D, _GOLDEN_COVE_L1I, _GOLDEN_COVE_L2, CacheLevel(105 * MIB, 15, cores=0))
SAPPHIRE_RAPIDS_6430 = CpuPart(
    # Intel ARK, Xeon Gold 6430: 32 cores, 60 MB L3 (the same 1.875 MB 15-way slices as the 8480C).
    ("Intel(R) Xeon(R) Gold 6430",),
    _GOLDEN_COVE_L1D, _GOLDEN_COVE_L1I, _GOLDEN_COVE_L2, CacheLevel(60 * MIB, 15, cores=0))
EMERALD_RAPIDS_8570 = CpuPart(
    # Intel ARK, Xeon Platinum 8570: 56 cores, 300 MB L3 per socket. The ways are not in the manual: 20, the only
    # associativity that gives the full 64-core die's 320 MB (8592+) a power-of-two set count (2**18, 4096 sets
    # per 5 MB slice) as set-indexed hardware needs; SPR's 15 gives 349525.33 sets there.
    ("INTEL(R) XEON(R) PLATINUM 8570",),
    _GOLDEN_COVE_L1D, _GOLDEN_COVE_L1I, _GOLDEN_COVE_L2, CacheLevel(300 * MIB, 20, cores=0))
GRANITE_RAPIDS_6767P = CpuPart(
    # Intel ARK, Xeon 6767P: 64 cores, 336 MB L3 per socket; Redwood Cove L1I 64 KB 16-way (optimization manual).
    # No public document gives the L3's ways: 16, what fakehw rendered before parts were told apart.
    ("Intel(R) Xeon(R) 6767P",),
    _GOLDEN_COVE_L1D, CacheLevel(64 * KIB, 16), _GOLDEN_COVE_L2, CacheLevel(336 * MIB, 16, cores=0))
CASCADE_LAKE_8259CL = CpuPart(
    # AWS's Xeon Platinum 8259CL (a Cascade Lake), 35.75 MB L3 shared by the socket: 26 slices of 1.375 MB 11-way
    # (optimization manual, Skylake Server cache table), so 53248 sets.
    ("Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",),
    CacheLevel(32 * KIB, 8), CacheLevel(32 * KIB, 8), CacheLevel(1 * MIB, 16), CacheLevel(36608 * KIB, 11, cores=0))
QEMU_ICELAKE = CpuPart(
    # QEMU's Icelake-Server CPU model ("Intel Xeon Processor (Icelake)"), whose model defines no cache_info, so
    # QEMU's CPUID leaf 4 gives its legacy L2 (4 MiB, 16-way, 4096 sets) and L3 (16 MiB, 16-way, 16384 sets, one
    # per die) (target/i386/cpu.c, legacy_l2_cache/legacy_l3_cache). L1D as Sunny Cove's (48 KB 12-way, the
    # optimization manual), L1I 32 KB 8-way.
    ("Intel Xeon Processor (Icelake)",),
    CacheLevel(48 * KIB, 12), CacheLevel(32 * KIB, 8), CacheLevel(4 * MIB, 16), CacheLevel(16 * MIB, 16, cores=0))
ZEN2_EPYC_7742 = CpuPart(
    # AMD Software Optimization Guide for AMD Family 17h Models 30h and Greater Processors (pub. 56305), 2.6 "Cache
    # and Memory Subsystem": L1I and L1D 32 KB 8-way, L2 512 KB 8-way, L3 16 MB 16-way per CCX of 4 cores (the
    # EPYC 7742's 256 MB are 16 of them per socket). 64-byte lines.
    ("AMD EPYC 7742 64-Core Processor",),
    CacheLevel(32 * KIB, 8), CacheLevel(32 * KIB, 8), CacheLevel(512 * KIB, 8), CacheLevel(16 * MIB, 16, cores=4))
ZEN4_EPYC_9354 = CpuPart(
    # AMD Software Optimization Guide for the AMD Zen4 Microarchitecture (pub. 57647), 2.11 "Cache and Memory":
    # L1I and L1D 32 KB 8-way, L2 1 MB 8-way, L3 32 MB 16-way per CCD. The EPYC 9354 (AMD product page: 32 cores,
    # 256 MB L3) has 8 CCDs of 4 enabled cores, each CCD's L3 shared by its 4.
    ("AMD EPYC 9354 32-Core Processor",),
    CacheLevel(32 * KIB, 8), CacheLevel(32 * KIB, 8), CacheLevel(1 * MIB, 8), CacheLevel(32 * MIB, 16, cores=4))
NEOVERSE_V2_GRACE = CpuPart(
    # Arm Neoverse V2 Core Technical Reference Manual (102375), "L1 instruction/data memory system": 64 KB 4-way
    # each, 64-byte lines; "L2 memory system": 1 MB (Grace's configuration) 8-way. The 114 MB L3 is Grace's
    # Scalable Coherency Fabric cache, one per socket (NVIDIA Grace CPU Superchip architecture whitepaper); no
    # public document gives its ways: 16, what fakehw rendered before parts were told apart.
    ("Neoverse-V2",),
    CacheLevel(64 * KIB, 4), CacheLevel(64 * KIB, 4), CacheLevel(1 * MIB, 8), CacheLevel(114 * MIB, 16, cores=0))
PROJECTED_RISCV_HOST = CpuPart(
    # The RISC-V profile's host is projected, not a product, so no vendor manual gives its caches: the figures are
    # chosen (4-way 64 KB L1s and an 8-way 1 MB L2 like the Neoverse V2 beside it, a 16-way 64 MB L3 per NUMA
    # node), as a device tree's cache nodes would declare them (d-cache-size/-sets/-block-size, from which
    # drivers/base/cacheinfo.c, cache_associativity, derives the ways). 64-byte lines.
    ("rv64gcv NVLink Fusion host (projected)",),
    CacheLevel(64 * KIB, 4), CacheLevel(64 * KIB, 4), CacheLevel(1 * MIB, 8), CacheLevel(64 * MIB, 16, cores=0))

PARTS: tuple[CpuPart, ...] = (SAPPHIRE_RAPIDS_8480C, SAPPHIRE_RAPIDS_6430, EMERALD_RAPIDS_8570, GRANITE_RAPIDS_6767P,
                              CASCADE_LAKE_8259CL, QEMU_ICELAKE, ZEN2_EPYC_7742, ZEN4_EPYC_9354, NEOVERSE_V2_GRACE,
                              PROJECTED_RISCV_HOST)

DEFAULT_PART = CpuPart((), _GOLDEN_COVE_L1D, _GOLDEN_COVE_L1I, _GOLDEN_COVE_L2, CacheLevel(0, 15, cores=0))
"""The associativity of a part fakehw does not know (Golden Cove's; the sizes are the profile's)."""



def part_of(model: str) -> CpuPart | None:
    """The part a ``/proc/cpuinfo`` model name names, if fakehw knows it."""
    return next((part for part in PARTS if model in part.models), None)
