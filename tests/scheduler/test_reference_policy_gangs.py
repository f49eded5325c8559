"""The reference extender's gang plans (testbed/reference/extender/policy.py, ``gang_plan``) and GPU choice at the
limits docs/scheduler.md publishes: a plan books exactly one node per member, in the NVLink domain that needs the
fewest nodes, filled from the nodes with the most room; the best GPU set is found exhaustively up to 400 sets.
Each expected answer is worked out by hand from the profiles' documented hardware."""

from __future__ import annotations

import dataclasses
from collections import Counter
from types import SimpleNamespace

import pytest

from fakehw.views.k8s import Holding
from testbed.reference.extender.policy import Flags, GangPlan, Placement, Policy, Refusal, choose_gpus
from tests.scheduler.test_reference_policy import bound, infos, req, snapshot


def _two_trays(held_a: int, held_b: int) -> tuple[Policy, str, str]:
    """Two GB200 NVL72 compute trays (4 GPUs each, one NVLink domain), other tenants holding the first GPUs."""
    nodes = infos("gb200-nvl72")
    a, b = sorted(nodes)[:2]
    assert nodes[a].domain == nodes[b].domain and len(nodes[a].gpus) == 4
    pods = [bound("x", f"{n}-{i}", n, (i,)) for n, held in ((a, held_a), (b, held_b)) for i in range(held)]
    return Policy(snapshot({a: nodes[a], b: nodes[b]}, pods, Flags())), a, b


def test_a_plan_is_filled_from_the_node_with_the_most_room() -> None:
    """Two trays of one NVL72 domain: a has 1 free GPU, b all 4. A gang of two 1-GPU pods fits on b alone, so the
    plan books b twice (docs/scheduler.md: packing, whole nodes kept free; one node rather than two)."""
    policy, a, b = _two_trays(3, 0)
    plan = policy.gang_plan(req(gpus=1, gang="g", gang_size=2), [a, b])
    assert isinstance(plan, GangPlan) and plan.nodes == (b, b), plan


def test_a_plan_books_exactly_one_slot_per_member() -> None:
    """docs/scheduler.md: the first member books "a node for every member". Two trays with 2 free GPUs each, a gang
    of three 1-GPU pods: 2 on one tray and 1 on the other, 3 slots in all (not 4: the last tray is not filled)."""
    policy, a, b = _two_trays(2, 2)
    plan = policy.gang_plan(req(gpus=1, gang="g", gang_size=3), [a, b])
    assert isinstance(plan, GangPlan) and len(plan.nodes) == 3, plan
    assert sorted(Counter(plan.nodes).values()) == [1, 2], plan


def test_the_domain_needing_fewest_nodes_wins() -> None:
    """gb200-nvl72 with 36 trays is two NVL72 domains of 18 trays. Every tray of the first has 2 of its 4 GPUs held
    by another tenant, so a gang of two 2-GPU pods needs 2 trays there; in the empty second domain one tray holds
    both. The plan goes to the second domain, on one tray (docs/scheduler.md: fewest nodes, then cheapest)."""
    nodes = infos("gb200-nvl72", nodes=36)
    domains = sorted({i.domain for i in nodes.values()})
    assert len(domains) == 2
    first = sorted(n for n, i in nodes.items() if i.domain == domains[0])
    pods = [bound("x", f"{n}-{i}", n, (i,)) for n in first for i in range(2)]
    policy = Policy(snapshot(nodes, pods, Flags()))
    names = first + sorted(n for n in nodes if n not in first)  # the busy domain first, then the other
    plan = policy.gang_plan(req(gpus=2, gang="g", gang_size=2), names)
    assert isinstance(plan, GangPlan), plan
    assert plan.domain == domains[1] and len(set(plan.nodes)) == 1 and len(plan.nodes) == 2, plan
    backwards = Policy(snapshot(nodes, pods, Flags())).gang_plan(req(gpus=2, gang="h", gang_size=2), names[::-1])
    assert isinstance(backwards, GangPlan) and backwards.domain == domains[1], backwards


def test_up_to_400_sets_the_search_is_exhaustive() -> None:
    """docs/scheduler.md: the best free set is found "exhaustive up to 400 sets, greedy beyond". 12 GPUs, 3 wanted:
    C(12, 3) = 220 sets, so the answer is the true minimum of the mean pair latency. GPUs 0, 1, 2 are 10 ns apart
    from each other (mean 10); each has a private partner 1 ns away (3, 4, 5) that is 1000 ns from everything else;
    the rest are 1000 ns from everything. Any set but {0, 1, 2} has a 1000 ns pair (mean >= 337), so (0, 1, 2) is
    the answer, although a greedy search from any start takes a 1 ns partner first and misses it."""
    near = {frozenset(p): 10 for p in ((0, 1), (0, 2), (1, 2))} | {frozenset((i, i + 3)): 1 for i in range(3)}
    matrix = tuple(tuple(0 if a == b else near.get(frozenset((a, b)), 1000) for b in range(12)) for a in range(12))
    node = SimpleNamespace(latency=matrix)
    assert choose_gpus(node, list(range(12)), 3) == (0, 1, 2)  # type: ignore[arg-type]


