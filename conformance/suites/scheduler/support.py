"""The extender under test as the scheduler suite drives it: harness, process, fillers, checks with evidence."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from conformance import not_applicable
from fakehw.views.k8s import Holding, NodeInfo, PodRequest
from testbed.api import Testbed
from testbed.cluster import remove_tree_in_background
from testbed.extender.harness import SchedulingHarness, Workload, replicated_nodes
from testbed.extender.ledger import Ledger
from testbed.extender.process import START_TIMEOUT_S, DelayProxy, ExtenderProcess, ExtenderTarget
from testbed.extender.protocol import ExtenderConfig
from testbed.extender.scheduler import Decision

RESERVATION = 1000
"""Priority of the suite's reservations (the published reservedPriority)."""
LATENCY_BUDGET_S = 1.0
FLEET_NODES = 5000
"""Nodes of the cluster the latency requirement is also checked on: the largest cluster Kubernetes supports
("no more than 5,000 nodes", kubernetes.io/docs/setup/best-practices/cluster-large/). There an extender whose
decision compares every node with every other one (25 million pairs) is far past the budget, while one linear in
the nodes it is sent answers in milliseconds."""


@dataclass(frozen=True)
class SuiteOptions:
    target: ExtenderTarget
    profile: str
    nodes: int | None
    fuzz_examples: int = 12
    fuzz_steps: int = 10
    fuzz_seed: int | None = None
    fuzz_shrink: bool = True
    http_timeout: float = 5.0


def teardown(tb: Testbed, state: Path) -> None:
    """Tear the testbed down; its files (thousands per node) are deleted in the background, not charged to the run."""
    tb.down()
    remove_tree_in_background(state)


class CheckFailed(AssertionError):
    """A requirement is not met; the message says what the extender did."""


@dataclass
class Recorder:
    """Decisions of the current check, attached as evidence when it fails."""

    evidence: Callable[[str, Any], None]
    decisions: list[Decision] = field(default_factory=list)

    def check(self, ok: bool, message: str, **evidence: Any) -> None:
        if ok:
            return
        for label, value in evidence.items():
            self.evidence(label, value)
        if self.decisions:
            self.evidence("decisions", [d.evidence() for d in self.decisions[-6:]])
        raise CheckFailed(message)


class SchedulerUnderTest:
    """One harness (kube-scheduler + cluster API) and the extender process for a whole session."""

    def __init__(self, testbed: Testbed, options: SuiteOptions, workdir: Path):
        self.testbed = testbed
        self.options = options
        self.system = testbed.system
        self.harness = SchedulingHarness(self.system, testbed)
        self.workdir = workdir
        self.process = ExtenderProcess(options.target, self.harness.api_url, workdir / "extender.log")
        self.proxy: DelayProxy | None = None
        self.recorder: Recorder | None = None

    # ----------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self.process.start()
        self.configure()

    def stop(self) -> None:
        self.process.stop()
        if self.proxy is not None:
            self.proxy.stop()
        self.harness.close()

    def config(self, via_proxy: bool = False, **overrides: Any) -> ExtenderConfig:
        url = self.process.url
        if via_proxy:
            if self.proxy is None:
                self.proxy = DelayProxy(self.process.url)
            url = self.proxy.url
        overrides.setdefault("httpTimeout", f"{self.options.http_timeout}s")
        return self.options.target.config(url, **overrides)

    def configure(self, via_proxy: bool = False, **overrides: Any) -> ExtenderConfig:
        cfg = self.config(via_proxy, **overrides)
        self.harness.set_extenders([cfg])
        return cfg

    def reset(self) -> None:
        """Back to an empty, healthy cluster with the extender running and configured as given."""
        with contextlib.suppress(Exception):
            self.testbed.heal()
        self.harness.reset()
        self.harness.refresh_nodes()
        if self.proxy is not None:
            self.proxy.delays.clear()
        if self.options.target.managed and not self.process.alive:
            self.process.start()
        self.configure()

    @contextlib.contextmanager
    def fleet(self, nodes: int) -> Iterator[SchedulingHarness]:
        """A second cluster of ``nodes`` nodes (this testbed's, replicated) with a second process of the extender
        under test watching it; one node in ten already holds a pod bound by another scheduler."""
        harness = SchedulingHarness(self.system)
        process = ExtenderProcess(self.options.target, harness.api_url, self.workdir / "extender-fleet.log")
        try:
            harness.store.set_nodes(replicated_nodes(self.harness.store.nodes(), nodes), adopt=True)
            for i, name in enumerate(harness.store.node_names()[::10]):
                healthy = harness.node_info(name).healthy_gpus
                if not healthy:
                    continue
                (key,) = harness.submit(Workload(f"other-{i}", tenant=f"other{i % 3}", gpus=1))
                ns, pod = key.split("/")
                gpu = healthy[i % len(healthy)]
                harness.store.bind(ns, pod, name, Holding(name, (gpu,), {}, "burst").annotations())
            process.start(timeout=START_TIMEOUT_S * 4)
            harness.set_extenders([self.options.target.config(
                process.url, httpTimeout=f"{self.options.http_timeout}s")])
            yield harness
        finally:
            process.stop(kill=True)
            harness.close()

    def not_applicable(self, reason: str) -> NoReturn:
        """End the current check as not-applicable, saying why (see :func:`conformance.not_applicable`)."""
        not_applicable(reason)

    # ----------------------------------------------------------------------------------- cluster

    @property
    def infos(self) -> dict[str, NodeInfo]:
        """Every node (a new dict each time: use :meth:`info` for one)."""
        return self.harness.node_infos()

    def info(self, name: str) -> NodeInfo:
        """One node as a scheduler reads it (KeyError if the cluster has no such node); cheaper than ``infos``."""
        return self.harness.node_info(name)

    def gpu_nodes(self) -> list[NodeInfo]:
        return [i for i in self.infos.values() if i.gpus]

    def ledger(self) -> Ledger:
        return self.harness.ledger()

    def run(self, workload: Workload) -> list[Decision]:
        decisions = self.harness.run(workload)
        if self.recorder is not None:
            self.recorder.decisions.extend(decisions)
        return decisions

    def run_one(self, workload: Workload) -> Decision:
        (d,) = self.run(workload)
        return d

    def fill(self, node: str, tenant: str, gpus: tuple[int, ...], priority: int = 0, name: str | None = None,
             grants: dict[str, int] | None = None, memory: int = 0) -> str:
        """A pod bound by someone else (another scheduler, an earlier run): the extender must see it via the API."""
        reservation = priority >= RESERVATION
        w = Workload(name or f"fill-{node}-{len(self.harness.store.pods())}", tenant=tenant, gpus=len(gpus),
                     priority=priority, memory=memory)
        (key,) = self.harness.submit(w)
        ns, name_ = key.split("/")
        holding = Holding(node, gpus, grants or {}, "reservation" if reservation else "burst")
        outcome = self.harness.store.bind(ns, name_, node, holding.annotations())
        assert outcome.code < 300, outcome.message
        return key

    def request(self, workload: Workload) -> PodRequest:
        return PodRequest.from_pod(workload.pod("probe"))
