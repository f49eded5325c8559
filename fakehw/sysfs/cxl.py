"""CXL: ``/sys/bus/cxl/devices`` (root, ports, endpoints, decoders, memdevs, regions) and ``/sys/bus/dax``.

The layout follows the kernel's CXL core: ``root0`` (the ACPI0017 platform device) has one port per CXL host
bridge, ports nest down through switches to endpoints, every port has HDM decoders ``decoder<port>.<n>``, root
decoders are the fixed memory windows, regions live under their root decoder with ``target<i>`` naming endpoint
decoders, and a RAM region's DAX device (``/sys/bus/dax/devices/dax<region>.0``) carries the NUMA node its memory
is in (``target_node``). Memory devices sit under their PCI functions (class 0x050210).

All of it is one dynamic section: regions come and go, logical devices of a pooled device appear under the pool
switch's vPPBs while a host holds them, dynamic-capacity extents show under their region's DAX region.

A memdev that is offline (``cxl-offline`` fault or an operator's offline) keeps its objects and is marked in
``mem<N>/state`` (``offline``; the kernel has no such attribute, fakehw adds it). Its regions' DAX devices are no
longer bound to ``kmem`` (the memory left the NUMA node) but to ``device_dax``, as after ``daxctl
offline-memory`` and reconfiguring the device.
"""

from __future__ import annotations

from collections.abc import Iterable

from fakehw.agent.cxl import (
    ENDPOINT_DECODERS,
    HOST_BRIDGE_DECODERS,
    SWITCH_DECODERS,
    MemdevPath,
    NodeCxlView,
    Region,
    free_region_id,
    memdev_path,
    port_host_bridge,
    window_bases,
)
from fakehw.model.system import CxlPool, Node
from fakehw.sysfs.pci import function_files
from fakehw.sysfs.pcilayout import PciFunction, PciLayout, pool_memdev_function
from fakehw.sysfs.tree import Section

ROOT = "sys/devices/platform/ACPI0017:00/root0"
_NO_PATH = MemdevPath("", "", None, None)
"""Stands in for the path of a region target that is no local memdev (a pooled device's)."""
ACPI = "sys/devices/LNXSYSTM:00/LNXSYBUS:00"
BUS = "sys/bus/cxl/devices"


def _hex(value: int) -> str:
    return f"0x{value:x}"


class _Ports:
    """Port ids and directories: root0, a port per host bridge, per switch, per pool switch, per endpoint."""

    def __init__(self, node: Node, pools: tuple[CxlPool, ...]):
        cxl = node.cxl
        self.hb_id: dict[str, int] = {}
        self.dir: dict[str, str] = {}
        self.hb_of_rp: dict[str, str] = {}
        next_id = 1
        for hb in sorted(cxl.host_bridges, key=lambda h: h.uid):
            self.hb_id[hb.name] = next_id
            self.dir[hb.name] = f"{ROOT}/port{next_id}"
            for rp in hb.root_ports:
                self.hb_of_rp[rp] = hb.name
            next_id += 1
        self.sw_id: dict[str, int] = {}
        self.sw_of_dp: dict[str, str] = {}
        for sw in cxl.switches:
            self.sw_id[sw.name] = next_id
            self.dir[sw.name] = f"{self.dir[self.hb_of_rp[sw.parent]]}/port{next_id}"
            for dp in sw.downstream_ports:
                self.sw_of_dp[dp] = sw.name
            next_id += 1
        for p in pools:
            name = f"{p.name}.vcs"
            self.sw_id[name] = next_id
            self.dir[name] = f"{self._port_dir(p.host_port)}/port{next_id}"
            next_id += 1
        self.endpoint_base = next_id

    def _port_dir(self, port: str) -> str:
        """Directory of the CXL port object that owns the PCIe port ``port`` (root or downstream)."""
        if port in self.hb_of_rp:
            return self.dir[self.hb_of_rp[port]]
        return self.dir[self.sw_of_dp[port]]

    def endpoint_parent(self, memdev_port: str, pool: str | None) -> str:
        if pool is not None:
            return self.dir[f"{pool}.vcs"]
        return self._port_dir(memdev_port)


