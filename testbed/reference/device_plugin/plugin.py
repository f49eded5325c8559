"""The reference device plugin: NVML-backed, topology- and memory-pool-aware, speaking device plugin API v1beta1.

One process serves one node:

- ``nvidia.com/gpu``: one device per GPU, ID = UUID, NUMA node(s) from NVML, health from NVML events
  (:mod:`.health`), preferred allocations that maximise NVLink bandwidth (:mod:`.allocator`), Allocate answers that
  expose exactly the allocated GPUs (``NVIDIA_VISIBLE_DEVICES`` with their UUIDs and their ``/dev/nvidiaN`` device
  nodes, plus the control nodes) and refuse a GPU that has fallen off the bus;
- ``nvidia.com/gpu.memoryPool.<pool>``: one resource per memory pool of the node (:mod:`.pools`), when the fakehw
  agent is reachable.

Each resource has its own gRPC server on its own socket in the plugin directory and registers with the kubelet
at start and again whenever ``kubelet.sock`` is recreated (a kubelet restart), retrying until the kubelet takes it.
A :class:`~.mutants.Mutant` name switches one behaviour off or breaks it on purpose.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from testbed.kubelet import api
from testbed.kubelet.api import HEALTHY, UNHEALTHY, DevicePluginServicer, pb
from testbed.reference.device_plugin.allocator import TopologyMatrix, best_set
from testbed.reference.device_plugin.health import AgentOracle, HealthMonitor, RecoveryOracle
from testbed.reference.device_plugin.inventory import (
    GpuInfo,
    Inventory,
    load_inventory,
    read_inventory,
    save_inventory,
)
from testbed.reference.device_plugin.pools import PoolError, PoolManager, PoolSpec

log = logging.getLogger("fakehw.reference")

GPU_RESOURCE = "nvidia.com/gpu"
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
REGISTER_TIMEOUT_S = 5.0
WATCH_INTERVAL_S = 0.2
LATE_REPORT_S = 1.5
"""How late the ``late-and-sticky`` mutant reports a health change."""


@dataclass(frozen=True)
class PluginConfig:
    plugin_dir: Path
    node: str | None = None
    agent_socket: str | None = None
    dev_root: str = "/dev"
    """Where the GPUs' device nodes are on the host (device spec host paths)."""
    recheck_s: float = 0.25
    slice_bytes: int = 16 * 2**30
    mutant: str | None = None
    state_file: Path | None = None

    def is_mutant(self, name: str) -> bool:
        return self.mutant == name


