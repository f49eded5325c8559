"""PCI: ``/sys/devices/pci*`` (the device hierarchy) and ``/sys/bus/pci``.

Every function gets the attributes readers use (ids, class, ``numa_node``, ``local_cpus``, link speed and width)
and 256 bytes of ``config`` (the hierarchy is rebuilt from the bridges' bus numbers there, and the link from the
PCIe capability). ``/sys/bus/pci/devices/<bdf>`` links to the function, ``driver`` to ``/sys/bus/pci/drivers``.

GPUs are a dynamic section: a GPU that fell off the bus disappears from PCI (its function, its bus link, its
``/proc/driver/nvidia/gpus`` entry) and comes back when healed. Bridges, NVSwitches and NICs are static; the NICs'
network and RDMA class devices are :mod:`fakehw.sysfs.rdma`. Every function also gets its BARs (``resource``,
``resourceN``), SR-IOV attributes where it has the capability, and its IOMMU group.
"""

from __future__ import annotations

import re

from fakehw.model.system import Node
from fakehw.model.units import format_cpulist
from fakehw.sysfs.common import cpumask
from fakehw.sysfs.pciconfig import config_space
from fakehw.sysfs.pcilayout import Bar, PciFunction, PciLayout
from fakehw.sysfs.tree import Section

SPEED = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe",
         6: "64.0 GT/s PCIe"}
GPU_KINDS = ("gpu",)
IOMMU_GROUPS = "sys/kernel/iommu_groups"
PCI_BUS = "sys/bus/pci"
"""What every PCI function's ``subsystem`` link points at (the driver core links a device to its bus)."""
# struct resource flags (include/linux/ioport.h) plus the BAR's own type bits, as the resource file shows them.
IORESOURCE_MEM, IORESOURCE_PREFETCH, IORESOURCE_READONLY = 0x200, 0x2000, 0x4000
IORESOURCE_SIZEALIGN, IORESOURCE_MEM_64 = 0x40000, 0x100000
PCI_PREF_RANGE_TYPE_64 = 0x1
"""The Prefetchable Memory Base register's type bits (include/uapi/linux/pci_regs.h): the window is 64-bit, as
config space (fakehw.sysfs.pciconfig) makes every prefetchable window."""
MSI_WINDOW = {"amd64": "0x00000000fee00000 0x00000000feefffff msi\n",
              "arm64": "0x0000000008000000 0x00000000080fffff msi\n"}
PCI_DEFAULT_DMA_BITS = 32
"""The DMA mask the PCI core gives every function (drivers/pci/probe.c, pci_setup_device: 0xffffffff) until its
driver sets another; ``dma_mask_bits`` is fls64 of it. pcieport sets none, so bridges show 32."""
DMA_MASK_BITS = {"gpu": 52, "nic": 64, "nvswitch": 64}
"""Functions whose driver sets a wider mask: mlx5_core DMA_BIT_MASK(64) (set_dma_caps), nvidia-nvswitch the switch's
DMA width, 64 on LR10/LS10 (open-gpu-kernel-modules, nvswitch_os_set_dma_mask), the GPU what the NVIDIA driver sets
(its /proc information's ``DMA Size``). cxl_pci sets none (drivers/cxl/pci.c, cxl_pci_probe: the mailbox is MMIO,
the device does no DMA for the driver), so CXL memory devices keep the core's 32 like the bridges."""
WC_MMAP_ARCHES = ("amd64", "arm64")
"""Where ``arch_can_pci_mmap_wc()`` is true, so a prefetchable BAR also gets ``resourceN_wc`` (drivers/pci/pci-sysfs.c):
x86 with PAT (arch/x86/include/asm/pci.h; the fake's x86 CPUs have ``pat``) and arm64 (1, arch/arm64/include/asm/pci.h).
RISC-V's asm/pci.h does not define it, so include/linux/pci.h's fallback, 0, applies there."""
CXL_KINDS = ("cxl-root-port", "cxl-switch-upstream", "cxl-switch-downstream", "cxl-memdev")
MSI_IRQ_BASE = 24
"""Where MSI irqs are numbered from: above the 24 GSIs of the first I/O APIC (x86 hands out MSI irqs past gsi_top);
the numbers themselves are the kernel's choice, only that each MSI vector has its own irq matters."""
INTX_GSI_BASE = 16
"""PIRQ A-D land on I/O APIC pins 16-19 (the firmware's routing of the root bus's INTx lines; below it the PCI
interrupt swizzle of INTx by slot at every bridge, pci_swizzle_interrupt_pin)."""
BDF_PART = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
"""A PCI function's directory name in the device hierarchy (domain:bus:device.function)."""
PCI_INTERRUPT_LINE, PCI_INTERRUPT_PIN = 0x3C, 0x3D
"""Config space offsets of the Interrupt Line and Interrupt Pin registers (include/uapi/linux/pci_regs.h)."""


