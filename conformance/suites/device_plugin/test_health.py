"""Health: every fault kind drives the right GPU Unhealthy within 5 s, healing brings it back within 10 s, other
GPUs are unaffected, the faulty GPU stays listed, and non-fatal events do not count.

Faults are injected in waves on every other GPU (so a plugin that marks the neighbour is caught), each faulty GPU
held by a running pod. One module-level run of the waves is judged by each requirement's check.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance.suites.device_plugin.support import HEALTH_BOUND_S, RECOVERY_BOUND_S, PluginUnderTest
from testbed.kubelet.api import HEALTHY, UNHEALTHY
from testbed.kubelet.kubelet import DeviceUpdate, PluginTimeout, PluginViolation

Evidence = Callable[[str, Any], None]
QUIET_AFTER_MARKER_S = 0.5
"""After the marker fault shows, how long non-fatal faults get to (wrongly) show too."""


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


@dataclass
class Observation:
    case: FaultCase
    gpu: str
    device: str
    injected: float
    unhealthy_after: float | None = None
    """Seconds from injection until the device was no longer Healthy (None: never within the bound)."""
    recovered_after: float | None = None
    healed: float = 0.0
    reported: list[str] = field(default_factory=list)
    """Health values the device had during the wave ("absent" when not listed)."""


@dataclass
class WaveResults:
    fatal: list[Observation] = field(default_factory=list)
    non_fatal: list[Observation] = field(default_factory=list)
    bystanders: list[str] = field(default_factory=list)
    """Problems with GPUs that had no fault: 'gpu3 (ID) was Unhealthy while Xid 48 hit gpu2'."""
    notes: list[str] = field(default_factory=list)
    error: PluginViolation | None = None
    """Why the waves could not run (raised by every check, so each fails cleanly with the reason)."""

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


def _run_wave(plugin: PluginUnderTest, cases: list[tuple[FaultCase, str]], results: WaveResults,
              marker: str | None = None) -> list[Observation]:
    """Inject ``cases`` (fault, GPU), wait for them to show (or the bound), heal, wait for recovery."""
    kubelet = plugin.kubelet
    ids = {g.name: plugin.id_of(g.name) for g in plugin.node.gpus}
    targets = {gpu for _, gpu in cases} | ({marker} if marker else set())
    for gpu in sorted(targets):
        plugin.admit_exact(plugin.new_pod("holder"), plugin.resource, [ids[gpu]])
    seq = kubelet.seq
    obs = []
    faults = []
    for case, gpu in cases:
        obs.append(Observation(case, gpu, ids[gpu], time.monotonic()))
        faults.append(plugin.inject(gpu, case.kind, **_params(plugin, case, gpu)))
    marker_obs = None
    if marker is not None:
        marker_obs = Observation(FATAL[0], marker, ids[marker], time.monotonic())
        faults.append(plugin.inject(marker, "xid", code=48))
    watched = [marker_obs] if marker_obs is not None else obs
    try:
        kubelet.wait_update(plugin.resource, lambda u: all(_health(u, o.device) != HEALTHY for o in watched),
                            HEALTH_BOUND_S, "faulty GPUs reported", since=seq)
        if marker_obs is not None:
            time.sleep(QUIET_AFTER_MARKER_S)
    except PluginTimeout:
        pass
    during = _updates_since(plugin, seq)
    for o in [*obs, *([marker_obs] if marker_obs else [])]:
        bad = next((u for u in during if _health(u, o.device) != HEALTHY), None)
        if bad is not None:
            o.unhealthy_after = max(0.0, bad.time - o.injected)
        o.reported = sorted({_health(u, o.device) for u in during})
    for gpu, dev in ids.items():
        if gpu in targets:
            continue
        for u in during:
            if _health(u, dev) != HEALTHY:
                what = ", ".join(f"{c.label} on {g}" for c, g in cases)
                results.bystanders.append(f"{gpu} ({dev}) was {_health(u, dev)} while {what}")
                break
    # Heal and wait for recovery.
    seq = kubelet.seq
    healed = time.monotonic()
    for f in faults:
        plugin.heal(f)
    for o in obs:
        o.healed = healed
    with contextlib.suppress(PluginTimeout):
        kubelet.wait_update(plugin.resource, lambda u: all(_health(u, o.device) == HEALTHY for o in obs),
                            RECOVERY_BOUND_S, "healed GPUs back", since=seq)
    after = _updates_since(plugin, seq)
    for o in obs:
        if o.unhealthy_after is None:
            # Never reported: there was nothing to recover from (judged by DP-HEALTH-001/002, not here).
            latest = kubelet.endpoint(plugin.resource).latest
            o.recovered_after = 0.0 if latest is not None and _health(latest, o.device) == HEALTHY else None
            continue
        good = next((u for u in after if _health(u, o.device) == HEALTHY), None)
        o.recovered_after = None if good is None else max(0.0, good.time - healed)
    for pod in sorted({a.pod for a in kubelet.checkpoint.assignments if a.pod.startswith("holder")}):
        kubelet.release(pod)
    plugin.reset()
    return obs


def _waves(plugin: PluginUnderTest) -> WaveResults:
    results = WaveResults()
    gpus = [g.name for g in plugin.node.gpus]
    nvlink = all(g.ports for g in plugin.node.gpus)
    fatal = [c for c in FATAL if nvlink or not c.needs_nvlink]
    non_fatal = [c for c in NON_FATAL if nvlink or not c.needs_nvlink]
    results.notes = [f"{c.label}: not applicable, {plugin.node.name} has no NVLink"
                     for c in FATAL + NON_FATAL if c.needs_nvlink and not nvlink]
    # Faults go to every other GPU (alternating per wave); the GPUs between them must stay Healthy.
    pending = list(fatal)
    wave = 0
    while pending:
        slots = [g for i, g in enumerate(gpus) if i % 2 == wave % 2] or gpus[:1]
        cases = [(pending.pop(0), gpu) for gpu in slots if pending]
        results.fatal += _run_wave(plugin, cases, results)
        wave += 1
    # Non-fatal events on even GPUs, then a marker fault on an odd GPU: once the marker shows, the earlier events
    # have been seen too, so a plugin that reacts to them would have reported it by then.
    slots = [g for i, g in enumerate(gpus) if i % 2 == 0]
    marker = next((g for i, g in enumerate(gpus) if i % 2 == 1), None)
    pending = list(non_fatal)
    while pending:
        cases = [(pending.pop(0), gpu) for gpu in slots if pending]
        results.non_fatal += _run_wave(plugin, cases, results, marker=marker)
    return results


@pytest.fixture(scope="module")
def waves(dp: PluginUnderTest) -> Iterator[WaveResults]:
    dp.reset()
    try:
        dp.require()
        results = _waves(dp)
    except PluginViolation as exc:
        results = WaveResults(error=exc)
    yield results
    dp.reset()


def _rows(obs: list[Observation]) -> list[dict[str, Any]]:
    return [{"fault": o.case.label, "gpu": o.gpu, "device": o.device,
             "unhealthy after s": None if o.unhealthy_after is None else round(o.unhealthy_after, 3),
             "healthy again after s": None if o.recovered_after is None else round(o.recovered_after, 3),
             "reported": o.reported} for o in obs]


def _too_slow(obs: list[Observation]) -> list[str]:
    return [f"{o.case.label} on {o.gpu}: still reported Healthy {HEALTH_BOUND_S:g} s later" for o in obs
            if o.unhealthy_after is None or o.unhealthy_after > HEALTH_BOUND_S]


@pytest.mark.requirement("DP-HEALTH-001")
def test_critical_xids_make_the_gpu_unhealthy(plugin: PluginUnderTest, waves: WaveResults,
                                              evidence: Evidence) -> None:
    obs = waves.of("DP-HEALTH-001")
    evidence("faults", _rows(obs))
    if waves.notes:
        evidence("not applicable here", waves.notes)
    assert obs, "no fault was injected"
    problems = _too_slow(obs)
    assert not problems, "\n".join(problems)


@pytest.mark.requirement("DP-HEALTH-002")
def test_fallen_off_the_bus_makes_the_gpu_unhealthy(plugin: PluginUnderTest, waves: WaveResults,
                                                    evidence: Evidence) -> None:
    obs = waves.of("DP-HEALTH-002")
    evidence("faults", _rows(obs))
    assert obs, "no fault was injected"
    problems = _too_slow(obs)
    assert not problems, "\n".join(problems)


@pytest.mark.requirement("DP-HEALTH-003")
def test_healed_gpus_turn_healthy(plugin: PluginUnderTest, waves: WaveResults, evidence: Evidence) -> None:
    waves.ok()
    obs = waves.fatal
    evidence("faults", _rows(obs))
    problems = [f"{o.case.label} on {o.gpu}: not Healthy {RECOVERY_BOUND_S:g} s after healing" for o in obs
                if o.recovered_after is None or o.recovered_after > RECOVERY_BOUND_S]
    assert not problems, "\n".join(problems)


@pytest.mark.requirement("DP-HEALTH-004")
def test_faults_change_only_the_faulty_gpu(plugin: PluginUnderTest, waves: WaveResults, evidence: Evidence) -> None:
    waves.ok()
    evidence("faults", _rows(waves.fatal))
    if waves.bystanders:
        evidence("GPUs without a fault that changed", waves.bystanders)
    assert not waves.bystanders, "\n".join(waves.bystanders[:8])


@pytest.mark.requirement("DP-HEALTH-005")
def test_unhealthy_gpus_stay_listed(plugin: PluginUnderTest, waves: WaveResults, evidence: Evidence) -> None:
    waves.ok()
    obs = waves.fatal + waves.non_fatal
    evidence("faults", _rows(obs))
    gone = [f"{o.case.label} on {o.gpu}: device {o.device} disappeared from the list while faulty (held by a pod)"
            for o in obs if "absent" in o.reported]
    assert not gone, "\n".join(gone)
    renamed = [o for o in obs if o.reported and set(o.reported) - {HEALTHY, UNHEALTHY, "absent"}]
    assert not renamed, f"unknown health values: {[o.reported for o in renamed]}"


@pytest.mark.requirement("DP-HEALTH-006")
def test_non_fatal_events_keep_the_gpu_healthy(plugin: PluginUnderTest, waves: WaveResults,
                                               evidence: Evidence) -> None:
    waves.ok()
    obs = waves.non_fatal
    evidence("non-fatal events", _rows(obs))
    if not obs:
        pytest.fail("no non-fatal event could be injected", pytrace=False)
    flagged = [f"{o.case.label} on {o.gpu}: reported {o.reported}" for o in obs if o.unhealthy_after is not None]
    assert not flagged, "\n".join(flagged)
