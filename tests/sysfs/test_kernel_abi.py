"""Values of the fake tree the kernel's own code fixes, checked against that code and documentation.

These are values no consumer in the other sysfs tests reads closely enough to notice a wrong one (numactl's numastat
prints the counters without relating them, lspci reads link speeds from config space, not sysfs), so each is held
here against where the kernel defines it:

- ``nodeN/numastat``: Documentation/admin-guide/numastat.rst. numa_hit/numa_miss split the pages allocated on a
  node by the node the allocation preferred, local_node/other_node split the same pages by the node the process ran
  on, so hit + miss = local + other on every node; a miss on one node is a foreign allocation of another, so the
  misses and foreigns of a machine sum to the same.
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
- ``modalias``: drivers/pci/pci-sysfs.c prints ``bc``/``sc``/``i`` as the three bytes of the class code.
- ``/proc/driver/nvidia/params``: the driver's registry defaults (nv-reg.h, NV_DEFINE_REG_ENTRY_GLOBAL) where
  nothing overrides them: MemoryPoolSize, KMallocHeapMaxSize, VMallocHeapMaxSize, IgnoreMMIOCheck and
  NvLinkDisable 0, EnableUserNUMAManagement 1.
"""

from __future__ import annotations

import os
import stat
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.model import System
from fakehw.model.system import Node
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
        assert sum(c["numa_miss"] for c in stats.values()) == sum(c["numa_foreign"] for c in stats.values())


@pytest.mark.parametrize("profile", PROFILES)
def test_no_memory_is_hardware_corrupted_without_an_injected_memory_failure(rendered: Rendered,
                                                                            profile: str) -> None:
    for _, _, root in rendered(profile):
        line = next(line for line in (root / "proc/meminfo").read_text().splitlines()
                    if line.startswith("HardwareCorrupted:"))
        assert line.split()[1:] == ["0", "kB"], line


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


def test_cxl_region_attributes_tools_write_are_writable(rendered: Rendered) -> None:
    writable = ("size", "commit", "interleave_ways", "interleave_granularity")
    for _, _, root in rendered("cxl-pool"):
        regions = sorted((root / CXL_DEVICES).glob("region[0-9]*"))
        assert regions
        for link in regions:
            for name in writable:
                assert stat.S_IMODE(os.stat(link / name).st_mode) == 0o644, (link.name, name)


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


def test_modalias_carries_the_three_bytes_of_the_class_code(rendered: Rendered) -> None:
    (_, _, root), *_ = rendered("dgx-h100")
    for d in sorted((root / "sys/bus/pci/devices").iterdir()):
        cls = int((d / "class").read_text(), 16)
        alias = (d / "modalias").read_text().strip()
        assert alias.endswith(f"bc{cls >> 16:02X}sc{(cls >> 8) & 0xFF:02X}i{cls & 0xFF:02X}"), (d.name, alias)


NV_REG_DEFAULTS = {"MemoryPoolSize": "0", "KMallocHeapMaxSize": "0", "VMallocHeapMaxSize": "0",
                   "IgnoreMMIOCheck": "0", "NvLinkDisable": "0", "EnableUserNUMAManagement": "1"}


def test_nvidia_params_show_the_drivers_registry_defaults(rendered: Rendered) -> None:
    (_, _, root), *_ = rendered("dgx-h100")
    params = dict(line.split(": ", 1) for line in (root / "proc/driver/nvidia/params").read_text().splitlines())
    assert {k: params.get(k) for k in NV_REG_DEFAULTS} == NV_REG_DEFAULTS


def test_every_port_between_a_committed_regions_endpoints_and_the_root_decodes_it(rendered: Rendered) -> None:
    """drivers/cxl/core/region.c (cxl_port_setup_targets, commit): a committed region has a decoder programmed for
    it in every port from each target's endpoint up to the host bridge; ``cxl list -D -r`` lists them. On cxl-pool
    that includes the pooled region's path through the pool's host bridge."""
    for _, _, root in rendered("cxl-pool"):
        devices = root / CXL_DEVICES
        committed = [r for r in sorted(devices.glob("region[0-9]*")) if (r / "commit").read_text().strip() == "1"]
        assert len(committed) >= 2
        for region in committed:
            targets = sorted(region.glob("target[0-9]*"))
            assert targets, region.name
            for target in targets:
                decoder = (devices / target.read_text().strip()).resolve()
                port = decoder.parent.parent  # decoder -> its endpoint -> the port above
                assert port.name.startswith("port"), (region.name, decoder)
                while port.name.startswith("port"):
                    decoded = {(d / "region").read_text().strip() for d in port.glob("decoder*.*")}
                    assert region.name in decoded, (region.name, port.name, decoded)
                    port = port.parent


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


def test_a_cxl_dax_device_is_in_its_host_bridges_numa_node_and_targets_the_windows(rendered: Rendered) -> None:
    """A region's DAX device reports the device side's NUMA node (the host bridge's: 0 on cxl-pool) as
    ``numa_node`` and the node its memory goes online in as ``target_node`` (daxctl list prints both): the profile
    gives region0's window cfmws2 NUMA node 1 and the pool's window cfmws4 node 2."""
    for _, _, root in rendered("cxl-pool"):
        daxes = sorted((root / "sys/bus/dax/devices").glob("dax*"))
        assert daxes
        for d in daxes:
            assert (d / "numa_node").read_text().strip() == "0", d.name
            assert (d / "target_node").read_text().strip() in ("1", "2"), d.name