class Broadcast:
    """A version number that ListAndWatch streams wait on; bumped on every change of the device list."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.version = 0

    def bump(self) -> None:
        with self._cond:
            self.version += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        with self._cond:
            if self.version == seen:
                self._cond.wait(timeout)
            return self.version


class _Resource(DevicePluginServicer):
    """What every resource of the plugin shares: options, ListAndWatch, PreStartContainer."""

    resource = ""
    socket_name = ""

    def __init__(self, plugin: ReferencePlugin):
        self.plugin = plugin
        self.options = pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def devices(self) -> list[pb.Device]:
        raise NotImplementedError

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        return self.options

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        seen = -1
        while context.is_active() and not self.plugin.stopping.is_set():
            version = self.plugin.changes.wait(seen, timeout=1.0)
            if version != seen:
                seen = version
                yield pb.ListAndWatchResponse(devices=self.devices())

    def PreStartContainer(self, request: pb.PreStartContainerRequest,
                          context: grpc.ServicerContext) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()

    def register_request(self) -> pb.RegisterRequest:
        return pb.RegisterRequest(version=api.VERSION, endpoint=self.socket_name, resource_name=self.resource,
                                  options=self.options)


class GpuResource(_Resource):
    resource = GPU_RESOURCE
    socket_name = "fakehw-ref-gpu.sock"

    def __init__(self, plugin: ReferencePlugin, inventory: Inventory):
        super().__init__(plugin)
        self.inventory = inventory
        self.by_id = inventory.by_id()
        config = plugin.config
        self.matrix = inventory.matrix
        if config.is_mutant("ignores-nvlink"):
            zero = tuple(tuple(0 for _ in row) for row in self.matrix.bonds)
            self.matrix = TopologyMatrix(zero, self.matrix.levels)

    def healthy(self, gpu: GpuInfo) -> bool:
        monitor = self.plugin.health
        return monitor is None or monitor.healthy(gpu.uuid)

    def devices(self) -> list[pb.Device]:
        out = []
        for g in self.inventory.gpus:
            healthy = self.healthy(g)
            if not healthy and self.plugin.config.is_mutant("drops-unhealthy"):
                continue
            numa = (0,) if self.plugin.config.is_mutant("wrong-numa") else g.numa
            out.append(pb.Device(ID=g.device_id, health=HEALTHY if healthy else UNHEALTHY,
                                 topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in numa])))
        return out

    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,
                               context: grpc.ServicerContext) -> pb.PreferredAllocationResponse:
        response = pb.PreferredAllocationResponse()
        for req in request.container_requests:
            unknown = [d for d in [*req.available_deviceIDs, *req.must_include_deviceIDs] if d not in self.by_id]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown devices {unknown}")
            must = [] if self.plugin.config.is_mutant("ignores-must-include") else list(req.must_include_deviceIDs)
            available = [d for d in req.available_deviceIDs if d not in must]
            healthy = [d for d in available if self.healthy(self.by_id[d])]
            if len(healthy) + len(must) >= req.allocation_size:
                available = healthy  # prefer devices this plugin knows to be healthy when there are enough
            try:
                chosen = best_set(self.matrix, [self.by_id[d].index for d in available], req.allocation_size,
                                  [self.by_id[d].index for d in must])
            except ValueError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            ids = [self.inventory.gpus[i].device_id for i in chosen]
            response.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return response

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        response = pb.AllocateResponse()
        for req in request.container_requests:
            unknown = [d for d in req.devices_ids if d not in self.by_id]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown devices {unknown}")
            gpus = [self.by_id[d] for d in dict.fromkeys(req.devices_ids)]
            if not self.plugin.config.is_mutant("allocates-lost-gpu"):
                lost = [g.uuid for g in gpus if self.plugin.lost(g)]
                if lost:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"GPUs {lost} have fallen off the bus; they cannot be allocated")
            if self.plugin.config.is_mutant("leaks-extra-device"):
                extra = next((g for g in self.inventory.gpus if g not in gpus), None)
                gpus = gpus + ([extra] if extra else [])
            if self.plugin.config.is_mutant("merges-containers") and response.container_responses:
                earlier = [self.by_id[d] for r in request.container_requests[:len(response.container_responses)]
                           for d in r.devices_ids if d in self.by_id]
                gpus = list(dict.fromkeys([*earlier, *gpus]))
            response.container_responses.append(self._container(gpus))
        return response

    def _container(self, gpus: Sequence[GpuInfo]) -> pb.ContainerAllocateResponse:
        root = self.plugin.config.dev_root.rstrip("/")
        specs = [pb.DeviceSpec(container_path=f"/dev/{name}", host_path=f"{root}/{name}", permissions="rw")
                 for name in CONTROL_DEVICES]
        specs += [pb.DeviceSpec(container_path=f"/dev/nvidia{g.minor}", host_path=f"{root}/nvidia{g.minor}",
                                permissions="rw") for g in gpus]
        return pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(g.uuid for g in gpus)},
                                            devices=specs)


class PoolResource(_Resource):
    def __init__(self, plugin: ReferencePlugin, spec: PoolSpec, manager: PoolManager):
        super().__init__(plugin)
        self.spec = spec
        self.manager = manager
        self.resource = spec.resource
        self.socket_name = f"fakehw-ref-pool-{spec.name}.sock"
        self.ids = spec.device_ids()

    def devices(self) -> list[pb.Device]:
        return [pb.Device(ID=d, health=HEALTHY) for d in self.ids]

    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,
                               context: grpc.ServicerContext) -> pb.PreferredAllocationResponse:
        response = pb.PreferredAllocationResponse()
        for req in request.container_requests:
            must = [] if self.plugin.config.is_mutant("ignores-must-include") else list(req.must_include_deviceIDs)
            rest = [d for d in req.available_deviceIDs if d not in must]
            chosen = (must + rest)[: req.allocation_size]
            response.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return response

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        response = pb.AllocateResponse()
        for req in request.container_requests:
            try:
                envs = self.manager.allocate(self.spec.name, list(req.devices_ids))
            except PoolError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            except Exception as exc:  # the agent refused (capacity) or is unreachable
                context.abort(grpc.StatusCode.UNAVAILABLE, f"memory pool {self.spec.name}: {exc}")
            response.container_responses.append(pb.ContainerAllocateResponse(envs=envs))
        return response


class ReferencePlugin:
    """Start with :meth:`run` (blocks until SIGTERM/SIGINT or :meth:`stop`)."""

    def __init__(self, config: PluginConfig, nvml: Any):
        self.config = config
        self.nvml = nvml
        self.stopping = threading.Event()
        self.changes = Broadcast()
        self.health: HealthMonitor | None = None
        self.resources: list[_Resource] = []
        self._servers: list[grpc.Server] = []
        self._registered: dict[str, tuple[int, int, int] | None] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------ helpers

    def lost(self, gpu: GpuInfo) -> bool:
        nvml = self.nvml
        try:
            nvml.nvmlDeviceGetMinorNumber(nvml.nvmlDeviceGetHandleByUUID(gpu.uuid))
            return False
        except nvml.NVMLError as exc:
            return bool(exc.value == nvml.NVML_ERROR_GPU_IS_LOST)

    def _agent(self) -> Any:
        from fakehw.agent.client import AgentClient

        assert self.config.agent_socket
        return AgentClient(self.config.agent_socket, timeout=5.0)

    # ------------------------------------------------------------------------------------------ lifecycle

    def _state_path(self, what: str) -> Path:
        base = self.config.state_file.parent if self.config.state_file else self.config.plugin_dir
        return base / f".fakehw-ref-{self.config.node or 'node'}-{what}.json"

    def setup(self) -> None:
        cache_path = self._state_path("gpus")
        inventory, missing = read_inventory(self.nvml, load_inventory(cache_path))
        if missing:
            log.warning("GPUs %s are off the bus and were never seen before: not listed until a restart", missing)
        elif len(inventory.gpus) == self.nvml.nvmlDeviceGetCount():
            save_inventory(inventory, cache_path)
        log.info("%d GPUs: %s", len(inventory.gpus), ", ".join(g.uuid for g in inventory.gpus))
        oracle: RecoveryOracle | None = None
        if self.config.agent_socket and self.config.node:
            oracle = AgentOracle(self.config.agent_socket, self.config.node)
        if self.config.is_mutant("late-and-sticky"):
            self.health = _StickyHealthMonitor(self.nvml, inventory.gpus, self._bump_late, oracle,
                                               self.config.recheck_s)
            self.health.start()
        elif not self.config.is_mutant("ignores-health"):
            self.health = HealthMonitor(self.nvml, inventory.gpus, self.changes.bump, oracle, self.config.recheck_s)
            self.health.start()
        self._add(GpuResource(self, inventory))
        if self.config.agent_socket and self.config.node:
            threading.Thread(target=self._setup_pools, name="pools", daemon=True).start()

    def _bump_late(self) -> None:
        """The ``late-and-sticky`` mutant: the device list changes :data:`LATE_REPORT_S` after the health did."""
        timer = threading.Timer(LATE_REPORT_S, self.changes.bump)
        timer.daemon = True
        timer.start()

    def _setup_pools(self) -> None:
        assert self.config.node
        state = self.config.state_file or self._state_path("pools")
        manager = PoolManager(self._agent(), self.config.node, state, self.config.slice_bytes,
                              share_tokens=self.config.is_mutant("shares-pool-token"))
        delay = 0.2
        while not self.stopping.is_set():
            try:
                specs = manager.discover()
                break
            except Exception as exc:  # the agent may be restarting
                log.info("memory pools not known yet: %s", exc)
                self.stopping.wait(delay)
                delay = min(delay * 2, 5.0)
        else:
            return
        for spec in specs:
            self._add(PoolResource(self, spec, manager))
            log.info("memory pool %s: %d devices of %d bytes", spec.resource, spec.slices, spec.slice_bytes)

    def _add(self, resource: _Resource) -> None:
        path = self.config.plugin_dir / resource.socket_name
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = api.new_server(workers=16)
        api.add_device_plugin(server, resource)
        if server.add_insecure_port(api.unix_target(path)) == 0:
            raise OSError(f"cannot listen on {path}")
        server.start()
        with self._lock:
            self._servers.append(server)
            self.resources.append(resource)
            self._registered[resource.resource] = None

    def _kubelet_key(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.config.plugin_dir / api.KUBELET_SOCKET)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns)

    def watch(self) -> None:
        """Register every resource with the current kubelet; again when kubelet.sock is recreated."""
        socket = self.config.plugin_dir / api.KUBELET_SOCKET
        first: dict[str, tuple[int, int, int]] = {}
        while not self.stopping.is_set():
            key = self._kubelet_key()
            with self._lock:
                pending = [r for r in self.resources if key is not None and self._registered.get(r.resource) != key]
            for r in pending:
                assert key is not None
                if self.config.is_mutant("forgets-to-reregister") and r.resource in first:
                    continue
                try:
                    api.register(socket, r.register_request(), REGISTER_TIMEOUT_S)
                except (grpc.RpcError, grpc.FutureTimeoutError) as exc:
                    log.warning("registering %s failed (will retry): %s", r.resource, exc)
                    continue
                log.info("registered %s (endpoint %s)", r.resource, r.socket_name)
                first.setdefault(r.resource, key)
                with self._lock:
                    self._registered[r.resource] = key
            self.stopping.wait(WATCH_INTERVAL_S)

    def run(self) -> None:
        self.setup()
        try:
            self.watch()
        finally:
            self.shutdown()

    def stop(self) -> None:
        self.stopping.set()
        self.changes.bump()

    def shutdown(self) -> None:
        if self.health is not None:
            self.health.stop()
        for server in self._servers:
            server.stop(grace=0.5)
        for r in self.resources:
            with contextlib.suppress(OSError):
                (self.config.plugin_dir / r.socket_name).unlink()


def main_loop(config: PluginConfig) -> int:
    import pynvml

    pynvml.nvmlInit()
    plugin = ReferencePlugin(config, pynvml)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: plugin.stop())
    started = time.monotonic()
    try:
        plugin.run()
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    log.info("stopped after %.1f s", time.monotonic() - started)
    return 0


class _StickyHealthMonitor(HealthMonitor):
    """The ``late-and-sticky`` mutant's health: a fault once seen stays (healing, a GPU back on the bus)."""

    def _clear(self, uuid: str, reason: str, fetched: float) -> bool:
        return False
