"""Runtime state of a node: the model's values with the active faults applied.

State is a pure function of the node and its active faults (:func:`derive_state`); healing a fault removes it
and the state falls back to what is left, so "heal restores the model's values" holds by construction and a
restarted agent rebuilds the same state from its journal. Events are separate: a log of what happened
(:func:`events_for`), which NVML delivers through its event API.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from fakehw.agent.faults import (
    CRITICAL_XIDS,
    XID_FALLEN_OFF_BUS,
    CxlOffline,
    Ecc,
    FabricDegraded,
    FallenOffBus,
    FaultBase,
    NVLinkDown,
    NVLinkErrors,
    PoolShrink,
    PowerCap,
    Thermal,
    Xid,
)
from fakehw.model.system import Gpu, Node

if TYPE_CHECKING:  # the platform and MIG modules import this one
    from fakehw.agent.mig import NodeMig
    from fakehw.agent.platform import PlatformView

Health = Literal["healthy", "degraded", "unhealthy", "lost"]
NVLINK_COUNTERS = ("replay", "recovery", "crc-flit", "crc-data", "ecc-data")

# nvmlClocksThrottleReasons bits.
THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40

# nvmlEventType bits.
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID = 0x8
EVENT_CLOCK = 0x10


@dataclass(frozen=True, slots=True)
class ActiveFault:
    """A fault that has been injected and not healed."""

    id: str
    node: str
    request: FaultBase
    created: float
    body: dict[str, Any] = field(init=False, repr=False, compare=False)
    """The request's fields as JSON, dumped once: an injection encodes its fault three to four times (journal
    record, idempotency answer, HTTP answer, ``state.json``) and pydantic's dump was most of each. The request is
    frozen and its fields are scalars, so the dump cannot go stale; :meth:`to_json` hands out a new dict each time."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "body", self.request.model_dump())

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "node": self.node, "created": self.created, **self.body}


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened on a device. ``nvml_type``/``nvml_data`` are what the NVML event API reports."""

    seq: int
    time: float
    node: str
    device: str
    kind: str
    data: int
    nvml_type: int
    fault: str | None = None

    def to_json(self) -> dict[str, Any]:
        """By hand: ``dataclasses.asdict`` deep-copies, and every injection encodes its events for the journal."""
        return {"seq": self.seq, "time": self.time, "node": self.node, "device": self.device, "kind": self.kind,
                "data": self.data, "nvml_type": self.nvml_type, "fault": self.fault}


@dataclass(frozen=True, slots=True)
class LinkState:
    link: int
    up: bool
    errors: dict[str, int]


@dataclass(frozen=True, slots=True)
class GpuState:
    name: str
    index: int
    uuid: str
    health: Health
    reasons: tuple[str, ...]
    lost: bool
    temperature_c: int
    power_limit_w: int
    throttle_reasons: int
    ecc_sbe: dict[str, int]
    ecc_dbe: dict[str, int]
    retired_pages_dbe: int
    links: tuple[LinkState, ...]
    fabric_health: tuple[str, ...]
    xids: tuple[int, ...]
    faults: tuple[str, ...]

    def to_json(self, history: bool = True) -> dict[str, Any]:
        """Built by hand: ``dataclasses.asdict`` deep-copies and this runs on every render. ``history`` False
        leaves out the lists that grow with every fault on the GPU, ``xids`` and ``faults`` (``state.json``
        encodes them from remembered text)."""
        doc = {
            "name": self.name,
            "index": self.index,
            "uuid": self.uuid,
            "health": self.health,
            "reasons": list(self.reasons),
            "lost": self.lost,
            "temperature_c": self.temperature_c,
            "power_limit_w": self.power_limit_w,
            "throttle_reasons": self.throttle_reasons,
            "ecc_sbe": self.ecc_sbe,
            "ecc_dbe": self.ecc_dbe,
            "retired_pages_dbe": self.retired_pages_dbe,
            "links": [{"link": link.link, "up": link.up, "errors": link.errors} for link in self.links],
            "fabric_health": list(self.fabric_health),
        }
        if history:
            doc["xids"], doc["faults"] = list(self.xids), list(self.faults)
        return doc


@dataclass(frozen=True, slots=True)
class MemdevState:
    name: str
    online: bool
    faults: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "online": self.online, "faults": list(self.faults)}


@dataclass(frozen=True, slots=True)
class PoolState:
    name: str
    capacity: int
    model_capacity: int
    faults: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "capacity": self.capacity, "model_capacity": self.model_capacity,
                "faults": list(self.faults)}


@dataclass(frozen=True)
class NodeState:
    node: str
    generation: int
    seed: int
    gpus: tuple[GpuState, ...]
    memdevs: tuple[MemdevState, ...]
    pools: tuple[PoolState, ...]
    faults: tuple[ActiveFault, ...]
    down_ports: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    """NVLink ports down at run time, (device id, port), both ends included."""
    platform: PlatformView | None = None
    """CXL devices, NUMA memory and memory pools now (set by the agent; None outside an agent)."""
    mig: NodeMig | None = None
    """MIG mode and instances now (set by the agent; None outside an agent: renderers use the profile's boot state)."""

    def gpu(self, name: str) -> GpuState | None:
        return self._gpus_by_name.get(name)

    @functools.cached_property
    def _gpus_by_name(self) -> dict[str, GpuState]:
        """The GPUs by name, made on the first look-up (a snapshot looks up every GPU of the node per render; a walk
        of ``gpus`` each time was 4 % of an injection in process). The state is immutable, so it cannot go stale."""
        return {g.name: g for g in self.gpus}

    def with_views(self, platform: PlatformView | None, mig: NodeMig | None) -> NodeState:
        """This state with the agent's platform and MIG views: what ``dataclasses.replace`` gives, made by copying
        the fields as they are (it calls the constructor again, which checks nothing here, at 9 us on every render
        of a node, against 1 us)."""
        state = object.__new__(NodeState)
        state.__dict__.update(self.__dict__, platform=platform, mig=mig)
        return state

    @property
    def health(self) -> Health:
        order: dict[Health, int] = {"healthy": 0, "degraded": 1, "unhealthy": 2, "lost": 3}
        return max((g.health for g in self.gpus), key=lambda h: order[h], default="healthy")

    def to_json(self, gpus: bool = True, faults: bool = True) -> dict[str, Any]:
        """The state as JSON; ``gpus``/``faults`` False leave those keys out (``state.json`` encodes them from
        remembered fragments)."""
        return {
            "node": self.node,
            "generation": self.generation,
            "seed": self.seed,
            "health": self.health,
            **({"gpus": [g.to_json() for g in self.gpus]} if gpus else {}),
            "memdevs": [m.to_json() for m in self.memdevs],
            "pools": [p.to_json() for p in self.pools],
            **({"faults": [f.to_json() for f in self.faults]} if faults else {}),
            "down_ports": sorted([list(p) for p in self.down_ports]),
            **({"platform": self.platform.summary()} if self.platform is not None else {}),
            **({"mig": self.mig.to_json()["gpus"]} if self.mig is not None else {}),
        }


class NodeFaults:
    """The active faults of one node in injection order, kept grouped the way :func:`derive_state` reads them (by
    device, and the NVLink-down ones): the agent adds and removes one fault at a time, so deriving the state after
    a change costs what the change touched instead of a walk over every active fault of the node (which made an
    injection slower the more faults were active)."""

    def __init__(self, faults: Iterable[ActiveFault] = ()):
        self._all: dict[str, ActiveFault] = {}
        self._by_device: dict[str, dict[str, ActiveFault]] = {}
        self._links_down: dict[str, ActiveFault] = {}
        self._on: dict[str, tuple[ActiveFault, ...]] = {}
        """:meth:`on`'s answers until their device's faults change: the same tuple each time, so a render compares
        an unchanged GPU's faults with what its state was derived from by identity, not fault by fault (a tray's
        render asks for every device's faults, and a device's list grows with every fault injected into it)."""
        for f in faults:
            self.add(f)

    def add(self, fault: ActiveFault) -> None:
        self._all[fault.id] = fault
        self._by_device.setdefault(fault.request.device, {})[fault.id] = fault
        self._on.pop(fault.request.device, None)
        if isinstance(fault.request, NVLinkDown):
            self._links_down[fault.id] = fault

    def remove(self, fault_id: str) -> None:
        fault = self._all.pop(fault_id, None)
        if fault is None:
            return
        on_device = self._by_device[fault.request.device]
        del on_device[fault_id]
        self._on.pop(fault.request.device, None)
        if not on_device:
            del self._by_device[fault.request.device]
        self._links_down.pop(fault_id, None)

    def __len__(self) -> int:
        return len(self._all)

    def ordered(self) -> tuple[ActiveFault, ...]:
        """Every fault of the node, in injection order."""
        return tuple(self._all.values())

    def on(self, device: str) -> tuple[ActiveFault, ...]:
        """The faults of one device, in injection order."""
        answer = self._on.get(device)
        if answer is None:
            faults = self._by_device.get(device)
            answer = self._on[device] = tuple(faults.values()) if faults else ()
        return answer

    def links_down(self) -> tuple[ActiveFault, ...]:
        return tuple(self._links_down.values())


def _down_ports(node: Node, faults: Sequence[ActiveFault]) -> frozenset[tuple[str, int]]:
    down: set[tuple[str, int]] = set()
    for f in faults:
        if isinstance(f.request, NVLinkDown):
            gpu = node.gpu(f.request.device)
            if gpu is not None and f.request.link < len(gpu.ports):
                port = gpu.ports[f.request.link]
                down.add((gpu.id, port.port))
                down.add((port.remote_id, port.remote_port))
    return frozenset(down)


def derive_state(node: Node, faults: Sequence[ActiveFault] | NodeFaults, generation: int = 0, seed: int = 0,
                 memo: dict[str, Any] | None = None) -> NodeState:
    """The state of ``node`` with ``faults`` (those of this node, in injection order) applied.

    ``memo`` (kept by the caller between calls for one node): a GPU whose faults and the node's down NVLink ports
    are the same as at the last call keeps its state object, so a change to one GPU derives that one only (and
    renderers that remember what they built from a GPU state see it unchanged). ``faults`` as a
    :class:`NodeFaults` (the agent keeps one per node) spares grouping them again."""
    grouped = faults if isinstance(faults, NodeFaults) else NodeFaults(faults)
    down = _down_ports(node, grouped.links_down())
    memo = {} if memo is None else memo  # one path with or without memory: the same states either way
    gpus = tuple(_gpu_state(node, g.name, grouped.on(g.name), down, memo) for g in node.gpus)
    memdevs = tuple(
        MemdevState(
            m.name,
            not any(isinstance(f.request, CxlOffline) for f in grouped.on(m.name)),
            tuple(f.id for f in grouped.on(m.name)),
        )
        for m in node.cxl.memdevs
    )
    pools = tuple(
        PoolState(
            p.name,
            max(0, p.capacity - sum(f.request.bytes for f in grouped.on(p.name) if isinstance(f.request, PoolShrink))),
            p.capacity,
            tuple(f.id for f in grouped.on(p.name)),
        )
        for p in node.memory_pools
    )
    return NodeState(node.name, generation, seed, gpus, memdevs, pools, grouped.ordered(), down)


def _gpu_state(node: Node, name: str, faults: tuple[ActiveFault, ...], down: frozenset[tuple[str, int]],
               memo: dict[str, Any]) -> GpuState:
    """The GPU's state, from the last one remembered in ``memo`` when there is one: the same when its faults and
    the down ports are; when faults were only added (an injection), the remembered fold carries on with the new
    ones instead of walking every active fault of the GPU again (what made an injection slower the more faults the
    GPU had). Otherwise (nothing remembered, or faults healed) every fault is folded afresh."""
    key = (faults, down)  # faults never change and their ids are never reused: equal tuples, the same faults
    hit = memo.get(name)
    if hit is not None and hit[0] == key:
        return hit[1]  # type: ignore[no-any-return]
    gpu = node.gpu(name)
    assert gpu is not None
    fold: _GpuFold | None = None
    if hit is not None and hit[0][1] == down:
        old: tuple[ActiveFault, ...] = hit[0][0]
        if len(faults) > len(old) and faults[:len(old)] == old:
            fold = hit[2]
            del memo[name]  # the fold is about to move past the remembered state: never reuse the pair half-done
            for f in faults[len(old):]:
                fold.add(f)
    if fold is None:
        fold = _GpuFold(gpu)
        for f in faults:
            fold.add(f)
    state = fold.state(gpu, down)
    memo[name] = (key, state, fold)
    return state


class _GpuFold:
    """What a GPU's faults add up to, one fault at a time in injection order (Xids raised, ECC counts, NVLink
    counters, hottest temperature, lowest power cap, fabric health): kept between injections, so a new fault is
    added to it rather than every fault being walked again. :meth:`state` copies what it hands out, so a state
    made earlier never changes when more faults are added."""

    def __init__(self, gpu: Gpu):
        self.temperature = gpu.sku.thermal.idle_c
        self.power_limit = gpu.sku.power.default_limit_w
        self.sbe: dict[str, int] = defaultdict(int)
        self.dbe: dict[str, int] = defaultdict(int)
        self.errors = [dict.fromkeys(NVLINK_COUNTERS, 0) for _ in gpu.ports]
        self.fabric: list[str] = []
        self.xids: list[int] = []
        self.ids: list[str] = []
        self.lost = False
        self._links: tuple[frozenset[tuple[str, int]], tuple[LinkState, ...]] | None = None
        """The link states last handed out and the down ports they were made for: most faults leave every link as
        it was (an Xid, an ECC error, a thermal event), and a GPU state's links are 18 states with their counters on
        a GB200 board, made and then compared by every renderer on each injection (issue 19). Dropped when a
        fault changes a counter."""

    def add(self, f: ActiveFault) -> None:
        raised = [data for kind, data, _ in events_for(f) if kind == "xid"]  # events_for decides which Xids
        self.xids += raised
        self.ids.append(f.id)
        self.lost |= XID_FALLEN_OFF_BUS in raised
        r = f.request
        if isinstance(r, Ecc):
            (self.sbe if r.type == "sbe" else self.dbe)[r.location] += r.count
        elif isinstance(r, NVLinkErrors):
            self.errors[r.link][r.counter] += r.increment
            self._links = None
        elif isinstance(r, Thermal) and r.temperature_c is not None:
            self.temperature = max(self.temperature, r.temperature_c)
        elif isinstance(r, PowerCap):
            self.power_limit = min(self.power_limit, r.limit_w)
        elif isinstance(r, FabricDegraded) and r.health not in self.fabric:
            self.fabric.append(r.health)

    def state(self, gpu: Gpu, down: frozenset[tuple[str, int]]) -> GpuState:
        sku = gpu.sku
        temperature, power_limit, sbe, dbe, errors, fabric = (self.temperature, self.power_limit, self.sbe,
                                                              self.dbe, self.errors, self.fabric)
        throttle = 0
        if temperature >= sku.thermal.slowdown_c:
            throttle |= THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL
        if power_limit < sku.power.default_limit_w:
            throttle |= THROTTLE_SW_POWER_CAP
        links = self._link_states(gpu, down)
        reasons: list[str] = []
        if self.lost:
            reasons.append("fallen off the bus (Xid 79)")
        reasons += [f"Xid {x}" for x in dict.fromkeys(self.xids) if x in CRITICAL_XIDS and x != XID_FALLEN_OFF_BUS]
        if sum(dbe.values()):
            reasons.append(f"{sum(dbe.values())} double-bit ECC errors")
        reasons += [f"NVLink {link.link} down" for link in links if not link.up]
        reasons += [f"fabric {h}" for h in fabric if h == "route-unhealthy"]
        if temperature >= sku.thermal.shutdown_c:
            reasons.append(f"at {temperature} C, past its {sku.thermal.shutdown_c} C shutdown temperature")
        degraded: list[str] = []
        if throttle:
            degraded.append(f"throttled (reasons 0x{throttle:x})")
        if sum(sbe.values()):
            degraded.append(f"{sum(sbe.values())} single-bit ECC errors")
        degraded += [f"NVLink {i} errors" for i, e in enumerate(errors) if any(e.values())]
        degraded += [f"fabric {h}" for h in fabric if h != "route-unhealthy"]
        health: Health = "lost" if self.lost else "unhealthy" if reasons else "degraded" if degraded else "healthy"
        return GpuState(
            name=gpu.name,
            index=gpu.index,
            uuid=gpu.uuid,
            health=health,
            reasons=tuple(reasons + degraded),
            lost=self.lost,
            temperature_c=temperature,
            power_limit_w=power_limit,
            throttle_reasons=throttle,
            ecc_sbe=dict(sbe),
            ecc_dbe=dict(dbe),
            retired_pages_dbe=sum(dbe.values()),
            links=links,
            fabric_health=tuple(fabric),
            xids=tuple(self.xids),
            faults=tuple(self.ids),
        )

    def _link_states(self, gpu: Gpu, down: frozenset[tuple[str, int]]) -> tuple[LinkState, ...]:
        """The GPU's link states: the ones last handed out while no counter moved and the same ports are down (link
        states are never changed once made, so states share them safely)."""
        if self._links is not None and self._links[0] == down:
            return self._links[1]
        links = tuple(LinkState(p.port, p.up and (gpu.id, p.port) not in down, dict(self.errors[i]))
                      for i, p in enumerate(gpu.ports))
        self._links = (down, links)
        return links



def events_for(fault: ActiveFault) -> list[tuple[str, int, int]]:
    """Events an injected fault raises: (kind, data, NVML event type)."""
    r = fault.request
    if isinstance(r, Xid):
        return [("xid", r.code, EVENT_XID)]
    if isinstance(r, FallenOffBus):
        return [("xid", XID_FALLEN_OFF_BUS, EVENT_XID)]
    if isinstance(r, Ecc):
        if r.type == "sbe":
            return [("ecc-sbe", r.count, EVENT_SINGLE_BIT_ECC)]
        return [("ecc-dbe", r.count, EVENT_DOUBLE_BIT_ECC), ("xid", 48, EVENT_XID)]
    if isinstance(r, NVLinkDown):
        return [("nvlink-down", r.link, 0), ("xid", 74, EVENT_XID)]
    if isinstance(r, NVLinkErrors):
        return [("nvlink-errors", r.link, 0)]
    if isinstance(r, Thermal | PowerCap):
        value = (r.temperature_c or 0) if isinstance(r, Thermal) else r.limit_w  # resolved at inject: never None
        return [(r.kind, value, EVENT_CLOCK)]
    return [(str(getattr(r, "kind", "fault")), 0, 0)]
