"""PCI functions against real devices, judged by pciutils' lspci reading the fake tree's sysfs.

Expected values come from public captures and specifications, named at each test: BAR layouts from real
``lspci``/kernel logs of the parts, the PCI Express rules a hierarchy must follow, the capabilities real devices
carry. The model's own numbers are never the expectation.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.model import System, builtin_profiles
from fakehw.model.system import Node

pytestmark = pytest.mark.skipif(shutil.which("lspci") is None,
                                reason="pciutils is not installed (tools/install-system-deps.sh)")
Rendered = Callable[[str], list[tuple[System, Node, Path]]]


def lspci(root: Path, *args: str) -> str:
    proc = subprocess.run(["lspci", "-A", "linux-sysfs", "-O", f"sysfs.path={root}/sys/bus/pci", *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def devices(text: str) -> dict[str, str]:
    """``lspci -vv -D`` output split per function: bdf -> its block."""
    blocks: dict[str, str] = {}
    for block in text.strip().split("\n\n"):
        if block.strip():
            blocks[block.split()[0]] = block
    return blocks


def regions(block: str) -> dict[int, tuple[str, int]]:
    """Region index -> (kind as lspci prints it, size in bytes)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    out = {}
    for m in re.finditer(r"Region (\d): Memory at [0-9a-f]+ \(([^)]+)\) \[size=(\d+)([KMGT])\]", block):
        out[int(m.group(1))] = (m.group(2), int(m.group(3)) * units[m.group(4)])
    return out


def test_h100_decodes_its_128_gib_aperture_in_bar2(rendered: Rendered) -> None:
    """An H100 SXM5 (10de:2330) decodes three 64-bit prefetchable BARs: 16 MiB, 128 GiB, 32 MiB in BARs 0, 2, 4
    (the kernel's BAR log of a 10de:2330 quoted on LKML; NVIDIA/nvtrust#128's lspci of GH100 parts)."""
    ((_, node, root),) = rendered("dgx-h100")
    blocks = devices(lspci(root, "-vv", "-D"))
    for g in node.gpus:
        assert regions(blocks[str(g.address)]) == {0: ("64-bit, prefetchable", 16 * 2**20),
                                                   2: ("64-bit, prefetchable", 128 * 2**30),
                                                   4: ("64-bit, prefetchable", 32 * 2**20)}


def test_ampere_and_ada_gpus_keep_a_32_bit_register_bar(rendered: Rendered) -> None:
    """Before Hopper, BAR0 is 32-bit non-prefetchable 16 MiB, the aperture BAR1, 32 MiB in BAR3 (lspci -vvv of a
    T4 in cloud-hypervisor#434; the A100 BAR probe in kata-containers#4358: 16M, 64-bit pref, 32M pref)."""
    for profile, aperture in (("dgx-a100", None), ("edge-pcie", 32 * 2**30)):
        ((_, node, root),) = rendered(profile)
        blocks = devices(lspci(root, "-vv", "-D"))
        for g in node.gpus:
            got = regions(blocks[str(g.address)])
            assert got[0] == ("32-bit, non-prefetchable", 16 * 2**20)
            assert got[1][0] == "64-bit, prefetchable" and got[3] == ("64-bit, prefetchable", 32 * 2**20)
            if aperture is not None:  # NVIDIA's L4 datasheet: 24 GB, BAR1 32 GiB
                assert got[1][1] == aperture


