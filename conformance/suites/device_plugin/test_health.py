"""Health: every fault kind drives the right GPU Unhealthy within 5 s, other GPUs are unaffected, the faulty GPU
stays listed, non-fatal events do not count, and (recommended) healing brings it back within 10 s.

Faults are injected one at a time, each on its own GPU held by a running pod, so every message names the fault
and the GPU it hit; the GPUs rotate, so a plugin that marks a neighbour (or every GPU) is caught. A non-fatal
event is followed by a fatal "marker" fault on another GPU: once the marker shows, the plugin has seen the event
too, so the judgement waits for an event, not a timer. One module-level run of the faults is judged by each
requirement's check.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance import not_applicable
from conformance.suites.device_plugin.support import HEALTH_BOUND_S, RECOVERY_BOUND_S, PluginUnderTest
from testbed.kubelet.api import HEALTHY, UNHEALTHY
from testbed.kubelet.kubelet import DeviceUpdate, PluginTimeout, PluginViolation

Evidence = Callable[[str, Any], None]
SETTLE_S = 0.3
"""After a fault shows, how long other GPUs get to (wrongly) change too before the fault is healed."""
QUIET_AFTER_MARKER_S = 0.5
"""After the marker fault shows, how long a non-fatal event gets to (wrongly) show too."""
BUSY_LOOP_RATE = 50.0
"""Identical device lists per second above which the plugin is said to re-send its list in a loop."""


@dataclass(frozen=True)
class FaultCase:
    label: str
    kind: str
    params: dict[str, Any]
    requirement: str
    needs_nvlink: bool = False


FATAL = (
    FaultCase("Xid 48 (double-bit ECC)", "xid", {"code": 48}, "DP-HEALTH-001"),
    FaultCase("Xid 74 (NVLink error)", "xid", {"code": 74}, "DP-HEALTH-001"),
    FaultCase("Xid 79 (fallen off the bus)", "xid", {"code": 79}, "DP-HEALTH-001"),
    FaultCase("Xid 94 (contained ECC error)", "xid", {"code": 94}, "DP-HEALTH-001"),
    FaultCase("Xid 95 (uncontained ECC error)", "xid", {"code": 95}, "DP-HEALTH-001"),
    FaultCase("double-bit ECC errors", "ecc", {"type": "dbe", "count": 1}, "DP-HEALTH-001"),
    FaultCase("NVLink port down", "nvlink-down", {"link": 0}, "DP-HEALTH-001", needs_nvlink=True),
    FaultCase("fallen off the bus", "fallen-off-bus", {}, "DP-HEALTH-002"),
)
NON_FATAL = (
    FaultCase("thermal", "thermal", {"temperature_c": 92}, "DP-HEALTH-006"),
    FaultCase("power cap", "power-cap", {}, "DP-HEALTH-006"),
    FaultCase("single-bit ECC", "ecc", {"type": "sbe", "count": 3}, "DP-HEALTH-006"),
    FaultCase("NVLink error counters", "nvlink-errors", {"link": 0, "counter": "replay", "increment": 5},
              "DP-HEALTH-006", needs_nvlink=True),
)
MARKER = FATAL[0]


@dataclass
class Observation:
    """One fault on one GPU, from injection to recovery."""

    case: FaultCase
    gpu: str
    device: str
    injected: float
    unhealthy_after: float | None = None
    """Seconds from injection until the device was no longer Healthy (None: never within the bound)."""
    recovered_after: float | None = None
    recovery: str = ""
    """Why ``recovered_after`` is None: 'not waited: ...', 'never reported', or empty."""
    reported: list[str] = field(default_factory=list)
    """Health values the device had while faulty ("absent" when not listed)."""
    bystanders: list[str] = field(default_factory=list)
    """Other GPUs that changed while this fault was active: 'gpu3 (ID) Unhealthy'."""
    lists: int = 0
    """Device lists the plugin sent while the fault was active (identical repeats included)."""
    seconds: float = 0.0
    """How long the fault was active."""
    exited: str = ""
    """Set when the plugin exited while the fault was active."""

    @property
    def what(self) -> str:
        return f"{self.case.label} on {self.gpu}"

    def busy_loop(self) -> str:
        """'it re-sent its device list 12,000 times in 3.1 s' when the plugin sent lists in a loop."""
        if self.seconds > 0 and self.lists / self.seconds > BUSY_LOOP_RATE:
            return f"it re-sent its device list {self.lists:,} times in {self.seconds:.1f} s (a busy loop)"
        return ""


@dataclass
class HealthRun:
    fatal: list[Observation] = field(default_factory=list)
    non_fatal: list[Observation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_unrecovered: str = ""
    """The fault the plugin did not recover from (later faults were not waited for)."""
    error: PluginViolation | None = None
    """Why the faults could not run (raised by every check, so each fails cleanly with the reason)."""

    def ok(self) -> None:
        if self.error is not None:
            raise self.error

    def of(self, requirement: str) -> list[Observation]:
        self.ok()
        return [o for o in self.fatal + self.non_fatal if o.case.requirement == requirement]


def _params(plugin: PluginUnderTest, case: FaultCase, gpu: str) -> dict[str, Any]:
    if case.kind == "power-cap":
        model = plugin.node.gpu(gpu)
        assert model is not None
        return {"limit_w": model.sku.power.min_limit_w}
    return dict(case.params)


def _health(update: DeviceUpdate, device: str) -> str:
    d = update.by_id().get(device)
    return d.health if d is not None else "absent"


def _updates_since(plugin: PluginUnderTest, seq: int) -> list[DeviceUpdate]:
    return [u for u in plugin.kubelet.history(plugin.resource) if u.seq > seq]


def _received(plugin: PluginUnderTest) -> int:
    ep = plugin.kubelet.endpoints.get(plugin.resource)
    return ep.received if ep is not None else 0


class FaultRunner:
    """Injects one fault at a time and records what the plugin reported."""

    def __init__(self, plugin: PluginUnderTest, run: HealthRun):
        self.plugin = plugin
        self.run = run
        self.ids = {u: plugin.id_of(u) for u in plugin.units}

    def fatal(self, case: FaultCase, gpu: str) -> Observation:
        """Inject ``case`` on ``gpu``; wait until it shows (or the bound); heal; wait for recovery."""
        obs = Observation(case, gpu, self.ids[gpu], 0.0)
        with self._held(gpu):
            self.plugin.settle()
            seq, lists = self.plugin.kubelet.seq, _received(self.plugin)
            obs.injected = time.monotonic()
            fault = self._inject(gpu, case)
            self._wait(obs, seq)
            self._observe(obs, seq, lists, self._siblings(gpu))
            self._heal_and_recover(obs, [fault])
        self.plugin.reset()
        return obs

    def non_fatal(self, case: FaultCase, gpu: str, marker: str) -> Observation:
        """``case`` on ``gpu``, then a fatal marker fault on ``marker``: once the marker shows, the event has
        been seen too, so a plugin that reacts to it has reported it by then."""
        obs = Observation(case, gpu, self.ids[gpu], 0.0)
        mark = Observation(MARKER, marker, self.ids[marker], 0.0)
        with self._held(gpu), self._held(marker):
            self.plugin.settle()
            seq, lists = self.plugin.kubelet.seq, _received(self.plugin)
            obs.injected = time.monotonic()
            faults = [self._inject(gpu, case)]
            mark.injected = time.monotonic()
            faults.append(self._inject(marker, MARKER))
            self._wait(mark, seq)
            if mark.unhealthy_after is not None:
                time.sleep(QUIET_AFTER_MARKER_S)
            else:
                self.run.notes.append(f"{case.label}: the marker fault ({MARKER.label} on {marker}) was not "
                                      f"reported either, so the event had {HEALTH_BOUND_S:g} s to show")
            self._observe(obs, seq, lists, self._siblings(gpu) | self._siblings(marker))
            for f in faults:
                self.plugin.heal(f)
        self.plugin.reset()
        return obs

    def _inject(self, unit: str, case: FaultCase) -> str:
        """Inject on the GPU behind ``unit`` (a MIG device's fault is its GPU's)."""
        gpu = self.plugin.gpu_of(unit)
        return self.plugin.inject(gpu, case.kind, **_params(self.plugin, case, gpu))

    def _siblings(self, unit: str) -> set[str]:
        """Devices a fault on ``unit``'s GPU rightly affects: the device and other MIG devices of its GPU."""
        gpu = self.plugin.gpu_of(unit)
        return {u for u in self.ids if self.plugin.gpu_of(u) == gpu}

    @contextlib.contextmanager
    def _held(self, gpu: str) -> Iterator[None]:
        pod = self.plugin.new_pod("holder")
        self.plugin.admit_exact(pod, self.plugin.resource, [self.ids[gpu]])
        try:
            yield
        finally:
            self.plugin.kubelet.release(pod)

    def _wait(self, obs: Observation, seq: int) -> None:
        with contextlib.suppress(PluginTimeout):
            self.plugin.kubelet.wait_update(self.plugin.resource, lambda u: _health(u, obs.device) != HEALTHY,
                                            HEALTH_BOUND_S, f"{obs.what} reported", since=seq)
            time.sleep(SETTLE_S)

    def _observe(self, obs: Observation, seq: int, lists: int, faulty: set[str]) -> None:
        during = _updates_since(self.plugin, seq)
        bad = next((u for u in during if _health(u, obs.device) != HEALTHY), None)
        if bad is not None:
            obs.unhealthy_after = max(0.0, bad.time - obs.injected)
        obs.reported = sorted({_health(u, obs.device) for u in during})
        for gpu, dev in self.ids.items():
            if gpu in faulty:
                continue
            states = sorted({_health(u, dev) for u in during} - {HEALTHY})
            if states:
                obs.bystanders.append(f"{gpu} ({dev}) {'/'.join(states)}")
        obs.lists = _received(self.plugin) - lists
        obs.seconds = time.monotonic() - obs.injected
        death = self.plugin.note_death(f"while {obs.what} was active")
        if death is not None:
            obs.exited = death.describe()

    def _heal_and_recover(self, obs: Observation, faults: list[str]) -> None:
        seq = self.plugin.kubelet.seq
        healed = time.monotonic()
        for f in faults:
            self.plugin.heal(f)
        if obs.unhealthy_after is None:
            obs.recovery = "never reported, nothing to recover from"
            return
        if self.plugin.recovers is False:
            obs.recovery = f"not waited for: the plugin did not recover from {self.run.first_unrecovered}"
            return
        try:
            good = self.plugin.kubelet.wait_update(self.plugin.resource,
                                                   lambda u: _health(u, obs.device) == HEALTHY,
                                                   RECOVERY_BOUND_S, f"{obs.gpu} healthy after healing",
                                                   since=seq)
            obs.recovered_after = max(0.0, good.time - healed)
            self.plugin.recovers = True
        except PluginTimeout:
            obs.recovery = f"still not Healthy {RECOVERY_BOUND_S:g} s after healing"
            self.plugin.recovers = False
            self.run.first_unrecovered = obs.what


