"""Preferred allocations: optimal by the model's NVLink bonds, then PCIe distance; must-include; well-formed.

Scenarios are drawn with a fixed seed from the node's GPUs: every available GPU, the same list shuffled (a plugin
that just takes the first k is caught), and subsets with some GPUs taken. Allocation sizes are 2, 4 and 8 where
the node has that many GPUs (a 4-GPU tray gets 2 and 4). The optimum is computed here from the model by exhaustive
search; any set reaching the optimal score passes. With must-include devices, so does the set around them in a
best division of all available GPUs into sets of that size (NVIDIA's best-effort rule, also searched here).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from conformance import not_applicable
from conformance.suites.device_plugin.support import PluginUnderTest
from testbed.kubelet.api import pb, to_json
from testbed.kubelet.checks import must_include_problems, preferred_problems
from testbed.kubelet.kubelet import Endpoint

Evidence = Callable[[str, Any], None]
SIZES = (2, 4, 8)
SEED = 20240611


@dataclass(frozen=True)
class Scenario:
    name: str
    available: tuple[str, ...]
    """GPU names, in the order they are offered."""
    size: int
    must: tuple[str, ...] = ()


def sizes(n: int) -> list[int]:
    return [k for k in SIZES if k <= n] or [n]


def scenarios(gpus: list[str], with_must: bool) -> list[Scenario]:
    rng = random.Random(SEED)
    out = []
    for k in sizes(len(gpus)):
        shuffled = gpus[:]
        rng.shuffle(shuffled)
        if not with_must:
            out.append(Scenario(f"k={k} all available", tuple(gpus), k))
            out.append(Scenario(f"k={k} all available, shuffled", tuple(shuffled), k))
            if len(gpus) - 2 >= k:
                taken = rng.sample(gpus, 2)
                rest = [g for g in shuffled if g not in taken]
                out.append(Scenario(f"k={k} with {', '.join(sorted(taken))} taken", tuple(rest), k))
            elif len(gpus) - 1 >= k:
                taken = rng.sample(gpus, 1)
                out.append(Scenario(f"k={k} with {taken[0]} taken", tuple(g for g in shuffled if g not in taken), k))
        else:
            # A must-include GPU far from the first GPU (the last one: other socket on two-socket boards).
            must = gpus[-1]
            out.append(Scenario(f"k={k} must include {must}", tuple(shuffled), k, (must,)))
            if k >= 4:
                two = tuple(rng.sample(gpus, 2))
                out.append(Scenario(f"k={k} must include {', '.join(two)}", tuple(shuffled), k, two))
    return out


def _ask(plugin: PluginUnderTest, sc: Scenario) -> tuple[pb.PreferredAllocationRequest,
                                                          pb.PreferredAllocationResponse]:
    ids = {g: plugin.id_of(g) for g in sc.available}
    return plugin.kubelet.preferred(plugin.resource, [ids[g] for g in sc.available], sc.size,
                                    [ids[g] for g in sc.must])


def _whole_gpus(plugin: PluginUnderTest) -> list[str]:
    """Whole GPUs of the GPU resource (the ones the model's NVLink and PCIe topology ranks)."""
    gpus = plugin.whole_gpus()
    if len(gpus) < 2:
        not_applicable(f"{plugin.resource} serves {len(gpus)} whole GPU(s) on {plugin.node.name} (MIG strategy "
                       f"{plugin.strategy}): no choice between GPUs to judge")
    return gpus


def _options_offer_preferred(plugin: PluginUnderTest) -> bool:
    ep = plugin.require()
    return bool(ep.options.get_preferred_allocation_available)


def _check(plugin: PluginUnderTest, sc: Scenario, evidence_rows: list[dict[str, Any]]) -> list[str]:
    request, response = _ask(plugin, sc)
    problems = [p.message for p in preferred_problems(request, response)]
    row: dict[str, Any] = {"scenario": sc.name, "response": to_json(response)}
    evidence_rows.append(row)
    if problems:
        row["problems"] = problems
        return [f"{sc.name}: {'; '.join(problems)}"]
    if sc.must:
        missing = [p.message for p in must_include_problems(request, response)]
        if missing:
            row["problems"] = missing
            return [f"{sc.name}: {'; '.join(missing)}"]
    chosen = [plugin.identify(d) for d in response.container_responses[0].deviceIDs]
    got = plugin.topology.score(chosen)
    best, example = plugin.topology.optimum(sc.available, sc.size, sc.must)
    row.update({"chosen": chosen, "score": list(got), "optimum": list(best), "an optimal set": list(example)})
    if got >= best:
        return []
    if sc.must:
        division = plugin.topology.partition_choice(sc.available, sc.size, sc.must, chosen)
        if division is not None:
            row["a best division it belongs to"] = [list(s) for s in division]
            return []
    also = (" nor is it the set around the must-include devices in a best division of the available GPUs into "
            f"sets of {sc.size}") if sc.must else ""
    return [f"{sc.name}: chose {chosen} with {got[0]} NVLink links and PCIe level sum {-got[1]}; "
            f"{list(example)} has {best[0]} links and level sum {-best[1]}{also}"]


@pytest.mark.requirement("DP-TOPO-002")
def test_preferred_allocation_is_optimal(plugin: PluginUnderTest, evidence: Evidence) -> None:
    assert _options_offer_preferred(plugin), "the plugin does not offer GetPreferredAllocation"
    rows: list[dict[str, Any]] = []
    failures = [f for sc in scenarios(_whole_gpus(plugin), with_must=False)
                for f in _check(plugin, sc, rows)]
    evidence("scenarios", rows)
    assert not failures, "\n".join(failures)


@pytest.mark.requirement("DP-TOPO-003")
def test_preferred_allocation_honours_must_include(plugin: PluginUnderTest, evidence: Evidence) -> None:
    assert _options_offer_preferred(plugin), "the plugin does not offer GetPreferredAllocation"
    rows: list[dict[str, Any]] = []
    failures = [f for sc in scenarios(_whole_gpus(plugin), with_must=True)
                for f in _check(plugin, sc, rows)]
    evidence("scenarios", rows)
    assert not failures, "\n".join(failures)


def _call(plugin: PluginUnderTest, ep: Endpoint,
          request: pb.PreferredAllocationRequest) -> pb.PreferredAllocationResponse:
    """GetPreferredAllocation with any request shape (the kubelet's helper sends one container only)."""
    return plugin.kubelet._record_call("GetPreferredAllocation", plugin.resource, request,
                                       lambda: ep.client.preferred_allocation(request, plugin.options.timeouts.rpc))


@pytest.mark.requirement("DP-TOPO-004")
def test_preferred_allocation_is_well_formed(plugin: PluginUnderTest, evidence: Evidence) -> None:
    assert _options_offer_preferred(plugin), "the plugin does not offer GetPreferredAllocation"
    ids = plugin.latest_ids()
    n = len(ids)
    requests = [
        pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=1),
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids[::-1], allocation_size=min(2, n)),
        ]),
        pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=n)]),
        pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids[: max(1, n // 2)],
                                                   allocation_size=max(1, n // 2))]),
    ]
    ep = plugin.require()
    failures = []
    rows = []
    for request in requests:
        response = _call(plugin, ep, request)
        problems = [p.message for p in preferred_problems(request, response)]
        rows.append({"request": to_json(request), "response": to_json(response), "problems": problems})
        failures += problems
    # Every answer the kubelet got during the session, too.
    failures += [f"{resource}: {p.message}" for resource, p in plugin.kubelet.problems]
    evidence("requests", rows)
    assert not failures, "; ".join(failures)
