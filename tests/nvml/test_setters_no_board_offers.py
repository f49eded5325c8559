"""Setters no area test called (issue 16, coverage-directed): the asynchronous NVLink bandwidth-mode setter, a
Rubin-or-newer call, and the update of the workload power profiles, which no captured board offers.

Expected return codes come from nvml.h (13.4.92) and the real ``nvidia-smi -q -x`` captures
(../shared/reference/captures), never from the snapshot code under test.
"""

from __future__ import annotations

import ctypes
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.nvml.captures import capture_dir
from tests.nvml.helpers import NodeSnap, with_driver
from tests.nvml.test_more_board_getters import library, struct_version
from tests.nvml.test_pynvml import handles

Nvml = Callable[..., NodeSnap]

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
"""nvml.h's nvmlReturn_t values."""


class NvlinkSetBwModeAsync(ctypes.Structure):
    """nvml.h: nvmlNvlinkSetBwModeAsync_v1_t: ``bSetBest`` [in], ``bwMode`` [in], ``asyncPollTimeoutMs`` [out]."""

    _fields_ = [("bSetBest", ctypes.c_uint), ("bwMode", ctypes.c_uint), ("asyncPollTimeoutMs", ctypes.c_uint)]


class NvlinkSetBwMode(ctypes.Structure):
    """nvml.h: nvmlNvlinkSetBwMode_v1_t: ``unsigned int version``, ``unsigned int bSetBest``, ``unsigned char
    bwMode``."""

    _fields_ = [("version", ctypes.c_uint), ("bSetBest", ctypes.c_uint), ("bwMode", ctypes.c_ubyte)]


class WorkloadPowerProfileUpdateProfiles(ctypes.Structure):
    """nvml.h: nvmlWorkloadPowerProfileUpdateProfiles_v1_t: ``operation`` and ``updateProfilesMask`` (an
    nvmlMask255_t, NVML_255_MASK_NUM_ELEMS = 8 unsigned ints); no version word."""

    _fields_ = [("operation", ctypes.c_uint), ("mask", ctypes.c_uint * 8)]


def test_the_asynchronous_bandwidth_mode_setter_is_not_supported_before_rubin(
        nvml: Nvml, pynvml_module: ModuleType, tmp_path: Path) -> None:
    """nvml.h documents nvmlDeviceSetNvlinkBwModeAsync_v1 (a 615 addition) as ``%RUBIN_OR_NEWER%``, where the
    synchronous nvmlDeviceSetNvlinkBwMode is "For Blackwell or newer fully supported devices": on a GB200 under the
    615 driver the synchronous setter is the Blackwell feature (NO_PERMISSION for a user: "if user does not have
    permission to change Bandwidth mode"), and the asynchronous one answers NOT_SUPPORTED ("if this feature is not
    supported by the device") for every GPU, leaving its [out] poll timeout alone. A NULL struct is refused
    either way (INVALID_ARGUMENT, "if device or setBwModeAsync is invalid")."""
    n = pynvml_module
    nvml(str(with_driver(tmp_path, "gb200-nvl72", "615.10.01")))
    lib = library()
    for h in handles(n):
        sync = NvlinkSetBwMode(version=struct_version(ctypes.sizeof(NvlinkSetBwMode), 1), bSetBest=1)
        assert lib.nvmlDeviceSetNvlinkBwMode(h, ctypes.byref(sync)) == NVML_ERROR_NO_PERMISSION
        req = NvlinkSetBwModeAsync(bSetBest=1, bwMode=0, asyncPollTimeoutMs=0xA5A5A5A5)
        assert lib.nvmlDeviceSetNvlinkBwModeAsync_v1(h, ctypes.byref(req)) == NVML_ERROR_NOT_SUPPORTED
        assert req.asyncPollTimeoutMs == 0xA5A5A5A5
        assert lib.nvmlDeviceSetNvlinkBwModeAsync_v1(h, None) == NVML_ERROR_INVALID_ARGUMENT


def test_updating_workload_power_profiles_is_not_supported_where_the_capture_prints_na(
        nvml: Nvml, pynvml_module: ModuleType, tmp_path: Path) -> None:
    """qx-gb200.xml prints N/A for every GB200's requested and enforced power profiles: the board has no workload
    power profiles. nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1 (590+, "For Blackwell or newer") answers
    NOT_SUPPORTED on each GPU of the GB200 NVL72 under the 595 driver ("If the device does not support this
    feature"), and INVALID_ARGUMENT for a NULL struct ("pointer to struct is NULL")."""
    n = pynvml_module
    d = capture_dir()
    if d is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    printed = {g.findtext(f"power_profiles/power_profile_{k}_profiles")
               for g in ET.parse(d / "qx-gb200.xml").getroot().iter("gpu") for k in ("requested", "enforced")}
    assert printed == {"N/A"}
    nvml(str(with_driver(tmp_path, "gb200-nvl72", "595.91.07")))
    lib = library()
    for h in handles(n):
        update = WorkloadPowerProfileUpdateProfiles(operation=0)
        update.mask[0] = 1
        assert lib.nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1(h, ctypes.byref(update)) == \
            NVML_ERROR_NOT_SUPPORTED
        assert lib.nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1(h, None) == NVML_ERROR_INVALID_ARGUMENT
