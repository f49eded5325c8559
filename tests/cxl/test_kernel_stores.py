"""The kernel's CXL stores, one sysfs write at a time, on the cxl-test topology (the kernel's cxl_test).

Expected values come from the kernel, not from fakehw: errno values and order of checks from
drivers/cxl/core/region.c (create_*_region, uuid, interleave_ways/granularity, size/alloc_hpa, targetN through
cxl_region_attach and cxl_port_setup_targets, commit), hdm.c (dpa_size: free in decreasing, allocate in
increasing decoder order, 256 MiB aligned, skip over lower partitions; commit in decoder order), port.c (mode),
drivers/base/bus.c (bind/unbind: ENODEV, EBUSY, probe errors) and drivers/dax; geometry from
Documentation/ABI/testing/sysfs-bus-cxl and what ndctl's cxl-region-sysfs.sh checks (a port's decoder
interleaves at the granularity of the port above times its ways). Every refused write leaves the journal and the
tree as they were; a restarted agent comes back with the same state.

Device names on cxl-test: memN's endpoint is ``endpoint(9+N)`` with decoders ``decoder(9+N).0-7``; host bridge
ports ``port1-3`` (cxl_host_bridge.0-2), switch ports ``port4-8`` (cxl_switch_uport.0-4); root decoders
``decoder0.0-5`` are cfmws0-5.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakehw.agent.cxlsysfs import CxlSysfs, SysfsError
from fakehw.agent.service import AgentService
from fakehw.model import System, load_profile
from tests.scratch import scratch_base

NODE = "cxl-test-0"
UUID = "7c8d6b3f-0a39-4f0b-9d6c-2b5e1f8a0c11"
MiB = 2**20


@dataclass
class Kernel:
    """An agent on cxl-test and the node's sysfs as a writer sees it."""

    svc: AgentService

    @property
    def root(self) -> Path:
        return self.svc.node_dir(NODE) / "root"

    def write(self, path: str, value: str) -> None:
        CxlSysfs(self.svc.platform).write(NODE, path, value.encode() + b"\n")

    def refused(self, path: str, value: str) -> int:
        """The errno of a write the kernel refuses; it must change neither the journal nor the tree."""
        journal = (self.svc.state_dir / "platform.jsonl").read_bytes()
        tree = self.snapshot()
        with pytest.raises(SysfsError) as info:
            self.write(path, value)
        assert (self.svc.state_dir / "platform.jsonl").read_bytes() == journal, f"{path} <- {value!r} journaled"
        assert self.snapshot() == tree, f"{path} <- {value!r} changed the tree"
        return info.value.errno

    def read(self, path: str) -> str:
        return (self.root / path).read_text().strip()

    def exists(self, path: str) -> bool:
        return os.path.lexists(self.root / path)

    def snapshot(self) -> str:
        return json.dumps(self.svc.platform.cxl.to_json(), sort_keys=True)


@pytest.fixture(scope="module")
def system() -> System:
    return load_profile("cxl-test")


@pytest.fixture(scope="module")
def template(system: System) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fhw-kst-", dir=scratch_base()))
    AgentService(system, path / "t").close()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kernel(system: System, template: Path) -> Iterator[Kernel]:
    state = Path(tempfile.mkdtemp(prefix="agent-", dir=template))
    shutil.copytree(template / "t" / "nodes", state / "nodes", symlinks=True, copy_function=os.link)
    svc = AgentService(system, state)
    yield Kernel(svc)
    svc.close()
    shutil.rmtree(state, ignore_errors=True)


DEV = "sys/bus/cxl/devices"


def _reserve(k: Kernel, decoder: str, mode: str, size: int) -> None:
    k.write(f"{DEV}/{decoder}/mode", mode)
    k.write(f"{DEV}/{decoder}/dpa_size", hex(size))


