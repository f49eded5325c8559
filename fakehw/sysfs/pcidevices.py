"""What each kind of PCI function is on real hardware: ids, BARs and the capabilities its config space carries.

:mod:`fakehw.sysfs.pcilayout` places functions in a tree; this module says what a GPU, a NIC, an NVSwitch, a
PCIe switch port, a root port or a CXL device looks like to ``lspci -vv``. The facts come from public captures:

- Hopper and Blackwell GPUs decode three 64-bit prefetchable BARs: BAR0 16 MiB of registers, BAR2 the framebuffer
  aperture (BAR1 in NVML's words: 128 GiB on H100) and BAR4 32 MiB (kernel log of a 10de:2330 H100 SXM5 quoted on
  LKML by Alex Williamson; ``lspci -v`` of H20s in NVIDIA/nvtrust#128). Their capability list there: PM, MSI
  (1/16, maskable, 64-bit), PCIe endpoint, MSI-X (9 vectors), then LTR, Resizable BAR, AER, Power Budgeting and a
  Device Serial Number in extended space.
- Ampere, Ada and Turing GPUs keep BAR0 32-bit non-prefetchable (16 MiB) and put the aperture in BAR1 and 32 MiB in
  BAR3 (``lspci -vvv`` of a T4 in cloud-hypervisor#434; an A100's BAR probe in kata-containers#4358).
- ConnectX-6/7 and BlueField-3 functions: one 64-bit prefetchable BAR0 of 32 MiB, a 1 MiB expansion ROM, MSI-X,
  and SR-IOV (``sriov_totalvfs``; VF device ids from pci.ids: 101c ConnectX-6 VF, 101e ConnectX-6/7 VF).
- Root ports and switch downstream ports carry ACS (what makes every device behind them its own IOMMU group) and
  AER; every function at 8 GT/s or more carries the Secondary PCI Express capability.
- CXL devices and ports carry the CXL DVSECs (vendor 0x1E98, CXL 2.0 section 8.1): id 0 "PCIe DVSEC for CXL
  Devices" on memory devices, id 3 "Extensions DVSEC for Ports" on root/switch ports, id 8 "Register Locator" on
  both, pointing at the component registers in a BAR.

Values marked assumed are plausible stand-ins where no public capture was at hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakehw.model.catalogue import GpuSku

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True, slots=True)
class BarSpec:
    """One base address register as the device decodes it (before an address is assigned)."""

    index: int
    """0..5 for BARs; 6 is the expansion ROM."""
    size: int
    is64: bool = True
    prefetchable: bool = True


@dataclass(frozen=True, slots=True)
class Sriov:
    total_vfs: int
    vf_device: int
    vf_offset: int = 8
    vf_stride: int = 1


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The optional capabilities a function carries (PM, PCIe and AER every PCIe function has)."""

    msi_vectors: int = 1
    """MSI multiple-message capable count (1, 2, 4, ... 32)."""
    msix_vectors: int = 0
    msix_bar: int = 0
    sriov: Sriov | None = None
    serial: int | None = None
    acs: bool = False
    resizable_bar: int | None = None
    """BAR index whose size is resizable (GPUs' aperture)."""
    cxl_dvsec: int | None = None
    """CXL DVSEC id: 0 device, 3 port extensions (plus a register locator in both cases)."""
    cxl_registers_bar: int = 0
    ltr: bool = False


NO_CAPABILITIES = Capabilities()


def gpu_bars(sku: GpuSku) -> tuple[BarSpec, ...]:
    """The GPU's BARs by architecture; the aperture is the SKU's BAR1 size as NVML reports it."""
    aperture = sku.bar1_mib * MiB
    if sku.architecture in ("hopper", "blackwell"):
        return (BarSpec(0, 16 * MiB), BarSpec(2, aperture), BarSpec(4, 32 * MiB))
    return (BarSpec(0, 16 * MiB, is64=False, prefetchable=False), BarSpec(1, aperture), BarSpec(3, 32 * MiB))


def gpu_capabilities(sku: GpuSku, serial: int) -> Capabilities:
    """Hopper-style list (MSI 1/16, MSI-X 9, resizable aperture, serial number). Data-center GPUs from Ampere on
    do NVIDIA vGPU through SR-IOV; the VF count is assumed (32) and the VF device id is the PF's."""
    aperture = 2 if sku.architecture in ("hopper", "blackwell") else 1
    sriov = Sriov(32, sku.pci_device_id, vf_offset=4) if sku.architecture in ("ampere", "hopper", "blackwell") \
        else None
    return Capabilities(msi_vectors=16, msix_vectors=9, sriov=sriov, serial=serial, resizable_bar=aperture,
                        ltr=True)


NIC_VF_DEVICE = {0x101B: 0x101C, 0x1021: 0x101E, 0xA2DC: 0x101E}
"""ConnectX-6 -> ConnectX-6 VF; ConnectX-7 and BlueField-3's ConnectX-7 -> ConnectX Family mlx5Gen VF (pci.ids)."""


def nic_bars() -> tuple[BarSpec, ...]:
    return (BarSpec(0, 32 * MiB),)


NIC_ROM = BarSpec(6, 1 * MiB, is64=False, prefetchable=False)


def nic_capabilities(device_id: int, serial: int) -> Capabilities:
    """MSI-X with the vectors mlx5 asks for (assumed 64), SR-IOV with 16 VFs (assumed: NUM_OF_VFS is set by
    mlxconfig), and a serial number."""
    vf = NIC_VF_DEVICE.get(device_id, 0x101E)
    return Capabilities(msix_vectors=64, sriov=Sriov(16, vf, vf_offset=2), serial=serial)


def nvswitch_bars() -> tuple[BarSpec, ...]:
    """assumed: a 32 MiB register BAR like the GPUs'."""
    return (BarSpec(0, 32 * MiB, is64=False, prefetchable=False),)


NVSWITCH_CAPABILITIES = Capabilities(msi_vectors=1, msix_vectors=8)


def port_capabilities(kind: str, cxl: bool) -> Capabilities:
    """Root ports and switch ports: MSI; ACS on the ports that face devices (root and downstream ports)."""
    acs = kind in ("root-port", "switch-downstream", "cxl-root-port", "cxl-switch-downstream")
    return Capabilities(msi_vectors=1, acs=acs, cxl_dvsec=3 if cxl else None)


def cxl_memdev_bars() -> tuple[BarSpec, ...]:
    """A CXL type-3 device's component and device registers behind one 64-bit BAR (QEMU's cxl-type3 puts them
    in BAR2, 64 KiB; assumed)."""
    return (BarSpec(2, 64 * 1024, prefetchable=False),)


def cxl_memdev_capabilities(serial: int) -> Capabilities:
    return Capabilities(msi_vectors=1, msix_vectors=4, serial=serial, cxl_dvsec=0, cxl_registers_bar=2)
