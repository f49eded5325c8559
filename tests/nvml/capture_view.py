"""Read a GPU through NVML the way ``nvidia-smi -q -x`` of the 570-595 drivers reports it, element by element.

The real-hardware captures (``../shared/reference/captures/qx-*.xml``) come from those nvidia-smi releases, which
cannot run here (Debian ships 535, 550 and 555 only). This script asks the fake the NVML questions behind each
element of their schema, with nvidia-ml-py 13.x (the bindings of those releases; run with it first on
``sys.path``), and prints the answers in nvidia-smi's formats: ``{"gpus": [{"/path/of/element": "text"}]}``.
Elements nvidia-smi fills from its private export table are read through that table's slots, as nvidia-smi
does. Run as a script in a fresh interpreter with ``LD_LIBRARY_PATH``/``FAKEHW_NVML_SNAPSHOT`` set.
"""

from __future__ import annotations

import ctypes
import json
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pynvml as n

NA = "N/A"
ERROR_TEXT = {3: NA, 4: "Insufficient Permissions", 26: "Requested functionality has been deprecated",
              13: "Function Not Found"}
ARCH = {6: "Turing", 7: "Ampere", 8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell"}
SMI_TABLE_GUID = bytes([0xC4, 0xFE, 0x3E, 0x6C, 0xC9, 0x8F, 0x6C, 0x4E, 0xA3, 0x27, 0xEE, 0x69, 0x6E, 0x12, 0xF7, 0xC4])
ATOMICS = ((0x01, "FETCHADD_32"), (0x02, "FETCHADD_64"), (0x04, "SWAP_32"), (0x08, "SWAP_64"), (0x10, "CAS_32"),
           (0x20, "CAS_64"), (0x40, "CAS_128"))
SCOPE_GPU, SCOPE_MODULE, SCOPE_MEMORY = 0, 1, 2
ADDRESSING = {0: "None", 1: "HMM", 2: "ATS"}


def text(fn: Callable[[], Any], fmt: Callable[[Any], str] = str) -> str:
    """``fmt(fn())``, or nvidia-smi's wording of the NVML error."""
    try:
        return fmt(fn())
    except n.NVMLError as exc:
        code = int(exc.value)
        return ERROR_TEXT.get(code, str(n.nvmlErrorString(code)))


def on_off(v: int) -> str:
    """An nvmlEnableState_t: NVML_FEATURE_DISABLED (0) or NVML_FEATURE_ENABLED (1), nvml.h's only two values; any
    other number is a defect of the getter, shown as itself so that it never matches a capture."""
    return {0: "Disabled", 1: "Enabled"}.get(v, f"not an nvmlEnableState_t: {v}")


def yes_no(v: int) -> str:
    return "Yes" if v else "No"


def mib(v: int) -> str:
    """nvidia-smi (570+) rounds byte counts to the nearest MiB, halves up: the A100 capture's 40960 MiB total,
    518 reserved and 40443 free are consistent with a whole-MiB total only that way."""
    return f"{(v + 2**19) >> 20} MiB"


def watts(mw: int) -> str:
    return f"{mw / 1000:.2f} W"


def fields(h: Any, ids: list[tuple[int, int]]) -> list[Any]:
    """Field values for (field id, scope id) pairs."""
    arr = (n.c_nvmlFieldValue_t * len(ids))()
    for i, (fid, scope) in enumerate(ids):
        arr[i].fieldId = fid
        arr[i].scopeId = scope
    fn = n._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
    n._nvmlCheckReturn(fn(h, ctypes.c_int(len(ids)), arr))
    return list(arr)


def field(h: Any, fid: int, fmt: Callable[[Any], str], scope: int = 0) -> str:
    v = fields(h, [(fid, scope)])[0]
    if v.nvmlReturn != 0:
        return ERROR_TEXT.get(v.nvmlReturn, str(n.nvmlErrorString(v.nvmlReturn)))
    value = {1: v.value.uiVal, 3: v.value.ullVal, 4: v.value.sllVal, 5: ctypes.c_int(v.value.uiVal).value}.get(
        v.valueType, v.value.ullVal)
    return fmt(value)


class ExportTable:
    """nvidia-smi's private table: slot n is a function pointer taking (device, out, size, extra)."""

    def __init__(self) -> None:
        table = ctypes.c_void_p()
        guid = (ctypes.c_ubyte * 16)(*SMI_TABLE_GUID)
        fn = n._nvmlGetFunctionPointer("nvmlInternalGetExportTable")
        n._nvmlCheckReturn(fn(ctypes.byref(table), guid))
        self.base = table.value or 0

    def call(self, slot: int, h: Any, out: Any, size: int = 0) -> int:
        addr = ctypes.c_void_p.from_address(self.base + 8 * slot).value or 0
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        handle = ctypes.cast(h, ctypes.c_void_p)
        return int(proto(addr)(handle, ctypes.cast(ctypes.byref(out), ctypes.c_void_p), size, None))

    def uint(self, slot: int, h: Any, fmt: Callable[[int], str]) -> str:
        out = ctypes.c_uint(0)
        rc = self.call(slot, h, out)
        return fmt(out.value) if rc == 0 else ERROR_TEXT.get(rc, n.nvmlErrorString(rc))

    def string(self, slot: int, h: Any, size: int) -> str:
        out = ctypes.create_string_buffer(size)
        rc = self.call(slot, h, out, size)
        return out.value.decode() if rc == 0 else ERROR_TEXT.get(rc, n.nvmlErrorString(rc))


def identity(h: Any, v: dict[str, str]) -> None:
    v["/product_name"] = text(lambda: n.nvmlDeviceGetName(h))
    v["/product_brand"] = text(lambda: n.nvmlDeviceGetBrand(h), lambda b: "NVIDIA" if b == n.NVML_BRAND_NVIDIA
                               else str(b))
    v["/product_architecture"] = text(lambda: n.nvmlDeviceGetArchitecture(h), lambda a: ARCH.get(a, "Unknown"))
    v["/display_mode"] = text(lambda: n.nvmlDeviceGetDisplayMode(h), on_off)
    v["/display_active"] = text(lambda: n.nvmlDeviceGetDisplayActive(h), on_off)
    v["/persistence_mode"] = text(lambda: n.nvmlDeviceGetPersistenceMode(h), on_off)
    v["/addressing_mode"] = text(lambda: n.nvmlDeviceGetAddressingMode(h), lambda m: ADDRESSING.get(m, str(m)))
    mig = text(lambda: n.nvmlDeviceGetMigMode(h), lambda m: f"{on_off(m[0])}|{on_off(m[1])}")
    v["/mig_mode/current_mig"], v["/mig_mode/pending_mig"] = mig.split("|") if "|" in mig else (mig, mig)
    v["/mig_devices"] = "None" if text(lambda: n.nvmlDeviceGetMigMode(h), lambda m: str(m[0])) != "1" else "present"
    v["/accounting_mode"] = text(lambda: n.nvmlDeviceGetAccountingMode(h), on_off)
    v["/accounting_mode_buffer_size"] = text(lambda: n.nvmlDeviceGetAccountingBufferSize(h))
    dm = text(lambda: n.nvmlDeviceGetDriverModel_v2(h), lambda m: "|".join(map(str, m)))
    v["/driver_model/current_dm"], v["/driver_model/pending_dm"] = dm.split("|") if "|" in dm else (dm, dm)
    v["/serial"] = text(lambda: n.nvmlDeviceGetSerial(h))
    v["/uuid"] = text(lambda: n.nvmlDeviceGetUUID(h))
    v["/pdi"] = text(lambda: n.nvmlDeviceGetPdi(h), lambda p: f"0x{p:016x}")
    v["/minor_number"] = text(lambda: n.nvmlDeviceGetMinorNumber(h))
    v["/vbios_version"] = text(lambda: n.nvmlDeviceGetVbiosVersion(h))
    v["/multigpu_board"] = text(lambda: n.nvmlDeviceGetMultiGpuBoard(h), yes_no)
    v["/board_id"] = text(lambda: n.nvmlDeviceGetBoardId(h), lambda b: f"0x{b:x}")
    v["/board_part_number"] = text(lambda: n.nvmlDeviceGetBoardPartNumber(h))


class PlatformInfoV2(ctypes.Structure):
    """nvmlPlatformInfo_v2_t with byte arrays (the bindings decode chassisSerialNumber as text)."""

    _fields_ = [("version", ctypes.c_uint), ("ibGuid", ctypes.c_ubyte * 16),
                ("chassisSerialNumber", ctypes.c_ubyte * 16), ("slotNumber", ctypes.c_ubyte),
                ("trayIndex", ctypes.c_ubyte), ("hostId", ctypes.c_ubyte), ("peerType", ctypes.c_ubyte),
                ("moduleId", ctypes.c_ubyte)]


class FabricInfoV3(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte), ("healthMask", ctypes.c_uint),
                ("healthSummary", ctypes.c_ubyte)]


