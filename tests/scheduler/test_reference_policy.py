"""The reference extender's decisions, in process: GPU sets, pool grants, gang plans, preemption victims."""

from __future__ import annotations

from typing import Any

from fakehw.model import load_profile
from fakehw.views.k8s import Holding, NodeInfo, PodRequest, PoolPolicy, node_info, node_objects, pod_object
from testbed.reference.extender.policy import Flags, Placement, Policy, Refusal, Snapshot, choose_gpus, parse_bound


def infos(profile: str, nodes: int | None = None) -> dict[str, NodeInfo]:
    system = load_profile(profile, nodes=nodes)
    return {n.name: node_info(system, n) for n in system.nodes}


def bound(ns: str, name: str, node: str, gpus: tuple[int, ...], priority: int = 0, grants: dict[str, int] | None = None,
          kind: str = "burst", memory: int = 0, **kw: Any) -> dict[str, Any]:
    pod = pod_object(ns, name, f"uid-{name}", gpus=len(gpus), priority=priority, memory=memory, **kw)
    pod["spec"]["nodeName"] = node
    pod["metadata"]["annotations"].update(Holding(node, gpus, grants or {}, kind).annotations())
    return pod


def snapshot(nodes: dict[str, NodeInfo], pods: list[dict[str, Any]], flags: Flags) -> Snapshot:
    return Snapshot(nodes, [b for p in pods if (b := parse_bound(p)) is not None], flags)


GANG_TOKEN = "5f1c0a9e3b7d2486"
"""A booking token as a binder writes it (``fakehw.io/gang-token``): opaque to every reader."""


def gang_lead_with_plan(nodes: dict[str, NodeInfo]) -> tuple[str, str, dict[str, Any]]:
    """Trays a and b of one NVLink domain, and gang g's first member (4 GPUs) bound on a with the plan (a, b) and
    :data:`GANG_TOKEN`: the booking the extender makes for the second member on b."""
    a = sorted(nodes)[0]
    b = next(n for n in sorted(nodes) if n != a and nodes[n].domain == nodes[a].domain)
    lead = bound("t", "m1", a, (0, 1, 2, 3), gang="g", gang_size=2)
    lead["metadata"]["annotations"].update(Holding(a, (0, 1, 2, 3), {}, "burst", gang_domain=nodes[a].domain,
                                                   gang_token=GANG_TOKEN, gang_plan=(a, b)).annotations())
    return a, b, lead


def req(**kw: Any) -> PodRequest:
    return PodRequest.from_pod(pod_object(kw.pop("ns", "t"), kw.pop("name", "p"), "uid-p", **kw))


def test_choose_gpus_follows_pcie_distance() -> None:
    (info,) = infos("edge-pcie").values()
    assert choose_gpus(info, list(range(8)), 2) in ((0, 1), (5, 6))
    assert choose_gpus(info, [0, 2, 3, 4, 5, 6, 7], 2) == (5, 6)
    assert choose_gpus(info, [0, 2, 3, 4, 7], 2) == (0, 2)  # PXB beats PHB/NODE/SYS
    assert choose_gpus(info, [3, 4], 3) == (3, 4)


def test_node_with_the_closer_free_pair_wins() -> None:
    nodes = infos("edge-pcie", nodes=2)
    a, b = sorted(nodes)
    pods = [bound("t", "x", a, (1,)), bound("t", "y", a, (6,))]  # breaks both PIX pairs on a
    policy = Policy(snapshot(nodes, pods, Flags()))
    scores = policy.prioritize(req(gpus=2), [a, b])
    assert scores[b] == 10 and scores[a] < 10
    spread = Policy(snapshot(nodes, pods, Flags(spread=True))).prioritize(req(gpus=2), [a, b])
    assert spread[a] == 10


def test_pool_grants_nearest_first_under_the_policy() -> None:
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    info = nodes[name]
    hbm = info.gpus[0].memory
    lpddr = info.pool("grace-lpddr")
    assert lpddr is not None
    policy = Policy(snapshot(nodes, [], Flags()))
    p = policy.evaluate(req(gpus=1, memory=hbm + 2**30), name)
    assert isinstance(p, Placement) and p.grants == {"grace-lpddr": 2**30} and p.kind == "burst"
    assert p.remote == 2**30 * lpddr.latency_ns / (hbm + 2**30)
    cap = PoolPolicy().burst_cap(lpddr.available)
    p = policy.evaluate(req(gpus=1, memory=hbm + cap + 5), name)
    assert isinstance(p, Placement) and p.grants == {"grace-lpddr": cap, "nvl72-peer-hbm": 5}
    everything = sum(PoolPolicy().admission_cap(x.available) for x in info.pools)
    r = policy.evaluate(req(gpus=1, memory=hbm + everything + 1, priority=1000), name)
    assert isinstance(r, Refusal) and not r.resolvable and "thrash threshold 0.9" in r.reason
    assert isinstance(Policy(snapshot(nodes, [], Flags(no_admission=True))).evaluate(
        req(gpus=1, memory=hbm + everything + 1, priority=1000), name), Placement)


