"""Fixtures and options of the scheduler extender suite.

Run it with ``conformance run --target extender [--extender SPEC] --profile P`` or directly:

    pytest conformance/suites/scheduler --profile gb200-nvl72 --target extender=reference

``--target extender=SPEC`` takes ``reference``, ``reference:MUTANT``, ``cmd:COMMAND`` (``{port}`` and ``{api}``
substituted) or ``url:http://host:port/prefix``; kube-scheduler stanza settings go after a ``?`` on reference
and url specs (``reference?nodeCacheCapable=false``) or in ``--sched-extender-config KEY=VALUE``.

One testbed, one harness (kube-scheduler + cluster API) and one extender process serve the session. Before every
check the cluster goes back to empty and healthy (faults healed, pods deleted, nodes re-rendered) and a dead
extender is restarted, so one failure does not cascade.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.pytest_plugin import TargetSpec
from conformance.suites.scheduler.support import Recorder, SchedulerUnderTest, SuiteOptions, teardown
from fakehw import __version__
from fakehw.model import load_profile
from testbed.api import Testbed
from testbed.cluster import scratch_dir
from testbed.extender.process import ExtenderTarget, TargetError

SMALL_PROFILE_NODES = 4
"""Single-node profiles (one DGX) are stood up with this many nodes: placement needs a choice of nodes."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("scheduler", "scheduler extender suite")
    group.addoption("--sched-nodes", type=int, default=None,
                    help=f"node count for one-group profiles (default: the profile's, at least {SMALL_PROFILE_NODES})")
    group.addoption("--sched-extender-config", action="append", default=[], metavar="KEY=VALUE",
                    help="kube-scheduler extender stanza setting (nodeCacheCapable, weight, httpTimeout, ...)")
    group.addoption("--sched-fuzz-examples", type=int, default=12, help="workload sequences per isolation check")
    group.addoption("--sched-fuzz-steps", type=int, default=10, help="workloads per sequence")
    group.addoption("--sched-fuzz-seed", type=int, default=None,
                    help="fuzz seed (default: a fixed derivation, so runs are reproducible)")
    group.addoption("--sched-fuzz-no-shrink", action="store_true", help="report fuzz failures unshrunk (faster)")
    group.addoption("--sched-attach", default=None, metavar="STATE_DIR:NAME",
                    help="use this running testbed (of --profile) instead of standing one up; it is left running")


def _node_count(profile: str, asked: int | None) -> int | None:
    if asked is not None:
        return asked
    system = load_profile(profile)
    groups = {n.group for n in system.nodes}
    if len(groups) == 1 and len(system.nodes) < SMALL_PROFILE_NODES:
        return SMALL_PROFILE_NODES
    return None


@pytest.fixture(scope="session")
def sched_options(pytestconfig: pytest.Config, conformance_targets: dict[str, TargetSpec],
                  conformance_profile: str) -> SuiteOptions:
    spec = conformance_targets.get("extender")
    text = spec.spec if spec is not None else "reference"
    extra = [str(x) for x in pytestconfig.getoption("sched_extender_config")]
    if extra:
        bad = [x for x in extra if "=" not in x]
        if bad:
            raise pytest.UsageError(f"--sched-extender-config takes KEY=VALUE, got {bad[0]!r}")
        sep = "&" if "?" in text else "?"
        if text.startswith("cmd:"):
            raise pytest.UsageError("--sched-extender-config with a cmd: target: give the stanza with a url: target "
                                    "or start the command yourself")
        text = text + sep + "&".join(extra)
    try:
        target = ExtenderTarget.parse(text)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    return SuiteOptions(
        target=target,
        profile=conformance_profile,
        nodes=_node_count(conformance_profile, pytestconfig.getoption("sched_nodes")),
        fuzz_examples=int(pytestconfig.getoption("sched_fuzz_examples")),
        fuzz_steps=int(pytestconfig.getoption("sched_fuzz_steps")),
        fuzz_seed=pytestconfig.getoption("sched_fuzz_seed"),
        fuzz_shrink=not pytestconfig.getoption("sched_fuzz_no_shrink"),
    )


@pytest.fixture(scope="session")
def sched_testbed(sched_options: SuiteOptions, conformance_backend: str, pytestconfig: pytest.Config
                  ) -> Iterator[Testbed]:
    attach = pytestconfig.getoption("sched_attach")
    if attach:
        state_dir, _, name = str(attach).rpartition(":")
        try:
            tb = Testbed.attach(name, Path(state_dir) if state_dir else None)
        except Exception as exc:
            raise pytest.UsageError(f"--sched-attach {attach}: {exc}") from None
        want = load_profile(sched_options.profile, nodes=sched_options.nodes)
        if tb.system.digest != want.digest or [n.name for n in tb.system.nodes] != [n.name for n in want.nodes]:
            raise pytest.UsageError(f"--sched-attach {attach}: that testbed runs {tb.record.profile}, not "
                                    f"{sched_options.profile}")
        yield tb
        return
    state = scratch_dir("fhw-sx-")
    tb = Testbed.up(sched_options.profile, nodes=sched_options.nodes, backend=conformance_backend, name="sx",
                    state_dir=state)
    try:
        yield tb
    finally:
        teardown(tb, state)


@pytest.fixture(scope="session")
def sched_session(sched_testbed: Testbed, sched_options: SuiteOptions,
                  conformance_manifest: dict[str, Any]) -> Iterator[SchedulerUnderTest]:
    workdir = scratch_dir("fhw-sxw-")
    sut = SchedulerUnderTest(sched_testbed, sched_options, workdir)
    conformance_manifest.setdefault("targets", [f"extender={sched_options.target.describe()}"])
    if sched_options.target.kind == "reference":
        conformance_manifest.setdefault("component_versions", {})["extender"] = (
            f"fakehw reference {__version__}" + (f" (mutant {sched_options.target.mutant})"
                                                  if sched_options.target.mutant else ""))
    conformance_manifest["scheduler_nodes"] = len(sched_testbed.system.nodes)
    try:
        sut.start()
    except TargetError as exc:
        sut.stop()
        raise pytest.UsageError(f"the extender could not be started: {exc}") from None
    try:
        yield sut
    finally:
        sut.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def sched(sched_session: SchedulerUnderTest, evidence: Callable[[str, Any], None]) -> Iterator[SchedulerUnderTest]:
    """The session's extender on an empty, healthy cluster; decisions of this check become evidence on failure."""
    sched_session.reset()
    sched_session.recorder = Recorder(evidence)
    try:
        yield sched_session
    finally:
        if sched_session.recorder is not None and not sched_session.process.alive and \
                sched_session.options.target.managed:
            evidence("extender log", sched_session.process.log_tail())
        sched_session.recorder = None


@pytest.fixture
def check(sched: SchedulerUnderTest) -> Callable[..., None]:
    """``check(ok, message, **evidence)``: fail the requirement with the evidence attached."""
    assert sched.recorder is not None
    return sched.recorder.check
