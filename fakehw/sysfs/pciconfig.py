"""A PCI function's configuration space, 4 KiB as ``/sys/bus/pci/devices/<bdf>/config`` gives it to root.

Readers rebuild a great deal from these bytes: ``lspci -vv`` prints the BARs, capabilities, link capability and
status, ``lspci -t`` and hwloc walk the bridges' bus numbers, NVIDIA's tools read the link from the PCI Express
capability. Layouts follow the PCI Local Bus 3.0, PCI-to-PCI Bridge 1.2, PCI Express Base 5.0 and CXL 2.0
specifications; which capabilities a function has is :class:`fakehw.sysfs.pcidevices.Capabilities`.

The link is as trained at full speed: LnkCap (what the port supports), LnkSta (what it runs at) and LnkCtl2's
target speed all say the function's generation and width, and LnkCap2 lists every speed up to it.
"""

from __future__ import annotations

from fakehw.sysfs.pcilayout import PciFunction

CONFIG_SIZE = 4096
EXTENDED = 0x100

# Standard capability ids (PCI Code and ID Assignment, section 2).
CAP_PM, CAP_MSI, CAP_EXP, CAP_MSIX = 0x01, 0x05, 0x10, 0x11
# Extended capability ids (section 3).
ECAP_AER, ECAP_DSN, ECAP_ACS, ECAP_SRIOV, ECAP_REBAR, ECAP_LTR, ECAP_SECPCI, ECAP_DVSEC = (
    0x0001, 0x0003, 0x000D, 0x0010, 0x0015, 0x0018, 0x0019, 0x0023)
CXL_VENDOR = 0x1E98
"""The CXL Consortium's vendor id, which the CXL DVSECs carry."""
PORT_ROOT, PORT_UPSTREAM, PORT_DOWNSTREAM = 4, 5, 6


