"""Topology requirements: NVLink/PCIe distance, packing, gangs in one NVLink domain, architecture, memory first.

Expected placements come from :mod:`conformance.suites.scheduler.oracle` (the model's latency matrices, pools and
the cluster's ledger). kube-scheduler picks randomly among the nodes with the top score, so *every* top node must
be a right one.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable

import pytest

from conformance.suites.scheduler import oracle
from conformance.suites.scheduler.support import RESERVATION, SchedulerUnderTest
from fakehw.views.k8s import NodeInfo, average_latency
from testbed.extender.harness import Workload


def _seed(sched: SchedulerUnderTest) -> int:
    return int(sched.system.digest[:8], 16)


@pytest.mark.requirement("SCHED-TOPO-001")
def test_gpus_closest_together(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    rng = random.Random(_seed(sched))
    g = max(len(i.gpus) for i in sched.gpu_nodes())
    sizes = sorted({k for k in (2, (g + 1) // 2, g - 1) if 2 <= k <= g})
    binder = bool(sched.harness.extenders[0].config.bind_verb)
    for k in sizes:
        sched.harness.reset()
        for info in sched.gpu_nodes():  # same tenant, random holes: topology differs between nodes
            spare = len(info.gpus) - k
            if spare > 0:
                held = rng.sample([x.index for x in info.gpus], rng.randint(0, spare))
                if held:
                    sched.fill(info.name, "topo", tuple(sorted(held)))
        w = Workload(f"k{k}", tenant="topo", gpus=k)
        fits = [f for f in oracle.fits(sched.infos, sched.ledger(), sched.request(w)).values() if f.fits]
        best = oracle.argmin(fits, "latency", tolerance=0.5)
        d = sched.run_one(w)
        check(d.status == "bound", f"{k}-GPU pod not scheduled: {d.message}")
        lat = {f.node: round(f.latency) for f in fits}
        wrong = sorted(set(d.top) - best)
        check(not wrong, f"{k}-GPU pod: top-scored nodes {wrong} have a best free set of mean pair latency "
                         f"{[lat.get(n) for n in wrong]} ns; {sorted(best)[:4]} have {lat.get(min(best))} ns",
              latencies=lat)
        if binder and d.node is not None:
            mine = next(h for h in sched.ledger().holds if h.key == d.pod)
            info = sched.info(d.node)
            got = average_latency(info.latency, mine.holding.gpus)
            want = next(f for f in fits if f.node == d.node)
            check(got <= want.latency + 0.5, f"{k}-GPU pod on {d.node} got GPUs {list(mine.holding.gpus)} "
                                             f"(mean pair latency {got:.0f} ns); {list(want.best_set)} were free "
                                             f"({want.latency:.0f} ns)")


@pytest.mark.requirement("SCHED-TOPO-002")
def test_tenant_pods_are_packed(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    g = max(len(i.gpus) for i in sched.gpu_nodes())
    sizes = [1, max(1, g // 4), 1, max(1, g // 2), 1, 2 if g >= 2 else 1]
    for n, k in enumerate(sizes):
        w = Workload(f"pack-{n}", tenant="pack", gpus=k)
        fits = [f for f in oracle.fits(sched.infos, sched.ledger(), sched.request(w)).values() if f.fits]
        closest = oracle.argmin(fits, "latency", tolerance=0.5)
        tight = oracle.argmin([f for f in fits if f.node in closest], "free_after")
        d = sched.run_one(w)
        check(d.status == "bound", f"pod {n} ({k} GPUs) not scheduled: {d.message}")
        wrong = sorted(set(d.top) - tight)
        left = {f.node: f.free_after for f in fits}
        check(not wrong, f"pod {n} ({k} GPUs): top-scored {wrong} would be left with "
                         f"{[left.get(x) for x in wrong]} free GPUs; {sorted(tight)[:4]} with "
                         f"{left.get(min(tight)) if tight else None}", free_after=left)


def _domains(infos: list[NodeInfo]) -> dict[str, list[NodeInfo]]:
    out: dict[str, list[NodeInfo]] = defaultdict(list)
    for i in infos:
        out[i.domain].append(i)
    return dict(out)


@pytest.mark.requirement("SCHED-TOPO-003")
def test_gang_in_one_nvlink_domain(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    infos = sched.gpu_nodes()
    domains = _domains(infos)
    g = max(len(i.gpus) for i in infos)
    k = max(1, g // 2)
    size = 2
    ordered = sorted(domains, key=lambda d: (-sum(len(i.gpus) for i in domains[d]), d))
    roomy = [d for d in ordered if sum(len(i.gpus) // k for i in domains[d]) >= size]
    check(bool(roomy), f"no NVLink domain of the profile holds {size} x {k} GPUs")
    keep = roomy[-1]
    # Every other domain keeps room for one member per node but not for the whole gang.
    for dom in ordered:
        if dom == keep:
            continue
        for info in domains[dom][: max(1, size - 1)]:
            held = [x.index for x in info.gpus][: max(0, len(info.gpus) - k)]
            if held:
                sched.fill(info.name, "gang", tuple(held))
        for info in domains[dom][max(1, size - 1):]:
            sched.fill(info.name, "gang", tuple(x.index for x in info.gpus))
    decisions = sched.run(Workload("job", tenant="gang", gpus=k, gang="job", gang_size=size))
    bound = [d for d in decisions if d.status == "bound"]
    where = {d.pod: (d.node, sched.info(str(d.node)).domain if d.node else None) for d in decisions}
    check(len(bound) == size, f"gang of {size} x {k} GPUs: {len(bound)} pods bound ({where}); domain {keep} holds it",
          placements=where)
    doms = {sched.info(str(d.node)).domain for d in bound}
    check(len(doms) == 1, f"gang spread over NVLink domains {sorted(doms)}: {where}", placements=where)


@pytest.mark.requirement("SCHED-TOPO-004")
def test_riscv_work_on_riscv_nodes(sched: SchedulerUnderTest, check: Callable[..., None]) -> None:
    infos = sched.gpu_nodes()
    for arch, ext in (("riscv64", "rv64imafdcvh"), ("amd64", "avx2")):
        allowed = {i.name for i in infos if i.arch == arch}
        for n in range(2):
            w = Workload(f"{arch}-only-{n}", tenant="arch", gpus=1, platforms=(f"linux/{arch}",),
                         isa=(ext,) if any(ext in i.isa for i in infos if i.arch == arch) else ())
            d = sched.run_one(w)
            if allowed:
                check(d.status == "bound" and d.node in allowed,
                      f"{arch}-only pod was {d.status} on {d.node}; {arch} nodes: {sorted(allowed)[:4]}: {d.message}")
            else:
                try:
                    where = sched.info(str(d.node)).arch
                except KeyError:
                    where = "?"
                check(d.status != "bound", f"{arch}-only pod bound to {d.node} ({where}); "
                                           f"the cluster has no {arch} node")


@pytest.mark.requirement("SCHED-TOPO-005")
def test_memory_bound_job_goes_where_memory_is_nearest(sched: SchedulerUnderTest,
                                                       check: Callable[..., None]) -> None:
    pooled = sorted((i for i in sched.gpu_nodes() if any(p.tier != "hbm" for p in i.pools)), key=lambda i: i.name)
    hbm = min(i.gpus[0].memory for i in sched.gpu_nodes())
    if len(pooled) < 2:
        d = sched.run_one(Workload("mem", tenant="mem", gpus=1, memory=hbm, memory_bound=True))
        check(d.status == "bound", f"a memory-bound pod within HBM was not scheduled: {d.message}")
        return
    a = pooled[0]
    near = min((p for p in a.pools if p.tier != "hbm"), key=lambda p: (p.latency_ns, p.name))
    far = [p for p in a.pools if p.tier != "hbm" and p.latency_ns > near.latency_ns]
    room = a.policy.admission_cap(near.available)
    # The nearest pool of node a is taken (by the same tenant: no isolation cost); the others keep theirs.
    sched.fill(a.name, "mem", (a.gpus[0].index,), priority=RESERVATION, name="near-full",
               grants={near.name: room}, memory=room)
    spill = min([room // 4] + [a.policy.burst_cap(p.available) // 2 for p in far]) if far else room // 4
    w = Workload("mem-bound", tenant="mem", gpus=1, memory=a.gpus[0].memory + spill, memory_bound=True)
    fits = [f for f in oracle.fits(sched.infos, sched.ledger(), sched.request(w)).values() if f.fits]
    nearest = oracle.argmin(fits, "remote", tolerance=1.0)
    d = sched.run_one(w)
    check(d.status == "bound", f"memory-bound pod not scheduled: {d.message}")
    pen = {f.node: round(f.remote) for f in fits}
    wrong = sorted(set(d.top) - nearest)
    check(not wrong, f"memory-bound pod: top-scored {wrong} would serve its {spill} pooled bytes at "
                     f"{[pen.get(x) for x in wrong]} ns (byte-weighted); {sorted(nearest)[:4]} at "
                     f"{pen.get(min(nearest)) if nearest else None} ns", remote_penalty_ns=pen)
