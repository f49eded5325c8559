"""Slurm on the testbed as the suite drives it: jobs that report what they see, and the model's answers."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fakehw.model.system import Node, System
from fakehw.polling import wait_until
from testbed.api import Testbed
from testbed.slurm.cluster import SlurmCluster
from testbed.slurm.render import gpu_type

PROBE = (sys.executable, "-m", "testbed.slurm.probe")


class JobFailed(AssertionError):
    """A job did not run; the message carries srun's output and the daemons' log tails."""


def expand(spec: str) -> list[int]:
    """``0-2,5`` -> [0, 1, 2, 5]."""
    out: list[int] = []
    for part in spec.split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


@dataclass(frozen=True)
class JobView:
    """What a job saw (from inside) and what Slurm recorded for it."""

    node: str
    env: dict[str, str | None]
    uuids: tuple[str, ...]
    minors: tuple[int, ...]
    idx: tuple[int, ...]
    record: str

    @classmethod
    def parse(cls, text: str) -> JobView:
        data = json.loads(text.strip().splitlines()[0])
        nvml = data.get("nvml") or {}
        gpus = nvml.get("gpus") or []
        record = data.get("job") or ""
        m = re.search(r"GRES=[^ ]*\(IDX:([0-9,\-]*)\)", record)
        return cls(str(data["env"].get("SLURMD_NODENAME")), data["env"], tuple(g["uuid"] for g in gpus),
                   tuple(int(g["minor"]) for g in gpus), tuple(expand(m.group(1))) if m else (), record)


class SlurmUnderTest:
    def __init__(self, testbed: Testbed, cluster: SlurmCluster):
        self.testbed = testbed
        self.cluster = cluster
        self.system: System = testbed.system

    def node(self, name: str) -> Node:
        node = self.system.node(name)
        assert node is not None
        return node

    def gpu_nodes(self) -> list[Node]:
        return [self.node(n.name) for n in self.cluster.layout.nodes if self.node(n.name).gpus]

    def gres(self, node: Node, count: int) -> str:
        return f"gpu:{gpu_type(node.gpus[0])}:{count}"

    def minors(self, node: str) -> list[int]:
        """GPU minors in gres.conf order for ``node`` (Slurm's GPU index -> device)."""
        drained = self.cluster.layout.drained.get(node, frozenset())
        return [g.minor for g in self.node(node).gpus if g.minor not in drained]

    def probe(self, node: str, gpus: int, extra: Sequence[str] = (), hold_s: float = 0.0,
              timeout: float = 120) -> JobView:
        args = ["-w", node, "-n1", f"--gres={self.gres(self.node(node), gpus)}", "--immediate=30", *extra]
        cmd = [*PROBE, *([str(hold_s)] if hold_s else [])]
        proc = self.cluster.srun(args, cmd, timeout=timeout)
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0 or not out.strip():
            raise JobFailed(f"srun {' '.join(args)} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}"
                            f"\nslurmctld log:\n{self.cluster.log_tail('slurmctld', 1500)}")
        return JobView.parse(out)

    def hold(self, node: str, gpus: int, seconds: float) -> tuple[str, tuple[int, ...]]:
        """Start a batch job holding ``gpus`` GPUs of ``node`` for ``seconds``; (job id, its GPU minors)."""
        c = self.cluster
        proc = c.run([c.bin["sbatch"], "-w", node, "-n1", f"--gres={self.gres(self.node(node), gpus)}",
                      f"--output={c.root / 'hold-%j.out'}", "--wrap", f"sleep {seconds}"], timeout=60)
        if proc.returncode != 0:
            raise JobFailed(f"sbatch failed: {proc.stderr.decode(errors='replace')}")
        job = proc.stdout.decode().split()[-1]
        found: list[re.Match[str]] = []

        def running() -> bool:
            record = c.scontrol("show", "job", job, "-d", "-o")
            m = re.search(r"GRES=[^ ]*\(IDX:([0-9,\-]*)\)", record)
            found[:] = [m] if "JobState=RUNNING" in record and m else []
            return bool(found)

        if wait_until(running, 60, interval=0.2):
            minors = self.minors(node)
            return job, tuple(minors[i] for i in expand(found[0].group(1)))
        raise JobFailed(f"job {job} did not start: {c.scontrol('show', 'job', job)}")

    def uuids_of(self, node: str, minors: Sequence[int]) -> tuple[str, ...]:
        by_minor = {g.minor: g.uuid for g in self.node(node).gpus}
        return tuple(by_minor[m] for m in minors)

    def states(self) -> dict[str, Any]:
        return {n.name: self.testbed.state(n.name) for n in self.cluster.layout.nodes}
