"""The reference extender's usage bookkeeping at scale: updated pod by pod, and decided once per alike group.

The extender keeps its snapshot current by applying each changed pod (:meth:`Snapshot.put`) instead of recounting
the cluster per decision, and evaluates nodes once per (template, usage state). Both must give exactly what the
plain way gives: a snapshot counted from scratch from the same pods, and every node evaluated on its own.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import pytest

from fakehw.model import load_profile
from fakehw.views.k8s import Holding, NodeInfo, PodRequest, node_info, pod_object
from testbed.reference.extender.policy import Bound, Flags, Policy, Snapshot, Verdict, parse_bound


def _infos(profile: str, nodes: int | None = None) -> dict[str, NodeInfo]:
    system = load_profile(profile, nodes=nodes)
    return {n.name: node_info(system, n) for n in system.nodes}


def _pod(rng: random.Random, i: int, names: list[str], info: NodeInfo) -> dict[str, Any]:
    """A bound pod: GPUs (sometimes ones another pod holds), pool grants, bursts or reservations, gang members (each
    gang's members carry its one plan, as the extender writes it at binding)."""
    node = rng.choice(names)
    gang = rng.choice(("g1", "g2")) if rng.random() < 0.3 else None
    gpus = tuple(sorted(rng.sample(range(len(info.gpus)), 2 if gang else rng.choice((1, 2, 4)))))
    pools = [p.name for p in info.pools if p.tier != "hbm"]
    grants = {rng.choice(pools): rng.choice((1, 2)) * 2**30} if pools and rng.random() < 0.4 else {}
    kw: dict[str, Any] = {"gang": gang, "gang_size": 4} if gang else {}
    ns = rng.choice(("t1", "t2", "t3"))
    pod = pod_object(ns, f"p{i}", f"uid-{ns}-{i}", gpus=len(gpus),
                     priority=rng.choice((0, 0, 1000)), **kw)
    pod["spec"]["nodeName"] = node
    plan = tuple(names[:4] if gang == "g1" else names[2:6]) if gang else ()  # what every member of it carries
    holding = Holding(node, gpus, grants, rng.choice(("burst", "reservation")), "domain-0" if gang else None,
                      "tok" if gang else None, plan)
    pod["metadata"]["annotations"].update(holding.annotations())
    return pod


def _view(snap: Snapshot) -> dict[str, Any]:
    """Everything a decision reads from a snapshot, as plain values."""
    return {"use": {n: (u.state_key().value, {i: sorted(k) for i, k in u.held.items()},
                        sorted(b.key for b in u.pods)) for n, u in snap.use.items()},
            "plans": {g: (p.nodes, tuple(sorted(p.bound)), p.gpus_per_pod) for g, p in snap.plans.items()},
            "pods": sorted(snap.pods)}


def test_updates_pod_by_pod_equal_a_recount() -> None:
    nodes = _infos("gb200-nvl72")
    names = sorted(nodes)
    info = nodes[names[0]]
    rng = random.Random(19)
    live: dict[str, Bound] = {}
    snap = Snapshot(nodes, [], Flags())
    for step in range(300):
        if live and rng.random() < 0.35:
            key = rng.choice(sorted(live))
            del live[key]
            snap.put(key, None)
        else:
            b = parse_bound(_pod(rng, rng.randrange(80), names, info))  # a key seen before: the pod changed
            assert b is not None
            snap.put(b.key, b)
            live[b.key] = b
        if step % 25 == 0 or step == 299:
            assert _view(snap) == _view(Snapshot(nodes, list(live.values()), Flags())), f"step {step}"
    for key in sorted(live):
        snap.put(key, None)
    assert snap.use == {} and snap.plans == {} and snap.pods == {}


def test_a_node_that_loses_its_last_pod_is_unused_again() -> None:
    nodes = _infos("dgx-h100")
    name = sorted(nodes)[0]
    pod = pod_object("t", "a", "uid-a", gpus=1)
    pod["spec"]["nodeName"] = name
    pod["metadata"]["annotations"].update(Holding(name, (0,), {}, "burst").annotations())
    b = parse_bound(pod)
    assert b is not None
    snap = Snapshot(nodes, [b], Flags())
    assert snap.state_key(name) is not None
    snap.put(b.key, None)
    assert snap.state_key(name) is None and name not in snap.use


def test_alike_nodes_decide_as_each_node_alone() -> None:
    """Grouping by (template, usage state) gives every node the verdict evaluating it alone gives."""
    nodes = _infos("dgx-h100", nodes=60)
    names = sorted(nodes)
    rng = random.Random(5)
    bounds = [b for i in range(40) if (b := parse_bound(_pod(rng, i, names[:30], nodes[names[0]]))) is not None]
    snap = Snapshot(nodes, bounds, Flags())
    templates = {n: 0 for n in names}  # one dgx-h100 template: the fleet is homogeneous
    grouped = Policy(snap, templates, {})
    alone = Policy(snap)  # no templates: every node evaluated on its own
    for gpus in (1, 2, 4, 8):
        r = PodRequest.from_pod(pod_object("t2", f"q{gpus}", "uid-q", gpus=gpus))
        asked = [*names, "no-such-node", names[3]]
        assert _same_filter(grouped, alone, r, asked)
        assert grouped.prioritize(r, asked) == alone.prioritize(r, asked)
        got = grouped.evaluate_many(r, asked)
        want = {n: alone.evaluate(r, n) for n in asked}
        assert {n: _plain(v) for n, v in got.items()} == {n: _plain(v) for n, v in want.items()}


def _plain(v: Any) -> tuple[Any, ...]:
    """A verdict without the node it was first computed for (alike nodes share one)."""
    return tuple(getattr(v, f) for f in v.__slots__ if f != "node")


def _same_filter(a: Policy, b: Policy, r: PodRequest, names: list[str]) -> bool:
    """The same nodes pass and fail with the same reasons, in any order."""
    pa, fa, ua = a.filter(r, names)
    pb, fb, ub = b.filter(r, names)
    return sorted(pa) == sorted(pb) and fa == fb and ua == ub


def test_prioritize_after_filter_scores_as_a_fresh_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prioritize reuses its pod's filter verdicts only for exactly the nodes that filter passed: the scores equal
    those of a policy that never saw the filter, for that pod, and not for another pod or another node list."""
    nodes = _infos("dgx-h100", nodes=60)
    names = sorted(nodes)
    rng = random.Random(7)
    bounds = [b for i in range(40) if (b := parse_bound(_pod(rng, i, names[:30], nodes[names[0]]))) is not None]
    snap = Snapshot(nodes, bounds, Flags())
    templates = {n: 0 for n in names}
    small = PodRequest.from_pod(pod_object("t2", "small", "uid-s", gpus=1))
    big = PodRequest.from_pod(pod_object("t2", "big", "uid-b", gpus=8))
    policy = Policy(snap, templates, {})
    passed, _, _ = policy.filter(small, names)
    assert set(passed) & set(names[:30]), "the small pod must pass some used nodes (where the big one fails)"
    calls: list[PodRequest] = []

    def counted(r: PodRequest, ns: Iterable[str]) -> list[tuple[Verdict, list[str]]]:
        calls.append(r)
        return Policy.groups(policy, r, ns)

    monkeypatch.setattr(policy, "groups", counted)
    assert policy.score_groups(small, list(passed)) and not calls  # its own filter's nodes: reused
    assert policy.prioritize(small, passed) == Policy(snap).prioritize(small, passed)
    # Another pod with the small pod's passed nodes: the big one fails on used nodes (score 0 there).
    big_scores = policy.prioritize(big, passed)
    assert big_scores == Policy(snap).prioritize(big, passed) and calls
    assert any(big_scores[n] == 0 for n in passed)
    # The caller changing the list filter returned does not change what was remembered.
    fewer = passed[: len(passed) // 2]
    passed[:] = fewer
    assert policy.prioritize(small, passed) == Policy(snap).prioritize(small, fewer)
