"""The profile document: what a person writes to describe a system.

These models are the *authoring* format (exported as JSON Schema by ``fakehw schema``). They are checked field
by field here; cross-references (a link to a GPU that does not exist, a GPU with more links than its SKU) are
checked when the document is expanded into a :class:`fakehw.model.system.System`, where every object exists.

Keys are camelCase in YAML (``coresPerSocket``), like Kubernetes manifests; unknown keys are errors so typos
never pass silently.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from fakehw.model.drivers import DEFAULT_DRIVER, VERSION_PATTERN, UnknownBranch, branch_of
from fakehw.model.units import PciAddressField, Size

MAX_NODES = 10_000
MAX_GPUS_PER_NODE = 32
"""GPUs one host (one driver instance) can present: NVIDIA's kernel driver holds ``NV_MAX_DEVICES`` = 32 ("the
maximum number of GPUs supported in a single system", nvlimits.h of open-gpu-kernel-modules, 32 in every branch
535-595), its resource manager refuses a 33rd with NV_ERR_INSUFFICIENT_RESOURCES (``gpumgrAllocGpuInstance``) and
the attached-GPU table NVML reads is ``NV0000_CTRL_GPU_MAX_ATTACHED_GPUS`` = 32 long. Racks with more GPUs are
several hosts: a GB200 NVL72 is 18 trays of 4."""
MAX_LINKS_PER_EDGE = 64

Name = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$",
        description="a name: letters, digits, '-', '_' or '.', at most 63 characters",
    ),
]
Pattern = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9_.*?\[\]-]{1,63}$",
        description="a name, or a shell-style pattern such as gpu* or sw[0-3]",
    ),
]


class Spec(BaseModel):
    """Base of every profile section: camelCase keys, unknown keys rejected, immutable."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_default=True,
    )


# --------------------------------------------------------------------------------------------------- host


class DriverSpec(Spec):
    """The driver the node runs. Its branch selects the NVML generation the fake library presents (the functions
    that exist, the struct versions they take) and the CUDA version it reports; see fakehw/model/drivers.py."""

    version: str = Field(DEFAULT_DRIVER, pattern=VERSION_PATTERN,
                         description="e.g. 580.105.08; the branch (580) must be one fakehw knows")
    cuda_version: str | None = Field(None, pattern=r"^\d{1,2}\.\d{1,2}$",
                                     description="default: the branch's own; anything else is an error")

    @field_validator("version")
    @classmethod
    def _known_branch(cls, value: str) -> str:
        try:
            branch_of(value)
        except UnknownBranch as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _cuda_of_branch(self) -> DriverSpec:
        branch = branch_of(self.version)
        if self.cuda_version is not None and self.cuda_version != branch.cuda:
            raise ValueError(f"driver {self.version} (branch {branch.number}) reports CUDA {branch.cuda}, "
                             f"not {self.cuda_version}")
        return self

    @property
    def cuda(self) -> str:
        """The CUDA version the driver reports (its branch's)."""
        return branch_of(self.version).cuda


class CacheSpec(Spec):
    l1d: Size = Field(48 * 1024, alias="l1d")
    l1i: Size = Field(32 * 1024, alias="l1i")
    l2: Size = 2 * 1024 * 1024
    l3: Size = 32 * 1024 * 1024
    l3_shared_by: Literal["socket", "numa"] = "socket"

    @field_validator("l1d", "l1i", "l2", "l3")
    @classmethod
    def _whole_kib(cls, value: int) -> int:
        """sysfs shows a cache's size in whole KiB (``cache/indexN/size``: ``48K``, drivers/base/cacheinfo.c prints
        size >> 10), so anything else would be rendered wrong (1536 bytes as ``1K``, 512 as ``0K``)."""
        if value % 1024:
            raise ValueError(f"a cache size is whole KiB (sysfs shows it as <n>K), not {value} bytes")
        return value


