"""Where every PCI function of a node sits: addresses, bridges, bus ranges and sysfs paths.

The model names host bridges (a root bus), PCIe switches (their upstream port's address) and devices with the
addresses NVML reports. A real PCIe tree has more: a root port above every device or switch that is not on the
root bus, and inside a switch an internal bus whose downstream ports lead to the devices. This module adds
those bridges and gives every bridge a secondary/subordinate bus range that contains exactly what is below it,
because that is how readers such as hwloc and lspci rebuild the hierarchy (from the bridges' config space).

A switch whose model numbering leaves no free bus for its internal bus (edge-pcie nests switches on consecutive
buses) is shown as one bridge spanning its children: the tree above and below it stays right.

CXL host bridges get PCI root buses too (CXL.io is PCIe); their subtrees are numbered depth first in the
highest free range of PCI domain 0, after everything the model places.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fakehw.model.system import Cxl, CxlPool, HostBridge, Node
from fakehw.model.units import PciAddress

Kind = Literal[
    "root-port", "switch-upstream", "switch-downstream", "gpu", "nvswitch", "nic",
    "cxl-root-port", "cxl-switch-upstream", "cxl-switch-downstream", "cxl-memdev",
]
PORT_TYPE = {"endpoint": 0, "root-port": 4, "upstream": 5, "downstream": 6}

# PCI ids of parts the model does not name. Values marked assumed are plausible stand-ins, not checked.
ROOT_PORT_IDS = {
    "GenuineIntel": (0x8086, 0x352A),  # assumed: a Sapphire Rapids-era root port
    "AuthenticAMD": (0x1022, 0x1483),  # AMD Starship/Matisse GPP bridge (EPYC Rome root ports)
    "ARM": (0x10DE, 0x22B2),           # assumed: Grace root port
}
DEFAULT_ROOT_PORT = (0x1B36, 0x000C)   # QEMU's generic PCIe root port (riscv64 projection and others)
SWITCH_IDS = (0x1000, 0xC030)          # assumed: Broadcom PEX890xx Gen5 switch (upstream and downstream ports)
CXL_ROOT_PORT = (0x8086, 0x7075)       # QEMU's CXL root port
CXL_SWITCH_UP = (0x19E5, 0xA128)       # QEMU's CXL switch upstream port
CXL_SWITCH_DOWN = (0x19E5, 0xA129)     # QEMU's CXL switch downstream port
NIC_LINK = {"connectx-6": (4, 16), "connectx-7": (5, 16), "bluefield-3": (5, 16)}
NVSWITCH_LINK = (4, 4)                 # assumed: NVSwitch management link


@dataclass(frozen=True, slots=True)
class PciFunction:
    address: PciAddress
    path: str
    """Root-relative sysfs directory (``sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0``)."""
    kind: Kind
    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    revision: int
    class_code: int
    numa: int
    link_gen: int
    link_width: int
    port_type: int
    secondary: int | None = None
    subordinate: int | None = None
    driver: str | None = None
    ref: str | None = None
    """What the model calls it: ``gpu3``, ``mlx5_0``, ``nvsw0``, ``cxlhb0.rp1``, ``mem2``, ``pool0.ld3``."""

    @property
    def bdf(self) -> str:
        return str(self.address)

    @property
    def is_bridge(self) -> bool:
        return self.secondary is not None


@dataclass
class _Tree:
    """A device or switch below a bridge, with its subtree's bus range."""

    ref: str
    kind: Kind
    address: PciAddress
    children: list[_Tree] = field(default_factory=list)

    def buses(self) -> set[int]:
        out = {self.address.bus}
        for c in self.children:
            out |= c.buses()
        return out


@dataclass
class PciLayout:
    """Every PCI function of a node (model devices, synthesized bridges, CXL), in tree order."""

    functions: list[PciFunction]
    host_bridge_dirs: dict[str, str]
    """Host bridge name (model or CXL) -> ``sys/devices/pciDDDD:BB``."""
    by_ref: dict[str, PciFunction]

    def function(self, ref: str) -> PciFunction | None:
        return self.by_ref.get(ref)


