"""The expanded system: every node, device and link of a profile as immutable objects.

A :class:`System` is what renderings read (NVML snapshot, fake sysfs, topology matrices). It is produced by
:func:`fakehw.model.expand.expand` from a validated profile and never changes; runtime state (faults, counters)
lives in the agent and is layered on top by renderers.

Identifiers: a node-local device is ``<node>/<name>`` (``dgx-h100-0/gpu3``); a switch chip of a multi-node
NVLink domain is ``<domain>/<name>`` (``nvl72/sw5``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from fakehw.model.catalogue import CxlMemdevSku, GpuSku, MigProfile, NicSku, NVSwitchSku
from fakehw.model.units import PciAddress

if TYPE_CHECKING:
    from fakehw.model.topology import SystemTopology

Arch = Literal["amd64", "arm64", "riscv64"]
NumaKind = Literal["dram", "lpddr", "hbm", "cxl", "reserved"]
PoolTier = Literal["hbm", "nvlink-peer-hbm", "c2c-host", "cxl", "rdma"]


class TopologyLevel(IntEnum):
    """NVML ``nvmlGpuTopologyLevel_t``: how far apart two PCI devices are."""

    INTERNAL = 0
    SINGLE = 10
    MULTIPLE = 20
    HOSTBRIDGE = 30
    NODE = 40
    SYSTEM = 50

    @property
    def short(self) -> str:
        """The ``nvidia-smi topo -m`` spelling."""
        return {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}[self.value]


# --------------------------------------------------------------------------------------------------- host


@dataclass(frozen=True, slots=True)
class Caches:
    l1d: int
    l1i: int
    l2: int
    l3: int
    l3_shared_by: Literal["socket", "numa"]


@dataclass(frozen=True, slots=True)
class Cpu:
    arch: Arch
    vendor: str
    model: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    frequency_mhz: int
    isa: tuple[str, ...]
    family: int
    model_id: int
    stepping: int
    caches: Caches

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def logical_cpus(self) -> int:
        return self.cores * self.threads_per_core

    def cpu_id(self, socket: int, core: int, thread: int) -> int:
        """Linux numbering: first threads of all cores first, then the SMT siblings."""
        return thread * self.cores + socket * self.cores_per_socket + core

    def socket_of(self, cpu: int) -> int:
        return (cpu % self.cores) // self.cores_per_socket

    def core_of(self, cpu: int) -> int:
        """Core id within its socket."""
        return (cpu % self.cores) % self.cores_per_socket

    def thread_siblings(self, cpu: int) -> tuple[int, ...]:
        base = cpu % self.cores
        return tuple(base + t * self.cores for t in range(self.threads_per_core))


@dataclass(frozen=True, slots=True)
class Initiator:
    """HMAT access performance (MB/s, ns) of a memory node from its nearest initiator."""

    read_bandwidth_mbs: int
    write_bandwidth_mbs: int
    read_latency_ns: int
    write_latency_ns: int


@dataclass(frozen=True, slots=True)
class NumaNode:
    id: int
    kind: NumaKind
    socket: int | None
    cpus: tuple[int, ...]
    memory: int
    gpu: str | None
    initiator: Initiator

    @property
    def has_cpu(self) -> bool:
        return bool(self.cpus)


# --------------------------------------------------------------------------------------------------- PCIe


@dataclass(frozen=True, slots=True)
class HostBridge:
    name: str
    numa: int
    domain: int
    bus: int


@dataclass(frozen=True, slots=True)
class PcieSwitch:
    name: str
    parent: str
    address: PciAddress


# --------------------------------------------------------------------------------------------------- NVLink


@dataclass(frozen=True, slots=True)
class NVLinkPort:
    """One NVLink port of a GPU or switch and what is at its other end."""

    port: int
    remote_kind: Literal["gpu", "switch"]
    remote_id: str
    remote_port: int
    remote_address: PciAddress
    up: bool
    bandwidth_gbs: float


@dataclass(frozen=True, slots=True)
class C2CLink:
    socket: int
    bandwidth_gbs: float
    links: int


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A GPU instance created at boot (with one full compute instance, as ``nvidia-smi mig -cgi ... -C`` makes)."""

    index: int
    """Position in the profile's list (the order they are created in)."""
    profile: MigProfile
    uuid: str
    """Of its compute instance: the MIG device."""
    start_slice: int
    """Placement start in memory slices (``nvidia-smi mig -lgi`` Placement Start)."""
    gpu_instance_id: int


