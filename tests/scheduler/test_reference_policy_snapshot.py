"""The reference extender's view of the cluster (testbed/reference/extender/policy.py, ``Snapshot`` and the node
grouping of ``Policy``): pods that go away, gang members bound without a booking, nodes of different templates.
Each expected answer is worked out by hand from the profiles' documented hardware and Kubernetes' own rules."""

from __future__ import annotations

from typing import Any

from fakehw.views.k8s import Holding, NodeInfo
from testbed.reference.extender.policy import Flags, Placement, Policy, Refusal, Snapshot, parse_bound
from tests.scheduler.test_reference_policy import GANG_TOKEN, bound, gang_lead_with_plan, infos, req, snapshot


def test_a_deleted_pod_is_no_preemption_victim_and_frees_its_gpu() -> None:
    """Kubernetes' watch reports a deleted pod (DELETED), and the extender's cache drops it (``Snapshot.put`` with
    nothing). A DGX H100 (8 GPUs) whose GPUs 8 pods of priority 100 held, one of which is gone: 7 GPUs are held, 1
    is free. kube-scheduler's preemption ("Pod Priority and Preemption", kubernetes.io) evicts pods that exist, of
    lower priority: a 2-GPU pod of priority 101 needs 1 victim besides the free GPU, and the gone pod, even when
    offered, is neither a victim nor counted as holding anything."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    held = [b for i in range(8) if (b := parse_bound(bound("x", f"x{i}", name, (i,), priority=100))) is not None]
    snap = Snapshot(nodes, held, Flags())
    snap.put("x/x0", None)
    assert sorted(snap.pods) == [f"uid-x{i}" for i in range(1, 8)]
    assert sorted(snap.use_of(name).held) == list(range(1, 8))
    victims = Policy(snap).victims(req(gpus=2, priority=101), name, ["uid-x0"])
    assert victims is not None and len(victims) == 1 and victims[0] != "uid-x0", victims


def test_a_gang_member_bound_without_a_booking_books_nothing() -> None:
    """docs/scheduler.md (gangs): the booking lives in the cluster, as the plan, domain and token the binder writes
    onto every member. A member that was bound without them (kube-scheduler binds itself when no extender binds;
    docs/scheduler.md: "without one the kubelet places it and the extender must count it") holds its own GPUs and
    books nothing. Two DGX H100 nodes (8 GPUs each, each its own NVLink domain); such a member holds GPUs 0-3 of a.
    Nothing is booked, so the next member (4 GPUs) plans its gang afresh, a node for every one of its 2 members in
    one domain (docs/scheduler.md), fewest nodes first: a has room for one 4-GPU member, b for both, so the plan
    is b's and the member passes there (a is unresolvable: the gang is booked elsewhere)."""
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    first = bound("t", "m0", a, (0, 1, 2, 3), gang="g", gang_size=2)  # no gang-plan annotations
    snap = Snapshot(nodes, [x for x in (parse_bound(first),) if x is not None], Flags())
    assert sorted(snap.use_of(a).held) == [0, 1, 2, 3] and snap.use_of(a).booked == 0
    passed, failed, unresolvable = Policy(snap).filter(req(gpus=4, gang="g", gang_size=2, name="m1"), [a, b])
    assert passed == [b] and not failed and list(unresolvable) == [a], (passed, failed, unresolvable)
    assert f"booked on {nodes[b].domain}" in unresolvable[a], unresolvable


def _two_kinds() -> tuple[dict[str, NodeInfo], str, str]:
    dgx = infos("dgx-h100", nodes=1)
    tray_name = sorted(trays := infos("gb200-nvl72"))[0]
    (dgx_name,) = dgx
    return {dgx_name: dgx[dgx_name], tray_name: trays[tray_name]}, dgx_name, tray_name


