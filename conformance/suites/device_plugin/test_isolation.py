"""Isolation fuzz: a hypothesis state machine over allocate, free, fault, heal and restarts across tenants.

One campaign judges the four isolation requirements at once: every run checks every requirement not yet failed.
When a requirement fails, hypothesis shrinks the run to the shortest sequence that still breaks it, the
requirement is failed with that sequence (as the steps the harness took and what the plugin answered), and the
campaign goes on with the remaining budget for the others. The seed is fixed by default
(:data:`DEFAULT_SEED`, recorded in the report), so a run is reproducible; ``--dp-fuzz-seed N`` picks another.
Budget: ``--dp-fuzz-examples`` runs of ``--dp-fuzz-steps`` steps.

Rules (tenants a, b, c): admit a pod with 1-4 GPUs or a slice of a memory pool; end a pod; inject a fatal fault
(a double-bit ECC error, Xid 94, off the bus) on a GPU; heal one; kill and restart the plugin; restart the
kubelet; and "fault, then a big job" (a fault followed by a pod that asks for every available GPU). Draws are
indices into the machine's own lists, so replaying a run draws the same steps whatever the plugin answers.

What the fuzz does not judge: a plugin that exits, does not come back or hangs is restarted, as an operator
would (healing the GPUs it cannot start with, if need be), and the campaign carries on; those events are
DP-CHAOS-005's and the allocation checks'. A run in which the plugin cannot be brought back is discarded.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, Unsatisfiable
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test, initialize, invariant, rule

from conformance import not_applicable
from conformance.suites.device_plugin.support import DEFAULT_SEED, HEALTH_BOUND_S, POOL_PREFIX, PluginUnderTest
from testbed.kubelet.api import HEALTHY, pb
from testbed.kubelet.exposure import Exposure
from testbed.kubelet.kubelet import AdmissionRefused, Assignment, PluginTimeout, PluginViolation, RpcFailed

Evidence = Callable[[str, Any], None]
TENANTS = ("tenant-a", "tenant-b", "tenant-c")
FAULTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("a double-bit ECC error (Xid 48)", "ecc", {"type": "dbe", "count": 1}),
    ("Xid 94", "xid", {"code": 94}),
    ("off the bus", "fallen-off-bus", {}),
)
SHRINK_BUDGET_S = 90.0
"""Seconds shrinking may take per failure; after that the sequence found so far is reported."""

ISO_DISJOINT = "DP-ISO-001"
ISO_NO_UNHEALTHY = "DP-ISO-002"
ISO_EXACT = "DP-ISO-003"
ISO_TOKENS = "DP-ISO-004"
ISOLATION = (ISO_DISJOINT, ISO_NO_UNHEALTHY, ISO_EXACT, ISO_TOKENS)


class Breach(AssertionError):
    """An isolation requirement broke. Raised from one place per requirement (hypothesis tells failures apart
    by where they are raised, so a shrink never turns one requirement's failure into another's)."""

    def __init__(self, requirement: str, message: str):
        super().__init__(message)
        self.requirement = requirement
        self.message = message


def _breach_disjoint(message: str) -> NoReturn:
    raise Breach(ISO_DISJOINT, message)


def _breach_unhealthy(message: str) -> NoReturn:
    raise Breach(ISO_NO_UNHEALTHY, message)


def _breach_exact(message: str) -> NoReturn:
    raise Breach(ISO_EXACT, message)


def _breach_tokens(message: str) -> NoReturn:
    raise Breach(ISO_TOKENS, message)


@dataclass
class Live:
    tenant: str
    assignment: Assignment
    gpus: frozenset[str]
    """Model GPUs the allocation was given (empty for pool allocations)."""
    exposure: Exposure | None
    token: str | None


@dataclass
class Fault:
    gpu: str
    label: str
    step: int
    reported: bool = False
    """The plugin reported the GPU not Healthy within the bound."""
    restarted: int | None = None
    """Step at which the plugin or the kubelet first restarted while this fault lasted."""

    def story(self) -> str:
        if not self.reported:
            return f"the plugin did not report it within {HEALTH_BOUND_S:g} s"
        if self.restarted is not None:
            return (f"the plugin reported it, then restarted (step {self.restarted}: plugin or kubelet restart) "
                    "and listed the GPU Healthy again")
        return "the plugin reported it, then listed it Healthy again although the fault lasted"


@dataclass
class Outcome:
    """What the campaign found for one requirement."""

    requirement: str
    failure: str = ""
    sequence: list[str] = field(default_factory=list)
    flaky: bool = False
    judged: int = 0
    """Allocations (or states) the requirement's check looked at."""
    runs: int = 0
    """Runs that ended with the requirement still being checked and not broken."""


