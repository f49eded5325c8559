"""Kubernetes views of the model: Node objects (labels, capacity, annotations) and the pod-side vocabulary.

A scheduler extender never sees the hardware; it sees Node objects. This module renders them from the model and
the agent's runtime state, the way a node's labeller (GPU feature discovery, NFD) and device plugin would publish
them, so the extender harness (:mod:`testbed.extender`), the reference extender and the kind backend all read the
same thing:

- labels: ``kubernetes.io/arch``, ``nvidia.com/gpu.product|count|memory|family``, ``nvidia.com/gpu.clique`` (GFD's
  ``<fabric cluster uuid>.<clique id>``), ``fakehw.io/nvlink-domain`` (the multi-node NVLink domain, or the node
  itself), one ``isa.fakehw.io/<extension>=true`` per CPU ISA feature and ``fakehw.io/memory-pool.<pool>=<tier>``;
- capacity/allocatable: ``nvidia.com/gpu`` (allocatable counts healthy GPUs only, as a device plugin reports) and
  one ``nvidia.com/gpu.memoryPool.<pool>`` per memory pool (allocatable is what the pool holds *now*: offline CXL
  devices, lost GPUs and shrink faults are subtracted by the agent);
- annotations with what a topology-aware scheduler needs and Kubernetes has no field for: the GPUs (index, uuid,
  health), the pairwise GPU transfer latency matrix, the memory pools (tier, latency, capacity now) and the
  cluster's pool policy (reserved fraction, thrash threshold).

The pod side is here too (what a workload asks for, what a bound pod holds), because it is the one contract
between the harness that checks decisions and the extenders that make them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fakehw.model.system import Gpu, Node, System, TopologyLevel
from fakehw.model.topology import NodeTopology, Port, derive_node
from fakehw.views.gfd import gpu_family

# --------------------------------------------------------------------------------------------------- keys

GPU_RESOURCE = "nvidia.com/gpu"
POOL_RESOURCE_PREFIX = "nvidia.com/gpu.memoryPool."

LABEL_ARCH = "kubernetes.io/arch"
LABEL_OS = "kubernetes.io/os"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_GPU_FAMILY = "nvidia.com/gpu.family"
LABEL_CLIQUE = "nvidia.com/gpu.clique"
LABEL_DOMAIN = "fakehw.io/nvlink-domain"
LABEL_NVLINK = "fakehw.io/nvlink"
LABEL_POOL_PREFIX = "fakehw.io/memory-pool."
LABEL_ISA_PREFIX = "isa.fakehw.io/"

ANN_GPUS = "fakehw.io/gpus"
ANN_LATENCY = "fakehw.io/gpu-latency-ns"
ANN_POOLS = "fakehw.io/memory-pools"
ANN_POLICY = "fakehw.io/pool-policy"

# Pod side: what a workload asks for (set by whoever creates the pod).
POD_MEMORY = "fakehw.io/memory"
"""Bytes of GPU-reachable memory the job needs in all (its GPUs' HBM first, then memory pools)."""
POD_MEMORY_BOUND = "fakehw.io/memory-bound"
"""``"true"``: the job is memory-bound; place it where its memory is nearest before anything else."""
POD_PLATFORMS = "fakehw.io/image-platforms"
"""Platforms the pod's image exists for (``linux/riscv64,linux/amd64``); absent means any."""
POD_ISA = "fakehw.io/required-isa"
"""CPU ISA extensions the job's binaries use (``zvfh,zvbb`` or ``avx512f``)."""
POD_GANG = "fakehw.io/gang"
"""Label: the gang (all pods of one job) this pod belongs to; a gang lands in one NVLink domain or not at all."""
POD_GANG_SIZE = "fakehw.io/gang-size"

# Pod side: what a bound pod holds (set at binding, by the binder).
HOLD_GPUS = "fakehw.io/gpus"
"""GPU indices on the node, ``0,1,2,3``."""
HOLD_GRANTS = "fakehw.io/pool-grants"
"""Memory taken from the node's pools, ``grace-lpddr=1073741824,nvl72-peer-hbm=0``."""
HOLD_KIND = "fakehw.io/grant-kind"
"""``reservation`` (guaranteed; high priority) or ``burst`` (opportunistic; preempted first)."""
HOLD_GANG_DOMAIN = "fakehw.io/gang-domain"
HOLD_GANG_TOKEN = "fakehw.io/gang-token"
HOLD_GANG_PLAN = "fakehw.io/gang-plan"
"""On the gang's first bound pod: the node of every member (the domain booking), comma separated."""

MAX_LABEL_NAME = 63
_LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


# --------------------------------------------------------------------------------------------------- quantities

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTPE]i|[kMGTPE])?\s*$")


