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

Functions of one device (a dual-port NIC's ``.0`` and ``.1``) share the port above them. Once the tree stands,
every BAR gets an address inside its host bridge's apertures and every bridge a window spanning what is below it
(:func:`_assign_addresses`, sized bottom-up and placed top-down as the kernel's resource allocator does), and every
function an IOMMU group: its own behind an ACS port, shared by the functions of one device.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from fakehw.model.system import Cxl, CxlPool, HostBridge, Node
from fakehw.model.units import PciAddress
from fakehw.sysfs import pcidevices as devs
from fakehw.sysfs.pcidevices import NO_CAPABILITIES, BarSpec, Capabilities

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
    caps: Capabilities = NO_CAPABILITIES
    bar_specs: tuple[BarSpec, ...] = ()
    bars: tuple[Bar, ...] = ()
    """BARs (and the expansion ROM, index 6) with their assigned addresses."""
    windows: Windows | None = None
    """A bridge's memory windows."""
    multifunction: bool = False
    iommu_group: int = -1

    @property
    def bdf(self) -> str:
        return str(self.address)

    @property
    def is_bridge(self) -> bool:
        return self.secondary is not None


@dataclass(frozen=True, slots=True)
class Bar:
    """A BAR with its address: the ``resource`` file's line and the config space register."""

    index: int
    start: int
    size: int
    is64: bool
    prefetchable: bool

    @property
    def end(self) -> int:
        return self.start + self.size - 1


@dataclass(frozen=True, slots=True)
class Windows:
    """A bridge's non-prefetchable (32-bit) and prefetchable (64-bit) memory windows; (0, -1) when closed."""

    mem: tuple[int, int] = (0, -1)
    pref: tuple[int, int] = (0, -1)


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
    reserved: dict[str, PciFunction] = field(default_factory=dict)
    """vPPB ref -> the function a pooled logical device shows there while its host holds it (addresses and
    IOMMU group reserved at boot, as hot-plug slots reserve bus and memory space)."""

    def function(self, ref: str) -> PciFunction | None:
        return self.by_ref.get(ref)


@dataclass(frozen=True, slots=True)
class _Facts:
    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    revision: int
    class_code: int
    link_gen: int
    link_width: int
    driver: str
    bars: tuple[BarSpec, ...] = ()
    caps: Capabilities = NO_CAPABILITIES


def _root_port_ids(node: Node) -> tuple[int, int]:
    return ROOT_PORT_IDS.get(node.cpu.vendor, DEFAULT_ROOT_PORT)


def _serial(*parts: str) -> int:
    """A stable 64-bit device serial number (PCIe Device Serial Number capability)."""
    return int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:8], "big")


def _device_facts(node: Node, ref: str, kind: Kind) -> _Facts:
    if kind == "gpu":
        g = node.gpu(ref)
        assert g is not None
        sub = g.sku.pci_subsystem_id
        return _Facts(0x10DE, g.sku.pci_device_id, sub & 0xFFFF, sub >> 16, 0xA1, 0x030200, g.sku.pcie.generation,
                      g.sku.pcie.width, "nvidia", devs.gpu_bars(g.sku),
                      devs.gpu_capabilities(g.sku, _serial(node.name, g.uuid)))
    if kind == "nvswitch":
        sw = next(s for s in node.nvswitches if s.name == ref)
        return _Facts(0x10DE, sw.sku.pci_device_id, 0x10DE, 0x1796, 0xA1, 0x068000, NVSWITCH_LINK[0],
                      NVSWITCH_LINK[1], "nvidia-nvswitch", devs.nvswitch_bars(), devs.NVSWITCH_CAPABILITIES)
    nic = next(n for n in node.nics if n.name == ref)
    gen, width = NIC_LINK.get(nic.sku.id, (5, 16))
    cls = 0x020700 if nic.link_layer == "infiniband" else 0x020000
    return _Facts(nic.sku.vendor_id, nic.sku.device_id, nic.sku.vendor_id, 0x0021, 0x00, cls, gen, width,
                  "mlx5_core", (*devs.nic_bars(), devs.NIC_ROM),
                  devs.nic_capabilities(nic.sku.device_id, _serial(node.name, nic.node_guid)))


def _endpoint(node: Node, hb: HostBridge, t: _Tree, path: str) -> PciFunction:
    f = _device_facts(node, t.ref, t.kind)
    return PciFunction(t.address, path, t.kind, f.vendor, f.device, f.subsystem_vendor, f.subsystem_device,
                       f.revision, f.class_code, hb.numa, f.link_gen, f.link_width, PORT_TYPE["endpoint"],
                       driver=f.driver, ref=t.ref, caps=f.caps, bar_specs=f.bars)