@dataclass
class Campaign:
    """The fuzz over the session's plugin, run once (module fixture) and judged per requirement."""

    put: PluginUnderTest
    active: set[str]
    seed: int
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    """Steps of the run in progress: what the harness did and what the plugin answered."""
    failing_log: list[str] = field(default_factory=list)
    """Steps of the latest run that broke a requirement."""
    examples: int = 0
    discarded: list[str] = field(default_factory=list)
    steps: int = 0
    recoveries: list[str] = field(default_factory=list)
    first_failure: float | None = None
    seconds: float = 0.0
    unexercised: str = ""

    def __post_init__(self) -> None:
        for req in ISOLATION:
            self.outcomes[req] = Outcome(req)

    last_breach: Breach | None = None
    breached_run: int = 0

    def note(self, line: str) -> None:
        self.log.append(line)

    def failed(self, breach: Breach) -> None:
        """A run broke a requirement: keep its steps (the last one hypothesis runs is the shrunk sequence)."""
        self.failing_log = list(self.log)
        self.last_breach = breach
        self.breached_run = self.examples
        if self.first_failure is None:
            self.first_failure = time.monotonic()


def _gpu_faults(put: PluginUnderTest) -> list[str]:
    """Devices (GPUs, or MIG devices with the single strategy) the fuzz allocates and faults (a MIG device's
    fault is its GPU's): those the GPU resource listed when the plugin came up."""
    listed = set(put.baseline_identities().values())
    return [u for u in put.units if u in listed]


_GPUS = st.runner().flatmap(lambda machine: st.sampled_from(machine.gpus))
"""A device of the machine running the rule (``st.runner()``: the state machine itself, hypothesis's docs)."""


