"""Certification reports: built from a real pytest run, sealed, verified, tampered with, rendered and looked at."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from conformance.cli import main as conformance_main
from conformance.report import build_report, load_report, render, report_json_schema, verify
from conformance.report.model import Report

pytest_plugins = ["pytester"]

CATALOGUE = """\
target: selftest
requirements:
  - {id: ST-BASIC-001, title: registers, rationale: because, category: basic, level: core}
  - {id: ST-BASIC-002, title: lists devices, rationale: because, category: basic, level: core}
  - {id: ST-TOPO-001, title: prefers NVLink, rationale: because, category: topology, level: topology}
  - {id: ST-FUZZ-001, title: keeps tenants apart, rationale: because, category: fuzz, level: isolation}
"""

SUITE = """
import pytest

@pytest.mark.requirement("ST-BASIC-001")
def test_registers():
    pass

@pytest.mark.requirement("ST-BASIC-002")
def test_lists():
    pass

@pytest.mark.requirement("ST-TOPO-001")
def test_topology(evidence):
    evidence("preferred set", ["gpu0", "gpu5"])
    assert {FAIL}, "picked GPUs that share no NVLink"

@pytest.mark.requirement("ST-FUZZ-001")
def test_fuzz(evidence):
    evidence("seed", 1234)
"""


@pytest.fixture
def results(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "selftest.yaml").write_text(CATALOGUE)
    monkeypatch.setenv("FAKEHW_EXTRA_REQUIREMENTS", str(extra))
    return tmp_path


def _run_suite(pytester: pytest.Pytester, out: Path, fail: bool) -> Path:
    pytester.makepyfile(test_suite=SUITE.replace("{FAIL}", "False" if fail else "True"))
    path = out / ("failing.json" if fail else "passing.json")
    pytester.runpytest("--conformance-results", str(path), "--profile", "dgx-h100",
                       "--target", "selftest=cmd:python -m reference")
    return path


def _report(path: Path) -> Report:
    return build_report(json.loads(path.read_text()))


def test_a_passing_run_is_certified_and_verifies(pytester: pytest.Pytester, results: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = _run_suite(pytester, results, fail=False)
    report = _report(path)
    assert report.verdicts.overall == "certified" and not report.partial
    assert {k: v.verdict for k, v in report.verdicts.levels.items()} == {
        "core": "pass", "topology": "pass", "resilience": "n/a", "isolation": "pass"}
    assert report.manifest.profile == "dgx-h100" and report.manifest.architectures == ["amd64"]
    from fakehw.model import load_profile

    assert report.manifest.profile_digest == load_profile("dgx-h100").digest
    assert [c.spec for c in report.manifest.components] == ["cmd:python -m reference"]
    fuzz = next(r for r in report.results if r.id == "ST-FUZZ-001")
    assert fuzz.seeds == ["1234"]
    assert verify(report) == []
    out = results / "out"
    assert conformance_main(["report", str(path), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["attestation.intoto.json", "junit.xml", "report.html",
                                                     "report.json", "results.json", "summary.md"]
    assert "UNSIGNED" in (out / "summary.md").read_text()
    assert conformance_main(["verify", str(out / "report.json")]) == 0
    said = capsys.readouterr().out
    assert "verified; verdict CERTIFIED; UNSIGNED" in said, said


def test_a_failing_run_is_not_certified_and_carries_evidence(pytester: pytest.Pytester, results: Path) -> None:
    report = _report(_run_suite(pytester, results, fail=True))
    assert report.verdicts.overall == "not-certified"
    assert report.verdicts.levels["topology"].verdict == "fail"
    assert report.verdicts.levels["topology"].failing == ["ST-TOPO-001"]
    assert report.verdicts.levels["core"].verdict == "pass"
    topo = next(r for r in report.results if r.id == "ST-TOPO-001")
    assert topo.status == "failed" and "picked GPUs that share no NVLink" in topo.message
    assert [(e.label, e.value) for e in topo.evidence] == [("preferred set", ["gpu0", "gpu5"])]
    junit = ET.fromstring(render(report, "junit"))
    suite = junit.find("testsuite")
    assert suite is not None and suite.get("name") == "selftest" and suite.get("failures") == "1"
    failure = next(c for c in suite.iter("testcase") if c.get("name", "").startswith("ST-TOPO-001"))
    assert failure.find("failure") is not None and "gpu5" in (failure.find("failure").text or "")  # type: ignore[union-attr]


def test_a_failed_recommended_requirement_is_shown_as_such_in_every_format(
        pytester: pytest.Pytester, results: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalogue (input to the suite, not the code under test) makes ST-TOPO-001 recommended and the suite
    fails it: the run certifies (recommended requirements never decide a level), yet summary.md, report.html and
    report.json each show that requirement as a recommended miss, apart from required failures and passes; the
    sealed run still verifies."""
    (results / "extra" / "selftest.yaml").write_text(CATALOGUE.replace(
        "category: topology, level: topology}", "category: topology, level: topology, required: false}"))
    path = _run_suite(pytester, results, fail=True)
    out = results / "out"
    assert conformance_main(["report", str(path), "--out", str(out)]) == 0
    assert conformance_main(["verify", str(out)]) == 0
    assert "verified; verdict CERTIFIED" in capsys.readouterr().out
    data = json.loads((out / "report.json").read_text())
    topo = next(r for r in data["results"] if r["id"] == "ST-TOPO-001")
    assert (topo["status"], topo["required"], data["verdicts"]["overall"]) == ("failed", False, "certified")

    summary = (out / "summary.md").read_text()
    assert "**Why:**" not in summary  # nothing required failed: nothing explains a verdict that was not lost
    assert "**⚠️ Recommended, not met**" in summary
    assert "- ⚠️ `ST-TOPO-001` prefers NVLink (topology, recommended, failed): " in summary
    assert "picked GPUs that share no NVLink" in summary
    assert "| topology | n/a | 0/0 | 0 | 1/1 |" in summary and "| core | pass | 2/2 | 0 | 0/0 |" in summary
    assert "3 passed, 1 failed, 0 errors (1 of them recommended: ⚠️ below)" in summary
    assert "| ⚠️ | ST-TOPO-001 | topology | recommended | failed | prefers NVLink |" in summary
    assert "| ✅ | ST-BASIC-001 | core | required | passed | registers |" in summary
    assert "❌" not in summary

    html = (out / "report.html").read_text()
    assert "<td class=recommended>" in html and "failed (recommended)</td><td class=mono>ST-TOPO-001" in html
    assert "Recommended, not met" in html and "Why it is not certified" not in html

    # The same failure when the catalogue makes it required: a ❌ that decides the level, under "Why".
    extra = results / "extra-required"
    extra.mkdir()
    (extra / "selftest.yaml").write_text(CATALOGUE)
    monkeypatch.setenv("FAKEHW_EXTRA_REQUIREMENTS", str(extra))
    required = render(_report(_run_suite(pytester, results, fail=True)), "md")
    assert "**Why:**\n- ❌ `ST-TOPO-001` prefers NVLink (topology, required, failed): " in required
    assert "| ❌ | ST-TOPO-001 | topology | required | failed | prefers NVLink |" in required
    assert "⚠️" not in required and "| topology | fail | 0/1 | 0 | 0/0 |" in required


