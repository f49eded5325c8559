"""The fabric suite has teeth: each broken example config fails exactly the requirement it seeds, the healthy
ones pass everything, and on root the measured requirements pass on the emulated healthy fabric."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.requirements import catalogue
from fakehw.fabric.emulate import root_problem
from fakehw.fabric.loader import broken_examples, builtin_fabrics
from fakehw.fabric.requirements import REQUIREMENTS

SUITE = Path(__file__).parents[2] / "conformance" / "suites" / "fabric"


def _run(config: str, tmp_path: Path, *extra: str) -> dict[str, str]:
    results = tmp_path / "results.json"
    subprocess.run([sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider",
                    "--import-mode=importlib", "--target", f"fabric={config}", "--conformance-results", str(results),
                    "--conformance-complete", *extra], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    doc = json.loads(results.read_text())
    return {k: v["status"] for k, v in doc["requirements"].items()}


def test_the_catalogue_reads_the_fabric_table() -> None:
    fabric = {r.id: r for r in catalogue().for_target("fabric")}
    assert set(fabric) == set(REQUIREMENTS)
    for req in REQUIREMENTS.values():
        assert fabric[req.id].required == (req.severity == "error") and fabric[req.id].title == req.title


def test_each_broken_config_fails_exactly_its_requirement(tmp_path: Path) -> None:
    static = {r.id for r in REQUIREMENTS.values() if r.kind == "static"}
    assert sorted("-".join(n.split("-")[:3]) for n in broken_examples()) == sorted(static), \
        "every static requirement has one broken example config named after it"
    for name, path in sorted(broken_examples().items()):
        seeded = "-".join(name.split("-")[:3])
        statuses = _run(str(path), tmp_path, "-k", "static")
        failed = {i for i, s in statuses.items() if s == "failed"}
        assert failed == {seeded}, (name, failed)
        assert all(statuses[i] == "passed" for i in static - {seeded})


@pytest.mark.parametrize("name", sorted(builtin_fabrics()))
def test_healthy_configs_pass_every_static_requirement(name: str, tmp_path: Path) -> None:
    statuses = _run(name, tmp_path, "-k", "static")
    assert {s for i, s in statuses.items() if REQUIREMENTS[i].kind == "static"} == {"passed"}


@pytest.mark.skipif(root_problem() is not None, reason=f"needs root for network namespaces: {root_problem()}")
def test_measured_requirements_pass_on_the_emulated_healthy_fabric(tmp_path: Path) -> None:
    statuses = _run("dgx-h100-rail", tmp_path)
    assert statuses == dict.fromkeys(REQUIREMENTS, "passed")
