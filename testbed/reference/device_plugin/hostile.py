"""Hostile device plugins: each misbehaves in one way, to prove the harness reports it, times out and moves on.

``python -m testbed.reference.device_plugin.hostile BEHAVIOUR [--plugin-dir DIR] [--calls FILE]``

They need no GPUs (they advertise four made-up devices) and speak real gRPC. ``--calls FILE`` appends the name of
every RPC the plugin receives, so a test can prove, for example, that ListAndWatch was never called after a
failed options call.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc

from testbed.kubelet import api
from testbed.kubelet.api import HEALTHY, DevicePluginServicer, pb
from testbed.kubelet.launcher import PLUGIN_DIR_ENV

BEHAVIOURS = {
    "wrong-version": "registers with API version v1alpha1",
    "bad-resource-name": "registers the resource name 'gpu' (no domain)",
    "missing-endpoint": "registers an endpoint socket that does not exist",
    "dead-endpoint": "registers an endpoint that is a socket file nobody listens on (bound, never served)",
    "options-fail": "GetDevicePluginOptions fails with UNAVAILABLE",
    "options-hang": "GetDevicePluginOptions never answers",
    "list-hang": "ListAndWatch never sends a device list",
    "list-closes": "ListAndWatch sends one list, then closes the stream",
    "list-malformed": "ListAndWatch sends duplicate, empty and over-long IDs, an unknown health value, NUMA -1",
    "list-flood": "ListAndWatch re-sends the same list as fast as it can (as NVIDIA's health loop does on a lost "
                  "GPU), and a changed one now and then",
    "garbage": "every response is bytes that are not a protobuf message",
    "allocate-hang": "Allocate never answers",
    "allocate-wrong-count": "Allocate answers with no container responses",
    "preferred-bad": "GetPreferredAllocation names devices outside the available set, and too many",
    "never-registers": "serves, but never calls Register",
    "crash": "exits with status 3 at once",
}
DEVICES = tuple(f"hostile-{i}" for i in range(4))
SOCKET = "hostile.sock"
DEAD_SOCKET = "dead.sock"
HANG_S = 3600.0


class Hostile(DevicePluginServicer):
    def __init__(self, behaviour: str, calls: Path | None):
        self.behaviour = behaviour
        self.calls = calls
        self.stop = threading.Event()

    def _log(self, method: str) -> None:
        if self.calls is not None:
            with open(self.calls, "a") as fh:
                fh.write(method + "\n")

    def _hang(self, context: grpc.ServicerContext) -> None:
        deadline = time.monotonic() + HANG_S
        while context.is_active() and time.monotonic() < deadline and not self.stop.is_set():
            time.sleep(0.05)

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        self._log("GetDevicePluginOptions")
        if self.behaviour == "options-fail":
            context.abort(grpc.StatusCode.UNAVAILABLE, "hostile: options are not available")
        if self.behaviour == "options-hang":
            self._hang(context)
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        self._log("ListAndWatch")
        if self.behaviour == "list-hang":
            self._hang(context)
            return
        if self.behaviour == "list-malformed":
            devices = [pb.Device(ID="dup", health=HEALTHY), pb.Device(ID="dup", health=HEALTHY),
                       pb.Device(ID="", health=HEALTHY), pb.Device(ID="x" * 80, health=HEALTHY),
                       pb.Device(ID="sick", health="Sick"),
                       pb.Device(ID="numa", health=HEALTHY, topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=-1)]))]
        else:
            devices = [pb.Device(ID=d, health=HEALTHY) for d in DEVICES]
        yield pb.ListAndWatchResponse(devices=devices)
        if self.behaviour == "list-closes":
            return
        if self.behaviour == "list-flood":
            yield from self._flood(context, devices)
            return
        self._hang(context)

    def _flood(self, context: grpc.ServicerContext, devices: list[pb.Device]) -> Iterator[pb.ListAndWatchResponse]:
        n = 0
        while context.is_active() and not self.stop.is_set():
            n += 1
            sick = n // 1000 % len(devices)  # a different device is Unhealthy every 1000 lists
            yield pb.ListAndWatchResponse(devices=[pb.Device(ID=d.ID, health=api.UNHEALTHY if i == sick else HEALTHY)
                                                   for i, d in enumerate(devices)])

    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,
                               context: grpc.ServicerContext) -> pb.PreferredAllocationResponse:
        self._log("GetPreferredAllocation")
        out = pb.PreferredAllocationResponse()
        for req in request.container_requests:
            ids = list(req.available_deviceIDs)[: req.allocation_size]
            if self.behaviour == "preferred-bad":
                ids = ["not-offered", *ids, "also-not-offered"]
            out.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return out

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        self._log("Allocate")
        if self.behaviour == "allocate-hang":
            self._hang(context)
        if self.behaviour == "allocate-wrong-count":
            return pb.AllocateResponse()
        return pb.AllocateResponse(container_responses=[pb.ContainerAllocateResponse(
            envs={"HOSTILE_DEVICES": ",".join(r.devices_ids)}) for r in request.container_requests])

    def PreStartContainer(self, request: pb.PreStartContainerRequest,
                          context: grpc.ServicerContext) -> pb.PreStartContainerResponse:
        self._log("PreStartContainer")
        return pb.PreStartContainerResponse()


def _garbage(message: object) -> bytes:
    return b"\xff\xff\xff\xff not a protobuf message"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.reference.device_plugin.hostile")
    p.add_argument("behaviour", choices=sorted(BEHAVIOURS))
    p.add_argument("--plugin-dir", type=Path, default=Path(os.environ.get(PLUGIN_DIR_ENV, api.DEFAULT_PLUGIN_DIR)))
    p.add_argument("--calls", type=Path, default=None, help="append the name of every RPC received to this file")
    args = p.parse_args(argv)
    if args.behaviour == "crash":
        print("hostile: crashing on purpose", file=sys.stderr)
        return 3
    plugin = Hostile(args.behaviour, args.calls)
    server = api.new_server(workers=8)
    api.add_device_plugin(server, plugin, serializer=_garbage if args.behaviour == "garbage" else None)
    path = args.plugin_dir / SOCKET
    path.unlink(missing_ok=True)
    server.add_insecure_port(api.unix_target(path))
    server.start()
    dead = _dead_socket(args.plugin_dir / DEAD_SOCKET) if args.behaviour == "dead-endpoint" else None
    if args.behaviour != "never-registers":
        request = pb.RegisterRequest(
            version="v1alpha1" if args.behaviour == "wrong-version" else api.VERSION,
            endpoint=_endpoint(args.behaviour),
            resource_name="gpu" if args.behaviour == "bad-resource-name" else "nvidia.com/gpu",
            options=pb.DevicePluginOptions(get_preferred_allocation_available=True))
        try:
            api.register(args.plugin_dir / api.KUBELET_SOCKET, request, timeout=10)
        except grpc.RpcError as exc:
            print(f"hostile: registration refused: {exc.details()}", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        plugin.stop.set()
        server.stop(0)
        if dead is not None:
            dead.close()
    return 0


def _endpoint(behaviour: str) -> str:
    """The endpoint the plugin names in Register."""
    return {"missing-endpoint": "nope.sock", "dead-endpoint": DEAD_SOCKET}.get(behaviour, SOCKET)


def _dead_socket(path: Path) -> socket.socket:
    """A unix socket bound at ``path`` that never listens: the file exists, every connect is refused."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    return sock


if __name__ == "__main__":
    sys.exit(main())