def _root_port_ids(node: Node) -> tuple[int, int]:
    return ROOT_PORT_IDS.get(node.cpu.vendor, DEFAULT_ROOT_PORT)


def _device_info(node: Node, ref: str, kind: Kind) -> tuple[int, int, int, int, int, int, int, int, str]:
    """(vendor, device, subsystem vendor, subsystem device, revision, class, link gen, link width, driver)."""
    if kind == "gpu":
        g = node.gpu(ref)
        assert g is not None
        sub = g.sku.pci_subsystem_id
        return 0x10DE, g.sku.pci_device_id, sub & 0xFFFF, sub >> 16, 0xA1, 0x030200, g.sku.pcie.generation, \
            g.sku.pcie.width, "nvidia"
    if kind == "nvswitch":
        sw = next(s for s in node.nvswitches if s.name == ref)
        return 0x10DE, sw.sku.pci_device_id, 0x10DE, 0x1796, 0xA1, 0x068000, NVSWITCH_LINK[0], NVSWITCH_LINK[1], \
            "nvidia-nvswitch"
    nic = next(n for n in node.nics if n.name == ref)
    gen, width = NIC_LINK.get(nic.sku.id, (5, 16))
    cls = 0x020700 if nic.link_layer == "infiniband" else 0x020000
    return nic.sku.vendor_id, nic.sku.device_id, nic.sku.vendor_id, 0x0021, 0x00, cls, gen, width, "mlx5_core"


def layout(node: Node, pools: tuple[CxlPool, ...] = ()) -> PciLayout:
    """The PCI tree of ``node``; ``pools`` are the system's CXL pools this node is a member of."""
    functions: list[PciFunction] = []
    hb_dirs: dict[str, str] = {}
    children: dict[str, list[_Tree]] = {}
    for sw in node.pcie_switches:
        children.setdefault(sw.parent, []).append(_Tree(sw.name, "switch-upstream", sw.address))
    for g in node.gpus:
        children.setdefault(g.parent, []).append(_Tree(g.name, "gpu", g.address))
    for s in node.nvswitches:
        if s.parent is not None:
            children.setdefault(s.parent, []).append(_Tree(s.name, "nvswitch", s.address))
    for n in node.nics:
        children.setdefault(n.parent, []).append(_Tree(n.name, "nic", n.address))

    def grow(t: _Tree) -> _Tree:
        if t.kind == "switch-upstream":
            t.children = [grow(c) for c in sorted(children.get(t.ref, []), key=lambda c: c.address)]
        return t

    used_buses: dict[int, set[int]] = {}
    for hb in node.host_bridges:
        used = used_buses.setdefault(hb.domain, set())
        used.add(hb.bus)
        for c in children.get(hb.name, []):
            used |= grow(c).buses()
    rp_vendor, rp_device = _root_port_ids(node)
    for hb in node.host_bridges:
        hb_dir = f"sys/devices/pci{hb.domain:04x}:{hb.bus:02x}"
        hb_dirs[hb.name] = hb_dir
        kids = sorted(children.get(hb.name, []), key=lambda c: c.address)
        _attach(node, hb, hb_dir, kids, functions, used_buses.setdefault(hb.domain, set()), rp_vendor, rp_device)
    _cxl_layout(node, node.cxl, pools, functions, hb_dirs, used_buses)
    by_ref = {f.ref: f for f in functions if f.ref is not None}
    return PciLayout(functions, hb_dirs, by_ref)


