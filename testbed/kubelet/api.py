"""The device plugin API v1beta1 as typed Python: constants, messages, servers and clients over real gRPC.

Messages are the classes generated from ``proto/deviceplugin.proto`` (re-exported as :data:`pb`). Servers and
clients are built here from the service descriptors instead of the generated ``_pb2_grpc`` glue, for two reasons:
method paths then come from the .proto itself (``/v1beta1.DevicePlugin/Allocate``), and every call site is typed
for ``mypy --strict`` with a deadline that cannot be forgotten (a client method has no default of "wait forever").

Both sides use this module: the harness (:mod:`testbed.kubelet.kubelet`) serves ``Registration`` and calls
``DevicePlugin``; the reference plugin, its mutants and the hostile plugins serve ``DevicePlugin`` and call
``Registration``.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from testbed.kubelet._gen import deviceplugin_pb2 as pb

VERSION = "v1beta1"
"""The only API version this harness speaks (and the only one kubelets accept today)."""
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
HEALTH_VALUES = (HEALTHY, UNHEALTHY)
MAX_DEVICE_ID_LENGTH = 63
PRESTART_TIMEOUT_S = 30.0
"""The kubelet's deadline for PreStartContainer."""
MAX_MESSAGE_BYTES = 16 * 2**20

REGISTRATION = pb.DESCRIPTOR.services_by_name["Registration"]
DEVICE_PLUGIN = pb.DESCRIPTOR.services_by_name["DevicePlugin"]

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


def method_path(service: Any, method: str) -> str:
    """``/v1beta1.DevicePlugin/Allocate``: from the descriptor, so a typo cannot drift from the .proto."""
    return f"/{service.full_name}/{service.methods_by_name[method].name}"


def to_json(message: Message) -> dict[str, Any]:
    """A message as JSON (proto field names, defaults included): what evidence and logs show."""
    try:
        return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)
    except TypeError:  # protobuf before 5.26 (e.g. a distribution's python3-protobuf) names it differently
        convert: Any = json_format.MessageToDict
        result: dict[str, Any] = convert(message, preserving_proto_field_name=True,
                                         including_default_value_fields=True)
        return result


def unix_target(path: Path | str) -> str:
    return f"unix://{os.path.abspath(path)}"


def channel_options() -> list[tuple[str, int]]:
    return [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.enable_retries", 0)]


def new_server(workers: int = 8) -> grpc.Server:
    return grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=channel_options())


# --------------------------------------------------------------------------------------------------- servers


class RegistrationServicer(ABC):
    """The kubelet's side: plugins call ``Register``."""

    @abstractmethod
    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty: ...


class DevicePluginServicer(ABC):
    """A plugin's side. Subclasses implement all five methods (a plugin without preferred allocation or pre-start
    still answers them, as the upstream API requires)."""

    @abstractmethod
    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions: ...

    @abstractmethod
    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]: ...

    @abstractmethod
    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,
                               context: grpc.ServicerContext) -> pb.PreferredAllocationResponse: ...

    @abstractmethod
    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse: ...

    @abstractmethod
    def PreStartContainer(self, request: pb.PreStartContainerRequest,
                          context: grpc.ServicerContext) -> pb.PreStartContainerResponse: ...


Serializer = Callable[[Any], bytes]


def _unary(fn: Callable[..., Any], request: type[Message], serializer: Serializer | None = None) -> Any:
    return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=request.FromString,
                                               response_serializer=serializer or _serialize)


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def add_registration(server: grpc.Server, impl: RegistrationServicer) -> None:
    handlers = {"Register": _unary(impl.Register, pb.RegisterRequest)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(REGISTRATION.full_name, handlers),))


def add_device_plugin(server: grpc.Server, impl: DevicePluginServicer,
                      serializer: Serializer | None = None) -> None:
    """Serve ``impl``. ``serializer`` replaces protobuf encoding of responses (hostile plugins send garbage)."""
    handlers = {
        "GetDevicePluginOptions": _unary(impl.GetDevicePluginOptions, pb.Empty, serializer),
        "ListAndWatch": grpc.unary_stream_rpc_method_handler(
            impl.ListAndWatch, request_deserializer=pb.Empty.FromString,
            response_serializer=serializer or _serialize),
        "GetPreferredAllocation": _unary(impl.GetPreferredAllocation, pb.PreferredAllocationRequest, serializer),
        "Allocate": _unary(impl.Allocate, pb.AllocateRequest, serializer),
        "PreStartContainer": _unary(impl.PreStartContainer, pb.PreStartContainerRequest, serializer),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(DEVICE_PLUGIN.full_name, handlers),))


