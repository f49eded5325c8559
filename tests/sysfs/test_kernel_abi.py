"""Values of the fake tree the kernel's own code fixes, checked against that code and documentation.

These are values no consumer in the other sysfs tests reads closely enough to notice a wrong one (numactl's numastat
prints the counters without relating them, lspci reads link speeds from config space, not sysfs), so each is held
here against where the kernel defines it:

- ``nodeN/numastat``: Documentation/admin-guide/numastat.rst. numa_hit/numa_miss split the pages allocated on a
  node by the node the allocation preferred, local_node/other_node split the same pages by the node the process ran
  on, so hit + miss = local + other on every node; a miss on one node is a foreign allocation of another, so the
  misses and foreigns of a machine sum to the same. ``interleave_hit`` counts the interleaved allocations that got
  the node they wanted, which are hits too (mm/mempolicy.c counts NUMA_INTERLEAVE_HIT for a page allocated on the
  node it asked for, which zone_statistics counts as NUMA_HIT), so it never exceeds ``numa_hit``.
- ``/proc/meminfo`` ``HardwareCorrupted``: fs/proc/meminfo.c prints the pages memory-failure handling poisoned
  (mm/memory-failure.c, num_poisoned_pages) in kB; a host no memory failure was injected into has none.
- ``max_link_speed``/``current_link_speed``: drivers/pci/pci.h PCIE_SPEED2STR, for the PCIe generation the real
  board reports (``nvidia-smi -q -x`` captures in ../shared/reference/captures: pcie_gen/max_link_gen).
- Modes: a device's ``uevent`` is DEVICE_ATTR_RW (drivers/base/core.c, 0644), PCI ``enable`` DEVICE_ATTR_RW and
  ``config`` a 0644 bin attribute (drivers/pci/pci-sysfs.c); the ids and ``class`` are read-only (0444).
- CXL endpoints: drivers/cxl/core/port.c adds a memdev's endpoint port as a child of the port that owns the
  memdev's upstream dport (the PCIe downstream or root port above the memdev), and links that dport as the
  endpoint's ``parent_dport``; the parent port lists it among its ``dportN``. ndctl's ``cxl list -BPE`` nests
  endpoints by this.
- A dynamic-capacity device (CXL 3.1, 9.13.3) shows its capacity under ``dynamic_ram_a/size``, not as static
  ``ram/size``: the pooled device of cxl-pool offers its whole pool (``cxlPools: capacity: 64GiB`` in the
  profile) that way.
- CXL regions: drivers/cxl/core/region.c makes ``size``, ``commit``, ``interleave_ways`` and
  ``interleave_granularity`` DEVICE_ATTR_RW (0644): region tooling writes them.
- Huge pages: Documentation/admin-guide/mm/hugetlbpage.rst names the per-node pools
  ``nodeN/hugepages/hugepages-<size>kB``; x86-64 has 2 MiB and (with pdpe1gb) 1 GiB pages: 2048 and 1048576 kB.
- meminfo values are unsigned (fs/proc/meminfo.c, drivers/base/node.c print them with %lu).
- meminfo figures are whole pages: fs/proc/meminfo.c (show_val_kb) and drivers/base/node.c (K()) print page counts
  as ``pages << (PAGE_SHIFT - 10)``, so each is a multiple of the page size in kB (4 on x86-64, whose base page
  is 4 KiB; 64 on an arm64 kernel built with 64 KiB pages, as the tree's ``PageSize`` says for the Grace nodes).
  The exceptions print other units: ``KernelStack`` and ``ShadowCallStack`` (kB of stacks), ``VmallocTotal``
  (bytes >> 10), ``Hugepagesize``/``Hugetlb`` and x86's ``DirectMap4k/2M/1G`` (arch/x86/mm/pat/set_memory.c:
  4 KiB, 2 MiB and 1 GiB mappings counted << 2, << 11, << 20, so multiples of 4, 2048 and 1048576 kB). The
  machine's ``MemTotal``/``MemFree`` are its nodes' summed (si_meminfo's totalram is every zone's managed pages).
- ``modalias``: drivers/pci/pci-sysfs.c prints ``bc``/``sc``/``i`` as the three bytes of the class code.
- ``/proc/driver/nvidia/params``: the driver's registry defaults (nv-reg.h, NV_DEFINE_REG_ENTRY_GLOBAL) where
  nothing overrides them: MemoryPoolSize, KMallocHeapMaxSize, VMallocHeapMaxSize, IgnoreMMIOCheck,
  NvLinkDisable, EnableDbgBreakpoint and EnableResizableBar 0, EnableUserNUMAManagement, ModifyDeviceFiles and
  RegisterPCIDriver 1, DmaRemapPeerMmio 1 (NV_DMA_REMAP_PEER_MMIO_ENABLE), DeviceFileMode 0666, and the rest in
  NV_REG_DEFAULTS.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import shutil
import stat
import subprocess
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

import fakehw.model
from fakehw.agent.cxl import CxlEngine, apply_fact
from fakehw.agent.cxlcore import KernelError
from fakehw.agent.cxlstate import CxlState, Region
from fakehw.agent.faults import CxlOffline, FallenOffBus
from fakehw.agent.platform import PlatformView, boot_view, runtime_numa_memory
from fakehw.agent.state import ActiveFault, derive_state
from fakehw.model import System, load_profile
from fakehw.model.system import Node
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir
from fakehw.sysfs import ROOT_DIR, node_layout, render_tree
from fakehw.sysfs.node import RISCV_VMALLOC_TOTAL_KB, X86_VMALLOC_TOTAL_KB
from fakehw.sysfs.nvidia import nvidia_static_section
from fakehw.sysfs.pci import SPEED, interrupt
from fakehw.sysfs.pciconfig import config_space
from fakehw.sysfs.procdevices import proc_devices
from fakehw.sysfs.tree import File
from tests.nvml.captures import capture_dir

Rendered = Callable[[str], list[tuple[System, Node, Path]]]
NODES = "sys/devices/system/node"

PCIE_SPEED2STR = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe",
                  5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}
"""drivers/pci/pci.h (PCIE_SPEED2STR), as ``/sys/bus/pci/devices/*/max_link_speed`` prints them."""

CAPTURED_BOARDS = {"h100": "dgx-h100", "b200": "dgx-b200", "gb300": "gb300-nvl72", "l40s": "l40s-server",
                   "t4": "t4-cloud"}
"""Capture -> the built-in profile whose GPUs are that board (as tests/nvml/test_captures.py pairs them)."""

PROFILES = ("dgx-h100", "cxl-pool", "gb200-nvl72", "t4-cloud")


def _counters(path: Path) -> dict[str, int]:
    return {name: int(value) for name, value in (line.split() for line in path.read_text().splitlines())}


@pytest.mark.parametrize("profile", PROFILES)
def test_numastat_counters_partition_each_nodes_pages_both_ways(rendered: Rendered, profile: str) -> None:
    for _, _, root in rendered(profile):
        nodes = sorted((root / NODES).glob("node[0-9]*"))
        assert nodes
        stats = {n.name: _counters(n / "numastat") for n in nodes}
        for name, c in stats.items():
            assert list(c) == ["numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node",
                               "other_node"], name
            assert all(v >= 0 for v in c.values()), (name, c)
            assert c["numa_hit"] + c["numa_miss"] == c["local_node"] + c["other_node"], (name, c)
            assert c["interleave_hit"] <= c["numa_hit"], (name, c)
        assert sum(c["numa_miss"] for c in stats.values()) == sum(c["numa_foreign"] for c in stats.values())


@pytest.mark.parametrize("profile", PROFILES)
def test_no_memory_is_hardware_corrupted_without_an_injected_memory_failure(rendered: Rendered,
                                                                            profile: str) -> None:
    for _, _, root in rendered(profile):
        line = next(line for line in (root / "proc/meminfo").read_text().splitlines()
                    if line.startswith("HardwareCorrupted:"))
        assert line.split()[1:] == ["0", "kB"], line


def test_every_pcie_generation_prints_the_kernels_speed_string() -> None:
    """The built-in profiles have no Gen1 or Gen2 link, so no rendered tree shows those strings; the renderer's table
    must still be the kernel's for every generation a profile can give (drivers/pci/probe.c, pci_speed_string:
    what ``max_link_speed`` and ``current_link_speed`` print for PCIE_SPEED_2_5GT .. PCIE_SPEED_64_0GT)."""
    assert SPEED == PCIE_SPEED2STR


@pytest.mark.parametrize("board", sorted(CAPTURED_BOARDS))
def test_gpu_link_speed_is_the_kernels_string_for_the_captured_boards_generation(rendered: Rendered,
                                                                                 board: str) -> None:
    captures = capture_dir()
    if captures is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    gen = ET.parse(captures / f"qx-{board}.xml").getroot().findtext("gpu/pci/pci_gpu_link_info/pcie_gen/max_link_gen")
    assert gen is not None
    expected = PCIE_SPEED2STR[int(gen)]
    (_, _, root), *_ = rendered(CAPTURED_BOARDS[board])
    gpus = [d for d in sorted((root / "sys/bus/pci/devices").iterdir())
            if (d / "vendor").read_text().strip() == "0x10de" and (d / "class").read_text().startswith("0x03")]
    assert gpus
    for d in gpus:
        assert (d / "max_link_speed").read_text().strip() == expected, d.name
        assert (d / "current_link_speed").read_text().strip() == expected, d.name


def test_pci_attribute_modes_are_the_kernels(rendered: Rendered) -> None:
    modes = {"uevent": 0o644, "enable": 0o644, "config": 0o644, "vendor": 0o444, "device": 0o444, "class": 0o444}
    (_, _, root), *_ = rendered("dgx-h100")
    functions = sorted((root / "sys/bus/pci/devices").iterdir())
    assert len(functions) > 8
    for link in functions:
        for name, mode in modes.items():
            st = os.stat(link / name)
            assert stat.S_IMODE(st.st_mode) == mode, (link.name, name, oct(st.st_mode))


def test_pci_host_bridge_devices_have_a_writable_uevent(rendered: Rendered) -> None:
    """Every struct device gets ``uevent`` from device_add (drivers/base/core.c, DEVICE_ATTR_RW(uevent): 0644;
    writing it replays an event), the host bridge devices ``pciDDDD:BB`` (drivers/pci/probe.c,
    pci_register_host_bridge) as much as the functions below them."""
    (_, _, root), *_ = rendered("dgx-h100")
    bridges = sorted((root / "sys/devices").glob("pci[0-9a-f][0-9a-f][0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]"))
    assert len(bridges) >= 8, bridges
    for b in bridges:
        assert stat.S_IMODE(os.stat(b / "uevent").st_mode) == 0o644, b.name


@pytest.mark.parametrize("profile", ("cxl-test", "cxl-pool", "dgx-h100"))
def test_every_device_below_sys_devices_has_a_writable_uevent(rendered: Rendered, profile: str) -> None:
    """device_add (drivers/base/core.c) gives every struct device its ``uevent`` as DEVICE_ATTR_RW(uevent), 0644,
    whatever its bus: PCI functions and host bridges, the CXL bus's devices and the platform devices they hang
    from, the CXL root's parent among them (cxl_acpi's ACPI0017 device, or cxl_test's mock ``cxl_acpi.0``), which
    no bus's ``devices/`` lists below sys/bus/cxl."""
    for _, _, root in rendered(profile):
        events = [p for p in (root / "sys/devices").rglob("uevent") if not p.is_symlink()]
        assert len(events) > 50, (profile, len(events))
        for p in events:
            assert stat.S_IMODE(os.stat(p).st_mode) == 0o644, (profile, str(p.relative_to(root)))
        if profile.startswith("cxl"):
            cxl_root = (root / CXL_DEVICES / "root0").resolve()
            assert cxl_root.parent / "uevent" in events, profile


NVSWITCH_DEVICE_ID = "0x22a3"
"""The DGX H100's NVSwitch PCI device id (../shared/reference/hardware.md, DGX H100 row: "NVSwitch 22A3")."""


def test_every_nvswitch_the_driver_binds_has_its_device_node(rendered: Rendered) -> None:
    """A DGX H100 has four NVSwitch chips on its GPU baseboard (../shared/reference/hardware.md, DGX H100 row:
    "4 NVSwitch chips"; the DGX H100 User Guide's hardware overview), each a PCI function bound to
    ``nvidia-nvswitch``; the driver makes one character device per switch it probes, ``/dev/nvidia-nvswitchN`` with
    minor N counted from 0 (linux_nvswitch.c), plus ``nvidia-nvswitchctl``, and Fabric Manager opens every one."""
    (_, _, root), *_ = rendered("dgx-h100")
    switches = [d for d in sorted((root / "sys/bus/pci/devices").iterdir())
                if (_read(d / "vendor"), _read(d / "device")) == ("0x10de", NVSWITCH_DEVICE_ID)]
    assert len(switches) == 4, [d.name for d in switches]
    for d in switches:
        assert (d / "driver").resolve().name == "nvidia-nvswitch", d.name
    nodes = sorted(p.name for p in (root / "dev").glob("nvidia-nvswitch[0-9]*"))
    assert nodes == [f"nvidia-nvswitch{i}" for i in range(4)], nodes
    if os.geteuid() == 0:
        assert [os.minor(os.lstat(root / "dev" / n).st_rdev) for n in nodes] == [0, 1, 2, 3]


CXL_DEVICES = "sys/bus/cxl/devices"


def test_a_cxl_endpoint_hangs_off_the_port_that_owns_the_memdevs_upstream_dport(rendered: Rendered) -> None:
    for _, _, root in rendered("cxl-pool"):
        endpoints = sorted((root / CXL_DEVICES).glob("endpoint*"))
        assert len(endpoints) >= 8
        for link in endpoints:
            endpoint = link.resolve()
            memdev = (endpoint / "uport").resolve()
            upstream_dport = memdev.parent.parent  # memN -> its PCI function -> the downstream/root port above
            assert (endpoint / "parent_dport").resolve() == upstream_dport, link.name
            port = endpoint.parent
            assert port.name.startswith("port"), (link.name, port.name)
            dports = {d.resolve() for d in port.glob("dport*")}
            assert upstream_dport in dports, (link.name, port.name)


def test_the_pooled_dynamic_capacity_device_offers_the_whole_pool_as_dynamic_ram(rendered: Rendered) -> None:
    for _, _, root in rendered("cxl-pool"):
        dcd = []
        for link in sorted((root / CXL_DEVICES).glob("mem*")):
            mem = link.resolve()
            if int((mem / "ram/size").read_text(), 16) == 0 and int((mem / "pmem/size").read_text(), 16) == 0:
                dcd.append(mem)
        assert len(dcd) == 1, dcd
        assert int((dcd[0] / "dynamic_ram_a/size").read_text(), 16) == 64 << 30


@pytest.mark.parametrize("profile", ("cxl-pool", "cxl-test"))
def test_every_cxl_bus_device_has_a_writable_uevent(rendered: Rendered, profile: str) -> None:
    """Every device on the cxl bus (root, ports, endpoints, decoders, memdevs, regions, pmem and DAX regions) is a
    struct device registered with device_add, which creates ``uevent`` as DEVICE_ATTR_RW(uevent)
    (drivers/base/core.c: 0644; writing an action to it replays the event, what ``udevadm trigger`` does). The
    bus's ``devices/`` directory lists each of them (drivers/base/bus.c, bus_add_device)."""
    for _, _, root in rendered(profile):
        devices = sorted((root / CXL_DEVICES).iterdir())
        kinds = {d.name.rstrip("0123456789.") for d in devices}
        assert {"root", "port", "decoder", "mem"} <= kinds, (profile, kinds)
        for link in devices:
            assert stat.S_IMODE(os.stat(link / "uevent").st_mode) == 0o644, (profile, link.name)


KERNEL_CXL_DEVICE_IDS = {"cxl_port": 3, "cxl_memdev": 5, "cxl_region": 6, "cxl_pmem_region": 7, "cxl_dax_region": 8,
                         "cxl_decoder_root": 0, "cxl_decoder_switch": 0, "cxl_decoder_endpoint": 0}
"""drivers/cxl/cxl.h's CXL_DEVICE_* (PORT 3, ROOT 4, MEMORY_EXPANDER 5, REGION 6, PMEM_REGION 7, DAX_REGION 8) as
drivers/cxl/core/port.c's ``cxl_device_id`` gives them by device type; a decoder matches none of its cases (0)."""


@pytest.mark.parametrize("profile", ("cxl-pool", "cxl-test"))
def test_a_cxl_devices_uevent_is_what_dev_uevent_and_the_cxl_bus_write(rendered: Rendered, profile: str) -> None:
    """drivers/base/core.c ``dev_uevent`` writes MAJOR, MINOR and DEVNAME for a device with a device number (the
    memdev's name from ``cxl_memdev_devnode``: ``cxl/memN``, no DEVMODE since it sets no mode), DEVTYPE from the
    device type's name, DRIVER when a driver is bound, then the bus adds its own: ``cxl_bus_uevent`` writes
    ``MODALIAS=cxl:t<id>`` (CXL_MODALIAS_FMT), the id of the table above, 4 (CXL_DEVICE_ROOT) for the root port.
    Each line is checked against the device's own attributes (``dev``, ``devtype``, the ``driver`` link) and the
    kernel's table, so a uevent that says only DEVTYPE (what the fake wrote before) fails.

    The ``devtype`` and ``modalias`` attributes are port.c's ``cxl_base_attribute_group``, which the groups of ports,
    decoders and regions list and drivers/cxl/core/memdev.c's ``cxl_memdev_attribute_groups`` does not: a memdev has
    neither file (its DEVTYPE is its device type's name, ``cxl_memdev``); every other device's ``modalias`` is its
    uevent's MODALIAS (libcxl reads a port's and a region's to find the module to load)."""
    for _, _, root in rendered(profile):
        seen = _check_cxl_uevents(root, profile)
        assert {"cxl_port", "cxl_memdev", "cxl_decoder_root"} <= seen, (profile, seen)


def test_a_pmem_regions_cxl_devices_have_the_pmem_region_device_id(fast_tmp: Path) -> None:
    """The same uevent and ``modalias`` rules as above on a tree with a committed pmem region, whose
    ``pmem_regionN`` (drivers/cxl/core/region.c devm_cxl_add_pmem_region, device type ``cxl_pmem_region``) is the
    one device of the bus the two profiles above do not have: its MODALIAS is ``cxl:t7`` (drivers/cxl/cxl.h
    CXL_DEVICE_PMEM_REGION 7), the id drivers/cxl/pmem.c's ``cxl_pmem_region_driver`` binds by."""
    system = _cxl_pool_with_a_pmem_region()
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    seen = _check_cxl_uevents(fast_tmp / node.name / ROOT_DIR, system.name)
    assert {"cxl_region", "cxl_pmem_region"} <= seen, seen


def _check_cxl_uevents(root: Path, label: str) -> set[str]:
    """Hold every cxl bus device's ``uevent`` and ``modalias`` under ``root`` to the rules of the test above; the
    device types seen."""
    seen = set()
    for link in sorted((root / CXL_DEVICES).iterdir()):
        dev = link.resolve()
        memdev = re.fullmatch(r"mem\d+", link.name) is not None
        assert (dev / "devtype").exists() != memdev and (dev / "modalias").exists() != memdev, link.name
        devtype = "cxl_memdev" if memdev else (dev / "devtype").read_text().strip()
        expected = []
        if (dev / "dev").exists():
            major, minor = (dev / "dev").read_text().strip().split(":")
            assert (root / "dev/cxl" / link.name).exists(), link.name
            expected += [f"MAJOR={major}", f"MINOR={minor}", f"DEVNAME=cxl/{link.name}"]
        expected.append(f"DEVTYPE={devtype}")
        if (dev / "driver").is_symlink():
            expected.append(f"DRIVER={os.readlink(dev / 'driver').rsplit('/', 1)[-1]}")
        device_id = 4 if link.name == "root0" else KERNEL_CXL_DEVICE_IDS[devtype]
        expected.append(f"MODALIAS=cxl:t{device_id}")
        assert (dev / "uevent").read_text().splitlines() == expected, (label, link.name)
        if not memdev:
            assert (dev / "modalias").read_text() == f"cxl:t{device_id}\n", (label, link.name)
        seen.add(devtype)
    return seen


EXTENT_LENGTH = 512 << 20
"""Two of the 256 MiB dynamic-capacity blocks (docs/platform.md: extents are whole blocks)."""


def _render_cxl_state(engine: CxlEngine, node: Node, cxl: CxlState, out: Path) -> Path:
    """``node`` rendered as the agent renders it with the CXL engine in state ``cxl`` (the NUMA memory that state
    puts online); the fake root."""
    view = engine.view(engine.settle(cxl, node.name, frozenset()), node.name)
    state = derive_state(node, [])
    platform = PlatformView(node.name, runtime_numa_memory(node, view), view,
                            boot_view(engine.system, node, state).pools)
    render_tree(RenderContext(engine.system, node, dataclasses.replace(state, platform=platform), True),
                OutputDir(out / node.name))
    return out / node.name / ROOT_DIR


def _render_holding_an_extent(out: Path) -> Path:
    """cxl-host-0 of cxl-pool after it was given one dynamic-capacity extent of pool0, rendered as the agent renders
    it (the CXL engine's state after the extent's facts); the fake root."""
    system = load_profile("cxl-pool")
    node = system.nodes[0]
    engine = CxlEngine(system, [n.name for n in system.nodes])  # pool0 is shared: one engine serves every host
    cxl = engine.settle(engine.boot(), node.name, frozenset())
    facts, _ = engine.add_extent(cxl, "pool0", node.name, EXTENT_LENGTH)
    for fact in facts:
        cxl = apply_fact(cxl, fact)
    return _render_cxl_state(engine, node, cxl, out)


def _assert_targets_share_their_regions_mode(root: Path) -> set[str]:
    """Every target of every region of the tree is an endpoint decoder in the region's mode; the modes seen."""
    devices = root / CXL_DEVICES
    modes = set()
    for region in sorted(devices.glob("region[0-9]*")):
        mode = _read(region / "mode")
        targets = [_read(t) for t in sorted(region.glob("target[0-9]*"))]
        for name in filter(None, targets):
            assert _read(devices / name / "mode") == mode, (region.name, name, mode)
            modes.add(mode)
    return modes


def test_a_regions_targets_are_decoders_in_the_regions_mode(rendered: Rendered, fast_tmp: Path) -> None:
    """drivers/cxl/core/region.c (cxl_region_attach) refuses to attach an endpoint decoder whose mode differs from
    the region's ("region mode ... mismatch", -EINVAL; the dynamic-capacity series keeps the check, through
    cxl_modes_compatible, pairing a DC region only with DC decoders), and ``regionN/targetK`` names the attached
    decoder (show_targetN: its device name). So every target's ``mode`` (port.c mode_show) is its region's
    (Documentation/ABI/testing/sysfs-bus-cxl gives both attributes the same names): on cxl-pool at boot the static
    ``ram`` regions of local and pooled devices alike, and after an extent the dynamic-capacity region too."""
    modes = set()
    for _, _, root in rendered("cxl-pool"):
        modes |= _assert_targets_share_their_regions_mode(root)
    assert modes == {"ram"}, modes
    modes = _assert_targets_share_their_regions_mode(_render_holding_an_extent(fast_tmp))
    assert modes == {"ram", "dynamic_ram_a"}, modes


def test_an_extent_shows_once_in_its_dynamic_capacity_regions_dax_region_at_an_offset_inside_it(
        fast_tmp: Path) -> None:
    """The dynamic-capacity series' ABI (Documentation/ABI/testing/sysfs-bus-cxl, ``dax_regionX/extentX.Y``):
    extent devices exist "for Dynamic Capacity regions only", one per extent the region's memory accepted, with
    ``length`` its length and ``offset`` the "extent offset within the region": region_extent's hpa_range, which
    drivers/dax/cxl.c adds to the DAX region's start (dax_region->res.start + hpa_range.start), so offset + length
    never passes the region's ``size``. The extent's length is the 512 MiB the host was given; a static RAM region
    (``mode`` ram) has no extent at all."""
    root = _render_holding_an_extent(fast_tmp)
    regions = {link.name: link.resolve() for link in (root / CXL_DEVICES).glob("region[0-9]*")}
    dynamic = [r for r in regions.values() if _read(r / "mode") == "dynamic_ram_a"]
    assert len(dynamic) == 1, sorted(regions)
    static = [r for r in regions.values() if _read(r / "mode") == "ram" and any(r.glob("dax_region*"))]
    assert static, sorted(regions)
    for region in static:
        assert not list(region.glob("dax_region*/extent*")), region.name
    extents = sorted(dynamic[0].glob("dax_region*/extent*"))
    assert [e.name.split(".")[1] for e in extents] == ["0"], extents
    size = int(_read(dynamic[0] / "size"), 16)
    offset, length = int(_read(extents[0] / "offset"), 16), int(_read(extents[0] / "length"), 16)
    assert length == EXTENT_LENGTH
    assert offset >= 0 and offset + length <= size, (hex(offset), hex(length), hex(size))


def test_cxl_region_attributes_tools_write_are_writable(rendered: Rendered) -> None:
    """drivers/cxl/core/region.c: ``size``, ``commit``, ``interleave_ways`` and ``interleave_granularity`` are
    DEVICE_ATTR_RW (0644), and so is every ``targetN`` (TARGET_ATTR_RW(0..15) ends in DEVICE_ATTR_RW(target##n):
    ``cxl create-region`` attaches a decoder by writing its name there); cxl_region_target_visible shows target0 up
    to target(interleave_ways - 1) and no other."""
    writable = ("size", "commit", "interleave_ways", "interleave_granularity")
    for _, _, root in rendered("cxl-pool"):
        regions = sorted((root / CXL_DEVICES).glob("region[0-9]*"))
        assert regions
        for link in regions:
            for name in writable:
                assert stat.S_IMODE(os.stat(link / name).st_mode) == 0o644, (link.name, name)
            ways = int(_read(link / "interleave_ways"))
            targets = sorted(t.name for t in link.glob("target[0-9]*"))
            assert targets == sorted(f"target{i}" for i in range(ways)), (link.name, targets)
            for name in targets:
                assert stat.S_IMODE(os.stat(link / name).st_mode) == 0o644, (link.name, name)


def _cxl_pool_with_a_pmem_region() -> System:
    """cxl-pool plus a committed 2-way persistent-memory region in its pmem-only window (cfmws3, across cxlhb0 and
    cxlhb1): mem1 below cxlhb0 gets 1 GiB of pmem like mem6 below cxlhb1 has."""
    doc = yaml.safe_load((Path(fakehw.model.__file__).parent.parent / "profiles/cxl-pool.yaml").read_text())
    cxl = doc["groups"][0]["node"]["cxl"]
    next(m for m in cxl["memdevs"] if m["name"] == "mem1")["pmemSize"] = "1GiB"
    cxl["regions"].append({"name": "region1", "window": "cfmws3", "targets": ["mem1", "mem6"],
                           "interleaveGranularity": 256, "mode": "pmem"})
    return load_profile("cxl-pool-pmem", text=yaml.safe_dump(doc))


NO_DPA = 0xFFFFFFFFFFFFFFFF
"""What an endpoint decoder with no device memory shows as ``dpa_resource``: drivers/cxl/core/port.c dpa_resource_show
prints cxl_dpa_resource_start(), RESOURCE_SIZE_MAX without a ``dpa_res`` (``%#llx``)."""


def _assert_dpa_ranges_follow_the_partitions(root: Path) -> set[str]:
    """Every endpoint decoder of every memdev under ``root`` against the DPA rules of the test below; the modes
    seen."""
    devices, modes = root / CXL_DEVICES, set()
    for md in sorted(devices.glob("mem[0-9]*")):
        ram = int(_read(md / "ram/size"), 16)
        pmem = int(_read(md / "pmem/size"), 16)
        endpoint = next((p for p in devices.glob("endpoint[0-9]*") if (p / "uport").resolve() == md.resolve()),
                        None)
        if endpoint is None:
            continue
        decoders = sorted(endpoint.resolve().glob("decoder*.*"), key=lambda d: int(d.name.split(".")[1]))
        assert decoders, md.name
        end = 0
        for d in decoders:
            mode, size, start = _read(d / "mode"), int(_read(d / "dpa_size"), 16), int(_read(d / "dpa_resource"), 16)
            modes.add(mode)
            if mode == "none":
                assert (size, start) == (0, NO_DPA), (md.name, d.name)
                continue
            assert size > 0 and start != NO_DPA, (md.name, d.name, mode)
            lo, hi = {"ram": (0, ram), "pmem": (ram, ram + pmem)}.get(mode, (ram + pmem, NO_DPA))
            assert lo <= start and start + size <= hi, (md.name, d.name, mode, hex(start), hex(size))
            assert start >= end, (md.name, d.name, hex(start), hex(end))  # in decoder order, never overlapping
            end = start + size
    return modes


