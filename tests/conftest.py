"""Shared test setup: the testbed fixtures and hypothesis profiles (``HYPOTHESIS_PROFILE=ci`` in CI)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from testbed.cluster import remove_tree_in_background, scratch_dir
from tests.scratch import cluster_scratch_base, scratch_base

pytest_plugins = ["testbed.fixtures", "tests.peer.summary"]

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def _own_dir(base: str | None, fallback: Path) -> Iterator[Path]:
    """A directory of the test's own under ``base`` (``fallback`` when None), removed afterwards with everything
    written next to it: it is a child of a private directory, so a renderer that keeps records beside a node's
    directory (fakehw.sysfs.SHARED_DIR, ``.shared-sysfs``) writes them into that private directory, never into
    ``/dev/shm`` itself."""
    if base is None:
        yield fallback
        return
    outer = Path(tempfile.mkdtemp(prefix="fhw-test-", dir=base))
    try:
        path = outer / "tmp"
        path.mkdir()
        yield path
    finally:
        shutil.rmtree(outer, ignore_errors=True)


@pytest.fixture
def fast_tmp(tmp_path: Path) -> Iterator[Path]:
    """A directory of the test's own on tmpfs when it has room (:func:`tests.scratch.scratch_base`), else
    ``tmp_path``; removed after the test. For rendered trees whose device files nothing opens (a node view's
    trees: :func:`fast_node_tmp`). On this machine's disk, whose inode allocation slows after deletes
    (docs/testbed.md), tests/sysfs/test_memory.py took 51-59 s (19-26 s of it system time) with its trees there,
    and 14-17 s (2.4-2.5 s) on tmpfs, in the same loaded hour of 2026-11-28."""
    yield from _own_dir(scratch_base(), tmp_path)


@pytest.fixture
def fast_node_tmp(tmp_path: Path) -> Iterator[Path]:
    """:func:`fast_tmp` for a tree a node view shows its command (nvidia-smi's ``topo -m``, NVIDIA's device plugin):
    on tmpfs only when that also lets device nodes open and programs run (:func:`tests.scratch.cluster_scratch_base`),
    as the view puts the tree's ``dev`` at ``/dev``; what the command uses there by its own path the view binds again
    (:func:`testbed.nodeview.kept_paths`)."""
    yield from _own_dir(cluster_scratch_base(), tmp_path)


@pytest.fixture(scope="session")
def testbed_state_dir() -> Iterator[Path]:
    """testbed.fixtures' per-session cluster directory (``testbed_factory`` and the tests that stand clusters up
    themselves), here on tmpfs when that has room and lets a node view open device nodes and run programs
    (:func:`tests.scratch.cluster_scratch_base`; the view binds what its command uses under ``/dev/shm`` again);
    else where testbed.fixtures puts it (``$FAKEHW_SCRATCH_DIR``, ``/tmp``). A local node is rendered on first
    use, some 28,000 files (a gb200 tray 78,000), each costing 30-400 us of kernel CPU on this machine's ext4 and
    9 us on tmpfs (docs/testbed.md). The Docker tests keep testbed.fixtures' own (tests/docker/conftest.py)."""
    path = scratch_dir("fhw-", cluster_scratch_base())
    yield path
    remove_tree_in_background(path)


@pytest.fixture(scope="session", autouse=True)
def nested_pytest_temp_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temp root of their own for the pytest sessions tests start (the conformance suites, ``conformance run``).

    Every pytest session, when it ends, deletes the numbered and ``garbage-*`` directories of earlier sessions in
    the machine's ``/tmp/pytest-of-<user>`` but the newest three. A suite run by a test is a session, so one of them
    could end up deleting an earlier CI run's tree: 1.4 million entries, 12 minutes on this machine's ext4 (mounted
    ``discard``), and a Slurm suite killed at its 900 s limit in CI on 2026-11-28. Under ``PYTEST_DEBUG_TEMPROOT``
    (pytest's documented root for ``tmp_path``) they clean only among themselves, and this session deletes the
    root when it ends. This session's own base directory is fixed first, so it stays where it was."""
    tmp_path_factory.getbasetemp()
    root = Path(tempfile.mkdtemp(prefix="fhw-nested-"))
    before = os.environ.get("PYTEST_DEBUG_TEMPROOT")
    os.environ["PYTEST_DEBUG_TEMPROOT"] = str(root)
    try:
        yield root
    finally:
        if before is None:
            os.environ.pop("PYTEST_DEBUG_TEMPROOT", None)
        else:
            os.environ["PYTEST_DEBUG_TEMPROOT"] = before
        shutil.rmtree(root, ignore_errors=True)


# Under pytest-xdist (`make test` runs -n 2 --dist loadfile) each test file runs whole on one worker, so module
# fixtures are set up once; every file that drives the shared Docker engine (image builds, leftover checks) is
# one unit of work, run on one worker one file after another. This is a scheduler rather than xdist_group marks:
# with pytest >= 9.2 (node ids moved to Node._id) pytest-xdist 3.8's loadgroup silently stops grouping.
# Such files live under tests/docker/ (the device plugin suite's Docker run is tests/docker/
# test_device_plugin_backend.py: while it was a run of tests/conformance/test_device_plugin_suite.py, that whole
# file, ~450 s of mostly waiting, was chained onto the Docker worker); DOCKER_USERS names any that cannot.
DOCKER_USERS: frozenset[str] = frozenset()


# The longest units of work in CI, longest first (their tests' setup+call+teardown among `make test`'s slowest 40
# durations, 2026-11-26: docker 589 s, scheduler suite 226, NVIDIA plugin 182, Slurm 277 before it ran its suites
# at once, README tour 99, ...). xdist hands out units with the most tests first, which queued these few-test
# files late (the tour 110th of 116 units) where one worker may run one alone at the end; longest first is the
# classic cure (a simulation of two workers over CI's durations: 1,510 -> 1,476 s). A unit not named keeps xdist's
# order after these; a renamed file only loses its place (tests/test_scheduling.py checks that each exists). The
# device plugin suite (~450 s alone, 2026-11-28) was part of "docker" until its Docker run moved to tests/docker/.
LONGEST_FIRST = ("docker", "tests/scheduler/test_scheduler_suite.py", "tests/conformance/test_device_plugin_suite.py",
                 "tests/conformance/test_nvidia_device_plugin.py",
                 "tests/scheduler/test_slurm.py", "tests/test_readme_tour.py", "tests/testbed/test_component_user.py",
                 "tests/conformance/test_fabric_suite.py", "tests/hostile/test_tcp_limits.py",
                 "tests/conformance/test_nvidia_gfd.py", "tests/scheduler/test_ray.py")


def longest_first(units: list[str]) -> list[str]:
    """``units`` (in xdist's order) with those of :data:`LONGEST_FIRST` moved to the front, in its order."""
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    return sorted(units, key=lambda unit: rank.get(unit, len(rank)))


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or "docker" for everything that drives Docker."""
    path = nodeid.split("::", 1)[0]
    return "docker" if path.startswith("tests/docker/") or path in DOCKER_USERS else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFileDockerTogether(LoadScopeScheduling):  # type: ignore[misc]
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the first call: the queue is complete (xdist's schedule() filled it)
                self.ordered = True
                units = dict(self.workqueue)
                self.workqueue.clear()
                self.workqueue.update((unit, units[unit]) for unit in longest_first(list(units)))
            super()._assign_work_unit(node)

    return ByFileDockerTogether(config, log)
