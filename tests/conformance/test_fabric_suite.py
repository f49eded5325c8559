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
    assert {"-".join(n.split("-")[:3]) for n in broken_examples()} == static, \
        "every static requirement has broken example configs named after it"
    one_each = {"-".join(n.split("-")[:3]): n for n in sorted(broken_examples())}
    for name, path in sorted((n, broken_examples()[n]) for n in one_each.values()):
        seeded = "-".join(name.split("-")[:3])
        statuses = _run(str(path), tmp_path, "-k", "static")
        failed = {i for i, s in statuses.items() if s == "failed"}
        assert failed == {seeded}, (name, failed)
        assert all(statuses[i] == "passed" for i in static - {seeded})


@pytest.mark.parametrize("name", sorted(builtin_fabrics()))
def test_healthy_configs_pass_every_static_requirement(name: str, tmp_path: Path) -> None:
    statuses = _run(name, tmp_path, "-k", "static")
    assert {s for i, s in statuses.items() if REQUIREMENTS[i].kind == "static"} == {"passed"}


def test_an_import_without_buffer_settings_reports_headroom_not_applicable(tmp_path: Path) -> None:
    text = (Path(builtin_fabrics()["dgx-h100-rail"]).read_text().replace("    headroom: [3]\n", ""))
    config = tmp_path / "no-buffers.yaml"
    config.write_text(text)
    statuses = _run(str(config), tmp_path, "-k", "static")
    assert statuses["FAB-BUF-001"] == "not-applicable"


@pytest.mark.skipif(root_problem() is not None, reason=f"needs root for network namespaces: {root_problem()}")
def test_conformance_run_certifies_the_healthy_sonic_import(tmp_path: Path) -> None:
    from fakehw.fabric.loader import examples_dir

    target = f"fabric=sonic:{examples_dir() / 'sonic' / 'dgx-h100-rail'}"
    cli = str(Path(sys.executable).parent / "conformance")
    proc = subprocess.run([cli, "run", "--target", target, "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["verdicts"]["overall"] == "certified", report["verdicts"]


@pytest.mark.skipif(root_problem() is not None, reason=f"needs root for network namespaces: {root_problem()}")
def test_measured_requirements_pass_on_the_emulated_healthy_fabric(tmp_path: Path) -> None:
    statuses = _run("dgx-h100-rail", tmp_path)
    assert statuses == dict.fromkeys(REQUIREMENTS, "passed")
