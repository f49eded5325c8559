"""The device plugin suite's machinery: the plugin under test on a testbed node, identities, expected values.

:class:`PluginUnderTest` ties together a testbed node, the harness's :class:`~testbed.kubelet.kubelet.Kubelet` and
the plugin process (a command on this machine or in the node's container). It never raises from setup: a plugin
that fails to come up is recorded (:attr:`PluginUnderTest.startup_error`) and every check that needs a running
plugin fails at once with that reason, so a broken plugin costs one start timeout, not one per test.

Expected values come from the model: GPU identities (UUID, index, minor), NUMA nodes, and optimal preferred
allocations computed here from the model's NVLink bonds and PCIe levels (independently of the reference plugin's
own allocator, so a shared bug cannot hide).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.suites.device_plugin import mig
from conformance.suites.device_plugin.optimum import ModelTopology
from fakehw.model.system import MemoryPool, Node, System
from testbed import nodeview
from testbed.api import Testbed
from testbed.backends import NodeInfo
from testbed.backends.local import LocalBackend
from testbed.kubelet.api import HEALTHY
from testbed.kubelet.cdi import CdiRegistry
from testbed.kubelet.driver_root import CONTAINER_DRIVER_ROOT, DriverRootError, build_driver_root
from testbed.kubelet.exposure import Exposure, GpuRef, container_dev_nodes, exposure
from testbed.kubelet.kubelet import Assignment, Endpoint, Kubelet, PluginViolation, Timeouts
from testbed.kubelet.launcher import KUBELET_PLUGIN_DIR, CommandLauncher, PluginLauncher, PluginProcess
from testbed.kubelet.nvmlprobe import NvmlProbe, ProbeError

CDI_SPEC_DIR = "/var/run/cdi"
"""Where NVIDIA's plugin writes its CDI specs (the CDI standard's dynamic spec directory)."""
REFERENCE_COMMAND = f"{shlex.quote(sys.executable)} -m testbed.reference.device_plugin"
GPU_RESOURCE = "nvidia.com/gpu"
POOL_PREFIX = "nvidia.com/gpu.memoryPool."
HEALTH_BOUND_S = 5.0
"""A fault must show in ListAndWatch within this many seconds (DP-HEALTH-001/002)."""
RECOVERY_BOUND_S = 10.0
"""A healed GPU must be Healthy again within this many seconds (DP-HEALTH-003)."""
REREGISTER_BOUND_S = 10.0
POOL_SETTLE_S = 5.0
"""How long after the GPU resource the pool resources may take to register."""
WATCH_SETTLE_S = 1.0
"""A plugin that has just registered (started, restarted, or after a kubelet restart) gets this long before a fault
is injected: NVIDIA's plugin, for one, starts its health loop only after it registers, and a fault in that gap is
never reported (NVML events are not queued for an event set that does not exist yet), on a real node as here.
Injecting in the gap would judge the harness's timing, not the plugin."""
DEFAULT_SEED = 20240611
"""The isolation fuzz's seed unless ``--dp-fuzz-seed`` gives another (recorded with every isolation result)."""
LOG_EVIDENCE_CHARS = 3000


def last_words(log: str) -> str:
    """The last line of a plugin's log that is not the harness's own (what it said before it exited)."""
    lines = [line.strip() for line in log.splitlines() if line.strip() and not line.startswith("# ")]
    return lines[-1][-400:] if lines else ""


@dataclass(frozen=True)
class Death:
    """The plugin exited without the harness asking it to, or did not come back when restarted."""

    check: str
    """The check that was running (its test id)."""
    during: str
    """What the harness was doing when it noticed: 'restart', 'kubelet restart', 'between checks', ..."""
    status: int | None
    """Exit status (None: still running but never served again)."""
    detail: str
    log: str

    def describe(self) -> str:
        how = f"exited with status {self.status}" if self.status is not None else "did not serve again"
        said = last_words(self.log)
        return f"{self.check}: the plugin {how} ({self.during})" + (f"; its log ends: {said}" if said else "")

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "during": self.during, "status": self.status, "detail": self.detail,
                "plugin log": self.log}


