"""Every getter that takes an enum, called with the first value past the enum and with its last valid value.

Issue #16, the fourth C round of 2026-11-27: five of six surviving mutants of the shim were an enum's COUNT slipping
through an off-by-one bound (``>`` for ``>=``) or answering the wrong error. This sweep closes that gap for every
exported getter with an enum argument, at once.

Oracle: nvml.h of nvidia-nvml-dev 13.4.92 (``references.newest_header()``, the newest header the project uses), never
the shim. Each row names the enum's first value past its last member (its ``*_COUNT`` where it has one, read from
nvml.h, not from nvidia-ml-py: the bindings installed in the venv, 12.535.161, predate some members, e.g. their
NVML_TEMPERATURE_THRESHOLD_COUNT is 7 where nvml.h 13.4's is 8), the enum's last valid member, the code nvml.h's
``@return`` list gives for an invalid value of that argument, and that wording. The past-the-end value must answer
that code; the last valid value must not answer INVALID_ARGUMENT (it may be NOT_SUPPORTED on a board without the
feature: that is a different, documented answer). The calls go through ctypes to the C symbols nvml.h declares, so
the binding's own argument checks cannot answer in the shim's place. ROWS are device getters (31 rows, 25 getters);
GI_ROWS are the two compute-instance profile getters, which need a GPU instance and so a node whose agent runs.

Getters with an enum argument that are left out, and why (nvml.h 13.4 documents no error for an invalid value):
nvmlDeviceGetClockInfo and nvmlDeviceGetMaxClockInfo (type: INVALID_ARGUMENT only "if device is invalid or clock is
NULL"), nvmlDeviceGetClock's clockId (only "clockType is invalid"), nvmlDeviceGetInforomVersion (object: only
"version is NULL"), nvmlDeviceGetSamples (type: only a NULL count or a zero count with a buffer),
nvmlDeviceGetThermalSettings (sensorIndex: only "device is invalid or pThermalSettings is NULL"), and the deprecated
nvmlDeviceGetApplicationsClock, nvmlDeviceGetDefaultApplicationsClock and nvmlDeviceGetViolationStatus, whose 13.4
entries are a bare ``@deprecated`` note with no ``@return`` list and no one replacement whose list would apply (the
deprecated nvmlDeviceGetTemperature names nvmlDeviceGetTemperatureV, so it is in, with that function's wording).
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType

import pytest

from testbed.api import Testbed
from tests.nvml import references
from tests.nvml.helpers import NodeSnap, snapshot_env
from tests.nvml.test_pynvml import handles

Nvml = Callable[..., NodeSnap]

# nvml.h 13.4, nvmlReturn_t.
INVALID_ARGUMENT, UNKNOWN = 2, 999


class _Temperature(ctypes.Structure):
    """nvmlTemperature_v1_t: version, sensorType (input), temperature (output)."""

    _fields_ = [("version", ctypes.c_uint), ("sensorType", ctypes.c_uint), ("temperature", ctypes.c_int)]


class _ClockOffset(ctypes.Structure):
    """nvmlClockOffset_v1_t: version, type and pstate (inputs), the current, min and max offsets (outputs)."""

    _fields_ = [("version", ctypes.c_uint), ("type", ctypes.c_uint), ("pstate", ctypes.c_uint),
                ("clockOffsetMHz", ctypes.c_int), ("minClockOffsetMHz", ctypes.c_int),
                ("maxClockOffsetMHz", ctypes.c_int)]


class _GpuInstanceProfileInfoV2(ctypes.Structure):
    """nvmlGpuInstanceProfileInfo_v2_t: version, ten counts, memorySizeMB, name[NVML_DEVICE_NAME_V2_BUFFER_SIZE]."""

    _fields_ = [("version", ctypes.c_uint), ("counts", ctypes.c_uint * 10), ("memorySizeMB", ctypes.c_ulonglong),
                ("name", ctypes.c_char * 96)]


class _ComputeInstanceProfileInfoV2(ctypes.Structure):
    """nvmlComputeInstanceProfileInfo_v2_t: version, nine counts, name[NVML_DEVICE_NAME_V2_BUFFER_SIZE]."""

    _fields_ = [("version", ctypes.c_uint), ("counts", ctypes.c_uint * 9), ("name", ctypes.c_char * 96)]


def _struct_version(struct: type[ctypes.Structure], version: int) -> int:
    """nvml.h's NVML_STRUCT_VERSION(data, ver): sizeof(the struct) | ver << 24."""
    return ctypes.sizeof(struct) | version << 24