class CpuSpec(Spec):
    """The host CPUs: every socket is the same part."""

    arch: Literal["amd64", "arm64", "riscv64"]
    vendor: str = Field(min_length=1, max_length=64, description="GenuineIntel, AuthenticAMD, ARM, a RISC-V vendor")
    model: str = Field(min_length=1, max_length=128, description="model name as /proc/cpuinfo shows it")
    sockets: int = Field(ge=1, le=16)
    cores_per_socket: int = Field(ge=1, le=1024)
    threads_per_core: int = Field(1, ge=1, le=8)
    frequency_mhz: int = Field(2000, ge=100, le=10_000, alias="frequencyMHz")
    isa: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list,
        description="x86/arm feature flags, or for riscv64 the ISA string first (rv64imafdcv) then extensions",
    )
    family: int = Field(6, ge=0, le=0xFFFF, description="x86 cpu family; arm64 CPU implementer")
    model_id: int = Field(143, ge=0, le=0xFFFF, description="x86 model number; arm64 CPU part")
    stepping: int = Field(8, ge=0, le=255)
    caches: CacheSpec = CacheSpec()

    @model_validator(mode="after")
    def _cpu_count(self) -> CpuSpec:
        if self.sockets * self.cores_per_socket * self.threads_per_core > 16384:
            raise ValueError("more than 16384 logical CPUs per node")
        return self


class InitiatorSpec(Spec):
    """HMAT access performance of a memory node as seen from its nearest initiator."""

    read_bandwidth_mbs: int = Field(ge=0, alias="readBandwidthMBs")
    write_bandwidth_mbs: int = Field(ge=0, alias="writeBandwidthMBs")
    read_latency_ns: int = Field(ge=0, alias="readLatencyNs")
    write_latency_ns: int = Field(ge=0, alias="writeLatencyNs")


class NumaNodeSpec(Spec):
    """A NUMA node. With ``socket`` it holds CPUs; without, it is CPU-less (CXL memory, GPU HBM, reserved)."""

    id: int = Field(ge=0, le=1023)
    kind: Literal["dram", "lpddr", "hbm", "cxl", "reserved"] = "dram"
    socket: int | None = Field(None, ge=0, le=15, description="socket whose cores this node holds")
    cpus: str | None = Field(None, description="explicit cpulist; default: the socket's cores split evenly")
    memory: Size = 0
    gpu: Name | None = Field(None, description="for kind hbm: the GPU whose memory this node exposes")
    initiator: InitiatorSpec | None = None

    @model_validator(mode="after")
    def _kind_rules(self) -> NumaNodeSpec:
        if self.kind in ("hbm", "cxl", "reserved") and self.socket is not None:
            raise ValueError(f"a {self.kind} NUMA node is CPU-less and cannot have a socket")
        if self.gpu is not None and self.kind != "hbm":
            raise ValueError("only a kind: hbm NUMA node names a gpu")
        if self.cpus is not None and self.socket is None:
            raise ValueError("cpus given for a NUMA node without a socket")
        return self


class NumaSpec(Spec):
    nodes: list[NumaNodeSpec] = Field(min_length=1, max_length=256)
    distances: list[list[int]] | None = Field(
        None, description="SLIT matrix, one row per node in list order; 10 on the diagonal. Default derived."
    )
    hmat: bool = Field(
        True, description="the firmware publishes an HMAT: nodes' access figures (nodeN/accessM/initiators), which "
                          "also place memory in memory tiers; false gives the kernel no performance data",
    )


# --------------------------------------------------------------------------------------------------- PCIe


class HostBridgeSpec(Spec):
    """A PCIe root complex (``pciDDDD:BB``), attached to one NUMA node."""

    name: Name
    numa: int = Field(ge=0, le=1023)
    domain: int = Field(0, ge=0, le=0xFFFF)
    bus: int = Field(0, ge=0, le=0xFF)


class PcieSwitchSpec(Spec):
    """A PCIe switch (e.g. a PEX/Broadcom part). ``bus`` is its upstream port."""

    name: Name
    parent: Name = Field(description="host bridge or switch above this switch")
    bus: PciAddressField


class PcieSpec(Spec):
    host_bridges: list[HostBridgeSpec] = Field(min_length=1, max_length=64)
    switches: list[PcieSwitchSpec] = Field(default_factory=list, max_length=256)


# --------------------------------------------------------------------------------------------------- devices


class MigSpec(Spec):
    """MIG mode of a GPU and the GPU instances created at boot."""

    enabled: bool = True
    instances: list[Annotated[str, Field(pattern=r"^\d+g\.\d+gb(\+me|\+me\.all|-me|\+gfx)?$")]] = Field(
        default_factory=list, max_length=7, description="GPU instance profiles, created in this order (e.g. 3g.40gb)")


