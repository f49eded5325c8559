"""The reference extender's decisions: filter, the cost model, GPU choice, pool grants and gang bookings.

Cost of placing a pod on a node (lower is better)::

    cost = w_memory * remoteMemoryPenalty + w_latency * avgNVLinkLatency + w_isolation * isolationPenalty

- ``avgNVLinkLatency``: mean pair latency (ns, the node's ``fakehw.io/gpu-latency-ns`` matrix) of the best free
  GPU set for the pod on the node: NVLink bonds where they exist, PCIe levels otherwise.
- ``remoteMemoryPenalty``: memory the pod needs beyond its GPUs' HBM comes from the node's pools, nearest
  (lowest latency) first; the penalty is the byte-weighted latency of that memory over all the pod's memory.
- ``isolationPenalty``: the share of the node's GPUs other tenants hold, times :data:`ISOLATION_NS`.

Memory-bound pods (``fakehw.io/memory-bound``) weigh memory first. Among equal costs the best fit wins (the
node left with the fewest free GPUs), which packs a tenant's work and keeps whole nodes free for big jobs.

Filter: image platform and ISA, free healthy GPUs (gang bookings count as taken), pool capacity under the
cluster's pool policy (published on every node): no grant past the thrash threshold (admission control), bursts
never into the reserved part, reservations (priority >= reservedPriority) may preempt bursts (answered as
``FailedNodes``, which kube-scheduler's preemption acts on).

Gangs: the first pod of a gang books, for every member, a node in one NVLink domain that can hold the whole
gang; the booking (plan, domain, token) is written onto each member at binding, so it outlives restarts of
this extender. A gang that fits no domain gets no node at all: all or nothing.

Everything here is a pure function of a :class:`Snapshot` (the cluster as the informer sees it) and the pod.
"""

from __future__ import annotations

import itertools
import secrets
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fakehw.views.k8s import (
    Holding,
    NodeInfo,
    PodRequest,
    PodSpecError,
    PoolInfo,
    PoolPolicy,
    average_latency,
)

ISOLATION_NS = 2000.0
W_MEMORY, W_LATENCY, W_ISOLATION = 1.0, 1.0, 1.0
W_MEMORY_BOUND, W_LATENCY_MEMORY_BOUND = 8.0, 0.25
EXHAUSTIVE_LIMIT = 400
VERDICT_CACHE = 100_000
INTERNED_KEYS = 100_000
"""Verdicts kept across decisions before the cache starts again (bounds the extender's memory)."""


@dataclass(frozen=True, slots=True)
class Flags:
    """Behaviour switches; all False is the reference. Mutants set one (see mutants.py)."""

    ignore_health: bool = False
    ignore_arch: bool = False
    split_gangs: bool = False
    double_book: bool = False
    spread: bool = False
    ignore_cxl: bool = False
    no_admission: bool = False
    bursts_in_reserve: bool = False
    preempt_reservations: bool = False
    memory_last: bool = False
    ignore_bookings: bool = False

    @classmethod
    def for_mutant(cls, name: str | None) -> Flags:
        if not name:
            return cls()
        attr = name.replace("-", "_")
        if attr in cls.__dataclass_fields__:
            return cls(**{attr: True})
        return cls()


# --------------------------------------------------------------------------------------------------- snapshot


@dataclass(frozen=True, slots=True)
class Bound:
    key: str
    uid: str
    request: PodRequest
    holding: Holding