def _bridge(address: PciAddress, path: str, kind: Kind, ids: tuple[int, int], numa: int, link: tuple[int, int],
            buses: tuple[int, int], ref: str | None, cxl: bool = False) -> PciFunction:
    port = {"root-port": "root-port", "cxl-root-port": "root-port", "switch-upstream": "upstream",
            "cxl-switch-upstream": "upstream"}.get(kind, "downstream")
    # subsystem ids 0: drivers/pci/probe.c (pci_setup_device) reads a type 1 header's only from a Bridge Subsystem
    # Vendor ID capability (PCI_CAP_ID_SSVID), which no port here carries (fakehw/sysfs/pcidevices.py)
    return PciFunction(address, path, kind, *ids, 0, 0, 0x01, 0x060400, numa, link[0], link[1], PORT_TYPE[port],
                       buses[0], buses[1], "pcieport", ref, caps=devs.port_capabilities(kind, cxl))


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
    rp_ids = _root_port_ids(node)
    for hb in node.host_bridges:
        hb_dir = f"sys/devices/pci{hb.domain:04x}:{hb.bus:02x}"
        hb_dirs[hb.name] = hb_dir
        kids = sorted(children.get(hb.name, []), key=lambda c: c.address)
        _attach(node, hb, hb_dir, kids, functions, rp_ids)
    placeholders: dict[str, PciFunction] = {}
    _cxl_layout(node, node.cxl, pools, functions, hb_dirs, used_buses, placeholders)
    finished = _finish([*functions, *placeholders.values()], hb_dirs)
    by_path = {f.path: f for f in finished}
    out = [by_path[f.path] for f in functions]
    reserved = {vppb: by_path[f.path] for vppb, f in placeholders.items()}
    by_ref = {f.ref: f for f in out if f.ref is not None}
    return PciLayout(out, hb_dirs, by_ref, reserved)


def _by_bus(kids: Iterable[_Tree]) -> list[list[_Tree]]:
    """Children grouped by bus: one port leads to one link, so one device (several functions of it at most)."""
    groups: dict[tuple[int, int], list[_Tree]] = {}
    for k in kids:
        groups.setdefault((k.address.domain, k.address.bus), []).append(k)
    return [groups[key] for key in sorted(groups)]


def _attach(node: Node, hb: HostBridge, hb_dir: str, kids: list[_Tree], out: list[PciFunction],
            rp_ids: tuple[int, int]) -> None:
    """Children of a host bridge: on the root bus directly, else behind a root port per device."""
    on_root = [k for k in kids if k.address.bus == hb.bus and k.address.domain == hb.domain]
    taken_devs = {k.address.device for k in on_root}
    for kid in on_root:
        _place(node, hb, kid, hb_dir, out)
    next_dev = 1
    for group in _by_bus(k for k in kids if k not in on_root):
        while next_dev in taken_devs:
            next_dev += 1
        rp_addr = PciAddress(hb.domain, hb.bus, next_dev, 0)
        taken_devs.add(next_dev)
        buses = set().union(*(k.buses() for k in group))
        link = max(_subtree_link(node, k) for k in group)
        rp = _bridge(rp_addr, f"{hb_dir}/{rp_addr}", "root-port", rp_ids, hb.numa, link, (min(buses), max(buses)),
                     None)
        out.append(rp)
        for kid in group:
            _place(node, hb, kid, rp.path, out)


def _place(node: Node, hb: HostBridge, t: _Tree, parent_dir: str, out: list[PciFunction]) -> None:
    path = f"{parent_dir}/{t.address}"
    if t.kind != "switch-upstream":
        out.append(_endpoint(node, hb, t, path))
        return
    below = set().union(*(c.buses() for c in t.children)) if t.children else set()
    internal = t.address.bus + 1
    if below and min(below) <= internal:
        raise ValueError(f"PCIe switch {t.ref} at {t.address} has devices on bus {min(below):02x}; its internal "
                         f"bus is {internal:02x}, so what is below it starts at bus {internal + 1:02x}")
    up = _bridge(t.address, path, "switch-upstream", SWITCH_IDS, hb.numa, _subtree_link(node, t),
                 (internal, max(below | {internal})), t.ref)
    out.append(up)
    for k, group in enumerate(_by_bus(t.children)):
        dp_addr = PciAddress(t.address.domain, internal, k, 0)
        gb = set().union(*(c.buses() for c in group))
        link = max(_subtree_link(node, c) for c in group)
        dp = _bridge(dp_addr, f"{path}/{dp_addr}", "switch-downstream", SWITCH_IDS, hb.numa, link,
                     (min(gb), max(gb)), None)
        out.append(dp)
        for c in group:
            _place(node, hb, c, dp.path, out)


