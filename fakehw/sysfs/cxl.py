"""CXL: ``/sys/bus/cxl/devices`` (root, ports, endpoints, decoders, memdevs, regions), ``/sys/bus/dax`` and the
character devices ``/dev/cxl/memN`` and ``/dev/daxN.0``, laid out as the kernel's CXL core lays them out, so that
libcxl and libdaxctl (``cxl list``, ``daxctl list``) parse the tree the way they parse a kernel's.

Layout (drivers/cxl, Documentation/ABI/testing/sysfs-bus-cxl): ``root0`` sits under the platform device of the
CXL root (ACPI0017:00, or ``cxl_acpi.0`` for the kernel's cxl_test mock, whose bus libcxl then calls
``cxl_test``) and links to it as ``uport``; one port per host bridge below it, ports nest down through switches to
endpoints, every port has HDM decoders ``decoder<port>.<n>``, root decoders are the fixed memory windows, regions
live under their root decoder with ``target<i>`` naming endpoint decoders, and a RAM region's DAX region
(``regionN/dax_regionN``, its attributes in ``dax_regionN/dax_region/``) holds ``daxN.0`` with the NUMA node its
memory goes to (``target_node``). Memory devices sit under their PCI functions (class 0x050210), or under the mock
platform devices for cxl_test.

Enabled devices have a ``driver`` link (libcxl's test for "enabled"): ``cxl_port`` on root0, ports and endpoints,
``cxl_mem`` on memdevs, ``cxl_region`` on regions. A memdev taken offline (``cxl-offline`` fault or an operator's
offline) is shown as the kernel shows an unbound ``cxl_mem``: no driver, its endpoint port and endpoint decoders
gone, and every region that targets it detached from that target, decommitted and disabled (no DAX device). When
the memdev is back its regions are re-assembled, as the kernel does for regions firmware committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fakehw.agent.cxl import (
    ENDPOINT_DECODERS,
    HOST_BRIDGE_DECODERS,
    SWITCH_DECODERS,
    MemdevPath,
    MemdevView,
    NodeCxlView,
    Region,
    free_region_id,
    memdev_path,
    port_host_bridge,
    window_bases,
)
from fakehw.model.system import CxlPool, CxlWindow, Node
from fakehw.sysfs.pci import function_files
from fakehw.sysfs.pcilayout import PciFunction, PciLayout, pool_memdev_function
from fakehw.sysfs.tree import Section

ACPI_ROOT = "sys/devices/platform/ACPI0017:00"
ROOT = f"{ACPI_ROOT}/root0"
_NO_PATH = MemdevPath("", "", None, None)
"""Stands in for the path of a region target that is no local memdev (a pooled device's)."""
ACPI = "sys/devices/LNXSYSTM:00/LNXSYBUS:00"
BUS = "sys/bus/cxl"
DEVICES = f"{BUS}/devices"
DRIVERS = f"{BUS}/drivers"
DAX_BUS = "sys/bus/dax"
CXL_DRIVERS = ("cxl_port", "cxl_mem", "cxl_region", "cxl_pmem_region", "cxl_dax_region", "cxl_nvdimm_bridge",
               "cxl_nvdimm")
DAX_DRIVERS = ("kmem", "device_dax")
MEMDEV_MAJOR = 250
"""The ``cxl`` memdev character device major (dynamic in the kernel; what fakehw hands out)."""
DAX_MAJOR = 251
DAX_ALIGN = 2 * 1024 * 1024
FIRMWARE_VERSION = "BWFW VERSION 00"
LABEL_STORAGE = 0


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


@dataclass
class _Endpoint:
    id: int
    dir: str
    decoders: dict[str, str] = field(default_factory=dict)
    """Region name -> endpoint decoder name (``decoder<id>.<n>``)."""


class _CxlTree:
    """Builds the CXL section of one node (one instance per render)."""

    def __init__(self, node: Node, pools: tuple[CxlPool, ...], lay: PciLayout, view: NodeCxlView):
        self.sec = Section("cxl")
        self.node = node
        self.cxl = node.cxl
        self.pools = pools
        self.lay = lay
        self.view = view
        self.ports = _Ports(node, pools)
        self.bases = window_bases(self.cxl)
        self.pool_by_name = {p.name: p for p in pools}
        self.hb_by_name = {h.name: h for h in self.cxl.host_bridges}
        self.windows = {w.name: w for w in self.cxl.windows}
        self.paths = {m.name: memdev_path(self.cxl, m) for m in self.cxl.memdevs}
        self.online = {m.name for m in view.memdevs if m.online}
        self.memdev_fn: dict[str, PciFunction] = {}
        self.endpoints: dict[str, _Endpoint] = {}
        self.regions = [rv.region for rv in view.regions]

    # ------------------------------------------------------------------------------------------ helpers

    def device(self, path: str, name: str, driver: str | None, devtype: str | None = None) -> None:
        """The attributes every CXL device has: ``subsystem``, ``uevent``, the bus link and, bound, ``driver``."""
        sec = self.sec
        sec.link(f"{path}/subsystem", BUS)
        sec.text(f"{path}/uevent", f"DEVTYPE={devtype}" if devtype else "", 0o644)
        sec.link(f"{DEVICES}/{name}", path)
        if driver is not None:
            sec.link(f"{path}/driver", f"{DRIVERS}/{driver}")
            sec.link(f"{DRIVERS}/{driver}/{name}", path)

    def decoder(self, d: str, start: int, size: int, ways: int, granularity: int, targets: str | None,
                region: str | None) -> None:
        sec = self.sec
        sec.text(f"{d}/start", _hex(start))
        sec.text(f"{d}/size", _hex(size))
        sec.text(f"{d}/locked", 0)
        sec.text(f"{d}/target_type", "expander")
        sec.text(f"{d}/interleave_ways", ways)
        sec.text(f"{d}/interleave_granularity", granularity)
        if targets is not None:
            sec.text(f"{d}/target_list", targets)
        if region is not None:
            sec.text(f"{d}/region", region)

    def region_live(self, r: Region) -> bool:
        """A region is assembled while every target is online (local memdevs; pooled targets are always there)."""
        return all(t in self.online for t in r.targets if t in self.paths)

    # ------------------------------------------------------------------------------------------ build

    def build(self) -> Section:
        if not self.cxl.host_bridges:
            return self.sec
        self.bus_files()
        self.pci_functions()
        self.root()
        self.host_bridge_ports()
        self.switch_ports()
        self.pool_ports()
        self.root_decoders()
        self.memdevs()
        self.port_decoders()
        self.endpoint_decoders()
        for r in self.regions:
            self.region(r)
        return self.sec

    def bus_files(self) -> None:
        sec = self.sec
        sec.dir(DEVICES)
        sec.file(f"{BUS}/flush", b"", 0o200)
        sec.file(f"{BUS}/drivers_probe", b"", 0o200)
        sec.text(f"{BUS}/drivers_autoprobe", 1, 0o644)
        for drv in CXL_DRIVERS:
            sec.file(f"{DRIVERS}/{drv}/bind", b"", 0o200)
            sec.file(f"{DRIVERS}/{drv}/unbind", b"", 0o200)
        sec.dir(f"{DAX_BUS}/devices")
        for drv in DAX_DRIVERS:
            sec.file(f"{DAX_BUS}/drivers/{drv}/bind", b"", 0o200)
            sec.file(f"{DAX_BUS}/drivers/{drv}/unbind", b"", 0o200)
            sec.file(f"{DAX_BUS}/drivers/{drv}/new_id", b"", 0o200)
            sec.file(f"{DAX_BUS}/drivers/{drv}/remove_id", b"", 0o200)
        sec.file("sys/bus/platform/drivers/cxl_acpi/bind", b"", 0o200)
        sec.file("sys/bus/platform/drivers/cxl_acpi/unbind", b"", 0o200)

    def pci_functions(self) -> None:
        """PCI functions of the CXL hierarchy (pooled memdevs only while a logical device is held)."""
        for fn in self.lay.functions:
            if fn.kind.startswith("cxl-"):
                if fn.kind == "cxl-memdev" and fn.ref:
                    self.memdev_fn[fn.ref] = fn
                function_files(self.sec, fn, self.node)
        for m in self.view.memdevs:
            if m.pool is not None:
                pool = self.pool_by_name[m.pool]
                slot = pool.logical_devices if m.ld is None else m.ld
                fn2 = pool_memdev_function(self.lay, pool, slot, m.numa)
                if fn2 is not None:
                    self.memdev_fn[m.name] = fn2
                    function_files(self.sec, fn2, self.node)

    def root(self) -> None:
        sec = self.sec
        sec.link(f"{ROOT}/uport", ACPI_ROOT)
        sec.link(f"{ACPI_ROOT}/driver", "sys/bus/platform/drivers/cxl_acpi")
        sec.link("sys/bus/platform/drivers/cxl_acpi/ACPI0017:00", ACPI_ROOT)
        sec.link(f"{ACPI_ROOT}/subsystem", "sys/bus/platform")
        self.device(ROOT, "root0", "cxl_port", "cxl_port")
        for i, hb in enumerate(sorted(self.cxl.host_bridges, key=lambda h: h.uid)):
            acpi = f"{ACPI}/ACPI0016:{i:02x}"
            sec.text(f"{acpi}/uid", hb.uid)
            sec.text(f"{acpi}/path", f"\\_SB_.CXL{hb.uid}")
            sec.link(f"{acpi}/physical_node", self.lay.host_bridge_dirs[hb.name])
            sec.link(f"{ROOT}/dport{hb.uid}", acpi)

    def port(self, pdir: str, pid: int, uport: str | None, parent_dport: str | None,
             dports: Iterable[tuple[int, str]]) -> None:
        sec = self.sec
        if uport is not None:
            sec.link(f"{pdir}/uport", uport)
        if parent_dport is not None:
            sec.link(f"{pdir}/parent_dport", parent_dport)
        for k, target in dports:
            sec.link(f"{pdir}/dport{k}", target)
        self.device(pdir, f"port{pid}", "cxl_port", "cxl_port")

    def host_bridge_ports(self) -> None:
        for i, hb in enumerate(sorted(self.cxl.host_bridges, key=lambda h: h.uid)):
            acpi = f"{ACPI}/ACPI0016:{i:02x}"
            dports = [(k, fn.path) for k, rp in enumerate(hb.root_ports) if (fn := self.lay.function(rp))]
            self.port(self.ports.dir[hb.name], self.ports.hb_id[hb.name], acpi, acpi, dports)

    def switch_ports(self) -> None:
        for sw in self.cxl.switches:
            up, parent = self.lay.function(sw.name), self.lay.function(sw.parent)
            dports = [(k, fn.path) for k, dp in enumerate(sw.downstream_ports) if (fn := self.lay.function(dp))]
            self.port(self.ports.dir[sw.name], self.ports.sw_id[sw.name], up.path if up else None,
                      parent.path if parent else None, dports)

    def pool_ports(self) -> None:
        for p in self.pools:
            name = f"{p.name}.vcs"
            up, parent = self.lay.function(name), self.lay.function(p.host_port)
            dports = [(k, fn.path) for k in range(p.logical_devices + 1)
                      if (fn := self.lay.function(f"{p.name}.vppb{k}"))]
            self.port(self.ports.dir[name], self.ports.sw_id[name], up.path if up else None,
                      parent.path if parent else None, dports)

    def root_decoders(self) -> None:
        sec = self.sec
        next_region = f"region{free_region_id(r.id for r in self.regions)}"
        for w in self.cxl.windows:
            d = f"{ROOT}/decoder0.{w.index}"
            targets = ",".join(str(self.hb_by_name[t].uid) for t in w.targets if t in self.hb_by_name)
            sec.text(f"{d}/start", _hex(self.bases[w.name]))
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
            sec.text(f"{d}/qos_class", w.qos_class)
            if w.ram:
                sec.text(f"{d}/create_ram_region", next_region, 0o644)
            if w.pmem:
                sec.text(f"{d}/create_pmem_region", next_region, 0o644)
            sec.file(f"{d}/delete_region", b"", 0o200)
            self.device(d, f"decoder0.{w.index}", None, "cxl_decoder_root")

    def memdevs(self) -> None:
        for m in self.view.memdevs:
            fn = self.memdev_fn.get(m.name)
            if fn is not None:
                self.memdev(m, f"{fn.path}/{m.sysfs_name}")

    def memdev(self, m: MemdevView, md: str) -> None:
        sec = self.sec
        sec.text(f"{md}/ram/size", _hex(m.ram_size))
        sec.text(f"{md}/pmem/size", _hex(m.pmem_size))
        if m.ram_size:
            sec.text(f"{md}/ram/qos_class", m.qos_class)
        if m.pmem_size:
            sec.text(f"{md}/pmem/qos_class", m.qos_class)
        if m.dynamic_size:
            sec.text(f"{md}/dynamic_ram_a/size", _hex(m.dynamic_size))
            sec.text(f"{md}/dynamic_ram_a/qos_class", m.qos_class)
        sec.text(f"{md}/serial", _hex(m.serial))
        sec.text(f"{md}/numa_node", m.numa)
        sec.text(f"{md}/firmware_version", FIRMWARE_VERSION)
        sec.text(f"{md}/payload_max", 2048)
        sec.text(f"{md}/label_storage_size", LABEL_STORAGE)
        sec.text(f"{md}/security/state", "disabled")
        sec.text(f"{md}/dev", f"{MEMDEV_MAJOR}:{m.sysfs_id}")
        sec.link(f"sys/dev/char/{MEMDEV_MAJOR}:{m.sysfs_id}", md)
        sec.chardev(f"dev/cxl/{m.sysfs_name}", MEMDEV_MAJOR, m.sysfs_id, 0o600)
        self.device(md, m.sysfs_name, "cxl_mem" if m.online else None, "cxl_memdev")
        if m.online:
            self.endpoint(m, md)

    def endpoint(self, m: MemdevView, md: str) -> None:
        """The endpoint port of an enabled memdev (the kernel removes it when ``cxl_mem`` unbinds)."""
        eid = self.ports.endpoint_base + m.sysfs_id
        edir = f"{self.ports.endpoint_parent(m.port, m.pool)}/endpoint{eid}"
        self.endpoints[m.name] = _Endpoint(eid, edir)
        parent: PciFunction | None
        if m.pool is None:
            parent = self.lay.function(m.port)
        else:
            pool = self.pool_by_name[m.pool]
            parent = self.lay.function(f"{m.pool}.vppb{pool.logical_devices if m.ld is None else m.ld}")
        self.port(edir, eid, md, parent.path if parent else None, ())
        self.sec.link(f"{DEVICES}/endpoint{eid}", edir)

    # ------------------------------------------------------------------------------------------ decoders

    def window_of(self, r: Region) -> CxlWindow:
        return self.windows[r.window]

    def port_decoders(self) -> None:
        """Host bridge and switch decoders, one per assembled region passing through, in region order."""
        pool_hb = {p.name: port_host_bridge(self.cxl, p.host_port) for p in self.pools}
        live = [r for r in self.regions if self.region_live(r)]
        for hb in self.cxl.host_bridges:
            rp_index = {rp: k for k, rp in enumerate(hb.root_ports)}
            rows: list[tuple[Region, list[int], int]] = []
            for r in live:
                wways = len(self.window_of(r).targets)
                if r.pool is not None:
                    if pool_hb.get(r.pool) == hb.name:
                        rows.append((r, [rp_index[self.pool_by_name[r.pool].host_port]], r.granularity * wways))
                    continue
                rps = _ordered_unique(self.paths[t].root_port for t in r.targets
                                      if self.paths.get(t, _NO_PATH).host_bridge == hb.name)
                if rps:
                    rows.append((r, [rp_index[x] for x in rps], r.granularity * wways))
            self.port_decoder_set(self.ports.dir[hb.name], self.ports.hb_id[hb.name], HOST_BRIDGE_DECODERS, rows)
        for sw in self.cxl.switches:
            dp_index = {dp: k for k, dp in enumerate(sw.downstream_ports)}
            rows = []
            for r in live:
                if r.pool is not None:
                    continue
                dps = _ordered_unique(self.paths[t].downstream_port for t in r.targets
                                      if self.paths.get(t, _NO_PATH).switch == sw.name)
                if not dps:
                    continue
                hb_name = self.paths[r.targets[0]].host_bridge
                hb_ways = len({self.paths[t].root_port for t in r.targets if self.paths[t].host_bridge == hb_name})
                rows.append((r, [dp_index[x] for x in dps], r.granularity * len(self.window_of(r).targets) * hb_ways))
            self.port_decoder_set(self.ports.dir[sw.name], self.ports.sw_id[sw.name], SWITCH_DECODERS, rows)
        for p in self.pools:
            rows = [(r, [p.logical_devices if r.ld is None else r.ld], r.granularity) for r in live
                    if r.pool == p.name]
            name = f"{p.name}.vcs"
            self.port_decoder_set(self.ports.dir[name], self.ports.sw_id[name], SWITCH_DECODERS, rows)

    def port_decoder_set(self, pdir: str, pid: int, minimum: int, rows: list[tuple[Region, list[int], int]]) -> None:
        for i in range(max(minimum, len(rows))):
            d = f"{pdir}/decoder{pid}.{i}"
            if i < len(rows):
                r, targets, gran = rows[i]
                self.decoder(d, self.bases[r.window] + r.hpa_offset, r.size, len(targets), gran,
                             ",".join(str(t) for t in targets), r.name)
            else:
                self.decoder(d, 0, 0, 1, 256, "", "")
            self.device(d, f"decoder{pid}.{i}", None, "cxl_decoder_switch")
        self.sec.text(f"{pdir}/decoders_committed", len(rows))

    def endpoint_decoders(self) -> None:
        sec = self.sec
        for m in self.view.memdevs:
            ep = self.endpoints.get(m.name)
            if ep is None:
                continue
            mine = [r for r in self.regions if m.name in r.targets]
            live = 0
            for i in range(max(ENDPOINT_DECODERS, len(mine))):
                d = f"{ep.dir}/decoder{ep.id}.{i}"
                if i < len(mine):
                    r = mine[i]
                    pos = r.targets.index(m.name)
                    assembled = self.region_live(r)
                    live += assembled
                    start, size = (self.bases[r.window] + r.hpa_offset, r.size) if assembled else (0, 0)
                    self.decoder(d, start, size, r.ways, r.granularity, None, r.name if assembled else "")
                    sec.text(f"{d}/mode", "dynamic_ram_a" if r.origin == "dcd-extent" else r.mode, 0o644)
                    sec.text(f"{d}/dpa_resource", _hex(r.dpa_offsets[pos]))
                    sec.text(f"{d}/dpa_size", _hex(r.size // r.ways), 0o644)
                    ep.decoders[r.name] = f"decoder{ep.id}.{i}"
                else:
                    self.decoder(d, 0, 0, 1, 256, None, "")
                    sec.text(f"{d}/mode", "none", 0o644)
                    sec.text(f"{d}/dpa_resource", _hex(0))
                    sec.text(f"{d}/dpa_size", _hex(0), 0o644)
                self.device(d, f"decoder{ep.id}.{i}", None, "cxl_decoder_endpoint")
            sec.text(f"{ep.dir}/decoders_committed", live)

    # ------------------------------------------------------------------------------------------ regions

    def region(self, r: Region) -> None:
        sec = self.sec
        w = self.window_of(r)
        d = f"{ROOT}/decoder0.{w.index}/{r.name}"
        assembled = self.region_live(r)
        mode = "dynamic_ram_a" if r.origin == "dcd-extent" else r.mode
        sec.text(f"{d}/uuid", r.uuid, 0o644 if r.mode == "pmem" else 0o444)
        sec.text(f"{d}/interleave_ways", r.ways, 0o644)
        sec.text(f"{d}/interleave_granularity", r.granularity, 0o644)
        sec.text(f"{d}/size", _hex(r.size), 0o644)
        sec.text(f"{d}/mode", mode)
        sec.text(f"{d}/resource", _hex(self.bases[r.window] + r.hpa_offset))
        sec.text(f"{d}/commit", int(assembled), 0o644)
        for i, t in enumerate(r.targets):
            ep = self.endpoints.get(t)
            sec.text(f"{d}/target{i}", ep.decoders.get(r.name, "") if ep else "", 0o644)
        self.device(d, r.name, "cxl_region" if assembled else None, "cxl_region")
        if not assembled:
            return
        if r.mode != "ram":
            pd = f"{d}/pmem_region{r.id}"
            self.device(pd, f"pmem_region{r.id}", "cxl_pmem_region", "cxl_pmem_region")
            return
        self.dax_region(r, d)

    def dax_region(self, r: Region, d: str) -> None:
        """``regionN/dax_regionN`` with its attribute group ``dax_region/`` and the one device ``daxN.0``."""
        sec = self.sec
        rv = self.view.region(r.name)
        active = rv is not None and rv.active
        dr = f"{d}/dax_region{r.id}"
        self.device(dr, f"dax_region{r.id}", "cxl_dax_region", "cxl_dax_region")
        sec.text(f"{dr}/dax_region/id", r.id)
        sec.text(f"{dr}/dax_region/size", r.size)
        sec.text(f"{dr}/dax_region/align", DAX_ALIGN)
        sec.text(f"{dr}/dax_region/available_size", 0)
        sec.text(f"{dr}/dax_region/seed", f"dax{r.id}.1")
        sec.file(f"{dr}/dax_region/create", b"", 0o644)
        sec.file(f"{dr}/dax_region/delete", b"", 0o200)
        dax = f"dax{r.id}.0"
        dd = f"{dr}/{dax}"
        sec.text(f"{dd}/target_node", -1 if r.numa is None else r.numa)
        sec.text(f"{dd}/numa_node", _numa_of_region(self.node, r))
        sec.text(f"{dd}/size", r.size, 0o644)
        sec.text(f"{dd}/resource", _hex(self.bases[r.window] + r.hpa_offset))
        sec.text(f"{dd}/align", DAX_ALIGN, 0o644)
        sec.text(f"{dd}/dev", f"{DAX_MAJOR}:{r.id}")
        sec.text(f"{dd}/modalias", "dax:t0*")
        sec.link(f"{dd}/subsystem", DAX_BUS)
        driver = "kmem" if active else "device_dax"
        sec.link(f"{dd}/driver", f"{DAX_BUS}/drivers/{driver}")
        sec.link(f"{DAX_BUS}/drivers/{driver}/{dax}", dd)
        sec.link(f"{DAX_BUS}/devices/{dax}", dd)
        sec.link(f"sys/dev/char/{DAX_MAJOR}:{r.id}", dd)
        sec.chardev(f"dev/{dax}", DAX_MAJOR, r.id, 0o600)
        if r.origin == "dcd-extent" and r.extent is not None:
            ed = f"{dr}/extent{r.id}.0"
            sec.text(f"{ed}/offset", _hex(r.dpa_offsets[0]))
            sec.text(f"{ed}/length", _hex(r.size))
            sec.text(f"{ed}/tag", r.extent)


def cxl_section(node: Node, pools: tuple[CxlPool, ...], lay: PciLayout, view: NodeCxlView) -> Section:
    return _CxlTree(node, pools, lay, view).build()


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
