"""Fixtures and options of the device plugin suite.

Run it with ``conformance run --target device-plugin --plugin-cmd '...' --profile P`` or directly:

    pytest conformance/suites/device_plugin --profile dgx-h100 \\
        --target "device-plugin=cmd:python -m testbed.reference.device_plugin"

Without a ``device-plugin`` target the suite certifies the reference plugin. One testbed and one plugin process
serve the whole session; after every check the plugin is brought back to a clean state (faults healed, pods
gone, every GPU Healthy), restarting it when a check left it broken, so one failure does not cascade.

A :class:`~testbed.kubelet.kubelet.PluginViolation` raised by a check becomes a plain failed check whose message
says what the plugin did, with the offending response and the tail of the plugin's log as evidence.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.pytest_plugin import TargetSpec, add_evidence, requirement_ids
from conformance.suites.device_plugin.component import component_version
from conformance.suites.device_plugin.mig import STRATEGIES, MigConfigError
from conformance.suites.device_plugin.support import DEFAULT_SEED, REFERENCE_COMMAND, PluginUnderTest, SuiteOptions
from fakehw import __version__
from testbed import component_user
from testbed.api import Testbed
from testbed.backends import NodeInfo
from testbed.cluster import remove_tree_in_background, scratch_dir
from testbed.kubelet.kubelet import PluginViolation, Timeouts


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("device-plugin", "device plugin suite")
    group.addoption("--dp-node", default=None, help="node of the profile to run the plugin on (default: the first "
                                                    "with GPUs)")
    group.addoption("--dp-resource", default="nvidia.com/gpu", help="the plugin's GPU resource name")
    group.addoption("--dp-timeout-scale", type=float, default=1.0,
                    help="stretch every harness deadline (e.g. 4 for emulated riscv64 nodes)")
    group.addoption("--dp-rpc-timeout", type=float, default=None, help="deadline of unary calls (default 5 s)")
    group.addoption("--dp-start-timeout", type=float, default=None,
                    help="seconds the plugin may take to register and list its GPUs (default 30)")
    group.addoption("--dp-mig-strategy", choices=STRATEGIES, default="auto",
                    help="how the plugin serves GPUs in MIG mode: none, single, mixed (as NVIDIA's --mig-strategy), "
                         "or auto: told from the resources it registers (default)")
    group.addoption("--dp-fuzz-examples", type=int, default=6,
                    help="isolation fuzz: state-machine runs (shared by the isolation requirements)")
    group.addoption("--dp-fuzz-steps", type=int, default=12, help="isolation fuzz: steps per run")
    group.addoption("--dp-fuzz-seed", type=int, default=None,
                    help=f"isolation fuzz seed (default {DEFAULT_SEED}; printed with every failure)")
    group.addoption("--dp-fuzz-no-shrink", action="store_true", help="report fuzz failures unshrunk (faster)")


def _command(spec: TargetSpec | None) -> str:
    """The plugin's command from ``--target device-plugin=SPEC``: ``reference`` (also the default), ``cmd:CMD``."""
    if spec is None or spec.spec.strip() == "reference":
        return REFERENCE_COMMAND
    text = spec.spec
    if text.startswith("cmd:"):
        return text[4:].strip()
    if text.startswith("image:"):
        return ""  # the plugin is the image's own entrypoint (see _image)
    return text


def _image(spec: TargetSpec | None, backend: str) -> str | None:
    """The plugin's image from ``--target device-plugin=image:REF`` (None: a command). Only the docker backend runs
    a component as its own container."""
    if spec is None or not spec.spec.startswith("image:"):
        return None
    ref = spec.spec.removeprefix("image:").strip()
    if backend != "docker":
        raise pytest.UsageError(f"device-plugin=image:{ref}: image components run on the docker backend "
                                f"(--backend docker); on the {backend} backend give cmd:COMMAND")
    if not ref:
        raise pytest.UsageError("device-plugin=image: names no image (image:REPOSITORY[:TAG])")
    return ref


@pytest.fixture(scope="session")
def dp_options(pytestconfig: pytest.Config, conformance_targets: dict[str, TargetSpec],
               conformance_profile: str, conformance_backend: str) -> SuiteOptions:
    timeouts = Timeouts()
    scale = float(pytestconfig.getoption("dp_timeout_scale"))
    if scale != 1.0:
        timeouts = timeouts.scaled(scale)
    rpc = pytestconfig.getoption("dp_rpc_timeout")
    start = pytestconfig.getoption("dp_start_timeout")
    if rpc is not None or start is not None:
        from dataclasses import replace

        timeouts = replace(timeouts, rpc=float(rpc) if rpc is not None else timeouts.rpc,
                           start=float(start) if start is not None else timeouts.start)
    return SuiteOptions(
        command=_command(conformance_targets.get("device-plugin")),
        profile=conformance_profile,
        backend=conformance_backend,
        node=pytestconfig.getoption("dp_node"),
        gpu_resource=str(pytestconfig.getoption("dp_resource")),
        timeouts=timeouts,
        fuzz_examples=int(pytestconfig.getoption("dp_fuzz_examples")),
        fuzz_steps=int(pytestconfig.getoption("dp_fuzz_steps")),
        fuzz_seed=pytestconfig.getoption("dp_fuzz_seed"),
        fuzz_shrink=not pytestconfig.getoption("dp_fuzz_no_shrink"),
        mig_strategy=str(pytestconfig.getoption("dp_mig_strategy")),
        image=_image(conformance_targets.get("device-plugin"), conformance_backend),
    )


