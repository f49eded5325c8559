"""The rule both backends wait for a starting agent by: give up only when it stands still.

The CPU readers are checked against the kernel's documented cgroup files (Documentation/admin-guide/cgroup-v1/
cpuacct.rst: ``cpuacct.usage`` is nanoseconds; cgroup-v2.rst: ``cpu.stat`` ``usage_usec`` is microseconds) laid
out in a scratch directory, and ``/proc/<pid>/stat``'s utime/stime (proc(5): fields 14 and 15, clock ticks) against
the process's own ``os.times()``. The Docker wait is driven through a stand-in Docker client whose container runs
but never answers, so the "stopped making progress" path is taken without a daemon.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakehw.agent.progress import StartProgress
from testbed.backends.base import BackendError
from testbed.backends.docker import DockerBackend
from testbed.backends.startwatch import STALL_S, StartWatch, cgroup_cpu_seconds, process_cpu_seconds
from testbed.cluster import ClusterRecord


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_progress_or_cpu_keeps_a_start_alive_and_standing_still_ends_it(tmp_path: Path) -> None:
    clock = Clock()
    watch = StartWatch(tmp_path, stall_s=10.0, clock=clock)
    report = StartProgress(tmp_path)
    report("load", 1, 10)
    first = watch.poll(cpu=0.5)
    assert first is not None and (first["phase"], first["done"], first["total"]) == ("load", 1, 10)
    clock.now += 9.0
    assert watch.poll(cpu=0.5) is None and not watch.stalled()
    clock.now += 9.0  # 18 s since the last change of either reading
    assert watch.poll(cpu=0.5) is None and watch.stalled()
    assert "load 1/10" in watch.describe() and "10 s" in watch.describe()

    watch.poll(cpu=0.7)  # CPU moved, progress did not: alive again, nothing new to report
    assert not watch.stalled()
    clock.now += 11.0
    assert watch.stalled()
    report("load", 10, 10)  # the last of a phase is always written
    assert watch.poll(cpu=0.7) is not None and not watch.stalled()


def test_a_watch_with_no_progress_file_describes_the_start(tmp_path: Path) -> None:
    clock = Clock()
    watch = StartWatch(tmp_path / "missing", stall_s=1.0, clock=clock)
    assert watch.poll(cpu=0.0) is None
    clock.now += 2.0
    assert watch.stalled() and watch.describe().startswith("last: starting 0/0")


def test_default_stall_is_a_minute() -> None:
    assert STALL_S == 60.0 and DockerBackend.stall_s == STALL_S


def test_process_cpu_is_the_kernels_utime_plus_stime() -> None:
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    own = os.times()
    seen = process_cpu_seconds(os.getpid())
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert abs(seen - (own.user + own.system)) <= 2 * tick
    assert process_cpu_seconds(2 ** 22 + 1) == 0.0  # above pid_max's ceiling: no such process


def _cgroup_file(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v1_cpuacct_usage_is_nanoseconds(tmp_path: Path) -> None:
    fake_proc = tmp_path / "proc" / "4242" / "cgroup"
    fake_proc.parent.mkdir(parents=True)
    fake_proc.write_text("12:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n")
    _cgroup_file(tmp_path / "cg", "cpuacct/docker/abc/cpuacct.usage", "2500000000\n")
    assert cgroup_cpu_seconds(4242, tmp_path / "cg", tmp_path / "proc") == pytest.approx(2.5)


def test_cgroup_v2_usage_usec_is_microseconds(tmp_path: Path) -> None:
    fake_proc = tmp_path / "proc" / "4242" / "cgroup"
    fake_proc.parent.mkdir(parents=True)
    fake_proc.write_text("0::/system.slice/docker-abc.scope\n")
    _cgroup_file(tmp_path / "cg", "system.slice/docker-abc.scope/cpu.stat",
                 "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    assert cgroup_cpu_seconds(4242, tmp_path / "cg", tmp_path / "proc") == pytest.approx(1.5)


def test_cgroup_cpu_of_no_container_is_zero(tmp_path: Path) -> None:
    assert cgroup_cpu_seconds(0) == 0.0  # Docker reports Pid 0 for a container that is not running
    assert cgroup_cpu_seconds(4242, tmp_path, tmp_path) == 0.0  # no /proc/4242/cgroup


class _StillContainer:
    """A container that runs, uses no CPU and never answers (its agent hung before writing any progress)."""

    name = "fakehw-stuck-n0"
    status = "running"
    attrs: dict[str, Any] = {"State": {"Pid": 0}}


class _Containers:
    def get(self, name: str) -> _StillContainer:
        assert name == _StillContainer.name
        return _StillContainer()


class _Client:
    containers = _Containers()


@pytest.fixture
def hang_guard() -> Iterator[None]:
    """A wait that never gives up fails the test after 60 s instead of hanging the suite."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError("the wait did not give up on a container that stands still")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.usefixtures("hang_guard")
def test_docker_gives_up_on_a_node_that_stands_still(tmp_path: Path) -> None:
    record = ClusterRecord(name="stuck", backend="docker", profile="dgx-h100", nodes=["n0"], node_count=None,
                           root=str(tmp_path), created=time.time(),
                           extra={"nodes": {"n0": {"container": _StillContainer.name}}})
    (tmp_path / "agents" / "n0").mkdir(parents=True)
    backend = DockerBackend()
    backend.stall_s = 0.3
    with pytest.raises(BackendError, match=r"the agent of n0 stopped making progress while starting \(last: "
                                           r"starting 0/0; nothing moved for 0.3 s; logs: docker logs "
                                           r"fakehw-stuck-n0\)"):
        backend._wait_ready(_Client(), record, ["n0"], timeout=None)
