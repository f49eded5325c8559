"""Chaos: slurmd killed under a running job and restarted."""

from __future__ import annotations

import time

import pytest

from conformance.suites.slurm.support import PROBE, SlurmUnderTest
from fakehw.polling import wait_until


@pytest.mark.requirement("SLURM-CHAOS-001")
def test_slurmd_restart(slurm: SlurmUnderTest, tmp_path: object) -> None:
    c = slurm.cluster
    node = slurm.gpu_nodes()[0]
    out = c.root / "chaos-job.out"
    out.unlink(missing_ok=True)
    proc = c.run([c.bin["sbatch"], "-w", node.name, "-n1", f"--gres={slurm.gres(node, 1)}", f"--output={out}",
                  "--wrap", " ".join([*PROBE, "6"])], timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    job = proc.stdout.decode().split()[-1]
    wait_until(lambda: c.job_record(job).get("JobState") == "RUNNING", 60, interval=0.2)
    assert c.job_record(job).get("JobState") == "RUNNING", c.job_record(job)
    c.kill_slurmd(node.name)
    time.sleep(1.0)
    assert c.job_record(job).get("JobState") == "RUNNING", "the job died with slurmd"
    c.start_slurmd(node.name)
    wait_until(lambda: c.job_record(job).get("JobState") not in ("RUNNING", "COMPLETING", "PENDING"), 90,
               interval=0.5)
    rec = c.job_record(job)
    assert rec.get("JobState") == "COMPLETED" and rec.get("ExitCode") == "0:0", rec
    assert out.read_text().strip(), "the job's output is empty"
    c.wait_nodes(lambda s: s == "IDLE", [node.name], timeout=60)
    view = slurm.probe(node.name, 1)
    assert view.node == node.name