NOT_APPLICABLE_SUITE = """
import pytest
from conformance import not_applicable

@pytest.mark.requirement("ST-BASIC-001")
def test_registers():
    pass

@pytest.mark.requirement("ST-BASIC-002")
def test_lists():
    not_applicable("the component lists no devices of this kind")

@pytest.mark.requirement("ST-TOPO-001")
def test_topology():
    not_applicable("one GPU per node: no placement to prefer")

@pytest.mark.requirement("ST-FUZZ-001")
def test_fuzz():
    pass
"""


def test_not_applicable_neither_passes_nor_fails_and_shows_everywhere(pytester: pytest.Pytester,
                                                                      results: Path) -> None:
    pytester.makepyfile(test_suite=NOT_APPLICABLE_SUITE)
    path = results / "na.json"
    pytester.runpytest("--conformance-results", str(path), "--profile", "dgx-h100")
    report = _report(path)
    levels = report.verdicts.levels
    assert report.verdicts.overall == "certified"
    assert (levels["core"].verdict, levels["core"].passed, levels["core"].not_applicable) == (
        "pass", 1, ["ST-BASIC-002"])
    assert (levels["topology"].verdict, levels["topology"].passed, levels["topology"].failing) == ("n/a", 0, [])
    assert report.summary["not-applicable"] == 2 and report.summary["passed"] == 2
    assert verify(report) == []
    row = next(r for r in report.results if r.id == "ST-TOPO-001")
    assert row.status == "not-applicable" and "one GPU per node" in row.message
    markdown = render(report, "md")
    assert "2 not applicable" in markdown and "| core | pass | 1/1 | 1 | 0/0 |" in markdown
    html = render(report, "html")
    assert "not-applicable" in html and "one GPU per node: no placement to prefer" in html
    junit = ET.fromstring(render(report, "junit"))
    skipped = sorted(s.get("message", "") for c in junit.iter("testcase") if (s := c.find("skipped")) is not None)
    assert len(skipped) == 2 and all(m.startswith("not applicable: ") for m in skipped)
    assert "the component lists no devices of this kind" in skipped[0]
    assert "one GPU per node: no placement to prefer" in skipped[1]