# One argument of a call, given the device handles and the enum value under test.
Arg = Callable[[Sequence[object], int], object]


def dev(i: int = 0) -> Arg:
    """The i-th device handle."""
    return lambda hs, v: hs[i]


def const(k: int) -> Arg:
    """A fixed, valid value of another argument."""
    return lambda hs, v: ctypes.c_uint(k)


def value(hs: Sequence[object], v: int) -> object:
    """The enum value under test."""
    return ctypes.c_uint(v)


def out_uint(hs: Sequence[object], v: int) -> object:
    """An unsigned int output."""
    return ctypes.byref(ctypes.c_uint())


def out_ull(hs: Sequence[object], v: int) -> object:
    """An unsigned long long output."""
    return ctypes.byref(ctypes.c_ulonglong())


def out_buf(hs: Sequence[object], v: int) -> object:
    """A struct or array output, with room to spare."""
    return ctypes.create_string_buffer(4096)


def room(hs: Sequence[object], v: int) -> object:
    """An in/out count with room for 64 entries."""
    return ctypes.byref(ctypes.c_uint(64))


def query(hs: Sequence[object], v: int) -> object:
    """An in/out count of 0: "how many are there?"."""
    return ctypes.byref(ctypes.c_uint(0))


def null(hs: Sequence[object], v: int) -> object:
    """A NULL pointer (allowed where the count is 0)."""
    return None


def temperature_v(hs: Sequence[object], v: int) -> object:
    """nvmlTemperature_v1_t asking for sensor ``v``."""
    return ctypes.byref(_Temperature(version=_struct_version(_Temperature, 1), sensorType=v))


def clock_offset(field: str) -> Arg:
    """nvmlClockOffset_v1_t with ``field`` (type or pstate) ``v`` and the other one valid (graphics, P0)."""

    def make(hs: Sequence[object], v: int) -> object:
        info = _ClockOffset(version=_struct_version(_ClockOffset, 1), type=0, pstate=0)
        setattr(info, field, v)
        return ctypes.byref(info)

    return make


def gi_profile_v2(hs: Sequence[object], v: int) -> object:
    """An empty nvmlGpuInstanceProfileInfo_v2_t of the right version (the profile is the separate argument)."""
    return ctypes.byref(_GpuInstanceProfileInfoV2(version=_struct_version(_GpuInstanceProfileInfoV2, 2)))


def ci_profile_v2(hs: Sequence[object], v: int) -> object:
    """An empty nvmlComputeInstanceProfileInfo_v2_t of the right version."""
    return ctypes.byref(_ComputeInstanceProfileInfoV2(version=_struct_version(_ComputeInstanceProfileInfoV2, 2)))


@dataclass(frozen=True)
class Row:
    """One enum argument of one getter: nvml.h's first value past the enum, its last member, what it answers."""

    getter: str
    argument: str
    past: int
    last: int
    expected: int
    wording: str
    args: tuple[Arg, ...]
    profile: str = "dgx-h100"

    @property
    def id(self) -> str:
        return f"{self.getter}-{self.argument}"

    def call(self, lib: ctypes.CDLL, hs: Sequence[object], value: int) -> int:
        return int(getattr(lib, self.getter)(*(a(hs, value) for a in self.args)))


