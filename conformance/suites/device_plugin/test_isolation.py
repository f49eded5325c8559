"""Isolation fuzz: a hypothesis state machine over allocate, free, fault, heal and restarts across tenants.

Each isolation requirement runs its own machine (same rules, its own invariant), so a plugin is judged per
requirement and a failure is shrunk to the shortest sequence that breaks that one property. Every run prints its
seed; ``--dp-fuzz-seed N`` replays it. Budget: ``--dp-fuzz-examples`` runs of ``--dp-fuzz-steps`` steps each.

Rules (tenants a, b, c): admit a pod with 1-4 GPUs or a slice of a memory pool; end a pod; inject a fatal fault
(Xid 48, Xid 94, off the bus) on a GPU; heal one; kill and restart the plugin; restart the kubelet; and "fault,
then a big job" (a fault followed by a pod that asks for every available GPU).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conformance.suites.device_plugin.support import HEALTH_BOUND_S, POOL_PREFIX, PluginUnderTest
from testbed.kubelet.api import HEALTHY, pb
from testbed.kubelet.exposure import Exposure
from testbed.kubelet.kubelet import AdmissionRefused, Assignment, PluginTimeout, PluginViolation, RpcFailed

Evidence = Callable[[str, Any], None]
TENANTS = ("tenant-a", "tenant-b", "tenant-c")
FAULTS: tuple[tuple[str, dict[str, Any]], ...] = (("xid", {"code": 48}), ("xid", {"code": 94}), ("fallen-off-bus", {}))

ISO_DISJOINT = "DP-ISO-001"
ISO_NO_UNHEALTHY = "DP-ISO-002"
ISO_EXACT = "DP-ISO-003"
ISO_TOKENS = "DP-ISO-004"


@dataclass
class Live:
    tenant: str
    assignment: Assignment
    gpus: frozenset[str]
    """Model GPUs the allocation was given (empty for pool allocations)."""
    exposure: Exposure | None
    token: str | None


def _machine(put: PluginUnderTest, check: str, stats: dict[str, int]) -> type[RuleBasedStateMachine]:
    gpus = [g.name for g in put.node.gpus]
    pools = sorted(r for r in put.kubelet.endpoints if r.startswith(POOL_PREFIX))
    ids = put.baseline_identities()
    device_of = {gpu: dev for dev, gpu in ids.items()}

    class Isolation(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            put.reset()
            self.live: dict[str, Live] = {}
            self.ended: list[Live] = []
            self.faults: dict[str, tuple[str, str]] = {}
            """fault id -> (GPU, kind)"""
            self.n = 0

        # ------------------------------------------------------------------------------------ helpers

        def _faulty(self) -> set[str]:
            return {gpu for gpu, _ in self.faults.values()}

        def _admit(self, tenant: str, resource: str, count: int) -> None:
            self.n += 1
            pod = f"{tenant}-{self.n}"
            try:
                a = put.kubelet.admit(pod, "main", resource, count)
            except (AdmissionRefused, RpcFailed):
                return  # the kubelet would not start this pod; nothing was handed out
            if resource == put.resource:
                names = frozenset(put.identify(d) for d in a.device_ids)
                response = a.response_message()
                live = Live(tenant, a, names, put.expose(response), None)
                self._check_new_gpu_allocation(live, response)
            else:
                tokens = list(put.expose(a.response_message()).tokens)
                live = Live(tenant, a, frozenset(), None, tokens[0] if tokens else None)
                self._check_new_pool_allocation(live, tokens)
            self.live[pod] = live

        def _check_new_gpu_allocation(self, live: Live, response: pb.ContainerAllocateResponse) -> None:
            if check == ISO_TOKENS:
                assert live.exposure is not None
                assert not live.exposure.tokens, f"{live.assignment.pod}: a GPU allocation carries pool tokens"
            if check == ISO_NO_UNHEALTHY:
                bad = sorted(live.gpus & self._faulty())
                assert not bad, (f"{live.assignment.pod} was given {bad}, which have had a fatal fault for at least "
                                 f"{HEALTH_BOUND_S:g} s")
            if check == ISO_EXACT:
                ex = live.exposure
                assert ex is not None
                for channel, got in ex.channels().items():
                    assert not got or got == live.gpus, (
                        f"{live.assignment.pod} was given {sorted(live.gpus)} but its {channel} expose {sorted(got)}")
                assert ex.all == live.gpus, f"{live.assignment.pod} was given {sorted(live.gpus)} but sees " \
                                            f"{sorted(ex.all)}"
                assert not ex.unknown, f"{live.assignment.pod}: {list(ex.unknown)}"
                seen, lost = put.nvml_view(response)
                assert seen <= live.gpus and len(seen) + lost == len(live.gpus), (
                    f"{live.assignment.pod} was given {sorted(live.gpus)}; NVML inside its container shows "
                    f"{sorted(seen)}" + (f" and {lost} GPUs off the bus" if lost else ""))

        def _check_new_pool_allocation(self, live: Live, tokens: list[str]) -> None:
            if check != ISO_TOKENS:
                return
            pod = live.assignment.pod
            assert len(set(tokens)) == 1, f"{pod}: expected one pool token in the answer, found {len(set(tokens))}"
            token = tokens[0]
            others = [o for o in [*self.live.values(), *self.ended] if o.token == token]
            assert not others, (f"{pod} ({live.tenant}) got the token already handed to "
                                f"{others[0].assignment.pod} ({others[0].tenant})")
            pool = put.pools[live.assignment.resource].name
            agent = put.testbed.agent(put.node.name)
            mapping = agent.map_pool(put.node.name, pool, token, "conformance-fuzz")
            agent.unmap_pool(str(mapping["id"]), token)
            # Tokens of ended pods whose capacity this pod now holds must no longer open anything.
            for old in self.ended:
                if old.assignment.resource != live.assignment.resource or old.token is None:
                    continue
                if not set(old.assignment.device_ids) & set(live.assignment.device_ids):
                    continue
                try:
                    m = agent.map_pool(put.node.name, pool, old.token, "conformance-fuzz")
                except Exception:
                    continue  # refused, as it must be
                agent.unmap_pool(str(m["id"]), old.token)
                raise AssertionError(f"the token of ended pod {old.assignment.pod} ({old.tenant}) still opens pool "
                                     f"{pool} memory although its devices now belong to {pod} ({live.tenant})")

        def _wait_reported(self, gpu: str) -> None:
            device = device_of[gpu]
            # After the bound the fault is "known" whether or not the plugin reported it.
            with contextlib.suppress(PluginTimeout):
                put.kubelet.wait_update(put.resource, lambda u: u.health(device) != HEALTHY, HEALTH_BOUND_S,
                                        f"fault on {gpu} reported")

        # ------------------------------------------------------------------------------------ rules

        @initialize()
        def opening(self) -> None:
            """Every run starts from a busy node: tenants a and b hold a GPU (and a slice of every pool); then a
            GPU fails and tenant c asks for every GPU that is still available. The random steps follow."""
            for tenant in TENANTS[:2]:
                self._admit(tenant, put.resource, 1)
                for resource in pools:
                    if resource in put.kubelet.endpoints and put.kubelet.available(resource):
                        self._admit(tenant, resource, 1)
            self.fault_then_big_job(TENANTS[2], gpus[-1])

        @rule(tenant=st.sampled_from(TENANTS), count=st.integers(1, 4))
        def allocate_gpus(self, tenant: str, count: int) -> None:
            available = len(put.kubelet.available(put.resource))
            if available:
                self._admit(tenant, put.resource, min(count, available))

        @precondition(lambda self: bool(pools))
        @rule(tenant=st.sampled_from(TENANTS), which=st.integers(0, 7), count=st.integers(1, 2))
        def allocate_pool(self, tenant: str, which: int, count: int) -> None:
            resource = pools[which % len(pools)]
            if resource in put.kubelet.endpoints:
                available = len(put.kubelet.available(resource))
                if available:
                    self._admit(tenant, resource, min(count, available))

        @precondition(lambda self: bool(self.live))
        @rule(data=st.data())
        def free(self, data: st.DataObject) -> None:
            pod = data.draw(st.sampled_from(sorted(self.live)), label="pod")
            put.kubelet.release(pod)
            self.ended.append(self.live.pop(pod))

        @rule(gpu=st.sampled_from(gpus), which=st.integers(0, len(FAULTS) - 1))
        def fault(self, gpu: str, which: int) -> None:
            if gpu in self._faulty():
                return
            kind, params = FAULTS[which]
            self.faults[put.inject(gpu, kind, **params)] = (gpu, kind)
            if check == ISO_NO_UNHEALTHY:
                self._wait_reported(gpu)

        @precondition(lambda self: bool(self.faults))
        @rule(data=st.data())
        def heal(self, data: st.DataObject) -> None:
            fault = data.draw(st.sampled_from(sorted(self.faults)), label="fault")
            put.heal(fault)
            del self.faults[fault]

        @rule(tenant=st.sampled_from(TENANTS), gpu=st.sampled_from(gpus))
        def fault_then_big_job(self, tenant: str, gpu: str) -> None:
            if gpu not in self._faulty():
                self.faults[put.inject(gpu, "xid", code=48)] = (gpu, "xid")
                self._wait_reported(gpu)
            available = len(put.kubelet.available(put.resource))
            if available:
                self._admit(tenant, put.resource, available)

        @rule(what=st.sampled_from(["plugin", "kubelet"]))
        def restart(self, what: str) -> None:
            """Kill and restart the plugin, or restart the kubelet (one rule: restarts are the slow steps)."""
            if what == "plugin":
                put.restart(kill=True, downtime=0.1)
            else:
                self._restart_kubelet()

        def _restart_kubelet(self) -> None:
            if put.reregisters is False:
                # Known not to register again (judged by DP-REG-004): restart it with the kubelet, as an operator
                # would, instead of waiting for it every time.
                put.kubelet.restart(0.1)
                put.restart(kill=True)
            else:
                try:
                    put.restart_kubelet(downtime=0.1)
                    put.reregisters = True
                except PluginTimeout:
                    put.reregisters = False
                    put.restart(kill=True)
            deadline = time.monotonic() + 5.0
            while pools and not set(pools) <= set(put.kubelet.endpoints) and time.monotonic() < deadline:
                time.sleep(0.05)

        # ------------------------------------------------------------------------------------ invariants

        @invariant()
        def disjoint(self) -> None:
            stats["steps"] = stats.get("steps", 0) + 1  # invariants run after every step
            if check != ISO_DISJOINT:
                return
            seen: dict[str, str] = {}
            for pod, live in sorted(self.live.items()):
                if live.exposure is None:
                    continue
                for gpu in sorted(live.exposure.all | live.gpus):
                    assert gpu not in seen, (f"{gpu} is exposed to {seen[gpu]} and to {pod} ({live.tenant}) at "
                                             "the same time")
                    seen[gpu] = f"{pod} ({live.tenant})"

        def teardown(self) -> None:
            for fault in list(self.faults):
                with contextlib.suppress(Exception):  # the agent may be restarting; reset() heals all anyway
                    put.heal(fault)

    Isolation.__name__ = f"Isolation_{check.replace('-', '_')}"
    return Isolation


def run_fuzz(put: PluginUnderTest, check: str, evidence: Evidence) -> None:
    put.require()
    options = put.options
    seed = options.fuzz_seed if options.fuzz_seed is not None else random.randrange(2**32)
    evidence("seed", seed)
    phases = [Phase.generate, *([Phase.shrink] if options.fuzz_shrink else [])]
    config = settings(max_examples=options.fuzz_examples, stateful_step_count=options.fuzz_steps, deadline=None,
                      database=None, phases=phases, suppress_health_check=list(HealthCheck), derandomize=False,
                      report_multiple_bugs=False, print_blob=False)
    from hypothesis.stateful import get_state_machine_test

    stats: dict[str, int] = {}
    test = hypothesis.seed(seed)(get_state_machine_test(_machine(put, check, stats), settings=config))
    lines: list[str] = []

    def report(value: object) -> None:
        lines.append(str(value))

    started = time.monotonic()
    try:
        with with_reporter(report):
            test()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        # Hypothesis reports the shrunk steps through its reporter and as notes on the exception.
        sequence = [line for line in [*lines, *getattr(exc, "__notes__", [])] if line.strip()]
        evidence("falsifying sequence", "\n".join(sequence))
        if isinstance(exc, PluginViolation):
            evidence(exc.check, exc.evidence)
        message = str(getattr(exc, "message", None) or exc).strip()
        pytest.fail(f"{message}\n\nFalsifying sequence (seed {seed}; replay with --dp-fuzz-seed {seed}):\n"
                    + "\n".join(sequence), pytrace=False)
    finally:
        evidence("budget", {"examples": options.fuzz_examples, "steps per example": options.fuzz_steps,
                            "steps run": stats.get("steps", 0), "seconds": round(time.monotonic() - started, 2)})
        put.reset()


@pytest.mark.requirement(ISO_DISJOINT)
def test_no_gpu_in_two_live_allocations(plugin: PluginUnderTest, evidence: Evidence) -> None:
    run_fuzz(plugin, ISO_DISJOINT, evidence)


@pytest.mark.requirement(ISO_NO_UNHEALTHY)
def test_no_unhealthy_gpu_newly_allocated(plugin: PluginUnderTest, evidence: Evidence) -> None:
    run_fuzz(plugin, ISO_NO_UNHEALTHY, evidence)


@pytest.mark.requirement(ISO_EXACT)
def test_each_allocation_sees_exactly_its_gpus(plugin: PluginUnderTest, evidence: Evidence) -> None:
    run_fuzz(plugin, ISO_EXACT, evidence)


@pytest.mark.requirement(ISO_TOKENS)
def test_pool_tokens_never_leak(plugin: PluginUnderTest, evidence: Evidence) -> None:
    if not plugin.pools:
        evidence("applicability", f"{plugin.node.name} has no memory pools; the machine runs without pool rules and "
                                  "checks that no GPU allocation carries a pool token")
    run_fuzz(plugin, ISO_TOKENS, evidence)