def test_an_endpoint_decoders_device_memory_lies_in_its_modes_partition_in_decoder_order(
        rendered: Rendered, fast_tmp: Path) -> None:
    """Device physical addresses (DPA) of a CXL memory device: the volatile capacity starts at DPA 0 and the
    persistent capacity follows it (CXL 3.1, Get Partition Info's active volatile and persistent capacities;
    drivers/cxl/core/mbox.c adds the ``ram`` partition at DPA 0 and ``pmem`` at the ram size, shown as ``ram/size``
    and ``pmem/size``), and the dynamic-capacity regions come after the static capacity (Get Dynamic Capacity
    Configuration's region base; QEMU's type 3 device puts DC region 0 at the end of its static memory). An
    endpoint decoder's ``dpa_resource``/``dpa_size`` are its allocation (port.c), taken from
    the partition of its ``mode`` (drivers/cxl/core/hdm.c cxl_dpa_alloc), in decoder id order (hdm.c refuses a
    decoder allocated out of order, ``port->hdm_end + 1``), as child resources of the device's DPA that never
    overlap (__request_region). An idle decoder (mode ``none``) has none: size 0, start RESOURCE_SIZE_MAX. ndctl's
    ``cxl list -D`` reads both. Checked on cxl-pool at boot (ram regions of local and pooled devices), with a
    committed pmem region, and holding a dynamic-capacity extent."""
    modes: set[str] = set()
    for _, _, root in rendered("cxl-pool"):
        modes |= _assert_dpa_ranges_follow_the_partitions(root)
    system = _cxl_pool_with_a_pmem_region()
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / "pmem" / node.name))
    modes |= _assert_dpa_ranges_follow_the_partitions(fast_tmp / "pmem" / node.name / ROOT_DIR)
    modes |= _assert_dpa_ranges_follow_the_partitions(_render_holding_an_extent(fast_tmp / "extent"))
    assert modes == {"none", "ram", "pmem", "dynamic_ram_a"}, modes


def test_only_a_pmem_regions_uuid_is_writable(fast_tmp: Path) -> None:
    """drivers/cxl/core/region.c: ``uuid`` is DEVICE_ATTR_RW (0644) and identifies a persistent-memory region's
    label set (ndctl's ``cxl create-region -t pmem`` writes it); cxl_region_visible makes it 0444 for any other mode
    ("support tooling that expects to find a 'uuid' attribute for all regions regardless of mode"), and uuid_show
    prints an empty line for those, the UUID (``%pUb``) for a pmem region."""
    system = _cxl_pool_with_a_pmem_region()
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    modes = set()
    for region in sorted((fast_tmp / node.name / ROOT_DIR / CXL_DEVICES).glob("region[0-9]*")):
        mode = _read(region / "mode")
        modes.add(mode)
        want = 0o644 if mode == "pmem" else 0o444
        assert stat.S_IMODE(os.stat(region / "uuid").st_mode) == want, (region.name, mode)
        text = _read(region / "uuid")
        if mode == "pmem":
            assert str(uuid.UUID(text)) == text, (region.name, text)
        else:
            assert text == "", (region.name, text)
    assert modes == {"ram", "pmem"}, modes


def test_a_new_pmem_regions_uuid_is_null_until_one_is_written(fast_tmp: Path) -> None:
    """drivers/cxl/core/region.c: a region created through ``create_pmem_region`` starts with zeroed parameters
    (cxl_region_alloc kzallocs it), and uuid_show prints ``p->uuid`` with ``%pUb``, so a new pmem region reads the
    null UUID; uuid_store copies a written UUID into ``p->uuid`` (refusing the null one), which uuid_show then prints.
    This is the first step of ``cxl create-region -t pmem`` (ndctl cxl/region.c writes a generated uuid before
    the size, since alloc_hpa refuses a pmem region's size while its uuid is null)."""
    system = _cxl_pool_with_a_pmem_region()
    node = system.nodes[0]
    engine = CxlEngine(system, [node.name])
    core = engine.core(node.name)
    cxl = engine.settle(engine.boot(), node.name, frozenset())
    window = next(w for w in node.cxl.windows if w.pmem)
    name = f"region{cxl.root_ids[(node.name, window.name)]}"
    created = core.create_region(cxl, window.name, "pmem", name)
    region = _render_cxl_state(engine, node, created, fast_tmp / "created") / CXL_DEVICES / name
    assert _read(region / "mode") == "pmem"
    assert _read(region / "uuid") == "00000000-0000-0000-0000-000000000000"
    written = "2f3b0c1e-5d6a-4f7e-9a8b-1c2d3e4f5a6b"
    named = core.set_uuid(created, name, len(written) + 1, written)
    region = _render_cxl_state(engine, node, named, fast_tmp / "named") / CXL_DEVICES / name
    assert _read(region / "uuid") == written


def test_a_pmem_region_assembled_at_boot_reads_the_null_uuid(fast_tmp: Path) -> None:
    """drivers/cxl/core/region.c (read at gregkh/linux 53edb6a): a region whose decoders the firmware committed is
    assembled by cxl_add_to_region -> construct_region, which creates it through __create_region ->
    devm_cxl_add_region -> cxl_region_alloc (kzalloc: ``params.uuid`` all zero); __construct_region then sets only
    its resource, interleave ways and granularity and CXL_CONFIG_INTERLEAVE_ACTIVE, and cxl_region_attach ->
    cxl_region_attach_auto adds the targets and marks it CXL_CONFIG_COMMIT. None of these writes ``p->uuid``: in
    region.c only uuid_store does (uuid_copy of a written UUID), and no code there reads one from the devices'
    label storage. So uuid_show (``%pUb`` of ``p->uuid``) prints the null UUID for a pmem region assembled at boot,
    and uuid_store cannot name it afterwards: it refuses any UUID while ``p->state >= CXL_CONFIG_ACTIVE`` (EBUSY)."""
    system = _cxl_pool_with_a_pmem_region()
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    devices = fast_tmp / node.name / ROOT_DIR / CXL_DEVICES
    pmem = [r for r in sorted(devices.glob("region[0-9]*")) if _read(r / "mode") == "pmem"]
    assert [r.name for r in pmem] == ["region1"]
    assert _read(pmem[0] / "commit") == "1"
    assert _read(pmem[0] / "uuid") == "00000000-0000-0000-0000-000000000000"
    engine = CxlEngine(system, [node.name])
    booted = engine.settle(engine.boot(), node.name, frozenset())
    written = "2f3b0c1e-5d6a-4f7e-9a8b-1c2d3e4f5a6b"
    with pytest.raises(KernelError) as refused:
        engine.core(node.name).set_uuid(booted, "region1", len(written) + 1, written)
    assert refused.value.errno == errno.EBUSY


def test_x86_nodes_have_2_mib_and_1_gib_huge_page_pools(rendered: Rendered) -> None:
    (_, node, root), *_ = rendered("dgx-h100")
    assert node.cpu.arch == "amd64"
    for n in sorted((root / NODES).glob("node[0-9]*")):
        names = {d.name for d in (n / "hugepages").iterdir()}
        assert names == {"hugepages-2048kB", "hugepages-1048576kB"}, (n.name, names)


@pytest.mark.parametrize("profile", PROFILES)
def test_meminfo_values_are_never_negative(rendered: Rendered, profile: str) -> None:
    for _, _, root in rendered(profile):
        files = [root / "proc/meminfo", *sorted((root / NODES).glob("node[0-9]*/meminfo"))]
        for f in files:
            for line in f.read_text().splitlines():
                value = line.split(":", 1)[1].split()[0]
                assert int(value) >= 0, (f, line)


NOT_PAGES = {"KernelStack", "ShadowCallStack", "VmallocTotal", "Hugepagesize", "Hugetlb", "DirectMap4k",
             "DirectMap2M", "DirectMap1G"}
"""meminfo lines in kB that are not ``pages << (PAGE_SHIFT - 10)`` (fs/proc/meminfo.c, arch_report_meminfo)."""

DIRECT_MAP_KB = {"DirectMap4k": 4, "DirectMap2M": 2048, "DirectMap1G": 1048576}


def _meminfo_kb(path: Path) -> dict[str, int]:
    """The ``kB`` lines of a meminfo file, by label (``Node N `` prefix dropped)."""
    out = {}
    for line in path.read_text().splitlines():
        label, rest = line.split(":", 1)
        if rest.endswith(" kB"):
            out[label.split()[-1]] = int(rest.split()[0])
    return out


def _page_kb(root: Path) -> int:
    """The page size in kB the tree declares (``/proc/hwloc-nofile-info``, hwloc-gather-topology's PageSize)."""
    info = dict(line.split(": ", 1) for line in (root / "proc/hwloc-nofile-info").read_text().splitlines())
    page = int(info["PageSize"])
    if info["Architecture"] == "x86_64":
        assert page == 4096, info  # x86-64 has one base page size
    return page // 1024


@pytest.mark.parametrize("profile", PROFILES)
def test_meminfo_figures_are_whole_pages(rendered: Rendered, profile: str) -> None:
    for _, node, root in rendered(profile):
        page_kb = _page_kb(root)
        nodes = {f.parent.name: _meminfo_kb(f) for f in sorted((root / NODES).glob("node[0-9]*/meminfo"))}
        machine = _meminfo_kb(root / "proc/meminfo")
        for where, values in [("proc/meminfo", machine), *nodes.items()]:
            for label, value in values.items():
                if label not in NOT_PAGES:
                    assert value % page_kb == 0, (node.name, where, label, value, page_kb)
        for label, unit in DIRECT_MAP_KB.items():
            assert machine.get(label, 0) % unit == 0, (node.name, label, machine.get(label), unit)
        for label in ("MemTotal", "MemFree"):
            assert machine[label] == sum(v[label] for v in nodes.values()), (node.name, label)


def test_modalias_carries_the_three_bytes_of_the_class_code(rendered: Rendered) -> None:
    (_, _, root), *_ = rendered("dgx-h100")
    for d in sorted((root / "sys/bus/pci/devices").iterdir()):
        cls = int((d / "class").read_text(), 16)
        alias = (d / "modalias").read_text().strip()
        assert alias.endswith(f"bc{cls >> 16:02X}sc{(cls >> 8) & 0xFF:02X}i{cls & 0xFF:02X}"), (d.name, alias)


NV_REG_DEFAULTS = {"MemoryPoolSize": "0", "KMallocHeapMaxSize": "0", "VMallocHeapMaxSize": "0",
                   "IgnoreMMIOCheck": "0", "NvLinkDisable": "0", "EnableUserNUMAManagement": "1",
                   "ModifyDeviceFiles": "1", "EnablePCIERelaxedOrderingMode": "0", "RegisterPCIDriver": "1",
                   "EnableResizableBar": "0", "EnableDbgBreakpoint": "0", "ResmanDebugLevel": "4294967295",
                   "RmLogonRC": "1", "DeviceFileUID": "0", "DeviceFileGID": "0", "DeviceFileMode": "438",
                   "InitializeSystemMemoryAllocations": "1", "UsePageAttributeTable": "4294967295",
                   "EnablePCIeGen3": "0", "EnableMSI": "1", "EnableStreamMemOPs": "0", "RmProfilingAdminOnly": "1",
                   "PreserveVideoMemoryAllocations": "0", "EnableS0ixPowerManagement": "0",
                   "S0ixPowerManagementVideoMemoryThreshold": "256", "DynamicPowerManagement": "3",
                   "DynamicPowerManagementVideoMemoryThreshold": "200", "DmaRemapPeerMmio": "1"}
"""nv-reg.h's NV_DEFINE_REG_ENTRY(_GLOBAL) defaults (``~0`` prints as 4294967295, ``0666`` as 438); EnableGpuFirmware
and OpenRmEnableUnsupportedGpus are left out (the former is held on every branch by
test_nvidia_params_show_the_gsp_firmware_defaults_of_every_branch, the latter, which does change, per branch by
OPENRM_UNSUPPORTED_GPUS). ``DmaRemapPeerMmio`` is NV_DEFINE_REG_ENTRY(__NV_DMA_REMAP_PEER_MMIO,
NV_DMA_REMAP_PEER_MMIO_ENABLE), _ENABLE being 0x00000001 ("1 = enable dynamic DMA remapping of peer MMIO regions
(default)"), and is in nv_parms, in all 144 tags of NVIDIA/open-gpu-kernel-modules from 535.43.02 to 595.45.04."""


def _params(text: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in text.splitlines())


def test_nvidia_params_show_the_drivers_registry_defaults(rendered: Rendered) -> None:
    (_, _, root), *_ = rendered("dgx-h100")
    params = _params((root / "proc/driver/nvidia/params").read_text())
    assert {k: params.get(k) for k in NV_REG_DEFAULTS} == NV_REG_DEFAULTS


OPENRM_UNSUPPORTED_GPUS = {535: "0", 550: "1", 580: "1", 595: "1"}
"""``OpenRmEnableUnsupportedGpus`` per driver branch fakehw knows (NVIDIA/open-gpu-kernel-modules
kernel-open/nvidia/nv-reg.h): 535.230.02 and every 535 tag define it with NV_REG_OPENRM_ENABLE_UNSUPPORTED_GPUS_DEFAULT,
which is _DISABLE (0x00000000); 545.23.06 deprecated the opt-in ("no longer required ... ignored, for backwards
compatibility") and defines it as 1, as every later tag up to 595.45.04 does."""


@pytest.mark.parametrize("branch", sorted(OPENRM_UNSUPPORTED_GPUS))
def test_nvidia_params_show_the_branchs_openrm_unsupported_gpus_default(branch: int) -> None:
    """The value the real driver of each branch prints for the parameter nothing overrides (OPENRM_UNSUPPORTED_GPUS)."""
    system = load_profile("dgx-h100")
    system = dataclasses.replace(system, driver=dataclasses.replace(system.driver, version=f"{branch}.104.05"))
    node = system.nodes[0]
    entry = nvidia_static_section(system, node).entries["proc/driver/nvidia/params"]
    assert isinstance(entry, File)
    params = _params(entry.data.decode())
    assert params["OpenRmEnableUnsupportedGpus"] == OPENRM_UNSUPPORTED_GPUS[branch]


def test_nvidia_params_numbers_are_unsigned_32_bit(rendered: Rendered) -> None:
    """kernel-open/nvidia/nv-procfs.c (nv_procfs_read_params, 535 to 595) prints every numeric parameter of nv_parms
    as ``"%s: %u\n"`` of its NvU32 (nv-reg.h, NV_DEFINE_REG_ENTRY), so each is a decimal in 0..4294967295; the
    string parameters after them print quoted (``RegistryDwords: "..."``)."""
    for profile in ("dgx-h100", "gb200-nvl72"):
        for _, _, root in rendered(profile):
            params = _params((root / "proc/driver/nvidia/params").read_text())
            numbers = {k: v for k, v in params.items() if not v.startswith('"')}
            assert numbers, profile
            for key, value in numbers.items():
                assert value.isdigit() and int(value) < 2**32, (profile, key, value)


def test_every_port_between_a_committed_regions_endpoints_and_the_root_decodes_it(rendered: Rendered) -> None:
    """drivers/cxl/core/region.c (cxl_port_setup_targets, commit): a committed region has a decoder programmed for
    it in every port from each target's endpoint up to the host bridge; ``cxl list -D -r`` lists them. On cxl-pool
    that includes the pooled region's path through the pool's host bridge. Each such decoder routes to the dport the
    path comes up through: its ``target_list`` holds that dport's id (port.c emit_target_list prints the dports'
    port ids; the child port's or endpoint's ``parent_dport`` is the port's ``dportN`` with that id), and decodes
    the region's whole host physical range (hdm.c programs each decoder with the region's HPA range: ``start`` is the
    region's ``resource``, ``size`` its ``size``)."""
    for _, _, root in rendered("cxl-pool"):
        devices = root / CXL_DEVICES
        committed = [r for r in sorted(devices.glob("region[0-9]*")) if (r / "commit").read_text().strip() == "1"]
        assert len(committed) >= 2
        for region in committed:
            targets = sorted(region.glob("target[0-9]*"))
            assert targets, region.name
            for target in targets:
                decoder = (devices / target.read_text().strip()).resolve()
                child = decoder.parent  # the endpoint; the port above it next
                port = child.parent
                assert port.name.startswith("port"), (region.name, decoder)
                while port.name.startswith("port"):
                    decoders = [d for d in port.glob("decoder*.*") if _read(d / "region") == region.name]
                    assert len(decoders) == 1, (region.name, port.name, decoders)
                    span = (int(_read(decoders[0] / "start"), 16), int(_read(decoders[0] / "size"), 16))
                    assert span == (int(_read(region / "resource"), 16), int(_read(region / "size"), 16)), (
                        region.name, decoders[0].name, span)
                    via = (child / "parent_dport").resolve()
                    ids = {link.name[5:] for link in port.glob("dport*") if link.resolve() == via}
                    listed = set(_read(decoders[0] / "target_list").split(","))
                    assert ids and ids <= listed, (region.name, port.name, ids, listed)
                    child, port = port, port.parent


def test_a_port_decoder_holds_only_regions_with_a_target_below_the_port(rendered: Rendered) -> None:
    """drivers/cxl/core/region.c: a switch or host bridge decoder is taken for a region only when one of the
    region's targets sits below that port (cxl_port_attach_region walks each target's ancestry, cxl_rr_alloc_decoder
    takes a decoder there), so a port decoder naming a region has an endpoint of one of its targets beneath it.
    cxl-pool: regions on local devices, on the pooled device's logical devices, and none on the restricted host."""
    for _, _, root in rendered("cxl-pool"):
        devices = root / CXL_DEVICES
        held = 0
        for decoder in sorted(devices.glob("decoder*.*")):
            port = decoder.resolve().parent
            name = _read(decoder / "region") if (decoder / "region").exists() else ""
            if not name or not port.name.startswith("port"):
                continue
            endpoints = [(devices / _read(t)).resolve().parent for t in (devices / name).glob("target[0-9]*")]
            assert any(port in e.parents for e in endpoints), (decoder.name, port.name, name)
            held += 1
        assert held >= 4


def test_every_cxl_decoders_granularity_is_one_the_spec_encodes(rendered: Rendered) -> None:
    """CXL 2.0 8.2.5.12.7 (HDM decoder control, IG): interleave granularity is 256 bytes x 2^n, up to 16 KiB."""
    for _, _, root in rendered("cxl-pool"):
        decoders = sorted((root / CXL_DEVICES).glob("decoder*.*"))
        assert decoders
        for d in decoders:
            if (d / "interleave_granularity").exists():
                g = int((d / "interleave_granularity").read_text())
                assert g in {256 << n for n in range(7)}, (d.name, g)


def test_a_cxl_memdev_sits_in_its_host_bridges_numa_node(rendered: Rendered) -> None:
    """drivers/cxl/core/memdev.c: memN/numa_node is the NUMA node of the device (its host bridge's): cxl-pool's
    profile puts all three CXL host bridges in NUMA node 0 (``cxl.hostBridges: numa: 0``)."""
    for _, _, root in rendered("cxl-pool"):
        memdevs = sorted((root / CXL_DEVICES).glob("mem[0-9]*"))
        assert memdevs
        for m in memdevs:
            assert (m / "numa_node").read_text().strip() == "0", m.name


@pytest.mark.parametrize("profile", PROFILES)
def test_nfs_unstable_is_always_zero(rendered: Rendered, profile: str) -> None:
    """Since Linux 5.8 the kernel has no unstable-NFS page counter and prints NFS_Unstable as a constant 0 kB (fs/proc/
    meminfo.c and drivers/base/node.c); readers expect the line, at 0."""
    for _, _, root in rendered(profile):
        for f in [root / "proc/meminfo", *sorted((root / NODES).glob("node[0-9]*/meminfo"))]:
            (line,) = [x for x in f.read_text().splitlines() if "NFS_Unstable:" in x]
            assert line.split()[-2:] == ["0", "kB"], (f, line)


def test_proc_devices_has_the_documented_character_majors(rendered: Rendered) -> None:
    """Documentation/admin-guide/devices.txt: 1 mem, 4 tty (and /dev/vc/0), 5 /dev/tty, /dev/console and /dev/ptmx,
    10 misc; NVIDIA's driver registers 195 (nvidia, nvidiactl, nvidia-modeset)."""
    (_, _, root), *_ = rendered("dgx-h100")
    text = (root / "proc/devices").read_text()
    chars = text.split("Character devices:\n", 1)[1].split("\n\n", 1)[0]
    majors = {(int(m), name) for m, name in (line.split() for line in chars.splitlines())}
    assert {(1, "mem"), (4, "/dev/vc/0"), (4, "tty"), (5, "/dev/tty"), (5, "/dev/console"), (5, "/dev/ptmx"),
            (10, "misc"), (195, "nvidia"), (195, "nvidiactl"), (195, "nvidia-modeset")} <= majors, majors


def test_a_cxl_dax_device_has_no_numa_node_of_its_own_and_targets_the_windows(rendered: Rendered) -> None:
    """A CXL region's DAX device shows ``numa_node`` -1 and the node its memory goes online in as ``target_node``.

    ``numa_node`` is ``dev_to_node()`` of ``daxN.0`` (drivers/dax/bus.c), inherited at device_add from a parent
    chain (``dax_regionN``, ``regionN``, the root decoder, ``root0``, ``ACPI0017:00``) that no host bridge is part
    of and whose top, the CXL root's ACPI object, has no _PXM; hwloc's author listed "CXL RAM DAX numa_node is
    always -1 ?" among what Linux showed for a CXL RAM region (open-mpi/hwloc#569). ``target_node`` is what daxctl
    list prints (ndctl daxctl/json.c); the profile gives region0's window cfmws2 NUMA node 1 and the pool's window
    cfmws4 node 2.
    The cxl-test host's mock root (cxl_test's ``cxl_acpi`` platform device) has no node either. Its ``modalias`` is
    drivers/dax/bus.c's ``DAX_DEVICE_MODALIAS_FMT`` with type 0, ``dax:t0`` (the trailing ``*`` is only in the
    module alias, MODULE_ALIAS_DAX_DEVICE)."""
    for profile in ("cxl-pool", "cxl-test"):
        daxes = [d for _, _, root in rendered(profile) for d in sorted((root / "sys/bus/dax/devices").glob("dax*"))]
        assert daxes, profile
        for d in daxes:
            assert (d / "numa_node").read_text() == "-1\n", d
            assert (d / "modalias").read_text() == "dax:t0\n", d
            if profile == "cxl-pool":
                assert (d / "target_node").read_text().strip() in ("1", "2"), d.name


SUMS = {"Slab": ("SReclaimable", "SUnreclaim"), "Active": ("Active(anon)", "Active(file)"),
        "Inactive": ("Inactive(anon)", "Inactive(file)")}
"""fs/proc/meminfo.c and drivers/base/node.c print these as the sums of their parts: ``Slab`` is
``sreclaimable + sunreclaim``, ``Active``/``Inactive`` the anon and file LRU lists added (``pages[LRU_ACTIVE_ANON] +
pages[LRU_ACTIVE_FILE]``)."""

THP_COUNTERS = ("AnonHugePages", "ShmemHugePages", "ShmemPmdMapped", "FileHugePages", "FilePmdMapped")
"""Counted in transparent huge pages (``... * HPAGE_PMD_NR`` in fs/proc/meminfo.c and drivers/base/node.c)."""