def private_fallbacks(h: Any, v: dict[str, str], table: ExportTable) -> None:
    """What nvidia-smi of a branch whose library lacks the public call reads from its private table instead (the
    addressing mode before the 580 header's nvmlDeviceGetAddressingMode: slot 242)."""
    if v["/addressing_mode"] == ERROR_TEXT[13]:
        v["/addressing_mode"] = table.uint(242, h, lambda m: ADDRESSING.get(m, "Unknown"))


def platform(h: Any, v: dict[str, str]) -> None:
    info = PlatformInfoV2(version=ctypes.sizeof(PlatformInfoV2) | 2 << 24)
    got = text(lambda: n.nvmlDeviceGetPlatformInfo(h, ctypes.byref(info)), lambda _: "ok")
    module = text(lambda: n.nvmlDeviceGetModuleId(h))
    if got != "ok":
        for k in ("chassis_serial_number", "slot_number", "tray_index", "host_id", "peer_type", "gpu_fabric_guid"):
            v[f"/platformInfo/{k}"] = got
    else:
        raw = bytes(info.chassisSerialNumber).split(b"\0", 1)[0]
        v["/platformInfo/chassis_serial_number"] = raw.decode()
        v["/platformInfo/slot_number"] = NA if info.slotNumber == 0xFF else str(info.slotNumber)
        v["/platformInfo/tray_index"] = NA if info.trayIndex == 0xFF else str(info.trayIndex)
        v["/platformInfo/host_id"] = str(info.hostId)
        v["/platformInfo/peer_type"] = {1: "Switch Connected"}.get(info.peerType, "Direct Connected")
        guid = int.from_bytes(bytes(info.ibGuid)[:8], "big")
        v["/platformInfo/gpu_fabric_guid"] = f"0x{guid:016x}"
    v["/platformInfo/module_id"] = module


