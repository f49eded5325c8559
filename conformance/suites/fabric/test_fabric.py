"""Every fabric requirement, one test each: static ones from the linter, dynamic ones measured on the fabric."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fakehw.fabric.checks import ProbeReport
from fakehw.fabric.lint import LintReport
from fakehw.fabric.requirements import REQUIREMENTS

STATIC = [r.id for r in REQUIREMENTS.values() if r.kind == "static"]
DYNAMIC = [r.id for r in REQUIREMENTS.values() if r.kind == "dynamic"]


@pytest.mark.parametrize("req_id", [pytest.param(i, marks=pytest.mark.requirement(i), id=i) for i in STATIC])
def test_static(req_id: str, lint_report: LintReport, evidence: Callable[[str, Any], None]) -> None:
    findings = [f for f in lint_report.findings if f.id == req_id]
    if req_id in lint_report.not_applicable:
        from conformance import not_applicable

        not_applicable(lint_report.not_applicable[req_id])
    if findings:
        evidence("lint findings", [str(f) for f in findings[:20]])
    assert not findings, f"{len(findings)} finding(s): {findings[0]}"


@pytest.mark.parametrize("req_id", [pytest.param(i, marks=pytest.mark.requirement(i), id=i) for i in DYNAMIC])
def test_dynamic(req_id: str, probe_report: ProbeReport, evidence: Callable[[str, Any], None]) -> None:
    results = probe_report.by_id(req_id)
    if not results:
        pytest.skip(f"no path of this fabric exercises {req_id}")
    failed = [r for r in results if not r.passed]
    evidence("measured", [f"{r.subject}: expected {r.expected}, measured {r.measured}" for r in failed[:20]]
             or f"{len(results)} measurement(s), all as expected")
    assert not failed, f"{len(failed)} of {len(results)} measurement(s) differ: {failed[0].subject}: expected " \
                       f"{failed[0].expected}, measured {failed[0].measured}"
