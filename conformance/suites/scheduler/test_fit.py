"""Fit requirements: GPUs, architecture/ISA and pool memory, under the published pool policy."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance.suites.scheduler import oracle
from conformance.suites.scheduler.support import RESERVATION, SchedulerUnderTest
from fakehw.views.k8s import NodeInfo
from testbed.extender.harness import Workload
from testbed.extender.scheduler import Decision


def holding_problems(sched: SchedulerUnderTest, d: Decision, gpus: int) -> list[str]:
    """What is wrong with the GPUs a bound pod got (binder extenders only: others leave GPUs to the kubelet)."""
    if d.status != "bound" or d.node is None or not sched.harness.extenders[0].config.bind_verb:
        return []
    ledger = sched.ledger()
    mine = next((h for h in ledger.holds if h.key == d.pod), None)
    if mine is None:
        return [f"{d.pod} is bound but holds nothing"]
    out = []
    if len(mine.holding.gpus) != gpus:
        out.append(f"{d.pod} asked for {gpus} GPUs and holds {list(mine.holding.gpus)}")
    holders = ledger.gpu_holders(d.node)
    shared = [i for i in mine.holding.gpus if len(holders.get(i, [])) > 1]
    if shared:
        out.append(f"{d.pod} got GPUs {shared} on {d.node} that other pods hold: "
                   + ", ".join(f"{i}: {holders[i]}" for i in shared))
    info = sched.info(d.node)
    bad = [i for i in mine.holding.gpus if i >= len(info.gpus) or not info.gpus[i].usable]
    if bad:
        out.append(f"{d.pod} got GPUs {bad} on {d.node} that are not healthy or do not exist")
    return out


@pytest.mark.requirement("SCHED-FIT-001")
def test_only_nodes_with_enough_free_healthy_gpus(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    nodes = sorted(sched.gpu_nodes(), key=lambda i: (-len(i.gpus), i.name))
    target = nodes[0]
    room = max(1, len(target.gpus) // 2)
    for info in nodes:
        keep = room if info.name == target.name else 0
        held = tuple(g.index for g in info.gpus)[: len(info.gpus) - keep]
        if held:
            sched.fill(info.name, "fit", held)
    too_big = sched.run_one(Workload("too-big", tenant="fit", gpus=room + 1))
    check(too_big.status != "bound", f"a pod asking for {room + 1} GPUs was bound to {too_big.node}, where at most "
                                     f"{room} are free")
    check(not too_big.feasible, f"nodes passed for {room + 1} GPUs with at most {room} free: {list(too_big.feasible)}")
    d = sched.run_one(Workload("fits", tenant="fit", gpus=room))
    check(d.status == "bound" and d.node == target.name,
          f"a pod asking for the {room} free GPUs of {target.name} was {d.status} on {d.node}: {d.message}")
    problems = holding_problems(sched, d, room)
    check(not problems, "; ".join(problems))
    # And GPUs are counted as taken once handed out: the next pod gets nothing on that node.
    again = sched.run_one(Workload("again", tenant="fit", gpus=1))
    check(again.status != "bound", f"a further pod was bound to {again.node} although every GPU is held")


def _arch_requests(infos: list[NodeInfo]) -> list[tuple[str, Workload, set[str]]]:
    """(description, workload, nodes it may go to) for every architecture and a distinguishing ISA extension."""
    out = []
    arches = sorted({i.arch for i in infos})
    for arch in [*arches, "s390x"]:
        allowed = {i.name for i in infos if i.arch == arch}
        out.append((f"image for linux/{arch} only", Workload(f"img-{arch}", tenant="arch", gpus=1,
                                                             platforms=(f"linux/{arch}",)), allowed))
    common = set.intersection(*(set(i.isa) for i in infos)) if infos else set()
    for info in infos:
        own = sorted(set(info.isa) - common)
        if own:
            ext = own[0]
            allowed = {i.name for i in infos if ext in i.isa}
            out.append((f"binary using {ext}", Workload(f"isa-{ext}".replace("_", "-")[:40].lower(), tenant="arch",
                                                         gpus=1, isa=(ext,)), allowed))
    if common:
        ext = sorted(common)[0]
        out.append((f"binary using {ext} (every node has it)", Workload("isa-common", tenant="arch", gpus=1,
                                                                       isa=(ext,)), {i.name for i in infos}))
    out.append(("binary using an extension no CPU has", Workload("isa-none", tenant="arch", gpus=1,
                                                                isa=("fakehw-no-such-extension",)), set()))
    return out


@pytest.mark.requirement("SCHED-FIT-002")
def test_image_platform_and_isa(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    infos = sched.gpu_nodes()
    seen: set[str] = set()
    for label, w, allowed in _arch_requests(infos):
        if w.name in seen:
            continue
        seen.add(w.name)
        d = sched.run_one(w)
        if allowed:
            check(d.status == "bound", f"{label}: not scheduled although {sorted(allowed)} fit: {d.message}")
            check(d.node in allowed, f"{label}: bound to {d.node}, "
                                     f"allowed only {sorted(allowed)}")
        else:
            check(d.status != "bound", f"{label}: bound to {d.node}, which cannot run it")
        sched.harness.reset()


def _pool_nodes(sched: SchedulerUnderTest) -> list[NodeInfo]:
    return sorted((i for i in sched.gpu_nodes() if any(p.tier != "hbm" for p in i.pools)), key=lambda i: i.name)


def _caps(info: NodeInfo, reservation: bool) -> int:
    pol = info.policy
    return sum((pol.admission_cap(p.available) if reservation else pol.burst_cap(p.available))
               for p in info.pools if p.tier != "hbm")


def grant_problems(sched: SchedulerUnderTest, d: Decision, memory: int) -> list[str]:
    """Does a bound pod's HBM plus pool grants cover its memory, within what each pool holds?"""
    if d.status != "bound" or d.node is None or not sched.harness.extenders[0].config.bind_verb:
        return []
    ledger = sched.ledger()
    mine = next((h for h in ledger.holds if h.key == d.pod), None)
    if mine is None:
        return [f"{d.pod} holds nothing"]
    info = sched.info(d.node)
    hbm = sum(info.gpus[i].memory for i in mine.holding.gpus if i < len(info.gpus))
    total = hbm + sum(mine.holding.grants.values())
    out = []
    if total < memory:
        out.append(f"{d.pod} asked for {memory} bytes; its GPUs' HBM ({hbm}) and grants {dict(mine.holding.grants)} "
                   f"give {total}")
    for pool, amount in mine.holding.grants.items():
        p = info.pool(pool)
        if p is None:
            out.append(f"{d.pod} was granted {amount} bytes of {pool}, which {d.node} does not have")
    return out