def test_every_bar_lies_in_the_windows_of_every_bridge_above_it(rendered: Rendered) -> None:
    """A PCI-to-PCI bridge forwards only what its memory windows hold (PCI-to-PCI Bridge spec 1.2, 3.2.5): each
    device's BARs must lie inside the window of every bridge above it, as lspci reports both."""
    for profile in ("dgx-h100", "edge-pcie", "cxl-pool", "gb200-nvl72"):
        _, _, root = rendered(profile)[0]
        blocks = devices(lspci(root, "-vv", "-D"))
        windows: dict[str, list[tuple[int, int]]] = {}
        for bdf, block in blocks.items():
            windows[bdf] = [(int(a, 16), int(b, 16)) for a, b in
                            re.findall(r"[Mm]emory behind bridge: ([0-9a-f]+)-([0-9a-f]+)", block)]
        for path in (root / "sys/bus/pci/devices").iterdir():
            chain = [p.name for p in path.resolve().parents if re.match(r"^[0-9a-f]{4}:", p.name)]
            for m in re.finditer(r"Memory at ([0-9a-f]+) .*?\[size=(\d+)([KMG])\]", blocks[path.name]):
                start = int(m.group(1), 16)
                end = start + int(m.group(2)) * {"K": 2**10, "M": 2**20, "G": 2**30}[m.group(3)] - 1
                for bridge in chain:
                    assert any(a <= start and end <= b for a, b in windows[bridge]), \
                        f"{profile}: {path.name} BAR {start:#x}-{end:#x} outside the windows of {bridge}"


def _bus_numbers(block: str) -> tuple[int, int, int] | None:
    m = re.search(r"Bus: primary=([0-9a-f]+), secondary=([0-9a-f]+), subordinate=([0-9a-f]+)", block)
    return None if m is None else (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16))


def _tree_siblings(tree: str) -> list[list[str]]:
    """The device.function labels of each set of siblings in ``lspci -t``: they hang at one column, opened by
    ``+-`` and closed by ``\\-``."""
    open_: dict[int, list[str]] = {}
    out: list[list[str]] = []
    for line in tree.splitlines():
        for m in re.finditer(r"([+\\])-([0-9a-f]{2}\.[0-9a-f])", line):
            col = m.start()
            open_.setdefault(col, []).append(m.group(2))
            if m.group(1) == "\\":
                out.append(open_.pop(col))
    return out


@pytest.mark.parametrize("profile", sorted(builtin_profiles()))
def test_the_pci_hierarchy_is_one_hardware_can_build(profile: str, rendered: Rendered) -> None:
    """PCI Express Base spec, 7.2 and 7.5.1.3: a root or downstream port leads to one link, so one device (its
    functions) on its secondary bus; a switch's upstream port has only its downstream ports on its internal bus;
    sibling bridges' bus ranges are disjoint. Read from lspci's view of the config space."""
    for _, _, root in rendered(profile):
        blocks = devices(lspci(root, "-vv", "-D"))
        if not blocks:  # cxl_test's devices are platform devices: nothing on the PCI bus to judge
            pytest.skip(f"not applicable: {profile} has no PCI functions")
        by_bus: dict[tuple[str, int], set[int]] = {}
        for bdf in blocks:
            domain, bus, devfn = bdf.split(":")
            by_bus.setdefault((domain, int(bus, 16)), set()).add(int(devfn.split(".")[0], 16))
        ranges: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
        for bdf, block in blocks.items():
            buses = _bus_numbers(block)
            if buses is None:
                continue
            domain = bdf.split(":")[0]
            primary, secondary, subordinate = buses
            ranges.setdefault((domain, primary), []).append((secondary, subordinate, bdf))
            kind = re.search(r"Express \(v2\) ([A-Za-z ]+?) (?:Port|\(Slot)", block)
            below = by_bus.get((domain, secondary), set())
            if kind and kind.group(1) in ("Root", "Downstream"):
                assert len(below) <= 1, f"{profile}: {bdf} has devices {sorted(below)} on its secondary bus"
        for spans in ranges.values():
            spans.sort()
            for (_, hi, a), (lo, _, b) in itertools.pairwise(spans):
                assert lo > hi, f"{profile}: bus ranges of {a} and {b} overlap"
        for siblings in _tree_siblings(lspci(root, "-t")):
            assert len(siblings) == len(set(siblings)), f"{profile}: lspci -t shows siblings {siblings}"


def _caps(block: str) -> list[str]:
    return re.findall(r"Capabilities: \[[0-9a-f]+(?: v\d)?\] ([^\n]+)", block)