@pytest.mark.parametrize("profile", PROFILES)
def test_meminfo_totals_are_the_sums_the_kernel_prints(rendered: Rendered, profile: str) -> None:
    """Each total is its parts added, a node's ``MemUsed`` is ``MemTotal - MemFree`` (node.c: ``i.totalram -
    i.freeram``), and ``KReclaimable`` includes ``SReclaimable`` (it is reclaimable slab plus other reclaimable
    kernel memory); the transparent-huge-page counters are whole PMD mappings: a PMD maps a page table page of
    PAGE_SIZE / 8 entries, 2 MiB with 4 KiB pages and 512 MiB with 64 KiB pages."""
    for _, node, root in rendered(profile):
        page_kb = _page_kb(root)
        pmd_kb = page_kb * (page_kb * 1024 // 8)
        files = [root / "proc/meminfo", *sorted((root / NODES).glob("node[0-9]*/meminfo"))]
        for f in files:
            values = _meminfo_kb(f)
            for total, parts in SUMS.items():
                assert values[total] == sum(values[p] for p in parts), (node.name, f.name, total)
            assert values["KReclaimable"] >= values["SReclaimable"], (node.name, f)
            if "MemUsed" in values:
                assert values["MemUsed"] == values["MemTotal"] - values["MemFree"], (node.name, f)
            for label in THP_COUNTERS:
                assert values[label] % pmd_kb == 0, (node.name, f, label, values[label], pmd_kb)


@pytest.mark.parametrize("profile", PROFILES)
def test_reclaimable_kernel_memory_is_the_reclaimable_slab(rendered: Rendered, profile: str) -> None:
    """``KReclaimable`` is the reclaimable slab plus NR_KERNEL_MISC_RECLAIMABLE (fs/proc/meminfo.c; a node's in
    drivers/base/node.c the same two of that node). The second counter came with the line in 4.20 ("mm, proc: add
    KReclaimable to /proc/meminfo") for ION's page pools, its one user in the tree; ION left the tree in 5.11
    ("staging: ion: remove from the tree"), and what still adds to it are SoC GPU drivers outside the tree
    (Qualcomm's kgsl, Arm's Mali kbase, Tegra's nvmap), none of which the modelled hosts load: on their 6.8 kernel it
    stays 0 (``nr_kernel_misc_reclaimable 0`` in /proc/vmstat), so every meminfo shows ``KReclaimable`` equal to
    ``SReclaimable``."""
    for _, _, root in rendered(profile):
        for f in [root / "proc/meminfo", *sorted((root / NODES).glob("node[0-9]*/meminfo"))]:
            values = _meminfo_kb(f)
            assert values["KReclaimable"] == values["SReclaimable"], (profile, f.parent.name, values["KReclaimable"])


def test_x86_default_huge_page_size_is_2_mib(rendered: Rendered) -> None:
    """Documentation/admin-guide/mm/hugetlbpage.rst: ``Hugepagesize`` is the default huge page size, one of the
    pools under ``hugepages/``; on x86-64 the default (no ``default_hugepagesz=``) is the PMD size, 2048 kB."""
    for profile in ("dgx-h100", "t4-cloud"):
        for _, node, root in rendered(profile):
            assert node.cpu.arch == "amd64"
            size = _meminfo_kb(root / "proc/meminfo")["Hugepagesize"]
            assert size == 2048, (profile, size)
            pools = {d.name for d in (root / "sys/kernel/mm/hugepages").iterdir()} \
                if (root / "sys/kernel/mm/hugepages").is_dir() else \
                {d.name for d in (root / NODES / "node0/hugepages").iterdir()}
            assert f"hugepages-{size}kB" in pools, (profile, pools)



def test_arm64_64k_nodes_have_the_64k_granules_huge_pages(rendered: Rendered) -> None:
    """Documentation/arch/arm64/hugetlbpage.rst, its table of huge page sizes per granule: with 64K pages (the Grace
    nodes' kernel, ``getconf PAGESIZE`` 65536) they are 2M (contiguous PTEs), 512M (PMD) and 16G (contiguous PMDs),
    and no 1G; hugetlbpage.rst makes the PMD size the default, so meminfo's ``Hugepagesize`` is 524288 kB there."""
    for profile in ("gh200", "gb200-nvl72"):
        (_, node, root), *_ = rendered(profile)
        assert node.cpu.arch == "arm64"
        assert _meminfo_kb(root / "proc/meminfo")["Hugepagesize"] == 524288, profile
        for n in sorted((root / NODES).glob("node[0-9]*")):
            names = {d.name for d in (n / "hugepages").iterdir()}
            assert names == {"hugepages-2048kB", "hugepages-524288kB", "hugepages-16777216kB"}, (profile, n, names)

def test_cpu_cache_ids_are_unique_per_level_and_unsigned(rendered: Rendered) -> None:
    """Documentation/ABI/testing/sysfs-devices-system-cpu (cache/indexN/id): the id identifies the cache among
    the caches of its level and type, so CPUs with the same id share one cache (the same ``shared_cpu_list``) and
    caches with different CPU sets have different ids; it is an unsigned number (``%u``)."""
    for profile in ("dgx-h100", "gh200", "riscv-nvlink-fusion"):
        for _, _, root in rendered(profile):
            caches: dict[tuple[str, str, str], str] = {}
            for index in sorted((root / "sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*")):
                if not (index / "id").exists():
                    continue
                level, kind = (index / "level").read_text().strip(), (index / "type").read_text().strip()
                ident = (index / "id").read_text().strip()
                assert ident.isdigit(), (profile, index, ident)
                shared = (index / "shared_cpu_list").read_text().strip()
                assert caches.setdefault((level, kind, ident), shared) == shared, (profile, index, ident)
            assert caches, profile
            by_cpus: dict[tuple[str, str, str], str] = {}
            for (level, kind, ident), shared in caches.items():
                assert by_cpus.setdefault((level, kind, shared), ident) == ident, (profile, level, kind, shared)


def test_cxl_decoder_capabilities_are_flags_and_cover_their_regions(rendered: Rendered) -> None:
    """drivers/cxl/core/port.c prints a root decoder's ``cap_type2``, ``cap_type3``, ``cap_ram`` and ``cap_pmem`` as
    ``(flags & flag) ? "1" : "0"`` (the CFMWS restrictions cxl_acpi read); a region is created under a root decoder
    whose window allows its mode (``ram`` regions under ``cap_ram`` windows, ``pmem`` under ``cap_pmem``) and
    type-3 memory expanders (``target_type`` ``expander``) only under ``cap_type3`` windows. A root decoder shows
    ``create_ram_region``/``create_pmem_region`` only when it can create such a region (port.c,
    cxl_root_decoder_visible: can_create_ram/can_create_pmem test the same flags), read-write (region.c:
    DEVICE_ATTR_RW, 0644: reading names the next region, writing creates it); ``delete_region`` is write-only
    (DEVICE_ATTR_WO, 0200). cxl-pool has both kinds of window."""
    for _, _, root in rendered("cxl-pool"):
        devices = root / CXL_DEVICES
        roots = sorted(devices.glob("decoder0.*"))
        assert roots
        kinds = set()
        for d in roots:
            caps = {flag: (d / f"cap_{flag}").read_text().strip() for flag in ("type2", "type3", "ram", "pmem")}
            assert set(caps.values()) <= {"0", "1"}, (d.name, caps)
            for mode in ("ram", "pmem"):
                can = caps[mode] == "1" and caps["type3"] == "1"
                assert (d / f"create_{mode}_region").exists() == can, (d.name, mode, caps)
                if can:
                    kinds.add(mode)
                    assert stat.S_IMODE(os.stat(d / f"create_{mode}_region").st_mode) == 0o644, (d.name, mode)
            assert stat.S_IMODE(os.stat(d / "delete_region").st_mode) == 0o200, d.name
        assert kinds == {"ram", "pmem"}, kinds
        regions = sorted(devices.glob("region[0-9]*"))
        assert regions
        for region in regions:
            decoder = region.resolve().parent
            assert decoder.name.startswith("decoder0."), (region.name, decoder)
            mode = (region / "mode").read_text().strip()
            assert (decoder / f"cap_{mode}").read_text().strip() == "1", (region.name, decoder.name, mode)
            if (decoder / "target_type").read_text().strip() == "expander":
                assert (decoder / "cap_type3").read_text().strip() == "1", (region.name, decoder.name)


def test_cxl_endpoint_decoder_allocation_attributes_are_writable(rendered: Rendered) -> None:
    """drivers/cxl/core/port.c: an endpoint decoder's ``mode`` and ``dpa_size`` are DEVICE_ATTR_RW (0644):
    ``cxl create-region`` writes them to allocate device memory, on decoders in use and on idle ones alike. An idle
    decoder (mode ``none``) has no device memory allocated, so its ``dpa_size`` is 0."""
    for _, _, root in rendered("cxl-pool"):
        endpoint_decoders = [d for d in sorted((root / CXL_DEVICES).glob("decoder*.*"))
                             if d.resolve().parent.name.startswith("endpoint")]
        assert len(endpoint_decoders) >= 8
        idle = [d for d in endpoint_decoders if (d / "mode").read_text().strip() == "none"]
        assert idle
        for d in idle:  # no device memory allocated: dpa_size_show prints resource_size(NULL), 0
            assert int((d / "dpa_size").read_text(), 16) == 0, d.name
        for d in endpoint_decoders:
            for name in ("mode", "dpa_size"):
                assert stat.S_IMODE(os.stat(d / name).st_mode) == 0o644, (d.name, name)


def test_every_nvidia_capability_has_its_own_device_minor(rendered: Rendered) -> None:
    """``/proc/driver/nvidia-caps/mig-minors`` maps each MIG capability to the minor of its
    ``/dev/nvidia-caps/nvidia-capN`` node (MIG user guide, "Device Nodes and Capabilities"): a minor names one
    character device, so no two capabilities share one, and a minor is below 2^20 (MINORBITS,
    include/linux/kdev_t.h). The table covers every GPU and instance slot, present or not."""
    (_, _, root), *_ = rendered("dgx-h100")
    pairs = [line.split() for line in (root / "proc/driver/nvidia-caps/mig-minors").read_text().splitlines()]
    minors = [int(minor) for _, minor in pairs]
    assert len(set(minors)) == len(minors)
    assert all(0 <= m < 1 << 20 for m in minors)
    names = {name for name, _ in pairs}
    assert {"config", "monitor", "gpu0/gi0/access", "gpu0/gi0/ci0/access", "gpu0/gi1/access"} <= names


def test_every_cxl_host_bridge_names_its_pci_root_as_physical_node(rendered: Rendered) -> None:
    """Documentation/ABI/testing/sysfs-bus-acpi (physical_node): an ACPI device bound to a physical device links
    it (drivers/acpi/glue.c). A CXL host bridge (ACPI0016, a ``dportN`` of ``root0``) is bound to its PCI root
    bridge, ``pciDDDD:BB``, which ``cxl list -B`` prints as the bridge's host."""
    for _, _, root in rendered("cxl-pool"):
        dports = sorted((root / CXL_DEVICES / "root0").glob("dport*"))
        assert dports
        for dport in dports:
            bridge = dport.resolve()
            assert bridge.name.startswith("ACPI0016:"), (dport.name, bridge)
            physical = (bridge / "physical_node").resolve()
            assert physical.is_dir() and physical.name.startswith("pci"), (bridge.name, physical)
            assert any(child.name.startswith(physical.name[3:]) for child in physical.iterdir()), physical


CXL_TEST_HOST_BRIDGES = {"cxl_host_bridge.0": "physical_node", "cxl_host_bridge.1": "physical_node",
                         "cxl_host_bridge.2": "physical_node", "cxl_host_bridge.3": "firmware_node"}
"""The self-link cxl_test gives each mock host bridge (tools/testing/cxl/test/cxl.c): cxl_test_init and
cxl_single_topo_init link a virtual host's bridge to itself as ``physical_node`` (sysfs_create_link(&pdev->dev.kobj,
&pdev->dev.kobj, "physical_node")), cxl_rch_topo_init the restricted host's (RCH, cxl_host_bridge.3) as
``firmware_node``."""


def test_cxl_test_host_bridges_link_to_themselves_as_the_mock_does(rendered: Rendered) -> None:
    """Each of cxl-test's mock host bridges has the one self-link of CXL_TEST_HOST_BRIDGES and not the other."""
    (_, _, root), *_ = rendered("cxl-test")
    platform = root / "sys/devices/platform"
    for bridge, link in CXL_TEST_HOST_BRIDGES.items():
        other = "firmware_node" if link == "physical_node" else "physical_node"
        assert (platform / bridge / link).resolve() == (platform / bridge).resolve(), (bridge, link)
        assert not (platform / bridge / other).is_symlink(), (bridge, other)


def test_a_decoders_locked_is_a_flag_and_cxl_tests_windows_are_not_locked(rendered: Rendered) -> None:
    """``locked`` (drivers/cxl/core/port.c) shows whether the decoder has CXL_DECODER_F_LOCK: 0 or 1. cxl_acpi sets
    it on a root decoder only for a window whose CFMWS restrictions have ACPI_CEDT_CFMWS_RESTRICT_FIXED
    (drivers/cxl/acpi.c, cfmws_to_decoder_flags), and none of cxl_test's mock windows has (tools/testing/cxl/test/
    cxl.c, mock_cedt: cfmws0-8 are HOSTONLYMEM (TYPE3) with VOLATILE or PMEM only), so every root decoder of
    cxl-test shows 0."""
    for profile in ("cxl-pool", "cxl-test"):
        for _, _, root in rendered(profile):
            decoders = sorted((root / CXL_DEVICES).glob("decoder*.*"))
            assert decoders, profile
            for d in decoders:
                assert _read(d / "locked") in ("0", "1"), (profile, d.name)
            if profile == "cxl-test":
                windows = [d for d in decoders if d.name.startswith("decoder0.")]
                assert windows and all(_read(d / "locked") == "0" for d in windows), profile


def test_a_bridges_memory_window_in_resource_is_the_one_its_config_space_decodes(rendered: Rendered) -> None:
    """PCI-to-PCI Bridge Architecture Specification 1.2, 3.2.5.8: the Memory Base/Limit registers (config 0x20,
    0x22) hold address bits 31:20 of the non-prefetchable window, the limit's low 20 bits all ones. The kernel
    reads the window from them and ``resource`` prints it as the bridge's line 14 (PCI_BRIDGE_RESOURCES + 1,
    drivers/pci/pci-sysfs.c resource_show); lspci -v prints the same range as "Memory behind bridge"."""
    (_, _, root), *_ = rendered("dgx-h100")
    bridges = 0
    for d in sorted((root / "sys/bus/pci/devices").iterdir()):
        config = (d / "config").read_bytes()
        if config[0x0E] & 0x7F != 1:  # header type 1: a bridge
            continue
        base, limit = int.from_bytes(config[0x20:0x22], "little"), int.from_bytes(config[0x22:0x24], "little")
        if (limit & 0xFFF0) < (base & 0xFFF0):
            continue  # the window is closed
        line = (d / "resource").read_text().splitlines()[14].split()
        start, end = int(line[0], 16), int(line[1], 16)
        assert (start, end) == ((base & 0xFFF0) << 16, ((limit & 0xFFF0) << 16) | 0xFFFFF), d.name
        bridges += 1
    assert bridges >= 4


CPUS = "sys/devices/system/cpu"


def _cpulist(text: str) -> set[int]:
    """A kernel cpulist (``0-55,112-167``) as a set (lib/bitmap-str.c, bitmap_parselist)."""
    out: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _cpumask(text: str) -> set[int]:
    """A kernel cpumask (``00000000,00010000,00000001``): 32-bit hex words, most significant first (%*pb)."""
    value = int(text.strip().replace(",", ""), 16)
    return {bit for bit in range(value.bit_length()) if value >> bit & 1}


def _read(path: Path) -> str:
    return path.read_text().strip()


@pytest.mark.parametrize("profile", ("dgx-h100", "gh200", "riscv-nvlink-fusion"))
def test_cpu_topology_files_relate_as_the_abi_defines(rendered: Rendered, profile: str) -> None:
    """Documentation/ABI/stable/sysfs-devices-system-cpu and admin-guide/cputopology.rst: ``online``, ``possible``
    and ``present`` are cpulists (all CPUs of a machine without hotplugged-out CPUs, ``offline`` then empty) and
    ``kernel_max`` is the highest CPU index the kernel allows; each ``topology/X`` mask lists the CPUs of
    ``X_list``; ``thread_siblings`` and ``core_siblings`` are the deprecated names of ``core_cpus`` and
    ``package_cpus`` (same masks); a CPU is in its own core, the core in its cluster and die, the die in its
    package, and the CPUs of one package (core) share ``physical_package_id`` (and ``core_id``).
    ``smt/active`` is 1 when SMT siblings run and ``smt/control`` ``on``, or ``notsupported`` on a CPU without SMT
    (sysfs-devices-system-cpu, "/sys/devices/system/cpu/smt")."""
    for _, _, root in rendered(profile):
        cpus = root / CPUS
        n = len(list(cpus.glob("cpu[0-9]*")))
        everything = set(range(n))
        for name in ("online", "possible", "present"):
            assert _cpulist(_read(cpus / name)) == everything, (profile, name)
        assert _read(cpus / "offline") == ""
        assert int(_read(cpus / "kernel_max")) >= n - 1
        package_id = {c: _read(cpus / f"cpu{c}/topology/physical_package_id") for c in range(n)}
        core_id = {c: _read(cpus / f"cpu{c}/topology/core_id") for c in range(n)}
        machine = dict(line.split(": ", 1) for line in (root / "proc/hwloc-nofile-info").read_text().splitlines())
        # die_id and die_cpus exist only where the architecture defines topology_die_id and topology_die_cpumask
        # (include/linux/topology.h, TOPOLOGY_DIE_SYSFS; admin-guide/cputopology.rst): x86, not arm64 or riscv
        dies = machine["Architecture"] == "x86_64"
        smt = False
        for c in range(n):
            topo = cpus / f"cpu{c}/topology"
            sets = {}
            for name in ("core_cpus", "thread_siblings", "cluster_cpus", "die_cpus", "package_cpus",
                         "core_siblings"):
                if name == "die_cpus" and not dies:
                    assert not (topo / name).exists() and not (topo / "die_id").exists(), (profile, c)
                    continue
                sets[name] = _cpulist(_read(topo / f"{name}_list"))
                assert _cpumask(_read(topo / name)) == sets[name], (profile, c, name)
            assert sets["thread_siblings"] == sets["core_cpus"] and sets["core_siblings"] == sets["package_cpus"]
            assert c in sets["core_cpus"] <= sets["cluster_cpus"] <= sets["package_cpus"], (profile, c, sets)
            if dies:  # these CPUs have no CPUID die level: one die per package, die 0 (x86 detect_extended_topology)
                assert sets["die_cpus"] == sets["package_cpus"] and _read(topo / "die_id") == "0", (profile, c)
            assert {package_id[o] for o in sets["package_cpus"]} == {package_id[c]}, (profile, c)
            assert {core_id[o] for o in sets["core_cpus"]} == {core_id[c]}, (profile, c)
            smt = smt or len(sets["core_cpus"]) > 1
        assert _read(cpus / "smt/active") == ("1" if smt else "0"), profile
        assert _read(cpus / "smt/control") == ("on" if smt else "notsupported"), profile


def test_x86_cpu0_cannot_be_taken_offline(rendered: Rendered) -> None:
    """On x86-64 the boot CPU is not hotpluggable (arch/x86/kernel/topology.c, arch_cpu_is_hotpluggable: cpu > 0),
    so the driver core shows no ``online`` attribute for cpu0 (drivers/base/core.c shows it only for devices that
    can go offline); every other CPU has one, writable, reading 1 while online (sysfs-devices-system-cpu)."""
    (_, _, root), *_ = rendered("dgx-h100")
    cpus = root / CPUS
    assert not (cpus / "cpu0/online").exists()
    for d in sorted(cpus.glob("cpu[1-9]*")):
        assert _read(d / "online") == "1", d.name
        assert stat.S_IMODE(os.stat(d / "online").st_mode) == 0o644, d.name


@pytest.mark.parametrize("profile", ("gh200", "riscv-nvlink-fusion"))
def test_arm64_and_riscv_can_take_the_boot_cpu_offline(rendered: Rendered, profile: str) -> None:
    """arm64 marks every CPU that PSCI can turn off hotpluggable (arch/arm64/kernel/setup.c: cpu_can_disable, false
    only where a uniprocessor trusted OS is resident) and RISC-V every CPU SBI HSM can stop (arch/riscv/kernel/
    setup.c: cpu_has_hotplug), the boot CPU included; drivers/base/cpu.c then leaves offline_disabled clear, so
    cpu0 has the driver core's writable ``online`` attribute (drivers/base/core.c), reading 1, like every CPU."""
    (_, _, root), *_ = rendered(profile)
    for d in sorted((root / CPUS).glob("cpu[0-9]*")):
        assert _read(d / "online") == "1", (profile, d.name)
        assert stat.S_IMODE(os.stat(d / "online").st_mode) == 0o644, (profile, d.name)


NR_CPUS = {"x86_64": 8192, "aarch64": 512, "riscv64": 512}
"""CONFIG_NR_CPUS of the kernel the fake runs (``kernel_max`` is NR_CPUS - 1, sysfs-devices-system-cpu): Ubuntu
24.04's 6.8 kernel, debian.master/config/annotations: ``CONFIG_NR_CPUS policy<{'amd64': '8192', 'arm64': '512',
..., 'riscv64': '32'}>`` (the arm64 -64k flavour inherits 512). Ubuntu's riscv64 32 cannot run the 64-core RISC-V
host the profile models; its kernel is built with 512, the ceiling of arch/riscv/Kconfig (``range 2 512 if
!RISCV_SBI_V01``), so no RISC-V kernel can show more than 511."""


@pytest.mark.parametrize("profile", ("dgx-h100", "gh200", "riscv-nvlink-fusion"))
def test_kernel_max_is_the_kernels_nr_cpus_less_one(rendered: Rendered, profile: str) -> None:
    for _, _, root in rendered(profile):
        info = dict(line.split(": ", 1) for line in (root / "proc/hwloc-nofile-info").read_text().splitlines())
        kernel_max = int(_read(root / CPUS / "kernel_max"))
        assert kernel_max == NR_CPUS[info["Architecture"]] - 1, (profile, kernel_max)
        assert max(_cpulist(_read(root / CPUS / "possible"))) <= kernel_max, profile


@pytest.mark.parametrize("profile", ("dgx-h100", "gh200", "riscv-nvlink-fusion"))
def test_every_caches_geometry_multiplies_out_to_its_size(rendered: Rendered, profile: str) -> None:
    """drivers/base/cacheinfo.c: ``size`` (in K) is ``coherency_line_size * number_of_sets *
    ways_of_associativity`` (the kernel derives the size so on every architecture that reports geometry:
    x86 CPUID leaf 4, arm64/riscv cache nodes' ``*-size``/``*-sets``), and ``shared_cpu_map`` lists the CPUs of
    ``shared_cpu_list``; a CPU is among the CPUs that share its own caches."""
    for _, _, root in rendered(profile):
        indices = sorted((root / CPUS).glob("cpu[0-9]*/cache/index[0-9]*"))
        assert indices
        for index in indices:
            size = _read(index / "size")
            assert size.endswith("K"), (index, size)
            line, sets, ways = (int(_read(index / name)) for name in
                                ("coherency_line_size", "number_of_sets", "ways_of_associativity"))
            assert line * sets * ways == int(size[:-1]) * 1024, (profile, index, line, sets, ways, size)
            shared = _cpulist(_read(index / "shared_cpu_list"))
            assert _cpumask(_read(index / "shared_cpu_map")) == shared, (profile, index)
            assert int(index.parent.parent.name[3:]) in shared, (profile, index)


def _cpuinfo(root: Path) -> list[dict[str, str]]:
    blocks = []
    for block in (root / "proc/cpuinfo").read_text().strip().split("\n\n"):
        blocks.append({k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in block.splitlines())})
    return blocks


def _apic_prefix_is_the_package(apics: dict[int, int], packages: dict[int, int], width: int) -> bool:
    """Whether the APIC ids' bits above ``width`` tell the CPUs' packages apart and are the same within each."""
    prefixes: dict[int, set[int]] = {}
    for cpu, apic in apics.items():
        prefixes.setdefault(packages[cpu], set()).add(apic >> width)
    firsts = [next(iter(p)) for p in prefixes.values()]
    return all(len(p) == 1 for p in prefixes.values()) and len(set(firsts)) == len(firsts)


def test_x86_cpuinfo_agrees_with_the_topology_in_sysfs(rendered: Rendered) -> None:
    """arch/x86/kernel/cpu/proc.c (show_cpuinfo, show_cpuinfo_core): ``physical id`` and ``core id`` are the
    package and core ids sysfs shows, ``siblings`` the CPUs of the package (cpumask_weight of its core mask),
    ``cpu cores`` its cores, ``initial apicid`` the APIC id, ``cache size`` the last level cache in KB, and
    ``bogomips`` loops_per_jiffy scaled to twice the TSC's MHz (the delay loop runs on the constant TSC, which
    ``cpu MHz`` shows). SMT siblings differ only in the APIC id's lowest (SMT) bits and every CPU has its own
    (Intel SDM vol. 3A, 9.9.1 hierarchical mapping of APIC ids), whose highest bits are the package's: the
    CPUs of one package share them, no two packages do. An APIC id is unsigned (CPUID leaf 0x0B/0x1F EDX, the
    32-bit x2APIC id; ``u32 apicid`` of arch/x86's struct cpuinfo_topology). ``address sizes`` ends with the
    linear address width of CPUID 0x80000008 (get_cpu_address_sizes): 57 bits where the CPU has 5-level paging
    (``la57``, SDM vol. 3A 4.5), 48 where it has not."""
    for profile in ("dgx-h100", "t4-cloud"):
        (_, _, root), *_ = rendered(profile)
        cpus = root / CPUS
        blocks = _cpuinfo(root)
        apics = set()
        for b in blocks:
            cpu = cpus / f"cpu{b['processor']}"
            topo = cpu / "topology"
            package = _cpulist(_read(topo / "package_cpus_list"))
            assert b["physical id"] == _read(topo / "physical_package_id"), (profile, b["processor"])
            assert b["core id"] == _read(topo / "core_id"), (profile, b["processor"])
            assert int(b["siblings"]) == len(package), (profile, b["processor"])
            cores = {_read(cpus / f"cpu{c}/topology/core_id") for c in package}
            assert int(b["cpu cores"]) == len(cores), (profile, b["processor"])
            assert b["initial apicid"] == b["apicid"] and b["apicid"] not in apics, (profile, b["processor"])
            assert b["apicid"].isdigit() and int(b["apicid"]) < 2**32, (profile, b["processor"], b["apicid"])
            apics.add(b["apicid"])
            assert b["cache size"] == f"{_read(cpu / 'cache/index3/size')[:-1]} KB", (profile, b["processor"])
            assert float(b["bogomips"]) == 2 * float(b["cpu MHz"]), (profile, b["processor"])
            virtual = 57 if "la57" in b["flags"].split() else 48
            assert b["address sizes"].endswith(f", {virtual} bits virtual"), (profile, b["address sizes"])
        by_cpu = {int(b["processor"]): int(b["apicid"]) for b in blocks}
        for c, apic in by_cpu.items():
            core = _cpulist(_read(cpus / f"cpu{c}/topology/core_cpus_list"))
            width = (len(core) - 1).bit_length()
            assert {by_cpu[s] >> width for s in core} == {apic >> width}, (profile, c)
            assert len({by_cpu[s] for s in core}) == len(core), (profile, c)
        packages = {int(b["processor"]): int(b["physical id"]) for b in blocks}
        assert any(_apic_prefix_is_the_package(by_cpu, packages, width) for width in range(32)), profile


def test_an_idle_hdm_decoder_shows_its_registers_reset_values(rendered: Rendered) -> None:
    """A switch or endpoint HDM decoder nothing committed reads its registers' reset values (CXL 2.0 8.2.5.12:
    Base and Size 0, Control's IW and IG 0). drivers/cxl/core/hdm.c init_hdm_decoder turns them into the sysfs
    values port.c prints: ``start`` 0x0 and ``size`` 0x0 (the empty HPA range), ``interleave_ways`` 1
    (eiw_to_ways(0)) and ``interleave_granularity`` 256 (eig_to_granularity(0): 256 << 0); a type-3 device's
    decoders are ``expander``s (CXL_DECODER_HOSTONLYMEM) and hold no region."""
    assert sum(len(_idle_decoders(root)) for _, _, root in rendered("cxl-pool")) >= 8


def _idle_decoders(root: Path) -> list[str]:
    """Every switch and endpoint decoder of ``root`` that holds no region, each checked to show the HDM decoder
    registers' reset values (see above); their names."""
    idle = []
    for d in sorted((root / CXL_DEVICES).glob("decoder*")):
        owner = d.resolve().parent.name
        if owner == "root0":
            continue  # root decoders are the firmware's windows (CFMWS), never idle
        assert owner.startswith(("port", "endpoint")), (d.name, owner)
        assert _read(d / "target_type") == "expander", d.name
        if _read(d / "region"):
            continue
        values = tuple(_read(d / name) for name in ("start", "size", "interleave_ways", "interleave_granularity"))
        assert values == ("0x0", "0x0", "1", "256"), (d.name, owner, values)
        idle.append(d.name)
    return idle


def test_a_pooled_switchs_decoders_nothing_committed_show_reset_values(fast_tmp: Path) -> None:
    """The virtual switch of a multi-logical device (CXL 2.0 7.2: a VCS binds the LDs to their hosts) is a switch
    port like any other: its HDM decoders (CXL 2.0 8.2.5.12) that no region of this host committed read the
    registers' reset values, shown as above (``start``/``size`` 0x0, 1 way, 256 B). In cxl-pool every decoder of
    the pool's port holds one of the host's four regions; here the host holds one logical device of a pool of
    four, so three of its pool port's decoders are idle."""
    system = _pool_behind_a_switch(True)
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    root = fast_tmp / node.name / ROOT_DIR
    devices = root / CXL_DEVICES
    pooled = [e for e in sorted(devices.glob("endpoint*")) if _is_dynamic_capacity((e / "uport").resolve())]
    pool_ports = {e.resolve().parent for e in pooled}  # the ports a pooled device's endpoint hangs off
    assert len(pool_ports) == 2, sorted(p.name for p in pool_ports)  # pool0's and pool1's virtual switches
    idle = set(_idle_decoders(root))
    on_pool_ports = {d.name for p in pool_ports for d in p.glob("decoder*")} & idle
    assert len(on_pool_ports) == 3, sorted(on_pool_ports)


def _is_dynamic_capacity(memdev: Path) -> bool:
    """A pooled logical device shows no static capacity (its memory is dynamic_ram_a; CXL 3.1 9.13.3)."""
    return int(_read(memdev / "ram/size"), 16) == 0 and int(_read(memdev / "pmem/size"), 16) == 0


def _char_majors(root: Path) -> dict[int, set[str]]:
    """``/proc/devices``' character majors: major -> the names registered on it."""
    text = (root / "proc/devices").read_text()
    chars = text.split("Character devices:\n", 1)[1].split("\n\n", 1)[0]
    out: dict[int, set[str]] = {}
    for line in chars.splitlines():
        major, name = line.split()
        out.setdefault(int(major), set()).add(name)
    return out


@pytest.mark.parametrize("profile", ("cxl-pool", "cxl-test"))
def test_the_cxl_and_dax_cores_each_have_a_major_of_their_own(rendered: Rendered, profile: str) -> None:
    """Both register with alloc_chrdev_region (drivers/cxl/core/memdev.c, cxl_memdev_init: ``cxl``;
    drivers/dax/super.c, dax_core_init: ``dax``, MINORMASK + 1 minors, the whole major), and a dynamic major is one
    no region holds yet (fs/char_dev.c, find_dynamic_major), so ``/proc/devices`` lists each alone on its major."""
    for _, _, root in rendered(profile):
        majors = _char_majors(root)
        for name in ("cxl", "dax"):
            owners = [names for names in majors.values() if name in names]
            assert owners == [{name}], (profile, name, owners)


@pytest.mark.parametrize("profile", ("dgx-h100", "cxl-pool", "cxl-test", "gb200-nvl72"))
def test_every_character_device_has_a_registered_major(rendered: Rendered, profile: str) -> None:
    """A character device node opens only if a driver registered its major (fs/char_dev.c, chrdev_open looks the
    dev_t up among the registered regions), and ``/proc/devices`` lists every registered region (chrdev_show): so
    each node under ``/dev`` has its major there. The names are the drivers' registrations: ``cxl`` (drivers/cxl/
    core/memdev.c, cxl_memdev_init) and ``dax`` (drivers/dax/super.c, dax_core_init) on a CXL host whatever is
    bound, ``infiniband_mad`` and ``infiniband_verbs`` (drivers/infiniband/core/user_mad.c and uverbs_main.c) where
    RDMA devices are. A device's ``dev`` attribute and its ``/sys/dev/char/MAJOR:MINOR`` link name the same
    numbers as its node (drivers/base/core.c: dev_show, device_create_sys_dev_entry)."""
    names = {"mem": "cxl", "dax": "dax", "uverbs": "infiniband_verbs", "umad": "infiniband_mad",
             "issm": "infiniband_mad"}
    for _, _, root in rendered(profile):
        majors = _char_majors(root)
        nodes = 0
        for dirpath, _, files in os.walk(root / "dev"):
            for name in files:
                st = os.lstat(Path(dirpath) / name)
                if not stat.S_ISCHR(st.st_mode):
                    continue
                nodes += 1
                major = os.major(st.st_rdev)
                assert major in majors, (profile, name, major, sorted(majors))
                kind = name.rstrip("0123456789.")
                if kind in names and (kind != "mem" or Path(dirpath).name == "cxl"):
                    assert names[kind] in majors[major], (profile, name, majors[major])
        assert nodes >= 5, profile
        for link in sorted((root / "sys/dev/char").glob("*:*")):
            dev = link / "dev"
            if dev.exists():
                assert _read(dev) == link.name, (profile, link)


def test_a_dax_devices_mappings_cover_its_size_inside_its_region(rendered: Rendered) -> None:
    """drivers/dax/bus.c and Documentation/ABI/testing/sysfs-bus-dax: each ``mappingN`` of a DAX device is one
    physical range, ``start`` to ``end`` inclusive (range.end), at ``page_offset`` into the device (0 for the first),
    and the mappings add up to the device's ``size``; ``resource`` is where the first starts. The region's
    ``available_size`` is its ``size`` less what its devices hold (dax_region_avail_size). Ranges keep the
    device's ``align`` (a power of two, at least a page; dev_dax_validate_align), which starts as the region's.
    ``size`` and ``align`` are DEVICE_ATTR_RW (0644); the region's ``create`` is RW and ``delete`` WO (0200)."""
    devices = 0
    for _, _, root in rendered("cxl-pool"):
        regions = sorted({d.resolve().parent for d in (root / "sys/bus/dax/devices").glob("dax*")})
        for region in regions:
            attrs = region / "dax_region"
            held = 0
            for dev in sorted(region.glob("dax*.*")):
                devices += 1
                size, align = int(_read(dev / "size")), int(_read(dev / "align"))
                assert align >= 4096 and align & (align - 1) == 0, (dev.name, align)
                assert align == int(_read(attrs / "align")), dev.name
                mappings = sorted(dev.glob("mapping*"), key=lambda m: int(m.name[7:]))
                assert mappings and int(_read(mappings[0] / "start"), 16) == int(_read(dev / "resource"), 16)
                offset = 0
                for m in mappings:
                    start, end = int(_read(m / "start"), 16), int(_read(m / "end"), 16)
                    assert int(_read(m / "page_offset"), 16) == offset, (dev.name, m.name)
                    assert start % align == 0 and (end + 1 - start) % align == 0, (dev.name, m.name)
                    offset += end + 1 - start
                assert offset == size, (dev.name, offset, size)
                held += size
                for name in ("size", "align"):
                    assert stat.S_IMODE(os.stat(dev / name).st_mode) == 0o644, (dev.name, name)
            assert int(_read(attrs / "available_size")) == int(_read(attrs / "size")) - held, region.name
            assert stat.S_IMODE(os.stat(attrs / "create").st_mode) == 0o644, region.name
            assert stat.S_IMODE(os.stat(attrs / "delete").st_mode) == 0o200, region.name
    assert devices >= 2