def _run_faults(plugin: PluginUnderTest) -> HealthRun:
    run = HealthRun()
    gpus = plugin.units
    nvlink = all(g.ports for g in plugin.node.gpus if g.name in plugin.physical(gpus))
    run.notes = [f"{c.label}: not applicable, {plugin.node.name} has no NVLink" for c in FATAL + NON_FATAL
                 if c.needs_nvlink and not nvlink]
    runner = FaultRunner(plugin, run)
    fatal = [c for c in FATAL if nvlink or not c.needs_nvlink]
    for i, case in enumerate(fatal):
        run.fatal.append(runner.fatal(case, gpus[i % len(gpus)]))
    # Non-fatal events on even GPUs, the marker on the odd GPU after each (a one-GPU node has no marker).
    non_fatal = [c for c in NON_FATAL if nvlink or not c.needs_nvlink]
    for i, case in enumerate(non_fatal):
        gpu = gpus[(2 * i) % len(gpus)]
        marker = gpus[(2 * i + 1) % len(gpus)]
        if marker == gpu:
            run.notes.append(f"{case.label}: {plugin.node.name} has one GPU, no marker; judged after "
                             f"{HEALTH_BOUND_S:g} s")
        run.non_fatal.append(runner.non_fatal(case, gpu, marker) if marker != gpu else runner.fatal(case, gpu))
    return run