def interrupt(lay: PciLayout, fn: PciFunction) -> int:
    """``irq`` of a function (drivers/pci/pci-sysfs.c, irq_show): the first MSI vector's irq while MSI is on, else
    pdev->irq. Bridges (pcieport) use MSI, each vector an irq of its own, as their config space says
    (fakehw/sysfs/pciconfig.py enables MSI on bridges only); the endpoint drivers use MSI-X (enabled in their config
    space; the NVIDIA driver with ``EnableMSI: 1`` takes MSI-X where the GPU has it, nv.c, and nv_init_msix leaves
    nv->interrupt_line, its /proc IRQ, at pdev->irq), which leaves pdev->irq at the INTx line the firmware routes
    INTA to (acpi_pci_irq_enable at pci_enable_device), non-zero and shared between functions as the wires are. A
    function no driver enabled keeps what drivers/pci/probe.c, pci_read_irq, read at enumeration: its Interrupt
    Line register if it has an interrupt pin, else 0 (255, "no connection", for the fake's functions, which all
    have INTA)."""
    if not fn.driver:
        config = config_space(fn)
        return config[PCI_INTERRUPT_LINE] if config[PCI_INTERRUPT_PIN] else 0
    if fn.is_bridge:
        return MSI_IRQ_BASE + lay.functions.index(fn)
    # INTA (pin 1) rotated by the slot of the function and of every bridge above it up to the root bus
    # (drivers/pci/pci.c pci_common_swizzle: no bridge between has an ACPI _PRT of its own), then routed by the
    # root bus's slot rotation
    slots = sum(int(part[8:10], 16) for part in fn.path.split("/") if BDF_PART.fullmatch(part))
    return INTX_GSI_BASE + slots % 4


def function_files(sec: Section, fn: PciFunction, node: Node, irq: int = 0) -> None:
    """The attributes, config space and links of one PCI function; ``irq`` is the interrupt its driver was given
    (pdev->irq, what the ``irq`` attribute shows)."""
    d = fn.path
    ncpu = node.cpu.logical_cpus
    numa = node.numa_node(fn.numa)
    cpus = numa.cpus if numa is not None else ()
    sec.text(f"{d}/vendor", f"0x{fn.vendor:04x}")
    sec.text(f"{d}/device", f"0x{fn.device:04x}")
    sec.text(f"{d}/subsystem_vendor", f"0x{fn.subsystem_vendor:04x}")
    sec.text(f"{d}/subsystem_device", f"0x{fn.subsystem_device:04x}")
    sec.text(f"{d}/class", f"0x{fn.class_code:06x}")
    sec.text(f"{d}/revision", f"0x{fn.revision:02x}")
    sec.text(f"{d}/numa_node", fn.numa)
    sec.text(f"{d}/local_cpus", cpumask(cpus, ncpu))
    sec.text(f"{d}/local_cpulist", format_cpulist(cpus))
    sec.text(f"{d}/current_link_speed", SPEED.get(fn.link_gen, "Unknown"))
    sec.text(f"{d}/max_link_speed", SPEED.get(fn.link_gen, "Unknown"))
    sec.text(f"{d}/current_link_width", fn.link_width)
    sec.text(f"{d}/max_link_width", fn.link_width)
    sec.text(f"{d}/enable", 1, 0o644)
    sec.text(f"{d}/irq", irq)
    sec.text(f"{d}/dma_mask_bits", DMA_MASK_BITS.get(fn.kind, PCI_DEFAULT_DMA_BITS))
    sec.file(f"{d}/config", config_space(fn), 0o644)
    sec.file(f"{d}/resource", resource_file(fn))
    for bar in fn.bars:
        if bar.index == 6:  # the expansion ROM
            sec.sparse(f"{d}/rom", bar.size)
        else:
            sec.sparse(f"{d}/resource{bar.index}", bar.size)
            if bar.prefetchable and node.cpu.arch in WC_MMAP_ARCHES:
                sec.sparse(f"{d}/resource{bar.index}_wc", bar.size)
    sriov = fn.caps.sriov
    if sriov is not None:
        sec.text(f"{d}/sriov_totalvfs", sriov.total_vfs)
        sec.text(f"{d}/sriov_numvfs", 0, 0o644)
        sec.text(f"{d}/sriov_offset", sriov.vf_offset)
        sec.text(f"{d}/sriov_stride", sriov.vf_stride)
        sec.text(f"{d}/sriov_vf_device", f"{sriov.vf_device:x}")
        sec.text(f"{d}/sriov_drivers_autoprobe", 1, 0o644)
    iommu_group_files(sec, fn, node)
    cls = fn.class_code
    modalias = (f"pci:v{fn.vendor:08X}d{fn.device:08X}sv{fn.subsystem_vendor:08X}sd{fn.subsystem_device:08X}"
                f"bc{cls >> 16:02X}sc{(cls >> 8) & 0xFF:02X}i{cls & 0xFF:02X}")
    sec.text(f"{d}/modalias", modalias)
    uevent = (f"PCI_CLASS={cls:X}\nPCI_ID={fn.vendor:04X}:{fn.device:04X}\n"
              f"PCI_SUBSYS_ID={fn.subsystem_vendor:04X}:{fn.subsystem_device:04X}\nPCI_SLOT_NAME={fn.bdf}\n"
              f"MODALIAS={modalias}\n")
    if fn.driver:
        uevent = f"DRIVER={fn.driver}\n" + uevent
        sec.link(f"{d}/driver", f"sys/bus/pci/drivers/{fn.driver}")
        sec.link(f"sys/bus/pci/drivers/{fn.driver}/{fn.bdf}", d)
    sec.file(f"{d}/uevent", uevent, 0o644)
    sec.link(f"{d}/subsystem", PCI_BUS)
    if fn.is_bridge:
        sec.text(f"{d}/secondary_bus_number", fn.secondary)
        sec.text(f"{d}/subordinate_bus_number", fn.subordinate)
    sec.link(f"{PCI_BUS}/devices/{fn.bdf}", d)