def test_nodes_of_different_templates_are_judged_each_on_its_own() -> None:
    """The extender groups unused nodes by template (equal static facts) and evaluates each group once. Nodes of two
    templates are two groups: a DGX H100 has 8 GPUs (NVIDIA DGX H100 user guide; profile dgx-h100), a GB200 NVL72
    compute tray 4 (2 Grace CPUs, 4 Blackwell GPUs; profile gb200-nvl72). An 8-GPU pod fits the DGX only; the tray
    cannot hold it however many pods were evicted, so it is unresolvable (ExtenderFilterResult's
    FailedAndUnresolvableNodes). A 1-GPU pod fits both."""
    nodes, dgx, tray = _two_kinds()
    assert len(nodes[dgx].gpus) == 8 and len(nodes[tray].gpus) == 4
    policy = Policy(Snapshot(nodes, [], Flags()), {dgx: "dgx-h100", tray: "gb200-tray"}, {})
    verdicts = policy.evaluate_many(req(gpus=8), [dgx, tray])
    assert isinstance(verdicts[dgx], Placement) and isinstance(verdicts[tray], Refusal), verdicts
    passed, failed, unresolvable = policy.filter(req(name="q", gpus=8), [tray, dgx])
    assert passed == [dgx] and not failed and list(unresolvable) == [tray], (passed, failed, unresolvable)
    small = policy.evaluate_many(req(name="s", gpus=1), [dgx, tray])
    assert all(isinstance(v, Placement) for v in small.values()), small