class GpuSpec(Spec):
    name: Name
    sku: str = Field(description="a GPU SKU from the catalogue (fakehw show --catalogue)")
    bus: PciAddressField
    parent: Name = Field(description="host bridge or PCIe switch the GPU hangs off")
    uuid: str | None = Field(
        None,
        pattern=r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        description="default: derived from system, node and GPU names",
    )
    serial: str | None = Field(None, pattern=r"^[0-9]{1,29}$", description="the serial of the GPU's board "
                               "(nvmlDeviceGetSerial); default: derived from the UUID of the board's first GPU")
    board: Name | None = Field(None, description="the board the GPU sits on, named within its node: GPUs naming one "
                               "board print its serial, as the two GPUs of a GB200/GB300 compute board do; "
                               "default: a board of its own")
    module_id: int | None = Field(None, ge=1, le=255, description="the GPU's position on its baseboard "
                                                                  "(nvmlDeviceGetModuleId); default: index + 1")
    mig: MigSpec | None = None


class NVSwitchSpec(Spec):
    name: Name
    sku: str
    bus: PciAddressField | None = Field(None, description="where the switch shows on this node's PCI bus")
    parent: Name | None = None

    @model_validator(mode="after")
    def _bus_parent(self) -> NVSwitchSpec:
        if (self.bus is None) != (self.parent is None):
            raise ValueError("give both bus and parent, or neither")
        return self


class RoceSpec(Spec):
    """RoCE v2 settings of a NIC port (see reference/platform.md)."""

    trust: Literal["dscp", "pcp"] = "dscp"
    dscp: int = Field(26, ge=0, le=63, description="DSCP of RoCE traffic")
    priority: int = Field(3, ge=0, le=7, description="802.1p priority RoCE traffic maps to")
    pfc_priorities: list[Annotated[int, Field(ge=0, le=7)]] = Field(default_factory=lambda: [3], max_length=8)
    ecn: bool = True
    cnp_dscp: int = Field(48, ge=0, le=63)
    cnp_priority: int = Field(6, ge=0, le=7)


class NicSpec(Spec):
    name: Name = Field(description="RDMA device name, e.g. mlx5_0")
    netdev: Name = Field(description="network interface name, e.g. ens1np0")
    sku: str
    bus: PciAddressField
    parent: Name
    link_layer: Literal["ethernet", "infiniband"] = "ethernet"
    mtu: int = Field(9000, ge=576, le=9216)
    rail: int | None = Field(None, ge=0, le=63, description="rail index in a rail-optimised fabric")
    roce: RoceSpec = RoceSpec()


class LinkSpec(Spec):
    """NVLink wiring: ``count`` links between every match of ``from`` and every match of ``to``.

    Patterns are shell-style (``gpu*``). GPU-GPU pairs are unordered; a GPU is never linked to itself. Ports
    are numbered in the order links are declared.
    """

    from_: Pattern | list[Pattern] = Field(alias="from")
    to: Pattern | list[Pattern]
    count: int = Field(1, ge=1, le=MAX_LINKS_PER_EDGE)
    state: Literal["up", "down"] = "up"


class C2CSpec(Spec):
    """A coherent CPU-GPU link (NVLink-C2C, NVLink Fusion)."""

    gpu: Name
    socket: int = Field(ge=0, le=15)
    bandwidth_gbs: float = Field(900, gt=0, le=10_000, alias="bandwidthGBs", description="bidirectional")
    links: int = Field(10, ge=1, le=64)


# --------------------------------------------------------------------------------------------------- CXL

CXL_INTERLEAVE_WAYS = (1, 2, 3, 4, 6, 8, 12, 16)
"""Interleave ways the kernel's CXL region driver accepts (drivers/cxl/core/region.c)."""
CXL_GRANULARITIES = (256, 512, 1024, 2048, 4096, 8192, 16384)
"""Interleave granularities (bytes) an HDM decoder supports: powers of two from 256 B to 16 KiB."""


