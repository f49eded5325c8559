"""The reference extender's policy against its published rules (docs/scheduler.md: the cost model and its weights,
the 10/9/0..8 scores, pool grants under the pool policy, gang plans across domains, GPU choice on large nodes).
Written to kill the mutants ``make mutate`` found surviving in testbed/reference/extender/policy.py."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from fakehw.model import load_profile
from fakehw.views.k8s import Holding, NodeInfo, PoolPolicy, RuntimeHealth, node_info
from testbed.reference.extender.policy import (
    Flags,
    GangPlan,
    Placement,
    Policy,
    Refusal,
    Snapshot,
    choose_gpus,
    parse_bound,
)
from tests.scheduler.test_reference_policy import bound, gang_lead_with_plan, infos, req, snapshot


def _placement(policy: Policy, node: str, **kw: object) -> Placement:
    verdict = policy.evaluate(req(**kw), node)
    assert isinstance(verdict, Placement), verdict
    return verdict


def test_cost_is_the_published_weighted_sum() -> None:
    """cost = 1 x remote memory + 1 x NVLink latency + 1 x isolation; memory-bound pods 8 / 0.25 / 1."""
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    hbm = nodes[name].gpus[0].memory
    policy = Policy(snapshot(nodes, [bound("other", "o", name, (3,))], Flags()))
    for memory_bound, (w_mem, w_lat) in ((False, (1.0, 1.0)), (True, (8.0, 0.25))):
        p = _placement(policy, name, gpus=2, memory=2 * hbm + 2**34, memory_bound=memory_bound)
        assert p.remote > 0 and p.latency > 0 and p.isolation > 0, p
        assert p.cost == round(w_mem * p.remote + w_lat * p.latency + 1.0 * p.isolation, 3)


def test_scores_for_the_rest_are_0_to_8_by_cost() -> None:
    """Nodes whose GPUs other tenants hold 0, 1 and 2 of 8 (isolation 0, 250, 500 ns; NVLink everywhere alike):
    the cheapest scores 10, the one halfway scores 4 of 8, the dearest 0."""
    nodes = infos("dgx-h100", nodes=3)
    a, b, c = sorted(nodes)
    pods = [bound("x", "x1", b, (0,)), bound("x", "x2", c, (0,)), bound("x", "x3", c, (1,))]
    policy = Policy(snapshot(nodes, pods, Flags()))
    costs = {n: _placement(policy, n, gpus=1).cost for n in (a, b, c)}
    assert costs[b] - costs[a] == pytest.approx(250) and costs[c] - costs[a] == pytest.approx(500)
    assert policy.prioritize(req(gpus=1), [a, b, c]) == {a: 10, b: 4, c: 0}


def test_the_reference_flags_are_all_off_and_unhealthy_gpus_are_not_free() -> None:
    assert not any(dataclasses.asdict(Flags()).values())
    assert Flags.for_mutant(None) == Flags() == Flags.for_mutant("no-such-mutant")
    assert Flags.for_mutant("ignore-health") == Flags(ignore_health=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Flags().spread = True  # type: ignore[misc]
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    info = nodes[name]
    sick = dataclasses.replace(info, gpus=tuple(dataclasses.replace(g, health="unhealthy") if g.index in (2, 5)
                                                else g for g in info.gpus))
    ref = Policy(snapshot({name: sick}, [], Flags())).snap
    assert ref.free_gpus(sick) == [0, 1, 3, 4, 6, 7]
    assert Policy(snapshot({name: sick}, [], Flags(ignore_health=True))).snap.free_gpus(sick) == list(range(8))


def _pool_node(reserved: int, burst: int) -> tuple[dict[str, NodeInfo], str, int]:
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    info = nodes[name]
    pool = info.pool("grace-lpddr")
    assert pool is not None
    pods = []
    if reserved:
        pods.append(bound("r", "res", name, (0,), priority=info.policy.reserved_priority,
                          grants={"grace-lpddr": reserved}, kind="reservation"))
    if burst:
        pods.append(bound("b", "bur", name, (1,), grants={"grace-lpddr": burst}))
    return nodes, name, pool.available


def test_bursts_get_what_reservations_leave_under_the_admission_cap() -> None:
    """Reservations beyond the reserved part of the pool leave bursts only what the admission cap still holds."""
    nodes, name, available = _pool_node(reserved=0, burst=0)
    policy_cfg = nodes[name].policy
    cap = policy_cfg.admission_cap(available)
    reserved = policy_cfg.burst_cap(available) // 2 + (cap - policy_cfg.burst_cap(available))
    nodes, name, _ = _pool_node(reserved=reserved, burst=0)
    hbm = nodes[name].gpus[0].memory
    policy = Policy(snapshot(nodes, [bound("r", "res", name, (0,), priority=policy_cfg.reserved_priority,
                                           grants={"grace-lpddr": reserved}, kind="reservation")], Flags()))
    room = cap - reserved
    ok = policy.evaluate(req(gpus=1, memory=hbm + room), name)
    assert isinstance(ok, Placement) and ok.grants.get("grace-lpddr") == room
    over = policy.evaluate(req(gpus=1, memory=hbm + room + 2**20), name)
    assert not isinstance(over, Placement) or over.grants.get("grace-lpddr", 0) <= room


def test_a_gang_goes_to_the_domain_needing_fewest_nodes_then_cheapest() -> None:
    """Every DGX H100 node is its own NVLink domain: a gang of two 4-GPU pods fits on one node, so the plan puts
    both on one node; with two candidate domains the plan is made (not an error) and is the cheaper one."""
    nodes = infos("dgx-h100", nodes=3)
    a, b, c = sorted(nodes)
    pods = [bound("x", "x1", a, (0,))]  # another tenant on a: a costs more
    policy = Policy(snapshot(nodes, pods, Flags()))
    plan = policy.gang_plan(req(gpus=4, gang="g", gang_size=2), [a, b, c])
    assert isinstance(plan, GangPlan)
    assert plan.nodes in ((b, b), (c, c)) and plan.domain == nodes[plan.nodes[0]].domain
    assert plan.gpus_per_pod == 4 and plan.bound == ()
    split = Policy(snapshot(nodes, pods, Flags())).gang_plan(req(gpus=8, gang="h", gang_size=2), [b, c])
    assert not isinstance(split, GangPlan) and "no NVLink domain can hold gang t/h" in split.reason


def _cliques(n: int, size: int) -> SimpleNamespace:
    """A node of ``n`` GPUs in NVLink cliques of ``size`` (10 ns inside, 1000 ns across): too many GPUs for the
    exhaustive search, so the greedy one decides."""
    return SimpleNamespace(latency=tuple(tuple(0 if a == b else 10 if a // size == b // size else 1000
                                               for b in range(n)) for a in range(n)))


def test_large_nodes_get_a_whole_clique() -> None:
    node = _cliques(16, 4)
    assert choose_gpus(node, list(range(16)), 4) == (0, 1, 2, 3)  # type: ignore[arg-type]
    assert choose_gpus(node, [1, 2, 3, *range(4, 16)], 4) == (4, 5, 6, 7)  # type: ignore[arg-type]
    assert choose_gpus(node, [0, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 8], 3) == (5, 6, 7)  # type: ignore[arg-type]
    assert len(choose_gpus(_cliques(24, 8), list(range(24)), 5)) == 5  # type: ignore[arg-type]


def test_decisions_are_values() -> None:
    """Verdicts are cached and shared between nodes of one template: nothing may change one afterwards."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    snap = snapshot(nodes, [bound("x", "x1", name, (0,))], Flags())
    placement = _placement(Policy(snap), name, gpus=1)
    (held,) = snap.pods.values()
    for value, field in ((placement, "cost"), (held, "uid"), (held.request, "gpus")):
        with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError, ValueError)):
            setattr(value, field, 0)