_CLOCK_TYPE = "if \\a device is invalid or \\a clockMHz is NULL or \\a clockType is invalid"
_ECC = "if \\a device, \\a errorType or \\a counterType is invalid, or \\a eccCounts is NULL"
_MEM_ERR = "if \\a device, \\a bitTyp,e \\a counterType or \\a locationType is invalid, or \\a count is NULL"
_CAUSE = "if \\a device is invalid, \\a pageCount is NULL, \\a cause is invalid, or \\a addresses is NULL"
_LINK_COUNTER = "if \\a device, \\a link, or \\a counter is invalid or \\a counterValue is NULL"
_UTIL_COUNTER = "counter: (0 or 1); INVALID_ARGUMENT if \\a device, \\a counter, or \\a link is invalid ..."
_UTIL_FREEZE = "counter: (0 or 1); INVALID_ARGUMENT if \\a device, \\a link, \\a counter, or \\a freeze is invalid"
_UTIL_RESET = "counter: (0 or 1); INVALID_ARGUMENT if \\a device, \\a link, or \\a counter is invalid"
_UTIL_CONTROL = "counter: (0 or 1); INVALID_ARGUMENT if \\a device, \\a counter, \\a link, or \\a control is invalid"
_PSTATE_UNKNOWN = "NVML_ERROR_UNKNOWN if \\a type or \\a pstate are invalid or any unexpected error"
_OFFSETS = "NVML_ERROR_INVALID_ARGUMENT If \\a device, \\a type or \\a pstate are invalid or both"
_SCOPE = "if \\a device is invalid, ...SetSize == 0, ...Set is NULL or s(c)ope is invalid"
_GI_PROFILE = ("If \\a device, \\a profile or \\a info are invalid (and: query profile values from 0 'until the API "
               "returns NVML_ERROR_INVALID_ARGUMENT')")