def test_gpus_held_by_pods_of_equal_priority_are_not_resolvable() -> None:
    """Kubernetes preemption ("Pod Priority and Preemption", kubernetes.io) removes only pods of *lower* priority
    than the pending pod, so a node is worth preempting on (ExtenderFilterResult's FailedNodes) only when such pods
    hold what is missing. A DGX H100's 8 GPUs held by pods of priority 10: for a 1-GPU pod of priority 10 the node
    is FailedAndUnresolvable; for one of priority 11 it is FailedNodes."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    held = [b for i in range(8) if (b := parse_bound(bound("x", f"x{i}", name, (i,), priority=10))) is not None]
    policy = Policy(Snapshot(nodes, held, Flags()))
    passed, failed, unresolvable = policy.filter(req(gpus=1, priority=10), [name])
    assert not passed and not failed and list(unresolvable) == [name], (failed, unresolvable)
    passed, failed, unresolvable = policy.filter(req(name="q", gpus=1, priority=11), [name])
    assert not passed and list(failed) == [name] and not unresolvable, (failed, unresolvable)


def test_an_exclusive_pool_opens_to_others_once_its_tenants_pod_is_gone() -> None:
    """Exclusive pools serve one tenant at a time per node (docs/scheduler.md, Filter). On cxl-pool (cxl-pooled
    exclusive, 64 GiB; cxl-local shared, 4 GiB) tenant a's pod holds 1 GiB of cxl-pooled on cxl-host-0, so tenant b's
    pod needing 8 GiB beyond its GPU's HBM (more than cxl-local's 4 GiB) does not fit there; once a's pod is deleted
    (the watch's DELETED, ``Snapshot.put`` with nothing) nobody holds the pool and b's pod gets cxl-pooled memory."""
    nodes = infos("cxl-pool")
    hbm = nodes["cxl-host-0"].gpus[0].memory
    held = parse_bound(bound("a", "a1", "cxl-host-0", (0,), grants={"cxl-pooled": 2**30}, memory=hbm + 2**30))
    assert held is not None
    snap = Snapshot(nodes, [held], Flags())
    need = req(ns="b", gpus=1, memory=hbm + 8 * 2**30)
    assert isinstance(Policy(snap).evaluate(need, "cxl-host-0"), Refusal)
    snap.put(held.key, None)
    after = Policy(snap).evaluate(need, "cxl-host-0")
    assert isinstance(after, Placement) and "cxl-pooled" in after.grants, after


def test_a_gang_of_memory_only_pods_shares_one_node() -> None:
    """A gang whose members ask for no GPU, only pool memory (1 GiB each): GPUs do not limit how many members a node
    holds, its pools do. A GB200 tray's pools lend hundreds of GiB to bursts (grace-lpddr 400 GiB, nvl72-peer-hbm
    256 GiB, under the 0.9 / 0.25 policy), so one tray holds all 3 members and the plan (fewest nodes first,
    docs/scheduler.md) is that tray three times."""
    nodes = infos("gb200-nvl72")
    a, b = sorted(nodes)[:2]
    policy = Policy(Snapshot({a: nodes[a], b: nodes[b]}, [], Flags()))
    plan = policy.gang_plan(req(gpus=0, memory=2**30, gang="g", gang_size=3), [a, b])
    assert not isinstance(plan, Refusal) and len(set(plan.nodes)) == 1 and len(plan.nodes) == 3, plan


def test_a_booked_member_passes_the_filter_where_its_booking_is() -> None:
    """docs/scheduler.md (gangs, SCHED-ISO-006): GPUs booked for a gang's pending members are theirs. The gang's
    first member (4 GPUs) is bound on GB200 tray a with the plan (a, b); tray b's 4 GPUs are all booked for the
    second member. kube-scheduler asks the extender to filter [a, b] for the second member: b passes (its booking
    is the member's own), a is unresolvable (the plan has no open slot there)."""
    nodes = infos("gb200-nvl72")
    a, b, lead = gang_lead_with_plan(nodes)
    held = parse_bound(lead)
    assert held is not None
    passed, failed, unresolvable = Policy(Snapshot(nodes, [held], Flags())).filter(
        req(gpus=4, gang="g", gang_size=2, name="m2"), [a, b])
    assert passed == [b] and not failed and list(unresolvable) == [a], (passed, failed, unresolvable)
    # The reason names the booking as the binder wrote it onto the first member (domain and token annotations), the
    # token whole: an operator finds the members holding the booking by the annotation's exact value.
    assert lead["metadata"]["annotations"]["fakehw.io/gang-token"] == GANG_TOKEN
    assert unresolvable[a] == f"gang t/g is booked on {nodes[a].domain} (token {GANG_TOKEN})", unresolvable


def test_priorities_whose_hashes_collide_get_their_own_verdicts() -> None:
    """Kubernetes priorities are 32-bit integers and may be negative (PriorityClass ``value``). In CPython
    hash(-1) == hash(-2), so requests differing only in priority -1 / -2 hash alike, and the verdict cache must still
    tell them apart. A DGX H100 whose 8 GPUs pods of priority -2 hold: for a 1-GPU pod of priority -1 those are
    lower-priority pods (FailedNodes: preemption helps); for one of priority -2 they are not (unresolvable)."""
    assert hash(-1) == hash(-2)
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    held = [b for i in range(8) if (b := parse_bound(bound("x", f"x{i}", name, (i,), priority=-2))) is not None]
    policy = Policy(Snapshot(nodes, held, Flags()))
    higher = policy.evaluate(req(gpus=1, priority=-1), name)
    assert isinstance(higher, Refusal) and higher.resolvable, higher
    equal = policy.evaluate(req(name="q", gpus=1, priority=-2), name)
    assert isinstance(equal, Refusal) and not equal.resolvable, equal


def test_resolvable_when_lower_priority_pods_hold_exactly_what_is_missing() -> None:
    """docs/scheduler.md (Filter): short of GPUs is resolvable "when lower-priority pods hold enough". A DGX H100
    (8 GPUs): 4 held by pods of priority 1000, 4 by pods of priority 1. A pod of priority 10 asking for 4 GPUs would
    fit with the 4 low-priority pods evicted (FailedNodes); asking for 5 it would not, whatever is evicted
    (FailedAndUnresolvableNodes)."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    pods = [bound("h", f"h{i}", name, (i,), priority=1000) for i in range(4)]
    pods += [bound("l", f"l{i}", name, (i,), priority=1) for i in range(4, 8)]
    held = [b for p in pods if (b := parse_bound(p)) is not None]
    policy = Policy(Snapshot(nodes, held, Flags()))
    four = policy.evaluate(req(gpus=4, priority=10), name)
    assert isinstance(four, Refusal) and four.resolvable, four
    five = policy.evaluate(req(name="q", gpus=5, priority=10), name)
    assert isinstance(five, Refusal) and not five.resolvable, five


def test_nodes_share_a_verdict_only_when_their_pods_split_alike() -> None:
    """Nodes of one template in the same usage state share a verdict (docs/scheduler.md). Two DGX H100 nodes with
    GPUs 0-2 held by one tenant: on a, a pod of priority 1 holds GPUs 0-1 and one of priority 5 GPU 2; on b, priority
    1 holds GPU 0 and priority 5 GPUs 1-2. For a 7-GPU pod of priority 3 (5 GPUs free) Kubernetes' preemption of
    lower-priority pods frees 2 more GPUs on a (fits: FailedNodes) but 1 on b (unresolvable)."""
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    pods = [bound("x", "a1", a, (0, 1), priority=1), bound("x", "a5", a, (2,), priority=5),
            bound("x", "b1", b, (0,), priority=1), bound("x", "b5", b, (1, 2), priority=5)]
    held = [x for p in pods if (x := parse_bound(p)) is not None]
    policy = Policy(Snapshot(nodes, held, Flags()), dict.fromkeys(nodes, "dgx-h100"), {})
    passed, failed, unresolvable = policy.filter(req(gpus=7, priority=3), [a, b])
    assert not passed and list(failed) == [a] and list(unresolvable) == [b], (failed, unresolvable)


def test_nodes_share_a_verdict_only_when_their_gang_bookings_hold_alike_memory() -> None:
    """Two GB200 trays in what looks like one state: one GPU held by tenant t's pod with S bytes of grace-lpddr, one
    GPU booked for a gang's pending member. On a the booking is the second member of the holder's own gang, which
    needs S bytes too (set aside, docs/scheduler.md: booked memory is not given to others); on b it is a member of
    another gang (its lead on tray c) that needs no pool memory. A memory-only pod asking for all that bursts may
    still take on b (grace-lpddr's burst cap less S, plus nvl72-peer-hbm's burst cap) fits b and not a."""
    nodes = infos("gb200-nvl72")
    a, b, c = sorted(nodes)[:3]
    info = nodes[a]
    hbm = info.gpus[0].memory
    lpddr, peer = info.pool("grace-lpddr"), info.pool("nvl72-peer-hbm")
    assert lpddr is not None and peer is not None
    s = 2**34
    lead_a = bound("t", "g-0", a, (0,), memory=hbm + s, grants={"grace-lpddr": s}, gang="g", gang_size=2)
    lead_a["metadata"]["annotations"].update(Holding(a, (0,), {"grace-lpddr": s}, "burst", info.domain, "tok",
                                                     (a, a)).annotations())
    plain_b = bound("t", "p", b, (0,), memory=hbm + s, grants={"grace-lpddr": s})
    lead_c = bound("u", "h-0", c, (0,), gang="h", gang_size=2)
    lead_c["metadata"]["annotations"].update(Holding(c, (0,), {}, "burst", info.domain, "tok2",
                                                     (c, b)).annotations())
    held = [x for p in (lead_a, plain_b, lead_c) if (x := parse_bound(p)) is not None]
    trio = {n: nodes[n] for n in (a, b, c)}
    policy = Policy(Snapshot(trio, held, Flags()), dict.fromkeys(trio, "gb200-tray"), {})
    cfg = info.policy
    room = cfg.burst_cap(lpddr.available) - s + cfg.burst_cap(peer.available)
    passed, failed, unresolvable = policy.filter(req(ns="n", gpus=0, memory=room), [a, b])
    assert passed == [b] and list(unresolvable) == [a] and not failed, (passed, failed, unresolvable)


def test_a_deleted_pod_stops_counting_against_other_tenants() -> None:
    """docs/scheduler.md: isolationPenalty is the share of the node's GPUs other tenants hold, x 2,000 ns. Tenant x
    holds GPUs 0 and 1 of a DGX H100 (8 GPUs) with two pods: for tenant u's 1-GPU pod that is 2000 x 2/8 = 500 ns.
    One of x's pods is deleted (the watch's DELETED): x holds 1 GPU, 2000 x 1/8 = 250 ns; and once the other is
    replaced by a pod holding GPUs 0-2 (a MODIFIED pod, as the cache sees it), 2000 x 3/8 = 750 ns."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    held = [b for i in range(2) if (b := parse_bound(bound("x", f"x{i}", name, (i,)))) is not None]
    snap = Snapshot(nodes, held, Flags())
    newcomer = req(ns="u", gpus=1)

    def isolation() -> float:
        placement = Policy(snap).evaluate(newcomer, name)
        assert isinstance(placement, Placement), placement
        return placement.isolation

    assert isolation() == 500
    snap.put("x/x0", None)
    assert isolation() == 250
    wider = parse_bound(bound("x", "x1", name, (0, 1, 2)))
    assert wider is not None
    snap.put("x/x1", wider)
    assert isolation() == 750
    assert sorted(snap.use_of(name).held) == [0, 1, 2]


