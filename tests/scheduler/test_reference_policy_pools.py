"""Exclusive pools (docs/scheduler.md, Filter: "exclusive pools for one tenant at a time"), on cxl-pool, whose
``cxl-pooled`` pool is exclusive (profile: ``policy: exclusive``) and ``cxl-local`` shared: once tenant ``a`` holds
memory of the exclusive pool on a node, another tenant gets none of that pool there (and a pod that needs it does
not fit), while ``a`` itself still does, and the same pool on another node is still open to everyone."""

from __future__ import annotations

import dataclasses

import pytest

from fakehw.views.k8s import Holding, PoolPolicy
from testbed.reference.extender.policy import Flags, Placement, Policy, Refusal
from tests.scheduler.test_reference_policy import bound, infos, req, snapshot


def test_an_exclusive_pool_serves_one_tenant_at_a_time_per_node() -> None:
    nodes = infos("cxl-pool")
    assert {p.name: p.policy for p in nodes["cxl-host-0"].pools if p.tier == "cxl"} == {
        "cxl-local": "shared", "cxl-pooled": "exclusive"}
    hbm = nodes["cxl-host-0"].gpus[0].memory
    held = [bound("a", "a1", "cxl-host-0", (0,), grants={"cxl-pooled": 2**30}, memory=hbm + 2**30)]
    policy = Policy(snapshot(nodes, held, Flags()))
    need = hbm + 8 * 2**30  # more than the shared 4 GiB pool can lend: the rest must come from cxl-pooled

    other = policy.evaluate(req(ns="b", gpus=1, memory=need), "cxl-host-0")
    assert isinstance(other, Refusal) and not other.resolvable, other
    same = policy.evaluate(req(ns="a", gpus=1, memory=need), "cxl-host-0")
    assert isinstance(same, Placement) and "cxl-pooled" in same.grants, same
    elsewhere = policy.evaluate(req(ns="b", gpus=1, memory=need), "cxl-host-1")
    assert isinstance(elsewhere, Placement) and "cxl-pooled" in elsewhere.grants, elsewhere
    small = policy.evaluate(req(ns="b", gpus=1, memory=hbm + 2**20), "cxl-host-0")
    assert isinstance(small, Placement) and set(small.grants) == {"cxl-local"}, small