def test_capabilities_are_those_of_the_real_devices(rendered: Rendered) -> None:
    """What lspci -vv lists for each kind of function. GPUs: as NVIDIA/nvtrust#128's GH100 capture (PM, MSI 1/16,
    PCIe endpoint, MSI-X with 9 vectors, LTR, Resizable BAR, AER, serial number). ConnectX: MSI-X, SR-IOV and a
    serial number. Root and switch downstream ports: ACS (PCIe Base 6.12) and AER. Everything at 8 GT/s and up:
    Secondary PCI Express (PCIe Base 7.7.3)."""
    ((_, node, root),) = rendered("dgx-h100")
    blocks = devices(lspci(root, "-vv", "-D"))
    gpu = blocks[str(node.gpus[0].address)]
    caps = _caps(gpu)
    for want in ("Power Management version 3", "MSI: Enable- Count=1/16 Maskable+ 64bit+", "Express (v2) Endpoint",
                 "MSI-X: Enable+ Count=9", "Latency Tolerance Reporting", "Physical Resizable BAR",
                 "Advanced Error Reporting", "Secondary PCI Express"):
        assert any(c.startswith(want) for c in caps), (want, caps)
    assert re.search(r"Device Serial Number ([0-9a-f]{2}-){7}[0-9a-f]{2}", gpu)
    assert "BAR 2: current size: 128GB" in gpu
    nic = blocks[str(node.nics[0].address)]
    assert "Single Root I/O Virtualization (SR-IOV)" in nic and re.search(r"Total VFs: \d+", nic)
    assert re.search(r"Expansion ROM at [0-9a-f]+ \[disabled\] \[size=1M\]", nic)
    ports = [b for b in blocks.values() if re.search(r"Express \(v2\) (Root Port|Downstream Port)", b)]
    assert ports and all("Access Control Services" in b and "Advanced Error Reporting" in b for b in ports)


def test_the_link_is_trained_to_its_target_speed(rendered: Rendered) -> None:
    """LnkCap, LnkSta and LnkCtl2's target speed agree (a 32 GT/s link has its target at 32 GT/s, not 2.5), and
    LnkCap2 lists every speed up to it. (Function 0 carries the link's second register set; lspci prints it for
    function 0 only.)"""
    for profile in ("dgx-h100", "dgx-a100", "edge-pcie"):
        _, _, root = rendered(profile)[0]
        for bdf, block in devices(lspci(root, "-vv", "-D")).items():
            cap = re.search(r"LnkCap:\s+Port #\d+, Speed ([0-9.]+)GT/s, Width x(\d+)", block)
            sta = re.search(r"LnkSta:\s+Speed ([0-9.]+)GT/s(?: \(ok\))?, Width x(\d+)", block)
            target = re.search(r"Target Link Speed: ([0-9.]+)GT/s", block)
            supported = re.search(r"Supported Link Speeds: 2\.5-([0-9.]+)GT/s", block)
            assert cap and sta, f"{profile} {bdf}"
            assert cap.group(1) == sta.group(1) and cap.group(2) == sta.group(2), f"{profile} {bdf}"
            if bdf.endswith(".0"):
                assert target and supported, f"{profile} {bdf}"
                assert cap.group(1) == target.group(1) == supported.group(1), f"{profile} {bdf}"


def test_iommu_groups_isolate_devices_behind_acs_ports(rendered: Rendered) -> None:
    """With ACS on every root and downstream port each device is its own IOMMU group, while the functions of a
    multi-function device without ACS of its own (a dual-port ConnectX) share one (kernel
    Documentation/driver-api/vfio.rst, "Groups, Devices, and IOMMUs"). lspci reads the group from the iommu_group
    link; /sys/kernel/iommu_groups/N/devices lists the members."""
    ((_, node, root),) = rendered("dgx-h100")
    blocks = devices(lspci(root, "-vv", "-D"))
    groups: dict[str, int] = {}
    for name, address in [(g.name, g.address) for g in node.gpus] + [(n.name, n.address) for n in node.nics]:
        m = re.search(r"IOMMU group: (\d+)", blocks[str(address)])
        assert m, name
        groups[str(address)] = int(m.group(1))
        members = sorted(p.name for p in (root / f"sys/kernel/iommu_groups/{m.group(1)}/devices").iterdir())
        assert str(address) in members
    devices_ = {a.rsplit(".", 1)[0] for a in groups}
    assert len(set(groups.values())) == len(devices_)
    assert groups["0000:29:00.0"] == groups["0000:29:00.1"] != groups["0000:aa:00.0"] == groups["0000:aa:00.1"]


BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def _function_dirs(root: Path) -> dict[str, Path]:
    """Every directory under ``/sys/devices/pciDDDD:BB`` named as a PCI function (domain:bus:device.function)."""
    out: dict[str, Path] = {}
    for top in (root / "sys/devices").glob("pci[0-9a-f][0-9a-f][0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]"):
        for dirpath, dirnames, _ in os.walk(top):
            for name in dirnames:
                if BDF.fullmatch(name):
                    out[name] = Path(dirpath) / name
    return out


@pytest.mark.parametrize("profile", ("dgx-h100", "cxl-pool", "gb200-nvl72"))
def test_every_function_in_the_device_tree_is_on_the_pci_bus(profile: str, rendered: Rendered) -> None:
    """The driver core puts every PCI device it registers on its bus (drivers/base/bus.c, bus_add_device links it
    into ``/sys/bus/pci/devices``), and lspci enumerates that directory: so each function directory under
    ``/sys/devices/pciDDDD:BB`` (bridges and NICs as much as GPUs and CXL ports) is a function lspci lists, with
    its ids. Below the root bus a function is reached through a PCI-to-PCI bridge (PCI Express Base spec 7.1), so
    the directory it sits in is its host bridge's or a bridge lspci lists as one."""
    for _, _, root in rendered(profile):
        dirs = _function_dirs(root)
        assert dirs, f"{profile}: no PCI functions under sys/devices"
        blocks = {line.split()[0]: line for line in lspci(root, "-D", "-nn").splitlines()}
        assert sorted(blocks) == sorted(dirs), f"{profile}: lspci misses {sorted(set(dirs) - set(blocks))}"
        for bdf, path in dirs.items():
            assert re.search(r"\[[0-9a-f]{4}:[0-9a-f]{4}\]", blocks[bdf]), (profile, blocks[bdf])
            parent = path.parent.name
            if BDF.fullmatch(parent):
                assert re.search(r"bridge \[0604\]", blocks[parent]), (profile, bdf, blocks[parent])
            else:
                assert parent == f"pci{bdf[:7]}", (profile, bdf, parent)


def _kernel_speed(lspci_speed: str) -> str:
    """lspci's ``16GT/s``/``2.5GT/s`` as the kernel's PCIE_SPEED2STR prints it in sysfs (``16.0 GT/s PCIe``)."""
    return f"{float(lspci_speed):.1f} GT/s PCIe"