@dataclass
class NodeUse:
    """What bound pods and gang bookings take on one node, kept up to date pod by pod (:meth:`add`)."""

    held: dict[int, list[str]] = field(default_factory=dict)
    """GPU index -> keys of the pods holding it (more than one only when something double-booked it)."""
    tenants: Counter[str] = field(default_factory=Counter)
    reserved: Counter[str] = field(default_factory=Counter)
    burst: Counter[str] = field(default_factory=Counter)
    pool_tenants: dict[str, Counter[str]] = field(default_factory=dict)
    """Pool -> tenants with a grant there (and how many grants)."""
    booked: int = 0
    """GPUs promised to gang members not bound yet."""
    booked_bytes: int = 0
    """Pool memory promised to gang members not bound yet."""
    pods: list[Bound] = field(default_factory=list)
    keys: dict[Key, Key] | None = field(default=None, repr=False, compare=False)
    """Where state keys are interned (shared by every node of a snapshot)."""
    _key: Key | None = None

    def add(self, b: Bound, sign: int) -> None:
        """Count (``sign`` 1) or uncount (-1) what ``b`` holds here."""
        req, holding = b.request, b.holding
        self._key = None
        if sign > 0:
            self.pods.append(b)
        else:
            self.pods.remove(b)
        for i in holding.gpus:
            if sign > 0:
                self.held.setdefault(i, []).append(b.key)
            else:
                keys = self.held[i]
                keys.remove(b.key)
                if not keys:
                    del self.held[i]
        _count(self.tenants, req.tenant, sign * len(holding.gpus))
        for pool, amount in holding.grants.items():
            _count(self.reserved if holding.kind == "reservation" else self.burst, pool, sign * amount)
            if amount:
                _count(self.pool_tenants.setdefault(pool, Counter()), req.tenant, sign)
                if not self.pool_tenants[pool]:
                    del self.pool_tenants[pool]

    def book(self, gpus: int, memory: int) -> None:
        self._key = None
        self.booked += gpus
        self.booked_bytes += memory

    @property
    def empty(self) -> bool:
        return not self.pods and not self.booked and not self.booked_bytes

    def state_key(self) -> Key:
        """Everything about this usage a decision depends on (computed once per change)."""
        if self._key is None:
            key = Key((tuple(sorted(self.held)), tuple(sorted(self.tenants.items())),
                       tuple(sorted(self.reserved.items())), tuple(sorted(self.burst.items())),
                       tuple(sorted((k, tuple(sorted(v))) for k, v in self.pool_tenants.items())),
                       tuple(sorted((b.request.priority, len(b.holding.gpus), b.holding.kind) for b in self.pods)),
                       self.booked, self.booked_bytes))
            if self.keys is not None:  # one object per distinct state: dictionaries then match it by identity
                if len(self.keys) > INTERNED_KEYS:
                    self.keys.clear()
                key = self.keys.setdefault(key, key)
            self._key = key
        return self._key


class Key:
    """A tuple used as a dictionary key, hashed once (Python hashes a tuple of tuples anew at every lookup, which
    made cache lookups most of a decision over 10,000 nodes)."""

    __slots__ = ("_hash", "value")

    def __init__(self, value: tuple[Any, ...]):
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Key) and self._hash == other._hash and self.value == other.value)

    def __repr__(self) -> str:
        return f"Key{self.value!r}"


def _count(counter: Counter[str], key: str, n: int) -> None:
    """Add ``n`` (maybe negative) to ``counter[key]``; a key that reaches 0 goes (equal usages have equal keys)."""
    if not n:
        return
    left = counter[key] + n
    if left:
        counter[key] = left
    else:
        del counter[key]


@dataclass(frozen=True)
class GangPlan:
    gang: str
    domain: str
    token: str
    nodes: tuple[str, ...]
    gpus_per_pod: int
    bound: tuple[str, ...]
    """Nodes of the members bound so far."""
    memory: int = 0
    """Memory each member asks for."""

    def open_slots(self) -> Counter[str]:
        slots = Counter(self.nodes)
        slots.subtract(Counter(self.bound))
        return Counter({n: c for n, c in slots.items() if c > 0})


TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
"""Pod phases that hold nothing: kube-scheduler's pod informer leaves such pods out (field selector
``status.phase!=Succeeded,status.phase!=Failed``) and the kubelet gives their devices back."""


def parse_bound(pod: Mapping[str, Any]) -> Bound | None:
    """A bound pod's request and holding (None for pending, finished or unreadable pods)."""
    status = pod.get("status")
    if isinstance(status, Mapping) and status.get("phase") in TERMINAL_PHASES:
        return None
    try:
        req = PodRequest.from_pod(pod)
        holding = Holding.from_pod(pod)
    except PodSpecError:
        return None
    return Bound(req.key, req.uid, req, holding) if holding is not None else None