ROWS = (
    # nvmlClockType_t: GRAPHICS 0, SM 1, MEM 2, VIDEO 3, NVML_CLOCK_COUNT 4.
    Row("nvmlDeviceGetClock", "clockType", 4, 3, INVALID_ARGUMENT, _CLOCK_TYPE, (dev(), value, const(0), out_uint)),
    Row("nvmlDeviceGetMaxCustomerBoostClock", "clockType", 4, 3, INVALID_ARGUMENT, _CLOCK_TYPE,
        (dev(), value, out_uint)),
    # nvmlDeviceGetMinMaxClockOfPState documents an invalid type or pstate as NVML_ERROR_UNKNOWN (its
    # INVALID_ARGUMENT entry is for NULL pointers); nvmlPstates_t runs NVML_PSTATE_0 ... NVML_PSTATE_15 (15), then
    # the NVML_PSTATE_UNKNOWN marker (32), so 16 is the first value past the P-states.
    Row("nvmlDeviceGetMinMaxClockOfPState", "type", 4, 3, UNKNOWN, _PSTATE_UNKNOWN,
        (dev(), value, const(0), out_uint, out_uint)),
    Row("nvmlDeviceGetMinMaxClockOfPState", "pstate", 16, 15, UNKNOWN, _PSTATE_UNKNOWN,
        (dev(), const(0), value, out_uint, out_uint)),
    Row("nvmlDeviceGetClockOffsets", "type", 4, 3, INVALID_ARGUMENT, _OFFSETS, (dev(), clock_offset("type"))),
    Row("nvmlDeviceGetClockOffsets", "pstate", 16, 15, INVALID_ARGUMENT, _OFFSETS, (dev(), clock_offset("pstate"))),
    # nvmlTemperatureThresholds_t: SHUTDOWN 0 ... GPS_CURR 7, COUNT 8 (nvidia-ml-py 12.535's COUNT is 7).
    Row("nvmlDeviceGetTemperatureThreshold", "thresholdType", 8, 7, INVALID_ARGUMENT,
        "if \\a device is invalid, \\a thresholdType is invalid or \\a temp is NULL", (dev(), value, out_uint)),
    # nvmlTemperatureSensors_t: NVML_TEMPERATURE_GPU 0, NVML_TEMPERATURE_GPU_MAX 1, COUNT 2.
    Row("nvmlDeviceGetTemperatureV", "sensorType", 2, 1, INVALID_ARGUMENT,
        "if \\a device is invalid, \\a sensorType is invalid or \\a temp is NULL", (dev(), temperature_v)),
    # nvml.h 13.4 gives the deprecated nvmlDeviceGetTemperature no @return list of its own, only "@deprecated Use
    # nvmlDeviceGetTemperatureV instead": the same sensor argument, answered as its replacement documents.
    Row("nvmlDeviceGetTemperature", "sensorType", 2, 1, INVALID_ARGUMENT,
        "(via nvmlDeviceGetTemperatureV) if \\a device is invalid, \\a sensorType is invalid or \\a temp is NULL",
        (dev(), value, out_uint)),
    # nvmlPcieUtilCounter_t: TX_BYTES 0, RX_BYTES 1, NVML_PCIE_UTIL_COUNT 2.
    Row("nvmlDeviceGetPcieThroughput", "counter", 2, 1, INVALID_ARGUMENT,
        "if \\a device or \\a counter is invalid, or \\a value is NULL", (dev(), value, out_uint)),
    # nvmlRestrictedAPI_t: SET_APPLICATION_CLOCKS 0, SET_AUTO_BOOSTED_CLOCKS 1, NVML_RESTRICTED_API_COUNT 2.
    Row("nvmlDeviceGetAPIRestriction", "apiType", 2, 1, INVALID_ARGUMENT,
        "if \\a device is invalid, \\a apiType incorrect or \\a isRestricted is NULL", (dev(), value, out_uint)),
    # nvmlMemoryErrorType_t: CORRECTED 0, UNCORRECTED 1, COUNT 2; nvmlEccCounterType_t: VOLATILE 0, AGGREGATE 1,
    # COUNT 2; nvmlMemoryLocation_t: L1_CACHE 0 ... SRAM 7, NVML_MEMORY_LOCATION_COUNT 8.
    Row("nvmlDeviceGetTotalEccErrors", "errorType", 2, 1, INVALID_ARGUMENT, _ECC, (dev(), value, const(0), out_ull)),
    Row("nvmlDeviceGetTotalEccErrors", "counterType", 2, 1, INVALID_ARGUMENT, _ECC, (dev(), const(0), value, out_ull)),
    Row("nvmlDeviceGetDetailedEccErrors", "errorType", 2, 1, INVALID_ARGUMENT, _ECC, (dev(), value, const(0), out_buf)),
    Row("nvmlDeviceGetDetailedEccErrors", "counterType", 2, 1, INVALID_ARGUMENT, _ECC,
        (dev(), const(0), value, out_buf)),
    Row("nvmlDeviceGetMemoryErrorCounter", "errorType", 2, 1, INVALID_ARGUMENT, _MEM_ERR,
        (dev(), value, const(0), const(2), out_ull)),
    Row("nvmlDeviceGetMemoryErrorCounter", "counterType", 2, 1, INVALID_ARGUMENT, _MEM_ERR,
        (dev(), const(0), value, const(2), out_ull)),
    Row("nvmlDeviceGetMemoryErrorCounter", "locationType", 8, 7, INVALID_ARGUMENT, _MEM_ERR,
        (dev(), const(0), const(0), value, out_ull)),
    # nvmlPageRetirementCause_t: MULTIPLE_SINGLE_BIT 0, DOUBLE_BIT 1, COUNT 2. The T4 (Turing) retires pages.
    Row("nvmlDeviceGetRetiredPages", "cause", 2, 1, INVALID_ARGUMENT, _CAUSE,
        (dev(), value, room, out_buf), "t4-cloud"),
    Row("nvmlDeviceGetRetiredPages_v2", "cause", 2, 1, INVALID_ARGUMENT, _CAUSE, (dev(), value, room, out_buf, out_buf),
        "t4-cloud"),
    # nvmlEncoderType_t: H264 0, HEVC 1, AV1 2 (and the NVML_ENCODER_QUERY_UNKNOWN marker 0xFF): 3 is past AV1.
    Row("nvmlDeviceGetEncoderCapacity", "encoderQueryType", 3, 2, INVALID_ARGUMENT,
        "if \\a encoderCapacity is NULL, or \\a device or \\a encoderQueryType are invalid", (dev(), value, out_uint)),
    # nvmlNvLinkCapability_t: P2P_SUPPORTED 0 ... VALID 5, NVML_NVLINK_CAP_COUNT 6.
    Row("nvmlDeviceGetNvLinkCapability", "capability", 6, 5, INVALID_ARGUMENT,
        "if \\a device, \\a link, or \\a capability is invalid or \\a capResult is NULL",
        (dev(), const(0), value, out_uint)),
    # nvmlNvLinkErrorCounter_t: DL_REPLAY 0 ... DL_ECC_DATA 4, NVML_NVLINK_ERROR_COUNT 5.
    Row("nvmlDeviceGetNvLinkErrorCounter", "counter", 5, 4, INVALID_ARGUMENT, _LINK_COUNTER,
        (dev(), const(0), value, out_ull)),
    # The utilization counters are "0 or 1" (deprecated in 13.0, still documented).
    Row("nvmlDeviceGetNvLinkUtilizationCounter", "counter", 2, 1, INVALID_ARGUMENT, _UTIL_COUNTER,
        (dev(), const(0), value, out_ull, out_ull)),
    Row("nvmlDeviceGetNvLinkUtilizationControl", "counter", 2, 1, INVALID_ARGUMENT, _UTIL_CONTROL,
        (dev(), const(0), value, out_buf)),
    # The setters of the same counters: "counter ... (0 or 1)"; link 17 (an H100's last) is read by no other test
    # of this process, and freeze 0 unfreezes (nothing changes).
    Row("nvmlDeviceFreezeNvLinkUtilizationCounter", "counter", 2, 1, INVALID_ARGUMENT, _UTIL_FREEZE,
        (dev(), const(17), value, const(0))),
    Row("nvmlDeviceResetNvLinkUtilizationCounter", "counter", 2, 1, INVALID_ARGUMENT, _UTIL_RESET,
        (dev(), const(17), value)),
    # nvmlGpuP2PCapsIndex_t: READ 0, WRITE 1, NVLINK 2, ATOMICS 3, PCI 4, UNKNOWN 5 (its last member): 6 is past it.
    Row("nvmlDeviceGetP2PStatus", "p2pIndex", 6, 5, INVALID_ARGUMENT,
        "if \\a device1 or \\a device2 or \\a p2pIndex is invalid or \\a p2pStatus is NULL",
        (dev(0), dev(1), value, out_uint)),
    # nvmlGpuTopologyLevel_t: INTERNAL 0, SINGLE 10, MULTIPLE 20, HOSTBRIDGE 30, NODE 40, SYSTEM 50 (the last).
    Row("nvmlDeviceGetTopologyNearestGpus", "level", 51, 50, INVALID_ARGUMENT,
        "if \\a device, \\a level, or \\a count is invalid, or \\a deviceArray is NULL with a non-zero \\a count",
        (dev(), value, query, null)),
    # nvmlAffinityScope_t: NVML_AFFINITY_SCOPE_NODE 0, NVML_AFFINITY_SCOPE_SOCKET 1.
    Row("nvmlDeviceGetCpuAffinityWithinScope", "scope", 2, 1, INVALID_ARGUMENT, _SCOPE,
        (dev(), const(4), out_buf, value)),
    Row("nvmlDeviceGetMemoryAffinity", "scope", 2, 1, INVALID_ARGUMENT, _SCOPE, (dev(), const(4), out_buf, value)),
    # NVML_GPU_INSTANCE_PROFILE_1_SLICE 0x0 ... NVML_GPU_INSTANCE_PROFILE_COUNT 0x12 (nvml.h 13.4).
    Row("nvmlDeviceGetGpuInstanceProfileInfo", "profile", 0x12, 0x11, INVALID_ARGUMENT, _GI_PROFILE,
        (dev(), value, out_buf)),
    Row("nvmlDeviceGetGpuInstanceProfileInfoV", "profile", 0x12, 0x11, INVALID_ARGUMENT, _GI_PROFILE,
        (dev(), value, gi_profile_v2)),
)

