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
    """What bound pods and gang bookings take on one node."""

    held: dict[int, str] = field(default_factory=dict)
    tenants: Counter[str] = field(default_factory=Counter)
    reserved: Counter[str] = field(default_factory=Counter)
    burst: Counter[str] = field(default_factory=Counter)
    pool_tenants: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    booked: int = 0
    """GPUs promised to gang members not bound yet."""
    booked_bytes: int = 0
    """Pool memory promised to gang members not bound yet."""
    pods: list[Bound] = field(default_factory=list)


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


def parse_bound(pod: Mapping[str, Any]) -> Bound | None:
    """A bound pod's request and holding (None for pending or unreadable pods)."""
    try:
        req = PodRequest.from_pod(pod)
        holding = Holding.from_pod(pod)
    except PodSpecError:
        return None
    return Bound(req.key, req.uid, req, holding) if holding is not None else None


class Snapshot:
    """The cluster as one decision sees it: node infos, what nodes have given out, gang plans.

    Usage is kept only for nodes that have pods (a fleet of 5,000 mostly empty nodes costs nothing to snapshot).
    """

    def __init__(self, nodes: Mapping[str, NodeInfo], bounds: Iterable[Bound], flags: Flags):
        self.nodes = nodes
        self.flags = flags
        self.use: dict[str, NodeUse] = {}
        self.empty = NodeUse()
        """The usage of every node without pods (never changed)."""
        self.plans: dict[str, GangPlan] = {}
        self.pending_plans: dict[str, GangPlan] = {}
        self.pods: dict[str, Bound] = {}
        members: dict[str, list[Bound]] = defaultdict(list)
        for b in bounds:
            req, holding = b.request, b.holding
            self.pods[b.uid] = b
            if holding.node not in nodes:
                continue
            use = self.use.setdefault(holding.node, NodeUse())
            use.pods.append(b)
            for i in holding.gpus:
                use.held[i] = b.key
            use.tenants[req.tenant] += len(holding.gpus)
            for pool, amount in holding.grants.items():
                (use.reserved if holding.kind == "reservation" else use.burst)[pool] += amount
                if amount:
                    use.pool_tenants[pool].add(req.tenant)
            if req.gang and holding.gang_plan:
                members[f"{req.namespace}/{req.gang}"].append(b)
        for gang, bs in members.items():
            first = bs[0].holding
            plan = GangPlan(gang, first.gang_domain or "", first.gang_token or "", first.gang_plan,
                            bs[0].request.gpus, tuple(b.holding.node for b in bs), bs[0].request.memory)
            self.plans[gang] = plan
            for node, count in plan.open_slots().items():
                if node in nodes:
                    use = self.use.setdefault(node, NodeUse())
                    use.booked += count * plan.gpus_per_pod
                    use.booked_bytes += count * spill_on(nodes[node], plan.gpus_per_pod, plan.memory)

    def use_of(self, node: str) -> NodeUse:
        return self.use.get(node, self.empty)

    def state_key(self, node: str) -> tuple[Any, ...] | None:
        """Everything about the node's usage a decision depends on (None: unused). Nodes of one template in the
        same state decide alike, so a decision is computed once per (template, state)."""
        use = self.use.get(node)
        if use is None:
            return None
        return (tuple(sorted(use.held)), tuple(sorted(use.tenants.items())), tuple(sorted(use.reserved.items())),
                tuple(sorted(use.burst.items())), tuple(sorted((k, tuple(sorted(v))) for k, v in
                                                               use.pool_tenants.items())),
                use.booked, use.booked_bytes)

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

    def __init__(self, snapshot: Snapshot, templates: Mapping[str, Any] | None = None):
        self.snap = snapshot
        self._cache: dict[tuple[Any, ...], Verdict] = {}
        self._templates = templates or {}
        """Node -> a key equal for nodes whose static facts (GPUs, latency, pools, CPU) are equal."""

    # ----------------------------------------------------------------------------------- one node

    def evaluate(self, req: PodRequest, node_name: str, own_slots: int = 0) -> Verdict:
        """Can ``req`` go to the node, and at what cost? ``own_slots``: members of the pod's own gang booked there
        (what they hold back is the pod's to take)."""
        snap = self.snap
        node = snap.nodes.get(node_name)
        if node is None:
            return Refusal(node_name, "node unknown to the extender", False)
        template = self._templates.get(node_name, node_name)
        key = (template, snap.state_key(node_name), req.gpus, req.memory, req.memory_bound, req.priority, req.tenant,
               req.platforms, req.isa, own_slots)
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
            lower = sum(len(b.holding.gpus) for b in use.pods if b.request.priority < req.priority)
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
            if pool.policy == "exclusive" and use.pool_tenants.get(pool.name, set()) - {req.tenant}:
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

    def evaluate_many(self, req: PodRequest, names: Sequence[str]) -> dict[str, Verdict]:
        """:meth:`evaluate` for many nodes: unused nodes of one template share one evaluation, looked up in O(1)
        (what keeps a decision over thousands of nodes in milliseconds)."""
        gang = req.gang is not None and not self.snap.flags.split_gangs
        templates, use = self._templates, self.snap.use
        memo: dict[tuple[Any, ...], Verdict] = {}
        out: dict[str, Verdict] = {}
        for n in names:
            slots = self.own_slots(req, n) if gang else 0
            key = (templates.get(n, n), n in use and n, slots)
            verdict = memo.get(key)
            if verdict is None:
                verdict = memo[key] = self.evaluate(req, n, slots)
            out[n] = verdict
        return out

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
                    unresolvable[n] = f"gang {plan.gang} is booked on {plan.domain} (token {plan.token[:6]}...)"
                    continue
                verdict = self.evaluate(req, n, own_slots=slots[n] if committed else 0)
                if isinstance(verdict, Placement):
                    passed.append(n)
                else:
                    unresolvable[n] = verdict.reason
            return passed, failed, unresolvable
        for n, verdict in self.evaluate_many(req, names).items():
            if isinstance(verdict, Placement):
                passed.append(n)
            elif verdict.resolvable:
                failed[n] = verdict.reason
            else:
                unresolvable[n] = verdict.reason
        return passed, failed, unresolvable

    def prioritize(self, req: PodRequest, names: Sequence[str]) -> dict[str, int]:
        placements = [(n, v) for n, v in self.evaluate_many(req, names).items() if isinstance(v, Placement)]
        scores = dict.fromkeys(names, 0)
        if not placements:
            return scores
        sign = -1.0 if self.snap.flags.spread else 1.0
        lo = min(sign * p.cost for _, p in placements)
        hi = max(sign * p.cost for _, p in placements)
        tightest = min(sign * p.free_after for _, p in placements if sign * p.cost == lo)
        for n, p in placements:
            c = sign * p.cost
            if c == lo:
                scores[n] = 10 if sign * p.free_after == tightest else 9
            else:
                scores[n] = int(8 * (hi - c) / (hi - lo)) if hi > lo else 8
        return scores

    def own_slots(self, req: PodRequest, node: str) -> int:
        """Members of the pod's gang booked on ``node`` and not bound yet (what they hold back is the pod's)."""
        if req.gang is None or self.snap.flags.split_gangs:
            return 0
        plan = self.snap.plans.get(f"{req.namespace}/{req.gang}")
        return plan.open_slots().get(node, 0) if plan is not None else 0

    def victims(self, req: PodRequest, node: str, offered: Sequence[str]) -> list[str] | None:
        """UIDs to evict on ``node`` so ``req`` fits there (bursts first, never reservations), or None."""
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
        return chosen if self._fits_without(req, node, chosen) else None

    def _fits_without(self, req: PodRequest, node: str, uids: Sequence[str]) -> bool:
        gone = set(uids)
        kept = [b for b in self.snap.pods.values() if b.uid not in gone]
        trial = Policy(Snapshot(self.snap.nodes, kept, self.snap.flags), self._templates)
        return isinstance(trial.evaluate(req, node), Placement)
