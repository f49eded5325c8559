"""The NVML snapshot of a node: built from the model and the runtime state, laid out, read back.

:func:`build_snapshot` is a pure function of (system, node, state, recent events): it computes every answer
the shim gives (topology levels, NVLink bonds and P2P status under the current link faults, fabric health,
MIG placements, readings), so the C side only copies fields. How the file is written (in place under a
sequence word, or replaced) and read whole is :mod:`fakehw.nvml.snapfile`.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakehw.agent.mig import GpuMig, NodeMig, boot_mig
from fakehw.agent.state import Event, GpuState, NodeState
from fakehw.model.catalogue import GpuSku
from fakehw.model.drivers import branch_of
from fakehw.model.system import Gpu, Node, NVLinkPort, System
from fakehw.model.topology import NodeTopology, P2PCapability, derive_node
from fakehw.nvml import layout
from fakehw.nvml.gpu_fields import board_id, board_state_fields, board_static_fields
from fakehw.nvml.layout import (
    CiProfileRecord,
    EventRecord,
    GpuInstanceRecord,
    GpuRecord,
    HeaderRecord,
    LinkRecord,
    MigProfileRecord,
    MigRecord,
    NicRecord,
    PlatformRecord,
    ProcessRecord,
)
from fakehw.nvml.migsnap import MigRecords, add_gpu
from fakehw.nvml.platform_info import module_id, platform_info
from fakehw.nvml.readings import (
    PCIE_SPEED_MBPS,
    engines,
    gpu_readings,
    memory_bus_width,
    reserved_mib,
    unit,
)
from fakehw.nvml.snapcache import SnapshotCache
from fakehw.nvml.snapfile import read_whole

SNAPSHOT_FILE = "nvml.snapshot"
RESERVED_SECTIONS = frozenset({"event"})
"""Sections laid out at their capacity whatever their count: the event ring grows with every fault until it is
full, and a file whose size stays put is updated in place (:mod:`fakehw.nvml.snapfile`) instead of replaced. The
space past the count is zeros; readers read ``count`` records (12 KiB of 256 48-byte records)."""

BRAND_NVIDIA = 14
BUS_TYPE_PCIE = 2
NVLINK_TYPE_GPU = 0
NVLINK_TYPE_SWITCH = 2
CAP_P2P, CAP_P2P_ATOMICS, CAP_VALID = 0, 2, 5
SUPPORTED_THROTTLE_REASONS = 0x1FF
CLOCK_EVENT_GPU_IDLE = 0x1
"""``nvmlClocksEventReasonGpuIdle``: active on every idle board in the captures."""
UNSET_INSTANCE = 0xFFFFFFFF
RESERVED_SHORT = 512 * 1024
"""Bytes a board's reserved memory falls short of whole MiB. Every capture shows free = total - reserved + 1 MiB
as nvidia-smi rounds them (half up); with a whole-MiB total (it must be: NVIDIA's feature discovery names the
A100-80GB's 3g profile 3g.40gb from the total bytes, which a total above 80 GiB would make 3g.41gb) the only
reading that does is a reserved size half a MiB short."""

# nvmlMemoryLocation_t of the model's ECC locations.
ECC_LOCATION = {"l1-cache": 0, "l2-cache": 1, "device-memory": 2, "dram": 2, "register-file": 3, "sram": 7}
NVLINK_COUNTER_ORDER = ("replay", "recovery", "crc-flit", "crc-data", "ecc-data")
_LINK_COUNTS = operator.itemgetter(*NVLINK_COUNTER_ORDER)
"""A link state's five error counters in the record's order (every link state holds all five: fakehw/agent/state.py
starts each port's counters as ``dict.fromkeys(NVLINK_COUNTERS, 0)``). The changed GPU's record is made on every
injection, and a generator over the five counters per link was its costliest line (issue 19's profile)."""



class SnapshotError(ValueError):
    """A snapshot cannot be built (the node exceeds the format's limits) or read (not a valid snapshot)."""


@dataclass(frozen=True)
class Snapshot:
    """Everything the shim reads, as records; :meth:`to_bytes` lays them out and checksums the file."""

    header: HeaderRecord
    gpus: tuple[GpuRecord, ...]
    migs: tuple[MigRecord, ...] = ()
    mig_profiles: tuple[MigProfileRecord, ...] = ()
    processes: tuple[ProcessRecord, ...] = ()
    events: tuple[EventRecord, ...] = ()
    nics: tuple[NicRecord, ...] = ()
    gis: tuple[GpuInstanceRecord, ...] = ()
    ci_profiles: tuple[CiProfileRecord, ...] = ()
    platform: tuple[PlatformRecord, ...] = ()

    def to_bytes(self, cache: SnapshotCache | None = None) -> bytes:
        """The file; with ``cache`` (the one :func:`build_snapshot` was given), the cache's last file is patched:
        only records that are not the ones it holds are packed (:meth:`SnapshotCache.file`)."""
        sections: list[tuple[str, Sequence[object], type[object]]] = [
            ("gpu", self.gpus, GpuRecord),
            ("mig", self.migs, MigRecord),
            ("mig_profile", self.mig_profiles, MigProfileRecord),
            ("process", self.processes, ProcessRecord),
            ("event", self.events, EventRecord),
            ("nic", self.nics, NicRecord),
            ("gi", self.gis, GpuInstanceRecord),
            ("ci_profile", self.ci_profiles, CiProfileRecord),
            ("platform", self.platform, PlatformRecord),
        ]
        limits = {"gpu": layout.MAX_GPUS, "mig": layout.MAX_GPUS * layout.MAX_MIG_PER_GPU,
                  "mig_profile": layout.MAX_GPUS * layout.MAX_MIG_PROFILES_PER_GPU,
                  "process": layout.MAX_PROCESSES, "event": layout.MAX_EVENTS, "nic": layout.MAX_NICS,
                  "gi": layout.MAX_GPUS * layout.MAX_GI_PER_GPU,
                  "ci_profile": layout.MAX_GPUS * layout.MAX_CI_PROFILES_PER_GPU, "platform": layout.MAX_GPUS}
        hdr_size = layout.layout_of(HeaderRecord).size
        offset = hdr_size
        fields: dict[str, Any] = {}
        for name, records, rtype in sections:
            if len(records) > limits[name]:
                raise SnapshotError(f"{len(records)} {name} records exceed the format's limit of {limits[name]}")
            size = layout.layout_of(rtype).size
            offset = (offset + 7) // 8 * 8
            fields[f"{name}_count"] = len(records)
            fields[f"{name}_record_size"] = size
            fields[f"{name}_offset"] = offset
            offset += size * (limits[name] if name in RESERVED_SECTIONS else len(records))
        total = (offset + 7) // 8 * 8
        header = layout.replaced(self.header, header_size=hdr_size, total_size=total, superseded=0, checksum=0,
                                 **fields)
        if cache is not None:
            buf = cache.file(total, [(name, fields[f"{name}_offset"], fields[f"{name}_record_size"],
                                      limits[name] if name in RESERVED_SECTIONS else len(records), records)
                                     for name, records, _ in sections])
        else:
            buf = bytearray(total)
            for name, records, rtype in sections:
                size = layout.layout_of(rtype).size
                base = fields[f"{name}_offset"]
                for i, rec in enumerate(records):
                    layout.pack_into(buf, base + i * size, rec, f"{name}[{i}]")
        layout.pack_into(buf, 0, header)
        struct.pack_into("<I", buf, layout.layout_of(HeaderRecord).field("checksum").offset, layout.checksum(buf))
        if cache is not None and cache.dirty is not None:
            cache.dirty.append((0, hdr_size))
        return bytes(buf)

    @classmethod
    def from_bytes(cls, data: bytes) -> Snapshot:
        """Parse a snapshot (checks magic, version, size and checksum; the shim checks more)."""
        hdr_size = layout.layout_of(HeaderRecord).size
        if len(data) < hdr_size:
            raise SnapshotError(f"{len(data)} bytes is shorter than the {hdr_size}-byte header")
        header: HeaderRecord = layout.unpack(HeaderRecord, data)
        if header.magic != layout.MAGIC:
            raise SnapshotError(f"not an NVML snapshot (magic {header.magic!r})")
        if header.format_version != layout.FORMAT_VERSION:
            raise SnapshotError(f"snapshot format {header.format_version}, this fakehw reads "
                                f"{layout.FORMAT_VERSION}")
        if header.total_size != len(data):
            raise SnapshotError(f"header says {header.total_size} bytes, file has {len(data)}")
        if header.checksum != layout.checksum(data):
            raise SnapshotError("checksum mismatch")

        def section(name: str, rtype: type[object]) -> tuple[object, ...]:
            count = getattr(header, f"{name}_count")
            base = getattr(header, f"{name}_offset")
            size = layout.layout_of(rtype).size
            return tuple(layout.unpack(rtype, data, base + i * size) for i in range(count))

        return cls(
            header=header,
            gpus=section("gpu", GpuRecord),  # type: ignore[arg-type]
            migs=section("mig", MigRecord),  # type: ignore[arg-type]
            mig_profiles=section("mig_profile", MigProfileRecord),  # type: ignore[arg-type]
            processes=section("process", ProcessRecord),  # type: ignore[arg-type]
            events=section("event", EventRecord),  # type: ignore[arg-type]
            nics=section("nic", NicRecord),  # type: ignore[arg-type]
            gis=section("gi", GpuInstanceRecord),  # type: ignore[arg-type]
            ci_profiles=section("ci_profile", CiProfileRecord),  # type: ignore[arg-type]
            platform=section("platform", PlatformRecord),  # type: ignore[arg-type]
        )


# --------------------------------------------------------------------------------------------------- build


@dataclass(frozen=True)
class FakeProcess:
    """A process to list as running on a GPU (the model has none; tests and future allocations add them)."""

    gpu: str
    pid: int
    used_memory: int
    name: str = ""
    kinds: int = 1
    """Bit 0 compute, bit 1 graphics, bit 2 MPS."""
    mig_index: int | None = None
    utilization: int = 0
    """Percent of the GPU's time this process keeps it busy (the GPU's utilization is the sum, at most 100)."""


@dataclass(frozen=True)
class _Peers:
    """PCI identity of whatever an NVLink port reaches."""

    device_id: dict[str, int] = field(default_factory=dict)
    subsystem_id: dict[str, int] = field(default_factory=dict)


def _peers(system: System, node: Node) -> _Peers:
    """What the node's NVLink ports reach: its own GPUs and switches and, through its NVLink domain, the domain's
    switches and other nodes' GPUs. Only the ports' far ends are looked up (a fleet of 10,000 nodes costs the same
    per node as one; walking every GPU of the fleet made building every node's snapshot quadratic)."""
    peers = _Peers()
    switches = {sw.id: sw for sw in node.nvswitches}
    domain = system.domain_of(node)
    if domain is not None:
        switches.update((sw.id, sw) for sw in domain.switches)
    for g in node.gpus:
        for port in g.ports:
            rid = port.remote_id
            if rid in peers.device_id:
                continue
            if rid in switches:
                peers.device_id[rid] = (switches[rid].sku.pci_device_id << 16) | 0x10DE
                continue
            remote = _gpu_by_id(system, rid)
            if remote is not None:
                peers.device_id[rid] = remote.sku.pci_device_vendor_id
                peers.subsystem_id[rid] = remote.sku.pci_subsystem_id
    return peers


def _gpu_by_id(system: System, gpu_id: str) -> Gpu | None:
    """The GPU ``<node>/<name>`` of the system, if there is one."""
    node_name, _, name = gpu_id.rpartition("/")
    owner = system.node(node_name)
    return owner.gpu(name) if owner is not None else None


def _mask(bits: Iterable[int], words: int) -> tuple[int, ...]:
    out = [0] * words
    for b in bits:
        if 0 <= b < words * 64:
            out[b // 64] |= 1 << (b % 64)
    return tuple(out)


@dataclass(frozen=True)
class _GpuStatic:
    """The fields of a GPU's record (and of its NVLink records) that depend only on the model and the node's
    topology, not on faults or readings: built once per topology, so a change to the GPU rebuilds only the rest
    (the same record either way: tests/nvml compare snapshots built with and without a cache)."""

    record: dict[str, Any]
    """Every field of the GPU's record (:func:`fakehw.nvml.layout.template`): the static ones, defaults elsewhere."""
    links: tuple[tuple[int, dict[str, Any]], ...]
    """Per entry of ``gpu.ports``: the NVML link number and every field of its :class:`LinkRecord`, the static ones
    set."""


def _link_static(port: NVLinkPort, gpu: Gpu, peers: _Peers) -> dict[str, Any]:
    addr = port.remote_address
    return {
        "present": 1,
        "version": gpu.sku.nvlink.nvml_version,
        "remote_type": NVLINK_TYPE_SWITCH if port.remote_kind == "switch" else NVLINK_TYPE_GPU,
        "capabilities": (1 << CAP_P2P) | (1 << CAP_P2P_ATOMICS) | (1 << CAP_VALID),
        "remote_link": port.remote_port,
        "speed_mbps": gpu.sku.nvlink.nvml_speed_mbps,
        "remote_bus_id": addr.nvml_bus_id,
        "remote_bus_id_legacy": addr.nvml_bus_id_legacy,
        "remote_domain": addr.domain,
        "remote_bus": addr.bus,
        "remote_device": addr.device,
        "remote_pci_device_id": peers.device_id.get(port.remote_id, 0),
        "remote_pci_subsystem_id": peers.subsystem_id.get(port.remote_id, 0),
    }


def _gpu_static(system: System, node: Node, topo: NodeTopology, gpu: Gpu, slot: int, peers: _Peers) -> _GpuStatic:
    sku = gpu.sku
    n = len(node.gpus)
    p2p = []
    for cap in P2PCapability:
        row = [int(topo.p2p[cap][slot][j]) for j in range(n)]
        p2p += row + [0] * (layout.MAX_GPUS - n)
    for port in gpu.ports:
        if port.port >= layout.MAX_LINKS:
            raise SnapshotError(f"{gpu.id} NVLink port {port.port} exceeds NVML's {layout.MAX_LINKS} links")
    cpus = topo.cpu_affinity[slot]
    if cpus and max(cpus) >= layout.CPU_MASK_WORDS * 64:
        raise SnapshotError(f"{gpu.id}'s CPUs reach CPU {max(cpus)}; NVML's CPU affinity in the snapshot holds CPUs "
                            f"0-{layout.CPU_MASK_WORDS * 64 - 1}")
    power = sku.power
    clocks = sku.clocks
    clock_max = (clocks.graphics_max_mhz, clocks.sm_max_mhz, clocks.mem_max_mhz, clocks.video_max_mhz)
    clock_app = (clocks.app_graphics, clocks.app_graphics, clocks.mem_max_mhz, clocks.video_max_mhz)
    eng = engines(sku)
    mig = sku.mig
    record = dict(
        uuid=gpu.uuid,
        name=sku.name,
        serial=gpu.serial,
        board_part_number=sku.board_part_number,
        vbios_version=sku.vbios,
        inforom_image=sku.inforom,
        inforom_oem=sku.inforom_oem,
        inforom_ecc=sku.inforom_ecc,
        inforom_power="",
        gsp_firmware=system.driver.version,
        bus_id=gpu.address.nvml_bus_id,
        bus_id_legacy=gpu.address.nvml_bus_id_legacy,
        model_name=gpu.name,
        index=gpu.index,
        minor=gpu.minor,
        pci_domain=gpu.address.domain,
        pci_bus=gpu.address.bus,
        pci_device=gpu.address.device,
        pci_function=gpu.address.function,
        pci_device_id=sku.pci_device_vendor_id,
        pci_subsystem_id=sku.pci_subsystem_id,
        pci_base_class=0x03,
        pci_sub_class=0x02,
        brand=BRAND_NVIDIA,
        architecture=int(sku.nvml_architecture),
        cc_major=sku.cuda_major_minor[0],
        cc_minor=sku.cuda_major_minor[1],
        multiprocessors=sku.multiprocessors,
        copy_engines=eng.copy,
        decoders=eng.decoders,
        encoders=eng.encoders,
        jpegs=eng.jpegs,
        ofas=eng.ofas,
        board_id=board_id(gpu),
        module_id=module_id(node, gpu),
        multi_gpu_board=0,
        numa_node=gpu.numa,
        gpu_numa_id=-1 if gpu.hbm_numa is None else gpu.hbm_numa,
        bus_type=BUS_TYPE_PCIE,
        memory_bus_width=memory_bus_width(sku),
        pcie_gen_max=sku.pcie.generation,
        pcie_gen_gpu_max=sku.pcie.gpu_max_generation,
        pcie_gen_cur=sku.pcie.generation,
        pcie_width_max=sku.pcie.width,
        pcie_width_cur=sku.pcie.current_width,
        pcie_speed_mbps=PCIE_SPEED_MBPS[sku.pcie.generation],
        pcie_replay=0,
        mem_total=sku.memory_mib * 2**20,
        mem_reserved=reserved_mib(sku) * 2**20 - RESERVED_SHORT,
        bar1_total=sku.bar1_mib * 2**20,
        temp_shutdown=sku.thermal.shutdown_c,
        temp_slowdown=sku.thermal.slowdown_c,
        temp_mem_max=sku.thermal.mem_max_c or 0,
        temp_gpu_max=sku.thermal.max_operating_c,
        power_default_limit_mw=power.default_limit_w * 1000,
        power_min_limit_mw=power.min_limit_w * 1000,
        power_max_limit_mw=power.max_limit_w * 1000,
        supported_throttle_reasons=SUPPORTED_THROTTLE_REASONS,
        clocks_max=clock_max,
        clocks_app=clock_app,
        clocks_app_default=clock_app,
        pstate=0,
        compute_mode=0,
        persistence_mode=1,
        display_mode=1,  # "Enabled" on the A100 capture (570); 580 and later answer DEPRECATED (support.py)
        ecc_current=1,
        ecc_pending=1,
        ecc_default=1,
        cpu_affinity=_mask(cpus, layout.CPU_MASK_WORDS),
        mem_affinity=_mask([gpu.numa], layout.NUMA_MASK_WORDS),
        nvlink_count=max((p.port + 1 for p in gpu.ports), default=0),
        nvlink_version=sku.nvlink.nvml_version,
        **board_static_fields(system, node, gpu),
        mig_capable=int(mig is not None),
        mig_max_devices=mig.max_instances if mig is not None else 0,
        topo_level=tuple(int(topo.levels[slot][j]) for j in range(n)) + (0,) * (layout.MAX_GPUS - n),
        nvlink_bond=tuple(min(255, topo.nvlinks[slot][j]) for j in range(n)) + (0,) * (layout.MAX_GPUS - n),
        p2p=tuple(p2p),
    )
    return _GpuStatic(layout.template(GpuRecord, record),
                      tuple((port.port, layout.template(LinkRecord, _link_static(port, gpu, peers)))
                            for port in gpu.ports))


_NO_LINK = LinkRecord()


def _gpu_record(system: System, node: Node, static: _GpuStatic, gpu: Gpu, gstate: GpuState,
                generation: int, mig_state: GpuMig | None, first_mig: int, migs: list[MigRecord],
                first_profile: int, profiles: list[MigProfileRecord], first_process: int,
                processes: list[ProcessRecord], load: int = 0) -> GpuRecord:
    """The record of ``gpu``: its static fields (:class:`_GpuStatic`) and those that follow its state, readings,
    MIG devices and processes."""
    seed = system.seed
    r = gpu_readings(seed, gpu, gstate, generation, load=load)
    total = static.record["mem_total"]
    reserved = static.record["mem_reserved"]
    used = sum(p.used_memory for p in processes)
    ecc = [0] * (2 * 2 * layout.ECC_LOCATIONS)
    for etype, counts in ((0, gstate.ecc_sbe), (1, gstate.ecc_dbe)):
        for location, count in counts.items():
            loc = ECC_LOCATION[location]
            for counter in (0, 1):  # volatile, aggregate
                ecc[(etype * 2 + counter) * layout.ECC_LOCATIONS + loc] += count
    dbe = gstate.retired_pages_dbe
    dbe_pages = retired_pages(seed, gpu.id, dbe, total)
    links: list[LinkRecord] = [_NO_LINK] * layout.MAX_LINKS
    for i, (number, link) in enumerate(static.links):
        link_state = gstate.links[i]
        links[number] = layout.make_from(LinkRecord, link, up=int(link_state.up),
                                         errors=_LINK_COUNTS(link_state.errors), util_rx=r.nvlink_rx[i],
                                         util_tx=r.nvlink_tx[i])
    nvswitch_links = sum(1 for i, p in enumerate(gpu.ports) if p.remote_kind == "switch" and gstate.links[i].up)
    return layout.make_from(  # not GpuRecord(**...): see layout.make
        GpuRecord,
        static.record,
        board_state_fields(system, node, gpu, gstate, r),
        lost=int(gstate.lost),
        pcie_tx_kbs=r.pcie_tx_kbs,
        pcie_rx_kbs=r.pcie_rx_kbs,
        mem_used=used,
        mem_free=max(0, total - reserved - used),
        bar1_used=r.bar1_used,
        temperature=gstate.temperature_c,
        mem_temperature=r.mem_temperature,
        power_usage_mw=r.power_mw,
        power_limit_mw=gstate.power_limit_w * 1000,
        power_enforced_mw=gstate.power_limit_w * 1000,
        energy_mj=r.energy_mj,
        throttle_reasons=gstate.throttle_reasons | (CLOCK_EVENT_GPU_IDLE if r.idle else 0),
        clocks_current=r.clocks_current,
        util_gpu=r.util_gpu,
        util_memory=r.util_memory,
        ecc_counts=tuple(ecc),
        retired_dbe=dbe,
        retired_pending=int(dbe > 0),
        retired_dbe_pages=dbe_pages + (0,) * (layout.RETIRED_PAGES_MAX - len(dbe_pages)),
        retired_time=int(time.time()) if dbe else 0,
        remap_unc=dbe,
        remap_pending=int(dbe > 0),
        remap_histogram=_remap_histogram(gpu.sku, dbe),
        nvswitch_links=nvswitch_links,
        mig_current=int(mig_state is not None and mig_state.current),
        mig_pending=int(mig_state is not None and mig_state.pending),
        mig_first=first_mig,
        mig_count=len(migs),
        mig_profile_first=first_profile,
        mig_profile_count=len(profiles),
        process_first=first_process,
        process_count=len(processes),
        xid_count=len(gstate.xids),
        last_xid=gstate.xids[-1] if gstate.xids else 0,
        links=tuple(links),
    )


_XID_HISTORY = frozenset({"xids", "faults"})
"""The fields of a GPU's state that its record shows only as its Xid count and last Xid (``xids``), or not at all
(``faults``, the ids of its faults). The health verdict and its reasons, which no record field shows either, are
compared all the same: a critical Xid's first occurrence on a GPU changes them and rebuilds the record, so a field
that some day follows them cannot go stale; its repeats (the reasons name each code once) are revised."""
_RECORD_INPUTS = tuple(f.name for f in dataclasses.fields(GpuState) if f.name not in _XID_HISTORY)


def _revise_xids(key: tuple[Any, ...], old_key: tuple[Any, ...], old: GpuRecord) -> dict[str, int] | None:
    """The fields of the GPU's last record that its state now changes, the Xid count and last Xid, when nothing
    else the record is made from changed since (``key`` against ``old_key``, :func:`build_snapshot`'s: the GPU's
    state first, then its NVLinks, MIG state and processes); None when something did. What a GB200 tray's injection
    of an Xid costs then is two fields, not a record of 171 fields and 18 NVLink records with readings (0.1 ms of
    CPU per injection in process), packed as two fields, not as the record (25 us more)."""
    gstate: GpuState = key[0]
    was: GpuState = old_key[0]
    if old_key[1:] != key[1:]:
        return None
    if any(getattr(was, name) != getattr(gstate, name) for name in _RECORD_INPUTS):
        return None
    return {"xid_count": len(gstate.xids), "last_xid": gstate.xids[-1] if gstate.xids else 0}


def _remap_histogram(sku: GpuSku, uncorrectable: int) -> tuple[int, int, int, int, int]:
    """Banks with all (max), most, some, few and no spare rows left: a healthy board has every bank at max (640
    on A100, 2560 on H100, 3968 on GB200 in the captures); each uncorrectable remap moves one bank down to high."""
    banks = sku.row_remap_banks or 0
    moved = min(uncorrectable, banks)
    return banks - moved, moved, 0, 0, 0


def retired_pages(seed: int, gpu_id: object, count: int, framebuffer: int) -> tuple[int, ...]:
    """Addresses of ``count`` pages retired for double-bit errors (at most what the record holds). nvml.h calls
    each "the hardware address of the page that was retired": an address in the board's framebuffer, retired once,
    so distinct pages below ``framebuffer`` bytes (page 0 left out: nothing to tell it from an empty slot)."""
    frames = framebuffer // PAGE_BYTES - 1
    wanted = min(count, layout.RETIRED_PAGES_MAX, max(frames, 0))
    pages: dict[int, None] = {}
    draw = 0
    while len(pages) < wanted:
        pages.setdefault(PAGE_BYTES * (1 + int(unit(seed, gpu_id, "page", draw) * frames)))
        draw += 1
    return tuple(pages)


PAGE_BYTES = 4096
"""The granule the fake retires (its choice: nvml.h gives no page size, only that each is a retired page's
address)."""


def node_topology(system: System, node: Node, state: NodeState) -> NodeTopology:
    """The node's topology with the NVLink ports that are down at run time taken out."""
    if state.down_ports:
        return derive_node(node, state.down_ports)
    return system.topology.nodes[node.name]


def build_snapshot(system: System, node: Node, state: NodeState, events: Sequence[Event] = (),
                   processes: Sequence[FakeProcess] = (), render_time: float | None = None,
                   cache: SnapshotCache | None = None, gpu_generations: Mapping[str, int] | None = None) -> Snapshot:
    """The snapshot of ``node`` in ``state``; ``events`` are the node's recent events, oldest first.

    ``cache`` (the agent keeps one per node): parts whose inputs did not change since the cache's last snapshot are
    reused (:mod:`fakehw.nvml.snapcache`). ``gpu_generations``: the generation each GPU's readings are of (default:
    the node's), which is what a cache's reused records answer."""
    if len(node.gpus) > layout.MAX_GPUS:
        raise SnapshotError(f"node {node.name} has {len(node.gpus)} GPUs; the snapshot holds {layout.MAX_GPUS}")
    memo = cache if cache is not None else SnapshotCache()
    topo = memo.part("topology", state.down_ports, lambda: node_topology(system, node, state))
    peers = memo.part("peers", None, lambda: _peers(system, node))
    slot_of = {g.name: i for i, g in enumerate(node.gpus)}
    unknown = sorted({p.gpu for p in processes} - slot_of.keys())
    if unknown:
        raise SnapshotError(f"processes name GPUs node {node.name} does not have: {', '.join(unknown)}")
    gpus: list[GpuRecord] = []
    mig = MigRecords()
    mig_node: NodeMig = state.mig if state.mig is not None else boot_mig(node)
    procs: list[ProcessRecord] = []
    for slot, gpu in enumerate(node.gpus):
        gstate = state.gpu(gpu.name)
        assert gstate is not None
        mig_state = mig_node.gpu(gpu.name)
        first_mig, first_profile = len(mig.migs), len(mig.profiles)
        counts = (len(mig.profiles), len(mig.gis), len(mig.migs), len(mig.ci_profiles))
        part = memo.part(("mig", gpu.name), (mig_state, counts),
                         functools.partial(_mig_part, gpu, slot, mig_state, counts))
        mig.profiles += part.profiles
        mig.gis += part.gis
        mig.migs += part.migs
        mig.ci_profiles += part.ci_profiles
        gpu_migs, gpu_profiles = part.migs, part.profiles
        gpu_procs = []
        for p in processes:
            if p.gpu != gpu.name:
                continue
            gi = ci = UNSET_INSTANCE
            if p.mig_index is not None:
                if p.mig_index >= len(gpu_migs):
                    raise SnapshotError(f"process {p.pid}: {gpu.id} has no MIG device {p.mig_index}")
                gi, ci = gpu_migs[p.mig_index].gpu_instance_id, gpu_migs[p.mig_index].compute_instance_id
            gpu_procs.append(ProcessRecord(gpu=slot, pid=p.pid, kinds=p.kinds, gpu_instance_id=gi,
                                           compute_instance_id=ci, used_memory=p.used_memory, name=p.name))
        load = sum(p.utilization for p in processes if p.gpu == gpu.name)
        key = (gstate, state.down_ports, mig_state, counts, len(procs), tuple(gpu_procs), load)
        generation = state.generation if gpu_generations is None else gpu_generations.get(gpu.name, state.generation)

        def make(gen: int, gpu: Gpu = gpu, slot: int = slot, gstate: GpuState = gstate,
                 mig_state: GpuMig | None = mig_state, first_mig: int = first_mig, gpu_migs: list[MigRecord] = gpu_migs,
                 first_profile: int = first_profile, gpu_profiles: list[MigProfileRecord] = gpu_profiles,
                 first_process: int = len(procs), gpu_procs: list[ProcessRecord] = gpu_procs,
                 load: int = load) -> GpuRecord:
            static = memo.part(("gpu-static", gpu.name), state.down_ports,
                               lambda: _gpu_static(system, node, topo, gpu, slot, peers))
            return _gpu_record(system, node, static, gpu, gstate, gen, mig_state, first_mig, gpu_migs,
                               first_profile, gpu_profiles, first_process, gpu_procs, load)

        gpus.append(memo.gpu_record(gpu.name, key, generation, make, _revise_xids))
        procs += gpu_procs

    def event_record(e: Event) -> EventRecord | None:
        if e.nvml_type == 0 or e.device not in slot_of:
            return None
        return EventRecord(
            seq=e.seq,
            gpu=slot_of[e.device],
            event_type=e.nvml_type,
            event_data=e.data if e.kind == "xid" else 0,
            time_us=int(e.time * 1e6),
        )

    window = memo.ring(events, event_record, _SEQ)
    # In order already (events are raised in journal order), which the cache checks as events join.
    ring = (window.records if window.ordered else sorted(window.records, key=_SEQ))[-layout.MAX_EVENTS:]
    last_seq = window.last_seq
    driver = system.driver
    header = HeaderRecord(
        generation=state.generation,
        seed=system.seed,
        render_time_us=int((time.time() if render_time is None else render_time) * 1e6),
        driver_version=driver.version,
        nvml_version=driver.nvml_version,
        hostname=node.hostname,
        node_name=node.name,
        profile=system.name[:63],
        cuda_driver_version=driver.cuda_driver_version,
        driver_branch=driver.branch,
        gpm_metric_max=memo.part("gpm", driver.version, lambda: branch_of(driver.version).gpm_metric_max),
        event_last_seq=last_seq,
    )
    return Snapshot(header, tuple(gpus), tuple(mig.migs), tuple(mig.profiles), tuple(procs), tuple(ring),
                    memo.part("nics", state.down_ports, lambda: _nic_records(node, topo)), tuple(mig.gis),
                    tuple(mig.ci_profiles),
                    memo.part("platform", None, lambda: tuple(_platform_record(system, node, g) for g in node.gpus)))


_SEQ = operator.attrgetter("seq")


def _mig_part(gpu: Gpu, slot: int, state: GpuMig | None, counts: tuple[int, int, int, int]) -> MigRecords:
    """``gpu``'s MIG records when the GPUs before it have ``counts`` (profiles, GPU instances, MIG devices,
    compute-instance profiles) records."""
    out = MigRecords(*([None] * n for n in counts))  # type: ignore[arg-type]  # placeholders: indices follow them
    add_gpu(out, gpu, slot, state)
    return MigRecords(out.profiles[counts[0]:], out.gis[counts[1]:], out.migs[counts[2]:], out.ci_profiles[counts[3]:])


def _platform_record(system: System, node: Node, gpu: Gpu) -> PlatformRecord:
    p = platform_info(system, node, gpu)
    serial = p.chassis_serial.encode()[:16]
    return PlatformRecord(supported=int(p.supported), slot_number=p.slot, tray_index=p.tray, host_id=p.host_id,
                          peer_type=p.peer_type, module_id=p.module_id,
                          chassis_serial=tuple(serial) + (0,) * (16 - len(serial)),
                          ib_guid=tuple(p.fabric_guid.to_bytes(8, "big")) + (0,) * 8)


def _nic_records(node: Node, topo: NodeTopology) -> tuple[NicRecord, ...]:
    nics = node.nics[: layout.MAX_NICS]
    n_gpus, n_nics = len(node.gpus), len(nics)
    out = []
    for k, nic in enumerate(nics):
        addr = nic.address
        out.append(NicRecord(
            name=nic.name,
            bus_id=addr.nvml_bus_id,
            domain=addr.domain,
            bus=addr.bus,
            device=addr.device,
            function=addr.function,
            gpu_level=tuple(int(topo.gpu_nic_levels[g][k]) for g in range(n_gpus)) + (0,) * (layout.MAX_GPUS - n_gpus),
            nic_level=tuple(int(topo.nic_levels[k][j]) for j in range(n_nics)) + (0,) * (layout.MAX_NICS - n_nics),
        ))
    return tuple(out)


# --------------------------------------------------------------------------------------------------- files


def read_snapshot(path: Path) -> Snapshot:
    try:
        data = read_whole(path)
    except OSError as exc:
        raise SnapshotError(f"cannot read snapshot {path}: {exc.strerror}") from None
    return Snapshot.from_bytes(data)
