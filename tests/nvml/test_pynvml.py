"""nvidia-ml-py (the official bindings) against the fake, one test per function group.

Expected values come from the real H100 capture (``H100``: ../shared/reference/captures/qx-h100.xml), public
specifications written next to them, the profile's own input (bus addresses, UUIDs) and the fault requests the
tests make, never from the snapshot code under test (see helpers.py).
"""

from __future__ import annotations

import ctypes
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache, partial
from pathlib import Path
from types import ModuleType

import pytest

from fakehw.nvml.layout import LinkRecord
from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import ECC_LOCATION, FakeProcess
from tests.nvml import references
from tests.nvml.captures import board_capture, number
from tests.nvml.helpers import NodeSnap, pcie_rate_metrics, run_python, snapshot_env, with_driver

Nvml = Callable[..., NodeSnap]


def handles(n: ModuleType) -> list[object]:
    return [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]


def addr(h: object) -> int | None:
    """The handle's pointer value (handles are opaque pointers; equal handles are equal pointers)."""
    return ctypes.cast(h, ctypes.c_void_p).value  # type: ignore[arg-type]


def error_of(fn: Callable[[], object]) -> int:
    import pynvml

    with pytest.raises(pynvml.NVMLError) as info:
        fn()
    return int(info.value.value)


# --------------------------------------------------------------------------------------------------- init


def test_uninitialized_before_init_and_refcounted_shutdown(pynvml_module: ModuleType, node_snapshot: Callable[...,
                                                            NodeSnap]) -> None:
    n = pynvml_module
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    count = ctypes.c_uint()
    assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == n.NVML_ERROR_UNINITIALIZED
    assert lib.nvmlShutdown() == n.NVML_ERROR_UNINITIALIZED
    snap = node_snapshot("dgx-h100")
    os.environ["FAKEHW_NVML_SNAPSHOT"] = str(snap.path)
    try:
        assert lib.nvmlInit_v2() == 0
        assert lib.nvmlInit() == 0  # refcounted: two inits need two shutdowns
        assert lib.nvmlShutdown() == 0
        assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
        assert count.value == len(snap.node.gpus)
        assert lib.nvmlShutdown() == 0
        assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == n.NVML_ERROR_UNINITIALIZED
    finally:
        del os.environ["FAKEHW_NVML_SNAPSHOT"]


def test_error_string_for_every_code(nvml: Nvml, pynvml_module: ModuleType) -> None:
    n = pynvml_module
    nvml("edge-pcie")  # pynvml loads the library in nvmlInit
    codes = [v for k, v in vars(n).items() if k.startswith("NVML_ERROR_") and isinstance(v, int)] + [n.NVML_SUCCESS]
    strings = {c: n.nvmlErrorString(c) for c in codes}
    assert all(s for s in strings.values())
    named = {c: s for c, s in strings.items() if c != n.NVML_ERROR_UNKNOWN}
    assert len(set(named.values())) == len(named), "every code has its own message"
    assert n.nvmlErrorString(12345) == strings[n.NVML_ERROR_UNKNOWN]



ERROR_STRINGS = r"""
import ctypes, json, sys
lib = ctypes.CDLL(LIBRARY)
text = lib.nvmlErrorString
text.restype, text.argtypes = ctypes.c_char_p, [ctypes.c_int]
codes = list(range(-1, 40)) + [998, 999, 1000, 12345, 2**31 - 1]
out = {"before": [text(c).decode() for c in codes]}
if LIBRARY == "libnvidia-ml.so.1":  # the fake: once a snapshot of the branch is loaded too
    assert lib.nvmlInit_v2() == 0
    out["after"] = [text(c).decode() for c in codes]
print(json.dumps(out))
"""


def error_strings(library: str, snapshot: Path) -> dict[str, list[str]]:
    """nvmlErrorString of every code the script asks, from ``library`` in a process of its own (the real library
    and the fake share a soname, so one process can hold only one)."""
    answer: dict[str, list[str]] = run_python(ERROR_STRINGS.replace("LIBRARY", repr(library)), snapshot, timeout=30)
    return answer


@cache
def real_error_strings(branch: int) -> list[str]:
    """The real library's texts of ``branch`` (asked once a session: three branches' tests ask for 555's)."""
    return error_strings(str(references.real_nvidia(branch).library), Path("/nonexistent/nvml.snapshot"))["before"]


@pytest.mark.parametrize("branch", [535, 550, 555])
def test_error_strings_are_the_real_library_s(node_snapshot: Callable[..., NodeSnap], tmp_path: Path,
                                              branch: int) -> None:
    """nvmlErrorString's texts are what the real libnvidia-ml of the branch answers (Debian's 535.261.03,
    550.163.01, 555.58.02, asked without nvmlInit, which the call does not need), code by code from -1 to 39 and a
    few past NVML_ERROR_UNKNOWN: programs print them (nvidia-smi's "Failed to initialize NVML: Driver/library
    version mismatch", pynvml's NVMLError text, device plugins' logs), and a consumer or a person matching them sees
    the real words only if the fake answers them. The fake answers the newest of those texts before a snapshot is
    loaded and the branch's own once one is (535 has none for 28 and 29). (The fake answered nvml.h's enum comments
    before: "RM has detected an NVML/RM version mismatch." for 18, and 11 other codes differently.)"""
    real = references.real_nvidia(branch)
    snap = node_snapshot(with_driver(tmp_path, "edge-pcie", real.driver_version))
    fake = error_strings("libnvidia-ml.so.1", snap.path)
    assert fake["before"] == real_error_strings(555)
    assert fake["after"] == real_error_strings(branch)

# --------------------------------------------------------------------------------------------------- system


def test_system(nvml: Nvml, pynvml_module: ModuleType) -> None:
    n = pynvml_module
    snap = nvml("dgx-h100")
    driver = snap.system.driver
    assert n.nvmlSystemGetDriverVersion() == driver.version
    assert n.nvmlSystemGetNVMLVersion() == driver.nvml_version
    assert n.nvmlSystemGetCudaDriverVersion() == driver.cuda_driver_version
    assert n.nvmlSystemGetCudaDriverVersion_v2() == driver.cuda_driver_version
    with open(f"/proc/{os.getpid()}/cmdline", "rb") as fh:
        argv0 = fh.read().split(b"\0")[0].decode()
    assert n.nvmlSystemGetProcessName(os.getpid()) == argv0
    assert error_of(lambda: n.nvmlSystemGetProcessName(2**31 - 7)) == n.NVML_ERROR_NOT_FOUND
    assert n.nvmlUnitGetCount() == 0
    assert n.nvmlDeviceGetCount() == len(snap.node.gpus)


# --------------------------------------------------------------------------------------------------- identity


def test_identity(nvml: Nvml, pynvml_module: ModuleType, h100: dict[str, str]) -> None:
    n = pynvml_module
    snap = nvml("dgx-h100")
    for gpu, h in zip(snap.node.gpus, handles(n), strict=True):
        assert n.nvmlDeviceGetName(h) == h100["/product_name"] == "NVIDIA H100 80GB HBM3"
        assert n.nvmlDeviceGetUUID(h) == gpu.uuid
        assert n.nvmlDeviceGetSerial(h) == gpu.serial
        assert n.nvmlDeviceGetIndex(h) == gpu.index
        assert n.nvmlDeviceGetMinorNumber(h) == gpu.minor
        assert n.nvmlDeviceGetArchitecture(h) == n.NVML_DEVICE_ARCH_HOPPER
        assert n.nvmlDeviceGetCudaComputeCapability(h) == (9, 0)  # Hopper (CUDA programming guide)
        assert n.nvmlDeviceGetBoardPartNumber(h) == h100["/board_part_number"]
        assert n.nvmlDeviceGetVbiosVersion(h) == h100["/vbios_version"]
        assert n.nvmlDeviceGetInforomImageVersion(h) == h100["/inforom_version/img_version"]
        assert n.nvmlDeviceGetBrand(h) == n.NVML_BRAND_NVIDIA
        attrs = n.nvmlDeviceGetAttributes(h)
        assert attrs.multiprocessorCount == 132  # H100 SXM5 (NVIDIA H100 datasheet)
        assert attrs.memorySizeMB == number(h100["/fb_memory_usage/total"])
    # Every way of finding the device gives the same handle.
        assert addr(n.nvmlDeviceGetHandleByUUID(gpu.uuid)) == addr(h)
        assert addr(n.nvmlDeviceGetHandleBySerial(gpu.serial)) == addr(h)
        for bus_id in (gpu.address.nvml_bus_id, gpu.address.nvml_bus_id_legacy, str(gpu.address)):
            assert addr(n.nvmlDeviceGetHandleByPciBusId(bus_id)) == addr(h)
    assert error_of(lambda: n.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")) == \
        n.NVML_ERROR_NOT_FOUND
    assert error_of(lambda: n.nvmlDeviceGetHandleByPciBusId("not a bus id")) == n.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(lambda: n.nvmlDeviceGetHandleByIndex(len(snap.node.gpus))) == n.NVML_ERROR_INVALID_ARGUMENT


# --------------------------------------------------------------------------------------------------- memory, PCI


def test_memory_bar1_pci(nvml: Nvml, pynvml_module: ModuleType, h100: dict[str, str]) -> None:
    n = pynvml_module
    snap = nvml("dgx-h100")
    mib = 2**20
    for gpu, h in zip(snap.node.gpus, handles(n), strict=True):
        v1 = n.nvmlDeviceGetMemoryInfo(h)
        assert v1.used + v1.free == v1.total
        v2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
        assert v2.total == v1.total and v2.reserved + v2.used + v2.free == v2.total
        assert v1.used == v2.used + v2.reserved  # v1 counts reserved memory as used
        # As the real H100's nvidia-smi rounds them: 81559 MiB total, 480 reserved, 0 used, 81080 free.
        for key, value in (("total", v2.total), ("reserved", v2.reserved), ("used", v2.used), ("free", v2.free)):
            assert f"{round(value / mib)} MiB" == h100[f"/fb_memory_usage/{key}"], key
        bar1 = n.nvmlDeviceGetBAR1MemoryInfo(h)
        assert f"{bar1.bar1Total // mib} MiB" == h100["/bar1_memory_usage/total"]
        assert bar1.bar1Used + bar1.bar1Free == bar1.bar1Total
        pci = n.nvmlDeviceGetPciInfo(h)  # the _v3 entry point
        assert pci.busId == gpu.address.nvml_bus_id
        assert pci.busIdLegacy == gpu.address.nvml_bus_id_legacy
        assert (pci.domain, pci.bus, pci.device) == (gpu.address.domain, gpu.address.bus, gpu.address.device)
        assert f"{pci.pciDeviceId:08X}" == h100["/pci/pci_device_id"]
        assert f"{pci.pciSubSystemId:08X}" == h100["/pci/pci_sub_system_id"]
        gen = h100["/pci/pci_gpu_link_info/pcie_gen/max_link_gen"]
        assert str(n.nvmlDeviceGetCurrPcieLinkGeneration(h)) == str(n.nvmlDeviceGetMaxPcieLinkGeneration(h)) == gen
        width = h100["/pci/pci_gpu_link_info/link_widths/max_link_width"]
        assert f"{n.nvmlDeviceGetMaxPcieLinkWidth(h)}x" == f"{n.nvmlDeviceGetCurrPcieLinkWidth(h)}x" == width
        assert n.nvmlDeviceGetPcieSpeed(h) == 32000  # PCIe Gen5: 32 GT/s per lane (PCI-SIG)
        assert n.nvmlDeviceGetPcieReplayCounter(h) == 0
        assert n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES) > 0
    with pytest.raises(n.NVMLError_ArgumentVersionMismatch):
        n.nvmlDeviceGetMemoryInfo(handles(n)[0], version=0x01000028)


class PciInfoV1(ctypes.Structure):
    """The 52-byte layout the unversioned and _v2 entry points fill."""

    _fields_ = [("busId", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("reserved", ctypes.c_uint * 4)]


def test_pci_versions_keep_their_layouts(nvml: Nvml, pynvml_module: ModuleType) -> None:
    n = pynvml_module
    snap = nvml("gb200-nvl72")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    gpu, h = snap.node.gpus[2], handles(n)[2]
    for name in ("nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2"):
        # A buffer larger than the old struct: nothing past its 52 bytes may be written.
        buf = (ctypes.c_ubyte * 128)(*([0xAB] * 128))
        assert getattr(lib, name)(h, buf) == 0
        old = PciInfoV1.from_buffer(buf)
        assert old.busId.decode() == gpu.address.nvml_bus_id_legacy
        assert (old.domain, old.bus) == (gpu.address.domain, gpu.address.bus)
        assert bytes(buf[ctypes.sizeof(PciInfoV1):]) == b"\xab" * (128 - ctypes.sizeof(PciInfoV1))

    # NVLink remote PCI info: the unversioned entry point fills the same old layout.
    port = gpu.ports[3]
    buf = (ctypes.c_ubyte * 128)(*([0xAB] * 128))
    assert lib.nvmlDeviceGetNvLinkRemotePciInfo(h, port.port, buf) == 0
    remote = PciInfoV1.from_buffer(buf)
    assert remote.busId.decode() == port.remote_address.nvml_bus_id_legacy
    assert bytes(buf[ctypes.sizeof(PciInfoV1):]) == b"\xab" * (128 - ctypes.sizeof(PciInfoV1))

    class PciInfoExt(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                    ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                    ("baseClass", ctypes.c_uint), ("subClass", ctypes.c_uint), ("busId", ctypes.c_char * 32)]

    ext = PciInfoExt(version=ctypes.sizeof(PciInfoExt) | 1 << 24)
    assert lib.nvmlDeviceGetPciInfoExt(h, ctypes.byref(ext)) == 0
    assert ext.busId.decode() == gpu.address.nvml_bus_id and (ext.baseClass, ext.subClass) == (3, 2)
    ext.version = 7
    assert lib.nvmlDeviceGetPciInfoExt(h, ctypes.byref(ext)) == n.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


# --------------------------------------------------------------------------------------------------- NVLink


def test_nvlink_dgx_h100(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """Every NVLink port of a DGX H100 is up, reaches an NVSwitch and can carry peer traffic and peer atomics:
    NVLink carries native peer atomics between GPUs (CUDA programming guide: cudaDevP2PAttrNativeAtomicSupported
    over NVLink), which nvml.h reports as NVML_NVLINK_CAP_P2P_ATOMICS (capability 2, nvidia-ml-py's constant).
    SLI (NVML_NVLINK_CAP_SLI_BRIDGE, 4) is a GeForce/Quadro graphics feature over a bridge: an SXM module cabled to
    NVSwitches has none, so each capability is its own bit, not "this or any later one"."""
    n = pynvml_module
    snap = nvml("dgx-h100")
    switches = {sw.id: sw for sw in snap.node.nvswitches}
    for gpu, h in zip(snap.node.gpus, handles(n), strict=True):
        assert len(gpu.ports) == n.NVML_NVLINK_MAX_LINKS == 18
        for port in gpu.ports:
            link = port.port
            assert n.nvmlDeviceGetNvLinkState(h, link) == n.NVML_FEATURE_ENABLED
            assert n.nvmlDeviceGetNvLinkVersion(h, link) == gpu.sku.nvlink.nvml_version
            assert n.nvmlDeviceGetNvLinkRemoteDeviceType(h, link) == n.NVML_NVLINK_DEVICE_TYPE_SWITCH
            remote = n.nvmlDeviceGetNvLinkRemotePciInfo(h, link)
            assert remote.busId == port.remote_address.nvml_bus_id
            assert remote.pciDeviceId == (switches[port.remote_id].sku.pci_device_id << 16 | 0x10DE)
            assert n.nvmlDeviceGetNvLinkCapability(h, link, n.NVML_NVLINK_CAP_P2P_SUPPORTED) == 1
            assert n.nvmlDeviceGetNvLinkCapability(h, link, n.NVML_NVLINK_CAP_P2P_ATOMICS) == 1
            assert n.nvmlDeviceGetNvLinkCapability(h, link, n.NVML_NVLINK_CAP_SLI_BRIDGE) == 0
            for counter in range(5):
                assert n.nvmlDeviceGetNvLinkErrorCounter(h, link, counter) == 0
        assert error_of(partial(n.nvmlDeviceGetNvLinkState, h, 18)) == n.NVML_ERROR_INVALID_ARGUMENT


NVIDIA_VENDOR_ID = 0x10DE
"""NVIDIA's PCI vendor id (the PCI ID repository's pci.ids, vendor 10de)."""


def test_every_nvlink_of_a_gb200_tray_reaches_an_nvidia_switch(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """A GB200 NVL72 tray's GPUs cable each of their 18 NVLinks to a different NVLink switch chip of the rack's
    switch trays (NVIDIA's GB200 NVL72 description: 18 links per Blackwell GPU, 9 switch trays of 2 chips), far
    more switches than the tray has GPUs. nvml.h's nvmlPciInfo_t.pciDeviceId is "the combined 16-bit device id and
    16-bit vendor id": for every link the remote is a switch whose id carries NVIDIA's vendor id and a device id,
    the same part on every link, and not the zero of a switch left unnamed."""
    n = pynvml_module
    snap = nvml("gb200-nvl72")
    ids = set()
    for gpu, h in zip(snap.node.gpus, handles(n), strict=True):
        assert len(gpu.ports) == 18
        for port in gpu.ports:
            assert n.nvmlDeviceGetNvLinkRemoteDeviceType(h, port.port) == n.NVML_NVLINK_DEVICE_TYPE_SWITCH
            ids.add(n.nvmlDeviceGetNvLinkRemotePciInfo(h, port.port).pciDeviceId)
    assert len(ids) == 1, [hex(i) for i in ids]
    (switch_id,) = ids
    assert switch_id & 0xFFFF == NVIDIA_VENDOR_ID and switch_id >> 16 != 0, hex(switch_id)


def test_nvlink_between_two_gpus_names_the_peer_gpu(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """cxl-pool's two H200 NVL are bridged GPU to GPU (18 links, no NVSwitch). nvml.h: the remote PCI info is "the
    PCI information for the remote node on a NvLink link", so across a bridge it is the peer GPU's own, exactly
    what nvmlDeviceGetPciInfo of that GPU reports (device and subsystem id included), and the remote device type
    is NVML_NVLINK_DEVICE_TYPE_GPU."""
    n = pynvml_module
    snap = nvml("cxl-pool")
    own = {g.id: n.nvmlDeviceGetPciInfo(h) for g, h in zip(snap.node.gpus, handles(n), strict=True)}
    for gpu, h in zip(snap.node.gpus, handles(n), strict=True):
        assert gpu.ports
        for port in gpu.ports:
            assert n.nvmlDeviceGetNvLinkRemoteDeviceType(h, port.port) == n.NVML_NVLINK_DEVICE_TYPE_GPU
            remote, peer = n.nvmlDeviceGetNvLinkRemotePciInfo(h, port.port), own[port.remote_id]
            assert (remote.busId, remote.pciDeviceId, remote.pciSubSystemId) == \
                (peer.busId, peer.pciDeviceId, peer.pciSubSystemId), port


def test_nvlink_errors_and_per_process_reset(nvml: Nvml, pynvml_module: ModuleType) -> None:
    n = pynvml_module
    fault = {"kind": "nvlink-errors", "device": "gpu1", "link": 4, "counter": "crc-data", "increment": 37}
    snap = nvml("dgx-h100", faults=[fault])
    h = handles(n)[1]
    expected = snap.state.gpu("gpu1").links[4].errors["crc-data"]  # type: ignore[union-attr]
    assert expected == 37
    assert n.nvmlDeviceGetNvLinkErrorCounter(h, 4, n.NVML_NVLINK_ERROR_DL_CRC_DATA) == expected
    assert n.nvmlDeviceGetNvLinkErrorCounter(h, 5, n.NVML_NVLINK_ERROR_DL_CRC_DATA) == 0
    # Field values read the same counters: link 4's CRC count before the reset, link 5's (untouched) beside it.
    before = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L4,
                                            n.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L5])
    assert [(f.nvmlReturn, f.value.ullVal) for f in before] == [(0, expected), (0, 0)]
    n.nvmlDeviceResetNvLinkErrorCounters(h, 4)
    assert n.nvmlDeviceGetNvLinkErrorCounter(h, 4, n.NVML_NVLINK_ERROR_DL_CRC_DATA) == 0
    # Field values read the same counters.
    fields = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L4 if hasattr(
        n, "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L4") else 43])
    assert fields[0].nvmlReturn == 0 and fields[0].value.ullVal == 0


def test_nvlink_utilization_counters(nvml: Nvml, pynvml_module: ModuleType) -> None:
    n = pynvml_module
    snap = nvml("dgx-h100")
    h = handles(n)[0]
    rec = snap.snapshot.gpus[0].links[3]
    assert n.nvmlDeviceGetNvLinkUtilizationCounter(h, 3, 0) == (rec.util_rx[0], rec.util_tx[0])
    n.nvmlDeviceFreezeNvLinkUtilizationCounter(h, 3, 0, 1)
    n.nvmlDeviceResetNvLinkUtilizationCounter(h, 3, 0)
    assert n.nvmlDeviceGetNvLinkUtilizationCounter(h, 3, 0) == (0, 0)


def _add_link_traffic(snap: NodeSnap, gpu: int, link: int, units: int) -> LinkRecord:
    """Rewrite the node's snapshot with ``units`` more traffic each way on one GPU's link (as the agent's next
    render of live counters would); returns the link's record as it was."""
    rec = snap.snapshot.gpus[gpu].links[link]
    links = list(snap.snapshot.gpus[gpu].links)
    links[link] = replace(rec, util_rx=(rec.util_rx[0] + units, rec.util_rx[1]),
                          util_tx=(rec.util_tx[0] + units, rec.util_tx[1]))
    gpus = list(snap.snapshot.gpus)
    gpus[gpu] = replace(gpus[gpu], links=tuple(links))
    write_snapshot(snap.path, replace(snap.snapshot, gpus=tuple(gpus)).to_bytes(), changed=True)
    return rec


def test_an_unfrozen_nvlink_counter_follows_the_traffic_again(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceFreezeNvLinkUtilizationCounter: freeze "NVML_FEATURE_ENABLED = freeze the receive and
    transmit counters, NVML_FEATURE_DISABLED = unfreeze the receive and transmit counters". gpu6's link 9 (no other
    test of this process freezes it: the freeze is the process's) is frozen, its traffic moves on (the snapshot
    rewritten with 1000 more units each way), and the counter holds the frozen figures; unfrozen, it reads the live
    ones again."""
    n = pynvml_module
    snap = nvml("dgx-h100")
    h = handles(n)[6]
    rec = snap.snapshot.gpus[6].links[9]
    n.nvmlDeviceFreezeNvLinkUtilizationCounter(h, 9, 0, n.NVML_FEATURE_ENABLED)
    frozen = (rec.util_rx[0], rec.util_tx[0])
    assert n.nvmlDeviceGetNvLinkUtilizationCounter(h, 9, 0) == frozen
    _add_link_traffic(snap, 6, 9, 1000)
    assert n.nvmlDeviceGetNvLinkUtilizationCounter(h, 9, 0) == frozen
    n.nvmlDeviceFreezeNvLinkUtilizationCounter(h, 9, 0, n.NVML_FEATURE_DISABLED)
    assert n.nvmlDeviceGetNvLinkUtilizationCounter(h, 9, 0) == (frozen[0] + 1000, frozen[1] + 1000)


def test_a_freeze_of_a_counter_or_state_nvml_h_does_not_have_is_an_invalid_argument(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92, nvmlDeviceFreezeNvLinkUtilizationCounter: `counter` "(0 or 1)", `freeze` an nvmlEnableState_t
    (NVML_FEATURE_DISABLED 0, NVML_FEATURE_ENABLED 1), INVALID_ARGUMENT "if device, link, counter, or freeze is
    invalid"; nvmlDeviceResetNvLinkUtilizationCounter likewise for its counter. A freeze of 2 is refused and leaves
    the counter live: gpu5's link 2 (no other test freezes it) follows its traffic after it."""
    n = pynvml_module
    snap = nvml("dgx-h100")
    h = handles(n)[5]
    freeze = n.nvmlDeviceFreezeNvLinkUtilizationCounter
    assert error_of(lambda: freeze(h, 2, 2, n.NVML_FEATURE_ENABLED)) == n.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(lambda: freeze(h, 2, 0, 2)) == n.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(lambda: n.nvmlDeviceResetNvLinkUtilizationCounter(h, 2, 2)) == n.NVML_ERROR_INVALID_ARGUMENT
    rec = _add_link_traffic(snap, 5, 2, 1000)
    assert n.nvmlDeviceGetNvLinkUtilizationCounter(h, 2, 0) == (rec.util_rx[0] + 1000, rec.util_tx[0] + 1000)