BUS_WRITE_ONLY = ("bind", "unbind")
"""drivers/base/bus.c: a driver's ``bind``/``unbind`` are DRIVER_ATTR_IGNORE_LOCKDEP(..., 0200), the bus's
``drivers_probe`` BUS_ATTR_WO and ``drivers_autoprobe`` BUS_ATTR_RW, 1 unless userspace turned probing off."""


def test_the_cxl_and_dax_buses_driver_files_are_the_driver_cores(rendered: Rendered) -> None:
    """What ``cxl``/``daxctl`` and udev rules write to re-bind devices: every driver of the cxl, dax and platform
    buses has write-only ``bind`` and ``unbind``; the dax drivers add ``new_id``/``remove_id`` (drivers/dax/bus.c,
    DRIVER_ATTR_WO); the buses have write-only ``drivers_probe`` and an ``drivers_autoprobe`` reading 1, and the
    cxl bus a write-only ``flush`` (sysfs-bus-cxl: "/sys/bus/cxl/flush"). Each loaded module's ``initstate`` reads
    ``live`` (kernel/module/sysfs.c)."""
    for profile in ("cxl-pool", "cxl-test"):
        (_, _, root), *_ = rendered(profile)
        cxl, dax = root / "sys/bus/cxl", root / "sys/bus/dax"
        drivers = [*sorted((cxl / "drivers").iterdir()), *sorted((dax / "drivers").iterdir()),
                   root / "sys/bus/platform/drivers/cxl_acpi"]
        assert len(drivers) >= 8, profile
        for drv in drivers:
            names = BUS_WRITE_ONLY + (("new_id", "remove_id") if drv.parent.parent == dax else ())
            for name in names:
                assert stat.S_IMODE(os.stat(drv / name).st_mode) == 0o200, (profile, drv.name, name)
        for path in (cxl / "flush", cxl / "drivers_probe"):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o200, (profile, path.name)
        assert _read(cxl / "drivers_autoprobe") == "1"
        assert stat.S_IMODE(os.stat(cxl / "drivers_autoprobe").st_mode) == 0o644
        for module in ("cxl_core", "cxl_acpi", "cxl_port", "cxl_mem", "dax", "kmem"):
            assert _read(root / f"sys/module/{module}/initstate") == "live", (profile, module)


@pytest.mark.parametrize("profile", ("dgx-h100", "gh200", "cxl-pool"))
def test_numa_node_files_relate_as_the_abi_defines(rendered: Rendered, profile: str) -> None:
    """Documentation/ABI/stable/sysfs-devices-node: ``possible``/``online`` list the nodes, ``has_cpu`` those with
    CPUs, ``has_memory`` those with memory and ``has_normal_memory`` a subset of it, ``has_generic_initiator``
    none here (no ACPI generic initiators); each node's ``cpumap`` is its ``cpulist`` as a mask, with a ``cpuN``
    link per CPU of it, and ``/sys/bus/node/devices/nodeN`` links to it. ``distance`` is the node's SLIT row, 10 to
    itself and more to others (ACPI 6.5, 5.2.17). Per-node huge page pools have a writable ``nr_hugepages`` and
    read-only ``free_hugepages``/``surplus_hugepages`` (admin-guide/mm/hugetlbpage.rst). HMAT access classes
    (admin-guide/mm/numaperf.rst): a target's ``accessN/initiators/nodeX`` and the initiator's
    ``accessN/targets/nodeY`` come in pairs, and an ``access1`` initiator has CPUs."""
    for _, _, root in rendered(profile):
        base = root / NODES
        ids = sorted(int(d.name[4:]) for d in base.glob("node[0-9]*"))
        assert _cpulist(_read(base / "possible")) == _cpulist(_read(base / "online")) == set(ids), profile
        cpus = {i: _cpulist(_read(base / f"node{i}/cpulist")) for i in ids}
        assert _cpulist(_read(base / "has_cpu")) == {i for i in ids if cpus[i]}, profile
        with_memory = _cpulist(_read(base / "has_memory"))
        assert _cpulist(_read(base / "has_normal_memory")) <= with_memory <= set(ids), profile
        assert _read(base / "has_generic_initiator") == ""
        for k, i in enumerate(ids):
            node = base / f"node{i}"
            assert _cpumask(_read(node / "cpumap")) == cpus[i], (profile, i)
            assert {int(p.name[3:]) for p in node.glob("cpu[0-9]*")} == cpus[i], (profile, i)
            assert (root / f"sys/bus/node/devices/node{i}").resolve() == node.resolve(), (profile, i)
            row = [int(x) for x in _read(node / "distance").split()]
            assert len(row) == len(ids) and row[k] == 10, (profile, i, row)
            assert all(d > 10 for j, d in enumerate(row) if j != k), (profile, i, row)
            for pool in node.glob("hugepages/hugepages-*kB"):
                for name, mode in (("nr_hugepages", 0o644), ("free_hugepages", 0o444), ("surplus_hugepages", 0o444)):
                    assert stat.S_IMODE(os.stat(pool / name).st_mode) == mode, (profile, pool, name)
            for access in ("access0", "access1"):
                for initiator in node.glob(f"{access}/initiators/node*"):
                    x = initiator.name
                    assert (base / x / access / "targets" / node.name).is_symlink(), (profile, node.name, x)
                    if access == "access1":
                        assert cpus[int(x[4:])], (profile, node.name, x)
                for target in node.glob(f"{access}/targets/node*"):
                    assert (base / target.name / access / "initiators" / node.name).is_symlink(), (profile, target)


@pytest.mark.parametrize("profile", ("dgx-h100", "gh200", "riscv-nvlink-fusion"))
def test_every_cpu_links_to_the_numa_node_that_lists_it(rendered: Rendered, profile: str) -> None:
    """Documentation/ABI/testing/sysfs-devices-system-cpu (``/sys/devices/system/cpu/cpuX/nodeY``): with CONFIG_NUMA
    each CPU has a symbolic link to its NUMA node's directory, e.g. ``cpu42/node2 -> ../../node/node2``;
    drivers/base/node.c, register_cpu_under_node, makes it together with the node's ``cpuX`` link, so every online
    CPU has exactly one ``nodeY`` link, to the node whose ``cpulist`` has it (seed 10530)."""
    for _, _, root in rendered(profile):
        base = root / NODES
        cpus = {int(d.name[4:]): _cpulist(_read(d / "cpulist")) for d in base.glob("node[0-9]*")}
        online = _cpulist(_read(root / "sys/devices/system/cpu/online"))
        assert online, profile
        for c in online:
            links = sorted((root / f"sys/devices/system/cpu/cpu{c}").glob("node[0-9]*"))
            assert [p.name for p in links] == [f"node{i}" for i in sorted(cpus) if c in cpus[i]], (profile, c)
            assert links[0].resolve() == (base / links[0].name).resolve(), (profile, c)


@pytest.mark.parametrize("profile", PROFILES)
def test_meminfo_counters_fit_inside_each_other(rendered: Rendered, profile: str) -> None:
    """fs/proc/meminfo.c and Documentation/filesystems/proc.rst: ``Cached`` is the page cache less swap cache and
    ``Buffers`` (NR_FILE_PAGES - swapcache - bufferram), so the page cache is ``Cached + Buffers + SwapCached`` (a
    node's ``FilePages``); it holds the file LRU lists (``Active(file)``, ``Inactive(file)``) and ``Shmem`` (shmem pages
    are page cache on the anon LRU), and ``Mapped`` file pages. Without swap (``SwapTotal`` 0) nothing is in the swap
    cache, ``SwapFree`` is 0 and zswap, which compresses pages on their way to swap, holds nothing
    (admin-guide/mm/zswap.rst); mlocked pages are unevictable (mm/unevictable-lru.rst); the anon LRU lists hold
    swap-backed pages: mapped anonymous pages, shmem and the swap cache. ``MemAvailable`` is at most the free pages
    plus the file LRU and reclaimable kernel memory (mm/page_alloc.c si_mem_available). ``Buffers``
    (nr_blockdev_pages: the block devices' page cache) is on the file LRU lists. What is allocated (anon pages,
    page cache, slab, stacks, page tables) fits in ``MemTotal - MemFree``, ``MemAvailable`` never exceeds ``MemTotal``,
    ``Committed_AS`` covers the anonymous and shmem pages (they are the private writable and shared memory mm/util.c
    vm_acct_memory accounts), and with no swap and no huge pages ``CommitLimit`` is ``MemTotal * overcommit_ratio /
    100`` at the default ratio 50 (mm/util.c vm_commit_limit, admin-guide/sysctl/vm.rst)."""
    for _, _, root in rendered(profile):
        machine = _meminfo_kb(root / "proc/meminfo")
        assert machine["SwapTotal"] == machine["SwapFree"] == machine["SwapCached"] == 0, profile
        assert machine["Zswap"] == machine["Zswapped"] == 0, profile
        cache = machine["Cached"] + machine["Buffers"] + machine["SwapCached"]
        caches = {"proc/meminfo": (machine, cache)}
        for f in sorted((root / NODES).glob("node[0-9]*/meminfo")):
            values = _meminfo_kb(f)
            caches[f.parent.name] = (values, values["FilePages"])
        for where, (values, page_cache) in caches.items():
            assert values["Active(file)"] + values["Inactive(file)"] + values["Shmem"] <= page_cache, (profile, where)
            assert values["Mapped"] <= page_cache, (profile, where)
            # with no swap only page-cache folios are dirty or under writeback: mm/page-writeback.c counts
            # NR_FILE_DIRTY for a folio of a file mapping (folio_account_dirtied) and NR_WRITEBACK for a folio written
            # to its backing store (__folio_start_writeback), which an anonymous or shmem folio has only in swap
            assert values["Dirty"] <= page_cache and values["Writeback"] <= page_cache, (profile, where)
            assert values["Mlocked"] <= values["Unevictable"], (profile, where)
            anon_lru = values["Active(anon)"] + values["Inactive(anon)"]
            assert anon_lru <= values["AnonPages"] + values["Shmem"] + machine["SwapCached"], (profile, where)
            # and the other way: a mapped anonymous page is on an anon LRU list, or the unevictable one once
            # mlocked (mm/mlock.c); only lazily freed (MADV_FREE) pages leave for the file list, and nothing runs
            # on the fake to free any
            assert values["AnonPages"] <= anon_lru + values["Unevictable"], (profile, where)
            # shmem pages are swap-backed too: on the anon lists, or the unevictable one when locked
            # (mm/shmem.c adds them as swap-backed folios; Documentation/mm/unevictable-lru.rst, SHM_LOCK), so the
            # anon lists and the unevictable one hold every mapped anonymous page and every shmem page
            assert values["AnonPages"] + values["Shmem"] <= anon_lru + values["Unevictable"], (profile, where)
            allocated = (values["AnonPages"] + page_cache + values["Slab"] + values["KernelStack"]
                         + values["PageTables"])
            assert allocated <= values["MemTotal"] - values["MemFree"], (profile, where, allocated)
        assert machine["MemAvailable"] <= machine["MemTotal"], profile
        # Buffers is the block devices' page cache, whose pages sit on the file LRU lists like any file page's
        assert machine["Buffers"] <= machine["Active(file)"] + machine["Inactive(file)"], profile
        reclaimable = machine["Active(file)"] + machine["Inactive(file)"] + machine["KReclaimable"]
        assert machine["MemAvailable"] <= machine["MemFree"] + reclaimable, profile
        assert machine["Committed_AS"] >= machine["AnonPages"] + machine["Shmem"], profile
        assert machine["CommitLimit"] == machine["MemTotal"] * 50 // 100, profile


def _paging_levels(root: Path) -> int:
    """Levels of the user page tables the tree's CPUs run: x86-64 4, or 5 where the CPU has LA57 (SDM vol. 3A 4.5,
    ``la57`` in /proc/cpuinfo's flags); arm64 with its 64 KiB granule and 48-bit VAs (the -64k kernel) 3, each level
    resolving PAGE_SHIFT - 3 = 13 bits of the 48 - 16 above the page offset (ARM ARM D8, Documentation/arch/arm64/
    memory.rst: "64KB pages + 3 levels (48-bit)"); RISC-V by /proc/cpuinfo's ``mmu``: Sv39, Sv48 and Sv57 walk 3, 4
    and 5 levels (the privileged specification, 4.4-4.6)."""
    arch = dict(line.split(": ", 1) for line in (root / "proc/hwloc-nofile-info").read_text().splitlines())
    if arch["Architecture"] == "x86_64":
        return 5 if "la57" in _flags_of(root) else 4
    if arch["Architecture"] == "aarch64":
        assert _page_kb(root) == 64  # the geometry above is the 64 KiB granule's
        return 3
    return {"sv39": 3, "sv48": 4, "sv57": 5}[_cpuinfo(root)[0]["mmu"]]


@pytest.mark.parametrize("profile", ("dgx-h100", "t4-cloud", "gh200", "riscv-nvlink-fusion", "cxl-pool"))
def test_page_tables_are_what_the_mapped_pages_need_in_the_paging_geometry(rendered: Rendered, profile: str) -> None:
    """``PageTables`` (NR_PAGETABLE) counts the pages of user page tables. Every mapped user page (``AnonPages``
    plus the file pages of ``Mapped``; with no transparent huge page, ``AnonHugePages`` and ``FilePmdMapped`` 0,
    each is mapped by a base-page entry) needs an entry in a leaf table, and a table is one page of 8-byte entries
    on all three architectures (x86-64 and RISC-V: 512 with 4 KiB pages; arm64: 8192 with 64 KiB pages), each
    table in turn an entry of the level above. 6.8 counts the PTE, PMD and PUD levels (include/linux/mm.h's
    pagetable_pte_ctor, pagetable_pmd_ctor and pagetable_pud_ctor add NR_PAGETABLE), not the top level, which
    comes with the mm (pgd_alloc), nor x86's and RISC-V's P4D (p4d_alloc_one: get_zeroed_page). So a node's tables
    are at least the dense tree's: ceil(n / entries) leaves, ceil of that / entries above, ..., over the counted
    levels below the top. The fake maps each node's pages as that one dense range (a machine at rest with one
    address space: no sharing, no sparse mappings), so its figure is exactly that minimum."""
    for _, _, root in rendered(profile):
        page_kb = _page_kb(root)
        entries = page_kb * 1024 // 8
        counted = min(_paging_levels(root) - 1, 3)
        machine = 0
        for f in sorted((root / NODES).glob("node[0-9]*/meminfo")):
            values = _meminfo_kb(f)
            assert values["AnonHugePages"] == values["FilePmdMapped"] == values["ShmemPmdMapped"] == 0, f
            tables, expected = (values["AnonPages"] + values["Mapped"]) // page_kb, 0
            for _ in range(counted):
                tables = (tables + entries - 1) // entries
                expected += tables
            assert values["PageTables"] == expected * page_kb, (profile, f.parent.name, values["PageTables"])
            machine += expected * page_kb
        assert machine > 0, profile
        assert _meminfo_kb(root / "proc/meminfo")["PageTables"] == machine, profile


MIN_FREE_KBYTES_MAX = 262144
"""mm/page_alloc.c init_per_zone_wmark_min: min_free_kbytes is int_sqrt(lowmem_kbytes * 16) clamped to 128..262144
kB (the sum of every zone's min watermark)."""
LOW_ZONES_KB = 4 << 20
"""x86-64's ZONE_DMA and ZONE_DMA32 end at 16 MiB and 4 GiB (arch/x86/mm/init.c zone_sizes_init: MAX_DMA_PFN,
MAX_DMA32_PFN), so they manage at most 4 GiB: the cap calculate_totalreserve_pages puts on their lowmem reserves
(``if (max > managed_pages) max = managed_pages``)."""


@pytest.mark.parametrize("profile", ("dgx-h100", "cxl-pool", "t4-cloud"))
def test_mem_available_keeps_at_least_half_the_reclaimable_cache(rendered: Rendered, profile: str) -> None:
    """mm/show_mem.c si_mem_available: ``MemAvailable`` is the free pages less totalreserve_pages, plus the file LRU
    lists less min(half of them, the low watermarks), plus reclaimable kernel memory (``KReclaimable``: reclaimable
    slab and misc) less min(half of it, the low watermarks). So it is at least ``MemFree`` + half the file LRU +
    half ``KReclaimable`` - totalreserve_pages. totalreserve_pages (mm/page_alloc.c, calculate_totalreserve_pages)
    is each zone's largest lowmem reserve, capped at the zone's managed pages, plus its high watermark. The
    reserves keep allocations for a node's higher zones out of its lower ones (setup_per_zone_lowmem_reserve), so
    with booted DRAM in ZONE_NORMAL (no movable_node or kernelcore=) only x86's low zones have one: at most 4 GiB.
    The high watermark is min + 2 * max(min / 4, managed * watermark_scale_factor / 10000), the mins summing to
    min_free_kbytes (at most 256 MiB; a highmem or movable zone's own min is at most 128 pages) and the default
    scale factor 10 (admin-guide/sysctl/vm.rst): at most 1.5 * 256 MiB + MemTotal / 500 in all, with 128 MiB of
    room for the movable zones' mins. x86-64 profiles: the zone limits above are x86's."""
    for _, node, root in rendered(profile):
        assert node.cpu.arch == "amd64", profile
        m = _meminfo_kb(root / "proc/meminfo")
        reserve = LOW_ZONES_KB + MIN_FREE_KBYTES_MAX * 3 // 2 + (128 << 10) + m["MemTotal"] // 500
        file_lru = m["Active(file)"] + m["Inactive(file)"]
        floor = m["MemFree"] - reserve + file_lru // 2 + m["KReclaimable"] // 2
        assert m["MemAvailable"] >= floor, (profile, m["MemAvailable"], floor)


VMALLOC_TOTAL_KB = {
    ("arm64", None): (0xFFFFFFBFF0000000 - 0xFFFF800080000000) >> 10,
    ("riscv64", "sv39"): (0xFFFFFFD600000000 - 0xFFFFFFC600000000) >> 10,
    ("riscv64", "sv48"): (0xFFFFAF8000000000 - 0xFFFF8F8000000000) >> 10,
    ("riscv64", "sv57"): (0xFF60000000000000 - 0xFF20000000000000) >> 10,
}
"""``VmallocTotal`` (VMALLOC_END - VMALLOC_START, >> 10) of the arm64 and RISC-V kernels.

arm64, 6.8 with 64 KiB pages and 48-bit VAs (Ubuntu 24.04's -64k flavour: ARM64_VA_BITS 48): vmalloc starts at
MODULES_END, 2 GiB above _PAGE_END(48) = 0xffff800000000000, and ends 256 MiB below VMEMMAP_START, which is
-(1 << (VA_BITS - VMEMMAP_SHIFT)) with VMEMMAP_SHIFT = PAGE_SHIFT - STRUCT_PAGE_MAX_SHIFT = 16 - 6 (asm/memory.h,
asm/pgtable.h); with 4 KiB pages that end is Documentation/arch/arm64/memory.rst's ``fffffbffefffffff`` and real 6.x
machines print 133141626880 kB; a pre-6.5 64 KiB kernel (128 MiB of modules) printed 137170124800 kB, 1920 MiB more.
RISC-V: Documentation/arch/riscv/vm-layout.rst's ``vmalloc/ioremap space`` lines, end exclusive (VMALLOC_END is
PAGE_OFFSET, asm/pgtable.h; sv39 boards print 67108864 kB), for the paging mode /proc/cpuinfo's ``mmu`` names."""


def test_the_vmalloc_area_and_direct_map_are_the_architectures(rendered: Rendered) -> None:
    """Documentation/arch/x86/x86_64/mm.rst: the vmalloc/ioremap space is 32 TB with 4-level paging and 12.5 PB with
    5-level paging, which a CPU with LA57 (``la57`` in /proc/cpuinfo's flags) runs; meminfo prints it as
    ``VmallocTotal`` (VMALLOC_TOTAL >> 10: 34359738367 and 13743895347199 kB). arm64 and RISC-V: VMALLOC_TOTAL_KB
    (not x86's figure). The direct map covers all RAM, and only x86 reports it (``DirectMap4k/2M/1G``:
    arch_report_meminfo in arch/x86/mm/pat/set_memory.c); arm64 and RISC-V kernels print no DirectMap lines."""
    for profile in ("dgx-h100", "t4-cloud", "gh200", "riscv-nvlink-fusion"):
        (_, _, root), *_ = rendered(profile)
        values = _meminfo_kb(root / "proc/meminfo")
        direct = [label for label in values if label.startswith("DirectMap")]
        arch = dict(line.split(": ", 1) for line in (root / "proc/hwloc-nofile-info").read_text().splitlines())
        if arch["Architecture"] == "aarch64":
            assert _page_kb(root) == 64, profile  # the layout above is the 64 KiB kernel's
            assert values["VmallocTotal"] == VMALLOC_TOTAL_KB[("arm64", None)] == 137168158720, profile
        elif arch["Architecture"] == "riscv64":
            mmu = _cpuinfo(root)[0]["mmu"]
            assert values["VmallocTotal"] == VMALLOC_TOTAL_KB[("riscv64", mmu)], (profile, mmu)
        if arch["Architecture"] != "x86_64":
            assert direct == [], (profile, direct)
            continue
        la57 = "la57" in _flags_of(root)
        assert values["VmallocTotal"] == (13743895347199 if la57 else 34359738367), (profile, la57)
        mapped = sum(values[label] for label in direct)
        assert mapped >= values["MemTotal"], profile
        # and it maps that RAM once: beyond what MemTotal counts there is only what the kernel reserved before
        # counting (memblock: the memory map, one 64-byte struct page per 4 KiB page, 1/64 of RAM; the kernel
        # image, initrd, crashkernel: well under 1 GiB), never a fraction of the machine mapped twice
        assert mapped - values["MemTotal"] <= values["MemTotal"] // 64 + 1048576, (profile, mapped)


def test_every_riscv_paging_modes_vmalloc_area_is_the_documented_one() -> None:
    """The rendered trees run one paging mode (sv57, RISCV_MMU), but the kernel's figure is per mode and the fake
    keeps a table of them: each entry must be vm-layout.rst's ``vmalloc/ioremap space`` size for its mode (64 GB
    on sv39, 32 TB on sv48, 16 PB on sv57; VMALLOC_TOTAL_KB above), whichever mode a RISC-V host is given."""
    assert {("riscv64", mode): kb for mode, kb in RISCV_VMALLOC_TOTAL_KB.items()} == {
        key: kb for key, kb in VMALLOC_TOTAL_KB.items() if key[0] == "riscv64"}
    assert RISCV_VMALLOC_TOTAL_KB["sv39"] == 67108864  # what sv39 boards print


def test_both_x86_paging_modes_vmalloc_area_is_the_documented_one() -> None:
    """As for RISC-V: Documentation/arch/x86/x86_64/mm.rst's vmalloc/ioremap space is 32 TB with 4-level paging and
    12.5 PB with 5-level, VMALLOC_TOTAL >> 10 printing 34359738367 and 13743895347199 kB; the table holds both,
    whichever one the profiles' CPUs (with or without ``la57``) render."""
    assert X86_VMALLOC_TOTAL_KB == {4: 34359738367, 5: 13743895347199}


