"""The NVML snapshot format, defined once: Python record classes that generate the C header and pack the file.

The snapshot is the only thing the C shim reads. Its layout lives here and nowhere else:

- each record is a frozen dataclass whose fields carry their C type (``U32``, ``Char(96)``, ``Array(U64, 16)``,
  ``Records(LinkRecord, 18)``) through :data:`typing.Annotated`;
- :func:`c_header` turns the records into ``snapshot_layout.h`` with a ``_Static_assert`` for the size of every
  struct and the offset of every field, so the C compiler (for every target, cross builds included) refuses a
  header that disagrees with the offsets Python packs at;
- :func:`pack` writes a record at those offsets.

Layout rules are C's natural alignment on the 64-bit targets (amd64, arm64, riscv64): every field sits at a
multiple of its own size (no ``long`` or pointers appear), records are padded to their largest alignment, and
the packer writes little-endian (the shim refuses a snapshot whose byte-order mark does not read back).

The file is: header, GPU records, MIG device records, MIG profile records, process records, event records,
NIC records, GPU instance records, compute instance profile records, platform records.
Offsets and counts are in the header; the checksum is CRC-32 (zlib's) over the whole file with the
``superseded`` and ``checksum`` fields read as zero. This module uses only the standard library because the
build (which generates the header) runs before the package's dependencies exist.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import struct
import typing
import zlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, ClassVar, TypeVar, cast

T = TypeVar("T")

FORMAT_VERSION = 4
MAGIC = "FHWNVML"
BYTE_ORDER_MARK = 0x01020304

MAX_GPUS = 32
"""GPUs per node the snapshot can describe (topology rows are this wide): the real driver's per-host limit,
``NV_MAX_DEVICES`` (``fakehw.model.spec.MAX_GPUS_PER_NODE`` says why; this module cannot import it, see above)."""
MAX_LINKS = 18
"""NVML_NVLINK_MAX_LINKS of the 535 headers."""
MAX_MIG_PER_GPU = 8
"""MIG devices (compute instances) per GPU: at most one per compute slice (7)."""
MAX_MIG_PROFILES_PER_GPU = 16
MAX_GI_PER_GPU = 8
"""GPU instances per GPU (at most 7: one per compute slice)."""
MAX_CI_PROFILES_PER_GPU = 64
"""Compute instance profiles over all of a GPU's GPU instance profiles."""
MAX_PLACEMENTS = 8
CI_PROFILE_COUNT = 9
"""``NVML_COMPUTE_INSTANCE_PROFILE_COUNT`` of the newest nvml.h."""
MAX_EVENTS = 256
MAX_NICS = 64
MAX_PROCESSES = 4096
MEM_CLOCKS = 4
"""Supported memory clocks per GPU (the boards have one or two)."""
CPU_MASK_WORDS = 16
"""64-bit words of CPU affinity: 1024 CPUs."""
NUMA_MASK_WORDS = 4
RETIRED_PAGES_MAX = 16
P2P_CAPS = 5
ECC_LOCATIONS = 8
CLOCK_TYPES = 4


# --------------------------------------------------------------------------------------------------- types


@dataclass(frozen=True)
class Scalar:
    """A C integer type: its name, ``struct`` code and size."""

    c: str
    code: str
    size: int

    @property
    def align(self) -> int:
        return self.size


@dataclass(frozen=True)
class Char:
    """A NUL-terminated string in a fixed buffer of ``size`` bytes (at most ``size - 1`` bytes of UTF-8)."""

    size: int

    @property
    def align(self) -> int:
        return 1