@dataclass(frozen=True)
class SuiteOptions:
    command: str
    profile: str
    backend: str
    node: str | None = None
    gpu_resource: str = GPU_RESOURCE
    timeouts: Timeouts = field(default_factory=Timeouts)
    fuzz_examples: int = 6
    fuzz_steps: int = 12
    fuzz_seed: int | None = None
    fuzz_shrink: bool = True
    mig_strategy: str = "auto"
    """none, single, mixed, or auto (told from what the plugin registers)."""
    image: str | None = None
    """The plugin as a container image (``image:REF``, docker backend): run as its own container beside the node's."""

    @property
    def is_reference(self) -> bool:
        return self.image is None and self.command == REFERENCE_COMMAND

    @property
    def target(self) -> str:
        """The component as ``--target`` names it (for the report)."""
        return f"device-plugin=image:{self.image}" if self.image else f"device-plugin=cmd:{self.command}"


# --------------------------------------------------------------------------------------------------- plugin


def local_view(node: NodeInfo, system: System, workdir: Path,
               base: nodeview.NodeView | None = None) -> tuple[nodeview.NodeView | None, str | None]:
    """The node's view for a plugin on the local backend (the launcher adds the plugin directory), or why there
    is none. Besides the node's tree (``base``: what the backend's commands on the node see, e.g. its live
    ``/sys``) it holds what NVIDIA's components look for: a driver root at :data:`CONTAINER_DRIVER_ROOT`
    (libnvidia-ml and a stand-in libcuda, for the CDI strategies' discovery) and a writable CDI spec directory at
    :data:`CDI_SPEC_DIR` (kept in the work directory, read by the suite)."""
    problem = nodeview.unavailable()
    if problem is not None:
        return None, problem
    binds: list[nodeview.Bind] = list(base.binds) if base is not None else []
    live = base is not None and base.writable_sys
    keep = base.keep if base is not None else ()
    cdi = workdir / "cdi"
    cdi.mkdir(parents=True, exist_ok=True)
    binds.append(nodeview.Bind(str(cdi), CDI_SPEC_DIR))
    try:
        root = build_driver_root(workdir / "driver-root", node.env, system.driver.version, system.driver.cuda_version)
        binds.append(nodeview.Bind(str(root), CONTAINER_DRIVER_ROOT, read_only=True))
    except DriverRootError as exc:
        return nodeview.NodeView(str(node.dir / "root"), tuple(binds), live, keep=keep), f"no driver root: {exc}"
    return nodeview.NodeView(str(node.dir / "root"), tuple(binds), live, keep=keep), None