def _subtree_link(node: Node, t: _Tree) -> tuple[int, int]:
    if t.kind == "switch-upstream":
        return max((_subtree_link(node, c) for c in t.children), default=(4, 16))
    f = _device_facts(node, t.ref, t.kind)
    return f.link_gen, f.link_width


# --------------------------------------------------------------------------------------------------- addresses

WINDOW_ALIGN = 1 << 20
"""Bridge memory windows have 1 MiB granularity (PCI-to-PCI bridge spec: base/limit hold address bits 31:20)."""
MEM32_BASE = 0x8000_0000
"""Where host bridges' 32-bit apertures start (below the 4 GiB boundary, above RAM's low part)."""
PREF64_BASE = 0x2000_0000_0000
"""Where host bridges' 64-bit prefetchable apertures start (high MMIO, as x86 and arm64 firmware place it)."""


@dataclass
class _Item:
    size: int
    align: int
    owner: str
    """Path of the function (with ``#N`` for its BAR N) or of the bridge whose window this is."""


def _kind_of(bar: BarSpec) -> str:
    return "pref" if bar.prefetchable and bar.is64 and bar.index != 6 else "mem"


def _finish(functions: list[PciFunction], hb_dirs: dict[str, str]) -> list[PciFunction]:
    """Addresses for every BAR and window, multi-function headers and IOMMU groups."""
    kids: dict[str, list[PciFunction]] = {}
    for f in functions:
        kids.setdefault(f.path.rsplit("/", 1)[0], []).append(f)
    sizes: dict[tuple[str, str], tuple[int, int]] = {}  # (bridge path, kind) -> (size, align)

    def items(parent: str, kind: str) -> list[_Item]:
        out: list[_Item] = []
        for f in kids.get(parent, []):
            for b in f.bar_specs:
                if _kind_of(b) == kind:
                    out.append(_Item(b.size, b.size, f"{f.path}#{b.index}"))
            if f.is_bridge:
                size, align = size_of(f.path, kind)
                if size:
                    out.append(_Item(size, align, f.path))
        return sorted(out, key=lambda i: (-i.align, -i.size, i.owner))

    def size_of(parent: str, kind: str) -> tuple[int, int]:
        key = (parent, kind)
        if key not in sizes:
            cursor, align = 0, WINDOW_ALIGN
            for it in items(parent, kind):
                cursor = _round_up(cursor, it.align) + it.size
                align = max(align, it.align)
            sizes[key] = (_round_up(cursor, WINDOW_ALIGN), align)
        return sizes[key]

    placed: dict[str, int] = {}
    windows: dict[str, dict[str, tuple[int, int]]] = {}

    def place(parent: str, kind: str, start: int) -> None:
        cursor = start
        for it in items(parent, kind):
            cursor = _round_up(cursor, it.align)
            placed[it.owner] = cursor
            if "#" not in it.owner:
                windows.setdefault(it.owner, {})[kind] = (cursor, cursor + it.size - 1)
                place(it.owner, kind, cursor)
            cursor += it.size

    mem, pref = MEM32_BASE, PREF64_BASE
    for hb_dir in hb_dirs.values():
        for kind in ("mem", "pref"):
            size, align = size_of(hb_dir, kind)
            if kind == "mem":
                mem = _round_up(mem, align)
                place(hb_dir, kind, mem)
                mem += size
            else:
                pref = _round_up(pref, align)
                place(hb_dir, kind, pref)
                pref += _round_up(size, 1 << 30)
    if mem > 0xF000_0000:
        raise ValueError(f"the 32-bit BARs of this node need {mem - MEM32_BASE:#x} bytes of MMIO below 4 GiB")
    slots: dict[tuple[int, int, int], list[PciFunction]] = {}
    for f in functions:
        slots.setdefault((f.address.domain, f.address.bus, f.address.device), []).append(f)
    groups: dict[tuple[int, int, int] | str, int] = {}
    out: list[PciFunction] = []
    for f in functions:
        bars = tuple(Bar(b.index, placed[f"{f.path}#{b.index}"], b.size, b.is64, b.prefetchable)
                     for b in f.bar_specs)
        win = windows.get(f.path, {})
        slot = (f.address.domain, f.address.bus, f.address.device)
        # Functions of one device without ACS of their own share a group; ports are isolated by their ACS.
        key: tuple[int, int, int] | str = f.path if f.is_bridge else slot
        group = groups.setdefault(key, len(groups))
        out.append(dataclasses.replace(
            f, bars=bars, iommu_group=group, multifunction=len(slots[slot]) > 1,
            windows=Windows(win.get("mem", (0, -1)), win.get("pref", (0, -1))) if f.is_bridge else None))
    return out


