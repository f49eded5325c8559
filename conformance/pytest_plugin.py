"""The conformance pytest plugin (entry point ``pytest11: conformance``).

- Options: ``--profile``, ``--backend``, ``--arch``, ``--target KIND=SPEC`` (repeatable), ``--conformance-results
  PATH`` (per-requirement results, written after every test so a killed run leaves a valid partial file),
  ``--conformance-complete`` (every requirement of a collected target must have a test).
- The ``requirement(*ids)`` marker ties a test to catalogue IDs; an unknown ID stops the run at collection.
- Fixtures: ``conformance_profile``, ``conformance_backend``, ``conformance_arch``, ``conformance_targets`` and
  ``evidence`` (attach what a reviewer needs to see, e.g. the offending plugin response, to the report).

It does nothing to sessions that contain no requirement-marked tests, so it is safe to have installed.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from conformance import RESULTS_SCHEMA, NotApplicable
from conformance.requirements import Catalogue, catalogue
from fakehw import __version__
from fakehw.render.atomic import atomic_write


@dataclass(frozen=True)
class TargetSpec:
    """A component under test: ``device-plugin=cmd:python -m mypkg`` gives kind ``device-plugin``."""

    kind: str
    spec: str

    @classmethod
    def parse(cls, text: str) -> TargetSpec:
        kind, sep, spec = text.partition("=")
        if not sep or not kind or not spec:
            raise pytest.UsageError(f"--target takes KIND=SPEC (e.g. device-plugin='cmd:python -m plugin'), "
                                    f"got {text!r}")
        return cls(kind.strip(), spec.strip())


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "fakehw conformance suites")
    group.addoption("--profile", default="dgx-h100", help="hardware profile the suites run on (default dgx-h100)")
    group.addoption("--backend", default="local", help="testbed backend: local, docker, kind, kubeconfig")
    group.addoption("--arch", default=None, help="node architecture to run on (amd64, riscv64), if the backend allows")
    group.addoption("--target", action="append", default=[], metavar="KIND=SPEC",
                    help="component under test, e.g. device-plugin='cmd:python -m plugin' (repeatable)")
    group.addoption("--conformance-results", default=None, metavar="PATH",
                    help="write per-requirement results (JSON) here, updated after every test")
    group.addoption("--conformance-no-table", action="store_true",
                    help="leave out the per-requirement table at the end (conformance run prints its own)")
    group.addoption("--conformance-complete", action="store_true",
                    help="fail collection when a requirement of a collected target has no test")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requirement(*ids): catalogue requirement IDs this test checks")
    recorder = _Recorder(config)
    config.stash[_RECORDER] = recorder
    config.pluginmanager.register(recorder, "conformance-recorder")


_RECORDER = pytest.StashKey["_Recorder"]()


def requirement_ids(item: pytest.Item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("requirement"):
        ids.extend(str(a) for a in mark.args)
    return list(dict.fromkeys(ids))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    cat = catalogue()
    unknown: list[str] = []
    covered: set[str] = set()
    for item in items:
        ids = requirement_ids(item)
        for req_id in ids:
            if cat.get(req_id) is None:
                unknown.append(f"{item.nodeid}: unknown requirement {req_id}")
        covered.update(ids)
        if ids:
            item.user_properties.append(("requirements", ids))
    if unknown:
        raise pytest.UsageError("tests name requirements that are not in the catalogue:\n  " + "\n  ".join(unknown))
    if config.getoption("conformance_complete") and covered:
        _check_complete(cat, covered)


def _check_complete(cat: Catalogue, covered: set[str]) -> None:
    targets = {r.target for r in cat.requirements if r.id in covered}
    missing = [f"{r.id} ({r.target}): {r.title}" for t in sorted(targets) for r in cat.for_target(t)
               if r.id not in covered]
    if missing:
        raise pytest.UsageError("requirements with no test:\n  " + "\n  ".join(missing))


# --------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def conformance_profile(pytestconfig: pytest.Config) -> str:
    return str(pytestconfig.getoption("profile"))


@pytest.fixture(scope="session")
def conformance_backend(pytestconfig: pytest.Config) -> str:
    return str(pytestconfig.getoption("backend"))


@pytest.fixture(scope="session")
def conformance_arch(pytestconfig: pytest.Config) -> str | None:
    arch = pytestconfig.getoption("arch")
    return str(arch) if arch else None


@pytest.fixture(scope="session")
def conformance_targets(pytestconfig: pytest.Config) -> dict[str, TargetSpec]:
    specs = [TargetSpec.parse(t) for t in pytestconfig.getoption("target")]
    return {s.kind: s for s in specs}


@pytest.fixture(scope="session")
def conformance_manifest(pytestconfig: pytest.Config) -> dict[str, Any]:
    """Facts for the report's environment manifest that fixtures learn on the way: image digests per platform,
    the component's version, Docker/kind/Kubernetes versions. ``conformance_manifest["images"] = {...}``."""
    return pytestconfig.stash[_RECORDER].manifest


