"""Exclusive pools (docs/scheduler.md, Filter: "exclusive pools for one tenant at a time"), on cxl-pool, whose
``cxl-pooled`` pool is exclusive (profile: ``policy: exclusive``) and ``cxl-local`` shared: once tenant ``a`` holds
memory of the exclusive pool on a node, another tenant gets none of that pool there (and a pod that needs it does
not fit), while ``a`` itself still does, and the same pool on another node is still open to everyone."""

from __future__ import annotations

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