def test_a_region_built_store_by_store_with_the_kernels_refusals_on_the_way(kernel: Kernel) -> None:
    k = kernel
    # mem2 (host bridge 0) and mem1 (host bridge 1) each reserve 256 MiB of persistent capacity.
    _reserve(k, "decoder11.0", "pmem", 256 * MiB)
    _reserve(k, "decoder10.0", "pmem", 256 * MiB)
    assert k.read(f"{DEV}/decoder11.0/dpa_resource") == hex(1 << 30)  # the pmem partition starts after 1 GiB RAM
    root = f"{DEV}/decoder0.3"  # cfmws3: 2 GiB of pmem interleaved over host bridges 0 and 1 at 4 KiB
    name = k.read(f"{root}/create_pmem_region")
    assert name == "region3"  # each root decoder took an id when it was added; decoder0.0's went to region0
    assert k.refused(f"{root}/create_pmem_region", "region42") == errno.EBUSY
    assert k.refused(f"{root}/create_pmem_region", "nonsense") == errno.EINVAL
    k.write(f"{root}/create_pmem_region", name)
    assert k.read(f"{root}/create_pmem_region") != name and k.refused(f"{root}/create_pmem_region", name) == \
        errno.EBUSY
    r = f"{DEV}/{name}"
    assert k.read(f"{r}/uuid") == "00000000-0000-0000-0000-000000000000" and k.read(f"{r}/commit") == "0"
    assert k.refused(f"{r}/uuid", "not-a-uuid") == errno.EINVAL
    assert k.refused(f"{r}/size", hex(512 * MiB)) == errno.ENXIO  # ways, granularity and uuid first
    k.write(f"{r}/uuid", UUID)
    assert k.refused(f"{r}/interleave_ways", "5") == errno.EINVAL
    assert k.refused(f"{r}/interleave_ways", "3") == errno.EINVAL  # not a power-of-two multiple of 2 ways
    k.write(f"{r}/interleave_ways", "2")
    assert k.exists(f"{r}/target1") and not k.exists(f"{r}/target2")
    assert k.refused(f"{r}/interleave_granularity", "256") == errno.EINVAL  # x2 window: its own granularity
    k.write(f"{r}/interleave_granularity", "4096")
    assert k.refused(f"{r}/size", hex(256 * MiB)) == errno.EINVAL  # 256 MiB per way
    assert k.refused(f"{r}/size", hex(4 << 30)) == errno.ERANGE  # the window has 2 GiB
    k.write(f"{r}/size", hex(512 * MiB))
    assert k.refused(f"{r}/interleave_ways", "4") == errno.EBUSY  # address space taken: geometry is fixed
    assert k.read(f"{r}/resource") == k.read(f"{root}/start")
    assert k.refused(f"{r}/commit", "1") == errno.ENXIO  # targets missing
    assert k.refused(f"{r}/target0", "decoder10.0") == errno.ENXIO  # position 0 decodes to host bridge 0
    assert k.refused(f"{r}/target0", "decoder12.0") == errno.EINVAL  # mem3's decoder has no mode: not pmem
    k.write(f"{DEV}/decoder12.0/mode", "pmem")
    assert k.refused(f"{r}/target1", "decoder12.0") == errno.ENXIO  # ... and no DPA reserved
    assert k.refused(f"{r}/target0", "decoder99.0") == errno.ENODEV
    assert k.refused(f"{r}/target0", "decoder1.0") == errno.EINVAL  # a switch decoder
    k.write(f"{r}/target0", "decoder11.0")
    assert k.refused(f"{r}/target1", "decoder11.0") == errno.EBUSY  # mem2 is at position 0
    k.write(f"{r}/target1", "decoder10.0")
    # Active: every decoder on the way is programmed, each port at the granularity above it times its ways.
    assert k.read(f"{DEV}/decoder11.0/interleave_ways") == "2"
    assert k.read(f"{DEV}/decoder11.0/interleave_granularity") == "4096"
    assert k.read(f"{DEV}/decoder11.0/size") == hex(512 * MiB)
    assert k.read(f"{DEV}/decoder11.0/start") == k.read(f"{r}/resource")
    for decoder in ("decoder1.1", "decoder2.0", "decoder6.0", "decoder5.0"):  # hb0 (its 0 is region0's), hb1,
        assert k.read(f"{DEV}/{decoder}/region") == name  # switches of mem2 and mem1
        assert k.read(f"{DEV}/{decoder}/interleave_ways") == "1"
        assert k.read(f"{DEV}/{decoder}/interleave_granularity") == "8192"
    assert k.read(f"{DEV}/decoder11.0/region") == name and k.read(f"{DEV}/endpoint11/decoders_committed") == "0"
    k.write(f"{r}/commit", "1")
    assert k.read(f"{r}/commit") == "1" and k.read(f"{DEV}/endpoint11/decoders_committed") == "1"
    assert k.read(f"{DEV}/port1/decoders_committed") == "2"  # region0's and this one
    assert k.refused(f"{DEV}/decoder11.0/dpa_size", "0") == errno.EBUSY  # attached
    assert k.refused(f"{DEV}/decoder11.0/mode", "ram") == errno.EBUSY  # committed
    assert k.refused("sys/bus/cxl/drivers/cxl_mem/bind", name) == errno.ENODEV  # wrong driver
    k.write("sys/bus/cxl/drivers/cxl_region/bind", name)
    assert k.exists(f"{r}/driver") and k.exists(f"{r}/pmem_region3")
    assert k.refused("sys/bus/cxl/drivers/cxl_region/bind", name) == errno.EBUSY
    # ... and down again as cxl destroy-region takes it down.
    k.write("sys/bus/cxl/drivers/cxl_region/unbind", name)
    k.write(f"{r}/commit", "0")
    assert k.read(f"{DEV}/decoder1.1/region") == name  # still held, no longer committed
    k.write(f"{r}/target0", "")
    k.write(f"{r}/target1", "")
    assert k.read(f"{DEV}/decoder1.1/region") == ""  # the last target below a port gives its decoder back
    k.write(f"{DEV}/decoder11.0/dpa_size", "0")
    k.write(f"{DEV}/decoder10.0/dpa_size", "0")
    assert k.refused(f"{root}/delete_region", "region77") == errno.ENODEV
    k.write(f"{root}/delete_region", name)
    assert not k.exists(r)
    assert k.read(f"{root}/create_pmem_region") == name  # the idle id is offered again


