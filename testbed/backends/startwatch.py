"""Whether a starting agent is still getting somewhere: the one rule both backends wait by.

A fixed start limit is always wrong for somebody (a 10,000-node fleet, an emulated riscv64 node on a loaded 2-core
machine), so neither backend has one by default. A start is given up on only when it stands still: for
:data:`STALL_S` the agent neither answered, changed its progress file (:mod:`fakehw.agent.progress`), nor used any
CPU. What "CPU used" means is the caller's: the agent process's own for the local backend, the whole container's
cgroup for Docker (the agent may be a child of an emulator there). The watch only compares readings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from fakehw.agent.progress import read_progress

STALL_S = 60.0
"""How long a starting agent may stand still (no answer, no progress, no CPU) before ``up`` gives up on it."""


class StartWatch:
    """Remembers when a starting agent last moved: its progress file changed or its CPU reading grew."""

    def __init__(self, state_dir: Path, stall_s: float = STALL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state_dir = state_dir
        self.stall_s = stall_s
        self.clock = clock
        self.last: tuple[object, float] | None = None
        self.moved = clock()
        self.progress: dict[str, object] | None = None

    def poll(self, cpu: float) -> dict[str, object] | None:
        """Take one look (``cpu``: the caller's CPU reading, any unit); the progress when it changed."""
        progress = read_progress(self.state_dir)
        mark = (progress, cpu)
        if mark == self.last:
            return None
        changed = self.last is None or progress != self.last[0]
        self.last, self.moved = mark, self.clock()
        self.progress = progress
        return progress if changed else None

    def stalled(self) -> bool:
        """Nothing moved for :attr:`stall_s`."""
        return self.clock() - self.moved > self.stall_s

    def describe(self) -> str:
        """The last progress seen and how long nothing moved, for the error that gives up."""
        p = self.progress or {}
        return (f"last: {p.get('phase', 'starting')} {p.get('done', 0)}/{p.get('total', 0)}; nothing moved for "
                f"{self.stall_s:g} s")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of one process (0 when it is gone or unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def cgroup_cpu_seconds(pid: int, cgroup_root: Path = Path("/sys/fs/cgroup"), proc_root: Path = Path("/proc")) -> float:
    """CPU used by the cgroup of ``pid`` (a container's, so every process in it counts), 0 when unknown.

    cgroup v1 (``cpuacct.usage``, ns) and v2 (``cpu.stat`` ``usage_usec``) are both read: HOST.md's machines run v1,
    GitHub's runners v2."""
    if pid <= 0:
        return 0.0
    try:
        lines = (proc_root / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return 0.0
    for line in lines:
        _, controllers, path = line.split(":", 2)
        try:
            if "cpuacct" in controllers.split(","):
                return int((cgroup_root / f"cpuacct{path}" / "cpuacct.usage").read_text()) / 1e9
            if controllers == "":
                for stat in (cgroup_root / path.lstrip("/") / "cpu.stat").read_text().splitlines():
                    if stat.startswith("usage_usec "):
                        return int(stat.split()[1]) / 1e6
        except (OSError, ValueError):
            continue
    return 0.0
