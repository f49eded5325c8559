"""CXL at run time: regions, memory devices online/offline, pooled logical devices and dynamic capacity.

The model (:class:`fakehw.model.system.Cxl`, :class:`fakehw.model.system.CxlPool`) says what exists at boot;
:class:`CxlState` is what the CXL fabric looks like now. It is a value: every operation of :class:`CxlEngine`
checks a request against the model and the current state and returns the *facts* that change it (``region-add``,
``ld-assign``, ...), without touching anything. The platform (:mod:`fakehw.agent.platform`) journals the facts and
then applies them with :func:`apply_fact`, so a restarted agent replays exactly what happened and a refused
request leaves no trace.

The checks follow the kernel's CXL region rules (drivers/cxl/core/region.c and ``cxl create-region``):

- a region decodes through one fixed memory window (CFMWS root decoder) whose host bridges it must interleave
  evenly, in the window's order (position ``i`` sits under the window's host bridge ``i mod ways``);
- ways are 1, 2, 3, 4, 6, 8, 12 or 16; granularity 256 B .. 16 KiB; a window that interleaves several host
  bridges forces its own granularity on the region; every decoder below it interleaves at
  ``region granularity x ways above``, which must still be at most 16 KiB;
- every port on the path spends one HDM decoder per region and has few of them;
- capacity comes from each memory device's RAM or PMEM partition (DPA) and the window's address space (HPA), in
  units of 256 MiB per interleave way.

Pooled memory (CXL 2.0 multi-logical devices) is assigned to hosts a logical device (LD) at a time; a dynamic
capacity device (CXL 3.x DCD) hands out extents of 256 MiB blocks. Both come from the same device address space,
so a byte of a pooled device is held by at most one LD owner or one extent: nothing is assigned twice. Assigned
memory is decoded by the pool's window at ``window base + device offset`` and onlines into the window's NUMA node.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from fakehw.model.spec import CXL_GRANULARITIES, CXL_INTERLEAVE_WAYS
from fakehw.model.system import Cxl, CxlMemdev, CxlPool, CxlWindow, Node, System
from fakehw.model.units import format_size

MiB = 2**20
GiB = 2**30
REGION_UNIT = 256 * MiB
"""A region's size is a multiple of this per interleave way (the kernel's SZ_256M region alignment)."""
DCD_BLOCK = 256 * MiB
"""Dynamic-capacity extents are whole blocks of this size."""
MAX_EXTENTS_PER_HOST = 64
HOST_BRIDGE_DECODERS = 4
SWITCH_DECODERS = 4
ENDPOINT_DECODERS = 2
WINDOW_BASE = 0x40_0000_0000
"""Host physical address of the first fixed memory window (256 GiB); windows follow each other 1 GiB aligned."""

RegionOrigin = Literal["boot", "runtime", "pooled-ld", "dcd-extent"]


class CxlError(Exception):
    """A CXL request the platform refuses. ``status``: 404 unknown object, 409 conflicts with state, 422 invalid."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def size_text(size: int) -> str:
    return format_size(size) if size else "0 B"


# --------------------------------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class Region:
    """A committed region: its targets in interleave-position order and where it sits in DPA and HPA."""

    node: str
    name: str
    window: str
    targets: tuple[str, ...]
    granularity: int
    mode: Literal["ram", "pmem"]
    size: int
    hpa_offset: int
    dpa_offsets: tuple[int, ...]
    numa: int | None
    origin: RegionOrigin
    uuid: str = ""
    pool: str | None = None
    ld: int | None = None
    extent: str | None = None

    @property
    def ways(self) -> int:
        return len(self.targets)

    @property
    def id(self) -> int:
        return int(self.name.removeprefix("region"))

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "name": self.name, "window": self.window, "targets": list(self.targets),
            "granularity": self.granularity, "mode": self.mode, "size": self.size, "hpa_offset": self.hpa_offset,
            "dpa_offsets": list(self.dpa_offsets), "numa": self.numa, "origin": self.origin, "uuid": self.uuid,
            "pool": self.pool, "ld": self.ld, "extent": self.extent,
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
        )


def _origin(value: str) -> RegionOrigin:
    if value == "boot":
        return "boot"
    if value == "pooled-ld":
        return "pooled-ld"
    if value == "dcd-extent":
        return "dcd-extent"
    return "runtime"


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


@dataclass(frozen=True)
class CxlState:
    """What the CXL fabric looks like now. Treated as a value: :func:`apply_fact` returns a new one."""

    regions: Mapping[tuple[str, str], Region] = field(default_factory=dict)
    admin_offline: frozenset[tuple[str, str]] = frozenset()
    ld_owner: Mapping[tuple[str, int], str] = field(default_factory=dict)
    extents: Mapping[str, Extent] = field(default_factory=dict)
    extent_seq: int = 0

    def node_regions(self, node: str) -> list[Region]:
        return sorted((r for (n, _), r in self.regions.items() if n == node), key=lambda r: r.id)

    def to_json(self) -> dict[str, Any]:
        return {
            "regions": [r.to_json() for r in sorted(self.regions.values(), key=lambda r: (r.node, r.id))],
            "admin_offline": sorted([list(k) for k in self.admin_offline]),
            "ld_owner": [[p, ld, n] for (p, ld), n in sorted(self.ld_owner.items())],
            "extents": [e.to_json() for e in sorted(self.extents.values(), key=lambda e: e.id)],
            "extent_seq": self.extent_seq,
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
        )