# The compute-instance profiles of a GPU instance (the first argument is a GPU instance, the 3g.40gb one the
# gpu_instance fixture makes): NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE 0x0 ... 7_SLICE_NVL 0x8, COUNT 0x9;
# NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0, COUNT 0x1.
_CI_PROFILE = "If \\a gpuInstance, \\a profile, \\a engProfile or \\a info are invalid"
GI_ROWS = (
    Row("nvmlGpuInstanceGetComputeInstanceProfileInfo", "profile", 0x9, 0x8, INVALID_ARGUMENT, _CI_PROFILE,
        (dev(), value, const(0), out_buf)),
    Row("nvmlGpuInstanceGetComputeInstanceProfileInfo", "engProfile", 0x1, 0x0, INVALID_ARGUMENT, _CI_PROFILE,
        (dev(), const(0), value, out_buf)),
    Row("nvmlGpuInstanceGetComputeInstanceProfileInfoV", "profile", 0x9, 0x8, INVALID_ARGUMENT, _CI_PROFILE,
        (dev(), value, const(0), ci_profile_v2)),
    Row("nvmlGpuInstanceGetComputeInstanceProfileInfoV", "engProfile", 0x1, 0x0, INVALID_ARGUMENT, _CI_PROFILE,
        (dev(), const(0), value, ci_profile_v2)),
)