class IsolationFuzz(RuleBasedStateMachine):
    """The fuzz's rules, checks and invariants over one campaign; :func:`_machine` binds a campaign to it."""

    campaign: ClassVar[Campaign]
    put: ClassVar[PluginUnderTest]
    gpus: ClassVar[list[str]]
    """Devices the fuzz allocates and faults (:func:`_gpu_faults`)."""
    pools: ClassVar[list[str]]
    """Pool resources the plugin serves at the start."""
    device_of: ClassVar[dict[str, str]]
    """The device ID the plugin lists for each of :attr:`gpus`."""

    def __init__(self) -> None:
        super().__init__()
        self.campaign.examples += 1
        self.campaign.log = []
        self.live: dict[str, Live] = {}
        self.ended: list[Live] = []
        self.faults: dict[str, Fault] = {}
        self.n = 0
        self.step = 0
        self._guard("reset", self.put.reset)

    # ------------------------------------------------------------------------------------ plumbing

    def _on(self, requirement: str) -> bool:
        return requirement in self.campaign.active

    def _begin(self, text: str) -> None:
        self.step += 1
        self.campaign.steps += 1
        if self.campaign.first_failure is not None and time.monotonic() - self.campaign.first_failure > SHRINK_BUDGET_S:
            hypothesis.reject()  # shrinking ran out of time: the sequence found so far is reported
        self.campaign.note(f"{self.step}. {text}")

    def _guard(self, what: str, action: Callable[[], None]) -> None:
        """Run a step; a plugin that exits, hangs or fails to come back is recovered from, not judged."""
        try:
            action()
        except Breach as breach:
            self.campaign.failed(breach)
            raise
        except PluginViolation as exc:
            self._recover(what, exc)

    def _recover(self, what: str, exc: PluginViolation) -> None:
        """Bring the plugin back as an operator would: restart it; if it cannot start, heal the GPUs that
        are off the bus and restart again; if that fails too, discard this run."""
        self.put.note_death(f"isolation fuzz: {what}", exc.message)
        self.campaign.note(f"   the plugin failed ({exc.message[:160]}); restarting it")
        self.campaign.recoveries.append(f"{what}: {exc.message[:200]}")
        try:
            self.put.restart(kill=True, during="restart by the isolation fuzz")
            self._restarted()
            return
        except PluginViolation:
            pass
        lost = [fid for fid, f in self.faults.items() if f.label == "off the bus"]
        for fid in lost:
            with contextlib.suppress(Exception):
                self.put.heal(fid)
            self.campaign.note(f"   healed {self.faults.pop(fid).gpu} (off the bus) so the plugin can start")
        try:
            self.put.restart(kill=True, during="restart by the isolation fuzz after healing")
            self._restarted()
        except PluginViolation as again:
            self.campaign.discarded.append(f"the plugin could not be brought back: {again.message[:200]}")
            hypothesis.reject()

    def _restarted(self) -> None:
        for f in self.faults.values():
            if f.restarted is None:
                f.restarted = self.step

    def _faulty(self) -> dict[str, Fault]:
        """Devices whose GPU has a fault."""
        by_gpu = {f.gpu: f for f in self.faults.values()}
        return {u: by_gpu[self.put.gpu_of(u)] for u in self.gpus if self.put.gpu_of(u) in by_gpu}

    def _admit(self, tenant: str, resource: str, count: int) -> None:
        self.n += 1
        pod = f"{tenant}-{self.n}"
        try:
            a = self.put.kubelet.admit(pod, "main", resource, count)
        except (AdmissionRefused, RpcFailed) as exc:
            self.campaign.note(f"   {pod}: {count} x {resource} not admitted ({str(exc)[:120]})")
            return  # the kubelet would not start this pod; nothing was handed out
        if resource == self.put.resource:
            names = frozenset(self.put.identify(d) for d in a.device_ids)
            response = a.response_message()
            live = Live(tenant, a, names, self.put.expose(response), None)
            self.campaign.note(f"   {pod} ({tenant}) got {', '.join(sorted(names))}")
            self.live[pod] = live
            self._check_gpu_allocation(live, response)
            if self._on(ISO_DISJOINT):
                self._check_disjoint()  # at once too: a later step may end one of the pods
        else:
            tokens = list(self.put.expose(a.response_message()).tokens)
            live = Live(tenant, a, frozenset(), None, tokens[0] if tokens else None)
            self.campaign.note(f"   {pod} ({tenant}) got {', '.join(a.device_ids)} of {resource}")
            self.live[pod] = live
            self._check_pool_allocation(live, tokens)

    # ------------------------------------------------------------------------------------ checks

    def _check_gpu_allocation(self, live: Live, response: pb.ContainerAllocateResponse) -> None:
        pod = f"{live.assignment.pod} ({live.tenant})"
        if self._on(ISO_TOKENS) and live.exposure is not None and live.exposure.tokens:
            _breach_tokens(f"{pod}: a GPU allocation carries pool tokens {list(live.exposure.tokens)}")
        if self._on(ISO_NO_UNHEALTHY):
            faulty = self._faulty()
            for gpu in sorted(live.gpus & set(faulty)):
                f = faulty[gpu]
                _breach_unhealthy(f"{pod} was given {gpu}, which has had {f.label} since step {f.step} (at "
                                  f"least {HEALTH_BOUND_S:g} s before): {f.story()}")
        if self._on(ISO_EXACT):
            self.campaign.outcomes[ISO_EXACT].judged += 1
            self._check_exact(pod, live, response)

    def _check_exact(self, pod: str, live: Live, response: pb.ContainerAllocateResponse) -> None:
        ex = live.exposure
        assert ex is not None
        for channel, got in ex.channels().items():
            if got and got != live.gpus:
                _breach_exact(f"{pod} was given {sorted(live.gpus)} but its {channel} expose {sorted(got)}")
        if ex.all != live.gpus:
            _breach_exact(f"{pod} was given {sorted(live.gpus)} but sees {sorted(ex.all)}")
        if ex.unknown:
            _breach_exact(f"{pod}: {list(ex.unknown)}")
        seen, lost = self.put.nvml_view(response)
        physical = self.put.physical(live.gpus)
        if not (seen <= physical and len(seen) + lost == len(physical)):
            _breach_exact(f"{pod} was given {sorted(live.gpus)}; NVML inside its container shows "
                          f"{sorted(seen)}" + (f" and {lost} GPUs off the bus" if lost else ""))

    def _check_pool_allocation(self, live: Live, tokens: list[str]) -> None:
        if not self._on(ISO_TOKENS):
            return
        self.campaign.outcomes[ISO_TOKENS].judged += 1
        pod = f"{live.assignment.pod} ({live.tenant})"
        if len(set(tokens)) != 1:
            _breach_tokens(f"{pod}: expected one pool token in the answer, found {len(set(tokens))}")
        token = tokens[0]
        others = [o for o in [*self.live.values(), *self.ended] if o.token == token and o is not live]
        if others:
            _breach_tokens(f"{pod} got the token already handed to {others[0].assignment.pod} "
                           f"({others[0].tenant})")
        pool = self.put.pools[live.assignment.resource].name
        agent = self.put.testbed.agent(self.put.node.name)
        try:
            mapping = agent.map_pool(self.put.node.name, pool, token, "conformance-fuzz")
        except Exception as exc:
            _breach_tokens(f"{pod}: the node refuses its own token for pool {pool}: {exc}")
        agent.unmap_pool(str(mapping["id"]), token)
        # Tokens of ended pods whose capacity this pod now holds must no longer open anything.
        for old in self.ended:
            if old.assignment.resource != live.assignment.resource or old.token is None:
                continue
            if not set(old.assignment.device_ids) & set(live.assignment.device_ids):
                continue
            try:
                m = agent.map_pool(self.put.node.name, pool, old.token, "conformance-fuzz")
            except Exception:
                continue  # refused, as it must be
            agent.unmap_pool(str(m["id"]), old.token)
            _breach_tokens(f"the token of ended pod {old.assignment.pod} ({old.tenant}) still opens pool "
                           f"{pool} memory although its devices now belong to {pod}")

    def _inject(self, gpu: str, which: int) -> str:
        label, kind, params = FAULTS[which]
        fid = self.put.inject(self.put.gpu_of(gpu), kind, **params)
        fault = self.faults[fid] = Fault(self.put.gpu_of(gpu), label, self.step)
        device = self.device_of[gpu]
        # After the bound the fault is "known" whether or not the plugin reported it.
        with contextlib.suppress(PluginTimeout):
            self.put.kubelet.wait_update(self.put.resource, lambda u: u.health(device) != HEALTHY, HEALTH_BOUND_S,
                                    f"{label} on {gpu} reported")
            fault.reported = True
        return fid

    # ------------------------------------------------------------------------------------ rules

    @initialize()
    def opening(self) -> None:
        """Every run starts from a busy node: tenants a and b hold a GPU (and a slice of every pool); a GPU
        gets a double-bit ECC error; the plugin restarts while it lasts; tenant c asks for every GPU that
        is still available. The random steps follow."""
        self._begin("tenants a and b take a GPU and a slice of every pool each")
        for tenant in TENANTS[:2]:
            self._guard("admit", functools.partial(self._admit, tenant, self.put.resource, 1))
            for resource in self.pools:
                self._guard("admit", functools.partial(self._admit_pool, tenant, resource, 1))
        held = {g for live in self.live.values() for g in live.gpus}
        victim = next((g for g in reversed(self.gpus) if g not in held), None)
        if victim is None:  # a small node: tenant b's pod ends, so its GPU is the one that breaks
            b = max((p for p, live in self.live.items() if live.tenant == TENANTS[1] and live.gpus), default=None)
            victim = sorted(self.live[b].gpus)[0] if b else self.gpus[-1]
            if b:
                self._begin(f"{b} ends")
                self.put.kubelet.release(b)
                self.ended.append(self.live.pop(b))
        self._begin(f"{FAULTS[0][0]} on {victim}, then the plugin is killed and restarted")
        self._guard("fault", lambda: self._fault_and_restart(victim))
        self._begin("tenant-c asks for every available GPU")
        self._guard("big job", lambda: self._big_job(TENANTS[2]))

    def _fault_and_restart(self, victim: str) -> None:
        self._inject(victim, 0)
        self.put.restart(kill=True, downtime=0.1, during="restart by the isolation fuzz")
        self._restarted()

    def _attempt(self) -> int:
        """A pod asks for GPUs: how many are available. Asking while a GPU is faulty is a judgement for
        DP-ISO-002 whatever the answer (none available because the faulty GPU is not offered is right)."""
        if self._faulty():
            self.campaign.outcomes[ISO_NO_UNHEALTHY].judged += 1
        return len(self.put.kubelet.available(self.put.resource))

    def _big_job(self, tenant: str) -> None:
        available = self._attempt()
        if available:
            self._admit(tenant, self.put.resource, available)

    def _admit_pool(self, tenant: str, resource: str, count: int) -> None:
        if resource in self.put.kubelet.endpoints:
            available = len(self.put.kubelet.available(resource))
            if available:
                self._admit(tenant, resource, min(count, available))

    @rule(tenant=st.sampled_from(TENANTS), count=st.integers(1, 4))
    def allocate_gpus(self, tenant: str, count: int) -> None:
        self._begin(f"{tenant} asks for {count} GPU(s)")

        def admit() -> None:
            available = self._attempt()
            if available:
                self._admit(tenant, self.put.resource, min(count, available))

        self._guard("admit", admit)

    @rule(tenant=st.sampled_from(TENANTS), which=st.integers(0, 7), count=st.integers(1, 2))
    def allocate_pool(self, tenant: str, which: int, count: int) -> None:
        if not self.pools:
            return
        resource = self.pools[which % len(self.pools)]
        self._begin(f"{tenant} asks for {count} slice(s) of {resource.removeprefix(POOL_PREFIX)}")
        self._guard("admit", lambda: self._admit_pool(tenant, resource, count))

    @rule(which=st.integers(0, 63))
    def free(self, which: int) -> None:
        if not self.live:
            return
        pod = sorted(self.live)[which % len(self.live)]
        self._begin(f"{pod} ends")
        self.put.kubelet.release(pod)
        self.ended.append(self.live.pop(pod))

    @rule(gpu=_GPUS, which=st.integers(0, len(FAULTS) - 1))
    def fault(self, gpu: str, which: int) -> None:
        if gpu in self._faulty():
            return
        self._begin(f"{FAULTS[which][0]} on {gpu}")

        def inject() -> None:
            self._inject(gpu, which)

        self._guard("fault", inject)

    @rule(which=st.integers(0, 63))
    def heal(self, which: int) -> None:
        if not self.faults:
            return
        fid = sorted(self.faults)[which % len(self.faults)]
        f = self.faults.pop(fid)
        self._begin(f"{f.gpu} healed ({f.label})")
        self.put.heal(fid)

    @rule(tenant=st.sampled_from(TENANTS), gpu=_GPUS)
    def fault_then_big_job(self, tenant: str, gpu: str) -> None:
        self._begin(f"{FAULTS[0][0]} on {gpu}, then {tenant} asks for every available GPU")

        def act() -> None:
            if gpu not in self._faulty():
                self._inject(gpu, 0)
            self._big_job(tenant)

        self._guard("fault and big job", act)

    @rule(what=st.sampled_from(["plugin", "kubelet"]))
    def restart(self, what: str) -> None:
        """Kill and restart the plugin, or restart the kubelet (one rule: restarts are the slow steps)."""
        self._begin(f"the {what} restarts")
        self._guard(f"{what} restart", self._restart_plugin if what == "plugin" else self._restart_kubelet)

    def _restart_plugin(self) -> None:
        self.put.restart(kill=True, downtime=0.1, during="restart by the isolation fuzz")
        self._restarted()

    def _restart_kubelet(self) -> None:
        if self.put.reregisters is False:
            # Known not to register again (judged by DP-REG-004): restart it with the kubelet, as an operator
            # would, instead of waiting for it every time.
            self.put.kubelet.restart(0.1)
            self.put.restart(kill=True, during="restart by the isolation fuzz")
        else:
            try:
                self.put.restart_kubelet(downtime=0.1)
                self.put.reregisters = True
            except PluginTimeout:
                self.put.reregisters = False
                self.put.restart(kill=True, during="restart by the isolation fuzz")
        self._restarted()

    # ------------------------------------------------------------------------------------ invariants

    @invariant()
    def disjoint(self) -> None:
        if not self._on(ISO_DISJOINT):
            return
        try:
            self._check_disjoint()
        except Breach as breach:
            self.campaign.failed(breach)
            raise

    def _check_disjoint(self) -> None:
        seen: dict[str, str] = {}
        gpu_pods = [(pod, live) for pod, live in sorted(self.live.items()) if live.exposure is not None]
        self.campaign.outcomes[ISO_DISJOINT].judged += len(gpu_pods) >= 2
        for pod, live in gpu_pods:
            assert live.exposure is not None
            for gpu in sorted(live.exposure.all | live.gpus):
                if gpu in seen:
                    _breach_disjoint(f"{gpu} is exposed to {seen[gpu]} and to {pod} ({live.tenant}) at the "
                                     "same time")
                seen[gpu] = f"{pod} ({live.tenant})"

    def teardown(self) -> None:
        if self.campaign.last_breach is None or self.campaign.breached_run != self.campaign.examples:
            for req in self.campaign.active:
                self.campaign.outcomes[req].runs += 1
        for fid in list(self.faults):
            with contextlib.suppress(Exception):  # the agent may be restarting; reset() heals all anyway
                self.put.heal(fid)