class Snapshot:
    """The cluster as one decision sees it: node infos, what nodes have given out, gang plans.

    Usage is kept only for nodes that have pods or bookings (a fleet of 10,000 mostly empty nodes costs nothing to
    snapshot), and is updated pod by pod (:meth:`put`): a decision after a bind pays for that pod, not the fleet's.
    """

    def __init__(self, nodes: Mapping[str, NodeInfo], bounds: Iterable[Bound], flags: Flags,
                 keys: dict[Key, Key] | None = None):
        self.nodes = nodes
        self.flags = flags
        self._keys: dict[Key, Key] = keys if keys is not None else {}
        """Interned usage states (pass the same dictionary to the next snapshot to keep them)."""
        self.use: dict[str, NodeUse] = {}
        self.empty = NodeUse()
        """The usage of every node without pods (never changed)."""
        self.plans: dict[str, GangPlan] = {}
        self.pending_plans: dict[str, GangPlan] = {}
        """Bookings made by this decision's filter and not bound yet (a new decision starts without them)."""
        self.pods: dict[str, Bound] = {}
        """Bound pods by uid."""
        self._by_key: dict[str, Bound] = {}
        self._members: dict[str, dict[str, Bound]] = {}
        """Gang -> its bound members (on known nodes) by key."""
        gangs: set[str] = set()
        for b in bounds:
            gang = self._add(b, 1)
            if gang:
                gangs.add(gang)
        for gang in gangs:
            self._replan(gang)

    def put(self, key: str, bound: Bound | None) -> None:
        """The pod ``key`` now holds ``bound`` (None: nothing, pending or gone)."""
        gangs = set()
        old = self._by_key.get(key)
        if old is not None:
            gangs.add(self._add(old, -1))
        if bound is not None:
            gangs.add(self._add(bound, 1))
        for gang in gangs - {None}:
            assert gang is not None
            self._replan(gang)

    def _add(self, b: Bound, sign: int) -> str | None:
        """Count or uncount a bound pod; its gang (whose plan must be redone) if it is a member of one."""
        if sign > 0:
            self._by_key[b.key] = b
            self.pods[b.uid] = b
        else:
            del self._by_key[b.key]
            if self.pods.get(b.uid) is b:
                del self.pods[b.uid]
        node = b.holding.node
        if node not in self.nodes:
            return None
        use = self.use.setdefault(node, NodeUse(keys=self._keys))
        use.add(b, sign)
        if use.empty:
            del self.use[node]
        if not (b.request.gang and b.holding.gang_plan):
            return None
        gang = f"{b.request.namespace}/{b.request.gang}"
        members = self._members.setdefault(gang, {})
        if sign > 0:
            members[b.key] = b
        else:
            members.pop(b.key, None)
        return gang

    def _book(self, plan: GangPlan, sign: int) -> None:
        for node, count in plan.open_slots().items():
            info = self.nodes.get(node)
            if info is None:
                continue
            use = self.use.setdefault(node, NodeUse(keys=self._keys))
            use.book(sign * count * plan.gpus_per_pod, sign * count * spill_on(info, plan.gpus_per_pod, plan.memory))
            if use.empty:
                del self.use[node]

    def _replan(self, gang: str) -> None:
        """Redo a gang's plan (and what it books) from its bound members."""
        old = self.plans.pop(gang, None)
        if old is not None:
            self._book(old, -1)
        members = list(self._members.get(gang, {}).values())
        if not members:
            self._members.pop(gang, None)
            return
        first = members[0].holding
        plan = GangPlan(gang, first.gang_domain or "", first.gang_token or "", first.gang_plan,
                        members[0].request.gpus, tuple(b.holding.node for b in members), members[0].request.memory)
        self.plans[gang] = plan
        self._book(plan, 1)

    def use_of(self, node: str) -> NodeUse:
        return self.use.get(node, self.empty)

    def state_key(self, node: str) -> Key | None:
        """Everything about the node's usage a decision depends on (None: unused). Nodes of one template in the
        same state decide alike, so a decision is computed once per (template, state)."""
        use = self.use.get(node)
        return None if use is None else use.state_key()

    # ----------------------------------------------------------------------------------- per node

    def free_gpus(self, node: NodeInfo) -> list[int]:
        use = self.use_of(node.name)
        usable = [g.index for g in node.gpus] if self.flags.ignore_health else list(node.healthy_gpus)
        return [i for i in usable if i not in use.held]

    def pool_available(self, node: NodeInfo, name: str) -> int:
        pool = node.pool(name)
        if pool is None:
            return 0
        return pool.capacity if self.flags.ignore_cxl else pool.available