@pytest.fixture
def evidence(request: pytest.FixtureRequest) -> Callable[[str, Any], None]:
    """``evidence("offending response", body)``: shown in the report next to the requirement's result."""

    def record(label: str, value: Any) -> None:
        add_evidence(request.node, label, value)

    return record


def add_evidence(item: pytest.Item, label: str, value: Any) -> None:
    """Attach evidence to a check from a hook (where there is no fixture); values JSON cannot hold are shown
    as their ``repr``."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        value = repr(value)
    item.user_properties.append(("evidence", {"label": label, "value": value}))


# --------------------------------------------------------------------------------------------------- results

NOT_APPLICABLE = "not-applicable"
"""user_properties key under which a test's not-applicable reason travels (also from xdist workers)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Tell a :class:`~conformance.NotApplicable` ending apart from a plain skip: pytest reports both as skipped."""
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(NotApplicable):
        reason = str(getattr(call.excinfo.value, "msg", "") or "")
        if all(k != NOT_APPLICABLE for k, _ in report.user_properties):
            report.user_properties.append((NOT_APPLICABLE, reason))
    return report



@dataclass
class _TestResult:
    nodeid: str
    requirements: list[str]
    outcome: str = "passed"
    duration: float = 0.0
    message: str = ""
    evidence: list[dict[str, Any]] = field(default_factory=list)


OUTCOMES = ("error", "failed", "passed", "skipped", "not-applicable")
"""Per-test outcomes, in the order :func:`requirement_status` lets them win."""


def requirement_status(outcomes: list[str]) -> str:
    """error or failed if any test was; passed if one passed; skipped if one was skipped (something that should
    have run did not); not-applicable if every test said the requirement does not apply; not-run without tests."""
    for status in OUTCOMES:
        if status in outcomes:
            return status
    return "not-run"


def aggregate(tests: list[dict[str, Any]], cat: Catalogue, targets: set[str]) -> dict[str, dict[str, Any]]:
    """Results per requirement of every target that ran (requirements without a test show as not-run)."""
    out: dict[str, dict[str, Any]] = {}
    for target in sorted(targets):
        for req in cat.for_target(target):
            out[req.id] = {"title": req.title, "level": req.level, "category": req.category,
                           "required": req.required, "tests": [], "duration": 0.0}
    outcomes: dict[str, list[str]] = {}
    for t in tests:
        for req_id in t["requirements"]:
            entry = out.setdefault(req_id, {"tests": [], "duration": 0.0})
            entry["tests"].append(t["nodeid"])
            entry["duration"] += t["duration"]
            outcomes.setdefault(req_id, []).append(t["outcome"])
    for req_id, entry in out.items():
        entry["status"] = requirement_status(outcomes.get(req_id, []))
    return out


