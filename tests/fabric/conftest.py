"""Fixtures for the fabric tests: root-only fixtures skip with the reason when the host cannot emulate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehw.fabric.emulate import EmulatedFabric, root_problem
from fakehw.fabric.lint import lint
from fakehw.fabric.model import load_fabric
from fakehw.fabric.traffic import LiveFabric, Prober, start_responder


@pytest.fixture(scope="session")
def need_root() -> None:
    problem = root_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="module")
def healthy(need_root: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveFabric]:
    model = load_fabric("dgx-h100-rail")
    state: Path = tmp_path_factory.mktemp("healthy")
    with EmulatedFabric.build(model, state_dir=state) as fabric:
        responder = start_responder(fabric)
        prober = Prober(fabric)
        yield LiveFabric(fabric, lint(model), responder, prober)