def test_dpa_is_reserved_and_released_in_decoder_order(kernel: Kernel) -> None:
    k = kernel
    # mem4's decoder 0 holds 256 MiB of RAM for region0 (committed by firmware), so its next one is decoder 1.
    assert k.read(f"{DEV}/decoder13.0/dpa_size") == hex(256 * MiB) and k.read(f"{DEV}/decoder13.0/mode") == "ram"
    k.write(f"{DEV}/decoder13.2/mode", "pmem")
    assert k.refused(f"{DEV}/decoder13.2/dpa_size", hex(256 * MiB)) == errno.EBUSY  # decoder 1 comes first
    assert k.refused(f"{DEV}/decoder13.1/dpa_size", hex(256 * MiB)) == errno.EBUSY  # no mode (partition) yet
    k.write(f"{DEV}/decoder13.1/mode", "pmem")
    assert k.refused(f"{DEV}/decoder13.1/dpa_size", "0x7") == errno.EINVAL
    assert k.refused(f"{DEV}/decoder13.1/mode", "flash") == errno.EINVAL
    k.write(f"{DEV}/decoder13.1/dpa_size", hex(256 * MiB))
    assert k.read(f"{DEV}/decoder13.1/dpa_resource") == hex(1 << 30)
    # The free RAM after region0's 256 MiB was skipped to reach the pmem partition: RAM is gone for later decoders.
    k.write(f"{DEV}/decoder13.2/mode", "ram")
    assert k.refused(f"{DEV}/decoder13.2/dpa_size", hex(256 * MiB)) == errno.ENOSPC
    assert k.refused(f"{DEV}/decoder13.0/dpa_size", "0") == errno.EBUSY  # region0's, and committed
    # A dpa_size write frees first: when the new allocation then fails, the old one stays freed (as the kernel).
    with pytest.raises(SysfsError) as info:
        k.write(f"{DEV}/decoder13.1/dpa_size", hex(2 << 30))
    assert info.value.errno == errno.ENOSPC and k.read(f"{DEV}/decoder13.1/dpa_size") == "0x0"
    assert k.read(f"{DEV}/decoder13.1/dpa_resource") == hex(2**64 - 1)
    k.write(f"{DEV}/decoder13.1/mode", "pmem")
    assert k.refused(f"{DEV}/decoder19.0/mode", "pmem") == errno.ENXIO  # mem10 (the RCD) has no pmem