def _flags_of(root: Path) -> set[str]:
    for line in (root / "proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    raise AssertionError("no flags in /proc/cpuinfo")


def test_every_nvidia_capability_table_names_distinct_minors_its_files_agree_with(rendered: Rendered) -> None:
    """The driver's capability tables (``/proc/driver/nvidia-caps/{mig,nvlink,sys}-minors``: ``name minor``) share
    one device region, ``/dev/nvidia-caps/nvidia-capN`` (MIG user guide, "Device Nodes and Capabilities"; IMEX's
    ``fabric-imex-mgmt`` in ``sys-minors``): every minor is distinct across them and below 2^20 (MINORBITS), and a
    capability's file under ``/proc/driver/nvidia/capabilities`` shows the same minor as ``DeviceFileMinor`` and
    its mode in decimal (the guide's mig/config: minor 1, mode 256, 0400; mig/monitor: minor 2, mode 292, 0444)."""
    for profile in ("dgx-h100", "gb200-nvl72"):
        (_, _, root), *_ = rendered(profile)
        tables = sorted((root / "proc/driver/nvidia-caps").glob("*-minors"))
        assert {t.name for t in tables} >= {"mig-minors", "nvlink-minors", "sys-minors"}, profile
        minors: dict[str, int] = {}
        for table in tables:
            for line in table.read_text().splitlines():
                name, minor = line.split()
                minors[name] = int(minor)
        assert len(set(minors.values())) == len(minors), profile
        assert all(0 <= m < 1 << 20 for m in minors.values()), profile
        caps = root / "proc/driver/nvidia/capabilities"
        files = [f for f in caps.rglob("*") if f.is_file()]
        assert any(f.name == "fabric-imex-mgmt" for f in files), profile
        for f in files:
            fields = dict(line.split(": ", 1) for line in f.read_text().splitlines())
            name = str(f.relative_to(caps)).replace("mig/", "")  # mig/config: config; gpu0/mig/gi1/...: gpu0/gi1/...
            assert int(fields["DeviceFileMinor"]) == minors[name], (profile, f)
        for name, minor, mode in (("config", "1", "256"), ("monitor", "2", "292")):
            assert dict(line.split(": ", 1) for line in (caps / f"mig/{name}").read_text().splitlines()) == {
                "DeviceFileMinor": minor, "DeviceFileMode": mode, "DeviceFileModify": "1"}, (profile, name)


IORESOURCE = {"MEM": 0x200, "PREFETCH": 0x2000, "READONLY": 0x4000, "SIZEALIGN": 0x40000, "MEM_64": 0x100000}
"""include/linux/ioport.h's resource flags."""


def test_resource_flags_are_what_the_kernel_decodes_from_each_bar(rendered: Rendered) -> None:
    """drivers/pci/probe.c: decode_bar keeps a memory BAR's own type bits (bits 3:0 of the BAR in config space)
    and adds IORESOURCE_MEM, IORESOURCE_PREFETCH for a prefetchable BAR and IORESOURCE_MEM_64 for a 64-bit one;
    __pci_read_base adds IORESOURCE_SIZEALIGN; the expansion ROM is IORESOURCE_MEM | PREFETCH | READONLY |
    SIZEALIGN (pci_read_bases); a bridge's prefetchable window keeps the Prefetchable Memory Base's type bits and
    adds IORESOURCE_MEM, PREFETCH and, for a 64-bit window, MEM_64 (pci_read_bridge_mmio_pref), and spans what the
    base and limit registers decode. ``resource`` prints start, end and flags (resource_show)."""
    (_, _, root), *_ = rendered("dgx-h100")
    bars = rom = windows = 0
    for d in sorted((root / "sys/bus/pci/devices").iterdir()):
        config = (d / "config").read_bytes()
        lines = [[int(x, 16) for x in line.split()] for line in (d / "resource").read_text().splitlines()]
        count = 2 if config[0x0E] & 0x7F == 1 else 6
        for i in range(count):
            start, _, flags = lines[i]
            if not start:
                continue
            low = int.from_bytes(config[0x10 + 4 * i:0x14 + 4 * i], "little") & 0xF
            assert not low & 1, (d.name, i)  # no I/O BARs on these devices
            want = low | IORESOURCE["MEM"] | IORESOURCE["SIZEALIGN"]
            want |= IORESOURCE["PREFETCH"] if low & 0x8 else 0
            want |= IORESOURCE["MEM_64"] if low & 0x6 == 0x4 else 0
            assert flags == want, (d.name, i, hex(flags), hex(want))
            bars += 1
        if lines[6][0]:
            assert lines[6][2] == (IORESOURCE["MEM"] | IORESOURCE["PREFETCH"] | IORESOURCE["READONLY"]
                                   | IORESOURCE["SIZEALIGN"]), d.name
            rom += 1
        if count == 2 and lines[15][1] >= lines[15][0] and lines[15][1]:
            low = config[0x24] & 0xF  # Prefetchable Memory Base's type bits: 1 is a 64-bit window
            want = low | IORESOURCE["MEM"] | IORESOURCE["PREFETCH"] | (IORESOURCE["MEM_64"] if low == 1 else 0)
            assert lines[15][2] == want, (d.name, hex(lines[15][2]), hex(want))
            # P2P Bridge spec 3.2.5.9-10: bits 31:20 in Prefetchable Base/Limit, 63:32 in the Upper 32 Bits registers
            word = [int.from_bytes(config[off:off + size], "little") for off, size in
                    ((0x24, 2), (0x26, 2), (0x28, 4), (0x2C, 4))]
            start = ((word[0] & 0xFFF0) << 16) | (word[2] << 32)
            end = ((word[1] & 0xFFF0) << 16) | 0xFFFFF | (word[3] << 32)
            assert (lines[15][0], lines[15][1]) == (start, end), d.name
            windows += 1
    assert bars >= 16 and rom >= 1 and windows >= 4


NODE_COUNTERS = ("SwapCached", "Active", "Inactive", "Active(anon)", "Inactive(anon)", "Active(file)",
                 "Inactive(file)", "Unevictable", "Mlocked", "Dirty", "Writeback", "AnonPages", "Mapped", "Shmem",
                 "KReclaimable", "Slab", "SReclaimable", "SUnreclaim", "KernelStack", "PageTables", "SecPageTables",
                 "NFS_Unstable", "Bounce", "WritebackTmp", "AnonHugePages", "ShmemHugePages", "ShmemPmdMapped",
                 "FileHugePages", "FilePmdMapped")
"""Counters both fs/proc/meminfo.c and drivers/base/node.c print from the same per-node vmstat items. ``SwapCached``
is one of them since 5.14: the machine's is total_swapcache_pages(), which include/linux/swap.h defines as
global_node_page_state(NR_SWAPCACHE), and a node's is node_page_state(pgdat, NR_SWAPCACHE) (seed 10529)."""


@pytest.mark.parametrize("profile", PROFILES)
def test_the_machines_meminfo_counters_are_its_nodes_summed(rendered: Rendered, profile: str) -> None:
    """/proc/meminfo reads the global vmstat counters (global_node_page_state, global_zone_page_state), which are
    the nodes' counters (node_page_state, as ``nodeN/meminfo`` prints them) added up; and the page cache a node
    calls ``FilePages`` (NR_FILE_PAGES) is what the machine splits into ``Cached``, ``Buffers`` and ``SwapCached``
    (fs/proc/meminfo.c: cached = NR_FILE_PAGES - swapcache - bufferram)."""
    for _, _, root in rendered(profile):
        machine = _meminfo_kb(root / "proc/meminfo")
        nodes = [_meminfo_kb(f) for f in sorted((root / NODES).glob("node[0-9]*/meminfo"))]
        assert nodes, profile
        for label in NODE_COUNTERS:
            assert machine[label] == sum(n[label] for n in nodes), (profile, label)
        assert machine["Cached"] + machine["Buffers"] + machine["SwapCached"] == sum(n["FilePages"] for n in nodes)


@pytest.mark.parametrize("profile", ("cxl-test", "cxl-pool"))
def test_every_cxl_ports_dports_and_uport_are_registered_devices(rendered: Rendered, profile: str) -> None:
    """drivers/cxl/core/port.c links a port's ``uport``, ``parent_dport`` and each ``dportN`` to the devices that
    are its upstream and downstream ports (host bridges, root and switch ports; cxl_test's mock platform devices),
    and those are registered devices: each has a ``uevent`` attribute (drivers/base/core.c, device_add). A link into
    a directory that is only a path is no device. (cxl_test's ports link to its mock platform devices, cxl-pool's
    to the ACPI0016 host bridges and PCI ports.) Every port below the root has both links: port.c's
    __devm_cxl_add_port calls devm_cxl_link_uport for every port and devm_cxl_link_parent_dport, which returns
    early only without a parent dport (the root, the one port cxl_port_alloc makes without one), for every port;
    so host bridge, switch (a pooled device's virtual switch among them) and endpoint ports all have both."""
    for _, _, root in rendered(profile):
        links = 0
        for port in sorted((root / CXL_DEVICES).glob("*")):
            if not port.name.startswith(("root", "port", "endpoint")):
                continue
            if not port.name.startswith("root"):
                assert (port / "uport").is_symlink() and (port / "parent_dport").is_symlink(), (profile, port.name)
            for link in [*sorted(port.glob("dport*")), port / "uport", port / "parent_dport"]:
                if not link.is_symlink():
                    continue
                target = link.resolve()
                assert (target / "uevent").is_file(), (profile, link, target)
                links += 1
        assert links >= 8, profile


@pytest.mark.parametrize("profile", ("dgx-h100", "cxl-pool"))
def test_every_pci_function_links_to_the_pci_bus_as_its_subsystem(rendered: Rendered, profile: str) -> None:
    """drivers/base/core.c (device_add_class_symlinks) gives every device on a bus a ``subsystem`` link to
    ``/sys/bus/<bus>``; libudev takes a device's subsystem from it (udev_device_get_subsystem), so without it udev
    rules and tools that match ``SUBSYSTEM=="pci"`` see no PCI device. Bridges, GPUs, NICs and the CXL ports and
    memory devices alike."""
    for _, _, root in rendered(profile):
        functions = sorted((root / "sys/bus/pci/devices").iterdir())
        assert len(functions) >= 8, profile
        for d in functions:
            assert (d / "subsystem").resolve() == (root / "sys/bus/pci").resolve(), (profile, d.name)


def test_cxl_acpi_devices_carry_the_acpi_ids_in_their_uevent(rendered: Rendered) -> None:
    """A CXL host bridge is the ACPI device ``ACPI0016`` with _CIDs ``PNP0A08`` and ``PNP0A03`` (CXL 2.0 9.14.1,
    "CXL Root Device" and host bridge objects; QEMU's CXL host bridges declare the same). drivers/acpi/device_sysfs.c
    shows its ``hid`` and a ``modalias`` of ``acpi:`` followed by each id and ``:`` (create_pnp_modalias), and its
    ``uevent`` is that MODALIAS alone (acpi_device_uevent; no driver binds a host bridge, the PCI root scan handler
    claims it); it sits on the ACPI bus. The CXL root ``ACPI0017`` becomes a platform device bound to cxl_acpi, whose
    uevent is DRIVER= then its ACPI companion's MODALIAS (drivers/base/platform.c, platform_uevent)."""
    for _, node, root in rendered("cxl-pool"):
        bridges = sorted((root / "sys/devices/LNXSYSTM:00/LNXSYBUS:00").glob("ACPI0016:*"))
        assert len(bridges) == len(node.cxl.host_bridges) >= 1
        for hb in bridges:
            assert _read(hb / "hid") == "ACPI0016", hb.name
            assert _read(hb / "modalias") == "acpi:ACPI0016:PNP0A08:PNP0A03:", hb.name
            assert (hb / "uevent").read_text() == "MODALIAS=acpi:ACPI0016:PNP0A08:PNP0A03:\n", hb.name
            assert stat.S_IMODE(os.stat(hb / "uevent").st_mode) == 0o644, hb.name
            assert (hb / "subsystem").resolve() == (root / "sys/bus/acpi").resolve(), hb.name
            assert (root / "sys/bus/acpi/devices" / hb.name).resolve() == hb.resolve(), hb.name
        acpi_root = root / "sys/devices/platform/ACPI0017:00"
        assert (acpi_root / "uevent").read_text() == "DRIVER=cxl_acpi\nMODALIAS=acpi:ACPI0017:\n"


@pytest.mark.parametrize("profile", ("cxl-pool", "dgx-h100"))
def test_device_nodes_have_the_modes_their_creators_give_them(rendered: Rendered, profile: str) -> None:
    """devtmpfs makes a node with the mode the driver's devnode callback asks for, else 0600
    (drivers/base/devtmpfs.c, devtmpfs_create_node): cxl_memdev_devnode names ``cxl/memN`` and asks no mode
    (drivers/cxl/core/memdev.c), nor do DAX devices, so both are 0600 (``crw-------``, as daxctl's users see).
    The NVIDIA nodes are made by the driver's helper with the registry's ``DeviceFileMode`` (nv-reg.h, shown in
    /proc/driver/nvidia/params; nvidia-modprobe, NV_DEVICE_FILE_MODE): ``nvidiaN``, ``nvidiactl``,
    ``nvidia-modeset``, ``nvidia-uvm``, ``nvidia-uvm-tools`` and the NVSwitch nodes."""
    for _, _, root in rendered(profile):
        dev = root / "dev"
        private = [*sorted(dev.glob("cxl/mem*")), *sorted(dev.glob("dax*"))]
        params = dict(line.split(": ", 1) for line in (root / "proc/driver/nvidia/params").read_text().splitlines())
        nvidia_mode = int(params["DeviceFileMode"])
        nvidia = sorted(p for p in dev.glob("nvidia*") if not p.is_dir())
        assert nvidia and (private or profile != "cxl-pool"), profile
        for path in private:
            assert stat.S_ISCHR(os.lstat(path).st_mode) or os.geteuid() != 0, path
            assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600, (profile, path.name)
        for path in nvidia:
            assert stat.S_IMODE(os.lstat(path).st_mode) == nvidia_mode, (profile, path.name)


MEMORY_ONLY_PROFILE = """
name: memory-only-nodes
description: two sockets, a CPU-less DRAM node nearer socket 1 and one as near to both sockets
groups:
  - name: host
    count: 1
    node:
      cpu: {arch: amd64, vendor: GenuineIntel, model: two sockets, sockets: 2, coresPerSocket: 4, threadsPerCore: 1,
            frequencyMHz: 2000, family: 6, modelId: 143, stepping: 8,
            caches: {l1d: 48KiB, l1i: 32KiB, l2: 2MiB, l3: 16MiB}, isa: [fpu, lm]}
      numa:
        nodes:
          - {id: 0, socket: 0, memory: 16GiB}
          - {id: 1, socket: 1, memory: 16GiB}
          - {id: 2, memory: 8GiB}
          - {id: 3, memory: 8GiB}
        distances: [[10, 21, 31, 17], [21, 10, 14, 17], [31, 14, 10, 28], [17, 17, 28, 10]]
      pcie:
        hostBridges:
          - {name: hb0, numa: 0, bus: 0x00}
"""
"""Memory-only NUMA nodes (a socketless DRAM node, as memory expanders and some firmware's NPS/SNC layouts show
them): node 2 is nearest socket 1's node (SLIT 14 against 31), node 3 as near to both CPU nodes (17 and 17)."""


def test_a_memory_only_nodes_initiators_are_its_nearest_cpu_nodes(fast_tmp: Path) -> None:
    """Documentation/admin-guide/mm/numaperf.rst: a memory target's ``accessN/initiators/`` links the nodes with
    the best access to it, and each such initiator links the target under its ``accessN/targets/``;
    drivers/acpi/numa/hmat.c (hmat_register_target_initiators) keeps every initiator whose figures equal the best,
    so a target as near to two CPU nodes lists both. Without per-initiator HMAT figures in the profile, the nearest
    is by SLIT distance (ACPI 6.5, 5.2.17: the relative latency between the two domains)."""
    system = load_profile("memory-only-nodes", text=MEMORY_ONLY_PROFILE)
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    base = fast_tmp / node.name / ROOT_DIR / NODES
    want = {0: {"node0"}, 1: {"node1"}, 2: {"node1"}, 3: {"node0", "node1"}}
    for target, initiators in want.items():
        for access in ("access0", "access1"):
            got = {p.name for p in (base / f"node{target}/{access}/initiators").glob("node*")}
            assert got == initiators, (target, access, got)
            for i in initiators:
                assert (base / i / access / "targets" / f"node{target}").resolve() == (base / f"node{target}").resolve()
            assert _read(base / f"node{target}/{access}/initiators/read_latency") == "90", (target, access)


TWO_SUPERCHIP_PROFILE = """
name: two-superchips-tied-slit
description: two Grace CPUs, each joined to its own Hopper GPU by NVLink-C2C; firmware's SLIT puts each HBM node
  as far from both Graces
groups:
  - name: host
    count: 1
    node:
      cpu: {arch: arm64, vendor: ARM, model: Neoverse-V2, sockets: 2, coresPerSocket: 4, threadsPerCore: 1,
            frequencyMHz: 3438, family: 0x41, modelId: 0xd4f, stepping: 0,
            caches: {l1d: 64KiB, l1i: 64KiB, l2: 1MiB, l3: 114MiB}, isa: [fp, asimd]}
      numa:
        nodes:
          - {id: 0, socket: 0, kind: lpddr, memory: 16GiB}
          - {id: 1, socket: 1, kind: lpddr, memory: 16GiB}
          - {id: 2, kind: hbm, gpu: gpu0, memory: 8GiB}
          - {id: 3, kind: hbm, gpu: gpu1, memory: 8GiB}
        distances: [[10, 40, 80, 80], [40, 10, 80, 80], [80, 80, 10, 255], [80, 80, 255, 10]]
      pcie:
        hostBridges:
          - {name: hb0, numa: 0, domain: 0x0009, bus: 0x00}
          - {name: hb1, numa: 1, domain: 0x0019, bus: 0x00}
      gpus:
        - {name: gpu0, sku: gh200-96gb, bus: "0009:01:00.0", parent: hb0}
        - {name: gpu1, sku: gh200-96gb, bus: "0019:01:00.0", parent: hb1}
      c2c:
        - {gpu: gpu0, socket: 0, bandwidthGBs: 900}
        - {gpu: gpu1, socket: 1, bandwidthGBs: 900}
"""
"""Two GH200 superchips in one node, as HPE's quad-GH200 blades (Cray EX254n) join four: each Hopper reaches only
its own Grace over NVLink-C2C. The SLIT here is coarse (each HBM node 80 from both Graces), so distance alone does
not say which Grace is the HBM's initiator."""


def test_a_gpus_hbm_node_has_its_own_graces_node_as_initiator_whatever_the_slit(fast_tmp: Path) -> None:
    """drivers/acpi/numa/hmat.c (hmat_register_target_initiators) links the initiators with the best HMAT figures
    for a target, not the nearest by SLIT; a GPU's HBM is reached best over its NVLink-C2C link, which joins it to
    its own Grace only (GH200 data sheet: one Grace and one Hopper per superchip; the profile's ``c2c``), so each
    HBM node has exactly that Grace's node as initiator, and that node lists it as a target, even where the SLIT
    ties both Graces."""
    system = load_profile("two-superchips-tied-slit", text=TWO_SUPERCHIP_PROFILE)
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    base = fast_tmp / node.name / ROOT_DIR / NODES
    for target, grace in ((2, "node0"), (3, "node1")):
        for access in ("access0", "access1"):
            got = {p.name for p in (base / f"node{target}/{access}/initiators").glob("node*")}
            assert got == {grace}, (target, access, got)
            assert (base / grace / access / "targets" / f"node{target}").is_symlink(), (target, access)


THREAD_SIZE_KB = {"x86_64": 16, "riscv64": 16, "aarch64": 64}
"""A task's kernel stack (THREAD_SIZE) in kB: x86-64 PAGE_SIZE << THREAD_SIZE_ORDER 2 (asm/page_64_types.h, no
KASAN), riscv64 the same order (asm/thread_info.h), arm64 with 64 KiB pages THREAD_SHIFT = PAGE_SHIFT (asm/memory.h:
a vmapped stack is at least a page)."""


@pytest.mark.parametrize("profile", ("dgx-h100", "t4-cloud", "gh200", "riscv-nvlink-fusion"))
def test_kernel_stack_is_whole_stacks(rendered: Rendered, profile: str) -> None:
    """``KernelStack`` is NR_KERNEL_STACK_KB (fs/proc/meminfo.c, drivers/base/node.c), which account_kernel_stack
    (kernel/fork.c) moves by THREAD_SIZE / 1024 per task: every machine and node figure is a whole number of
    stacks."""
    for _, _, root in rendered(profile):
        info = dict(line.split(": ", 1) for line in (root / "proc/hwloc-nofile-info").read_text().splitlines())
        unit = THREAD_SIZE_KB[info["Architecture"]]
        files = [root / "proc/meminfo", *sorted((root / NODES).glob("node[0-9]*/meminfo"))]
        stacks = [_meminfo_kb(f)["KernelStack"] for f in files]
        assert all(kb % unit == 0 for kb in stacks), (profile, unit, stacks)
        assert any(stacks), profile


PER_CPU_KTHREADS = 5
"""Kernel threads a booted kernel runs on every online CPU, each created on that CPU's node: ``cpuhp/N``
(kernel/cpu.c), ``migration/N`` (kernel/stop_machine.c) and ``ksoftirqd/N`` (kernel/softirq.c) are smpboot threads
(kernel/smpboot.c: kthread_create_on_cpu, which creates on cpu_to_node(cpu)), and the two per-CPU worker pools
(normal and high priority) each get an initial worker, ``kworker/N:0`` and ``kworker/N:0H`` (kernel/workqueue.c:
create_worker at workqueue_init or the CPU's CPUHP_WORKQUEUE_PREP step, kthread_create_on_node(pool->node =
cpu_to_node(cpu)); an idle pool keeps its workers). Every CPU but the boot CPU also has an idle task, forked by
fork_idle on cpu_to_node(cpu); the boot CPU's is init_task, whose stack is the static init_stack, never
accounted."""


@pytest.mark.parametrize("profile", ("dgx-h100", "t4-cloud", "gh200", "riscv-nvlink-fusion", "cxl-test"))
def test_each_nodes_kernel_stacks_hold_its_cpus_kernel_threads(rendered: Rendered, profile: str) -> None:
    """A node's ``KernelStack`` (drivers/base/node.c: the node's NR_KERNEL_STACK_KB) counts the stack pages on that
    node: kernel/fork.c allocates a task's stack on the node it is forked for (dup_task_struct ->
    alloc_thread_stack_node, a vmalloc on that node with CONFIG_VMAP_STACK) and account_kernel_stack counts each
    page on its own node. So a node with CPUs holds at least the stacks of its CPUs' kernel threads
    (PER_CPU_KTHREADS each, plus an idle task but on CPU 0), THREAD_SIZE each. This bounds the fake's share of
    used memory for stacks from below; the share itself is the fake's own choice (a real node holds user tasks'
    stacks too), which no source fixes."""
    for _, _, root in rendered(profile):
        info = dict(line.split(": ", 1) for line in (root / "proc/hwloc-nofile-info").read_text().splitlines())
        unit = THREAD_SIZE_KB[info["Architecture"]]
        checked = 0
        for n in sorted((root / NODES).glob("node[0-9]*")):
            cpus = _cpulist(_read(n / "cpulist"))
            if not cpus:
                continue
            tasks = (PER_CPU_KTHREADS + 1) * len(cpus) - (0 in cpus)
            stacks = _meminfo_kb(n / "meminfo")["KernelStack"]
            assert stacks >= tasks * unit, (profile, n.name, stacks, tasks, unit)
            checked += 1
        assert checked, profile


@pytest.mark.parametrize("profile", ("dgx-h100", "gh200", "riscv-nvlink-fusion"))
def test_vmalloc_used_holds_the_kernel_stacks(rendered: Rendered, profile: str) -> None:
    """``VmallocUsed`` is vmalloc_nr_pages() in kB (fs/proc/meminfo.c since 5.3, "mm: vmalloc: show number of
    vmalloc pages in /proc/meminfo"), and with CONFIG_VMAP_STACK (arch/Kconfig: default y where the
    architecture has HAVE_ARCH_VMAP_STACK, as x86-64, arm64 and riscv64 do) kernel/fork.c allocates every task's
    stack with __vmalloc_node_range, which that count includes: the vmalloc'd pages hold at least the stacks
    ``KernelStack`` counts (account_kernel_stack), so a machine with kernel stacks never shows ``VmallocUsed``
    below them (nor 0)."""
    for _, _, root in rendered(profile):
        values = _meminfo_kb(root / "proc/meminfo")
        assert values["KernelStack"] > 0, profile
        assert values["VmallocUsed"] >= values["KernelStack"], (profile, values["VmallocUsed"])


@pytest.mark.parametrize("profile", ("dgx-h100", "gh200", "riscv-nvlink-fusion"))
def test_percpu_memory_holds_a_populated_page_for_every_possible_cpu(rendered: Rendered, profile: str) -> None:
    """``Percpu`` is pcpu_nr_pages() (fs/proc/meminfo.c): the populated pages of the percpu chunks times the number
    of units, one unit per possible CPU (mm/percpu.c); the first chunk, holding every CPU's static per-CPU data, is
    populated at boot, so the figure is at least a page per possible CPU, in whole pages per unit."""
    for _, _, root in rendered(profile):
        percpu = _meminfo_kb(root / "proc/meminfo")["Percpu"]
        cpus = len(_cpulist(_read(root / CPUS / "possible")))
        assert percpu >= cpus * _page_kb(root), (profile, percpu, cpus)
        assert percpu % (cpus * _page_kb(root)) == 0, (profile, percpu, cpus)


@pytest.mark.parametrize("profile", ("dgx-h100", "gb200-nvl72", "t4-cloud"))
def test_a_gpus_dma_mask_and_irq_are_the_ones_its_driver_reports(rendered: Rendered, profile: str) -> None:
    """``/proc/driver/nvidia/gpus/<bdf>/information`` prints the GPU's pci_dev->dma_mask (``DMA Size: N bits``,
    nv_count_bits of it, and ``DMA Mask: 0x...``; the open kernel module's nv-procfs.c), whose width the PCI core
    shows as ``dma_mask_bits`` (drivers/pci/pci-sysfs.c: fls64(dma_mask)); and its IRQ (below)."""
    for _, node, root in rendered(profile):
        assert node.gpus, profile
        for g in node.gpus:
            info = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                    (root / "proc/driver/nvidia/gpus" / str(g.address) / "information").read_text().splitlines())}
            bits = int(info["DMA Size"].split()[0])
            assert int(info["DMA Mask"], 16) == (1 << bits) - 1, (profile, g.name, info["DMA Mask"])
            pci = root / "sys/bus/pci/devices" / str(g.address)
            assert int(_read(pci / "dma_mask_bits")) == bits, (profile, g.name)
            # the driver's IRQ is pdev->irq (nv-pci.c; after pci_enable_msi the MSI vector, nv-msi.c), which the
            # PCI irq attribute shows (pci-sysfs.c irq_show: the first MSI vector when MSI is on, else pdev->irq);
            # a GPU without one is refused ("No interrupts of any type are available", nv.c)
            assert int(info["IRQ"]) == int(_read(pci / "irq")) > 0, (profile, g.name, info["IRQ"])


VBIOS_BOARDS = {"dgx-h100": "h100", "gb200-nvl72": "gb200", "t4-cloud": "t4"}
"""Profiles whose GPUs are a board of ../shared/reference/captures (qx-<board>.xml, ``nvidia-smi -q -x``)."""


@pytest.mark.parametrize("profile", sorted(VBIOS_BOARDS))
def test_a_gpus_video_bios_and_gsp_firmware_are_the_captured_boards(rendered: Rendered, profile: str) -> None:
    """``/proc/driver/nvidia/gpus/<bdf>/information`` prints ``Model``, ``Video BIOS`` and ``GPU Firmware``
    (nv-procfs.c). The VBIOS string is RM's, ``%02x.%02x.%02x.%02x.%02x`` of the BIOS revision and OEM revision
    (open-gpu-kernel-modules, RM's unix layer osapi.c, rm_get_vbios_version): the captured board's ``vbios_version``
    in lower case (nvidia-smi prints the same bytes in upper case). The GSP firmware ships with the driver: every
    capture's ``gsp_firmware_version`` is its ``driver_version``, the release ``/proc/driver/nvidia/version``
    names."""
    captures = capture_dir()
    if captures is None:
        pytest.skip("no captures directory (../shared/reference/captures)")
    gpu = ET.parse(captures / f"qx-{VBIOS_BOARDS[profile]}.xml").getroot().find("gpu")
    assert gpu is not None
    vbios, product = gpu.findtext("vbios_version"), gpu.findtext("product_name")
    assert vbios and product
    for _, node, root in rendered(profile):
        release = (root / "proc/driver/nvidia/version").read_text().split("  ")[1]
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?", release), release
        for g in node.gpus:
            info = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                    (root / "proc/driver/nvidia/gpus" / str(g.address) / "information").read_text().splitlines())}
            assert (info["Model"], info["Video BIOS"]) == (product, vbios.lower()), (profile, g.name)
            assert info["GPU Firmware"] == release, (profile, g.name)


MSI_RESERVED = {"x86_64": (0xFEE00000, 0xFEEFFFFF), "aarch64": (0x8000000, 0x8000000 + 0x100000 - 1)}
"""The MSI window an IOMMU group reserves: x86's interrupt address range (Intel VT-d IOAPIC_RANGE_START/END, AMD-Vi
MSI_RANGE_START/END: 0xfee00000-0xfeefffff, IOMMU_RESV_MSI); arm64 SMMU's software MSI window (MSI_IOVA_BASE 0x8000000,
MSI_IOVA_LENGTH 0x100000, IOMMU_RESV_SW_MSI)."""


@pytest.mark.parametrize("profile", ("dgx-h100", "gh200"))
def test_every_iommu_group_reserves_the_msi_window(rendered: Rendered, profile: str) -> None:
    """drivers/iommu/iommu.c (iommu_group_show_resv_regions): ``reserved_regions`` prints each reserved region as
    ``0x%016llx 0x%016llx <type>``, start and inclusive end, and both MSI kinds are ``msi``; VFIO reads it to keep
    the window out of a guest's IOVA space."""
    for _, _, root in rendered(profile):
        info = dict(line.split(": ", 1) for line in (root / "proc/hwloc-nofile-info").read_text().splitlines())
        start, end = MSI_RESERVED[info["Architecture"]]
        groups = sorted((root / "sys/kernel/iommu_groups").iterdir())
        assert groups, profile
        # iommu_group_alloc takes the lowest free id (ida_alloc) and a booted machine frees none: 0 .. N-1
        assert sorted(int(g.name) for g in groups) == list(range(len(groups))), profile
        for g in groups:
            assert f"0x{start:016x} 0x{end:016x} msi" in _read(g / "reserved_regions").splitlines(), (profile, g.name)


DMA_BITS_BY_DRIVER = {"pcieport": 32, "mlx5_core": 64, "nvidia-nvswitch": 64, "cxl_pci": 32}
"""``dma_mask_bits`` (fls64 of the function's DMA mask, drivers/pci/pci-sysfs.c) by the driver bound: the PCI core
starts every function at 32 bits (drivers/pci/probe.c, pci_setup_device: "Assume 32-bit PCI") and the port driver
changes nothing; mlx5_core asks for 64 (set_dma_caps: DMA_BIT_MASK(64)); nvidia-nvswitch for the switch's DMA width,
64 on the LR10 and LS10 NVSwitches (open-gpu-kernel-modules: DMA_ADDR_WIDTH_LR10/LS10); cxl_pci sets no mask at all
(drivers/cxl/pci.c, cxl_pci_probe: enable, map the register blocks, mailbox and IRQ vectors, no dma_set_mask), so a
CXL memory device keeps the core's 32."""


@pytest.mark.parametrize("profile", ("dgx-h100", "cxl-pool"))
def test_dma_mask_bits_are_what_each_functions_driver_set(rendered: Rendered, profile: str) -> None:
    for _, _, root in rendered(profile):
        seen = set()
        for d in sorted((root / "sys/bus/pci/devices").iterdir()):
            driver = os.path.basename(os.readlink(d / "driver")) if (d / "driver").is_symlink() else ""
            if driver in DMA_BITS_BY_DRIVER:
                assert int(_read(d / "dma_mask_bits")) == DMA_BITS_BY_DRIVER[driver], (profile, d.name, driver)
                seen.add(driver)
        assert "pcieport" in seen and "mlx5_core" in seen, (profile, seen)
        assert "cxl_pci" in seen or profile != "cxl-pool", (profile, seen)


DYNAMIC_CHAR_DRIVERS = ("nvidia-uvm", "nvidia-nvswitch", "nvidia-nvlink", "nvidia-caps", "nvidia-caps-imex-channels",
                        "cxl", "dax")
"""Drivers that register their character region with a dynamic major (alloc_chrdev_region or register_chrdev with
major 0): the UVM, NVSwitch, NVLink, capability and IMEX channel devices of the NVIDIA driver, cxl_core's memdevs
and dax."""


@pytest.mark.parametrize("profile", ("dgx-h100", "cxl-pool", "gb200-nvl72"))
def test_every_dynamic_major_is_its_own_and_in_the_dynamic_ranges(rendered: Rendered, profile: str) -> None:
    """fs/char_dev.c (find_dynamic_major): a dynamic major is a free one from 254 down to 234
    (CHRDEV_MAJOR_DYN_END), then from 511 down to 384 (CHRDEV_MAJOR_DYN_EXT_START/END), and no other region holds
    it, so two drivers that asked for one never share it (``/proc/devices`` lists each)."""
    for _, _, root in rendered(profile):
        names = {name: major for major, group in _char_majors(root).items() for name in group}
        dynamic = {n: names[n] for n in DYNAMIC_CHAR_DRIVERS if n in names}
        assert dynamic, profile
        assert len(set(dynamic.values())) == len(dynamic), (profile, dynamic)
        for name, major in dynamic.items():
            assert 234 <= major <= 254 or 384 <= major <= 511, (profile, name, major)
            assert all(n == name for n, m in names.items() if m == major), (profile, name, major)


@pytest.mark.parametrize("profile", ("cxl-pool", "cxl-test"))
def test_a_memdevs_payload_max_is_a_mailbox_payload_size(rendered: Rendered, profile: str) -> None:
    """``memN/payload_max`` is the mailbox's payload size (drivers/cxl/core/memdev.c, payload_max_show), which the
    Mailbox Capabilities register gives as 2^n bytes, from 256 (n = 8) to 1 MiB (n = 20) (CXL 2.0 8.2.8.4.3;
    cxl_pci refuses a smaller one and clamps a larger one to SZ_1M)."""
    for _, _, root in rendered(profile):
        memdevs = sorted((root / CXL_DEVICES).glob("mem[0-9]*"))
        assert memdevs, profile
        for m in memdevs:
            size = int(_read(m / "payload_max"))
            assert 256 <= size <= 1 << 20 and size & (size - 1) == 0, (profile, m.name, size)