class QuantityError(ValueError):
    """A Kubernetes quantity (``300Gi``, ``4``) that cannot be read as a whole number."""


def parse_quantity(value: object) -> int:
    """A Kubernetes resource quantity as an integer (``"300Gi"`` -> 322122547200); fractions of a unit round up."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise QuantityError(f"negative quantity {value}")
        return value
    if not isinstance(value, str):
        raise QuantityError(f"not a quantity: {value!r}")
    m = _QUANTITY_RE.match(value)
    if m is None:
        raise QuantityError(f"not a quantity: {value!r} (use e.g. 4, 300Gi or 1.5T)")
    number, suffix = m.groups()
    scale = _BINARY.get(suffix or "", 0) or _DECIMAL.get(suffix or "", 1)
    whole, _, frac = number.partition(".")
    total = int(whole) * scale
    if frac:
        total += -(-int(frac) * scale // 10 ** len(frac))
    return total


# --------------------------------------------------------------------------------------------------- policy


@dataclass(frozen=True, slots=True)
class PoolPolicy:
    """How the cluster's memory pools may be used; published on every node so any extender can obey it.

    - ``thrash_threshold``: no allocation may push a pool past this fraction of what it holds now (beyond it the
      pool pages/thrashes): admission control.
    - ``reserved_fraction``: this part of every pool is kept for work of priority >= ``reserved_priority``
      (reservations); everything else (bursts) may only use the rest, and is preempted first.
    """

    reserved_fraction: float = 0.25
    reserved_priority: int = 1000
    thrash_threshold: float = 0.9

    def to_json(self) -> dict[str, Any]:
        return {"reservedFraction": self.reserved_fraction, "reservedPriority": self.reserved_priority,
                "thrashThreshold": self.thrash_threshold}

    @classmethod
    def from_json(cls, data: Any) -> PoolPolicy:
        default = cls()
        if not isinstance(data, Mapping):
            return default
        return cls(float(data.get("reservedFraction", default.reserved_fraction)),
                   int(data.get("reservedPriority", default.reserved_priority)),
                   float(data.get("thrashThreshold", default.thrash_threshold)))

    def admission_cap(self, available: int) -> int:
        """Bytes all grants of a pool may add up to."""
        return int(available * self.thrash_threshold)

    def burst_cap(self, available: int) -> int:
        """Bytes bursts of a pool may add up to (the reserved part is never theirs)."""
        return max(0, self.admission_cap(available) - int(available * self.reserved_fraction))

    def is_reservation(self, priority: int) -> bool:
        return priority >= self.reserved_priority


# --------------------------------------------------------------------------------------------------- runtime


@dataclass(frozen=True, slots=True)
class RuntimeHealth:
    """What the agent says about a node now: GPU health and what each memory pool holds."""

    gpu_health: Mapping[str, str] = field(default_factory=dict)
    pool_available: Mapping[str, int] = field(default_factory=dict)
    down_ports: frozenset[Port] = frozenset()

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | None) -> RuntimeHealth:
        """From the agent's node state JSON (``Testbed.state(node)``); None means as the model says."""
        if not state:
            return cls()
        gpus = {str(g["name"]): str(g["health"]) for g in state.get("gpus", []) if isinstance(g, Mapping)}
        pools: dict[str, int] = {}
        platform = state.get("platform")
        if isinstance(platform, Mapping) and isinstance(platform.get("pools"), Mapping):
            pools = {str(k): int(v["available"]) for k, v in platform["pools"].items()
                     if isinstance(v, Mapping) and "available" in v}
        else:
            pools = {str(p["name"]): int(p["capacity"]) for p in state.get("pools", []) if isinstance(p, Mapping)}
        down = frozenset((str(d), int(p)) for d, p in state.get("down_ports", []))
        return cls(gpus, pools, down)

    def healthy(self, gpu: str) -> bool:
        """Healthy or degraded GPUs take work; unhealthy and lost ones do not (as a device plugin reports)."""
        return self.gpu_health.get(gpu, "healthy") in ("healthy", "degraded")