def test_editing_one_result_breaks_verification(pytester: pytest.Pytester, results: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The report's own checks (tests/conformance/test_report_tamper.py tries every field and file)."""
    path = _run_suite(pytester, results, fail=True)
    out = results / "out"
    assert conformance_main(["report", str(path), "--out", str(out)]) == 0
    doc = json.loads((out / "report.json").read_text())
    row = next(r for r in doc["results"] if r["id"] == "ST-TOPO-001")
    row["status"] = "passed"
    (out / "report.json").write_text(json.dumps(doc))
    assert conformance_main(["verify", str(out)]) == 1
    err = capsys.readouterr().err
    assert "sha256 mismatch" in err and "report.json was changed after the run was sealed" in err, err
    # Re-sealing the report after the edit does not help: the verdicts no longer follow from the results.
    resealed = load_report(json.dumps(doc)).sealed()
    (out / "report.json").write_text(resealed.to_json())
    assert conformance_main(["verify", str(out)]) == 1
    err = capsys.readouterr().err
    assert "verdicts do not follow from the results" in err and "overall not-certified (results give certified)" \
        in err, err


def test_bad_inputs_to_report_and_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.json").write_text("{}")
    assert conformance_main(["report", str(tmp_path / "x.json")]) == 2
    assert "not a conformance results file" in capsys.readouterr().err
    assert conformance_main(["report", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "report.json").write_text("{not json")
    assert conformance_main(["verify", str(tmp_path / "bad")]) == 1
    assert "not JSON" in capsys.readouterr().err
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "report.json").write_text(json.dumps({"schema": "fakehw.conformance.report/v1"}))
    assert conformance_main(["verify", str(tmp_path / "old")]) == 1
    assert "not a certification report (expected schema 'fakehw.conformance.report/v2')" in capsys.readouterr().err
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "report.json").write_text(json.dumps({"schema": "fakehw.conformance.report/v2",
                                                            "partial": "maybe"}))
    assert conformance_main(["verify", str(tmp_path / "r")]) == 1
    assert "report.json:" in capsys.readouterr().err
    assert conformance_main(["verify", str(tmp_path / "x.json")]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert conformance_main(["verify", str(tmp_path / "r"), "--key", str(tmp_path / "x.json")]) == 2
    assert "not a PEM public key" in capsys.readouterr().err


def test_the_shipped_schema_is_current_and_validates_reports(pytester: pytest.Pytester, results: Path) -> None:
    shipped = json.loads((Path(__file__).parents[2] / "conformance" / "report" / "report.schema.json").read_text())
    assert shipped == json.loads(json.dumps(report_json_schema())), "regenerate conformance/report/report.schema.json"
    doc = json.loads(_report(_run_suite(pytester, results, fail=True)).to_json())
    jsonschema.Draft202012Validator(shipped).validate(doc)


def test_a_killed_run_leaves_a_valid_partial_report(results: Path, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_slow.py").write_text(textwrap.dedent("""
        import time, pytest
        @pytest.mark.requirement("ST-BASIC-001")
        def test_quick():
            pass
        @pytest.mark.requirement("ST-BASIC-002")
        def test_forever():
            time.sleep(600)
    """))
    path = tmp_path / "results.json"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite),
                             "--conformance-results", str(path)], cwd=tmp_path, env=os.environ.copy(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    report = _report(path)
    assert report.partial and report.verdicts.overall == "partial"
    assert {r.id: r.status for r in report.results} == {"ST-BASIC-001": "passed", "ST-BASIC-002": "not-run",
                                                         "ST-TOPO-001": "not-run", "ST-FUZZ-001": "not-run"}
    assert verify(report) == []
    assert "PARTIAL" in render(report, "md")


@pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("tesseract")),
                    reason="needs Debian's chromium and tesseract-ocr (tools/install-system-deps.sh installs them)")
def test_the_html_report_renders_in_headless_chromium(pytester: pytest.Pytester, results: Path,
                                                      tmp_path: Path) -> None:
    report = _report(_run_suite(pytester, results, fail=True))
    html = tmp_path / "report.html"
    html.write_text(render(report, "html"))
    png = tmp_path / "shot.png"
    profile_dir = tmp_path / "chrome-profile"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", f"--user-data-dir={profile_dir}", "--hide-scrollbars",
                    "--window-size=1280,2400", f"--screenshot={png}", html.as_uri()],
                   check=True, capture_output=True, timeout=120)
    assert png.stat().st_size > 10_000
    text = subprocess.run(["tesseract", str(png), "stdout"], capture_output=True, text=True, check=True,
                          timeout=120).stdout
    assert "NOT CERTIFIED" in text, text[:500]
    assert "ST-TOPO-001" in text and "ST-BASIC-001" in text
    assert "failed" in text and "passed" in text
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync", "--no-first-run",
                          f"--user-data-dir={profile_dir}", "--dump-dom", html.as_uri()],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    assert "<svg" in dom and "GPU7" in dom and "nvsw3" in dom