@pytest.mark.parametrize("profile", ("cxl-pool", "cxl-test"))
def test_a_memdevs_label_storage_size_is_the_devices_lsa_size(rendered: Rendered, profile: str) -> None:
    """``memN/label_storage_size`` prints the device's LSA size with ``%zu`` (drivers/cxl/core/memdev.c,
    label_storage_size_show), which cxl_dev_state_identify takes from the Identify Memory Device payload's
    ``__le32 lsa_size`` (drivers/cxl/cxlmem.h, struct cxl_mbox_identify): a decimal from 0 to 2^32 - 1 for every
    memdev, pooled logical devices included. cxl_test's mock devices all report LSA_SIZE, SZ_128K
    (tools/testing/cxl/test/mem.c, mock_id)."""
    for _, _, root in rendered(profile):
        memdevs = sorted((root / CXL_DEVICES).glob("mem[0-9]*"))
        assert memdevs, profile
        for m in memdevs:
            text = _read(m / "label_storage_size")
            assert text.isdigit() and int(text) < 2**32, (profile, m.name, text)
            if profile == "cxl-test":
                assert int(text) == 128 * 1024, (m.name, text)


@pytest.mark.parametrize("profile", ("cxl-pool", "cxl-test"))
def test_a_memdevs_firmware_version_is_its_identify_fw_revision(rendered: Rendered, profile: str) -> None:
    """``memN/firmware_version`` is the Identify Memory Device payload's 16-byte FW Revision
    (drivers/cxl/cxlmem.h struct cxl_mbox_identify ``fw_revision[0x10]``), copied whole and printed with ``%.16s``
    (drivers/cxl/core/memdev.c firmware_version_show), so at most 16 characters, a trailing blank kept. cxl_test's
    mock devices answer "mock fw v1 " and a 4 KiB mailbox payload (tools/testing/cxl/test/mem.c: mock_id,
    ``payload_size = SZ_4K``); QEMU's type 3 device, which cxl-pool's memdevs are, "BWFW VERSION 00"
    (hw/cxl/cxl-mailbox-utils.c, cmd_identify_memory_device: "BWFW VERSION %02d" of 0)."""
    want = "mock fw v1 " if profile == "cxl-test" else "BWFW VERSION 00"
    for _, _, root in rendered(profile):
        memdevs = sorted((root / CXL_DEVICES).glob("mem[0-9]*"))
        assert memdevs, profile
        for m in memdevs:
            assert (m / "firmware_version").read_text() == want + "\n", (profile, m.name)
            if profile == "cxl-test":
                assert _read(m / "payload_max") == "4096", m.name


def test_a_gpu_falling_off_the_bus_takes_only_its_own_function_away(fast_tmp: Path) -> None:
    """A GPU that fell off the bus is removed by the PCI core alone (pci_stop_and_remove_bus_device: that device and
    what is below it), and the NVIDIA driver drops only its ``gpus/<bdf>`` entry (nv-procfs.c, per device): every
    other GPU keeps its function and its entry, whichever index the lost one had."""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    lost = node.gpus[2]
    state = derive_state(node, [ActiveFault("f-0", node.name, FallenOffBus(device=lost.name), 0.0)])
    render_tree(RenderContext(system, node, state, True), OutputDir(fast_tmp / node.name))
    root = fast_tmp / node.name / ROOT_DIR
    for g in node.gpus:
        present = g.name != lost.name
        assert (root / "sys/bus/pci/devices" / str(g.address)).exists() == present, g.name
        assert (root / "proc/driver/nvidia/gpus" / str(g.address)).exists() == present, g.name


def _endpoint_decoders(root: Path) -> dict[str, list[str]]:
    """Each bound memdev's endpoint decoders (``decoderE.N`` below the endpoint port whose ``uport`` is it)."""
    devices = root / CXL_DEVICES
    out = {}
    for e in sorted(devices.glob("endpoint[0-9]*")):
        eid = e.name.removeprefix("endpoint")
        out[(e / "uport").resolve().name] = sorted(d.name for d in e.resolve().glob(f"decoder{eid}.*"))
    return out


def test_a_memdev_going_offline_takes_only_its_own_endpoint_away(fast_tmp: Path) -> None:
    """When a memory device's driver goes away (cxl_mem unbound, here by a ``cxl-offline`` fault on mem0, the first
    memdev), drivers/cxl/core/port.c removes that device's endpoint port, which devm_cxl_add_endpoint registered
    against it (delete_endpoint), and with it the endpoint's decoders; every other bound memdev keeps its endpoint
    and the decoders its port's probe enumerated (drivers/cxl/port.c, devm_cxl_enumerate_decoders), whatever
    sysfs id the lost device had."""
    system = load_profile("cxl-pool")
    node = system.nodes[0]
    booted = fast_tmp / "booted"
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(booted / node.name))
    before = _endpoint_decoders(booted / node.name / ROOT_DIR)
    assert "mem0" in before and len(before) >= 3, sorted(before)
    assert all(before.values()), before
    state = derive_state(node, [ActiveFault("f-0", node.name, CxlOffline(device="mem0"), 0.0)])
    render_tree(RenderContext(system, node, state, True), OutputDir(fast_tmp / "offline" / node.name))
    after = _endpoint_decoders(fast_tmp / "offline" / node.name / ROOT_DIR)
    assert after == {m: d for m, d in before.items() if m != "mem0"}


NVIDIA_195_REGIONS = {535: ["nvidia-frontend"], 545: ["nvidia", "nvidia-modeset", "nvidiactl"],
                      580: ["nvidia", "nvidia-modeset", "nvidiactl"]}
"""The names major 195 carries in ``/proc/devices`` per driver branch (NVIDIA/open-gpu-kernel-modules): 535's
nv-frontend.c takes the whole major with register_chrdev(195, "nvidia-frontend"), so no other region can share it;
545 dropped the frontend and nv.c registers ``nvidia`` (minors 0-247), ``nvidiactl`` (255) and ``nvidia-modeset``
(254; from 550 nvidia-modeset.ko registers it, nvkms_register_chrdev). fs/char_dev.c refuses overlapping regions
and keeps a major's regions in order of first minor, which is the order chrdev_show lists them in."""


def _regions_of(devices: str, major: int) -> list[str]:
    chars = devices.split("Character devices:\n", 1)[1].split("\n\n", 1)[0]
    return [name for m, name in (line.split() for line in chars.splitlines()) if int(m) == major]


@pytest.mark.parametrize("branch", sorted(NVIDIA_195_REGIONS))
def test_major_195_carries_the_regions_the_drivers_branch_registers(branch: int) -> None:
    system = load_profile("dgx-h100")
    version = f"{branch}.104.05"
    system = dataclasses.replace(system, driver=dataclasses.replace(system.driver, version=version))
    node = system.nodes[0]
    devices = proc_devices(system, node, node_layout(system, node))
    assert _regions_of(devices, 195) == NVIDIA_195_REGIONS[branch], version


def test_the_rendered_proc_devices_names_the_profiles_drivers_regions(rendered: Rendered) -> None:
    """dgx-h100 runs 580.105.08 (its capture's driver): the three regions of a frontend-less driver, in minor order."""
    (system, _, root), *_ = rendered("dgx-h100")
    assert system.driver.branch == 580
    assert _regions_of((root / "proc/devices").read_text(), 195) == NVIDIA_195_REGIONS[580]


def _msi_enabled(config: bytes) -> bool:
    """Whether the MSI capability's Enable bit is set (PCI Local Bus 3.0, 6.8.1: the capability list from 0x34,
    MSI capability id 0x05, Message Control bit 0)."""
    at = config[0x34]
    while at:
        if config[at] == 0x05:
            return bool(config[at + 2] & 1)
        at = config[at + 1]
    return False


@pytest.mark.parametrize("profile", ("dgx-h100", "cxl-pool", "gb200-nvl72"))
def test_every_driven_function_has_an_irq_and_msi_users_have_their_own(rendered: Rendered, profile: str) -> None:
    """drivers/pci/pci-sysfs.c irq_show prints the first MSI vector's irq while MSI is enabled, else pdev->irq.
    An MSI vector is an irq of its own (msi_domain_alloc_irqs: one descriptor per vector), never 0 (irq 0 is not
    handed out), so functions with MSI on show distinct non-zero irqs. A function a driver enabled with an INTx pin
    (config 0x3D) has the line firmware routes it to (pci_enable_device -> acpi_pci_irq_enable, pci_assign_irq on
    device-tree hosts), also non-zero; lspci -v prints it as ``IRQ N``.

    On x86 the INTx lines are I/O APIC pins (GSIs) and MSI irqs are handed out above every GSI:
    arch/x86/kernel/apic/io_apic.c, arch_dynirq_lower_bound answers gsi_top, the GSIs all I/O APICs cover, which
    is at least the 24 pins of the first (the 82093AA's 24 redirection entries, the PC's standard I/O APIC). So an
    x86 MSI irq is 24 or more and above the irq of every function without MSI on (irq_show: pdev->irq, its INTx
    line, for MSI-X users too). The fake showed its GPUs, whose config space enables MSI-X and not MSI, with MSI
    vectors' irqs instead."""
    for _, _, root in rendered(profile):
        msi: dict[int, str] = {}
        intx: set[int] = set()
        driven = 0
        for d in sorted((root / "sys/bus/pci/devices").iterdir()):
            config = (d / "config").read_bytes()
            irq = int(_read(d / "irq"))
            if _msi_enabled(config):
                assert irq > 0 and irq not in msi, (profile, d.name, irq, msi.get(irq))
                msi[irq] = d.name
            if (d / "driver").is_symlink() and config[0x3D]:
                assert irq > 0, (profile, d.name)
                driven += 1
                if not _msi_enabled(config):
                    intx.add(irq)
        assert msi and driven > len(msi), (profile, len(msi), driven)
        if "x86_64" in (root / "proc/hwloc-nofile-info").read_text():
            assert intx and min(msi) >= max(24, max(intx) + 1), (profile, min(msi), sorted(intx))


def _nics_on_a_root_bus(devices: range) -> System:
    """edge-pcie with one ConnectX-6 on its first host bridge's root bus (bus 0x16) at each of ``devices``: the
    built-in profiles put every INTx user behind a port at device 0, so they never show the slot rotation."""
    doc = yaml.safe_load((Path(fakehw.model.__file__).parent.parent / "profiles/edge-pcie.yaml").read_text())
    doc["groups"][0]["node"]["nics"] += [
        {"name": f"mlx5_r{d}", "netdev": f"enp22s{d}np0", "sku": "connectx-6", "bus": f"0000:16:{d:02x}.0",
         "parent": "hb0", "rail": 0} for d in devices]
    return load_profile("edge-pcie-root-nics", text=yaml.safe_dump(doc))


def test_intx_lines_of_one_bus_rotate_with_the_slot_every_four_devices(fast_tmp: Path) -> None:
    """A function's INTA reaches the interrupt controller on the line its slot rotates it to: drivers/pci/pci.c,
    pci_swizzle_interrupt_pin, ``(((pin - 1) + slot) % 4) + 1`` (section 9.1 of the PCI-to-PCI bridge
    specification), four INTx lines (INTA-INTD, PCI Local Bus spec 2.2.6). So the INTA users of one bus at slots
    d and d + 4 share an ``irq`` (drivers/pci/pci-sysfs.c irq_show: pdev->irq, which MSI-X leaves at the INTx line)
    and four consecutive slots get four different lines. Six NICs (mlx5_core, MSI-X) at slots 1-6 of one root bus;
    the rotation, not which line is first (firmware's _PRT), is what the kernel's code fixes."""
    system = _nics_on_a_root_bus(range(1, 7))
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    devices = fast_tmp / node.name / ROOT_DIR / "sys/bus/pci/devices"
    irq = {d: int(_read(devices / f"0000:16:{d:02x}.0/irq")) for d in range(1, 7)}
    assert len({irq[d] for d in range(1, 5)}) == 4, irq
    assert irq[5] == irq[1] and irq[6] == irq[2], irq


