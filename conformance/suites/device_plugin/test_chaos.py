"""Chaos: the plugin killed under load, the kubelet restarted mid-stream, a GPU lost between the preferred
allocation and Allocate, and the node's hardware agent restarted."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from conformance.suites.device_plugin.support import (
    HEALTH_BOUND_S,
    POOL_PREFIX,
    REREGISTER_BOUND_S,
    PluginUnderTest,
    run_load,
)
from fakehw.polling import wait_until
from testbed.kubelet.api import HEALTHY, to_json
from testbed.kubelet.kubelet import Assignment, PluginViolation, RpcFailed

Evidence = Callable[[str, Any], None]
LOAD_RESUME_S = 10.0


@contextmanager
def load(plugin: PluginUnderTest) -> Iterator[dict[str, Any]]:
    """Pods admitted and released in the background while the block runs."""
    stop = threading.Event()
    errors: list[str] = []
    counts: dict[str, Any] = {}
    worker = threading.Thread(target=run_load, args=(plugin, stop, errors, counts), daemon=True)
    worker.start()
    state: dict[str, Any] = {"counts": counts, "errors": errors}
    try:
        yield state
    finally:
        stop.set()
        worker.join(plugin.options.timeouts.rpc * 3 + 5)
        state["hung"] = worker.is_alive()


def _keep(plugin: PluginUnderTest) -> list[tuple[Assignment, str | None]]:
    """Allocations that must survive: one GPU pod, and one per memory pool (with its token)."""
    out: list[tuple[Assignment, str | None]] = [(plugin.kubelet.admit("keep-gpu", "main", plugin.resource, 1), None)]
    for resource in sorted(r for r in plugin.kubelet.endpoints if r.startswith(POOL_PREFIX)):
        a = plugin.kubelet.admit(f"keep-{resource.rsplit('.', 1)[-1]}", "main", resource, 1)
        tokens = plugin.expose(a.response_message()).tokens
        out.append((a, tokens[0] if tokens else None))
    return out


def _check_kept(plugin: PluginUnderTest, kept: list[tuple[Assignment, str | None]]) -> list[str]:
    problems = []
    agent = plugin.testbed.agent(plugin.node.name)
    for a, token in kept:
        ep = plugin.kubelet.endpoints.get(a.resource)
        listed = {d.id: d.health for d in ep.latest.devices} if ep is not None and ep.latest else {}
        missing = [d for d in a.device_ids if d not in listed]
        if missing:
            problems.append(f"{a.pod}: its {a.resource} devices {missing} are no longer listed")
        if token is not None and a.resource in plugin.pools:
            pool = plugin.pools[a.resource].name
            try:
                mapping = agent.map_pool(plugin.node.name, pool, token, "conformance-probe")
                agent.unmap_pool(str(mapping["id"]), token)
            except Exception as exc:
                problems.append(f"{a.pod}: its {pool} token stopped working: {exc}")
    return problems


@pytest.mark.requirement("DP-CHAOS-001")
def test_plugin_killed_under_load(plugin: PluginUnderTest, evidence: Evidence) -> None:
    ids = sorted(plugin.latest_ids())
    kept = _keep(plugin)
    with load(plugin) as state:
        wait_until(lambda: state["counts"].get("ok", 0) >= 2, 5.0)
        started = time.monotonic()
        plugin.restart(kill=True, downtime=0.3)
        took = time.monotonic() - started
        state["counts"]["mark"] = True
        resumed = wait_until(lambda: state["counts"].get("after", 0) >= 2, LOAD_RESUME_S)
    evidence("restart", {"seconds": round(took, 3), "load": dict(state["counts"]),
                         "errors while down": state["errors"][-5:]})
    assert not state["hung"], "a call hung past its deadline while the plugin restarted"
    after = sorted(plugin.latest_ids())
    assert after == ids, f"the restarted plugin lists other devices: {sorted(set(ids) ^ set(after))}"
    problems = _check_kept(plugin, kept)
    assert not problems, "\n".join(problems)
    assert resumed, f"pods could not be admitted within {LOAD_RESUME_S:g} s after the restart: " \
                    f"{state['errors'][-1:]}"


@pytest.mark.requirement("DP-CHAOS-002")
def test_kubelet_restart_mid_stream_under_load(plugin: PluginUnderTest, evidence: Evidence) -> None:
    ids = sorted(plugin.latest_ids())
    kept = _keep(plugin)
    with load(plugin) as state:
        wait_until(lambda: state["counts"].get("ok", 0) >= 2, 5.0)
        started = time.monotonic()
        plugin.restart_kubelet()
        took = time.monotonic() - started
        state["counts"]["mark"] = True
        resumed = wait_until(lambda: state["counts"].get("after", 0) >= 2, LOAD_RESUME_S)
    evidence("kubelet restart", {"re-registered after s": round(took, 3), "load": dict(state["counts"])})
    assert not state["hung"], "a call hung past its deadline across the kubelet restart"
    for resource in {a.resource for a, _ in kept}:
        plugin.kubelet.wait_endpoint(resource, 0, REREGISTER_BOUND_S)
    after = sorted(plugin.latest_ids())
    assert after == ids, f"after re-registering the plugin lists other devices: {sorted(set(ids) ^ set(after))}"
    problems = _check_kept(plugin, kept)
    assert not problems, "\n".join(problems)
    assert resumed, f"pods could not be admitted within {LOAD_RESUME_S:g} s after the restart"


@pytest.mark.requirement("DP-CHAOS-003")
def test_gpu_lost_between_preferred_allocation_and_allocate(plugin: PluginUnderTest, evidence: Evidence) -> None:
    plugin.require()
    available = plugin.kubelet.available(plugin.resource)
    size = min(2, len(available))
    _request, response = plugin.kubelet.preferred(plugin.resource, available, size)
    chosen = list(response.container_responses[0].deviceIDs) if response.container_responses else []
    chosen = [d for d in chosen if d in available][:size] or available[:size]
    victim = plugin.identify(chosen[0])
    seq = plugin.kubelet.seq
    plugin.inject(plugin.gpu_of(victim), "fallen-off-bus")
    try:
        answer = plugin.kubelet.allocate(plugin.resource, [chosen])
    except RpcFailed as exc:
        evidence("Allocate refused", {"devices": chosen, "lost": victim, "status": exc.code.name,
                                      "details": exc.details})
        return
    finally:
        _let_the_report_land(plugin, chosen[0], seq)
    evidence("Allocate answer", {"devices": chosen, "lost": victim, "response": to_json(answer)})
    pytest.fail(f"Allocate handed out {victim} ({chosen[0]}), which fell off the bus after the preferred "
                "allocation", pytrace=False)


def _let_the_report_land(plugin: PluginUnderTest, device: str, seq: int) -> None:
    """Wait (at most :data:`HEALTH_BOUND_S`, not judged) for the plugin to list ``device`` as not Healthy, so
    that this check's fault is reported within it and not as a change for nothing in the next one."""
    with contextlib.suppress(PluginViolation):
        plugin.kubelet.wait_update(plugin.resource, lambda u: u.health(device) != HEALTHY, HEALTH_BOUND_S,
                                   f"{device} off the bus reported", since=seq)