def _cpus(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


@pytest.mark.parametrize("profile", ("dgx-h100", "gb200-nvl72"))
def test_sysfs_attributes_say_what_the_config_space_says(profile: str, rendered: Rendered) -> None:
    """drivers/pci/pci-sysfs.c reads ``max_link_speed``/``max_link_width`` from Link Capabilities and
    ``current_link_speed``/``current_link_width`` from Link Status (PCIE_SPEED2STR strings), and drivers/pci/iov.c
    ``sriov_totalvfs``, ``sriov_offset``, ``sriov_stride``, ``sriov_vf_device`` (``%x``) and ``sriov_numvfs`` from
    the SR-IOV capability; lspci decodes the same registers from ``config``, so both must agree. ``sriov_numvfs``
    and ``sriov_drivers_autoprobe`` (1 until written: iov.c sets drivers_autoprobe) are RW, the rest RO
    (Documentation/ABI/testing/sysfs-bus-pci). ``local_cpulist`` is the CPUs of the function's ``numa_node``
    (cpumask_of_node), every CPU where it has none, and ``local_cpus`` the same set as a mask."""
    for _, _, root in rendered(profile):
        blocks = devices(lspci(root, "-vv", "-D"))
        nodes = root / "sys/devices/system/node"
        every = _cpus((root / "sys/devices/system/cpu/online").read_text())
        sriov = 0
        for bdf, block in blocks.items():
            d = root / "sys/bus/pci/devices" / bdf
            attr = {p.name: p.read_text().strip() for p in d.iterdir() if p.is_file() and p.name != "config"
                    and not p.name.startswith(("resource", "rom"))}
            cap = re.search(r"LnkCap:\s+Port #\d+, Speed ([0-9.]+)GT/s, Width x(\d+)", block)
            sta = re.search(r"LnkSta:\s+Speed ([0-9.]+)GT/s[^,]*, Width x(\d+)", block)
            assert cap and sta, (profile, bdf)
            assert (attr["max_link_speed"], attr["max_link_width"]) == (_kernel_speed(cap.group(1)), cap.group(2))
            assert (attr["current_link_speed"], attr["current_link_width"]) == (_kernel_speed(sta.group(1)),
                                                                                sta.group(2)), (profile, bdf)
            numa = int(attr["numa_node"])
            want = _cpus((nodes / f"node{numa}/cpulist").read_text()) if numa >= 0 else every
            assert _cpus(attr["local_cpulist"]) == want, (profile, bdf)
            mask = int(attr["local_cpus"].replace(",", ""), 16)
            assert {b for b in range(mask.bit_length()) if mask >> b & 1} == want, (profile, bdf)
            iov = re.search(r"Total VFs: (\d+), Number of VFs: (\d+).*?VF offset: (\d+), stride: (\d+), "
                            r"Device ID: ([0-9a-f]+)", block, re.S)
            assert (iov is None) == ("sriov_totalvfs" not in attr), (profile, bdf)
            if iov is None:
                continue
            sriov += 1
            assert (attr["sriov_totalvfs"], attr["sriov_numvfs"], attr["sriov_offset"], attr["sriov_stride"],
                    attr["sriov_vf_device"]) == iov.groups(), (profile, bdf)
            assert attr["sriov_drivers_autoprobe"] == "1", (profile, bdf)
            for name, mode in (("sriov_numvfs", 0o644), ("sriov_drivers_autoprobe", 0o644), ("sriov_totalvfs", 0o444),
                               ("sriov_offset", 0o444), ("sriov_stride", 0o444), ("sriov_vf_device", 0o444)):
                assert stat.S_IMODE(os.stat(d / name).st_mode) == mode, (profile, bdf, name)
        assert sriov, profile


PCI_CAP_ID_SSVID = 0x0D
"""The Bridge Subsystem Vendor ID capability (include/uapi/linux/pci_regs.h; PCI-to-PCI Bridge Architecture
Specification 1.2, 3.2.5.13 names no subsystem registers in the type 1 header, so a bridge carries them here, the
vendor id at +4 and the device id at +6, PCI_SSVID_VENDOR_ID/PCI_SSVID_DEVICE_ID)."""


def _word(config: bytes, offset: int) -> int:
    return int.from_bytes(config[offset:offset + 2], "little")


def _capability(config: bytes, cap_id: int) -> int | None:
    """Offset of the first standard capability ``cap_id`` in the list the Capabilities Pointer (0x34) starts, as
    pci_find_capability (drivers/pci/pci.c) walks it; None when the function has none (Status bit 4 clear)."""
    if not _word(config, 0x06) & 0x10:
        return None
    pos, seen = config[0x34] & 0xFC, 0
    while pos and seen < 48:
        if config[pos] == cap_id:
            return pos
        pos, seen = config[pos + 1] & 0xFC, seen + 1
    return None


@pytest.mark.parametrize("profile", ("dgx-h100", "gb200-nvl72", "cxl-pool", "riscv-nvlink-fusion"))
def test_identity_bus_numbers_and_uevent_are_what_the_kernel_reads_from_config_space(profile: str,
                                                                                    rendered: Rendered) -> None:
    """drivers/pci/probe.c (pci_setup_device) reads a function's identity from its configuration header (PCI Local
    Bus Specification 3.0, 6.2.1: Vendor ID 0x00, Device ID 0x02, Revision ID 0x08, Class Code 0x09-0x0B; a type 0
    header's Subsystem Vendor ID 0x2C and Subsystem ID 0x2E; a bridge's from its SSVID capability, else 0), and
    drivers/pci/pci-sysfs.c shows them as ``vendor``/``device``/``subsystem_vendor``/``subsystem_device``
    (``0x%04x``), ``class`` (``0x%06x``) and ``revision`` (``0x%02x``); a bridge's ``secondary_bus_number`` and
    ``subordinate_bus_number`` are its Secondary and Subordinate Bus Number registers (0x19, 0x1A, as the kernel
    keeps the firmware's numbering). udev and modprobe read ``uevent``: drivers/base/core.c dev_uevent writes
    ``DRIVER=`` for a bound device first, then drivers/pci/pci-driver.c pci_uevent ``PCI_CLASS=%04X``,
    ``PCI_ID=%04X:%04X``, ``PCI_SUBSYS_ID=%04X:%04X``, ``PCI_SLOT_NAME`` (the bdf) and ``MODALIAS``; the
    ``driver`` link names the same driver, which for every PCIe port is pcieport (drivers/pci/pcie/portdrv.c binds
    class 0x060400 functions with a PCIe capability). Every other value is read from the function's own ``config``.
    The fake's bridges showed their own ids as subsystem ids, which no bridge without an SSVID capability can."""
    kinds = set()
    for _, _, root in rendered(profile):
        for d in sorted((root / "sys/bus/pci/devices").iterdir()):
            config = (d / "config").read_bytes()
            attr = {p.name: p.read_text().strip() for p in d.iterdir() if p.is_file() and p.name != "config"
                    and not p.name.startswith(("resource", "rom"))}
            vendor, device = _word(config, 0x00), _word(config, 0x02)
            cls, rev = int.from_bytes(config[0x09:0x0C], "little"), config[0x08]
            bridge = config[0x0E] & 0x7F == 1
            if bridge:
                ssvid = _capability(config, PCI_CAP_ID_SSVID)
                sub = (_word(config, ssvid + 4), _word(config, ssvid + 6)) if ssvid is not None else (0, 0)
                assert (int(attr["secondary_bus_number"]), int(attr["subordinate_bus_number"])) == \
                    (config[0x19], config[0x1A]), (profile, d.name)
                # the functions in the bridge's directory are on its secondary bus, everything below it in the
                # range up to its subordinate bus (PCI-to-PCI Bridge Architecture Specification 1.2, 3.2.5.3-5)
                below = [p for p in d.resolve().rglob("*") if BDF.fullmatch(p.name) and not p.is_symlink()]
                assert all(int(p.name[5:7], 16) == config[0x19] for p in below if p.parent == d.resolve()), d.name
                assert all(config[0x19] <= int(p.name[5:7], 16) <= config[0x1A] for p in below), (profile, d.name)
            else:
                assert config[0x0E] & 0x7F == 0, (profile, d.name, config[0x0E])
                sub = (_word(config, 0x2C), _word(config, 0x2E))
                assert "secondary_bus_number" not in attr and "subordinate_bus_number" not in attr, d.name
            kinds.add(bridge)
            assert (attr["vendor"], attr["device"]) == (f"0x{vendor:04x}", f"0x{device:04x}"), (profile, d.name)
            assert (attr["subsystem_vendor"], attr["subsystem_device"]) == (f"0x{sub[0]:04x}", f"0x{sub[1]:04x}"), \
                (profile, d.name)
            assert (attr["class"], attr["revision"]) == (f"0x{cls:06x}", f"0x{rev:02x}"), (profile, d.name)
            driver = (d / "driver").resolve().name if (d / "driver").is_symlink() else None
            if bridge:  # drivers/pci/pcie/portdrv.c binds every PCIe root and switch port (class 0x060400)
                assert (driver, cls) == ("pcieport", 0x060400), (profile, d.name)
            want = [f"DRIVER={driver}"] if driver else []
            want += [f"PCI_CLASS={cls:04X}", f"PCI_ID={vendor:04X}:{device:04X}",
                     f"PCI_SUBSYS_ID={sub[0]:04X}:{sub[1]:04X}", f"PCI_SLOT_NAME={d.name}",
                     f"MODALIAS=pci:v{vendor:08X}d{device:08X}sv{sub[0]:08X}sd{sub[1]:08X}"
                     f"bc{cls >> 16:02X}sc{cls >> 8 & 0xFF:02X}i{cls & 0xFF:02X}"]
            assert (d / "uevent").read_text().splitlines() == want, (profile, d.name)
    assert kinds == {True, False}, profile