Fact = dict[str, Any]
"""A journaled change: ``{"fact": "region-add", ...}``."""


def apply_fact(state: CxlState, fact: Mapping[str, Any]) -> CxlState:
    """The state after ``fact``. Facts were checked before they were journaled, so this never refuses."""
    kind = fact["fact"]
    if kind == "region-add":
        region = Region.from_json(fact["region"])
        return replace(state, regions={**state.regions, (region.node, region.name): region})
    if kind == "region-del":
        regions = dict(state.regions)
        regions.pop((str(fact["node"]), str(fact["name"])), None)
        return replace(state, regions=regions)
    if kind == "memdev-admin":
        key = (str(fact["node"]), str(fact["memdev"]))
        offline = state.admin_offline - {key} if fact["online"] else state.admin_offline | {key}
        return replace(state, admin_offline=offline)
    if kind == "ld-assign":
        return replace(state, ld_owner={**state.ld_owner, (str(fact["pool"]), int(fact["ld"])): str(fact["node"])})
    if kind == "ld-release":
        owners = dict(state.ld_owner)
        owners.pop((str(fact["pool"]), int(fact["ld"])), None)
        return replace(state, ld_owner=owners)
    if kind == "extent-add":
        ext = Extent.from_json(fact["extent"])
        seq = max(state.extent_seq, _extent_number(ext.id))
        return replace(state, extents={**state.extents, ext.id: ext}, extent_seq=seq)
    if kind == "extent-del":
        extents = dict(state.extents)
        extents.pop(str(fact["id"]), None)
        return replace(state, extents=extents)
    raise ValueError(f"unknown CXL fact {kind!r}")


# --------------------------------------------------------------------------------------------------- views


@dataclass(frozen=True, slots=True)
class MemdevView:
    """A memory device as the host sees it now (local devices, pooled logical devices, the DCD interface)."""

    name: str
    sysfs_id: int
    ram_size: int
    pmem_size: int
    dynamic_size: int
    serial: int
    host_bridge: str
    port: str
    numa: int
    admin_online: bool
    fault_online: bool
    pool: str | None = None
    ld: int | None = None
    qos_class: int = 0

    @property
    def online(self) -> bool:
        return self.admin_online and self.fault_online

    @property
    def sysfs_name(self) -> str:
        return f"mem{self.sysfs_id}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "memdev": self.sysfs_name, "ram_size": self.ram_size,
                "pmem_size": self.pmem_size, "dynamic_ram_size": self.dynamic_size, "serial": self.serial,
                "host_bridge": self.host_bridge, "port": self.port, "numa_node": self.numa,
                "online": self.online, "admin_online": self.admin_online, "fault_online": self.fault_online,
                "pool": self.pool, "ld": self.ld, "qos_class": self.qos_class}


@dataclass(frozen=True, slots=True)
class RegionView:
    region: Region
    active: bool
    """All targets online: the region's memory is in its NUMA node."""

    def to_json(self) -> dict[str, Any]:
        return {**self.region.to_json(), "active": self.active}


@dataclass(frozen=True)
class NodeCxlView:
    """Everything the fake sysfs needs to show a host's CXL devices, and what its NUMA nodes hold."""

    node: str
    memdevs: tuple[MemdevView, ...]
    regions: tuple[RegionView, ...]
    extents: tuple[Extent, ...]
    numa_memory: Mapping[int, int]
    """Memory of every kind: cxl NUMA node that a window maps (derived from the active regions)."""
    pools: tuple[PoolHostView, ...]

    def memdev(self, name: str) -> MemdevView | None:
        return next((m for m in self.memdevs if m.name == name), None)

    def region(self, name: str) -> RegionView | None:
        return next((r for r in self.regions if r.region.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "memdevs": [m.to_json() for m in self.memdevs],
            "regions": [r.to_json() for r in self.regions],
            "extents": [e.to_json() for e in self.extents],
            "numa_memory": {str(k): v for k, v in sorted(self.numa_memory.items())},
            "pools": [p.to_json() for p in self.pools],
        }


@dataclass(frozen=True, slots=True)
class PoolHostView:
    """A pooled device from one member host: which LDs and extents it holds."""

    pool: str
    window: str
    lds: tuple[int, ...]
    extents: tuple[str, ...]
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"pool": self.pool, "window": self.window, "lds": list(self.lds), "extents": list(self.extents),
                "bytes": self.bytes}


# --------------------------------------------------------------------------------------------------- engine


@dataclass(frozen=True, slots=True)
class MemdevPath:
    """Ports a memdev's traffic crosses: host bridge, root port, optional switch and its downstream port."""

    host_bridge: str
    root_port: str
    switch: str | None
    downstream_port: str | None