@pytest.mark.requirement("DP-CHAOS-004")
def test_agent_restart(plugin: PluginUnderTest, evidence: Evidence) -> None:
    ids = sorted(plugin.latest_ids())
    kept = _keep(plugin)
    seq = plugin.kubelet.seq
    started = time.monotonic()
    plugin.restart_agent()
    took = time.monotonic() - started
    time.sleep(1.0)  # give a plugin that reacts badly a moment to show it
    after = sorted(plugin.latest_ids())
    assert after == ids, f"after the agent restart the plugin lists other devices: {sorted(set(ids) ^ set(after))}"
    flipped = [f"{d.id} reported {d.health}" for u in plugin.kubelet.history(plugin.resource) if u.seq > seq
               for d in u.devices if d.health != HEALTHY]
    assert not flipped, f"GPUs changed health although nothing happened to them: {sorted(set(flipped))}"
    problems = _check_kept(plugin, kept)
    assert not problems, "\n".join(problems)
    # Faults that happen after the restart are still seen. (Whether healing counts is DP-HEALTH-003's.)
    gpu = plugin.units[-1]
    device = plugin.id_of(gpu)
    fault = plugin.inject(plugin.gpu_of(gpu), "xid", code=48)
    try:
        plugin.kubelet.wait_update(plugin.resource, lambda u: u.health(device) != HEALTHY, HEALTH_BOUND_S,
                                   f"Xid 48 on {gpu} after the agent restart reported")
    finally:
        plugin.heal(fault)
    holders = {a.resource: a.pod for a, _ in kept}
    for resource in sorted(r for r in plugin.kubelet.endpoints if r.startswith(POOL_PREFIX)):
        if not plugin.kubelet.available(resource):  # a one-device pool: its kept pod ends to make room
            plugin.kubelet.release(holders[resource])
        a = plugin.kubelet.admit(plugin.new_pod("after-agent"), "main", resource, 1)
        if not plugin.expose(a.response_message()).tokens:
            raise PluginViolation("pool-token", f"{resource}: no token after the agent restart", a.response)
    evidence("agent restart", {"seconds": round(took, 3)})


@pytest.mark.requirement("DP-CHAOS-005")
def test_plugin_stays_up(plugin: PluginUnderTest, evidence: Evidence) -> None:
    """Judged last (the suite's conftest orders it so): a kubelet restart while a GPU is off the bus, plus every
    time the plugin exited on its own or did not come back during the whole session."""
    plugin.require()
    lost = plugin.units[-1]
    device = plugin.id_of(lost)
    seq = plugin.kubelet.seq
    fault = plugin.inject(plugin.gpu_of(lost), "fallen-off-bus")
    try:
        _let_the_report_land(plugin, device, seq)
        plugin.check = f"{plugin.check} (kubelet restart while {lost} is off the bus)"
        with contextlib.suppress(PluginViolation):  # not registering again is DP-REG-004's; exiting is ours
            plugin.restart_kubelet()
        plugin.note_death("after a kubelet restart while a GPU was off the bus")
    finally:
        plugin.heal(fault)
    deaths = list(plugin.deaths)
    evidence("plugin exits", [d.to_json() for d in deaths] or "none: the plugin ran through every check")
    if deaths:
        pytest.fail("\n".join(d.describe() for d in deaths), pytrace=False)