class CxlHostBridgeSpec(Spec):
    """A CXL host bridge (ACPI0016) with its root ports, named ``<bridge>.rp<N>``."""

    name: Name
    uid: int = Field(ge=0, le=255)
    numa: int = Field(ge=0, le=1023)
    root_ports: int = Field(2, ge=1, le=16)
    root_port_ids: list[int] | None = Field(
        None, description="hardware port id of each root port (dport ids in HDM target lists); default 0, 1, ...")
    decoders: int = Field(4, ge=1, le=32, description="HDM decoders of the host bridge's port")
    restricted: bool = Field(False, description="a restricted CXL host (RCH, CXL 1.1): its one device's endpoint "
                             "hangs off the CXL root; give it one root port for that device")

    @model_validator(mode="after")
    def _ids(self) -> CxlHostBridgeSpec:
        _check_port_ids(self.root_port_ids, self.root_ports, "rootPortIds", "rootPorts")
        if self.restricted and self.root_ports != 1:
            raise ValueError("a restricted host bridge (RCH) has exactly one root port (rootPorts: 1)")
        return self


def _check_port_ids(ids: list[int] | None, count: int, what: str, count_name: str) -> None:
    if ids is None:
        return
    if len(ids) != count:
        raise ValueError(f"{what} names {len(ids)} port(s) but {count_name} is {count}")
    if len(set(ids)) != len(ids) or any(not 0 <= i <= 255 for i in ids):
        raise ValueError(f"{what} must be distinct port ids from 0 to 255")


class CxlSwitchSpec(Spec):
    """A CXL switch below a root port; downstream ports are named ``<switch>.dp<N>``."""

    name: Name
    parent: str = Field(description="upstream root port, e.g. cxlhb0.rp0")
    downstream_ports: int = Field(2, ge=1, le=32)
    downstream_port_ids: list[int] | None = Field(
        None, description="hardware port id of each downstream port; default 0, 1, ...")
    decoders: int = Field(4, ge=1, le=32, description="HDM decoders of the switch's upstream port")

    @model_validator(mode="after")
    def _ids(self) -> CxlSwitchSpec:
        _check_port_ids(self.downstream_port_ids, self.downstream_ports, "downstreamPortIds", "downstreamPorts")
        return self


class CxlMemdevSpec(Spec):
    """A type-3 memory device (memX)."""

    name: Name
    sku: str = "cxl-type3"
    parent: str = Field(description="root port or switch downstream port, e.g. cxlsw0.dp1")
    ram_size: Size = 0
    pmem_size: Size = 0
    serial: int | None = Field(None, ge=0, le=2**63 - 1)
    qos_class: int | None = Field(
        None, ge=-1, le=65535,
        description="QoS class of the device's memory (memN/ram/qos_class, pmem/qos_class: the QTG the platform "
                    "matched its performance to); default: the qosClass of the first window over its host bridge",
    )
    decoders: int = Field(2, ge=1, le=32, description="HDM decoders of the device (its endpoint port)")
    numa: int | None = Field(None, ge=0, le=1023, description="NUMA node of the device (memN/numa_node); default: "
                             "its host bridge's")

    @model_validator(mode="after")
    def _has_capacity(self) -> CxlMemdevSpec:
        if self.ram_size == 0 and self.pmem_size == 0:
            raise ValueError("a memory device needs ramSize or pmemSize")
        return self


class CxlWindowSpec(Spec):
    """A CXL fixed memory window (CFMWS): a root decoder spanning one or more host bridges."""

    name: Name
    size: Size
    targets: list[Name] = Field(min_length=1, max_length=16, description="host bridges interleaved")
    interleave_granularity: int = Field(256, description="bytes: 256, 512, ... 16384")
    ram: bool = True
    pmem: bool = False
    qos_class: int = Field(0, ge=-1, le=65535,
                           description="the window's QoS Throttling Group id (CFMWS qtg_id; root decoder qos_class)")
    arithmetic: Literal["modulo", "xor"] = Field(
        "modulo", description="interleave arithmetic of the window (CFMWS): modulo or XOR")
    numa: int | None = Field(
        None, ge=0, le=1023,
        description="kind: cxl NUMA node that RAM decoded by this window onlines into (firmware gives every "
                    "window its own proximity domain); default: the node of a region committed on it at boot",
    )

    @field_validator("interleave_granularity")
    @classmethod
    def _granularity(cls, value: int) -> int:
        if value not in CXL_GRANULARITIES:
            raise ValueError("interleave granularity must be a power of two from 256 to 16384")
        return value


