"""The scheduler extender suite, run as a certification runs it (pytest in a child process, results file):

- the reference extender passes every requirement on dgx-h100 (4 nodes), gb200-nvl72 (18 trays, one NVLink
  domain) and mixed-arch (riscv64 + amd64), and on dgx-h100 also when configured without nodeCacheCapable (Node
  objects sent instead of names);
- every mutant of testbed/reference/extender/mutants.py fails exactly the requirements it breaks, on the profile
  its entry names, and passes all the others.

One testbed per profile is stood up for the session and every run attaches to it (``--sched-attach``): runs on
one profile go one after the other, different profiles ``FAKEHW_SCHED_PARALLEL`` (default 2) at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.requirements import catalogue
from testbed.api import Testbed
from testbed.cluster import scratch_dir
from testbed.reference.extender.mutants import MUTANTS
from tests.scratch import cluster_scratch

pytestmark = pytest.mark.slow
SCRATCH = cluster_scratch()
"""The suites' clusters on tmpfs where it has room (no node views here: the extender and its kube-scheduler run on
the host); see :func:`testbed.cluster.scratch_dir`."""

SUITE = Path(__file__).resolve().parents[2] / "conformance" / "suites" / "scheduler"
NODES = {"dgx-h100": 4, "edge-pcie": 4}
ACCEPTANCE = (("dgx-h100", "reference"), ("gb200-nvl72", "reference"), ("mixed-arch", "reference"),
              ("dgx-h100", "reference?nodeCacheCapable=false"))
MUTANT_BUDGET = ("--sched-fuzz-examples", "6", "--sched-fuzz-no-shrink")
ALL_IDS = frozenset(r.id for r in catalogue().for_target("extender"))
RUN_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Run:
    profile: str
    target: str
    extra: tuple[str, ...] = ()


@dataclass
class Outcome:
    doc: dict[str, Any]
    log: str

    def statuses(self) -> dict[str, str]:
        return {k: str(v["status"]) for k, v in self.doc.get("requirements", {}).items()}

    def failed(self) -> set[str]:
        """Requirements that neither passed nor said, with a reason, that they do not apply."""
        return {k for k, v in self.statuses().items() if v not in ("passed", "not-applicable")}

    def unexplained_not_applicable(self) -> set[str]:
        ids = {k for k, v in self.statuses().items() if v == "not-applicable"}
        explained = {r for t in self.doc["tests"] if t["outcome"] == "not-applicable" and t["message"].strip()
                     for r in t["requirements"]}
        return ids - explained


def _run(run: Run, cluster: str, state: Path, out: Path) -> Outcome:
    results = out / "results.json"
    argv = [sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", "-q", "--import-mode=importlib",
            "--profile", run.profile, "--target", f"extender={run.target}", "--conformance-results", str(results),
            "--conformance-complete", "--sched-attach", f"{state}:{cluster}", *run.extra]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
                          env={**os.environ, "HYPOTHESIS_PROFILE": "dev", **SCRATCH.env})
    log = proc.stdout[-6000:] + proc.stderr[-3000:]
    if not results.is_file():
        raise AssertionError(f"the suite wrote no results (exit {proc.returncode}):\n{log}")
    return Outcome(json.loads(results.read_text()), log)


@pytest.fixture(scope="module")
def outcomes() -> Iterator[dict[Run, Future[Outcome]]]:
    runs = [Run(p, t) for p, t in ACCEPTANCE]
    runs += [Run(m.profile, f"reference:{m.name}", MUTANT_BUDGET) for m in MUTANTS.values()]
    by_profile: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_profile[r.profile].append(r)
    state = scratch_dir("fhw-ss-", SCRATCH.base)
    work = scratch_dir("fhw-ssw-", SCRATCH.base)
    futures: dict[Run, Future[Outcome]] = {r: Future() for r in runs}

    def lane(profile: str, cluster: str) -> None:
        """Stand up the profile's testbed, run its suites one after the other, tear it down."""
        try:
            tb = Testbed.up(profile, nodes=NODES.get(profile), name=cluster, state_dir=state)
        except Exception as exc:
            for r in by_profile[profile]:
                futures[r].set_exception(exc)
            return
        try:
            for i, r in enumerate(by_profile[profile]):
                out = work / f"{cluster}-{i}"
                out.mkdir()
                try:
                    futures[r].set_result(_run(r, cluster, state, out))
                except Exception as exc:
                    futures[r].set_exception(exc)
        finally:
            tb.down()

    pool = ThreadPoolExecutor(max_workers=int(os.environ.get("FAKEHW_SCHED_PARALLEL", "2")))
    for i, profile in enumerate(sorted(by_profile, key=lambda p: -len(by_profile[p]))):
        pool.submit(lane, profile, f"s{i}")
    try:
        yield futures
    finally:
        pool.shutdown(wait=True)
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize(("profile", "target"), ACCEPTANCE)
def test_reference_passes_everything(outcomes: dict[Run, Future[Outcome]], profile: str, target: str) -> None:
    outcome = outcomes[Run(profile, target)].result(timeout=RUN_TIMEOUT_S * 3)
    statuses = outcome.statuses()
    assert set(statuses) == ALL_IDS, outcome.log
    assert outcome.doc["complete"] is True
    assert not outcome.failed(), f"{sorted(outcome.failed())}\n{outcome.log}"
    assert not outcome.unexplained_not_applicable(), outcome.log


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_fails_exactly_what_it_breaks(outcomes: dict[Run, Future[Outcome]], name: str) -> None:
    m = MUTANTS[name]
    outcome = outcomes[Run(m.profile, f"reference:{name}", MUTANT_BUDGET)].result(timeout=RUN_TIMEOUT_S * 3)
    failed = outcome.failed()
    assert failed == set(m.breaks), (f"{name} ({m.summary}) on {m.profile}: failed {sorted(failed)}, expected "
                                     f"{sorted(m.breaks)}\n{outcome.log}")
    for req_id in m.breaks:
        tests = [t for t in outcome.doc["tests"] if req_id in t["requirements"] and t["outcome"] == "failed"]
        assert tests and all(t["message"] for t in tests), f"{req_id} failed without a message"