def test_a_node_without_gpus_serves_the_whole_memory_from_its_pools() -> None:
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    cpu_only = dataclasses.replace(nodes[name], gpus=(), latency=())
    policy = Policy(snapshot({name: cpu_only}, [], Flags()))
    p = _placement(policy, name, gpus=0, memory=2**30)
    assert sum(p.grants.values()) == 2**30 and p.gpus == ()
    # docs/scheduler.md: isolationPenalty is the share of the node's GPUs other tenants hold: none of none.
    assert p.isolation == 0.0, p


def test_gang_members_that_need_pool_memory_share_a_node_when_the_pools_allow() -> None:
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    hbm = nodes[name].gpus[0].memory
    policy = Policy(snapshot({name: nodes[name]}, [], Flags()))
    plan = policy.gang_plan(req(gpus=1, memory=hbm + 2**30, gang="g", gang_size=3), [name])
    assert isinstance(plan, GangPlan) and plan.nodes == (name, name, name)


def test_a_gang_no_node_can_start_says_there_is_room_for_none() -> None:
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    full = [bound("x", f"x{n}{i}", n, (i,)) for n in (a, b) for i in range(8)]
    plan = Policy(snapshot(nodes, full, Flags())).gang_plan(req(gpus=1, gang="g", gang_size=2), [a, b])
    assert not isinstance(plan, GangPlan) and plan.reason.endswith("the largest has room for 0")


