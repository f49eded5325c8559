"""The kubelet side of the device plugin API v1beta1, over real gRPC on unix sockets.

:class:`Kubelet` serves ``Registration`` on ``<plugin dir>/kubelet.sock`` and, for every accepted registration,
dials the plugin's endpoint, asks ``GetDevicePluginOptions`` and only then opens ``ListAndWatch``, keeping the
stream and recording every update with its arrival time. It hands out devices the way the kubelet's device
manager does (:meth:`Kubelet.admit`: healthy devices not in use, the plugin's preferred allocation when offered,
``Allocate``, ``PreStartContainer`` when required) and keeps the assignments per pod and container in a checkpoint
file that survives a simulated restart (:meth:`Kubelet.restart` removes and recreates ``kubelet.sock``).

Every wait and every call has a deadline (:class:`Timeouts`). What a plugin does wrong becomes a
:class:`PluginViolation` carrying the offending response as evidence, never a hang and never a bare traceback:

- at registration: wrong version, malformed resource name, missing endpoint (refused with ``INVALID_ARGUMENT``,
  as the kubelet does), a failing or hanging options call (the registration fails; ListAndWatch is not called);
- on the stream: malformed device lists are recorded as problems of that update; a stream that closes or fails
  is recorded, and the resource then has no allocatable devices;
- on calls: deadlines, RPC errors, undecodable responses, wrong numbers of container responses.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from fakehw.render.atomic import atomic_write
from testbed import component_user
from testbed.kubelet.api import (
    HEALTHY,
    KUBELET_SOCKET,
    PRESTART_TIMEOUT_S,
    DevicePluginClient,
    RegistrationServicer,
    StreamCall,
    add_registration,
    channel_options,
    new_server,
    pb,
    to_json,
    unix_target,
)
from testbed.kubelet.checks import (
    Problem,
    allocate_problems,
    device_problems,
    preferred_problems,
    registration_problems,
    summarize,
)
from testbed.kubelet.launcher import PluginProcess

T = TypeVar("T")
CHECKPOINT_FILE = "kubelet_internal_checkpoint"
MAX_KEPT_UPDATES = 2000
"""Distinct device lists kept per endpoint (the first one is always kept; older ones are dropped and counted)."""


@dataclass(frozen=True)
class Timeouts:
    """Deadlines of the harness, in seconds. ``scaled`` stretches them (e.g. for emulated riscv64 nodes)."""

    start: float = 30.0
    """Plugin process start until its GPU resource is registered and listed."""
    rpc: float = 5.0
    """Any unary call (options, preferred allocation, allocate)."""
    dial: float = 5.0
    """Connecting to a registered endpoint."""
    first_update: float = 5.0
    """ListAndWatch opened until its first device list."""
    reregister: float = 10.0
    """kubelet.sock recreated until the plugin registered again."""
    prestart: float = PRESTART_TIMEOUT_S

    def scaled(self, factor: float) -> Timeouts:
        return Timeouts(**{k: v * factor for k, v in asdict(self).items()})


class PluginViolation(Exception):
    """The plugin did something the API or a requirement forbids. ``evidence`` holds what it sent."""

    def __init__(self, check: str, message: str, evidence: dict[str, Any] | None = None):
        super().__init__(message)
        self.check = check
        self.message = message
        self.evidence = evidence or {}


class PluginTimeout(PluginViolation):
    """A deadline passed (a hung plugin)."""


class RpcFailed(PluginViolation):
    """A call ended with a gRPC error status (which may be the expected outcome, e.g. Allocate of a lost GPU)."""

    def __init__(self, check: str, message: str, code: grpc.StatusCode, details: str,
                 evidence: dict[str, Any] | None = None):
        super().__init__(check, message, evidence)
        self.code = code
        self.details = details


class AdmissionRefused(Exception):
    """The kubelet would not admit the pod (not enough healthy free devices): not the plugin's fault."""


# --------------------------------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class DeviceState:
    id: str
    health: str
    numa: tuple[int, ...]


@dataclass(frozen=True)
class DeviceUpdate:
    """One ListAndWatch response as received."""

    seq: int
    time: float
    """``time.monotonic()`` at arrival."""
    devices: tuple[DeviceState, ...]
    problems: tuple[Problem, ...]
    raw: dict[str, Any]

    def by_id(self) -> dict[str, DeviceState]:
        return {d.id: d for d in self.devices}

    def health(self, device_id: str) -> str | None:
        d = self.by_id().get(device_id)
        return d.health if d else None

    @property
    def healthy(self) -> list[str]:
        return [d.id for d in self.devices if d.health == HEALTHY]