def test_a_node_named_twice_is_answered_once() -> None:
    """The extender answers kube-scheduler's ExtenderArgs.NodeNames as it gets them (testbed/reference/extender/
    server.py passes the list on); ExtenderFilterResult's NodeNames are the nodes that fit, each a node, so a name
    the request repeats is still one node: it is passed once, and prioritize's HostPriorityList scores it once."""
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    policy = Policy(snapshot(nodes, [], Flags()))
    passed, failed, unresolvable = policy.filter(req(gpus=1), [a, a, b])
    assert passed == [a, b] and not failed and not unresolvable, (passed, failed, unresolvable)
    assert [n for _, ns in policy.score_groups(req(name="q", gpus=1), [b, b]) for n in ns] == [b]


def test_beyond_400_sets_the_greedy_search_decides() -> None:
    """docs/scheduler.md: "exhaustive up to 400 sets, greedy beyond" (a decision's cost stays bounded on large
    nodes). The matrix of the test above, on 13 and 16 GPUs: C(13, 3) = 286 sets, so (0, 1, 2), the optimum; C(16, 3)
    = 560, so the greedy search from every start (ties: lowest index) decides. Worked by hand: from 0 it takes 3
    (1 ns), then 1 (10 + 1000 ns, tied with 2); from 1: 4, then 0; from 2: 5, then 0; from any of 6-15: 0, then 3.
    Best of those by mean pair latency, then lowest indices: (0, 1, 3), mean (10 + 1 + 1000) / 3."""
    def node(n: int) -> SimpleNamespace:
        near = {frozenset(p): 10 for p in ((0, 1), (0, 2), (1, 2))} | {frozenset((i, i + 3)): 1 for i in range(3)}
        return SimpleNamespace(latency=tuple(tuple(0 if a == b else near.get(frozenset((a, b)), 1000)
                                                   for b in range(n)) for a in range(n)))
    assert choose_gpus(node(13), list(range(13)), 3) == (0, 1, 2)  # type: ignore[arg-type]
    assert choose_gpus(node(16), list(range(16)), 3) == (0, 1, 3)  # type: ignore[arg-type]


def _gang_lead(node: str, gpus: tuple[int, ...], plan: tuple[str, ...], memory: int = 0,
               grants: dict[str, int] | None = None, size: int = 3) -> dict[str, object]:
    """The first member of gang t/g, bound on ``node`` with its booking ``plan`` (as the binder writes it)."""
    pod = bound("t", "g-0", node, gpus, memory=memory, grants=grants, gang="g", gang_size=size)
    pod["metadata"]["annotations"].update(Holding(node, gpus, grants or {}, "burst", "domain", "tok",
                                                  plan).annotations())
    return pod


def test_a_booking_holds_gpus_for_every_pending_member() -> None:
    """docs/scheduler.md (SCHED-ISO-006): GPUs booked for a gang's pending members are not given to others. A gang of
    three 2-GPU pods planned on one DGX H100 (8 GPUs): the first holds 2, and 2 x 2 = 4 are booked for the other two,
    so 2 GPUs are free for anyone else: a 2-GPU pod of another tenant fits, a 3-GPU one does not."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    policy = Policy(snapshot(nodes, [_gang_lead(name, (0, 1), (name, name, name))], Flags()))
    assert isinstance(policy.evaluate(req(ns="u", gpus=2), name), Placement)
    three = policy.evaluate(req(ns="u", name="q", gpus=3), name)
    assert isinstance(three, Refusal) and "2 free and healthy (0 unhealthy, 2 held, 4 booked by gangs)" in \
        three.reason, three


def test_a_booking_holds_pool_memory_for_every_pending_member() -> None:
    """docs/scheduler.md: memory booked for a gang's pending members is not given to others. A gang of three 1-GPU
    pods, each needing its GPU's HBM plus S = 16 GiB, planned on one GB200 tray: the first holds S of grace-lpddr,
    2S are booked for the other two. Bursts may take each pool's burst cap (thrashThreshold less reservedFraction
    of what it holds), so another tenant's memory-only pod gets at most grace-lpddr's cap - 3S plus
    nvl72-peer-hbm's cap: that much fits, one byte more does not."""
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    info = nodes[name]
    lpddr, peer = info.pool("grace-lpddr"), info.pool("nvl72-peer-hbm")
    assert lpddr is not None and peer is not None
    s = 16 * 2**30
    lead = _gang_lead(name, (0,), (name, name, name), memory=info.gpus[0].memory + s, grants={"grace-lpddr": s})
    policy = Policy(snapshot({name: info}, [lead], Flags()))
    room = info.policy.burst_cap(lpddr.available) - 3 * s + info.policy.burst_cap(peer.available)
    assert isinstance(policy.evaluate(req(ns="u", gpus=0, memory=room), name), Placement)
    assert isinstance(policy.evaluate(req(ns="u", name="q", gpus=0, memory=room + 1), name), Refusal)


