"""Shared test setup: the testbed fixtures and hypothesis profiles (``HYPOTHESIS_PROFILE=ci`` in CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["testbed.fixtures"]

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


# Under pytest-xdist (`make test` runs -n 2 --dist loadgroup) each test file runs whole on one worker; everything
# that drives the shared Docker engine (image builds, leftover checks) runs on the same worker, one after another.
DOCKER_USERS = {"tests/conformance/test_device_plugin_suite.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    root = Path(str(config.rootpath))
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        path = Path(str(item.path)).resolve().relative_to(root).as_posix()
        group = "docker" if path.startswith("tests/docker/") or path in DOCKER_USERS else path
        item.add_marker(pytest.mark.xdist_group(group))
