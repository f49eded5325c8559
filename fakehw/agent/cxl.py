"""CXL at run time: regions, memory devices online/offline, pooled logical devices and dynamic capacity.

The model (:class:`fakehw.model.system.Cxl`, :class:`fakehw.model.system.CxlPool`) says what exists at boot;
:class:`~fakehw.agent.cxlstate.CxlState` is what the CXL fabric looks like now, down to every HDM decoder
(:mod:`fakehw.agent.cxlstate`). The kernel's rules for changing it, one sysfs store at a time, are in
:mod:`fakehw.agent.cxlcore`; :class:`CxlEngine` adds the operator's requests on top (``testbed cxl
create-region`` is the same sequence of stores ``cxl create-region`` makes: reserve DPA on each target, create
the region, set granularity, ways, uuid and size, attach the targets in decode order, commit, enable), the
pooled-device fabric manager and the views the renderers read. Every operation returns the *facts* that change
the state, without touching anything; the platform (:mod:`fakehw.agent.platform`) journals and applies them.

Pooled memory (CXL 2.0 multi-logical devices) is assigned to hosts a logical device (LD) at a time; a dynamic
capacity device (CXL 3.x DCD) hands out extents of 256 MiB blocks. Both come from the same device address space,
so a byte of a pooled device is held by at most one LD owner or one extent: nothing is assigned twice. Assigned
memory is decoded by the pool's window at ``window base + device offset`` and onlines into the window's NUMA node.
"""

from __future__ import annotations

import errno
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fakehw.agent.cxlcore import CxlCore, KernelError, online_bytes
from fakehw.agent.cxlstate import (
    CxlState,
    Extent,
    Fact,
    Region,
    RegionOrigin,
    apply_fact,
    state_facts,
    with_region,
)
from fakehw.agent.cxltopo import GiB, MiB, NodeTopology, window_bases
from fakehw.model.memblock import kmem_blocks
from fakehw.model.spec import CXL_GRANULARITIES, CXL_INTERLEAVE_WAYS
from fakehw.model.system import Cxl, CxlMemdev, CxlPool, CxlWindow, Node, System
from fakehw.model.units import format_size

__all__ = [
    "DCD_BLOCK", "MAX_EXTENTS_PER_HOST", "REGION_UNIT", "CxlEngine", "CxlError", "CxlState", "Extent", "GiB",
    "MemdevView", "MiB", "NodeCxlView", "PoolHostView", "Region", "RegionView", "apply_fact", "size_text",
    "window_bases",
]

REGION_UNIT = 256 * MiB
"""A region's size is a multiple of this per interleave way (the kernel's SZ_256M region alignment)."""
DCD_BLOCK = 256 * MiB
"""Dynamic-capacity extents are whole blocks of this size."""
MAX_EXTENTS_PER_HOST = 64


class CxlError(Exception):
    """A CXL request the platform refuses. ``status``: 404 unknown object, 409 conflicts with state, 422 invalid."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def size_text(size: int) -> str:
    return format_size(size) if size else "0 B"


def _status(code: int) -> int:
    """The HTTP status of a refused operation from the kernel's errno."""
    if code == errno.ENODEV:
        return 404
    if code in (errno.EINVAL, errno.ERANGE):
        return 422
    return 409


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
    bound: bool = True
    """Bound to ``cxl_mem``: its endpoint port exists (admin and fault online, its ports and the root enabled)."""

    @property
    def online(self) -> bool:
        return self.bound

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
    """Committed and bound to ``cxl_region``: the region decodes its memory."""
    memory_online: int = 0
    """Bytes of its RAM hot-added and online (in its target NUMA node)."""
    target_node: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {**self.region.to_json(), "active": self.active, "memory_online": self.memory_online,
                "target_node": self.target_node}