def test_only_pods_of_lower_priority_are_preempted() -> None:
    """Kubernetes preemption (kubernetes.io, "Pod Priority and Preemption"): the scheduler looks for a node where
    removing pods *with lower priority* than the pending pod lets it fit. A node whose 8 GPUs are held by pods of
    priority 100 offers no victims to a pod of priority 100, and one victim to a pod of priority 101."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    held = [bound("x", f"x{i}", name, (i,), priority=100) for i in range(8)]
    policy = Policy(snapshot(nodes, held, Flags()))
    assert policy.victims(req(gpus=1, priority=100), name, []) is None
    assert policy.victims(req(gpus=1, priority=99), name, []) is None
    victims = policy.victims(req(gpus=1, priority=101), name, [])
    assert victims is not None and len(victims) == 1, victims


def test_a_tenant_shut_out_of_a_near_exclusive_pool_gets_a_farther_shared_one() -> None:
    """docs/scheduler.md: grants come from the nearest pool first, and an exclusive pool serves one tenant at a time
    per node. A cxl-pool host as its fakehw.io/memory-pools annotation could describe it with the exclusive
    cxl-pooled nearer (1,000 ns) than the shared cxl-local (2,310 ns): once tenant a holds 1 GiB of cxl-pooled,
    tenant b's pod needing 1 MiB beyond its GPU's HBM skips cxl-pooled and gets the 1 MiB from cxl-local, while a
    itself gets it from the nearer cxl-pooled."""
    nodes = infos("cxl-pool")
    name = "cxl-host-0"
    info = nodes[name]
    near = tuple(dataclasses.replace(p, latency_ns=1000) if p.name == "cxl-pooled" else p for p in info.pools)
    nodes = {name: dataclasses.replace(info, pools=near)}
    hbm = info.gpus[0].memory
    held = [bound("a", "a1", name, (0,), grants={"cxl-pooled": 2**30}, memory=hbm + 2**30)]
    policy = Policy(snapshot(nodes, held, Flags()))
    other = policy.evaluate(req(ns="b", gpus=1, memory=hbm + 2**20), name)
    assert isinstance(other, Placement) and dict(other.grants) == {"cxl-local": 2**20}, other
    same = policy.evaluate(req(ns="a", gpus=1, memory=hbm + 2**20), name)
    assert isinstance(same, Placement) and dict(same.grants) == {"cxl-pooled": 2**20}, same


def test_a_node_offered_victims_is_never_answered_with_none() -> None:
    """kube-scheduler's preemption (pkg/scheduler/framework/preemption, callExtenders) hands an extender the victims
    it found per node; a node the extender answers with an empty victim list fails the whole preemption
    ("expected at least one victim pod on node") unless the extender is ignorable, and an extender turns a node
    down by leaving it out of its answer. A DGX H100 (8 GPUs) where a reservation (priority 1000) holds GPU 0: a
    2-GPU pod of priority 2000 fits on the 7 free GPUs, and kube-scheduler, short of something of its own there,
    offers the reservation. The extender never evicts reservations (docs/scheduler.md), so it leaves the node out
    (None), not an empty list. A node offered no victims (an in-tree fit kube-scheduler passes on for the
    extender's own resources) is answered with the empty list: nothing of the extender's needs evicting."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    pods = [bound("r", "res0", name, (0,), priority=1000, kind="reservation")]
    policy = Policy(snapshot(nodes, pods, Flags()))
    urgent = req(gpus=2, priority=2000)
    assert isinstance(policy.evaluate(urgent, name), Placement)
    assert policy.victims(urgent, name, ["uid-res0"]) is None
    assert policy.victims(urgent, name, []) == []


def test_gpus_reservations_hold_make_no_node_resolvable() -> None:
    """docs/scheduler.md: the preempt verb names bursts, never reservations (priority >= reservedPriority, 1000 by
    default), and a node is answered in FailedNodes, which kube-scheduler's preemption acts on, only where evicting
    lower-priority pods makes room (kubernetes.io, "Pod Priority and Preemption"); otherwise
    FailedAndUnresolvableNodes. A DGX H100 (8 GPUs): reservations of priority 1000 hold GPUs 0-6, a burst of
    priority 0 GPU 7. For a pod of priority 2000, 1 GPU is resolvable (the burst goes), 2 GPUs are not (only one
    burst GPU can be freed). Where reservations hold all 8, even 1 GPU is unresolvable, and the mutant that evicts
    reservations calls it resolvable, as its preempt verb names a reservation."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    reservations = [bound("r", f"r{i}", name, (i,), priority=1000, kind="reservation") for i in range(7)]
    policy = Policy(snapshot(nodes, [*reservations, bound("b", "b7", name, (7,))], Flags()))
    one = policy.evaluate(req(gpus=1, priority=2000), name)
    assert isinstance(one, Refusal) and one.resolvable, one
    assert policy.victims(req(gpus=1, priority=2000), name, []) == ["uid-b7"]
    two = policy.evaluate(req(name="q", gpus=2, priority=2000), name)
    assert isinstance(two, Refusal) and not two.resolvable, two
    full = [*reservations, bound("r", "r7", name, (7,), priority=1000, kind="reservation")]
    passed, failed, unresolvable = Policy(snapshot(nodes, full, Flags())).filter(req(gpus=1, priority=2000), [name])
    assert not passed and not failed and list(unresolvable) == [name], (passed, failed, unresolvable)
    mutant = Policy(snapshot(nodes, full, Flags(preempt_reservations=True)))
    passed, failed, unresolvable = mutant.filter(req(gpus=1, priority=2000), [name])
    assert not passed and list(failed) == [name] and not unresolvable, (passed, failed, unresolvable)
    assert mutant.victims(req(gpus=1, priority=2000), name, []) == ["uid-r0"]


def test_preemption_is_offered_only_where_evicting_the_bursts_makes_room() -> None:
    """docs/scheduler.md: "A reservation that fits once bursts are evicted is answered in FailedNodes ("preempting
    them makes room")": kube-scheduler then preempts. Kubernetes preempts only where removing lower-priority pods
    lets the pod fit, so a reservation that would not fit even with every burst gone gets no victims. The node's
    grace-lpddr already holds another reservation's memory, which no eviction frees. The extender decides with
    node templates and a verdict cache kept across decisions (testbed/reference/extender/server.py does)."""
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    cfg = nodes[name].policy
    lpddr, peer = nodes[name].pool("grace-lpddr"), nodes[name].pool("nvl72-peer-hbm")
    assert lpddr is not None and peer is not None
    held_by_reservation = cfg.admission_cap(lpddr.available) // 4
    pods = [bound("b", "burst1", name, (0,), grants={"grace-lpddr": cfg.burst_cap(lpddr.available) // 2,
                                                     "nvl72-peer-hbm": cfg.burst_cap(peer.available) // 2}),
            bound("r", "res1", name, (1,), priority=1000, kind="reservation",
                  grants={"grace-lpddr": held_by_reservation})]
    templates = {n: "gb200-tray" for n in nodes}
    policy = Policy(snapshot(nodes, pods, Flags()), templates, {})
    hbm = nodes[name].gpus[0].memory
    after_eviction = (cfg.admission_cap(lpddr.available) - held_by_reservation) + cfg.admission_cap(peer.available)
    fits_then = req(gpus=1, memory=hbm + after_eviction, priority=1000)
    r = policy.evaluate(fits_then, name)
    assert isinstance(r, Refusal) and r.resolvable and "preempting them" in r.reason, r
    assert policy.victims(fits_then, name, []) == ["uid-burst1"]
    never = req(gpus=1, memory=hbm + after_eviction + 2**20, priority=1000)
    r = policy.evaluate(never, name)
    assert isinstance(r, Refusal) and not r.resolvable, r
    assert policy.victims(never, name, []) is None


def test_filter_sorts_nodes_into_the_three_lists_kube_scheduler_reads() -> None:
    """kube-scheduler's extender protocol (k8s.io/kube-scheduler/extender/v1, ExtenderFilterResult): ``NodeNames``
    fit; ``FailedNodes`` do not, but preemption may help; ``FailedAndUnresolvableNodes`` do not and preemption
    cannot help. Here: a free node fits; a node whose 8 GPUs lower-priority pods hold is resolvable (docs/
    scheduler.md: "resolvable when lower-priority pods hold enough"); one whose GPUs pods of higher priority hold
    is not."""
    nodes = infos("dgx-h100", nodes=3)
    free, low, high = sorted(nodes)
    pods = [bound("x", f"l{i}", low, (i,), priority=1) for i in range(8)]
    pods += [bound("x", f"h{i}", high, (i,), priority=1000) for i in range(8)]
    passed, failed, unresolvable = Policy(snapshot(nodes, pods, Flags())).filter(req(gpus=1, priority=10),
                                                                                   [free, low, high])
    assert passed == [free]
    assert list(failed) == [low] and list(unresolvable) == [high], (failed, unresolvable)


def test_a_pool_over_its_cap_sets_nothing_aside_for_a_booked_gang() -> None:
    """The nearest pool (grace-lpddr) holds more burst memory than its burst cap allows (a burst granted before the
    pool shrank), so it has no room, and none to set aside for the booked gang member: the member's whole share is
    set aside in the next pool (nvl72-peer-hbm), as docs/scheduler.md's gang bookings say (memory booked for a
    gang's pending members is not given to others). A newcomer then gets exactly what is left there: the peer
    pool's burst cap less the booked bytes (worked out from the profile's pool size and the burst cap), and one
    byte more does not fit."""
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    hbm = nodes[name].gpus[0].memory
    lpddr, peer = nodes[name].pool("grace-lpddr"), nodes[name].pool("nvl72-peer-hbm")
    assert lpddr is not None and peer is not None
    cap = PoolPolicy()
    spill = 2**30
    member = bound("t", "g-0", name, (0, 1), memory=2 * hbm + spill, gang="g", gang_size=2)
    member["metadata"]["annotations"].update(Holding(name, (0, 1), {}, "burst", "nvl72", "tok",
                                                     (name, name)).annotations())
    over = bound("o", "over", name, (), grants={"grace-lpddr": cap.burst_cap(lpddr.available) + 2**20})
    policy = Policy(snapshot(nodes, [member, over], Flags()))
    left = cap.burst_cap(peer.available) - spill
    fits = policy.evaluate(req(name="m", ns="u", memory=left), name)
    assert isinstance(fits, Placement) and fits.grants == {"nvl72-peer-hbm": left}, fits
    assert isinstance(policy.evaluate(req(name="m", ns="u", memory=left + 1), name), Refusal)


def test_evicting_bursts_never_frees_memory_booked_for_a_gang() -> None:
    """docs/scheduler.md: a reservation that fits once bursts are evicted is answered in FailedNodes; memory booked
    for a gang's pending members is not given to others. GH200 (one pool besides the GPU's own HBM: grace-lpddr, A
    bytes, admission cap C = 0.9 A): a gang of two memory-only pods of M = 0.3 A each has its first member bound
    (a burst of M) and M booked for the second; another burst holds C - 2M. Nothing is left under the cap, so a
    reservation gets nothing now; evicting both bursts frees all of C but the booked M: a reservation of C - M
    bytes is resolvable, one of C - M + 1 is not."""
    nodes = infos("gh200")
    (name,) = nodes
    lpddr = nodes[name].pool("grace-lpddr")
    assert lpddr is not None and [p.name for p in nodes[name].pools if p.tier != "hbm"] == ["grace-lpddr"]
    cap = nodes[name].policy.admission_cap(lpddr.available)
    m = lpddr.available * 3 // 10
    first = bound("t", "g-0", name, (), memory=m, grants={"grace-lpddr": m}, gang="g", gang_size=2)
    first["metadata"]["annotations"].update(Holding(name, (), {"grace-lpddr": m}, "burst", name, "tok",
                                                    (name, name)).annotations())
    other = bound("o", "burst", name, (), grants={"grace-lpddr": cap - 2 * m})
    policy = Policy(snapshot(nodes, [first, other], Flags()))
    fits = policy.evaluate(req(ns="r", gpus=0, memory=cap - m, priority=1000), name)
    assert isinstance(fits, Refusal) and fits.resolvable, fits
    never = policy.evaluate(req(ns="r", name="q", gpus=0, memory=cap - m + 1, priority=1000), name)
    assert isinstance(never, Refusal) and not never.resolvable, never


@pytest.mark.parametrize("overdraft", [0, 2**20], ids=["at-its-cap", "1-MiB-past-its-cap"])
def test_a_pool_held_by_reservations_frees_nothing_by_eviction(overdraft: int) -> None:
    """docs/scheduler.md: bursts may be evicted for a reservation, reservations never. A GB200 tray: reservations
    hold all of grace-lpddr's admission cap (or 1 MiB more, granted before the pool shrank); a burst holds
    nvl72-peer-hbm's burst cap. A reservation needing P bytes (nvl72-peer-hbm's admission cap) beyond its GPU's HBM
    fits once the burst is gone (FailedNodes); P + 1 bytes do not fit whatever is evicted, since nothing of
    grace-lpddr can be freed (unresolvable), and its overdraft is not charged to the next pool."""
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    cfg = nodes[name].policy
    lpddr, peer = nodes[name].pool("grace-lpddr"), nodes[name].pool("nvl72-peer-hbm")
    assert lpddr is not None and peer is not None
    pods = [bound("r", "res", name, (0,), priority=1000, kind="reservation",
                  grants={"grace-lpddr": cfg.admission_cap(lpddr.available) + overdraft}),
            bound("b", "burst", name, (1,), grants={"nvl72-peer-hbm": cfg.burst_cap(peer.available)})]
    policy = Policy(snapshot(nodes, pods, Flags()))
    hbm = nodes[name].gpus[0].memory
    p = cfg.admission_cap(peer.available)
    fits = policy.evaluate(req(ns="n", gpus=1, memory=hbm + p, priority=1000), name)
    assert isinstance(fits, Refusal) and fits.resolvable, fits
    never = policy.evaluate(req(ns="n", name="q", gpus=1, memory=hbm + p + 1, priority=1000), name)
    assert isinstance(never, Refusal) and not never.resolvable, never


def test_a_refusal_says_how_much_the_pools_can_grant() -> None:
    """docs/scheduler.md (Filter): bursts may take each pool's admission cap (thrashThreshold x what it holds now)
    less its reserved part (reservedFraction x the same). An empty GB200 tray's pools can thus grant a burst
    B = burst cap of grace-lpddr + burst cap of nvl72-peer-hbm; a pod asking for its GPU's HBM plus B + 1 GiB is
    refused with that figure, the one an operator compares with the pod's request."""
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    info = nodes[name]
    lpddr, peer = info.pool("grace-lpddr"), info.pool("nvl72-peer-hbm")
    assert lpddr is not None and peer is not None
    grant = info.policy.burst_cap(lpddr.available) + info.policy.burst_cap(peer.available)
    refusal = Policy(snapshot(nodes, [], Flags())).evaluate(req(gpus=1, memory=info.gpus[0].memory + grant + 2**30),
                                                            name)
    assert isinstance(refusal, Refusal) and not refusal.resolvable, refusal
    assert f"needs {grant + 2**30} bytes beyond its GPUs' HBM; the node's pools can grant {grant} " in refusal.reason
