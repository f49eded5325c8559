"""Fixtures for the fake root tests: trees rendered once per session, on tmpfs when there is one (faster)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakehw.agent.state import derive_state
from fakehw.model import System, load_profile
from fakehw.model.system import Node
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir
from fakehw.sysfs import ROOT_DIR, render_tree
from tests.scratch import scratch_base

RenderedNode = tuple[System, Node, Path]



@pytest.fixture(scope="session")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fhw-sysfs-", dir=scratch_base()))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def rendered(scratch: Path) -> Callable[[str], list[RenderedNode]]:
    """``rendered(profile)``: the first node of every group, rendered from the model (no agent)."""
    cache: dict[str, list[RenderedNode]] = {}

    def render(profile: str) -> list[RenderedNode]:
        if profile not in cache:
            system = load_profile(profile)
            seen: set[int] = set()
            out: list[RenderedNode] = []
            for node in system.nodes:
                if node.template in seen:
                    continue
                seen.add(node.template)
                node_dir = scratch / profile / node.name
                render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(node_dir))
                out.append((system, node, node_dir / ROOT_DIR))
            cache[profile] = out
        return cache[profile]

    return render
