"""What the right placement is, computed from the model: the suite's own reading of each requirement.

The cluster state (which GPUs are held, pool grants, gang bookings) is the harness's ledger; the hardware (GPU
health, pair latencies, pools and what they hold now) is the Node objects rendered from the model and the
agent's state. Nothing here asks the extender: these are the answers its decisions are compared with.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fakehw.views.k8s import NodeInfo, PodRequest, average_latency
from testbed.extender.ledger import Ledger

MAX_SETS = 20_000


@dataclass(frozen=True, slots=True)
class Fit:
    """How well a pod would sit on one node (None fields: it does not fit)."""

    node: str
    fits: bool
    reason: str = ""
    latency: float = 0.0
    """Mean pair latency (ns) of the best free GPU set."""
    best_set: tuple[int, ...] = ()
    remote: float = 0.0
    """Byte-weighted latency (ns) of the memory beyond HBM, nearest pools first."""
    others: int = 0
    """GPUs other tenants hold on the node."""
    free_after: int = 0


def open_bookings(ledger: Ledger) -> Counter[str]:
    """GPUs per node promised to gang members that are not bound yet (from the plans on bound members)."""
    out: Counter[str] = Counter()
    for members in ledger.gangs().values():
        plan = next((m.holding.gang_plan for m in members if m.holding.gang_plan), ())
        if not plan:
            continue
        slots = Counter(plan)
        slots.subtract(Counter(m.node for m in members))
        k = members[0].request.gpus
        for node, n in slots.items():
            if n > 0:
                out[node] += n * k
    return out


def free_healthy(info: NodeInfo, ledger: Ledger) -> list[int]:
    held = ledger.gpu_holders(info.name)
    return [g.index for g in info.gpus if g.usable and g.index not in held]


def best_set(info: NodeInfo, free: Sequence[int], k: int) -> tuple[float, tuple[int, ...]] | None:
    """The lowest mean pair latency of any ``k`` of ``free`` (exhaustive; None when there are too many sets)."""
    if k > len(free):
        return None
    if k < 2:
        return 0.0, tuple(free[:k])
    count = 1
    for i in range(k):
        count = count * (len(free) - i) // (i + 1)
    if count > MAX_SETS:
        return None
    best = min(itertools.combinations(free, k), key=lambda s: (average_latency(info.latency, s), s))
    return average_latency(info.latency, best), tuple(best)


def pool_room(info: NodeInfo, ledger: Ledger, req: PodRequest) -> list[tuple[int, int, str]]:
    """(latency ns, bytes the pod may take, pool) per usable pool under the published pool policy."""
    policy = info.policy
    reservation = policy.is_reservation(req.priority)
    out = []
    for pool in info.pools:
        if pool.tier == "hbm":
            continue
        holders = {h.request.tenant for h in ledger.on_node(info.name) if h.holding.grants.get(pool.name)}
        if pool.policy == "exclusive" and holders - {req.tenant}:
            continue
        reserved, burst = ledger.pool_use(info.name, pool.name)
        cap = policy.admission_cap(pool.available)
        room = cap - reserved - burst
        if not reservation:
            room = min(room, policy.burst_cap(pool.available) - burst)
        out.append((pool.latency_ns, max(0, room), pool.name))
    return sorted(out)


def fit(info: NodeInfo, ledger: Ledger, req: PodRequest, bookings: Mapping[str, int] | None = None) -> Fit:
    name = info.name
    if not req.allows_arch(info.arch):
        return Fit(name, False, f"platform linux/{info.arch} not in the image's platforms")
    if req.isa - info.isa:
        return Fit(name, False, f"CPU lacks {sorted(req.isa - info.isa)}")
    free = free_healthy(info, ledger)
    # Capacity as kube-scheduler counts it (healthy minus what bound pods requested), so a double booking by
    # the extender under test does not change what the other requirements expect.
    available = len(info.healthy_gpus) - ledger.requested_gpus(name) - (bookings or {}).get(name, 0)
    if req.gpus > available:
        return Fit(name, False, f"{available} free healthy GPUs < {req.gpus}")
    best = best_set(info, free, req.gpus)
    latency, chosen = best if best is not None else (0.0, tuple(free[: req.gpus]))
    local = sum(info.gpus[i].memory for i in chosen)
    spill = max(0, req.memory - local)
    remote_bytes_ns = 0.0
    left = spill
    for latency_ns, room, _ in pool_room(info, ledger, req):
        take = min(room, left)
        remote_bytes_ns += take * latency_ns
        left -= take
    if left > 0:
        return Fit(name, False, f"pools cannot hold {spill} bytes beyond HBM under the pool policy")
    others = sum(len(h.holding.gpus) for h in ledger.on_node(name) if h.request.tenant != req.tenant)
    return Fit(name, True, "", latency, chosen, remote_bytes_ns / req.memory if req.memory else 0.0, others,
               available - req.gpus)


def fits(infos: Mapping[str, NodeInfo], ledger: Ledger, req: PodRequest) -> dict[str, Fit]:
    bookings = open_bookings(ledger)
    return {name: fit(info, ledger, req, bookings) for name, info in infos.items()}


def argmin(fitting: Sequence[Fit], key: str, tolerance: float = 1e-6) -> set[str]:
    """Nodes whose ``key`` metric is minimal among the fitting ones."""
    if not fitting:
        return set()
    values = {f.node: float(getattr(f, key)) for f in fitting}
    low = min(values.values())
    return {n for n, v in values.items() if v <= low + tolerance}
