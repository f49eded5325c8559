"""Shared test setup: the testbed fixtures and hypothesis profiles (``HYPOTHESIS_PROFILE=ci`` in CI)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.scratch import scratch_base

pytest_plugins = ["testbed.fixtures", "tests.peer.summary"]

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_configure(config: pytest.Config) -> None:
    """Throwaway clusters (and the suites run as subprocesses) go to tmpfs when it has room: see
    :func:`testbed.cluster.scratch_dir` for what that saves. Set before xdist starts its workers, who inherit it."""
    base = scratch_base()
    if base is not None and not os.statvfs(base).f_flag & (os.ST_NOEXEC | os.ST_NODEV):  # prologs, device nodes
        os.environ.setdefault("FAKEHW_SCRATCH_DIR", base)


# Under pytest-xdist (`make test` runs -n 2 --dist loadfile) each test file runs whole on one worker, so module
# fixtures are set up once; every file that drives the shared Docker engine (image builds, leftover checks) is
# one unit of work, run on one worker one file after another. This is a scheduler rather than xdist_group marks:
# with pytest >= 9.2 (node ids moved to Node._id) pytest-xdist 3.8's loadgroup silently stops grouping.
DOCKER_USERS = frozenset({"tests/conformance/test_device_plugin_suite.py"})


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
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return ByFileDockerTogether(config, log)