@pytest.fixture(scope="module")
def faults(dp: PluginUnderTest) -> Iterator[HealthRun]:
    dp.check = "health faults"
    dp.reset()
    try:
        dp.require()
        results = _run_faults(dp)
    except PluginViolation as exc:
        results = HealthRun(error=exc)
    yield results
    dp.reset()


def _rows(obs: list[Observation]) -> list[dict[str, Any]]:
    return [{"fault": o.case.label, "gpu": o.gpu, "device": o.device,
             "unhealthy after s": None if o.unhealthy_after is None else round(o.unhealthy_after, 3),
             "healthy again after s": None if o.recovered_after is None else round(o.recovered_after, 3),
             **({"recovery": o.recovery} if o.recovery else {}),
             "reported": o.reported, "other GPUs that changed": o.bystanders,
             "device lists sent while faulty": o.lists, **({"plugin exited": o.exited} if o.exited else {})}
            for o in obs]


def _too_slow(obs: list[Observation]) -> list[str]:
    out = []
    for o in obs:
        if o.unhealthy_after is None or o.unhealthy_after > HEALTH_BOUND_S:
            why = f"; {o.exited}" if o.exited else ""
            out.append(f"{o.what}: still reported Healthy {HEALTH_BOUND_S:g} s later{why}")
    return out


