"""``conformance run`` as a matrix: several targets x profiles x backends, an index, exit codes, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fakehw.fabric.emulate import root_problem

BIN = Path(sys.executable).parent


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "conformance"), "run", *args], capture_output=True, text=True, timeout=900,
                          cwd=cwd)


def test_a_matrix_writes_a_report_per_run_and_an_index(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _run("--target", "fabric", "--profile", "dgx-h100-roce", "--profile", "gb200-nvl72-roce", "-k", "static",
                "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # the measured requirements did not run: not certified
    assert "[1/2] fabric on dgx-h100-roce (local): dgx-h100-rail" in proc.stderr
    assert "[2/2] fabric on gb200-nvl72-roce (local): gb200-nvl72-spine-leaf" in proc.stderr
    index = json.loads((out / "index.json").read_text())
    assert index["verdict"] == "not-certified"
    assert [(r["profile"], r["component"], r["certified"]) for r in index["runs"]] == [
        ("dgx-h100-roce", "dgx-h100-rail", False), ("gb200-nvl72-roce", "gb200-nvl72-spine-leaf", False)]
    for run in index["runs"]:
        report = json.loads((Path(run["dir"]) / "report.json").read_text())
        assert report["manifest"]["profile"] == run["profile"]
        statuses = {r["id"]: r["status"] for r in report["results"]}
        assert {s for i, s in statuses.items() if "-DYN-" in i} == {"not-run"}
        assert {s for i, s in statuses.items() if "-DYN-" not in i} == {"passed"}
    summary = (out / "summary.md").read_text()
    assert "| fabric | dgx-h100-roce | local | NOT CERTIFIED |" in summary
    verify = subprocess.run([str(BIN / "conformance"), "verify", str(out)], capture_output=True, text=True)
    assert verify.returncode == 0 and verify.stdout.count(": verified; verdict NOT CERTIFIED; UNSIGNED") == 2, \
        verify.stdout


@pytest.mark.skipif(root_problem() is not None, reason=f"needs root for network namespaces: {root_problem()}")
def test_a_certified_run_exits_0(tmp_path: Path) -> None:
    proc = _run("--target", "fabric=dgx-h100-rail", "--profile", "dgx-h100-roce", "--out", str(tmp_path / "o"),
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert json.loads((tmp_path / "o" / "index.json").read_text())["verdict"] == "certified"
    assert json.loads((tmp_path / "o" / "report.json").read_text())["verdicts"]["overall"] == "certified"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--target", "fabric", "--profile", "no-such-profile"), "profile no-such-profile is not valid"),
        (("--target", "fabric", "--profile", "edge-pcie"), "no built-in fabric config for profile edge-pcie"),
        (("--target", "device-plugin", "--target", "extender", "--plugin-cmd", "x"), "apply to one target"),
        (("--target", "toaster"), "no suite for target 'toaster'"),
    ],
)
def test_bad_matrices_are_refused_before_anything_runs(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = _run(*args, "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o" / "index.json").exists()


@pytest.mark.parametrize(("args", "message"), [
    (("--target", "gpu-operator"), "no target 'gpu-operator' in the catalogue (known: device-plugin, extender, "
                                   "fabric, ray, slurm)"),
    (("--category", "thermals"), "no category 'thermals' in the catalogue (known: allocation, buf, chaos,"),
    (("--target", "fabric", "--category", "health"), "no requirement matches"),
])
def test_list_names_what_it_does_not_know(args: tuple[str, ...], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from conformance.cli import main

    assert main(["list", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_the_run_summary_follows_the_reports_verdict_rules() -> None:
    """A run that did not finish, or one where no required requirement passed, is not certified."""
    from conformance.cli_run import summarize

    passed = {"DP-REG-001": {"status": "passed", "title": "t", "tests": ["a"]}}
    lines, ok = summarize({"complete": False, "requirements": passed, "tests": []})
    assert not ok and lines[-1].endswith("NOT CERTIFIED (partial: the run did not finish)")
    recommended_only = {"DP-HEALTH-006": {"status": "passed", "title": "t", "tests": ["a"]}}
    lines, ok = summarize({"complete": True, "requirements": recommended_only, "tests": []})
    assert not ok and lines[-1].endswith("NOT CERTIFIED")
    lines, ok = summarize({"complete": True, "requirements": passed, "tests": []})
    assert ok and lines[-1] == "1 passed of 1 requirements; CERTIFIED: every required requirement that applies passed"