def _machine(campaign: Campaign) -> type[IsolationFuzz]:
    """:class:`IsolationFuzz` bound to ``campaign`` (hypothesis runs a class, so the campaign is a class value)."""
    put = campaign.put
    return type("Isolation", (IsolationFuzz,), {
        "campaign": campaign, "put": put, "gpus": _gpu_faults(put),
        "pools": sorted(put.serving_pools_at_start),
        "device_of": {gpu: dev for dev, gpu in put.baseline_identities().items()},
    })


def _find_breach(exc: BaseException) -> Breach | None:
    if isinstance(exc, Breach):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _find_breach(inner)
        if found is not None:
            return found
    return _find_breach(exc.__cause__) if exc.__cause__ is not None else None


def _round(campaign: Campaign, examples: int, seed: int) -> BaseException | None:
    options = campaign.put.options
    phases = [Phase.generate, *([Phase.shrink] if options.fuzz_shrink else [])]
    config = settings(max_examples=examples, stateful_step_count=options.fuzz_steps, deadline=None,
                      database=None, phases=phases, suppress_health_check=list(HealthCheck), derandomize=False,
                      report_multiple_bugs=False, print_blob=False)
    test = hypothesis.seed(seed)(get_state_machine_test(_machine(campaign), settings=config))
    campaign.first_failure = None
    campaign.last_breach = None
    try:
        test()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a breach, or hypothesis telling that it could not replay one
        return exc
    return None