def test_decoders_commit_in_order_per_port(kernel: Kernel) -> None:
    k = kernel
    pf = k.svc.platform
    # Two regions on cfmws4 (host bridge 2): the first takes decoder 0 of each port, the second decoder 1.
    a = pf.create_region(NODE, {"window": "cfmws4", "targets": ["mem8"], "size": "256MiB", "mode": "pmem"})
    b = pf.create_region(NODE, {"window": "cfmws4", "targets": ["mem9"], "size": "256MiB", "mode": "pmem"})
    assert k.read(f"{DEV}/decoder3.0/region") == a["name"] and k.read(f"{DEV}/decoder3.1/region") == b["name"]
    # Resetting the older one first is allowed; committing it again is not: decoder 0 of host bridge 2 would
    # commit after decoder 1 (hdm.c: "out of order commit").
    k.write("sys/bus/cxl/drivers/cxl_region/unbind", a["name"])
    k.write(f"{DEV}/{a['name']}/commit", "0")
    assert k.refused(f"{DEV}/{a['name']}/commit", "1") == errno.EBUSY
    k.write("sys/bus/cxl/drivers/cxl_region/unbind", b["name"])
    k.write(f"{DEV}/{b['name']}/commit", "0")
    k.write(f"{DEV}/{a['name']}/commit", "1")


def test_ports_memdevs_and_the_root_bind_and_unbind_as_in_the_kernel(kernel: Kernel) -> None:
    k = kernel
    drivers = "sys/bus/cxl/drivers"
    assert k.read(f"{DEV}/region0/commit") == "1" and k.exists(f"{DEV}/mem0/driver")
    assert k.refused(f"{drivers}/cxl_port/unbind", "port99") == errno.ENODEV
    assert k.refused(f"{drivers}/cxl_mem/unbind", "port1") == errno.ENODEV
    k.write(f"{drivers}/cxl_port/unbind", "port1")  # host bridge 0: every memdev below unbinds
    for mem in ("mem0", "mem2", "mem4", "mem6"):
        assert not k.exists(f"{DEV}/{mem}/driver")
    assert k.exists(f"{DEV}/mem1/driver") and k.exists(f"{DEV}/port1") and not k.exists(f"{DEV}/port1/driver")
    assert not k.exists(f"{DEV}/port4") and not k.exists(f"{DEV}/decoder1.0")  # switch port gone, hb decoders too
    assert k.read(f"{DEV}/region0/commit") == "0" and not k.exists(f"{DEV}/region0/driver")
    assert k.refused(f"{drivers}/cxl_mem/bind", "mem0") == errno.ENXIO  # its port is not enabled
    k.write(f"{drivers}/cxl_port/bind", "port1")
    assert k.refused(f"{drivers}/cxl_port/bind", "port1") == errno.EBUSY
    assert not k.exists(f"{DEV}/mem0/driver")  # enable-port -m enables memdevs; bind alone does not
    k.write(f"{drivers}/cxl_mem/bind", "mem0")
    k.write(f"{drivers}/cxl_mem/bind", "mem4")
    # Firmware's decoders come back with the devices: region0 is assembled, committed and enabled again.
    assert k.read(f"{DEV}/region0/commit") == "1" and k.exists(f"{DEV}/region0/driver")
    # A switch port goes with its last endpoint and comes back with the first.
    k.write(f"{drivers}/cxl_mem/unbind", "mem1")
    assert k.exists(f"{DEV}/port5")
    k.write(f"{drivers}/cxl_mem/unbind", "mem5")
    assert not k.exists(f"{DEV}/port5") and k.refused(f"{drivers}/cxl_port/bind", "port5") == errno.ENODEV
    k.write(f"{drivers}/cxl_mem/bind", "mem5")
    assert k.exists(f"{DEV}/port5/driver")
    # The root: cxl_acpi unbinds and everything below goes, regions included; bound again, firmware's comes back.
    platform = "sys/bus/platform/drivers/cxl_acpi"
    assert k.refused(f"{platform}/unbind", "ACPI0017:00") == errno.ENODEV  # cxl_test's root is cxl_acpi.0
    k.write(f"{platform}/unbind", "cxl_acpi.0")
    assert not k.exists(f"{DEV}/root0") and not k.exists(f"{DEV}/region0") and not k.exists(f"{DEV}/mem2/driver")
    assert k.exists(f"{DEV}/mem2") and not k.exists("sys/devices/platform/cxl_acpi.0/driver")
    k.write(f"{platform}/bind", "cxl_acpi.0")
    assert k.read(f"{DEV}/region0/commit") == "1" and k.exists(f"{DEV}/mem3/driver")
    assert k.read(f"{DEV}/decoder0.0/create_ram_region") == "region6"