def test_a_booked_member_still_sees_other_nodes_as_they_are() -> None:
    """The second member of a gang booked on node a: node b (no booking, exactly 4 free GPUs) is judged on what it
    has; only a's booking is the member's own to take."""
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    policy = Policy(snapshot(nodes, [], Flags()))
    first = req(gpus=4, gang="g", gang_size=2, name="m1")
    plan = policy.gang_plan(first, [a])
    assert isinstance(plan, GangPlan) and plan.nodes == (a, a)
    lead = bound("t", "m1", a, (0, 1, 2, 3), gang="g", gang_size=2)
    lead["metadata"]["annotations"].update(Holding(a, (0, 1, 2, 3), {}, "burst", gang_domain=plan.domain,
                                                   gang_token=plan.token, gang_plan=plan.nodes).annotations())
    others = [bound("x", f"x{i}", b, (i,)) for i in range(4)]
    later = Policy(snapshot(nodes, [lead, *others], Flags()))
    member = req(gpus=4, gang="g", gang_size=2, name="m2")
    assert later.own_slots(member, a) == 1 and later.own_slots(member, b) == 0
    assert all(isinstance(v, Placement) for v in later.evaluate_many(member, [a, b]).values())


def test_the_spread_mutant_inverts_the_scores() -> None:
    """docs/scheduler.md's mutant table: ``spread`` "prefers the worst node of the cost model (inverted scores)",
    which is what makes it fail SCHED-TOPO-001/002 and ISO-005. Of two DGX H100 nodes, the one where another tenant
    holds a GPU costs more (isolation penalty): the reference scores the other one higher, spread this one."""
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    pods = [bound("x", "x1", a, (0,))]
    reference = Policy(snapshot(nodes, pods, Flags())).prioritize(req(gpus=1), [a, b])
    spread = Policy(snapshot(nodes, pods, Flags(spread=True))).prioritize(req(gpus=1), [a, b])
    assert reference[b] > reference[a], reference
    assert spread[a] > spread[b], spread


