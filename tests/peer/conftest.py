"""The peer suites' shared fixtures (the table printed after the run: tests/peer/summary.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.peer.ndctl import make_shims, needs


@pytest.fixture(scope="module")
def shims(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_shims(tmp_path_factory.mktemp("shims"))


@pytest.fixture(autouse=True)
def _peer_host() -> Iterator[None]:
    """Skip, with the reason, where the host truly cannot run the peer suites (no root, no FUSE, no ndctl 81)."""
    reason = needs()
    if reason is not None:
        pytest.skip(reason)
    yield
