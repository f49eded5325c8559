"""The CXL fabric of the nodes an agent serves, as the kernel holds it: a value, changed only by facts.

Objects and what they stand for in the kernel (drivers/cxl/core):

- :class:`EndpointDecoder` -- one HDM decoder of a memory device's endpoint port (``decoderE.N``): the partition
  it allocates from (``mode``), its DPA reservation (``dpa_resource``/``dpa_size`` and the ``skip`` in front of
  it), the region it is attached to and whether it is committed. A memdev has endpoint decoders only while it is
  bound to ``cxl_mem`` (its endpoint port exists): the key's presence in :attr:`CxlState.endpoints` is the bind.
- :class:`Region` -- a region of a root decoder (fixed memory window) in every state the kernel has
  (``idle`` after ``create_*_region``, ``interleave`` once it has HPA, ``active`` once every target is attached and
  the decode is programmed, ``commit`` once committed), whether it is bound to ``cxl_region`` (``enabled``), and,
  for RAM, its DAX device's driver and which of its memory blocks are online.
- port decoder slots -- which region holds each HDM decoder of a host bridge or switch port (the kernel hands out
  the lowest free decoder when a region first reaches the port); their programming and commit state follow from
  the region.
- root decoder ids -- the region name each root decoder offers next (``create_*_region``).
- admin state -- memdevs an operator took offline, host bridge ports unbound from ``cxl_port``, nodes whose CXL
  root (``cxl_acpi``) is unbound.

Every change is a list of *facts* (:func:`state_facts` of the state before and after), journaled and applied by
:func:`apply_fact`, so a restarted agent replays exactly what happened and a refused request leaves no trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

RegionOrigin = Literal["boot", "runtime", "pooled-ld", "dcd-extent"]
RegionState = Literal["idle", "interleave", "active", "commit"]
"""The kernel's region configuration states: CXL_CONFIG_IDLE, _INTERLEAVE_ACTIVE, _ACTIVE, _COMMIT."""
DaxDriver = Literal["kmem", "device_dax", ""]
DecoderMode = Literal["none", "ram", "pmem"]
STATE_ORDER: dict[str, int] = {"idle": 0, "interleave": 1, "active": 2, "commit": 3}

Fact = dict[str, Any]
"""A journaled change: ``{"fact": "region-add", ...}``."""


# --------------------------------------------------------------------------------------------------- objects


@dataclass(frozen=True, slots=True)
class EndpointDecoder:
    """An HDM decoder of an endpoint port."""

    mode: DecoderMode = "none"
    dpa_base: int = 0
    dpa_size: int = 0
    skip: int = 0
    """DPA skipped in front of ``dpa_base`` (unallocated capacity of lower partitions given up to reach it)."""
    region: str = ""
    position: int = -1
    committed: bool = False
    auto: bool = False
    """Committed by platform firmware before the OS (CXL_DECODER_STATE_AUTO)."""

    def to_json(self) -> list[Any]:
        return [self.mode, self.dpa_base, self.dpa_size, self.skip, self.region, self.position, self.committed,
                self.auto]

    @classmethod
    def from_json(cls, d: Any) -> EndpointDecoder:
        mode, base, size, skip, region, position, committed, auto = d
        return cls(_mode(str(mode)), int(base), int(size), int(skip), str(region), int(position), bool(committed),
                   bool(auto))


def _mode(value: str) -> DecoderMode:
    return "ram" if value == "ram" else "pmem" if value == "pmem" else "none"