def test_every_row_names_a_getter_nvml_h_declares_and_its_count() -> None:
    """The table's getters and COUNT values are nvml.h 13.4's own (a typo in a row would test nothing)."""
    header = references.newest_header().read_text()
    for row in (*ROWS, *GI_ROWS):
        assert f" {row.getter}(" in header or f" {row.getter} (" in header, row.id
    for name, value in (("NVML_CLOCK_COUNT", 4), ("NVML_TEMPERATURE_THRESHOLD_COUNT", 8),
                        ("NVML_TEMPERATURE_COUNT", 2), ("NVML_PCIE_UTIL_COUNT", 2), ("NVML_RESTRICTED_API_COUNT", 2),
                        ("NVML_MEMORY_ERROR_TYPE_COUNT", 2), ("NVML_ECC_COUNTER_TYPE_COUNT", 2),
                        ("NVML_MEMORY_LOCATION_COUNT", 8), ("NVML_PAGE_RETIREMENT_CAUSE_COUNT", 2),
                        ("NVML_NVLINK_CAP_COUNT", 6), ("NVML_NVLINK_ERROR_COUNT", 5)):
        assert _enum_count(header, name) == value, name
    assert "NVML_GPU_INSTANCE_PROFILE_COUNT                 0x12" in header
    assert "NVML_P2P_CAPS_INDEX_UNKNOWN = 5," in header and "NVML_TOPOLOGY_SYSTEM             = 50" in header
    assert "NVML_ENCODER_QUERY_AV1      = 0x02" in header
    assert "NVML_COMPUTE_INSTANCE_PROFILE_COUNT         0x9" in header
    assert "NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT  0x1" in header


def _enum_count(header: str, name: str) -> int:
    """The value of the enum member ``name`` (a COUNT, one past its enum's last member), counted from nvml.h's text."""
    body = header[:header.index(f"    {name}")]
    body = body[body.rindex("{"):]
    values = [int(v, 0) for v in re.findall(r"^\s+NVML_\w+\s*=\s*(\w+)", body, re.M)]
    return max(values) + 1


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_an_enum_value_past_the_end_answers_what_nvml_h_documents(row: Row, nvml: Nvml,
                                                                   pynvml_module: ModuleType) -> None:
    """nvml.h: ``row.wording``. The first value past the enum answers ``row.expected``; its last member does not
    answer INVALID_ARGUMENT (nor the past-the-end answer)."""
    nvml(row.profile)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    hs = handles(pynvml_module)
    assert row.call(lib, hs, row.past) == row.expected, f"{row.id} = {row.past}: nvml.h says {row.wording!r}"
    answer = row.call(lib, hs, row.last)
    assert answer not in (INVALID_ARGUMENT, row.expected), f"{row.id} = {row.last} (the last member) answered {answer}"


@pytest.fixture
def gpu_instance(testbed_factory: Callable[..., Testbed], pynvml_module: ModuleType) -> Iterator[object]:
    """A 3g.40gb GPU instance (profile ID 9) on GPU 0 of a dgx-h100 node whose agent runs, MIG enabled."""
    n = pynvml_module
    tb = testbed_factory("dgx-h100")
    env = tb.node(tb.system.nodes[0].name).env
    with snapshot_env(env["FAKEHW_NVML_SNAPSHOT"], FAKEHW_AGENT_SOCKET=env["FAKEHW_AGENT_SOCKET"]):  # type: ignore[arg-type]
        n.nvmlInit()
        try:
            h = n.nvmlDeviceGetHandleByIndex(0)
            n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_ENABLE)
            yield n.nvmlDeviceCreateGpuInstance(h, 9)
        finally:
            n.nvmlShutdown()


def test_a_compute_profile_past_the_end_answers_what_nvml_h_documents(gpu_instance: object) -> None:
    """The compute-instance profile getters, as the rows above: nvml.h's wording is in each row of GI_ROWS."""
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    for row in GI_ROWS:
        assert row.call(lib, [gpu_instance], row.past) == row.expected, f"{row.id} = {row.past}: {row.wording!r}"
        answer = row.call(lib, [gpu_instance], row.last)
        assert answer not in (INVALID_ARGUMENT, row.expected), f"{row.id} = {row.last} answered {answer}"