def run_campaign(put: PluginUnderTest, active: set[str]) -> Campaign:
    """Fuzz until every requirement in ``active`` failed or the budget is spent."""
    options = put.options
    seed = options.fuzz_seed if options.fuzz_seed is not None else DEFAULT_SEED
    campaign = Campaign(put, set(active), seed)
    started = time.monotonic()
    budget = options.fuzz_examples
    # Each requirement gets the whole budget of runs in which it is checked to the end: a run cut short by
    # another requirement's failure does not count for it. Bounded: one round per requirement, plus one.
    for round_no in range(len(ISOLATION) + 1):
        short = budget - min((campaign.outcomes[r].runs for r in campaign.active), default=budget)
        if short <= 0:
            break
        exc = _round(campaign, short, seed + round_no)
        if exc is None:
            continue
        breach = _find_breach(exc) or (campaign.last_breach if isinstance(exc, Flaky) else None)
        if breach is None:
            if isinstance(exc, Unsatisfiable):
                campaign.unexercised = ("every run was discarded: the plugin could not be kept running "
                                        f"({'; '.join(campaign.discarded[-2:])})")
                break
            raise exc
        outcome = campaign.outcomes[breach.requirement]
        outcome.failure = breach.message
        outcome.sequence = list(campaign.failing_log or campaign.log)
        outcome.flaky = isinstance(exc, Flaky)
        campaign.active.discard(breach.requirement)
    campaign.seconds = time.monotonic() - started
    put.reset()
    return campaign