def inforom(h: Any, v: dict[str, str], table: ExportTable) -> None:
    v["/gpu_part_number"] = table.string(231, h, 80)
    v["/gpu_fru_part_number"] = table.string(237, h, 20)
    v["/inforom_version/img_version"] = text(lambda: n.nvmlDeviceGetInforomImageVersion(h))
    for key, obj in (("oem_object", 0), ("ecc_object", 1), ("pwr_object", 2)):
        v[f"/inforom_version/{key}"] = text(partial(n.nvmlDeviceGetInforomVersion, h, obj))
    flush = text(lambda: n.nvmlDeviceGetLastBBXFlushTime(h), lambda t: f"{t[0]}|{t[1]}")
    if "|" in flush:
        stamp, duration = flush.split("|")
        when = datetime.fromtimestamp(int(stamp) / 1e6, UTC)
        millis = f"{when.microsecond // 1000:03d}"
        v["/inforom_bbx_flush/latest_timestamp"] = when.strftime("%Y/%m/%d %H:%M:%S.") + millis
        v["/inforom_bbx_flush/latest_duration"] = f"{duration} us"
    else:
        v["/inforom_bbx_flush/latest_timestamp"] = v["/inforom_bbx_flush/latest_duration"] = flush
    gom = text(lambda: n.nvmlDeviceGetGpuOperationMode(h), lambda m: f"{m[0]}|{m[1]}")
    v["/gpu_operation_mode/current_gom"] = v["/gpu_operation_mode/pending_gom"] = gom
    v["/c2c_mode"] = text(lambda: n.nvmlDeviceGetC2cModeInfoV(h), lambda m: on_off(m.isC2cEnabled))
    v["/gpu_virtualization_mode/virtualization_mode"] = text(
        lambda: n.nvmlDeviceGetVirtualizationMode(h), lambda m: {0: "None", 1: "Pass-Through", 2: "VGPU"}.get(m, "?"))
    v["/gpu_virtualization_mode/host_vgpu_mode"] = text(lambda: n.nvmlDeviceGetHostVgpuMode(h))
    v["/gpu_virtualization_mode/vgpu_heterogeneous_mode"] = text(lambda: n.nvmlDeviceGetVgpuHeterogeneousMode(h))
    v["/gpu_reset_status/reset_required"] = field(h, 226, yes_no)
    v["/gpu_reset_status/drain_and_reset_recommended"] = field(h, 227, yes_no)
    v["/gpu_recovery_action"] = field(h, 230, lambda a: {0: "None", 1: "Reset"}.get(a, str(a)))
    v["/gsp_firmware_version"] = text(lambda: n.nvmlDeviceGetGspFirmwareVersion(h),
                                      lambda b: b.decode() if isinstance(b, bytes) else str(b))
    out = ctypes.c_uint(0)
    rc = table.call(165, h, out)
    v["/ibmnpu/relaxed_ordering_mode"] = ERROR_TEXT.get(rc, str(out.value)) if rc else str(out.value)


