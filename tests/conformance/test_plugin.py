"""The conformance pytest plugin: the requirement marker, collection checks, and per-requirement results."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conformance.cli_run import SUITES
from conformance.pytest_plugin import requirement_status
from conformance.requirements import CatalogueError, _parse, catalogue

pytest_plugins = ["pytester"]

CATALOGUE = """\
target: selftest
requirements:
  - {id: ST-BASIC-001, title: first, rationale: because, category: basic, level: core}
  - {id: ST-BASIC-002, title: second, rationale: because, category: basic, level: core}
  - {id: ST-CHAOS-001, title: third, rationale: because, category: chaos, level: resilience}
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.Pytester:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "selftest.yaml").write_text(CATALOGUE)
    monkeypatch.setenv("FAKEHW_EXTRA_REQUIREMENTS", str(extra))
    return pytester


def test_results_are_aggregated_per_requirement(suite: pytest.Pytester, tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    suite.makepyfile(test_suite=textwrap.dedent(f"""
        import json, pytest

        @pytest.mark.requirement("ST-BASIC-001")
        def test_passes():
            pass

        @pytest.mark.requirement("ST-BASIC-001", "ST-BASIC-002")
        def test_fails(evidence):
            evidence("offending response", {{"devices": ["gpu0", "gpu0"]}})
            assert False, "duplicate device id gpu0"

        @pytest.mark.requirement("ST-CHAOS-001")
        def test_partial_file_is_valid_mid_run():
            doc = json.load(open({str(results)!r}))
            assert doc["complete"] is False and len(doc["tests"]) == 2

        def test_unmarked():
            pass
    """))
    run = suite.runpytest("--conformance-results", str(results), "--profile", "edge-pcie")
    run.assert_outcomes(passed=3, failed=1)
    doc = json.loads(results.read_text())
    assert doc["schema"] == "fakehw.conformance.results/v1" and doc["complete"] is True
    assert doc["environment"]["profile"] == "edge-pcie"
    reqs = doc["requirements"]
    assert {k: v["status"] for k, v in reqs.items()} == {"ST-BASIC-001": "failed", "ST-BASIC-002": "failed",
                                                          "ST-CHAOS-001": "passed"}
    failed = next(t for t in doc["tests"] if t["nodeid"].endswith("test_fails"))
    assert "duplicate device id gpu0" in failed["message"]
    assert failed["evidence"] == [{"label": "offending response", "value": {"devices": ["gpu0", "gpu0"]}}]
    assert len(doc["tests"]) == 3, "unmarked tests are not part of the certification"
    run.stdout.fnmatch_lines(["*conformance: results per requirement*", "FAILED*ST-BASIC-001*first"])


def test_unknown_requirement_ids_stop_collection(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_x="""
        import pytest
        @pytest.mark.requirement("ST-NOPE-001")
        def test_a():
            pass
    """)
    run = suite.runpytest()
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines(["*unknown requirement ST-NOPE-001*"])


def test_complete_mode_wants_a_test_for_every_requirement(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_x="""
        import pytest
        @pytest.mark.requirement("ST-BASIC-001")
        def test_a():
            pass
    """)
    run = suite.runpytest("--conformance-complete")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines(["*requirements with no test:*", "*ST-BASIC-002 (selftest): second*",
                              "*ST-CHAOS-001 (selftest): third*"])
    assert suite.runpytest().ret == pytest.ExitCode.OK


def test_target_options_reach_the_fixtures(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_x="""
        def test_targets(conformance_targets, conformance_backend, conformance_profile):
            assert conformance_targets["device-plugin"].spec == "cmd:python -m plugin"
            assert conformance_backend == "docker" and conformance_profile == "dgx-h100"
    """)
    suite.runpytest("--target", "device-plugin=cmd:python -m plugin", "--backend", "docker").assert_outcomes(passed=1)
    bad = suite.runpytest("--target", "nonsense")
    assert "--target takes KIND=SPEC" in bad.stdout.str() + bad.stderr.str()


def test_status_rules() -> None:
    assert requirement_status([]) == "not-run"
    assert requirement_status(["skipped", "skipped"]) == "skipped"
    assert requirement_status(["skipped", "passed"]) == "passed"
    assert requirement_status(["passed", "failed", "skipped"]) == "failed"
    assert requirement_status(["failed", "error"]) == "error"
    assert requirement_status(["not-applicable", "not-applicable"]) == "not-applicable"
    assert requirement_status(["not-applicable", "passed"]) == "passed"
    assert requirement_status(["not-applicable", "skipped"]) == "skipped", "a skip means something did not run"
    assert requirement_status(["not-applicable", "failed"]) == "failed"


NOT_APPLICABLE_SUITE = """
    import pytest
    from conformance import not_applicable

    @pytest.mark.requirement("ST-BASIC-001")
    def test_runs():
        pass

    @pytest.mark.requirement("ST-BASIC-002")
    def test_no_pools_here():
        not_applicable("no memory pools on this profile: nothing to reserve")
        raise AssertionError("not reached")

    @pytest.mark.requirement("ST-CHAOS-001")
    def test_plain_skip():
        pytest.skip("harness could not start the chaos proxy")
"""


@pytest.mark.parametrize("workers", [0, 2], ids=["serial", "xdist"])
def test_not_applicable_is_its_own_outcome_with_its_reason(suite: pytest.Pytester, tmp_path: Path,
                                                           workers: int) -> None:
    """A not-applicable ending is neither a pass nor a skip in the results, and its reason travels with it (also
    from xdist workers, where only the report crosses the process boundary)."""
    if workers:
        pytest.importorskip("xdist")
    results = tmp_path / "results.json"
    suite.makepyfile(test_suite=textwrap.dedent(NOT_APPLICABLE_SUITE))
    args = ["--conformance-results", str(results)] + (["-n", str(workers), "-p", "xdist"] if workers else [])
    run = suite.runpytest_subprocess(*args)
    run.assert_outcomes(passed=1, skipped=2)
    doc = json.loads(results.read_text())
    assert {k: v["status"] for k, v in doc["requirements"].items()} == {
        "ST-BASIC-001": "passed", "ST-BASIC-002": "not-applicable", "ST-CHAOS-001": "skipped"}
    na = next(t for t in doc["tests"] if t["nodeid"].endswith("test_no_pools_here"))
    assert na["outcome"] == "not-applicable"
    assert na["message"] == "no memory pools on this profile: nothing to reserve"


def test_not_applicable_needs_a_reason() -> None:
    from conformance import not_applicable

    with pytest.raises(ValueError, match="needs a reason"):
        not_applicable("  ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("target: x\nrequirements:\n  - {id: bad, title: t, rationale: r, category: c, level: core}\n", "is not like"),
        ("target: x\nrequirements:\n  - {id: XX-YY-001, title: t, rationale: r, category: c, level: gold}\n",
         "level must be"),
        ("target: x\nrequirements:\n  - {id: XX-YY-001, title: t, category: c, level: core}\n",
         "rationale is required"),
        ("target: x\nrequirements:\n  - {id: XX-YY-001, title: t, rationale: r, category: c, level: core, x: 1}\n",
         "unknown keys"),
        ("requirements: []\n", "needs 'target'"),
    ],
)
def test_malformed_catalogue_entries_are_named(text: str, message: str) -> None:
    with pytest.raises(CatalogueError, match=message):
        _parse("bad.yaml", text)


