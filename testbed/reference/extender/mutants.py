"""Deliberately broken variants of the reference extender: each must be caught by exactly the requirements it breaks.

A mutant is the reference extender with one behaviour changed (``--mutant NAME``). The table says what each one
breaks; tests/scheduler/test_mutants.py runs the suite against every mutant and asserts that the failed
requirements are exactly ``breaks`` (no more: a suite that fails unrelated requirements has imprecise checks; no
fewer: a suite that misses one has no teeth there).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str
    summary: str
    breaks: frozenset[str]
    profile: str = "dgx-h100"
    """A profile on which every broken requirement can be observed."""


MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("snake-keys", "answers FailedNodes and FailedAndUnresolvableNodes as snake_case keys (dropped by Go)",
           frozenset({"SCHED-PROTO-001"})),
    Mutant("score-100", "scores on 0..100 instead of 0..10", frozenset({"SCHED-PROTO-002"})),
    Mutant("ignore-health", "counts unhealthy GPUs as free", frozenset({"SCHED-FAIL-001"})),
    Mutant("ignore-arch", "ignores image platforms and required ISA extensions",
           frozenset({"SCHED-FIT-002", "SCHED-TOPO-004"}), profile="mixed-arch"),
    Mutant("spread", "prefers the worst node of the cost model (inverted scores)",
           frozenset({"SCHED-TOPO-001", "SCHED-TOPO-002", "SCHED-ISO-005"}), profile="edge-pcie"),
    Mutant("split-gangs", "places gang members one by one, without a domain booking",
           frozenset({"SCHED-TOPO-003", "SCHED-ISO-004", "SCHED-ISO-006"})),
    Mutant("ignore-bookings", "gives GPUs booked for a gang's pending members to other pods",
           frozenset({"SCHED-ISO-006"})),
    Mutant("double-book", "counts GPUs right but hands out the best ones even if another pod holds them",
           frozenset({"SCHED-FIT-001", "SCHED-ISO-001"})),
    Mutant("ignore-cxl", "counts pool capacity the model has, not what the pool holds now (offline CXL)",
           frozenset({"SCHED-FAIL-002"}), profile="gb200-nvl72"),
    Mutant("no-admission", "admits allocations past a pool's thrash threshold",
           frozenset({"SCHED-MEM-001"}), profile="gb200-nvl72"),
    Mutant("bursts-in-reserve", "lets bursts use the reserved part of a pool",
           frozenset({"SCHED-MEM-002"}), profile="gb200-nvl72"),
    Mutant("preempt-reservations", "offers reservations as preemption victims before bursts",
           frozenset({"SCHED-ISO-003"}), profile="gb200-nvl72"),
    Mutant("memory-last", "ignores where a memory-bound job's memory would come from",
           frozenset({"SCHED-TOPO-005"}), profile="gb200-nvl72"),
    Mutant("forget-on-restart", "watches from the moment it starts: pods bound before a restart are unknown",
           frozenset({"SCHED-CHAOS-001"})),
    Mutant("slow", "takes 100 ms more per decision for every bound pod beyond 10", frozenset({"SCHED-CHAOS-003"})),
    Mutant("quadratic", "compares every candidate node's GPU topology with every other one's in each filter and "
                        "prioritize: milliseconds on a few nodes, seconds at thousands",
           frozenset({"SCHED-CHAOS-003"})),
    Mutant("reserve-at-filter", "holds GPUs for a pod from its filter call until it is bound",
           frozenset({"SCHED-CHAOS-002"})),
    Mutant("own-binds-only", "counts only the pods it bound itself (an assume cache, no informer for pods)",
           frozenset({"SCHED-CHAOS-001", "SCHED-FIT-001", "SCHED-ISO-003", "SCHED-PROTO-004", "SCHED-TOPO-003"})),
)}
