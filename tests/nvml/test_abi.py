"""Struct layouts and constants of the fake's nvml_abi.h against the real headers.

One probe program prints sizes, field offsets and constant values; it is compiled once against each header and
the outputs must agree: Debian's libnvidia-ml-dev nvml.h (535) for the structs listed here, and nvidia-nvml-dev
13.4.92's nvml.h (PyPI) for every struct, version word and enumerator the two headers share.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fakehw.nvml.build import CSRC
from fakehw.nvml.smi import RealNvidia
from tests.nvml import references

STRUCTS: dict[str, list[str]] = {
    "nvmlPciInfo_t": ["busIdLegacy", "domain", "bus", "device", "pciDeviceId", "pciSubSystemId", "busId"],
    "nvmlMemory_t": ["total", "free", "used"],
    "nvmlMemory_v2_t": ["version", "total", "reserved", "free", "used"],
    "nvmlBAR1Memory_t": ["bar1Total", "bar1Free", "bar1Used"],
    "nvmlProcessInfo_v1_t": ["pid", "usedGpuMemory"],
    "nvmlProcessInfo_v2_t": ["pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"],
    "nvmlProcessInfo_t": ["pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"],
    "nvmlProcessUtilizationSample_t": ["pid", "timeStamp", "smUtil", "memUtil", "encUtil", "decUtil"],
    "nvmlUtilization_t": ["gpu", "memory"],
    "nvmlEccErrorCounts_t": ["l1Cache", "l2Cache", "deviceMemory", "registerFile"],
    "nvmlDeviceAttributes_t": ["multiprocessorCount", "sharedCopyEngineCount", "sharedDecoderCount",
                               "sharedEncoderCount", "sharedJpegCount", "sharedOfaCount", "gpuInstanceSliceCount",
                               "computeInstanceSliceCount", "memorySizeMB"],
    "nvmlRowRemapperHistogramValues_t": ["max", "high", "partial", "low", "none"],
    "nvmlNvLinkUtilizationControl_t": ["units", "pktfilter"],
    "nvmlBridgeChipInfo_t": ["type", "fwVersion"],
    "nvmlBridgeChipHierarchy_t": ["bridgeCount", "bridgeChipInfo"],
    "nvmlEventData_t": ["device", "eventType", "eventData", "gpuInstanceId", "computeInstanceId"],
    "nvmlGpuThermalSettings_t": ["count", "sensor[0].controller", "sensor[1].currentTemp", "sensor[2].target"],
    "nvmlGpuDynamicPstatesInfo_t": ["flags", "utilization[0].bIsPresent", "utilization[7].decThreshold"],
    "nvmlViolationTime_t": ["referenceTime", "violationTime"],
    "nvmlClkMonStatus_t": ["bGlobalStatus", "clkMonListSize", "clkMonList[31].clkDomainFaultMask"],
    "nvmlValue_t": ["dVal", "uiVal", "ullVal", "sllVal"],
    "nvmlFieldValue_t": ["fieldId", "scopeId", "timestamp", "latencyUsec", "valueType", "nvmlReturn", "value"],
    "nvmlSample_t": ["timeStamp", "sampleValue"],
    "nvmlFBCStats_t": ["sessionsCount", "averageFPS", "averageLatency"],
    "nvmlExcludedDeviceInfo_t": ["pciInfo", "uuid"],
    "nvmlGpuInstancePlacement_t": ["start", "size"],
    "nvmlGpuInstanceProfileInfo_t": ["id", "isP2pSupported", "sliceCount", "instanceCount", "multiprocessorCount",
                                     "copyEngineCount", "decoderCount", "encoderCount", "jpegCount", "ofaCount",
                                     "memorySizeMB"],
    "nvmlGpuInstanceProfileInfo_v2_t": ["version", "id", "sliceCount", "memorySizeMB", "name"],
    "nvmlGpuInstanceInfo_t": ["device", "id", "profileId", "placement"],
    "nvmlComputeInstancePlacement_t": ["start", "size"],
    "nvmlComputeInstanceProfileInfo_t": ["id", "sliceCount", "instanceCount", "multiprocessorCount",
                                         "sharedCopyEngineCount", "sharedOfaCount"],
    "nvmlComputeInstanceProfileInfo_v2_t": ["version", "id", "sharedOfaCount", "name"],
    "nvmlComputeInstanceInfo_t": ["device", "gpuInstance", "id", "profileId", "placement"],
}

CONSTANTS = [
    *(f"NVML_ERROR_{n}" for n in (
        "UNINITIALIZED", "INVALID_ARGUMENT", "NOT_SUPPORTED", "NO_PERMISSION", "ALREADY_INITIALIZED", "NOT_FOUND",
        "INSUFFICIENT_SIZE", "INSUFFICIENT_POWER", "DRIVER_NOT_LOADED", "TIMEOUT", "IRQ_ISSUE",
        "LIBRARY_NOT_FOUND", "FUNCTION_NOT_FOUND", "CORRUPTED_INFOROM", "GPU_IS_LOST", "RESET_REQUIRED",
        "OPERATING_SYSTEM", "LIB_RM_VERSION_MISMATCH", "IN_USE", "MEMORY", "NO_DATA", "VGPU_ECC_NOT_SUPPORTED",
        "INSUFFICIENT_RESOURCES", "FREQ_NOT_SUPPORTED", "ARGUMENT_VERSION_MISMATCH", "UNKNOWN")),
    "NVML_TOPOLOGY_INTERNAL", "NVML_TOPOLOGY_SINGLE", "NVML_TOPOLOGY_MULTIPLE", "NVML_TOPOLOGY_HOSTBRIDGE",
    "NVML_TOPOLOGY_NODE", "NVML_TOPOLOGY_SYSTEM", "NVML_P2P_STATUS_OK", "NVML_P2P_STATUS_NOT_SUPPORTED",
    "NVML_P2P_STATUS_UNKNOWN", "NVML_P2P_CAPS_INDEX_READ", "NVML_P2P_CAPS_INDEX_PROP", "NVML_P2P_CAPS_INDEX_UNKNOWN",
    "NVML_NVLINK_MAX_LINKS", "NVML_NVLINK_CAP_P2P_SUPPORTED", "NVML_NVLINK_CAP_VALID", "NVML_NVLINK_DEVICE_TYPE_GPU",
    "NVML_NVLINK_DEVICE_TYPE_SWITCH", "NVML_NVLINK_DEVICE_TYPE_UNKNOWN", "NVML_MEMORY_LOCATION_L1_CACHE",
    "NVML_MEMORY_LOCATION_DEVICE_MEMORY", "NVML_MEMORY_LOCATION_REGISTER_FILE", "NVML_MEMORY_LOCATION_SRAM",
    "NVML_CLOCK_GRAPHICS", "NVML_CLOCK_SM", "NVML_CLOCK_MEM", "NVML_CLOCK_VIDEO", "NVML_CLOCK_ID_CURRENT",
    "NVML_CLOCK_ID_CUSTOMER_BOOST_MAX", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", "NVML_TEMPERATURE_THRESHOLD_GPU_MAX",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "NVML_PSTATE_UNKNOWN", "NVML_GPU_INSTANCE_PROFILE_COUNT",
    "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", "nvmlEventTypeXidCriticalError", "nvmlEventTypeSingleBitEccError",
    "nvmlEventTypeDoubleBitEccError", "nvmlEventTypeClock", "nvmlEventTypePState", "nvmlMemory_v2",
    "nvmlGpuInstanceProfileInfo_v2", "nvmlComputeInstanceProfileInfo_v2", "NVML_DEVICE_UUID_BUFFER_SIZE",
    "NVML_DEVICE_UUID_V2_BUFFER_SIZE", "NVML_DEVICE_NAME_BUFFER_SIZE", "NVML_DEVICE_NAME_V2_BUFFER_SIZE",
    "NVML_DEVICE_SERIAL_BUFFER_SIZE", "NVML_DEVICE_PART_NUMBER_BUFFER_SIZE", "NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE",
    "NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE", "NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE",
    "NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE", "NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE",
    *(f"NVML_FI_DEV_{n}" for n in (
        "ECC_CURRENT", "ECC_SBE_VOL_TOTAL", "ECC_DBE_AGG_CBU", "RETIRED_DBE", "NVLINK_CRC_FLIT_ERROR_COUNT_L0",
        "NVLINK_REPLAY_ERROR_COUNT_L6", "NVLINK_BANDWIDTH_C1_TOTAL", "PERF_POLICY_TOTAL_BASE_CLOCKS", "MEMORY_TEMP",
        "TOTAL_ENERGY_CONSUMPTION", "NVLINK_SPEED_MBPS_COMMON", "NVLINK_LINK_COUNT", "PCIE_REPLAY_COUNTER",
        "NVLINK_SPEED_MBPS_L6", "NVLINK_THROUGHPUT_RAW_RX", "REMAPPED_FAILURE", "NVSWITCH_CONNECTED_LINK_COUNT",
        "NVLINK_ECC_DATA_ERROR_COUNT_L11", "NVLINK_ECC_DATA_ERROR_COUNT_TOTAL", "NVLINK_GET_VERSION")),
]


def probe_source(header: str) -> str:
    lines = ["#include <stddef.h>", "#include <stdio.h>", f'#include "{header}"', "int main(void) {"]
    for struct, fields in STRUCTS.items():
        lines.append(f'    printf("%s size %zu\\n", "{struct}", sizeof({struct}));')
        lines += [f'    printf("%s.%s %zu\\n", "{struct}", "{f}", offsetof({struct}, {f}));' for f in fields]
    lines += [f'    printf("%s %lld\\n", "{c}", (long long)({c}));' for c in CONSTANTS]
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def run_probe(tmp: Path, header: Path, name: str) -> list[str]:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    src = tmp / f"{name}.c"
    src.write_text(probe_source(header.name))
    exe = tmp / name
    subprocess.run(["cc", "-std=gnu11", "-w", f"-I{header.parent}", str(src), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()


NEWER = {"NVML_GPU_INSTANCE_PROFILE_COUNT 18", "NVML_COMPUTE_INSTANCE_PROFILE_COUNT 9"}
"""The MIG profile counts of the newest header (CUDA 13: 0x12 and 0x9; Debian's is CUDA 11.8's 8 and 7): the real
535 nvidia-smi asks GPU instance profiles 8 and 9 and stops with "Invalid Argument" when a library answers
INVALID_ARGUMENT instead of NOT_SUPPORTED for them."""


def test_layouts_and_constants_match_debian_nvml_h(tmp_path: Path, real_nvidia: RealNvidia) -> None:
    real = run_probe(tmp_path, real_nvidia.header, "real")
    fake = run_probe(tmp_path, CSRC / "nvml_abi.h", "fake")
    assert len(real) == len(fake) > 250
    assert {line for line in fake if line not in real} == NEWER


FABRIC_PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include "nvml_abi.h"
int main(void) {
    printf("%zu %zu %zu %zu\n", sizeof(nvmlGpuFabricInfo_t), sizeof(nvmlGpuFabricInfo_v2_t),
           sizeof(nvmlGpuFabricInfo_v3_t), sizeof(nvmlPciInfoExt_v1_t));
    printf("%zu %zu %zu %zu\n", offsetof(nvmlGpuFabricInfo_t, state), offsetof(nvmlGpuFabricInfo_v2_t, healthMask),
           offsetof(nvmlGpuFabricInfo_v3_t, healthSummary), offsetof(nvmlEventData_t, gpuInstanceId));
    printf("%x %x %x\n", nvmlGpuFabricInfo_v2, nvmlGpuFabricInfo_v3, nvmlMemory_v2);
    return 0;
}
"""


