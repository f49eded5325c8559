"""GRES requirements: what slurmd and slurmctld make of the configuration rendered from the model."""

from __future__ import annotations

import re

import pytest

from conformance.suites.slurm.support import SlurmUnderTest, expand
from testbed.slurm.render import core_ids, gpu_type


@pytest.mark.requirement("SLURM-GRES-001")
def test_slurmd_reads_every_gpu(slurm: SlurmUnderTest) -> None:
    c = slurm.cluster
    for node in slurm.gpu_nodes():
        proc = c.run([c.bin["slurmd"], "-G", "-N", node.name, "-f", str(c.conf)], timeout=60)
        lines = [ln for ln in proc.stdout.decode(errors="replace").splitlines() + proc.stderr.decode(
            errors="replace").splitlines() if "Gres Name=gpu" in ln]
        assert len(lines) == len(node.gpus), f"slurmd -G on {node.name} lists {len(lines)} GPUs, the model has " \
                                             f"{len(node.gpus)}:\n{proc.stderr.decode(errors='replace')[-1500:]}"
        topo = slurm.system.topology.nodes[node.name]
        layout = next(n for n in c.layout.nodes if n.name == node.name)
        for gpu, line in zip(node.gpus, lines, strict=True):
            fields = dict(re.findall(r"(\w+)=(\S+)", line))
            assert fields.get("Type") == gpu_type(gpu), line
            assert fields.get("File") == str(layout.dev_dir / f"nvidia{gpu.minor}"), line
            assert expand(fields.get("Cores", "")) == core_ids(node, topo.cpu_affinity[gpu.index]), line
            links = [-1 if o.index == gpu.index else topo.nvlinks[gpu.index][o.index] for o in node.gpus]
            if any(x > 0 for x in links):
                assert fields.get("Links") == ",".join(str(x) for x in links), line
            else:
                assert fields.get("Links") in (None, "(null)"), line


@pytest.mark.requirement("SLURM-GRES-002")
def test_slurmctld_registers_gpus(slurm: SlurmUnderTest) -> None:
    for node in slurm.gpu_nodes():
        rec = slurm.cluster.node_record(node.name)
        m = re.match(r"gpu:([^:(]+):(\d+)", rec.get("Gres", ""))
        assert m is not None, f"{node.name}: Gres={rec.get('Gres')!r} ({rec.get('State')}, {rec.get('Reason')})"
        assert (m.group(1), int(m.group(2))) == (gpu_type(node.gpus[0]), len(node.gpus)), rec.get("Gres")
        assert "DRAIN" not in rec.get("State", "") and "INVALID" not in rec.get("State", ""), rec
