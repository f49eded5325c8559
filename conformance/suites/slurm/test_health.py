"""Health: a GPU made unhealthy by an injected fault is drained (the testbed plays the health checker)."""

from __future__ import annotations

import pytest

from conformance.suites.slurm.support import JobFailed, SlurmUnderTest


@pytest.mark.requirement("SLURM-HEALTH-001")
def test_unhealthy_gpu_is_drained_and_skipped(slurm: SlurmUnderTest) -> None:
    node = slurm.gpu_nodes()[0]
    bad = node.gpus[len(node.gpus) // 2]
    slurm.testbed.inject(node.name, "fallen-off-bus", bad.name)
    drained = slurm.cluster.check_health(slurm.states())
    assert drained == {node.name: frozenset({bad.minor})}, drained
    g = len(node.gpus)
    if g > 1:
        with pytest.raises(JobFailed):
            slurm.probe(node.name, g, extra=["--immediate=5"], timeout=60)
        for _ in range(2):  # every job after the drain, whatever its size, avoids the GPU
            view = slurm.probe(node.name, g - 1)
            assert bad.uuid not in view.uuids, f"a job got the drained GPU {bad.name}: {view.uuids}"
            assert len(view.uuids) == g - 1
    rec = slurm.cluster.node_record(node.name)
    assert "DRAIN" not in rec.get("State", ""), f"the whole node was drained: {rec.get('State')} {rec.get('Reason')}"
    # Healed: the GPU comes back into service.
    slurm.testbed.heal(node=node.name)
    assert slurm.cluster.check_health(slurm.states()) == {}
    view = slurm.probe(node.name, g)
    assert bad.uuid in view.uuids