def test_newer_structs_match_their_published_layouts(tmp_path: Path) -> None:
    """reference/nvml.md: fabric info 28/36/40 bytes, PCI info ext 64; version tags 0x02000024/0x03000028."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    src = tmp_path / "fabric.c"
    src.write_text(FABRIC_PROBE)
    subprocess.run(["cc", "-std=gnu11", f"-I{CSRC}", str(src), "-o", str(tmp_path / "fabric")], check=True)
    out = subprocess.run([str(tmp_path / "fabric")], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "28 36 40 64"
    assert out[1] == "24 32 36 24"
    assert out[2] == "2000024 3000028 2000028"


def _struct_bodies(text: str) -> dict[str, str]:
    """``typedef struct [tag] { body } name;`` -> {name: body} (top-level members only; nested braces removed)."""
    out: dict[str, str] = {}
    for m in re.finditer(r"typedef\s+struct\s*\w*\s*\{", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        name = re.match(r"\s*(\w+)\s*;", text[i:])
        if name:
            body = text[m.end():i - 1]
            while "{" in body:
                body = re.sub(r"\{[^{}]*\}", "", body)
            out[name.group(1)] = re.sub(r"/\*.*?\*/|//[^\n]*", "", body, flags=re.S)
    return out


def _members(body: str) -> list[str]:
    """The member names of a struct body: the identifier before each declaration's ``[``, ``:`` or ``;``."""
    names = []
    for decl in body.split(";"):
        m = re.search(r"(\w+)\s*(?:\[[^\]]*\]\s*)*(?::\s*\d+\s*)?$", decl.strip())
        if m and not decl.strip().startswith("#"):
            names.append(m.group(1))
    return names