def test_reservation_preempts_bursts_never_reservations() -> None:
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    lpddr = nodes[name].pool("grace-lpddr")
    hbm_pool = nodes[name].pool("nvl72-peer-hbm")
    assert lpddr is not None and hbm_pool is not None
    pol = PoolPolicy()
    pods = [bound("b", "burst1", name, (0,), grants={"grace-lpddr": pol.burst_cap(lpddr.available),
                                                     "nvl72-peer-hbm": pol.burst_cap(hbm_pool.available)}),
            bound("r", "res1", name, (1,), priority=1000, kind="reservation")]
    policy = Policy(snapshot(nodes, pods, Flags()))
    hbm = nodes[name].gpus[0].memory
    free_now = sum(pol.admission_cap(p.available) - pol.burst_cap(p.available) for p in (lpddr, hbm_pool))
    need = free_now + 2**20  # more than is free: only preempting the bursts makes room
    assert isinstance(policy.evaluate(req(gpus=1, memory=hbm + free_now, priority=1000), name), Placement)
    r = policy.evaluate(req(gpus=1, memory=hbm + need, priority=1000), name)
    assert isinstance(r, Refusal) and r.resolvable and "preempting them" in r.reason
    assert policy.victims(req(gpus=1, memory=hbm + need, priority=1000), name, []) == ["uid-burst1"]
    # GPUs: a high-priority pod needing the reservation's GPU gets no victims there.
    full = [bound("r", f"res{i}", name, (i,), priority=1000, kind="reservation") for i in range(4)]
    policy = Policy(snapshot(nodes, full, Flags()))
    assert policy.victims(req(gpus=1, priority=2000), name, ["uid-res0"]) is None
    mutant = Policy(snapshot(nodes, full, Flags(preempt_reservations=True)))
    assert mutant.victims(req(gpus=1, priority=2000), name, ["uid-res0"]) == ["uid-res0"]


def test_gang_plans_pick_one_domain_that_holds_all() -> None:
    nodes = infos("gb200-nvl72", nodes=36)
    domains = sorted({i.domain for i in nodes.values()})
    assert len(domains) == 2
    busy = [n for n, i in nodes.items() if i.domain == domains[0]]
    pods = [bound("x", f"f{n}", n, (0, 1, 2, 3)) for n in busy[:10]]  # domain 0 keeps 8 trays
    policy = Policy(snapshot(nodes, pods, Flags()))
    g = req(gpus=4, gang="job", gang_size=10)
    plan = policy.gang_plan(g, list(nodes))
    assert not isinstance(plan, Refusal)
    assert plan.domain == domains[1] and len(plan.nodes) == 10 and len(set(plan.nodes)) == 10
    passed, failed, unresolvable = policy.filter(g, list(nodes))
    assert set(passed) == set(plan.nodes) and not failed
    assert all("is booked on" in unresolvable[n] for n in nodes if n not in plan.nodes)
    too_big = req(gpus=4, gang="big", gang_size=19)
    passed, _, unresolvable = Policy(snapshot(nodes, pods, Flags())).filter(too_big, list(nodes))
    assert not passed and "no NVLink domain can hold gang t/big (19 pods x 4 GPUs); the largest has room for 18" in \
        next(iter(unresolvable.values()))


def test_gang_booking_holds_gpus_and_memory_for_its_members() -> None:
    nodes = infos("gb200-nvl72")
    name = sorted(nodes)[0]
    hbm = nodes[name].gpus[0].memory
    lpddr = nodes[name].pool("grace-lpddr")
    assert lpddr is not None
    spill = PoolPolicy().burst_cap(lpddr.available) // 2
    member = bound("t", "g-0", name, (0, 1), memory=2 * hbm + spill, grants={"grace-lpddr": spill},
                   gang="g", gang_size=2)
    member["metadata"]["annotations"].update(Holding(name, (0, 1), {"grace-lpddr": spill}, "burst", "nvl72", "tok",
                                                     (name, name)).annotations())
    policy = Policy(snapshot(nodes, [member], Flags()))
    other = policy.evaluate(req(name="o", ns="u", gpus=1), name)
    assert isinstance(other, Refusal) and "2 booked by gangs" in other.reason
    second = req(name="g-1", gpus=2, memory=2 * hbm + spill, gang="g", gang_size=2)
    assert policy.own_slots(second, name) == 1
    assert isinstance(policy.evaluate(second, name, own_slots=1), Placement)
    mem_only = policy.evaluate(req(name="m", ns="u", memory=spill // 2), name)
    # The nearest pool's room is the booked member's: the newcomer is served from the farther one.
    assert isinstance(mem_only, Placement) and mem_only.grants == {"nvl72-peer-hbm": spill // 2}


def test_unknown_mutant_flag_is_the_reference() -> None:
    assert Flags.for_mutant("no-such") == Flags() and Flags.for_mutant(None) == Flags()
    assert Flags.for_mutant("ignore-cxl").ignore_cxl


def test_snapshot_skips_unreadable_pods() -> None:
    nodes = {o["metadata"]["name"]: NodeInfo.from_object(o) for o in node_objects(load_profile("dgx-h100"))}
    name = next(iter(nodes))
    good = bound("t", "a", name, (0,))
    bad = bound("t", "b", name, (1,))
    bad["metadata"]["annotations"]["fakehw.io/gpus"] = "one"
    snap = snapshot(nodes, [good, bad], Flags())
    assert snap.use[name].held == {0: ["t/a"]}
