"""Isolation requirements: directed scenarios and a fuzz over random workload sequences of several tenants.

The fuzz draws sequences of pods (tenants, GPU counts, memory beyond HBM, priorities, gangs) and completions,
schedules each through kube-scheduler's cycle with the extender, and checks an invariant after every step. It is
reproducible: the same seed (``--sched-fuzz-seed``, else one derived from the profile) draws the same
sequences; a failure reports the shrunk sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from conformance.suites.scheduler import oracle
from conformance.suites.scheduler.support import RESERVATION, SchedulerUnderTest
from testbed.extender.harness import Workload
from testbed.extender.ledger import Ledger
from testbed.extender.scheduler import Decision

TENANTS = ("t1", "t2", "t3")
PRIORITIES = (0, 100, RESERVATION, RESERVATION + 500)


@dataclass(frozen=True)
class Submit:
    workload: Workload


@dataclass(frozen=True)
class Complete:
    index: int


Op = Submit | Complete
Invariant = Callable[[SchedulerUnderTest, Op, list[Decision], Ledger, Ledger], list[str]]


def _ops(sched: SchedulerUnderTest, steps: int) -> st.SearchStrategy[list[Op]]:
    infos = sched.gpu_nodes()
    g = max(len(i.gpus) for i in infos)
    hbm = min(i.gpus[0].memory for i in infos)
    pool = max((p.available for i in infos for p in i.pools if p.tier != "hbm"), default=0)
    sizes = sorted({s for s in (0, 1, 2, g // 2, g) if 0 <= s <= g})
    spills = sorted({0, pool // 10, pool // 3, (pool * 2) // 3} if pool else {0})
    submit = st.builds(
        lambda tenant, gpus, spill, prio, gang: Workload(
            "w", tenant=tenant, gpus=gpus if not gang else max(1, gpus), memory=(gpus * hbm + spill) if spill else 0,
            priority=prio, gang="g" if gang else None, gang_size=gang or 1),
        st.sampled_from(TENANTS), st.sampled_from(sizes), st.sampled_from(spills), st.sampled_from(PRIORITIES),
        st.sampled_from([0, 0, 0, 2, 3]),
    ).map(Submit)
    complete = st.integers(min_value=0, max_value=50).map(Complete)
    return st.lists(st.one_of(submit, submit, complete), min_size=1, max_size=steps)


def _fuzz(sched: SchedulerUnderTest, check: Callable[..., None], invariant: Invariant) -> None:
    opts = sched.options
    fuzz_seed = opts.fuzz_seed if opts.fuzz_seed is not None else int(sched.system.digest[:8], 16)
    counter = [0]

    @settings(max_examples=opts.fuzz_examples, deadline=None, database=None, derandomize=False,
              phases=(Phase.explicit, Phase.generate, *((Phase.shrink,) if opts.fuzz_shrink else ())),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])
    @seed(fuzz_seed)
    @given(_ops(sched, opts.fuzz_steps))
    def run(ops: list[Op]) -> None:
        sched.harness.reset()
        live: list[str] = []
        before = sched.ledger()
        for step, op in enumerate(ops):
            decisions: list[Decision] = []
            if isinstance(op, Submit):
                counter[0] += 1
                w = replace(op.workload, name=f"w{counter[0]}",
                            gang=f"g{counter[0]}" if op.workload.gang else None)
                decisions = sched.harness.run(w)
                live += [d.pod for d in decisions if d.status == "bound"]
            elif live:
                key = live.pop(op.index % len(live))
                sched.harness.delete(key)
            after = sched.ledger()
            live = [k for k in live if any(h.key == k for h in after.holds)]
            problems = invariant(sched, op, decisions, before, after)
            if problems:
                raise AssertionError(f"step {step} ({op}): " + "; ".join(problems[:5]))
            before = after  # only the steps change the store: this step's end is the next one's start

    try:
        run()
    except AssertionError as exc:
        check(False, f"fuzz (seed {fuzz_seed}, {opts.fuzz_examples} sequences of up to {opts.fuzz_steps} steps): "
                     f"{exc}", seed=fuzz_seed)


# --------------------------------------------------------------------------------------------------- invariants


def no_double_booking(sched: SchedulerUnderTest, op: Op, decisions: list[Decision], before: Ledger,
                      after: Ledger) -> list[str]:
    out = []
    infos = sched.infos
    for name, info in infos.items():
        for gpu, holders in after.gpu_holders(name).items():
            if len(holders) > 1:
                out.append(f"{name} GPU {gpu} held by {holders}")
        for p in info.pools:
            reserved, burst = after.pool_use(name, p.name)
            if reserved + burst > p.available:
                out.append(f"{name}/{p.name}: {reserved + burst} bytes granted, the pool holds {p.available}")
    binder = bool(sched.harness.extenders[0].config.bind_verb)
    for d in decisions:
        mine = next((h for h in after.holds if h.key == d.pod), None)
        if binder and mine is not None and len(mine.holding.gpus) != mine.request.gpus:
            out.append(f"{d.pod} asked for {mine.request.gpus} GPUs, holds {list(mine.holding.gpus)}")
    return out


def reservations_honoured(sched: SchedulerUnderTest, op: Op, decisions: list[Decision], before: Ledger,
                          after: Ledger) -> list[str]:
    out = []
    for pod, reason in sched.harness.store.deleted:
        if reason.startswith("preempted") and int(pod["spec"].get("priority") or 0) >= RESERVATION:
            out.append(f"reservation {pod['metadata']['namespace']}/{pod['metadata']['name']} was {reason}")
    if isinstance(op, Submit) and not op.workload.gang and op.workload.priority >= RESERVATION and decisions:
        d = decisions[0]
        if d.status != "bound":
            # Would it fit with every burst (lower than a reservation) set aside?
            kept = Ledger(tuple(h for h in before.holds if h.request.priority >= RESERVATION), before.pending, ())
            req = sched.request(replace(op.workload, name="probe"))
            fits = [f.node for f in oracle.fits(sched.infos, kept, req).values() if f.fits]
            if fits:
                out.append(f"reservation {d.pod} was not placed ({d.status}: {d.message}) although it fits "
                           f"{fits[:3]} once bursts are preempted")
    return out


def gang_all_or_nothing(sched: SchedulerUnderTest, op: Op, decisions: list[Decision], before: Ledger,
                        after: Ledger) -> list[str]:
    if not isinstance(op, Submit) or not op.workload.gang:
        return []
    bound = [d for d in decisions if d.status == "bound"]
    out = []
    if bound and len(bound) != len(decisions):
        out.append(f"gang of {len(decisions)}: {len(bound)} pods bound, "
                   f"{[d.pod + ': ' + d.message for d in decisions if d.status != 'bound'][:2]} not")
    domains = {sched.info(str(d.node)).domain for d in bound}
    if len(domains) > 1:
        out.append(f"gang spread over NVLink domains {sorted(domains)}")
    return out


@pytest.mark.requirement("SCHED-ISO-001")
def test_fuzz_no_double_booking(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    _fuzz(sched, check, no_double_booking)


@pytest.mark.requirement("SCHED-ISO-002")
def test_fuzz_reservations_honoured(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    _fuzz(sched, check, reservations_honoured)


@pytest.mark.requirement("SCHED-ISO-004")
def test_gang_all_or_nothing(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    infos = sched.gpu_nodes()
    domains: dict[str, int] = {}
    for i in infos:
        domains[i.domain] = domains.get(i.domain, 0) + 1
    g = max(len(i.gpus) for i in infos)
    size = max(domains.values()) + 1  # one more whole-node pod than the largest domain has nodes
    decisions = sched.run(Workload("too-big", tenant="gang", gpus=g, gang="too-big", gang_size=size))
    bound = [d.pod for d in decisions if d.status == "bound"]
    check(not bound, f"a gang of {size} pods x {g} GPUs fits no NVLink domain (the largest has {max(domains.values())} "
                     f"nodes), yet {len(bound)} of its pods were bound: {bound[:4]}")
    _fuzz(sched, check, gang_all_or_nothing)


@pytest.mark.requirement("SCHED-ISO-006")
def test_gang_bookings_are_not_given_away(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    """One node with room for a gang of two (every other node full); the first member is placed, then another
    tenant's pod arrives before the second member. The GPUs booked for the second member are not free: the other pod
    must not get them, and the second member must still get its node."""
    sched.harness.reset()
    infos = sorted(sched.gpu_nodes(), key=lambda i: (-len(i.healthy_gpus), i.name))
    target = infos[0]
    k = len(target.healthy_gpus) // 2
    if k < 1:
        sched.not_applicable(f"no node has two healthy GPUs for a gang of two ({target.name} has "
                             f"{len(target.healthy_gpus)})")
    for other in infos[1:]:
        sched.fill(other.name, "elsewhere", tuple(g.index for g in other.gpus))
    keys = sched.harness.submit(Workload("gang", tenant="gang", gpus=k, gang="gang", gang_size=2))
    lead = sched.harness.schedule(keys[0])
    check(lead.status == "bound" and lead.node == target.name,
          f"the first member of a gang of 2 x {k} GPUs, which only {target.name} can hold, was not placed there: "
          f"{lead.status} on {lead.node} ({lead.message})")
    interloper = sched.run_one(Workload("interloper", tenant="other", gpus=k))
    rest = sched.harness.schedule(keys[1])
    booked = sorted(set(target.healthy_gpus) - set(sched.ledger().gpu_holders(target.name)))
    story = (f"gang member 1 on {lead.node}; another tenant's {k}-GPU pod {interloper.status} on {interloper.node} "
             f"({interloper.message}); gang member 2 {rest.status} on {rest.node} ({rest.message})")
    check(not (interloper.status == "bound" and interloper.node == target.name),
          f"the GPUs booked on {target.name} for the gang's second member went to another tenant's pod: {story}",
          placements={"lead": lead.node, "interloper": interloper.node, "member 2": rest.node})
    check(rest.status == "bound" and rest.node == target.name,
          f"the gang's second member lost the node booked for it: {story}; GPUs left unheld there: {booked}")


@pytest.mark.requirement("SCHED-ISO-003")
def test_bursts_preempted_before_reservations(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    infos = sorted(sched.gpu_nodes(), key=lambda i: (-len(i.gpus), i.name))
    target = infos[0]
    for other in infos[1:]:
        sched.fill(other.name, "res", tuple(g.index for g in other.gpus), priority=RESERVATION)
    g = len(target.gpus)
    half = max(1, g // 2)
    res = sched.fill(target.name, "res", tuple(x.index for x in target.gpus[:half]), priority=RESERVATION,
                     name="reserved")
    bursts = [sched.fill(target.name, "bursty", (x.index,), priority=0, name=f"burst-{x.index}")
              for x in target.gpus[half:]]
    if bursts:
        d = sched.run_one(Workload("needs-bursts", tenant="high", gpus=len(bursts), priority=RESERVATION + 500))
        check(d.status == "bound", f"a high-priority pod needing the {len(bursts)} GPUs bursts hold was not placed: "
                                   f"{d.message}")
        check(set(d.victims) <= set(bursts), f"preemption took {sorted(set(d.victims) - set(bursts))}, which are not "
                                             f"bursts", victims=list(d.victims))
    d = sched.run_one(Workload("needs-reservation", tenant="high", gpus=1, priority=RESERVATION + 500))
    alive = sched.harness.pod(res) is not None
    check(alive, f"the reservation {res} was preempted for a higher-priority pod (victims {list(d.victims)})")
    check(d.status != "bound", f"a pod was bound to {d.node} although only reservations hold GPUs there")
    pooled = [i for i in infos if any(p.tier != "hbm" for p in i.pools)]
    if not pooled:
        return
    # Pool memory: bursts fill the non-reserved part of a node's pools; a reservation needing more than is free
    # must get it by preempting bursts, never the other reservation.
    sched.harness.reset()
    node = pooled[0]
    for other in infos:
        if other.name != node.name:
            sched.fill(other.name, "res", tuple(x.index for x in other.gpus), priority=RESERVATION)
    pools = [p for p in node.pools if p.tier != "hbm"]
    grants = {p.name: node.policy.burst_cap(p.available) for p in pools}
    mem_bursts = [sched.fill(node.name, "bursty", (), priority=0, name=f"mem-burst-{p.name}",
                             grants={p.name: amount}, memory=amount) for p, amount in zip(pools, grants.values(),
                                                                                           strict=True)]
    hbm = node.gpus[0].memory
    need = sum(p.available for p in pools) - sum(grants.values()) + 2**20  # more than is free: bursts must go
    d = sched.run_one(Workload("mem-res", tenant="high", gpus=1, priority=RESERVATION, memory=hbm + need))
    check(d.status == "bound", f"a reservation for {need} pooled bytes, which fits once bursts are preempted, was not "
                               f"placed: {d.message}")
    check(bool(d.victims) and set(d.victims) <= set(mem_bursts),
          f"the reservation's preemption took {list(d.victims)}; bursts were {mem_bursts}")


@pytest.mark.requirement("SCHED-ISO-005")
def test_tenants_kept_apart(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    infos = sched.gpu_nodes()
    if len(infos) < 2:
        sched.not_applicable(f"{len(infos)} GPU node(s) in this testbed: nowhere to keep tenants apart")
    a = sched.run_one(Workload("a0", tenant="alpha", gpus=1))
    check(a.status == "bound", f"tenant alpha's pod not scheduled: {a.message}")
    for n in range(2):
        w = Workload(f"b{n}", tenant="beta", gpus=1)
        fits = [f for f in oracle.fits(sched.infos, sched.ledger(), sched.request(w)).values() if f.fits]
        closest = oracle.argmin(fits, "latency", tolerance=0.5)
        alone = oracle.argmin([f for f in fits if f.node in closest], "others")
        d = sched.run_one(w)
        check(d.status == "bound", f"tenant beta's pod not scheduled: {d.message}")
        shared = {f.node: f.others for f in fits}
        wrong = sorted(set(d.top) - alone)
        check(not wrong, f"tenant beta's pod {n}: top-scored {wrong} share GPUs with other tenants "
                         f"({[shared.get(x) for x in wrong]} GPUs held by them); {sorted(alone)[:4]} do not",
              others=shared)
