"""Derived topology: what NVML and schedulers compute from the hardware, computed once from the model.

Everything here is a pure function of the :class:`System` (and, for live answers, of which NVLink ports are
down). Nodes built from the same template share one healthy :class:`NodeTopology`, so a 1,000-node fleet of
one node type derives its matrices once.

Rules (they follow the NVML definitions in reference/nvml.md):

- PCIe level of two devices: same device -> INTERNAL; lowest common bridge a PCIe switch crossed alone ->
  SINGLE (PIX); several switches -> MULTIPLE (PXB); common host bridge -> HOSTBRIDGE (PHB); different host
  bridges of one NUMA node -> NODE; different NUMA nodes -> SYSTEM (SYS).
- NVLink bond of two GPUs (the ``NV#`` of ``nvidia-smi topo -m``): direct up links between them, plus for every
  switch both reach, the smaller of their up-link counts to it.
- P2P: NVLINK and ATOMICS are OK exactly where a bond exists; READ/WRITE are OK over NVLink or over PCIe up to
  NODE level; PCI is OK up to NODE level; across sockets the chipset is not supported.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from fakehw.model.system import Gpu, LatencyDomain, MemoryPool, Node, NVLinkDomain, System, TopologyLevel

Port = tuple[str, int]
"""An NVLink port: (device id, port number)."""


class P2PCapability(IntEnum):
    """``nvmlGpuP2PCapsIndex_t``."""

    READ = 0
    WRITE = 1
    NVLINK = 2
    ATOMICS = 3
    PCI = 4


class P2PStatus(IntEnum):
    """``nvmlGpuP2PStatus_t``."""

    OK = 0
    CHIPSET_NOT_SUPPORTED = 1
    GPU_NOT_SUPPORTED = 2
    IOH_TOPOLOGY_NOT_SUPPORTED = 3
    DISABLED_BY_REGKEY = 4
    NOT_SUPPORTED = 5
    UNKNOWN = 6


Matrix = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class NodeTopology:
    """Matrices over one node's GPUs (in NVML index order) and NICs."""

    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    levels: tuple[tuple[TopologyLevel, ...], ...]
    gpu_nic_levels: tuple[tuple[TopologyLevel, ...], ...]
    nic_levels: tuple[tuple[TopologyLevel, ...], ...]
    nvlinks: Matrix
    p2p: Mapping[P2PCapability, tuple[tuple[P2PStatus, ...], ...]]
    cpu_affinity: tuple[tuple[int, ...], ...]
    numa_affinity: tuple[int, ...]
    gpu_numa_id: tuple[int | None, ...]

    def level(self, a: int, b: int) -> TopologyLevel:
        return self.levels[a][b]

    def nearest(self, a: int, level: TopologyLevel) -> tuple[int, ...]:
        """GPUs at ``level`` from GPU ``a`` (``nvmlDeviceGetTopologyNearestGpus`` semantics)."""
        return tuple(b for b in range(len(self.gpus)) if b != a and self.levels[a][b] == level)


@dataclass(frozen=True)
class DomainTopology:
    """A multi-node NVLink domain as schedulers see it: members and the fabric clique."""

    name: str
    nodes: tuple[str, ...]
    gpus: tuple[str, ...]
    cluster_uuid: str | None
    clique_id: int | None


@dataclass(frozen=True)
class SystemTopology:
    nodes: Mapping[str, NodeTopology]
    domains: tuple[DomainTopology, ...]
    latency_domains: Mapping[str, tuple[tuple[LatencyDomain, tuple[MemoryPool, ...]], ...]]
    """Per node: memory-pool latency domains, nearest first, with the pools in each."""


# --------------------------------------------------------------------------------------------------- PCIe


def _chain(node: Node, parent: str) -> list[str]:
    """Bridges from a device's parent up to (and including) its host bridge."""
    parents = {s.name: s.parent for s in node.pcie_switches}
    chain = [parent]
    while chain[-1] in parents and len(chain) <= len(parents) + 1:
        chain.append(parents[chain[-1]])
    return chain


def pcie_level(node: Node, parent_a: str, parent_b: str, same_device: bool = False) -> TopologyLevel:
    if same_device:
        return TopologyLevel.INTERNAL
    a, b = _chain(node, parent_a), _chain(node, parent_b)
    if a[-1] != b[-1]:
        hb_numa = {h.name: h.numa for h in node.host_bridges}
        return TopologyLevel.NODE if hb_numa.get(a[-1]) == hb_numa.get(b[-1]) else TopologyLevel.SYSTEM
    common = next(x for x in a if x in b)
    if common == a[-1]:
        return TopologyLevel.HOSTBRIDGE
    switches = a.index(common) + b.index(common) + 1
    return TopologyLevel.SINGLE if switches == 1 else TopologyLevel.MULTIPLE


# --------------------------------------------------------------------------------------------------- NVLink


@dataclass(frozen=True, slots=True)
class LinkCounts:
    """Up NVLinks from one GPU, per remote GPU and per remote switch (device ids)."""

    gpus: Mapping[str, int]
    switches: Mapping[str, int]