@dataclass
class RegistrationRecord:
    """One Register call and what became of it."""

    seq: int
    time: float
    kubelet_generation: int
    request: dict[str, Any]
    resource: str
    outcome: str = "pending"
    """pending, refused, dial-failed, options-failed, registered, superseded, closed."""
    detail: str = ""
    problems: list[Problem] = field(default_factory=list)


@dataclass(frozen=True)
class CallRecord:
    method: str
    resource: str
    time: float
    duration: float
    request: dict[str, Any]
    response: dict[str, Any] | None
    error: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Endpoint:
    """A registered resource: the plugin's socket, its options and its ListAndWatch stream."""

    def __init__(self, resource: str, socket: Path, registration: RegistrationRecord, generation: int,
                 channel: grpc.Channel, options: pb.DevicePluginOptions):
        self.resource = resource
        self.socket = socket
        self.registration = registration
        self.generation = generation
        self.channel = channel
        self.client = DevicePluginClient(channel)
        self.options = options
        self.updates: list[DeviceUpdate] = []
        """Device lists as received, except that a list identical to the one before it is only counted
        (:attr:`repeats`): a plugin that re-sends the same list in a loop cannot make the harness hold it."""
        self.first: DeviceUpdate | None = None
        self.received = 0
        """Device lists received on this stream, repeats included."""
        self.repeats = 0
        """Lists identical to the one before them (counted, not kept)."""
        self.dropped = 0
        """Distinct lists dropped from the front of :attr:`updates` to keep it bounded."""
        self.stream_state = "opening"
        """opening, open, ended (the plugin closed it), failed, cancelled (the kubelet closed it)."""
        self.stream_detail = ""
        self.opened_at: float | None = None
        self.closed = False
        self._call: StreamCall | None = None

    @property
    def latest(self) -> DeviceUpdate | None:
        return self.updates[-1] if self.updates else None

    @property
    def serving(self) -> bool:
        return self.stream_state == "open" and self.latest is not None

    def close(self) -> None:
        self.closed = True
        if self._call is not None:
            with contextlib.suppress(Exception):
                self._call.cancel()
        with contextlib.suppress(Exception):
            self.channel.close()


@dataclass(frozen=True)
class Assignment:
    """Devices of one resource given to one container, with the plugin's Allocate answer (JSON)."""

    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    response: dict[str, Any]
    time: float

    def response_message(self) -> pb.ContainerAllocateResponse:
        from google.protobuf import json_format

        msg = pb.ContainerAllocateResponse()
        json_format.ParseDict(self.response, msg)
        return msg


class Checkpoint:
    """Assignments per pod/container, persisted like the kubelet's ``kubelet_internal_checkpoint``."""

    def __init__(self, path: Path, assignments: Sequence[Assignment] = ()):
        self.path = path
        self.assignments = list(assignments)

    @classmethod
    def load(cls, path: Path) -> Checkpoint:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls(path)
        return cls(path, [Assignment(e["pod"], e["container"], e["resource"], tuple(e["device_ids"]),
                                     e["response"], e["time"]) for e in data.get("entries", [])])

    def save(self) -> None:
        doc = {"entries": [asdict(a) for a in self.assignments]}
        atomic_write(self.path, (json.dumps(doc, indent=1) + "\n").encode())

    def find(self, pod: str, container: str, resource: str) -> Assignment | None:
        return next((a for a in self.assignments if (a.pod, a.container, a.resource) == (pod, container, resource)),
                    None)

    def in_use(self, resource: str) -> set[str]:
        return {d for a in self.assignments if a.resource == resource for d in a.device_ids}

    def add(self, assignment: Assignment) -> None:
        self.assignments.append(assignment)
        self.save()

    def remove_pod(self, pod: str) -> list[Assignment]:
        gone = [a for a in self.assignments if a.pod == pod]
        self.assignments = [a for a in self.assignments if a.pod != pod]
        self.save()
        return gone


# --------------------------------------------------------------------------------------------------- kubelet


class _Registration(RegistrationServicer):
    def __init__(self, kubelet: Kubelet):
        self.kubelet = kubelet

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        problem = self.kubelet._on_register(request)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        return pb.Empty()


