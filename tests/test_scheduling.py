"""The order in which ``make test`` hands test files to its xdist workers (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST, longest_first, scope_of

ROOT = Path(__file__).resolve().parents[1]


def test_each_unit_named_longest_first_exists() -> None:
    missing = [u for u in LONGEST_FIRST if u != "docker" and not (ROOT / u).is_file()]
    assert missing == [], f"renamed or removed; update LONGEST_FIRST in tests/conftest.py: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_named_units_go_first_in_their_order_and_the_rest_keep_theirs() -> None:
    units = ["tests/a.py", "tests/test_readme_tour.py", "tests/b.py", "docker", "tests/c.py"]
    assert longest_first(units) == ["docker", "tests/test_readme_tour.py", "tests/a.py", "tests/b.py", "tests/c.py"]


def test_docker_files_are_one_unit() -> None:
    assert scope_of("tests/docker/test_backend.py::test_x[a]") == "docker"
    assert scope_of("tests/docker/test_device_plugin_backend.py::test_y") == "docker"
    assert scope_of("tests/conformance/test_device_plugin_suite.py::test_y") == \
        "tests/conformance/test_device_plugin_suite.py"
    assert scope_of("tests/scheduler/test_slurm.py::test_z") == "tests/scheduler/test_slurm.py"