def _round_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


# --------------------------------------------------------------------------------------------------- CXL


def _cxl_layout(node: Node, cxl: Cxl, pools: tuple[CxlPool, ...], out: list[PciFunction],
                hb_dirs: dict[str, str], used_buses: dict[int, set[int]],
                placeholders: dict[str, PciFunction]) -> None:
    """CXL host bridges, root ports, switches (and pool switches) and memory devices, numbered depth first; a
    restricted host's device is an integrated endpoint on its host bridge's bus. None for the kernel's cxl_test
    mock, whose devices are platform devices (fakehw.sysfs.cxldevices).

    Below every vPPB of a pool's switch a pooled device's function is laid out too, into ``placeholders``: it
    shows only while this host holds the logical device, but its addresses are reserved from the start."""
    if not cxl.host_bridges or cxl.platform == "cxl_test":
        return
    memdev_at = {m.parent: m for m in cxl.memdevs}
    switch_at = {s.parent: s for s in cxl.switches}
    pool_at = {p.host_port: p for p in pools}
    link = (5, 16)

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
            up = _bridge(up_addr, f"{port_dir}/{up_addr}", "cxl-switch-upstream", CXL_SWITCH_UP, numa, link,
                         (internal, bus + port_buses(port) - 1), name, cxl=True)
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
                fn = _bridge(dp_addr, f"{up.path}/{dp_addr}", "cxl-switch-downstream", CXL_SWITCH_DOWN, numa, link,
                             (child, child + n - 1), dp, cxl=True)
                out.append(fn)
                if sw is not None:
                    below(dp, fn.path, domain, child, numa)
                else:
                    placeholders[dp] = _cxl_memdev(PciAddress(domain, child, 0, 0), fn.path, numa, dp, None)
                child += n
            return
        m = memdev_at.get(port)
        if m is not None:
            out.append(_cxl_memdev(PciAddress(domain, bus, 0, 0), port_dir, numa, m.name, m.serial, m.sku.vendor_id,
                                   m.sku.device_id))

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
                out.append(_cxl_memdev(PciAddress(domain, root_bus, 0, 0), hb_dir, hb.numa, m.name, m.serial,
                                       m.sku.vendor_id, m.sku.device_id))
            continue
        for k, rp in enumerate(hb.root_ports):
            rp_addr = PciAddress(domain, root_bus, k, 0)
            n = port_buses(rp)
            fn = _bridge(rp_addr, f"{hb_dir}/{rp_addr}", "cxl-root-port", CXL_ROOT_PORT, hb.numa, link,
                         (bus, bus + n - 1), rp, cxl=True)
            out.append(fn)
            below(rp, fn.path, domain, bus, hb.numa)
            bus += n


def _cxl_memdev(addr: PciAddress, parent_dir: str, numa: int, ref: str, serial: int | None,
                vendor: int = 0, device: int = 0) -> PciFunction:
    """A CXL type-3 memory device function (class 0x050210); ids default to the generic expander's."""
    if not vendor:
        from fakehw.model.catalogue import catalogue

        sku = catalogue().cxl_memdevs["cxl-type3"]
        vendor, device = sku.vendor_id, sku.device_id
    caps = devs.cxl_memdev_capabilities(serial if serial is not None else _serial(ref))
    return PciFunction(addr, f"{parent_dir}/{addr}", "cxl-memdev", vendor, device, vendor, device, 0x01, 0x050210,
                       numa, 5, 16, PORT_TYPE["endpoint"], driver="cxl_pci", ref=ref, caps=caps,
                       bar_specs=devs.cxl_memdev_bars())


def pool_memdev_function(layout_: PciLayout, pool: CxlPool, slot: int, numa: int) -> PciFunction | None:
    """The PCI function of a pooled device's logical device (``slot`` < LDs) or DCD interface (``slot`` = LDs),
    below its vPPB of the pool's switch; it exists only while the host holds it."""
    reserved = layout_.reserved.get(f"{pool.name}.vppb{slot}")
    if reserved is None:
        return None
    ref = f"{pool.name}.dcd" if slot == pool.logical_devices else f"{pool.name}.ld{slot}"
    return dataclasses.replace(reserved, ref=ref, numa=numa)


def _free_range(used: set[int], need: int) -> int | None:
    """The highest start of ``need`` consecutive free bus numbers below 0x100 (above bus 0)."""
    for start in range(0x100 - need, 0, -1):
        if not any(b in used for b in range(start, start + need)):
            return start
    return None
