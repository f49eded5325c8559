"""Chaos requirements: the extender restarted or slow in the middle of a run.

The restart and skip checks are differential: the same sequence runs once undisturbed and once with the
disturbance, and only what goes wrong with the disturbance (and not without it) is charged to it. A double
booking the extender also makes undisturbed is a fit/isolation failure, not a chaos one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from conformance.suites.scheduler.support import FLEET_NODES, LATENCY_BUDGET_S, SchedulerUnderTest
from testbed.extender.harness import Workload
from testbed.extender.scheduler import Decision


def _double_booked(sched: SchedulerUnderTest) -> list[str]:
    ledger = sched.ledger()
    out = []
    for info in sched.gpu_nodes():
        for gpu, holders in sorted(ledger.gpu_holders(info.name).items()):
            if len(holders) > 1:
                out.append(f"{info.name} GPU {gpu}: {holders}")
    return out


def _restart_sequence(sched: SchedulerUnderTest, restart: bool) -> tuple[bool, bool, list[str], str]:
    """A pod, the first member of a gang, (a restart), the second member, then one-GPU pods until full.

    Returns (gang in one domain, everything scheduled that should be, double bookings, what happened)."""
    sched.harness.reset()
    infos = sorted(sched.gpu_nodes(), key=lambda i: (-len(i.gpus), i.name))
    k = max(1, len(infos[0].gpus) // 2)
    first = sched.run_one(Workload("before", tenant="chaos", gpus=k))
    keys = sched.harness.submit(Workload("gang", tenant="chaos", gpus=k, gang="gang", gang_size=2))
    lead = sched.harness.schedule(keys[0])
    if restart:
        sched.process.restart(kill=True)
    rest = sched.harness.schedule(keys[1])
    together = lead.status == rest.status == "bound" and \
        sched.info(str(lead.node)).domain == sched.info(str(rest.node)).domain
    for n in range(sum(len(i.healthy_gpus) for i in infos)):
        if sched.run_one(Workload(f"after-{n}", tenant="chaos", gpus=1)).status != "bound":
            break
    story = (f"'before' on {first.node}; gang member 1 on {lead.node} ({lead.status}), member 2 on {rest.node} "
             f"({rest.status}: {rest.message})")
    return together, first.status == "bound" and lead.status == "bound", _double_booked(sched), story


@pytest.mark.requirement("SCHED-CHAOS-001")
def test_restart_keeps_bindings_and_bookings(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    if not sched.options.target.managed:
        pytest.skip("a url: target is not run by the harness, which cannot restart it")
    calm_together, calm_ok, calm_doubled, _ = _restart_sequence(sched, restart=False)
    together, ok, doubled, story = _restart_sequence(sched, restart=True)
    check(ok or not calm_ok, f"after a restart the extender no longer schedules what it did before: {story}")
    check(together or not calm_together,
          f"without a restart the gang stays in one NVLink domain; after a restart between its members it does not: "
          f"{story}")
    new = sorted(set(doubled) - set(calm_doubled))
    check(not new, "after a restart GPUs held before it were handed out again: " + "; ".join(new[:6]))


def _skip_sequence(sched: SchedulerUnderTest, slow: bool, timeout: float) -> tuple[bool, str, list[str]]:
    """One node with room; a pod scheduled while the ignorable extender times out everywhere, then one through it.

    kube-scheduler skips an ignorable extender's filter, ignores its prioritize, but cannot skip its bind: with a
    binder extender the first pod then waits; without one the kubelet assigns it GPUs the extender must count."""
    sched.harness.reset()
    infos = sorted(sched.gpu_nodes(), key=lambda i: (-len(i.gpus), i.name))
    target = infos[0]
    for other in infos[1:]:
        sched.fill(other.name, "elsewhere", tuple(g.index for g in other.gpus))
    half = max(1, len(target.gpus) // 2)
    sched.configure(via_proxy=True, httpTimeout=f"{timeout}s", ignorable=True)
    assert sched.proxy is not None
    if slow:
        sched.proxy.delays.update({"filter": timeout + 0.5, "prioritize": timeout + 0.5, "bind": timeout + 0.5})
    skipped = sched.run_one(Workload("skipped", tenant="slow", gpus=half))
    sched.proxy.delays.clear()
    sched.proxy.wait_idle()
    binder = bool(sched.harness.extenders[0].config.bind_verb)
    expected = (skipped.status != "bound") if (slow and binder) else (skipped.status == "bound")
    sched.configure(httpTimeout=f"{timeout}s", ignorable=False)
    back = sched.run_one(Workload("back", tenant="slow", gpus=len(target.gpus) - half))
    story = (f"'skipped' {skipped.status} on {skipped.node} (extenders skipped: {skipped.skipped_extenders}); "
             f"'back' {back.status} on {back.node}: {back.message}")
    return expected and bool(skipped.skipped_extenders) == slow, story, _double_booked(sched)


@pytest.mark.requirement("SCHED-CHAOS-002")
def test_timeouts_and_ignorable(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    timeout = 1.0
    infos = sorted(sched.gpu_nodes(), key=lambda i: (-len(i.gpus), i.name))
    target = infos[0]
    for other in infos[1:]:
        sched.fill(other.name, "elsewhere", tuple(g.index for g in other.gpus))
    # Not ignorable, filter slower than httpTimeout: the pod waits, and nothing is half-booked for it.
    sched.configure(via_proxy=True, httpTimeout=f"{timeout}s", ignorable=False)
    assert sched.proxy is not None
    sched.proxy.delays["filter"] = timeout + 0.5
    d = sched.run_one(Workload("blocked", tenant="slow", gpus=1))
    check(d.status != "bound", f"the filter timed out on a non-ignorable extender but the pod was bound to {d.node}")
    check(not any(h.key == d.pod for h in sched.ledger().holds), "a pod whose scheduling failed holds GPUs")
    sched.proxy.delays.clear()
    sched.proxy.wait_idle()  # the timed-out call still reaches the extender, late
    sched.configure(httpTimeout=f"{timeout}s", ignorable=False)
    whole = sched.run_one(Workload("whole", tenant="slow", gpus=len(target.healthy_gpus)))
    check(whole.status == "bound", f"after a filter call that timed out for {d.pod} (still pending), a pod asking "
                                   f"for every GPU of {target.name} was refused: {whole.message}")
    sched.harness.delete(d.pod)
    # Ignorable: skipped when it times out; what it did not bind it must count when it is back.
    _, _, calm_doubled = _skip_sequence(sched, slow=False, timeout=timeout)
    skipped_ok, story, doubled = _skip_sequence(sched, slow=True, timeout=timeout)
    check(skipped_ok, f"an ignorable extender that times out must be skipped (the pod is bound unless the extender "
                      f"is its binder): {story}")
    new = sorted(set(doubled) - set(calm_doubled))
    check(not new, f"the extender handed out GPUs a pod got while it was skipped ({story}): " + "; ".join(new))
    # A slow prioritize is ignored: the pod is still scheduled.
    sched.harness.reset()
    sched.configure(via_proxy=True, httpTimeout=f"{timeout}s", ignorable=False)
    sched.proxy.delays["prioritize"] = timeout + 0.5
    d = sched.run_one(Workload("slow-score", tenant="slow", gpus=1))
    check(d.status == "bound", f"a prioritize timeout must be ignored, but the pod was {d.status}: {d.message}")
    sched.proxy.delays.clear()
    sched.proxy.wait_idle()


def _slowest_call(decisions: Sequence[Decision], verbs: set[str]) -> tuple[float, str]:
    slowest = (0.0, "")
    for d in decisions:
        for c in d.calls:
            if c.verb in verbs and c.elapsed > slowest[0]:
                slowest = (c.elapsed, f"{c.verb} for {d.pod}" + (f" ({c.error})" if c.error else ""))
    return slowest


@pytest.mark.requirement("SCHED-CHAOS-003")
def test_decisions_within_a_second_in_a_full_size_cluster(sched: SchedulerUnderTest,
                                                          check: Callable[..., None]) -> None:
    if not sched.options.target.managed:
        pytest.skip("a url: target watches its own cluster API; the harness cannot start it in front of "
                    f"{FLEET_NODES} nodes")
    if not sched.harness.extenders[0].config.node_cache_capable:
        pytest.skip(f"nodeCacheCapable=false: kube-scheduler sends all {FLEET_NODES} Node objects in every call "
                    "(about 40 MB of JSON each way): the time is that configuration's traffic, not the extender's "
                    "decisions")
    with sched.fleet(FLEET_NODES) as fleet:
        cfg = fleet.extenders[0].config
        verbs = {cfg.filter_verb, cfg.prioritize_verb} - {""}
        decisions = []
        for n in range(6):
            decisions.append(fleet.run_one(Workload(f"fleet-{n}", tenant=f"t{n % 3}", gpus=1 + n % 2)))
            took, what = _slowest_call(decisions, verbs)
            check(took <= LATENCY_BUDGET_S,
                  f"in a cluster of {FLEET_NODES} nodes, {what} took {took:.2f} s (budget {LATENCY_BUDGET_S:g} s)",
                  decisions=[d.evidence() for d in decisions[-2:]])


@pytest.mark.requirement("SCHED-CHAOS-003")
def test_decisions_within_a_second(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    cfg = sched.harness.extenders[0].config
    verbs = {cfg.filter_verb, cfg.prioritize_verb} - {""}
    infos = sched.gpu_nodes()
    pods = 24
    slowest = (0.0, "")
    for n in range(pods):
        w = Workload(f"load-{n}", tenant=f"t{n % 3}", gpus=1 if n % 2 else 0,
                     memory=infos[0].gpus[0].memory // 2 if n % 4 == 1 else 0)
        d = sched.run_one(w)
        for c in d.calls:
            if c.verb in verbs and c.elapsed > slowest[0]:
                slowest = (c.elapsed, f"{c.verb} for {d.pod} with {n} pods bound")
        check(slowest[0] <= LATENCY_BUDGET_S,
              f"{slowest[1]} took {slowest[0]:.2f} s (budget {LATENCY_BUDGET_S:g} s)")