@dataclass(frozen=True)
class NodeCxlView:
    """Everything the fake sysfs needs to show a host's CXL devices, and what its NUMA nodes hold."""

    node: str
    memdevs: tuple[MemdevView, ...]
    regions: tuple[RegionView, ...]
    extents: tuple[Extent, ...]
    numa_memory: Mapping[int, int]
    """Bytes of hot-added CXL memory online per NUMA node (every kind: cxl node a window maps, listed even when
    empty; other nodes only when CXL memory is online in them)."""
    pools: tuple[PoolHostView, ...]
    state: CxlState | None = None
    """The node's CXL state (decoders, ports, root decoder ids) for the renderer."""

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
        self._topos: dict[str, NodeTopology] = {}

    # ------------------------------------------------------------------------------------------ model helpers

    def node(self, name: str) -> Node:
        node = self.system.node(name)
        if node is None or name not in self.served:
            served = ", ".join(sorted(self.served)[:8])
            raise CxlError(404, f"unknown node {name!r} (this agent serves: {served})")
        return node

    def topo(self, name: str) -> NodeTopology:
        topo = self._topos.get(name)
        if topo is None:
            topo = self._topos[name] = NodeTopology(self.system, self.node(name))
        return topo

    def core(self, name: str, fault_offline: frozenset[str] = frozenset()) -> CxlCore:
        return CxlCore(self.topo(name), name, fault_offline)

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
        return self.topo(node.name).memdev_id[name]

    # ------------------------------------------------------------------------------------------ boot

    def boot(self) -> CxlState:
        """The state the model describes: root decoders offering their first region ids, every memdev bound with
        the decoders firmware committed (boot regions assembled, committed and enabled), LDs as assigned."""
        state = CxlState()
        for name in sorted(self.served):
            core = self.core(name)
            state = core.settle(core.boot_root_ids(state))
        owners: dict[tuple[str, int], str] = {}
        for pool in self.system.cxl_pools:
            for ld, owner in pool.assignments:
                if owner in self.served:
                    owners[(pool.name, ld)] = owner
        state = replace(state, ld_owner=owners)
        for (pool_name, ld), owner in sorted(owners.items()):
            pool = self._pools[pool_name]
            node = self.system.node(owner)
            if node is None or not pool.window:
                continue
            state = self._add_pool_region(state, node, pool, ld * pool.ld_size, pool.ld_size, "pooled-ld", ld=ld)
        return state

    def settle(self, state: CxlState, node_name: str, fault_offline: frozenset[str]) -> CxlState:
        """The state once every endpoint follows its memdev's admin and fault state (faults change without a
        request: the platform settles on every render)."""
        return self.core(node_name, fault_offline).settle(state)

    # ------------------------------------------------------------------------------------------ views

    def view(self, state: CxlState, node_name: str, fault_offline: frozenset[str] = frozenset()) -> NodeCxlView:
        """The host's CXL devices and regions now; ``fault_offline``: memdevs a ``cxl-offline`` fault took down."""
        node = self.system.node(node_name)
        assert node is not None
        topo = self.topo(node_name)
        memdevs: list[MemdevView] = []
        for m in node.cxl.memdevs:
            memdevs.append(MemdevView(
                m.name, topo.memdev_id[m.name], m.ram_size, m.pmem_size, 0, m.serial, m.host_bridge, m.parent,
                _memdev_numa(node, m), (node_name, m.name) not in state.admin_offline, m.name not in fault_offline,
                qos_class=m.qos_class, bound=(node_name, m.name) in state.endpoints))
        pools: list[PoolHostView] = []
        for pool in self.pools_of(node_name):
            memdevs += self._pool_memdevs(state, node, pool)
            lds = tuple(sorted(ld for (p, ld), o in state.ld_owner.items() if p == pool.name and o == node_name))
            exts = tuple(sorted((e for e in state.extents.values() if e.pool == pool.name and e.node == node_name),
                                key=lambda e: e.offset))
            pools.append(PoolHostView(pool.name, pool.window, lds, tuple(e.id for e in exts),
                                      len(lds) * pool.ld_size + sum(e.length for e in exts)))
        regions = tuple(self._region_view(topo, r) for r in state.node_regions(node_name))
        numa_memory = dict.fromkeys(sorted({w.numa for w in node.cxl.windows if w.numa is not None}), 0)
        for rv in regions:
            if rv.memory_online and rv.target_node is not None:
                numa_memory[rv.target_node] = numa_memory.get(rv.target_node, 0) + rv.memory_online
        extents = tuple(sorted((e for e in state.extents.values() if e.node == node_name), key=lambda e: e.id))
        memdevs.sort(key=lambda m: m.sysfs_id)
        return NodeCxlView(node_name, tuple(memdevs), regions, extents, numa_memory, tuple(pools), state)

    @staticmethod
    def _region_view(topo: NodeTopology, r: Region) -> RegionView:
        window = topo.window(r.window)
        target = None if r.mode != "ram" or window is None else (r.numa if r.numa is not None else
                                                                  topo.target_node(window))
        active = r.committed and r.enabled
        kmem = active and r.mode == "ram" and r.dax == "kmem"
        return RegionView(r, active, online_bytes(r, topo.block) if kmem else 0, target)

    def _pool_memdevs(self, state: CxlState, node: Node, pool: CxlPool) -> list[MemdevView]:
        topo = self.topo(node.name)
        hb_name = port_host_bridge(node.cxl, pool.host_port)
        hb = next(h for h in node.cxl.host_bridges if h.name == hb_name)
        qos = self.pool_window(node, pool).qos_class
        lds = sorted(ld for (p, ld), o in state.ld_owner.items() if p == pool.name and o == node.name)
        out = [MemdevView(f"{pool.name}.ld{ld}", topo.memdev_id[f"{pool.name}.ld{ld}"], pool.ld_size, 0, 0,
                          _pool_serial(pool.name, ld), hb.name, pool.host_port, hb.numa, True, True, pool.name, ld,
                          qos) for ld in lds]
        out.append(MemdevView(f"{pool.name}.dcd", topo.memdev_id[f"{pool.name}.dcd"], 0, 0, pool.capacity,
                              _pool_serial(pool.name, -1), hb.name, pool.host_port, hb.numa, True, True, pool.name,
                              None, qos))
        return out

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
        """A region made the way ``cxl create-region`` makes one, store by store (see the module docstring);
        requests are checked first so the refusal names what is wrong in the request's terms."""
        node = self.node(node_name)
        window, devs = self._check_request(state, node, window_name, targets, mode)
        granularity = self._check_granularity(window, granularity)
        core = self.core(node_name, fault_offline)
        ordered = core.order_targets(window, [d.name for d in devs])
        indexes = {d.name: self._free_decoder(state, node_name, d) for d in devs}
        size = self._region_size(state, core, window, devs, mode, size)
        offered = state.root_ids.get((node_name, window.name))
        if name is not None:
            if not name.startswith("region") or not name.removeprefix("region").isdigit():
                raise CxlError(422, f"region names are regionN, not {name!r}")
            if (node_name, name) in state.regions:
                raise CxlError(409, f"node {node_name} already has {name}")
            if name != f"region{offered}":
                raise CxlError(409, f"window {window.name} offers region{offered} next, not {name} (the kernel "
                               "names regions)")
        region_name = f"region{offered}"
        try:
            s = state
            for d in devs:
                s = core._set_mode(s, d.name, indexes[d.name], mode)
                s = core._alloc_dpa(s, d.name, indexes[d.name], size // len(devs))
            s = core.create_region(s, window.name, mode, region_name)
            s = core.set_granularity(s, region_name, str(granularity))
            s = core.set_ways(s, region_name, str(len(devs)))
            if mode == "pmem":
                s = core.set_uuid(s, region_name, 37, str(uuid.uuid4()))
            s = core.set_size(s, region_name, str(size))
            for pos, t in enumerate(ordered):
                s = core._attach(s, core.region(s, region_name), pos, t, indexes[t])
            s = core.set_commit(s, region_name, "1")
            s = core.bind_region(s, region_name)
        except KernelError as exc:
            raise CxlError(_status(exc.errno), exc.message) from None
        return state_facts(state, s), core.region(s, region_name)

    def _check_request(self, state: CxlState, node: Node, window_name: str, targets: Sequence[str],
                       mode: str) -> tuple[CxlWindow, list[CxlMemdev]]:
        cxl = node.cxl
        window = next((w for w in cxl.windows if w.name == window_name), None)
        if window is None:
            known = ", ".join(w.name for w in cxl.windows) or "none"
            raise CxlError(404, f"node {node.name} has no CXL window {window_name!r} (windows: {known})")
        for pool in self.pools_of(node.name):
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
                raise CxlError(404, f"node {node.name} has no CXL memory device {t!r} (memdevs: {known})")
            devs.append(dev)
        if len(devs) not in CXL_INTERLEAVE_WAYS:
            raise CxlError(422, f"{len(devs)}-way interleave is not possible "
                           f"(ways: {', '.join(map(str, CXL_INTERLEAVE_WAYS))})")
        for dev in devs:
            if (node.name, dev.name) not in state.endpoints:
                raise CxlError(409, f"{dev.name} is offline; bring it online before putting it in a region")
            if dev.host_bridge not in window.targets:
                raise CxlError(422, f"{dev.name} sits under host bridge {dev.host_bridge}, which window "
                               f"{window.name} does not interleave ({', '.join(window.targets)}); memory devices "
                               "under different host bridges interleave only through a window that targets all of "
                               "them")
        wways = len(window.targets)
        per_hb = {hb: [d for d in devs if d.host_bridge == hb] for hb in window.targets}
        if len(devs) % wways or any(len(v) != len(devs) // wways for v in per_hb.values()):
            spread = ", ".join(f"{len(v)} under {hb}" for hb, v in per_hb.items())
            raise CxlError(422, f"window {window.name} interleaves {wways} host bridge(s); a region on it needs its "
                           f"targets spread evenly over them (got {spread})")
        return window, devs

    @staticmethod
    def _check_granularity(window: CxlWindow, granularity: int | None) -> int:
        if granularity is None:
            return window.root_granularity
        if granularity not in CXL_GRANULARITIES:
            raise CxlError(422, f"interleave granularity {granularity} is not possible (a power of two from 256 "
                           "to 16384 bytes)")
        if len(window.targets) > 1 and granularity != window.root_granularity:
            raise CxlError(422, f"window {window.name} interleaves {len(window.targets)} host bridges at "
                           f"{window.root_granularity} bytes; a region on it must use that granularity, not "
                           f"{granularity}")
        return granularity

    @staticmethod
    def _free_decoder(state: CxlState, node: str, dev: CxlMemdev) -> int:
        """The decoder a new region takes on ``dev``: the one after the last with DPA (allocations go in order)."""
        ds = state.endpoints[(node, dev.name)]
        nxt = max((i for i, d in enumerate(ds) if d.dpa_size or d.committed), default=-1) + 1
        if nxt >= len(ds):
            used = sorted({d.region for d in ds if d.region})
            raise CxlError(409, f"no free HDM decoder on the endpoint of {dev.name} ({len(ds)} of {len(ds)} in use"
                           f"{' by ' + ', '.join(used) if used else ''})")
        return nxt

    def _region_size(self, state: CxlState, core: CxlCore, window: CxlWindow, devs: list[CxlMemdev], mode: str,
                     size: int | None) -> int:
        ways = len(devs)
        free = {d.name: _dpa_free(state, core, d, mode) for d in devs}
        if size is None:
            per_way = min(free.values())
            per_way -= per_way % REGION_UNIT
            hole = _largest_hole(state, core, window)
            size = min(per_way * ways, hole - hole % (REGION_UNIT * ways))
            if size <= 0:
                raise CxlError(409, "no capacity left for a region on " + ", ".join(d.name for d in devs)
                               + f" in window {window.name}")
        if size <= 0 or size % (REGION_UNIT * ways):
            raise CxlError(422, f"region size must be a positive multiple of {size_text(REGION_UNIT * ways)} "
                           f"({size_text(REGION_UNIT)} per way x {ways} way(s)), not {size}")
        for d in devs:
            if free[d.name] < size // ways:
                total = d.ram_size if mode == "ram" else d.pmem_size
                raise CxlError(409, f"{d.name} has {size_text(free[d.name])} of {mode} capacity free (of "
                               f"{size_text(total)}); a {ways}-way region of {size_text(size)} needs "
                               f"{size_text(size // ways)} on each target")
        return size

    def destroy_region(self, state: CxlState, node_name: str, name: str) -> tuple[list[Fact], Region]:
        """What ``cxl destroy-region --force`` does: offline its memory, disable it, reset its decode, detach
        its targets, free their DPA (in the kernel's order, or refuse) and delete it."""
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
        core = self.core(node_name)
        try:
            s = with_region(state, replace(region, online=0))
            if region.enabled:
                s = core.unbind_region(s, name)
            s = core.set_commit(s, name, "0")
            held = [(t, region.decoders[pos]) for pos, t in enumerate(region.targets) if t]
            for pos in range(region.ways):
                s = core.set_target(s, name, pos, "")
            for memdev, index in held:
                s = self._free_dpa(core, s, name, memdev, index)
            s = core.delete_region(s, region.window, name)
        except KernelError as exc:
            raise CxlError(_status(exc.errno), exc.message) from None
        return state_facts(state, s), region

    @staticmethod
    def _free_dpa(core: CxlCore, s: CxlState, name: str, memdev: str, index: int) -> CxlState:
        try:
            return core.set_dpa_size(s, memdev, index, "0")
        except KernelError as exc:
            raise KernelError(exc.errno, f"destroying {name} frees its DPA on {memdev}, but {exc.message} (the "
                              "kernel frees a device's DPA newest first: destroy the newer region on it first)"
                              ) from None

    # ------------------------------------------------------------------------------------------ memdevs

    def set_memdev(self, state: CxlState, node_name: str, memdev: str, online: bool,
                   fault_offline: frozenset[str] = frozenset()) -> list[Fact]:
        node = self.node(node_name)
        if node.cxl.memdev(memdev) is None:
            known = ", ".join(m.name for m in node.cxl.memdevs) or "none"
            hint = " (pooled logical devices are assigned and released, not onlined)" if "." in memdev else ""
            raise CxlError(404, f"node {node_name} has no CXL memory device {memdev!r} (memdevs: {known}){hint}")
        if ((node_name, memdev) not in state.admin_offline) == online:
            return []
        new = self.core(node_name, fault_offline).set_memdev_admin(state, memdev, online)
        return state_facts(state, new)

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
        new = self._add_pool_region(state, node, pool, start, pool.ld_size, "pooled-ld", ld=ld)
        region = next(r for r in new.node_regions(node_name) if r.pool == pool.name and r.ld == ld)
        return [{"fact": "ld-assign", "pool": pool.name, "ld": ld, "node": node_name},
                *state_facts(state, new)], region

    def release_ld(self, state: CxlState, pool_name: str, ld: int, node_name: str | None = None) -> list[Fact]:
        pool = self._pool_for_change(pool_name)
        self._check_ld(pool, ld)
        owner = state.ld_owner.get((pool.name, ld))
        if owner is None:
            raise CxlError(409, f"logical device {ld} of {pool.name} is not assigned to any host")
        if node_name is not None and owner != node_name:
            raise CxlError(409, f"logical device {ld} of {pool.name} is held by {owner}, not {node_name}")
        new = self._remove_pool_regions(state, owner, lambda r: r.pool == pool.name and r.ld == ld)
        return [*state_facts(state, new), {"fact": "ld-release", "pool": pool.name, "ld": ld}]

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
        new = self._add_pool_region(state, node, pool, offset, length, "dcd-extent", extent=ext.id)
        return [{"fact": "extent-add", "extent": ext.to_json()}, *state_facts(state, new)], ext

    def release_extent(self, state: CxlState, pool_name: str, extent_id: str) -> tuple[list[Fact], Extent]:
        pool = self._pool_for_change(pool_name)
        ext = state.extents.get(extent_id)
        if ext is None or ext.pool != pool.name:
            known = ", ".join(e.id for e in state.extents.values() if e.pool == pool.name) or "none"
            raise CxlError(404, f"pool {pool.name} has no extent {extent_id!r} (extents: {known})")
        new = self._remove_pool_regions(state, ext.node, lambda r: r.extent == ext.id)
        return [*state_facts(state, new), {"fact": "extent-del", "id": ext.id}], ext

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

    def _add_pool_region(self, state: CxlState, node: Node, pool: CxlPool, offset: int, size: int,
                         origin: RegionOrigin, ld: int | None = None, extent: str | None = None) -> CxlState:
        """A region decoding pooled memory, as the kernel discovers one the fabric manager committed: it takes
        the region id its root decoder offers (which then offers the next free one), its memory online per the
        hotplug policy."""
        window = self.pool_window(node, pool)
        core = self.core(node.name)
        rid = state.root_ids.get((node.name, window.name), 0)
        target = f"{pool.name}.dcd" if origin == "dcd-extent" else f"{pool.name}.ld{ld}"
        blocks = kmem_blocks(core.topo.bases[window.name] + offset, size, core.topo.block)
        online = 0 if node.cxl.hotplug_online == "offline" else (1 << len(blocks)) - 1
        region = Region(node.name, f"region{rid}", window.name, (target,), window.root_granularity, "ram", size,
                        offset, (offset if origin == "dcd-extent" else 0,), window.numa, origin, "", pool.name, ld,
                        extent, dax="kmem" if blocks else "", online=online)
        state = with_region(state, region)
        state = replace(state, root_ids={**state.root_ids, (node.name, window.name): -1})
        return core._fill_root_ids(state)

    def _remove_pool_regions(self, state: CxlState, node: str, which: Any) -> CxlState:
        core = self.core(node)
        for r in state.node_regions(node):
            if which(r):
                state = core.remove_region(state, r)
        return state


def _dpa_free(state: CxlState, core: CxlCore, dev: CxlMemdev, mode: str) -> int:
    """Bytes a new allocation in ``mode`` can take on ``dev``: from the end of that partition's allocations."""
    from fakehw.agent.cxlcore import _last_end

    start, size = core.topo.partitions(dev)[mode]
    ds = state.endpoints.get((core.node, dev.name), ())
    return start + size - _last_end(ds, start, size) if size else 0


def _largest_hole(state: CxlState, core: CxlCore, window: CxlWindow) -> int:
    taken = sorted((r.hpa_offset, r.size) for r in core.regions(state) if r.window == window.name and r.size)
    return max((length for _, length in _holes(taken, 0, window.size)), default=0)


def _memdev_numa(node: Node, m: CxlMemdev) -> int:
    hb = next(h for h in node.cxl.host_bridges if h.name == m.host_bridge)
    return m.numa if m.numa is not None else hb.numa


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
    """The lowest region number not in ``used``."""
    taken = set(used)
    return next(i for i in range(len(taken) + 1) if i not in taken)


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
