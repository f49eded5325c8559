"""kube-scheduler's cycle as the harness plays it: filters, ignorable, scores x weight x 10, preemption, binding."""

from __future__ import annotations

from typing import Any

import pytest

from fakehw.model import load_profile
from fakehw.views.k8s import HOLD_GPUS
from testbed.extender.harness import SchedulingHarness, Workload
from testbed.extender.protocol import ExtenderConfig
from tests.scheduler.conftest import ScriptedExtender


@pytest.fixture
def harness() -> Any:
    with SchedulingHarness(load_profile("dgx-h100", nodes=3)) as h:
        yield h


def names(h: SchedulingHarness) -> list[str]:
    return h.store.node_names()


def pass_all(req: Any) -> dict[str, Any]:
    return {"NodeNames": req["NodeNames"], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}


def test_scores_are_weight_times_ten_and_ties_kept(harness: SchedulingHarness, scripted: ScriptedExtender) -> None:
    n = names(harness)
    scripted.script.call("filter", pass_all)
    scripted.script.json("prioritize", [{"Host": n[0], "Score": 2}, {"Host": n[1], "Score": 5},
                                        {"Host": n[2], "Score": 5}])
    harness.add_extender(ExtenderConfig(scripted.url, node_cache_capable=True, weight=3))
    d = harness.run_one(Workload("p", gpus=1))
    assert d.scores == {n[0]: 60, n[1]: 150, n[2]: 150}
    assert d.top == (n[1], n[2]) and d.node == n[1] and d.status == "bound"
    pod = harness.pod(d.pod)
    assert pod is not None and pod["metadata"]["annotations"][HOLD_GPUS] == "0"  # the kubelet's lowest free GPU


def test_non_ignorable_filter_error_fails_the_pod(harness: SchedulingHarness, scripted: ScriptedExtender) -> None:
    scripted.script.raw("filter", b"oops", status=500)
    harness.add_extender(ExtenderConfig(scripted.url, node_cache_capable=True))
    d = harness.run_one(Workload("p", gpus=1))
    assert d.status == "error" and "filter failed: HTTP 500" in d.message
    assert not (harness.pod(d.pod) or {})["spec"].get("nodeName")
    assert [c.name for c in d.failed_checks] == ["status"]


def test_ignorable_filter_error_is_skipped(harness: SchedulingHarness, scripted: ScriptedExtender) -> None:
    scripted.script.raw("filter", b"oops", status=500)
    harness.add_extender(ExtenderConfig(scripted.url, node_cache_capable=True, ignorable=True, prioritize_verb=""))
    d = harness.run_one(Workload("p", gpus=1))
    assert d.status == "bound" and d.skipped_extenders == [scripted.url]


def test_prioritize_errors_are_ignored(harness: SchedulingHarness, scripted: ScriptedExtender) -> None:
    scripted.script.call("filter", pass_all)
    scripted.script.raw("prioritize", b"[not json")
    harness.add_extender(ExtenderConfig(scripted.url, node_cache_capable=True))
    d = harness.run_one(Workload("p", gpus=1))
    assert d.status == "bound" and set(d.scores.values()) == {0}


def test_in_tree_filters_run_first(harness: SchedulingHarness, scripted: ScriptedExtender) -> None:
    n = names(harness)
    scripted.script.call("filter", pass_all)
    harness.add_extender(ExtenderConfig(scripted.url, node_cache_capable=True, prioritize_verb=""))
    harness.run_one(Workload("big", gpus=8))
    d = harness.run_one(Workload("p", gpus=2))
    assert d.failed[harness.ledger().holds[0].node] == "Insufficient nvidia.com/gpu"
    sent = [r for v, r in scripted.script.requests if v == "filter"][-1]["NodeNames"]
    assert len(sent) == 2 and harness.ledger().holds[0].node not in sent
    d = harness.run_one(Workload("sel", gpus=1, node_selector=(("kubernetes.io/hostname", n[2]),)))
    assert d.node == n[2] and d.unresolvable[n[0]] == "node(s) didn't match Pod's node affinity/selector"


def test_managed_resources_limit_interest(harness: SchedulingHarness, scripted: ScriptedExtender) -> None:
    harness.add_extender(ExtenderConfig.from_stanza({
        "urlPrefix": scripted.url, "filterVerb": "filter", "managedResources": [{"name": "example.com/fpga"}]}))
    d = harness.run_one(Workload("p", gpus=1))
    assert d.status == "bound" and not scripted.script.requests