def pci(h: Any, v: dict[str, str], table: ExportTable) -> None:
    p = n.nvmlDeviceGetPciInfo_v3(h)
    ext = n.nvmlPciInfoExt_v1_t()
    ext.version = n.nvmlPciInfoExt_v1
    n.nvmlDeviceGetPciInfoExt(h, ctypes.byref(ext))
    v["/pci/pci_bus"] = f"{p.bus:02X}"
    v["/pci/pci_device"] = f"{p.device:02X}"
    v["/pci/pci_domain"] = f"{p.domain:04X}"
    v["/pci/pci_base_class"] = str(ext.baseClass)
    v["/pci/pci_sub_class"] = str(ext.subClass)
    v["/pci/pci_device_id"] = f"{p.pciDeviceId:08X}"
    v["/pci/pci_bus_id"] = p.busId.decode() if isinstance(p.busId, bytes) else p.busId
    v["/pci/pci_sub_system_id"] = f"{p.pciSubSystemId:08X}"
    g = "/pci/pci_gpu_link_info"
    v[f"{g}/pcie_gen/max_link_gen"] = text(lambda: n.nvmlDeviceGetMaxPcieLinkGeneration(h))
    v[f"{g}/pcie_gen/current_link_gen"] = text(lambda: n.nvmlDeviceGetCurrPcieLinkGeneration(h))
    v[f"{g}/pcie_gen/device_current_link_gen"] = text(lambda: n.nvmlDeviceGetCurrPcieLinkGeneration(h))
    v[f"{g}/pcie_gen/max_device_link_gen"] = text(lambda: n.nvmlDeviceGetGpuMaxPcieLinkGeneration(h))
    v[f"{g}/pcie_gen/max_host_link_gen"] = table.uint(230, h, str)
    v[f"{g}/link_widths/max_link_width"] = text(lambda: n.nvmlDeviceGetMaxPcieLinkWidth(h), lambda w: f"{w}x")
    v[f"{g}/link_widths/current_link_width"] = text(lambda: n.nvmlDeviceGetCurrPcieLinkWidth(h), lambda w: f"{w}x")
    bridge = text(lambda: n.nvmlDeviceGetBridgeChipInfo(h), lambda b: str(b.bridgeCount))
    v["/pci/pci_bridge_chip/bridge_chip_type"] = v["/pci/pci_bridge_chip/bridge_chip_fw"] = bridge
    v["/pci/replay_counter"] = text(lambda: n.nvmlDeviceGetPcieReplayCounter(h))
    v["/pci/replay_rollover_counter"] = field(h, 95, str)
    v["/pci/tx_util"] = text(lambda: n.nvmlDeviceGetPcieThroughput(h, 0), lambda k: f"{k} KB/s")
    v["/pci/rx_util"] = text(lambda: n.nvmlDeviceGetPcieThroughput(h, 1), lambda k: f"{k} KB/s")

    def atomics(mask: int) -> str:
        return "".join(f"{name} " for bit, name in ATOMICS if mask & bit)

    v["/pci/atomic_caps_outbound"] = field(h, 228, atomics)
    v["/pci/atomic_caps_inbound"] = field(h, 229, atomics)