@pytest.mark.requirement("DP-HEALTH-001")
def test_critical_xids_make_the_gpu_unhealthy(plugin: PluginUnderTest, faults: HealthRun,
                                              evidence: Evidence) -> None:
    obs = faults.of("DP-HEALTH-001")
    evidence("faults", _rows(obs))
    if faults.notes:
        evidence("notes", faults.notes)
    assert obs, "no fault was injected"
    problems = _too_slow(obs)
    assert not problems, "\n".join(problems)


@pytest.mark.requirement("DP-HEALTH-002")
def test_fallen_off_the_bus_makes_the_gpu_unhealthy(plugin: PluginUnderTest, faults: HealthRun,
                                                    evidence: Evidence) -> None:
    obs = faults.of("DP-HEALTH-002")
    evidence("faults", _rows(obs))
    assert obs, "no fault was injected"
    problems = _too_slow(obs)
    assert not problems, "\n".join(problems)


@pytest.mark.requirement("DP-HEALTH-003")
def test_healed_gpus_turn_healthy(plugin: PluginUnderTest, faults: HealthRun, evidence: Evidence) -> None:
    faults.ok()
    obs = [o for o in faults.fatal if o.unhealthy_after is not None]
    evidence("faults", _rows(faults.fatal))
    if not obs:
        not_applicable("the plugin reported no fault, so there was nothing to recover from (DP-HEALTH-001/002 "
                       "judge that)")
    problems = [f"{o.what}: {o.recovery}" for o in obs if o.recovered_after is None]
    assert not problems, "\n".join(problems)


@pytest.mark.requirement("DP-HEALTH-004")
def test_faults_change_only_the_faulty_gpu(plugin: PluginUnderTest, faults: HealthRun, evidence: Evidence) -> None:
    faults.ok()
    obs = faults.fatal + faults.non_fatal
    evidence("faults", _rows(obs))
    problems = []
    for o in obs:
        if o.bystanders:
            loop = o.busy_loop()
            others = len(plugin.units) - 1 - (o.case in NON_FATAL)
            which = (f"every other GPU ({len(o.bystanders)}) Unhealthy too" if len(o.bystanders) >= others > 1
                     else f"{', '.join(o.bystanders)} too")
            problems.append(f"{o.what}: the plugin also reported {which}" + (f"; {loop}" if loop else ""))
    assert not problems, "\n".join(problems)


@pytest.mark.requirement("DP-HEALTH-005")
def test_unhealthy_gpus_stay_listed(plugin: PluginUnderTest, faults: HealthRun, evidence: Evidence) -> None:
    faults.ok()
    obs = faults.fatal + faults.non_fatal
    evidence("faults", _rows(obs))
    gone = [f"{o.what}: device {o.device} disappeared from the list while faulty (held by a pod)"
            for o in obs if "absent" in o.reported]
    assert not gone, "\n".join(gone)
    renamed = [f"{o.what}: health values {o.reported}" for o in obs
               if set(o.reported) - {HEALTHY, UNHEALTHY, "absent"}]
    assert not renamed, "unknown health values: " + "; ".join(renamed)


@pytest.mark.requirement("DP-HEALTH-006")
def test_non_fatal_events_keep_the_gpu_healthy(plugin: PluginUnderTest, faults: HealthRun,
                                               evidence: Evidence) -> None:
    faults.ok()
    obs = faults.non_fatal
    evidence("non-fatal events", _rows(obs))
    if faults.notes:
        evidence("notes", faults.notes)
    if not obs:
        pytest.fail("no non-fatal event could be injected", pytrace=False)
    flagged = [f"{o.what}: reported {o.reported}" for o in obs if o.unhealthy_after is not None]
    assert not flagged, "\n".join(flagged)