def _attach(node: Node, hb: HostBridge, hb_dir: str, kids: list[_Tree], out: list[PciFunction],
            used: set[int], rp_vendor: int, rp_device: int) -> None:
    """Children of a host bridge: on the root bus directly, else each behind a root port of its own."""
    taken_devs = {k.address.device for k in kids if k.address.bus == hb.bus}
    next_dev = 1
    for kid in kids:
        if kid.address.bus == hb.bus and kid.address.domain == hb.domain:
            _place(node, hb, kid, hb_dir, out, used)
            continue
        while next_dev in taken_devs:
            next_dev += 1
        rp_addr = PciAddress(hb.domain, hb.bus, next_dev, 0)
        taken_devs.add(next_dev)
        buses = kid.buses()
        gen, width = _subtree_link(node, kid)
        rp = PciFunction(rp_addr, f"{hb_dir}/{rp_addr}", "root-port", rp_vendor, rp_device, rp_vendor, rp_device,
                         0x01, 0x060400, hb.numa, gen, width, PORT_TYPE["root-port"], min(buses), max(buses),
                         "pcieport", None)
        out.append(rp)
        _place(node, hb, kid, rp.path, out, used)


def _place(node: Node, hb: HostBridge, t: _Tree, parent_dir: str, out: list[PciFunction], used: set[int]) -> None:
    path = f"{parent_dir}/{t.address}"
    if t.kind != "switch-upstream":
        v, d, sv, sd, rev, cls, gen, width, driver = _device_info(node, t.ref, t.kind)
        out.append(PciFunction(t.address, path, t.kind, v, d, sv, sd, rev, cls, hb.numa, gen, width,
                               PORT_TYPE["endpoint"], driver=driver, ref=t.ref))
        return
    gen, width = _subtree_link(node, t)
    below = set().union(*(c.buses() for c in t.children)) if t.children else set()
    lowest = min(below, default=t.address.bus + 1)
    internal = next((b for b in range(t.address.bus + 1, lowest) if b not in used), None)
    sub = max(below | {internal or t.address.bus})
    if internal is not None:
        used.add(internal)
        up = PciFunction(t.address, path, "switch-upstream", *SWITCH_IDS, *SWITCH_IDS, 0x01, 0x060400, hb.numa, gen,
                         width, PORT_TYPE["upstream"], internal, sub, "pcieport", t.ref)
        out.append(up)
        by_bus: dict[int, list[_Tree]] = {}
        for c in t.children:
            by_bus.setdefault(c.address.bus, []).append(c)
        for k, (_bus, group) in enumerate(sorted(by_bus.items())):
            dp_addr = PciAddress(t.address.domain, internal, k, 0)
            gb = set().union(*(c.buses() for c in group))
            cgen, cwidth = max(_subtree_link(node, c) for c in group)
            dp = PciFunction(dp_addr, f"{path}/{dp_addr}", "switch-downstream", *SWITCH_IDS, *SWITCH_IDS, 0x01,
                             0x060400, hb.numa, cgen, cwidth, PORT_TYPE["downstream"], min(gb), max(gb),
                             "pcieport", None)
            out.append(dp)
            for c in group:
                _place(node, hb, c, dp.path, out, used)
    else:
        up = PciFunction(t.address, path, "switch-upstream", *SWITCH_IDS, *SWITCH_IDS, 0x01, 0x060400, hb.numa, gen,
                         width, PORT_TYPE["upstream"], lowest, sub, "pcieport", t.ref)
        out.append(up)
        for c in t.children:
            _place(node, hb, c, path, out, used)


def _subtree_link(node: Node, t: _Tree) -> tuple[int, int]:
    if t.kind == "switch-upstream":
        return max((_subtree_link(node, c) for c in t.children), default=(4, 16))
    info = _device_info(node, t.ref, t.kind)
    return info[6], info[7]


# --------------------------------------------------------------------------------------------------- CXL