@dataclass(frozen=True, slots=True)
class Region:
    """A region under a root decoder, in whatever state it is in."""

    node: str
    name: str
    window: str
    targets: tuple[str, ...]
    """Memory device at each interleave position, ``""`` where none is attached; one entry per interleave way
    (none before ``interleave_ways`` is written)."""
    granularity: int
    mode: Literal["ram", "pmem"]
    size: int
    """Host physical address space allocated (0: none yet)."""
    hpa_offset: int
    dpa_offsets: tuple[int, ...]
    numa: int | None
    origin: RegionOrigin
    uuid: str = ""
    pool: str | None = None
    ld: int | None = None
    extent: str | None = None
    decoders: tuple[int, ...] = ()
    """Endpoint decoder index at each position (-1 where none); empty for pooled-device regions, whose endpoint
    decoders are not in the state."""
    state: RegionState = "commit"
    enabled: bool = True
    """Bound to the ``cxl_region`` driver (the kernel then adds the region's DAX or PMEM region)."""
    dax: DaxDriver = "kmem"
    """Driver of the RAM region's DAX device while the region is enabled."""
    online: int = 0
    """Bit i: memory block i of the region (from its start) is online (only while ``dax`` is kmem)."""

    @property
    def ways(self) -> int:
        return len(self.targets)

    @property
    def id(self) -> int:
        return int(self.name.removeprefix("region"))

    @property
    def committed(self) -> bool:
        return self.state == "commit"

    @property
    def complete(self) -> bool:
        return bool(self.targets) and all(self.targets)

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "name": self.name, "window": self.window, "targets": list(self.targets),
            "granularity": self.granularity, "mode": self.mode, "size": self.size, "hpa_offset": self.hpa_offset,
            "dpa_offsets": list(self.dpa_offsets), "numa": self.numa, "origin": self.origin, "uuid": self.uuid,
            "pool": self.pool, "ld": self.ld, "extent": self.extent, "decoders": list(self.decoders),
            "state": self.state, "enabled": self.enabled, "dax": self.dax, "online": hex(self.online),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Region:
        return cls(
            node=str(d["node"]), name=str(d["name"]), window=str(d["window"]),
            targets=tuple(str(t) for t in d["targets"]), granularity=int(d["granularity"]),
            mode="pmem" if d["mode"] == "pmem" else "ram", size=int(d["size"]), hpa_offset=int(d["hpa_offset"]),
            dpa_offsets=tuple(int(x) for x in d["dpa_offsets"]),
            numa=None if d.get("numa") is None else int(d["numa"]),
            origin=_origin(str(d["origin"])), uuid=str(d.get("uuid", "")),
            pool=None if d.get("pool") is None else str(d["pool"]),
            ld=None if d.get("ld") is None else int(d["ld"]),
            extent=None if d.get("extent") is None else str(d["extent"]),
            decoders=tuple(int(x) for x in d.get("decoders", ())),
            state=_state(str(d.get("state", "commit"))), enabled=bool(d.get("enabled", True)),
            dax=_dax(str(d.get("dax", "kmem"))), online=int(str(d.get("online", "0x0")), 16),
        )


def _origin(value: str) -> RegionOrigin:
    if value == "boot":
        return "boot"
    if value == "pooled-ld":
        return "pooled-ld"
    if value == "dcd-extent":
        return "dcd-extent"
    return "runtime"


def _state(value: str) -> RegionState:
    if value == "idle":
        return "idle"
    if value == "interleave":
        return "interleave"
    if value == "active":
        return "active"
    return "commit"


def _dax(value: str) -> DaxDriver:
    return "kmem" if value == "kmem" else "device_dax" if value == "device_dax" else ""


@dataclass(frozen=True, slots=True)
class Extent:
    """Dynamic capacity of a pooled device added to one host: ``length`` bytes at device ``offset``."""

    id: str
    pool: str
    node: str
    offset: int
    length: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "pool": self.pool, "node": self.node, "offset": self.offset, "length": self.length}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Extent:
        return cls(str(d["id"]), str(d["pool"]), str(d["node"]), int(d["offset"]), int(d["length"]))


# --------------------------------------------------------------------------------------------------- state


NodeKey = tuple[str, str]
"""(node, object name): a memdev, a port or a window of a node."""