def cxl_section(node: Node, pools: tuple[CxlPool, ...], lay: PciLayout, view: NodeCxlView) -> Section:
    sec = Section("cxl")
    cxl = node.cxl
    if not cxl.host_bridges:
        return sec
    ports = _Ports(node, pools)
    bases = window_bases(cxl)
    pool_by_name = {p.name: p for p in pools}
    hb_by_name = {h.name: h for h in cxl.host_bridges}
    sec.dir("sys/bus/dax/drivers/kmem")
    sec.dir("sys/bus/dax/drivers/device_dax")
    sec.dir(BUS)

    # PCI functions of the CXL hierarchy (pooled memdevs only while held).
    memdev_fn: dict[str, PciFunction] = {}
    for fn in lay.functions:
        if fn.kind.startswith("cxl-"):
            if fn.kind == "cxl-memdev" and fn.ref:
                memdev_fn[fn.ref] = fn
            function_files(sec, fn, node)
    for m in view.memdevs:
        if m.pool is not None:
            pool = pool_by_name[m.pool]
            slot = pool.logical_devices if m.ld is None else m.ld
            fn2 = pool_memdev_function(lay, pool, slot, m.numa)
            if fn2 is not None:
                memdev_fn[m.name] = fn2
                function_files(sec, fn2, node)

    # root0 and its host bridges.
    sec.link(f"{BUS}/root0", ROOT)
    sec.text(f"{ROOT}/uevent", "DEVTYPE=cxl_port", 0o644)
    for i, hb in enumerate(sorted(cxl.host_bridges, key=lambda h: h.uid)):
        acpi = f"{ACPI}/ACPI0016:{i:02x}"
        sec.text(f"{acpi}/uid", hb.uid)
        sec.text(f"{acpi}/path", f"\\_SB_.CXL{hb.uid}")
        sec.link(f"{acpi}/physical_node", lay.host_bridge_dirs[hb.name])
        sec.link(f"{ROOT}/dport{hb.uid}", acpi)
        pid = ports.hb_id[hb.name]
        pdir = ports.dir[hb.name]
        sec.link(f"{pdir}/uport", acpi)
        sec.link(f"{pdir}/parent_dport", acpi)
        for k, rp in enumerate(hb.root_ports):
            rp_fn = lay.function(rp)
            if rp_fn is not None:
                sec.link(f"{pdir}/dport{k}", rp_fn.path)
        sec.link(f"{BUS}/port{pid}", pdir)
    for sw in cxl.switches:
        pdir = ports.dir[sw.name]
        up = lay.function(sw.name)
        if up is not None:
            sec.link(f"{pdir}/uport", up.path)
        parent = lay.function(sw.parent)
        if parent is not None:
            sec.link(f"{pdir}/parent_dport", parent.path)
        for k, dp in enumerate(sw.downstream_ports):
            dfn = lay.function(dp)
            if dfn is not None:
                sec.link(f"{pdir}/dport{k}", dfn.path)
        sec.link(f"{BUS}/port{ports.sw_id[sw.name]}", pdir)
    for p in pools:
        pdir = ports.dir[f"{p.name}.vcs"]
        up = lay.function(f"{p.name}.vcs")
        if up is not None:
            sec.link(f"{pdir}/uport", up.path)
        parent = lay.function(p.host_port)
        if parent is not None:
            sec.link(f"{pdir}/parent_dport", parent.path)
        for k in range(p.logical_devices + 1):
            dfn = lay.function(f"{p.name}.vppb{k}")
            if dfn is not None:
                sec.link(f"{pdir}/dport{k}", dfn.path)
        sec.link(f"{BUS}/port{ports.sw_id[p.name + '.vcs']}", pdir)

    regions = [rv for rv in view.regions]
    # Root decoders: one per window, regions below them.
    next_region = f"region{free_region_id(rv.region.id for rv in regions)}"
    for w in cxl.windows:
        d = f"{ROOT}/decoder0.{w.index}"
        targets = ",".join(str(hb_by_name[t].uid) for t in w.targets if t in hb_by_name)
        sec.text(f"{d}/start", _hex(bases[w.name]))
        sec.text(f"{d}/size", _hex(w.size))
        sec.text(f"{d}/locked", 1)
        sec.text(f"{d}/target_list", targets)
        sec.text(f"{d}/target_type", "expander")
        sec.text(f"{d}/interleave_ways", len(w.targets))
        sec.text(f"{d}/interleave_granularity", w.interleave_granularity)
        sec.text(f"{d}/cap_ram", int(w.ram))
        sec.text(f"{d}/cap_pmem", int(w.pmem))
        sec.text(f"{d}/cap_type2", 0)
        sec.text(f"{d}/cap_type3", 1)
        sec.text(f"{d}/qos_class", 0)
        if w.ram:
            sec.text(f"{d}/create_ram_region", next_region, 0o644)
        if w.pmem:
            sec.text(f"{d}/create_pmem_region", next_region, 0o644)
        sec.file(f"{d}/delete_region", b"", 0o200)
        sec.link(f"{BUS}/decoder0.{w.index}", d)

    # Memdevs and their endpoints.
    endpoint_dir: dict[str, str] = {}
    endpoint_id: dict[str, int] = {}
    for m in view.memdevs:
        mfn = memdev_fn.get(m.name)
        if mfn is None:
            continue
        md = f"{mfn.path}/{m.sysfs_name}"
        sec.text(f"{md}/ram/size", _hex(m.ram_size))
        sec.text(f"{md}/ram/qos_class", 0)
        sec.text(f"{md}/pmem/size", _hex(m.pmem_size))
        sec.text(f"{md}/pmem/qos_class", 0)
        if m.dynamic_size:
            sec.text(f"{md}/dynamic_ram_a/size", _hex(m.dynamic_size))
            sec.text(f"{md}/dynamic_ram_a/qos_class", 0)
        sec.text(f"{md}/serial", _hex(m.serial))
        sec.text(f"{md}/numa_node", m.numa)
        sec.text(f"{md}/firmware_version", "BWFW VERSION 00")
        sec.text(f"{md}/payload_max", 2048)
        sec.text(f"{md}/label_storage_size", 0)
        sec.text(f"{md}/security/state", "disabled")
        sec.text(f"{md}/state", "online" if m.online else "offline")
        sec.text(f"{md}/dev", f"{250}:{m.sysfs_id}")
        sec.link(f"{BUS}/{m.sysfs_name}", md)
        eid = ports.endpoint_base + m.sysfs_id
        edir = f"{ports.endpoint_parent(m.port, m.pool)}/endpoint{eid}"
        endpoint_dir[m.name], endpoint_id[m.name] = edir, eid
        sec.link(f"{edir}/uport", md)
        parent_port = m.port if m.pool is None else None
        if parent_port is not None:
            pfn = lay.function(parent_port)
            if pfn is not None:
                sec.link(f"{edir}/parent_dport", pfn.path)
        elif m.pool is not None:
            pool = pool_by_name[m.pool]
            slot = pool.logical_devices if m.ld is None else m.ld
            vfn = lay.function(f"{m.pool}.vppb{slot}")
            if vfn is not None:
                sec.link(f"{edir}/parent_dport", vfn.path)
        sec.link(f"{BUS}/endpoint{eid}", edir)

    # Port decoders (host bridges, switches) and endpoint decoders, committed in region order.
    active = {rv.region.name: rv.active for rv in regions}
    by_region = {rv.region.name: rv.region for rv in regions}
    paths = {m.name: memdev_path(cxl, m) for m in cxl.memdevs}
    pool_hb = {p.name: port_host_bridge(cxl, p.host_port) for p in pools}
    for hb in cxl.host_bridges:
        through = [r for r in by_region.values()
                   if (r.pool is None and any(paths.get(t, _NO_PATH).host_bridge == hb.name for t in r.targets))
                   or (r.pool is not None and pool_hb.get(r.pool) == hb.name)]
        count = max(HOST_BRIDGE_DECODERS, len(through))
        pid = ports.hb_id[hb.name]
        pdir = ports.dir[hb.name]
        committed = 0
        for i in range(count):
            d = f"{pdir}/decoder{pid}.{i}"
            if i < len(through):
                r = through[i]
                rps = _ordered_unique(paths[t].root_port for t in r.targets
                                      if paths.get(t, _NO_PATH).host_bridge == hb.name)
                rp_index = {rp: k for k, rp in enumerate(hb.root_ports)}
                wways = len(next(w for w in cxl.windows if w.name == r.window).targets)
                _decoder(sec, d, bases[r.window] + r.hpa_offset, r.size, ",".join(str(rp_index[x]) for x in rps),
                         len(rps), r.granularity * wways)
                committed += 1
            else:
                _decoder(sec, d, 0, 0, "", 1, 256)
            sec.link(f"{BUS}/decoder{pid}.{i}", d)
        sec.text(f"{pdir}/decoders_committed", committed)
    for sw in cxl.switches:
        through = [r for r in by_region.values() if r.pool is None
                   and any(paths.get(t, _NO_PATH).switch == sw.name for t in r.targets)]
        pid = ports.sw_id[sw.name]
        pdir = ports.dir[sw.name]
        dp_index = {dp: k for k, dp in enumerate(sw.downstream_ports)}
        for i in range(max(SWITCH_DECODERS, len(through))):
            d = f"{pdir}/decoder{pid}.{i}"
            if i < len(through):
                r = through[i]
                dps = _ordered_unique(paths[t].downstream_port for t in r.targets
                                      if paths.get(t, _NO_PATH).switch == sw.name)
                window = next(w for w in cxl.windows if w.name == r.window)
                hb_name = paths[r.targets[0]].host_bridge
                hb_ways = len({paths[t].root_port for t in r.targets if paths[t].host_bridge == hb_name})
                _decoder(sec, d, bases[r.window] + r.hpa_offset, r.size,
                         ",".join(str(dp_index[x]) for x in dps if x is not None), len(dps),
                         r.granularity * len(window.targets) * hb_ways)
            else:
                _decoder(sec, d, 0, 0, "", 1, 256)
            sec.link(f"{BUS}/decoder{pid}.{i}", d)
        sec.text(f"{pdir}/decoders_committed", len(through))
    for p in pools:
        through = [r for r in by_region.values() if r.pool == p.name]
        pid = ports.sw_id[f"{p.name}.vcs"]
        pdir = ports.dir[f"{p.name}.vcs"]
        for i in range(max(SWITCH_DECODERS, len(through))):
            d = f"{pdir}/decoder{pid}.{i}"
            if i < len(through):
                r = through[i]
                slot = p.logical_devices if r.ld is None else r.ld
                _decoder(sec, d, bases[r.window] + r.hpa_offset, r.size, str(slot), 1, r.granularity)
            else:
                _decoder(sec, d, 0, 0, "", 1, 256)
            sec.link(f"{BUS}/decoder{pid}.{i}", d)
        sec.text(f"{pdir}/decoders_committed", len(through))
    endpoint_decoder: dict[tuple[str, str], str] = {}
    for m in view.memdevs:
        if m.name not in endpoint_dir:
            continue
        eid = endpoint_id[m.name]
        edir = endpoint_dir[m.name]
        mine = [r for r in by_region.values() if m.name in r.targets]
        count = max(ENDPOINT_DECODERS, len(mine))
        for i in range(count):
            d = f"{edir}/decoder{eid}.{i}"
            if i < len(mine):
                r = mine[i]
                pos = r.targets.index(m.name)
                mode = "dynamic_ram_a" if r.origin == "dcd-extent" else r.mode
                _decoder(sec, d, bases[r.window] + r.hpa_offset, r.size, None, r.ways, r.granularity)
                sec.text(f"{d}/mode", mode, 0o644)
                sec.text(f"{d}/dpa_resource", _hex(r.dpa_offsets[pos]))
                sec.text(f"{d}/dpa_size", _hex(r.size // r.ways), 0o644)
                endpoint_decoder[(r.name, m.name)] = f"decoder{eid}.{i}"
            else:
                _decoder(sec, d, 0, 0, None, 1, 256)
                sec.text(f"{d}/mode", "none", 0o644)
                sec.text(f"{d}/dpa_resource", _hex(0))
                sec.text(f"{d}/dpa_size", _hex(0), 0o644)
            sec.link(f"{BUS}/decoder{eid}.{i}", d)
        sec.text(f"{edir}/decoders_committed", len(mine))

    # Regions under their root decoders, with DAX devices for RAM.
    windows = {w.name: w for w in cxl.windows}
    for rv in regions:
        r = rv.region
        w = windows[r.window]
        d = f"{ROOT}/decoder0.{w.index}/{r.name}"
        sec.text(f"{d}/uuid", r.uuid, 0o644)
        sec.text(f"{d}/interleave_ways", r.ways, 0o644)
        sec.text(f"{d}/interleave_granularity", r.granularity, 0o644)
        sec.text(f"{d}/size", _hex(r.size), 0o644)
        sec.text(f"{d}/mode", "dynamic_ram_a" if r.origin == "dcd-extent" else r.mode)
        sec.text(f"{d}/resource", _hex(bases[r.window] + r.hpa_offset))
        sec.text(f"{d}/commit", 1, 0o644)
        for i, t in enumerate(r.targets):
            sec.text(f"{d}/target{i}", endpoint_decoder.get((r.name, t), ""), 0o644)
        sec.link(f"{BUS}/{r.name}", d)
        if r.mode != "ram":
            sec.text(f"{d}/pmem_region{r.id}/uevent", "DEVTYPE=cxl_pmem_region", 0o644)
            continue
        dax = f"dax{r.id}.0"
        dd = f"{d}/dax_region{r.id}/{dax}"
        sec.text(f"{d}/dax_region{r.id}/id", r.id)
        sec.text(f"{d}/dax_region{r.id}/size", r.size)
        sec.text(f"{d}/dax_region{r.id}/align", 2 * 1024 * 1024)
        sec.text(f"{dd}/target_node", -1 if r.numa is None else r.numa)
        sec.text(f"{dd}/numa_node", _numa_of_region(node, r))
        sec.text(f"{dd}/size", r.size, 0o644)
        sec.text(f"{dd}/resource", _hex(bases[r.window] + r.hpa_offset))
        sec.text(f"{dd}/align", 2 * 1024 * 1024, 0o644)
        driver = "kmem" if active.get(r.name) else "device_dax"
        sec.link(f"{dd}/driver", f"sys/bus/dax/drivers/{driver}")
        sec.link(f"sys/bus/dax/drivers/{driver}/{dax}", dd)
        sec.link(f"sys/bus/dax/devices/{dax}", dd)
        if r.origin == "dcd-extent" and r.extent is not None:
            ed = f"{d}/dax_region{r.id}/extent{r.id}.0"
            sec.text(f"{ed}/offset", _hex(r.dpa_offsets[0]))
            sec.text(f"{ed}/length", _hex(r.size))
            sec.text(f"{ed}/tag", r.extent)
    return sec


def _decoder(sec: Section, d: str, start: int, size: int, targets: str | None, ways: int, granularity: int) -> None:
    sec.text(f"{d}/start", _hex(start))
    sec.text(f"{d}/size", _hex(size), 0o644)
    sec.text(f"{d}/locked", 0)
    sec.text(f"{d}/target_type", "expander")
    sec.text(f"{d}/interleave_ways", ways)
    sec.text(f"{d}/interleave_granularity", granularity)
    if targets is not None:
        sec.text(f"{d}/target_list", targets)


def _ordered_unique(items: Iterable[str | None]) -> list[str]:
    out: list[str] = []
    for x in items:
        if x is not None and x not in out:
            out.append(x)
    return out


def _numa_of_region(node: Node, r: Region) -> int:
    """The NUMA node of the device side (the host bridge's node), as ``numa_node`` of a DAX device shows."""
    cxl = node.cxl
    window = next(w for w in cxl.windows if w.name == r.window)
    hb = next((h for h in cxl.host_bridges if h.name == window.targets[0]), None)
    return hb.numa if hb is not None else -1
