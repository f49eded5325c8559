"""Call every device and system getter an nvidia-ml-py module offers, as a user sweeping the API would.

Run as a script in a fresh interpreter whose ``sys.path`` starts with the nvidia-ml-py version to sweep (the
tests put 13.615.71 or 12.535.161 there) and whose ``LD_LIBRARY_PATH`` and ``FAKEHW_NVML_SNAPSHOT`` point at the
fake. It prints one JSON object: ``{"module": version, "results": {function: outcome}}`` where an outcome is
``"ok"``, the NVML error code, or ``"harness: ..."`` when the sweep could not build arguments. Progress goes to
stderr one function at a time, so a crash names the function that crashed.

Arguments come from the parameter names (``handle`` -> a GPU handle, ``link`` -> 0, ...); the getters that take
a caller-built struct get the struct the module declares for them, with its version set.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import pynvml as n

SKIP = {
    # Not getters in effect (they need a prepared object or change state).
    "nvmlDeviceGetHandleBySerial", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetHandleByUUIDV",
}


def _struct(name: str, version: str | None = None) -> Any:
    """An instance of the module's struct ``name`` with its ``version`` field set (when it has one)."""
    cls = getattr(n, name)
    obj = cls()
    if version is not None:
        obj.version = getattr(n, version)
    return obj


def struct_args(fn: str, handle: Any) -> list[Any] | None:
    """Arguments of the getters that take a caller-built struct (None: not one of those)."""
    table: dict[str, Callable[[], list[Any]]] = {
        "nvmlDeviceGetPciInfoExt": lambda: [ctypes.byref(_struct("nvmlPciInfoExt_v1_t", "nvmlPciInfoExt_v1"))],
        "nvmlDeviceGetGpuFabricInfo": lambda: [ctypes.byref(_struct("c_nvmlGpuFabricInfo_t"))],
        "nvmlDeviceGetGpuFabricInfoV": lambda: [ctypes.byref(_struct("c_nvmlGpuFabricInfoV_t", "nvmlGpuFabricInfo_v3"
                                                                     if hasattr(n, "nvmlGpuFabricInfo_v3")
                                                                     else "nvmlGpuFabricInfo_v2"))],
        "nvmlDeviceGetGpuFabricInfo_v4": lambda: [ctypes.byref(_struct("c_nvmlGpuFabricInfo_v4_t"))],
        "nvmlDeviceGetPlatformInfo": lambda: [ctypes.byref(_struct("c_nvmlPlatformInfo_v2_t"))],
        "nvmlDeviceGetCapabilities": lambda: [ctypes.byref(_struct("c_nvmlDeviceCapabilities_v1_t"))],
        "nvmlDeviceGetSramEccErrorStatus": lambda: [ctypes.byref(_struct("c_nvmlEccSramErrorStatus_v1_t",
                                                                         "nvmlEccSramErrorStatus_v1"))],
        "nvmlDeviceGetNvlinkSupportedBwModes": lambda: [ctypes.byref(_struct("c_nvmlNvlinkSupportedBwModes_v1_t",
                                                                             "nvmlNvlinkSupportedBwModes_v1"))],
        "nvmlDeviceGetNvlinkBwMode": lambda: [ctypes.byref(_struct("c_nvmlNvlinkGetBwMode_v1_t",
                                                                   "nvmlNvlinkGetBwMode_v1"))],
        "nvmlDeviceGetNvLinkInfo": lambda: [ctypes.byref(_struct("c_nvmlNvLinkInfo_v2_t", "nvmlNvLinkInfo_v2"))],
        "nvmlDeviceGetSramUniqueUncorrectedEccErrorCounts": lambda: [ctypes.byref(_struct(
            "c_nvmlEccSramUniqueUncorrectedErrorCounts_v1_t", "nvmlEccSramUniqueUncorrectedErrorCounts_v1"))],
        "nvmlDeviceGetClockOffsets": lambda: [ctypes.byref(_struct("c_nvmlClockOffset_t", "nvmlClockOffset_v1"))],
        "nvmlDeviceGetPowerMizerMode_v1": lambda: [ctypes.byref(_struct("c_nvmlDevicePowerMizerModes_v1_t"))],
        "nvmlSystemGetConfComputeSettings": lambda: [ctypes.byref(_struct("c_nvmlSystemConfComputeSettings_v1_t",
                                                                          "nvmlSystemConfComputeSettings_v1"))],
        "nvmlDeviceGetRemappedRows_v2": lambda: [ctypes.byref(_struct("c_nvmlRemappedRowsInfo_v2_t"))],
        "nvmlDeviceGetBankRemapperStatus_v1": lambda: [ctypes.byref(_struct("c_nvmlEccBankRemapperStatus_v1_t"))],
        "nvmlDeviceGetMemoryLimits_v1": lambda: [_struct("c_nvmlGetMemoryLimits_v1_t")],
        "nvmlDeviceGetAdaptiveTgpModeInfo_v1": lambda: [ctypes.byref(_struct("c_nvmlAdaptiveTgpModeInfo_v1_t"))],
        "nvmlDeviceGetNvLinkTelemetrySamples_v1": lambda: [_struct("c_nvmlNvlinkTelemetrySamples_v1_t")],
        "nvmlSystemGetCPER_v1": lambda: [_struct("c_nvmlGetCPER_v1_t")],
        "nvmlDeviceGetVgpuSchedulerState_v2": lambda: [_struct("c_nvmlVgpuSchedulerStateInfo_v2_t")],
        "nvmlDeviceGetVgpuSchedulerLog_v2": lambda: [_struct("c_nvmlVgpuSchedulerLogInfo_v2_t")],
        "nvmlDeviceGetRunningProcessDetailList": lambda: [getattr(n, "nvmlProcessDetailList_v1", 0), 0],
        "nvmlDeviceGetConfComputeGpuAttestationReport": lambda: [bytes(32)],
        "nvmlDeviceGetGpuInstancePossiblePlacements": lambda: [0, None, ctypes.pointer(ctypes.c_uint(0))],
        "nvmlDeviceGetGpuInstances": lambda: [0, None, ctypes.pointer(ctypes.c_uint(0))],
    }
    make = table.get(fn)
    return make() if make is not None else None