class PluginUnderTest:
    """The plugin under test, running against one node of a testbed, with the harness's kubelet."""

    def __init__(self, testbed: Testbed, node: NodeInfo, options: SuiteOptions, workdir: Path,
                 launcher: PluginLauncher | None = None, probe: NvmlProbe | None = None):
        self.testbed = testbed
        self.node_info = node
        self.options = options
        self.system: System = testbed.system
        model = self.system.node(node.name)
        assert model is not None
        self.node: Node = model
        self.strategy: mig.Strategy = "none" if options.mig_strategy == "auto" else mig.strategy(options.mig_strategy)
        self.gpus: list[GpuRef] = []
        """The node's GPUs and (unless the MIG strategy is none) MIG devices, as the model knows them."""
        self.expected: dict[str, tuple[str, ...]] = {}
        """Resource -> the devices (GPU or MIG device names) it must list, for the MIG strategy in use."""
        self._identity: dict[str, str] = {}
        self._use_strategy(self.strategy)
        self.topology = ModelTopology.of(self.system, model)
        self.pools: dict[str, MemoryPool] = {p.resource_name: p for p in model.memory_pools}
        self.workdir = workdir
        self.plugin_dir = workdir
        self.kubelet = Kubelet(self.plugin_dir, options.timeouts)
        self.view_problem: str | None = None
        """Why the plugin does not run in the node's view (None: it does, or runs in a node container)."""
        self.launcher_view: nodeview.NodeView | None = None
        if launcher is None:
            base: nodeview.NodeView | None = None
            prepare: Callable[[], object] | None = None
            if isinstance(testbed.backend, LocalBackend):
                # The node's live /sys when this machine can serve it, made sure of again before every start.
                base = testbed.backend.node_view(testbed.record, node.name)
                prepare = functools.partial(testbed.backend.node_view, testbed.record, node.name)
            self.launcher_view, self.view_problem = local_view(node, self.system, workdir, base)
            launcher = CommandLauncher(options.command, node.name, node.env, workdir / "logs", self.launcher_view,
                                       prepare)
        self.launcher = launcher
        self._cdi: tuple[tuple[tuple[str, int, int], ...], CdiRegistry] | None = None
        self.probe = probe or NvmlProbe([sys.executable, "-m", "testbed.kubelet.nvmlprobe"], node.env)
        self.process: PluginProcess | None = None
        self.startup_error: PluginViolation | None = None
        self.baseline: tuple[str, ...] = ()
        """Device IDs of the GPU resource when the plugin first came up."""
        self.baseline_healthy: tuple[str, ...] = ()
        """Of those, the ones that were Healthy (what "back to normal" means between checks)."""
        self.serving_pools_at_start: tuple[str, ...] = ()
        """Pool resources that were serving when the plugin first came up (reset waits for them again)."""
        self.followers: tuple[str, ...] = ()
        """Resources besides the GPU resource (pools, MIG devices) that served when the plugin first came up;
        every restart waits for them too."""
        self._pods = itertools.count(1)
        self.reregisters: bool | None = None
        """Whether the plugin registered again after a kubelet restart (None: not seen yet)."""
        self.recovers: bool | None = None
        """Whether a healed GPU turned Healthy again without a restart (None: not seen yet). Once a plugin is
        known not to recover (judged by DP-HEALTH-003), checks restart it instead of waiting for recovery."""
        self.faulted = False
        """Whether a fault was injected since the last :meth:`reset` (a plugin that does not recover is restarted
        then, whatever its latest list says: a report of that fault may still be on its way)."""
        self.deaths: list[Death] = []
        """Every time the plugin exited on its own or did not come back (judged by DP-CHAOS-005)."""
        self.check = "startup"
        """The check that is running (for :attr:`deaths`)."""
        self._expected_exit: PluginProcess | None = None
        self._noted: PluginProcess | None = None
        self.lock = threading.RLock()

    @property
    def resource(self) -> str:
        return self.options.gpu_resource

    def _use_strategy(self, strategy: mig.Strategy) -> None:
        self.strategy = strategy
        self.gpus = mig.refs(self.node, strategy)
        self.expected = mig.expected_resources(self.node, strategy, self.resource)
        self._identity.clear()

    @property
    def units(self) -> list[str]:
        """Devices (GPU or MIG device names) the GPU resource must list."""
        return list(self.expected.get(self.resource, ()))

    def ref(self, name: str) -> GpuRef:
        return next(g for g in self.gpus if g.name == name)

    def gpu_of(self, unit: str) -> str:
        """The physical GPU behind a device (itself, or a MIG device's GPU): where faults are injected."""
        return self.ref(unit).gpu

    def physical(self, units: Iterable[str]) -> frozenset[str]:
        """The physical GPUs behind devices: what NVML inside their container enumerates."""
        return frozenset(self.gpu_of(u) for u in units)

    def whole_gpus(self) -> list[str]:
        """Devices of the GPU resource that are whole GPUs (what topology choices are made among)."""
        return [u for u in self.units if self.ref(u).parent is None]

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the kubelet (if needed) and the plugin; record instead of raise when it does not come up."""
        if not self.kubelet.running:
            self.kubelet.start()
        after = self._generation()
        self.process = self.launcher.start(self.plugin_dir)
        try:
            self.wait_ready(after)
            self.startup_error = None
        except PluginViolation as exc:
            exc.evidence.setdefault("plugin log", self.log_tail())
            if self.process is not None and not self.process.alive() and "exited" not in exc.message:
                exc.message += f" (the plugin exited with status {self.process.returncode()})"
            said = last_words(self.log_tail())
            if said and self.process is not None and not self.process.alive():
                exc.message += f"; its log ends: {said}"
            if self.launcher_view is None and self.view_problem is not None:
                exc.message += (f"; note: the plugin ran without the node's view ({self.view_problem}), so a "
                                f"plugin with {KUBELET_PLUGIN_DIR} built in cannot find the kubelet")
            self.note_death("start", exc.message)
            self.startup_error = exc
        if not self.baseline and self.startup_error is None:
            latest = self.kubelet.endpoint(self.resource).latest
            assert latest is not None
            self.baseline = tuple(d.id for d in latest.devices)
            self.baseline_healthy = tuple(d.id for d in latest.devices if d.health == HEALTHY)
            self._settle_mig()
            serving = [r for r, ep in self.kubelet.endpoints.items() if ep.serving and r != self.resource]
            self.serving_pools_at_start = tuple(r for r in self.pools if r in serving)
            self.followers = tuple(sorted(r for r in serving if r in self.pools or r in self.expected))

    def _settle_mig(self) -> None:
        """On a node with MIG devices: wait (event-driven, bounded) for the MIG resources the strategy expects,
        and with ``auto`` tell the strategy from what the plugin registered."""
        if not mig.has_mig(self.node):
            return
        if self.options.mig_strategy == "auto":
            with contextlib.suppress(PluginViolation):
                self.kubelet.wait_for(lambda: any(r.startswith(mig.MIG_RESOURCE_PREFIX) and ep.serving
                                                  for r, ep in self.kubelet.endpoints.items()),
                                      POOL_SETTLE_S, "MIG resources registered")
            self._use_strategy(mig.detect(self.node, self.kubelet.endpoints, self.baseline))
        deadline = time.monotonic() + POOL_SETTLE_S
        for resource in self.expected:
            if resource != self.resource:
                with contextlib.suppress(PluginViolation):
                    self.kubelet.wait_endpoint(resource, 0, max(0.0, deadline - time.monotonic()))

    def _generation(self, resource: str | None = None) -> int:
        ep = self.kubelet.endpoints.get(resource or self.resource)
        return ep.generation if ep is not None else 0

    def _generations(self) -> dict[str, int]:
        return {r: self._generation(r) for r in [self.resource, *self.pools, *self.expected]}

    def wait_ready(self, after: int | dict[str, int] = 0, timeout: float | None = None) -> Endpoint:
        """Wait for the GPU resource (registered anew: newer than ``after``), then give the pool resources a
        moment to follow (a pool that does not come is judged by the pool checks)."""
        afters = after if isinstance(after, dict) else {}
        ep = self.kubelet.wait_endpoint(self.resource, afters.get(self.resource, after if isinstance(after, int)
                                                                  else 0),
                                        timeout if timeout is not None else self.options.timeouts.start,
                                        self.process)
        deadline = time.monotonic() + POOL_SETTLE_S
        # After the first start, only resources that served then are waited for (a plugin without the
        # memory-pool extension does not cost every restart the settle time).
        for resource in self.followers if self.baseline else self.pools:
            with contextlib.suppress(PluginViolation):
                self.kubelet.wait_endpoint(resource, afters.get(resource, 0),
                                           max(0.0, deadline - time.monotonic()))
        return ep

    def require(self) -> Endpoint:
        """The GPU resource's endpoint, serving; or the reason it is not, as a failed check."""
        if self.startup_error is not None:
            raise PluginViolation(self.startup_error.check, f"the plugin never came up: {self.startup_error.message}",
                                  self.startup_error.evidence)
        ep = self.kubelet.endpoints.get(self.resource)
        if ep is None or not ep.serving:
            raise PluginViolation("not-serving", f"{self.resource} is not registered and listing devices",
                                  {**self.kubelet.evidence(self.resource), "plugin log": self.log_tail()})
        return ep

    def restart(self, kill: bool = False, downtime: float = 0.2, during: str = "restart") -> Endpoint:
        """Stop (SIGTERM) or kill (SIGKILL) the plugin and start it again; waits until it serves again (or
        raises, after recording the plugin's failure to come back in :attr:`deaths`)."""
        after = self._generations()
        if self.process is not None:
            self.note_death(f"before a {during}")
            self._expected_exit = self.process
            self.process.kill() if kill else self.process.stop()
        time.sleep(downtime)
        self.process = self.launcher.start(self.plugin_dir)
        try:
            return self.wait_ready(after)
        except PluginViolation as exc:
            self.note_death(during, exc.message, came_back=False)
            raise

    def note_death(self, during: str, detail: str = "", came_back: bool = True) -> Death | None:
        """Record that the plugin exited on its own (or, with ``came_back=False``, that a restart did not bring
        it back); once per process. Returns the record, or None when the plugin is fine."""
        proc = self.process
        if proc is None or proc is self._noted or proc is self._expected_exit:
            return None
        if proc.alive() and came_back:
            return None
        self._noted = proc
        death = Death(self.check, during, proc.returncode(), detail, self.log_tail(LOG_EVIDENCE_CHARS))
        self.deaths.append(death)
        return death

    def pool_resources(self) -> list[str]:
        """Memory-pool resources the plugin registered (the extension's resources)."""
        return sorted(r for r in self.kubelet.endpoints if r.startswith(POOL_PREFIX))

    def pools_not_applicable(self) -> str | None:
        """Why the memory-pool requirements do not apply (None: they do): no pools on the node, or a plugin
        without the memory-pool extension (it registered no pool resource, not even after the settle time)."""
        if not self.pools:
            return f"{self.node.name} has no memory pools"
        if not self.serving_pools_at_start and not self.pool_resources():
            return ("the plugin does not implement the memory-pool extension: it registered no "
                    f"{POOL_PREFIX}* resource (the node has {', '.join(sorted(self.pools))})")
        return None

    def restart_kubelet(self, downtime: float = 0.2) -> Endpoint:
        after = self._generations()
        self.kubelet.restart(downtime)
        try:
            ep = self.kubelet.wait_endpoint(self.resource, after[self.resource], REREGISTER_BOUND_S, self.process)
        except PluginViolation as exc:
            self.note_death("kubelet restart", exc.message)
            raise
        deadline = time.monotonic() + POOL_SETTLE_S
        for resource in self.followers:
            with contextlib.suppress(PluginViolation):
                self.kubelet.wait_endpoint(resource, after.get(resource, 0), max(0.0, deadline - time.monotonic()))
        return ep

    def stop(self) -> None:
        if self.process is not None:
            self._expected_exit = self.process
            self.process.stop()
        self.kubelet.stop()
        self.probe.close()

    def log_tail(self, chars: int = 3000) -> str:
        return self.process.log_tail(chars) if self.process is not None else ""

    def restart_agent(self) -> None:
        """Restart the node's hardware agent (faults come back from its journal)."""
        backend = self.testbed.backend
        restart_node = getattr(backend, "restart_node", None)
        if restart_node is not None:
            # Docker: the agent is the node container's main process; the plugin inside dies with it and comes
            # back the way a DaemonSet pod does.
            self._expected_exit = self.process
            restart_node(self.testbed.record, self.node.name)
            self.restart(kill=True, during="agent restart")
            return
        stop, start = getattr(backend, "stop_agent", None), getattr(backend, "start_agent", None)
        if stop is None or start is None:
            raise NotImplementedError(f"the {backend.name} backend cannot restart an agent")
        stop(self.testbed.record)
        start(self.testbed.record)

    # ------------------------------------------------------------------------------------------ devices

    def latest_ids(self, resource: str | None = None) -> list[str]:
        ep = self.require() if resource is None else self.kubelet.endpoint(resource)
        latest = ep.latest
        assert latest is not None
        return [d.id for d in latest.devices]

    def identify(self, device_id: str, resource: str | None = None) -> str:
        """The model GPU (or MIG device) behind ``device_id``: the one whose UUID the ID contains, else the only
        one that allocating the ID alone (from ``resource``, default the GPU resource) exposes. A violation when
        neither tells."""
        if device_id in self._identity:
            return self._identity[device_id]
        by_uuid = [g.name for g in self.gpus if g.uuid.lower() in device_id.lower()]
        if len(by_uuid) == 1:
            self._identity[device_id] = by_uuid[0]
            return by_uuid[0]
        response = self.kubelet.allocate(resource or self.resource, [[device_id]]).container_responses[0]
        exposed = self.expose(response).all
        if len(exposed) != 1:
            raise PluginViolation("identity", f"cannot tell which GPU device {device_id!r} is: allocating it alone "
                                              f"exposes {sorted(exposed) or 'no GPU'}",
                                  {"device": device_id, "response": self.kubelet.calls[-1].response})
        name = next(iter(exposed))
        self._identity[device_id] = name
        return name

    def baseline_identities(self) -> dict[str, str]:
        """Device ID -> GPU for the devices listed when the plugin first came up."""
        return {d: self.identify(d) for d in self.baseline}

    def identities(self, ids: Sequence[str] | None = None) -> dict[str, str]:
        return {d: self.identify(d) for d in (ids if ids is not None else self.latest_ids())}

    def id_of(self, unit: str, resource: str | None = None) -> str:
        resource = resource or self.resource
        for dev in self.latest_ids(resource):
            if self.identify(dev, resource) == unit:
                return dev
        raise PluginViolation("identity", f"no device of {resource} is {unit}", self.kubelet.evidence(resource))

    def cdi_registry(self) -> CdiRegistry | None:
        """The CDI specs the plugin wrote into the node's /var/run/cdi (None on backends where the suite cannot
        read them), reloaded when the directory changes."""
        directory = self.workdir / "cdi"
        if self.launcher_view is None or not directory.is_dir():
            return None
        stamp = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(directory.iterdir()))
        if self._cdi is None or self._cdi[0] != stamp:
            self._cdi = (stamp, CdiRegistry.load(directory))
        return self._cdi[1]

    def expose(self, response: Any) -> Exposure:
        return exposure(response, self.gpus, self.cdi_registry())

    def nvml_view(self, response: Any) -> tuple[frozenset[str], int]:
        """GPUs (model names) NVML enumerates inside a container made from this Allocate answer, and how many
        more it enumerates that are off the bus (NVML cannot name those)."""
        nodes = container_dev_nodes(response, self.gpus, self.cdi_registry())
        try:
            uuids, lost = self.probe.view(nodes)
        except ProbeError as exc:
            raise PluginViolation("nvml-view", f"could not look inside the container: {exc}", {"dev_nodes": nodes}) \
                from None
        by_uuid = {g.uuid: g.name for g in self.gpus if g.parent is None}
        return frozenset(by_uuid.get(u, u) for u in uuids), lost

    def new_pod(self, prefix: str = "pod") -> str:
        return f"{prefix}-{next(self._pods)}"

    def admit_exact(self, pod: str, resource: str, device_ids: Sequence[str]) -> Assignment:
        """Give a container exactly these devices (as a kubelet does for a pod that was assigned them)."""
        from testbed.kubelet.api import to_json

        response = self.kubelet.allocate(resource, [list(device_ids)])
        assignment = Assignment(pod, "main", resource, tuple(device_ids), to_json(response.container_responses[0]),
                                time.time())
        self.kubelet.checkpoint.add(assignment)
        return assignment

    # ------------------------------------------------------------------------------------------ faults

    def settle(self) -> None:
        """Return once the plugin has had :data:`WATCH_SETTLE_S` since it last registered (at once, mostly)."""
        ep = self.kubelet.endpoints.get(self.resource)
        if ep is not None and ep.opened_at is not None:
            time.sleep(max(0.0, ep.opened_at + WATCH_SETTLE_S - time.monotonic()))

    def inject(self, gpu: str, kind: str, **params: Any) -> str:
        """Inject a fault on ``gpu`` (a physical GPU), once the plugin has settled (:meth:`settle`)."""
        self.settle()
        self.faulted = True
        return str(self.testbed.inject(self.node.name, kind, gpu, **params)["id"])

    def heal(self, fault_id: str) -> None:
        self.testbed.heal(fault_id=fault_id)

    def heal_all(self) -> None:
        with contextlib.suppress(Exception):
            self.testbed.heal(node=self.node.name)

    def all_healthy(self, update: Any) -> bool:
        """Every device that was Healthy when the plugin came up is listed and Healthy again."""
        states = update.by_id()
        return all(d in states and states[d].health == HEALTHY for d in self.baseline_healthy)

    # ------------------------------------------------------------------------------------------ between tests

    def reset(self) -> None:
        """Back to a clean state for the next check: faults healed, pods gone, plugin serving every GPU as
        Healthy. Restarts the agent, kubelet or plugin when a check left them broken. Never raises."""
        with contextlib.suppress(Exception):
            if not self.testbed.alive():
                self.restart_agent()
        self.heal_all()
        for pod in sorted({a.pod for a in self.kubelet.checkpoint.assignments}):
            self.kubelet.release(pod)
        if not self.kubelet.running:
            with contextlib.suppress(Exception):
                self.kubelet.start()
        if self.startup_error is not None and not self.baseline:
            return  # it never came up; do not pay the start timeout again for every check
        self.note_death("between checks")
        for attempt in range(2):
            try:
                ep = self.kubelet.endpoints.get(self.resource)
                if ep is None or not ep.serving or self.process is None or not self.process.alive():
                    raise PluginViolation("not-serving", "not serving")
                for resource in self.followers:
                    self.kubelet.wait_endpoint(resource, 0, POOL_SETTLE_S)
                if attempt == 0 and self.faulted and self.recovers is False:
                    # Known not to recover: restarted after every check that faulted a GPU, not only when its
                    # latest list shows the fault. A report that comes after this look (NVIDIA's plugin under
                    # load) would otherwise land in the next check, as a GPU turning Unhealthy for nothing.
                    raise PluginViolation("no-recovery", "faulted during the check and known not to recover")
                bound = RECOVERY_BOUND_S if self.recovers is not False else 0.0
                self.kubelet.wait_update(self.resource, self.all_healthy, bound, "all GPUs healthy")
                self.kubelet.problems.clear()
                self.faulted = False
                return
            except PluginViolation:
                if attempt == 0:
                    with contextlib.suppress(PluginViolation):
                        self.restart(kill=True, during="restart between checks")


def run_load(put: PluginUnderTest, stop: threading.Event, errors: list[str], counts: dict[str, int],
             pods: int = 2) -> None:
    """Background pods coming and going (chaos "under load"): admit one GPU, release it, repeat.

    Failures while the plugin or kubelet is down are expected and only counted; ``counts["after"]`` counts
    admissions that succeeded after ``counts["mark"]`` was set by the test."""
    n = 0
    while not stop.is_set():
        n += 1
        pod = f"load-{n % pods}"
        try:
            put.kubelet.release(pod)
            put.kubelet.admit(pod, "main", put.resource, 1)
            counts["ok"] = counts.get("ok", 0) + 1
            if counts.get("mark"):
                counts["after"] = counts.get("after", 0) + 1
        except Exception as exc:  # expected while things restart
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            stop.wait(0.05)
        stop.wait(0.02)