@pytest.mark.parametrize("profile", ("dgx-h100", "cxl-pool"))
def test_intx_is_swizzled_through_every_bridge_up_to_the_root_bus(rendered: Rendered, profile: str) -> None:
    """Below the root bus the kernel, not firmware, routes INTx: drivers/pci/pci.c pci_common_swizzle rotates the pin
    by each device's slot (pci_swizzle_interrupt_pin, ``(((pin - 1) + slot) % 4) + 1``, PCI-to-PCI Bridge
    Architecture Specification 1.2, 9.1) at every bus that is not the root bus, then the root bus's routing (ACPI
    _PRT, acpi_pci_irq_lookup) maps the root-bus slot and the rotated pin to a line; switch ports are not in ACPI,
    so nothing routes for them. So INTx users (a driver bound, MSI off: irq_show prints pdev->irq) that arrive at
    the same root-bus slot on the same pin share an irq, and those that arrive on different pins of one slot do not
    (four lines per slot, as the rotation test above). On dgx-h100 the four NVSwitches sit below four downstream
    ports, devices 0-3 of one switch, so they reach their root port's slot on four different pins; the fake gave
    them all one line, rotating by the function's own slot only."""
    for _, _, root in rendered(profile):
        lines: dict[tuple[str, int, int], set[int]] = {}
        for d in sorted((root / "sys/bus/pci/devices").iterdir()):
            config = (d / "config").read_bytes()
            if not (d / "driver").is_symlink() or not config[0x3D] or _msi_enabled(config):
                continue
            chain = [p for p in d.resolve().parts if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", p)]
            pin = config[0x3D]
            for bdf in reversed(chain[1:]):  # every device not on the root bus, the function first
                pin = ((pin - 1) + int(bdf[8:10], 16)) % 4 + 1
            key = (d.resolve().parts[-len(chain) - 1], int(chain[0][8:10], 16), pin)
            lines.setdefault(key, set()).add(int(_read(d / "irq")))
        assert lines, profile
        for key, irqs in lines.items():
            assert len(irqs) == 1, (profile, key, irqs)
        by_slot: dict[tuple[str, int], list[int]] = {}
        for (host, slot, _), irqs in lines.items():
            by_slot.setdefault((host, slot), []).extend(irqs)
        for where, shared in by_slot.items():
            assert len(set(shared)) == len(shared), (profile, where, shared)
        assert max(len(v) for v in by_slot.values()) >= (4 if profile == "dgx-h100" else 2), (profile, by_slot)


PMD_SIZE = {"x86_64": 2 << 20, "aarch64": 512 << 20}
"""The kernel's PMD mapping size: x86-64 PMD_SHIFT 21 (asm/pgtable_64_types.h); arm64 with the 64 KiB granule the
hosts run, PMD_SHIFT 29 (ARM64_HW_PGTABLE_LEVEL_SHIFT(2) with PAGE_SHIFT 16, asm/pgtable-hwdef.h)."""


def _arm64_cxl_pool() -> System:
    """cxl-pool with Grace-like arm64 hosts (64 KiB pages): the same CXL topology and regions."""
    doc = yaml.safe_load((Path(fakehw.model.__file__).parent.parent / "profiles/cxl-pool.yaml").read_text())
    doc["groups"][0]["node"]["cpu"].update(arch="arm64", vendor="ARM", model="Neoverse-V2", family=0x41,
                                           modelId=0xD4F, stepping=0, isa=["fp", "asimd"], threadsPerCore=1)
    return load_profile("cxl-pool-arm64", text=yaml.safe_dump(doc))


def test_a_cxl_dax_regions_align_is_the_kernels_pmd_size(rendered: Rendered, fast_tmp: Path) -> None:
    """drivers/dax/cxl.c (cxl_dax_region_probe) creates a CXL region's DAX region with alloc_dax_region(...,
    PMD_SIZE, ...), and its device starts with the region's alignment (drivers/dax/bus.c); daxctl shows both as
    ``align``. So it is 2 MiB on x86-64 and 512 MiB on an arm64 kernel with 64 KiB pages, not one figure for all."""
    arm = _arm64_cxl_pool()
    node = arm.nodes[0]
    render_tree(RenderContext(arm, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    (_, _, x86_root), *_ = rendered("cxl-pool")
    for root in (x86_root, fast_tmp / node.name / ROOT_DIR):
        machine = dict(line.split(": ", 1) for line in (root / "proc/hwloc-nofile-info").read_text().splitlines())
        want = PMD_SIZE[machine["Architecture"]]
        devices = sorted((root / "sys/bus/dax/devices").iterdir())
        assert devices, machine["Architecture"]
        for dev in devices:
            region = dev.resolve().parent
            assert int(_read(dev / "align")) == int(_read(region / "dax_region/align")) == want, dev.name


@pytest.mark.parametrize(("node1_bytes", "listed"), ((4096, True), (4095, False), (1, False)))
def test_has_memory_lists_the_nodes_with_a_page_of_memory(fast_tmp: Path, node1_bytes: int, listed: bool) -> None:
    """A node is in ``has_memory`` (N_MEMORY) when it has present pages (mm/mm_init.c, free_area_init sets the
    state for a node whose node_present_pages is non-zero), and in ``has_normal_memory`` when some are in
    ZONE_NORMAL, as a CPU node's DRAM is (Documentation/ABI/stable/sysfs-devices-node). The kernel counts whole
    pages: one 4 KiB page on x86-64 makes node 1 a memory node (``MemTotal: 4 kB``); less than a page is none, a
    node whose MemTotal is 0 kB."""
    doc = yaml.safe_load((Path(fakehw.model.__file__).parent.parent / "profiles/dgx-h100.yaml").read_text())
    doc["groups"][0]["node"]["numa"]["nodes"][1]["memory"] = node1_bytes
    system = load_profile("tiny-node", text=yaml.safe_dump(doc))
    node = system.nodes[0]
    assert node.cpu.arch == "amd64" and node.numa[1].cpus
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    base = fast_tmp / node.name / ROOT_DIR / NODES
    want = {0, 1} if listed else {0}
    assert _cpulist(_read(base / "has_memory")) == _cpulist(_read(base / "has_normal_memory")) == want
    assert _meminfo_kb(base / "node1/meminfo")["MemTotal"] == (4 if listed else 0)


def test_a_ports_decoders_committed_counts_its_decoders_of_committed_regions(rendered: Rendered) -> None:
    """drivers/cxl/core/port.c: ``decoders_committed`` is cxl_num_decoders_committed(port), port->commit_end + 1,
    and HDM decoders commit in index order (hdm.c, cxl_decoder_commit refuses one past commit_end + 1), so a port
    with N committed decoders has them at indices 0..N-1. A decoder is committed when the region it holds is
    (``regionN/commit`` 1): region0 of cxl-pool from boot, and the pooled logical devices' regions."""
    for _, _, root in rendered("cxl-pool"):
        devices = root / CXL_DEVICES
        ports = [p for p in sorted(devices.glob("*")) if (p / "decoders_committed").exists()]
        assert len(ports) >= 6
        committed_ports = 0
        for port in ports:
            pid = port.name.removeprefix("port").removeprefix("endpoint")
            decoders = sorted(port.resolve().glob(f"decoder{pid}.*"), key=lambda d: int(d.name.split(".")[1]))
            assert decoders, port.name
            flags = []
            for d in decoders:
                region = _read(d / "region")
                flags.append(bool(region) and _read(devices / region / "commit") == "1")
            n = int(_read(port / "decoders_committed"))
            assert flags == [True] * n + [False] * (len(flags) - n), (port.name, n, flags)
            committed_ports += n > 0
        assert committed_ports >= 4


NVIDIA_NODES = {"nvidiactl": ("nvidia", 255), "nvidia-modeset": ("nvidia", 254), "nvidia-uvm": ("nvidia-uvm", 0),
                "nvidia-uvm-tools": ("nvidia-uvm", 1), "nvidia-nvswitchctl": ("nvidia-nvswitch", 255)}
"""The NVIDIA driver's fixed minors (open-gpu-kernel-modules): nv-chardev-numbers.h's
NV_MINOR_DEVICE_NUMBER_CONTROL_DEVICE 255 and _MODESET_DEVICE 254 on major 195; uvm_common.h's
NVIDIA_UVM_PRIMARY_MINOR_NUMBER 0 and NVIDIA_UVM_TOOLS_MINOR_NUMBER 1 on UVM's region; linux_nvswitch.c's
NVSWITCH_CTL_MINOR 255 on the NVSwitch region; ``nvidiaN`` and ``nvidia-nvswitchN`` have minor N."""


@pytest.mark.parametrize("profile", ("dgx-h100", "gb200-nvl72"))
def test_nvidia_device_nodes_have_the_drivers_minors(rendered: Rendered, profile: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("device nodes are regular files without root")
    for _, _, root in rendered(profile):
        majors = {name: major for major, names in _char_majors(root).items() for name in names}
        dev = root / "dev"
        seen = 0
        for path in sorted(dev.glob("nvidia*")):
            if path.is_dir():
                continue
            rdev = os.lstat(path).st_rdev
            name = path.name
            if name in NVIDIA_NODES:
                region, minor = NVIDIA_NODES[name]
            else:
                stem = name.rstrip("0123456789")
                assert stem in ("nvidia", "nvidia-nvswitch"), (profile, name)
                region, minor = stem, int(name[len(stem):])
            assert (os.major(rdev), os.minor(rdev)) == (majors[region], minor), (profile, name)
            seen += 1
        assert seen >= 6, profile


def test_imex_channel_count_is_the_registry_default_and_channel0_its_first_minor(rendered: Rendered) -> None:
    """nv-reg.h: NVreg_ImexChannelCount defaults to 2048 (NV_DEFINE_REG_ENTRY_GLOBAL), the minors of the
    ``nvidia-caps-imex-channels`` region (nv-caps-imex.c); ``channelN`` is minor N, so ``channel0`` is minor 0 of
    that major. GB200 NVL72 racks load the driver with NVreg_CreateImexChannel0=1 (the default is 0), which
    params shows."""
    (_, _, root), *_ = rendered("gb200-nvl72")
    params = dict(line.split(": ", 1) for line in (root / "proc/driver/nvidia/params").read_text().splitlines())
    assert (params["ImexChannelCount"], params["CreateImexChannel0"]) == ("2048", "1")
    if os.geteuid() == 0:
        majors = {name: major for major, names in _char_majors(root).items() for name in names}
        rdev = os.lstat(root / "dev/nvidia-caps-imex-channels/channel0").st_rdev
        assert (os.major(rdev), os.minor(rdev)) == (majors["nvidia-caps-imex-channels"], 0)


SAPPHIRE_RAPIDS_CACHES = [(1, "Data", "48K", 12, 64), (1, "Instruction", "32K", 8, 64),
                          (2, "Unified", "2048K", 16, 2048), (3, "Unified", "107520K", 15, 114688)]
"""A Xeon Platinum 8480C's (Sapphire Rapids, DGX H100) caches as CPUID leaf 4 reports them and the kernel shows
them in ``cache/indexN`` (arch/x86/kernel/cpu/cacheinfo.c): level, type, size, ways, sets. ``lscpu -C`` on these
machines prints the same: L1d 48K 12-way 64 sets, L1i 32K 8-way 64 sets, L2 2M 16-way 2048 sets, L3 105M 15-way
114688 sets, 64-byte lines and one line per tag."""


def test_the_dgx_h100_cpus_cache_geometry_is_sapphire_rapids(rendered: Rendered) -> None:
    (_, _, root), *_ = rendered("dgx-h100")
    for cpu in ("cpu0", "cpu55", "cpu111"):
        got = []
        for i in range(4):
            index = root / CPUS / cpu / f"cache/index{i}"
            got.append((int(_read(index / "level")), _read(index / "type"), _read(index / "size"),
                        int(_read(index / "ways_of_associativity")), int(_read(index / "number_of_sets"))))
            assert (_read(index / "coherency_line_size"), _read(index / "physical_line_partition")) == ("64", "1")
        assert got == SAPPHIRE_RAPIDS_CACHES, cpu
    # /proc/cpuinfo's "cache size" is the last level's in KB (x86_cache_size, from the L3's leaf 4 figures)
    assert {b["cache size"] for b in _cpuinfo(root)} == {"107520 KB"}


def test_cxl_test_memdevs_sit_on_platform_devices_bound_to_the_mock_driver(rendered: Rendered) -> None:
    """ndctl's cxl_test topology (tools/testing/cxl/test/cxl.c) hangs each mock memory device on a platform device,
    ``cxl_mem.N`` (``cxl_rcd.N`` behind the restricted host), that the ``cxl_mock_mem`` driver binds (test/mem.c's
    id table has both); as every platform device it has the platform bus as ``subsystem``, ``modalias``
    ``platform:<name without its id>`` (drivers/base/platform.c) and a link under ``/sys/bus/platform/devices``,
    and, bound, a ``driver`` link."""
    (_, _, root), *_ = rendered("cxl-test")
    memdevs = sorted((root / CXL_DEVICES).glob("mem[0-9]*"))
    assert len(memdevs) >= 4
    platform = (root / "sys/bus/platform").resolve()
    for m in memdevs:
        host = m.resolve().parent
        base, _, index = host.name.partition(".")
        assert base in ("cxl_mem", "cxl_rcd") and index.isdigit(), (m.name, host.name)
        assert (host / "subsystem").resolve() == platform, m.name
        assert (host / "driver").resolve() == (platform / "drivers/cxl_mock_mem").resolve(), m.name
        assert _read(host / "modalias") == f"platform:{base}", m.name
        assert (root / "sys/bus/platform/devices" / host.name).resolve() == host, m.name


def _pool_behind_a_switch(held: bool) -> System:
    """cxl-pool plus a second pool, listed first, whose multi-logical device hangs off a switch of its own (no local
    memory device below it) on a fourth host bridge: each host holds one of its logical devices, or none."""
    doc = yaml.safe_load((Path(fakehw.model.__file__).parent.parent / "profiles/cxl-pool.yaml").read_text())
    node = doc["groups"][0]["node"]
    cxl = node["cxl"]
    cxl["hostBridges"].append({"name": "cxlhb3", "uid": 3, "numa": 0, "rootPorts": 1})
    cxl["switches"].append({"name": "cxlsw4", "parent": "cxlhb3.rp0", "downstreamPorts": 1})
    cxl["windows"].append({"name": "cfmws5", "size": "16GiB", "targets": ["cxlhb3"], "numa": 5})
    node["numa"]["nodes"].append({"id": 5, "kind": "cxl", "memory": "4GiB" if held else 0})
    doc["cxlPools"].insert(0, {"name": "pool1", "groups": ["cxl-host"], "hostPort": "cxlsw4.dp0", "window": "cfmws5",
                               "capacity": "16GiB", "logicalDevices": 4,
                               "assignments": {"0": "cxl-host-0", "1": "cxl-host-1"} if held else {}})
    return load_profile("pool-behind-a-switch", text=yaml.safe_dump(doc))


def _pool_with_two_lds_per_host() -> System:
    """cxl-pool with each host holding 2 of pool0's 16 logical devices at boot instead of 4 (NUMA node 2, where
    pooled memory onlines, declares the 8 GiB that gives)."""
    doc = yaml.safe_load((Path(fakehw.model.__file__).parent.parent / "profiles/cxl-pool.yaml").read_text())
    doc["cxlPools"][0]["assignments"] = {"0": "cxl-host-0", "1": "cxl-host-0", "4": "cxl-host-1", "5": "cxl-host-1"}
    doc["groups"][0]["node"]["numa"]["nodes"][2]["memory"] = "8GiB"
    return load_profile("two-lds-per-host", text=yaml.safe_dump(doc))


def test_a_pools_host_bridge_shows_all_its_decoders_when_the_host_holds_fewer_lds(fast_tmp: Path) -> None:
    """A host holding 2 of pool0's logical devices has 2 committed pooled regions through the pool's host bridge
    (cxlhb2, ACPI ``uid`` 2: Documentation/ABI/testing/sysfs-bus-acpi), whose port has the profile's default 4 HDM
    decoders (the HDM Decoder Capability's Decoder Count, CXL 2.0 8.2.5.12). The kernel gives every decoder a
    ``decoderN.M`` device whether or not it is committed (drivers/cxl/core/hdm.c, devm_cxl_enumerate_decoders), an
    uncommitted one with an empty HPA range (``size`` 0, port.c size_show: range_len); decoders commit in id order
    (hdm.c cxl_decoder_commit refuses an out-of-order commit), and ``decoders_committed`` is port->commit_end + 1
    (port.c). So the port shows decoders .0-.3, .0 and .1 each decoding one 4 GiB logical device (64 GiB / 16),
    .2 and .3 empty, and ``decoders_committed`` 2."""
    system = _pool_with_two_lds_per_host()
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    root = fast_tmp / node.name / ROOT_DIR
    ports = [p.resolve() for p in (root / CXL_DEVICES).glob("port*")]
    (port,) = [p for p in ports if p.parent.name == "root0" and _read(p / "uport" / "uid") == "2"]
    pid = port.name.removeprefix("port")
    decoders = sorted(d.name for d in port.glob(f"decoder{pid}.*"))
    assert decoders == [f"decoder{pid}.{i}" for i in range(4)]
    sizes = [int(_read(port / d / "size"), 0) for d in decoders]
    assert sizes == [4 << 30, 4 << 30, 0, 0]
    assert _read(port / "decoders_committed") == "2"


def _idle_pool_on_a_root_port_first() -> System:
    """cxl-pool plus a second pool, listed first, whose multi-logical device sits on the root port of a fourth host
    bridge of its own and of which no host holds a logical device."""
    doc = yaml.safe_load((Path(fakehw.model.__file__).parent.parent / "profiles/cxl-pool.yaml").read_text())
    node = doc["groups"][0]["node"]
    cxl = node["cxl"]
    cxl["hostBridges"].append({"name": "cxlhb3", "uid": 3, "numa": 0, "rootPorts": 1})
    cxl["windows"].append({"name": "cfmws5", "size": "16GiB", "targets": ["cxlhb3"], "numa": 5})
    node["numa"]["nodes"].append({"id": 5, "kind": "cxl", "memory": 0})
    doc["cxlPools"].insert(0, {"name": "pool1", "groups": ["cxl-host"], "hostPort": "cxlhb3.rp0", "window": "cfmws5",
                               "capacity": "16GiB", "logicalDevices": 4, "assignments": {}})
    return load_profile("idle-pool-first", text=yaml.safe_dump(doc))


def test_a_pools_host_bridge_decodes_its_regions_when_an_idle_pool_comes_first(fast_tmp: Path) -> None:
    """A committed region is decoded at every port between its root decoder and its endpoints
    (drivers/cxl/core/region.c, cxl_port_setup_targets gives the region a switch decoder at each port on the path,
    a host bridge's among them), whatever other pools the machine has. Here a pool no host holds anything of is
    listed before pool0, of which this host holds 4 logical devices of 4 GiB (4 committed regions): pool0's host
    bridge (cxlhb2, ACPI ``uid`` 2: Documentation/ABI/testing/sysfs-bus-acpi) still shows 4 committed decoders
    (``decoders_committed`` is port->commit_end + 1, port.c, and decoders commit in id order, hdm.c
    cxl_decoder_commit) of 4 GiB each, naming the pooled regions (seed 10547)."""
    system = _idle_pool_on_a_root_port_first()
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    root = fast_tmp / node.name / ROOT_DIR
    devices = root / CXL_DEVICES
    ports = [p.resolve() for p in devices.glob("port*")]
    (port,) = [p for p in ports if p.parent.name == "root0" and _read(p / "uport" / "uid") == "2"]
    pid = port.name.removeprefix("port")
    assert _read(port / "decoders_committed") == "4"
    decoders = [port / f"decoder{pid}.{i}" for i in range(4)]
    assert [int(_read(d / "size"), 0) for d in decoders] == [4 << 30] * 4
    regions = [_read(d / "region") for d in decoders]
    assert len(set(regions)) == 4 and all(_read(devices / r / "commit") == "1" for r in regions), regions


@pytest.mark.parametrize("held", (True, False))
def test_every_bound_cxl_port_and_memdev_has_its_decoders_and_endpoint(fast_tmp: Path, held: bool) -> None:
    """cxl_mem binds a memory device by adding its endpoint port below the port of its upstream switch
    (drivers/cxl/mem.c, devm_cxl_add_endpoint after devm_cxl_enumerate_ports adds the switch ports on the way), so
    a bound memdev, a pooled one too, has an endpoint whose ``uport`` is it, and the switch above a held pooled
    device exists even with no local device below it. cxl_port binds a port by enumerating its HDM decoders
    (drivers/cxl/port.c, devm_cxl_enumerate_decoders; switch ports must have the HDM Decoder Capability, CXL 2.0
    8.2.5.12), so every bound port has ``decoderN.M``. Both hold whether or not this host holds anything of a
    pool listed before another."""
    system = _pool_behind_a_switch(held)
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    devices = fast_tmp / node.name / ROOT_DIR / CXL_DEVICES
    endpoints = {(e / "uport").resolve(): e for e in devices.glob("endpoint*")}
    memdevs = [m for m in sorted(devices.glob("mem[0-9]*")) if (m / "driver").is_symlink()]
    assert len(memdevs) >= 8 + held
    for m in memdevs:
        assert m.resolve() in endpoints, m.name
    ports = [p for p in sorted(devices.glob("port*")) if (p / "driver").is_symlink()]
    for p in ports:
        pid = p.name.removeprefix("port")
        assert list(p.resolve().glob(f"decoder{pid}.*")), p.name
    pooled = [p for p in ports if (p / "uport").resolve().name.startswith("0000:")]
    assert len(pooled) >= 3 + held, [p.name for p in pooled]


ZERO_LINES = ("VmallocChunk", "Bounce", "Hugetlb", "HugePages_Total", "HugePages_Free", "HugePages_Rsvd",
              "HugePages_Surp")


def _meminfo_numbers(path: Path) -> dict[str, int]:
    """Every meminfo line's number, by label (``Node N`` prefixes dropped, ``kB`` or not)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("Node "):
            line = line.split(" ", 2)[2]
        label, _, rest = line.partition(":")
        out[label.strip()] = int(rest.split()[0])
    return out


@pytest.mark.parametrize("profile", ("dgx-h100", "gh200"))
def test_meminfo_lines_the_kernel_prints_as_zero_are_zero(rendered: Rendered, profile: str) -> None:
    """fs/proc/meminfo.c prints ``VmallocChunk`` as a constant 0 since 5.3 (the vmalloc walk that measured the
    largest free chunk was removed), like NFS_Unstable above; ``Bounce`` (NR_BOUNCE) counts bounce buffers, which
    only highmem and ISA DMA need and no 64-bit kernel has; the machine's and each node's ``Hugetlb``/``HugePages_*``
    are 0 with no huge page reserved (every pool's nr_hugepages is 0)."""
    (_, _, root), *_ = rendered(profile)
    machine = _meminfo_numbers(root / "proc/meminfo")
    assert {k: machine[k] for k in ZERO_LINES} == dict.fromkeys(ZERO_LINES, 0), profile
    for f in sorted((root / NODES).glob("node[0-9]*/meminfo")):
        values = _meminfo_numbers(f)
        assert [values[k] for k in ("Bounce", "HugePages_Total", "HugePages_Free", "HugePages_Surp")] == [0] * 4, f
    assert {_read(p) for p in (root / "sys/kernel/mm/hugepages").glob("*/nr_hugepages")} <= {"0"}


HDM_DECODER_COUNTS = {1, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32}
"""What the HDM Decoder Capability register's Decoder Count field can say (CXL 2.0 8.2.5.12.1: 0h-5h for 1, 2, 4,
6, 8, 10 decoders; CXL 3.0 adds 6h-Ch for 12, 14, 16, 20, 24, 28, 32); drivers/cxl/core/hdm.c
(cxl_hdm_decoder_count) decodes it, and a port shows that many ``decoderP.N``."""


@pytest.mark.parametrize("profile", ("cxl-pool", "cxl-test"))
def test_every_cxl_port_has_a_decoder_count_the_capability_encodes(rendered: Rendered, profile: str) -> None:
    for _, _, root in rendered(profile):
        devices = root / CXL_DEVICES
        counts = {}
        for port in sorted(devices.glob("*")):
            if not (port / "decoders_committed").exists():
                continue
            pid = port.name.removeprefix("port").removeprefix("endpoint")
            indices = sorted(int(d.name.split(".")[1]) for d in port.resolve().glob(f"decoder{pid}.*"))
            assert indices == list(range(len(indices))), (profile, port.name, indices)
            counts[port.name] = len(indices)
        assert len(counts) >= 6, profile
        assert {n for n in counts.values() if n not in HDM_DECODER_COUNTS} == set(), (profile, counts)


@pytest.mark.parametrize(("profile", "kind"), (("dgx-h100", "DMA-FQ"), ("gh200", "DMA")))
def test_iommu_groups_default_domain_is_the_architectures(rendered: Rendered, profile: str, kind: str) -> None:
    """drivers/iommu/Kconfig's default domain type is IOMMU_DEFAULT_DMA_LAZY on x86 and IOMMU_DEFAULT_DMA_STRICT
    elsewhere, and a group's ``type`` (drivers/iommu/iommu.c, iommu_group_show_type) prints a lazy (flush-queue)
    DMA domain as ``DMA-FQ`` and a strict one as ``DMA``; no distribution kernel overrides it on the command line by
    default."""
    for _, _, root in rendered(profile):
        groups = sorted((root / "sys/kernel/iommu_groups").iterdir())
        assert groups, profile
        assert {_read(g / "type") for g in groups} == {kind}, profile


@pytest.mark.parametrize("profile", ("dgx-h100", "cxl-pool"))
def test_a_functions_resource_file_has_the_kernels_line_count(rendered: Rendered, profile: str) -> None:
    """drivers/pci/pci-sysfs.c resource_show prints ``0x%016llx 0x%016llx 0x%016llx`` for resources 0 up to
    PCI_BRIDGE_RESOURCES on a function without a subordinate bus (6 BARs, the ROM, 6 SR-IOV BARs with
    CONFIG_PCI_IOV: 13 lines) and up to DEVICE_COUNT_RESOURCE on a bridge (those and its 4 windows: 17);
    libpci's sysfs access takes line N as resource N, so a line more or less shifts every BAR lspci shows."""
    for _, _, root in rendered(profile):
        seen = set()
        for d in sorted((root / "sys/bus/pci/devices").iterdir()):
            lines = (d / "resource").read_text().splitlines()
            bridge = (d / "secondary_bus_number").exists()
            assert len(lines) == (17 if bridge else 13), (profile, d.name, len(lines))
            assert all(len(x) == 3 * 18 + 2 and x.count(" 0x") == 2 and x.startswith("0x") for x in lines), d.name
            # a resource the function does not have is all zeros (start, end and flags of an unset struct
            # resource): a BAR or ROM with no resourceN/rom file, and a bridge's closed I/O window (13) and its
            # unused fourth window slot (16)
            unset = [i for i in range(7) if not (d / ("rom" if i == 6 else f"resource{i}")).exists()]
            for i in unset + ([13, 16] if bridge else []):
                assert lines[i] == " ".join(["0x" + "0" * 16] * 3), (profile, d.name, i, lines[i])
            seen.add(bridge)
        assert seen == {True, False}, profile


CXL_TEST_MODULES = ("cxl_test", "cxl_mock", "cxl_mock_mem")
"""The modules of the kernel's CXL emulation (tools/testing/cxl/test/Kbuild: obj-m += cxl_test.o, cxl_mock.o,
cxl_mock_mem.o). They are built only out of tree from tools/testing/cxl (``make M=tools/testing/cxl``), never by a
distribution kernel's config."""


def test_only_the_cxl_test_host_has_the_cxl_test_modules_loaded(rendered: Rendered) -> None:
    """A loaded module has ``/sys/module/<name>`` with ``initstate`` reading ``live`` (kernel/module/sysfs.c,
    mod_sysfs_setup; libkmod's loaded-module test); an unloaded one has no directory. ndctl's cxl-topology.sh
    starts with ``modprobe cxl_test``: the mock root ``cxl_acpi.0`` and the memdevs the ``cxl_mock_mem`` driver binds
    exist only while the emulation's modules are loaded, so the cxl-test host has all three live. cxl-pool's CXL is
    real hardware (its root is the ACPI0017 device), where none of them is loaded."""
    (_, _, mock), *_ = rendered("cxl-test")
    (_, _, real), *_ = rendered("cxl-pool")
    assert (mock / "sys/devices/platform/cxl_acpi.0").is_dir(), "the cxl-test host has no cxl_test root"
    assert (real / "sys/devices/platform/ACPI0017:00").is_dir(), "cxl-pool has no ACPI CXL root"
    for module in CXL_TEST_MODULES:
        assert _read(mock / f"sys/module/{module}/initstate") == "live", module
        assert not (real / f"sys/module/{module}").exists(), module
    assert _read(real / "sys/module/cxl_acpi/initstate") == "live"


def test_the_cxl_test_root_is_bound_to_cxl_acpi_only_while_its_bus_is_enabled(fast_tmp: Path) -> None:
    """cxl_test registers its mock CXL root as the platform device ``cxl_acpi.0`` (tools/testing/cxl/test/cxl.c,
    platform_device_alloc("cxl_acpi", 0)), which drivers/cxl/acpi.c binds through its platform id table
    (cxl_test_ids: ``cxl_acpi``): while bound, the device has a ``driver`` link to
    ``/sys/bus/platform/drivers/cxl_acpi``, the driver lists it, and its uevent starts with ``DRIVER=cxl_acpi``
    (drivers/base/platform.c, platform_uevent after dev_uevent's DRIVER=). ndctl's ``cxl disable-bus root0`` unbinds
    cxl_acpi from that device (cxl/lib/libcxl.c, cxl_bus_disable_invalidate: util_unbind of the bus's uport), and
    an unbound device has none of the three (drivers/base/dd.c, driver_sysfs_remove). Both states, so neither is
    shown in the other (seed 10554/10555 round)."""
    system = load_profile("cxl-test")
    node = system.nodes[0]
    engine = CxlEngine(system, [node.name])
    up = engine.settle(engine.boot(), node.name, frozenset())
    down = engine.core(node.name).set_bus(up, False)
    for label, state, bound in (("up", up, True), ("down", down, False)):
        root = _render_cxl_state(engine, node, state, fast_tmp / label)
        mock = root / "sys/devices/platform/cxl_acpi.0"
        listed = root / "sys/bus/platform/drivers/cxl_acpi/cxl_acpi.0"
        uevent = (mock / "uevent").read_text().splitlines()
        assert uevent[-1] == "MODALIAS=platform:cxl_acpi", label
        if bound:
            assert (mock / "driver").resolve() == (root / "sys/bus/platform/drivers/cxl_acpi").resolve()
            assert listed.resolve() == mock.resolve()
            assert uevent == ["DRIVER=cxl_acpi", "MODALIAS=platform:cxl_acpi"]
        else:
            assert not (mock / "driver").is_symlink(), "an unbound cxl_acpi.0 still has a driver link"
            assert not listed.is_symlink(), "cxl_acpi still lists the unbound cxl_acpi.0"
            assert uevent == ["MODALIAS=platform:cxl_acpi"]


def test_a_memdev_shows_each_partitions_qos_class_only_when_it_has_that_capacity(rendered: Rendered) -> None:
    """drivers/cxl/core/memdev.c: ``ram/size`` and ``pmem/size`` are always present (0x0 for a partition the device
    lacks), but ``ram/qos_class`` and ``pmem/qos_class`` are hidden by cxl_ram_visible / cxl_pmem_visible while the
    partition's perf qos_class is CXL_QOS_CLASS_INVALID, which it stays for a partition with no capacity (the QoS
    class is only set for the DPA ranges the device has); when shown it is ``%d\n`` of the class
    (Documentation/ABI/testing/sysfs-bus-cxl, memX/ram/qos_class). cxl_test's devices carry FAKE_QTG_ID, 42
    (tools/testing/cxl/test/cxl.c). The cxl-test host has both kinds: ``cxl_mem`` devices with 1 GiB volatile and
    1 GiB persistent, and the RCH's ``cxl_rcd.10`` with 2 GiB volatile only (the profile's header, after
    tools/testing/cxl/test/mem.c's DEV_SIZE split and the RCD's volatile-only capacity); cxl-pool adds a device with no
static capacity at all, its pooled dynamic-capacity device (whose QoS class is its platform's, so only the
attributes' presence is held there) (seed 10554/10555 round)."""
    kinds = set()
    for profile in ("cxl-test", "cxl-pool"):
        (_, _, root), *_ = rendered(profile)
        for link in sorted((root / CXL_DEVICES).glob("mem*")):
            mem = link.resolve()
            sizes = {part: int(_read(mem / part / "size"), 16) for part in ("ram", "pmem")}
            for part, size in sizes.items():
                if not size:
                    assert not (mem / part / "qos_class").exists(), (profile, link.name, part)
                elif profile == "cxl-test":
                    assert _read(mem / part / "qos_class") == "42", (link.name, part)
                else:
                    assert (mem / part / "qos_class").is_file(), (profile, link.name, part)
            kinds.add(tuple(part for part, size in sizes.items() if size))
    assert kinds == {("ram", "pmem"), ("ram",), ()}, kinds


def test_a_function_no_driver_enabled_shows_the_interrupt_line_firmware_left(rendered: Rendered) -> None:
    """Before a driver enables a function, its ``irq`` attribute (drivers/pci/pci-sysfs.c, irq_show: pdev->irq, MSI
    being off until a driver turns it on) is what drivers/pci/probe.c, pci_read_irq, read at enumeration: the
    Interrupt Line register (config 0x3C) when the Interrupt Pin register (0x3D) names a pin, else 0. On x86 with
    ACPI IRQ routing nothing rewrites it before pci_enable_device (pci_acpi_init makes init_irq a no-op, so
    pcibios_fixup_irqs does not run); 255 is the PCI Local Bus spec's "unknown or no connection" (6.2.4), what lspci
    -v prints as "pin A routed to IRQ 255" for an unbound device. Every function of the built-in profiles has a
    driver, so the rule is checked on each function of dgx-h100 taken without its driver."""
    (system, node, _), *_ = rendered("dgx-h100")
    lay = node_layout(system, node)
    assert lay.functions
    for fn in lay.functions:
        bare = dataclasses.replace(fn, driver=None)
        config = config_space(bare)
        expected = config[0x3C] if config[0x3D] else 0
        assert interrupt(lay, bare) == expected, (fn.bdf, config[0x3C], config[0x3D])


def _mig_cap_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """nv-caps.c's numbering (MIG user guide, "Device Nodes and Capabilities": its mig-minors table starts ``config
    1``, ``monitor 2``, ``gpu0/gi0/access 3``, ``gpu0/gi0/ci0/access 4``): per GPU minor 15 GPU instances, each its
    own access and eight compute instances'."""
    base = 3 + gpu_minor * 15 * 9 + gi * 9
    return base if ci is None else base + 1 + ci


def test_a_mig_gpus_instances_have_their_capabilities_and_device_nodes(rendered: Rendered) -> None:
    """The driver creates ``/proc/driver/nvidia/capabilities/gpuN/mig/giX/access`` and ``.../giX/ciY/access`` for
    each GPU and compute instance that exists, with ``DeviceFileMinor`` naming the ``/dev/nvidia-caps/nvidia-capM``
    node a process opens to prove access (MIG user guide, "Device Nodes and Capabilities"; NVIDIA's device plugin
    hands out those nodes). dgx-a100 boots gpu7 (bus 0000:bd:00.0) in MIG mode with two 3g.40gb instances, each with
    its default full compute instance: on an A100 the two 3g slots are GPU instances 1 and 2 (the guide's example
    creating two 3g instances, profile ID 9, with ``-C`` gets GPU instance IDs 2 and 1, compute instance 0 in each).
    The GPUs not in MIG mode have no instance capabilities."""
    (_, _, root), *_ = rendered("dgx-a100")
    info = dict(line.split(":", 1) for line in
                (root / "proc/driver/nvidia/gpus/0000:bd:00.0/information").read_text().splitlines())
    minor = int(info["Device Minor"])
    caps = root / "proc/driver/nvidia/capabilities"
    instance_files = sorted(str(f.relative_to(caps)) for f in caps.glob("gpu*/mig/gi*/**/access"))
    assert instance_files == [f"gpu{minor}/mig/gi{gi}/{rest}access" for gi in (1, 2) for rest in ("", "ci0/")]
    majors = {name: major for major, names in _char_majors(root).items() for name in names}
    for gi in (1, 2):
        for path, cap in ((f"gi{gi}/access", _mig_cap_minor(minor, gi)),
                          (f"gi{gi}/ci0/access", _mig_cap_minor(minor, gi, 0))):
            fields = dict(line.split(": ", 1) for line in (caps / f"gpu{minor}/mig/{path}").read_text().splitlines())
            assert fields["DeviceFileMinor"] == str(cap), path
            node = root / f"dev/nvidia-caps/nvidia-cap{cap}"
            assert node.exists() or node.is_symlink(), node
            if os.geteuid() == 0:
                rdev = os.lstat(node).st_rdev
                assert (os.major(rdev), os.minor(rdev)) == (majors["nvidia-caps"], cap), path


def test_a_mock_memdev_on_a_root_port_hangs_below_that_port(fast_tmp: Path) -> None:
    """cxl_mem's port enumeration (drivers/cxl/core/port.c, devm_cxl_enumerate_ports) finds a memdev's upstream
    dport as the grandparent of the memdev device (memdev -> its PCI or mock platform device -> the dport), and adds
    the endpoint below the port that owns that dport, with it as ``parent_dport``. cxl_test hangs its devices off
    switch downstream ports (tools/testing/cxl/test/cxl.c), but the platform's layout also holds a device cabled
    straight to a root port, as PCIe hosts do: the cxl-test machine with host bridge 2's switch removed and
    ``cxl_mem.8`` on its root port ``cxl_root_port.4`` renders, the memdev below that root port, its endpoint below
    host bridge 2's port with ``cxl_root_port.4`` as parent_dport."""
    text = (Path(fakehw.model.__file__).parent.parent / "profiles/cxl-test.yaml").read_text()
    lines = text.splitlines(True)
    switch4 = next(line for line in lines if line.startswith("          - {name: cxlsw4, parent: cxlhb2.rp0,"))
    mem9 = next(line for line in lines if line.startswith("          - {name: mem9,"))
    assert switch4 in text and "parent: cxlsw4.dp0," in text
    text = text.replace(switch4, "").replace(mem9, "").replace("parent: cxlsw4.dp0,", "parent: cxlhb2.rp0,")
    system = load_profile("cxl-test-root-port", text=text.replace("name: cxl-test\n", "name: cxl-test-root-port\n", 1))
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp))
    devices = fast_tmp / ROOT_DIR / "sys/bus/cxl/devices"
    platform = fast_tmp / ROOT_DIR / "sys/devices/platform"
    mem8 = (devices / "mem8").resolve()
    root_port = (platform / "cxl_host_bridge.2/cxl_root_port.4").resolve()
    assert mem8.parent.parent == root_port, mem8
    endpoints = [e.resolve() for e in devices.glob("endpoint*") if (e / "uport").resolve() == mem8]
    assert len(endpoints) == 1, endpoints
    (endpoint,) = endpoints
    assert (endpoint / "parent_dport").resolve() == root_port
    assert (endpoint.parent / "uport").resolve() == (platform / "cxl_host_bridge.2").resolve()


@pytest.mark.parametrize("profile", ("t4-cloud", "dgx-h100", "dgx-a100"))
def test_every_gpu_the_driver_attaches_has_its_mig_capability_directory(rendered: Rendered, profile: str) -> None:
    """The NVIDIA driver registers every GPU it attaches with its capability framework (open-gpu-kernel-modules,
    gpu_mgr.c: gpumgrAttachGpu -> _gpumgrRegisterRmCapsForGpu -> os.c osRmCapRegisterGpu), which creates
    ``/proc/driver/nvidia/capabilities/gpu<minor>`` and, below it, ``mig`` whether or not the GPU can do MIG (its
    comment: "Add MIG directory only if SMC is enabled. For now, always add "mig" directory", Bug 2679591). So a T4,
    which has no MIG, has ``gpu0/mig`` like an H100 or an A100; the GPU instances' ``giX`` directories go below it
    only when they exist (osRmCapRegisterSmcPartition)."""
    (_, node, root), *_ = rendered(profile)
    caps = root / "proc/driver/nvidia/capabilities"
    minors = sorted(int(_read(d / "information").split("Device Minor:")[1].split()[0])
                    for d in (root / "proc/driver/nvidia/gpus").iterdir())
    assert len(minors) == len(node.gpus), minors
    assert sorted(d.name for d in caps.glob("gpu*")) == sorted(f"gpu{m}" for m in minors)
    for m in minors:
        assert (caps / f"gpu{m}/mig").is_dir(), (profile, m)


@pytest.mark.parametrize("profile", ("cxl-pool", "cxl-test"))
def test_a_switch_decoders_target_list_has_one_port_per_interleave_way(rendered: Rendered, profile: str) -> None:
    """drivers/cxl/core/port.c emit_target_list (``target_list`` of a switch or host bridge decoder) prints the port
    ids of ``target[0]`` .. ``target[interleave_ways - 1]``, stopping at the first way with no dport, so the list never
    has more entries than ``interleave_ways``; a committed decoder has a dport for every way (region.c
    cxl_port_setup_targets fills ``cxlsd->target[]`` for each of the decoder's ways before hdm.c commits it, and the
    CXL HDM decoder's Target List register holds one Target Port Identifier per interleave way, CXL 3.1 8.2.4.20.11),
    so its list has exactly ``interleave_ways`` entries. cxl-pool's pooled regions pass their host bridge through
    one decoder each with a single target (the root port the pool hangs off): 1 way. An idle decoder is 1 way (hdm.c
    init_hdm_decoder reads the Control register's IW field, 0 = 1 way at reset, and the target map only for
    i < interleave_ways; ndctl's cxl_test mock sets interleave_ways 1 in default_mock_decoder), so it lists one port
    at most, never every dport of its port."""
    for _, _, root in rendered(profile):
        committed = 0
        for link in sorted((root / CXL_DEVICES).glob("decoder*.*")):
            if _read(link / "devtype") != "cxl_decoder_switch":
                continue
            ways = int(_read(link / "interleave_ways"))
            listed = [t for t in _read(link / "target_list").split(",") if t]
            assert len(listed) <= ways, (profile, link.name, ways, listed)
            if int(_read(link / "size"), 16) > 0:
                committed += 1
                assert len(listed) == ways, (profile, link.name, ways, listed)
        assert committed >= 2, profile


def _possible_cpus(root: Path) -> int:
    """How many CPUs ``/sys/devices/system/cpu/possible`` lists."""
    count = 0
    for part in _read(root / "sys/devices/system/cpu/possible").split(","):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count


PAGEVEC_SIZE = 31
"""include/linux/pagevec.h: the folios one folio_batch holds (31 since 6.5, 15 before; the larger bound is used)."""


@pytest.mark.parametrize("profile", PROFILES)
def test_the_page_cache_is_on_the_lru_lists_of_a_machine_at_rest(rendered: Rendered, profile: str) -> None:
    """Every folio added to the page cache goes onto an LRU list (mm/filemap.c filemap_add_folio calls folio_add_lru;
    shmem's are swap-backed, on the anon lists, and a locked one on the unevictable list), and the swap cache's are
    anon pages on the anon lists. Between the two a folio waits only in its CPU's ``lru_add`` batch (mm/swap.c
    folio_add_lru: the batch is moved onto the lists when it is full or at once for a large folio), so on a machine
    at rest, where nothing isolates folios (no reclaim, compaction or migration: the fake runs nothing, its
    ``Dirty`` and ``Writeback`` are 0), the page cache (``FilePages``, NR_FILE_PAGES) exceeds the file LRU lists plus
    ``Shmem``, ``SwapCached`` and ``Unevictable`` by at most PAGEVEC_SIZE order-0 folios per possible CPU. The other
    direction is test_meminfo_counters_fit_inside_each_other's. (The development machine's own node0, kernel 6.18,
    showed 36 kB between the two on 2026-11-27: 9 pages in flight.)"""
    for _, _, root in rendered(profile):
        machine = _meminfo_kb(root / "proc/meminfo")
        in_flight_kb = _possible_cpus(root) * PAGEVEC_SIZE * _page_kb(root)
        for f in sorted((root / NODES).glob("node[0-9]*/meminfo")):
            m = _meminfo_kb(f)
            on_lists = (m["Active(file)"] + m["Inactive(file)"] + m["Shmem"] + m["Unevictable"]
                        + machine["SwapCached"])
            assert m["FilePages"] - on_lists <= in_flight_kb, (profile, f.parent.name, m["FilePages"], on_lists)
        cache = machine["Cached"] + machine["Buffers"] + machine["SwapCached"]
        on_lists = machine["Active(file)"] + machine["Inactive(file)"] + machine["Shmem"] + machine["Unevictable"]
        assert cache - on_lists <= in_flight_kb, (profile, cache, on_lists)


ARCH_CAN_PCI_MMAP_WC = {"dgx-h100": True, "gh200": True, "riscv-nvlink-fusion": False}
"""``arch_can_pci_mmap_wc()`` of each profile's architecture: x86 ``pat_enabled()`` (arch/x86/include/asm/pci.h;
dgx-h100's CPUs have ``pat`` in /proc/cpuinfo), arm64 1 (arch/arm64/include/asm/pci.h), and RISC-V, whose
asm/pci.h (through 6.18) does not define it, include/linux/pci.h's fallback 0."""


@pytest.mark.parametrize("profile", sorted(ARCH_CAN_PCI_MMAP_WC))
def test_only_prefetchable_bars_have_a_write_combining_resource_file(rendered: Rendered, profile: str) -> None:
    """drivers/pci/pci-sysfs.c (pci_create_resource_files): each BAR with a size gets ``resourceN``; a BAR whose
    resource has IORESOURCE_PREFETCH (0x2000 in the flags column of ``resource``, which lspci and libpciaccess read)
    also gets ``resourceN_wc``, its write-combining mapping, when the architecture can map one
    (``arch_can_pci_mmap_wc()``). A non-prefetchable BAR never has one."""
    (_, _, root), *_ = rendered(profile)
    functions = sorted((root / "sys/bus/pci/devices").iterdir())
    prefetchable_seen = 0
    for link in functions:
        fn = link.resolve()
        for n, line in enumerate((fn / "resource").read_text().splitlines()[:6]):
            start, end, flags = (int(x, 16) for x in line.split())
            if end <= start:
                continue
            prefetchable = bool(flags & 0x2000)
            prefetchable_seen += prefetchable
            assert (fn / f"resource{n}").exists(), (profile, link.name, n)
            assert (fn / f"resource{n}_wc").exists() == (prefetchable and ARCH_CAN_PCI_MMAP_WC[profile]), (
                profile, link.name, n, hex(flags))
    assert prefetchable_seen >= 4, profile


TCE_BYPASS_MODE = {535: "0", 550: "0", 560: "0", 570: None, 580: None, 595: None}
"""``TCEBypassMode`` in /proc/driver/nvidia/params per branch (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/
nv-reg.h): every tag from 530.30.02 to 565.77 (89 tags) defines NV_DEFINE_REG_ENTRY(__NV_TCE_BYPASS_MODE,
NV_TCE_BYPASS_MODE_DEFAULT), the default being 0 ("system default TCE mode"), and lists it in nv_parms; from 570.86.15
to 595.45.04 (57 tags) the option and its nv_parms entry are gone, so nv-procfs.c, which prints nv_parms, has no such
line. None: no line. (fakehw knows no branch between 560 and 570, nor does the repository have a tag there.)"""


@pytest.mark.parametrize("branch", sorted(TCE_BYPASS_MODE))
def test_nvidia_params_show_tce_bypass_mode_only_on_branches_that_have_it(branch: int) -> None:
    system = load_profile("dgx-h100")
    system = dataclasses.replace(system, driver=dataclasses.replace(system.driver, version=f"{branch}.104.05"))
    entry = nvidia_static_section(system, system.nodes[0]).entries["proc/driver/nvidia/params"]
    assert isinstance(entry, File)
    assert _params(entry.data.decode()).get("TCEBypassMode") == TCE_BYPASS_MODE[branch]


_NV_PARMS_535 = ["ResmanDebugLevel", "RmLogonRC", "ModifyDeviceFiles", "DeviceFileUID", "DeviceFileGID",
                 "DeviceFileMode", "InitializeSystemMemoryAllocations", "UsePageAttributeTable", "EnableMSI",
                 "EnablePCIeGen3", "MemoryPoolSize", "KMallocHeapMaxSize", "VMallocHeapMaxSize", "IgnoreMMIOCheck",
                 "TCEBypassMode", "EnableStreamMemOPs", "EnableUserNUMAManagement", "NvLinkDisable",
                 "RmProfilingAdminOnly", "PreserveVideoMemoryAllocations", "EnableS0ixPowerManagement",
                 "S0ixPowerManagementVideoMemoryThreshold", "DynamicPowerManagement",
                 "DynamicPowerManagementVideoMemoryThreshold", "RegisterPCIDriver", "EnablePCIERelaxedOrderingMode",
                 "EnableResizableBar", "EnableGpuFirmware", "EnableGpuFirmwareLogs", "EnableDbgBreakpoint",
                 "OpenRmEnableUnsupportedGpus", "DmaRemapPeerMmio"]
_NV_PARMS_570 = ["ResmanDebugLevel", "RmLogonRC", "ModifyDeviceFiles", "DeviceFileUID", "DeviceFileGID",
                 "DeviceFileMode", "InitializeSystemMemoryAllocations", "UsePageAttributeTable", "EnableMSI",
                 "EnablePCIeGen3", "MemoryPoolSize", "KMallocHeapMaxSize", "VMallocHeapMaxSize", "IgnoreMMIOCheck",
                 "EnableStreamMemOPs", "EnableUserNUMAManagement", "NvLinkDisable", "RmProfilingAdminOnly",
                 "PreserveVideoMemoryAllocations", "EnableS0ixPowerManagement",
                 "S0ixPowerManagementVideoMemoryThreshold", "DynamicPowerManagement",
                 "DynamicPowerManagementVideoMemoryThreshold", "RegisterPCIDriver", "EnablePCIERelaxedOrderingMode",
                 "EnableResizableBar", "EnableGpuFirmware", "EnableGpuFirmwareLogs", "RmNvlinkBandwidthLinkCount",
                 "EnableDbgBreakpoint", "OpenRmEnableUnsupportedGpus", "DmaRemapPeerMmio", "ImexChannelCount",
                 "CreateImexChannel0", "GrdmaPciTopoCheckOverride"]
_NV_PARMS_595 = ["ResmanDebugLevel", "RmLogonRC", "ModifyDeviceFiles", "DeviceFileUID", "DeviceFileGID",
                 "DeviceFileMode", "InitializeSystemMemoryAllocations", "UsePageAttributeTable", "EnableMSI",
                 "EnablePCIeGen3", "MemoryPoolSize", "KMallocHeapMaxSize", "VMallocHeapMaxSize", "IgnoreMMIOCheck",
                 "EnableStreamMemOPs", "EnableUserNUMAManagement", "NvLinkDisable", "RmProfilingAdminOnly",
                 "PreserveVideoMemoryAllocations", "UseKernelSuspendNotifiers", "EnableS0ixPowerManagement",
                 "S0ixPowerManagementVideoMemoryThreshold", "DynamicPowerManagement",
                 "DynamicPowerManagementVideoMemoryThreshold", "TegraGpuPgMask", "RegisterPCIDriver",
                 "EnablePCIERelaxedOrderingMode", "EnableResizableBar", "EnableGpuFirmware", "EnableGpuFirmwareLogs",
                 "RmNvlinkBandwidthLinkCount", "EnableDbgBreakpoint", "OpenRmEnableUnsupportedGpus", "DmaRemapPeerMmio",
                 "ImexChannelCount", "CreateImexChannel0", "GrdmaPciTopoCheckOverride", "EnableSystemMemoryPools"]
NV_PARMS_BY_BRANCH = {
    535: _NV_PARMS_535,
    550: [*_NV_PARMS_535, "ImexChannelCount"],
    555: [*_NV_PARMS_535, "ImexChannelCount", "CreateImexChannel0"],
    560: [*_NV_PARMS_535, "ImexChannelCount", "CreateImexChannel0"],
    570: _NV_PARMS_570, 575: _NV_PARMS_570, 580: _NV_PARMS_570,
    590: [n for n in _NV_PARMS_595 if n != "UseKernelSuspendNotifiers"],
    595: _NV_PARMS_595,
}
"""The numeric entries of nv_parms (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-reg.h; the entry of
__NV_RM_PROFILING_ADMIN_ONLY prints as ``RmProfilingAdminOnly``), in order, of the newest tag of each branch fakehw
knows and the repository has: 535.288.01, 550.163.01, 555.58.02, 560.35.03, 570.211.01, 575.64.05, 580.142,
590.48.01, 595.45.04 (read from each tag, 2026-11-27)."""
NV_PARMS_NEW_DEFAULTS = {590: {"RmNvlinkBandwidthLinkCount": "0", "GrdmaPciTopoCheckOverride": "0",
                               "TegraGpuPgMask": "0", "EnableSystemMemoryPools": "529"},
                         595: {"RmNvlinkBandwidthLinkCount": "0", "GrdmaPciTopoCheckOverride": "0",
                               "TegraGpuPgMask": "4294967295", "EnableSystemMemoryPools": "529",
                               "UseKernelSuspendNotifiers": "0", "ImexChannelCount": "2048",
                               "CreateImexChannel0": "0"}}
"""NV_DEFINE_REG_ENTRY(_GLOBAL) defaults of the entries the older branches lack (nv-reg.h of 590.48.01 and 595.45.04):
NV_ENABLE_SYSTEM_MEMORY_POOLS_DEFAULT is 0x00000211; __NV_TEGRA_GPU_PG_MASK is 0 in 590 and ~0 in 595;
NV_REG_GRDMA_PCI_TOPO_CHECK_OVERRIDE_DEFAULT 0; CreateImexChannel0 0 (a node outside an NVLink rack sets nothing)."""


@pytest.mark.parametrize("branch", sorted(NV_PARMS_BY_BRANCH))
def test_nvidia_params_print_the_branchs_nv_parms_in_order(branch: int) -> None:
    """kernel-open/nvidia/nv-procfs.c (nv_procfs_read_params) prints every entry of nv_parms in table order as
    ``Name: %u``, then the string parameters quoted; so the numeric lines of a node of branch N are exactly that
    branch's nv_parms (a dgx-h100 node, outside any NVLink rack)."""
    system = load_profile("dgx-h100")
    system = dataclasses.replace(system, driver=dataclasses.replace(system.driver, version=f"{branch}.104.05"))
    entry = nvidia_static_section(system, system.nodes[0]).entries["proc/driver/nvidia/params"]
    assert isinstance(entry, File)
    params = _params(entry.data.decode())
    numeric = [k for k, v in params.items() if not v.startswith('"')]
    assert numeric == NV_PARMS_BY_BRANCH[branch]
    for name, value in NV_PARMS_NEW_DEFAULTS.get(branch, {}).items():
        assert params[name] == value, (branch, name)


def test_the_mig_minors_table_is_nv_caps_c_s_32_gpus_and_fabric_imex_mgmt_follows_it(rendered: Rendered) -> None:
    """kernel-open/nvidia/nv-caps.c (NVIDIA/open-gpu-kernel-modules) numbers its tables in the order
    nv_cap_tables_init initialises them, one static counter across all: nvlink's fabric-mgmt 0, mig/config 1,
    mig/monitor 2, then g_nv_cap_mig_gpu_table, NV_CAP_MIG_GI_ENTRIES of gpu0 to gpu31 (each gi0..gi14: the GPU
    instance's access, then NV_CAP_MIG_CI_ENTRIES ci0..ci7), then g_nv_cap_sys_table's fabric-imex-mgmt.
    nv_procfs_read_mig_minors prints config and monitor then the GPU table in order (``gpu%d/%s %d``). So
    mig-minors has 2 + 32 * 15 * 9 lines, ends with ``gpu31/gi14/ci7/access 4322``, names no gpu32, and
    sys-minors is ``fabric-imex-mgmt 4323`` (the minor test_gb200_rack.py finds on the GB200 capture's rack)."""
    (_, _, root), *_ = rendered("gb200-nvl72")
    caps = root / "proc/driver/nvidia-caps"
    lines = (caps / "mig-minors").read_text().splitlines()
    assert len(lines) == 2 + 32 * 15 * 9
    assert lines[:4] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4"]
    assert lines[-1] == "gpu31/gi14/ci7/access 4322"
    assert lines[-9] == "gpu31/gi14/access 4314"
    assert not [line for line in lines if line.startswith("gpu32/")]
    assert (caps / "sys-minors").read_text() == "fabric-imex-mgmt 4323\n"


@pytest.mark.parametrize(("branch", "imex"), ((535, False), (550, True), (580, True)))
def test_the_imex_channel_region_exists_from_branch_550(branch: int, imex: bool) -> None:
    """kernel-open/nvidia/nv-caps-imex.c registers ``nvidia-caps-imex-channels`` with alloc_chrdev_region for
    NVreg_ImexChannelCount minors, an entry nv-reg.h's nv_parms has from 550 on and 535.288.01's lacks
    (NV_PARMS_BY_BRANCH above): a dgx-h100 node (no NVLink rack) of branch 535 lists no such major in
    ``/proc/devices``, one of 550 or later does."""
    system = load_profile("dgx-h100")
    system = dataclasses.replace(system, driver=dataclasses.replace(system.driver, version=f"{branch}.104.05"))
    node = system.nodes[0]
    chars = proc_devices(system, node, node_layout(system, node)).split("Character devices:\n", 1)[1]
    names = {line.split()[1] for line in chars.split("\n\n", 1)[0].splitlines()}
    assert ("nvidia-caps-imex-channels" in names) is imex, branch
    assert "nvidia-caps" in names, branch


NVIDIA_DYNAMIC_REGIONS = ("nvidia-caps-imex-channels", "nvidia-caps", "nvidia-nvlink", "nvidia-nvswitch", "nvidia-uvm")
"""The NVIDIA driver's dynamic character regions in the order it registers them (NVIDIA/open-gpu-kernel-modules,
kernel-open/nvidia/nv.c nvidia_init_module: nv_caps_imex_init first (nv-caps-imex.c, from 550), then nv_module_init's
nv_cap_drv_init (nv-caps.c, ``nvidia-caps``) and nvlink_drivers_init, which calls nvlink_core_init (nvlink_linux.c,
``nvidia-nvlink``) and, on 64-bit builds, nvswitch_init (linux_nvswitch.c, ``nvidia-nvswitch``, registered whether or
not an NVSwitch is present); nvidia-uvm.ko, which depends on nvidia.ko, after them."""


@pytest.mark.parametrize("profile, branch", (("dgx-h100", 535), ("dgx-h100", 580), ("l40s-server", 550),
                                             ("gb200-nvl72", 580)))
def test_the_nvidia_drivers_dynamic_majors_follow_its_registration_order(profile: str, branch: int) -> None:
    """fs/char_dev.c (find_dynamic_major) gives a dynamic major from 254 down to 234 while one is free, then the
    first free one from 511 (CHRDEV_MAJOR_DYN_EXT_START) down. The NVIDIA regions the fake shows sit in the extended
    range, i.e. a host whose low range was taken when the driver loaded; there each registration takes the next
    major down, so the regions are 511, 510, ... in the driver's order (NVIDIA_DYNAMIC_REGIONS; the IMEX one only
    from 550), with no gap between them. ``nvidia-nvlink`` and ``nvidia-nvswitch`` are there on a node without
    NVSwitches too (l40s-server, dgx-h100 of 535)."""
    system = load_profile(profile)
    system = dataclasses.replace(system, driver=dataclasses.replace(system.driver, version=f"{branch}.104.05"))
    node = system.nodes[0]
    chars = proc_devices(system, node, node_layout(system, node)).split("Character devices:\n", 1)[1]
    majors = {line.split()[1]: int(line.split()[0]) for line in chars.split("\n\n", 1)[0].splitlines()}
    want = [n for n in NVIDIA_DYNAMIC_REGIONS if branch >= 550 or n != "nvidia-caps-imex-channels"]
    assert {n: majors.get(n) for n in want} == {n: 511 - i for i, n in enumerate(want)}, (profile, branch)


NVRM_MODULE = {"dgx-h100": "NVIDIA UNIX x86_64 Kernel Module", "gh200": "NVIDIA UNIX Open Kernel Module for aarch64",
               "riscv-nvlink-fusion": "NVIDIA UNIX Open Kernel Module for riscv64"}
"""How the driver names itself in ``/proc/driver/nvidia/version``, as real hosts print it: the proprietary x86-64
module ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  ...``, the open one ``NVRM version: NVIDIA UNIX
Open Kernel Module for x86_64  555.58.02  Release Build  ...`` and on arm64 ``NVIDIA UNIX Open Kernel Module for
aarch64  580.126.09  Release Build  ...`` (a GB10's, quoted in public setup notes); the fake's x86 nodes run the
proprietary module, its arm64 and RISC-V ones the open module (the only one NVIDIA builds there)."""


@pytest.mark.parametrize("profile", sorted(NVRM_MODULE))
def test_the_driver_names_its_kernel_module_as_real_hosts_print_it(profile: str) -> None:
    """``/proc/driver/nvidia/version``'s first line is ``NVRM version: `` and the module's name, then the version."""
    system = load_profile(profile)
    entry = nvidia_static_section(system, system.nodes[0]).entries["proc/driver/nvidia/version"]
    assert isinstance(entry, File)
    first = entry.data.decode().splitlines()[0]
    assert first.startswith(f"NVRM version: {NVRM_MODULE[profile]}  {system.driver.version}  "), (profile, first)


def test_a_cpu_without_an_l2_numbers_its_cache_leaves_from_index0_without_a_gap(fast_tmp: Path) -> None:
    """drivers/base/cacheinfo.c (cache_add_dev) creates ``cache/index%u`` for i from 0 to cache_leaves(cpu) - 1,
    one per cache the CPU has, so the leaves are numbered without a gap whatever level is missing; util-linux lscpu
    reads ``index0``, ``index1``, ... and stops at the first that is not there (here, given a tree with ``index2``
    missing, ``lscpu -C`` printed only L1d and L1i). An l40s-server node with its L2 taken out (the model accepts
    ``l2: 0``) has L1d, L1i and L3 as index0..index2, and lscpu, where installed, lists the L3."""
    system = load_profile("l40s-server")
    node = system.nodes[0]
    cpu = dataclasses.replace(node.cpu, caches=dataclasses.replace(node.cpu.caches, l2=0))
    node = dataclasses.replace(node, cpu=cpu)
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    root = fast_tmp / node.name / ROOT_DIR
    for c in ("cpu0", f"cpu{cpu.logical_cpus - 1}"):
        cache = root / CPUS / c / "cache"
        assert sorted(p.name for p in cache.iterdir()) == ["index0", "index1", "index2"], c
        assert [(_read(cache / f"index{i}/level"), _read(cache / f"index{i}/type")) for i in range(3)] == [
            ("1", "Data"), ("1", "Instruction"), ("3", "Unified")], c
    if shutil.which("lscpu") is None:
        return
    proc = subprocess.run(["lscpu", "-J", "-C", "--sysroot", str(root)], capture_output=True, text=True, timeout=60,
                          check=True)
    assert [c["name"] for c in json.loads(proc.stdout)["caches"]] == ["L1d", "L1i", "L3"]


def test_a_535_node_in_a_multi_node_nvlink_domain_has_no_imex_channels(fast_tmp: Path) -> None:
    """IMEX channels are nv-caps-imex.c's region of NVreg_ImexChannelCount minors, and 535's nv_parms has no
    ImexChannelCount (NV_PARMS_BY_BRANCH[535], read from 535.288.01): a 535 driver registers no
    ``nvidia-caps-imex-channels`` major and creates no ``/dev/nvidia-caps-imex-channels``, even on a node in a
    multi-node NVLink domain. Two GH200 nodes (a board the model lets run 535) joined by NVSwitches, driver
    535.288.01: neither the major, the channel directory, channel0 nor the IMEX daemon's capability is there."""
    system = _gh200_pair("535.288.01")
    node = system.nodes[0]
    assert system.domain_of(node) is not None
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    root = fast_tmp / node.name / ROOT_DIR
    assert "nvidia-caps-imex-channels" not in {n for names in _char_majors(root).values() for n in names}
    assert not (root / "dev/nvidia-caps-imex-channels").exists()
    assert not (root / "proc/driver/nvidia/capabilities/fabric-imex-mgmt").exists()


def _gh200_pair(version: str) -> System:
    """Two GH200 nodes joined by NVSwitches (one multi-node NVLink domain) on driver ``version``."""
    doc = yaml.safe_load((Path(fakehw.model.__file__).parent.parent / "profiles/gh200.yaml").read_text())
    doc["driver"] = {"version": version}
    doc["groups"][0]["count"] = 2
    doc["nvlinkDomains"] = [{"name": "pair", "groups": [doc["groups"][0]["name"]],
                             "switches": {"sku": "nvswitch-gen3", "count": 2},
                             "links": [{"from": "gpu*", "to": "sw*", "count": 9}]}]
    return load_profile(f"gh200-pair-{version}", text=yaml.safe_dump(doc))


@pytest.mark.parametrize(("version", "sys_minors"), (("535.288.01", ""), ("550.163.01", "fabric-imex-mgmt 4323\n"),
                                                     ("580.105.08", "fabric-imex-mgmt 4323\n")))
def test_sys_minors_lists_fabric_imex_mgmt_from_branch_550(fast_tmp: Path, version: str, sys_minors: str) -> None:
    """kernel-open/nvidia/nv-caps.c (NVIDIA/open-gpu-kernel-modules) creates ``/proc/driver/nvidia-caps/sys-minors``
    in every tag (NV_CREATE_PROC_FILE("sys-minors", ...)) and nv_procfs_read_sys_minors prints one ``%s %d`` line
    per entry of g_nv_cap_sys_table; that table is empty in every 535 and 545 tag (read at 535.288.01 and 545.29.06)
    and holds only ``/driver/nvidia/capabilities/fabric-imex-mgmt`` from 550.40.07 on (550.163.01, 580.142 read).
    So on a GH200 node the file is empty under 535 and ``fabric-imex-mgmt 4323`` from 550, where its minor follows
    the mig table's 4322 (see the mig-minors test above)."""
    system = _gh200_pair(version)
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    caps = fast_tmp / node.name / ROOT_DIR / "proc/driver/nvidia-caps"
    assert (caps / "sys-minors").read_text() == sys_minors
    assert (caps / "nvlink-minors").read_text() == "fabric-mgmt 0\n"


def test_a_550_node_in_a_multi_node_nvlink_domain_has_the_imex_region_but_no_channel0(fast_tmp: Path) -> None:
    """550's nv-caps-imex.c registers the ``nvidia-caps-imex-channels`` region (NVreg_ImexChannelCount, 2048), but
    NVreg_CreateImexChannel0, the option that has channel 0 created for every user (nv-reg.h: "the channel will be
    created automatically when an application (e.g. nvidia-smi, nvidia-persistenced) is run"), first appears in
    555.42.02's nv-reg.h and nv-caps-imex.c (no 550 tag, 550.40.07 to 550.163.01, names it): on 550 an
    administrator makes channel nodes by hand. Two GH200 nodes in one NVLink domain on 550.163.01: the major and
    ``fabric-imex-mgmt`` are there, ``channel0`` is not, and params has no CreateImexChannel0 line."""
    system = _gh200_pair("550.163.01")
    node = system.nodes[0]
    assert system.domain_of(node) is not None
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
    root = fast_tmp / node.name / ROOT_DIR
    assert "nvidia-caps-imex-channels" in {n for names in _char_majors(root).values() for n in names}
    assert (root / "proc/driver/nvidia/capabilities/fabric-imex-mgmt").exists()
    assert not (root / "dev/nvidia-caps-imex-channels/channel0").exists()
    assert "CreateImexChannel0" not in (root / "proc/driver/nvidia/params").read_text()


@pytest.mark.parametrize("branch", sorted(NV_PARMS_BY_BRANCH))
def test_nvidia_params_show_the_gsp_firmware_defaults_of_every_branch(branch: int) -> None:
    """nv-reg.h (NVIDIA/open-gpu-kernel-modules) defines NV_DEFINE_REG_ENTRY(__NV_ENABLE_GPU_FIRMWARE,
    NV_REG_ENABLE_GPU_FIRMWARE_DEFAULT_VALUE), 0x00000012, and (__NV_ENABLE_GPU_FIRMWARE_LOGS,
    NV_REG_ENABLE_GPU_FIRMWARE_LOGS_ENABLE_ON_DEBUG), 0x00000002, in every tag read from 535.43.02 to 595.45.04
    (535.288.01, 545.29.06, 550.163.01, 555.58.02, 560.35.03, 565.77, 570.211.01, 575.64.05, 580.142, 590.48.01);
    nothing in kernel-open assigns NVreg_EnableGpuFirmware, so nv_procfs_read_params prints 18 and 2 on a node that
    sets no option (a dgx-h100 node of that branch)."""
    system = load_profile("dgx-h100")
    system = dataclasses.replace(system, driver=dataclasses.replace(system.driver, version=f"{branch}.104.05"))
    entry = nvidia_static_section(system, system.nodes[0]).entries["proc/driver/nvidia/params"]
    assert isinstance(entry, File)
    params = _params(entry.data.decode())
    assert (params["EnableGpuFirmware"], params["EnableGpuFirmwareLogs"]) == ("18", "2")


def test_a_journaled_region_whose_decode_the_kernel_refuses_leaves_its_port_decoders_unprogrammed(
        fast_tmp: Path) -> None:
    """A region the agent replays from its journal is taken as it was recorded (cxlstate.apply_fact does not check
    it again), so a journal written under other rules can hold an active region whose port programming the kernel
    refuses: here cxl-test's region0 (mem0 and mem4 below cxlsw0, behind cxlhb0) with a granularity of 32 KiB,
    past the 16 KiB the HDM decoders encode. drivers/cxl/core/region.c, cxl_port_setup_targets: a decode the port
    cannot take returns an error before ``cxld->interleave_ways``, ``interleave_granularity`` and ``hpa_range`` are
    set, so each port decoder the region holds keeps a range of 0 (``start`` and ``size`` 0) and is never committed
    (``decoders_committed`` counts committed decoders, port->commit_end + 1); the tree still renders (seed 10529)."""
    system = load_profile("cxl-test")
    node = system.nodes[0]
    engine = CxlEngine(system, [node.name])
    cxl = engine.settle(engine.boot(), node.name, frozenset())
    booted = cxl.regions[(node.name, "region0")]
    assert booted.committed and booted.granularity == 4096
    recorded = {**booted.to_json(), "origin": "runtime", "granularity": 32768}
    with pytest.raises(KernelError):
        engine.core(node.name).programming(Region.from_json(recorded))
    replayed = apply_fact(cxl, {"fact": "region-add", "region": recorded})
    devices = _render_cxl_state(engine, node, replayed, fast_tmp) / CXL_DEVICES
    held = [d.resolve() for d in sorted(devices.glob("decoder*"))
            if not (d / "dpa_size").exists() and (d / "region").exists() and _read(d / "region") == "region0"]
    assert len(held) == 2, [d.name for d in held]  # cxlhb0's and cxlsw0's
    for d in held:
        assert (_read(d / "start"), _read(d / "size")) == ("0x0", "0x0"), d
        assert _read(d.parent / "decoders_committed") == "0", d.parent


def test_a_host_bridge_port_unbound_from_cxl_port_has_no_decoders(fast_tmp: Path) -> None:
    """A host bridge's port keeps its HDM decoders only while cxl_port is bound to it: drivers/cxl/port.c
    (cxl_switch_port_probe) enumerates them with devm_cxl_enumerate_decoders, so they are devm resources of the
    bound port and go when the driver is unbound, the port device itself staying (it belongs to cxl_acpi). cxl-test's
    cxlhb1 port unbound: no ``decoderP.N`` below that port, while cxlhb0's port keeps its decoders."""
    system = load_profile("cxl-test")
    node = system.nodes[0]
    engine = CxlEngine(system, [node.name])
    cxl = engine.settle(engine.boot(), node.name, frozenset())
    devices = _render_cxl_state(engine, node, cxl, fast_tmp / "bound") / CXL_DEVICES
    ports = {(p / "uport").resolve().name: p.resolve() for p in devices.glob("port[0-9]*")}
    hb0, hb1 = ports["cxl_host_bridge.0"], ports["cxl_host_bridge.1"]
    assert list(hb1.glob("decoder*")) and list(hb0.glob("decoder*"))
    unbound = engine.settle(engine.core(node.name).unbind_port(cxl, "cxlhb1"), node.name, frozenset())
    devices = _render_cxl_state(engine, node, unbound, fast_tmp / "unbound") / CXL_DEVICES
    ports = {(p / "uport").resolve().name: p.resolve() for p in devices.glob("port[0-9]*")}
    assert "cxl_host_bridge.1" in ports
    assert not list(ports["cxl_host_bridge.1"].glob("decoder*"))
    assert list(ports["cxl_host_bridge.0"].glob("decoder*"))


def test_a_second_region_in_a_window_carves_its_resource_out_of_the_root_decoders_range_after_the_first(
        fast_tmp: Path) -> None:
    """drivers/cxl/core/region.c, alloc_hpa: writing a region's ``size`` allocates its host physical range from its
    root decoder's window (alloc_free_mem_region on cxlrd->res, 256 MiB aligned), and ``resource`` prints the start
    of that range (region.h: "@res: Resource this region carves out of the platform decode range"); the resource
    tree gives two regions of one window disjoint ranges. cxl-test's cfmws0 (1 GiB, decoder of region0's 512 MiB)
    given a second 2-way 512 MiB region: its range lies inside the root decoder's ``start``/``size`` and past
    region0's (seed 10546: the second region's offset into the window was subtracted from its base)."""
    system = load_profile("cxl-test")
    node = system.nodes[0]
    engine = CxlEngine(system, [node.name])
    core = engine.core(node.name)
    cxl = engine.settle(engine.boot(), node.name, frozenset())
    first = cxl.regions[(node.name, "region0")]
    name = f"region{cxl.root_ids[(node.name, first.window)]}"
    state = core.create_region(cxl, first.window, "ram", name)
    state = core.set_ways(state, name, "2")
    state = core.set_granularity(state, name, "4096")
    state = core.set_size(state, name, str(512 << 20))
    devices = _render_cxl_state(engine, node, state, fast_tmp) / CXL_DEVICES
    ranges: dict[str, tuple[int, int]] = {}
    for region in ("region0", name):
        path = (devices / region).resolve()
        root = path.parent  # a region is a child of its root decoder (devm_cxl_add_region: dev->parent)
        window = int(_read(root / "start"), 16), int(_read(root / "size"), 16)
        start, size = int(_read(path / "resource"), 16), int(_read(path / "size"), 16)
        assert size == 512 << 20, (region, size)
        assert window[0] <= start and start + size <= window[0] + window[1], (region, hex(start), window)
        ranges[region] = (start, start + size)
    (a0, a1), (b0, b1) = ranges["region0"], ranges[name]
    assert a1 <= b0 or b1 <= a0, ranges