@pytest.fixture(scope="session")
def dp_testbed(dp_options: SuiteOptions) -> Iterator[Testbed]:
    state = scratch_dir("fhw-dp-", for_node_view=True)
    component_user.share_read(state)  # the node's view, read by a component run as another user
    tb = Testbed.up(dp_options.profile, backend=dp_options.backend, name="dp", state_dir=state)
    try:
        yield tb
    finally:
        _down(tb, state)


def _down(tb: Testbed, state: Path) -> None:
    """Tear the testbed down; its files (thousands per node) are deleted in the background, not charged to the run."""
    tb.down()
    remove_tree_in_background(state)


def _plugin_node(tb: Testbed, options: SuiteOptions) -> NodeInfo:
    """The node the plugin runs on, chosen from the model, with only its files made: the other nodes of the
    profile are never looked at, and making every tray of a rack (``tb.nodes()``) cost most of a gb200-nvl72 run."""
    names = [n.name for n in tb.system.nodes if n.gpus]
    if options.node:
        names = [n.name for n in tb.system.nodes if n.name == options.node]
        if not names:
            raise pytest.UsageError(f"--dp-node {options.node}: no such node in {options.profile}")
    if not names:
        raise pytest.UsageError(f"profile {options.profile} has no node with GPUs")
    node = tb.node(names[0])
    snapshot = node.env.get("FAKEHW_NVML_SNAPSHOT")
    if snapshot:  # the NVML snapshot sits in the agent's private directory
        component_user.share_traverse(Path(snapshot), tb.record.dir.parent)
    return node


@pytest.fixture(scope="session")
def dp(dp_testbed: Testbed, dp_options: SuiteOptions, conformance_manifest: dict[str, Any]) -> Iterator[
        PluginUnderTest]:
    node = _plugin_node(dp_testbed, dp_options)
    workdir = scratch_dir("fhw-dpk-", for_node_view=True)
    component_user.share_read(workdir)
    scratch = workdir
    launcher = None
    probe = None
    if dp_options.backend == "docker":
        from conformance.suites.device_plugin.docker import docker_launcher, docker_probe, image_launcher

        launcher = (image_launcher(dp_testbed, node, dp_options.image, workdir) if dp_options.image
                    else docker_launcher(dp_testbed, node, dp_options, workdir))
        probe = docker_probe(dp_testbed, node)
        workdir = launcher.plugin_dir
    try:
        put = PluginUnderTest(dp_testbed, node, dp_options, workdir, launcher, probe)
    except MigConfigError as exc:
        raise pytest.UsageError(f"--dp-mig-strategy {dp_options.mig_strategy}: {exc}") from None
    conformance_manifest.setdefault("targets", [dp_options.target])
    versions = conformance_manifest.setdefault("component_versions", {})
    if dp_options.is_reference:
        versions["device-plugin"] = f"fakehw reference {__version__}"
    elif dp_options.backend == "local" and not dp_options.image:
        version = component_version(dp_options.command)
        if version:
            versions["device-plugin"] = version
    conformance_manifest["device_plugin_view"] = (
        "the node's view: /sys, /dev, /proc/driver of the node; /var/lib/kubelet/device-plugins, /driver-root, "
        "/var/run/cdi" if put.launcher_view is not None and put.view_problem is None
        else put.view_problem or getattr(launcher, "view_note", None)
        or f"the node's container ({dp_options.backend} backend)")
    conformance_manifest["device_plugin_node"] = node.name
    if dp_options.backend == "docker":  # the image the node ran, by tag and content digest, and the engine
        extra = dp_testbed.record.extra
        tag, digest = extra.get("image", {}).get(node.arch), extra.get("image_ids", {}).get(node.arch)
        if tag:
            conformance_manifest.setdefault("images", {})[node.arch] = f"{tag}@{digest}" if digest else tag
        if extra.get("engine"):
            conformance_manifest["docker"] = extra["engine"]
    put.start()
    try:
        yield put
    finally:
        put.stop()
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
def plugin(dp: PluginUnderTest, request: pytest.FixtureRequest) -> Iterator[PluginUnderTest]:
    """The plugin under test, clean before and after the check."""
    dp.check = request.node.name
    yield dp
    dp.reset()


JUDGED_LAST = "DP-CHAOS-005"
"""Judged over the whole session (every exit of the plugin during any check), so it runs after the others."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    last = [i for i in items if JUDGED_LAST in requirement_ids(i)]
    if last:
        items[:] = [i for i in items if i not in last] + last


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Turn plugin violations into clean failed checks with evidence (no harness traceback)."""
    try:
        return (yield)
    except PluginViolation as exc:
        add_evidence(item, exc.check, exc.evidence)
        put = _put_of(item)
        if put is not None and "plugin log" not in exc.evidence:
            add_evidence(item, "plugin log", put.log_tail(2000))
        raise pytest.fail.Exception(f"[{exc.check}] {exc.message}", pytrace=False) from None
    except AssertionError:
        put = _put_of(item)
        if put is not None:
            add_evidence(item, "plugin log", put.log_tail(2000))
        raise


def _put_of(item: pytest.Item) -> PluginUnderTest | None:
    funcargs = getattr(item, "funcargs", {})
    for value in funcargs.values():
        if isinstance(value, PluginUnderTest):
            return value
    return None
