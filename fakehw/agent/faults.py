"""Fault kinds the agent can inject, one class per kind, fields declared as data.

A fault request is JSON such as ``{"kind": "xid", "device": "gpu3", "code": 79}``. The ``kind`` picks the
class (a pydantic discriminated union), unknown keys are refused, and :func:`check_target` then checks the
device against the node (a GPU name, a CXL memory device, a pool, an NVLink port that exists). Each class
documents its effect; the effects themselves are applied in :mod:`fakehw.agent.state`.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from fakehw.model.system import Node

Target = Literal["gpu", "cxl-memdev", "pool"]

# Xids after which a GPU must not be handed to new work (reference/hardware.md).
CRITICAL_XIDS = frozenset({13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121})
XID_FALLEN_OFF_BUS = 79


class FaultBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    target: ClassVar[Target] = "gpu"
    summary: ClassVar[str] = ""
    device: str = Field(min_length=1, max_length=64, description="device name on the node, e.g. gpu3 or mem0")


class Xid(FaultBase):
    """An Xid error: delivered once to every NVML event set registered for XidCriticalError on the device.

    Xid 79 also means the GPU fell off the bus (NVML then answers ``GPU_IS_LOST``).
    """

    kind: Literal["xid"] = "xid"
    summary: ClassVar[str] = "Xid error with a code (79 = fallen off the bus)"
    code: int = Field(ge=1, le=999, description="Xid code, e.g. 48 (DBE), 74 (NVLink), 79 (off the bus)")


class FallenOffBus(FaultBase):
    """The GPU is gone from the PCI bus: Xid 79, NVML ``GPU_IS_LOST``, absent from the fake sysfs."""

    kind: Literal["fallen-off-bus"] = "fallen-off-bus"
    summary: ClassVar[str] = "GPU fell off the bus (Xid 79, GPU_IS_LOST)"


class Ecc(FaultBase):
    """ECC errors: counters rise by ``count``; a double-bit error also raises Xid 48 and retires a page."""

    kind: Literal["ecc"] = "ecc"
    summary: ClassVar[str] = "ECC errors (sbe or dbe) at a memory location"
    type: Literal["sbe", "dbe"] = "sbe"
    count: int = Field(1, ge=1, le=1_000_000)
    location: Literal["device-memory", "l1-cache", "l2-cache", "register-file", "dram", "sram"] = "device-memory"


class NVLinkDown(FaultBase):
    """One NVLink port goes down, at both ends (the GPU's port and the switch or peer port it reaches)."""

    kind: Literal["nvlink-down"] = "nvlink-down"
    summary: ClassVar[str] = "an NVLink port goes down (both ends)"
    link: int = Field(ge=0, le=35)


class NVLinkErrors(FaultBase):
    """An NVLink error counter of one port rises by ``increment``."""

    kind: Literal["nvlink-errors"] = "nvlink-errors"
    summary: ClassVar[str] = "an NVLink error counter rises"
    link: int = Field(ge=0, le=35)
    counter: Literal["replay", "recovery", "crc-flit", "crc-data", "ecc-data"] = "replay"
    increment: int = Field(1, ge=1, le=2**31)


class Thermal(FaultBase):
    """The GPU runs hot: temperature reads ``temperature_c``; at the SKU's slowdown threshold clocks throttle, at
    its shutdown threshold the GPU is unhealthy (real boards power off there). Default: one degree past slowdown,
    below shutdown (throttling, as the summary says), resolved per SKU when the fault is injected."""

    kind: Literal["thermal"] = "thermal"
    summary: ClassVar[str] = "GPU temperature rises (default: just past slowdown, so clocks throttle)"
    temperature_c: int | None = Field(None, ge=0, le=150)


class PowerCap(FaultBase):
    """The enforced power limit drops to ``limit_w`` (within the SKU's min..max); clocks throttle for power."""

    kind: Literal["power-cap"] = "power-cap"
    summary: ClassVar[str] = "enforced power limit drops"
    limit_w: int = Field(ge=1, le=5000)


class FabricDegraded(FaultBase):
    """The fabric manager reports the GPU's NVLink fabric health as degraded."""

    kind: Literal["fabric-degraded"] = "fabric-degraded"
    summary: ClassVar[str] = "NVLink fabric health degraded for a GPU"
    health: Literal["degraded-bandwidth", "route-recovery", "route-unhealthy", "access-timeout-recovery"] = (
        "degraded-bandwidth"
    )


class CxlOffline(FaultBase):
    """A CXL memory device goes offline: its memory leaves its NUMA node and the memdev is marked."""

    kind: Literal["cxl-offline"] = "cxl-offline"
    target: ClassVar[Target] = "cxl-memdev"
    summary: ClassVar[str] = "CXL memory device offline"


class PoolShrink(FaultBase):
    """A memory pool loses ``bytes`` of capacity (a backing device failed or was reclaimed)."""

    kind: Literal["pool-shrink"] = "pool-shrink"
    target: ClassVar[Target] = "pool"
    summary: ClassVar[str] = "memory pool loses capacity"
    bytes: int = Field(ge=1, le=2**62)


FaultRequest = Annotated[
    Xid | FallenOffBus | Ecc | NVLinkDown | NVLinkErrors | Thermal | PowerCap | FabricDegraded | CxlOffline
    | PoolShrink,
    Field(discriminator="kind"),
]
FAULT_ADAPTER: TypeAdapter[FaultRequest] = TypeAdapter(FaultRequest)
FAULT_KINDS: dict[str, type[FaultBase]] = {
    cls.model_fields["kind"].default: cls
    for cls in (Xid, FallenOffBus, Ecc, NVLinkDown, NVLinkErrors, Thermal, PowerCap, FabricDegraded, CxlOffline,
                PoolShrink)
}


class FaultTargetError(ValueError):
    """The fault names a device the node does not have or asks what that device cannot do. ``status`` is the
    HTTP status the control API answers with: 404 for an unknown device or pool, 422 for the rest."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def check_target(fault: FaultBase, node: Node) -> None:
    """Raise :class:`FaultTargetError` unless ``fault`` fits a device of ``node``."""
    if fault.target == "gpu":
        gpu = node.gpu(fault.device)
        if gpu is None:
            names = ", ".join(g.name for g in node.gpus) or "none"
            raise FaultTargetError(404, f"node {node.name} has no GPU {fault.device!r} (GPUs: {names})")
        if isinstance(fault, NVLinkDown | NVLinkErrors) and fault.link >= len(gpu.ports):
            raise FaultTargetError(422, f"{gpu.id} has {len(gpu.ports)} connected NVLink ports; link "
                                   f"{fault.link} does not exist")
        power = gpu.sku.power
        if isinstance(fault, PowerCap) and not power.min_limit_w <= fault.limit_w <= power.max_limit_w:
            raise FaultTargetError(422, f"power limit {fault.limit_w} W is outside {gpu.sku.id}'s range "
                                   f"{gpu.sku.power.min_limit_w}..{gpu.sku.power.max_limit_w} W")
        if isinstance(fault, FabricDegraded) and node.nvlink_domain is None and not gpu.ports:
            raise FaultTargetError(422, f"{gpu.id} is in no NVLink fabric")
    elif fault.target == "cxl-memdev":
        if node.cxl.memdev(fault.device) is None:
            names = ", ".join(m.name for m in node.cxl.memdevs) or "none"
            raise FaultTargetError(404, f"node {node.name} has no CXL memory device {fault.device!r} "
                                   f"(memdevs: {names})")
    elif fault.target == "pool":
        pool = next((p for p in node.memory_pools if p.name == fault.device), None)
        if pool is None:
            names = ", ".join(p.name for p in node.memory_pools) or "none"
            raise FaultTargetError(404, f"node {node.name} has no memory pool {fault.device!r} (pools: {names})")
        if isinstance(fault, PoolShrink) and fault.bytes > pool.capacity:
            raise FaultTargetError(422, f"pool {pool.name} holds {pool.capacity} bytes; cannot shrink by "
                                   f"{fault.bytes}")


def with_device_defaults(fault: FaultBase, node: Node) -> FaultBase:
    """``fault`` with the parameters that depend on its device filled in (after :func:`check_target`)."""
    if isinstance(fault, Thermal) and fault.temperature_c is None:
        gpu = node.gpu(fault.device)
        assert gpu is not None
        thermal = gpu.sku.thermal
        return fault.model_copy(update={"temperature_c": min(thermal.slowdown_c + 1, thermal.shutdown_c - 1)})
    return fault


def describe_kinds() -> list[dict[str, object]]:
    """Every fault kind with its target and parameters (served at ``GET /v1/kinds``, shown by the CLI)."""
    out: list[dict[str, object]] = []
    for kind, cls in FAULT_KINDS.items():
        params = {}
        for name, f in cls.model_fields.items():
            if name in ("kind", "device"):
                continue
            params[name] = {
                "type": getattr(f.annotation, "__name__", str(f.annotation)),
                "default": None if f.is_required() else f.default,
                "required": f.is_required(),
                "description": f.description or "",
            }
        out.append({"kind": kind, "target": cls.target, "summary": cls.summary, "params": params})
    return out
