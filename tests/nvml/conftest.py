"""Fixtures of the fake-NVML tests: the built library, pynvml bound to it in-process, the real NVIDIA files."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fakehw.nvml.build import BuildError
from fakehw.nvml.smi import RealNvidia
from tests.nvml import references
from tests.nvml.captures import board_capture
from tests.nvml.helpers import NodeSnap, lib_path, preload_library, snapshot_env, write_node


@pytest.fixture(scope="session")
def nvml_library() -> Path:
    try:
        return lib_path()
    except BuildError as exc:
        pytest.fail(f"the fake NVML library does not build: {exc}")


@pytest.fixture(scope="session")
def pynvml_module(nvml_library: Path) -> ModuleType:
    """pynvml, bound to the fake library (preloaded, so its dlopen by name finds it)."""
    preload_library()
    import pynvml

    module: ModuleType = pynvml
    return module


@pytest.fixture
def node_snapshot(tmp_path: Path) -> Callable[..., NodeSnap]:
    """``node_snapshot("dgx-h100", faults=[...])`` writes a snapshot of that node in that state."""
    counter = iter(range(1_000_000))

    def make(profile: str, node_index: int = 0, **kwargs: Any) -> NodeSnap:
        return write_node(tmp_path / f"n{next(counter)}" / "nvml.snapshot", profile, node_index, **kwargs)

    return make


@pytest.fixture
def nvml(pynvml_module: ModuleType, node_snapshot: Callable[..., NodeSnap]) -> Iterator[Callable[..., NodeSnap]]:
    """``snap = nvml("dgx-h100")``: write the snapshot and nvmlInit on it; shut down at the end of the test."""
    inits: list[int] = []
    stack: list[Any] = []

    def init(profile: str, node_index: int = 0, env: dict[str, str] | None = None, **kwargs: Any) -> NodeSnap:
        snap = node_snapshot(profile, node_index, **kwargs)
        ctx = snapshot_env(snap.path, **(env or {}))
        ctx.__enter__()
        stack.append(ctx)
        pynvml_module.nvmlInit()
        inits.append(1)
        return snap

    yield init
    for _ in inits:
        pynvml_module.nvmlShutdown()
    for ctx in reversed(stack):
        ctx.__exit__(None, None, None)


@pytest.fixture(scope="session")
def real_nvidia() -> RealNvidia:
    """The real NVIDIA 535 packages (nvidia-smi, libnvidia-ml, nvml.h of CUDA 11.8)."""
    return references.real_nvidia(535)


@pytest.fixture(scope="module")
def h100() -> dict[str, str]:
    """The real (idle) H100's nvidia-smi -q -x, element path -> text."""
    return board_capture("h100")