@pytest.mark.requirement("SCHED-FIT-003")
def test_memory_beyond_hbm_only_where_pools_hold_it(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    infos = sched.gpu_nodes()
    hbm = min(i.gpus[0].memory for i in infos)
    in_hbm = sched.run_one(Workload("in-hbm", tenant="mem", gpus=1, memory=hbm))
    check(in_hbm.status == "bound", f"a pod whose memory fits one GPU's HBM was not scheduled: {in_hbm.message}")
    check(not grant_problems(sched, in_hbm, hbm), "; ".join(grant_problems(sched, in_hbm, hbm)))
    pooled = _pool_nodes(sched)
    most = max((sum(p.available for p in i.pools if p.tier != "hbm") for i in pooled), default=0)
    too_much = sched.run_one(Workload("too-much", tenant="mem", gpus=1, priority=RESERVATION,
                                      memory=max(i.gpus[0].memory for i in infos) + most + 2**30))
    check(too_much.status != "bound", f"a pod needing more memory beyond HBM than any node's pools hold "
                                      f"({most} bytes) was bound to {too_much.node}")
    if not pooled:
        return
    target = pooled[0]
    spill = _caps(target, False) // 2
    memory = target.gpus[0].memory + spill
    w = Workload("spills", tenant="mem", gpus=1, memory=memory)
    expected = {f.node for f in oracle.fits(sched.infos, sched.ledger(), sched.request(w)).values() if f.fits}
    d = sched.run_one(w)
    check(d.status == "bound", f"a pod spilling {spill} bytes into pools was not scheduled (fits {sorted(expected)}): "
                               f"{d.message}")
    check(d.node in expected, f"bound to {d.node}, whose pools cannot hold {spill} bytes; fitting: {sorted(expected)}")
    problems = grant_problems(sched, d, memory)
    check(not problems, "; ".join(problems))


@pytest.mark.requirement("SCHED-MEM-001")
def test_admission_control_stops_at_the_thrash_threshold(sched: SchedulerUnderTest,
                                                         check: Callable[..., None]) -> None:
    pooled = _pool_nodes(sched)
    if not pooled:
        sched.not_applicable("no memory pools beyond HBM in this profile: nothing can thrash")
    hbm = pooled[0].gpus[0].memory
    over = max(_caps(i, True) for i in pooled) + 2**20
    within = [i for i in pooled if sum(p.available for p in i.pools if p.tier != "hbm") >= over]
    d = sched.run_one(Workload("thrash", tenant="adm", gpus=1, priority=RESERVATION, memory=hbm + over))
    check(d.status != "bound", f"a reservation needing {over} bytes beyond HBM, past every node's thrash threshold "
                               f"(pools hold it: {[i.name for i in within][:4]}), was bound to {d.node}")
    target = pooled[0]
    exact = _caps(target, True)
    d = sched.run_one(Workload("at-cap", tenant="adm", gpus=1, priority=RESERVATION, memory=hbm + exact))
    check(d.status == "bound", f"a reservation needing exactly the admission cap ({exact} bytes) was refused: "
                               f"{d.message}")
    ledger = sched.ledger()
    for info in sched.infos.values():
        for p in info.pools:
            reserved, burst = ledger.pool_use(info.name, p.name)
            cap = info.policy.admission_cap(p.available)
            check(reserved + burst <= cap, f"{info.name}/{p.name}: {reserved + burst} bytes granted, admission cap "
                                           f"{cap} (thrash threshold {info.policy.thrash_threshold})")


@pytest.mark.requirement("SCHED-MEM-002")
def test_reserved_part_is_kept_for_high_priority(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    pooled = _pool_nodes(sched)
    if not pooled:
        sched.not_applicable("no memory pools beyond HBM in this profile: nothing is reserved")
    hbm = pooled[0].gpus[0].memory
    burst_most = max(_caps(i, False) for i in pooled)
    d = sched.run_one(Workload("greedy", tenant="low", gpus=1, priority=0, memory=hbm + burst_most + 2**20))
    check(d.status != "bound", f"a burst needing more than any node's non-reserved pool memory ({burst_most} bytes) "
                               f"was bound to {d.node}")
    target = pooled[0]
    burst = _caps(target, False)
    d = sched.run_one(Workload("burst", tenant="low", gpus=1, priority=0, memory=hbm + burst))
    check(d.status == "bound", f"a burst needing exactly the non-reserved part ({burst} bytes) was refused: "
                               f"{d.message}")
    node = str(d.node)
    reserved = _caps(sched.info(node), True) - burst
    # A reservation for the reserved part on the same node fits without evicting anyone.
    others = [i.name for i in sched.gpu_nodes() if i.name != node]
    for name in others:
        sched.fill(name, "elsewhere", tuple(g.index for g in sched.info(name).gpus), priority=RESERVATION + 500)
    r = sched.run_one(Workload("reserve", tenant="high", gpus=1, priority=RESERVATION, memory=hbm + reserved))
    check(r.status == "bound" and r.node == node and not r.victims,
          f"a reservation for the reserved part ({reserved} bytes) of {node} was {r.status} on {r.node} "
          f"(victims {list(r.victims)}): {r.message}")
    ledger = sched.ledger()
    for info in sched.infos.values():
        for p in info.pools:
            _, used = ledger.pool_use(info.name, p.name)
            cap = info.policy.burst_cap(p.available)
            check(used <= cap, f"{info.name}/{p.name}: bursts hold {used} bytes; only {cap} are not reserved")