def _judge(campaign: Campaign, requirement: str, evidence: Evidence, what: str) -> None:
    outcome = campaign.outcomes[requirement]
    evidence("seed", campaign.seed)
    evidence("budget", {"examples": campaign.put.options.fuzz_examples,
                        "steps per example": campaign.put.options.fuzz_steps, "runs": campaign.examples,
                        "steps run": campaign.steps, "seconds": round(campaign.seconds, 2),
                        f"{what} judged": outcome.judged})
    if campaign.recoveries:
        evidence("plugin failures recovered from (judged by DP-CHAOS-005)", campaign.recoveries[-10:])
    if campaign.discarded:
        evidence("runs discarded", campaign.discarded[-5:])
    if outcome.failure:
        evidence("failing sequence", outcome.sequence)
        replay = f"seed {campaign.seed}; replay with --dp-fuzz-seed {campaign.seed}"
        flaky = ("\n(this did not happen again when hypothesis replayed the sequence: the plugin's answers depend "
                 "on timing)" if outcome.flaky else "")
        pytest.fail(f"{outcome.failure}{flaky}\n\nFailing sequence ({replay}):\n" + "\n".join(outcome.sequence),
                    pytrace=False)
    if campaign.unexercised and not outcome.judged:
        pytest.fail(f"the isolation fuzz could not exercise {requirement}: {campaign.unexercised}", pytrace=False)
    if not outcome.judged:
        pytest.fail(f"the isolation fuzz never got to judge {requirement}: no {what} happened in "
                    f"{campaign.examples} runs (see the failing allocation checks)", pytrace=False)