@dataclass(frozen=True, slots=True)
class Gpu:
    node: str
    name: str
    index: int
    sku: GpuSku
    address: PciAddress
    parent: str
    numa: int
    uuid: str
    serial: str
    ports: tuple[NVLinkPort, ...]
    c2c: C2CLink | None
    mig_enabled: bool
    mig_instances: tuple[MigInstance, ...]
    hbm_numa: int | None
    module_id: int = 0
    """Position on the baseboard as the profile gives it (nvmlDeviceGetModuleId); 0: not given (see
    fakehw.nvml.platform_info.module_id for the default)."""

    @property
    def id(self) -> str:
        return f"{self.node}/{self.name}"

    @property
    def minor(self) -> int:
        return self.index

    @property
    def memory_bytes(self) -> int:
        return self.sku.memory_mib * 2**20


@dataclass(frozen=True, slots=True)
class NVSwitch:
    id: str
    name: str
    sku: NVSwitchSku
    address: PciAddress
    parent: str | None
    ports: tuple[NVLinkPort, ...]

    @property
    def on_pci(self) -> bool:
        """True when this chip is a PCI device of a node (DGX baseboard), not in a switch tray."""
        return self.parent is not None


# --------------------------------------------------------------------------------------------------- NICs


@dataclass(frozen=True, slots=True)
class Roce:
    trust: Literal["dscp", "pcp"]
    dscp: int
    priority: int
    pfc_priorities: tuple[int, ...]
    ecn: bool
    cnp_dscp: int
    cnp_priority: int


@dataclass(frozen=True, slots=True)
class Nic:
    node: str
    name: str
    netdev: str
    sku: NicSku
    address: PciAddress
    parent: str
    numa: int
    link_layer: Literal["ethernet", "infiniband"]
    mtu: int
    rail: int | None
    roce: Roce
    mac: str
    node_guid: str

    @property
    def id(self) -> str:
        return f"{self.node}/{self.name}"


# --------------------------------------------------------------------------------------------------- CXL


@dataclass(frozen=True, slots=True)
class CxlHostBridge:
    name: str
    uid: int
    numa: int
    root_ports: tuple[str, ...]
    port_ids: tuple[int, ...] = ()
    """Hardware port id of each root port (the dport id in ``portN/dportID`` and HDM target lists)."""
    decoders: int = 4
    """HDM decoders of the host bridge's port."""
    restricted: bool = False
    """A restricted CXL host (RCH, CXL 1.1): no port of its own; its device's endpoint hangs off the root."""

    def port_id(self, root_port: str) -> int:
        return self.port_ids[self.root_ports.index(root_port)]


@dataclass(frozen=True, slots=True)
class CxlSwitch:
    name: str
    parent: str
    downstream_ports: tuple[str, ...]
    port_ids: tuple[int, ...] = ()
    """Hardware port id of each downstream port."""
    decoders: int = 4

    def port_id(self, downstream_port: str) -> int:
        return self.port_ids[self.downstream_ports.index(downstream_port)]


@dataclass(frozen=True, slots=True)
class CxlMemdev:
    name: str
    sku: CxlMemdevSku
    parent: str
    host_bridge: str
    behind_switch: bool
    ram_size: int
    pmem_size: int
    serial: int
    pooled: str | None = None
    """Name of the system CXL pool when this is a logical device of a pooled multi-logical device."""
    qos_class: int = 0
    decoders: int = 2
    """HDM decoders of the device's endpoint port."""
    numa: int | None = None
    """NUMA node of the device (``memN/numa_node``); None: its host bridge's."""