def test_bind_finds_the_booking_its_filter_made() -> None:
    """docs/scheduler.md (gangs): the first member books, and the plan, domain and token go onto every member at
    binding. kube-scheduler filters the first member over all nodes, then asks the binder to bind it to one node;
    the binder (testbed/reference/extender/server.py) asks for the gang's plan again with only that node, and must
    get the booking the filter made (the same token and nodes), not a new one."""
    nodes = infos("dgx-h100", nodes=2)
    policy = Policy(snapshot(nodes, [], Flags()))
    member = req(gpus=4, gang="g", gang_size=2)
    passed, _, _ = policy.filter(member, sorted(nodes))
    made = policy.gang_plan(member, sorted(nodes))
    assert isinstance(made, GangPlan) and passed == [made.nodes[0]], (passed, made)
    again = policy.gang_plan(member, [made.nodes[0]])
    assert isinstance(again, GangPlan) and again.token == made.token and again.nodes == made.nodes, again


def test_a_gang_without_a_booking_scores_other_gangs_bookings_as_taken() -> None:
    """kube-scheduler's prioritize (HostPriorityList, scores 0..10) for the first member of gang g, which has no
    booking yet, on two DGX H100 nodes (8 GPUs each). On a, gang h's first member (tenant x) holds 4 GPUs and h's
    plan books the other 4 for its second member; on b, tenant x's plain pods hold 4 and 4 are free. GPUs booked
    for h are not g's (docs/scheduler.md, SCHED-ISO-006): the 4-GPU member does not fit a (score 0) and fits b
    (score 10, the only and so the cheapest fit)."""
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    lead = bound("x", "h-0", a, (0, 1, 2, 3), gang="h", gang_size=2)
    lead["metadata"]["annotations"].update(Holding(a, (0, 1, 2, 3), {}, "burst", a, "tok", (a, a)).annotations())
    plain = [bound("x", f"p{i}", b, (i,)) for i in range(4)]
    policy = Policy(snapshot(nodes, [lead, *plain], Flags()))
    assert policy.prioritize(req(gpus=4, gang="g", gang_size=2), [a, b]) == {a: 0, b: 10}


def test_gang_plans_are_values() -> None:
    """A gang's plan is read back from the cluster and shared by every decision about its members (docs/
    scheduler.md: the booking lives in the cluster); nothing may change one in place."""
    nodes = infos("dgx-h100", nodes=1)
    plan = Policy(snapshot(nodes, [], Flags())).gang_plan(req(gpus=4, gang="g", gang_size=2), list(nodes))
    assert isinstance(plan, GangPlan), plan
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.nodes = ()  # type: ignore[misc]


def test_a_booking_without_pool_memory_sets_none_aside() -> None:
    """docs/scheduler.md: a gang's booking holds what its pending members need; gang t/g's members (1 GPU, no memory
    beyond their HBM) need no pool memory, so their booking sets none aside. On a GB200 tray where t/g's first member
    holds GPU 0 and books GPU 1, gang u/g's members (1 GPU plus S bytes of pools each) see the pools' whole burst room
    R (grace-lpddr's and nvl72-peer-hbm's burst caps, made odd by a 1-byte burst if need be) with S = (R + 1) / 2:
    one member fits (S <= R), two do not (2S = R + 1), so a gang of two with only this tray gets no node."""
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    info = nodes[name]
    lpddr, peer = info.pool("grace-lpddr"), info.pool("nvl72-peer-hbm")
    assert lpddr is not None and peer is not None
    room = info.policy.burst_cap(lpddr.available) + info.policy.burst_cap(peer.available)
    pods = [_gang_lead(name, (0,), (name, name), size=2)]
    if room % 2 == 0:
        pods.append(bound("o", "byte", name, (), grants={"grace-lpddr": 1}))
        room -= 1
    s = (room + 1) // 2
    policy = Policy(snapshot({name: info}, pods, Flags()))
    member = dict(gpus=1, memory=info.gpus[0].memory + s, gang="g", gang_size=2, ns="u")
    assert isinstance(policy.evaluate(req(**member), name), Placement)
    plan = policy.gang_plan(req(**member), [name])
    assert isinstance(plan, Refusal) and plan.reason.endswith("the largest has room for 1"), plan