@pytest.fixture(scope="module")
def campaign(dp: PluginUnderTest) -> Iterator[Campaign | PluginViolation]:
    dp.check = "isolation fuzz"
    dp.reset()
    try:
        dp.require()
    except PluginViolation as exc:
        yield exc
        return
    active = set(ISOLATION)
    if dp.pools_not_applicable() is not None:
        active.discard(ISO_TOKENS)
    yield run_campaign(dp, active)
    dp.reset()


def _campaign(value: Campaign | PluginViolation) -> Campaign:
    if isinstance(value, PluginViolation):
        raise value
    return value


@pytest.mark.requirement(ISO_DISJOINT)
def test_no_gpu_in_two_live_allocations(plugin: PluginUnderTest, campaign: Campaign | PluginViolation,
                                        evidence: Evidence) -> None:
    _judge(_campaign(campaign), ISO_DISJOINT, evidence, "states with two or more GPU pods")


@pytest.mark.requirement(ISO_NO_UNHEALTHY)
def test_no_unhealthy_gpu_newly_allocated(plugin: PluginUnderTest, campaign: Campaign | PluginViolation,
                                          evidence: Evidence) -> None:
    _judge(_campaign(campaign), ISO_NO_UNHEALTHY, evidence, "allocations made while a GPU was faulty")


@pytest.mark.requirement(ISO_EXACT)
def test_each_allocation_sees_exactly_its_gpus(plugin: PluginUnderTest, campaign: Campaign | PluginViolation,
                                               evidence: Evidence) -> None:
    _judge(_campaign(campaign), ISO_EXACT, evidence, "GPU allocations")


@pytest.mark.requirement(ISO_TOKENS)
def test_pool_tokens_never_leak(plugin: PluginUnderTest, campaign: Campaign | PluginViolation,
                                evidence: Evidence) -> None:
    reason = plugin.pools_not_applicable()
    if reason is not None:
        not_applicable(reason)
    _judge(_campaign(campaign), ISO_TOKENS, evidence, "pool allocations")