class _Config:
    """Config space being written: registers by offset, capability lists chained as they are added."""

    def __init__(self) -> None:
        self.data = bytearray(CONFIG_SIZE)
        self._std_next = 0x34     # where the next standard capability's offset is written
        self._std_at = 0x40
        self._ext_prev: int | None = None
        self._ext_at = EXTENDED

    def put(self, off: int, value: int, width: int) -> None:
        self.data[off:off + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")

    def cap(self, cap_id: int, length: int) -> int:
        """Append a standard capability of ``length`` bytes; returns its offset."""
        off = self._std_at
        self.data[self._std_next] = off
        self.data[off] = cap_id
        self._std_next = off + 1
        self._std_at = (off + length + 3) & ~3
        return off

    def ecap(self, cap_id: int, version: int, length: int) -> int:
        """Append an extended capability of ``length`` bytes (header included); returns its offset."""
        off = self._ext_at
        if self._ext_prev is not None:
            header = int.from_bytes(self.data[self._ext_prev:self._ext_prev + 4], "little")
            self.put(self._ext_prev, (header & 0x000FFFFF) | (off << 20), 4)
        self.put(off, cap_id | (version << 16), 4)
        self._ext_prev = off
        self._ext_at = (off + length + 3) & ~3
        if self._ext_at > CONFIG_SIZE:
            raise ValueError("extended capabilities do not fit in 4 KiB of config space")
        return off


def config_space(fn: PciFunction) -> bytes:
    """The 4 KiB configuration space of ``fn``."""
    c = _Config()
    _header(c, fn)
    _pm(c)
    if fn.caps.msi_vectors:
        _msi(c, fn)
    _express(c, fn)
    if fn.caps.msix_vectors:
        _msix(c, fn)
    _aer(c, fn)
    if fn.caps.acs:
        _acs(c)
    if fn.caps.sriov is not None:
        _sriov(c, fn)
    if fn.caps.ltr:
        c.ecap(ECAP_LTR, 1, 8)
    if fn.caps.resizable_bar is not None:
        _rebar(c, fn)
    if fn.link_gen >= 3:
        c.ecap(ECAP_SECPCI, 1, 0x0C + 2 * fn.link_width)
    if fn.caps.cxl_dvsec is not None:
        _cxl(c, fn)
    if fn.caps.serial is not None:
        off = c.ecap(ECAP_DSN, 1, 0x0C)
        c.put(off + 4, fn.caps.serial, 8)
    return bytes(c.data)


def _header(c: _Config, fn: PciFunction) -> None:
    c.put(0x00, fn.vendor, 2)
    c.put(0x02, fn.device, 2)
    c.put(0x04, 0x0546, 2)                      # memory space, bus master, parity, SERR, INTx disabled (MSI)
    c.put(0x06, 0x0010, 2)                      # capabilities list
    c.put(0x08, (fn.class_code << 8) | fn.revision, 4)
    c.put(0x0C, 0x10, 1)                        # cache line size: 64 bytes
    c.put(0x0E, (0x01 if fn.is_bridge else 0x00) | (0x80 if fn.multifunction else 0), 1)
    c.put(0x3C, 0xFF, 1)                        # interrupt line: none (MSI/MSI-X in use)
    c.put(0x3D, 0x01, 1)                        # INTA
    if fn.is_bridge:
        _bridge_header(c, fn)
        return
    for bar in fn.bars:
        if bar.index == 6:
            c.put(0x30, bar.start & 0xFFFFF800, 4)   # expansion ROM, not enabled
            continue
        low = (bar.start & 0xFFFFFFF0) | (0x4 if bar.is64 else 0) | (0x8 if bar.prefetchable else 0)
        c.put(0x10 + 4 * bar.index, low, 4)
        if bar.is64:
            c.put(0x14 + 4 * bar.index, bar.start >> 32, 4)
    c.put(0x2C, fn.subsystem_vendor, 2)
    c.put(0x2E, fn.subsystem_device, 2)


def _bridge_header(c: _Config, fn: PciFunction) -> None:
    c.put(0x18, fn.address.bus, 1)
    c.put(0x19, fn.secondary or 0, 1)
    c.put(0x1A, fn.subordinate or 0, 1)
    c.put(0x1C, 0xF0, 1)                        # I/O window closed (base above limit)
    c.put(0x1D, 0x00, 1)
    win = fn.windows
    mem = win.mem if win is not None else (0, -1)
    pref = win.pref if win is not None else (0, -1)
    if mem[1] >= mem[0]:
        c.put(0x20, (mem[0] >> 16) & 0xFFF0, 2)
        c.put(0x22, (mem[1] >> 16) & 0xFFF0, 2)
    else:
        c.put(0x20, 0xFFF0, 2)
        c.put(0x22, 0x0000, 2)
    if pref[1] >= pref[0]:
        c.put(0x24, ((pref[0] >> 16) & 0xFFF0) | 0x1, 2)   # 64-bit prefetchable window
        c.put(0x26, ((pref[1] >> 16) & 0xFFF0) | 0x1, 2)
        c.put(0x28, pref[0] >> 32, 4)
        c.put(0x2C, pref[1] >> 32, 4)
    else:
        c.put(0x24, 0xFFF1, 2)
        c.put(0x26, 0x0001, 2)
    c.put(0x3E, 0x0003, 2)                      # bridge control: parity and SERR forwarding


def _pm(c: _Config) -> None:
    off = c.cap(CAP_PM, 8)
    c.put(off + 2, 0x0003 | (1 << 15) | (1 << 14) | (1 << 11), 2)   # version 3, PME from D0, D3hot, D3cold
    c.put(off + 4, 0x0008, 2)                   # D0, No_Soft_Reset


def _msi(c: _Config, fn: PciFunction) -> None:
    off = c.cap(CAP_MSI, 24)
    mmc = max(0, fn.caps.msi_vectors.bit_length() - 1)
    enabled = 1 if fn.is_bridge else 0         # pcieport uses MSI; endpoint drivers use MSI-X
    c.put(off + 2, enabled | (mmc << 1) | (1 << 7) | (1 << 8), 2)   # 64-bit, per-vector masking


def _express(c: _Config, fn: PciFunction) -> None:
    off = c.cap(CAP_EXP, 0x3C)
    port = fn.port_type
    c.put(off + 2, 0x0002 | (port << 4), 2)
    devcap = 0x00008FC2 | (1 << 28 if not fn.is_bridge else 0)        # MPS 512, RBE; FLR on endpoints
    c.put(off + 4, devcap, 4)
    c.put(off + 8, 0x2930, 2)                   # DevCtl: MPS 256, MRRS 512, relaxed ordering, no snoop
    reports_dll = port in (PORT_ROOT, PORT_DOWNSTREAM)
    port_number = fn.address.device if fn.is_bridge else 0
    lnkcap = (fn.link_gen & 0xF) | ((fn.link_width & 0x3F) << 4) | (0b10 << 10) | (0b110 << 15) \
        | ((1 << 20) if reports_dll else 0) | (port_number << 24)
    c.put(off + 0x0C, lnkcap, 4)
    c.put(off + 0x10, 0x0040, 2)                # LnkCtl: common clock
    lnksta = (fn.link_gen & 0xF) | ((fn.link_width & 0x3F) << 4) | (1 << 12) | ((1 << 13) if reports_dll else 0)
    c.put(off + 0x12, lnksta, 2)
    if port == PORT_ROOT:
        c.put(off + 0x1E, 0x0001, 2)            # RootCap: CRS visibility
    devcap2 = 0x1F | (1 << 16) | ((1 << 11) if fn.caps.ltr else 0) | ((1 << 5) if port == PORT_DOWNSTREAM else 0)
    c.put(off + 0x24, devcap2, 4)
    c.put(off + 0x2C, ((1 << fn.link_gen) - 1) << 1, 4)             # LnkCap2: supported speeds 1..gen
    c.put(off + 0x30, fn.link_gen & 0xF, 2)     # LnkCtl2: target link speed = the link's
    if fn.link_gen >= 3:
        c.put(off + 0x32, 0x001E, 2)            # LnkSta2: equalization complete, phases 1-3


def _msix(c: _Config, fn: PciFunction) -> None:
    off = c.cap(CAP_MSIX, 12)
    c.put(off + 2, (fn.caps.msix_vectors - 1) | (1 << 15), 2)       # enabled by the driver
    c.put(off + 4, 0x0000_2000 | fn.caps.msix_bar, 4)               # table in the BAR at 8 KiB
    c.put(off + 8, 0x0000_3000 | fn.caps.msix_bar, 4)               # pending bits at 12 KiB


def _aer(c: _Config, fn: PciFunction) -> None:
    root = fn.port_type == PORT_ROOT
    off = c.ecap(ECAP_AER, 2, 0x48 if root else 0x38)
    c.put(off + 0x0C, 0x0046_2030, 4)           # uncorrectable severity: the spec's defaults
    c.put(off + 0x14, 0x0000_2000, 4)           # correctable mask: advisory non-fatal
    c.put(off + 0x18, 0x0000_00A0, 4)           # capabilities: ECRC generation/check capable


def _acs(c: _Config) -> None:
    off = c.ecap(ECAP_ACS, 1, 8)
    c.put(off + 4, 0x005F, 2)                   # source validation, blocking, P2P redirects, upstream fwd, DT
    c.put(off + 6, 0x001D, 2)                   # what the kernel enables with an IOMMU: SV, RR, CR, UF


def _sriov(c: _Config, fn: PciFunction) -> None:
    sriov = fn.caps.sriov
    assert sriov is not None
    off = c.ecap(ECAP_SRIOV, 1, 0x40)
    c.put(off + 0x0C, sriov.total_vfs, 2)       # initial VFs
    c.put(off + 0x0E, sriov.total_vfs, 2)       # total VFs
    c.put(off + 0x14, sriov.vf_offset, 2)
    c.put(off + 0x16, sriov.vf_stride, 2)
    c.put(off + 0x1A, sriov.vf_device, 2)
    c.put(off + 0x1C, 0x0000_0553, 4)           # supported page sizes: 4K 8K 64K 256K 1M 4M
    c.put(off + 0x20, 0x0000_0001, 4)           # system page size: 4K


def _rebar(c: _Config, fn: PciFunction) -> None:
    index = fn.caps.resizable_bar
    bar = next((b for b in fn.bars if b.index == index), None)
    if bar is None:
        return
    off = c.ecap(ECAP_REBAR, 1, 0x0C)
    code = max(0, (bar.size >> 20).bit_length() - 1)               # 2^code MiB
    supported = sum(1 << (n + 4) for n in range(8, code + 1))        # 256 MiB .. the current size
    c.put(off + 4, supported, 4)
    c.put(off + 8, (bar.index & 0x7) | (1 << 5) | (code << 8), 4)       # one resizable BAR, at its current size


def _cxl(c: _Config, fn: PciFunction) -> None:
    """The CXL DVSECs: device or port extensions, Flex Bus port, and the register locator."""
    dvsec = fn.caps.cxl_dvsec
    assert dvsec is not None

    def header(cap_id: int, length: int) -> int:
        off = c.ecap(ECAP_DVSEC, 1, length)
        c.put(off + 4, CXL_VENDOR | (1 << 16) | (length << 20), 4)   # vendor, revision 1, length
        c.put(off + 8, cap_id, 2)
        return off

    if dvsec == 0:
        off = header(0, 0x3C)
        c.put(off + 0x0A, (1 << 1) | (1 << 2) | (1 << 4), 2)          # Cap: IO, MEM, HDM count 1
        c.put(off + 0x0C, (1 << 1) | (1 << 2), 2)                       # Ctrl: IO and MEM enabled
        c.put(off + 0x1C, 0x0000_0000, 4)                               # range 1 size (HDM decoders in use)
    else:
        header(3, 0x28)
    off = header(7, 0x20)                                               # Flex Bus port
    c.put(off + 0x0A, (1 << 0) | (1 << 2), 2)                           # Cap: IO, MEM
    c.put(off + 0x0C, (1 << 0) | (1 << 2), 2)
    c.put(off + 0x0E, (1 << 0) | (1 << 2), 2)                           # Status: IO, MEM enabled
    if dvsec == 0:                                                      # register locator: one block
        off = header(8, 0x0C + 8)
        c.put(off + 0x0C, (fn.caps.cxl_registers_bar & 0x7) | (1 << 8), 4)  # block id 1: component registers