class CxlRegionSpec(Spec):
    """A region committed at boot across ``targets`` memdevs, decoded by ``window``."""

    name: Name
    window: Name
    targets: list[Name] = Field(min_length=1, max_length=16)
    interleave_granularity: int = 256
    mode: Literal["ram", "pmem"] = "ram"
    numa: int | None = Field(None, ge=0, le=1023, description="NUMA node the region's memory onlines into")
    size: Size | None = Field(None, description="bytes decoded (a multiple of 256 MiB per target); default: all "
                              "of the targets' capacity of that mode")


class CxlSpec(Spec):
    platform: Literal["acpi", "cxl_test"] = Field(
        "acpi", description="who publishes the CXL root: ACPI firmware (ACPI0017/ACPI0016 and PCI devices) or the "
        "kernel's cxl_test mock (platform devices cxl_acpi.0, cxl_host_bridge.N ... cxl_mem.N: bus 'cxl_test')")
    hotplug_online: Literal["offline", "online", "online_movable"] = Field(
        "online_movable", description="what the kernel does with memory a RAM region hot-adds "
        "(/sys/devices/system/memory/auto_online_blocks)")
    host_bridges: list[CxlHostBridgeSpec] = Field(default_factory=list, max_length=16)
    switches: list[CxlSwitchSpec] = Field(default_factory=list, max_length=64)
    memdevs: list[CxlMemdevSpec] = Field(default_factory=list, max_length=256)
    windows: list[CxlWindowSpec] = Field(default_factory=list, max_length=64)
    regions: list[CxlRegionSpec] = Field(default_factory=list, max_length=64)


# --------------------------------------------------------------------------------------------------- pools

PoolTier = Literal["hbm", "nvlink-peer-hbm", "c2c-host", "cxl", "rdma"]


class PoolSourceSpec(Spec):
    """Where a pool's memory comes from: exactly one of these."""

    gpus: list[Pattern] | None = None
    numa: int | None = Field(None, ge=0, le=1023)
    cxl_region: Name | None = None
    cxl_pool: Name | None = None
    nic: Name | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> PoolSourceSpec:
        given = [k for k, v in self.model_dump(by_alias=True).items() if v is not None]
        if len(given) != 1:
            raise ValueError(f"a pool source names exactly one of gpus, numa, cxlRegion, cxlPool, nic (got {given})")
        return self