def _cxl_layout(node: Node, cxl: Cxl, pools: tuple[CxlPool, ...], out: list[PciFunction],
                hb_dirs: dict[str, str], used_buses: dict[int, set[int]]) -> None:
    """CXL host bridges, root ports, switches (and pool switches) and memory devices, numbered depth first; a
    restricted host's device is an integrated endpoint on its host bridge's bus. None for the kernel's cxl_test
    mock, whose devices are platform devices (fakehw.sysfs.cxldevices)."""
    if not cxl.host_bridges or cxl.platform == "cxl_test":
        return
    memdev_at = {m.parent: m for m in cxl.memdevs}
    switch_at = {s.parent: s for s in cxl.switches}
    pool_at = {p.host_port: p for p in pools}

    def port_buses(port: str) -> int:
        """Buses a root/downstream port's subtree needs, the port's secondary bus included."""
        if port in switch_at:
            return 2 + sum(port_buses(dp) for dp in switch_at[port].downstream_ports)
        if port in pool_at:
            return 2 + pool_at[port].logical_devices + 1
        return 1

    def below(port: str, port_dir: str, domain: int, bus: int, numa: int) -> None:
        sw = switch_at.get(port)
        pool = pool_at.get(port)
        if sw is not None or pool is not None:
            up_addr = PciAddress(domain, bus, 0, 0)
            internal = bus + 1
            name = sw.name if sw is not None else f"{pool.name}.vcs" if pool is not None else ""
            up = PciFunction(up_addr, f"{port_dir}/{up_addr}", "cxl-switch-upstream", *CXL_SWITCH_UP,
                             *CXL_SWITCH_UP, 0x01, 0x060400, numa, 5, 16, PORT_TYPE["upstream"], internal,
                             bus + port_buses(port) - 1, "pcieport", name)
            out.append(up)
            child = internal + 1
            if sw is not None:
                dports = list(sw.downstream_ports)
            else:
                assert pool is not None
                dports = [f"{pool.name}.vppb{k}" for k in range(pool.logical_devices + 1)]
            for k, dp in enumerate(dports):
                dp_addr = PciAddress(domain, internal, k, 0)
                n = port_buses(dp) if sw is not None else 1
                fn = PciFunction(dp_addr, f"{up.path}/{dp_addr}", "cxl-switch-downstream", *CXL_SWITCH_DOWN,
                                 *CXL_SWITCH_DOWN, 0x01, 0x060400, numa, 5, 16, PORT_TYPE["downstream"], child,
                                 child + n - 1, "pcieport", dp)
                out.append(fn)
                if sw is not None:
                    below(dp, fn.path, domain, child, numa)
                child += n
            return
        m = memdev_at.get(port)
        if m is not None:
            addr = PciAddress(domain, bus, 0, 0)
            out.append(PciFunction(addr, f"{port_dir}/{addr}", "cxl-memdev", m.sku.vendor_id, m.sku.device_id,
                                   m.sku.vendor_id, m.sku.device_id, 0x01, 0x050210, numa, 5, 16,
                                   PORT_TYPE["endpoint"], driver="cxl_pci", ref=m.name))

    used = used_buses.setdefault(0, set())
    for hb in sorted(cxl.host_bridges, key=lambda h: h.uid):
        need = 1 + sum(port_buses(rp) for rp in hb.root_ports)
        root_bus = _free_range(used, need)
        domain = 0
        if root_bus is None:
            domain, root_bus = 0x10 + hb.uid, 0
        else:
            used.update(range(root_bus, root_bus + need))
        hb_dir = f"sys/devices/pci{domain:04x}:{root_bus:02x}"
        hb_dirs[hb.name] = hb_dir
        bus = root_bus + 1
        if hb.restricted:
            m = memdev_at.get(hb.root_ports[0])
            if m is not None:
                addr = PciAddress(domain, root_bus, 0, 0)
                out.append(PciFunction(addr, f"{hb_dir}/{addr}", "cxl-memdev", m.sku.vendor_id, m.sku.device_id,
                                       m.sku.vendor_id, m.sku.device_id, 0x01, 0x050210, hb.numa, 5, 16,
                                       PORT_TYPE["endpoint"], driver="cxl_pci", ref=m.name))
            continue
        for k, rp in enumerate(hb.root_ports):
            rp_addr = PciAddress(domain, root_bus, k, 0)
            n = port_buses(rp)
            fn = PciFunction(rp_addr, f"{hb_dir}/{rp_addr}", "cxl-root-port", *CXL_ROOT_PORT, *CXL_ROOT_PORT, 0x01,
                             0x060400, hb.numa, 5, 16, PORT_TYPE["root-port"], bus, bus + n - 1, "pcieport", rp)
            out.append(fn)
            below(rp, fn.path, domain, bus, hb.numa)
            bus += n


