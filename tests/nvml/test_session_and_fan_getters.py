"""Encoder / FBC sessions, JPEG / OFA utilization, accounting and fan getters through nvidia-ml-py (issue 16).

No other test named these getters, so a mutant of any of them survived. Expected values come from the real
``nvidia-smi -q -x`` captures (``../shared/reference/captures/qx-*.xml``) and the return codes nvml.h (13.4.92)
documents for each function, never from the shim's own tables.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.nvml.captures import board_capture, number
from tests.nvml.helpers import (
    NodeSnap,
    enable_accounting_on_first_gpu,
    give_first_gpu_two_fans,
    snapshot_env,
    with_driver,
)
from tests.nvml.test_pynvml import error_of, handles

Nvml = Callable[..., NodeSnap]

H100_NODE = "dgx-h100"
"""The profile built from the real H100 board (``qx-h100.xml``)."""


def test_encoder_and_fbc_sessions_are_none_on_an_idle_board(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """qx-h100.xml: ``encoder_stats/session_count`` and ``fbc_stats/session_count`` are 0 on the idle board.
    nvml.h nvmlDeviceGetEncoderSessions / nvmlDeviceGetFBCSessions: called with ``*sessionCount = 0`` they
    answer NVML_SUCCESS with the number of active sessions in ``*sessionCount``; a NULL ``sessionCount`` is
    NVML_ERROR_INVALID_ARGUMENT."""
    n = pynvml_module
    h100 = board_capture("h100")
    sessions = {"encoder": number(h100["/encoder_stats/session_count"]),
                "fbc": number(h100["/fbc_stats/session_count"])}
    assert sessions == {"encoder": 0, "fbc": 0}
    nvml(H100_NODE)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    getters = {"encoder": lib.nvmlDeviceGetEncoderSessions, "fbc": lib.nvmlDeviceGetFBCSessions}
    for h in handles(n):
        assert n.nvmlDeviceGetEncoderSessions(h) == []
        assert n.nvmlDeviceGetFBCSessions(h) == []
        for kind, fn in getters.items():
            count = ctypes.c_uint(0)
            assert fn(h, ctypes.byref(count), None) == n.NVML_SUCCESS
            assert count.value == sessions[kind]
            assert fn(h, None, None) == n.NVML_ERROR_INVALID_ARGUMENT


def test_jpeg_and_ofa_utilization_match_the_captures(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """qx-h100.xml ``utilization/jpeg_util`` and ``utilization/ofa_util`` are "0 %" on the idle board; nvml.h
    nvmlDeviceGetJpgUtilization / nvmlDeviceGetOfaUtilization return the percentage and the sampling period,
    and a NULL ``utilization`` or ``samplingPeriodUs`` is NVML_ERROR_INVALID_ARGUMENT."""
    n = pynvml_module
    h100 = board_capture("h100")
    expected = {"jpeg": number(h100["/utilization/jpeg_util"]), "ofa": number(h100["/utilization/ofa_util"])}
    nvml(H100_NODE)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    for h in handles(n):
        jpeg, _ = n.nvmlDeviceGetJpgUtilization(h)
        ofa, _ = n.nvmlDeviceGetOfaUtilization(h)
        assert {"jpeg": jpeg, "ofa": ofa} == expected
        for fn in (lib.nvmlDeviceGetJpgUtilization, lib.nvmlDeviceGetOfaUtilization):
            value = ctypes.c_uint()
            assert fn(h, ctypes.byref(value), None) == n.NVML_ERROR_INVALID_ARGUMENT
            assert fn(h, None, ctypes.byref(value)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_fan_range_and_policy_are_not_supported_without_fans(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """Every capture prints ``fan_speed`` N/A (passively cooled SXM boards). nvml.h nvmlDeviceGetMinMaxFanSpeed:
    NVML_ERROR_NOT_SUPPORTED "if the device does not support this (doesn't have fans)"; nvmlDeviceGetFanControlPolicy_v2
    with a ``fan`` that "doesn't reference a fan that exists" is NVML_ERROR_INVALID_ARGUMENT or, as for every
    other fan getter on a fanless board, NVML_ERROR_NOT_SUPPORTED (never success)."""
    n = pynvml_module
    assert board_capture("h100")["/fan_speed"] == "N/A"
    nvml(H100_NODE)
    for h in handles(n):
        low, high = ctypes.c_uint(), ctypes.c_uint()
        assert error_of(partial(n.nvmlDeviceGetMinMaxFanSpeed, h, ctypes.byref(low), ctypes.byref(high))) \
            == n.NVML_ERROR_NOT_SUPPORTED
        policy = ctypes.c_uint()
        assert error_of(partial(n.nvmlDeviceGetFanControlPolicy_v2, h, 0, ctypes.byref(policy))) in (
            n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_INVALID_ARGUMENT)


def test_fan_range_and_policy_on_a_board_with_fans(pynvml_module: ModuleType,
                                                   node_snapshot: Callable[..., NodeSnap]) -> None:
    """A workstation card's record with two fans (none of the captured boards has one). nvml.h: the speeds of
    nvmlDeviceGetMinMaxFanSpeed are percentages (nvmlDeviceSetFanSpeed_v2 takes 0-100), and the real driver's
    are 30 and 100: nvidia-settings takes GPUTargetFanSpeed's valid range from exactly this call
    (NvCtrlAttributesNvml.c, NV_CTRL_THERMAL_COOLER_LEVEL: range.min/max = minSpeed/maxSpeed), and on 530 drivers
    it prints "The valid values for 'GPUTargetFanSpeed' are in the range 30 - 100 (inclusive)" for RTX 3060, 3090
    and 4090 boards (NVIDIA/open-gpu-kernel-modules#395), the floor 0 % zero-RPM cards had before 520 included
    (device.c's min 29 or 31 and max 99, mechanical mutants, passed the earlier min <= max <= 100);
    nvmlDeviceGetFanControlPolicy_v2 answers NVML_FAN_POLICY_TEMPERATURE_CONTINOUS_SW (0) for a zero-indexed fan:
    a fan is under the driver's temperature control until someone selects NVML_FAN_POLICY_MANUAL (1) with
    nvmlDeviceSetFanControlPolicy (nvidia-settings' GPUFanControlState likewise defaults to 0, the driver's own
    control), and this library refuses that call, so no fan of it can be manual (fresh C seed 10628's device.c:536
    answered MANUAL unnoticed). INVALID_ARGUMENT for a fan that does not exist or a NULL policy, and the min/max
    getter is INVALID_ARGUMENT for NULL pointers."""
    n = pynvml_module
    snap = node_snapshot("edge-pcie")
    give_first_gpu_two_fans(snap)
    with snapshot_env(snap.path):
        n.nvmlInit()
        try:
            h = handles(n)[0]
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            low, high = ctypes.c_uint(101), ctypes.c_uint(101)
            assert lib.nvmlDeviceGetMinMaxFanSpeed(h, ctypes.byref(low), ctypes.byref(high)) == n.NVML_SUCCESS
            assert (low.value, high.value) == (30, 100)
            assert lib.nvmlDeviceGetMinMaxFanSpeed(h, None, ctypes.byref(high)) == n.NVML_ERROR_INVALID_ARGUMENT
            assert lib.nvmlDeviceGetMinMaxFanSpeed(h, ctypes.byref(low), None) == n.NVML_ERROR_INVALID_ARGUMENT
            for fan in (0, 1):
                assert lib.nvmlDeviceSetFanControlPolicy(h, fan, n.NVML_FAN_POLICY_MANUAL) != n.NVML_SUCCESS
                policy = ctypes.c_uint(7)
                assert lib.nvmlDeviceGetFanControlPolicy_v2(h, fan, ctypes.byref(policy)) == n.NVML_SUCCESS
                assert policy.value == n.NVML_FAN_POLICY_TEMPERATURE_CONTINOUS_SW
            policy = ctypes.c_uint()
            assert lib.nvmlDeviceGetFanControlPolicy_v2(h, 2, ctypes.byref(policy)) == n.NVML_ERROR_INVALID_ARGUMENT
            assert lib.nvmlDeviceGetFanControlPolicy_v2(h, 0, None) == n.NVML_ERROR_INVALID_ARGUMENT
        finally:
            n.nvmlShutdown()


def test_accounting_queries_are_not_supported_while_accounting_is_disabled(nvml: Nvml,
                                                                          pynvml_module: ModuleType) -> None:
    """Every capture prints ``accounting_mode`` Disabled and an empty ``accounted_processes``. nvml.h
    nvmlDeviceGetAccountingPids and nvmlDeviceGetAccountingStats: NVML_ERROR_NOT_SUPPORTED "if device doesn't
    support this feature or accounting mode is disabled" (a shim answering success with no pids, or NOT_FOUND
    for the pid, was the defect this test was written for)."""
    n = pynvml_module
    h100 = board_capture("h100")
    assert (h100["/accounting_mode"], h100["/accounted_processes"]) == ("Disabled", "")
    nvml(H100_NODE)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    for h in handles(n):
        assert n.nvmlDeviceGetAccountingMode(h) == n.NVML_FEATURE_DISABLED
        assert error_of(partial(n.nvmlDeviceGetAccountingPids, h)) == n.NVML_ERROR_NOT_SUPPORTED
        count = ctypes.c_uint(0)
        assert lib.nvmlDeviceGetAccountingPids(h, ctypes.byref(count), None) == n.NVML_ERROR_NOT_SUPPORTED
        assert error_of(partial(n.nvmlDeviceGetAccountingStats, h, 1)) == n.NVML_ERROR_NOT_SUPPORTED


def test_the_v2_accounting_stats_are_not_supported_while_accounting_is_disabled(nvml: Nvml, pynvml_module: ModuleType,
                                                                              tmp_path: Path) -> None:
    """nvmlDeviceGetAccountingStats_v2 (exported from the 610 library on; nvml.h 13.4.92's nvmlAccountingStats_v2_t
    carries the pid inside the struct) is the v2 of nvmlDeviceGetAccountingStats, whose nvml.h entry says
    NVML_ERROR_NOT_SUPPORTED "if device doesn't support this feature or accounting mode is disabled" and
    INVALID_ARGUMENT "if ... stats are NULL". The H100 capture prints accounting_mode Disabled, so on a DGX H100 with
    a 615 driver the v2 query is NOT_SUPPORTED too, not the NOT_FOUND of a pid without a record."""
    n = pynvml_module
    assert board_capture("h100")["/accounting_mode"] == "Disabled"
    nvml(str(with_driver(tmp_path, H100_NODE, "615.10.01")))
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    stats = ctypes.create_string_buffer(128)
    for h in handles(n):
        assert n.nvmlDeviceGetAccountingMode(h) == n.NVML_FEATURE_DISABLED
        assert lib.nvmlDeviceGetAccountingStats_v2(h, stats) == n.NVML_ERROR_NOT_SUPPORTED
        assert lib.nvmlDeviceGetAccountingStats_v2(h, None) == n.NVML_ERROR_INVALID_ARGUMENT


def test_accounting_with_the_mode_enabled_and_no_process_accounted(pynvml_module: ModuleType,
                                                                   node_snapshot: Callable[..., NodeSnap]) -> None:
    """A record with accounting enabled and no process run since: nvml.h nvmlDeviceGetAccountingPids returns
    the accounted pids (none: NVML_SUCCESS with a count of 0), a NULL ``count`` is NVML_ERROR_INVALID_ARGUMENT,
    and nvmlDeviceGetAccountingStats for a pid with no record is NVML_ERROR_NOT_FOUND ("if process stats were
    not found")."""
    n = pynvml_module
    snap = node_snapshot(H100_NODE)
    with accounting_on_first_gpu(n, snap) as (enabled, disabled, lib):
        assert n.nvmlDeviceGetAccountingMode(enabled) == n.NVML_FEATURE_ENABLED
        assert n.nvmlDeviceGetAccountingPids(enabled) == []
        assert lib.nvmlDeviceGetAccountingPids(enabled, None, None) == n.NVML_ERROR_INVALID_ARGUMENT
        assert error_of(partial(n.nvmlDeviceGetAccountingStats, enabled, 1)) == n.NVML_ERROR_NOT_FOUND
        assert error_of(partial(n.nvmlDeviceGetAccountingPids, disabled)) == n.NVML_ERROR_NOT_SUPPORTED


def test_the_v2_accounting_stats_of_a_pid_never_accounted_are_not_found(pynvml_module: ModuleType,
                                                                       node_snapshot: Callable[..., NodeSnap],
                                                                       tmp_path: Path) -> None:
    """nvmlDeviceGetAccountingStats_v2 is nvmlDeviceGetAccountingStats with the pid inside its struct (615 driver),
    whose nvml.h entry answers NOT_FOUND "if process stats were not found" once accounting mode is enabled. A DGX
    H100 whose gpu0 has accounting enabled and no process run since: the v2 query for any pid is NOT_FOUND there
    and NOT_SUPPORTED on gpu1, whose mode stays disabled (the test above)."""
    n = pynvml_module
    snap = node_snapshot(str(with_driver(tmp_path, H100_NODE, "615.10.01")))
    with accounting_on_first_gpu(n, snap) as (enabled, disabled, lib):
        stats = ctypes.create_string_buffer(128)
        assert lib.nvmlDeviceGetAccountingStats_v2(enabled, stats) == n.NVML_ERROR_NOT_FOUND
        assert lib.nvmlDeviceGetAccountingStats_v2(disabled, stats) == n.NVML_ERROR_NOT_SUPPORTED


@contextmanager
def accounting_on_first_gpu(n: ModuleType, snap: NodeSnap) -> Iterator[tuple[Any, Any, ctypes.CDLL]]:
    """``snap`` with accounting enabled on gpu0 (every capture prints it Disabled, so the record is made here),
    initialized through pynvml ``n``: gpu0's and gpu1's handles, and the library for calls pynvml does not wrap."""
    enable_accounting_on_first_gpu(snap)
    with snapshot_env(snap.path):
        n.nvmlInit()
        try:
            enabled, disabled = handles(n)[:2]
            yield enabled, disabled, ctypes.CDLL("libnvidia-ml.so.1")
        finally:
            n.nvmlShutdown()


def _struct_version(size: int) -> int:
    """nvml.h NVML_STRUCT_VERSION(size, 1): the size in the low bits, the version in bits 24 and up."""
    return size | 1 << 24


def test_fan_rpm_and_cooler_info_are_not_supported_on_a_passively_cooled_board(nvml: Nvml,
                                                                             pynvml_module: ModuleType) -> None:
    """qx-h100.xml prints ``fan_speed`` N/A (an SXM board with no fan of its own; its driver_version is
    580.105.08, a branch that has both functions, 570+). nvml.h nvmlDeviceGetFanSpeedRPM and
    nvmlDeviceGetCoolerInfo are "for all discrete products with dedicated fans" and answer
    NVML_ERROR_NOT_SUPPORTED "if the device does not support this feature"; their nvmlFanSpeedInfo_v1_t /
    nvmlCoolerInfo_v1_t layouts are the header's (3 and 4 unsigned ints, version first)."""
    n = pynvml_module
    h100 = board_capture("h100")
    assert h100["/fan_speed"] == "N/A"
    nvml(H100_NODE)
    assert int(n.nvmlSystemGetDriverVersion().split(".")[0]) >= 570  # else FUNCTION_NOT_FOUND is right
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    for h in handles(n):
        rpm = (ctypes.c_uint * 3)(_struct_version(3 * 4), 0, 0)
        assert lib.nvmlDeviceGetFanSpeedRPM(h, rpm) == n.NVML_ERROR_NOT_SUPPORTED
        cooler = (ctypes.c_uint * 4)(_struct_version(4 * 4), 0, 0, 0)
        assert lib.nvmlDeviceGetCoolerInfo(h, cooler) == n.NVML_ERROR_NOT_SUPPORTED
