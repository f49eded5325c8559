"""One run of the device plugin suite as a certification runs it: pytest in a child process, a results file.

Shared by tests/conformance/test_device_plugin_suite.py (local backend: the reference plugin, its mutants, hostile
plugins) and tests/docker/test_device_plugin_backend.py (the reference plugin in a node container), which live in
different files so that only the Docker run is scheduled with the other Docker files (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.requirements import catalogue

SUITE = Path(__file__).resolve().parents[2] / "conformance" / "suites" / "device_plugin"
REFERENCE = f"{shlex.quote(sys.executable)} -m testbed.reference.device_plugin"
REFERENCE_BUDGET = ("--dp-fuzz-examples", "2", "--dp-fuzz-steps", "8")
RUN_TIMEOUT_S = 900.0
ALL_IDS = frozenset(r.id for r in catalogue().for_target("device-plugin"))


@dataclass
class Run:
    label: str
    argv: list[str]
    results: Path
    returncode: int | None = None
    seconds: float = 0.0
    output: str = ""
    env: dict[str, str] = field(default_factory=dict)
    """Variables for the child on top of this process's (where its clusters go: tests.scratch.cluster_scratch)."""

    def doc(self) -> dict[str, Any]:
        if not self.results.is_file():
            pytest.fail(f"{self.label}: no results (exit {self.returncode}); output ends:\n{self.output[-3000:]}")
        data: dict[str, Any] = json.loads(self.results.read_text())
        return data

    def statuses(self) -> dict[str, str]:
        return {k: v["status"] for k, v in self.doc()["requirements"].items()}

    def failure_messages(self) -> str:
        return "\n".join(f"{t['nodeid']}: {t['message'][:600]}" for t in self.doc()["tests"]
                         if t["outcome"] in ("failed", "error"))


def execute(run: Run) -> Run:
    """Run the suite's child process to its end (or :data:`RUN_TIMEOUT_S`); ``run`` with its outcome."""
    started = time.monotonic()
    env = {**os.environ, "TESTCONTAINERS_RYUK_DISABLED": "true", **run.env}
    try:
        proc = subprocess.run(run.argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env,
                              check=False)
        run.returncode, run.output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        run.output = f"timed out after {RUN_TIMEOUT_S:g} s: {exc}"
    run.seconds = time.monotonic() - started
    return run


def suite_argv(profile: str, command: str, results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", "-q", "--profile", profile,
            "--target", f"device-plugin=cmd:{command}", "--conformance-results", str(results),
            "--conformance-complete", *extra]