def test_without_templates_every_unused_node_is_judged_on_its_own() -> None:
    """With no node templates (each node its own), unused nodes share nothing: the DGX H100 (8 GPUs) fits an 8-GPU
    pod, the GB200 tray (4 GPUs) does not, whichever is asked about first."""
    nodes, dgx, tray = _two_kinds()
    for order in ([tray, dgx], [dgx, tray]):
        verdicts = Policy(Snapshot(nodes, [], Flags())).evaluate_many(req(gpus=8), order)
        assert isinstance(verdicts[dgx], Placement) and isinstance(verdicts[tray], Refusal), verdicts


def test_unused_nodes_of_one_template_are_answered_beside_used_ones() -> None:
    """Three DGX H100 nodes of one template, a pod of tenant x on one of them: a 1-GPU pod fits all three, so the
    filter's NodeNames (ExtenderFilterResult) list all three, used and unused alike."""
    nodes = infos("dgx-h100", nodes=3)
    a, b, c = sorted(nodes)
    held = [x for x in (parse_bound(bound("x", "x0", b, (0,))),) if x is not None]
    policy = Policy(Snapshot(nodes, held, Flags()), dict.fromkeys(nodes, "dgx-h100"), {})
    passed, failed, unresolvable = policy.filter(req(gpus=1), [a, b, c])
    assert sorted(passed) == [a, b, c] and not failed and not unresolvable, (passed, failed, unresolvable)