@dataclass(frozen=True)
class CxlState:
    """What the CXL fabric looks like now. Treated as a value: :func:`apply_fact` returns a new one."""

    regions: Mapping[NodeKey, Region] = field(default_factory=dict)
    admin_offline: frozenset[NodeKey] = frozenset()
    ld_owner: Mapping[tuple[str, int], str] = field(default_factory=dict)
    extents: Mapping[str, Extent] = field(default_factory=dict)
    extent_seq: int = 0
    endpoints: Mapping[NodeKey, tuple[EndpointDecoder, ...]] = field(default_factory=dict)
    """(node, memdev) -> its endpoint decoders, for every memdev bound to ``cxl_mem``."""
    port_slots: Mapping[NodeKey, tuple[str, ...]] = field(default_factory=dict)
    """(node, host bridge or switch) -> region holding each HDM decoder of its port (``""``: free)."""
    root_ids: Mapping[NodeKey, int] = field(default_factory=dict)
    """(node, window) -> the region id its root decoder offers next."""
    ports_disabled: frozenset[NodeKey] = frozenset()
    """(node, host bridge) whose port is unbound from ``cxl_port``."""
    buses_disabled: frozenset[str] = frozenset()
    """Nodes whose CXL root is unbound from ``cxl_acpi``."""

    def node_regions(self, node: str) -> list[Region]:
        return sorted((r for (n, _), r in self.regions.items() if n == node), key=lambda r: r.id)

    def decoders(self, node: str, memdev: str) -> tuple[EndpointDecoder, ...] | None:
        return self.endpoints.get((node, memdev))

    def to_json(self) -> dict[str, Any]:
        return {
            "regions": [r.to_json() for r in sorted(self.regions.values(), key=lambda r: (r.node, r.id))],
            "admin_offline": sorted([list(k) for k in self.admin_offline]),
            "ld_owner": [[p, ld, n] for (p, ld), n in sorted(self.ld_owner.items())],
            "extents": [e.to_json() for e in sorted(self.extents.values(), key=lambda e: e.id)],
            "extent_seq": self.extent_seq,
            "endpoints": [[n, m, [d.to_json() for d in ds]] for (n, m), ds in sorted(self.endpoints.items())],
            "port_slots": [[n, p, list(s)] for (n, p), s in sorted(self.port_slots.items())],
            "root_ids": [[n, w, i] for (n, w), i in sorted(self.root_ids.items())],
            "ports_disabled": sorted([list(k) for k in self.ports_disabled]),
            "buses_disabled": sorted(self.buses_disabled),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CxlState:
        regions = [Region.from_json(r) for r in d.get("regions", [])]
        return cls(
            regions={(r.node, r.name): r for r in regions},
            admin_offline=frozenset((str(a), str(b)) for a, b in d.get("admin_offline", [])),
            ld_owner={(str(p), int(ld)): str(n) for p, ld, n in d.get("ld_owner", [])},
            extents={e.id: e for e in (Extent.from_json(x) for x in d.get("extents", []))},
            extent_seq=int(d.get("extent_seq", 0)),
            endpoints={(str(n), str(m)): tuple(EndpointDecoder.from_json(x) for x in ds)
                       for n, m, ds in d.get("endpoints", [])},
            port_slots={(str(n), str(p)): tuple(str(x) for x in s) for n, p, s in d.get("port_slots", [])},
            root_ids={(str(n), str(w)): int(i) for n, w, i in d.get("root_ids", [])},
            ports_disabled=frozenset((str(a), str(b)) for a, b in d.get("ports_disabled", [])),
            buses_disabled=frozenset(str(x) for x in d.get("buses_disabled", [])),
        )


# --------------------------------------------------------------------------------------------------- facts


def apply_fact(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    """The state after ``fact``. Facts were checked before they were journaled, so this never refuses."""
    kind = fact["fact"]
    handler = _APPLY.get(kind)
    if handler is None:
        raise ValueError(f"unknown CXL fact {kind!r}")
    return handler(state, fact)


def _region_add(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    region = Region.from_json(fact["region"])
    return replace(state, regions={**state.regions, (region.node, region.name): region})


def _region_del(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    regions = dict(state.regions)
    regions.pop((str(fact["node"]), str(fact["name"])), None)
    return replace(state, regions=regions)


def _memdev_admin(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    key = (str(fact["node"]), str(fact["memdev"]))
    offline = state.admin_offline - {key} if fact["online"] else state.admin_offline | {key}
    return replace(state, admin_offline=offline)


def _ld_assign(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    return replace(state, ld_owner={**state.ld_owner, (str(fact["pool"]), int(fact["ld"])): str(fact["node"])})


def _ld_release(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    owners = dict(state.ld_owner)
    owners.pop((str(fact["pool"]), int(fact["ld"])), None)
    return replace(state, ld_owner=owners)


def _extent_add(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    ext = Extent.from_json(fact["extent"])
    seq = max(state.extent_seq, _extent_number(ext.id))
    return replace(state, extents={**state.extents, ext.id: ext}, extent_seq=seq)


def _extent_del(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    extents = dict(state.extents)
    extents.pop(str(fact["id"]), None)
    return replace(state, extents=extents)


def _endpoint_set(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    key = (str(fact["node"]), str(fact["memdev"]))
    endpoints = dict(state.endpoints)
    if fact.get("decoders") is None:
        endpoints.pop(key, None)
    else:
        endpoints[key] = tuple(EndpointDecoder.from_json(x) for x in fact["decoders"])
    return replace(state, endpoints=endpoints)


def _port_slots(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    key = (str(fact["node"]), str(fact["port"]))
    slots = dict(state.port_slots)
    if fact.get("slots") is None:
        slots.pop(key, None)
    else:
        slots[key] = tuple(str(x) for x in fact["slots"])
    return replace(state, port_slots=slots)


def _root_id(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    key = (str(fact["node"]), str(fact["window"]))
    ids = dict(state.root_ids)
    if fact.get("id") is None:
        ids.pop(key, None)
    else:
        ids[key] = int(fact["id"])
    return replace(state, root_ids=ids)


def _port_admin(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    key = (str(fact["node"]), str(fact["port"]))
    off = state.ports_disabled - {key} if fact["enabled"] else state.ports_disabled | {key}
    return replace(state, ports_disabled=off)


def _bus_admin(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    node = str(fact["node"])
    off = state.buses_disabled - {node} if fact["enabled"] else state.buses_disabled | {node}
    return replace(state, buses_disabled=off)


_APPLY = {
    "region-add": _region_add, "region-del": _region_del, "memdev-admin": _memdev_admin, "ld-assign": _ld_assign,
    "ld-release": _ld_release, "extent-add": _extent_add, "extent-del": _extent_del, "endpoint": _endpoint_set,
    "port-slots": _port_slots, "root-id": _root_id, "port-admin": _port_admin, "bus-admin": _bus_admin,
}


def state_facts(before: CxlState, after: CxlState) -> list[Fact]:
    """The facts that turn ``before`` into ``after`` (for the parts the kernel-level operations change: regions,
    endpoint decoders, port decoder slots, root decoder ids and admin state); applying them to ``before`` gives
    ``after``."""
    facts: list[Fact] = []
    for key in sorted(set(before.admin_offline) ^ set(after.admin_offline)):
        facts.append({"fact": "memdev-admin", "node": key[0], "memdev": key[1],
                      "online": key not in after.admin_offline})
    for node in sorted(before.buses_disabled ^ after.buses_disabled):
        facts.append({"fact": "bus-admin", "node": node, "enabled": node not in after.buses_disabled})
    for key in sorted(before.ports_disabled ^ after.ports_disabled):
        facts.append({"fact": "port-admin", "node": key[0], "port": key[1],
                      "enabled": key not in after.ports_disabled})
    for key in sorted(set(before.regions) | set(after.regions)):
        old, new = before.regions.get(key), after.regions.get(key)
        if new is None:
            facts.append({"fact": "region-del", "node": key[0], "name": key[1]})
        elif old != new:
            facts.append({"fact": "region-add", "region": new.to_json()})
    for key in sorted(set(before.endpoints) | set(after.endpoints)):
        old_d, new_d = before.endpoints.get(key), after.endpoints.get(key)
        if old_d != new_d:
            facts.append({"fact": "endpoint", "node": key[0], "memdev": key[1],
                          "decoders": None if new_d is None else [d.to_json() for d in new_d]})
    for key in sorted(set(before.port_slots) | set(after.port_slots)):
        old_s, new_s = before.port_slots.get(key), after.port_slots.get(key)
        if old_s != new_s:
            facts.append({"fact": "port-slots", "node": key[0], "port": key[1],
                          "slots": None if new_s is None else list(new_s)})
    for key in sorted(set(before.root_ids) | set(after.root_ids)):
        if before.root_ids.get(key) != after.root_ids.get(key):
            facts.append({"fact": "root-id", "node": key[0], "window": key[1], "id": after.root_ids.get(key)})
    return facts


def _extent_number(extent_id: str) -> int:
    """The sequence number in ``<pool>-e000042``."""
    tail = extent_id.rsplit("-", 1)[-1].lstrip("e")
    return int(tail) if tail.isdigit() else 0


def with_region(state: CxlState, region: Region) -> CxlState:
    return replace(state, regions={**state.regions, (region.node, region.name): region})


def without_regions(state: CxlState, keys: Iterable[NodeKey]) -> CxlState:
    regions = dict(state.regions)
    for k in keys:
        regions.pop(k, None)
    return replace(state, regions=regions)
