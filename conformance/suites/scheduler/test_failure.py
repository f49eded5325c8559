"""Failure requirements: faults injected through the node agent reach the extender through the Node objects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.suites.scheduler.support import RESERVATION, SchedulerUnderTest
from testbed.extender.harness import Workload


@pytest.mark.requirement("SCHED-FAIL-001")
def test_unhealthy_gpus_get_no_work(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    nodes = sorted(sched.gpu_nodes(), key=lambda i: (-len(i.gpus), i.name))
    target = nodes[0]
    gpus = [g.name for g in target.gpus]
    faults: list[tuple[str, str, dict[str, Any]]] = [("fallen-off-bus", gpus[0], {})]
    if len(gpus) > 2:
        faults.append(("ecc", gpus[len(gpus) // 2], {"type": "dbe", "count": 2}))
    if len(gpus) > 3:
        faults.append(("xid", gpus[-1], {"code": 48}))
    for kind, device, params in faults:
        sched.testbed.inject(target.name, kind, device, **params)
    sched.harness.refresh_nodes()
    info = sched.info(target.name)
    healthy = [g.index for g in info.gpus if g.usable]
    check(len(healthy) == len(gpus) - len(faults), f"the node reports {len(healthy)} healthy GPUs after "
                                                  f"{len(faults)} faults (rendering problem, not the extender's)")
    for other in nodes[1:]:
        sched.fill(other.name, "elsewhere", tuple(g.index for g in other.gpus))
    whole = sched.run_one(Workload("whole", tenant="fail", gpus=len(gpus)))
    check(whole.status != "bound", f"a pod asking for all {len(gpus)} GPUs of {target.name} was bound there although "
                                   f"{len(faults)} are unhealthy")
    binder = bool(sched.harness.extenders[0].config.bind_verb)
    placed = 0
    for n in range(len(healthy) + 1):
        d = sched.run_one(Workload(f"one-{n}", tenant="fail", gpus=1))
        if d.status != "bound":
            break
        placed += 1
        mine = next((h for h in sched.ledger().holds if h.key == d.pod), None)
        given = [i for i in (mine.holding.gpus if mine and binder else ()) if not info.gpus[i].usable]
        check(not given, f"{d.pod} was given unhealthy GPUs {given} on {d.node}",
              unhealthy=[g.name for g in info.gpus if not g.usable])
    check(placed == len(healthy), f"{placed} one-GPU pods were bound to {target.name}, which has {len(healthy)} "
                                  f"healthy GPUs ({len(faults)} unhealthy: {[f[1] for f in faults]})")


@pytest.mark.requirement("SCHED-FAIL-002")
def test_pool_memory_lost_to_faults_is_not_granted(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    pooled = sorted((i for i in sched.gpu_nodes() if any(p.tier != "hbm" for p in i.pools)), key=lambda i: i.name)
    if not pooled:
        sched.not_applicable("no memory pools beyond HBM in this profile: no pool memory to lose to faults")
    target = pooled[0]
    model = sched.system.node(target.name)
    assert model is not None
    for memdev in model.cxl.memdevs:
        sched.testbed.inject(target.name, "cxl-offline", memdev.name)
    sched.harness.refresh_nodes()
    for p in sched.info(target.name).pools:
        if p.tier != "hbm" and p.available > p.capacity // 8:
            sched.testbed.inject(target.name, "pool-shrink", p.name, bytes=p.available - p.capacity // 8)
    sched.harness.refresh_nodes()
    now = sched.info(target.name)
    before = sum(now.policy.admission_cap(p.capacity) for p in now.pools if p.tier != "hbm")
    after = sum(now.policy.admission_cap(p.available) for p in now.pools if p.tier != "hbm")
    check(after < before, f"faults did not reduce {target.name}'s pools ({before} -> {after} bytes; rendering "
                          "problem, not the extender's)")
    for other in sched.gpu_nodes():  # elsewhere, GPUs are held by work the reservation may not preempt
        if other.name != target.name:
            sched.fill(other.name, "elsewhere", tuple(g.index for g in other.gpus), priority=RESERVATION + 500)
    hbm = now.gpus[0].memory
    spill = (before + after) // 2
    d = sched.run_one(Workload("lost", tenant="fail", gpus=1, priority=RESERVATION, memory=hbm + spill))
    check(d.status != "bound", f"a reservation for {spill} pooled bytes was bound to {d.node}, whose pools hold only "
                               f"{after} now (the model says {before})",
          pools={p.name: {"model": p.capacity, "now": p.available} for p in now.pools})
    if after > 0:
        d = sched.run_one(Workload("small", tenant="fail", gpus=1, priority=RESERVATION, memory=hbm + after // 2))
        check(d.status == "bound", f"a reservation for {after // 2} pooled bytes, within what {target.name}'s pools "
                                   f"hold now ({after}), was refused: {d.message}")