def test_a_plan_does_not_depend_on_the_order_nodes_are_listed() -> None:
    """kube-scheduler starts each cycle's node search where the last one stopped (its round-robin start index), so
    the same nodes reach the extender in different orders; the booking must not follow that order. Three empty GB200
    trays of one domain alike in cost; a gang of two 4-GPU pods needs two of them (4 GPUs each): the same two trays,
    the first by name, whichever way round the candidates come."""
    nodes = infos("gb200-nvl72")
    trays = sorted(nodes)[:3]
    plans = []
    for order in (trays, trays[::-1], [trays[1], trays[2], trays[0]]):
        plan = Policy(snapshot({n: nodes[n] for n in trays}, [], Flags())).gang_plan(
            req(gpus=4, gang="g", gang_size=2), order)
        assert isinstance(plan, GangPlan), plan
        plans.append(sorted(plan.nodes))
    assert plans == [trays[:2]] * 3, plans


def test_a_memory_only_booking_holds_its_memory_on_a_node_without_pods() -> None:
    """docs/scheduler.md: memory booked for a gang's pending members is not given to others. Gang t/g's members ask
    for no GPU and M = 64 GiB of pool memory each; the first is bound on GB200 tray a and the plan books tray b, where
    nothing runs, for the second: b holds M back. Another tenant's memory-only pod gets what bursts may take of b's
    pools (grace-lpddr's and nvl72-peer-hbm's burst caps) less M: that fits, one byte more does not."""
    nodes = infos("gb200-nvl72")
    a, b = sorted(nodes)[:2]
    info = nodes[b]
    lpddr, peer = info.pool("grace-lpddr"), info.pool("nvl72-peer-hbm")
    assert lpddr is not None and peer is not None
    m = 64 * 2**30
    lead = _gang_lead(a, (), (a, b), memory=m, grants={"grace-lpddr": m}, size=2)
    policy = Policy(snapshot({a: nodes[a], b: info}, [lead], Flags()))
    room = info.policy.burst_cap(lpddr.available) + info.policy.burst_cap(peer.available) - m
    assert isinstance(policy.evaluate(req(ns="u", gpus=0, memory=room), b), Placement)
    assert isinstance(policy.evaluate(req(ns="u", name="q", gpus=0, memory=room + 1), b), Refusal)


def test_no_negative_free_count_when_bookings_outnumber_the_healthy_gpus() -> None:
    """A DGX H100: gang t/g's first member (4 GPUs) holds GPUs 0-3 and books 4 more for the second; then GPUs 6 and 7
    turn unhealthy, so only 2 free GPUs remain for a booking of 4. Another pod's refusal counts what is left for
    it: 0 free and healthy (2 unhealthy, 4 held, 4 booked), never a negative number of GPUs."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    info = nodes[name]
    sick = dataclasses.replace(info, gpus=tuple(dataclasses.replace(g, health="unhealthy") if g.index in (6, 7)
                                                else g for g in info.gpus))
    policy = Policy(snapshot({name: sick}, [_gang_lead(name, (0, 1, 2, 3), (name, name), size=2)], Flags()))
    refusal = policy.evaluate(req(ns="u", gpus=1), name)
    assert isinstance(refusal, Refusal), refusal
    assert "needs 1 GPUs; 0 free and healthy (2 unhealthy, 4 held, 4 booked by gangs)" in refusal.reason, refusal


def test_a_booking_on_a_node_that_is_gone_still_holds_the_others() -> None:
    """docs/scheduler.md (gangs, SCHED-ISO-006): the first member books a node for every member, and GPUs booked for
    pending members go to no other pod. A gang of three 4-GPU pods planned on (a, gone, b), where node ``gone`` has
    since left the cluster (the extender no longer sees it): the first member holds 4 GPUs of DGX H100 a, and b's
    booking for the third member still holds 4 of b's 8 GPUs, so another tenant's 5-GPU pod does not fit on b and a
    4-GPU one does. (Nothing can be booked on the node that is gone.)"""
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    snap = snapshot(nodes, [_gang_lead(a, (0, 1, 2, 3), (a, "gone", b))], Flags())
    assert snap.use_of(b).booked == 4 and "gone" not in snap.use, (snap.use_of(b), sorted(snap.use))
    policy = Policy(snap)
    five = policy.evaluate(req(ns="u", gpus=5), b)
    assert isinstance(five, Refusal) and "4 free and healthy (0 unhealthy, 0 held, 4 booked by gangs)" in \
        five.reason, five
    assert isinstance(policy.evaluate(req(ns="u", name="q", gpus=4), b), Placement)