def spill_on(node: NodeInfo, gpus: int, memory: int) -> int:
    """Memory a pod needs beyond the HBM of ``gpus`` of the node's GPUs (GPUs of a node share one SKU)."""
    hbm = node.gpus[0].memory if node.gpus else 0
    return max(0, memory - gpus * hbm)


# --------------------------------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    """The node it was computed for: identical nodes in the same state share one verdict (pair it with the node
    name it was asked for)."""
    gpus: tuple[int, ...]
    grants: Mapping[str, int]
    kind: str
    latency: float
    remote: float
    isolation: float
    cost: float
    free_after: int


@dataclass(frozen=True, slots=True)
class Refusal:
    node: str
    reason: str
    resolvable: bool


Verdict = Placement | Refusal


def choose_gpus(node: NodeInfo, free: Sequence[int], k: int) -> tuple[int, ...]:
    """The ``k`` free GPUs with the lowest mean pair latency (ties: lowest indices)."""
    if k <= 0:
        return ()
    if k >= len(free):
        return tuple(free[:k])
    matrix = node.latency
    values = {matrix[a][b] for a in free for b in free if a != b}
    if len(values) <= 1:
        return tuple(free[:k])
    n_sets = 1
    for i in range(k):
        n_sets = n_sets * (len(free) - i) // (i + 1)
    if n_sets <= EXHAUSTIVE_LIMIT:
        best = min(itertools.combinations(free, k), key=lambda s: (average_latency(matrix, s), s))
        return tuple(best)
    best_set: tuple[int, ...] = ()
    best_key: tuple[float, tuple[int, ...]] | None = None
    for seed in free:  # greedy from every start
        chosen = [seed]
        rest = [g for g in free if g != seed]
        while len(chosen) < k:
            nxt = min(rest, key=lambda g: (sum(matrix[g][c] for c in chosen), g))
            chosen.append(nxt)
            rest.remove(nxt)
        s = tuple(sorted(chosen))
        key = (average_latency(matrix, s), s)
        if best_key is None or key < best_key:
            best_set, best_key = s, key
    return best_set


class Policy:
    """Decisions over one snapshot; caches per node and pod shape so a filter and its prioritize share work."""

    def __init__(self, snapshot: Snapshot, templates: Mapping[str, Any] | None = None,
                 verdicts: dict[tuple[Any, ...], Verdict] | None = None):
        self.snap = snapshot
        self._templates = templates or {}
        """Node -> a key equal for nodes whose static facts (GPUs, latency, pools, CPU) are equal."""
        self._cache: dict[tuple[Any, ...], Verdict] = verdicts if verdicts is not None and templates else {}
        """(template, usage state, request shape) -> verdict. A verdict is a function of that key alone, so with
        templates the cache may outlive this snapshot (the extender keeps one across decisions)."""
        if len(self._cache) > VERDICT_CACHE:
            self._cache.clear()
        self._last_shape: tuple[PodRequest, Key] | None = None
        self._last_filter: tuple[PodRequest, list[str], list[tuple[Verdict, list[str]]]] | None = None
        """The last filter's request, the nodes it passed and their verdict groups: kube-scheduler sends prioritize
        for the same pod with exactly those nodes, and over the same snapshot the verdicts are the same, so
        prioritize reuses them instead of grouping 10,000 names again (a third of its work at 10,000 nodes)."""

    # ----------------------------------------------------------------------------------- one node

    def evaluate(self, req: PodRequest, node_name: str, own_slots: int = 0) -> Verdict:
        """Can ``req`` go to the node, and at what cost? ``own_slots``: members of the pod's own gang booked there
        (what they hold back is the pod's to take)."""
        snap = self.snap
        node = snap.nodes.get(node_name)
        if node is None:
            return Refusal(node_name, "node unknown to the extender", False)
        key = (self._templates.get(node_name, node_name), snap.state_key(node_name), self._shape(req), own_slots)
        cached = self._cache.get(key)
        if cached is not None:
            return cached  # possibly computed for another node in the same state: its .node is not this one
        use = snap.use_of(node_name)
        booked = max(0, use.booked - own_slots * req.gpus)
        booked_bytes = max(0, use.booked_bytes - own_slots * spill_on(node, req.gpus, req.memory))
        if snap.flags.ignore_bookings:
            booked = booked_bytes = 0
        verdict = self._evaluate(req, node, use, snap.free_gpus(node), booked, booked_bytes)
        self._cache[key] = verdict
        return verdict

    def _shape(self, req: PodRequest) -> Key:
        """What of the request a verdict depends on (made once per request)."""
        last = self._last_shape
        if last is not None and last[0] is req:
            return last[1]
        shape = Key((req.gpus, req.memory, req.memory_bound, req.priority, req.tenant, req.platforms, req.isa))
        self._last_shape = (req, shape)
        return shape

    def _evaluate(self, req: PodRequest, node: NodeInfo, use: NodeUse, free: list[int], booked: int,
                  booked_bytes: int) -> Verdict:
        flags = self.snap.flags
        if not flags.ignore_arch:
            if not req.allows_arch(node.arch):
                return Refusal(node.name, f"image has no linux/{node.arch} variant (platforms: "
                                          f"{', '.join(sorted(req.platforms))})", False)
            missing = sorted(req.isa - node.isa)
            if missing:
                return Refusal(node.name, f"CPU ({node.arch}) lacks ISA extensions {', '.join(missing)}", False)
        available = len(free) - booked
        if req.gpus > available:
            unhealthy = len(node.gpus) - len(node.healthy_gpus)
            lower = sum(len(b.holding.gpus) for b in use.pods if b.request.priority < req.priority
                        and (b.holding.kind != "reservation" or flags.preempt_reservations))  # what victims() evicts
            reason = (f"needs {req.gpus} GPUs; {max(0, available)} free and healthy ({unhealthy} unhealthy, "
                      f"{len(use.held)} held, {booked} booked by gangs)")
            return Refusal(node.name, reason, req.gpus <= available + lower)
        pick_from = [i for i in node.healthy_gpus] if flags.double_book else free
        gpus = choose_gpus(node, pick_from, req.gpus)
        local = sum(node.gpus[i].memory for i in gpus) if node.gpus else 0
        spill = max(0, req.memory - local)
        policy = node.policy
        reservation = policy.is_reservation(req.priority)
        grants, left, after_preempt = self._grants(node, use, req, spill, policy, reservation, booked_bytes)
        if left > 0:
            if reservation and after_preempt <= 0:
                return Refusal(node.name, f"pools hold bursts where this reservation of {spill} bytes fits; "
                                          "preempting them makes room", True)
            return Refusal(node.name, f"needs {spill} bytes beyond its GPUs' HBM; the node's pools can grant "
                                      f"{spill - left} under the pool policy (thrash threshold "
                                      f"{policy.thrash_threshold:g}, {policy.reserved_fraction:g} reserved for "
                                      f"priority >= {policy.reserved_priority})", False)
        latency = average_latency(node.latency, gpus)
        remote = 0.0
        if req.memory and not flags.memory_last:
            remote = sum(amount * (p.latency_ns if (p := node.pool(name)) else 0)
                         for name, amount in grants.items()) / req.memory
        others = sum(n for t, n in use.tenants.items() if t != req.tenant)
        isolation = ISOLATION_NS * others / len(node.gpus) if node.gpus else 0.0
        if req.memory_bound:
            cost = W_MEMORY_BOUND * remote + W_LATENCY_MEMORY_BOUND * latency + W_ISOLATION * isolation
        else:
            cost = W_MEMORY * remote + W_LATENCY * latency + W_ISOLATION * isolation
        return Placement(node.name, gpus, grants, "reservation" if reservation else "burst", latency, remote,
                         isolation, round(cost, 3), available - req.gpus)

    def _grants(self, node: NodeInfo, use: NodeUse, req: PodRequest, spill: int, policy: PoolPolicy,
                reservation: bool, booked_bytes: int = 0) -> tuple[dict[str, int], int, int]:
        """Grants nearest pool first; (grants, bytes still missing, bytes missing even after preempting bursts).

        Memory booked for gang members not bound yet is set aside first, nearest pools first (as they will take it).
        """
        flags = self.snap.flags
        grants: dict[str, int] = {}
        left = after = spill
        if spill <= 0:
            return grants, 0, 0
        for pool in self.pool_order(node):
            if pool.tier == "hbm":
                continue  # the GPUs' own memory: counted through the GPUs a pod gets
            if pool.policy == "exclusive" and any(t != req.tenant for t in use.pool_tenants.get(pool.name, ())):
                continue
            available = self.snap.pool_available(node, pool.name)
            cap = available if flags.no_admission else policy.admission_cap(available)
            res, bur = use.reserved[pool.name], use.burst[pool.name]
            if reservation:
                room = cap - res - bur
                room_after = cap - res
            else:
                burst_cap = cap if flags.bursts_in_reserve else policy.burst_cap(available)
                room = min(cap - res - bur, burst_cap - bur)
                room_after = room
            aside = min(max(0, room), booked_bytes)
            booked_bytes -= aside
            room -= aside
            room_after -= aside
            take = max(0, min(room, left))
            if take:
                grants[pool.name] = take
                left -= take
            after -= max(0, min(room_after, after))
        return grants, left, after

    @staticmethod
    def pool_order(node: NodeInfo) -> list[PoolInfo]:
        return sorted(node.pools, key=lambda p: (p.latency_ns, p.name))

    def member_slots(self, req: PodRequest, name: str, placement: Placement) -> int:
        """How many members of ``req``'s gang node ``name`` holds at once (GPUs and pool memory)."""
        node = self.snap.nodes[name]
        gpu_slots = (placement.free_after + req.gpus) // req.gpus if req.gpus else req.gang_size
        spill = spill_on(node, req.gpus, req.memory)
        if spill <= 0:
            return gpu_slots
        use = self.snap.use_of(name)
        _, left, _ = self._grants(node, use, req, 2**62, node.policy, node.policy.is_reservation(req.priority),
                                  use.booked_bytes)
        return min(gpu_slots, (2**62 - left) // spill)

    # ----------------------------------------------------------------------------------- gangs

    def gang_plan(self, req: PodRequest, candidates: Iterable[str]) -> GangPlan | Refusal:
        """The booking for ``req``'s gang: the existing one, or a new one in the best domain that holds it all."""
        if req.gang is None:
            raise ValueError("not a gang pod")
        gang = f"{req.namespace}/{req.gang}"
        existing = self.snap.plans.get(gang) or self.snap.pending_plans.get(gang)
        if existing is not None:
            return existing
        by_domain: dict[str, list[tuple[str, Placement, int]]] = defaultdict(list)
        for name in candidates:
            verdict = self.evaluate(req, name)
            if not isinstance(verdict, Placement):
                continue
            slots = self.member_slots(req, name, verdict)
            by_domain[self.snap.nodes[name].domain].append((name, verdict, slots))
        best: tuple[tuple[float, ...], str, list[str]] | None = None
        for domain, entries in by_domain.items():
            if sum(s for _, _, s in entries) < req.gang_size:
                continue
            entries.sort(key=lambda e: (-e[2], e[1].cost, e[0]))
            plan: list[str] = []
            for name, _, slots in entries:
                take = min(slots, req.gang_size - len(plan))
                plan += [name] * take
                if len(plan) == req.gang_size:
                    break
            used = set(plan)
            score = (float(len(used)), sum(p.cost for n, p, _ in entries if n in used) / len(used))
            if best is None or (score, domain) < (best[0], best[1]):
                best = (score, domain, plan)
        if best is None:
            biggest = max((sum(s for _, _, s in e) for e in by_domain.values()), default=0)
            return Refusal("", f"no NVLink domain can hold gang {gang} ({req.gang_size} pods x {req.gpus} GPUs); "
                               f"the largest has room for {biggest}", False)
        plan_obj = GangPlan(gang, best[1], secrets.token_hex(8), tuple(best[2]), req.gpus, (), req.memory)
        self.snap.pending_plans[gang] = plan_obj
        return plan_obj

    def groups(self, req: PodRequest, names: Iterable[str]) -> list[tuple[Verdict, list[str]]]:
        """:meth:`evaluate` for many nodes, as (verdict, the nodes that got it). Unused nodes of one template share
        one verdict, found with a dictionary lookup per name: a decision over 10,000 nodes costs one pass over the
        names plus one evaluation per used node (whose verdicts are cached per state across decisions)."""
        names = list(dict.fromkeys(names))
        gang = req.gang is not None and not self.snap.flags.split_gangs
        by_verdict: dict[int, tuple[Verdict, list[str]]] = {}
        if gang:
            for n in names:
                v = self.evaluate(req, n, self.own_slots(req, n))
                by_verdict.setdefault(id(v), (v, []))[1].append(n)
            return list(by_verdict.values())
        for same in self._alike(names):
            v = self.evaluate(req, same[0])
            entry = by_verdict.get(id(v))
            if entry is None:
                by_verdict[id(v)] = (v, same)
            else:
                entry[1].extend(same)
        return list(by_verdict.values())

    def _alike(self, names: list[str]) -> Iterable[list[str]]:
        """``names`` in groups of nodes with the same template and usage state (one evaluation per group).

        The per-name work runs in C (map/filter over dictionary methods): in a Python loop, 10,000 lookups were
        most of a decision."""
        use, templates = self.snap.use, self._templates
        alike: dict[Any, list[str]] = {}
        for n in filter(use.__contains__, names):
            alike.setdefault((templates.get(n, n), use[n].state_key()), []).append(n)
        unused = list(itertools.filterfalse(use.__contains__, names))
        tids = list(map(templates.get, unused, itertools.repeat(None)))
        distinct = set(tids)
        if len(distinct) == 1 and None not in distinct:
            return [unused, *alike.values()] if unused else alike.values()
        for n, t in zip(unused, tids, strict=True):
            alike.setdefault((n if t is None else t, None), []).append(n)
        return alike.values()

    def evaluate_many(self, req: PodRequest, names: Sequence[str]) -> dict[str, Verdict]:
        """:meth:`evaluate` for each of ``names``."""
        return {n: v for v, ns in self.groups(req, names) for n in ns}

    # ----------------------------------------------------------------------------------- verbs

    def filter(self, req: PodRequest, names: Sequence[str]) -> tuple[list[str], dict[str, str], dict[str, str]]:
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        if req.gang and not self.snap.flags.split_gangs:
            plan = self.gang_plan(req, names)
            if isinstance(plan, Refusal):
                return [], {}, {n: plan.reason for n in names}
            slots = plan.open_slots()
            committed = plan.gang in self.snap.plans
            for n in names:
                if slots.get(n, 0) <= 0:
                    unresolvable[n] = f"gang {plan.gang} is booked on {plan.domain} (token {plan.token})"
                    continue
                verdict = self.evaluate(req, n, own_slots=slots[n] if committed else 0)
                if isinstance(verdict, Placement):
                    passed.append(n)
                else:
                    unresolvable[n] = verdict.reason
            return passed, failed, unresolvable
        placements: list[tuple[Verdict, list[str]]] = []
        for verdict, ns in self.groups(req, names):
            if isinstance(verdict, Placement):
                passed += ns
                placements.append((verdict, ns))
            else:
                (failed if verdict.resolvable else unresolvable).update(dict.fromkeys(ns, verdict.reason))
        self._last_filter = (req, passed.copy(), placements)  # a copy: the caller may change its list
        return passed, failed, unresolvable

    def score_groups(self, req: PodRequest, names: Sequence[str]) -> list[tuple[int, list[str]]]:
        """Scores 0..10 as (score, the nodes that got it): computed once per distinct verdict, not per node."""
        last = self._last_filter
        reuse = last is not None and last[0] == req and names == last[1]  # this pod's filter passed exactly these
        groups = last[2] if reuse and last is not None else self.groups(req, names)
        placements = [(v, ns) for v, ns in groups if isinstance(v, Placement)]
        out = [(0, ns) for v, ns in groups if not isinstance(v, Placement)]
        if not placements:
            return out
        sign = -1.0 if self.snap.flags.spread else 1.0
        lo = min(sign * p.cost for p, _ in placements)
        hi = max(sign * p.cost for p, _ in placements)
        tightest = min(sign * p.free_after for p, _ in placements if sign * p.cost == lo)
        for p, ns in placements:
            c = sign * p.cost
            if c == lo:
                score = 10 if sign * p.free_after == tightest else 9
            else:
                score = int(8 * (hi - c) / (hi - lo)) if hi > lo else 8
            out.append((score, ns))
        return out

    def prioritize(self, req: PodRequest, names: Sequence[str]) -> dict[str, int]:
        scores = dict.fromkeys(names, 0)
        for score, ns in self.score_groups(req, names):
            scores.update(dict.fromkeys(ns, score))
        return scores

    def own_slots(self, req: PodRequest, node: str) -> int:
        """Members of the pod's gang booked on ``node`` and not bound yet (what they hold back is the pod's)."""
        if req.gang is None or self.snap.flags.split_gangs:
            return 0
        plan = self.snap.plans.get(f"{req.namespace}/{req.gang}")
        return plan.open_slots().get(node, 0) if plan is not None else 0

    def victims(self, req: PodRequest, node: str, offered: Sequence[str]) -> list[str] | None:
        """UIDs to evict on ``node`` so ``req`` fits there (bursts first, never reservations), or None.

        Never an empty list for a node kube-scheduler offered victims on: its preemption (callExtenders) fails as a
        whole, "expected at least one victim pod on node", when a non-ignorable extender answers such a node with
        none. Where the pod fits without evicting anything the extender may evict (the offered pods are reservations
        or hold nothing it counts), the node is left out instead. An empty list answers only a node offered none."""
        snap = self.snap
        use = snap.use_of(node)
        info = snap.nodes.get(node)
        if info is None:
            return None
        lower = [b for b in use.pods if b.request.priority < req.priority]
        if snap.flags.preempt_reservations:
            protected: set[str] = set()
            order = sorted(lower, key=lambda b: (b.holding.kind != "reservation", b.request.priority, b.key))
        else:
            protected = {b.uid for b in lower if b.holding.kind == "reservation"}
            order = sorted((b for b in lower if b.uid not in protected), key=lambda b: (b.request.priority, b.key))
        chosen = [uid for uid in offered if uid not in protected and uid in snap.pods]
        for b in [x for x in order if x.uid not in chosen]:
            if self._fits_without(req, node, chosen):
                break
            chosen.append(b.uid)
        if not self._fits_without(req, node, chosen) or (offered and not chosen):
            return None
        return chosen

    def _fits_without(self, req: PodRequest, node: str, uids: Sequence[str]) -> bool:
        gone = set(uids)
        kept = [b for b in self.snap.pods.values() if b.uid not in gone]
        trial = Policy(Snapshot(self.snap.nodes, kept, self.snap.flags), self._templates)
        return isinstance(trial.evaluate(req, node), Placement)