def link_counts(gpus: Iterable[Gpu], down: frozenset[Port] = frozenset()) -> dict[str, LinkCounts]:
    """Up-link counts of each GPU (keyed by GPU id); a port is down if either of its ends is."""
    out: dict[str, LinkCounts] = {}
    for g in gpus:
        to_gpu: dict[str, int] = defaultdict(int)
        to_switch: dict[str, int] = defaultdict(int)
        for p in g.ports:
            if p.up and (g.id, p.port) not in down and (p.remote_id, p.remote_port) not in down:
                (to_gpu if p.remote_kind == "gpu" else to_switch)[p.remote_id] += 1
        out[g.id] = LinkCounts(dict(to_gpu), dict(to_switch))
    return out


def bond(a: str, b: str, counts: Mapping[str, LinkCounts]) -> int:
    """The ``NV#`` between GPUs ``a`` and ``b``: direct links plus, per shared switch, the smaller count."""
    if a == b:
        return 0
    la, lb = counts[a], counts[b]
    return la.gpus.get(b, 0) + sum(min(n, lb.switches.get(sw, 0)) for sw, n in la.switches.items())


# --------------------------------------------------------------------------------------------------- node


def _p2p(levels: tuple[tuple[TopologyLevel, ...], ...], bonds: Matrix, gpus: tuple[Gpu, ...]) -> dict[
    P2PCapability, tuple[tuple[P2PStatus, ...], ...]
]:
    n = len(gpus)
    out: dict[P2PCapability, list[list[P2PStatus]]] = {c: [[P2PStatus.OK] * n for _ in range(n)] for c in P2PCapability}
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            nv = bonds[i][j] > 0
            if not (gpus[i].sku.p2p_pcie and gpus[j].sku.p2p_pcie):
                pci = P2PStatus.GPU_NOT_SUPPORTED
            elif levels[i][j] == TopologyLevel.SYSTEM:
                pci = P2PStatus.CHIPSET_NOT_SUPPORTED
            else:
                pci = P2PStatus.OK
            out[P2PCapability.NVLINK][i][j] = P2PStatus.OK if nv else P2PStatus.NOT_SUPPORTED
            out[P2PCapability.ATOMICS][i][j] = P2PStatus.OK if nv else P2PStatus.NOT_SUPPORTED
            out[P2PCapability.READ][i][j] = P2PStatus.OK if nv else pci
            out[P2PCapability.WRITE][i][j] = P2PStatus.OK if nv else pci
            out[P2PCapability.PCI][i][j] = pci
    return {c: tuple(tuple(r) for r in m) for c, m in out.items()}


def derive_node(node: Node, down: frozenset[Port] = frozenset()) -> NodeTopology:
    """The topology of one node; ``down`` lists NVLink ports that are down at run time."""
    gpus = node.gpus
    nics = node.nics
    levels = tuple(
        tuple(pcie_level(node, a.parent, b.parent, a.id == b.id) for b in gpus) for a in gpus
    )
    gpu_nic = tuple(tuple(pcie_level(node, g.parent, n.parent) for n in nics) for g in gpus)
    nic_nic = tuple(tuple(pcie_level(node, a.parent, b.parent, a.name == b.name) for b in nics) for a in nics)
    counts = link_counts(gpus, down)
    bonds = tuple(tuple(bond(a.id, b.id, counts) for b in gpus) for a in gpus)
    numa = {n.id: n for n in node.numa}
    return NodeTopology(
        gpus=tuple(g.name for g in gpus),
        nics=tuple(n.name for n in nics),
        levels=levels,
        gpu_nic_levels=gpu_nic,
        nic_levels=nic_nic,
        nvlinks=bonds,
        p2p=_p2p(levels, bonds, gpus),
        cpu_affinity=tuple(numa[g.numa].cpus if g.numa in numa else () for g in gpus),
        numa_affinity=tuple(g.numa for g in gpus),
        gpu_numa_id=tuple(g.hbm_numa for g in gpus),
    )


def _domain(domain: NVLinkDomain, system: System) -> DomainTopology:
    gpus = tuple(g.id for n in domain.nodes if (node := system.node(n)) for g in node.gpus)
    fabric = domain.fabric
    return DomainTopology(
        domain.name,
        domain.nodes,
        gpus,
        fabric.cluster_uuid if fabric else None,
        fabric.clique_id if fabric else None,
    )


def derive_system(system: System) -> SystemTopology:
    by_template: dict[int, NodeTopology] = {}
    nodes: dict[str, NodeTopology] = {}
    for node in system.nodes:
        # Nodes of one template differ only in names; their matrices are the same, so derive once.
        if node.template not in by_template:
            by_template[node.template] = derive_node(node)
        nodes[node.name] = by_template[node.template]
    latency: dict[str, tuple[tuple[LatencyDomain, tuple[MemoryPool, ...]], ...]] = {}
    for node in system.nodes:
        grouped: dict[LatencyDomain, list[MemoryPool]] = defaultdict(list)
        for pool in node.memory_pools:
            grouped[pool.latency].append(pool)
        latency[node.name] = tuple(
            (d, tuple(ps)) for d, ps in sorted(grouped.items(), key=lambda kv: (kv[0].rank, kv[0].name))
        )
    return SystemTopology(
        nodes=nodes,
        domains=tuple(_domain(d, system) for d in system.nvlink_domains),
        latency_domains=latency,
    )


def domain_bond(a: Gpu, b: Gpu, down: frozenset[Port] = frozenset()) -> int:
    """NVLink bond between any two GPUs of the system (across nodes of one NVLink domain)."""
    return bond(a.id, b.id, link_counts((a, b), down))