def test_no_nvlink_on_pcie_only_boards(nvml: Nvml, pynvml_module: ModuleType) -> None:
    n = pynvml_module
    nvml("edge-pcie")
    h = handles(n)[0]
    assert error_of(lambda: n.nvmlDeviceGetNvLinkState(h, 0)) == n.NVML_ERROR_NOT_SUPPORTED


# --------------------------------------------------------------------------------------------------- topology


def test_affinity(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """A GB200 tray (its profile's description): GPUs 0,1 on Grace 0 (CPUs 0-71, NUMA node 0), GPUs 2,3 on
    Grace 1 (CPUs 72-143, NUMA node 1); each GPU's HBM is the NUMA node the profile names for it."""
    n = pynvml_module
    snap = nvml("gb200-nvl72")
    for a, h in enumerate(handles(n)):
        words = n.nvmlDeviceGetCpuAffinity(h, 4)
        cpus = {w * 64 + b for w, word in enumerate(words) for b in range(64) if word >> b & 1}
        assert cpus == (set(range(72)) if a < 2 else set(range(72, 144)))
        nodes = n.nvmlDeviceGetMemoryAffinity(h, 1, n.NVML_AFFINITY_SCOPE_NODE)
        assert nodes[0] == 1 << (0 if a < 2 else 1)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    numa = ctypes.c_uint()
    assert lib.nvmlDeviceGetNumaNodeId(handles(n)[1], ctypes.byref(numa)) == 0
    assert numa.value == snap.node.gpus[1].hbm_numa  # the profile's input: the HBM node it lists for gpu1


def test_set_cpu_affinity_pins_the_thread(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """edge-pcie's GPU 0 sits on socket 0 (its description): CPUs 0-31 and their hyperthreads 64-95."""
    n = pynvml_module
    nvml("edge-pcie")
    before = os.sched_getaffinity(0)
    host = set(range(os.cpu_count() or 1))
    try:
        h = handles(n)[0]
        wanted = (set(range(32)) | set(range(64, 96))) & host
        n.nvmlDeviceSetCpuAffinity(h)
        assert os.sched_getaffinity(0) == wanted
        n.nvmlDeviceClearCpuAffinity(h)
        assert os.sched_getaffinity(0) == host
    finally:
        os.sched_setaffinity(0, before)


# --------------------------------------------------------------------------------------------------- fabric


class FabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t as the 535 headers lay it out (28 bytes).

    pynvml 12.535.161 declares clusterUuid as 80 bytes, which misreads every field after it (against the real
    library too), so the tests pass this struct through pynvml's nvmlDeviceGetGpuFabricInfo instead.
    """

    _fields_ = [("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint),
                ("state", ctypes.c_ubyte)]


class FabricInfoV3(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte), ("healthMask", ctypes.c_uint),
                ("healthSummary", ctypes.c_ubyte)]


def test_fabric_nvl72_all_72_gpus(pynvml_module: ModuleType, node_snapshot: Callable[..., NodeSnap]) -> None:

    from tests.nvml.helpers import snapshot_env

    n = pynvml_module
    seen: list[tuple[bytes, int]] = []
    for node_index in range(18):
        snap = node_snapshot("gb200-nvl72", node_index)
        fabric = snap.system.domain_of(snap.node).fabric  # type: ignore[union-attr]
        assert fabric is not None
        with snapshot_env(snap.path):
            n.nvmlInit()
            try:
                for h in handles(n):
                    info = FabricInfo()
                    n.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
                    assert info.state == n.NVML_GPU_FABRIC_STATE_COMPLETED and info.status == n.NVML_SUCCESS
                    assert bytes(info.clusterUuid) == uuid.UUID(fabric.cluster_uuid).bytes
                    assert info.cliqueId == fabric.clique_id
                    seen.append((bytes(info.clusterUuid), info.cliqueId))
            finally:
                n.nvmlShutdown()
    assert len(seen) == 72 and len(set(seen)) == 1


def test_fabric_versioned_forms_and_health(nvml: Nvml, pynvml_module: ModuleType) -> None:
    n = pynvml_module
    nvml("gb200-nvl72", faults=[{"kind": "fabric-degraded", "device": "gpu0", "health": "route-unhealthy"}])
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    hs = handles(n)
    v3 = FabricInfoV3(version=0x03000028)
    assert ctypes.sizeof(FabricInfoV3) == 40
    assert lib.nvmlDeviceGetGpuFabricInfoV(hs[0], ctypes.byref(v3)) == 0
    assert v3.state == 3 and v3.healthSummary == 2  # unhealthy
    assert (v3.healthMask >> 4) & 3 == 1  # route unhealthy: true
    ok = FabricInfoV3(version=0x03000028)
    assert lib.nvmlDeviceGetGpuFabricInfoV(hs[1], ctypes.byref(ok)) == 0
    assert ok.healthSummary == 1 and (ok.healthMask >> 4) & 3 == 2
    # v2 fills 36 bytes and leaves the v3-only summary alone.
    v2 = FabricInfoV3(version=0x02000024, healthSummary=0xEE)
    assert lib.nvmlDeviceGetGpuFabricInfoV(hs[1], ctypes.byref(v2)) == 0
    assert v2.cliqueId == ok.cliqueId and v2.healthSummary == 0xEE
    bad = FabricInfoV3(version=0x01000024)
    assert lib.nvmlDeviceGetGpuFabricInfoV(hs[1], ctypes.byref(bad)) == n.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_fabric_of_an_hgx_board(nvml: Nvml, pynvml_module: ModuleType, h100: dict[str, str]) -> None:
    """An HGX H100 is registered with its board's fabric manager: Completed, Success, clique 0, the all-zero
    cluster UUID, as the real H100 reports."""
    n = pynvml_module
    nvml("dgx-h100")
    info = FabricInfo(state=0xEE)
    assert ctypes.sizeof(FabricInfo) == 28
    n.nvmlDeviceGetGpuFabricInfo(handles(n)[0], ctypes.byref(info))
    assert (h100["/fabric/state"], h100["/fabric/status"]) == ("Completed", "Success")
    assert info.state == n.NVML_GPU_FABRIC_STATE_COMPLETED and info.status == n.NVML_SUCCESS
    assert str(info.cliqueId) == h100["/fabric/cliqueId"] and bytes(info.clusterUuid) == bytes(16)


def test_fabric_outside_any_fabric(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """A Hopper GPU without NVSwitches (a GH200 superchip's, its NVLinks unconnected) is in no fabric."""
    n = pynvml_module
    nvml("gh200")
    info = FabricInfo(state=0xEE)
    n.nvmlDeviceGetGpuFabricInfo(handles(n)[0], ctypes.byref(info))
    assert info.state == n.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED


# --------------------------------------------------------------------------------------------------- ECC, health


def test_one_uncorrectable_error_leaves_a_row_remap_pending(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """NVIDIA's GPU memory error management guide (row remapping): an uncorrectable error marks its row for
    remapping, and the remap stays pending until the GPU is reset. The first one already does: nvml.h's
    nvmlDeviceGetRemappedRows reports ``isPending`` 1 and one uncorrectable remap. A GPU without errors has none
    pending: the real H100's capture prints ``remapped_row_unc`` 0, ``remapped_row_pending`` No."""
    n = pynvml_module
    nvml("dgx-h100", faults=[{"kind": "ecc", "device": "gpu2", "type": "dbe", "count": 1}])
    _corr, unc, pending, failure = n.nvmlDeviceGetRemappedRows(handles(n)[2])
    assert (unc, pending, failure) == (1, 1, 0)
    _corr, unc, pending, failure = n.nvmlDeviceGetRemappedRows(handles(n)[0])
    assert (unc, pending, failure) == (0, 0, 0)


def test_the_remapped_row_fields_answer_in_nvml_h_order(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's remapped-row fields: 142 NVML_FI_DEV_REMAPPED_COR "Number of remapped rows due to correctable
    errors", 143 REMAPPED_UNC "... due to uncorrectable errors", 144 REMAPPED_PENDING "If any rows are pending
    remapping. 1=yes 0=no", 145 REMAPPED_FAILURE "If any rows failed to be remapped 1=yes 0=no". NVIDIA's GPU memory
    error management guide: one uncorrectable error marks its row for remapping, pending until the GPU is reset, and
    nothing has failed (test_one_uncorrectable_error_leaves_a_row_remap_pending). On an H100 with one such error the
    four fields read 0, 1, 1, 0, each as an unsigned int; on a clean GPU all four read 0."""
    n = pynvml_module
    nvml("dgx-h100", faults=[{"kind": "ecc", "device": "gpu2", "type": "dbe", "count": 1}])
    ids = [142, 143, 144, 145]
    assert ids == [n.NVML_FI_DEV_REMAPPED_COR, n.NVML_FI_DEV_REMAPPED_UNC, n.NVML_FI_DEV_REMAPPED_PENDING,
                   n.NVML_FI_DEV_REMAPPED_FAILURE]
    for gpu, expected in ((2, [0, 1, 1, 0]), (0, [0, 0, 0, 0])):
        values = n.nvmlDeviceGetFieldValues(handles(n)[gpu], ids)
        assert [(v.nvmlReturn, v.valueType) for v in values] == [(n.NVML_SUCCESS, n.NVML_VALUE_TYPE_UNSIGNED_INT)] * 4
        assert [v.value.uiVal for v in values] == expected, gpu


def test_ecc_field_values_by_location_read_each_location_and_type(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92 numbers the per-location ECC fields 7-17 (volatile) and 18-28 (aggregate) as L1 cache single
    bit, double bit, L2 cache single, double, device memory single, double, register file single, double, texture
    memory single, double, CBU double. dgx-a100's gpu0 is given a different count of each type in each location the
    fault requests can name (L1 1 single and 2 double bit, L2 3 and 4, device memory 5 and 6, register file 7 and
    8); each field answers its own location's and type's count in both counters, and texture memory and CBU, which no
    fault touched, answer 0 (seed 10611's fields.c:140 read a third error type)."""
    n = pynvml_module
    faults = [{"kind": "ecc", "device": "gpu0", "type": kind, "count": count, "location": location}
              for location, counts in (("l1-cache", (1, 2)), ("l2-cache", (3, 4)), ("device-memory", (5, 6)),
                                       ("register-file", (7, 8)))
              for kind, count in zip(("sbe", "dbe"), counts, strict=True)]
    nvml("dgx-a100", faults=faults)
    h = handles(n)[0]
    expected = [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0]
    for first in (n.NVML_FI_DEV_ECC_SBE_VOL_L1, n.NVML_FI_DEV_ECC_SBE_AGG_L1):
        values = n.nvmlDeviceGetFieldValues(h, list(range(first, first + 11)))
        assert [v.nvmlReturn for v in values] == [n.NVML_SUCCESS] * 11, first
        assert [v.value.ullVal for v in values] == expected, first


def test_ecc_retired_pages_remapped_rows_field_values(nvml: Nvml, pynvml_module: ModuleType,
                                                      h100: dict[str, str]) -> None:
    """The counts are the fault requests' (5 correctable in L2, 2 uncorrectable in device memory). An H100 remaps
    rows instead of retiring pages: retired pages answer NOT_SUPPORTED, as the real H100 prints N/A."""
    n = pynvml_module
    faults = [{"kind": "ecc", "device": "gpu2", "type": "sbe", "count": 5, "location": "l2-cache"},
              {"kind": "ecc", "device": "gpu2", "type": "dbe", "count": 2, "location": "device-memory"}]
    nvml("dgx-h100", faults=faults)
    h = handles(n)[2]
    assert n.nvmlDeviceGetEccMode(h) == [1, 1]
    for counter in (n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC):
        assert n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, counter) == 5
        assert n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter) == 2
        assert n.nvmlDeviceGetMemoryErrorCounter(h, 0, counter, ECC_LOCATION["l2-cache"]) == 5
        assert n.nvmlDeviceGetMemoryErrorCounter(h, 1, counter, ECC_LOCATION["device-memory"]) == 2
    detailed = n.nvmlDeviceGetDetailedEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC)
    assert detailed.l2Cache == 5
    assert h100["/retired_pages/double_bit_retirement/retired_count"] == "N/A"
    assert error_of(lambda: n.nvmlDeviceGetRetiredPages(h, 1)) == n.NVML_ERROR_NOT_SUPPORTED
    assert error_of(lambda: n.nvmlDeviceGetRetiredPagesPendingStatus(h)) == n.NVML_ERROR_NOT_SUPPORTED
    _corr, unc, pending, _failure = n.nvmlDeviceGetRemappedRows(h)
    assert (unc, pending) == (2, 1)
    hist = n.nvmlDeviceGetRowRemapperHistogram(h)
    banks = int(h100["/remapped_rows/row_remapper_histogram/row_remapper_histogram_max"].split()[0])
    assert (hist.max + hist.high, hist.high) == (banks, 2)  # each uncorrectable remap takes a bank off max
    values = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, n.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
                                            n.NVML_FI_DEV_ECC_SBE_VOL_L2, n.NVML_FI_DEV_REMAPPED_UNC,
                                            n.NVML_FI_DEV_NVLINK_LINK_COUNT, n.NVML_FI_DEV_RETIRED_DBE, 9999])
    assert [v.nvmlReturn for v in values[:5]] == [0] * 5
    assert [values[0].value.ullVal, values[1].value.ullVal, values[2].value.ullVal] == [5, 2, 5]
    assert (values[3].value.uiVal, values[4].value.uiVal) == (2, 18)  # 18 NVLink4 links per H100
    assert values[5].nvmlReturn == n.NVML_ERROR_NOT_SUPPORTED
    assert values[6].nvmlReturn == n.NVML_ERROR_INVALID_ARGUMENT  # no header has a field 9999
    # The other GPUs are clean.
    assert n.nvmlDeviceGetTotalEccErrors(handles(n)[0], 1, 0) == 0


