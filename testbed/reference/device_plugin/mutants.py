"""Deliberately broken variants of the reference plugin: each one proves the suite catches one kind of bug.

A mutant is the reference plugin with one behaviour switched (``python -m testbed.reference.device_plugin
--mutant NAME``). Which requirements each must fail is stated by the test that runs them
(tests/conformance/test_device_plugin_suite.py), not here, so a mutant cannot vouch for itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    description: str


MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("ignores-health", "never watches NVML events: every GPU stays Healthy whatever happens to it"),
    Mutant("leaks-extra-device", "Allocate also exposes the lowest-numbered GPU that was not asked for"),
    Mutant("ignores-must-include", "GetPreferredAllocation drops the must-include devices"),
    Mutant("forgets-to-reregister", "does not watch kubelet.sock, so it never registers again after a kubelet "
                                    "restart"),
    Mutant("ignores-nvlink", "GetPreferredAllocation ranks GPUs by PCIe distance only, so it picks GPUs across "
                             "NVLink domains"),
    Mutant("shares-pool-token", "every allocation of a memory pool gets the token of the pool's first grant"),
    Mutant("allocates-lost-gpu", "Allocate hands out a GPU that has fallen off the bus"),
    Mutant("drops-unhealthy", "withdraws unhealthy GPUs from ListAndWatch instead of listing them as Unhealthy"),
    Mutant("wrong-numa", "reports NUMA node 0 for every GPU"),
    Mutant("merges-containers", "in an Allocate call for several containers, each container also gets the devices "
                                "of the containers before it"),
    Mutant("late-and-sticky", "reports every health change 1.5 s late (within the suite's 5 s bound) and never "
                              "clears a fault once seen, as NVIDIA's plugin never marks a device Healthy again"),
)}
