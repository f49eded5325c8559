"""Fixtures of the fabric suite: the config under test (``--target fabric=CONFIG``), its lint report, and the
measurements on an emulated build of it (root only; without root the dynamic checks skip and say so)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.pytest_plugin import TargetSpec
from fakehw.fabric.checks import ProbeReport
from fakehw.fabric.lint import LintReport, lint
from fakehw.fabric.model import FabricModel


@pytest.fixture(scope="session")
def fabric_model(conformance_targets: dict[str, TargetSpec]) -> FabricModel:
    from fakehw.fabric.loader import FabricError
    from fakehw.fabric.model import load_fabric

    spec = conformance_targets.get("fabric")
    if spec is None:
        raise pytest.UsageError("the fabric suite needs --target fabric=CONFIG (a built-in name, a YAML file, or "
                                "sonic:DIR / nvue:DIR)")
    try:
        return load_fabric(spec.spec)
    except FabricError as exc:
        raise pytest.UsageError(f"fabric config {spec.spec} does not load:\n{exc}") from None


@pytest.fixture(scope="session")
def lint_report(fabric_model: FabricModel) -> LintReport:
    return lint(fabric_model)


@pytest.fixture(scope="session")
def probe_report(fabric_model: FabricModel, lint_report: LintReport) -> Iterator[ProbeReport]:
    from fakehw.fabric.checks import run_checks
    from fakehw.fabric.emulate import EmulatedFabric, root_problem
    from fakehw.fabric.plan import EmulationError
    from fakehw.fabric.traffic import Prober, start_responder

    problem = root_problem()
    if problem is not None:
        pytest.skip(f"measuring the fabric needs network namespaces: {problem}")
    state = Path(tempfile.mkdtemp(prefix="fhfab-"))
    try:
        fabric = EmulatedFabric.build(fabric_model, state_dir=state)
    except EmulationError as exc:
        pytest.skip(f"{fabric_model.name} cannot be emulated on this kernel: {exc}")
    prober = None
    try:
        start_responder(fabric, workdir=state)
        prober = Prober(fabric)
        yield run_checks(fabric, lint_report, prober, mtu="all")
    finally:
        if prober is not None:
            prober.close()
        fabric.teardown()
        shutil.rmtree(state, ignore_errors=True)