def performance(h: Any, v: dict[str, str], table: ExportTable) -> None:
    v["/fan_speed"] = text(lambda: n.nvmlDeviceGetFanSpeed(h), lambda s: f"{s} %")
    v["/performance_state"] = text(lambda: n.nvmlDeviceGetPerformanceState(h), lambda p: f"P{p}")
    reasons = n.nvmlDeviceGetCurrentClocksEventReasons(h)
    bits = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
            "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
            "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100}
    for name, bit in bits.items():
        v[f"/clocks_event_reasons/clocks_event_reason_{name}"] = "Active" if reasons & bit else "Not Active"
    counters = "/clocks_event_reasons_counters/clocks_event_reasons_counters_"
    v[counters + "sw_power_cap"] = text(lambda: n.nvmlDeviceGetViolationStatus(h, n.NVML_PERF_POLICY_POWER),
                                        lambda t: f"{t.violationTime // 1000} us")
    v[counters + "sync_boost"] = text(lambda: n.nvmlDeviceGetViolationStatus(h, n.NVML_PERF_POLICY_SYNC_BOOST),
                                      lambda t: f"{t.violationTime // 1000} us")
    v[counters + "sw_therm_slowdown"] = field(h, 269, lambda u: f"{u // 1000} us")
    v[counters + "hw_therm_slowdown"] = field(h, 270, lambda u: f"{u // 1000} us")
    v[counters + "hw_power_brake"] = field(h, 271, lambda u: f"{u // 1000} us")
    v["/sparse_operation_mode"] = table.uint(249, h, on_off)


def memory(h: Any, v: dict[str, str]) -> None:
    m = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
    v["/fb_memory_usage/total"], v["/fb_memory_usage/reserved"] = mib(m.total), mib(m.reserved)
    v["/fb_memory_usage/used"], v["/fb_memory_usage/free"] = mib(m.used), mib(m.free)
    b = n.nvmlDeviceGetBAR1MemoryInfo(h)
    v["/bar1_memory_usage/total"], v["/bar1_memory_usage/used"] = mib(b.bar1Total), mib(b.bar1Used)
    v["/bar1_memory_usage/free"] = mib(b.bar1Free)
    cc = text(lambda: n.nvmlDeviceGetConfComputeProtectedMemoryUsage(h),
              lambda c: f"{mib(c.total)}|{mib(c.used)}|{mib(c.free)}")
    parts = cc.split("|") if "|" in cc else [cc] * 3
    for key, value in zip(("total", "used", "free"), parts, strict=True):
        v[f"/cc_protected_memory_usage/{key}"] = value
    v["/compute_mode"] = text(lambda: n.nvmlDeviceGetComputeMode(h), lambda m: {0: "Default"}.get(m, str(m)))
    # A GPU in MIG mode has no utilization (nvml.h: NOT_SUPPORTED there; nvidia-smi prints N/A).
    util = text(lambda: n.nvmlDeviceGetUtilizationRates(h), lambda u: f"{u.gpu} %|{u.memory} %")
    v["/utilization/gpu_util"], v["/utilization/memory_util"] = util.split("|") if "|" in util else [util] * 2
    for key, fn in (("encoder_util", "Encoder"), ("decoder_util", "Decoder"), ("jpeg_util", "Jpg"),
                    ("ofa_util", "Ofa")):
        v[f"/utilization/{key}"] = text(partial(getattr(n, f"nvmlDeviceGet{fn}Utilization"), h),
                                        lambda r: f"{r[0]} %")
    enc = n.nvmlDeviceGetEncoderStats(h)
    v["/encoder_stats/session_count"], v["/encoder_stats/average_fps"] = str(enc[0]), str(enc[1])
    v["/encoder_stats/average_latency"] = str(enc[2])
    fbc = n.nvmlDeviceGetFBCStats(h)
    v["/fbc_stats/session_count"], v["/fbc_stats/average_fps"] = str(fbc.sessionsCount), str(fbc.averageFPS)
    v["/fbc_stats/average_latency"] = str(fbc.averageLatency)
    dram = text(lambda: n.nvmlDeviceGetCurrentDramEncryptionMode(h), on_off)
    v["/dram_encryption_mode/current_dram_encryption"] = v["/dram_encryption_mode/pending_dram_encryption"] = dram