def clock_monitor_status() -> Any:
    """A fresh clock-monitor status struct under either of the names the bindings have used."""
    cls: Any = getattr(n, "c_nvmlClkMonStatus_t", None) or n.nvmlClkMonStatus_t
    return cls()


def name_args(fn: Callable[..., Any], handles: list[Any], mem_clock: int) -> list[Any]:
    """Arguments by parameter name (defaults kept)."""
    values: dict[str, Any] = {
        "handle": handles[0], "device": handles[0], "device1": handles[0], "migDevice": handles[0],
        "device2": handles[-1], "link": 0, "counter": 0, "capability": 0, "type": 0, "clockType": 0, "id": 0,
        "sensor": 0, "sensorType": 0, "threshold": 0, "errorType": 0, "counterType": 0, "locationType": 0,
        "pid": os.getpid(), "timeStamp": 0, "level": n.NVML_TOPOLOGY_SINGLE, "p2pIndex": 0, "apiType": 0,
        "infoRomObject": 0, "sourceFilter": 0, "perfPolicyType": 0, "sampling_type": 0, "cpuSetSize": 16,
        "nodeSetSize": 4, "scope": 0, "fan": 0, "memoryClockMHz": mem_clock, "pstate": 0, "profile": 0,
        "profileId": 0, "index": 0, "gpuInstanceId": 1, "fieldIds": list(range(1, 160)), "encoderQueryType": 0,
        "vgpuTypeId": 0, "cpuNumber": 0, "sensorindex": 0, "mode": 0, "version": None, "cper": None,
        "settings": None, "status": None, "counts": None, "info": None, "c_info": None,
    }
    # Out-parameters older bindings (12.535) make the caller pass, by reference as those bindings hand them to the
    # C function unchanged: a fresh object per call.
    def ref(make: Callable[[], Any]) -> Callable[[], Any]:
        return lambda: ctypes.byref(make())

    made: dict[str, Callable[[], Any]] = {
        "minSpeed": ref(ctypes.c_uint), "maxSpeed": ref(ctypes.c_uint), "fanControlPolicy": ref(ctypes.c_uint),
        "moduleId": ref(ctypes.c_uint), "isEnabled": ref(ctypes.c_uint), "defaultMode": ref(ctypes.c_uint),
        "minClockMHz": ref(ctypes.c_uint), "maxClockMHz": ref(ctypes.c_uint), "minOffset": ref(ctypes.c_int),
        "maxOffset": ref(ctypes.c_int), "c_thermalsettings": ref(lambda: n.c_nvmlGpuThermalSettings_t()),
        "c_clkMonInfo": ref(lambda: clock_monitor_status()),
        "c_dynamicpstatesinfo": ref(lambda: n.c_nvmlGpuDynamicPstatesInfo_t()),
    }
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.default is not inspect.Parameter.empty:
            break
        if p.name in made:
            out.append(made[p.name]())
        elif p.name in values:
            out.append(values[p.name])
        else:
            raise LookupError(f"no argument for parameter {p.name!r}")
    return out


def sweep() -> dict[str, Any]:
    n.nvmlInit()
    count = n.nvmlDeviceGetCount()
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    mem_clock = n.nvmlDeviceGetMaxClockInfo(handles[0], n.NVML_CLOCK_MEM)
    results: dict[str, Any] = {}
    names = sorted(k for k in vars(n) if (k.startswith("nvmlDeviceGet") or k.startswith("nvmlSystemGet"))
                   and callable(getattr(n, k)) and k not in SKIP)
    for name in names:
        fn = getattr(n, name)
        print(name, file=sys.stderr, flush=True)
        try:
            args = struct_args(name, handles[0])
            if args is not None:
                params = list(inspect.signature(fn).parameters)
                args = ([handles[0]] if params and params[0] in ("device", "handle") else []) + args
            else:
                args = name_args(fn, handles, mem_clock)
            fn(*args)
            results[name] = "ok"
        except n.NVMLError as exc:
            results[name] = int(exc.value)
        except LookupError as exc:
            results[name] = f"harness: {exc}"
        except Exception as exc:  # a binding that cannot call its own function with these arguments
            results[name] = f"harness: {type(exc).__name__}: {exc}"
    n.nvmlShutdown()
    return results


if __name__ == "__main__":
    version = getattr(n, "__version__", None) or "unknown"
    print(json.dumps({"module": version, "file": n.__file__, "results": sweep()}))
