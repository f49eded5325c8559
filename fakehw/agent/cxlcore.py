"""The kernel's CXL core for one node: every sysfs store the kernel acts on, as a function of :class:`CxlState`.

Each operation takes the state and returns the state after it, or raises :class:`KernelError` with the errno the
kernel's store returns (a refused write changes nothing; the one exception the kernel itself makes, a
``dpa_size`` write whose new allocation fails after the old one was released, carries the released state in
``KernelError.keep``). The rules, with their source (drivers/cxl/core/{region,hdm,port,memdev}.c, drivers/dax):

- endpoint decoders: ``mode`` selects the partition (EBUSY while committed, ENXIO for a partition without
  capacity); ``dpa_size`` frees, then allocates from the end of the partition's allocations, giving up the free
  tail of lower partitions (``skip``); allocation happens in increasing, freeing in decreasing decoder order
  (EBUSY otherwise), 256 MiB aligned (EINVAL), never while attached to a region or committed (EBUSY), ENOSPC when
  the partition has no room;
- regions: ``create_*_region`` takes the id the root decoder offers (EBUSY for any other); ``uuid`` (PMEM),
  ``interleave_ways`` and ``interleave_granularity`` may change until HPA is allocated (EBUSY after); ``size``
  allocates HPA from the window (needs ways, granularity and, for PMEM, a uuid: ENXIO; a multiple of 256 MiB per
  way: EINVAL; no room: ERANGE); ``targetN`` attaches an endpoint decoder at position N (the decoder's mode, DPA
  size x ways = region size, the window's host bridge at N mod ways, a free HDM decoder on every port on the way
  with regions in HPA order) and, once every position is filled, programs every port (power-of-two targets, each
  dport hosting positions a fixed distance apart, granularity x ways of the port above); ``commit`` commits every
  decoder bottom up, each the next in its port's order (EBUSY), or resets them; a region binds to
  ``cxl_region`` only when committed (ENXIO) and then gets its DAX region (RAM, device bound to kmem, memory
  onlined per the hotplug policy) or PMEM region; ``delete_region`` unbinds, detaches and frees the HPA;
- memdevs, ports, bus: unbinding ``cxl_mem`` removes the device's endpoint (its decoders and DPA; regions lose
  the target and are reset); unbinding a port unbinds every memdev below; a switch port exists while a device
  below it is bound; unbinding ``cxl_acpi`` removes the whole hierarchy and its regions.

Where the kernel would leak (a DAX device whose memory is still online losing its region or its kmem driver),
the store is refused with EBUSY instead; see docs/platform.md.
"""

from __future__ import annotations

import errno
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from fakehw.agent.cxlstate import STATE_ORDER, CxlState, DaxDriver, EndpointDecoder, Region, with_region
from fakehw.agent.cxltopo import Hop, NodeTopology
from fakehw.model.memblock import kmem_blocks
from fakehw.model.system import CxlMemdev, CxlWindow

MiB = 2**20
SZ_256M = 256 * MiB
GRANULARITIES = (256, 512, 1024, 2048, 4096, 8192, 16384)
ROOT_WAYS = (1, 2, 3, 4, 6, 8, 12, 16)
PORT_WAYS = (1, 2, 4, 8, 16)
PORT_MAX_WAYS = 8
"""A switch or host bridge decoder interleaves at most 8 targets (cxl_port_setup_targets)."""


class KernelError(Exception):
    """A store the kernel refuses: ``errno`` is what ``write(2)`` returns. ``keep``: state the kernel changed
    before it refused (rare; see ``dpa_size``)."""

    def __init__(self, code: int, message: str, keep: CxlState | None = None):
        super().__init__(message)
        self.errno = code
        self.message = message
        self.keep = keep


def _err(code: int, message: str) -> KernelError:
    return KernelError(code, message)


# --------------------------------------------------------------------------------------------------- parsing


def parse_uint(text: str, what: str) -> int:
    """kstrtou64(buf, 0): decimal, 0x hex or 0 octal, one trailing newline (already dropped); EINVAL/ERANGE."""
    s = text.strip() if text.endswith(" ") else text
    try:
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", s):
            value = int(s, 16)
        elif re.fullmatch(r"0[0-7]*", s):
            value = int(s, 8)
        elif re.fullmatch(r"\+?[1-9][0-9]*", s):
            value = int(s)
        else:
            raise ValueError
    except ValueError:
        raise _err(errno.EINVAL, f"{what}: {text!r} is not a number") from None
    if value >= 2**64:
        raise _err(errno.ERANGE, f"{what}: {text} is out of range")
    return value


def parse_bool(text: str, what: str) -> bool:
    """kstrtobool: y/Y/1/t/T/on true, n/N/0/f/F/off false; EINVAL otherwise."""
    if text[:1] in ("y", "Y", "1", "t", "T"):
        return True
    if text[:1] in ("n", "N", "0", "f", "F"):
        return False
    if text[:2].lower() == "on":
        return True
    if text[:3].lower() == "off":
        return False
    raise _err(errno.EINVAL, f"{what}: {text!r} is not a boolean")


# --------------------------------------------------------------------------------------------------- programming


@dataclass(frozen=True, slots=True)
class PortProgram:
    """How a region programs the HDM decoder it holds on a host bridge or switch port."""

    ways: int
    granularity: int
    targets: tuple[int, ...]
    """dport ids in decode order."""