class CxlEngine:
    """Checks CXL requests against the model and a :class:`CxlState`; returns facts, never mutates.

    ``nodes`` are the nodes this agent serves: pooled devices whose member hosts are not all served cannot be
    arbitrated here (another agent may hand out the same logical device), so their operations are refused.
    """

    def __init__(self, system: System, nodes: Iterable[str]):
        self.system = system
        self.served = frozenset(nodes)
        self._pools = {p.name: p for p in system.cxl_pools}
        self._sysfs_pool_base: dict[str, int] = {}
        base = 0
        for p in system.cxl_pools:
            self._sysfs_pool_base[p.name] = base
            base += p.logical_devices + 1

    # ------------------------------------------------------------------------------------------ model helpers

    def node(self, name: str) -> Node:
        node = self.system.node(name)
        if node is None or name not in self.served:
            served = ", ".join(sorted(self.served)[:8])
            raise CxlError(404, f"unknown node {name!r} (this agent serves: {served})")
        return node

    def pool(self, name: str) -> CxlPool:
        pool = self._pools.get(name)
        if pool is None:
            known = ", ".join(self._pools) or "none"
            raise CxlError(404, f"no pooled CXL device {name!r} (pools: {known})")
        return pool

    def arbitrable(self, pool: CxlPool) -> bool:
        """Whether this agent serves every host of ``pool`` (so it alone decides who holds what)."""
        return set(pool.nodes) <= self.served

    def pools_of(self, node: str) -> list[CxlPool]:
        return [p for p in self.system.cxl_pools if node in p.nodes and p.window]

    def pool_window(self, node: Node, pool: CxlPool) -> CxlWindow:
        return next(w for w in node.cxl.windows if w.name == pool.window)

    def memdev_sysfs_id(self, node: Node, name: str) -> int:
        """``memN`` numbering: local devices in model order, then per pool its LDs and its DCD interface."""
        for i, m in enumerate(node.cxl.memdevs):
            if m.name == name:
                return i
        pool, _, rest = name.partition(".")
        base = len(node.cxl.memdevs) + self._sysfs_pool_base[pool]
        p = self._pools[pool]
        return base + (p.logical_devices if rest == "dcd" else int(rest.removeprefix("ld")))

    # ------------------------------------------------------------------------------------------ boot

    def boot(self) -> CxlState:
        """The state the model describes: boot regions, every memdev online, LDs as assigned at boot."""
        regions: dict[tuple[str, str], Region] = {}
        owners: dict[tuple[str, int], str] = {}
        state = CxlState()
        for name in sorted(self.served):
            node = self.system.node(name)
            assert node is not None
            dpa_used: dict[tuple[str, str], int] = {}
            for r in node.cxl.regions:
                window = next(w for w in node.cxl.windows if w.name == r.window)
                offsets = []
                for t in r.targets:
                    offsets.append(dpa_used.get((t, r.mode), 0))
                    dpa_used[(t, r.mode)] = offsets[-1] + r.size // len(r.targets)
                hpa = self._free_hpa(state, regions, node, window, r.size, len(r.targets))
                ordered = self._order_targets(node, window, list(r.targets))
                offset_of = dict(zip(r.targets, offsets, strict=True))
                uid = "" if r.mode == "ram" else str(uuid.uuid5(uuid.NAMESPACE_URL, f"fakehw/{name}/{r.name}"))
                regions[(name, r.name)] = Region(name, r.name, r.window, tuple(ordered), r.interleave_granularity,
                                                 r.mode, r.size, hpa if hpa is not None else 0,
                                                 tuple(offset_of[t] for t in ordered), r.numa, "boot", uid)
        for pool in self.system.cxl_pools:
            for ld, owner in pool.assignments:
                if owner in self.served:
                    owners[(pool.name, ld)] = owner
        state = CxlState(regions=regions, ld_owner=owners)
        # Assigned logical devices are decoded at boot like any assignment made later.
        for (pool_name, ld), owner in sorted(owners.items()):
            pool = self._pools[pool_name]
            node = self.system.node(owner)
            if node is None or not pool.window:
                continue
            region = self._pool_region(state, node, pool, ld * pool.ld_size, pool.ld_size, f"{pool_name}.ld{ld}",
                                       "pooled-ld", ld=ld)
            state = replace(state, regions={**state.regions, (owner, region.name): region})
        return state

    # ------------------------------------------------------------------------------------------ views

    def view(self, state: CxlState, node_name: str, fault_offline: frozenset[str] = frozenset()) -> NodeCxlView:
        """The host's CXL devices and regions now; ``fault_offline``: memdevs a ``cxl-offline`` fault took down."""
        node = self.system.node(node_name)
        assert node is not None
        memdevs: list[MemdevView] = []
        for m in node.cxl.memdevs:
            hb = next(h for h in node.cxl.host_bridges if h.name == m.host_bridge)
            memdevs.append(MemdevView(m.name, self.memdev_sysfs_id(node, m.name), m.ram_size, m.pmem_size, 0,
                                      m.serial, m.host_bridge, m.parent, hb.numa,
                                      (node_name, m.name) not in state.admin_offline, m.name not in fault_offline,
                                      qos_class=m.qos_class))
        pools: list[PoolHostView] = []
        for pool in self.pools_of(node_name):
            hb_name = port_host_bridge(node.cxl, pool.host_port)
            hb = next(h for h in node.cxl.host_bridges if h.name == hb_name)
            qos = self.pool_window(node, pool).qos_class
            lds = tuple(sorted(ld for (p, ld), o in state.ld_owner.items() if p == pool.name and o == node_name))
            exts = tuple(sorted((e for e in state.extents.values() if e.pool == pool.name and e.node == node_name),
                                key=lambda e: e.offset))
            for ld in lds:
                name = f"{pool.name}.ld{ld}"
                memdevs.append(MemdevView(name, self.memdev_sysfs_id(node, name), pool.ld_size, 0, 0,
                                          _pool_serial(pool.name, ld), hb.name, pool.host_port, hb.numa, True, True,
                                          pool.name, ld, qos))
            name = f"{pool.name}.dcd"
            memdevs.append(MemdevView(name, self.memdev_sysfs_id(node, name), 0, 0, pool.capacity,
                                      _pool_serial(pool.name, -1), hb.name, pool.host_port, hb.numa, True, True,
                                      pool.name, None, qos))
            pools.append(PoolHostView(pool.name, pool.window, lds, tuple(e.id for e in exts),
                                      len(lds) * pool.ld_size + sum(e.length for e in exts)))
        online = {m.name for m in memdevs if m.online}
        regions = tuple(RegionView(r, all(t in online for t in r.targets)) for r in state.node_regions(node_name))
        mapped = {w.numa for w in node.cxl.windows if w.numa is not None}
        numa_memory = dict.fromkeys(sorted(mapped), 0)
        for rv in regions:
            r = rv.region
            if rv.active and r.mode == "ram" and r.numa is not None and r.numa in numa_memory:
                numa_memory[r.numa] += r.size
        extents = tuple(sorted((e for e in state.extents.values() if e.node == node_name), key=lambda e: e.id))
        memdevs.sort(key=lambda m: m.sysfs_id)
        return NodeCxlView(node_name, tuple(memdevs), regions, extents, numa_memory, tuple(pools))

    # ------------------------------------------------------------------------------------------ regions

    def create_region(
        self,
        state: CxlState,
        node_name: str,
        window_name: str,
        targets: Sequence[str],
        granularity: int | None = None,
        size: int | None = None,
        mode: str = "ram",
        name: str | None = None,
        fault_offline: frozenset[str] = frozenset(),
    ) -> tuple[list[Fact], Region]:
        node = self.node(node_name)
        cxl = node.cxl
        window = next((w for w in cxl.windows if w.name == window_name), None)
        if window is None:
            known = ", ".join(w.name for w in cxl.windows) or "none"
            raise CxlError(404, f"node {node_name} has no CXL window {window_name!r} (windows: {known})")
        for pool in self.pools_of(node_name):
            if pool.window == window.name:
                raise CxlError(409, f"window {window.name} decodes the pooled device {pool.name}; assign its "
                               "logical devices or add dynamic-capacity extents instead of creating regions on it")
        if mode not in ("ram", "pmem"):
            raise CxlError(422, f"mode must be ram or pmem, not {mode!r}")
        if (mode == "ram" and not window.ram) or (mode == "pmem" and not window.pmem):
            caps = "/".join(c for c, ok in (("ram", window.ram), ("pmem", window.pmem)) if ok)
            raise CxlError(422, f"window {window.name} decodes {caps} memory only, not {mode}")
        if not targets:
            raise CxlError(422, "a region needs at least one target memory device")
        if len(set(targets)) != len(targets):
            raise CxlError(422, "a memory device is listed twice in targets")
        devs: list[CxlMemdev] = []
        for t in targets:
            dev = cxl.memdev(t)
            if dev is None:
                known = ", ".join(m.name for m in cxl.memdevs) or "none"
                raise CxlError(404, f"node {node_name} has no CXL memory device {t!r} (memdevs: {known})")
            devs.append(dev)
        ways = len(devs)
        if ways not in CXL_INTERLEAVE_WAYS:
            raise CxlError(422, f"{ways}-way interleave is not possible "
                           f"(ways: {', '.join(map(str, CXL_INTERLEAVE_WAYS))})")
        for dev in devs:
            if (node_name, dev.name) in state.admin_offline or dev.name in fault_offline:
                raise CxlError(409, f"{dev.name} is offline; bring it online before putting it in a region")
            if dev.host_bridge not in window.targets:
                raise CxlError(422, f"{dev.name} sits under host bridge {dev.host_bridge}, which window "
                               f"{window.name} does not interleave ({', '.join(window.targets)}); memory devices "
                               "under different host bridges interleave only through a window that targets all of "
                               "them")
        wways = len(window.targets)
        per_hb = {hb: [d for d in devs if d.host_bridge == hb] for hb in window.targets}
        if ways % wways or any(len(v) != ways // wways for v in per_hb.values()):
            spread = ", ".join(f"{len(v)} under {hb}" for hb, v in per_hb.items())
            raise CxlError(422, f"window {window.name} interleaves {wways} host bridge(s); a region on it needs its "
                           f"targets spread evenly over them (got {spread})")
        if granularity is None:
            granularity = window.interleave_granularity
        if granularity not in CXL_GRANULARITIES:
            raise CxlError(422, f"interleave granularity {granularity} is not possible (a power of two from 256 "
                           "to 16384 bytes)")
        if wways > 1 and granularity != window.interleave_granularity:
            raise CxlError(422, f"window {window.name} interleaves {wways} host bridges at "
                           f"{window.interleave_granularity} bytes; a region on it must use that granularity, not "
                           f"{granularity}")
        ordered = self._order_targets(node, window, list(targets))
        self._check_decoders(state, node, devs, granularity, wways)
        # Capacity: DPA on every target, HPA in the window.
        dpa_free = {d.name: self._dpa_holes(state, node_name, d, mode) for d in devs}
        if size is None:
            per_way = min(max((length for _, length in holes), default=0) for holes in dpa_free.values())
            per_way -= per_way % REGION_UNIT
            hpa_hole = self._largest_hpa_hole(state, node, window, ways)
            size = min(per_way * ways, hpa_hole - hpa_hole % (REGION_UNIT * ways))
            if size <= 0:
                raise CxlError(409, "no capacity left for a region on " + ", ".join(d.name for d in devs)
                               + f" in window {window.name}")
        if size <= 0 or size % (REGION_UNIT * ways):
            raise CxlError(422, f"region size must be a positive multiple of {size_text(REGION_UNIT * ways)} "
                           f"({size_text(REGION_UNIT)} per way x {ways} way(s)), not {size}")
        per_way = size // ways
        offsets = []
        for d in devs:
            hole = next((start for start, length in dpa_free[d.name] if length >= per_way), None)
            if hole is None:
                total = d.ram_size if mode == "ram" else d.pmem_size
                free = sum(length for _, length in dpa_free[d.name])
                raise CxlError(409, f"{d.name} has {size_text(free)} of {mode} capacity free (of "
                               f"{size_text(total)}); a {ways}-way region of {size_text(size)} needs "
                               f"{size_text(per_way)} on each target")
            offsets.append(hole)
        hpa = self._free_hpa(state, None, node, window, size, ways)
        if hpa is None:
            raise CxlError(409, f"window {window.name} has no free {size_text(size)} range (largest free: "
                           f"{size_text(self._largest_hpa_hole(state, node, window, ways))})")
        if name is None:
            name = f"region{free_region_id(r.id for r in state.node_regions(node_name))}"
        elif not name.startswith("region") or not name.removeprefix("region").isdigit():
            raise CxlError(422, f"region names are regionN, not {name!r}")
        if (node_name, name) in state.regions:
            raise CxlError(409, f"node {node_name} already has {name}")
        offset_of = dict(zip([d.name for d in devs], offsets, strict=True))
        numa = window.numa if mode == "ram" else None
        uid = "" if mode == "ram" else str(uuid.uuid4())
        region = Region(node_name, name, window.name, tuple(ordered), granularity, "pmem" if mode == "pmem" else "ram",
                        size, hpa, tuple(offset_of[t] for t in ordered), numa, "runtime", uid)
        return [{"fact": "region-add", "region": region.to_json()}], region

    def destroy_region(self, state: CxlState, node_name: str, name: str) -> tuple[list[Fact], Region]:
        self.node(node_name)
        region = state.regions.get((node_name, name))
        if region is None:
            known = ", ".join(r.name for r in state.node_regions(node_name)) or "none"
            raise CxlError(404, f"node {node_name} has no region {name!r} (regions: {known})")
        if region.origin == "pooled-ld":
            raise CxlError(409, f"{name} decodes logical device {region.ld} of {region.pool}; release the logical "
                           "device instead")
        if region.origin == "dcd-extent":
            raise CxlError(409, f"{name} decodes dynamic-capacity extent {region.extent} of {region.pool}; release "
                           "the extent instead")
        return [{"fact": "region-del", "node": node_name, "name": name}], region

    # ------------------------------------------------------------------------------------------ memdevs

    def set_memdev(self, state: CxlState, node_name: str, memdev: str, online: bool) -> list[Fact]:
        node = self.node(node_name)
        if node.cxl.memdev(memdev) is None:
            known = ", ".join(m.name for m in node.cxl.memdevs) or "none"
            hint = " (pooled logical devices are assigned and released, not onlined)" if "." in memdev else ""
            raise CxlError(404, f"node {node_name} has no CXL memory device {memdev!r} (memdevs: {known}){hint}")
        if ((node_name, memdev) not in state.admin_offline) == online:
            return []
        return [{"fact": "memdev-admin", "node": node_name, "memdev": memdev, "online": online}]

    # ------------------------------------------------------------------------------------------ pooling

    def _pool_for_change(self, name: str) -> CxlPool:
        pool = self.pool(name)
        if not self.arbitrable(pool):
            missing = ", ".join(sorted(set(pool.nodes) - self.served))
            raise CxlError(409, f"pool {pool.name} is shared with hosts this agent does not serve ({missing}); "
                           "only the agent serving every member host can arbitrate it (see docs/platform.md)")
        return pool

    def assign_ld(self, state: CxlState, pool_name: str, ld: int, node_name: str) -> tuple[list[Fact], Region | None]:
        pool = self._pool_for_change(pool_name)
        self._check_ld(pool, ld)
        if node_name not in pool.nodes:
            raise CxlError(422, f"node {node_name!r} is not a member host of pool {pool.name} (members: "
                           f"{', '.join(pool.nodes)})")
        node = self.node(node_name)
        owner = state.ld_owner.get((pool.name, ld))
        if owner == node_name:
            return [], None
        if owner is not None:
            raise CxlError(409, f"logical device {ld} of {pool.name} is held by {owner}; release it there first")
        start, end = ld * pool.ld_size, (ld + 1) * pool.ld_size
        for e in state.extents.values():
            if e.pool == pool.name and e.offset < end and start < e.offset + e.length:
                raise CxlError(409, f"logical device {ld} of {pool.name} is partly given out as dynamic-capacity "
                               f"extent {e.id} (to {e.node}); release the extent first")
        region = self._pool_region(state, node, pool, start, pool.ld_size, f"{pool.name}.ld{ld}", "pooled-ld", ld=ld)
        return [{"fact": "ld-assign", "pool": pool.name, "ld": ld, "node": node_name},
                {"fact": "region-add", "region": region.to_json()}], region

    def release_ld(self, state: CxlState, pool_name: str, ld: int, node_name: str | None = None) -> list[Fact]:
        pool = self._pool_for_change(pool_name)
        self._check_ld(pool, ld)
        owner = state.ld_owner.get((pool.name, ld))
        if owner is None:
            raise CxlError(409, f"logical device {ld} of {pool.name} is not assigned to any host")
        if node_name is not None and owner != node_name:
            raise CxlError(409, f"logical device {ld} of {pool.name} is held by {owner}, not {node_name}")
        facts: list[Fact] = [{"fact": "region-del", "node": owner, "name": r.name}
                             for r in state.node_regions(owner) if r.pool == pool.name and r.ld == ld]
        facts.append({"fact": "ld-release", "pool": pool.name, "ld": ld})
        return facts

    def add_extent(
        self, state: CxlState, pool_name: str, node_name: str, length: int, offset: int | None = None
    ) -> tuple[list[Fact], Extent]:
        pool = self._pool_for_change(pool_name)
        if node_name not in pool.nodes:
            raise CxlError(422, f"node {node_name!r} is not a member host of pool {pool.name} (members: "
                           f"{', '.join(pool.nodes)})")
        node = self.node(node_name)
        if length <= 0 or length % DCD_BLOCK:
            raise CxlError(422, f"an extent is a positive multiple of the {size_text(DCD_BLOCK)} block size, not "
                           f"{length}")
        held = [e for e in state.extents.values() if e.pool == pool.name and e.node == node_name]
        if len(held) >= MAX_EXTENTS_PER_HOST:
            raise CxlError(409, f"{node_name} already holds {len(held)} extents of {pool.name} (the most a host "
                           "accepts)")
        holes = self.device_holes(state, pool)
        if offset is not None:
            if offset < 0 or offset % DCD_BLOCK or offset + length > pool.capacity:
                raise CxlError(422, f"extent offset must be a multiple of {size_text(DCD_BLOCK)} with the extent "
                               f"inside the device's {size_text(pool.capacity)}")
            if not any(start <= offset and offset + length <= start + hl for start, hl in holes):
                raise CxlError(409, f"{size_text(length)} at offset {offset:#x} of {pool.name} overlaps capacity "
                               "held by a logical device or another extent")
        else:
            offset = next((start for start, hl in holes if hl >= length), None)
            if offset is None:
                free = sum(hl for _, hl in holes)
                raise CxlError(409, f"{pool.name} has no {size_text(length)} of contiguous free capacity (free: "
                               f"{size_text(free)} in {len(holes)} range(s))")
        ext = Extent(f"{pool.name}-e{state.extent_seq + 1:06d}", pool.name, node_name, offset, length)
        region = self._pool_region(state, node, pool, offset, length, f"{pool.name}.dcd", "dcd-extent",
                                   extent=ext.id)
        return [{"fact": "extent-add", "extent": ext.to_json()},
                {"fact": "region-add", "region": region.to_json()}], ext

    def release_extent(self, state: CxlState, pool_name: str, extent_id: str) -> tuple[list[Fact], Extent]:
        pool = self._pool_for_change(pool_name)
        ext = state.extents.get(extent_id)
        if ext is None or ext.pool != pool.name:
            known = ", ".join(e.id for e in state.extents.values() if e.pool == pool.name) or "none"
            raise CxlError(404, f"pool {pool.name} has no extent {extent_id!r} (extents: {known})")
        facts: list[Fact] = [{"fact": "region-del", "node": ext.node, "name": r.name}
                             for r in state.node_regions(ext.node) if r.extent == ext.id]
        facts.append({"fact": "extent-del", "id": ext.id})
        return facts, ext

    def device_holes(self, state: CxlState, pool: CxlPool) -> list[tuple[int, int]]:
        """Free ranges of a pooled device: not in an assigned LD, not in an extent (start, length)."""
        taken = [(ld * pool.ld_size, pool.ld_size) for (p, ld) in state.ld_owner if p == pool.name]
        taken += [(e.offset, e.length) for e in state.extents.values() if e.pool == pool.name]
        return _holes(taken, 0, pool.capacity)

    # ------------------------------------------------------------------------------------------ internals

    @staticmethod
    def _check_ld(pool: CxlPool, ld: int) -> None:
        if not 0 <= ld < pool.logical_devices:
            raise CxlError(422, f"pool {pool.name} has logical devices 0..{pool.logical_devices - 1}, not {ld}")

    def _pool_region(self, state: CxlState, node: Node, pool: CxlPool, offset: int, size: int, target: str,
                     origin: RegionOrigin, ld: int | None = None, extent: str | None = None) -> Region:
        window = self.pool_window(node, pool)
        name = f"region{free_region_id(r.id for r in state.node_regions(node.name))}"
        return Region(node.name, name, window.name, (target,), window.interleave_granularity, "ram", size, offset,
                      (offset if origin == "dcd-extent" else 0,), window.numa, origin, "", pool.name, ld, extent)

    def _order_targets(self, node: Node, window: CxlWindow, targets: list[str]) -> list[str]:
        """Interleave positions: position i under the window's host bridge i mod ways, ports spread evenly."""
        cxl = node.cxl
        devs = {m.name: m for m in cxl.memdevs}
        port_order = {p: i for i, p in enumerate(
            [rp for hb in cxl.host_bridges for rp in hb.root_ports]
            + [dp for sw in cxl.switches for dp in sw.downstream_ports])}
        per_hb: dict[str, list[str]] = {hb: [] for hb in window.targets}
        for t in targets:
            d = devs[t]
            per_hb.setdefault(d.host_bridge, []).append(t)
        for hb, names in per_hb.items():
            paths = {n: memdev_path(cxl, devs[n]) for n in names}
            # Round-robin over root ports, then switch ports, so lower-level decoders interleave evenly.
            by_rp: dict[str, list[str]] = {}
            for n in sorted(names, key=lambda n: port_order.get(devs[n].parent, 0)):
                by_rp.setdefault(paths[n].root_port, []).append(n)
            merged: list[str] = []
            queues = list(by_rp.values())
            while any(queues):
                for q in queues:
                    if q:
                        merged.append(q.pop(0))
            per_hb[hb] = merged
        out: list[str] = []
        hbs = list(window.targets)
        for i in range(len(targets)):
            queue = per_hb.get(hbs[i % len(hbs)])
            if not queue:  # uneven spread: the caller refuses it; keep the given order
                return list(targets)
            out.append(queue.pop(0))
        return out

    def _check_decoders(self, state: CxlState, node: Node, devs: list[CxlMemdev], granularity: int,
                        wways: int) -> None:
        cxl = node.cxl
        paths = {d.name: memdev_path(cxl, d) for d in devs}
        regions = [r for r in state.node_regions(node.name) if r.origin in ("boot", "runtime")]
        all_paths = {m.name: memdev_path(cxl, m) for m in cxl.memdevs}
        # Ways and granularity at each level below the window.
        for hb in sorted({p.host_bridge for p in paths.values()}):
            under = [n for n, p in paths.items() if p.host_bridge == hb]
            rps = {paths[n].root_port for n in under}
            hb_ways = len(rps)
            counts = {rp: sum(1 for n in under if paths[n].root_port == rp) for rp in rps}
            if hb_ways not in CXL_INTERLEAVE_WAYS or len(set(counts.values())) > 1:
                raise CxlError(422, f"host bridge {hb} would interleave {hb_ways} root port(s) unevenly "
                               f"({', '.join(f'{c} under {rp}' for rp, c in sorted(counts.items()))})")
            hb_gran = granularity * wways
            if hb_ways > 1 and hb_gran > CXL_GRANULARITIES[-1]:
                raise CxlError(422, f"the decoder of host bridge {hb} would need granularity {hb_gran} (region "
                               f"{granularity} x {wways} host bridge(s)); the largest a decoder supports is "
                               f"{CXL_GRANULARITIES[-1]}")
            for rp in rps:
                sws = {paths[n].switch for n in under if paths[n].root_port == rp}
                for sw in sws:
                    if sw is None:
                        continue
                    dps = {paths[n].downstream_port for n in under if paths[n].switch == sw}
                    sw_gran = hb_gran * hb_ways
                    if len(dps) > 1 and sw_gran > CXL_GRANULARITIES[-1]:
                        raise CxlError(422, f"the decoder of switch {sw} would need granularity {sw_gran} (region "
                                       f"{granularity} x {wways * hb_ways} ways above it); the largest a decoder "
                                       f"supports is {CXL_GRANULARITIES[-1]}")
            used = [r.name for r in regions if any(all_paths[t].host_bridge == hb for t in r.targets
                                                   if t in all_paths)]
            if len(used) >= HOST_BRIDGE_DECODERS:
                raise CxlError(409, f"no free HDM decoder on host bridge {hb} ({HOST_BRIDGE_DECODERS} of "
                               f"{HOST_BRIDGE_DECODERS} in use by {', '.join(used)})")
        for sw in sorted({p.switch for p in paths.values() if p.switch}):
            used = [r.name for r in regions if any(all_paths[t].switch == sw for t in r.targets if t in all_paths)]
            if len(used) >= SWITCH_DECODERS:
                raise CxlError(409, f"no free HDM decoder on switch {sw} ({SWITCH_DECODERS} of {SWITCH_DECODERS} "
                               f"in use by {', '.join(used)})")
        for d in devs:
            used = [r.name for r in regions if d.name in r.targets]
            if len(used) >= ENDPOINT_DECODERS:
                raise CxlError(409, f"no free HDM decoder on the endpoint of {d.name} ({ENDPOINT_DECODERS} of "
                               f"{ENDPOINT_DECODERS} in use by {', '.join(used)})")

    @staticmethod
    def _dpa_holes(state: CxlState, node: str, dev: CxlMemdev, mode: str) -> list[tuple[int, int]]:
        total = dev.ram_size if mode == "ram" else dev.pmem_size
        taken = []
        for r in state.node_regions(node):
            if r.mode == mode and dev.name in r.targets:
                taken.append((r.dpa_offsets[r.targets.index(dev.name)], r.size // r.ways))
        return _holes(taken, 0, total)

    def _largest_hpa_hole(self, state: CxlState, node: Node, window: CxlWindow, ways: int) -> int:
        align = REGION_UNIT * ways
        best = 0
        for start, length in self._hpa_holes(state, None, node, window):
            aligned = -(-start // align) * align
            best = max(best, start + length - aligned)
        return best

    def _hpa_holes(self, state: CxlState, extra: Mapping[tuple[str, str], Region] | None, node: Node,
                   window: CxlWindow) -> list[tuple[int, int]]:
        regions = list(state.node_regions(node.name)) + list((extra or {}).values())
        taken = [(r.hpa_offset, r.size) for r in regions if r.window == window.name and r.node == node.name]
        return _holes(taken, 0, window.size)

    def _free_hpa(self, state: CxlState, extra: Mapping[tuple[str, str], Region] | None, node: Node,
                  window: CxlWindow, size: int, ways: int) -> int | None:
        align = REGION_UNIT * ways
        for start, length in self._hpa_holes(state, extra, node, window):
            aligned = -(-start // align) * align
            if aligned + size <= start + length:
                return aligned
        return None


def memdev_path(cxl: Cxl, memdev: CxlMemdev) -> MemdevPath:
    """The ports between a local memdev and its host bridge."""
    if memdev.behind_switch:
        sw = next(s for s in cxl.switches if memdev.parent in s.downstream_ports)
        return MemdevPath(memdev.host_bridge, sw.parent, sw.name, memdev.parent)
    return MemdevPath(memdev.host_bridge, memdev.parent, None, None)


def port_host_bridge(cxl: Cxl, port: str) -> str | None:
    """The host bridge above a root port or a switch's downstream port (None for a port the host lacks)."""
    for hb in cxl.host_bridges:
        if port in hb.root_ports:
            return hb.name
    sw = next((s for s in cxl.switches if port in s.downstream_ports), None)
    if sw is None:
        return None
    return next((hb.name for hb in cxl.host_bridges if sw.parent in hb.root_ports), None)


def free_region_id(used: Iterable[int]) -> int:
    """The lowest region number not in ``used`` (``regionN`` names are reused lowest first)."""
    taken = set(used)
    return next(i for i in range(len(taken) + 1) if i not in taken)


def _extent_number(extent_id: str) -> int:
    """The sequence number in ``<pool>-e000042``."""
    tail = extent_id.rsplit("-", 1)[-1].lstrip("e")
    return int(tail) if tail.isdigit() else 0


def window_bases(cxl: Cxl) -> dict[str, int]:
    """Host physical address of every fixed memory window: from 256 GiB up, each 1 GiB aligned."""
    bases, addr = {}, WINDOW_BASE
    for w in cxl.windows:
        bases[w.name] = addr
        addr += -(-w.size // GiB) * GiB
    return bases


def _holes(taken: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Free (start, length) ranges of [lo, hi) around the taken (start, length) ranges."""
    out: list[tuple[int, int]] = []
    cur = lo
    for start, length in sorted(taken):
        if start > cur:
            out.append((cur, start - cur))
        cur = max(cur, start + length)
    if cur < hi:
        out.append((cur, hi - cur))
    return out


def _pool_serial(pool: str, ld: int) -> int:
    """A stable serial number for a pooled logical device (or the DCD interface, ``ld = -1``)."""
    return int(uuid.uuid5(uuid.NAMESPACE_URL, f"fakehw/cxl-pool/{pool}/{ld}").int % 10**12)
