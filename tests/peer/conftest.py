"""Prints the per-script table of the peer suites (ndctl's CXL tests) after the run."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.peer.test_ndctl_cxl import RESULTS

    if not RESULTS:
        return
    terminalreporter.section("ndctl CXL tests against cxl-test (fakehw)")
    width = max(len(name) for name, *_ in RESULTS)
    terminalreporter.line(f"{'script':<{width}}  {'result':<10} {'seconds':>8}  evidence")
    for name, result, seconds, evidence in RESULTS:
        terminalreporter.line(f"{name:<{width}}  {result:<10} {seconds:>8.1f}  {evidence}")
