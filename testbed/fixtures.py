"""pytest fixtures for testbeds. Use with ``pytest_plugins = ["testbed.fixtures"]`` in a conftest.

- ``testbed_state_dir``: a short per-session directory for clusters (unix socket paths must stay short);
- ``testbed_factory``: ``testbed_factory("dgx-h100", nodes=2)`` stands up a cluster torn down after the test.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.api import Testbed
from testbed.cluster import remove_tree_in_background, scratch_dir

_counter = itertools.count()


@pytest.fixture(scope="session")
def testbed_state_dir() -> Iterator[Path]:
    """Short (see :func:`scratch_dir`); removed in the background like each cluster in it: the clusters' own
    detached removals may still be running, and deleting their trees again here, and waiting for it, cost the
    last test of a session tens of seconds."""
    path = scratch_dir("fhw-")
    yield path
    remove_tree_in_background(path)


@pytest.fixture
def testbed_factory(testbed_state_dir: Path) -> Iterator[Callable[..., Testbed]]:
    made: list[Testbed] = []

    def make(profile: str, nodes: int | None = None, backend: str = "local", **options: Any) -> Testbed:
        tb = Testbed.up(profile, nodes=nodes, backend=backend, name=f"t{next(_counter)}",
                        state_dir=testbed_state_dir, **options)
        made.append(tb)
        return tb

    yield make
    for tb in made:
        tb.down()