def ecc(h: Any, v: dict[str, str]) -> None:
    mode = text(lambda: n.nvmlDeviceGetEccMode(h), lambda m: f"{on_off(m[0])}|{on_off(m[1])}")
    v["/ecc_mode/current_ecc"], v["/ecc_mode/pending_ecc"] = mode.split("|") if "|" in mode else (mode, mode)
    status = n.c_nvmlEccSramErrorStatus_v1_t()
    status.version = n.nvmlEccSramErrorStatus_v1
    split = text(lambda: n.nvmlDeviceGetSramEccErrorStatus(h, ctypes.byref(status)), lambda _: "ok") == "ok"
    for counter, key in ((n.NVML_VOLATILE_ECC, "volatile"), (n.NVML_AGGREGATE_ECC, "aggregate")):
        def count(etype: int, loc: int, counter: int = counter) -> str:
            return text(lambda: n.nvmlDeviceGetMemoryErrorCounter(h, etype, counter, loc))
        v[f"/ecc_errors/{key}/sram_correctable"] = count(0, n.NVML_MEMORY_LOCATION_SRAM)
        if split:
            par = status.volatileUncParity if key == "volatile" else status.aggregateUncParity
            sec = status.volatileUncSecDed if key == "volatile" else status.aggregateUncSecDed
            v[f"/ecc_errors/{key}/sram_uncorrectable_parity"] = str(par)
            v[f"/ecc_errors/{key}/sram_uncorrectable_secded"] = str(sec)
        else:
            v[f"/ecc_errors/{key}/sram_uncorrectable"] = count(1, n.NVML_MEMORY_LOCATION_SRAM)
        v[f"/ecc_errors/{key}/dram_correctable"] = count(0, n.NVML_MEMORY_LOCATION_DEVICE_MEMORY)
        v[f"/ecc_errors/{key}/dram_uncorrectable"] = count(1, n.NVML_MEMORY_LOCATION_DEVICE_MEMORY)
    if split:
        v["/ecc_errors/aggregate/sram_threshold_exceeded"] = yes_no(status.bThresholdExceeded)
        src = "/ecc_errors/aggregate_uncorrectable_sram_sources/sram_"
        v[src + "l2"], v[src + "sm"] = str(status.aggregateUncBucketL2), str(status.aggregateUncBucketSm)
        v[src + "microcontroller"] = str(status.aggregateUncBucketMcu)
        v[src + "pcie"], v[src + "other"] = str(status.aggregateUncBucketPcie), str(status.aggregateUncBucketOther)
    repair = text(lambda: n.nvmlDeviceGetRepairStatus(h), lambda r: f"{yes_no(r[0])}|{yes_no(r[1])}")
    v["/ecc_errors/channel_repair_pending"], v["/ecc_errors/tpc_repair_pending"] = (
        repair.split("|") if "|" in repair else (repair, repair))
    v["/ecc_errors/unrepairable_memory"] = text(lambda: n.nvmlDeviceGetUnrepairableMemoryFlag_v1(h), yes_no)


def retired_remapped(h: Any, v: dict[str, str]) -> None:
    for cause, key in ((0, "multiple_single_bit_retirement"), (1, "double_bit_retirement")):
        pages = text(partial(n.nvmlDeviceGetRetiredPages, h, cause), lambda p: str(len(p)))
        v[f"/retired_pages/{key}/retired_count"] = pages
        v[f"/retired_pages/{key}/retired_pagelist"] = "" if pages == "0" else pages
    pending = text(lambda: n.nvmlDeviceGetRetiredPagesPendingStatus(h), yes_no)
    v["/retired_pages/pending_blacklist"] = v["/retired_pages/pending_retirement"] = pending
    rows = text(lambda: n.nvmlDeviceGetRemappedRows(h), lambda r: "|".join(map(str, r)))
    if "|" not in rows:
        v["/remapped_rows"] = rows
        return
    corr, unc, pend, fail = rows.split("|")
    v["/remapped_rows/remapped_row_corr"], v["/remapped_rows/remapped_row_unc"] = corr, unc
    v["/remapped_rows/remapped_row_pending"] = yes_no(int(pend))
    v["/remapped_rows/remapped_row_failure"] = yes_no(int(fail))
    v["/remapped_rows/remapped_row_corr_inactive"] = field(h, 301, str)
    v["/remapped_rows/remapped_row_unc_inactive"] = field(h, 302, str)
    hist = n.nvmlDeviceGetRowRemapperHistogram(h)
    for key in ("max", "high", "partial", "low", "none"):
        v[f"/remapped_rows/row_remapper_histogram/row_remapper_histogram_{key}"] = f"{getattr(hist, key)} bank(s)"


