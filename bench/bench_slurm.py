"""Slurm on the testbed: cluster stand-up time for 8 nodes, and jobs scheduled per second through real slurmctld.

- Stand-up: munged, slurmctld and 8 slurmd (dgx-h100 x 8, 64 GPUs) from nothing until every node is IDLE; the
  testbed's own ``up`` (agent, rendering) is shown separately.
- Throughput: N batch jobs (``sbatch --gres=gpu:h100:1 --wrap true``) submitted at once; jobs per second from the
  first submission until the last one has completed (slurmctld's scheduling, slurmd launches, the TaskProlog).
- Latency: one ``srun --gres=gpu:h100:4 true`` after another (submit, allocate, launch, finish), p50/p90.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import percentile, row

from testbed.api import Testbed
from testbed.slurm.cluster import Binaries, SlurmCluster, SlurmError

NODES = 8
JOBS = 200
SRUNS = 20


def main() -> None:
    if os.geteuid() != 0:
        print("bench_slurm: needs root (Slurm runs jobs as their users); skipped")
        return
    try:
        Binaries.find()
    except SlurmError as exc:
        print(f"bench_slurm: {exc}; skipped")
        return
    state = Path(tempfile.mkdtemp(prefix="fhw-bs-", dir="/tmp"))
    t0 = time.perf_counter()
    tb = Testbed.up("dgx-h100", nodes=NODES, name="bs", state_dir=state)
    testbed_up = time.perf_counter() - t0
    cluster = None
    try:
        infos = tb.nodes()
        env = {n.name: {k: v for k, v in n.env.items() if k.startswith("FAKEHW_") or k == "LD_LIBRARY_PATH"}
               for n in infos}
        root = Path(tempfile.mkdtemp(prefix="fhw-bsc-", dir="/tmp"))
        cluster = SlurmCluster(tb.system, {n.name: n.dir for n in infos}, env, root)
        t0 = time.perf_counter()
        cluster.start()
        standup = time.perf_counter() - t0
        print(f"== Slurm on {NODES} fake dgx-h100 nodes ({NODES * 8} GPUs)")
        row("testbed up (agent, rendering)", f"{testbed_up:6.2f} s")
        row("munged + slurmctld + 8 slurmd until IDLE", f"{standup:6.2f} s")
        out = cluster.root / "jobs"
        out.mkdir()
        t0 = time.perf_counter()
        for i in range(JOBS):
            proc = cluster.run([cluster.bin["sbatch"], "-n1", "--gres=gpu:h100:1", f"--output={out}/{i}.out",
                                "--wrap", "true"], timeout=60)
            if proc.returncode != 0:
                raise SlurmError(proc.stderr.decode())
        submitted = time.perf_counter() - t0
        while True:
            left = cluster.run([cluster.bin["squeue"], "-h", "-o", "%i"], timeout=60).stdout.split()
            if not left:
                break
            time.sleep(0.1)
        took = time.perf_counter() - t0
        row(f"{JOBS} batch jobs (1 GPU each): submit", f"{submitted:6.2f} s", f"{JOBS / submitted:6.1f} jobs/s")
        row(f"{JOBS} batch jobs: submitted to all completed", f"{took:6.2f} s", f"{JOBS / took:6.1f} jobs/s")
        lat = []
        for _ in range(SRUNS):
            t1 = time.perf_counter()
            proc = cluster.srun(["-n1", "--gres=gpu:h100:4"], ["true"], timeout=120)
            lat.append(time.perf_counter() - t1)
            if proc.returncode != 0:
                raise SlurmError(proc.stderr.decode())
        ms = [x * 1000 for x in lat]
        row("srun --gres=gpu:h100:4 true, serial", f"p50 {statistics.median(ms):6.0f} ms",
            f"p90 {percentile(ms, 90):6.0f} ms")
    finally:
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(cluster.root, ignore_errors=True)
        tb.down()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