# --------------------------------------------------------------------------------------------------- latency

TRANSFER_BYTES = 2**20
"""The pair latency is the time to move this much between two GPUs: a small collective's step."""
NVLINK_HOP_NS = 500
PCIE_GBS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
PCIE_LEVEL = {
    # level: (added latency ns, fraction of the link bandwidth a peer-to-peer transfer gets)
    TopologyLevel.SINGLE: (700, 1.0),
    TopologyLevel.MULTIPLE: (900, 1.0),
    TopologyLevel.HOSTBRIDGE: (1200, 0.8),
    TopologyLevel.NODE: (1800, 0.6),
    TopologyLevel.SYSTEM: (3000, 0.5),
}


def pair_latency_ns(a: Gpu, b: Gpu, bond: int, level: TopologyLevel) -> int:
    """Time (ns) to move :data:`TRANSFER_BYTES` from GPU ``a`` to ``b``: over their NVLink bond if they share
    one (hop + bytes / bond bandwidth), else over PCIe at their topology level (more bridges, more latency and
    less bandwidth). Zero for the same GPU. The scheduler cost model averages this over a job's GPU pairs."""
    if a.id == b.id:
        return 0
    if bond > 0:
        gbs = bond * min(a.sku.nvlink.link_bandwidth_gbs, b.sku.nvlink.link_bandwidth_gbs)
        return int(NVLINK_HOP_NS + TRANSFER_BYTES / gbs)
    gen = min(a.sku.pcie.generation, b.sku.pcie.generation)
    width = min(a.sku.pcie.width, b.sku.pcie.width)
    added, share = PCIE_LEVEL.get(level, (3000, 0.5))
    return int(added + TRANSFER_BYTES / (PCIE_GBS_PER_LANE[gen] * width * share))


def latency_matrix(node: Node, topo: NodeTopology) -> tuple[tuple[int, ...], ...]:
    return tuple(
        tuple(pair_latency_ns(a, b, topo.nvlinks[i][j], topo.levels[i][j]) for j, b in enumerate(node.gpus))
        for i, a in enumerate(node.gpus)
    )


def average_latency(matrix: Sequence[Sequence[int]], gpus: Sequence[int]) -> float:
    """Mean pair latency of a GPU set (0 for fewer than two GPUs): the ``avgNVLinkLatency`` of the cost model."""
    n = len(gpus)
    if n < 2:
        return 0.0
    total = sum(matrix[a][b] for i, a in enumerate(gpus) for b in gpus[i + 1:])
    return total / (n * (n - 1) / 2)


# --------------------------------------------------------------------------------------------------- node view


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    memory: int
    numa: int
    health: str

    @property
    def usable(self) -> bool:
        return self.health in ("healthy", "degraded")


@dataclass(frozen=True, slots=True)
class PoolInfo:
    name: str
    tier: str
    capacity: int
    available: int
    latency_ns: int
    rank: int
    policy: str

    @property
    def resource(self) -> str:
        return POOL_RESOURCE_PREFIX + self.name