@dataclass(frozen=True, slots=True)
class CxlWindow:
    name: str
    index: int
    size: int
    targets: tuple[str, ...]
    interleave_granularity: int
    ram: bool
    pmem: bool
    numa: int | None = None
    """kind: cxl NUMA node that RAM decoded by this window onlines into (None: the window's RAM has no node)."""
    qos_class: int = 0
    """QoS Throttling Group id of the window (CFMWS qtg_id), shown as the root decoder's ``qos_class``."""
    arithmetic: Literal["modulo", "xor"] = "modulo"
    """How the window picks a host bridge from a host address (CFMWS interleave arithmetic)."""

    @property
    def root_granularity(self) -> int:
        """The root decoder's ``interleave_granularity``: the window's, except that a window over one host bridge
        advertises the smallest (256), so any region granularity fits it (drivers/cxl/acpi.c)."""
        return 256 if len(self.targets) == 1 else self.interleave_granularity


@dataclass(frozen=True, slots=True)
class CxlRegion:
    name: str
    window: str
    targets: tuple[str, ...]
    interleave_granularity: int
    mode: Literal["ram", "pmem"]
    size: int
    numa: int | None


CxlPlatform = Literal["acpi", "cxl_test"]
OnlinePolicy = Literal["offline", "online", "online_movable"]


@dataclass(frozen=True, slots=True)
class Cxl:
    host_bridges: tuple[CxlHostBridge, ...] = ()
    switches: tuple[CxlSwitch, ...] = ()
    memdevs: tuple[CxlMemdev, ...] = ()
    windows: tuple[CxlWindow, ...] = ()
    regions: tuple[CxlRegion, ...] = ()
    platform: CxlPlatform = "acpi"
    """Who publishes the CXL root: ACPI (ACPI0017, host bridges ACPI0016, PCI devices) or the kernel's cxl_test
    mock (platform devices cxl_acpi.0, cxl_host_bridge.N, ..., cxl_mem.N; libcxl calls its bus ``cxl_test``)."""
    hotplug_online: OnlinePolicy = "online_movable"
    """What happens to memory a RAM region hot-adds (the kernel's ``auto_online_blocks`` policy)."""

    def host_bridge(self, name: str) -> CxlHostBridge | None:
        return next((h for h in self.host_bridges if h.name == name), None)

    def window(self, name: str) -> CxlWindow | None:
        return next((w for w in self.windows if w.name == name), None)

    def memdev(self, name: str) -> CxlMemdev | None:
        return next((m for m in self.memdevs if m.name == name), None)


@dataclass(frozen=True, slots=True)
class CxlPool:
    """A pooled multi-logical device shared by hosts through a CXL 2.0 switch."""

    name: str
    nodes: tuple[str, ...]
    host_port: str
    capacity: int
    logical_devices: int
    assignments: tuple[tuple[int, str], ...]
    window: str = ""
    """Name of the window (on every member host) that decodes the pooled device."""

    @property
    def ld_size(self) -> int:
        return self.capacity // self.logical_devices


# --------------------------------------------------------------------------------------------------- pools


@dataclass(frozen=True, slots=True)
class LatencyDomain:
    """How far a pool's memory is from the GPUs that use it (derived from its tier); rank 0 is nearest."""

    name: str
    rank: int
    latency_ns: int


@dataclass(frozen=True, slots=True)
class MemoryPool:
    node: str
    name: str
    tier: PoolTier
    capacity: int
    policy: Literal["shared", "exclusive"]
    source: str
    latency: LatencyDomain
    bandwidth_gbs: float

    @property
    def resource_name(self) -> str:
        return f"nvidia.com/gpu.memoryPool.{self.name}"


