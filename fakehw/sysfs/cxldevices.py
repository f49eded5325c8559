"""Where the devices of a node's CXL hierarchy live in sysfs, for the two ways a CXL root is published.

``acpi`` (real platforms): the root is ``ACPI0017:00`` (libcxl's bus provider ``ACPI.CXL``), host bridges are
``ACPI0016`` devices whose physical node is a PCI host bridge, root ports, switch ports and memory devices are PCI
functions (:mod:`fakehw.sysfs.pcilayout`).

``cxl_test`` (the kernel's mock, tools/testing/cxl/test/cxl.c): everything is a platform device, nested as the
module registers them: ``cxl_acpi.0`` (libcxl's provider ``cxl_test``), ``cxl_host_bridge.N`` (a
``physical_node`` link to itself; ``firmware_node`` for the restricted host), ``cxl_root_port.N`` below it,
``cxl_switch_uport.N`` below the root port of the same id, ``cxl_switch_dport.N`` below that, and
``cxl_mem.N``/``cxl_rcd.N`` (N: the device's serial) below its port, each memdev ``memM`` a child of its
platform device.
"""

from __future__ import annotations

from fakehw.model.system import CxlHostBridge, CxlMemdev, Node
from fakehw.sysfs.pcilayout import PciLayout
from fakehw.sysfs.tree import Section

PLATFORM = "sys/devices/platform"
ACPI = "sys/devices/LNXSYSTM:00/LNXSYBUS:00"
PLATFORM_BUS = "sys/bus/platform"
ACPI_BUS = "sys/bus/acpi"
CXL_HOST_BRIDGE_IDS = ("ACPI0016", "PNP0A08", "PNP0A03")
"""A CXL host bridge's _HID and _CIDs: CXL 2.0 9.14.1 (ACPI0016, compatible with a PCIe host bridge, PNP0A08, and a
PCI one, PNP0A03)."""
CXL_ROOT_ID = "ACPI0017"
"""The CXL root object's _HID (CXL 2.0 9.14.1); the kernel makes a platform device of it that cxl_acpi binds."""


class CxlDevices:
    """Device paths of a node's CXL hierarchy (root-relative, ``sys/...``)."""

    def __init__(self, node: Node, lay: PciLayout):
        self.node = node
        self.cxl = node.cxl
        self.lay = lay
        self.mock = self.cxl.platform == "cxl_test"
        self.rp_hb = {rp: h for h in self.cxl.host_bridges for rp in h.root_ports}
        self.hb_order = {h.name: i for i, h in enumerate(sorted(self.cxl.host_bridges, key=lambda h: h.uid))}

    @property
    def root_name(self) -> str:
        return "cxl_acpi.0" if self.mock else "ACPI0017:00"

    @property
    def root_parent(self) -> str:
        return f"{PLATFORM}/{self.root_name}"

    def host_bridge(self, hb: CxlHostBridge) -> str:
        """The device a host bridge's CXL port takes as its uport (and root0's dport points at)."""
        if self.mock:
            return f"{PLATFORM}/cxl_host_bridge.{hb.uid}"
        return f"{ACPI}/ACPI0016:{self.hb_order[hb.name]:02x}"

    def root_port(self, rp: str) -> str | None:
        if self.mock:
            hb = self.rp_hb[rp]
            return f"{self.host_bridge(hb)}/cxl_root_port.{hb.port_id(rp)}"
        fn = self.lay.function(rp)
        return fn.path if fn else None

    def switch_up(self, sw_name: str, parent_rp: str) -> str | None:
        if self.mock:
            rp = self.root_port(parent_rp)
            return f"{rp}/cxl_switch_uport.{self.rp_hb[parent_rp].port_id(parent_rp)}" if rp else None
        fn = self.lay.function(sw_name)
        return fn.path if fn else None

    def switch_dport(self, dp: str, sw_name: str, parent_rp: str, dport_id: int) -> str | None:
        if self.mock:
            up = self.switch_up(sw_name, parent_rp)
            return f"{up}/cxl_switch_dport.{dport_id}" if up else None
        fn = self.lay.function(dp)
        return fn.path if fn else None

    def memdev_parent(self, m: CxlMemdev, port_dir: str | None) -> str | None:
        """The device a local memdev's ``memN`` lives under (its PCI function, or its mock platform device)."""
        if self.mock:
            hb = self.cxl.host_bridge(m.host_bridge)
            if hb is not None and hb.restricted:
                return f"{self.host_bridge(hb)}/cxl_rcd.{m.serial}"
            return f"{port_dir}/cxl_mem.{m.serial}" if port_dir else None
        fn = self.lay.function(m.name)
        return fn.path if fn else None

    # ------------------------------------------------------------------------------------------ ACPI devices

    def acpi_device(self, sec: Section, path: str, ids: tuple[str, ...]) -> None:
        """An ACPI namespace device's own attributes (drivers/acpi/device_sysfs.c): ``hid`` (its _HID), ``modalias``
        and ``uevent`` (``MODALIAS=acpi:`` then _HID and each _CID, each followed by ``:``, create_pnp_modalias;
        the uevent of an ACPI device carries only that, acpi_device_uevent), ``subsystem`` and the bus link."""
        modalias = "acpi:" + "".join(f"{i}:" for i in ids)
        sec.text(f"{path}/hid", ids[0])
        sec.text(f"{path}/modalias", modalias)
        sec.text(f"{path}/uevent", f"MODALIAS={modalias}", 0o644)
        sec.link(f"{path}/subsystem", ACPI_BUS)
        sec.link(f"{ACPI_BUS}/devices/{path.rsplit('/', 1)[1]}", path)

    # ------------------------------------------------------------------------------------------ mock devices

    def platform_device(self, sec: Section, path: str, driver: str | None = None) -> None:
        """A platform device's own attributes: ``subsystem``, ``uevent``, ``modalias`` and its bus/driver links."""
        name = path.rsplit("/", 1)[1]
        base = name.split(".", 1)[0]
        sec.link(f"{path}/subsystem", PLATFORM_BUS)
        sec.text(f"{path}/modalias", f"platform:{base}")
        sec.text(f"{path}/uevent", (f"DRIVER={driver}\n" if driver else "") + f"MODALIAS=platform:{base}", 0o644)
        sec.link(f"{PLATFORM_BUS}/devices/{name}", path)
        if driver is not None:
            sec.link(f"{path}/driver", f"{PLATFORM_BUS}/drivers/{driver}")
            sec.link(f"{PLATFORM_BUS}/drivers/{driver}/{name}", path)