def _finished(pod: dict[str, Any], phase: str) -> dict[str, Any]:
    pod["status"]["phase"] = phase
    return pod


def test_finished_pods_hold_no_gpu_and_are_no_victims() -> None:
    """kube-scheduler counts only pods that have not finished: its pod informer lists them with the field selector
    ``status.phase!=Succeeded,status.phase!=Failed`` (kubernetes pkg/scheduler, newPodInformer), and the kubelet's
    device manager gives a finished pod's devices back. A DGX H100 (8 GPUs, NVIDIA DGX H100 user guide) whose 8
    GPUs pods of priority 100 were given, one each: x0 has Succeeded and x1 Failed, x2-x7 are Running. GPUs 0 and 1
    are free, so a 2-GPU pod fits there (on exactly those two), a 3-GPU pod of priority 100 does not and nothing
    of lower priority could be evicted for it (unresolvable), and preemption for a pod of priority 101 never names
    a finished pod: it needs 1 victim besides the 2 free GPUs, a Running one."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    pods = [_finished(bound("x", f"x{i}", name, (i,), priority=100), phase)
            for i, phase in enumerate(["Succeeded", "Failed"] + ["Running"] * 6)]
    snap = snapshot(nodes, pods, Flags())
    assert sorted(snap.use_of(name).held) == [2, 3, 4, 5, 6, 7]
    assert sorted(snap.pods) == [f"uid-x{i}" for i in range(2, 8)]
    policy = Policy(snap)
    two = policy.evaluate(req(gpus=2, priority=100), name)
    assert isinstance(two, Placement) and two.gpus == (0, 1), two
    three = policy.evaluate(req(name="q", gpus=3, priority=100), name)
    assert isinstance(three, Refusal) and not three.resolvable, three
    victims = policy.victims(req(name="r", gpus=3, priority=101), name, ["uid-x0", "uid-x1"])
    assert victims is not None and len(victims) == 1 and victims[0] not in ("uid-x0", "uid-x1"), victims


def test_a_pod_that_finishes_gives_its_gpus_and_its_gangs_booking_back() -> None:
    """The informer reports a pod's phase change as a modification (``Snapshot.put`` with the pod as it is now).
    Gang g's first member (4 GPUs) is bound on GB200 tray a with the plan (a, b) (a tray has 4 GPUs: NVIDIA GB200
    NVL72, 2 Grace CPUs and 4 Blackwell GPUs per compute tray); tray b's 4 GPUs are booked for the second member.
    When the member has Succeeded it holds nothing and its gang has no bound member left, so nothing is booked
    either: a new gang of the same name (a Job run again) books afresh, one member on each tray (docs/scheduler.md:
    a node for every member in one NVLink domain), and both trays pass its filter."""
    nodes = infos("gb200-nvl72")
    a, b, lead = gang_lead_with_plan(nodes)
    held = parse_bound(lead)
    assert held is not None
    snap = Snapshot(nodes, [held], Flags())
    assert snap.use_of(b).booked == 4 and "t/g" in snap.plans
    snap.put(held.key, parse_bound(_finished(lead, "Succeeded")))
    assert snap.use_of(a).held == {} and snap.use_of(b).booked == 0 and not snap.plans, (snap.use_of(a), snap.plans)
    passed, failed, unresolvable = Policy(snap).filter(req(gpus=4, gang="g", gang_size=2, name="n1"), [a, b])
    assert passed == [a, b] and not failed and not unresolvable, (passed, failed, unresolvable)