def newest_probe(fake: str, real: str) -> tuple[str, int, int]:
    """A probe of every struct and struct-version word both headers declare: size, each member's offset (members
    both declare; bit-fields have no offset), version word. Returns (source, structs, versions)."""
    fake_bodies, real_bodies = _struct_bodies(fake), _struct_bodies(real)
    common = sorted(fake_bodies.keys() & real_bodies.keys())
    versions = sorted(set(re.findall(r"#define\s+(nvml\w+_v\d+)\s+NVML_STRUCT_VERSION", fake))
                      & set(re.findall(r"#define\s+(nvml\w+_v\d+)\s+NVML_STRUCT_VERSION", real)))
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include HEADER', "int main(void) {"]
    for struct in common:
        lines.append(f'    printf("{struct} size %zu\\n", sizeof({struct}));')
        real_members = set(_members(real_bodies[struct]))
        bitfields = set(re.findall(r"(\w+)\s*:\s*\d+", fake_bodies[struct]))
        for member in _members(fake_bodies[struct]):
            if member in real_members and member not in bitfields:
                lines.append(f'    printf("{struct}.{member} %zu\\n", offsetof({struct}, {member}));')
    lines += [f'    printf("{v} %#x\\n", (unsigned)({v}));' for v in versions]
    lines += [f'    printf("{e} %lld\\n", (long long)({e}));' for e in enumerators(fake, real)]
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n", len(common), len(versions)