def _bar_flags(bar: Bar) -> int:
    if bar.index == 6:
        return IORESOURCE_SIZEALIGN | IORESOURCE_READONLY | IORESOURCE_PREFETCH | IORESOURCE_MEM
    flags = IORESOURCE_SIZEALIGN | IORESOURCE_MEM
    if bar.is64:
        flags |= IORESOURCE_MEM_64 | 0x4
    if bar.prefetchable:
        flags |= IORESOURCE_PREFETCH | 0x8
    return flags


def resource_file(fn: PciFunction) -> str:
    """``resource``: start, end and flags of every resource (BARs 0-5, the ROM, 6 SR-IOV BARs, and on bridges
    the I/O, memory and prefetchable windows), as drivers/pci/pci-sysfs.c prints them; lspci takes the BAR
    addresses and sizes from here."""
    lines = [(0, 0, 0)] * (17 if fn.is_bridge else 13)
    for bar in fn.bars:
        lines[bar.index] = (bar.start, bar.end, _bar_flags(bar))
    if fn.is_bridge and fn.windows is not None:
        mem, pref = fn.windows.mem, fn.windows.pref
        if mem[1] >= mem[0]:
            lines[14] = (mem[0], mem[1], IORESOURCE_MEM)
        if pref[1] >= pref[0]:
            # pci_read_bridge_mmio_pref keeps the base register's type bits and adds MEM, PREFETCH and MEM_64
            flags = PCI_PREF_RANGE_TYPE_64 | IORESOURCE_MEM_64 | IORESOURCE_PREFETCH | IORESOURCE_MEM
            lines[15] = (pref[0], pref[1], flags)
    return "".join(f"0x{a:016x} 0x{b:016x} 0x{c:016x}\n" for a, b, c in lines)


def iommu_group_files(sec: Section, fn: PciFunction, node: Node) -> None:
    """The function's ``iommu_group`` and its group in ``/sys/kernel/iommu_groups`` (what VFIO and device plugins
    read to know which devices must be assigned together)."""
    if fn.iommu_group < 0:
        return
    group = f"{IOMMU_GROUPS}/{fn.iommu_group}"
    sec.link(f"{fn.path}/iommu_group", group)
    sec.link(f"{group}/devices/{fn.bdf}", fn.path)
    sec.text(f"{group}/type", "DMA-FQ" if node.cpu.arch == "amd64" else "DMA")
    sec.file(f"{group}/reserved_regions", MSI_WINDOW.get(node.cpu.arch, MSI_WINDOW["arm64"]))


def pci_static_section(node: Node, lay: PciLayout) -> Section:
    """Bridges, NVSwitches and NICs (with their network and RDMA class devices)."""
    sec = Section("pci")
    sec.dir("sys/bus/pci/devices")  # a kernel with PCI has the bus even with nothing on it (cxl-test)
    sec.dir("sys/bus/pci/drivers")
    for fn in lay.functions:
        if fn.kind in GPU_KINDS or fn.kind in CXL_KINDS:
            continue
        function_files(sec, fn, node, interrupt(lay, fn))
    for hb, path in lay.host_bridge_dirs.items():
        if any(h.name == hb for h in node.host_bridges):
            sec.text(f"{path}/uevent", "", 0o644)
    return sec