def test_the_shipped_catalogue_loads() -> None:
    cat = catalogue()
    assert len({r.id for r in cat.requirements}) == len(cat.requirements)
    # every target `conformance run` offers has required requirements, and the catalogue names no other target
    assert {r.target for r in cat.requirements} == set(SUITES)
    assert all(any(r.required for r in cat.for_target(t)) for t in SUITES)


def test_results_are_complete_under_xdist(suite: pytest.Pytester, tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    results = tmp_path / "results.json"
    suite.makepyfile(test_suite="""
        import pytest

        @pytest.mark.parametrize("n", range(6))
        @pytest.mark.requirement("ST-BASIC-001")
        def test_many(n, evidence):
            evidence("n", n)

        @pytest.mark.requirement("ST-BASIC-002")
        def test_fails():
            assert False, "boom"
    """)
    run = suite.runpytest_subprocess("-n", "2", "-p", "xdist", "--conformance-results", str(results))
    run.assert_outcomes(passed=6, failed=1)
    doc = json.loads(results.read_text())
    assert doc["complete"] is True and len(doc["tests"]) == 7
    assert doc["requirements"]["ST-BASIC-001"]["status"] == "passed"
    assert doc["requirements"]["ST-BASIC-002"]["status"] == "failed"
    assert sorted(t["evidence"][0]["value"] for t in doc["tests"] if t["evidence"]) == list(range(6))