@dataclass(frozen=True)
class NodeInfo:
    """Everything a scheduler needs about one node; renders to and parses from a Kubernetes Node object."""

    name: str
    arch: str
    isa: frozenset[str]
    domain: str
    clique: str | None
    nvlink: bool
    product: str
    family: str
    gpus: tuple[GpuInfo, ...]
    latency: tuple[tuple[int, ...], ...]
    pools: tuple[PoolInfo, ...]
    policy: PoolPolicy
    cpus: int = 0
    memory: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra labels from the profile (copied as they are)."""

    @property
    def healthy_gpus(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus if g.usable)

    def pool(self, name: str) -> PoolInfo | None:
        return next((p for p in self.pools if p.name == name), None)

    def all_labels(self) -> dict[str, str]:
        out = dict(self.labels)
        out.update({
            LABEL_ARCH: self.arch,
            LABEL_OS: "linux",
            LABEL_HOSTNAME: self.name,
            LABEL_DOMAIN: self.domain,
            LABEL_NVLINK: "true" if self.nvlink else "false",
        })
        if self.gpus:
            out.update({LABEL_PRODUCT: self.product, LABEL_GPU_COUNT: str(len(self.gpus)),
                        LABEL_GPU_MEMORY: str(self.gpus[0].memory // 2**20), LABEL_GPU_FAMILY: self.family})
        if self.clique:
            out[LABEL_CLIQUE] = self.clique
        for p in self.pools:
            out[LABEL_POOL_PREFIX + p.name] = p.tier
        for ext in sorted(self.isa):
            if len(ext) <= MAX_LABEL_NAME and _LABEL_NAME_RE.match(ext):
                out[LABEL_ISA_PREFIX + ext] = "true"
        return out

    def annotations(self) -> dict[str, str]:
        return {
            ANN_GPUS: json.dumps([{"index": g.index, "name": g.name, "uuid": g.uuid, "memory": g.memory,
                                   "numa": g.numa, "health": g.health} for g in self.gpus], separators=(",", ":")),
            ANN_LATENCY: ";".join(",".join(str(x) for x in row) for row in self.latency),
            ANN_POOLS: json.dumps([{"name": p.name, "tier": p.tier, "capacity": p.capacity,
                                    "available": p.available, "latencyNs": p.latency_ns, "rank": p.rank,
                                    "policy": p.policy} for p in self.pools], separators=(",", ":")),
            ANN_POLICY: json.dumps(self.policy.to_json(), separators=(",", ":")),
        }

    def to_object(self, resource_version: int = 0) -> dict[str, Any]:
        """The Kubernetes ``v1.Node`` (the parts a scheduler reads)."""
        capacity = {"cpu": str(self.cpus), "memory": str(self.memory), "pods": "110"}
        allocatable = dict(capacity)
        if self.gpus:
            capacity[GPU_RESOURCE] = str(len(self.gpus))
            allocatable[GPU_RESOURCE] = str(len(self.healthy_gpus))
        for p in self.pools:
            capacity[p.resource] = str(p.capacity)
            allocatable[p.resource] = str(p.available)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "uid": f"node-{self.name}", "resourceVersion": str(resource_version),
                         "labels": self.all_labels(), "annotations": self.annotations()},
            "spec": {},
            "status": {
                "capacity": capacity,
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "addresses": [{"type": "Hostname", "address": self.name}],
                "nodeInfo": {"architecture": self.arch, "operatingSystem": "linux",
                             "kubeletVersion": "v1.30.0-fakehw"},
            },
        }

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeInfo:
        """Parse a Node rendered by :meth:`to_object` (raises ValueError/KeyError/TypeError on anything else)."""
        meta = obj["metadata"]
        labels: Mapping[str, str] = meta.get("labels") or {}
        ann: Mapping[str, str] = meta.get("annotations") or {}
        gpus = tuple(GpuInfo(int(g["index"]), str(g["name"]), str(g["uuid"]), int(g["memory"]), int(g["numa"]),
                             str(g["health"])) for g in json.loads(ann.get(ANN_GPUS, "[]")))
        raw = ann.get(ANN_LATENCY, "")
        latency = tuple(tuple(int(x) for x in row.split(",")) for row in raw.split(";")) if raw else ()
        if len(latency) != len(gpus) or any(len(row) != len(gpus) for row in latency):
            raise ValueError(f"node {meta['name']}: {ANN_LATENCY} is not a {len(gpus)}x{len(gpus)} matrix")
        pools = tuple(PoolInfo(str(p["name"]), str(p["tier"]), int(p["capacity"]), int(p["available"]),
                               int(p["latencyNs"]), int(p["rank"]), str(p["policy"]))
                      for p in json.loads(ann.get(ANN_POOLS, "[]")))
        known = {LABEL_ARCH, LABEL_OS, LABEL_HOSTNAME, LABEL_DOMAIN, LABEL_NVLINK, LABEL_PRODUCT, LABEL_GPU_COUNT,
                 LABEL_GPU_MEMORY, LABEL_GPU_FAMILY, LABEL_CLIQUE}
        extra = {k: v for k, v in labels.items() if k not in known and not k.startswith(LABEL_ISA_PREFIX)
                 and not k.startswith(LABEL_POOL_PREFIX)}
        status = obj.get("status") or {}
        cap = status.get("capacity") or {}
        return cls(
            name=str(meta["name"]),
            arch=str(labels.get(LABEL_ARCH, "")),
            isa=frozenset(k[len(LABEL_ISA_PREFIX):] for k, v in labels.items()
                          if k.startswith(LABEL_ISA_PREFIX) and v == "true"),
            domain=str(labels.get(LABEL_DOMAIN, meta["name"])),
            clique=labels.get(LABEL_CLIQUE),
            nvlink=labels.get(LABEL_NVLINK) == "true",
            product=str(labels.get(LABEL_PRODUCT, "")),
            family=str(labels.get(LABEL_GPU_FAMILY, "")),
            gpus=gpus,
            latency=latency,
            pools=pools,
            policy=PoolPolicy.from_json(json.loads(ann.get(ANN_POLICY, "{}"))),
            cpus=parse_quantity(cap.get("cpu", 0)),
            memory=parse_quantity(cap.get("memory", 0)),
            labels=extra,
        )


def node_info(system: System, node: Node, health: RuntimeHealth | None = None,
              policy: PoolPolicy | None = None) -> NodeInfo:
    """The scheduler's view of ``node`` now: the model with the agent's runtime state applied."""
    health = health or RuntimeHealth()
    topo = derive_node(node, health.down_ports) if health.down_ports else system.topology.nodes[node.name]
    domain = system.domain_of(node)
    fabric = domain.fabric if domain is not None else None
    dram = sum(n.memory for n in node.numa if n.kind in ("dram", "lpddr"))
    gpus = tuple(GpuInfo(g.index, g.name, g.uuid, g.memory_bytes, g.numa, health.gpu_health.get(g.name, "healthy"))
                 for g in node.gpus)
    pools = tuple(PoolInfo(p.name, p.tier, p.capacity, min(p.capacity, health.pool_available.get(p.name, p.capacity)),
                           p.latency.latency_ns, p.latency.rank, p.policy) for p in node.memory_pools)
    model_labels = dict(node.labels)
    product = model_labels.get(LABEL_PRODUCT) or (node.gpus[0].sku.name.replace(" ", "-") if node.gpus else "")
    return NodeInfo(
        name=node.name,
        arch=node.cpu.arch,
        isa=frozenset(node.cpu.isa),
        domain=domain.name if domain is not None else node.name,
        clique=f"{fabric.cluster_uuid}.{fabric.clique_id}" if fabric is not None else None,
        nvlink=any(x > 0 for row in topo.nvlinks for x in row),
        product=product,
        family=gpu_family(node),
        gpus=gpus,
        latency=latency_matrix(node, topo),
        pools=pools,
        policy=policy or PoolPolicy(),
        cpus=node.cpu.logical_cpus,
        memory=dram,
        labels={k: v for k, v in model_labels.items() if k != LABEL_PRODUCT},
    )


def node_objects(system: System, states: Mapping[str, Mapping[str, Any]] | None = None,
                 policy: PoolPolicy | None = None) -> list[dict[str, Any]]:
    """Node objects of every node of ``system`` (``states``: agent state JSON per node, when running)."""
    states = states or {}
    return [node_info(system, n, RuntimeHealth.from_state(states.get(n.name)), policy).to_object()
            for n in system.nodes]


# --------------------------------------------------------------------------------------------------- pods


class PodSpecError(ValueError):
    """A pod's request annotations cannot be read (the message names the key and the value)."""


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What a pod asks of the scheduler, read from its spec, labels and annotations."""

    namespace: str
    name: str
    uid: str
    gpus: int
    memory: int
    memory_bound: bool
    priority: int
    platforms: frozenset[str]
    isa: frozenset[str]
    gang: str | None
    gang_size: int
    node_selector: Mapping[str, str]

    @property
    def tenant(self) -> str:
        return self.namespace

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def allows_arch(self, arch: str) -> bool:
        return not self.platforms or f"linux/{arch}" in self.platforms

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodRequest:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        ann: Mapping[str, str] = meta.get("annotations") or {}
        gpus = 0
        for c in spec.get("containers") or []:
            res = c.get("resources") or {}
            req = (res.get("limits") or {}).get(GPU_RESOURCE, (res.get("requests") or {}).get(GPU_RESOURCE, 0))
            try:
                gpus += parse_quantity(req)
            except QuantityError as exc:
                raise PodSpecError(f"{GPU_RESOURCE}: {exc}") from None
        try:
            memory = parse_quantity(ann.get(POD_MEMORY, 0))
        except QuantityError as exc:
            raise PodSpecError(f"annotation {POD_MEMORY}: {exc}") from None
        gang = labels.get(POD_GANG) or None
        try:
            gang_size = int(ann.get(POD_GANG_SIZE, "1")) if gang else 1
        except ValueError:
            raise PodSpecError(f"annotation {POD_GANG_SIZE}: not a number: {ann.get(POD_GANG_SIZE)!r}") from None
        if gang_size < 1:
            raise PodSpecError(f"annotation {POD_GANG_SIZE}: must be >= 1")
        return cls(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            gpus=gpus,
            memory=memory,
            memory_bound=str(ann.get(POD_MEMORY_BOUND, labels.get(POD_MEMORY_BOUND, ""))).lower() == "true",
            priority=int(spec.get("priority") or 0),
            platforms=_csv(ann.get(POD_PLATFORMS, "")),
            isa=_csv(ann.get(POD_ISA, "")),
            gang=gang,
            gang_size=gang_size,
            node_selector=dict(spec.get("nodeSelector") or {}),
        )


def _csv(text: str) -> frozenset[str]:
    return frozenset(x.strip() for x in str(text).split(",") if x.strip())


@dataclass(frozen=True, slots=True)
class Holding:
    """What a bound pod holds on its node: GPU indices, pool grants, the grant kind and its gang booking."""

    node: str
    gpus: tuple[int, ...]
    grants: Mapping[str, int]
    kind: str
    gang_domain: str | None = None
    gang_token: str | None = None
    gang_plan: tuple[str, ...] = ()

    def annotations(self) -> dict[str, str]:
        out = {HOLD_GPUS: ",".join(str(i) for i in self.gpus),
               HOLD_GRANTS: ",".join(f"{k}={v}" for k, v in sorted(self.grants.items())),
               HOLD_KIND: self.kind}
        if self.gang_domain:
            out[HOLD_GANG_DOMAIN] = self.gang_domain
        if self.gang_token:
            out[HOLD_GANG_TOKEN] = self.gang_token
        if self.gang_plan:
            out[HOLD_GANG_PLAN] = ",".join(self.gang_plan)
        return out

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> Holding | None:
        """The holding of a bound pod (None while it is pending); malformed annotations raise PodSpecError."""
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node:
            return None
        ann: Mapping[str, str] = (pod.get("metadata") or {}).get("annotations") or {}
        try:
            gpus = tuple(int(x) for x in ann.get(HOLD_GPUS, "").split(",") if x.strip())
            grants = {}
            for item in ann.get(HOLD_GRANTS, "").split(","):
                if item.strip():
                    k, _, v = item.partition("=")
                    grants[k.strip()] = int(v)
        except ValueError as exc:
            raise PodSpecError(f"holding annotations of {(pod.get('metadata') or {}).get('name')}: {exc}") from None
        plan = tuple(x for x in ann.get(HOLD_GANG_PLAN, "").split(",") if x)
        return cls(str(node), gpus, grants, str(ann.get(HOLD_KIND, "burst")), ann.get(HOLD_GANG_DOMAIN) or None,
                   ann.get(HOLD_GANG_TOKEN) or None, plan)


def pod_object(namespace: str, name: str, uid: str, gpus: int = 0, memory: int = 0, memory_bound: bool = False,
               priority: int = 0, platforms: Iterable[str] = (), isa: Iterable[str] = (), gang: str | None = None,
               gang_size: int = 1, node_selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A ``v1.Pod`` asking for what :class:`PodRequest` reads."""
    labels: dict[str, str] = {"app": name}
    ann: dict[str, str] = {}
    if memory:
        ann[POD_MEMORY] = str(memory)
    if memory_bound:
        ann[POD_MEMORY_BOUND] = "true"
    if platforms:
        ann[POD_PLATFORMS] = ",".join(sorted(platforms))
    if isa:
        ann[POD_ISA] = ",".join(sorted(isa))
    if gang:
        labels[POD_GANG] = gang
        ann[POD_GANG_SIZE] = str(gang_size)
    resources: dict[str, Any] = {}
    if gpus:
        resources = {"limits": {GPU_RESOURCE: str(gpus)}, "requests": {GPU_RESOURCE: str(gpus)}}
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "priority": priority,
        "containers": [{"name": "main", "image": "registry.example/job:1", "resources": resources}],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels, "annotations": ann},
            "spec": spec, "status": {"phase": "Pending"}}