class MemoryPoolSpec(Spec):
    """A pool of memory offered to GPU workloads (``gpu.memoryPool.<name>``)."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")]
    tier: PoolTier
    capacity: Size
    policy: Literal["shared", "exclusive"] = "shared"
    source: PoolSourceSpec


# --------------------------------------------------------------------------------------------------- node


class DmiSpec(Spec):
    """What the firmware's DMI tables say the machine is (``/sys/class/dmi/id``): what GPU feature discovery
    labels ``nvidia.com/gpu.machine`` with and inventory tools show."""

    vendor: str = Field(min_length=1, max_length=64, description="sys_vendor, e.g. NVIDIA")
    product: str = Field(min_length=1, max_length=64, description="product_name, e.g. DGXH100")


class NodeSpec(Spec):
    """One node (host): everything on one motherboard or compute tray."""

    cpu: CpuSpec
    numa: NumaSpec
    pcie: PcieSpec
    gpus: list[GpuSpec] = Field(default_factory=list, max_length=MAX_GPUS_PER_NODE)
    nvswitches: list[NVSwitchSpec] = Field(default_factory=list, max_length=64)
    nvlinks: list[LinkSpec] = Field(default_factory=list, max_length=512)
    c2c: list[C2CSpec] = Field(default_factory=list, max_length=64, alias="c2c")
    nics: list[NicSpec] = Field(default_factory=list, max_length=64)
    cxl: CxlSpec = CxlSpec()
    memory_pools: list[MemoryPoolSpec] = Field(default_factory=list, max_length=64)
    labels: dict[str, str] = Field(default_factory=dict)
    dmi: DmiSpec | None = None
    """The machine's DMI identity; without it the fake says vendor NVIDIA (or fakehw) and the profile's name."""

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus_one_host_holds(cls, value: Any) -> Any:
        """Checked before the GPUs themselves, so an oversized list is refused without validating each entry."""
        if isinstance(value, list) and len(value) > MAX_GPUS_PER_NODE:
            raise ValueError(f"{len(value)} GPUs on one node; NVIDIA's driver supports at most {MAX_GPUS_PER_NODE} "
                             "per host (NV_MAX_DEVICES): describe a bigger system as several nodes, as gb200-nvl72 "
                             "does (18 trays of 4)")
        return value


class GroupSpec(Spec):
    """``count`` identical nodes named ``<name>-0`` ...

    The node is given inline (``node``) or borrowed from another profile's first group (``from``), optionally
    changed by ``override``, which merges into the borrowed node (named lists such as ``gpus`` merge by name).
    """

    name: Name
    count: int = Field(1, ge=1, le=MAX_NODES)
    node: NodeSpec | None = None
    from_: str | None = Field(None, alias="from", description="profile (built-in name or file) to borrow from")
    override: dict[str, Any] | None = Field(None, description="changes merged into the borrowed node")

    @model_validator(mode="after")
    def _one_source(self) -> GroupSpec:
        if (self.node is None) == (self.from_ is None):
            raise ValueError("a group gives exactly one of node or from")
        if self.override is not None and self.from_ is None:
            raise ValueError("override only applies to a node borrowed with from")
        return self


class DomainSwitchesSpec(Spec):
    sku: str
    count: int = Field(ge=1, le=64)
    name_prefix: Name = "sw"


class FabricSpec(Spec):
    """Fabric-manager view of a multi-node NVLink domain (NVML GPU fabric info)."""

    cluster_uuid: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        description="default: derived from the system and domain names",
    )
    clique_id: int = Field(1, ge=0, le=2**32 - 1)


class NVLinkDomainSpec(Spec):
    """A multi-node NVLink domain (e.g. GB200 NVL72): switch chips outside the nodes and their wiring.

    With ``nodesPerDomain`` the domain repeats for every that many nodes of the member groups (a fleet of
    racks); otherwise one domain holds every member node.
    """

    name: Name
    groups: list[Name] = Field(min_length=1)
    nodes_per_domain: int | None = Field(None, ge=1, le=MAX_NODES)
    switches: DomainSwitchesSpec
    links: list[LinkSpec] = Field(min_length=1, max_length=64)
    require_full_wiring: bool = Field(
        True, description="every GPU in the domain must use all of its SKU's NVLinks (true of NVL72)"
    )
    fabric: FabricSpec | None = FabricSpec()


class CxlPoolSpec(Spec):
    """CXL 2.0 pooling: a multi-logical device behind a switch that several hosts' root ports reach."""

    name: Name
    groups: list[Name] = Field(min_length=1)
    host_port: str = Field(description="root port each host uses for the pool switch, e.g. cxlhb1.rp1")
    capacity: Size
    logical_devices: int = Field(16, ge=1, le=16)
    window: Name | None = Field(
        None, description="window that decodes the pooled device on every member host; default: the one RAM "
                          "window whose only target is the host port's host bridge",
    )
    assignments: dict[str, str] = Field(
        default_factory=dict, description="logical device index (as a string) -> node name, at boot"
    )


class ProfileSpec(Spec):
    """A whole system: node groups, NVLink domains spanning nodes, CXL pools shared by hosts."""

    name: Name
    description: str = Field(min_length=1, max_length=400)
    projection: str | None = Field(None, description="set when the profile projects hardware that is not shipping")
    extends: str | None = Field(None, description="a built-in profile name or a path relative to this file")
    driver: DriverSpec = DriverSpec()
    nodes: int | None = Field(None, ge=1, le=MAX_NODES, description="node count of a profile with one group")
    groups: list[GroupSpec] = Field(min_length=1, max_length=64)
    nvlink_domains: list[NVLinkDomainSpec] = Field(default_factory=list, max_length=64)
    cxl_pools: list[CxlPoolSpec] = Field(default_factory=list, max_length=16)
    seed: int = Field(0, ge=0, le=2**63 - 1, description="seeds readings and counters that evolve over time")