def test_preemption_with_an_extender(harness: SchedulingHarness, scripted: ScriptedExtender) -> None:
    n = names(harness)
    harness.add_extender(ExtenderConfig(scripted.url, node_cache_capable=True, prioritize_verb="",
                                        preempt_verb="preempt"))
    scripted.script.call("filter", pass_all)
    for node in n:
        harness.run_one(Workload(f"low-{node}", gpus=8, priority=0))
    high = {h.uid: h for h in harness.ledger().holds}
    victim_uid = next(u for u, h in high.items() if h.node == n[1])
    # Every node lacks GPUs (in-tree); the extender picks the victim on n[1] itself.
    scripted.script.json("preempt", {"NodeNameToMetaVictims": {n[1]: {"Pods": [{"UID": victim_uid}]}}})
    d = harness.run_one(Workload("urgent", gpus=8, priority=100))
    assert d.victims == (high[victim_uid].key,) and d.status == "bound" and d.node == n[1]
    offered = next(r for v, r in scripted.script.requests if v == "preempt")["NodeNameToMetaVictims"]
    assert set(offered) == set(n) and all(len(v["Pods"]) == 1 for v in offered.values())
    assert harness.store.deleted[-1][1] == "preempted by default/urgent"
    # A victim of higher priority than the preemptor is refused with a failed check (and nothing is evicted).
    keep = next(h for h in harness.ledger().holds if h.key == "default/urgent")
    scripted.script.json("preempt", {"NodeNameToMetaVictims": {n[0]: {"Pods": [{"UID": keep.uid}]}}})
    d = harness.run_one(Workload("later", gpus=8, priority=50))
    assert [c.name for c in d.failed_checks] == ["preempt-victims"] and not d.victims
    assert "is not a lower-priority pod on " + n[0] in d.failed_checks[0].message
    # Naming a node that was not offered is a failed check too.
    scripted.script.json("preempt", {"NodeNameToMetaVictims": {keep.node: {"Pods": [{"UID": keep.uid}]}}})
    d = harness.run_one(Workload("later2", gpus=8, priority=50))
    assert [c.name for c in d.failed_checks] == ["known-nodes"] and not d.victims
    assert harness.pod("default/urgent") is not None


@pytest.mark.parametrize("ignorable", [False, True])
def test_a_node_offered_victims_and_answered_with_none(harness: SchedulingHarness, scripted: ScriptedExtender,
                                                       ignorable: bool) -> None:
    """kube-scheduler's callExtenders (pkg/scheduler/framework/preemption): a node offered victims that an extender
    answers with none fails the whole preemption ("expected at least one victim pod on node"), unless the extender
    is ignorable, whose such nodes are dropped. Every node's 8 GPUs are held by a pod of priority 0; the extender
    answers n[0] with no victim and n[1] with its pod: nothing is evicted, or (ignorable) n[1]'s pod is."""
    n = names(harness)
    harness.add_extender(ExtenderConfig(scripted.url, node_cache_capable=True, prioritize_verb="",
                                        preempt_verb="preempt", ignorable=ignorable))
    scripted.script.call("filter", pass_all)
    for node in n:
        harness.run_one(Workload(f"low-{node}", gpus=8, priority=0))
    on_n1 = next(h for h in harness.ledger().holds if h.node == n[1])
    scripted.script.json("preempt", {"NodeNameToMetaVictims": {n[0]: {"Pods": []},
                                                               n[1]: {"Pods": [{"UID": on_n1.uid}]}}})
    d = harness.run_one(Workload("urgent", gpus=8, priority=100))
    assert [c.name for c in d.failed_checks] == ["victims-per-node"], d.failed_checks
    if ignorable:
        assert d.victims == (on_n1.key,) and d.status == "bound" and d.node == n[1], d
    else:
        assert not d.victims and d.status != "bound" and harness.pod(on_n1.key) is not None, d


def test_binder_that_does_not_bind_is_caught(harness: SchedulingHarness, scripted: ScriptedExtender) -> None:
    scripted.script.call("filter", pass_all)
    scripted.script.json("bind", {"Error": ""})
    harness.add_extender(ExtenderConfig(scripted.url, node_cache_capable=True, prioritize_verb="", bind_verb="bind"))
    d = harness.run_one(Workload("p", gpus=1))
    assert d.status == "error" and "bind answered success but the pod is bound to None" in d.message
    assert [c.name for c in d.failed_checks] == ["bind-effect"]
    scripted.script.json("bind", {"Error": "quota"})
    d = harness.run_one(Workload("q", gpus=1))
    assert d.status == "error" and d.message == "extender bind failed: extender bind error: quota"


def test_only_one_binder(harness: SchedulingHarness, scripted: ScriptedExtender) -> None:
    harness.add_extender(ExtenderConfig(scripted.url, bind_verb="bind"))
    harness.add_extender(ExtenderConfig(scripted.url, bind_verb="bind"))
    with pytest.raises(ValueError, match="only one extender may bind"):
        _ = harness.scheduler


def test_unreadable_pod_is_unresolvable(harness: SchedulingHarness) -> None:
    (key,) = harness.submit(Workload("p", gpus=1))
    pod = harness.store.pod(key)
    assert pod is not None
    bad = dict(pod, metadata={**pod["metadata"], "annotations": {"fakehw.io/memory": "much"}, "name": "bad"})
    harness.store.create_pod(bad)
    d = harness.schedule("default/bad")
    assert d.status == "unschedulable" and all("not a quantity" in r for r in d.unresolvable.values())
