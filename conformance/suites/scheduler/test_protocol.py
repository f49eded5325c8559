"""Protocol requirements: what kube-scheduler can read from the extender's answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.suites.scheduler.support import RESERVATION, SchedulerUnderTest
from testbed.extender.harness import Workload
from testbed.extender.protocol import binding_args, extender_args, preemption_args


def _failed(calls: list[Any], verb: str) -> list[str]:
    return [f"{c.verb}: {x.name}: {x.message}" for c in calls if c.verb == verb for x in c.failed_checks]


@pytest.mark.requirement("SCHED-PROTO-001")
def test_filter_answers_a_readable_result(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    cfg = sched.harness.extenders[0].config
    nodes = sorted(sched.gpu_nodes(), key=lambda i: i.name)
    full = nodes[0]
    sched.fill(full.name, "other", tuple(g.index for g in full.gpus))
    d = sched.run_one(Workload("probe", tenant="proto", gpus=1))
    calls = [c for c in d.calls if c.verb == cfg.filter_verb]
    check(bool(calls), "kube-scheduler made no filter call (is filterVerb set?)")
    problems = _failed(calls, cfg.filter_verb)
    check(not problems, "filter answer not readable by kube-scheduler: " + "; ".join(problems),
          response=calls[0].evidence())
    check(d.status == "bound", f"the pod was not scheduled: {d.message}", response=calls[0].evidence())
    check(full.name not in d.feasible, f"{full.name} has no free GPU but passed the filter")


@pytest.mark.requirement("SCHED-PROTO-002")
def test_prioritize_scores_sent_nodes_within_range(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    cfg = sched.harness.extenders[0].config
    if not cfg.prioritize_verb:
        pytest.skip("the extender has no prioritize verb")
    g = max(len(i.gpus) for i in sched.gpu_nodes())
    workloads = [Workload("a", tenant="p", gpus=1), Workload("b", tenant="q", gpus=max(1, g // 2), memory_bound=True),
                 Workload("c", tenant="p", gpus=1)]
    calls = []
    for w in workloads:
        d = sched.run_one(w)
        calls += [c for c in d.calls if c.verb == cfg.prioritize_verb]
    check(bool(calls), "kube-scheduler made no prioritize call")
    bad = [c for c in calls if not c.ok]
    check(not bad, f"prioritize failed: {bad[0].error if bad else ''}", response=bad[0].evidence() if bad else None)
    problems = _failed(calls, cfg.prioritize_verb)
    offending = next((c for c in calls if c.failed_checks), None)
    check(not problems, "prioritize answer: " + "; ".join(problems),
          response=offending.evidence() if offending else None)


@pytest.mark.requirement("SCHED-PROTO-003")
def test_bind_binds_where_asked(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    cfg = sched.harness.extenders[0].config
    if not cfg.bind_verb:
        sched.not_applicable("the extender has no bindVerb: kube-scheduler binds itself, so there is no extender "
                             "bind to check")
    client = sched.harness.extenders[0]
    (key,) = sched.harness.submit(Workload("bindme", tenant="proto", gpus=1))
    pod = sched.harness.pod(key)
    assert pod is not None
    nodes = sched.harness.store.nodes()
    flt = client.filter(extender_args(pod, nodes, cfg.node_cache_capable), [n["metadata"]["name"] for n in nodes])
    check(flt.ok and flt.value is not None and bool(flt.value.passed), f"filter passed no node: {flt.error}",
          response=flt.evidence())
    assert flt.value is not None
    node = flt.value.passed[-1]
    call = client.bind(binding_args(pod, node))
    check(call.ok and call.value == "", f"bind answered {call.error or call.value!r}", response=call.evidence())
    after = sched.harness.pod(key) or {}
    check(after.get("spec", {}).get("nodeName") == node,
          f"bind answered success but the pod is on {after.get('spec', {}).get('nodeName')!r}, not {node}",
          response=call.evidence())
    ghost = dict(binding_args(pod, node), PodName="no-such-pod", PodUID="no-such-uid")
    call = client.bind(ghost)
    check(not call.ok, "bind of a pod that does not exist answered success", response=call.evidence())
    # A pod that cannot fit the node it is bound to: every GPU of the node is held.
    (key2,) = sched.harness.submit(Workload("toobig", tenant="proto", gpus=len(sched.info(node).gpus)))
    pod2 = sched.harness.pod(key2)
    assert pod2 is not None
    call = client.bind(binding_args(pod2, node))
    after2 = sched.harness.pod(key2) or {}
    check(not call.ok and not after2.get("spec", {}).get("nodeName"),
          f"bind of a pod that does not fit {node} (its GPUs are held) answered {call.error or 'success'} and left it "
          f"on {after2.get('spec', {}).get('nodeName')!r}", response=call.evidence())


@pytest.mark.requirement("SCHED-PROTO-004")
def test_preempt_names_valid_victims(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    cfg = sched.harness.extenders[0].config
    if not cfg.preempt_verb:
        sched.not_applicable("the extender has no preemptVerb: kube-scheduler's own preemption runs, so there is "
                             "no extender preempt to check")
    client = sched.harness.extenders[0]
    nodes = sorted(sched.gpu_nodes(), key=lambda i: (-len(i.gpus), i.name))
    target = nodes[0]
    victims = [sched.fill(target.name, "low", (g.index,), priority=0, name=f"low-{g.index}") for g in target.gpus]
    for other in nodes[1:]:
        sched.fill(other.name, "keep", tuple(g.index for g in other.gpus), priority=RESERVATION + 500)
    (key,) = sched.harness.submit(Workload("high", tenant="proto", gpus=1, priority=RESERVATION + 100))
    pod = sched.harness.pod(key)
    assert pod is not None
    pods = {p["metadata"]["name"]: p for p in sched.harness.store.pods()}
    offered_pods = {target.name: [pods[k.split("/")[1]] for k in victims]}
    offered = {n: [p["metadata"]["uid"] for p in ps] for n, ps in offered_pods.items()}
    call = client.preempt(preemption_args(pod, offered_pods, cfg.node_cache_capable), offered)
    check(call.ok and call.value is not None, f"preempt failed: {call.error}", response=call.evidence())
    assert call.value is not None
    problems = [f"{x.name}: {x.message}" for x in call.failed_checks]
    uid_node = {p["metadata"]["uid"]: (p["spec"].get("nodeName"), int(p["spec"].get("priority") or 0))
                for p in sched.harness.store.pods()}
    for node, uids in call.value.victims.items():
        for uid in uids:
            where, prio = uid_node.get(uid, (None, 0))
            if where != node or prio >= RESERVATION + 100:
                problems.append(f"victim {uid} is on {where!r} with priority {prio}, not a lower-priority pod "
                                f"on {node}")
    check(not problems, "; ".join(problems), response=call.evidence())
    check(target.name in call.value.victims, f"no victims offered on {target.name}, where lower-priority pods hold "
                                             "every GPU", response=call.evidence())


MALFORMED: list[tuple[str, bytes]] = [
    ("not JSON", b"{not json"),
    ("empty object", b"{}"),
    ("wrong types", b'{"Pod": 5, "Nodes": "x", "NodeNames": {"a": 1}}'),
    ("array", b"[1, 2, 3]"),
    ("deep nesting", b"[" * 5000 + b"]" * 5000),
    ("binary", bytes(range(256))),
]


@pytest.mark.requirement("SCHED-PROTO-005")
def test_malformed_requests_are_refused_and_serving_goes_on(sched: SchedulerUnderTest,
                                                            check: Callable[..., None]) -> None:
    cfg = sched.harness.extenders[0].config
    client = sched.harness.extenders[0]
    verbs = [v for v in (cfg.filter_verb, cfg.prioritize_verb, cfg.bind_verb, cfg.preempt_verb) if v]
    accepted = []
    for verb in verbs:
        for label, body in MALFORMED:
            status, text = client.raw(verb, body)
            if status is None:
                check(False, f"{verb} with {label}: the extender did not answer ({text})",
                      request=body[:200].decode("latin-1"))
            if status == 200 and '"Error":""' not in text.replace(" ", "") and verb == cfg.prioritize_verb \
                    and text.strip().startswith("["):
                accepted.append(f"{verb} with {label}: HTTP 200 with a priority list")
            elif status == 200 and ('"Error":""' in text.replace(" ", "") or '"Error"' not in text):
                accepted.append(f"{verb} with {label}: HTTP 200 without an Error ({text[:120]})")
    check(not accepted, "malformed requests answered as if they were fine: " + "; ".join(accepted))
    d = sched.run_one(Workload("after", tenant="proto", gpus=1))
    check(d.status == "bound", f"after the malformed requests a normal pod was not scheduled: {d.message}",
          log=sched.process.log_tail())
