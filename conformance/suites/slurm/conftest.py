"""Fixtures and options of the Slurm suite.

    pytest conformance/suites/slurm --profile dgx-h100 [--target slurm=system|slurm=prefix:/opt/slurm]

One testbed and one Slurm cluster (munged, slurmctld, a slurmd per node) serve the session. Before every check
faults are healed, drained GPUs returned and jobs cancelled; a dead slurmd is restarted.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.pytest_plugin import TargetSpec
from conformance.suites.scheduler.support import teardown
from conformance.suites.slurm.support import SlurmUnderTest
from fakehw.model import load_profile
from testbed.api import Testbed
from testbed.cluster import scratch_dir
from testbed.slurm.cluster import Binaries, SlurmCluster, SlurmError

DEFAULT_NODES = 2


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("slurm", "Slurm suite")
    group.addoption("--slurm-nodes", type=int, default=None,
                    help=f"nodes to run slurmd for (default: the profile's, at least {DEFAULT_NODES} for one-group "
                         "profiles, at most 8)")


def _binaries(spec: TargetSpec | None) -> Binaries:
    text = spec.spec if spec is not None else "system"
    try:
        if text == "system":
            return Binaries.find()
        if text.startswith("prefix:"):
            return Binaries.find(Path(text[len("prefix:"):]))
    except SlurmError as exc:
        pytest.skip(str(exc))
    raise pytest.UsageError(f"--target slurm={text}: use slurm=system or slurm=prefix:/path/to/slurm")


@pytest.fixture(scope="session")
def slurm_session(pytestconfig: pytest.Config, conformance_targets: dict[str, TargetSpec], conformance_profile: str,
                  conformance_backend: str, conformance_manifest: dict[str, Any]) -> Iterator[SlurmUnderTest]:
    if os.geteuid() != 0:
        pytest.skip("Slurm's daemons run jobs as their users: the Slurm suite needs root")
    binaries = _binaries(conformance_targets.get("slurm"))
    system = load_profile(conformance_profile)
    asked = pytestconfig.getoption("slurm_nodes")
    nodes = asked
    if nodes is None and len({n.group for n in system.nodes}) == 1 and len(system.nodes) < DEFAULT_NODES:
        nodes = DEFAULT_NODES
    state = scratch_dir("fhw-sl-")
    tb = Testbed.up(conformance_profile, nodes=nodes, backend=conformance_backend, name="sl", state_dir=state)
    root = scratch_dir("fhw-slc-")
    cluster = None
    try:
        infos = [n for n in tb.nodes() if n.gpus][: asked or 8]
        env = {n.name: {k: v for k, v in n.env.items() if k.startswith("FAKEHW_") or k == "LD_LIBRARY_PATH"}
               for n in infos}
        cluster = SlurmCluster(tb.system, {n.name: n.dir for n in infos}, env, root, binaries=binaries)
        try:
            cluster.start()
        except SlurmError as exc:
            pytest.fail(f"Slurm did not start: {exc}", pytrace=False)
        version = cluster.run([binaries["slurmd"], "-V"]).stdout.decode().strip()
        conformance_manifest.setdefault("targets", [f"slurm={conformance_targets['slurm'].spec}"
                                                    if "slurm" in conformance_targets else "slurm=system"])
        conformance_manifest.setdefault("component_versions", {})["slurm"] = version
        conformance_manifest["slurm_nodes"] = len(infos)
        yield SlurmUnderTest(tb, cluster)
    finally:
        if cluster is not None:
            cluster.stop()
        teardown(tb, state)
        shutil.rmtree(root, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.stash[_FAILED] = report.failed


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def slurm(slurm_session: SlurmUnderTest, evidence: Callable[[str, Any], None],
          request: pytest.FixtureRequest) -> Iterator[SlurmUnderTest]:
    s = slurm_session
    c = s.cluster
    c.run([c.bin["scancel"], "--full", "--state=RUNNING"], timeout=30)
    c.run([c.bin["scancel"], "--state=PENDING"], timeout=30)
    s.testbed.heal()
    for n in c.layout.nodes:
        if not c.slurmd_alive(n.name):
            c.start_slurmd(n.name)
    c.set_drained({})
    c.wait_nodes(lambda st: st == "IDLE", timeout=60)
    yield s
    if request.node.stash.get(_FAILED, False):
        evidence("slurmctld log (tail)", c.log_tail("slurmctld", 1500))