def test_a_turing_board_retires_pages(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """Before Ampere, boards retire pages instead of remapping rows (the T4 capture: retired counts 0, remapped
    rows N/A)."""
    n = pynvml_module
    nvml("t4-cloud", faults=[{"kind": "ecc", "device": "gpu0", "type": "dbe", "count": 3,
                              "location": "device-memory"}])
    h = handles(n)[0]
    assert len(n.nvmlDeviceGetRetiredPages(h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)) == 3
    assert n.nvmlDeviceGetRetiredPagesPendingStatus(h) == 1
    assert error_of(lambda: n.nvmlDeviceGetRemappedRows(h)) == n.NVML_ERROR_NOT_SUPPORTED


RM_PAGE_SHIFT = 12
"""NVIDIA's resource manager keeps retired (offlined) framebuffer pages as 4 KiB page numbers and turns them into
addresses as ``pageAddressWithEccOn << RM_PAGE_SHIFT`` (memmgrGetBlackListPages_GM107 in src/nvidia/src/kernel/gpu/
mem_mgr/arch/maxwell/mem_mgr_gm107.c of NVIDIA/open-gpu-kernel-modules, whose headers define RM_PAGE_SHIFT 12 and
RM_PAGE_SIZE 4096): a retired page's address is a multiple of 4096."""


def test_retired_pages_are_distinct_pages_of_the_framebuffer(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlDeviceGetRetiredPages returns "the hardware address of the page that was retired": an address
    in the board's framebuffer, so below the real T4's 15360 MiB (its capture's fb_memory_usage total), and no page
    twice (a page is retired once). The fake drew them from 24 random bits of 4 KiB pages, up to 64 GiB: 14 of 16
    lay past a T4's memory. Each is a whole 4 KiB page (RM_PAGE_SHIFT)."""
    n = pynvml_module
    nvml("t4-cloud", faults=[{"kind": "ecc", "device": "gpu0", "type": "dbe", "count": 16,
                              "location": "device-memory"}])
    framebuffer = number(board_capture("t4")["/fb_memory_usage/total"]) * 2**20
    pages = n.nvmlDeviceGetRetiredPages(handles(n)[0], n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    assert len(pages) == 16
    assert all(0 <= page < framebuffer for page in pages), [hex(p) for p in pages]
    assert len(set(pages)) == len(pages)
    assert all(page % (1 << RM_PAGE_SHIFT) == 0 for page in pages), [hex(p) for p in pages]


def test_a_framebuffer_of_four_pages_retires_three_distinct_pages_inside_it() -> None:
    """The same rules on the smallest framebuffer that shows its edges: four 4 KiB pages (16 KiB) hold three pages
    past address 0 (an address of 0 is what an empty slot of nvmlDeviceGetRetiredPages' buffer holds), so three
    retired pages are those three, whatever the seed: none past the framebuffer's end (nvml.h: the hardware address
    of a page of the board), none twice, none left out while there is room."""
    from fakehw.nvml.snapshot import retired_pages

    page = 1 << RM_PAGE_SHIFT
    for seed in range(8):
        for gpu in ("node-0/gpu0", "node-0/gpu1"):
            assert sorted(retired_pages(seed, gpu, 3, 4 * page)) == [page, 2 * page, 3 * page], (seed, gpu)


def test_a_framebuffer_with_no_page_past_address_0_retires_none() -> None:
    """The edge below the four-page case: a framebuffer of one 4 KiB page (RM_PAGE_SHIFT) holds only the page at
    address 0, which an empty slot of nvmlDeviceGetRetiredPages' buffer holds too, and one of half a page or none at
    all holds no whole page; nvml.h's retired page is "the hardware address of the page that was retired", a page of
    the board. So however many double-bit errors are asked for, no page is retired there: in particular none at
    4096, a page past the end of such a framebuffer."""
    from fakehw.nvml.snapshot import retired_pages

    page = 1 << RM_PAGE_SHIFT
    for framebuffer in (page, page // 2, 0):
        for count in (1, 3, 16):
            assert retired_pages(7, "node-0/gpu0", count, framebuffer) == (), (framebuffer, count)


def test_one_double_bit_error_retires_a_page_and_leaves_it_pending(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """NVIDIA's Dynamic Page Retirement guide, use case 1 (DBE detected): the page is retired after a *single* DBE,
    nvidia-smi's Retired Pages "Double Bit ECC" count goes up and its "Pending Page Blacklist" becomes Yes
    (nvmlDeviceGetRetiredPagesPendingStatus answers NVML_FEATURE_ENABLED) until the GPU is reattached. The real T4,
    without errors, reads retired_count 0 and pending No. nvmlDeviceGetRetiredPages_v2 adds "the time of each page's
    retirement" (nvml.h): a page this test made retire was retired while it ran, not at the epoch (0) nor later."""
    n = pynvml_module
    clean = board_capture("t4")
    assert clean["/retired_pages/double_bit_retirement/retired_count"] == "0"
    assert clean["/retired_pages/pending_retirement"] == "No"
    began = int(time.time())
    nvml("t4-cloud", faults=[{"kind": "ecc", "device": "gpu0", "type": "dbe", "count": 1,
                              "location": "device-memory"}])
    h = handles(n)[0]
    pages = n.nvmlDeviceGetRetiredPages(h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    assert len(pages) == 1 and pages[0] % (1 << RM_PAGE_SHIFT) == 0, pages
    assert n.nvmlDeviceGetRetiredPagesPendingStatus(h) == n.NVML_FEATURE_ENABLED
    (retired,) = n.nvmlDeviceGetRetiredPages_v2(h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    assert retired["address"] == pages[0]
    assert began <= retired["timestamp"] <= time.time(), retired


def test_temperature_thresholds_are_the_real_t4s(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvidia-smi -q prints nvmlDeviceGetTemperatureThreshold as ``gpu_temp_max_threshold`` (SHUTDOWN),
    ``gpu_temp_slow_threshold`` (SLOWDOWN) and ``gpu_temp_max_gpu_threshold`` (GPU_MAX): each must be the real
    Tesla T4's own reading in the capture (96, 93 and 85 C there), not a neighbour's."""
    n = pynvml_module
    real = board_capture("t4")
    nvml("t4-cloud")
    h = handles(n)[0]
    for threshold, leaf in ((n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, "gpu_temp_max_threshold"),
                            (n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, "gpu_temp_slow_threshold"),
                            (n.NVML_TEMPERATURE_THRESHOLD_GPU_MAX, "gpu_temp_max_gpu_threshold")):
        assert n.nvmlDeviceGetTemperatureThreshold(h, threshold) == number(real[f"/temperature/{leaf}"]), leaf


def test_mig_device_indices_end_below_the_max_mig_device_count(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """dgx-a100's gpu7 is in MIG mode with two 3g.40gb instances (the profile says so). An A100 holds at most seven
    MIG devices (NVIDIA's MIG user guide), which nvmlDeviceGetMaxMigDeviceCount reports. nvml.h,
    nvmlDeviceGetMigDeviceHandleByIndex: NOT_FOUND when "no valid MIG device was found at index", INVALID_ARGUMENT
    when the index itself is invalid: 0-6 are slots (two filled), 7 is past the last one."""
    n = pynvml_module
    nvml("dgx-a100")
    h = handles(n)[7]
    assert n.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    for index in (0, 1):
        n.nvmlDeviceGetMigDeviceHandleByIndex(h, index)
    for index in range(2, 7):
        assert error_of(partial(n.nvmlDeviceGetMigDeviceHandleByIndex, h, index)) == n.NVML_ERROR_NOT_FOUND
    for index in (7, 8):
        assert error_of(partial(n.nvmlDeviceGetMigDeviceHandleByIndex, h, index)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_max_mig_device_count_is_zero_while_mig_mode_is_off(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92, nvmlDeviceGetMaxMigDeviceCount: "Returns zero if MIG is not supported or enabled"; NVIDIA's
    go-nvml maintainers read it the same way (NVIDIA/go-nvml#60: "For a GPU with MIG disabled this is 0"). dgx-a100's
    gpu0 is an A100 (MIG-capable) whose MIG mode is off, as nvmlDeviceGetMigMode says here; gpu7, in MIG mode, has
    its seven slots (the test above)."""
    n = pynvml_module
    nvml("dgx-a100")
    h = handles(n)[0]
    assert n.nvmlDeviceGetMigMode(h) == [n.NVML_DEVICE_MIG_DISABLE, n.NVML_DEVICE_MIG_DISABLE]
    assert n.nvmlDeviceGetMaxMigDeviceCount(h) == 0
    assert n.nvmlDeviceGetMaxMigDeviceCount(handles(n)[7]) == 7



def test_a_gpu_instance_id_the_gpu_does_not_hold_is_not_found(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92, nvmlDeviceGetGpuInstanceById: NOT_FOUND "If the GPU instance is not found" (INVALID_ARGUMENT
    is for an invalid device, id or gpuInstance pointer; NOT_SUPPORTED for a GPU without MIG mode). dgx-a100's gpu7
    boots in MIG mode with two 3g.40gb GPU instances, ids 1 and 2 (the MIG user guide's ids for the two halves,
    as test_mig_pynvml.py holds them); id 0 is the id the full 7g.80gb instance takes when it exists (nvidia-smi
    mig -cgi: "Successfully created GPU instance ID 0 ... using profile MIG 7g.80gb"), so on gpu7 it names a GPU
    instance that is not there: NOT_FOUND. gpu0, MIG mode off: NOT_SUPPORTED (nvml.h: "If device doesn't have MIG
    mode enabled")."""
    n = pynvml_module
    nvml("dgx-a100")
    hs = handles(n)
    gpu7 = hs[7]
    assert n.nvmlDeviceGetMigMode(gpu7) == [n.NVML_DEVICE_MIG_ENABLE, n.NVML_DEVICE_MIG_ENABLE]
    for held in (1, 2):
        assert n.nvmlGpuInstanceGetInfo(n.nvmlDeviceGetGpuInstanceById(gpu7, held)).id == held
    assert error_of(partial(n.nvmlDeviceGetGpuInstanceById, gpu7, 0)) == n.NVML_ERROR_NOT_FOUND
    assert error_of(partial(n.nvmlDeviceGetGpuInstanceById, hs[0], 1)) == n.NVML_ERROR_NOT_SUPPORTED

# --------------------------------------------------------------------------------------------------- readings


def test_clocks_power_temperature_throttling(nvml: Nvml, pynvml_module: ModuleType, h100: dict[str, str]) -> None:
    """Idle boards read as the idle real H100 (clocks, the "GPU idle" reason, limits, thresholds); the faults
    set what they request (96 C, a 350 W cap) and the reasons that follow from them."""
    n = pynvml_module
    faults = [{"kind": "thermal", "device": "gpu4", "temperature_c": 96},
              {"kind": "power-cap", "device": "gpu5", "limit_w": 350}]
    nvml("dgx-h100", faults=faults)
    hs = handles(n)
    watts = {k: number(h100[f"/gpu_power_readings/{k}_power_limit"]) * 1000 for k in ("default", "min", "max")}
    for i, h in enumerate(hs):
        assert n.nvmlDeviceGetPowerManagementDefaultLimit(h) == watts["default"]
        assert n.nvmlDeviceGetPowerManagementLimitConstraints(h) == [watts["min"], watts["max"]]
        limit = 350_000 if i == 5 else watts["default"]
        assert n.nvmlDeviceGetPowerManagementLimit(h) == n.nvmlDeviceGetEnforcedPowerLimit(h) == limit
        assert 0 < n.nvmlDeviceGetPowerUsage(h) <= limit
        assert n.nvmlDeviceGetTotalEnergyConsumption(h) > 0
        assert n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM) == number(h100["/max_clocks/sm_clock"])
        assert n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM) == number(h100["/max_clocks/mem_clock"])
        util = n.nvmlDeviceGetUtilizationRates(h)
        assert (util.gpu, util.memory) == (0, 0)
        assert n.nvmlDeviceGetPerformanceState(h) == 0
        assert n.nvmlDeviceGetNumFans(h) == 0
        assert error_of(partial(n.nvmlDeviceGetFanSpeed, h)) == n.NVML_ERROR_NOT_SUPPORTED
        reasons = n.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        assert reasons & n.nvmlClocksThrottleReasonGpuIdle  # "Idle: Active" on the idle real H100
        if i not in (4, 5):
            assert n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU) < 40
            assert reasons == n.nvmlClocksThrottleReasonGpuIdle
            assert n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM) == number(h100["/clocks/sm_clock"])
            assert n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM) == number(h100["/clocks/mem_clock"])
    assert n.nvmlDeviceGetTemperature(hs[4], n.NVML_TEMPERATURE_GPU) == 96
    assert n.nvmlDeviceGetCurrentClocksThrottleReasons(hs[4]) & n.nvmlClocksThrottleReasonSwThermalSlowdown
    assert n.nvmlDeviceGetCurrentClocksThrottleReasons(hs[5]) & n.nvmlClocksThrottleReasonSwPowerCap


# --------------------------------------------------------------------------------------------------- processes


GPU1_PROCESSES = (FakeProcess("gpu1", 4242, 3 * 2**30, "trainer", kinds=1),
                  FakeProcess("gpu1", 4343, 2**30, "viz", kinds=2),
                  FakeProcess("gpu1", 4444, 5 * 2**30, "mps-client", kinds=5))
"""gpu1's processes in the process tests: one compute, one graphics, one MPS client (compute through the MPS server)."""


def test_running_processes_in_every_layout(nvml: Nvml, pynvml_module: ModuleType) -> None:
    n = pynvml_module
    nvml("dgx-h100", processes=GPU1_PROCESSES)
    h = handles(n)[1]
    compute = n.nvmlDeviceGetComputeRunningProcesses(h)  # _v3
    assert {(p.pid, p.usedGpuMemory) for p in compute} == {(4242, 3 * 2**30), (4444, 5 * 2**30)}
    assert [p.pid for p in n.nvmlDeviceGetGraphicsRunningProcesses(h)] == [4343]
    assert [p.pid for p in n.nvmlDeviceGetMPSComputeRunningProcesses(h)] == [4444]
    assert n.nvmlDeviceGetComputeRunningProcesses(handles(n)[0]) == []
    lib = ctypes.CDLL("libnvidia-ml.so.1")

    class V1(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

    class V2(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gi", ctypes.c_uint),
                    ("ci", ctypes.c_uint)]

    assert (ctypes.sizeof(V1), ctypes.sizeof(V2)) == (16, 24)
    for name, struct in (("nvmlDeviceGetComputeRunningProcesses", V1),
                         ("nvmlDeviceGetComputeRunningProcesses_v2", V2),
                         ("nvmlDeviceGetComputeRunningProcesses_v3", V2)):
        count = ctypes.c_uint(0)
        assert getattr(lib, name)(h, ctypes.byref(count), None) == n.NVML_ERROR_INSUFFICIENT_SIZE
        assert count.value == 2
        arr = (struct * 2)()
        assert getattr(lib, name)(h, ctypes.byref(count), arr) == 0
        assert [(e.pid, e.usedGpuMemory) for e in arr] == [(4242, 3 * 2**30), (4444, 5 * 2**30)]
        if struct is V2:
            assert arr[0].gi == arr[0].ci == 0xFFFFFFFF


# --------------------------------------------------------------------------------------------------- nvml.h contracts


def test_ecc_errors_are_counted_at_nvmls_own_memory_locations(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """Each fault location the control API takes lands at the nvmlMemoryLocation_t nvml.h gives it (nvidia-ml-py's
    constants: L1 0, L2 1, device memory/DRAM 2, register file 3, SRAM 7), and the totals sum every location, SRAM
    (the last one) included. The counts are the fault requests' own, each location a different one."""
    n = pynvml_module
    sbe = {"l1-cache": (n.NVML_MEMORY_LOCATION_L1_CACHE, 1), "l2-cache": (n.NVML_MEMORY_LOCATION_L2_CACHE, 2),
           "register-file": (n.NVML_MEMORY_LOCATION_REGISTER_FILE, 3), "sram": (n.NVML_MEMORY_LOCATION_SRAM, 4),
           "device-memory": (n.NVML_MEMORY_LOCATION_DEVICE_MEMORY, 5)}
    faults: list[dict[str, object]] = [{"kind": "ecc", "device": "gpu3", "type": "sbe", "count": count,
                                        "location": where} for where, (_, count) in sbe.items()]
    faults.append({"kind": "ecc", "device": "gpu3", "type": "dbe", "count": 6, "location": "dram"})
    nvml("dgx-h100", faults=faults)
    h = handles(n)[3]
    corrected, uncorrected = n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    for counter in (n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC):
        for where, (location, count) in sbe.items():
            assert n.nvmlDeviceGetMemoryErrorCounter(h, corrected, counter, location) == count, where
        assert n.nvmlDeviceGetMemoryErrorCounter(h, uncorrected, counter, n.NVML_MEMORY_LOCATION_DRAM) == 6
        for location in (n.NVML_MEMORY_LOCATION_TEXTURE_MEMORY, n.NVML_MEMORY_LOCATION_TEXTURE_SHM,
                         n.NVML_MEMORY_LOCATION_CBU):
            assert n.nvmlDeviceGetMemoryErrorCounter(h, corrected, counter, location) == 0
        assert n.nvmlDeviceGetTotalEccErrors(h, corrected, counter) == 1 + 2 + 3 + 4 + 5
        assert n.nvmlDeviceGetTotalEccErrors(h, uncorrected, counter) == 6
    detailed = n.nvmlDeviceGetDetailedEccErrors(h, corrected, n.NVML_AGGREGATE_ECC)
    assert (detailed.l1Cache, detailed.l2Cache, detailed.deviceMemory, detailed.registerFile) == (1, 2, 5, 3)
    assert error_of(partial(n.nvmlDeviceGetMemoryErrorCounter, h, corrected, n.NVML_VOLATILE_ECC,
                            n.NVML_MEMORY_LOCATION_COUNT)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_ecc_counter_type_past_the_enum_is_an_invalid_argument(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's nvmlEccCounterType_t has two counter types, NVML_VOLATILE_ECC (0) and NVML_AGGREGATE_ECC (1), then
    NVML_ECC_COUNTER_TYPE_COUNT (2); nvmlDeviceGetTotalEccErrors, nvmlDeviceGetDetailedEccErrors and
    nvmlDeviceGetMemoryErrorCounter answer NVML_ERROR_INVALID_ARGUMENT "if ... counterType is invalid" (nvml.h
    13.4, the three getters' return lists). The H100 has ECC on (the dgx-h100 capture's ecc_mode), so the check is
    the argument's, not NOT_SUPPORTED's."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    past = 2  # NVML_ECC_COUNTER_TYPE_COUNT in nvml.h
    corrected = n.NVML_MEMORY_ERROR_TYPE_CORRECTED
    assert error_of(partial(n.nvmlDeviceGetTotalEccErrors, h, corrected, past)) == n.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(partial(n.nvmlDeviceGetDetailedEccErrors, h, corrected, past)) == n.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(partial(n.nvmlDeviceGetMemoryErrorCounter, h, corrected, past,
                            n.NVML_MEMORY_LOCATION_DEVICE_MEMORY)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_thermal_settings_sensor_is_the_gpu_cores(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """The one sensor nvmlDeviceGetThermalSettings reports reads the GPU core temperature (nvmlDeviceGetTemperature's
    NVML_TEMPERATURE_GPU), so nvml.h's nvmlThermalTarget_t labels it NVML_THERMAL_TARGET_GPU (1, "GPU core
    temperature"), not BOARD (8, the board's ambient) or MEMORY (2), and its controller is the GPU's own
    (NVML_THERMAL_CONTROLLER_GPU_INTERNAL, the nvmlThermalController_t entry after NONE)."""
    n = pynvml_module
    nvml("dgx-h100")
    settings = n.c_nvmlGpuThermalSettings_t()
    n.nvmlDeviceGetThermalSettings(handles(n)[0], 0, ctypes.byref(settings))
    assert settings.sensor[0].target == 1  # NVML_THERMAL_TARGET_GPU, nvml.h
    assert settings.sensor[0].controller == 1  # NVML_THERMAL_CONTROLLER_GPU_INTERNAL, nvml.h

def test_energy_is_in_millijoules_like_its_field_value(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h documents nvmlDeviceGetTotalEnergyConsumption and NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION alike as the
    energy "in millijoules (mJ) since the driver was last reloaded": the two must be the same number."""
    n = pynvml_module
    nvml("dgx-h100")
    for h in handles(n):
        field = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION])[0]
        assert field.nvmlReturn == n.NVML_SUCCESS
        assert n.nvmlDeviceGetTotalEnergyConsumption(h) == field.value.ullVal > 0


def test_pcie_throughput_answers_each_direction_from_its_own_counter(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES) is what nvidia-smi prints as ``tx_util`` and RX as
    ``rx_util``, two readings that differ on the real H100 (502 and 578 KB/s on its first GPU). The shim copies the
    snapshot's two fields; swapped, every board would transmit what it receives. An unknown counter is
    INVALID_ARGUMENT (nvml.h)."""
    n = pynvml_module
    snap = nvml("dgx-h100")
    pairs = []
    for rec, h in zip(snap.snapshot.gpus, handles(n), strict=True):
        tx = n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES)
        rx = n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES)
        assert (tx, rx) == (rec.pcie_tx_kbs, rec.pcie_rx_kbs)
        pairs.append((tx, rx))
        assert error_of(partial(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_COUNT)) == \
            n.NVML_ERROR_INVALID_ARGUMENT
    assert any(tx != rx for tx, rx in pairs), "the readings must tell the directions apart"


def test_an_unknown_sensor_or_threshold_is_an_invalid_argument(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlDeviceGetTemperature(V) returns NVML_ERROR_INVALID_ARGUMENT "if ... sensorType is invalid":
    nvml.h 13.4's nvmlTemperatureSensors_t is GPU (0), GPU_MAX (1), then NVML_TEMPERATURE_COUNT (2) (nvidia-ml-py
    12.535's COUNT is 1, from a header before GPU_MAX: the value is the header's), and a valid sensor the board does
    not have is NOT_SUPPORTED (test_enum_bounds.py covers GPU_MAX). nvmlDeviceGetTemperatureThreshold likewise for a
    threshold type past NVML_TEMPERATURE_THRESHOLD_COUNT; a known threshold the board lacks (acoustic limits) is
    NOT_SUPPORTED."""
    n = pynvml_module
    nvml("t4-cloud")
    h = handles(n)[0]
    assert n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU) > 0
    temperature_count_in_nvml_h = 2
    for sensor in (temperature_count_in_nvml_h, 7):
        assert error_of(partial(n.nvmlDeviceGetTemperature, h, sensor)) == n.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(partial(n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN)) == \
        n.NVML_ERROR_NOT_SUPPORTED
    assert error_of(partial(n.nvmlDeviceGetTemperatureThreshold, h, 99)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_a_null_output_pointer_is_an_invalid_argument(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, for every getter with more than one output: NVML_ERROR_INVALID_ARGUMENT if any of them is NULL
    ("current or pending is NULL", "minLimit or maxLimit is NULL", ...). The library must say so, not write
    through the null pointer (which would kill the caller, a monitoring daemon, with SIGSEGV)."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    h = handles(n)[0]
    a, b, c = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    major, minor = ctypes.c_int(), ctypes.c_int()
    ref = ctypes.byref
    calls: dict[str, list[tuple[object, ...]]] = {
        "nvmlDeviceGetEccMode": [(ref(a), None), (None, ref(b))],
        "nvmlDeviceGetPowerManagementLimitConstraints": [(ref(a), None), (None, ref(b))],
        "nvmlDeviceGetCudaComputeCapability": [(ref(major), None), (None, ref(minor))],
        "nvmlDeviceGetRemappedRows": [(ref(a), ref(b), ref(c), None), (None, ref(a), ref(b), ref(c))],
        "nvmlDeviceGetEncoderStats": [(ref(a), ref(b), None)],
        "nvmlDeviceGetEncoderUtilization": [(ref(a), None)],
        "nvmlDeviceGetMinMaxClockOfPState": [(n.NVML_CLOCK_SM, 0, ref(a), None)],
    }
    for name, argument_lists in calls.items():
        for args in argument_lists:
            assert getattr(lib, name)(h, *args) == n.NVML_ERROR_INVALID_ARGUMENT, (name, args)


def test_fans_are_indexed_from_zero_below_the_fan_count(pynvml_module: ModuleType,
                                                        node_snapshot: Callable[..., NodeSnap]) -> None:
    """Every captured board is passively cooled (fan_speed N/A), so no profile has fans; a snapshot of a board
    with two (a workstation card's record, written here) exercises the index rule of nvml.h's
    nvmlDeviceGetFanSpeed_v2: fans are "zero indexed", nvmlDeviceGetNumFans counts them, and an index that is not
    one of them is NVML_ERROR_INVALID_ARGUMENT."""
    from tests.nvml.helpers import give_first_gpu_two_fans, snapshot_env

    n = pynvml_module
    snap = node_snapshot("edge-pcie")
    give_first_gpu_two_fans(snap, speed=41)
    with snapshot_env(snap.path):
        n.nvmlInit()
        try:
            h = handles(n)[0]
            assert n.nvmlDeviceGetNumFans(h) == 2
            assert [n.nvmlDeviceGetFanSpeed_v2(h, fan) for fan in (0, 1)] == [41, 41]
            assert n.nvmlDeviceGetFanSpeed(h) == 41
            for fan in (2, 3):
                assert error_of(partial(n.nvmlDeviceGetFanSpeed_v2, h, fan)) == n.NVML_ERROR_INVALID_ARGUMENT
                assert error_of(partial(n.nvmlDeviceGetTargetFanSpeed, h, fan)) == n.NVML_ERROR_INVALID_ARGUMENT
            assert error_of(partial(n.nvmlDeviceGetFanSpeed_v2, handles(n)[1], 0)) == n.NVML_ERROR_NOT_SUPPORTED
        finally:
            n.nvmlShutdown()


def test_modes_and_clock_settings_are_the_real_h100s(nvml: Nvml, pynvml_module: ModuleType,
                                                     h100: dict[str, str]) -> None:
    """The settings nvidia-smi -q prints from these getters, as the real (idle) H100 prints them: persistence
    mode Enabled, display Disabled, accounting Disabled, compute mode Default, not a multi-GPU board, ECC Enabled
    now, pending and by default, MIG Disabled, P0, PCIe gen 5 at most on the device, the nine clock event reasons
    it lists (nvidia-ml-py's nvmlClocksEventReasonAll), and its application, default application and customer boost
    clocks. nvml.h: an SXM module's bus is NVML_BUS_TYPE_PCIE (its host interface) and every NVLink of a GPU
    cabled to NVSwitches is NVML_NVLINK_CAP_VALID."""
    n = pynvml_module
    nvml("dgx-h100")
    enabled = {"Enabled": n.NVML_FEATURE_ENABLED, "Disabled": n.NVML_FEATURE_DISABLED}
    assert h100["/compute_mode"] == "Default" and h100["/multigpu_board"] == "No"
    assert h100["/performance_state"] == "P0"
    for h in handles(n):
        assert n.nvmlDeviceGetPersistenceMode(h) == enabled[h100["/persistence_mode"]]
        assert n.nvmlDeviceGetDisplayActive(h) == enabled[h100["/display_active"]]
        assert n.nvmlDeviceGetAccountingMode(h) == enabled[h100["/accounting_mode"]]
        assert n.nvmlDeviceGetComputeMode(h) == n.NVML_COMPUTEMODE_DEFAULT
        assert n.nvmlDeviceGetMultiGpuBoard(h) == 0
        assert n.nvmlDeviceGetEccMode(h) == [enabled[h100["/ecc_mode/current_ecc"]],
                                             enabled[h100["/ecc_mode/pending_ecc"]]]
        # A board nobody reconfigured runs in its default ECC mode: the one it reports now, Enabled (data
        # center boards ship with ECC on, NVIDIA's GPU memory error management guide).
        assert n.nvmlDeviceGetDefaultEccMode(h) == [enabled[h100["/ecc_mode/current_ecc"]]]  # pynvml: a list
        assert n.nvmlDeviceGetMigMode(h) == [enabled[h100["/mig_mode/current_mig"]],
                                             enabled[h100["/mig_mode/pending_mig"]]]
        assert n.nvmlDeviceGetPerformanceState(h) == n.NVML_PSTATE_0
        assert str(n.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)) == \
            h100["/pci/pci_gpu_link_info/pcie_gen/max_device_link_gen"]
        assert n.nvmlDeviceGetBusType(h) == n.NVML_BUS_TYPE_PCIE
        assert n.nvmlDeviceGetSupportedClocksEventReasons(h) == n.nvmlClocksEventReasonAll
        for clock, leaf in ((n.NVML_CLOCK_GRAPHICS, "graphics_clock"), (n.NVML_CLOCK_MEM, "mem_clock")):
            assert n.nvmlDeviceGetApplicationsClock(h, clock) == number(h100[f"/applications_clocks/{leaf}"])
            assert n.nvmlDeviceGetDefaultApplicationsClock(h, clock) == \
                number(h100[f"/default_applications_clocks/{leaf}"])
        assert n.nvmlDeviceGetMaxCustomerBoostClock(h, n.NVML_CLOCK_GRAPHICS) == \
            number(h100["/max_customer_boost_clocks/graphics_clock"])
        for link in range(n.NVML_NVLINK_MAX_LINKS):
            assert n.nvmlDeviceGetNvLinkCapability(h, link, n.NVML_NVLINK_CAP_VALID) == 1


def test_samples_are_stamped_in_microseconds_of_the_wall_clock(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlSample_t.timeStamp: "CPU Timestamp in microseconds" (of the Unix epoch, what nvidia-smi -q -d
    POWER prints as a date). A sample read now was taken between the start of this test and now; a caller that
    already saw it (lastSeenTimeStamp at it) gets NVML_ERROR_NOT_FOUND, "no new samples"."""
    n = pynvml_module
    before_us = int(time.time() * 1e6)
    nvml("dgx-h100")
    h = handles(n)[0]
    _kind, samples = n.nvmlDeviceGetSamples(h, n.NVML_GPU_UTILIZATION_SAMPLES, 0)
    after_us = int(time.time() * 1e6)
    assert len(samples) == 1
    assert before_us <= samples[0].timeStamp <= after_us
    assert error_of(partial(n.nvmlDeviceGetSamples, h, n.NVML_GPU_UTILIZATION_SAMPLES, samples[0].timeStamp)) == \
        n.NVML_ERROR_NOT_FOUND


def test_nvswitch_connected_links_count_the_ports_that_are_up(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT (nvml.h: "Number of NVLinks connected to NVSwitch"): each H100
    of a DGX H100 has its 18 NVLink4 ports cabled to the NVSwitches, so 18; gpu0 with one port down (the fault
    request) has 17 left."""
    n = pynvml_module
    nvml("dgx-h100", faults=[{"kind": "nvlink-down", "device": "gpu0", "link": 3}])
    counts = [n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT])[0] for h in handles(n)]
    assert [c.nvmlReturn for c in counts] == [n.NVML_SUCCESS] * 8
    assert [c.value.uiVal for c in counts] == [17] + [18] * 7


def test_a_board_without_nvlink_counts_no_links(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """The Tesla T4 is a PCIe Gen3 x16 card with no NVLink connector (NVIDIA's T4 datasheet; its nvidia-smi
    capture shows no NVLink at all). NVML_FI_DEV_NVLINK_LINK_COUNT (nvml.h: "Number of NVLinks present on the
    device") therefore gives no link, as a zero or as NOT_SUPPORTED, never one, and link 0 has no state
    (NOT_SUPPORTED, nvml.h)."""
    n = pynvml_module
    nvml("t4-cloud")
    h = handles(n)[0]
    field = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
    assert field.nvmlReturn == n.NVML_ERROR_NOT_SUPPORTED or (field.nvmlReturn, field.value.uiVal) == (0, 0)
    assert error_of(partial(n.nvmlDeviceGetNvLinkState, h, 0)) == n.NVML_ERROR_NOT_SUPPORTED


def test_gpus_bridged_to_each_other_have_no_nvswitch_links(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """cxl-pool's H200 NVL pair is bridged GPU to GPU: NVLinks, none of them connected to an NVSwitch."""
    n = pynvml_module
    nvml("cxl-pool")
    for h in handles(n):
        assert n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_LINK_COUNT])[0].value.uiVal > 0
        field = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT])[0]
        assert (field.nvmlReturn, field.value.uiVal) == (n.NVML_SUCCESS, 0)


def test_gpu_memory_is_a_numa_node_only_on_coherent_platforms(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetNumaNodeId: "This only applies to platforms where the GPUs are NUMA nodes" (a Grace
    superchip's coherent HBM, test_affinity). A DGX H100's GPUs sit behind PCIe on x86: NOT_SUPPORTED."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    node = ctypes.c_uint(0xEEEE)
    for h in handles(n):
        assert lib.nvmlDeviceGetNumaNodeId(h, ctypes.byref(node)) == n.NVML_ERROR_NOT_SUPPORTED
    assert node.value == 0xEEEE


def test_a_process_given_only_its_memory_is_a_compute_process_that_adds_no_load(nvml: Nvml,
                                                                               pynvml_module: ModuleType) -> None:
    """FakeProcess's documented defaults: a process is a compute process (kinds bit 0) and keeps the GPU busy
    only as much as its ``utilization`` says (none given: none). So it is listed by the compute getter only and
    the idle board stays at 0 % (the idle real H100's reading)."""
    n = pynvml_module
    nvml("dgx-h100", processes=[FakeProcess("gpu6", 5150, 2**30)])
    h = handles(n)[6]
    assert [(p.pid, p.usedGpuMemory) for p in n.nvmlDeviceGetComputeRunningProcesses(h)] == [(5150, 2**30)]
    assert n.nvmlDeviceGetGraphicsRunningProcesses(h) == []
    assert n.nvmlDeviceGetMPSComputeRunningProcesses(h) == []
    assert n.nvmlDeviceGetUtilizationRates(h).gpu == 0


def test_memory_processes_allocate_comes_out_of_the_free_memory(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlMemory_t's total "is equal to the sum of the amounts of free and used memory", and
    nvmlMemory_v2_t splits used into reserved and "Allocated device memory". Two processes allocating 3 and 5 GiB
    on gpu6 are 8 GiB allocated there: free is that much less than on a GPU without processes, and the sums hold
    on both."""
    n = pynvml_module
    nvml("dgx-h100", processes=[FakeProcess("gpu6", 4242, 3 * 2**30), FakeProcess("gpu6", 4444, 5 * 2**30)])
    busy, idle = handles(n)[6], handles(n)[5]
    for h, allocated in ((busy, 8 * 2**30), (idle, 0)):
        v1, v2 = n.nvmlDeviceGetMemoryInfo(h), n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
        assert v2.used == allocated
        assert v1.used + v1.free == v1.total == v2.total == v2.reserved + v2.used + v2.free
    free = [n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2).free for h in (busy, idle)]
    assert free[1] - free[0] == 8 * 2**30


def test_a_gpu_whose_processes_take_all_its_memory_has_none_free(nvml: Nvml, node_snapshot: Callable[..., NodeSnap],
                                                                  pynvml_module: ModuleType) -> None:
    """nvml.h's free is the "Unallocated device memory": processes that allocate exactly what an idle GPU has free
    leave 0 bytes, and the v2 sum reserved + used + free == total still holds; one claiming more than that (bad
    input) cannot make unallocated memory negative either: 0."""
    n = pynvml_module
    idle_free = node_snapshot("dgx-h100").snapshot.gpus[6].mem_free  # the input: what gpu6 has free when idle
    nvml("dgx-h100", processes=[FakeProcess("gpu6", 4242, idle_free - 2**30), FakeProcess("gpu6", 4444, 2**30),
                                FakeProcess("gpu7", 4545, idle_free + 2**30)])
    full = n.nvmlDeviceGetMemoryInfo(handles(n)[6], version=n.nvmlMemory_v2)
    assert (full.used, full.free) == (idle_free, 0)
    assert full.reserved + full.used + full.free == full.total
    assert n.nvmlDeviceGetMemoryInfo(handles(n)[7], version=n.nvmlMemory_v2).free == 0


def test_a_process_keeps_only_its_own_gpu_busy(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlUtilization_t.gpu: the "percent of time over the past sample period during which one or more
    kernels was executing on the GPU", that GPU. A process keeping gpu6 60 % busy (FakeProcess.utilization) makes
    gpu6 busy, and its neighbours stay at the idle real H100's 0 % (its capture's gpu_util)."""
    n = pynvml_module
    nvml("dgx-h100", processes=[FakeProcess("gpu6", 5150, 2**30, utilization=60)])
    util = [n.nvmlDeviceGetUtilizationRates(h).gpu for h in handles(n)]
    assert util[6] >= 60, util
    assert util[:6] + util[7:] == [0] * 7, util


def test_a_process_that_declares_no_load_adds_none(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """A GPU's utilization is the sum of what its processes keep it busy (FakeProcess.utilization: percent of the
    GPU's time, the sum at most 100), and a process listed without a load (a CUDA context holding memory, idle)
    adds nothing: gpu6 running a 60 % process and an idle one reads 60 %, as with the busy one alone, and a GPU
    with only idle processes reads the idle real H100's 0 % (its capture's gpu_util)."""
    n = pynvml_module
    nvml("dgx-h100", processes=[FakeProcess("gpu6", 5150, 2**30, utilization=60), FakeProcess("gpu6", 5151, 2**30),
                                FakeProcess("gpu2", 5152, 2**30), FakeProcess("gpu2", 5153, 2**30)])
    util = [n.nvmlDeviceGetUtilizationRates(h).gpu for h in handles(n)]
    assert (util[6], util[2]) == (60, 0), util


def test_a_process_on_each_mig_device_is_listed_there_and_one_past_the_last_is_refused(
        nvml: Nvml, node_snapshot: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """dgx-a100's gpu7 is in MIG mode with two 3g.40gb instances: MIG devices 0 and 1 (nvml.h,
    nvmlDeviceGetMigDeviceHandleByIndex, indices below nvmlDeviceGetMaxMigDeviceCount). A process placed on each
    is listed by that MIG device's handle and no other, with its GPU instance (nvml.h, nvmlProcessInfo_t: "If MIG
    is enabled, stores a valid GPU instance ID"). A process placed on MIG device 2, which does not exist, is
    refused by name, not an IndexError."""
    from fakehw.nvml.snapshot import SnapshotError

    with pytest.raises(SnapshotError, match=r"process 4003: \S*gpu7 has no MIG device 2"):
        node_snapshot("dgx-a100", processes=[FakeProcess("gpu7", 4003, 2**30, mig_index=2)])
    n = pynvml_module
    nvml("dgx-a100", processes=[FakeProcess("gpu7", 4001, 2**30, mig_index=0),
                                FakeProcess("gpu7", 4002, 3 * 2**30, mig_index=1)])
    h = handles(n)[7]
    for k, (pid, used) in enumerate(((4001, 2**30), (4002, 3 * 2**30))):
        mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
        listed = n.nvmlDeviceGetComputeRunningProcesses(mig)
        assert [(p.pid, p.usedGpuMemory) for p in listed] == [(pid, used)]
        assert listed[0].gpuInstanceId == n.nvmlDeviceGetGpuInstanceId(mig)


@dataclass(frozen=True)
class MigSplit:
    """The MIG device UUIDs of :func:`gpu6_with_one_gpu_instance_of_three`: gpu6's three created compute instances
    and gpu7's booted ones."""

    created: list[str]
    booted: list[str]


def gpu6_with_one_gpu_instance_of_three(snap: NodeSnap, processes: tuple[FakeProcess, ...] = ()) -> MigSplit:
    """dgx-a100's gpu6 put in MIG mode (applied, not pending) with one 3g.40gb GPU instance holding three 1-slice
    compute instances, made through the agent's own MIG calls; gpu7 keeps its two booted 3g.40gb instances. The
    snapshot at ``snap.path`` is rewritten with that state and ``processes``."""
    import dataclasses

    from fakehw.agent import mig as agent_mig
    from fakehw.agent.state import derive_state
    from fakehw.nvml.snapshot import build_snapshot

    node, gpu6 = snap.node, snap.node.gpu("gpu6")
    assert gpu6 is not None
    boot = agent_mig.boot_mig(node)
    state = boot.gpu("gpu6")
    assert state is not None
    for fact in agent_mig.set_mode(gpu6, state, True):
        state = agent_mig.apply_fact(state, fact)
    state = dataclasses.replace(state, current=True, pending=False)
    for fact in agent_mig.create_gpu_instance(gpu6, state, "3g.40gb")[0]:
        state = agent_mig.apply_fact(state, fact)
    gid = state.gis[0].id
    for _ in range(3):
        for fact in agent_mig.create_compute_instance(gpu6, state, gid, "1c.3g.40gb")[0]:
            state = agent_mig.apply_fact(state, fact)
    node_state = dataclasses.replace(derive_state(node, [], 2, snap.system.seed),
                                     mig=agent_mig.NodeMig(node.name, {**boot.gpus, "gpu6": state}))
    write_snapshot(snap.path, build_snapshot(snap.system, node, node_state, processes=processes).to_bytes())
    return MigSplit(created=[c.uuid for c in state.gis[0].cis],
                    booted=[c.uuid for gi in boot.gpus["gpu7"].gis for c in gi.cis])


def test_each_gpu_lists_its_own_mig_devices_when_one_gpu_instance_holds_three(nvml: Nvml,
                                                                              pynvml_module: ModuleType) -> None:
    """NVIDIA's MIG user guide: a GPU instance can be split into several compute instances, each a MIG device of its
    own. dgx-a100's gpu6 gets one 3g.40gb GPU instance holding three 1-slice compute instances (three MIG devices,
    one GPU instance) ahead of gpu7's two booted 3g.40gb instances (one each). nvml.h: a parent's
    nvmlDeviceGetMigDeviceHandleByIndex walks its own MIG devices, so gpu6 answers the three compute instances
    created (their UUIDs are the creation's) in one GPU instance, and gpu7 its two booted ones in two, whatever the
    GPU before it holds."""
    n = pynvml_module
    split = gpu6_with_one_gpu_instance_of_three(nvml("dgx-a100"))
    created, booted = split.created, split.booted
    assert len(created) == 3 and len(booted) == 2
    h = handles(n)

    def mig_uuids(parent: object) -> list[str]:
        return [n.nvmlDeviceGetUUID(n.nvmlDeviceGetMigDeviceHandleByIndex(parent, k))
                for k in range(n.nvmlDeviceGetMaxMigDeviceCount(parent))
                if not error_of_or_none(partial(n.nvmlDeviceGetMigDeviceHandleByIndex, parent, k))]

    assert sorted(mig_uuids(h[6])) == sorted(created)
    assert sorted(mig_uuids(h[7])) == sorted(booted)
    for parent, instances in ((h[6], 1), (h[7], 2)):
        migs = [n.nvmlDeviceGetMigDeviceHandleByIndex(parent, k) for k in range(3 if instances == 1 else 2)]
        gis = {n.nvmlDeviceGetGpuInstanceId(m) for m in migs}
        assert len(gis) == instances
        for gi in gis:
            assert n.nvmlDeviceGetGpuInstanceById(parent, gi)


def test_a_mig_device_lists_only_its_compute_instances_processes_in_every_getter(nvml: Nvml,
                                                                                  pynvml_module: ModuleType) -> None:
    """nvml.h (nvidia-nvml-dev 13.4.92, as tests/nvml/references.py fetches it; 13.3.29's says the same): "A MIG device
    handle is an NVML abstraction which maps to a MIG compute instance" (nvmlDeviceIsMigDeviceHandle), and
    nvmlDeviceGetComputeRunningProcesses_v3 and nvmlDeviceGetRunningProcessDetailList carry the same note: "In MIG
    mode, if device handle is provided, the API returns aggregate information ... Per-instance information can be
    queried by using specific MIG device handles". gpu6 of dgx-a100 gets one GPU instance holding three compute
    instances (three MIG devices, one GPU instance ID) and one compute process on each: every MIG device lists its
    own process and not its siblings', in the detail list as in the v3 list, with the compute instance the handle
    maps to; the parent lists all three. (The detail list filtered by GPU instance only, so each MIG device listed
    all three processes.)"""
    n = pynvml_module
    placed = tuple(FakeProcess("gpu6", 6100 + k, (k + 1) * 2**30, mig_index=k) for k in range(3))
    gpu6_with_one_gpu_instance_of_three(nvml("dgx-a100"), placed)
    parent = handles(n)[6]

    def detail(h: object) -> list[tuple[int, int, int, int]]:
        listed = n.nvmlDeviceGetRunningProcessDetailList(h, n.nvmlProcessDetailList_v1, n.NVML_PROCESS_MODE_COMPUTE)
        return sorted((p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in listed)

    def v3(h: object) -> list[tuple[int, int, int, int]]:
        return sorted((p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId)
                      for p in n.nvmlDeviceGetComputeRunningProcesses(h))

    seen: list[tuple[int, int, int, int]] = []
    for k in range(3):
        mig = n.nvmlDeviceGetMigDeviceHandleByIndex(parent, k)
        own = (n.nvmlDeviceGetGpuInstanceId(mig), n.nvmlDeviceGetComputeInstanceId(mig))
        listed = detail(mig)
        assert len(listed) == 1, (k, listed)
        assert listed[0][2:] == own
        assert v3(mig) == listed
        seen += listed
    assert sorted(p for p, *_ in seen) == [6100, 6101, 6102]
    assert len({gi for _, _, gi, _ in seen}) == 1  # one GPU instance, three compute instances
    assert detail(parent) == v3(parent) == sorted(seen)


def error_of_or_none(fn: Callable[[], object]) -> int | None:
    """The NVML error ``fn`` raises, None when it succeeds."""
    import pynvml

    try:
        fn()
    except pynvml.NVMLError as e:
        return int(e.value)
    return None


def test_an_a100_in_mig_mode_answers_the_published_profile_table(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """dgx-a100's gpu7 (an A100-SXM4-80GB) is in MIG mode with two 3g.40gb instances (the profile says so). Its GPU
    instance profiles answer by nvml.h's profile index as the A100 80GB's published `nvidia-smi mig -lgip`
    (tests/nvml/migtools.py A100_80GB_LGIP): id, instances, SMs, engines and memory as nvidia-smi prints it. Both
    3g.40gb slots are taken, so none remains; each MIG device is a 3g.40gb: 42 SMs, 3 slices, its memory."""
    from tests.nvml.migtools import A100_80GB_LGIP

    n = pynvml_module
    nvml("dgx-a100")
    h = handles(n)[7]
    index = {"1g.10gb": n.NVML_GPU_INSTANCE_PROFILE_1_SLICE, "1g.10gb+me": n.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
             "2g.20gb": n.NVML_GPU_INSTANCE_PROFILE_2_SLICE, "3g.40gb": n.NVML_GPU_INSTANCE_PROFILE_3_SLICE}
    info_of = {}
    for name, pid, total, gib, sm, dec, enc, ce, jpeg, ofa in A100_80GB_LGIP:
        info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, index[name.removeprefix("MIG ")])
        assert (info.id, info.instanceCount, info.multiprocessorCount, info.decoderCount, info.encoderCount,
                info.copyEngineCount, info.jpegCount, info.ofaCount) == (pid, total, sm, dec, enc, ce, jpeg, ofa), name
        assert f"{info.memorySizeMB / 1024:.2f}" == gib, name
        info_of[name] = info
    three = info_of["MIG 3g.40gb"]
    assert n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, three.id) == 0
    for i in range(2):
        attrs = n.nvmlDeviceGetAttributes(n.nvmlDeviceGetMigDeviceHandleByIndex(h, i))
        assert (attrs.multiprocessorCount, attrs.gpuInstanceSliceCount) == (42, 3)
        assert attrs.memorySizeMB == three.memorySizeMB


def test_gpm_pcie_rates_agree_with_the_pcie_throughput_getter(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """GPU performance monitoring is a Hopper feature (nvml.h: "Hopper or newer fully supported devices"): an H100
    supports it. Its PCIe metrics between two samples (NVML_GPM_METRIC_PCIE_TX/RX_PER_SEC, MiB/s) measure the same
    traffic as nvmlDeviceGetPcieThroughput (KB/s, nvml.h), direction by direction, so they agree to within the
    samples' byte rounding. A request of another version is ARGUMENT_VERSION_MISMATCH."""
    import math

    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    assert n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 1
    first, second = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    try:
        n.nvmlGpmSampleGet(h, first)
        time.sleep(0.02)  # let the monotonic clock move on (no assertion on time)
        n.nvmlGpmSampleGet(h, second)
        request = pcie_rate_metrics(n, first, second)
        for metric, counter in ((request.metrics[0], n.NVML_PCIE_UTIL_TX_BYTES),
                                (request.metrics[1], n.NVML_PCIE_UTIL_RX_BYTES)):
            assert metric.nvmlReturn == n.NVML_SUCCESS
            assert math.isclose(metric.value, n.nvmlDeviceGetPcieThroughput(h, counter) / 1024, rel_tol=0.01)
        request.version = n.NVML_GPM_METRICS_GET_VERSION + 1
        assert error_of(partial(n.nvmlGpmMetricsGet, request)) == n.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    finally:
        n.nvmlGpmSampleFree(first)
        n.nvmlGpmSampleFree(second)


def test_getters_that_restate_another_agree_with_it(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h answers some readings twice; each pair must agree. nvmlDeviceGetCpuAffinityWithinScope at node and at
    socket scope is nvmlDeviceGetCpuAffinity where NUMA nodes are sockets (a DGX H100's two Xeons), and a scope past
    NVML_AFFINITY_SCOPE_SOCKET is INVALID_ARGUMENT. nvmlDeviceGetThermalSettings' one GPU sensor reads the current
    temperature nvmlDeviceGetTemperature gives. A GPU is on its own board; two SXM modules, each its own board and
    not a multi-GPU board, are not on one. The supported performance states are the one it reports, P0 (the
    real H100's)."""
    n = pynvml_module
    nvml("dgx-h100", faults=[{"kind": "thermal", "device": "gpu3", "temperature_c": 88}])
    hs = handles(n)
    for h in hs:
        words = list(n.nvmlDeviceGetCpuAffinity(h, 4))
        assert any(words)
        for scope in (n.NVML_AFFINITY_SCOPE_NODE, n.NVML_AFFINITY_SCOPE_SOCKET):
            assert list(n.nvmlDeviceGetCpuAffinityWithinScope(h, 4, scope)) == words
        assert error_of(partial(n.nvmlDeviceGetCpuAffinityWithinScope, h, 4, 2)) == n.NVML_ERROR_INVALID_ARGUMENT
        settings = n.c_nvmlGpuThermalSettings_t()
        n.nvmlDeviceGetThermalSettings(h, 0, ctypes.byref(settings))
        assert settings.count == 1
        assert settings.sensor[0].currentTemp == n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        assert n.nvmlDeviceGetSupportedPerformanceStates(h) == [n.NVML_PSTATE_0]
    assert n.nvmlDeviceGetTemperature(hs[3], n.NVML_TEMPERATURE_GPU) == 88
    assert n.nvmlDeviceOnSameBoard(hs[0], hs[0])
    assert not n.nvmlDeviceOnSameBoard(hs[0], hs[1])


# --------------------------------------------------------------------------------------------------- C getters' edges


def test_a_string_buffer_must_hold_the_terminating_nul(nvml: Nvml, pynvml_module: ModuleType,
                                                       h100: dict[str, str]) -> None:
    """nvml.h, for every string getter: NVML_ERROR_INSUFFICIENT_SIZE "if length is too small"; ``length`` is the
    buffer's size in bytes and the answer is NUL-terminated, so a buffer exactly as long as the text (no byte for
    the NUL) is too small, one byte more is enough. The name is the real H100's (its capture's product_name);
    nvidia-ml-py always passes large buffers, so the edge is only reached by calling the library directly."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    h = handles(n)[0]
    name = h100["/product_name"].encode()
    for length in (len(name), len(name) - 1):
        buf = ctypes.create_string_buffer(b"\xab" * 96, 96)
        assert lib.nvmlDeviceGetName(h, buf, length) == n.NVML_ERROR_INSUFFICIENT_SIZE, length
        assert buf.raw[length:] == b"\xab" * (96 - length)  # nothing written past what the caller offered
    buf = ctypes.create_string_buffer(len(name) + 1)
    assert lib.nvmlDeviceGetName(h, buf, len(name) + 1) == n.NVML_SUCCESS
    assert buf.raw == name + b"\0"
    version = n.nvmlSystemGetDriverVersion().encode()
    small = ctypes.create_string_buffer(len(version))
    assert lib.nvmlSystemGetDriverVersion(small, len(version)) == n.NVML_ERROR_INSUFFICIENT_SIZE
    exact = ctypes.create_string_buffer(len(version) + 1)
    assert lib.nvmlSystemGetDriverVersion(exact, len(version) + 1) == n.NVML_SUCCESS and exact.value == version


def test_nvlink_throughput_fields_count_each_direction_from_its_own_counter(nvml: Nvml,
                                                                          pynvml_module: ModuleType) -> None:
    """nvml.h: NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX (138) and _RAW_TX (140) are the NVLink TX throughput in KiB,
    _DATA_RX (139) and _RAW_RX (141) the RX one, summed over the GPU's links: the same traffic
    nvmlDeviceGetNvLinkUtilizationCounter reports per link as (rx, tx) bytes. The two directions of a GPU carry
    different amounts here (it sends more than it receives), so a field answering the other direction shows.
    (gpu5: the counters' resets and freezes are this process's, and test_nvlink_utilization_counters made some on
    gpu0.)"""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[5]
    links = [link for link in range(n.NVML_NVLINK_MAX_LINKS)
             if n.nvmlDeviceGetNvLinkState(h, link) == n.NVML_FEATURE_ENABLED]
    assert len(links) == 18  # an H100 SXM5 has 18 NVLink4 links
    counters = [n.nvmlDeviceGetNvLinkUtilizationCounter(h, link, 0) for link in links]
    rx, tx = sum(c[0] for c in counters), sum(c[1] for c in counters)
    assert rx != tx
    ids = [n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
           n.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, n.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX]
    values = n.nvmlDeviceGetFieldValues(h, ids)
    assert [v.nvmlReturn for v in values] == [n.NVML_SUCCESS] * 4
    assert [v.value.ullVal for v in values] == [tx // 1024, rx // 1024, tx // 1024, rx // 1024]


def test_confidential_computing_memory_sizes_are_in_kib(nvml: Nvml, pynvml_module: ModuleType,
                                                        h100: dict[str, str]) -> None:
    """nvml.h's nvmlConfComputeMemSizeInfo_t counts in KiB (protectedMemSizeKib, unprotectedMemSizeKib). With
    confidential computing off, as on the real H100 (its capture's cc_protected_memory_usage total is 0 MiB), no
    memory is protected and the unprotected share is the whole framebuffer: the capture's fb_memory_usage total,
    81559 MiB, is 81559 * 1024 KiB, and the KiB of the total nvmlDeviceGetMemoryInfo reports."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    info = n.nvmlDeviceGetConfComputeMemSizeInfo(h)
    assert number(h100["/cc_protected_memory_usage/total"]) == 0 == info.protectedMemSizeKib
    assert info.unprotectedMemSizeKib == n.nvmlDeviceGetMemoryInfo(h).total // 1024
    assert info.unprotectedMemSizeKib // 1024 == number(h100["/fb_memory_usage/total"]) == 81559


class GpuInstanceProfileInfoV3(ctypes.Structure):
    """nvml.h's nvmlGpuInstanceProfileInfo_v3_t (580+): v2 without isP2pSupported, with capabilities at the end
    (nvidia-ml-py 13 has no binding for it)."""

    _fields_ = [("version", ctypes.c_uint), ("id", ctypes.c_uint), ("sliceCount", ctypes.c_uint),
                ("instanceCount", ctypes.c_uint), ("multiprocessorCount", ctypes.c_uint),
                ("copyEngineCount", ctypes.c_uint), ("decoderCount", ctypes.c_uint), ("encoderCount", ctypes.c_uint),
                ("jpegCount", ctypes.c_uint), ("ofaCount", ctypes.c_uint), ("memorySizeMB", ctypes.c_ulonglong),
                ("name", ctypes.c_char * 96), ("capabilities", ctypes.c_uint)]


def test_gpu_instance_profiles_fill_the_v3_layout(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvmlDeviceGetGpuInstanceProfileInfoV with a v3 struct (version word sizeof | 3 << 24, nvml.h) fills v3's
    fields where v3 has them: one place earlier than v2's from sliceCount on, since v3 dropped isP2pSupported. The
    A100 80GB's profiles (dgx-a100's gpu7 is in MIG mode) have the published `nvidia-smi mig -lgip` instance counts
    and SMs (tests/nvml/migtools.py) and as many GPU slices as their names' "Ng" (NVIDIA's MIG user guide)."""
    from tests.nvml.migtools import A100_80GB_LGIP

    n = pynvml_module
    nvml("dgx-a100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    h = handles(n)[7]
    index = {"1g.10gb": n.NVML_GPU_INSTANCE_PROFILE_1_SLICE, "1g.10gb+me": n.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
             "2g.20gb": n.NVML_GPU_INSTANCE_PROFILE_2_SLICE, "3g.40gb": n.NVML_GPU_INSTANCE_PROFILE_3_SLICE}
    for name, pid, total, _gib, sm, dec, enc, ce, jpeg, ofa in A100_80GB_LGIP:
        short = name.removeprefix("MIG ")
        info = GpuInstanceProfileInfoV3(version=ctypes.sizeof(GpuInstanceProfileInfoV3) | 3 << 24)
        assert lib.nvmlDeviceGetGpuInstanceProfileInfoV(h, index[short], ctypes.byref(info)) == n.NVML_SUCCESS
        assert (info.id, info.sliceCount, info.instanceCount, info.multiprocessorCount) == \
            (pid, int(short[0]), total, sm), name
        assert (info.decoderCount, info.encoderCount, info.copyEngineCount, info.jpegCount, info.ofaCount) == \
            (dec, enc, ce, jpeg, ofa), name
        assert info.memorySizeMB == n.nvmlDeviceGetGpuInstanceProfileInfo(h, index[short]).memorySizeMB, name


def test_a_mig_devices_parent_is_its_visible_gpu(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """With only dgx-a100's gpu7 visible (FAKEHW_VISIBLE_DEVICES=7, as CUDA_VISIBLE_DEVICES would leave it), that
    GPU is device 0 of the process: its MIG devices' parent (nvmlDeviceGetDeviceHandleFromMigDeviceHandle), and
    the device of their GPU and compute instances (nvmlGpuInstanceGetInfo, nvmlComputeInstanceGetInfo), is the
    handle nvmlDeviceGetHandleByIndex(0) gave, the GPU with gpu7's UUID (nvml.h: the handle of the parent
    device; the node's numbering does not apply to a process that sees one GPU)."""
    n = pynvml_module
    snap = nvml("dgx-a100", env={"FAKEHW_VISIBLE_DEVICES": "7"})
    assert n.nvmlDeviceGetCount() == 1
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetUUID(h) == snap.node.gpus[7].uuid
    for i in range(2):  # the profile's two 3g.40gb instances
        mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        assert addr(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)) == addr(h)
        gi = n.nvmlDeviceGetGpuInstanceById(h, n.nvmlDeviceGetGpuInstanceId(mig))
        assert addr(n.nvmlGpuInstanceGetInfo(gi).device) == addr(h)
        ci = n.nvmlGpuInstanceGetComputeInstanceById(gi, n.nvmlDeviceGetComputeInstanceId(mig))
        assert addr(n.nvmlComputeInstanceGetInfo(ci).device) == addr(h)


def test_instance_ids_of_a_whole_gpu_are_not_supported(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetGpuInstanceId and nvmlDeviceGetComputeInstanceId ("for the given MIG device handle"):
    INVALID_ARGUMENT is for an invalid handle or a NULL id, NOT_SUPPORTED "if this query is not supported by the
    device". A whole GPU's handle is valid but has no instance: NOT_SUPPORTED, in MIG mode (dgx-a100's gpu7) or
    not (gpu0). A MIG device of gpu7 answers its ids."""
    n = pynvml_module
    nvml("dgx-a100")
    for h in (handles(n)[0], handles(n)[7]):
        for getter in (n.nvmlDeviceGetGpuInstanceId, n.nvmlDeviceGetComputeInstanceId):
            assert error_of(partial(getter, h)) == n.NVML_ERROR_NOT_SUPPORTED
    mig = n.nvmlDeviceGetMigDeviceHandleByIndex(handles(n)[7], 0)
    gi = n.nvmlDeviceGetGpuInstanceById(handles(n)[7], n.nvmlDeviceGetGpuInstanceId(mig))
    assert n.nvmlGpuInstanceGetComputeInstanceById(gi, n.nvmlDeviceGetComputeInstanceId(mig))


def test_field_values_are_stamped_in_microseconds_of_the_wall_clock(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlFieldValue_t.timestamp: "CPU Timestamp of this value in microseconds since 1970" (DCGM orders
    its samples by it). A value read now was taken between the start of this test and now, whether the field
    answered or not."""
    n = pynvml_module
    before_us = int(time.time() * 1e6)
    nvml("dgx-h100")
    h = handles(n)[0]
    values = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_ECC_CURRENT, n.NVML_FI_DEV_NVLINK_LINK_COUNT, 9999])
    after_us = int(time.time() * 1e6)
    assert [v.nvmlReturn for v in values] == [n.NVML_SUCCESS, n.NVML_SUCCESS, n.NVML_ERROR_INVALID_ARGUMENT]
    for v in values:
        assert before_us <= v.timestamp <= after_us, v.fieldId


def test_byte_count_fields_count_each_direction_from_its_own_counter(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """Siblings of the throughput fields' directions. nvml.h: NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES (202) and
    _RCV_BYTES (204), with scopeId the link, are Blackwell's (NVLink5) per-link byte counts, the traffic
    nvmlDeviceGetNvLinkUtilizationCounter reports as (rx, tx) on counter 0; a B200 sends more than it receives
    here, so the directions differ. NVML_FI_DEV_PCIE_COUNT_TX_BYTES (197) and _RX_BYTES (198) count PCIe bytes:
    over the same span of time they grow as the TX and RX rates of nvmlDeviceGetPcieThroughput stand to each
    other (to within a byte's rounding of some 20 KB)."""
    import math

    n = pynvml_module
    nvml("dgx-b200")
    h = handles(n)[5]  # untouched by the tests that reset or freeze utilization counters (this process's)
    for link in (0, 5, 17):
        rx, tx = n.nvmlDeviceGetNvLinkUtilizationCounter(h, link, 0)
        assert rx != tx
        values = n.nvmlDeviceGetFieldValues(h, [(202, link), (204, link)])
        assert [v.nvmlReturn for v in values] == [n.NVML_SUCCESS] * 2
        assert [v.value.ullVal for v in values] == [tx, rx], link
    tx_rate = n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES)
    rx_rate = n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES)
    tx_before, rx_before = (v.value.ullVal for v in n.nvmlDeviceGetFieldValues(h, [197, 198]))
    time.sleep(0.05)
    tx_after, rx_after = (v.value.ullVal for v in n.nvmlDeviceGetFieldValues(h, [197, 198]))
    assert tx_rate != rx_rate
    assert math.isclose((tx_after - tx_before) * rx_rate, (rx_after - rx_before) * tx_rate, rel_tol=1e-3)


# --------------------------------------------------------------------------------------------------- boards' own states


@contextmanager
def board_state(n: ModuleType, snap: NodeSnap, gpu: int, **fields: object) -> Iterator[list[object]]:
    """nvmlInit on ``snap`` with GPU ``gpu``'s record given ``fields``: a state a real board can be in that the
    agent's model does not reach (counts since a driver reload that differ from the lifetime ones, one throttle
    reason without its usual companion, a distinct figure per GPM pipe). The C getters pass those fields through,
    so each answer is the test's own input, placed where nvml.h's names put it. Yields the device handles."""
    with boards_state(n, snap, {gpu: fields}) as hs:
        yield hs


@contextmanager
def boards_state(n: ModuleType, snap: NodeSnap, records: dict[int, dict[str, object]]) -> Iterator[list[object]]:
    """:func:`board_state` for several GPUs at once: each GPU of ``records`` given its fields (a board the built-in
    profiles do not model). Yields the device handles."""
    gpus = list(snap.snapshot.gpus)
    for gpu, fields in records.items():
        gpus[gpu] = replace(gpus[gpu], **fields)  # type: ignore[arg-type]
    write_snapshot(snap.path, replace(snap.snapshot, gpus=tuple(gpus)).to_bytes(), changed=True)
    with snapshot_env(snap.path):
        n.nvmlInit()
        try:
            yield handles(n)
        finally:
            n.nvmlShutdown()


def gpm_request(n: ModuleType, h: object, ids: list[int], capacity: int) -> tuple[int, list[tuple[int, float]]]:
    """nvmlGpmMetricsGet of ``ids`` over two samples of ``h``, with a metrics[] array of ``capacity`` entries
    (nvml.h's nvmlGpmMetricsGet_t: version, numMetrics, sample1, sample2, metrics[NVML_GPM_METRIC_MAX]). Returns
    the call's code and each metric's (nvmlReturn, value)."""

    class Request(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", ctypes.c_void_p),
                    ("sample2", ctypes.c_void_p), ("metrics", n.c_nvmlGpmMetric_t * capacity)]

    lib = ctypes.CDLL("libnvidia-ml.so.1")
    first, second = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    try:
        n.nvmlGpmSampleGet(h, first)
        n.nvmlGpmSampleGet(h, second)
        request = Request(version=n.NVML_GPM_METRICS_GET_VERSION, numMetrics=len(ids),
                          sample1=ctypes.cast(first, ctypes.c_void_p), sample2=ctypes.cast(second, ctypes.c_void_p))
        for i, metric in enumerate(ids):
            request.metrics[i].metricId = metric
        code = lib.nvmlGpmMetricsGet(ctypes.byref(request))
        return code, [(request.metrics[i].nvmlReturn, request.metrics[i].value) for i in range(len(ids))]
    finally:
        n.nvmlGpmSampleFree(first)
        n.nvmlGpmSampleFree(second)


def test_gpm_activity_metrics_answer_their_own_pipes(pynvml_module: ModuleType,
                                                     node_snapshot: Callable[..., NodeSnap]) -> None:
    """nvml.h's GPM metric ids: GRAPHICS_UTIL 1, SM_UTIL 2, SM_OCCUPANCY 3, ANY_TENSOR_UTIL 5, DRAM_BW_UTIL 10,
    FP64_UTIL 11, FP32_UTIL 12, FP16_UTIL 13, each a percentage (0.0 - 100.0). The H100's record carries each
    activity in hundredths of a percent, here a different figure per pipe, so each id must read back its own: a
    metric that answers another pipe's activity (FP64 for FP32) shows."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    activity = {"gpm_graphics_activity": 1100, "gpm_sm_activity": 2200, "gpm_sm_occupancy": 3300,
                "gpm_tensor_activity": 4400, "gpm_dram_bw_util": 5500, "gpm_fp64_activity": 6600,
                "gpm_fp32_activity": 7700, "gpm_fp16_activity": 8800}
    expected = {n.NVML_GPM_METRIC_GRAPHICS_UTIL: 11.0, n.NVML_GPM_METRIC_SM_UTIL: 22.0,
                n.NVML_GPM_METRIC_SM_OCCUPANCY: 33.0, n.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 44.0,
                n.NVML_GPM_METRIC_DRAM_BW_UTIL: 55.0, n.NVML_GPM_METRIC_FP64_UTIL: 66.0,
                n.NVML_GPM_METRIC_FP32_UTIL: 77.0, n.NVML_GPM_METRIC_FP16_UTIL: 88.0}
    with board_state(n, snap, 0, **activity) as hs:
        code, values = gpm_request(n, hs[0], list(expected), n.NVML_GPM_METRIC_MAX)
    assert code == n.NVML_SUCCESS
    assert dict(zip(expected, values, strict=True)) == {k: (n.NVML_SUCCESS, v) for k, v in expected.items()}


def test_a_gpm_request_may_fill_the_whole_metrics_array(nvml: Nvml, pynvml_module: ModuleType,
                                                        tmp_path: Path) -> None:
    """nvml.h (nvidia-nvml-dev 13.4.92, the 615 branch's CUDA 13.4): nvmlGpmMetricsGet_t holds
    metrics[NVML_GPM_METRIC_MAX] and numMetrics says how many of them to fill, so a request of exactly
    NVML_GPM_METRIC_MAX metrics is valid and one more is not (INVALID_ARGUMENT, there is no room for it)."""
    n = pynvml_module
    header = references.newest_header().read_text()
    found = re.search(r"NVML_GPM_METRIC_MAX\s*=\s*(\d+)", header)
    assert found is not None
    most = int(found.group(1))
    assert most == 477
    nvml(str(with_driver(tmp_path, "dgx-h100", "615.10.01")))
    h = handles(n)[0]
    code, values = gpm_request(n, h, [n.NVML_GPM_METRIC_SM_UTIL] * most, most + 1)
    assert code == n.NVML_SUCCESS
    assert {ret for ret, _ in values} == {n.NVML_SUCCESS}
    code, _ = gpm_request(n, h, [n.NVML_GPM_METRIC_SM_UTIL] * (most + 1), most + 1)
    assert code == n.NVML_ERROR_INVALID_ARGUMENT


def test_sram_ecc_status_keeps_the_lifetime_and_the_volatile_counts_apart(pynvml_module: ModuleType,
                                                                          node_snapshot: Callable[..., NodeSnap]
                                                                          ) -> None:
    """nvml.h: volatile ECC counts are reset when the driver reloads, aggregate ones "persist indefinitely and
    thus act as a lifetime counter"; a board that had SRAM errors before its last reboot has fewer volatile than
    aggregate ones. nvmlDeviceGetSramEccErrorStatus (nvmlEccSramErrorStatus_v1_t) answers the SRAM location's
    counts of each kind in its own field, the ones nvmlDeviceGetMemoryErrorCounter gives at
    NVML_MEMORY_LOCATION_SRAM: here corrected 2 volatile / 7 aggregate, uncorrected 1 / 3."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    sram, locations = n.NVML_MEMORY_LOCATION_SRAM, 8  # nvmlMemoryLocation_t: SRAM 7 of 8 (NVML_MEMORY_LOCATION_COUNT)
    counts = [0] * (2 * 2 * locations)  # [error type][volatile, aggregate][location]
    for etype, counter, value in ((0, 0, 2), (0, 1, 7), (1, 0, 1), (1, 1, 3)):
        counts[(etype * 2 + counter) * locations + sram] = value
    with board_state(n, snap, 2, ecc_counts=tuple(counts)) as hs:
        h = hs[2]
        status = n.c_nvmlEccSramErrorStatus_v1_t()
        status.version = n.nvmlEccSramErrorStatus_v1
        n.nvmlDeviceGetSramEccErrorStatus(h, ctypes.byref(status))
        corrected, uncorrected = n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        by_counter = {(t, c): n.nvmlDeviceGetMemoryErrorCounter(h, t, c, sram)
                      for t in (corrected, uncorrected) for c in (n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC)}
    assert (status.volatileCor, status.aggregateCor) == (2, 7)
    assert (status.volatileUncSecDed, status.aggregateUncSecDed) == (1, 3)
    assert by_counter == {(corrected, n.NVML_VOLATILE_ECC): 2, (corrected, n.NVML_AGGREGATE_ECC): 7,
                          (uncorrected, n.NVML_VOLATILE_ECC): 1, (uncorrected, n.NVML_AGGREGATE_ECC): 3}


def test_ecc_error_counts_of_a_board_with_ecc_off_are_not_supported(node_snapshot: Callable[..., NodeSnap],
                                                                     pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetTotalEccErrors and nvmlDeviceGetMemoryErrorCounter: "Requires ECC Mode to be enabled",
    NOT_SUPPORTED "if the device does not support this feature". Every captured board runs with ECC on, but ECC is a
    setting (nvidia-smi -e 0, after a reset): an H100 whose current ECC mode is off answers NOT_SUPPORTED to both,
    whatever counts its record still holds, and its neighbour with ECC on answers them."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    with board_state(n, snap, 3, ecc_current=0) as hs:
        assert n.nvmlDeviceGetEccMode(hs[3])[0] == n.NVML_FEATURE_DISABLED
        corrected, volatile = n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC
        assert error_of(partial(n.nvmlDeviceGetTotalEccErrors, hs[3], corrected, volatile)) == \
            n.NVML_ERROR_NOT_SUPPORTED
        assert error_of(partial(n.nvmlDeviceGetMemoryErrorCounter, hs[3], corrected, volatile,
                                n.NVML_MEMORY_LOCATION_DEVICE_MEMORY)) == n.NVML_ERROR_NOT_SUPPORTED
        assert n.nvmlDeviceGetTotalEccErrors(hs[2], corrected, volatile) >= 0


def test_the_l1_cache_s_volatile_single_bit_field_is_its_counter(node_snapshot: Callable[..., NodeSnap],
                                                                  pynvml_module: ModuleType) -> None:
    """nvml.h: field 7, NVML_FI_DEV_ECC_SBE_VOL_L1, is the "L1 cache single bit volatile ECC errors", the count
    nvmlDeviceGetMemoryErrorCounter gives for (CORRECTED, VOLATILE, NVML_MEMORY_LOCATION_L1_CACHE); field 8 is its
    double-bit sibling. An H100 with 5 corrected and no uncorrected L1 errors since the driver loaded reads 5 and 0
    there (the first field of the per-location range, the one a range check with the wrong bound loses)."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    locations = 8  # nvmlMemoryLocation_t: L1_CACHE 0 ... SRAM 7 (NVML_MEMORY_LOCATION_COUNT 8)
    counts = [0] * (2 * 2 * locations)  # [error type][volatile, aggregate][location]
    counts[n.NVML_MEMORY_LOCATION_L1_CACHE] = 5  # corrected, volatile
    with board_state(n, snap, 1, ecc_counts=tuple(counts)) as hs:
        assert n.nvmlDeviceGetMemoryErrorCounter(hs[1], n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC,
                                                 n.NVML_MEMORY_LOCATION_L1_CACHE) == 5
        values = n.nvmlDeviceGetFieldValues(hs[1], [7, 8])
        assert [(v.nvmlReturn, v.value.ullVal) for v in values] == [(n.NVML_SUCCESS, 5), (n.NVML_SUCCESS, 0)]


class ProcessUtilizationInfoV1(ctypes.Structure):
    """nvml.h's nvmlProcessUtilizationInfo_v1_t."""

    _fields_ = [("timeStamp", ctypes.c_ulonglong), ("pid", ctypes.c_uint), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint),
                ("jpgUtil", ctypes.c_uint), ("ofaUtil", ctypes.c_uint)]


class ProcessesUtilizationInfoV1(ctypes.Structure):
    """nvml.h's nvmlProcessesUtilizationInfo_v1_t (version word sizeof | 1 << 24)."""

    _fields_ = [("version", ctypes.c_uint), ("processSamplesCount", ctypes.c_uint),
                ("lastSeenTimeStamp", ctypes.c_ulonglong),
                ("procUtilArray", ctypes.POINTER(ProcessUtilizationInfoV1))]


def test_process_utilization_without_an_array_asks_for_one(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetProcessesUtilizationInfo: INSUFFICIENT_SIZE "if procUtilArray is NULL, or the buffer
    size of procUtilArray is too small", with the count to allocate in processSamplesCount, whatever count the
    caller passed; then an array of that count is filled, one entry per process (the processes the test runs on
    gpu1)."""
    n = pynvml_module
    procs = [FakeProcess("gpu1", 5151, 2**30, "trainer", kinds=1), FakeProcess("gpu1", 5252, 2**30, "eval", kinds=1)]
    nvml("dgx-h100", processes=procs)
    h = handles(n)[1]
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    info = ProcessesUtilizationInfoV1(version=ctypes.sizeof(ProcessesUtilizationInfoV1) | 1 << 24,
                                      processSamplesCount=8)
    assert lib.nvmlDeviceGetProcessesUtilizationInfo(h, ctypes.byref(info)) == n.NVML_ERROR_INSUFFICIENT_SIZE
    assert info.processSamplesCount == 2
    entries = (ProcessUtilizationInfoV1 * 2)()
    info.procUtilArray = entries
    assert lib.nvmlDeviceGetProcessesUtilizationInfo(h, ctypes.byref(info)) == n.NVML_SUCCESS
    assert info.processSamplesCount == 2
    assert sorted(e.pid for e in entries) == [5151, 5252]


def test_process_utilization_of_a_gpu_running_nothing_is_not_found(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetProcessesUtilizationInfo: NOT_FOUND "if sample entries are not found". A DGX H100 GPU
    with no process on it has no process samples, whatever array the caller offers: NOT_FOUND, the count as given."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    for h in handles(n):
        entries = (ProcessUtilizationInfoV1 * 2)()
        info = ProcessesUtilizationInfoV1(version=ctypes.sizeof(ProcessesUtilizationInfoV1) | 1 << 24,
                                          processSamplesCount=2, procUtilArray=entries)
        assert lib.nvmlDeviceGetProcessesUtilizationInfo(h, ctypes.byref(info)) == n.NVML_ERROR_NOT_FOUND
        assert info.processSamplesCount == 2


def test_each_process_s_utilization_is_a_share_of_the_gpu_s(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlProcessUtilizationInfo_v1_t: smUtil and memUtil are a process's SM and frame-buffer utilization,
    percentages like nvmlDeviceGetUtilizationRates' (nvmlUtilization_t: "percent of time over the past sample
    period"), and a process's share of the GPU's time cannot be more than the GPU was busy: each is at most 100 and
    the processes' sum at most the device's reading. Two processes keeping gpu1 busy 45 % and 35 % of the time."""
    n = pynvml_module
    procs = [FakeProcess("gpu1", 5151, 2**30, "trainer", kinds=1, utilization=45),
             FakeProcess("gpu1", 5252, 2**30, "eval", kinds=1, utilization=35)]
    nvml("dgx-h100", processes=procs)
    h = handles(n)[1]
    device = n.nvmlDeviceGetUtilizationRates(h)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    entries = (ProcessUtilizationInfoV1 * 2)()
    info = ProcessesUtilizationInfoV1(version=ctypes.sizeof(ProcessesUtilizationInfoV1) | 1 << 24,
                                      processSamplesCount=2, procUtilArray=entries)
    assert lib.nvmlDeviceGetProcessesUtilizationInfo(h, ctypes.byref(info)) == n.NVML_SUCCESS
    assert device.gpu > 0 and device.memory > 0  # the processes keep it busy: a share can be told from nothing
    assert all(e.smUtil <= 100 and e.memUtil <= 100 for e in entries)
    assert sum(e.smUtil for e in entries) <= device.gpu and sum(e.memUtil for e in entries) <= device.memory


def test_the_gpu_instances_of_a_visible_gpu_are_its_own(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """With only dgx-a100's gpu7 visible (FAKEHW_VISIBLE_DEVICES=7, as CUDA_VISIBLE_DEVICES would leave it), its
    two 3g.40gb GPU instances (the profile's MIG layout) are nvmlDeviceGetGpuInstances' answer for device 0 of the
    process, and each one's device (nvmlGpuInstanceGetInfo) is that handle: a process that sees one GPU knows
    nothing of the node's numbering (nvml.h: the handles are the process's own)."""
    n = pynvml_module
    nvml("dgx-a100", env={"FAKEHW_VISIBLE_DEVICES": "7"})
    h = n.nvmlDeviceGetHandleByIndex(0)
    three = n.nvmlDeviceGetGpuInstanceProfileInfo(h, n.NVML_GPU_INSTANCE_PROFILE_3_SLICE).id
    found = (n.c_nvmlGpuInstance_t * 7)()
    count = ctypes.c_uint(0)
    n.nvmlDeviceGetGpuInstances(h, three, found, ctypes.byref(count))
    assert count.value == 2
    for gi in found[:2]:
        info = n.nvmlGpuInstanceGetInfo(gi)
        assert addr(info.device) == addr(h) and info.profileId == three


def test_the_gpu_instances_of_a_profile_nvml_h_does_not_have_are_an_invalid_argument(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92, nvmlDeviceGetGpuInstances: INVALID_ARGUMENT "If device, profileId, gpuInstances or count are
    invalid", and NVML_GPU_INSTANCE_PROFILE_COUNT (0x12) is one past its last profile. On dgx-a100's gpu7, in MIG mode
    with two GPU instances, asking for profile 0x12's instances is that error (not a failure of the library)."""
    n = pynvml_module
    nvml("dgx-a100")
    h = handles(n)[7]
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    found = (n.c_nvmlGpuInstance_t * 7)()
    count = ctypes.c_uint(0)
    assert lib.nvmlDeviceGetGpuInstances(h, 0x12, found, ctypes.byref(count)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_a_compute_instance_handle_the_library_did_not_give_is_an_invalid_argument(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92, nvmlComputeInstanceGetInfo_v2: INVALID_ARGUMENT "If computeInstance or info are invalid". On
    dgx-a100, whose gpu7 has compute instances (so the library has handed handles out), a NULL handle and one that
    points at the caller's own memory are that error, not some compute instance's information."""
    _assert_foreign_handles_refused(nvml, pynvml_module, "nvmlComputeInstanceGetInfo_v2",
                                    pynvml_module.c_nvmlComputeInstanceInfo_t)


def test_a_gpu_instance_handle_the_library_did_not_give_is_an_invalid_argument(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92, nvmlGpuInstanceGetInfo: INVALID_ARGUMENT "If gpuInstance or info are invalid". On dgx-a100,
    whose gpu7 has GPU instances (so the library has handed handles out), a NULL handle and one that points at the
    caller's own memory are that error, not GPU instance slot 0's information (seed 10610's mig.c:114)."""
    _assert_foreign_handles_refused(nvml, pynvml_module, "nvmlGpuInstanceGetInfo",
                                    pynvml_module.c_nvmlGpuInstanceInfo_t)


def _assert_foreign_handles_refused(nvml: Nvml, n: ModuleType, getter: str, info_type: type) -> None:
    """On dgx-a100 (whose gpu7 has GPU and compute instances, so the library has handed handles out), ``getter``
    called with a NULL handle and with one pointing at the caller's own memory answers INVALID_ARGUMENT."""
    nvml("dgx-a100")
    handles(n)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    info = info_type()
    own = ctypes.create_string_buffer(64)
    for bogus in (None, ctypes.addressof(own)):
        assert getattr(lib, getter)(ctypes.c_void_p(bogus), ctypes.byref(info)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_mig_mode_without_somewhere_to_put_either_mode_is_an_invalid_argument(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92, nvmlDeviceGetMigMode: INVALID_ARGUMENT "If device, currentMode or pendingMode are invalid". On
    dgx-a100's gpu7 (MIG capable, so the refusal is the pointer's, not NOT_SUPPORTED), a NULL currentMode or a NULL
    pendingMode is that error (seed 10611's mig.c:193 answered UNKNOWN)."""
    n = pynvml_module
    nvml("dgx-a100")
    h = handles(n)[7]
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    mode = ctypes.c_uint(0)
    assert lib.nvmlDeviceGetMigMode(h, ctypes.byref(mode), ctypes.byref(ctypes.c_uint(0))) == n.NVML_SUCCESS
    assert lib.nvmlDeviceGetMigMode(h, None, ctypes.byref(mode)) == n.NVML_ERROR_INVALID_ARGUMENT
    assert lib.nvmlDeviceGetMigMode(h, ctypes.byref(mode), None) == n.NVML_ERROR_INVALID_ARGUMENT


def test_gpu_instance_placements_of_a_gpu_without_mig_are_not_supported(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92, nvmlDeviceGetGpuInstancePossiblePlacements_v2: NOT_SUPPORTED "If device doesn't support MIG or
    profileId isn't supported". edge-pcie's gpu0 is an L4, which NVIDIA's MIG user guide does not list among the
    GPUs that support MIG: for the 1-slice profile (NVML_GPU_INSTANCE_PROFILE_1_SLICE, 0, which every MIG GPU has)
    the answer is that error (seed 10611's mig.c:388 answered UNKNOWN)."""
    n = pynvml_module
    nvml("edge-pcie")
    h = handles(n)[0]
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    count = ctypes.c_uint(0)
    assert lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE, None,
                                                             ctypes.byref(count)) == n.NVML_ERROR_NOT_SUPPORTED


def test_gpu_instance_placements_fill_an_array_of_their_count(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """`nvidia-smi mig -lgipp` (NVIDIA's MIG user guide, tests/nvml/migtools.py LGIPP) lists each A100 profile's
    possible placements as {starts}:size. nvmlDeviceGetGpuInstancePossiblePlacements_v2 with a NULL array answers
    their count (nvml.h), and an array of exactly that count is filled with them: SUCCESS, not INSUFFICIENT_SIZE."""
    from tests.nvml.migtools import A100_80GB_LGIP, LGIPP

    n = pynvml_module
    nvml("dgx-a100")
    h = handles(n)[7]
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    for _name, profile_id, *_ in A100_80GB_LGIP:
        count = ctypes.c_uint(0)
        assert lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, profile_id, None, ctypes.byref(count)) == 0
        placements = (n.c_nvmlGpuInstancePlacement_t * count.value)()
        assert lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, profile_id, placements,
                                                                 ctypes.byref(count)) == n.NVML_SUCCESS
        starts = ",".join(str(p.start) for p in placements)
        assert f"{{{starts}}}:{placements[0].size}" == LGIPP[profile_id], profile_id


def test_supported_performance_states_stay_inside_the_callers_bytes(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetSupportedPerformanceStates: ``size`` is the "Size of the supplied pstates array in
    bytes". Whatever it answers for a 16-byte array (four entries), nothing past those 16 bytes may be written;
    nvidia-ml-py's full array (NVML_MAX_GPU_PERF_PSTATES entries, 64 bytes) gets P0, the H100's one state."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    guard = 0xA5A5A5A5
    buf = (ctypes.c_uint * 32)(*([guard] * 32))
    code = lib.nvmlDeviceGetSupportedPerformanceStates(h, buf, 4 * ctypes.sizeof(ctypes.c_uint))
    assert list(buf[4:]) == [guard] * 28
    assert code in (n.NVML_SUCCESS, n.NVML_ERROR_INSUFFICIENT_SIZE)
    assert n.nvmlDeviceGetSupportedPerformanceStates(h) == [n.NVML_PSTATE_0]


def test_a_hardware_thermal_slowdown_is_a_thermal_violation(pynvml_module: ModuleType,
                                                            node_snapshot: Callable[..., NodeSnap]) -> None:
    """nvml.h: nvmlClocksEventReasonHwThermalSlowdown (0x40) is the hardware's thermal slowdown, "temperature
    being too high"; NVML_PERF_POLICY_THERMAL counts how long "thermal violations" held the clocks down. A board
    whose only reason is the hardware one (the sensor tripped, the driver's software limit not) has thermal
    violation time and no power violation time; an idle board neither."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    with board_state(n, snap, 4, throttle_reasons=n.nvmlClocksThrottleReasonHwThermalSlowdown) as hs:
        thermal = n.nvmlDeviceGetViolationStatus(hs[4], n.NVML_PERF_POLICY_THERMAL).violationTime
        power = n.nvmlDeviceGetViolationStatus(hs[4], n.NVML_PERF_POLICY_POWER).violationTime
        idle = n.nvmlDeviceGetViolationStatus(hs[0], n.NVML_PERF_POLICY_THERMAL).violationTime
    assert thermal > 0
    assert power == idle == 0


def test_a_mig_enabled_gpu_reports_no_utilization(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, on nvmlDeviceGetUtilizationRates, the encoder, decoder, JPEG and OFA utilization, nvmlDeviceGetSamples
    (GPU, memory, encoder and decoder utilization samples) and both process-utilization calls: "On MIG-enabled
    GPUs, querying ... is not currently supported" (NOT_SUPPORTED); the real nvidia-smi 535 prints N/A as GPU-Util
    of a MIG-enabled A800 (utkuozdemir/nvidia_gpu_exporter#203). dgx-a100's gpu7 is in MIG mode and runs a
    process; gpu0 is not and answers, and gpu7's power samples, which the note does not name, still answer."""
    n = pynvml_module
    procs = [FakeProcess("gpu0", 6161, 2**30, "trainer", kinds=1), FakeProcess("gpu7", 6262, 2**30, "eval", kinds=1)]
    nvml("dgx-a100", processes=procs)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    whole, split = handles(n)[0], handles(n)[7]
    assert n.nvmlDeviceGetMigMode(split)[0] == n.NVML_DEVICE_MIG_ENABLE
    assert n.nvmlDeviceGetMigMode(whole)[0] == n.NVML_DEVICE_MIG_DISABLE
    for h, expected in ((whole, n.NVML_SUCCESS), (split, n.NVML_ERROR_NOT_SUPPORTED)):
        rates = n.c_nvmlUtilization_t()
        assert lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(rates)) == expected
        for name in ("Encoder", "Decoder", "Jpg", "Ofa"):
            util, period = ctypes.c_uint(), ctypes.c_uint()
            assert getattr(lib, f"nvmlDeviceGet{name}Utilization")(h, ctypes.byref(util), ctypes.byref(period)) \
                == expected, name
        for kind in (n.NVML_GPU_UTILIZATION_SAMPLES, n.NVML_MEMORY_UTILIZATION_SAMPLES,
                     n.NVML_ENC_UTILIZATION_SAMPLES, n.NVML_DEC_UTILIZATION_SAMPLES):
            value_type, count = ctypes.c_uint(), ctypes.c_uint(0)
            assert lib.nvmlDeviceGetSamples(h, kind, ctypes.c_ulonglong(0), ctypes.byref(value_type),
                                            ctypes.byref(count), None) == expected, kind
        count = ctypes.c_uint(0)
        assert lib.nvmlDeviceGetProcessUtilization(h, None, ctypes.byref(count), ctypes.c_ulonglong(0)) == \
            (n.NVML_ERROR_INSUFFICIENT_SIZE if expected == n.NVML_SUCCESS else expected)
        info = ProcessesUtilizationInfoV1(version=ctypes.sizeof(ProcessesUtilizationInfoV1) | 1 << 24)
        assert lib.nvmlDeviceGetProcessesUtilizationInfo(h, ctypes.byref(info)) == \
            (n.NVML_ERROR_INSUFFICIENT_SIZE if expected == n.NVML_SUCCESS else expected)
    assert n.nvmlDeviceGetSamples(split, n.NVML_TOTAL_POWER_SAMPLES, 0)[1]


def test_a_mig_enabled_gpu_reports_no_core_count(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetNumGpuCores: "On MIG-enabled GPUs, querying the device's core count is currently not
    supported using this API" (a MIG device's share comes from its GPU instance profile). dgx-a100's gpu7 is in
    MIG mode: NOT_SUPPORTED; gpu0 answers the A100's 6912 CUDA cores (NVIDIA A100 datasheet: 108 SMs of 64)."""
    n = pynvml_module
    nvml("dgx-a100")
    assert n.nvmlDeviceGetNumGpuCores(handles(n)[0]) == 6912
    assert error_of(partial(n.nvmlDeviceGetNumGpuCores, handles(n)[7])) == n.NVML_ERROR_NOT_SUPPORTED


class PlatformInfoV2(ctypes.Structure):
    """nvml.h's nvmlPlatformInfo_v2_t (44 bytes; version word sizeof | 2 << 24)."""

    _fields_ = [("version", ctypes.c_uint), ("ibGuid", ctypes.c_ubyte * 16),
                ("chassisSerialNumber", ctypes.c_ubyte * 16), ("slotNumber", ctypes.c_ubyte),
                ("trayIndex", ctypes.c_ubyte), ("hostId", ctypes.c_ubyte), ("peerType", ctypes.c_ubyte),
                ("moduleId", ctypes.c_ubyte)]


def test_platform_info_places_the_gpus_in_the_captured_slot_and_tray(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """The real GB200's nvidia-smi -q (qx-gb200.xml) puts its GPUs at slot_number 14, tray_index 4, host_id 1 of
    the rack; gb200-nvl72's node 4 is that tray (tests/nvml/test_captures.py). nvmlDeviceGetPlatformInfo answers
    each field in its own place (nvml.h's nvmlPlatformInfo_v2_t: slotNumber, trayIndex, hostId): slot and tray
    are different numbers here, so one answering the other shows."""
    n = pynvml_module
    gb200 = board_capture("gb200")
    expected = (int(gb200["/platformInfo/slot_number"]), int(gb200["/platformInfo/tray_index"]),
                int(gb200["/platformInfo/host_id"]))
    assert expected == (14, 4, 1)
    nvml("gb200-nvl72", node_index=4)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    for h in handles(n):
        info = PlatformInfoV2(version=ctypes.sizeof(PlatformInfoV2) | 2 << 24)
        assert lib.nvmlDeviceGetPlatformInfo(h, ctypes.byref(info)) == n.NVML_SUCCESS
        assert (info.slotNumber, info.trayIndex, info.hostId) == expected


def test_ecc_field_values_count_device_memory_and_register_file_apart(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's ECC field ids: NVML_FI_DEV_ECC_SBE_VOL_DEV (11) and _DBE_VOL_DEV (12) are device memory's,
    NVML_FI_DEV_ECC_SBE_VOL_REG (13) and _DBE_VOL_REG (14) the register file's, 22-25 their aggregate ones. The
    counts are the fault requests' own: 5 corrected in device memory, 3 in the register file, 2 uncorrected in the
    register file, none uncorrected in device memory."""
    n = pynvml_module
    faults = [{"kind": "ecc", "device": "gpu2", "type": "sbe", "count": 5, "location": "device-memory"},
              {"kind": "ecc", "device": "gpu2", "type": "sbe", "count": 3, "location": "register-file"},
              {"kind": "ecc", "device": "gpu2", "type": "dbe", "count": 2, "location": "register-file"}]
    nvml("dgx-h100", faults=faults)
    h = handles(n)[2]
    ids = [n.NVML_FI_DEV_ECC_SBE_VOL_DEV, n.NVML_FI_DEV_ECC_DBE_VOL_DEV, n.NVML_FI_DEV_ECC_SBE_VOL_REG,
           n.NVML_FI_DEV_ECC_DBE_VOL_REG, n.NVML_FI_DEV_ECC_SBE_AGG_DEV, n.NVML_FI_DEV_ECC_DBE_AGG_DEV,
           n.NVML_FI_DEV_ECC_SBE_AGG_REG, n.NVML_FI_DEV_ECC_DBE_AGG_REG]
    assert ids == [11, 12, 13, 14, 22, 23, 24, 25]
    values = n.nvmlDeviceGetFieldValues(h, ids)
    assert [v.nvmlReturn for v in values] == [n.NVML_SUCCESS] * 8
    assert [v.value.ullVal for v in values] == [5, 0, 3, 2, 5, 0, 3, 2]


def test_remapped_rows_v2_count_each_kind_in_its_own_field(nvml: Nvml, pynvml_module: ModuleType,
                                                           tmp_path: Path) -> None:
    """nvml.h's nvmlRemappedRowsInfo_v2_t (nvmlDeviceGetRemappedRows_v2, of the 595 branch on): corrActiveRemaps,
    corrInactiveRemaps, uncActiveRemaps, uncInactiveRemaps, bPending, bFailureOccurred. One uncorrectable error on
    an H100 leaves one uncorrectable remap pending and no correctable one
    (test_one_uncorrectable_error_leaves_a_row_remap_pending): v2 answers what nvmlDeviceGetRemappedRows (v1)
    does, each kind in its own field. Its inactive counts are the ones nvml.h's fields 301
    (NVML_FI_DEV_REMAPPED_ROWS_COR_INACTIVE, "Number of inactive row remappings due to correctable errors") and 302
    (_UNC_INACTIVE) give, 0 here as on every board the captures print them for (remapped_row_corr_inactive and
    remapped_row_unc_inactive, 9 GPUs)."""
    n = pynvml_module

    class RemappedRowsInfoV2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint) for name in ("corrActiveRemaps", "corrInactiveRemaps", "uncActiveRemaps",
                                                      "uncInactiveRemaps", "bPending", "bFailureOccurred")]

    nvml(str(with_driver(tmp_path, "dgx-h100", "615.10.01")),
         faults=[{"kind": "ecc", "device": "gpu2", "type": "dbe", "count": 1}])
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    h = handles(n)[2]
    info = RemappedRowsInfoV2()
    assert lib.nvmlDeviceGetRemappedRows_v2(h, ctypes.byref(info)) == n.NVML_SUCCESS
    corr, unc, pending, failure = n.nvmlDeviceGetRemappedRows(h)
    assert (corr, unc, pending, failure) == (0, 1, 1, 0)
    assert (info.corrActiveRemaps, info.uncActiveRemaps, info.bPending, info.bFailureOccurred) == (0, 1, 1, 0)
    inactive = n.nvmlDeviceGetFieldValues(h, [301, 302])
    assert [v.nvmlReturn for v in inactive] == [n.NVML_SUCCESS] * 2
    assert (info.corrInactiveRemaps, info.uncInactiveRemaps) == tuple(v.value.uiVal for v in inactive) == (0, 0)


def test_a_profile_id_no_gpu_has_is_an_invalid_argument(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetGpuInstanceRemainingCapacity: INVALID_ARGUMENT "if device, profileId or count are
    invalid". Profile ids are NVML_GPU_INSTANCE_PROFILE_* (0 ... 14 in nvml.h's numbering of the -lgip IDs up to
    19 and 20 of the +me profiles); 99 is none of them, on dgx-a100's MIG-mode gpu7."""
    n = pynvml_module
    nvml("dgx-a100")
    h = handles(n)[7]
    assert error_of(partial(n.nvmlDeviceGetGpuInstanceRemainingCapacity, h, 99)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_a_bus_id_of_another_pci_function_is_no_gpu(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """A PCI address names one function (domain:bus:device.function, PCI Local Bus spec); an H100 is function 0 of
    its device and answers its own bus id (the profile's). Function 1 at the same device is another function (a
    consumer board's HDMI audio controller sits there): nvmlDeviceGetHandleByPciBusId answers NOT_FOUND, "if
    pciBusId does not match a valid device on the system" (nvml.h)."""
    n = pynvml_module
    snap = nvml("dgx-h100")
    gpu = snap.node.gpus[0]
    bus_id = gpu.address.nvml_bus_id
    assert bus_id.endswith(".0")
    assert addr(n.nvmlDeviceGetHandleByPciBusId(bus_id)) == addr(handles(n)[0])
    assert error_of(partial(n.nvmlDeviceGetHandleByPciBusId, bus_id[:-1] + "1")) == n.NVML_ERROR_NOT_FOUND


def test_resetting_nvlink_utilization_zeroes_both_directions(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceResetNvLinkUtilizationCounter: "Both the receive and transmit counters are operated on by
    this function". Reset (not frozen), the counter reads (0, 0) until traffic moves them; the link carries
    different amounts each way before, so a transmit counter reset to the receive count shows. (gpu6, link 2,
    counter 1: no other test resets or freezes it; the bases are this process's.)"""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[6]
    rx, tx = n.nvmlDeviceGetNvLinkUtilizationCounter(h, 2, 1)
    assert rx != tx
    n.nvmlDeviceResetNvLinkUtilizationCounter(h, 2, 1)
    assert n.nvmlDeviceGetNvLinkUtilizationCounter(h, 2, 1) == (0, 0)


def test_p_state_clock_ranges_are_the_captured_boards(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvmlDeviceGetMinMaxClockOfPState for P0 of an H100, against the real H100's nvidia-smi -q (qx-h100.xml): the
    graphics clock ranges over its supported graphics clocks (345 ... 1980 MHz), the memory clock ends at its max
    memory clock (2619 MHz) and starts at one of its supported memory clocks (2619 or 1593 MHz), not at a graphics
    clock."""
    import xml.etree.ElementTree as ET

    from tests.nvml.captures import capture_dir

    n = pynvml_module
    where = capture_dir()
    if where is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    gpu = ET.parse(where / "qx-h100.xml").getroot().find("gpu")
    assert gpu is not None
    mem_clocks = {number(v.text or "") for v in gpu.iterfind("supported_clocks/supported_mem_clock/value")}
    graphics = {number(v.text or "") for v in gpu.iterfind("supported_clocks/supported_mem_clock/"
                                                            "supported_graphics_clock")}
    mem_max = number(gpu.findtext("max_clocks/mem_clock") or "")
    assert (mem_clocks, min(graphics), max(graphics), mem_max) == ({2619, 1593}, 345, 1980, 2619)
    nvml("dgx-h100")
    h = handles(n)[0]
    lib = ctypes.CDLL("libnvidia-ml.so.1")

    def p0_range(clock: int) -> tuple[int, int]:
        lo, hi = ctypes.c_uint(), ctypes.c_uint()
        assert lib.nvmlDeviceGetMinMaxClockOfPState(h, clock, n.NVML_PSTATE_0, ctypes.byref(lo),
                                                    ctypes.byref(hi)) == n.NVML_SUCCESS
        return lo.value, hi.value

    assert p0_range(n.NVML_CLOCK_GRAPHICS) == (min(graphics), max(graphics))
    lo, hi = p0_range(n.NVML_CLOCK_MEM)
    assert hi == mem_max and lo in mem_clocks


def test_process_utilization_hands_out_only_samples_newer_than_the_last_seen(nvml: Nvml,
                                                                             pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetProcessUtilization and nvmlDeviceGetProcessesUtilizationInfo: lastSeenTimeStamp makes
    them "return only samples with timestamp greater than lastSeenTimeStamp", NOT_FOUND "if sample entries are not
    found" (nvitop and DCGM poll with the last timestamp they saw). Asked again with the timestamp of the samples
    just read, before anything new was sampled, both answer NOT_FOUND; asked from 0 they answer again."""
    n = pynvml_module
    nvml("dgx-h100", processes=[FakeProcess("gpu3", 7171, 2**30, "trainer", kinds=1)])
    h = handles(n)[3]
    samples = n.nvmlDeviceGetProcessUtilization(h, 0)
    assert [s.pid for s in samples] == [7171]
    seen = samples[0].timeStamp
    assert error_of(partial(n.nvmlDeviceGetProcessUtilization, h, seen)) == n.NVML_ERROR_NOT_FOUND
    assert [s.pid for s in n.nvmlDeviceGetProcessUtilization(h, seen - 1)] == [7171]
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    entries = (ProcessUtilizationInfoV1 * 1)()
    info = ProcessesUtilizationInfoV1(version=ctypes.sizeof(ProcessesUtilizationInfoV1) | 1 << 24,
                                      processSamplesCount=1, lastSeenTimeStamp=seen, procUtilArray=entries)
    assert lib.nvmlDeviceGetProcessesUtilizationInfo(h, ctypes.byref(info)) == n.NVML_ERROR_NOT_FOUND
    info.lastSeenTimeStamp = 0
    assert lib.nvmlDeviceGetProcessesUtilizationInfo(h, ctypes.byref(info)) == n.NVML_SUCCESS
    assert entries[0].pid == 7171 and entries[0].timeStamp == seen


# ------------------------------------------------------------------ per-link fields, UUID lookup, detail lists


def test_per_link_fields_of_links_6_to_11_read_their_own_links(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h numbers the per-link NVLink error fields in two runs: _L0 ... _L5 first (NVML_FI_DEV_NVLINK_CRC_DATA_
    ERROR_COUNT_L0 = 39 ... L5 = 44), then _L6 ... _L11 much later (L6 = 102 ... L11 = 107), each id naming its
    link. A fault of 37 CRC data errors on gpu1's link 7 (of 18 on an H100) is what field L7 reads, and link 1
    (the id's position inside its run) reads 0, as nvmlDeviceGetNvLinkErrorCounter says of both links."""
    n = pynvml_module
    nvml("dgx-h100", faults=[{"kind": "nvlink-errors", "device": "gpu1", "link": 7, "counter": "crc-data",
                              "increment": 37}])
    h = handles(n)[1]
    assert n.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L7 == 103 and n.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L1 == 40
    assert n.nvmlDeviceGetNvLinkErrorCounter(h, 7, n.NVML_NVLINK_ERROR_DL_CRC_DATA) == 37
    assert n.nvmlDeviceGetNvLinkErrorCounter(h, 1, n.NVML_NVLINK_ERROR_DL_CRC_DATA) == 0
    fields = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L7,
                                            n.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L1])
    assert [(f.nvmlReturn, f.value.ullVal) for f in fields] == [(0, 37), (0, 0)]


def test_resetting_a_links_error_counters_resets_all_five(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceResetNvLinkErrorCounters: "Resets all error counters to zero"; the counters are the five
    of nvmlNvLinkErrorCounter_t (DL_REPLAY 0, DL_RECOVERY 1, DL_CRC_FLIT 2, DL_CRC_DATA 3, DL_ECC_DATA 4). With
    errors of every kind on gpu2's link 6, each reads what the fault added before the reset and 0 after it."""
    n = pynvml_module
    counters = ("replay", "recovery", "crc-flit", "crc-data", "ecc-data")
    faults = [{"kind": "nvlink-errors", "device": "gpu2", "link": 6, "counter": name, "increment": 10 + i}
              for i, name in enumerate(counters)]
    nvml("dgx-h100", faults=faults)
    h = handles(n)[2]
    assert n.NVML_NVLINK_ERROR_DL_ECC_DATA == 4
    assert [n.nvmlDeviceGetNvLinkErrorCounter(h, 6, c) for c in range(5)] == [10, 11, 12, 13, 14]
    n.nvmlDeviceResetNvLinkErrorCounters(h, 6)
    assert [n.nvmlDeviceGetNvLinkErrorCounter(h, 6, c) for c in range(5)] == [0, 0, 0, 0, 0]


class UuidV1(ctypes.Structure):
    """nvmlUUID_v1_t (nvml.h, 575 and later): version, type, then the ASCII (41 bytes) or binary (16) UUID."""

    class Value(ctypes.Union):
        _fields_ = [("str", ctypes.c_char * 41), ("bytes", ctypes.c_ubyte * 16)]

    _fields_ = [("version", ctypes.c_uint), ("type", ctypes.c_uint), ("value", Value)]


def test_handle_by_binary_uuid_is_the_gpus_own(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetHandleByUUIDV: the UUID as NVML_UUID_TYPE_ASCII (1) text or NVML_UUID_TYPE_BINARY (2)
    16 bytes, which name the same GPU. A GPU UUID is "GPU-" and the RFC 4122 text of those 16 bytes, which RFC
    4122 section 3 writes in lower case (as nvidia-smi prints it in every capture): the binary form of each GPU's
    UUID finds the handle nvmlDeviceGetHandleByIndex gives, and so does its text."""
    n = pynvml_module
    snap = nvml("dgx-h100")  # driver 580: the function is there from 575
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    version = ctypes.sizeof(UuidV1) | 1 << 24
    for gpu, h in zip(snap.node.gpus, handles(n), strict=True):
        raw = uuid.UUID(gpu.uuid.removeprefix("GPU-")).bytes
        binary = UuidV1(version=version, type=2)
        ctypes.memmove(binary.value.bytes, raw, 16)
        text = UuidV1(version=version, type=1)
        text.value.str = gpu.uuid.encode()
        for key in (binary, text):
            found = ctypes.c_void_p()
            assert lib.nvmlDeviceGetHandleByUUIDV(ctypes.byref(key), ctypes.byref(found)) == 0, gpu.uuid
            assert found.value == addr(h)



def test_handle_by_uuid_v_refuses_a_text_with_no_end_and_a_type_nvml_h_does_not_define(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetHandleByUUIDV: INVALID_ARGUMENT "if uuid is invalid ... or uuid->type is invalid",
    NOT_FOUND "if uuid does not match a valid device on the system". nvmlUUIDType_t defines NVML_UUID_TYPE_NONE (0),
    _ASCII (1) and _BINARY (2), and the ASCII value is a C string in a 41-byte field (NVML_DEVICE_UUID_ASCII_LEN):
    a field of 41 characters without a terminating NUL holds no string, so it is no UUID, even when it begins with
    gpu0's UUID; types 0 and 3 are not a UUID's type. Sixteen bytes no GPU has are a well-formed UUID of no device.
    The device reference is left as it was each time."""
    n = pynvml_module
    snap = nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    version = ctypes.sizeof(UuidV1) | 1 << 24
    own = snap.node.gpus[0].uuid.encode()
    unterminated = UuidV1(version=version, type=1)
    ctypes.memmove(ctypes.addressof(unterminated) + UuidV1.value.offset, own + b"0" * (41 - len(own)), 41)
    assert ctypes.string_at(ctypes.addressof(unterminated) + UuidV1.value.offset, 41) == own + b"0" * (41 - len(own))
    keys = {"unterminated": unterminated}
    for kind in (0, 3):
        keys[f"type {kind}"] = UuidV1(version=version, type=kind)
        keys[f"type {kind}"].value.str = own
    stranger = UuidV1(version=version, type=2)
    ctypes.memmove(stranger.value.bytes, bytes(range(0xF0, 0x100)), 16)
    keys["no such GPU"] = stranger
    got = {}
    for name, key in keys.items():
        found = ctypes.c_void_p(0x1234)
        got[name] = (lib.nvmlDeviceGetHandleByUUIDV(ctypes.byref(key), ctypes.byref(found)), found.value)
    assert got == {"unterminated": (n.NVML_ERROR_INVALID_ARGUMENT, 0x1234),
                   "type 0": (n.NVML_ERROR_INVALID_ARGUMENT, 0x1234), "type 3": (n.NVML_ERROR_INVALID_ARGUMENT, 0x1234),
                   "no such GPU": (n.NVML_ERROR_NOT_FOUND, 0x1234)}

def test_running_process_detail_list_by_mode(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetRunningProcessDetailList: nvmlProcessDetailList_t.mode is NVML_PROCESS_MODE_COMPUTE
    (0), _GRAPHICS (1) or _MPS (2), and the list holds the processes of that kind, as the older getters
    nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses list them. gpu1 runs a compute process, a graphics
    one and an MPS client (a compute process through the MPS server)."""
    n = pynvml_module
    nvml("dgx-h100", processes=GPU1_PROCESSES)
    h = handles(n)[1]
    assert (n.NVML_PROCESS_MODE_COMPUTE, n.NVML_PROCESS_MODE_GRAPHICS, n.NVML_PROCESS_MODE_MPS) == (0, 1, 2)
    by_mode = {mode: sorted((p.pid, p.usedGpuMemory) for p in
                            n.nvmlDeviceGetRunningProcessDetailList(h, n.nvmlProcessDetailList_v1, mode))
               for mode in (0, 1, 2)}
    assert by_mode == {0: [(4242, 3 * 2**30), (4444, 5 * 2**30)], 1: [(4343, 2**30)], 2: [(4444, 5 * 2**30)]}


@pytest.mark.parametrize(("driver", "lists_all"), [("595.91.07", False), ("610.10.01", True), ("615.10.01", True)])
def test_the_detail_lists_all_mode_comes_with_cuda_13_3s_header(nvml: Nvml, pynvml_module: ModuleType,
                                                                 tmp_path: Path, driver: str, lists_all: bool) -> None:
    """nvml.h of CUDA 13.3 (13.3.29, as NVIDIA's go-nvml synced it; the 610 branch's) adds NVML_PROCESS_MODE_ALL = 3,
    "All processes running on the GPU (compute, graphics, MPS, and other types)", to nvmlProcessMode_t, whose
    headers up to CUDA 13.2 (the 595 branch's) end at NVML_PROCESS_MODE_MPS = 2; for those,
    nvmlDeviceGetRunningProcessDetailList answers NVML_ERROR_INVALID_ARGUMENT "if ... plist->mode is invalid". The
    615 branch's header (nvidia-nvml-dev 13.4.92, read here) still has it. gpu1 runs a compute process, a graphics
    one and an MPS client: mode 3 lists each of them once from 610 on and is refused before."""
    header = references.newest_header().read_text()
    assert re.search(r"NVML_PROCESS_MODE_ALL\s*=\s*3,", header)
    n = pynvml_module
    nvml(str(with_driver(tmp_path, "dgx-h100", driver)), processes=GPU1_PROCESSES)
    h = handles(n)[1]
    if lists_all:
        listed = n.nvmlDeviceGetRunningProcessDetailList(h, n.nvmlProcessDetailList_v1, 3)
        assert sorted((p.pid, p.usedGpuMemory) for p in listed) == [(4242, 3 * 2**30), (4343, 2**30),
                                                                    (4444, 5 * 2**30)]
    else:
        assert error_of(partial(n.nvmlDeviceGetRunningProcessDetailList, h, n.nvmlProcessDetailList_v1, 3)) == \
            n.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(partial(n.nvmlDeviceGetRunningProcessDetailList, h, n.nvmlProcessDetailList_v1, 4)) == \
        n.NVML_ERROR_INVALID_ARGUMENT  # NVML_PROCESS_MODE_MAX: a bound, not a mode


def test_a_detail_list_without_its_version_word_is_a_version_mismatch(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlProcessDetailList_t.version "MUST be nvmlProcessDetailList_v1",
    NVML_STRUCT_VERSION(ProcessDetailList, 1): the struct's size with 1 in the top byte. nvml.h's list of return
    codes names INVALID_ARGUMENT for an invalid version, but the real library answers 25,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH ("The provided version is invalid/unsupported"), to a list whose version
    was left 0: NVIDIA/go-nvml pull request #130 (2024-09), a report of the real call from a binding that forgot to
    set it. Version 0 and version 2 of the same size are refused so, version 1 is answered (gpu1's processes)."""
    n = pynvml_module
    nvml("dgx-h100", processes=GPU1_PROCESSES)
    h = handles(n)[1]
    size = ctypes.sizeof(n.c_nvmlProcessDetailList_t)
    assert n.nvmlProcessDetailList_v1 == size | 1 << 24
    for version in (0, size | 2 << 24):
        assert error_of(partial(n.nvmlDeviceGetRunningProcessDetailList, h, version, n.NVML_PROCESS_MODE_COMPUTE)) \
            == n.NVML_ERROR_ARGUMENT_VERSION_MISMATCH == 25
    assert len(n.nvmlDeviceGetRunningProcessDetailList(h, n.nvmlProcessDetailList_v1, n.NVML_PROCESS_MODE_COMPUTE)) == 2


# ------------------------------------ memory clocks, process names, ... (the C round of seeds 10301-10302)


def test_supported_memory_clocks_refuse_an_array_shorter_than_the_list(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetSupportedMemoryClocks: ``count`` gives the size of the ``clocksMHz`` array and
    NVML_ERROR_INSUFFICIENT_SIZE answers "if count is too small (count is set to the number of required
    elements)". The real T4 lists two memory clocks (qx-t4.xml, supported_clocks: 5001 MHz, then 405 MHz): an
    array of one is too small and must stay untouched past what the caller offered, an array of two gets both.
    nvidia-ml-py asks with count 0 first, so only a direct call reaches a non-zero count that is too small."""
    n = pynvml_module
    t4 = board_capture("t4")
    listed = [number(m.split(":")[0]) for m in t4["/supported_clocks"].split("; ")]
    assert listed == [5001, 405]
    nvml("t4-cloud")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    h = handles(n)[0]
    guard = 0xABABABAB
    clocks = (ctypes.c_uint * 3)(guard, guard, guard)
    count = ctypes.c_uint(1)
    assert lib.nvmlDeviceGetSupportedMemoryClocks(h, ctypes.byref(count), clocks) == n.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 2
    assert clocks[1] == guard and clocks[2] == guard  # nothing written past the one element offered
    count = ctypes.c_uint(2)
    assert lib.nvmlDeviceGetSupportedMemoryClocks(h, ctypes.byref(count), clocks) == n.NVML_SUCCESS
    assert (count.value, list(clocks)) == (2, [5001, 405, guard])


def test_a_process_name_is_cropped_to_the_callers_length(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlSystemGetProcessName: "Returned process name is cropped to provided length", ``length`` being
    "the maximum allowed length of the string returned in name". This process's name (its argv[0], longer than 8
    bytes: a path to python) asked into 8 bytes of a larger buffer comes back as a prefix of it, and the bytes past
    the 8 offered stay as they were; nvidia-ml-py always offers 1024 bytes, so only a direct call can tell."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    with open(f"/proc/{os.getpid()}/cmdline", "rb") as fh:
        argv0 = fh.read().split(b"\0")[0]
    assert len(argv0) > 8
    buf = ctypes.create_string_buffer(b"\xab" * 256, 256)
    assert lib.nvmlSystemGetProcessName(ctypes.c_uint(os.getpid()), buf, ctypes.c_uint(8)) == n.NVML_SUCCESS
    assert buf.raw[8:] == b"\xab" * 248
    assert buf.value and argv0.startswith(buf.value)


def test_a_process_name_asked_into_no_bytes_is_refused_and_into_one_is_empty(nvml: Nvml,
                                                                            pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlSystemGetProcessName: INVALID_ARGUMENT "if name is NULL or length is 0" (and nothing written), and
    the name "cropped to provided length" otherwise: a length of 1 is room for the terminator alone, so SUCCESS with
    an empty string and the bytes past the first left as they were."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    pid = ctypes.c_uint(os.getpid())
    buf = ctypes.create_string_buffer(b"\xab" * 16, 16)
    assert lib.nvmlSystemGetProcessName(pid, buf, ctypes.c_uint(0)) == n.NVML_ERROR_INVALID_ARGUMENT
    assert buf.raw == b"\xab" * 16
    assert lib.nvmlSystemGetProcessName(pid, buf, ctypes.c_uint(1)) == n.NVML_SUCCESS
    assert buf.raw == b"\0" + b"\xab" * 15


def test_samples_refuse_a_missing_or_zero_sample_count(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetSamples: NVML_ERROR_INVALID_ARGUMENT "if device is invalid, samplesCount is NULL or
    reference to sampleCount is 0 for non null samples"; with ``samples`` NULL the call is the size query and
    answers how many samples there are (one per kind here, the snapshot's reading). nvidia-ml-py always passes a
    count, first with NULL samples, so only a direct call reaches either refusal."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    h = handles(n)[0]
    value_type = ctypes.c_uint()
    samples = (n.c_nvmlSample_t * 4)()
    for kind in (n.NVML_TOTAL_POWER_SAMPLES, n.NVML_GPU_UTILIZATION_SAMPLES):
        assert lib.nvmlDeviceGetSamples(h, kind, ctypes.c_ulonglong(0), ctypes.byref(value_type), None, None) == \
            n.NVML_ERROR_INVALID_ARGUMENT, kind
        assert lib.nvmlDeviceGetSamples(h, kind, ctypes.c_ulonglong(0), ctypes.byref(value_type), None,
                                        samples) == n.NVML_ERROR_INVALID_ARGUMENT, kind
        zero = ctypes.c_uint(0)
        assert lib.nvmlDeviceGetSamples(h, kind, ctypes.c_ulonglong(0), ctypes.byref(value_type),
                                        ctypes.byref(zero), samples) == n.NVML_ERROR_INVALID_ARGUMENT, kind
        count = ctypes.c_uint(0)
        assert lib.nvmlDeviceGetSamples(h, kind, ctypes.c_ulonglong(0), ctypes.byref(value_type),
                                        ctypes.byref(count), None) == n.NVML_SUCCESS, kind
        assert count.value == 1
        assert lib.nvmlDeviceGetSamples(h, kind, ctypes.c_ulonglong(0), ctypes.byref(value_type),
                                        ctypes.byref(count), samples) == n.NVML_SUCCESS, kind
        assert count.value == 1 and value_type.value == n.NVML_VALUE_TYPE_UNSIGNED_INT


def test_a_compute_instance_smaller_than_its_gpu_instance_occupies_its_own_slices(
        node_snapshot: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlComputeInstancePlacement_t: ``start`` is the "Index of first occupied compute slice" and ``size``
    the "Number of compute slices occupied", of the compute instance (nvmlComputeInstanceGetInfo_v2's placement).
    NVIDIA's MIG user guide splits a 3g.40gb GPU instance into 1c.3g.40gb compute instances of one compute slice
    each (nvidia-smi mig -cci 0): dgx-a100's gpu7, its GPU instance 2 holding two of them at compute slices 0 and
    1 (the agent's state after those two creations), reports placements 0:1 and 1:1, each the size
    nvmlGpuInstanceGetComputeInstanceProfileInfo gives the 1-slice profile, not the GPU instance's 3 slices."""
    from fakehw.agent.mig import GpuMig, NodeMig, boot_mig
    from fakehw.nvml.snapshot import build_snapshot
    from tests.nvml.helpers import faults_state

    n = pynvml_module
    snap = node_snapshot("dgx-a100")
    boot = boot_mig(snap.node)
    gpu7 = boot.gpus["gpu7"].to_json()
    gi2 = next(g for g in gpu7["gpu_instances"] if g["id"] == 2)
    gi2["compute_instances"] = [{"id": c, "profile": n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, "start": c,
                                 "uuid": str(uuid.UUID(int=0x5EED + c)).join(("MIG-", ""))} for c in (0, 1)]
    state = replace(faults_state(snap.node, [], snap.system.seed)[0],
                    mig=NodeMig(boot.node, {**boot.gpus, "gpu7": GpuMig.from_json(gpu7)}))
    write_snapshot(snap.path, build_snapshot(snap.system, snap.node, state).to_bytes(), changed=True)
    with snapshot_env(snap.path):
        n.nvmlInit()
        try:
            h = handles(n)[7]
            gi = n.nvmlDeviceGetGpuInstanceById(h, 2)
            profile = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                                                                      n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            assert profile.sliceCount == 1
            assert n.nvmlGpuInstanceGetInfo(gi).placement.size == 4  # 3g.40gb: 4 of the 8 memory slices
            for c in (0, 1):
                info = n.nvmlComputeInstanceGetInfo(n.nvmlGpuInstanceGetComputeInstanceById(gi, c))
                assert (info.id, info.placement.start, info.placement.size) == (c, c, profile.sliceCount)
        finally:
            n.nvmlShutdown()


def test_clock_event_reason_counters_are_in_nanoseconds_as_their_violation_times(
        node_snapshot: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """nvml.h counts every clocks-event-reason field in ns: NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP (the
    PERF_POLICY_POWER field) "... in ns", _SW_THERM_SLOWDOWN (269), _HW_THERM_SLOWDOWN (270) and
    _HW_POWER_BRAKE_SLOWDOWN (271) "... in ns"; and its translation table for the deprecated
    nvmlDeviceGetViolationStatus (nvmlViolationTime_t.violationTime "in Nanoseconds") maps NVML_PERF_POLICY_THERMAL
    to field 269 and NVML_PERF_POLICY_POWER to the power-cap field: the same counters. gpu4 held back by the
    software thermal slowdown alone reads the same time from field 269 as from its THERMAL violation status; held
    back by all three thermal and brake limiters since the driver loaded, each of 269-271 reads that time too."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    sw_therm, hw_therm, hw_brake = 0x20, 0x40, 0x80  # nvml.h: nvmlClocksEventReasonSwThermalSlowdown, ...
    with board_state(n, snap, 4, throttle_reasons=sw_therm) as hs:
        thermal = n.nvmlDeviceGetViolationStatus(hs[4], n.NVML_PERF_POLICY_THERMAL).violationTime
        field = n.nvmlDeviceGetFieldValues(hs[4], [269])[0]
    assert thermal > 0
    assert (field.nvmlReturn, field.value.ullVal) == (n.NVML_SUCCESS, thermal)
    with board_state(n, snap, 4, throttle_reasons=sw_therm | hw_therm | hw_brake) as hs:
        thermal = n.nvmlDeviceGetViolationStatus(hs[4], n.NVML_PERF_POLICY_THERMAL).violationTime
        fields = n.nvmlDeviceGetFieldValues(hs[4], [269, 270, 271])
    assert [(f.nvmlReturn, f.value.ullVal) for f in fields] == [(n.NVML_SUCCESS, thermal)] * 3


PERF_POLICY_FIELDS = {0: (74,), 1: (75, 269), 2: (76,), 3: (77,), 4: (78,), 5: (79,), 10: (80,), 11: (81,)}
"""nvmlPerfPolicyType_t value -> the field ids that count the same time (nvml.h 13.4: the translation table above
nvmlDeviceGetViolationStatus, POWER -> NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP (74), THERMAL -> _SW_THERM_SLOWDOWN
(269), SYNC_BOOST, BOARD_LIMIT, LOW_UTILIZATION, RELIABILITY and TOTAL_BASE_CLOCKS -> NVML_FI_DEV_PERF_POLICY_*
(76-79, 81); and the fields' own names, NVML_FI_DEV_PERF_POLICY_THERMAL (75) "Perf Policy Counter for Thermal
Policy", _TOTAL_APP_CLOCKS (80) "... for Total App Clock Policy")."""


@pytest.mark.parametrize("reasons", [0x4, 0x20, 0x4 | 0x20 | 0x80, 0x1, 0x0],
                         ids=["sw-power-cap", "sw-thermal", "power-thermal-and-brake", "idle-only", "none"])
def test_every_perf_policy_field_counts_what_its_violation_status_counts(
        node_snapshot: Callable[..., NodeSnap], pynvml_module: ModuleType, reasons: int) -> None:
    """Each perf policy's time read through nvmlDeviceGetFieldValues is the one nvmlDeviceGetViolationStatus gives
    for it (:data:`PERF_POLICY_FIELDS`), whatever holds the GPU back (nvml.h's clocks event reasons:
    SwPowerCap 0x4, SwThermalSlowdown 0x20, HwPowerBrakeSlowdown 0x80, GpuIdle 0x1). A GPU held back by a power cap
    has spent time below its clocks for POWER and in total (nvml.h: TOTAL_APP_CLOCKS is the time "held below
    application clocks by any limiter (0 - 5 above)"), one held back by nothing has spent none, and idling is not a
    limiter: an idle GPU's totals are 0."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    with board_state(n, snap, 2, throttle_reasons=reasons) as hs:
        statuses = {p: n.nvmlDeviceGetViolationStatus(hs[2], p).violationTime for p in PERF_POLICY_FIELDS}
        ids = [f for fields in PERF_POLICY_FIELDS.values() for f in fields]
        values = dict(zip(ids, n.nvmlDeviceGetFieldValues(hs[2], ids), strict=True))
    for policy, fields in PERF_POLICY_FIELDS.items():
        for field in fields:
            assert (values[field].nvmlReturn, values[field].value.ullVal) == (n.NVML_SUCCESS, statuses[policy]), \
                (policy, field)
    held_back = reasons & ~0x1
    assert (statuses[n.NVML_PERF_POLICY_POWER] > 0) == bool(reasons & 0x4)
    assert (statuses[n.NVML_PERF_POLICY_THERMAL] > 0) == bool(reasons & 0x20)
    assert (statuses[n.NVML_PERF_POLICY_TOTAL_APP_CLOCKS] > 0) == bool(held_back)


def test_encoder_capacity_refuses_a_query_type_nvml_h_does_not_name(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetEncoderCapacity: a capacity "in the range 0-100" for NVML_ENCODER_QUERY_H264 (0), _HEVC
    (1) and _AV1 (2), NVML_ERROR_INVALID_ARGUMENT "if ... encoderQueryType [is] invalid" (nvmlEncoderType_t has no
    3), NOT_SUPPORTED only for an encoder the board lacks. The T4 has an NVENC engine (NVIDIA T4 datasheet), so
    H.264 answers and query type 3 is refused as invalid, not as unsupported."""
    n = pynvml_module
    nvml("t4-cloud")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    h = handles(n)[0]
    capacity = ctypes.c_uint(0xDEAD)
    assert lib.nvmlDeviceGetEncoderCapacity(h, n.NVML_ENCODER_QUERY_H264, ctypes.byref(capacity)) == n.NVML_SUCCESS
    assert 0 <= capacity.value <= 100
    assert lib.nvmlDeviceGetEncoderCapacity(h, 3, ctypes.byref(capacity)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_a_compute_instance_profile_shares_its_gpu_instances_engines(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """The compute instances of a GPU instance share its engines (nvml.h, nvmlComputeInstanceProfileInfo_t: the
    shared copy engine, decoder, encoder, JPEG and OFA counts). dgx-a100's gpu7 boots with two 3g.40gb GPU
    instances; ``nvidia-smi mig -lgip`` of a real A100-SXM4-80GB (NVIDIA/mig-parted#97, migtools.A100_80GB_LGIP)
    gives 3g.40gb 2 decoders, 0 encoders (the A100 has no NVENC), 3 copy engines, 0 JPEG and 0 OFA: what every
    compute instance profile of such a GPU instance shares, in the legacy struct and the versioned one alike."""
    from tests.nvml.migtools import A100_80GB_LGIP

    n = pynvml_module
    nvml("dgx-a100")
    _name, gi_profile, _n, _gib, _sm, dec, enc, ce, jpeg, ofa = next(r for r in A100_80GB_LGIP if r[0] == "MIG 3g.40gb")
    h = handles(n)[7]
    gi = n.nvmlDeviceGetGpuInstanceById(h, 2)
    assert n.nvmlGpuInstanceGetInfo(gi).profileId == gi_profile
    for version in (1, 2):
        info = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                                                               n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, version)
        assert (info.sharedDecoderCount, info.sharedEncoderCount, info.sharedCopyEngineCount, info.sharedJpegCount,
                info.sharedOfaCount) == (dec, enc, ce, jpeg, ofa), version


def test_dynamic_pstates_utilization_domains_are_nvml_hs(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h numbers nvmlGpuDynamicPstatesInfo_t's utilization domains NVML_GPU_UTILIZATION_DOMAIN_GPU 0
    (graphics engine), _FB 1 (frame buffer), _VID 2 (video engine), _BUS 3. gpu6 runs a compute process keeping
    it 60 % busy (FakeProcess.utilization): the graphics domain reads 60, the frame-buffer domain the memory
    utilization nvmlUtilization_t reports for the same GPU (nvml.h: "global (device) memory was being read or
    written"), and the video-engine domain what the decoder reports, 0 (a compute process decodes no video)."""
    n = pynvml_module
    nvml("dgx-h100", processes=[FakeProcess("gpu6", 5150, 2**30, utilization=60)])
    h = handles(n)[6]
    info = n.c_nvmlGpuDynamicPstatesInfo_t()
    n.nvmlDeviceGetDynamicPstatesInfo(h, ctypes.byref(info))
    rates = n.nvmlDeviceGetUtilizationRates(h)
    decoder, _period = n.nvmlDeviceGetDecoderUtilization(h)
    assert (rates.gpu, decoder) == (60, 0)
    assert rates.memory > 0  # a busy GPU moves memory: the domains below differ
    domains = [info.utilization[d].percentage for d in (n.NVML_GPU_UTILIZATION_DOMAIN_GPU,
                                                         n.NVML_GPU_UTILIZATION_DOMAIN_FB,
                                                         n.NVML_GPU_UTILIZATION_DOMAIN_VID)]
    assert domains == [60, rates.memory, decoder]


def test_mig_mode_pending_a_reset_reads_current_and_pending_apart(node_snapshot: Callable[..., NodeSnap],
                                                                   pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetMigMode: ``currentMode`` and ``pendingMode`` are two answers, and nvmlDeviceSetMigMode
    "may unbind or reset the device to activate the requested mode": until then the new mode is pending (nvidia-smi
    -q prints MIG Mode "Current" and "Pending" apart). dgx-h100's gpu0 with MIG enabled but not yet active (the
    agent state: current off, pending on) reads [DISABLE, ENABLE]; once active, [ENABLE, ENABLE]."""
    from fakehw.agent.mig import GpuMig, NodeMig, boot_mig
    from fakehw.nvml.snapshot import build_snapshot
    from tests.nvml.helpers import faults_state

    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    boot = boot_mig(snap.node)
    for current, pending in ((False, True), (True, True)):
        gpu0 = {**boot.gpus["gpu0"].to_json(), "current": current, "pending": pending}
        state = replace(faults_state(snap.node, [], snap.system.seed)[0],
                        mig=NodeMig(boot.node, {**boot.gpus, "gpu0": GpuMig.from_json(gpu0)}))
        write_snapshot(snap.path, build_snapshot(snap.system, snap.node, state).to_bytes(), changed=True)
        with snapshot_env(snap.path):
            n.nvmlInit()
            try:
                assert n.nvmlDeviceGetMigMode(handles(n)[0]) == [int(current), int(pending)]
            finally:
                n.nvmlShutdown()


def test_gpus_of_single_gpu_boards_are_never_on_the_same_board(nvml: Nvml, pynvml_module: ModuleType,
                                                               tmp_path: Path) -> None:
    """nvml.h: nvmlDeviceGetMultiGpuBoard tells "whether the device is on a multi GPU board", and
    nvmlDeviceOnSameBoard answers non-zero when two GPUs "are on the same physical board": two distinct GPUs that
    each say they are on a single-GPU board (every capture prints multigpu_board No) are on two boards. The board id
    (every capture's: PCI domain, bus and device, 0x1b00 for 0000:1b:00.0) cannot tell functions of one device
    apart, so the test puts edge-pcie's gpu1 at 0000:1b:00.1 (a profile a user can write) where both read 0x1b00:
    the ids collide and the answer must still be 0."""
    n = pynvml_module
    source = (references.ROOT / "fakehw/profiles/edge-pcie.yaml").read_text()
    assert source.count('bus: "0000:1c:00.0"') == 1
    profile = tmp_path / "shared-device.yaml"
    profile.write_text(source.replace('bus: "0000:1c:00.0"', 'bus: "0000:1b:00.1"'))
    nvml(str(profile))
    gpu0, gpu1 = handles(n)[:2]
    assert [n.nvmlDeviceGetMultiGpuBoard(h) for h in (gpu0, gpu1)] == [0, 0]
    assert n.nvmlDeviceGetBoardId(gpu0) == n.nvmlDeviceGetBoardId(gpu1) == 0x1B00
    assert not n.nvmlDeviceOnSameBoard(gpu0, gpu1)
    assert n.nvmlDeviceOnSameBoard(gpu1, gpu1)


class _PlatformInfoV2(ctypes.Structure):
    """nvmlPlatformInfo_v2_t (nvml.h 13.4.92): version, ibGuid[16], chassisSerialNumber[16], slot, tray, host id,
    peer type, module id."""

    _fields_ = [("version", ctypes.c_uint), ("ibGuid", ctypes.c_ubyte * 16),
                ("chassisSerialNumber", ctypes.c_ubyte * 16), ("slotNumber", ctypes.c_ubyte),
                ("trayIndex", ctypes.c_ubyte), ("hostId", ctypes.c_ubyte), ("peerType", ctypes.c_ubyte),
                ("moduleId", ctypes.c_ubyte)]


def test_a_blackwell_platform_ib_guid_is_eight_bytes_then_zeros(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlPlatformInfo_v2_t.ibGuid: "Infiniband GUID reported by platform (for Blackwell, ibGuid is 8 bytes
    so indices 8-15 are zero)". Every GPU of a GB200 tray (Blackwell) reports a GUID in bytes 0-7 (the real GB200's
    capture prints one, gpu_fabric_guid, for each GPU) and zeros in bytes 8-15."""
    n = pynvml_module
    nvml("gb200-nvl72")
    assert board_capture("gb200")["/platformInfo/gpu_fabric_guid"].startswith("0x")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    for h in handles(n):
        info = _PlatformInfoV2(version=ctypes.sizeof(_PlatformInfoV2) | 2 << 24)
        assert lib.nvmlDeviceGetPlatformInfo(h, ctypes.byref(info)) == n.NVML_SUCCESS
        guid = bytes(info.ibGuid)
        assert any(guid[:8]) and guid[8:] == bytes(8), guid.hex()


def test_a_max_clock_the_board_does_not_report_is_not_supported(pynvml_module: ModuleType,
                                                                 node_snapshot: Callable[..., NodeSnap]) -> None:
    """nvml.h, nvmlDeviceGetMaxClockInfo: NVML_ERROR_NOT_SUPPORTED "if the device cannot report the specified
    clock", never SUCCESS with a clock of 0 MHz (nvidia-smi prints N/A for such a domain). A snapshot whose GPU 0
    has no video clock maximum (the record's 0, as the layout's default for an unset clock) stands for such a
    board; its other domains still answer the H100 capture's maxima (qx-h100.xml max_clocks: 1980 MHz graphics)."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    gpu0 = snap.snapshot.gpus[0]
    no_video = tuple(0 if t == n.NVML_CLOCK_VIDEO else mhz for t, mhz in enumerate(gpu0.clocks_max))
    shot = replace(snap.snapshot, gpus=(replace(gpu0, clocks_max=no_video), *snap.snapshot.gpus[1:]))
    write_snapshot(snap.path, shot.to_bytes(), changed=True)
    with snapshot_env(snap.path):
        n.nvmlInit()
        try:
            h = handles(n)[0]
            assert error_of(partial(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_VIDEO)) == n.NVML_ERROR_NOT_SUPPORTED
            assert n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_GRAPHICS) == 1980
        finally:
            n.nvmlShutdown()


# ------------------------- clock and threshold types, graphics clocks, ... (the fourth C round of 2026-11-27)


def test_a_clock_type_past_the_enum_is_an_invalid_argument(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's nvmlClockType_t has four domains, NVML_CLOCK_GRAPHICS (0), _SM, _MEM and _VIDEO (3), then
    NVML_CLOCK_COUNT (4); nvmlDeviceGetClock answers NVML_ERROR_INVALID_ARGUMENT "if ... clockType is invalid"
    (nvml.h 13.4), whichever clock of the domain (clockId) is asked for. The last valid domain still answers: the
    video clock is the real H100's 765 MHz now (qx-h100.xml, clocks/video_clock)."""
    n = pynvml_module
    h100 = board_capture("h100")
    nvml("dgx-h100")
    h = handles(n)[0]
    assert n.NVML_CLOCK_COUNT == 4 and n.NVML_CLOCK_VIDEO == 3
    for clock_id in (n.NVML_CLOCK_ID_CURRENT, n.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX):
        assert error_of(partial(n.nvmlDeviceGetClock, h, n.NVML_CLOCK_COUNT, clock_id)) == \
            n.NVML_ERROR_INVALID_ARGUMENT, clock_id
    assert n.nvmlDeviceGetClock(h, n.NVML_CLOCK_VIDEO, n.NVML_CLOCK_ID_CURRENT) == number(h100["/clocks/video_clock"])


def test_the_threshold_count_is_an_invalid_threshold_type(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4's nvmlTemperatureThresholds_t runs SHUTDOWN (0) ... GPS_CURR (7), then
    NVML_TEMPERATURE_THRESHOLD_COUNT (8): 8 names no threshold, so nvmlDeviceGetTemperatureThreshold answers
    NVML_ERROR_INVALID_ARGUMENT ("thresholdType is invalid"), not the NOT_SUPPORTED of a threshold the board lacks.
    (nvidia-ml-py's own NVML_TEMPERATURE_THRESHOLD_COUNT is 7, from a header before GPS_CURR: the value is the
    header's.)"""
    n = pynvml_module
    nvml("t4-cloud")
    h = handles(n)[0]
    count_in_nvml_h = 8
    assert error_of(partial(n.nvmlDeviceGetTemperatureThreshold, h, count_in_nvml_h)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_graphics_clocks_of_an_unsupported_memory_clock_are_not_found(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetSupportedGraphicsClocks: NVML_ERROR_NOT_FOUND "if the specified memoryClockMHz is not a
    supported frequency" (INVALID_ARGUMENT is for an invalid device or a NULL count). The real T4 supports memory
    clocks of 5001 and 405 MHz (qx-t4.xml, supported_clocks), listing 1590 MHz first at 5001; 5000 MHz, one below,
    is none of them."""
    n = pynvml_module
    t4 = board_capture("t4")
    lists = dict(entry.split(": ") for entry in t4["/supported_clocks"].split("; "))
    assert list(lists) == ["5001 MHz", "405 MHz"]
    nvml("t4-cloud")
    h = handles(n)[0]
    assert n.nvmlDeviceGetSupportedGraphicsClocks(h, 5001)[0] == int(lists["5001 MHz"].split(",")[0]) == 1590
    assert error_of(partial(n.nvmlDeviceGetSupportedGraphicsClocks, h, 5000)) == n.NVML_ERROR_NOT_FOUND


def test_the_retirement_cause_count_is_an_invalid_cause(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's nvmlPageRetirementCause_t has two causes, MULTIPLE_SINGLE_BIT_ECC_ERRORS (0) and
    DOUBLE_BIT_ECC_ERROR (1), then NVML_PAGE_RETIREMENT_CAUSE_COUNT (2); nvmlDeviceGetRetiredPages and _v2 answer
    NVML_ERROR_INVALID_ARGUMENT "if ... cause is invalid". The T4 retires pages (Turing; its capture prints
    retired_pages), here with three double-bit errors, so a cause of 2 must not answer the double-bit list."""
    n = pynvml_module
    nvml("t4-cloud", faults=[{"kind": "ecc", "device": "gpu0", "type": "dbe", "count": 3,
                              "location": "device-memory"}])
    h = handles(n)[0]
    assert n.NVML_PAGE_RETIREMENT_CAUSE_COUNT == 2
    assert len(n.nvmlDeviceGetRetiredPages(h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)) == 3
    for getter in (n.nvmlDeviceGetRetiredPages, n.nvmlDeviceGetRetiredPages_v2):
        assert error_of(partial(getter, h, n.NVML_PAGE_RETIREMENT_CAUSE_COUNT)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_the_nvlink_capability_count_is_an_invalid_capability(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's nvmlNvLinkCapability_t runs P2P_SUPPORTED (0) ... VALID (5), then NVML_NVLINK_CAP_COUNT (6);
    nvmlDeviceGetNvLinkCapability answers NVML_ERROR_INVALID_ARGUMENT "if device, link, or capability is invalid".
    On an H100's present link 0 the last real capability, VALID ("Link is supported on this device"), reads 1."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    assert n.NVML_NVLINK_CAP_COUNT == 6
    assert n.nvmlDeviceGetNvLinkCapability(h, 0, n.NVML_NVLINK_CAP_VALID) == 1
    assert error_of(partial(n.nvmlDeviceGetNvLinkCapability, h, 0, n.NVML_NVLINK_CAP_COUNT)) == \
        n.NVML_ERROR_INVALID_ARGUMENT


def test_per_link_replay_and_recovery_fields_read_their_own_counters(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h pairs each per-link NVLink error field with one counter of nvmlNvLinkErrorCounter_t:
    NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0 (46) ... _L5 and _L6 (108) ... _L11 with NVML_NVLINK_ERROR_DL_REPLAY (0),
    NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0 (53) ... and _L6 (114) ... with NVML_NVLINK_ERROR_DL_RECOVERY (1).
    With 5 replays and 9 recoveries on gpu0's link 2 and 4 replays and 7 recoveries on its link 8, each field reads
    its own counter, as nvmlDeviceGetNvLinkErrorCounter does."""
    n = pynvml_module
    faults = [{"kind": "nvlink-errors", "device": "gpu0", "link": link, "counter": counter, "increment": count}
              for link, counter, count in ((2, "replay", 5), (2, "recovery", 9), (8, "replay", 4),
                                           (8, "recovery", 7))]
    nvml("dgx-h100", faults=faults)
    h = handles(n)[0]
    assert (n.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L2, n.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L2) == (48, 55)
    assert (n.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L8, n.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L8) == (110, 116)
    assert [n.nvmlDeviceGetNvLinkErrorCounter(h, link, c) for link in (2, 8)
            for c in (n.NVML_NVLINK_ERROR_DL_REPLAY, n.NVML_NVLINK_ERROR_DL_RECOVERY)] == [5, 9, 4, 7]
    fields = n.nvmlDeviceGetFieldValues(h, [48, 55, 110, 116])
    assert [(f.nvmlReturn, f.value.ullVal) for f in fields] == [(0, 5), (0, 9), (0, 4), (0, 7)]


def test_per_link_crc_flit_and_ecc_data_fields_read_their_own_counters(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92 pairs NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0 (32) ... _L5 (37) and _L6 (96) ... _L11 (101)
    with NVML_NVLINK_ERROR_DL_CRC_FLIT (2), and NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0 (148) ... _L11 (159, one
    run) with NVML_NVLINK_ERROR_DL_ECC_DATA (4). With 6 CRC flit and 2 ECC data errors on gpu3's link 3 and 8 and
    12 on its link 9, each field reads its own counter, as nvmlDeviceGetNvLinkErrorCounter does. (No test read
    these two runs of fields: the lane table's loop started at its second entry, skipping the CRC flit run, went
    unnoticed; seed 10604's survivor on that line was another, equivalent mutant.)"""
    n = pynvml_module
    faults = [{"kind": "nvlink-errors", "device": "gpu3", "link": link, "counter": counter, "increment": count}
              for link, counter, count in ((3, "crc-flit", 6), (3, "ecc-data", 2), (9, "crc-flit", 8),
                                           (9, "ecc-data", 12))]
    nvml("dgx-h100", faults=faults)
    h = handles(n)[3]
    assert (n.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L3, n.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L9) == (35, 99)
    assert (n.NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L3, n.NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L9) == (151, 157)
    assert [n.nvmlDeviceGetNvLinkErrorCounter(h, link, c) for link in (3, 9)
            for c in (n.NVML_NVLINK_ERROR_DL_CRC_FLIT, n.NVML_NVLINK_ERROR_DL_ECC_DATA)] == [6, 2, 8, 12]
    fields = n.nvmlDeviceGetFieldValues(h, [35, 151, 99, 157])
    assert [(f.nvmlReturn, f.value.ullVal) for f in fields] == [(0, 6), (0, 2), (0, 8), (0, 12)]


# ------------------------- MIG handles, clock frequencies, addressing mode, memory power ... (the fifth C round)


def test_is_mig_device_handle_answers_for_a_mig_handle_and_its_parent(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92, nvmlDeviceIsMigDeviceHandle: "isMigDevice: True when handle refers to a MIG device" (and a
    MIG device handle is one nvmlDeviceGetMigDeviceHandleByIndex hands out). dgx-a100's gpu7 holds two 3g.40gb MIG
    devices: each answers 1, the GPU itself 0."""
    n = pynvml_module
    nvml("dgx-a100")
    parent = handles(n)[7]

    def is_mig(h: object) -> int:
        answer = n.nvmlDeviceIsMigDeviceHandle(h)  # nvidia-ml-py 12.535 hands back the c_uint itself
        return int(getattr(answer, "value", answer))

    assert is_mig(parent) == 0
    assert [is_mig(n.nvmlDeviceGetMigDeviceHandleByIndex(parent, index)) for index in (0, 1)] == [1, 1]


class CurrentClockFreqs(ctypes.Structure):
    """nvml.h's nvmlDeviceCurrentClockFreqs_v1_t: a version word and NVML_PERF_MODES_BUFFER_SIZE (2048) bytes."""

    _fields_ = [("version", ctypes.c_uint), ("str", ctypes.c_char * 2048)]


def test_current_clock_freqs_names_the_graphics_and_memory_clocks(nvml: Nvml, pynvml_module: ModuleType,
                                                                   h100: dict[str, str]) -> None:
    """nvml.h 13.4.92, nvmlDeviceGetCurrentClockFreqs: "nvclock" is the graphics clock and "memclock" the memory clock
    of the current performance level, in MHz, "memtransferrate" the memory transfer rate (its example: memclock=324,
    memtransferrate=648). The idle real H100 runs its graphics clock at 345 MHz and its memory at 2619 MHz
    (qx-h100.xml, clocks/graphics_clock and clocks/mem_clock), which an idle dgx-h100 GPU reads too. Each domain's
    "min" and "max" bound its value, and every transfer rate is twice its memory clock, min and max too, as in the
    header's example (memclockmin=324, memtransferratemin=648)."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    freqs = CurrentClockFreqs(version=ctypes.sizeof(CurrentClockFreqs) | 1 << 24)  # NVML_STRUCT_VERSION(.., 1)
    assert lib.nvmlDeviceGetCurrentClockFreqs(handles(n)[0], ctypes.byref(freqs)) == n.NVML_SUCCESS
    text = freqs.str.decode()
    values = dict(item.split("=") for item in re.findall(r"\w+=\d+", text))
    graphics, mem = number(h100["/clocks/graphics_clock"]), number(h100["/clocks/mem_clock"])
    assert (values["nvclock"], values["memclock"], values["memtransferrate"]) == \
        (str(graphics), str(mem), str(2 * mem)), text
    for domain in ("nvclock", "memclock", "memtransferrate"):
        assert int(values[domain + "min"]) <= int(values[domain]) <= int(values[domain + "max"]), text
    for bound in ("min", "max"):
        assert int(values["memtransferrate" + bound]) == 2 * int(values["memclock" + bound]), text


class AddressingMode(ctypes.Structure):
    """nvml.h's nvmlDeviceAddressingMode_v1_t: a version word and a nvmlDeviceAddressingModeType_t."""

    _fields_ = [("version", ctypes.c_uint), ("value", ctypes.c_uint)]


def test_addressing_mode_takes_its_own_struct_version(nvml: Nvml, pynvml_module: ModuleType,
                                                      h100: dict[str, str]) -> None:
    """nvml.h 13.4.92: nvmlDeviceAddressingMode_v1 is NVML_STRUCT_VERSION(DeviceAddressingMode, 1), the struct's size
    (8) with version 1 in the top byte (0x1000008, the value nvidia-ml-py 13.615 sends), and
    nvmlDeviceGetAddressingMode answers ARGUMENT_VERSION_MISMATCH only "if the provided version is
    invalid/unsupported". With that version an H100 answers NVML_DEVICE_ADDRESSING_MODE_HMM (1): the real H100
    prints "HMM" (qx-h100.xml, addressing_mode)."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    assert h100["/addressing_mode"] == "HMM"
    mode = AddressingMode(version=0x1000008)
    assert ctypes.sizeof(AddressingMode) | 1 << 24 == mode.version
    assert lib.nvmlDeviceGetAddressingMode(handles(n)[0], ctypes.byref(mode)) == n.NVML_SUCCESS
    assert mode.value == 1


def test_memory_power_field_is_in_milliwatts(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """NVML's power readings are milliwatts (nvml.h: nvmlDeviceGetPowerUsage "in milliwatts", which points to
    NVML_FI_DEV_POWER_AVERAGE for the same reading; nvidia-smi divides by 1000 to print watts). The real B200s' GPU
    memory draw reads 20.29-24.51 W (qx-b200.xml, gpu_memory_power_readings/average_power_draw of its eight GPUs),
    so field 185 with scopeId NVML_POWER_SCOPE_MEMORY (2) reads 20290-24510 on an idle dgx-b200."""
    import xml.etree.ElementTree as ET

    from tests.nvml.captures import capture_dir

    n = pynvml_module
    where = capture_dir()
    if where is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    real = [float(number_w) for gpu in ET.parse(where / "qx-b200.xml").getroot().iterfind("gpu")
            for number_w in [(gpu.findtext("gpu_memory_power_readings/average_power_draw") or "").split()[0]]]
    assert len(real) == 8
    nvml("dgx-b200")
    for h in handles(n):
        (field,) = n.nvmlDeviceGetFieldValues(h, [(n.NVML_FI_DEV_POWER_AVERAGE, 2)])
        assert field.nvmlReturn == n.NVML_SUCCESS
        assert min(real) * 1000 <= field.value.uiVal <= max(real) * 1000, field.value.uiVal


def test_a_null_lookup_key_is_an_invalid_argument(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4.92: nvmlDeviceGetHandleBySerial answers NVML_ERROR_INVALID_ARGUMENT "if serial is invalid, device is
    NULL ...", nvmlDeviceGetHandleByUUID "if uuid is invalid or device is null", nvmlDeviceGetHandleByPciBusId_v2 "if
    pciBusId is invalid or device is NULL": a NULL key is the plainest invalid one. The library must answer so, not
    read through it (which would kill the caller with SIGSEGV); with a real key and a NULL device likewise."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    h = handles(n)[0]
    keys = {"nvmlDeviceGetHandleBySerial": n.nvmlDeviceGetSerial(h),
            "nvmlDeviceGetHandleByUUID": n.nvmlDeviceGetUUID(h),
            "nvmlDeviceGetHandleByPciBusId_v2": n.nvmlDeviceGetPciInfo(h).busId}
    found = ctypes.c_void_p()
    for name, key in keys.items():
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        assert fn(None, ctypes.byref(found)) == n.NVML_ERROR_INVALID_ARGUMENT, name
        raw = key if isinstance(key, bytes) else key.encode()
        assert fn(raw, None) == n.NVML_ERROR_INVALID_ARGUMENT, name
        assert fn(raw, ctypes.byref(found)) == n.NVML_SUCCESS and found.value == addr(h), name


# ------------------------------------------- what the area's tests never ran (c-coverage.py, 2026-11-28 C round)


NVML_VERSION_BEFORE_INIT = r"""
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
out = {}
buf = ctypes.create_string_buffer(80)
out["before"] = lib.nvmlSystemGetNVMLVersion(buf, 80)
out["before_text"] = buf.value.decode()
out["before_short"] = lib.nvmlSystemGetNVMLVersion(ctypes.create_string_buffer(80), 1)
out["before_null"] = lib.nvmlSystemGetNVMLVersion(None, 80)
count = ctypes.c_uint()
out["count_without_init"] = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
assert lib.nvmlInit_v2() == 0
after = ctypes.create_string_buffer(80)
out["after"] = lib.nvmlSystemGetNVMLVersion(after, 80)
out["after_text"] = after.value.decode()
lib.nvmlShutdown()
print(json.dumps(out))
"""


def test_the_nvml_version_answers_before_nvml_init(node_snapshot: Callable[..., NodeSnap]) -> None:
    """nvml.h 13.4.92 lists no UNINITIALIZED for nvmlSystemGetNVMLVersion (its neighbour nvmlSystemGetDriverVersion
    has "if the library has not been successfully initialized"): a process that never called nvmlInit gets SUCCESS
    and the same version it reads after nvmlInit (the driver's NVML version), INSUFFICIENT_SIZE "if length is too
    small" and INVALID_ARGUMENT "if version is NULL" just as after it. The answer does not initialise the library
    for the caller: nvmlDeviceGetCount_v2 right after is still UNINITIALIZED (nvml.h). No test had asked before
    nvmlInit, so none of that branch ran."""
    snap = node_snapshot("dgx-h100")
    got = run_python(NVML_VERSION_BEFORE_INIT, snap.path)
    assert (got["before"], got["after"]) == (0, 0)  # NVML_SUCCESS
    assert got["before_text"] == got["after_text"] == snap.system.driver.nvml_version
    assert (got["before_short"], got["before_null"]) == (7, 2)  # INSUFFICIENT_SIZE, INVALID_ARGUMENT
    assert got["count_without_init"] == 1  # NVML_ERROR_UNINITIALIZED


NVLINK_TOTAL_FIELDS = {38: "crc-flit", 45: "crc-data", 52: "replay", 59: "recovery", 160: "ecc-data"}
"""nvml.h 13.4.92: NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL 38, _CRC_DATA_ERROR_COUNT_TOTAL 45,
_REPLAY_ERROR_COUNT_TOTAL 52, _RECOVERY_ERROR_COUNT_TOTAL 59 and _ECC_DATA_ERROR_COUNT_TOTAL 160, each "total for all
Lanes" of its per-link counter (nvmlNvLinkErrorCounter_t: DL_REPLAY, DL_RECOVERY, DL_CRC_FLIT, DL_CRC_DATA,
DL_ECC_DATA)."""


def test_the_nvlink_error_total_fields_add_up_every_link(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """The five NVLink error total fields (nvml.h, NVLINK_TOTAL_FIELDS) are each the sum over the GPU's links of
    their counter. gpu3 of a DGX H100 (18 links, NVML_NVLINK_MAX_LINKS) gets errors on its first link, a middle one
    and its last (17), a different number per counter and link, so a total that leaves out a link, takes another
    counter or stops short reads another sum; gpu2, without errors, reads 0 in each. The sums are worked out from the
    test's own faults; no area test read these fields before (c-coverage.py: the summing function never ran)."""
    n = pynvml_module
    counts = {(0, "crc-flit"): 3, (9, "crc-flit"): 5, (17, "crc-flit"): 7, (0, "crc-data"): 11, (17, "crc-data"): 13,
              (9, "replay"): 17, (17, "replay"): 19, (0, "recovery"): 23, (9, "ecc-data"): 29, (17, "ecc-data"): 31}
    faults = [{"kind": "nvlink-errors", "device": "gpu3", "link": link, "counter": counter, "increment": count}
              for (link, counter), count in counts.items()]
    nvml("dgx-h100", faults=faults)
    expected = {"crc-flit": 15, "crc-data": 24, "replay": 36, "recovery": 23, "ecc-data": 60}
    values = n.nvmlDeviceGetFieldValues(handles(n)[3], list(NVLINK_TOTAL_FIELDS))
    assert [(v.nvmlReturn, v.value.ullVal) for v in values] == [
        (n.NVML_SUCCESS, expected[c]) for c in NVLINK_TOTAL_FIELDS.values()]
    quiet = n.nvmlDeviceGetFieldValues(handles(n)[2], list(NVLINK_TOTAL_FIELDS))
    assert [(v.nvmlReturn, v.value.ullVal) for v in quiet] == [(n.NVML_SUCCESS, 0)] * 5


def test_the_nvlink_error_total_fields_of_a_gpu_without_nvlink_are_not_supported(nvml: Nvml,
                                                                                 pynvml_module: ModuleType) -> None:
    """An L4 (edge-pcie, no NVLink) answers NOT_SUPPORTED for the five total fields (NVLINK_TOTAL_FIELDS), as it
    does for its NVLink count field 91 and nvmlDeviceGetNvLinkState."""
    n = pynvml_module
    nvml("edge-pcie")
    values = n.nvmlDeviceGetFieldValues(handles(n)[0], list(NVLINK_TOTAL_FIELDS))
    assert [v.nvmlReturn for v in values] == [n.NVML_ERROR_NOT_SUPPORTED] * 5