class _Recorder:
    """Collects per-test outcomes (on the xdist controller too) and writes the results file."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.path: Path | None = None
        raw = config.getoption("conformance_results")
        if raw:
            self.path = Path(raw)
        self.started = time.time()
        self.tests: dict[str, _TestResult] = {}
        self.manifest: dict[str, Any] = {}
        self._profile: tuple[str | None, list[str]] | None = None
        self._provenance: dict[str, object] | None = None

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Components by digest, harness and runner, resolved before any component runs (provenance)."""
        if self.path is not None and any(requirement_ids(i) for i in session.items):
            self._provenance_facts()

    def _provenance_facts(self) -> dict[str, object]:
        if self._provenance is None:
            from conformance.provenance.facts import run_facts

            self._provenance = run_facts(list(getattr(self.config.option, "target", []) or []), __version__)
        return self._provenance

    def _profile_facts(self) -> tuple[str | None, list[str]]:
        """Digest and node architectures of the profile under test (None when it does not load)."""
        if self._profile is None:
            from fakehw.model import ProfileError, load_profile

            try:
                system = load_profile(str(self.config.getoption("profile")))
                self._profile = (system.digest, sorted({n.cpu.arch for n in system.nodes}))
            except ProfileError:
                self._profile = (None, [])
        return self._profile

    def _result(self, report: pytest.TestReport) -> _TestResult | None:
        ids = next((cast(list[str], v) for k, v in report.user_properties if k == "requirements"), [])
        if not ids:
            return None
        if report.nodeid not in self.tests:
            self.tests[report.nodeid] = _TestResult(report.nodeid, ids)
        return self.tests[report.nodeid]

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        result = self._result(report)
        if result is None:
            return
        result.duration += report.duration
        if report.when == "call" or report.outcome != "passed":
            if report.outcome == "failed":
                result.outcome = "failed" if report.when == "call" else "error"
                result.message = _short(report)
            elif report.outcome == "skipped" and result.outcome != "failed":
                reason = next((str(v) for k, v in report.user_properties if k == NOT_APPLICABLE), None)
                result.outcome = "skipped" if reason is None else "not-applicable"
                result.message = _short(report) if reason is None else reason
        result.evidence = [cast(dict[str, Any], v) for k, v in report.user_properties if k == "evidence"]
        if report.when == "teardown":
            self.write(complete=False)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.tests:
            self.write(complete=exitstatus in (0, 1))

    def document(self, complete: bool) -> dict[str, Any]:
        cat = catalogue()
        tests = [vars(t) for t in self.tests.values()]
        targets = {r.target for t in self.tests.values() for i in t.requirements if (r := cat.get(i))}
        opts = self.config.option
        digest, arches = self._profile_facts()
        return {
            "schema": RESULTS_SCHEMA,
            "complete": complete,
            "started": self.started,
            "updated": time.time(),
            "environment": {
                "profile": getattr(opts, "profile", None),
                "profile_digest": digest,
                "architectures": arches,
                "backend": getattr(opts, "backend", None),
                "arch": getattr(opts, "arch", None),
                "targets": [redact_target(t) for t in getattr(opts, "target", []) or []],
                "harness_version": __version__,
                "python": platform.python_version(),
                "machine": platform.machine(),
                **self._provenance_facts(),
                **self.manifest,
            },
            "tests": tests,
            "requirements": aggregate(tests, cat, targets),
        }

    def write(self, complete: bool) -> None:
        if self.path is None:
            return
        atomic_write(self.path, (json.dumps(self.document(complete), indent=2, sort_keys=True) + "\n").encode())

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.tests or terminalreporter.config.getoption("conformance_no_table"):
            return
        doc = self.document(complete=True)
        tr = terminalreporter
        tr.section("conformance: results per requirement")
        for req_id, entry in sorted(doc["requirements"].items()):
            tr.write_line(f"{entry['status'].upper():14} {req_id:18} {entry.get('title', '')}")


def redact_target(target: str) -> str:
    """``KIND=SPEC`` with the directories of absolute paths cut off (they say where it was installed)."""
    from conformance.provenance.component import redact

    kind, sep, spec = target.partition("=")
    return f"{kind}{sep}{redact(spec)}" if sep else target


def _short(report: pytest.TestReport) -> str:
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)[:2000]
    return str(report.longrepr)[:2000] if report.longrepr else ""