class Kubelet:
    """The harness's kubelet. ``start()`` it, start the plugin, then :meth:`wait_endpoint`."""

    def __init__(self, plugin_dir: Path, timeouts: Timeouts | None = None):
        self.plugin_dir = Path(plugin_dir)
        self.timeouts = timeouts or Timeouts()
        self.socket = self.plugin_dir / KUBELET_SOCKET
        if len(str(self.socket).encode()) >= 107:
            raise ValueError(f"plugin directory {plugin_dir} is too deep for a unix socket path")
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self._seq = 0
        self.generation = 0
        """Kubelet generation: increases with every (re)start."""
        self.registrations: list[RegistrationRecord] = []
        self.endpoints: dict[str, Endpoint] = {}
        self.retired: list[Endpoint] = []
        self.calls: deque[CallRecord] = deque(maxlen=400)
        self.problems: list[tuple[str, Problem]] = []
        """(resource, problem) the kubelet tolerated, e.g. a preferred allocation outside the available set."""
        self.checkpoint = Checkpoint.load(self.plugin_dir / CHECKPOINT_FILE)
        self._endpoint_generation = 0
        self._watched: list[PluginProcess] = []

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        component_user.hand_over(self.plugin_dir)  # where the plugin creates its socket (--component-user)
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        server = new_server()
        add_registration(server, _Registration(self))
        if server.add_insecure_port(unix_target(self.socket)) == 0:
            raise OSError(f"cannot listen on {self.socket}")
        server.start()
        component_user.hand_over(self.socket)
        with self._cond:
            self._server = server
            self.generation += 1
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop serving, drop every plugin connection and remove kubelet.sock."""
        with self._cond:
            server, self._server = self._server, None
            endpoints = list(self.endpoints.values())
            self.endpoints.clear()
            self._cond.notify_all()
        if server is not None:
            server.stop(grace=None)
        for ep in endpoints:
            ep.close()
            ep.registration.outcome = "closed"
            self.retired.append(ep)
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()

    def restart(self, downtime: float = 0.2) -> None:
        """A kubelet restart: kubelet.sock goes away and comes back; registrations must be made again. The
        checkpoint is read back from its file, as a restarted kubelet does."""
        self.stop()
        time.sleep(downtime)
        self.checkpoint = Checkpoint.load(self.plugin_dir / CHECKPOINT_FILE)
        self.start()

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> Kubelet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------ registration

    def _on_register(self, request: pb.RegisterRequest) -> str:
        """Validate synchronously (what the kubelet refuses at once), then connect in the background."""
        with self._cond:
            self._seq += 1
            record = RegistrationRecord(self._seq, time.monotonic(), self.generation, to_json(request),
                                        request.resource_name)
            self.registrations.append(record)
            self._cond.notify_all()
        problems = registration_problems(request)
        if not problems:
            path = self.plugin_dir / request.endpoint
            if not path.exists():
                problems.append(Problem("endpoint", f"endpoint {request.endpoint!r} does not exist in the plugin "
                                                    f"directory {self.plugin_dir} when registering"))
        if problems:
            with self._cond:
                record.outcome = "refused"
                record.problems = problems
                record.detail = summarize(problems)
                self._cond.notify_all()
            return record.detail
        generation = self.generation
        threading.Thread(target=self._connect, args=(record, request, generation), daemon=True,
                         name=f"dp-connect-{request.resource_name}").start()
        return ""

    def _connect(self, record: RegistrationRecord, request: pb.RegisterRequest, generation: int) -> None:
        path = self.plugin_dir / request.endpoint
        channel = grpc.insecure_channel(unix_target(path), options=channel_options())

        def fail(outcome: str, detail: str) -> None:
            channel.close()
            with self._cond:
                record.outcome = outcome
                record.detail = detail
                self._cond.notify_all()

        try:
            grpc.channel_ready_future(channel).result(timeout=self.timeouts.dial)
        except grpc.FutureTimeoutError:
            fail("dial-failed", f"could not connect to {path} within {self.timeouts.dial:g} s")
            return
        client = DevicePluginClient(channel)
        try:
            options = self._record_call("GetDevicePluginOptions", request.resource_name, pb.Empty(),
                                        lambda: client.options(self.timeouts.rpc))
        except PluginViolation as exc:
            fail("options-failed", f"GetDevicePluginOptions failed, so the registration fails and ListAndWatch is "
                                   f"not called: {exc.message}")
            return
        if to_json(options) != to_json(request.options):
            record.problems.append(Problem("options-mismatch", f"options in Register {to_json(request.options)} "
                                                               f"differ from GetDevicePluginOptions "
                                                               f"{to_json(options)}"))
        with self._cond:
            if generation != self.generation or self._server is None:
                channel.close()
                record.outcome = "closed"
                record.detail = "the kubelet restarted while connecting"
                self._cond.notify_all()
                return
            self._endpoint_generation += 1
            ep = Endpoint(request.resource_name, path, record, self._endpoint_generation, channel, options)
            old = self.endpoints.get(request.resource_name)
            self.endpoints[request.resource_name] = ep
            record.outcome = "registered"
            if old is not None:
                old.registration.outcome = "superseded"
                self.retired.append(old)
            self._cond.notify_all()
        if old is not None:
            old.close()
        threading.Thread(target=self._watch, args=(ep,), daemon=True, name=f"dp-watch-{ep.resource}").start()

    def _watch(self, ep: Endpoint) -> None:
        try:
            call = ep.client.list_and_watch()
            ep._call = call
            with self._cond:
                ep.stream_state = "open"
                ep.opened_at = time.monotonic()
                self._cond.notify_all()
            for response in call:
                self._on_update(ep, response)
            state, detail = "ended", "the plugin closed the ListAndWatch stream"
        except grpc.RpcError as exc:
            code = exc.code()
            if ep.closed and code == grpc.StatusCode.CANCELLED:
                state, detail = "cancelled", "closed by the kubelet"
            else:
                state, detail = "failed", f"ListAndWatch failed: {code.name}: {exc.details()}"
        with self._cond:
            ep.stream_state = state
            ep.stream_detail = detail
            self._cond.notify_all()

    def _on_update(self, ep: Endpoint, response: pb.ListAndWatchResponse) -> None:
        devices = tuple(DeviceState(d.ID, d.health, tuple(int(n.ID) for n in d.topology.nodes))
                        for d in response.devices)
        with self._cond:
            ep.received += 1
            latest = ep.latest
            if latest is not None and latest.devices == devices:
                ep.repeats += 1
                return
            self._seq += 1
            update = DeviceUpdate(self._seq, time.monotonic(), devices, tuple(device_problems(response.devices)),
                                  to_json(response))
            ep.updates.append(update)
            if ep.first is None:
                ep.first = update
            if len(ep.updates) > MAX_KEPT_UPDATES:
                cut = len(ep.updates) - MAX_KEPT_UPDATES // 2
                ep.dropped += cut
                del ep.updates[:cut]
            self._cond.notify_all()

    # ------------------------------------------------------------------------------------------ waiting

    def wait_for(self, predicate: Callable[[], T | None], timeout: float, what: str,
                 evidence: Callable[[], dict[str, Any]] | None = None) -> T:
        """Wait until ``predicate()`` returns something (checked on every state change); PluginTimeout after
        ``timeout`` seconds, saying ``what`` was awaited."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                if value is not None and value is not False:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PluginTimeout("timeout", f"{what}: not within {timeout:g} s",
                                        evidence() if evidence else self.evidence())
                self._cond.wait(min(left, 0.5))

    def watch_process(self, process: PluginProcess) -> None:
        """Wake every waiter when ``process`` exits, so a wait that depends on it ends at once."""
        with self._cond:
            if any(p is process for p in self._watched):
                return
            self._watched = [p for p in self._watched if p.alive()] + [process]

        def watch() -> None:
            process.wait()
            with self._cond:
                self._cond.notify_all()

        threading.Thread(target=watch, daemon=True, name="dp-process-watch").start()

    def wait_endpoint(self, resource: str, after: int = 0, timeout: float | None = None,
                      process: PluginProcess | None = None) -> Endpoint:
        """The endpoint of ``resource`` with a generation above ``after`` whose stream delivered a device list.

        Fails at once, with the reason, when the newest registration of ``resource`` was refused or failed, or
        when ``process`` (the plugin) exits."""
        limit = timeout if timeout is not None else self.timeouts.start
        if process is not None:
            self.watch_process(process)

        def ready() -> Endpoint | None:
            if process is not None and not process.alive():
                raise PluginViolation("plugin-exited", f"the plugin exited with status {process.returncode()} "
                                      f"before {resource} was registered and listing devices",
                                      {**self.evidence(resource), "plugin log": process.log_tail(2000)})
            ep = self.endpoints.get(resource)
            if ep is not None and ep.generation > after:
                if ep.serving:
                    return ep
                if ep.stream_state in ("ended", "failed"):
                    raise PluginViolation("list-and-watch", f"{resource}: {ep.stream_detail} before sending a "
                                                            "device list", self.evidence(resource))
                return None
            mine = [r for r in self.registrations if r.resource == resource and r.kubelet_generation ==
                    self.generation]
            if mine and mine[-1].outcome in ("refused", "dial-failed", "options-failed"):
                last = mine[-1]
                raise PluginViolation(f"registration-{last.outcome}", f"registration of {resource} "
                                      f"{last.outcome}: {last.detail}", self.evidence(resource))
            return None

        return self.wait_for(ready, limit, f"{resource} registered and listing its devices",
                             lambda: self.evidence(resource))

    def wait_update(self, resource: str, predicate: Callable[[DeviceUpdate], bool], timeout: float,
                    what: str, since: int | None = None) -> DeviceUpdate:
        """The first device list of ``resource`` that satisfies ``predicate``, looking at the current list and
        newer ones (or, with ``since``, every list that arrived after that :attr:`seq`)."""
        start = self._seq if since is None else since

        def check() -> DeviceUpdate | None:
            ep = self.endpoints.get(resource)
            if ep is None:
                return None
            candidates = [u for u in ep.updates if u.seq > start]
            if since is None and ep.latest is not None and ep.latest not in candidates:
                candidates.insert(0, ep.latest)
            return next((u for u in candidates if predicate(u)), None)

        return self.wait_for(check, timeout, what, lambda: self.evidence(resource))

    def endpoint(self, resource: str) -> Endpoint:
        ep = self.endpoints.get(resource)
        if ep is None:
            raise PluginViolation("not-registered", f"{resource} is not registered with the kubelet",
                                  self.evidence(resource))
        return ep

    @property
    def seq(self) -> int:
        return self._seq

    # ------------------------------------------------------------------------------------------ calls

    def _record_call(self, method: str, resource: str, request: Any, fn: Callable[[], T]) -> T:
        started = time.monotonic()
        try:
            result = fn()
        except grpc.RpcError as exc:
            duration = time.monotonic() - started
            code: grpc.StatusCode = exc.code()
            details = str(exc.details() or "")
            self.calls.append(CallRecord(method, resource, started, duration, to_json(request), None,
                                         f"{code.name}: {details}"))
            evidence = {"request": to_json(request), "status": code.name, "details": details}
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise PluginTimeout(f"{method}-timeout", f"{method} on {resource} did not answer within its "
                                    f"deadline ({duration:.1f} s)", evidence) from None
            if code == grpc.StatusCode.INTERNAL and "deserializ" in details.lower():
                raise RpcFailed(f"{method}-malformed", f"{method} on {resource} sent a response that is not a "
                                f"valid {method} message: {details}", code, details, evidence) from None
            raise RpcFailed(f"{method}-error", f"{method} on {resource} failed: {code.name}: {details}", code,
                            details, evidence) from None
        response = to_json(result) if isinstance(result, Message) else None
        self.calls.append(CallRecord(method, resource, started, time.monotonic() - started, to_json(request),
                                     response, None))
        return result

    def options(self, resource: str) -> pb.DevicePluginOptions:
        ep = self.endpoint(resource)
        return self._record_call("GetDevicePluginOptions", resource, pb.Empty(),
                                 lambda: ep.client.options(self.timeouts.rpc))

    def preferred(self, resource: str, available: Sequence[str], size: int,
                  must_include: Sequence[str] = ()) -> tuple[pb.PreferredAllocationRequest,
                                                               pb.PreferredAllocationResponse]:
        ep = self.endpoint(resource)
        request = pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=list(available), must_include_deviceIDs=list(must_include), allocation_size=size)])
        response = self._record_call("GetPreferredAllocation", resource, request,
                                     lambda: ep.client.preferred_allocation(request, self.timeouts.rpc))
        return request, response

    def allocate(self, resource: str, containers: Sequence[Sequence[str]]) -> pb.AllocateResponse:
        """Allocate as the kubelet calls it: one container request per entry. Raises on a wrong number of
        container responses (the kubelet cannot start the pod then)."""
        ep = self.endpoint(resource)
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))
                                                         for ids in containers])
        response = self._record_call("Allocate", resource, request,
                                     lambda: ep.client.allocate(request, self.timeouts.rpc))
        problems = allocate_problems(request, response)
        if problems:
            raise PluginViolation("allocate-responses", summarize(problems),
                                  {"request": to_json(request), "response": to_json(response)})
        return response

    def prestart(self, resource: str, device_ids: Sequence[str]) -> None:
        ep = self.endpoint(resource)
        request = pb.PreStartContainerRequest(devices_ids=list(device_ids))
        self._record_call("PreStartContainer", resource, request,
                          lambda: ep.client.prestart(request, self.timeouts.prestart))

    # ------------------------------------------------------------------------------------------ pods

    def available(self, resource: str) -> list[str]:
        """Healthy devices of ``resource`` no container holds, in the plugin's list order (allocatable)."""
        ep = self.endpoint(resource)
        if not ep.serving:
            return []
        latest = ep.latest
        assert latest is not None
        in_use = self.checkpoint.in_use(resource)
        return [d for d in dict.fromkeys(latest.healthy) if d not in in_use]

    def admit(self, pod: str, container: str, resource: str, count: int) -> Assignment:
        """Give ``count`` devices of ``resource`` to a container, as the kubelet's device manager does.

        A container that already holds devices of the resource keeps them (a restart of the container). A
        preferred allocation that names devices outside the available set is tolerated like the kubelet
        tolerates it (only available devices are taken, the rest is filled in) and recorded in
        :attr:`problems`."""
        held = self.checkpoint.find(pod, container, resource)
        if held is not None:
            return held
        ep = self.endpoint(resource)
        if not ep.serving:
            raise AdmissionRefused(f"{resource}: the plugin's ListAndWatch stream is {ep.stream_state} "
                                   f"({ep.stream_detail or 'no device list yet'}); nothing is allocatable")
        available = self.available(resource)
        if count > len(available):
            raise AdmissionRefused(f"{resource}: {count} wanted, {len(available)} healthy and free")
        chosen: list[str] = []
        if ep.options.get_preferred_allocation_available:
            request, response = self.preferred(resource, available, count)
            for p in preferred_problems(request, response):
                self.problems.append((resource, p))
            if response.container_responses:
                for dev in response.container_responses[0].deviceIDs:
                    if dev in available and dev not in chosen and len(chosen) < count:
                        chosen.append(dev)
        for dev in available:
            if len(chosen) >= count:
                break
            if dev not in chosen:
                chosen.append(dev)
        response_all = self.allocate(resource, [chosen])
        if ep.options.pre_start_required:
            self.prestart(resource, chosen)
        assignment = Assignment(pod, container, resource, tuple(chosen),
                                to_json(response_all.container_responses[0]), time.time())
        self.checkpoint.add(assignment)
        return assignment

    def release(self, pod: str) -> list[Assignment]:
        """The pod ended: its devices become free (the kubelet does not tell the plugin)."""
        return self.checkpoint.remove_pod(pod)

    # ------------------------------------------------------------------------------------------ evidence

    def evidence(self, resource: str | None = None, calls: int = 6) -> dict[str, Any]:
        """What a reviewer needs when a check about ``resource`` fails: registrations, stream state, the last
        device list and the last calls."""
        regs = [r for r in self.registrations if resource is None or r.resource == resource][-4:]
        out: dict[str, Any] = {
            "registrations": [{"request": r.request, "outcome": r.outcome, "detail": r.detail} for r in regs],
        }
        ep = self.endpoints.get(resource) if resource else None
        if ep is not None:
            out["stream"] = {"state": ep.stream_state, "detail": ep.stream_detail, "updates": ep.received,
                             "identical repeats": ep.repeats}
            if ep.latest is not None:
                out["last_device_list"] = ep.latest.raw
        out["calls"] = [c.to_json() for c in list(self.calls)
                        if resource is None or c.resource == resource][-calls:]
        return out

    def history(self, resource: str) -> Iterator[DeviceUpdate]:
        """Every update of ``resource`` across registrations, oldest first."""
        eps = [e for e in [*self.retired, *self.endpoints.values()] if e.resource == resource]
        for ep in sorted(eps, key=lambda e: e.generation):
            yield from ep.updates


def short_tmp_dir(prefix: str = "fhw-dp-") -> Path:
    """A short directory for plugin sockets (unix socket paths are limited to 107 bytes)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp" if os.path.isdir("/tmp") else None))