def temperature(h: Any, v: dict[str, str]) -> None:
    def celsius(t: int) -> str:
        return f"{t} C"

    v["/temperature/gpu_temp"] = text(lambda: n.nvmlDeviceGetTemperature(h, 0), celsius)
    margin = text(lambda: n.nvmlDeviceGetMarginTemperature(h), celsius)
    v["/temperature/gpu_temp_tlimit"] = margin
    if margin != NA:  # T.Limit boards report their thresholds relative to it (fields 193-196)
        v["/temperature/gpu_temp_max_tlimit_threshold"] = field(h, 193, celsius)
        v["/temperature/gpu_temp_slow_tlimit_threshold"] = field(h, 194, celsius)
        v["/temperature/gpu_temp_max_gpu_tlimit_threshold"] = field(h, 196, celsius)
        v["/temperature/gpu_temp_max_mem_tlimit_threshold"] = field(h, 195, celsius)
    else:
        for key, threshold in (("max", 0), ("slow", 1), ("max_gpu", 3), ("max_mem", 2)):
            v[f"/temperature/gpu_temp_{key}_threshold"] = text(
                partial(n.nvmlDeviceGetTemperatureThreshold, h, threshold), celsius)
    v["/temperature/gpu_target_temperature"] = text(
        lambda: n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR), celsius)
    v["/temperature/memory_temp"] = field(h, 82, celsius)
    v["/supported_gpu_target_temp/gpu_target_temp_min"] = NA  # acoustic limits: no datacenter board has them
    v["/supported_gpu_target_temp/gpu_target_temp_max"] = NA


def power(h: Any, v: dict[str, str]) -> None:
    pstate = text(lambda: n.nvmlDeviceGetPowerState(h), lambda p: f"P{p}")
    for section, scope in (("gpu_power_readings", SCOPE_GPU), ("module_power_readings", SCOPE_MODULE)):
        v[f"/{section}/power_state"] = pstate
        v[f"/{section}/average_power_draw"] = field(h, 185, watts, scope)
        v[f"/{section}/instant_power_draw"] = field(h, 186, watts, scope)
        v[f"/{section}/current_power_limit"] = field(h, 190, watts, scope)
        v[f"/{section}/requested_power_limit"] = field(h, 192, watts, scope)
        v[f"/{section}/default_power_limit"] = field(h, 189, watts, scope)
        v[f"/{section}/min_power_limit"] = field(h, 187, watts, scope)
        v[f"/{section}/max_power_limit"] = field(h, 188, watts, scope)
    v["/gpu_memory_power_readings/average_power_draw"] = field(h, 185, watts, SCOPE_MEMORY)
    v["/gpu_memory_power_readings/instant_power_draw"] = field(h, 186, watts, SCOPE_MEMORY)
    v["/power_smoothing"] = field(h, 251, on_off)
    profiles = n.c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t()
    current = text(lambda: n.nvmlDeviceWorkloadPowerProfileGetCurrentProfiles(h, ctypes.byref(profiles)))
    v["/power_profiles/power_profile_requested_profiles"] = current if current in ERROR_TEXT.values() else "set"
    v["/power_profiles/power_profile_enforced_profiles"] = v["/power_profiles/power_profile_requested_profiles"]
    v["/edpp_multiplier"] = field(h, 274, str)


def clocks(h: Any, v: dict[str, str], table: ExportTable) -> None:
    def mhz(c: int) -> str:
        return f"{c} MHz"

    names = (("graphics_clock", n.NVML_CLOCK_GRAPHICS), ("sm_clock", n.NVML_CLOCK_SM), ("mem_clock", n.NVML_CLOCK_MEM),
             ("video_clock", n.NVML_CLOCK_VIDEO))
    for key, ct in names:
        v[f"/clocks/{key}"] = text(partial(n.nvmlDeviceGetClockInfo, h, ct), mhz)
        v[f"/max_clocks/{key}"] = text(partial(n.nvmlDeviceGetMaxClockInfo, h, ct), mhz)
    for key, ct in (("graphics_clock", n.NVML_CLOCK_GRAPHICS), ("mem_clock", n.NVML_CLOCK_MEM)):
        v[f"/applications_clocks/{key}"] = text(partial(n.nvmlDeviceGetApplicationsClock, h, ct), mhz)
        v[f"/default_applications_clocks/{key}"] = text(
            partial(n.nvmlDeviceGetDefaultApplicationsClock, h, ct), mhz)
    v["/deferred_clocks/mem_clock"] = table.uint(232, h, mhz)
    v["/max_customer_boost_clocks/graphics_clock"] = text(
        lambda: n.nvmlDeviceGetMaxCustomerBoostClock(h, n.NVML_CLOCK_GRAPHICS), mhz)
    boost = text(lambda: n.nvmlDeviceGetAutoBoostedClocksEnabled(h), lambda b: f"{on_off(b[0])}|{on_off(b[1])}")
    v["/clock_policy/auto_boost"], v["/clock_policy/auto_boost_default"] = (
        boost.split("|") if "|" in boost else (boost, boost))
    v["/voltage/graphics_volt"] = table.uint(209, h, lambda uv: f"{uv / 1000:.3f} mV")
    listed = []
    for mem in text(lambda: n.nvmlDeviceGetSupportedMemoryClocks(h), lambda m: ",".join(map(str, m))).split(","):
        if mem.isdigit():
            gr = n.nvmlDeviceGetSupportedGraphicsClocks(h, int(mem))
            listed.append(f"{mem} MHz: " + ",".join(map(str, gr)))
    v["/supported_clocks"] = "; ".join(listed) if listed else NA


