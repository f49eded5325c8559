"""Registration: version, resource names, endpoint, options, and registering again after a kubelet restart."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from conformance.suites.device_plugin.support import REREGISTER_BOUND_S, PluginUnderTest
from testbed.kubelet.api import VERSION, to_json
from testbed.kubelet.checks import resource_name_problems
from testbed.kubelet.kubelet import PluginViolation

Evidence = Callable[[str, Any], None]


def _registrations(plugin: PluginUnderTest) -> list[Any]:
    regs = list(plugin.kubelet.registrations)
    if not regs:
        raise PluginViolation("no-registration", "the plugin never called Register",
                              {"plugin log": plugin.log_tail()})
    return regs


@pytest.mark.requirement("DP-REG-001")
def test_registers_with_v1beta1(plugin: PluginUnderTest, evidence: Evidence) -> None:
    bad = [r.request for r in _registrations(plugin) if r.request.get("version") != VERSION]
    if bad:
        evidence("offending registrations", bad)
    assert not bad, f"registered with version {bad[0].get('version')!r}; the kubelet accepts {VERSION!r} only"


@pytest.mark.requirement("DP-REG-002")
def test_resource_names_are_extended_resource_names(plugin: PluginUnderTest, evidence: Evidence) -> None:
    problems = {r.resource: [p.message for p in resource_name_problems(r.resource)]
                for r in _registrations(plugin)}
    problems = {k: v for k, v in problems.items() if v}
    if problems:
        evidence("invalid resource names", problems)
    assert not problems, "; ".join(m for v in problems.values() for m in v)


@pytest.mark.requirement("DP-REG-003")
def test_endpoint_exists_and_serves_at_registration(plugin: PluginUnderTest, evidence: Evidence) -> None:
    failed = [r for r in _registrations(plugin)
              if r.outcome == "dial-failed" or any(p.check == "endpoint" for p in r.problems)]
    if failed:
        evidence("registrations whose endpoint did not serve", [{"request": r.request, "outcome": r.outcome,
                                                                 "detail": r.detail} for r in failed])
    assert not failed, failed[0].detail
    ep = plugin.require()
    assert ep.socket.exists(), f"endpoint {ep.socket} is gone while registered"


@pytest.mark.requirement("DP-REG-005")
def test_options_answer_and_match_the_registration(plugin: PluginUnderTest, evidence: Evidence) -> None:
    regs = _registrations(plugin)
    failed = [r for r in regs if r.outcome == "options-failed"]
    if failed:
        evidence("registration", {"request": failed[0].request, "detail": failed[0].detail})
        pytest.fail(failed[0].detail, pytrace=False)
    mismatched = [(r.request, [p.message for p in r.problems if p.check == "options-mismatch"]) for r in regs
                  if any(p.check == "options-mismatch" for p in r.problems)]
    if mismatched:
        evidence("registrations with mismatching options", mismatched)
    assert not mismatched, mismatched[0][1][0]
    ep = plugin.require()
    now = plugin.kubelet.options(plugin.resource)
    registered = ep.registration.request.get("options", {})
    evidence("options", {"registered": registered, "answered": to_json(now)})
    assert to_json(now) == {**to_json(now), **registered}, "GetDevicePluginOptions changed since registration"


@pytest.mark.requirement("DP-REG-004")
def test_registers_again_after_kubelet_restart(plugin: PluginUnderTest, evidence: Evidence) -> None:
    plugin.require()
    before = sorted(plugin.kubelet.endpoints)
    ids = sorted(plugin.latest_ids())
    started = time.monotonic()
    ep = plugin.restart_kubelet()
    took = time.monotonic() - started
    for resource in before:
        if resource != plugin.resource:
            plugin.kubelet.wait_endpoint(resource, 0, max(0.5, REREGISTER_BOUND_S - (time.monotonic() - started)))
    evidence("re-registration", {"seconds": round(took, 3), "resources": sorted(plugin.kubelet.endpoints)})
    latest = ep.latest
    assert latest is not None
    assert sorted(d.id for d in latest.devices) == ids, "after re-registering the plugin lists other devices"