def enumerators(fake: str, real: str) -> list[str]:
    """Enumerators of the fake header's enums that the real header also declares."""
    names: set[str] = set()
    for body in re.findall(r"typedef\s+enum\s*\w*\s*\{([^}]*)\}", fake):
        names.update(re.findall(r"^\s*(NVML_\w+)\s*(?:=|,|$)", body, flags=re.M))
    return sorted(n for n in names if re.search(rf"\b{n}\b\s*(?:=|,|\n)", real))


def test_layouts_match_the_newest_nvml_h(tmp_path: Path) -> None:
    """Every struct nvml_abi.h shares with nvidia-nvml-dev 13.4.92's nvml.h (platform info, C2C, NvLink info,
    TemperatureV, margin temperature, clock offsets, PDI, repair status, events v3, ...): same size, same
    member offsets and the same version words (so ARGUMENT_VERSION_MISMATCH is answered for the right ones)."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    header = references.newest_header()
    fake_h = CSRC / "nvml_abi.h"
    source, structs, versions = newest_probe(fake_h.read_text(), header.read_text())
    assert structs >= 85 and versions >= 30, (structs, versions)
    outputs = []
    for name, h in (("real", header), ("fake", fake_h)):
        src = tmp_path / f"newest_{name}.c"
        src.write_text(source)
        exe = tmp_path / f"newest_{name}"
        subprocess.run(["cc", "-std=gnu11", "-w", f'-DHEADER="{h}"', str(src), "-o", str(exe)], check=True)
        outputs.append(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines())
    real_out, fake_out = outputs
    assert len(real_out) == len(fake_out)
    assert [f"{f}  (nvml.h: {r})" for f, r in zip(fake_out, real_out, strict=True) if f != r] == []
    print(f"\n{structs} structs, their member offsets, {versions} version words and the enumerators: "
          f"{len(real_out)} values agree with nvml.h {references.NEWEST_HEADER}")
