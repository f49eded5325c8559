"""The per-script table of ndctl's CXL tests, printed after the run (a plugin of tests/conftest.py).

The scripts are spread over several test files so that ``pytest-xdist --dist loadfile`` can run the two long ones
(cxl-topology.sh, cxl-create-region.sh) on different workers; every worker appends its rows to one file the
controlling process names before it starts them (its environment is theirs), and the controller prints them. It
lives in the root conftest's plugins because under xdist the controller never loads tests/peer/conftest.py.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from tests.peer.ndctl import RESULTS_ENV, SCRIPTS

_OWNED = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    if RESULTS_ENV not in os.environ:  # the controller (or a run without xdist): workers inherit it
        fd, path = tempfile.mkstemp(prefix="fhw-peer-", suffix=".jsonl")
        os.close(fd)
        os.environ[RESULTS_ENV] = path
        config.stash[_OWNED] = path


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_OWNED, None)
    if path is not None:
        os.environ.pop(RESULTS_ENV, None)
        Path(path).unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    path = config.stash.get(_OWNED, None)
    if path is None or not Path(path).exists():
        return
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if not rows:
        return
    order = {s.name: i for i, s in enumerate(SCRIPTS)}
    rows.sort(key=lambda r: order.get(r[0], len(order)))
    terminalreporter.section("ndctl CXL tests against cxl-test (fakehw)")
    width = max(len(r[0]) for r in rows)
    terminalreporter.line(f"{'script':<{width}}  {'result':<10} {'seconds':>8}  evidence")
    for name, result, seconds, evidence in rows:
        terminalreporter.line(f"{name:<{width}}  {result:<10} {seconds:>8.1f}  {evidence}")