# --------------------------------------------------------------------------------------------------- node


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    group: str
    index: int
    cpu: Cpu
    numa: tuple[NumaNode, ...]
    distances: tuple[tuple[int, ...], ...]
    host_bridges: tuple[HostBridge, ...]
    pcie_switches: tuple[PcieSwitch, ...]
    gpus: tuple[Gpu, ...]
    nvswitches: tuple[NVSwitch, ...]
    nics: tuple[Nic, ...]
    cxl: Cxl
    memory_pools: tuple[MemoryPool, ...]
    labels: tuple[tuple[str, str], ...]
    nvlink_domain: str | None
    template: int = field(compare=False)
    """Identity of the node template this node came from; nodes with the same template share topology."""
    hmat: bool = True
    """The firmware publishes an HMAT (the nodes' ``initiator`` figures reach the kernel)."""
    dmi_vendor: str | None = None
    dmi_product: str | None = None
    """DMI sys_vendor and product_name of the machine (None: not given by the profile)."""

    @property
    def hostname(self) -> str:
        return self.name

    def gpu(self, name: str) -> Gpu | None:
        return next((g for g in self.gpus if g.name == name), None)

    def numa_node(self, numa_id: int) -> NumaNode | None:
        return next((n for n in self.numa if n.id == numa_id), None)

    def bridge_parent(self, name: str) -> str | None:
        """Parent of a PCIe switch; None for a host bridge or an unknown name."""
        return next((s.parent for s in self.pcie_switches if s.name == name), None)

    def host_bridge_of(self, parent: str) -> HostBridge:
        """Walk up from a device's parent to its host bridge."""
        name = parent
        for _ in range(len(self.pcie_switches) + 1):
            up = self.bridge_parent(name)
            if up is None:
                break
            name = up
        return next(hb for hb in self.host_bridges if hb.name == name)


@dataclass(frozen=True, slots=True)
class Fabric:
    cluster_uuid: str
    clique_id: int


@dataclass(frozen=True, slots=True)
class NVLinkDomain:
    """A multi-node NVLink domain: its nodes, its switch chips and the fabric manager's identity for it."""

    name: str
    spec_name: str
    nodes: tuple[str, ...]
    switches: tuple[NVSwitch, ...]
    fabric: Fabric | None


@dataclass(frozen=True, slots=True)
class Driver:
    version: str
    cuda_version: str

    @property
    def branch(self) -> int:
        """The driver branch (``580.105.08`` -> 580): which NVML generation the library presents."""
        return int(self.version.split(".", 1)[0])

    @property
    def nvml_version(self) -> str:
        """``nvmlSystemGetNVMLVersion``: the CUDA major version, then the driver version (13.580.105.08)."""
        major = self.cuda_version.split(".")[0]
        return f"{major}.{self.version}"

    @property
    def cuda_driver_version(self) -> int:
        """``nvmlSystemGetCudaDriverVersion``: 12.2 -> 12020."""
        major, minor = self.cuda_version.split(".")
        return int(major) * 1000 + int(minor) * 10


@dataclass(frozen=True)
class System:
    name: str
    description: str
    projection: str | None
    driver: Driver
    seed: int
    nodes: tuple[Node, ...]
    nvlink_domains: tuple[NVLinkDomain, ...]
    cxl_pools: tuple[CxlPool, ...]
    digest: str
    """sha256 of the canonical profile document this system was expanded from."""

    def node(self, name: str) -> Node | None:
        return self._nodes_by_name.get(name)

    @cached_property
    def _nodes_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def topology(self) -> SystemTopology:
        """Derived topology, computed on first use and kept (the system never changes)."""
        from fakehw.model.topology import derive_system

        return derive_system(self)

    def gpus(self) -> Iterator[Gpu]:
        for node in self.nodes:
            yield from node.gpus

    @property
    def gpu_count(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    def domain_of(self, node: Node) -> NVLinkDomain | None:
        return self._domains_by_name.get(node.nvlink_domain) if node.nvlink_domain is not None else None

    @cached_property
    def _domains_by_name(self) -> dict[str, NVLinkDomain]:
        """By name: a lookup per GPU per snapshot must not walk a fleet's hundreds of domains."""
        return {d.name: d for d in self.nvlink_domains}