# --------------------------------------------------------------------------------------------------- clients


class StreamCall(Protocol):
    """A server-streaming call: iterate for responses, ``cancel()`` to end it."""

    def __iter__(self) -> Iterator[pb.ListAndWatchResponse]: ...

    def __next__(self) -> pb.ListAndWatchResponse: ...

    def cancel(self) -> bool: ...


class _Unary:
    def __init__(self, channel: grpc.Channel, path: str, response: type[Message]):
        self._call = channel.unary_unary(path, request_serializer=_serialize, response_deserializer=response.FromString)

    def __call__(self, request: Message, timeout: float) -> Any:
        return self._call(request, timeout=timeout, wait_for_ready=False)


class DevicePluginClient:
    """Calls a plugin's ``DevicePlugin`` service. Every unary call takes a deadline in seconds."""

    def __init__(self, channel: grpc.Channel):
        self.channel = channel
        self._options = _Unary(channel, method_path(DEVICE_PLUGIN, "GetDevicePluginOptions"), pb.DevicePluginOptions)
        self._preferred = _Unary(channel, method_path(DEVICE_PLUGIN, "GetPreferredAllocation"),
                                 pb.PreferredAllocationResponse)
        self._allocate = _Unary(channel, method_path(DEVICE_PLUGIN, "Allocate"), pb.AllocateResponse)
        self._prestart = _Unary(channel, method_path(DEVICE_PLUGIN, "PreStartContainer"), pb.PreStartContainerResponse)
        self._list = channel.unary_stream(method_path(DEVICE_PLUGIN, "ListAndWatch"), request_serializer=_serialize,
                                          response_deserializer=pb.ListAndWatchResponse.FromString)

    def options(self, timeout: float) -> pb.DevicePluginOptions:
        result: pb.DevicePluginOptions = self._options(pb.Empty(), timeout)
        return result

    def list_and_watch(self) -> StreamCall:
        """The stream stays open as long as the plugin keeps it; end it with ``cancel()``."""
        call: StreamCall = self._list(pb.Empty())
        return call

    def preferred_allocation(self, request: pb.PreferredAllocationRequest,
                             timeout: float) -> pb.PreferredAllocationResponse:
        result: pb.PreferredAllocationResponse = self._preferred(request, timeout)
        return result

    def allocate(self, request: pb.AllocateRequest, timeout: float) -> pb.AllocateResponse:
        result: pb.AllocateResponse = self._allocate(request, timeout)
        return result

    def prestart(self, request: pb.PreStartContainerRequest, timeout: float) -> pb.PreStartContainerResponse:
        result: pb.PreStartContainerResponse = self._prestart(request, timeout)
        return result


class RegistrationClient:
    """Calls the kubelet's ``Registration`` service (what a plugin does at start and after a kubelet restart)."""

    def __init__(self, channel: grpc.Channel):
        self.channel = channel
        self._register = _Unary(channel, method_path(REGISTRATION, "Register"), pb.Empty)

    def register(self, request: pb.RegisterRequest, timeout: float) -> None:
        self._register(request, timeout)


def register(socket: Path, request: pb.RegisterRequest, timeout: float) -> None:
    """Dial ``socket`` (the kubelet's), register once, hang up. Raises ``grpc.RpcError`` on failure."""
    with grpc.insecure_channel(unix_target(socket), options=channel_options()) as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        RegistrationClient(channel).register(request, timeout=timeout)


__all__ = [
    "DEFAULT_PLUGIN_DIR",
    "HEALTHY",
    "KUBELET_SOCKET",
    "MAX_DEVICE_ID_LENGTH",
    "PRESTART_TIMEOUT_S",
    "UNHEALTHY",
    "VERSION",
    "DevicePluginClient",
    "DevicePluginServicer",
    "RegistrationClient",
    "RegistrationServicer",
    "add_device_plugin",
    "add_registration",
    "method_path",
    "new_server",
    "pb",
    "register",
    "to_json",
    "unix_target",
]