class CxlCore:
    """The kernel's CXL rules for node ``node`` (topology ``topo``); ``fault_offline``: memdevs a fault holds
    down (they cannot bind)."""

    def __init__(self, topo: NodeTopology, node: str, fault_offline: frozenset[str] = frozenset()):
        self.topo = topo
        self.node = node
        self.fault_offline = fault_offline
        self.policy = topo.cxl.hotplug_online

    # ------------------------------------------------------------------------------------------ lookups

    def regions(self, state: CxlState) -> list[Region]:
        return state.node_regions(self.node)

    def region(self, state: CxlState, name: str) -> Region:
        r = state.regions.get((self.node, name))
        if r is None:
            raise _err(errno.ENODEV, f"no region {name}")
        return r

    def memdev(self, name: str) -> CxlMemdev:
        m = self.topo.memdevs.get(name)
        if m is None:
            raise _err(errno.ENODEV, f"no memory device {name}")
        return m

    def window(self, name: str) -> CxlWindow:
        w = self.topo.window(name)
        if w is None:
            raise _err(errno.ENODEV, f"no root decoder for window {name}")
        return w

    def decoders(self, state: CxlState, memdev: str) -> tuple[EndpointDecoder, ...]:
        ds = state.decoders(self.node, memdev)
        if ds is None:
            raise _err(errno.ENODEV, f"{memdev} has no endpoint (not bound to cxl_mem)")
        return ds

    # ------------------------------------------------------------------------------------------ presence

    def bus_enabled(self, state: CxlState) -> bool:
        return self.node not in state.buses_disabled

    def port_enabled(self, state: CxlState, hb: str) -> bool:
        return self.bus_enabled(state) and (self.node, hb) not in state.ports_disabled

    def can_bind(self, state: CxlState, memdev: CxlMemdev) -> str | None:
        """Why ``cxl_mem`` cannot probe the memdev now (None: it can)."""
        if not self.bus_enabled(state):
            return "the CXL root is not enabled (cxl_acpi unbound)"
        hb = self.topo.hbs[memdev.host_bridge]
        if not hb.restricted and not self.port_enabled(state, hb.name):
            return f"port of host bridge {hb.name} is not enabled (cxl_port unbound)"
        if memdev.name in self.fault_offline:
            return "the device does not respond (cxl-offline fault)"
        return None

    def wanted(self, state: CxlState, memdev: CxlMemdev) -> bool:
        return (self.node, memdev.name) not in state.admin_offline and self.can_bind(state, memdev) is None

    def settle(self, state: CxlState) -> CxlState:
        """Bind and unbind endpoints until every memdev's endpoint exists exactly when it should (after admin
        changes, faults, port and bus changes): departed devices are detached from their regions, returning ones
        get fresh decoders (and the ones firmware commits, re-assembling their regions)."""
        for m in self.topo.cxl.memdevs:
            have = (self.node, m.name) in state.endpoints
            want = self.wanted(state, m)
            if have and not want:
                state = self.remove_endpoint(state, m.name)
        for m in self.topo.cxl.memdevs:
            if (self.node, m.name) not in state.endpoints and self.wanted(state, m):
                state = self.add_endpoint(state, m)
        return state

    def remove_endpoint(self, state: CxlState, memdev: str) -> CxlState:
        for d in self.decoders(state, memdev):
            if d.region:
                state = self._detach(state, self.region(state, d.region), d.position, forced=True)
        endpoints = dict(state.endpoints)
        endpoints.pop((self.node, memdev), None)
        return replace(state, endpoints=endpoints)

    def add_endpoint(self, state: CxlState, memdev: CxlMemdev) -> CxlState:
        state = replace(state, endpoints={**state.endpoints,
                                          (self.node, memdev.name): (EndpointDecoder(),) * memdev.decoders})
        for plan in self.firmware_plan(memdev):
            state = self._firmware_decoder(state, memdev, plan)
        return state

    # ------------------------------------------------------------------------------------------ firmware

    def firmware_plan(self, memdev: CxlMemdev) -> list[tuple[str, int, int]]:
        """Decoders platform firmware commits on ``memdev`` (boot regions): (region, position, decoder index)."""
        out: list[tuple[str, int, int]] = []
        for r in self.topo.cxl.regions:
            if memdev.name in r.targets:
                window = self.topo.windows[r.window]
                order = self.order_targets(window, list(r.targets))
                out.append((r.name, order.index(memdev.name), len(out)))
        return out

    def _firmware_decoder(self, state: CxlState, memdev: CxlMemdev, plan: tuple[str, int, int]) -> CxlState:
        """Commit a firmware decoder (DPA reserved as firmware programmed it) and add it to its region: found by
        name, else constructed as the kernel constructs an auto-discovered region; a complete region is
        assembled, committed and enabled as firmware left it."""
        name, position, index = plan
        spec = next(r for r in self.topo.cxl.regions if r.name == name)
        per_target = spec.size // len(spec.targets)
        if index >= memdev.decoders:
            return state
        try:
            state = self._set_mode(state, memdev.name, index, spec.mode)
            state = self._alloc_dpa(state, memdev.name, index, per_target)
        except KernelError:
            return state  # firmware's DPA is taken by the OS's allocations: the decoder stays uncommitted
        region = state.regions.get((self.node, name))
        if region is None:
            state = self._construct(state, spec.window, name, spec.mode, len(spec.targets),
                                    spec.interleave_granularity, spec.size, spec.numa)
            region = self.region(state, name)
        if region.origin != "boot" or region.ways != len(spec.targets) or region.size != spec.size:
            return state
        try:
            state = self._attach(state, region, position, memdev.name, index)
        except KernelError:
            return state
        region = self.region(state, name)
        if region.state == "active":
            try:
                state = self._commit(state, region)
                state = self._bind_region(state, self.region(state, name))
            except KernelError:
                return state
        decs = list(self.decoders(state, memdev.name))
        decs[index] = replace(decs[index], auto=True)
        return replace(state, endpoints={**state.endpoints, (self.node, memdev.name): tuple(decs)})

    def _construct(self, state: CxlState, window: str, name: str, mode: str, ways: int, granularity: int,
                   size: int, numa: int | None) -> CxlState:
        """An auto-discovered region: its id (the model's name) taken, the window's HPA the firmware decoded. A pmem
        one has no uuid (the null UUID in sysfs): region.c construct_region never sets ``p->uuid``, which only
        uuid_store writes, and no label supplies one."""
        w = self.window(window)
        rid = int(name.removeprefix("region"))
        ids = dict(state.root_ids)
        for (n, win), cached in state.root_ids.items():
            if n == self.node and cached == rid:
                ids[(n, win)] = -1
        state = replace(state, root_ids=ids)
        region = Region(self.node, name, w.name, ("",) * ways, granularity, "pmem" if mode == "pmem" else "ram",
                        0, 0, (0,) * ways, numa if mode == "ram" else None, "boot", "",
                        decoders=(-1,) * ways, state="idle", enabled=False, dax="", online=0)
        state = with_region(state, region)
        offset = self._free_hpa(state, w, size)
        if offset is not None:
            state = with_region(state, replace(region, size=size, hpa_offset=offset, state="interleave"))
        return self._fill_root_ids(state)

    def boot_root_ids(self, state: CxlState) -> CxlState:
        """Every root decoder offers the lowest free region id, in window order (memregion_alloc at probe)."""
        ids = {k: v for k, v in state.root_ids.items() if k[0] != self.node}
        state = replace(state, root_ids=ids)
        for w in self.topo.cxl.windows:
            state = replace(state, root_ids={**state.root_ids, (self.node, w.name): -1})
        return self._fill_root_ids(state)

    def _fill_root_ids(self, state: CxlState) -> CxlState:
        """Give every root decoder without an id (-1) the lowest free one, in window order."""
        ids = dict(state.root_ids)
        for w in self.topo.cxl.windows:
            key = (self.node, w.name)
            if ids.get(key, -1) < 0:
                ids[key] = self._free_id(state, ids)
        return replace(state, root_ids=ids)

    def _free_id(self, state: CxlState, ids: Mapping[tuple[str, str], int]) -> int:
        used = {r.id for r in self.regions(state)} | {v for (n, _), v in ids.items() if n == self.node}
        return next(i for i in range(len(used) + 1) if i not in used)

    # ------------------------------------------------------------------------------------------ positions

    def order_targets(self, window: CxlWindow, targets: list[str]) -> list[str]:
        """Interleave positions the kernel can decode: position i under the window's host bridge i mod ways,
        and below each port, consecutive positions over its dports in turn (round robin)."""
        devs = {m: self.topo.memdevs[m] for m in targets if m in self.topo.memdevs}
        if len(devs) != len(targets):
            return list(targets)
        per_hb: dict[str, list[str]] = {hb: [] for hb in window.targets}
        for t in targets:
            per_hb.setdefault(devs[t].host_bridge, []).append(t)
        for hb, names in per_hb.items():
            per_hb[hb] = self._round_robin(names, 0)
        out: list[str] = []
        hbs = list(window.targets)
        for i in range(len(targets)):
            queue = per_hb.get(hbs[i % len(hbs)])
            if not queue:  # an uneven spread: the kernel refuses it; keep the given order
                return list(targets)
            out.append(queue.pop(0))
        return out

    def _round_robin(self, names: list[str], level: int) -> list[str]:
        """Order ``names`` (all under one port at ``level`` of their hops) so that consecutive positions go to
        the port's dports in turn, recursively below."""
        groups: dict[int, list[str]] = {}
        for n in sorted(names, key=lambda n: self.topo.memdev_id[n]):
            hops = self.topo.hops(self.topo.memdevs[n])
            key = hops[level].dport_id if level < len(hops) else -1
            groups.setdefault(key, []).append(n)
        queues = [self._round_robin(g, level + 1) if len(g) > 1 else g for _, g in sorted(groups.items())]
        merged: list[str] = []
        while any(queues):
            for q in queues:
                if q:
                    merged.append(q.pop(0))
        return merged

    # ------------------------------------------------------------------------------------------ DPA

    def set_mode(self, state: CxlState, memdev: str, index: int, text: str) -> CxlState:
        if text not in ("ram", "pmem"):
            raise _err(errno.EINVAL, f"mode {text!r}: write ram or pmem")
        return self._set_mode(state, memdev, index, text)

    def _set_mode(self, state: CxlState, memdev: str, index: int, mode: str) -> CxlState:
        d = self._decoder(state, memdev, index)
        if d.committed:
            raise _err(errno.EBUSY, f"{memdev} decoder {index} is committed")
        _, size = self.topo.partitions(self.memdev(memdev))[mode]
        if size == 0:
            raise _err(errno.ENXIO, f"{memdev} has no {mode} capacity")
        return self._put(state, memdev, index, replace(d, mode="ram" if mode == "ram" else "pmem"))

    def set_dpa_size(self, state: CxlState, memdev: str, index: int, text: str) -> CxlState:
        size = parse_uint(text, "dpa_size")
        if size % SZ_256M:
            raise _err(errno.EINVAL, f"dpa_size {size:#x} is not a multiple of 256 MiB")
        state = self._free_dpa(state, memdev, index)
        if size == 0:
            return state
        freed = state
        try:
            return self._alloc_dpa(state, memdev, index, size)
        except KernelError as exc:
            raise KernelError(exc.errno, exc.message, keep=freed) from None

    def _decoder(self, state: CxlState, memdev: str, index: int) -> EndpointDecoder:
        ds = self.decoders(state, memdev)
        if not 0 <= index < len(ds):
            raise _err(errno.ENODEV, f"{memdev} has no decoder {index}")
        return ds[index]

    def _put(self, state: CxlState, memdev: str, index: int, d: EndpointDecoder) -> CxlState:
        ds = list(self.decoders(state, memdev))
        ds[index] = d
        return replace(state, endpoints={**state.endpoints, (self.node, memdev): tuple(ds)})

    def _free_dpa(self, state: CxlState, memdev: str, index: int) -> CxlState:
        d = self._decoder(state, memdev, index)
        if d.dpa_size == 0:
            return state
        if d.region:
            raise _err(errno.EBUSY, f"{memdev} decoder {index} is attached to {d.region}")
        if d.committed:
            raise _err(errno.EBUSY, f"{memdev} decoder {index} is committed")
        end = _hdm_end(self.decoders(state, memdev))
        if index != end:
            raise _err(errno.EBUSY, f"DPA is freed in decreasing decoder order: free decoder {end} first")
        return self._put(state, memdev, index, replace(d, dpa_base=0, dpa_size=0, skip=0))

    def _alloc_dpa(self, state: CxlState, memdev: str, index: int, size: int) -> CxlState:
        d = self._decoder(state, memdev, index)
        if d.region:
            raise _err(errno.EBUSY, f"{memdev} decoder {index} is attached to {d.region}")
        if d.committed:
            raise _err(errno.EBUSY, f"{memdev} decoder {index} is committed")
        if d.mode == "none":
            raise _err(errno.EBUSY, f"{memdev} decoder {index} has no mode (partition) set")
        ds = self.decoders(state, memdev)
        parts = self.topo.partitions(self.memdev(memdev))
        order = [m for m in ("ram", "pmem") if parts[m][1]]
        pstart, psize = parts[d.mode]
        start = _last_end(ds, pstart, psize)
        skip_start: int | None = None
        for lower in reversed(order[:order.index(d.mode)]):
            lstart, lsize = parts[lower]
            end = _last_end(ds, lstart, lsize)
            skip_start = end
            if end != lstart:
                break
        skip = pstart - skip_start if skip_start is not None else 0
        avail = pstart + psize - start
        if size > avail:
            raise _err(errno.ENOSPC, f"{size:#x} exceeds the {avail:#x} of {d.mode} capacity left on {memdev}")
        end = _hdm_end(ds)
        if index != end + 1:
            raise _err(errno.EBUSY, f"DPA is allocated in increasing decoder order: the next is decoder {end + 1}")
        return self._put(state, memdev, index, replace(d, dpa_base=start, dpa_size=size, skip=skip))

    # ------------------------------------------------------------------------------------------ regions

    def create_region(self, state: CxlState, window: str, mode: str, text: str) -> CxlState:
        w = self.window(window)
        m = re.match(r"region(-?\d+)", text.lstrip())
        if m is None:
            raise _err(errno.EINVAL, f"{text!r}: write the name read from this attribute (regionN)")
        rid = int(m.group(1))
        cached = state.root_ids.get((self.node, w.name))
        if cached is None or rid != cached:
            raise _err(errno.EBUSY, f"region{rid} is not the region this root decoder offers (region{cached})")
        if (mode == "ram" and not w.ram) or (mode == "pmem" and not w.pmem):
            raise _err(errno.ENOENT, f"window {w.name} does not decode {mode} memory (no create_{mode}_region)")
        region = Region(self.node, f"region{rid}", w.name, (), 0, "pmem" if mode == "pmem" else "ram", 0, 0, (),
                        self.topo.target_node(w) if mode == "ram" else None, "runtime", "", decoders=(),
                        state="idle", enabled=False, dax="", online=0)
        state = with_region(state, region)
        state = replace(state, root_ids={**state.root_ids, (self.node, w.name): -1})
        return self._fill_root_ids(state)

    def set_uuid(self, state: CxlState, name: str, raw_len: int, text: str) -> CxlState:
        r = self.region(state, name)
        if raw_len != 37:
            raise _err(errno.EINVAL, "uuid: write the 36-character UUID and a newline (or NUL)")
        try:
            value = str(uuid.UUID(text))
        except ValueError:
            raise _err(errno.EINVAL, f"uuid: {text!r} is not a UUID") from None
        if value == str(uuid.UUID(int=0)):
            raise _err(errno.EINVAL, "uuid: the null UUID is not allowed")
        if value == r.uuid:
            return state
        if STATE_ORDER[r.state] >= STATE_ORDER["active"]:
            raise _err(errno.EBUSY, f"{name} is active")
        if any(o.uuid == value for o in self.regions(state) if o.name != name):
            raise _err(errno.EBUSY, f"another region already has uuid {value}")
        return with_region(state, replace(r, uuid=value))

    def set_ways(self, state: CxlState, name: str, text: str) -> CxlState:
        r = self.region(state, name)
        ways = parse_uint(text, "interleave_ways")
        if ways >= 2**32:
            raise _err(errno.ERANGE, f"interleave_ways {text} is out of range")
        root = len(self.window(r.window).targets)
        if ways not in ROOT_WAYS:
            raise _err(errno.EINVAL, f"{ways}-way interleave is not possible ({', '.join(map(str, ROOT_WAYS))})")
        if ways % root or (ways // root) & (ways // root - 1):
            raise _err(errno.EINVAL, f"{ways} ways is not a power-of-two multiple of the window's {root} ways")
        if STATE_ORDER[r.state] >= STATE_ORDER["interleave"]:
            raise _err(errno.EBUSY, f"{name} already has its address space; free it (size 0) first")
        return with_region(state, replace(r, targets=("",) * ways, decoders=(-1,) * ways, dpa_offsets=(0,) * ways))

    def set_granularity(self, state: CxlState, name: str, text: str) -> CxlState:
        r = self.region(state, name)
        value = parse_uint(text, "interleave_granularity")
        if value >= 2**31:
            raise _err(errno.ERANGE, f"interleave_granularity {text} is out of range")
        if value not in GRANULARITIES:
            raise _err(errno.EINVAL, f"granularity {value} is not a power of two from 256 to 16384")
        w = self.window(r.window)
        if len(w.targets) > 1 and value != w.root_granularity:
            raise _err(errno.EINVAL, f"window {w.name} interleaves host bridges at {w.root_granularity}: a region "
                       "on it must use that granularity")
        if STATE_ORDER[r.state] >= STATE_ORDER["interleave"]:
            raise _err(errno.EBUSY, f"{name} already has its address space; free it (size 0) first")
        return with_region(state, replace(r, granularity=value))

    def set_size(self, state: CxlState, name: str, text: str) -> CxlState:
        r = self.region(state, name)
        size = parse_uint(text, "size")
        if size == 0:
            if not r.size:
                return state
            if STATE_ORDER[r.state] >= STATE_ORDER["active"]:
                raise _err(errno.EBUSY, f"{name} is active: detach its targets first")
            return with_region(state, replace(r, size=0, hpa_offset=0, state="idle"))
        if r.size == size:
            return state
        if r.size:
            raise _err(errno.EBUSY, f"{name} has {r.size:#x} already: write 0 first")
        if not r.ways or not r.granularity or (r.mode == "pmem" and not r.uuid):
            needs = "interleave_ways, interleave_granularity" + (" and uuid" if r.mode == "pmem" else "")
            raise _err(errno.ENXIO, f"set {needs} first")
        if size % (SZ_256M * r.ways):
            raise _err(errno.EINVAL, f"size {size:#x} is not a multiple of 256 MiB x {r.ways} ways")
        offset = self._free_hpa(state, self.window(r.window), size)
        if offset is None:
            raise _err(errno.ERANGE, f"window {r.window} has no free {size:#x} of address space")
        return with_region(state, replace(r, size=size, hpa_offset=offset, state="interleave"))

    def _free_hpa(self, state: CxlState, w: CxlWindow, size: int) -> int | None:
        """First fit, 256 MiB aligned, in the window's address space (alloc_free_mem_region)."""
        taken = sorted((r.hpa_offset, r.size) for r in self.regions(state) if r.window == w.name and r.size)
        cur = 0
        for start, length in [*taken, (w.size, 0)]:
            if start - cur >= size:
                return cur
            cur = max(cur, -(-(start + length) // SZ_256M) * SZ_256M)
        return None

    # ------------------------------------------------------------------------------------------ targets

    def set_target(self, state: CxlState, name: str, position: int, text: str) -> CxlState:
        r = self.region(state, name)
        if text == "":
            if position >= r.ways:
                raise _err(errno.ENXIO, f"{name} has {r.ways} positions")
            if not r.targets[position]:
                return state
            return self._detach(state, r, position, forced=False)
        memdev, index = self.endpoint_decoder_named(text)
        return self._attach(state, r, position, memdev, index)

    def endpoint_decoder_named(self, text: str) -> tuple[str, int]:
        """The endpoint decoder ``decoderE.N`` names: ENODEV if no such device, EINVAL if not an endpoint's."""
        m = re.fullmatch(r"decoder(\d+)\.(\d+)", text)
        if m is None:
            raise _err(errno.ENODEV, f"no device {text!r} on the cxl bus")
        port, index = int(m.group(1)), int(m.group(2))
        memdev = self.topo.memdev_of_endpoint(port)
        if memdev is None or memdev not in self.topo.memdevs:
            if port == 0 or port in self.topo.port_by_id:
                raise _err(errno.EINVAL, f"{text} is not an endpoint decoder")
            raise _err(errno.ENODEV, f"no device {text} on the cxl bus")
        return memdev, index

    def _attach(self, state: CxlState, r: Region, pos: int, memdev: str, index: int) -> CxlState:
        ds = state.decoders(self.node, memdev)
        if ds is None or not 0 <= index < len(ds):
            raise _err(errno.ENODEV, f"no device decoder{self.topo.endpoint_id(memdev)}.{index} on the cxl bus")
        d = ds[index]
        dev = self.topo.memdevs[memdev]
        w = self.window(r.window)
        if d.mode != r.mode:
            raise _err(errno.EINVAL, f"decoder mode {d.mode} does not match the {r.mode} region")
        if STATE_ORDER[r.state] > STATE_ORDER["interleave"]:
            raise _err(errno.EBUSY, f"{r.name} is already active")
        if r.state != "interleave":
            raise _err(errno.ENXIO, f"{r.name} has no address space yet (set its size)")
        if dev.host_bridge not in w.targets:
            raise _err(errno.ENXIO, f"{memdev} is below host bridge {dev.host_bridge}, which window {w.name} does "
                       "not decode")
        if not d.dpa_size:
            raise _err(errno.ENXIO, f"decoder {index} of {memdev} has no DPA allocated")
        if d.dpa_size * r.ways != r.size:
            raise _err(errno.EINVAL, f"DPA {d.dpa_size:#x} x {r.ways} ways is not the region size {r.size:#x}")
        if not 0 <= pos < r.ways:
            raise _err(errno.ENXIO, f"position {pos} is out of range ({r.ways} ways)")
        if r.targets[pos] == memdev and r.decoders[pos] == index:
            return state
        if r.targets[pos]:
            raise _err(errno.EBUSY, f"position {pos} already holds {r.targets[pos]}")
        if memdev in r.targets:
            raise _err(errno.EBUSY, f"{memdev} is already at position {r.targets.index(memdev)}")
        if w.targets[pos % len(w.targets)] != dev.host_bridge:
            raise _err(errno.ENXIO, f"position {pos} of window {w.name} decodes to host bridge "
                       f"{w.targets[pos % len(w.targets)]}, not {dev.host_bridge}")
        if d.region:
            raise _err(errno.EBUSY, f"decoder {index} of {memdev} is attached to {d.region}")
        state = self._attach_ports(state, r, dev)
        targets, decs, dpas = list(r.targets), list(r.decoders), list(r.dpa_offsets)
        targets[pos], decs[pos], dpas[pos] = memdev, index, d.dpa_base
        r2 = replace(r, targets=tuple(targets), decoders=tuple(decs), dpa_offsets=tuple(dpas))
        state = with_region(state, r2)
        state = self._put(state, memdev, index, replace(d, region=r.name, position=pos))
        if r2.complete:
            self.check_programming(state, r2)
            state = with_region(state, replace(r2, state="active"))
        return state

    def _attach_ports(self, state: CxlState, r: Region, dev: CxlMemdev) -> CxlState:
        """Take (or share) an HDM decoder for the region on every port between the device and the root, bottom
        up: regions on a port must come in HPA order, and the lowest free decoder is taken (EBUSY: none)."""
        for hop in reversed(self.topo.hops(dev)):
            slots = state.port_slots.get((self.node, hop.port), ("",) * self.topo.port_decoders(hop.port))
            if r.name in slots:
                continue
            for other in slots:
                o = state.regions.get((self.node, other)) if other else None
                if o is not None and (self.base(o) > self.base(r)):
                    raise _err(errno.EBUSY, f"{o.name} at a higher address already holds a decoder of port "
                               f"{hop.port}: regions take a port's decoders in address order")
            free = next((i for i, s in enumerate(slots) if not s), None)
            if free is None:
                used = ", ".join(s for s in slots if s)
                raise _err(errno.EBUSY, f"no free HDM decoder on {self.port_kind(hop.port)} {hop.port} ({len(slots)} "
                           f"of {len(slots)} in use by {used})")
            new = list(slots)
            new[free] = r.name
            state = replace(state, port_slots={**state.port_slots, (self.node, hop.port): tuple(new)})
        return state

    def base(self, r: Region) -> int:
        return self.topo.bases[r.window] + r.hpa_offset

    def blocks(self, r: Region) -> range:
        """The memory blocks kmem hot-adds for RAM region ``r`` (bit i of ``r.online`` is the i-th of them)."""
        return kmem_blocks(self.base(r), r.size, self.topo.block)

    def port_kind(self, port: str) -> str:
        return "host bridge" if port in self.topo.hbs else "switch"

    def programming(self, r: Region) -> dict[str, PortProgram]:
        """How the (complete) region programs each port decoder it holds, as cxl_port_setup_targets would; raises
        KernelError when the kernel would refuse the decode."""
        w = self.window(r.window)
        root_ways = len(w.targets)
        parent_iw = root_ways if root_ways & (root_ways - 1) == 0 else root_ways // 3
        members = [(pos, self.topo.memdevs[t]) for pos, t in enumerate(r.targets) if t]
        rch = [m for _, m in members if self.topo.hbs[m.host_bridge].restricted]
        if rch and len(rch) != len(members):
            raise _err(errno.ENXIO, "a region cannot mix restricted (RCH) and virtual-hierarchy devices")
        out: dict[str, PortProgram] = {}
        hops = {pos: self.topo.hops(m) for pos, m in members}
        for level in (0, 1):
            ports = sorted({h[level].port for h in hops.values() if len(h) > level})
            for port in ports:
                at = [(pos, h[level]) for pos, h in sorted(hops.items()) if len(h) > level and h[level].port == port]
                dports: list[int] = []
                for _, hop in at:
                    if hop.dport_id not in dports:
                        dports.append(hop.dport_id)
                iw = len(dports)
                if iw & (iw - 1):
                    raise _err(errno.EINVAL, f"port {port} would interleave {iw} targets (a power of two only)")
                if level == 0:
                    pig, piw = r.granularity, parent_iw
                else:
                    parent = out[self.topo.hb_of_rp[self.topo.switches[port].parent]]
                    pig, piw = parent.granularity, parent.ways
                ig = pig * piw
                if ig not in GRANULARITIES:
                    raise _err(errno.EINVAL, f"port {port} would need granularity {ig} ({pig} x {piw} ways above)")
                if iw > PORT_MAX_WAYS or iw > len(self.topo.port_dports(port)):
                    raise _err(errno.ENXIO, f"port {port} would interleave {iw} targets")
                self._check_distance(r, root_ways, out, port, level, at, iw)
                out[port] = PortProgram(iw, ig, tuple(dports))
        return out

    def _check_distance(self, r: Region, root_ways: int, done: Mapping[str, PortProgram], port: str, level: int,
                        at: Sequence[tuple[int, Hop]], iw: int) -> None:
        """Positions sharing a dport must be ``distance`` apart: this port's ways times every port's above and
        the window's (check_last_peer)."""
        distance = iw * root_ways
        if level == 1:
            distance *= done[self.topo.hb_of_rp[self.topo.switches[port].parent]].ways
        seen: set[int] = set()
        for pos, hop in at:
            if hop.dport_id in seen:
                if pos < distance or self._hop_at(r, pos - distance, level) != hop:
                    raise _err(errno.ENXIO, f"position {pos} ({r.targets[pos]}) cannot share port {port}'s dport "
                               f"{hop.dport_id} with the position {distance} before it")
            else:
                seen.add(hop.dport_id)

    def _hop_at(self, r: Region, pos: int, level: int) -> Hop | None:
        if not r.targets[pos]:
            return None
        hops = self.topo.hops(self.topo.memdevs[r.targets[pos]])
        return hops[level] if len(hops) > level else None

    def check_programming(self, state: CxlState, r: Region) -> None:
        self.programming(r)

    def _detach(self, state: CxlState, r: Region, pos: int, forced: bool) -> CxlState:
        """Take the target at ``pos`` out of the region: a committed region is reset first (its driver released),
        ports below which no target remains give their decoder back."""
        if r.enabled:
            if not forced and r.online:
                raise _err(errno.EBUSY, f"{r.name} has memory online: offline it first")
            state = self._release_driver(state, r)
            r = self.region(state, r.name)
        if r.committed:
            state = self._reset(state, r)
            r = self.region(state, r.name)
        memdev, index = r.targets[pos], r.decoders[pos]
        targets, decs, dpas = list(r.targets), list(r.decoders), list(r.dpa_offsets)
        targets[pos], decs[pos], dpas[pos] = "", -1, 0
        new_state = "interleave" if r.state == "active" else r.state
        state = with_region(state, replace(r, targets=tuple(targets), decoders=tuple(decs), dpa_offsets=tuple(dpas),
                                           state=new_state))
        ds = state.decoders(self.node, memdev)
        if ds is not None and 0 <= index < len(ds):
            state = self._put(state, memdev, index, replace(ds[index], region="", position=-1, auto=False))
        return self._release_ports(state, self.region(state, r.name), self.topo.memdevs[memdev])

    def _release_ports(self, state: CxlState, r: Region, dev: CxlMemdev) -> CxlState:
        for hop in self.topo.hops(dev):
            still = any(h.port == hop.port for t in r.targets if t for h in self.topo.hops(self.topo.memdevs[t]))
            if still:
                continue
            key = (self.node, hop.port)
            slots = state.port_slots.get(key)
            if slots is None or r.name not in slots:
                continue
            new = tuple("" if s == r.name else s for s in slots)
            ports = dict(state.port_slots)
            if any(new):
                ports[key] = new
            else:
                ports.pop(key)
            state = replace(state, port_slots=ports)
        return state

    # ------------------------------------------------------------------------------------------ commit

    def set_commit(self, state: CxlState, name: str, text: str) -> CxlState:
        r = self.region(state, name)
        commit = parse_bool(text, "commit")
        if commit:
            if r.committed:
                return state
            if r.state != "active":
                raise _err(errno.ENXIO, f"{name} is not ready to commit: attach all {r.ways} targets first")
            return self._commit(state, r)
        if not r.committed:
            return state
        if r.enabled:
            if r.online:
                raise _err(errno.EBUSY, f"{name} has memory online: offline it first")
            state = self._release_driver(state, r)
            r = self.region(state, name)
        return self._reset(state, r)

    def committed_top(self, state: CxlState, port: str, exclude: str = "") -> int:
        """Highest committed decoder of a host bridge or switch port (-1: none): the next commit must be one more."""
        slots = state.port_slots.get((self.node, port), ())
        top = -1
        for i, s in enumerate(slots):
            o = state.regions.get((self.node, s)) if s and s != exclude else None
            if o is not None and o.committed:
                top = i
        return top

    def _commit(self, state: CxlState, r: Region) -> CxlState:
        """Commit bottom up, every decoder the next of its port; all or nothing (the kernel unwinds a failure)."""
        done: set[str] = set()
        for pos, memdev in enumerate(r.targets):
            index = r.decoders[pos]
            ds = self.decoders(state, memdev)
            if not ds[index].committed:
                top = max((i for i, d in enumerate(ds) if d.committed), default=-1)
                if index != top + 1:
                    raise _err(errno.EBUSY, f"decoder {index} of {memdev} would commit out of order (next: "
                               f"{top + 1})")
                state = self._put(state, memdev, index, replace(ds[index], committed=True))
            for hop in reversed(self.topo.hops(self.topo.memdevs[memdev])):
                if hop.port in done:
                    continue
                slots = state.port_slots.get((self.node, hop.port), ())
                index_p = slots.index(r.name)
                top = self.committed_top(state, hop.port, exclude=r.name)
                if index_p != top + 1:
                    raise _err(errno.EBUSY, f"decoder {index_p} of port {hop.port} would commit out of order "
                               f"(next: {top + 1})")
                done.add(hop.port)
        return with_region(state, replace(r, state="commit"))

    def _reset(self, state: CxlState, r: Region) -> CxlState:
        for pos, memdev in enumerate(r.targets):
            if not memdev or pos >= len(r.decoders):
                continue
            ds = state.decoders(self.node, memdev)
            index = r.decoders[pos]
            if ds is not None and ds[index].committed:
                state = self._put(state, memdev, index, replace(ds[index], committed=False, auto=False))
        return with_region(state, replace(self.region(state, r.name), state="active" if r.complete else
                                          "interleave"))

    # ------------------------------------------------------------------------------------------ drivers

    def bind_region(self, state: CxlState, name: str) -> CxlState:
        r = self.region(state, name)
        if r.enabled:
            raise _err(errno.EBUSY, f"{name} is already bound to cxl_region")
        if not r.committed:
            raise _err(errno.ENXIO, f"probing {name} failed: not committed")
        return self._bind_region(state, r)

    def _bind_region(self, state: CxlState, r: Region) -> CxlState:
        if r.mode == "ram":  # kmem probes the region's DAX device; with no whole memory block it rejects it
            dax: DaxDriver = "kmem" if self.blocks(r) else ""
            return with_region(state, replace(r, enabled=True, dax=dax, online=self._hotplug(r)))
        return with_region(state, replace(r, enabled=True, dax="", online=0))

    def _hotplug(self, r: Region) -> int:
        """Memory blocks the kernel onlines when kmem hot-adds the region (auto_online_blocks policy)."""
        return 0 if self.policy == "offline" else (1 << len(self.blocks(r))) - 1

    def unbind_region(self, state: CxlState, name: str) -> CxlState:
        r = self.region(state, name)
        if not r.enabled:
            raise _err(errno.ENODEV, f"{name} is not bound to cxl_region")
        if r.online:
            raise _err(errno.EBUSY, f"{name} has memory online: offline it (daxctl offline-memory) first")
        return self._release_driver(state, r)

    def _release_driver(self, state: CxlState, r: Region) -> CxlState:
        return with_region(state, replace(r, enabled=False, dax="", online=0))

    def delete_region(self, state: CxlState, window: str, text: str) -> CxlState:
        w = self.window(window)
        name = text.strip()
        r = state.regions.get((self.node, name))
        if r is None or r.window != w.name:
            raise _err(errno.ENODEV, f"root decoder of window {w.name} has no region {name!r}")
        if r.pool is not None:
            raise _err(errno.EBUSY, f"{name} decodes pooled memory: release it through the fabric manager")
        if r.enabled and r.online:
            raise _err(errno.EBUSY, f"{name} has memory online: offline it first")
        return self.remove_region(state, r)

    def remove_region(self, state: CxlState, r: Region) -> CxlState:
        """unregister_region: release the driver, detach every target, free the HPA and the region id."""
        if r.enabled:
            state = self._release_driver(state, r)
        for pos in range(r.ways if r.pool is None else 0):  # pooled regions have no endpoint decoders here
            cur = self.region(state, r.name)
            if cur.targets[pos]:
                state = self._detach(state, cur, pos, forced=True)
        regions = dict(state.regions)
        regions.pop((self.node, r.name))
        state = replace(state, regions=regions)
        key = (self.node, r.window)
        cached = state.root_ids.get(key)
        if cached is not None and r.id < cached:
            state = replace(state, root_ids={**state.root_ids, key: r.id})
        return state

    # ------------------------------------------------------------------------------------------ DAX and memory

    def dax_region(self, state: CxlState, devname: str) -> Region:
        m = re.fullmatch(r"dax(\d+)\.(\d+)", devname)
        r = state.regions.get((self.node, f"region{m.group(1)}")) if m else None
        if m is None or r is None or m.group(2) != "0" or r.mode != "ram" or not r.enabled:
            raise _err(errno.ENODEV, f"no device {devname!r} on the dax bus")
        return r

    def dax_bind(self, state: CxlState, driver: str, devname: str) -> CxlState:
        r = self.dax_region(state, devname)
        if r.dax:
            raise _err(errno.EBUSY, f"{devname} is already bound to {r.dax}")
        if driver == "kmem":
            if not self.blocks(r):
                raise _err(errno.EINVAL, f"kmem rejects {devname}: no whole {self.topo.block >> 20} MiB memory "
                                         "block in it after alignment")
            return with_region(state, replace(r, dax="kmem", online=self._hotplug(r)))
        return with_region(state, replace(r, dax="device_dax", online=0))

    def dax_unbind(self, state: CxlState, driver: str, devname: str) -> CxlState:
        r = self.dax_region(state, devname)
        if r.dax != driver:
            raise _err(errno.ENODEV, f"{devname} is not bound to {driver}")
        if r.online:
            raise _err(errno.EBUSY, f"{devname} has memory online: offline its memory blocks first")
        return with_region(state, replace(r, dax="", online=0))

    def block_owner(self, state: CxlState, phys_index: int) -> tuple[Region, int] | None:
        """The RAM region whose hot-added memory block ``phys_index`` is, and the block's index in it."""
        for r in self.regions(state):
            if r.mode != "ram" or not r.enabled or r.dax != "kmem" or r.pool is not None:
                continue
            span = self.blocks(r)
            if phys_index in span:
                return r, phys_index - span.start
        return None

    def set_block_state(self, state: CxlState, phys_index: int, text: str) -> CxlState:
        owner = self.block_owner(state, phys_index)
        if owner is None:
            raise _err(errno.ENODEV, f"memory block {phys_index} is not hot-added CXL memory")
        r, i = owner
        if text in ("online", "online_movable", "online_kernel"):
            return with_region(state, replace(r, online=r.online | (1 << i)))
        if text == "offline":
            return with_region(state, replace(r, online=r.online & ~(1 << i)))
        raise _err(errno.EINVAL, f"memory block state {text!r}: online, online_movable, online_kernel or offline")

    # ------------------------------------------------------------------------------------------ ports and bus

    def port_exists(self, state: CxlState, port: str) -> bool:
        """Host bridge ports exist while the root does; a switch port while a device below it is bound: one of its
        local memdevs, or a pool's device when the pool's switch hangs off one of its downstream ports (every
        member host always has the pool's dynamic-capacity device, NodeCxlView, and its endpoint is below)."""
        if port in self.topo.hbs:
            return self.bus_enabled(state) and not self.topo.hbs[port].restricted
        below = self.topo.switches[port].downstream_ports if port in self.topo.switches else ()
        return any(p.host_port in below for p in self.topo.pools) or any(
            (self.node, m.name) in state.endpoints for m in self.topo.under(port))

    def unbind_port(self, state: CxlState, port: str) -> CxlState:
        """Unbinding a port unbinds every memdev below it (and a switch port then goes with its last endpoint)."""
        if not self.port_exists(state, port):
            raise _err(errno.ENODEV, f"no port {port} on the cxl bus")
        if port in self.topo.hbs:
            if not self.port_enabled(state, port):
                raise _err(errno.ENODEV, f"port of {port} is not bound to cxl_port")
            state = replace(state, ports_disabled=state.ports_disabled | {(self.node, port)})
        below = self.topo.under(port)
        offline = {(self.node, m.name) for m in below if (self.node, m.name) in state.endpoints}
        state = replace(state, admin_offline=state.admin_offline | offline)
        return self.settle(state)

    def bind_port(self, state: CxlState, port: str) -> CxlState:
        if not self.port_exists(state, port):
            raise _err(errno.ENODEV, f"no port {port} on the cxl bus")
        if port in self.topo.hbs:
            if self.port_enabled(state, port):
                raise _err(errno.EBUSY, f"port of {port} is already bound to cxl_port")
            if not self.bus_enabled(state):
                raise _err(errno.ENXIO, "the CXL root is not enabled")
            return replace(state, ports_disabled=state.ports_disabled - {(self.node, port)})
        raise _err(errno.EBUSY, f"port of {port} is already bound to cxl_port")

    def set_bus(self, state: CxlState, enabled: bool) -> CxlState:
        if enabled == self.bus_enabled(state):
            raise _err(errno.EBUSY if enabled else errno.ENODEV,
                       "the CXL root is already bound to cxl_acpi" if enabled else "cxl_acpi is not bound")
        if not enabled:
            state = replace(state, buses_disabled=state.buses_disabled | {self.node})
            state = self.settle(state)
            for r in self.regions(state):
                if r.pool is None:
                    state = self.remove_region(state, r)
            ids = {k: v for k, v in state.root_ids.items() if k[0] != self.node}
            ports = frozenset(k for k in state.ports_disabled if k[0] != self.node)
            return replace(state, root_ids=ids, ports_disabled=ports)
        state = replace(state, buses_disabled=state.buses_disabled - {self.node})
        return self.settle(self.boot_root_ids(state))

    def set_memdev_admin(self, state: CxlState, memdev: str, online: bool) -> CxlState:
        key = (self.node, memdev)
        state = replace(state, admin_offline=state.admin_offline - {key} if online else state.admin_offline | {key})
        return self.settle(state)


# --------------------------------------------------------------------------------------------------- helpers


def online_bytes(r: Region, block: int) -> int:
    """Bytes of RAM region ``r`` online, its memory blocks being ``block`` bytes."""
    return bin(r.online).count("1") * block


def _hdm_end(ds: Iterable[EndpointDecoder]) -> int:
    """The highest decoder with DPA allocated (-1: none): allocations grow and shrink at this end."""
    return max((i for i, d in enumerate(ds) if d.dpa_size), default=-1)


def _last_end(ds: Iterable[EndpointDecoder], pstart: int, psize: int) -> int:
    """Where the next allocation in partition [pstart, pstart+psize) starts: after its highest reservation (an
    allocation or a skip reaching into it), else at the partition start."""
    end = pstart
    pend = pstart + psize
    for d in ds:
        if not d.dpa_size:
            continue
        for lo, hi in ((d.dpa_base - d.skip, d.dpa_base), (d.dpa_base, d.dpa_base + d.dpa_size)):
            if hi > lo and lo < pend and hi > pstart:
                end = max(end, min(hi, pend))
    return end