def pool_memdev_function(layout_: PciLayout, pool: CxlPool, slot: int, numa: int) -> PciFunction | None:
    """The PCI function of a pooled device's logical device (``slot`` < LDs) or DCD interface (``slot`` = LDs),
    below its vPPB of the pool's switch; it exists only while the host holds it."""
    from fakehw.model.catalogue import catalogue

    vppb = layout_.function(f"{pool.name}.vppb{slot}")
    if vppb is None or vppb.secondary is None:
        return None
    sku = catalogue().cxl_memdevs["cxl-type3"]
    addr = PciAddress(vppb.address.domain, vppb.secondary, 0, 0)
    ref = f"{pool.name}.dcd" if slot == pool.logical_devices else f"{pool.name}.ld{slot}"
    return PciFunction(addr, f"{vppb.path}/{addr}", "cxl-memdev", sku.vendor_id, sku.device_id, sku.vendor_id,
                       sku.device_id, 0x01, 0x050210, numa, 5, 16, PORT_TYPE["endpoint"], driver="cxl_pci", ref=ref)


def _free_range(used: set[int], need: int) -> int | None:
    """The highest start of ``need`` consecutive free bus numbers below 0x100 (above bus 0)."""
    for start in range(0x100 - need, 0, -1):
        if not any(b in used for b in range(start, start + need)):
            return start
    return None


def config_space(fn: PciFunction) -> bytes:
    """256 bytes of configuration space: ids, class, header type, bridge bus numbers, a PCIe capability with the
    link's speed and width (readers such as hwloc and lspci take the hierarchy and link from here)."""
    cfg = bytearray(256)

    def put16(off: int, value: int) -> None:
        cfg[off:off + 2] = value.to_bytes(2, "little")

    def put32(off: int, value: int) -> None:
        cfg[off:off + 4] = value.to_bytes(4, "little")

    put16(0x00, fn.vendor)
    put16(0x02, fn.device)
    put16(0x04, 0x0547 if fn.is_bridge else 0x0546)   # I/O (bridges), memory, bus master, SERR, parity
    put16(0x06, 0x0010)                                # capabilities list present
    cfg[0x08] = fn.revision
    put32(0x08, (fn.class_code << 8) | fn.revision)
    cfg[0x0C] = 0x10                                   # cache line size (64 bytes)
    if fn.is_bridge:
        cfg[0x0E] = 0x01
        cfg[0x18] = fn.address.bus
        cfg[0x19] = fn.secondary or 0
        cfg[0x1A] = fn.subordinate or 0
    else:
        cfg[0x0E] = 0x00
        put16(0x2C, fn.subsystem_vendor)
        put16(0x2E, fn.subsystem_device)
        cfg[0x3D] = 0x01                               # INTA
    cfg[0x34] = 0x40
    # PCI Express capability at 0x40.
    cfg[0x40] = 0x10
    cfg[0x41] = 0x00
    put16(0x42, 0x0002 | (fn.port_type << 4))
    put32(0x44, 0x00008FC2)                            # device capabilities (max payload 512, ...)
    put16(0x48, 0x2930)
    put32(0x4C, (fn.link_gen & 0xF) | ((fn.link_width & 0x3F) << 4))   # link capabilities: max speed, width
    put16(0x50, 0x0040)
    put16(0x52, (fn.link_gen & 0xF) | ((fn.link_width & 0x3F) << 4))   # link status: current speed, width
    return bytes(cfg)