def test_dax_devices_and_memory_blocks(kernel: Kernel) -> None:
    k = kernel
    dax = "sys/bus/dax/devices/dax0.0"
    # region0 is RAM: its DAX device is bound to kmem, its memory hot-added offline (cxl_test's policy) into
    # node 0 (cfmws0 has no proximity domain: the kernel falls back to the first node).
    assert os.readlink(k.root / dax / "driver").endswith("/kmem") and k.read(f"{dax}/target_node") == "0"
    # x86 with under 64 GiB of RAM (cxl-test's 16 GiB): 128 MiB blocks (arch/x86/mm/init_64.c).
    block = 128 * MiB
    first = int(k.read(f"{dax}/resource"), 16) // block
    blocks = [f"sys/devices/system/memory/memory{first + i}" for i in range(512 * MiB // block)]
    assert all(k.read(f"{b}/state") == "offline" for b in blocks)
    assert k.read("sys/devices/system/memory/block_size_bytes") == f"{block:x}"
    before = k.svc.platform.view(NODE).numa_memory[0]
    k.write(f"{blocks[0]}/state", "online_movable")
    assert k.read(f"{blocks[0]}/state") == "online" and k.exists(f"sys/devices/system/node/node0/memory{first}")
    assert k.svc.platform.view(NODE).numa_memory[0] == before + block
    assert k.refused(f"{blocks[1]}/state", "sideways") == errno.EINVAL
    assert k.refused("sys/bus/dax/drivers/kmem/unbind", "dax0.0") == errno.EBUSY  # memory still online
    k.write(f"{blocks[0]}/state", "offline")
    assert k.refused("sys/bus/dax/drivers/device_dax/unbind", "dax0.0") == errno.ENODEV  # not its driver
    assert k.refused("sys/bus/dax/drivers/device_dax/new_id", "junk") == errno.EINVAL
    k.write("sys/bus/dax/drivers/kmem/remove_id", "dax0.0")
    k.write("sys/bus/dax/drivers/kmem/unbind", "dax0.0")
    assert not k.exists(f"{dax}/driver") and not k.exists(blocks[0])
    k.write("sys/bus/dax/drivers/device_dax/new_id", "dax0.0")
    k.write("sys/bus/dax/drivers/device_dax/bind", "dax0.0")
    assert os.readlink(k.root / dax / "driver").endswith("/device_dax")
    assert k.refused("sys/bus/dax/drivers/kmem/bind", "dax0.0") == errno.EBUSY


def test_a_half_built_region_survives_an_agent_restart(kernel: Kernel, system: System) -> None:
    k = kernel
    _reserve(k, "decoder17.0", "pmem", 256 * MiB)
    name = k.read(f"{DEV}/decoder0.4/create_pmem_region")
    k.write(f"{DEV}/decoder0.4/create_pmem_region", name)
    k.write(f"{DEV}/{name}/uuid", UUID)
    k.write(f"{DEV}/{name}/interleave_granularity", "1024")
    k.write(f"{DEV}/{name}/interleave_ways", "1")
    k.write(f"{DEV}/{name}/size", hex(256 * MiB))
    k.write(f"{DEV}/{name}/target0", "decoder17.0")
    state, files = k.snapshot(), {p: k.read(f"{DEV}/{name}/{p}") for p in ("uuid", "size", "target0", "commit")}
    k.svc.close()
    k.svc = AgentService(system, k.svc.state_dir)
    assert k.snapshot() == state
    assert {p: k.read(f"{DEV}/{name}/{p}") for p in files} == files
    k.write(f"{DEV}/{name}/commit", "1")  # and it carries on from where it was
