"""CXL: ``/sys/bus/cxl/devices`` (root, ports, endpoints, decoders, memdevs, regions), ``/sys/bus/dax``, hot-added
memory blocks and the character devices ``/dev/cxl/memN`` and ``/dev/daxN.0``, laid out as the kernel's CXL core
lays them out, so that libcxl and libdaxctl (``cxl``, ``daxctl``) read the tree as they read a kernel's.

The tree is a function of the agent's CXL state (:mod:`fakehw.agent.cxlstate`): every HDM decoder shows what the
state holds (endpoint decoders their mode, DPA, region and commit; host bridge and switch decoders the region
that holds them, programmed once the region is active), every region its configuration in whatever state it is
(``idle`` to ``commit``), ``targetN`` only for N below its interleave ways, ``driver`` links exactly where a
driver is bound. Layout (drivers/cxl, Documentation/ABI/testing/sysfs-bus-cxl): ``root0`` under the platform
device of the CXL root (:mod:`fakehw.sysfs.cxldevices`), one port per (unrestricted) host bridge below it, switch
ports while a device below them is bound, endpoints below their parent port (below ``root0`` for a restricted
host's device), root decoders ``decoder0.N`` (the windows) with their regions, a RAM region's DAX region
(``regionN/dax_regionN``, attributes in ``dax_region/``) holding ``daxN.0``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fakehw.agent.cxl import MemdevView, NodeCxlView, Region
from fakehw.agent.cxlcore import CxlCore, KernelError, PortProgram
from fakehw.agent.cxlstate import CxlState, EndpointDecoder
from fakehw.agent.cxltopo import NodeTopology
from fakehw.model.system import CxlWindow, Node, System
from fakehw.sysfs.common import default_hugepage_kb, page_size
from fakehw.sysfs.cxldevices import CXL_HOST_BRIDGE_IDS, CXL_ROOT_ID, CxlDevices
from fakehw.sysfs.pci import function_files, interrupt
from fakehw.sysfs.pcilayout import PciFunction, PciLayout, pool_memdev_function
from fakehw.sysfs.tree import Section

BUS = "sys/bus/cxl"
DEVICES = f"{BUS}/devices"
DRIVERS = f"{BUS}/drivers"
DAX_BUS = "sys/bus/dax"
CXL_DRIVERS = ("cxl_port", "cxl_mem", "cxl_region", "cxl_pmem_region", "cxl_dax_region", "cxl_nvdimm_bridge",
               "cxl_nvdimm")
DAX_DRIVERS = ("kmem", "device_dax")
MODULES = ("cxl_core", "cxl_acpi", "cxl_port", "cxl_mem", "cxl_pmem", "dax", "dax_cxl", "device_dax", "kmem")
"""Modules a CXL host has loaded (``/sys/module/<name>/initstate``: libkmod's test for a loaded module)."""
MOCK_MODULES = ("cxl_test", "cxl_mock", "cxl_mock_mem")
MEMDEV_MAJOR = 250
"""The ``cxl`` memdev character device major (dynamic in the kernel; what fakehw hands out)."""
DAX_MAJOR = 251
DAX_NUMA_NODE = -1
"""``numa_node`` of a CXL region's DAX device: NUMA_NO_NODE. drivers/dax/bus.c shows ``dev_to_node()`` of the
``daxN.0`` device, which nothing sets, so device_add (drivers/base/core.c, "use parent numa_node") gives it its
parent's: ``dax_regionN`` (drivers/cxl/core/region.c, cxl_dax_region_alloc), ``regionN`` (cxl_region_alloc: parent
the root decoder), ``decoder0.N``, ``root0`` (drivers/cxl/core/port.c: a root port's parent is its host) and the
``ACPI0017:00`` platform device, whose node is its ACPI _PXM (drivers/acpi/acpi_platform.c, acpi_get_node), which
the CXL root object has none of; none of the chain sits below a host bridge. hwloc's author listed the same
among what Linux showed for a CXL RAM region ("CXL RAM DAX numa_node is always -1 ?", open-mpi/hwloc#569). The
region's memory goes online in ``target_node`` instead."""
NO_RESOURCE = 0xFFFF_FFFF_FFFF_FFFF
"""What an attribute without an address shows (-1 as %#llx: ``resource`` of a region with no HPA, an unallocated
decoder's ``dpa_resource``)."""
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def dax_align(arch: str) -> int:
    """A CXL DAX region's ``align`` (and its device's, which starts as the region's): drivers/dax/cxl.c hands
    alloc_dax_region PMD_SIZE, the kernel's PMD mapping size: 2 MiB with 4 KiB pages (x86-64, riscv64), 512 MiB
    with the 64 KiB pages of the arm64 hosts (the default huge page size, :func:`default_hugepage_kb`)."""
    return default_hugepage_kb(page_size(arch)) * 1024


def _hex(value: int) -> str:
    return f"0x{value:x}"


CXL_DEVICE_IDS = {"cxl_port": 3, "cxl_memdev": 5, "cxl_region": 6, "cxl_pmem_region": 7, "cxl_dax_region": 8}
"""The cxl bus's device type ids by devtype (drivers/cxl/cxl.h, CXL_DEVICE_*: PORT 3, ROOT 4, MEMORY_EXPANDER 5,
REGION 6, PMEM_REGION 7, DAX_REGION 8); decoders have none (``cxl_device_id`` answers 0)."""
CXL_DEVICE_ROOT = 4


def _uevent(name: str, driver: str | None, devtype: str | None, devnode: tuple[int, int, str] | None) -> str:
    """A cxl bus device's ``uevent`` as drivers/base/core.c's ``dev_uevent`` writes it: MAJOR, MINOR and DEVNAME
    when it has a device number (a memdev: ``cxl_memdev_devnode`` names it ``cxl/memN`` and sets no mode), DEVTYPE,
    DRIVER when one is bound, then the bus's own variable (drivers/cxl/core/port.c, ``cxl_bus_uevent``:
    ``MODALIAS=cxl:t<id>``, the root port's id being CXL_DEVICE_ROOT)."""
    lines = []
    if devnode is not None:
        major, minor, devname = devnode
        lines += [f"MAJOR={major}", f"MINOR={minor}", f"DEVNAME={devname}"]
    if devtype:
        lines.append(f"DEVTYPE={devtype}")
    if driver is not None:
        lines.append(f"DRIVER={driver}")
    lines.append(f"MODALIAS={_modalias(name, devtype)}")
    return "\n".join(lines)


def _modalias(name: str, devtype: str | None) -> str:
    """``cxl:t<id>`` (drivers/cxl/cxl.h, CXL_MODALIAS_FMT), the id ``cxl_device_id`` gives the device: what
    ``cxl_bus_uevent`` puts in MODALIAS and the ``modalias`` attribute shows (libcxl reads a port's and a region's to
    find the module ``cxl enable-port``/``enable-region`` loads)."""
    device_id = CXL_DEVICE_ROOT if devtype == "cxl_port" and name == "root0" else CXL_DEVICE_IDS.get(devtype or "", 0)
    return f"cxl:t{device_id}"


@dataclass
class _Endpoint:
    id: int
    dir: str
    decoders: dict[str, str] = field(default_factory=dict)
    """Region name -> endpoint decoder name (``decoder<id>.<n>``)."""


class _CxlTree:
    """Builds the CXL section of one node (one instance per render)."""

    def __init__(self, system: System, node: Node, lay: PciLayout, view: NodeCxlView):
        self.sec = Section("cxl")
        self.node = node
        self.cxl = node.cxl
        self.topo = NodeTopology(system, node)
        self.pools = self.topo.pools
        self.lay = lay
        self.view = view
        self.state = view.state if view.state is not None else CxlState()
        self.core = CxlCore(self.topo, node.name)
        self.dev = CxlDevices(node, lay)
        self.bus_up = node.name not in self.state.buses_disabled
        self.root = f"{self.dev.root_parent}/root0"
        self.pool_by_name = {p.name: p for p in self.pools}
        self.memdev_fn: dict[str, PciFunction] = {}
        """Pooled memdev name -> the PCI function of its logical device or DCD interface (while its host holds it)."""
        self.port_dir: dict[str, str] = {}
        self.endpoints: dict[str, _Endpoint] = {}
        self.committed: dict[str, int] = {}
        """Bound host bridge and switch ports -> how many of their decoders are committed."""
        self.regions = [rv.region for rv in view.regions]

    # ------------------------------------------------------------------------------------------ helpers

    def device(self, path: str, name: str, driver: str | None, devtype: str | None = None,
               devnode: tuple[int, int, str] | None = None) -> None:
        """The attributes every CXL device has: ``subsystem``, ``uevent``, the bus link and, bound, ``driver``.
        ``devnode``: (major, minor, name under /dev) of a device with a character device (a memdev).

        Every device but a memdev also has drivers/cxl/core/port.c's ``cxl_base_attribute_group``, ``devtype`` and
        ``modalias`` (ports, decoders, regions, pmem and dax regions list it in their groups;
        ``cxl_memdev_attribute_groups`` does not, so a memdev has neither file, only DEVTYPE in its uevent)."""
        sec = self.sec
        sec.link(f"{path}/subsystem", BUS)
        sec.text(f"{path}/uevent", _uevent(name, driver, devtype, devnode), 0o644)
        if devtype and devtype != "cxl_memdev":
            sec.text(f"{path}/devtype", devtype)
            sec.text(f"{path}/modalias", _modalias(name, devtype))
        sec.link(f"{DEVICES}/{name}", path)
        if driver is not None:
            sec.link(f"{path}/driver", f"{DRIVERS}/{driver}")
            sec.link(f"{DRIVERS}/{driver}/{name}", path)

    def decoder(self, d: str, start: int, size: int, ways: int, granularity: int, targets: str | None,
                region: str) -> None:
        sec = self.sec
        sec.text(f"{d}/start", _hex(start))
        sec.text(f"{d}/size", _hex(size))
        sec.text(f"{d}/locked", 0)
        sec.text(f"{d}/target_type", "expander")
        sec.text(f"{d}/interleave_ways", ways)
        sec.text(f"{d}/interleave_granularity", granularity)
        if targets is not None:
            sec.text(f"{d}/target_list", targets)
        sec.text(f"{d}/region", region)

    def base(self, r: Region) -> int:
        return self.topo.bases[r.window] + r.hpa_offset

    # ------------------------------------------------------------------------------------------ build

    def build(self) -> Section:
        if not self.cxl.host_bridges:
            return self.sec
        self.bus_files()
        self.pci_functions()
        self.root_device()
        if self.bus_up:
            self.root_port()
            self.host_bridge_ports()
            self.switch_ports()
            self.pool_ports()
            self.root_decoders()
        self.memdevs()
        if self.bus_up:
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
            for attr in ("bind", "unbind", "new_id", "remove_id"):
                sec.file(f"{DAX_BUS}/drivers/{drv}/{attr}", b"", 0o200)
        sec.file("sys/bus/platform/drivers/cxl_acpi/bind", b"", 0o200)
        sec.file("sys/bus/platform/drivers/cxl_acpi/unbind", b"", 0o200)
        for mod in (*MODULES, *(MOCK_MODULES if self.dev.mock else ())):
            sec.text(f"sys/module/{mod}/initstate", "live")

    def pci_functions(self) -> None:
        """PCI functions of the CXL hierarchy (pooled memdevs only while a logical device is held). ``memdev_fn``
        maps the pooled memdevs to theirs: a local memdev finds its function by name in the layout
        (CxlDevices.memdev_parent)."""
        for fn in self.lay.functions:
            if fn.kind.startswith("cxl-"):
                function_files(self.sec, fn, self.node, interrupt(self.lay, fn))
        for m in self.view.memdevs:
            if m.pool is not None:
                pool = self.pool_by_name[m.pool]
                slot = pool.logical_devices if m.ld is None else m.ld
                fn2 = pool_memdev_function(self.lay, pool, slot, m.numa)
                if fn2 is not None:
                    self.memdev_fn[m.name] = fn2
                    function_files(self.sec, fn2, self.node, interrupt(self.lay, fn2))

    def root_device(self) -> None:
        """The platform device of the CXL root (bound to cxl_acpi while the bus is up) and, for cxl_test, the mock
        host bridges, root ports and switch ports (platform devices that exist whatever CXL binds)."""
        sec = self.sec
        if self.dev.mock:
            self.dev.platform_device(sec, self.dev.root_parent, "cxl_acpi" if self.bus_up else None)
            self.mock_devices()
        else:
            parent = self.dev.root_parent
            sec.link(f"{parent}/subsystem", "sys/bus/platform")
            # platform_uevent: an ACPI-enumerated platform device's MODALIAS is its ACPI companion's
            modalias = f"MODALIAS=acpi:{CXL_ROOT_ID}:"
            sec.text(f"{parent}/uevent", f"DRIVER=cxl_acpi\n{modalias}" if self.bus_up else modalias, 0o644)
            if self.bus_up:
                sec.link(f"{parent}/driver", "sys/bus/platform/drivers/cxl_acpi")
                sec.link("sys/bus/platform/drivers/cxl_acpi/ACPI0017:00", parent)
            for hb in self.cxl.host_bridges:
                acpi = self.dev.host_bridge(hb)
                self.dev.acpi_device(sec, acpi, CXL_HOST_BRIDGE_IDS)
                sec.text(f"{acpi}/uid", hb.uid)
                sec.text(f"{acpi}/path", f"\\_SB_.CXL{hb.uid}")
                if hb.name in self.lay.host_bridge_dirs:
                    sec.link(f"{acpi}/physical_node", self.lay.host_bridge_dirs[hb.name])

    def mock_devices(self) -> None:
        sec, dev = self.sec, self.dev
        for hb in self.cxl.host_bridges:
            path = dev.host_bridge(hb)
            dev.platform_device(sec, path)
            sec.link(f"{path}/firmware_node" if hb.restricted else f"{path}/physical_node", path)
            if hb.restricted:
                continue
            for rp in hb.root_ports:
                rpath = dev.root_port(rp)
                assert rpath is not None
                dev.platform_device(sec, rpath)
        for sw in self.cxl.switches:
            up = dev.switch_up(sw.name, sw.parent)
            assert up is not None
            dev.platform_device(sec, up)
            for dp in sw.downstream_ports:
                dpath = dev.switch_dport(dp, sw.name, sw.parent, sw.port_id(dp))
                assert dpath is not None
                dev.platform_device(sec, dpath)

    def root_port(self) -> None:
        sec = self.sec
        sec.link(f"{self.root}/uport", self.dev.root_parent)
        self.device(self.root, "root0", "cxl_port", "cxl_port")
        for hb in self.cxl.host_bridges:
            sec.link(f"{self.root}/dport{hb.uid}", self.dev.host_bridge(hb))

    def port(self, pdir: str, pid: int, uport: str | None, parent_dport: str | None,
             dports: Iterable[tuple[int, str]], bound: bool = True) -> None:
        sec = self.sec
        if uport is not None:
            sec.link(f"{pdir}/uport", uport)
        if parent_dport is not None:
            sec.link(f"{pdir}/parent_dport", parent_dport)
        for k, target in dports:
            sec.link(f"{pdir}/dport{k}", target)
        self.device(pdir, f"port{pid}", "cxl_port" if bound else None, "cxl_port")

    def host_bridge_ports(self) -> None:
        for hb in self.cxl.host_bridges:
            if hb.restricted:
                continue
            pdir = self.port_dir[hb.name] = f"{self.root}/port{self.topo.port_id[hb.name]}"
            dports = [(hb.port_id(rp), p) for rp in hb.root_ports if (p := self.dev.root_port(rp))]
            host = self.dev.host_bridge(hb)
            self.port(pdir, self.topo.port_id[hb.name], host, host, dports,
                      bound=self.core.port_enabled(self.state, hb.name))

    def switch_ports(self) -> None:
        for sw in self.cxl.switches:
            hb = self.dev.rp_hb[sw.parent]
            if hb.name not in self.port_dir or not self.core.port_exists(self.state, sw.name):
                continue
            pdir = self.port_dir[sw.name] = f"{self.port_dir[hb.name]}/port{self.topo.port_id[sw.name]}"
            dports = [(sw.port_id(dp), p) for dp in sw.downstream_ports
                      if (p := self.dev.switch_dport(dp, sw.name, sw.parent, sw.port_id(dp)))]
            self.port(pdir, self.topo.port_id[sw.name], self.dev.switch_up(sw.name, sw.parent),
                      self.dev.root_port(sw.parent), dports)

    def _owner_dir(self, port: str) -> str | None:
        """Directory of the CXL port object that owns the PCIe port ``port`` (root or downstream)."""
        if port in self.dev.rp_hb:
            return self.port_dir.get(self.dev.rp_hb[port].name)
        sw = self.topo.sw_of_dp.get(port)
        return self.port_dir.get(sw) if sw else None

    def pool_ports(self) -> None:
        for p in self.pools:
            name = f"{p.name}.vcs"
            owner = self._owner_dir(p.host_port)
            if owner is None:
                continue
            pdir = self.port_dir[name] = f"{owner}/port{self.topo.port_id[name]}"
            up, parent = self.lay.function(name), self.lay.function(p.host_port)
            dports = [(k, fn.path) for k in range(p.logical_devices + 1)
                      if (fn := self.lay.function(f"{p.name}.vppb{k}"))]
            self.port(pdir, self.topo.port_id[name], up.path if up else None, parent.path if parent else None, dports)

    def root_decoders(self) -> None:
        sec = self.sec
        for w in self.cxl.windows:
            d = f"{self.root}/decoder0.{w.index}"
            targets = ",".join(str(h.uid) for t in w.targets if (h := self.cxl.host_bridge(t)) is not None)
            sec.text(f"{d}/start", _hex(self.topo.bases[w.name]))
            sec.text(f"{d}/size", _hex(w.size))
            sec.text(f"{d}/locked", 0 if self.dev.mock else 1)
            sec.text(f"{d}/target_list", targets)
            sec.text(f"{d}/target_type", "expander")
            sec.text(f"{d}/interleave_ways", len(w.targets))
            sec.text(f"{d}/interleave_granularity", w.root_granularity)
            sec.text(f"{d}/cap_ram", int(w.ram))
            sec.text(f"{d}/cap_pmem", int(w.pmem))
            sec.text(f"{d}/cap_type2", 0)
            sec.text(f"{d}/cap_type3", 1)
            sec.text(f"{d}/qos_class", w.qos_class)
            # Every window of the node has its id (boot_root_ids at probe, _fill_root_ids after each change).
            offered = f"region{self.state.root_ids[(self.node.name, w.name)]}"
            if w.ram:
                sec.text(f"{d}/create_ram_region", offered, 0o644)
            if w.pmem:
                sec.text(f"{d}/create_pmem_region", offered, 0o644)
            sec.file(f"{d}/delete_region", b"", 0o200)
            self.device(d, f"decoder0.{w.index}", None, "cxl_decoder_root")

    # ------------------------------------------------------------------------------------------ memdevs

    def memdevs(self) -> None:
        local = {m.name: m for m in self.cxl.memdevs}
        for m in self.view.memdevs:
            if m.name in local:
                model = local[m.name]
                port_dir = None
                if self.dev.mock and not self.topo.hbs[model.host_bridge].restricted:
                    hop = self.topo.hops(model)[-1]
                    if model.behind_switch:
                        sw = self.topo.switches[hop.port]
                        port_dir = self.dev.switch_dport(hop.dport, sw.name, sw.parent, hop.dport_id)
                    else:
                        port_dir = self.dev.root_port(hop.dport)
                parent = self.dev.memdev_parent(model, port_dir)
                if parent is not None and self.dev.mock:
                    self.dev.platform_device(self.sec, parent, "cxl_mock_mem")
            else:
                fn = self.memdev_fn.get(m.name)
                parent = fn.path if fn else None
            if parent is not None:
                self.memdev(m, f"{parent}/{m.sysfs_name}")

    def memdev(self, m: MemdevView, md: str) -> None:
        sec = self.sec
        model = self.cxl.memdev(m.name)
        sku = model.sku if model is not None else None
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
        sec.text(f"{md}/firmware_version", sku.firmware_version if sku else "BWFW VERSION 00")
        sec.text(f"{md}/payload_max", sku.payload_max if sku else 2048)
        sec.text(f"{md}/label_storage_size", sku.label_storage_size if sku else 0)
        sec.text(f"{md}/security/state", "disabled")
        sec.text(f"{md}/dev", f"{MEMDEV_MAJOR}:{m.sysfs_id}")
        sec.link(f"sys/dev/char/{MEMDEV_MAJOR}:{m.sysfs_id}", md)
        sec.chardev(f"dev/cxl/{m.sysfs_name}", MEMDEV_MAJOR, m.sysfs_id, 0o600)
        bound = m.online and self.bus_up
        self.device(md, m.sysfs_name, "cxl_mem" if bound else None, "cxl_memdev",
                    (MEMDEV_MAJOR, m.sysfs_id, f"cxl/{m.sysfs_name}"))
        if bound:
            self.endpoint(m, md)

    def endpoint(self, m: MemdevView, md: str) -> None:
        """The endpoint port of a bound memdev (the kernel removes it when ``cxl_mem`` unbinds)."""
        eid = self.topo.endpoint_id(m.name)
        model = self.cxl.memdev(m.name)
        parent_dport: str | None
        if model is not None:
            hops = self.topo.hops(model)
            if not hops:  # a restricted host's device: its endpoint hangs off the root, through the host's dport
                hb = self.topo.hbs[model.host_bridge]
                parent_dir, parent_dport = self.root, self.dev.host_bridge(hb)
            else:
                parent_dir = self.port_dir.get(hops[-1].port, "")
                hop = hops[-1]
                if model.behind_switch:
                    sw = self.topo.switches[hop.port]
                    parent_dport = self.dev.switch_dport(hop.dport, sw.name, sw.parent, hop.dport_id)
                else:
                    parent_dport = self.dev.root_port(hop.dport)
        else:
            pool = self.pool_by_name[m.pool or ""]
            parent_dir = self.port_dir.get(f"{pool.name}.vcs", "")
            fn = self.lay.function(f"{pool.name}.vppb{pool.logical_devices if m.ld is None else m.ld}")
            parent_dport = fn.path if fn else None
        if not parent_dir:
            return
        edir = f"{parent_dir}/endpoint{eid}"
        self.endpoints[m.name] = _Endpoint(eid, edir)
        self.port(edir, eid, md, parent_dport, ())
        self.sec.link(f"{DEVICES}/endpoint{eid}", edir)

    # ------------------------------------------------------------------------------------------ decoders

    def window_of(self, r: Region) -> CxlWindow:
        return self.topo.windows[r.window]

    def programming(self, r: Region) -> dict[str, PortProgram]:
        if r.state not in ("active", "commit") or r.pool is not None:
            return {}
        try:
            return self.core.programming(r)
        except KernelError:
            return {}

    def port_decoders(self) -> None:
        """Host bridge and switch decoders from the state's slots (region programming once it is active); the
        pooled devices' virtual switches decode the regions that hold their logical devices."""
        programs = {r.name: self.programming(r) for r in self.regions}
        by_name = {r.name: r for r in self.regions}
        for port, pdir in self.port_dir.items():
            if port.endswith(".vcs"):
                continue
            if port in self.topo.hbs and not self.core.port_enabled(self.state, port):
                continue  # an unbound port has no decoders (they are devm on the port)
            slots = self.state.port_slots.get((self.node.name, port), ())
            count = self.topo.port_decoders(port)
            default = ",".join(str(i) for i in self.topo.port_dports(port)[:1])  # an idle decoder: 1 way, 1 target
            committed = 0
            pid = self.topo.port_id[port]
            for i in range(count):
                d = f"{pdir}/decoder{pid}.{i}"
                holder = by_name.get(slots[i]) if i < len(slots) and slots[i] else None
                prog = programs.get(holder.name, {}).get(port) if holder is not None else None
                if holder is not None and prog is not None:
                    self.decoder(d, self.base(holder), holder.size, prog.ways, prog.granularity,
                                 ",".join(map(str, prog.targets)), holder.name)
                    committed += holder.committed
                else:
                    self.decoder(d, 0, 0, 1, 256, default, holder.name if holder else "")
                self.device(d, f"decoder{pid}.{i}", None, "cxl_decoder_switch")
            self.committed[port] = committed
            self.sec.text(f"{pdir}/decoders_committed", committed)
        self.pool_port_decoders()

    def pool_port_decoders(self) -> None:
        for p in self.pools:
            name = f"{p.name}.vcs"
            pdir = self.port_dir.get(name)
            if pdir is None:
                continue
            rows = [r for r in self.regions if r.pool == p.name and r.committed]
            pid = self.topo.port_id[name]
            for i in range(max(4, len(rows))):
                d = f"{pdir}/decoder{pid}.{i}"
                if i < len(rows):
                    r = rows[i]
                    self.decoder(d, self.base(r), r.size, 1, r.granularity,
                                 str(p.logical_devices if r.ld is None else r.ld), r.name)
                else:
                    self.decoder(d, 0, 0, 1, 256, "", "")
                self.device(d, f"decoder{pid}.{i}", None, "cxl_decoder_switch")
            self.sec.text(f"{pdir}/decoders_committed", len(rows))
        self.pool_host_decoders()

    def pool_host_decoders(self) -> None:
        """A pooled region passes its host bridge through one decoder (its root port), after the slots regions of
        local devices hold; the port's ``decoders_committed`` counts them with the local ones (port->commit_end + 1,
        drivers/cxl/core/port.c)."""
        for p in self.pools:
            hb = self.dev.rp_hb.get(p.host_port)
            if hb is None or hb.name not in self.committed:
                continue  # not a bound host bridge port: it has no decoders
            rows = [r for r in self.regions if r.pool == p.name and r.committed]
            if not rows:
                continue
            slots = self.state.port_slots.get((self.node.name, hb.name), ())
            pid = self.topo.port_id[hb.name]
            free = [i for i in range(max(hb.decoders, len(slots) + len(rows)))
                    if i >= len(slots) or not slots[i]]
            for i, r in zip(free, rows, strict=False):
                d = f"{self.port_dir[hb.name]}/decoder{pid}.{i}"
                self.decoder(d, self.base(r), r.size, 1, r.granularity * len(self.window_of(r).targets),
                             str(hb.port_id(p.host_port)), r.name)
                self.device(d, f"decoder{pid}.{i}", None, "cxl_decoder_switch")
                self.committed[hb.name] += 1
            self.sec.text(f"{self.port_dir[hb.name]}/decoders_committed", self.committed[hb.name])

    def endpoint_decoders(self) -> None:
        for m in self.view.memdevs:
            ep = self.endpoints.get(m.name)
            if ep is None:
                continue
            ds = self.state.decoders(self.node.name, m.name)
            if ds is not None:
                self.local_endpoint_decoders(m, ep, ds)
            else:
                self.pooled_endpoint_decoders(m, ep)

    def local_endpoint_decoders(self, m: MemdevView, ep: _Endpoint, ds: tuple[EndpointDecoder, ...]) -> None:
        sec = self.sec
        by_name = {r.name: r for r in self.regions}
        for i, dec in enumerate(ds):
            d = f"{ep.dir}/decoder{ep.id}.{i}"
            r = by_name.get(dec.region) if dec.region else None
            if r is not None:
                self.decoder(d, self.base(r), r.size, r.ways, r.granularity, None, r.name)
                ep.decoders[r.name] = f"decoder{ep.id}.{i}"
            else:
                self.decoder(d, 0, 0, 1, 256, None, "")
            sec.text(f"{d}/mode", dec.mode, 0o644)
            sec.text(f"{d}/dpa_resource", _hex(dec.dpa_base if dec.dpa_size else NO_RESOURCE))
            sec.text(f"{d}/dpa_size", _hex(dec.dpa_size), 0o644)
            self.device(d, f"decoder{ep.id}.{i}", None, "cxl_decoder_endpoint")
        sec.text(f"{ep.dir}/decoders_committed", sum(d.committed for d in ds))

    def pooled_endpoint_decoders(self, m: MemdevView, ep: _Endpoint) -> None:
        sec = self.sec
        mine = [r for r in self.regions if m.name in r.targets]
        for i in range(max(2, len(mine))):
            d = f"{ep.dir}/decoder{ep.id}.{i}"
            if i < len(mine):
                r = mine[i]
                self.decoder(d, self.base(r), r.size, r.ways, r.granularity, None, r.name)
                sec.text(f"{d}/mode", "dynamic_ram_a" if r.origin == "dcd-extent" else r.mode, 0o644)
                sec.text(f"{d}/dpa_resource", _hex(r.dpa_offsets[0]))
                sec.text(f"{d}/dpa_size", _hex(r.size), 0o644)
                ep.decoders[r.name] = f"decoder{ep.id}.{i}"
            else:
                self.decoder(d, 0, 0, 1, 256, None, "")
                sec.text(f"{d}/mode", "none", 0o644)
                sec.text(f"{d}/dpa_resource", _hex(NO_RESOURCE))
                sec.text(f"{d}/dpa_size", _hex(0), 0o644)
            self.device(d, f"decoder{ep.id}.{i}", None, "cxl_decoder_endpoint")
        sec.text(f"{ep.dir}/decoders_committed", len(mine))

    # ------------------------------------------------------------------------------------------ regions

    def region(self, r: Region) -> None:
        sec = self.sec
        w = self.window_of(r)
        d = f"{self.root}/decoder0.{w.index}/{r.name}"
        if r.mode == "pmem":
            sec.text(f"{d}/uuid", r.uuid or ZERO_UUID, 0o644)
        else:
            sec.text(f"{d}/uuid", "", 0o444)
        sec.text(f"{d}/interleave_ways", r.ways, 0o644)
        sec.text(f"{d}/interleave_granularity", r.granularity, 0o644)
        sec.text(f"{d}/size", _hex(r.size), 0o644)
        sec.text(f"{d}/mode", "dynamic_ram_a" if r.origin == "dcd-extent" else r.mode)
        sec.text(f"{d}/resource", _hex(self.base(r) if r.size else NO_RESOURCE))
        sec.text(f"{d}/commit", int(r.committed), 0o644)
        for i, t in enumerate(r.targets):
            ep = self.endpoints.get(t) if t else None
            sec.text(f"{d}/target{i}", ep.decoders.get(r.name, "") if ep else "", 0o644)
        self.device(d, r.name, "cxl_region" if r.enabled else None, "cxl_region")
        if not r.enabled:
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
        dr = f"{d}/dax_region{r.id}"
        align = dax_align(self.node.cpu.arch)
        self.device(dr, f"dax_region{r.id}", "cxl_dax_region", "cxl_dax_region")
        sec.text(f"{dr}/dax_region/id", r.id)
        sec.text(f"{dr}/dax_region/size", r.size)
        sec.text(f"{dr}/dax_region/align", align)
        sec.text(f"{dr}/dax_region/available_size", 0)
        sec.text(f"{dr}/dax_region/seed", f"dax{r.id}.1")
        sec.file(f"{dr}/dax_region/create", b"", 0o644)
        sec.file(f"{dr}/dax_region/delete", b"", 0o200)
        dax = f"dax{r.id}.0"
        dd = f"{dr}/{dax}"
        # Only RAM regions have a DAX region, and a RAM region's view always names the node its memory goes online
        # in (NodeCxlView._region_view: the region's node, else its window's): never NUMA_NO_NODE here.
        assert rv is not None and rv.target_node is not None, r.name
        start = self.base(r)
        sec.text(f"{dd}/target_node", rv.target_node)
        sec.text(f"{dd}/numa_node", DAX_NUMA_NODE)
        sec.text(f"{dd}/size", r.size, 0o644)
        sec.text(f"{dd}/resource", _hex(start))
        sec.text(f"{dd}/align", align, 0o644)
        sec.text(f"{dd}/dev", f"{DAX_MAJOR}:{r.id}")
        sec.text(f"{dd}/modalias", "dax:t0")  # drivers/dax/bus.h DAX_DEVICE_MODALIAS_FMT; the * is MODULE_ALIAS's
        sec.text(f"{dd}/mapping0/start", _hex(start))
        sec.text(f"{dd}/mapping0/end", _hex(start + r.size - 1))
        sec.text(f"{dd}/mapping0/page_offset", _hex(0))
        sec.link(f"{dd}/subsystem", DAX_BUS)
        if r.dax:
            sec.link(f"{dd}/driver", f"{DAX_BUS}/drivers/{r.dax}")
            sec.link(f"{DAX_BUS}/drivers/{r.dax}/{dax}", dd)
        sec.link(f"{DAX_BUS}/devices/{dax}", dd)
        sec.link(f"sys/dev/char/{DAX_MAJOR}:{r.id}", dd)
        sec.chardev(f"dev/{dax}", DAX_MAJOR, r.id, 0o600)
        if r.origin == "dcd-extent" and r.extent is not None:
            # offset is the extent's place in the region (the DCD series' region_extent hpa_range, relative to the
            # region; drivers/dax/cxl.c adds the DAX region's start to it), not in the device: each extent has a
            # region of its own here, whose endpoint decoder starts at the extent's DPA, so it starts the region
            ed = f"{dr}/extent{r.id}.0"
            sec.text(f"{ed}/offset", _hex(0))
            sec.text(f"{ed}/length", _hex(r.size))
            sec.text(f"{ed}/tag", r.extent)


def cxl_section(system: System, node: Node, lay: PciLayout, view: NodeCxlView) -> Section:
    return _CxlTree(system, node, lay, view).build()
