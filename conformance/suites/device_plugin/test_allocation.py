"""Allocate and PreStartContainer; memory-pool resources and their reservation tokens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from conformance import not_applicable
from conformance.suites.device_plugin.support import PluginUnderTest
from fakehw.polling import wait_until
from testbed.kubelet.api import to_json
from testbed.kubelet.kubelet import PluginViolation, RpcFailed

Evidence = Callable[[str, Any], None]


@pytest.mark.requirement("DP-ALLOC-001")
def test_allocate_answers_every_container(plugin: PluginUnderTest, evidence: Evidence) -> None:
    """One call for two or three containers (1, 2 and the rest of up to 2 devices): one answer per container,
    in order, each exposing exactly that container's GPUs (a container that also gets another's GPUs shares
    them with it)."""
    ids = plugin.latest_ids()
    containers = [c for c in (ids[:1], ids[1:3], ids[3:5]) if c]
    response = plugin.kubelet.allocate(plugin.resource, containers)
    rows = []
    problems = []
    for i, (devices, answer) in enumerate(zip(containers, response.container_responses, strict=True)):
        want = {plugin.identify(d) for d in devices}
        ex = plugin.expose(answer)
        rows.append({"container": i, "devices": devices, "gpus": sorted(want),
                     "channels": {k: sorted(v) for k, v in ex.channels().items()}})
        wrong = {name: sorted(got) for name, got in ex.channels().items() if got and got != want}
        if wrong or not ex.all:
            seen = "; ".join(f"{k} expose {v}" for k, v in wrong.items()) or "nothing exposes any GPU"
            problems.append(f"container {i} asked for {sorted(want)}: {seen}")
    evidence("allocate", {"containers": containers, "answers": rows, "response": to_json(response)})
    assert not problems, "\n".join(problems)
    single = plugin.kubelet.allocate(plugin.resource, [[ids[-1]]])
    assert len(single.container_responses) == 1


def _sets(plugin: PluginUnderTest) -> list[tuple[str, list[str]]]:
    """(resource, device IDs) to allocate: every device alone, of every resource the node is served as; for
    the GPU resource also two pairs and everything."""
    out = []
    for resource in plugin.expected:
        if resource not in plugin.kubelet.endpoints:
            continue  # not registered: DP-INV-002's
        ids = plugin.latest_ids(resource)
        out += [(resource, [d]) for d in ids]
        if resource == plugin.resource and len(ids) >= 2:
            out += [(resource, ids[:2]), (resource, ids[-2:])]
            if len(ids) > 2:
                out.append((resource, ids))
    return out


@pytest.mark.requirement("DP-ALLOC-002")
def test_allocate_exposes_exactly_the_allocated_gpus(plugin: PluginUnderTest, evidence: Evidence) -> None:
    plugin.require()
    failures = []
    rows = []
    for resource, devices in _sets(plugin):
        want = {plugin.identify(d, resource) for d in devices}
        response = plugin.kubelet.allocate(resource, [devices]).container_responses[0]
        ex = plugin.expose(response)
        seen, _ = plugin.nvml_view(response)
        row = {"resource": resource, "devices": devices, "gpus": sorted(want),
               "channels": {k: sorted(v) for k, v in ex.channels().items()}, "nvml inside the container": sorted(seen)}
        rows.append(row)
        problems = [f"{name} exposes {sorted(got)}" for name, got in ex.channels().items()
                    if got and got != want]
        if not ex.all:
            problems.append("nothing exposes any GPU")
        if ex.specs != want and not (ex.env or ex.cdi or ex.mounts):
            problems.append(f"device specs expose {sorted(ex.specs)}")
        problems += list(ex.unknown)
        if seen != plugin.physical(want):
            problems.append(f"NVML inside the container shows {sorted(seen)}")
        if problems:
            row["response"] = to_json(response)
            failures.append(f"allocating {sorted(want)} ({resource}): {'; '.join(problems)}")
    evidence("allocations", rows)
    assert not failures, "\n".join(failures)


@pytest.mark.requirement("DP-ALLOC-003")
def test_allocate_refuses_unknown_devices(plugin: PluginUnderTest, evidence: Evidence) -> None:
    plugin.require()
    bogus = "no-such-device-0123456789"
    try:
        response = plugin.kubelet.allocate(plugin.resource, [[bogus]])
    except RpcFailed as exc:
        evidence("refusal", {"status": exc.code.name, "details": exc.details})
        return
    evidence("response", to_json(response))
    pytest.fail(f"Allocate of the unknown device {bogus!r} succeeded: {to_json(response)}", pytrace=False)


@pytest.mark.requirement("DP-ALLOC-004")
def test_prestart_container(plugin: PluginUnderTest, evidence: Evidence) -> None:
    ep = plugin.require()
    pod = plugin.new_pod()
    assignment = plugin.kubelet.admit(pod, "main", plugin.resource, 1)  # calls PreStartContainer when required
    if ep.options.pre_start_required:
        evidence("pre-start", "required; called by admission and answered")
        return
    try:
        plugin.kubelet.prestart(plugin.resource, list(assignment.device_ids))
        evidence("pre-start", "not required; answered anyway")
    except RpcFailed as exc:
        if exc.code != grpc.StatusCode.UNIMPLEMENTED:
            raise
        evidence("pre-start", "not required; UNIMPLEMENTED (allowed)")


# --------------------------------------------------------------------------------------------------- pools


@pytest.mark.requirement("DP-POOL-001")
def test_each_memory_pool_is_a_resource(plugin: PluginUnderTest, evidence: Evidence) -> None:
    plugin.require()
    reason = plugin.pools_not_applicable()
    if reason is not None:
        not_applicable(reason)
    expected = sorted(plugin.pools)
    wait_until(lambda: set(expected) <= set(plugin.kubelet.endpoints), 5.0)
    registered = plugin.pool_resources()
    evidence("pools", {"model": expected, "registered": registered})
    missing = sorted(set(expected) - set(registered))
    phantom = sorted(set(registered) - set(expected))
    assert not missing, f"memory pools of {plugin.node.name} not advertised: {missing}"
    assert not phantom, f"advertised pools the node does not have: {phantom}"
    empty = [r for r in registered if not (plugin.kubelet.endpoints[r].latest and
                                            plugin.kubelet.endpoints[r].latest.devices)]  # type: ignore[union-attr]
    assert not empty, f"pool resources without devices: {empty}"


def _check_token(plugin: PluginUnderTest, pool: str, token: str) -> dict[str, Any]:
    """Map with the token through the agent (proving it opens this pool on this node), then unmap."""
    agent = plugin.testbed.agent(plugin.node.name)
    try:
        mapping = agent.map_pool(plugin.node.name, pool, token, "conformance-probe")
    except Exception as exc:
        raise PluginViolation("pool-token", f"the node refuses the token handed out for pool {pool}: {exc}",
                              {"pool": pool}) from None
    agent.unmap_pool(str(mapping["id"]), token)
    return mapping


@pytest.mark.requirement("DP-POOL-002")
def test_pool_allocation_returns_a_valid_token(plugin: PluginUnderTest, evidence: Evidence) -> None:
    plugin.require()
    reason = plugin.pools_not_applicable()
    if reason is not None:
        not_applicable(reason)
    resources = plugin.pool_resources()
    rows: list[dict[str, Any]] = []
    for resource in resources:
        pool = plugin.pools[resource].name
        tokens = []
        # A pool small enough (or exclusive) to be one device is reserved twice one after the other: the second
        # allocation must still get a token of its own.
        one_at_a_time = len(plugin.kubelet.available(resource)) < 2
        pods: list[str] = []
        for _ in range(2):
            if one_at_a_time and pods:
                plugin.kubelet.release(pods[-1])
            pod = plugin.new_pod("pool")
            pods.append(pod)
            a = plugin.kubelet.admit(pod, "main", resource, 1)
            found = list(plugin.expose(a.response_message()).tokens)
            rows.append({"resource": resource, "devices": list(a.device_ids), "response": a.response})
            assert len(set(found)) == 1, f"{resource}: expected one reservation token in the answer, found " \
                                         f"{len(set(found))}"
            mapping = _check_token(plugin, pool, found[0])
            rows[-1]["mapped grant"] = mapping.get("grant")
            tokens.append(found[0])
        assert tokens[0] != tokens[1], f"{resource}: two allocations got the same token"
    evidence("pool allocations", rows)