def fabric(h: Any, v: dict[str, str]) -> None:
    info = FabricInfoV3(version=ctypes.sizeof(FabricInfoV3) | 3 << 24)
    got = text(lambda: n.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info)), lambda _: "ok")
    if got == n.nvmlErrorString(n.NVML_ERROR_ARGUMENT_VERSION_MISMATCH):  # a branch before v3 (580): ask for v2
        info = FabricInfoV3(version=36 | 2 << 24)
        got = text(lambda: n.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info)), lambda _: "ok")
    keys = ("state", "status", "cliqueId", "clusterUuid", "health/summary", "health/bandwidth",
            "health/route_recovery_in_progress", "health/route_unhealthy", "health/access_timeout_recovery",
            "health/incorrect_configuration", "health/partition_assigned")
    if got != "ok" or info.state == n.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        for key in keys:
            v[f"/fabric/{key}"] = NA if got == "ok" else got
        return
    v["/fabric/state"] = {1: "Not Started", 2: "In Progress", 3: "Completed"}[info.state]
    v["/fabric/status"] = "Success" if info.status == 0 else n.nvmlErrorString(info.status)
    v["/fabric/cliqueId"] = str(info.cliqueId)
    v["/fabric/clusterUuid"] = str(uuid.UUID(bytes=bytes(info.clusterUuid)))
    mask = info.healthMask

    def two(shift: int, true: str, false: str) -> str:
        return {1: true, 2: false}.get((mask >> shift) & 3, NA)

    v["/fabric/health/summary"] = {1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}.get(info.healthSummary, NA)
    v["/fabric/health/bandwidth"] = two(0, "Degraded", "Full")
    v["/fabric/health/route_recovery_in_progress"] = two(2, "True", "False")
    v["/fabric/health/route_unhealthy"] = two(4, "True", "False")
    v["/fabric/health/access_timeout_recovery"] = two(6, "True", "False")
    v["/fabric/health/incorrect_configuration"] = {1: "None"}.get((mask >> 8) & 0xF, NA)
    v["/fabric/health/partition_assigned"] = two(12, "True", "False")


def capabilities(h: Any, v: dict[str, str]) -> None:
    caps = n.c_nvmlDeviceCapabilities_v1_t()
    rc = n.nvmlDeviceGetCapabilities(h, ctypes.byref(caps))
    v["/capabilities/egm"] = ("enabled" if caps.capMask & 1 else "disabled") if rc == 0 else ERROR_TEXT.get(rc, "?")
    v["/processes"] = "" if not n.nvmlDeviceGetComputeRunningProcesses(h) else "present"
    v["/accounted_processes"] = ""


def observe(h: Any, table: ExportTable) -> dict[str, str]:
    v: dict[str, str] = {}
    identity(h, v)
    private_fallbacks(h, v, table)
    platform(h, v)
    inforom(h, v, table)
    pci(h, v, table)
    performance(h, v, table)
    memory(h, v)
    ecc(h, v)
    retired_remapped(h, v)
    temperature(h, v)
    power(h, v)
    clocks(h, v, table)
    fabric(h, v)
    capabilities(h, v)
    return v


def main() -> int:
    n.nvmlInit()
    table = ExportTable()
    out = {"driver_version": n.nvmlSystemGetDriverVersion(), "gpus": [
        observe(n.nvmlDeviceGetHandleByIndex(i), table) for i in range(n.nvmlDeviceGetCount())]}
    n.nvmlShutdown()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