def test_a_gang_booking_on_a_node_without_pods_keeps_its_gpus() -> None:
    """docs/scheduler.md (SCHED-ISO-006, gang bookings): GPUs booked for a gang's pending members are not given to
    others. The gang's first member is bound on tray a; its plan books tray b, where nothing runs yet, for the second
    member (4 GPUs, no pool memory): another tenant's pod does not get a GPU of b, the second member does."""
    nodes = infos("gb200-nvl72")
    _, b, lead = gang_lead_with_plan(nodes)
    policy = Policy(snapshot(nodes, [lead], Flags()))
    assert not isinstance(policy.evaluate(req(ns="other", gpus=1), b), Placement)
    member = req(gpus=4, gang="g", gang_size=2, name="m2")
    assert isinstance(policy.evaluate(member, b, policy.own_slots(member, b)), Placement)


def test_gang_members_are_limited_by_what_the_pools_can_lend_per_node() -> None:
    """A gang of 4 one-GPU members, each needing half of what a tray's pools may lend to bursts beyond its HBM:
    a GB200 tray has 4 GPUs, but its pools (grace-lpddr and nvl72-peer-hbm, each under the published burst cap)
    hold only 2 such members, so the plan takes 2 trays of 2 members each, not one tray of 4."""
    nodes = infos("gb200-nvl72")
    a, b = sorted(nodes)[:2]
    info = nodes[a]
    lpddr, peer = info.pool("grace-lpddr"), info.pool("nvl72-peer-hbm")
    assert lpddr is not None and peer is not None and len(info.gpus) == 4
    lend = PoolPolicy().burst_cap(lpddr.available) + PoolPolicy().burst_cap(peer.available)
    policy = Policy(snapshot({a: info, b: nodes[b]}, [], Flags()))
    plan = policy.gang_plan(req(gpus=1, memory=info.gpus[0].memory + lend // 2, gang="g", gang_size=4), [a, b])
    assert isinstance(plan, GangPlan) and sorted(plan.nodes) == [a, a, b, b], plan


def test_a_second_bound_member_leaves_the_rest_of_the_booking() -> None:
    """docs/scheduler.md (gang bookings): GPUs booked for a gang's pending members are not given to others. A gang
    of 3 one-GPU members planned on one GB200 tray (4 GPUs): the first is bound (2 GPUs booked for the others), then
    the second binds (the snapshot is updated pod by pod, as the extender's cache is): 2 GPUs are held and 1 is
    booked for the third, so another tenant's pod finds 1 GPU free: 1 GPU fits, 2 do not."""
    nodes = infos("gb200-nvl72")
    a = sorted(nodes)[0]
    members = []
    for i in range(2):
        m = bound("t", f"m{i}", a, (i,), gang="g", gang_size=3)
        m["metadata"]["annotations"].update(Holding(a, (i,), {}, "burst", gang_domain=nodes[a].domain,
                                                    gang_token="tok", gang_plan=(a, a, a)).annotations())
        members.append(parse_bound(m))
    first, second = members
    assert first is not None and second is not None
    snap = Snapshot(nodes, [first], Flags())
    before = Policy(snap).evaluate(req(ns="other", gpus=2), a)
    assert isinstance(before, Refusal) and before.reason.endswith("1 held, 2 booked by gangs)"), before
    snap.put(second.key, second)
    policy = Policy(snap)
    two = policy.evaluate(req(ns="other", gpus=2), a)
    assert isinstance(two, Refusal) and "1 free and healthy (0 unhealthy, 2 held, 1 booked by gangs)" in two.reason
    assert isinstance(policy.evaluate(req(ns="other", gpus=1), a), Placement)


def test_a_pool_that_holds_nothing_now_lends_nothing() -> None:
    """docs/scheduler.md (Filter): pool grants are under the pool policy, "nothing past thrashThreshold x what a pool
    holds now". cxl-pool's exclusive cxl-pooled pool taken offline (the agent reports 0 bytes available): a pod that
    needs more than the shared 4 GiB cxl-local can lend does not fit; with the pool back, it does."""
    system = load_profile("cxl-pool")
    node = system.nodes[0]
    online = node_info(system, node)
    offline = node_info(system, node, RuntimeHealth(pool_available={"cxl-pooled": 0}))
    pooled = offline.pool("cxl-pooled")
    assert pooled is not None and pooled.capacity > 0 and pooled.available == 0
    need = online.gpus[0].memory + 8 * 2**30
    refused = Policy(snapshot({node.name: offline}, [], Flags())).evaluate(req(gpus=1, memory=need), node.name)
    assert isinstance(refused, Refusal) and not refused.resolvable, refused
    placed = Policy(snapshot({node.name: online}, [], Flags())).evaluate(req(gpus=1, memory=need), node.name)
    assert isinstance(placed, Placement) and "cxl-pooled" in placed.grants, placed


def test_prioritize_reuses_only_its_own_pods_filter() -> None:
    """docs/scheduler.md: prioritize reuses *its pod's* filter verdicts when asked for the nodes that filter passed.
    Two DGX H100 nodes; tenant x holds 4 GPUs of a. Pod A (tenant x, 1 GPU) costs the same on both (no other tenant
    near it), and a is the tighter fit: 10 for a, 9 for b. Pod B (tenant u, 1 GPU) pays the isolation penalty on a
    (half its GPUs are another tenant's): 10 for b, the cheapest, and 0 for a, the dearest. B is prioritized right
    after A's filter passed the same two nodes: B's scores, not A's."""
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    policy = Policy(snapshot(nodes, [bound("x", f"x{i}", a, (i,)) for i in range(4)], Flags()))
    pod_a, pod_b = req(ns="x", name="pa", gpus=1), req(ns="u", name="pb", gpus=1)
    passed, _, _ = policy.filter(pod_a, [a, b])
    assert passed == [a, b] and policy.prioritize(pod_a, passed) == {a: 10, b: 9}
    assert policy.prioritize(pod_b, passed) == {a: 0, b: 10}


def test_bursts_get_what_admission_leaves_once_reservations_pass_the_reserved_part() -> None:
    """docs/scheduler.md (Filter): nothing past thrashThreshold x what a pool holds now (admission control), and
    bursts never into the reservedFraction part. On a GB200 tray's grace-lpddr (A bytes; the policy the node
    publishes: thrashThreshold t, reservedFraction f) a reservation holds A/2, more than the reserved part fA, and a
    burst A/10: what admission leaves, tA - A/2 - A/10, is less than the bursts' own cap leaves (tA - fA - A/10), so
    that is all a new burst gets there; the rest of its 0.4A comes from the next pool (nvl72-peer-hbm)."""
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    lpddr = nodes[name].pool("grace-lpddr")
    assert lpddr is not None
    available = lpddr.available
    res, burst = available // 2, available // 10
    pods = [bound("r", "res", name, (0,), priority=1000, kind="reservation", grants={"grace-lpddr": res}),
            bound("b", "burst", name, (1,), grants={"grace-lpddr": burst})]
    policy = Policy(snapshot(nodes, pods, Flags()))
    t, f = nodes[name].policy.thrash_threshold, nodes[name].policy.reserved_fraction
    assert res > int(available * f)
    admission_left = int(available * t) - res - burst
    assert 0 < admission_left < int(available * t) - int(available * f) - burst
    p = _placement(policy, name, ns="n", gpus=0, memory=4 * available // 10)
    assert p.grants == {"grace-lpddr": admission_left, "nvl72-peer-hbm": 4 * available // 10 - admission_left}, p


def test_the_ignore_bookings_mutant_still_counts_the_gpus_pods_hold() -> None:
    """docs/scheduler.md's mutant table: ignore-bookings gives GPUs *booked for a gang's pending members* to other
    pods. GPUs bound pods hold are still taken: on a DGX H100 whose 8 GPUs are all held, it places no pod either."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    full = [bound("x", f"x{i}", name, (i,)) for i in range(8)]
    verdict = Policy(snapshot(nodes, full, Flags(ignore_bookings=True))).evaluate(req(ns="u", gpus=1), name)
    assert isinstance(verdict, Refusal) and "needs 1 GPUs; 0 free and healthy" in verdict.reason, verdict


def test_scores_between_cheapest_and_dearest_are_linear_in_cost() -> None:
    """docs/scheduler.md: 10 for the cheapest node, 0..8 by cost for the rest (within kube-scheduler's extender score
    range 0..MaxExtenderPriority = 10). Three DGX H100 nodes; 2-GPU pods, so every cost includes the pair's NVLink
    latency L > 0: on a DGX H100 every GPU pair is joined through the NVSwitches (NV18 between any two), so the
    best free pair costs the same L on each node. Another tenant holds 0, 1 and 2 of a node's 8 GPUs: isolation 0,
    250 and 500 ns (2000 ns x share). Costs L, L + 250, L + 500: the middle one is halfway, 8 x 250 / 500 = 4."""
    nodes = infos("dgx-h100", nodes=3)
    a, b, c = sorted(nodes)
    pods = [bound("x", "x1", b, (0,)), bound("x", "x2", c, (0,)), bound("x", "x3", c, (1,))]
    policy = Policy(snapshot(nodes, pods, Flags()))
    costs = {n: _placement(policy, n, gpus=2) for n in (a, b, c)}
    assert costs[a].latency > 0 and costs[a].latency == costs[b].latency == costs[c].latency, costs
    assert policy.prioritize(req(gpus=2), [a, b, c]) == {a: 10, b: 4, c: 0}


def test_one_byte_beyond_the_gpus_hbm_comes_from_the_nearest_pool() -> None:
    """docs/scheduler.md: a pod's memory beyond its GPUs' HBM is granted from the node's pools, nearest first. On a
    GB200 tray a 1-GPU pod asking for its GPU's HBM plus one byte gets that byte from grace-lpddr (the Grace CPU's
    LPDDR5X over NVLink-C2C, the tray's nearest pool), and pays its latency for 1 of its bytes."""
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    hbm = nodes[name].gpus[0].memory
    lpddr = nodes[name].pool("grace-lpddr")
    assert lpddr is not None and Policy.pool_order(nodes[name])[0] is lpddr
    p = _placement(Policy(snapshot(nodes, [], Flags())), name, gpus=1, memory=hbm + 1)
    assert p.grants == {"grace-lpddr": 1}, p
    assert p.remote == lpddr.latency_ns / (hbm + 1)


def test_refusals_are_values_too() -> None:
    """A verdict, a refusal as much as a placement, is cached and shared by every node of the same template and
    state (docs/scheduler.md: "Decisions are shared by nodes of one template in the same state"): changing one
    would change the answer for nodes it was never computed for, so it cannot be changed."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    refusal = Policy(snapshot(nodes, [], Flags())).evaluate(req(gpus=9), name)
    assert isinstance(refusal, Refusal) and not refusal.resolvable, refusal
    with pytest.raises(dataclasses.FrozenInstanceError):
        refusal.resolvable = True  # type: ignore[misc]
    assert {refusal: 1}[refusal] == 1  # a frozen dataclass is hashable


def test_the_preempt_reservations_mutant_offers_reservations_first() -> None:
    """docs/scheduler.md's mutant table and mutants.py: preempt-reservations "offers reservations as preemption
    victims before bursts" (which SCHED-ISO-003 must catch). A DGX H100 whose GPUs 0-3 bursts (priority 0) and 4-7
    reservations (priority 1000, >= reservedPriority) hold; a pod of priority 2000 needs 1 GPU: the reference
    evicts a burst (the lowest priority, then the first by name), the mutant the first reservation."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    pods = [bound("b", f"b{i}", name, (i,)) for i in range(4)]
    pods += [bound("r", f"r{i}", name, (i,), priority=1000, kind="reservation") for i in range(4, 8)]
    urgent = req(gpus=1, priority=2000)
    assert Policy(snapshot(nodes, pods, Flags())).victims(urgent, name, []) == ["uid-b0"]
    mutant = Policy(snapshot(nodes, pods, Flags(preempt_reservations=True)))
    assert mutant.victims(urgent, name, []) == ["uid-r4"]


def test_a_gang_whose_members_need_one_pool_byte_each_is_held_to_the_pools_room() -> None:
    """docs/scheduler.md (gangs): the first member books a node for every member, "GPU and pool room for all of them
    at once". A GB200 tray where another tenant's burst holds all but one byte of what bursts may take of its pools
    (each pool's burst cap, thrashThreshold less reservedFraction of what it holds): 3 GPUs are free, but the pools
    can lend 1 more byte. Members of 1 GPU needing their GPU's HBM plus 1 byte: the tray places one (it gets that
    byte), holds only one at once, so a gang of 2 with only this tray to go to gets no node (all or nothing)."""
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    info = nodes[name]
    lpddr, peer = info.pool("grace-lpddr"), info.pool("nvl72-peer-hbm")
    assert lpddr is not None and peer is not None
    cfg = info.policy
    other = bound("o", "full", name, (0,), grants={"grace-lpddr": cfg.burst_cap(lpddr.available) - 1,
                                                   "nvl72-peer-hbm": cfg.burst_cap(peer.available)})
    policy = Policy(snapshot({name: info}, [other], Flags()))
    member = dict(gpus=1, memory=info.gpus[0].memory + 1, gang="g", gang_size=2)
    one = policy.evaluate(req(**member), name)
    assert isinstance(one, Placement) and one.grants == {"grace-lpddr": 1}, one
    plan = policy.gang_plan(req(**member), [name])
    assert isinstance(plan, Refusal) and plan.reason.endswith("the largest has room for 1"), plan


def test_image_platforms_and_cpu_isa_decide_before_anything_else() -> None:
    """docs/scheduler.md (Filter: image platform and ISA, unresolvable). mixed-arch has a DGX H100 (kubernetes.io/arch
    amd64, Sapphire Rapids: AVX-512) and a RISC-V NVLink Fusion host (riscv64, RVA23 vector extensions such as Zvfh).
    An image built only for linux/riscv64 cannot run on the amd64 node, one needing Zvfh lacks it there, one needing
    AVX-512F lacks it on the RISC-V host; no eviction changes a CPU, so all are FailedAndUnresolvable. A pod naming no
    platform and no extension runs on both (an image index without platforms constrains nothing here)."""
    nodes = infos("mixed-arch")
    x86, rv = "dgx-h100-0", "rv-fusion-0"
    assert (nodes[x86].arch, nodes[rv].arch) == ("amd64", "riscv64")
    policy = Policy(snapshot(nodes, [], Flags()))
    riscv_only = policy.evaluate(req(gpus=1, platforms=["linux/riscv64"]), x86)
    assert isinstance(riscv_only, Refusal) and not riscv_only.resolvable, riscv_only
    assert riscv_only.reason.startswith("image has no linux/amd64 variant"), riscv_only
    assert isinstance(policy.evaluate(req(gpus=1, platforms=["linux/riscv64"]), rv), Placement)
    zvfh = policy.evaluate(req(name="v", gpus=1, isa=["zvfh"]), x86)
    assert isinstance(zvfh, Refusal) and not zvfh.resolvable and "lacks ISA extensions zvfh" in zvfh.reason, zvfh
    assert isinstance(policy.evaluate(req(name="v", gpus=1, isa=["zvfh"]), rv), Placement)
    avx = policy.evaluate(req(name="a", gpus=1, isa=["avx512f"]), rv)
    assert isinstance(avx, Refusal) and not avx.resolvable and "avx512f" in avx.reason, avx
    assert all(isinstance(policy.evaluate(req(name="any", gpus=1), n), Placement) for n in (x86, rv))


def test_a_node_near_the_cheapest_scores_near_8() -> None:
    """docs/scheduler.md: 0..8 by cost for the rest, linear between the cheapest and the dearest. Three DGX H100
    nodes; another tenant holds 0, 1 and 7 of their 8 GPUs; 1-GPU pods (no pair latency): costs 0, 250 and 1750 ns
    (2000 ns x share held). The middle node is 1500 / 1750 of the way from the dearest: 8 x 6/7 = 6.86, score 6."""
    nodes = infos("dgx-h100", nodes=3)
    a, b, c = sorted(nodes)
    pods = [bound("x", "x1", b, (0,))] + [bound("x", f"y{i}", c, (i,)) for i in range(7)]
    policy = Policy(snapshot(nodes, pods, Flags()))
    assert [_placement(policy, n, gpus=1).cost for n in (a, b, c)] == [0, 250, 1750]
    assert policy.prioritize(req(gpus=1), [a, b, c]) == {a: 10, b: 6, c: 0}


def test_a_node_the_pod_does_not_fit_scores_the_minimum() -> None:
    """kube-scheduler's extender scores are 0..MaxExtenderPriority (10). Three DGX H100 nodes: a free, b with 2 of 8
    GPUs held by another tenant (isolation 500 ns: the dearest fit, score 0), c with all 8 held. A node the pod cannot
    run on must not outscore one it can, and nothing scores below 0: c scores 0."""
    nodes = infos("dgx-h100", nodes=3)
    a, b, c = sorted(nodes)
    pods = [bound("x", f"b{i}", b, (i,)) for i in range(2)] + [bound("x", f"c{i}", c, (i,)) for i in range(8)]
    policy = Policy(snapshot(nodes, pods, Flags()))
    assert policy.prioritize(req(gpus=1), [a, b, c]) == {a: 10, b: 0, c: 0}


def test_prioritize_answers_for_the_nodes_it_is_asked_about() -> None:
    """The extender harness's check (docs/scheduler.md: answers name only nodes that were sent) and kube-scheduler's
    HostPriorityList: one entry per node of the prioritize request. After the pod's filter passed two DGX H100
    nodes, kube-scheduler may prioritize fewer (another filter or extender removed one): the answer is about those
    only, and a node alone is the cheapest: 10."""
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    policy = Policy(snapshot(nodes, [bound("x", "x0", a, (0,))], Flags()))
    pod = req(gpus=1)
    passed, _, _ = policy.filter(pod, [a, b])
    assert passed == [a, b] or passed == [b, a], passed
    assert policy.prioritize(pod, [a]) == {a: 10}


def test_a_node_the_extender_does_not_know_is_unresolvable() -> None:
    """ExtenderFilterResult: FailedNodes are nodes where preemption may help, FailedAndUnresolvableNodes those where it
    cannot. A node name the extender has no Node object for (deleted, or not yet seen by its informer) has no GPUs,
    pods or pools it knows of: evicting pods cannot make the pod fit there, so it is unresolvable."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    passed, failed, unresolvable = Policy(snapshot(nodes, [], Flags())).filter(req(gpus=1), [name, "gone-node"])
    assert passed == [name] and not failed and list(unresolvable) == ["gone-node"], (passed, failed, unresolvable)


def test_the_ignore_bookings_mutant_counts_no_booking_at_all() -> None:
    """docs/scheduler.md's mutant table: ignore-bookings ignores GPUs booked for gangs, nothing else. On an empty DGX
    H100 (8 GPUs, nothing held or booked) it places an 8-GPU pod, as the reference does, and refuses a 9-GPU one."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    for flags in (Flags(), Flags(ignore_bookings=True)):
        policy = Policy(snapshot(nodes, [], flags))
        assert isinstance(policy.evaluate(req(gpus=8), name), Placement), flags
        nine = policy.evaluate(req(name="q", gpus=9), name)
        assert isinstance(nine, Refusal) and "needs 9 GPUs; 8 free" in nine.reason, (flags, nine)
