"""Fixtures for the CXL and memory-pool tests: an in-process agent on cxl-pool with a controllable clock.

The node trees are rendered once per session into a template directory; each agent starts from a copy whose
files are hard links (the renderer only ever replaces files, never edits them), so its first render is
incremental and an agent is cheap to start.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakehw.agent.service import COMPACT_EVERY, AgentService
from fakehw.model import System, load_profile
from tests.scratch import scratch_base


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link the tree's files; copy files another renderer may update in place (the NVML snapshot)."""
    if src.endswith(".snapshot"):
        shutil.copy2(src, dst)
    else:
        os.link(src, dst)


class Clock:
    """A clock the tests move by hand (token expiry)."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="session")
def scratch() -> str | None:
    """Where big throwaway trees go (see :func:`scratch_base`)."""
    return scratch_base()


@pytest.fixture(scope="session")
def cxl_system() -> System:
    return load_profile("cxl-pool")


@pytest.fixture(scope="session")
def cxl_template(cxl_system: System) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fhw-cxl-", dir=scratch_base()))
    AgentService(cxl_system, path / "template").close()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_agent(cxl_system: System, cxl_template: Path) -> Iterator[Callable[..., tuple[AgentService, Clock]]]:
    """``make_agent()``: a fresh agent (empty journals) over a hard-linked copy of the rendered trees."""
    made: list[AgentService] = []

    def make(state_dir: Path | None = None, clock: Clock | None = None,
             compact_every: int = COMPACT_EVERY) -> tuple[AgentService, Clock]:
        clock = clock or Clock()
        if state_dir is None:
            state_dir = Path(tempfile.mkdtemp(prefix="agent-", dir=cxl_template))
            shutil.copytree(cxl_template / "template" / "nodes", state_dir / "nodes", symlinks=True,
                            copy_function=_link_or_copy)
        svc = AgentService(cxl_system, state_dir, clock=clock, compact_every=compact_every)
        made.append(svc)
        return svc, clock

    yield make
    for svc in made:
        svc.close()
        if svc.state_dir.parent == cxl_template:
            shutil.rmtree(svc.state_dir, ignore_errors=True)