@dataclass(frozen=True, init=False)
class Array:
    """A fixed array of scalars; values are a flat tuple of ``prod(dims)`` integers."""

    item: Scalar
    dims: tuple[int, ...]

    def __init__(self, item: Scalar, *dims: int) -> None:
        object.__setattr__(self, "item", item)
        object.__setattr__(self, "dims", dims)

    @property
    def length(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def size(self) -> int:
        return self.item.size * self.length

    @property
    def align(self) -> int:
        return self.item.align


@dataclass(frozen=True)
class Records:
    """A fixed array of nested records; values are a tuple of at most ``count`` records (the rest zeroed)."""

    record: type[Any]
    count: int

    @property
    def size(self) -> int:
        return layout_of(self.record).size * self.count

    @property
    def align(self) -> int:
        return layout_of(self.record).align


Kind = Scalar | Char | Array | Records

u8 = Scalar("uint8_t", "B", 1)
u32 = Scalar("uint32_t", "I", 4)
i32 = Scalar("int32_t", "i", 4)
u64 = Scalar("uint64_t", "Q", 8)
i64 = Scalar("int64_t", "q", 8)

U32 = Annotated[int, u32]
I32 = Annotated[int, i32]
U64 = Annotated[int, u64]
I64 = Annotated[int, i64]


def _zeros(n: int) -> tuple[int, ...]:
    return (0,) * n


# --------------------------------------------------------------------------------------------------- answers


class Answer(enum.IntEnum):
    """Topics whose answer depends on the board, the driver branch or the node rather than on one reading.

    ``GpuRecord.answers[topic]`` is the ``nvmlReturn_t`` the call gives (0: it answers from the record). Python
    decides each one (:mod:`fakehw.nvml.support`, with the facts it rests on); the shim only returns it.
    """

    DISPLAY_MODE = 0
    APPLICATIONS_CLOCKS = 1
    POWER_STATE = 2
    RETIRED_PAGES = 3
    REMAPPED_ROWS = 4
    MEMORY_TEMPERATURE = 5
    POWER_AVERAGE = 6
    MODULE_POWER = 7
    MEMORY_POWER = 8
    POWER_SMOOTHING = 9
    C2C = 10
    FABRIC = 11
    UNREPAIRABLE_MEMORY = 12
    SRAM_ECC_STATUS = 13
    REPAIR_STATUS = 14
    TLIMIT = 15
    ABSOLUTE_THRESHOLDS = 16
    DRAM_ENCRYPTION = 17
    # 18: unused (platform info has its own records, PlatformRecord)
    ADDRESSING_MODE = 19
    PDI = 20
    GPM = 21
    MEMORY_MAX_THRESHOLD = 22
    BBX = 23
    NVLINK_BW_MODE = 24
    CLOCK_OFFSETS = 25
    POWER_PROFILES = 26
    PERFORMANCE_MODES = 27
    AUTO_BOOST = 28
    SPARSE_OPERATION = 29
    HOSTNAME = 30
    CONF_COMPUTE = 31
    GPU_OPERATION_MODE = 32
    VGPU = 33


ANSWER_SLOTS = 64


# --------------------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class LinkRecord:
    """One NVLink port of a GPU: state, what is at the other end, counters."""

    c_name: ClassVar[str] = "fhw_link_t"

    present: U32 = 0
    up: U32 = 0
    version: U32 = 0
    remote_type: U32 = 0xFF
    capabilities: U32 = 0
    """Bit n set = ``nvmlNvLinkCapability_t`` n is supported."""
    remote_link: U32 = 0
    speed_mbps: U32 = 0
    reserved1: U32 = 0
    """Was ``remote_gpu`` (the far GPU's slot on this node), which no getter read: remote identity is the PCI
    fields below."""
    remote_bus_id: Annotated[str, Char(32)] = ""
    remote_bus_id_legacy: Annotated[str, Char(16)] = ""
    remote_domain: U32 = 0
    remote_bus: U32 = 0
    remote_device: U32 = 0
    remote_pci_device_id: U32 = 0
    remote_pci_subsystem_id: U32 = 0
    reserved0: U32 = 0
    errors: Annotated[tuple[int, ...], Array(u64, 5)] = _zeros(5)
    """replay, recovery, crc-flit, crc-data, ecc-data (``nvmlNvLinkErrorCounter_t`` order)."""
    util_rx: Annotated[tuple[int, ...], Array(u64, 2)] = _zeros(2)
    util_tx: Annotated[tuple[int, ...], Array(u64, 2)] = _zeros(2)


@dataclass(frozen=True)
class GpuRecord:
    """One physical GPU of the node, in NVML index order (its position is its *slot*)."""

    c_name: ClassVar[str] = "fhw_gpu_t"

    uuid: Annotated[str, Char(96)] = ""
    name: Annotated[str, Char(96)] = ""
    serial: Annotated[str, Char(32)] = ""
    board_part_number: Annotated[str, Char(80)] = ""
    vbios_version: Annotated[str, Char(32)] = ""
    inforom_image: Annotated[str, Char(16)] = ""
    inforom_oem: Annotated[str, Char(16)] = ""
    inforom_ecc: Annotated[str, Char(16)] = ""
    inforom_power: Annotated[str, Char(16)] = ""
    gsp_firmware: Annotated[str, Char(32)] = ""
    bus_id: Annotated[str, Char(32)] = ""
    bus_id_legacy: Annotated[str, Char(16)] = ""
    model_name: Annotated[str, Char(32)] = ""
    """The model's device name (``gpu3``): what fakehw faults and FAKEHW_VISIBLE_DEVICES use."""
    index: U32 = 0
    minor: U32 = 0
    pci_domain: U32 = 0
    pci_bus: U32 = 0
    pci_device: U32 = 0
    pci_function: U32 = 0
    pci_device_id: U32 = 0
    pci_subsystem_id: U32 = 0
    pci_base_class: U32 = 0
    pci_sub_class: U32 = 0
    brand: U32 = 0
    architecture: U32 = 0
    cc_major: U32 = 0
    cc_minor: U32 = 0
    multiprocessors: U32 = 0
    copy_engines: U32 = 0
    decoders: U32 = 0
    encoders: U32 = 0
    jpegs: U32 = 0
    ofas: U32 = 0
    board_id: U32 = 0
    module_id: U32 = 0
    multi_gpu_board: U32 = 0
    numa_node: I32 = -1
    gpu_numa_id: I32 = -1
    lost: U32 = 0
    bus_type: U32 = 0
    memory_bus_width: U32 = 0
    pcie_gen_max: U32 = 0
    pcie_gen_gpu_max: U32 = 0
    pcie_gen_cur: U32 = 0
    pcie_width_max: U32 = 0
    pcie_width_cur: U32 = 0
    pcie_speed_mbps: U32 = 0
    pcie_replay: U32 = 0
    pcie_tx_kbs: U32 = 0
    pcie_rx_kbs: U32 = 0
    mem_total: U64 = 0
    mem_reserved: U64 = 0
    mem_used: U64 = 0
    mem_free: U64 = 0
    bar1_total: U64 = 0
    bar1_used: U64 = 0
    temperature: U32 = 0
    mem_temperature: U32 = 0
    temp_shutdown: U32 = 0
    temp_slowdown: U32 = 0
    temp_mem_max: U32 = 0
    temp_gpu_max: U32 = 0
    power_usage_mw: U32 = 0
    power_limit_mw: U32 = 0
    power_default_limit_mw: U32 = 0
    power_min_limit_mw: U32 = 0
    power_max_limit_mw: U32 = 0
    power_enforced_mw: U32 = 0
    energy_mj: U64 = 0
    throttle_reasons: U64 = 0
    supported_throttle_reasons: U64 = 0
    clocks_current: Annotated[tuple[int, ...], Array(u32, CLOCK_TYPES)] = _zeros(CLOCK_TYPES)
    """MHz per ``nvmlClockType_t``: graphics, SM, memory, video."""
    clocks_max: Annotated[tuple[int, ...], Array(u32, CLOCK_TYPES)] = _zeros(CLOCK_TYPES)
    clocks_app: Annotated[tuple[int, ...], Array(u32, CLOCK_TYPES)] = _zeros(CLOCK_TYPES)
    clocks_app_default: Annotated[tuple[int, ...], Array(u32, CLOCK_TYPES)] = _zeros(CLOCK_TYPES)
    util_gpu: U32 = 0
    util_memory: U32 = 0
    util_encoder: U32 = 0
    util_decoder: U32 = 0
    util_jpeg: U32 = 0
    util_ofa: U32 = 0
    pstate: U32 = 0
    fan_count: U32 = 0
    fan_speed: U32 = 0
    compute_mode: U32 = 0
    persistence_mode: U32 = 0
    display_mode: U32 = 0
    display_active: U32 = 0
    accounting_mode: U32 = 0
    ecc_current: U32 = 0
    ecc_pending: U32 = 0
    ecc_default: U32 = 0
    ecc_counts: Annotated[tuple[int, ...], Array(u64, 2, 2, ECC_LOCATIONS)] = _zeros(2 * 2 * ECC_LOCATIONS)
    """[error type: corrected, uncorrected][counter: volatile, aggregate][``nvmlMemoryLocation_t``]."""
    retired_sbe: U32 = 0
    retired_dbe: U32 = 0
    retired_pending: U32 = 0
    retired_pending_sbe: U32 = 0
    retired_sbe_pages: Annotated[tuple[int, ...], Array(u64, RETIRED_PAGES_MAX)] = _zeros(RETIRED_PAGES_MAX)
    retired_dbe_pages: Annotated[tuple[int, ...], Array(u64, RETIRED_PAGES_MAX)] = _zeros(RETIRED_PAGES_MAX)
    retired_time: U64 = 0
    remap_corr: U32 = 0
    remap_unc: U32 = 0
    remap_pending: U32 = 0
    remap_failure: U32 = 0
    remap_histogram: Annotated[tuple[int, ...], Array(u32, 5)] = _zeros(5)
    """max, high, partial, low, none (``nvmlRowRemapperHistogramValues_t`` order)."""
    cpu_affinity: Annotated[tuple[int, ...], Array(u64, CPU_MASK_WORDS)] = _zeros(CPU_MASK_WORDS)
    mem_affinity: Annotated[tuple[int, ...], Array(u64, NUMA_MASK_WORDS)] = _zeros(NUMA_MASK_WORDS)
    nvlink_count: U32 = 0
    nvlink_version: U32 = 0
    nvswitch_links: U32 = 0
    fabric_supported: U32 = 0
    fabric_cluster_uuid: Annotated[tuple[int, ...], Array(u8, 16)] = _zeros(16)
    fabric_state: U32 = 0
    fabric_status: U32 = 0
    fabric_clique_id: U32 = 0
    fabric_health_mask: U32 = 0
    fabric_health_summary: U32 = 0
    mig_capable: U32 = 0
    mig_current: U32 = 0
    mig_pending: U32 = 0
    mig_max_devices: U32 = 0
    mig_first: U32 = 0
    mig_count: U32 = 0
    mig_profile_first: U32 = 0
    mig_profile_count: U32 = 0
    process_first: U32 = 0
    process_count: U32 = 0
    xid_count: U32 = 0
    last_xid: U32 = 0
    answers: Annotated[tuple[int, ...], Array(u8, ANSWER_SLOTS)] = _zeros(ANSWER_SLOTS)
    """``nvmlReturn_t`` per :class:`Answer` topic (0: answer from the record)."""
    gpu_part_number: Annotated[str, Char(32)] = ""
    graphics_clock_min: U32 = 0
    graphics_step_x2: U32 = 0
    """Spacing of supported graphics clocks in half MHz (15 MHz -> 30, 7.5 MHz -> 15)."""
    mem_clock_count: U32 = 0
    mem_clocks: Annotated[tuple[int, ...], Array(u32, MEM_CLOCKS)] = _zeros(MEM_CLOCKS)
    graphics_top_x2: Annotated[tuple[int, ...], Array(u32, MEM_CLOCKS)] = _zeros(MEM_CLOCKS)
    """Highest graphics clock with each memory clock, in half MHz (the driver lists 2062.5 as 2062)."""
    temp_margin: I32 = 0
    """T.Limit margin: degrees below the slowdown reference (nvmlDeviceGetMarginTemperature)."""
    tlimit_shutdown: I32 = 0
    tlimit_slowdown: I32 = 0
    tlimit_gpu_max: I32 = 0
    tlimit_mem_max: I32 = 0
    power_average_mw: U32 = 0
    memory_power_mw: U32 = 0
    module_power_mw: U32 = 0
    module_limit_mw: U32 = 0
    module_default_limit_mw: U32 = 0
    module_min_limit_mw: U32 = 0
    module_max_limit_mw: U32 = 0
    cuda_cores: U32 = 0
    irq: U32 = 0
    pcie_atomics_outbound: U32 = 0
    """``NVML_PCIE_ATOMICS_CAP_*`` mask (0: the board reports none)."""
    pcie_atomics_inbound: U32 = 0
    addressing_mode: U32 = 0
    """``nvmlDeviceAddressingModeType_t``: 0 none, 1 HMM, 2 ATS."""
    c2c_enabled: U32 = 0
    c2c_link_count: U32 = 0
    c2c_link_bandwidth_mbps: U32 = 0
    pdi: U64 = 0
    bbx_flush_time_us: U64 = 0
    bbx_flush_duration_us: U64 = 0
    gpm_sm_activity: U32 = 0
    """GPM metrics in hundredths of a percent (derived from the utilization, see readings.py)."""
    gpm_sm_occupancy: U32 = 0
    gpm_tensor_activity: U32 = 0
    gpm_dram_bw_util: U32 = 0
    gpm_fp64_activity: U32 = 0
    gpm_fp32_activity: U32 = 0
    gpm_fp16_activity: U32 = 0
    gpm_graphics_activity: U32 = 0
    topo_level: Annotated[tuple[int, ...], Array(u8, MAX_GPUS)] = _zeros(MAX_GPUS)
    """``nvmlGpuTopologyLevel_t`` to every other slot."""
    nvlink_bond: Annotated[tuple[int, ...], Array(u8, MAX_GPUS)] = _zeros(MAX_GPUS)
    p2p: Annotated[tuple[int, ...], Array(u8, P2P_CAPS, MAX_GPUS)] = _zeros(P2P_CAPS * MAX_GPUS)
    """``nvmlGpuP2PStatus_t`` per ``nvmlGpuP2PCapsIndex_t`` and peer slot."""
    links: Annotated[tuple[LinkRecord, ...], Records(LinkRecord, MAX_LINKS)] = ()


@dataclass(frozen=True)
class MigRecord:
    """A MIG device: one compute instance of a GPU instance of a GPU with MIG enabled. ``index`` orders a GPU's MIG
    devices by GPU instance id, then compute instance id; ``slice_count``, ``start_slice``, engines and memory are
    the GPU instance's, ``multiprocessors`` and the ``ci_`` fields the compute instance's."""

    c_name: ClassVar[str] = "fhw_mig_t"

    uuid: Annotated[str, Char(96)] = ""
    name: Annotated[str, Char(96)] = ""
    parent: U32 = 0
    index: U32 = 0
    gpu_instance_id: U32 = 0
    compute_instance_id: U32 = 0
    profile_id: U32 = 0
    ci_profile_id: U32 = 0
    slice_count: U32 = 0
    start_slice: U32 = 0
    multiprocessors: U32 = 0
    copy_engines: U32 = 0
    decoders: U32 = 0
    encoders: U32 = 0
    jpegs: U32 = 0
    ofas: U32 = 0
    mem_total: U64 = 0
    mem_reserved: U64 = 0
    mem_used: U64 = 0
    mem_free: U64 = 0
    ci_slice_count: U32 = 0
    ci_start: U32 = 0
    gi_placement_size: U32 = 0
    gi_record: U32 = 0
    """Index of its GPU instance's :class:`GpuInstanceRecord`."""


@dataclass(frozen=True)
class MigProfileRecord:
    """A GPU instance profile a MIG-capable GPU offers, with what is left of it and where it may go."""

    c_name: ClassVar[str] = "fhw_mig_profile_t"

    name: Annotated[str, Char(96)] = ""
    parent: U32 = 0
    profile_index: U32 = 0
    """``NVML_GPU_INSTANCE_PROFILE_*``: what nvmlDeviceGetGpuInstanceProfileInfo is asked for."""
    profile_id: U32 = 0
    """The profile's unique id (what GPU instances report and placements are asked by)."""
    slice_count: U32 = 0
    instance_count: U32 = 0
    remaining: U32 = 0
    multiprocessors: U32 = 0
    copy_engines: U32 = 0
    decoders: U32 = 0
    encoders: U32 = 0
    jpegs: U32 = 0
    ofas: U32 = 0
    placement_count: U32 = 0
    placement_start: Annotated[tuple[int, ...], Array(u32, MAX_PLACEMENTS)] = _zeros(MAX_PLACEMENTS)
    memory_mib: U64 = 0
    placement_size: U32 = 0
    """Memory slices a placement spans."""
    reserved0: U32 = 0


@dataclass(frozen=True)
class GpuInstanceRecord:
    """A GPU instance (with or without compute instances) of a GPU with MIG enabled."""

    c_name: ClassVar[str] = "fhw_gi_t"

    serial: U64 = 0
    """Never reused on its GPU: what keeps an NVML handle of a destroyed instance from naming a new one."""
    memory_mib: U64 = 0
    parent: U32 = 0
    id: U32 = 0
    profile_index: U32 = 0
    profile_id: U32 = 0
    slice_count: U32 = 0
    placement_start: U32 = 0
    placement_size: U32 = 0
    multiprocessors: U32 = 0
    copy_engines: U32 = 0
    decoders: U32 = 0
    encoders: U32 = 0
    jpegs: U32 = 0
    ofas: U32 = 0
    mig_first: U32 = 0
    """Its compute instances: MIG records ``mig_first .. mig_first + mig_count``."""
    mig_count: U32 = 0
    ci_remaining: Annotated[tuple[int, ...], Array(u32, CI_PROFILE_COUNT)] = _zeros(CI_PROFILE_COUNT)
    """Compute instances of each ``NVML_COMPUTE_INSTANCE_PROFILE_*`` that still fit."""


@dataclass(frozen=True)
class CiProfileRecord:
    """A compute instance profile of one GPU instance profile of a GPU (engines are shared: the GPU instance's)."""

    c_name: ClassVar[str] = "fhw_ci_profile_t"

    name: Annotated[str, Char(96)] = ""
    parent: U32 = 0
    gi_profile_index: U32 = 0
    index: U32 = 0
    """``NVML_COMPUTE_INSTANCE_PROFILE_*``, also the profile id NVML reports."""
    slice_count: U32 = 0
    instance_count: U32 = 0
    multiprocessors: U32 = 0
    copy_engines: U32 = 0
    decoders: U32 = 0
    encoders: U32 = 0
    jpegs: U32 = 0
    ofas: U32 = 0
    placement_count: U32 = 0
    placement_start: Annotated[tuple[int, ...], Array(u32, MAX_PLACEMENTS)] = _zeros(MAX_PLACEMENTS)


@dataclass(frozen=True)
class PlatformRecord:
    """Where a GPU sits in its rack (``nvmlDeviceGetPlatformInfo``); one per GPU, in GPU slot order."""

    c_name: ClassVar[str] = "fhw_platform_t"

    supported: U32 = 0
    slot_number: U32 = 0
    tray_index: U32 = 0
    host_id: U32 = 0
    peer_type: U32 = 0
    module_id: U32 = 0
    chassis_serial: Annotated[tuple[int, ...], Array(u8, 16)] = _zeros(16)
    ib_guid: Annotated[tuple[int, ...], Array(u8, 16)] = _zeros(16)


@dataclass(frozen=True)
class ProcessRecord:
    """A process using a GPU (or a MIG device of it)."""

    c_name: ClassVar[str] = "fhw_process_t"

    gpu: U32 = 0
    pid: U32 = 0
    kinds: U32 = 0
    """Bit 0 compute, bit 1 graphics, bit 2 MPS compute."""
    gpu_instance_id: U32 = 0xFFFFFFFF
    compute_instance_id: U32 = 0xFFFFFFFF
    reserved0: U32 = 0
    used_memory: U64 = 0
    name: Annotated[str, Char(64)] = ""


@dataclass(frozen=True)
class EventRecord:
    """One event of the node's ring, oldest first; ``seq`` is the agent's global event sequence number."""

    c_name: ClassVar[str] = "fhw_event_t"

    seq: U64 = 0
    gpu: U32 = 0
    reserved0: U32 = 0
    event_type: U64 = 0
    event_data: U64 = 0
    gpu_instance_id: U32 = 0xFFFFFFFF
    compute_instance_id: U32 = 0xFFFFFFFF
    time_us: I64 = 0


@dataclass(frozen=True)
class NicRecord:
    """A NIC of the node and its PCIe distance to every GPU and NIC (``nvidia-smi topo -m`` asks for these)."""

    c_name: ClassVar[str] = "fhw_nic_t"

    name: Annotated[str, Char(32)] = ""
    bus_id: Annotated[str, Char(32)] = ""
    domain: U32 = 0
    bus: U32 = 0
    device: U32 = 0
    function: U32 = 0
    gpu_level: Annotated[tuple[int, ...], Array(u8, MAX_GPUS)] = _zeros(MAX_GPUS)
    """``nvmlGpuTopologyLevel_t`` to each GPU slot."""
    nic_level: Annotated[tuple[int, ...], Array(u8, MAX_NICS)] = _zeros(MAX_NICS)


@dataclass(frozen=True)
class HeaderRecord:
    """The file header: identity, generation, system-wide answers and where the sections are."""

    c_name: ClassVar[str] = "fhw_header_t"

    magic: Annotated[str, Char(8)] = MAGIC
    format_version: U32 = FORMAT_VERSION
    byte_order: U32 = BYTE_ORDER_MARK
    header_size: U32 = 0
    superseded: U32 = 0
    """Set to 1 in place, by the writer, after a newer snapshot was renamed over this one."""
    checksum: U32 = 0
    flags: U32 = 0
    total_size: U64 = 0
    generation: U64 = 0
    seed: U64 = 0
    render_time_us: I64 = 0
    driver_version: Annotated[str, Char(80)] = ""
    nvml_version: Annotated[str, Char(80)] = ""
    hostname: Annotated[str, Char(64)] = ""
    node_name: Annotated[str, Char(64)] = ""
    profile: Annotated[str, Char(64)] = ""
    cuda_driver_version: I32 = 0
    driver_branch: U32 = 0
    """535, 550, ... 615: the NVML generation the library presents (functions, struct versions)."""
    gpm_metric_max: U32 = 0
    """The branch's ``NVML_GPM_METRIC_MAX``."""
    host_pcie_gen_max: U32 = 0
    gpu_count: U32 = 0
    gpu_record_size: U32 = 0
    gpu_offset: U64 = 0
    mig_count: U32 = 0
    mig_record_size: U32 = 0
    mig_offset: U64 = 0
    mig_profile_count: U32 = 0
    mig_profile_record_size: U32 = 0
    mig_profile_offset: U64 = 0
    process_count: U32 = 0
    process_record_size: U32 = 0
    process_offset: U64 = 0
    event_count: U32 = 0
    event_record_size: U32 = 0
    event_offset: U64 = 0
    event_last_seq: U64 = 0
    nic_count: U32 = 0
    nic_record_size: U32 = 0
    nic_offset: U64 = 0
    gi_count: U32 = 0
    gi_record_size: U32 = 0
    gi_offset: U64 = 0
    ci_profile_count: U32 = 0
    ci_profile_record_size: U32 = 0
    ci_profile_offset: U64 = 0
    platform_count: U32 = 0
    platform_record_size: U32 = 0
    platform_offset: U64 = 0


RECORDS: tuple[type[Any], ...] = (LinkRecord, GpuRecord, MigRecord, MigProfileRecord, GpuInstanceRecord,
                                  CiProfileRecord, PlatformRecord, ProcessRecord, EventRecord, NicRecord, HeaderRecord)
"""Every record, nested ones first (the order the C header declares them in)."""


@cache
def _defaults(key: Hashable) -> dict[str, Any]:
    """Every field of a record class with its default (the record classes give every field one).

    :func:`make` copies these values and never runs the class's ``__init__``: a class whose ``__init__`` would do
    more (a ``__post_init__``, a ``default_factory`` that gives each instance a new value, a field without a
    default) would silently get a different record, so it is refused with a ``TypeError`` instead."""
    record = cast(type[Any], key)
    if hasattr(record, "__post_init__"):
        raise TypeError(f"{record.__name__} has a __post_init__, which layout.make would not run")
    defaults = {}
    for f in dataclasses.fields(record):
        if f.default is dataclasses.MISSING:
            how = "a default_factory" if f.default_factory is not dataclasses.MISSING else "no default"
            raise TypeError(f"{record.__name__}.{f.name} has {how}: layout.make fills a record from plain defaults")
        defaults[f.name] = f.default
    return defaults


def make(record: type[T], *parts: Mapping[str, Any], **fields: Any) -> T:
    """``record(**parts[0], ..., **fields)``, the later values winning, without passing them as keywords.

    Why: calling a record class with its fields as keywords binds them to parameters one by one (171 of them in a
    GPU record), and a frozen dataclass then sets each with ``object.__setattr__``: 42 us for a GPU record and 3 us
    for each of its 18 NVLink records, paid for the changed GPU on every injection. This fills the instance's
    ``__dict__`` from the class's defaults and the given mappings in two or three dict updates (1-2 us), and makes
    the same instance (equal, frozen, packed the same). A name that is not a field is a ``TypeError`` as it is for
    the class's own ``__init__``."""
    return make_from(record, _defaults(cast(Hashable, record)), *parts, **fields)


def template(record: type[Any], *parts: Mapping[str, Any]) -> dict[str, Any]:
    """Every field of ``record``: its defaults, then ``parts`` (the later winning), checked as :func:`make` checks
    them. What :func:`make_from` starts from, for a record made again and again with the same fields but a few."""
    return _filled(record, _defaults(cast(Hashable, record)), parts, {})


def make_from(record: type[T], fields_of: dict[str, Any], *parts: Mapping[str, Any], **fields: Any) -> T:
    """:func:`make` from a :func:`template` of ``record`` (or its defaults): a copy of it, updated, is the instance's
    ``__dict__``, so a template's fields are not laid down again (an NVLink record of a GB200 GPU is made 18 times
    per injection, its static fields the same every time)."""
    obj = object.__new__(record)
    object.__setattr__(obj, "__dict__", _filled(record, fields_of, parts, fields))  # frozen: its __setattr__ refuses
    return obj


def _filled(record: type[Any], every: dict[str, Any], parts: tuple[Mapping[str, Any], ...],
            fields: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``every`` (a value for each field of ``record``) with ``parts`` and ``fields`` laid over it; a name
    that is not a field is a ``TypeError``."""
    values = every.copy()
    for part in parts:
        values.update(part)
    values.update(fields)
    if len(values) != len(every):
        unknown = sorted(set(values) - every.keys())
        raise TypeError(f"{record.__name__} has no field(s) {', '.join(unknown)}")
    return values


def replaced(record: T, **changes: Any) -> T:
    """``dataclasses.replace(record, **changes)`` for a record, the way :func:`make` builds one (the header is
    replaced twice per snapshot)."""
    return make(type(record), record.__dict__, changes)


# --------------------------------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class FieldLayout:
    name: str
    kind: Kind
    offset: int

    @property
    def size(self) -> int:
        return self.kind.size


@dataclass(frozen=True)
class RecordLayout:
    record: type[Any]
    c_name: str
    fields: tuple[FieldLayout, ...]
    size: int
    align: int

    def field(self, name: str) -> FieldLayout:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.c_name} has no field {name!r}")


def _align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def layout_of(record: type[Any]) -> RecordLayout:
    """Offsets of every field of ``record`` by C's rules (natural alignment, trailing padding)."""
    return _layout_of(cast(Hashable, record))


@cache
def _layout_of(key: Hashable) -> RecordLayout:
    """Computed once per record class (classes are immutable, so the cache never goes stale)."""
    record = cast(type[Any], key)
    hints = typing.get_type_hints(record, include_extras=True)
    fields: list[FieldLayout] = []
    offset = 0
    align = 1
    for f in dataclasses.fields(record):
        meta = getattr(hints[f.name], "__metadata__", ())
        kind = next((m for m in meta if isinstance(m, Scalar | Char | Array | Records)), None)
        if kind is None:
            raise TypeError(f"{record.__name__}.{f.name} has no C type annotation")
        offset = _align_up(offset, kind.align)
        fields.append(FieldLayout(f.name, kind, offset))
        offset += kind.size
        align = max(align, kind.align)
    return RecordLayout(record, record.c_name, tuple(fields), _align_up(offset, align), align)


# --------------------------------------------------------------------------------------------------- C


def _c_decl(f: FieldLayout) -> str:
    k = f.kind
    if isinstance(k, Scalar):
        return f"{k.c} {f.name};"
    if isinstance(k, Char):
        return f"char {f.name}[{k.size}];"
    if isinstance(k, Array):
        return f"{k.item.c} {f.name}" + "".join(f"[{d}]" for d in k.dims) + ";"
    return f"{layout_of(k.record).c_name} {f.name}[{k.count}];"


def c_header() -> str:
    """``snapshot_layout.h``: the structs, constants and compile-time checks of every offset and size."""
    out = [
        "/* Generated by fakehw/nvml/layout.py - do not edit: change the Python records instead. */",
        "#ifndef FAKEHW_SNAPSHOT_LAYOUT_H",
        "#define FAKEHW_SNAPSHOT_LAYOUT_H",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        f'#define FHW_MAGIC "{MAGIC}"',
        f"#define FHW_FORMAT_VERSION {FORMAT_VERSION}u",
        f"#define FHW_BYTE_ORDER_MARK 0x{BYTE_ORDER_MARK:08x}u",
        f"#define FHW_MAX_GPUS {MAX_GPUS}",
        f"#define FHW_MAX_LINKS {MAX_LINKS}",
        f"#define FHW_MAX_MIG_PER_GPU {MAX_MIG_PER_GPU}",
        f"#define FHW_MAX_MIGS {MAX_GPUS * MAX_MIG_PER_GPU}",
        f"#define FHW_MAX_MIG_PROFILES {MAX_GPUS * MAX_MIG_PROFILES_PER_GPU}",
        f"#define FHW_MAX_PLACEMENTS {MAX_PLACEMENTS}",
        f"#define FHW_MAX_GIS {MAX_GPUS * MAX_GI_PER_GPU}",
        f"#define FHW_MAX_CI_PROFILES {MAX_GPUS * MAX_CI_PROFILES_PER_GPU}",
        f"#define FHW_CI_PROFILE_COUNT {CI_PROFILE_COUNT}",
        f"#define FHW_MAX_EVENTS {MAX_EVENTS}",
        f"#define FHW_MAX_NICS {MAX_NICS}",
        f"#define FHW_MAX_PROCESSES {MAX_PROCESSES}",
        f"#define FHW_CPU_MASK_WORDS {CPU_MASK_WORDS}",
        f"#define FHW_NUMA_MASK_WORDS {NUMA_MASK_WORDS}",
        f"#define FHW_RETIRED_PAGES_MAX {RETIRED_PAGES_MAX}",
        f"#define FHW_P2P_CAPS {P2P_CAPS}",
        f"#define FHW_ECC_LOCATIONS {ECC_LOCATIONS}",
        f"#define FHW_CLOCK_TYPES {CLOCK_TYPES}",
        f"#define FHW_MEM_CLOCKS {MEM_CLOCKS}",
        f"#define FHW_ANSWER_SLOTS {ANSWER_SLOTS}",
        *(f"#define FHW_ANS_{a.name} {a.value}" for a in Answer),
        "",
    ]
    for rec in RECORDS:
        lay = layout_of(rec)
        out.append(f"typedef struct {lay.c_name.removesuffix('_t')} {{")
        out += [f"    {_c_decl(f)}" for f in lay.fields]
        out.append(f"}} {lay.c_name};")
        out.append(f'_Static_assert(sizeof({lay.c_name}) == {lay.size}, "{lay.c_name} size differs from layout.py");')
        out += [f'_Static_assert(offsetof({lay.c_name}, {f.name}) == {f.offset}, '
                f'"{lay.c_name}.{f.name} offset differs from layout.py");' for f in lay.fields]
        out.append("")
    sup = layout_of(HeaderRecord).field("superseded")
    out.append(f"#define FHW_SUPERSEDED_OFFSET {sup.offset}")
    out.append(f"#define FHW_CHECKSUM_OFFSET {layout_of(HeaderRecord).field('checksum').offset}")
    out += ["", "#endif", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------- packing


class LayoutError(ValueError):
    """A value does not fit its field (string too long, number out of range, too many records)."""


def _pack_field(buf: bytearray, base: int, f: FieldLayout, value: Any, where: str) -> None:
    k = f.kind
    at = base + f.offset
    try:
        if isinstance(k, Scalar):
            struct.pack_into("<" + k.code, buf, at, value)
        elif isinstance(k, Char):
            raw = value.encode()
            if len(raw) >= k.size or b"\0" in raw:
                raise LayoutError(f"{where}.{f.name}: {value!r} does not fit {k.size - 1} bytes without NUL")
            buf[at:at + len(raw)] = raw
        elif isinstance(k, Array):
            if len(value) != k.length:
                raise LayoutError(f"{where}.{f.name}: expected {k.length} values, got {len(value)}")
            struct.pack_into(f"<{k.length}{k.item.code}", buf, at, *value)
        else:
            if len(value) > k.count:
                raise LayoutError(f"{where}.{f.name}: at most {k.count} records, got {len(value)}")
            size = layout_of(k.record).size
            for i, item in enumerate(value):
                pack_into(buf, at + i * size, item, f"{where}.{f.name}[{i}]")
    except struct.error as exc:
        raise LayoutError(f"{where}.{f.name}: {value!r} does not fit {k}: {exc}") from None


def pack_into(buf: bytearray, offset: int, record: Any, where: str | None = None) -> None:
    """Write ``record`` into ``buf`` at ``offset`` (padding and absent nested records are written as zeros).

    One ``struct`` call per record (see :func:`_packer`); a value that does not fit is packed again field by field
    so the error names the field."""
    try:
        _packer(cast(Hashable, type(record)))(buf, offset, record)
    except (struct.error, _DoesNotFit, TypeError):
        _pack_slowly(buf, offset, record, where)


def _pack_slowly(buf: bytearray, offset: int, record: Any, where: str | None) -> None:
    lay = layout_of(type(record))
    label = where or type(record).__name__
    for f in lay.fields:
        _pack_field(buf, offset, f, getattr(record, f.name), label)


class _DoesNotFit(Exception):
    """Raised by a compiled packer; the record is packed again field by field for a precise :class:`LayoutError`."""


def _fit(value: str, size: int) -> bytes:
    raw = value.encode()
    if len(raw) >= size or b"\0" in raw:
        raise _DoesNotFit
    return raw


@cache
def _fit_of(size: int) -> Callable[[str], bytes]:
    """:func:`_fit` for strings of field size ``size``, remembering the bytes of the last 4,096 strings that fit.

    Why: most strings of a record are the same from one render to the next (a GPU's UUID, name and bus ids, each
    NVLink's far end), and encoding and checking each one cost more than the rest of packing a GPU record (56
    strings, 0.8 us each, for the changed GPU of every injection on GB200). Bounded, and a string that does not
    fit raises every time (an exception is not remembered)."""
    return functools.lru_cache(maxsize=4096)(functools.partial(_fit, size=size))


def _records(value: tuple[Any, ...], count: int) -> tuple[Any, ...]:
    if len(value) > count:
        raise _DoesNotFit
    return value


@cache
def _packer(key: Hashable) -> Any:
    """A function ``(buf, offset, record)`` that writes ``record`` with one ``struct.pack_into`` of all its flat
    fields (an explicit little-endian format with the layout's padding, so offsets are the layout's by
    construction), then its nested records at their offsets. Generated once per record class: packing a
    snapshot field by field in Python cost milliseconds per change."""
    record = cast(type[Any], key)
    lay = layout_of(record)
    fmt = ["<"]
    args: list[str] = []
    env: dict[str, Any] = {}
    nested: list[tuple[FieldLayout, Records]] = []
    pos = 0
    for f in lay.fields:
        if f.offset > pos:
            fmt.append(f"{f.offset - pos}x")
        k = f.kind
        if isinstance(k, Scalar):
            fmt.append(k.code)
            args.append(f"r.{f.name}")
        elif isinstance(k, Char):
            fmt.append(f"{k.size}s")
            args.append(f"fit{k.size}(r.{f.name})")
            env[f"fit{k.size}"] = _fit_of(k.size)
        elif isinstance(k, Array):
            fmt.append(f"{k.length}{k.item.code}")
            args.append(f"*r.{f.name}")
        else:
            fmt.append(f"{k.size}x")  # zeroed here, the records present are written below
            nested.append((f, k))
        pos = f.offset + f.size
    if lay.size > pos:
        fmt.append(f"{lay.size - pos}x")
    lines = ["def pack(buf, offset, r):", f"    flat(buf, offset, {', '.join(args)})"]
    for i, (f, k) in enumerate(nested):
        size = layout_of(k.record).size
        lines += [f"    for i, item in enumerate(records(r.{f.name}, {k.count})):",
                  f"        sub{i}(buf, offset + {f.offset} + i * {size}, item)"]
    env["flat"], env["records"] = struct.Struct("".join(fmt)).pack_into, _records
    for i, (_, k) in enumerate(nested):
        env[f"sub{i}"] = _packer(cast(Hashable, k.record))
    exec("\n".join(lines), env)  # generated from the record's own field list
    return env["pack"]


@dataclass(frozen=True)
class ScalarPacker:
    """One scalar field of a record and its value packed: what :meth:`pack_into` writes into a record in a buffer."""

    offset: int
    """The field's offset in its record."""
    data: bytes

    def pack_into(self, buf: bytearray, base: int) -> tuple[int, int]:
        """Write the value into the record at ``base`` of ``buf``; the ``[start, end)`` range written."""
        start = base + self.offset
        buf[start:start + len(self.data)] = self.data
        return start, start + len(self.data)


def scalar_packer(record: type[Any], name: str, value: int | float) -> ScalarPacker:
    """Field ``name`` of ``record`` holding ``value``, packed as :func:`pack_into` packs it (:class:`LayoutError`
    when it does not fit, ``TypeError`` for a field that is not a scalar): a record that differs from the one in a
    buffer only in some scalars is written as those (the snapshot cache, :mod:`fakehw.nvml.snapcache`)."""
    f = _field_of(cast(Hashable, record), name)
    if not isinstance(f.kind, Scalar):
        raise TypeError(f"{record.__name__}.{name} is not a scalar field")
    try:
        return ScalarPacker(f.offset, struct.pack("<" + f.kind.code, value))
    except struct.error as exc:
        raise LayoutError(f"{record.__name__}.{name}: {value!r} does not fit {f.kind}: {exc}") from None


@cache
def _field_of(key: Hashable, name: str) -> FieldLayout:
    return layout_of(cast(type[Any], key)).field(name)


def pack(record: Any) -> bytes:
    buf = bytearray(layout_of(type(record)).size)
    pack_into(buf, 0, record)
    return bytes(buf)


def _unpack_field(buf: bytes | bytearray | memoryview, base: int, f: FieldLayout) -> Any:
    k = f.kind
    at = base + f.offset
    if isinstance(k, Scalar):
        return struct.unpack_from("<" + k.code, buf, at)[0]
    if isinstance(k, Char):
        raw = bytes(buf[at:at + k.size])
        return raw.split(b"\0", 1)[0].decode(errors="replace")
    if isinstance(k, Array):
        return struct.unpack_from(f"<{k.length}{k.item.code}", buf, at)
    size = layout_of(k.record).size
    return tuple(unpack(k.record, buf, at + i * size) for i in range(k.count))


def unpack(record: type[Any], buf: bytes | bytearray | memoryview, offset: int = 0) -> Any:
    """Read a ``record`` back (tests and ``python -m fakehw.nvml dump``)."""
    lay = layout_of(record)
    if offset < 0 or offset + lay.size > len(buf):
        raise LayoutError(f"{lay.c_name} at {offset} runs past the end of {len(buf)} bytes")
    return record(**{f.name: _unpack_field(buf, offset, f) for f in lay.fields})


def checksum(data: bytes | bytearray) -> int:
    """CRC-32 of a snapshot with its ``superseded`` and ``checksum`` fields read as zero."""
    hdr = layout_of(HeaderRecord)
    sup = hdr.field("superseded").offset
    chk = hdr.field("checksum").offset
    assert chk == sup + 4, "superseded and checksum must be adjacent"
    view = memoryview(data)
    crc = zlib.crc32(view[:sup])
    crc = zlib.crc32(b"\0" * 8, crc)
    return zlib.crc32(view[sup + 8:], crc) & 0xFFFFFFFF
