"""More board getters no other test held to a value (issue 16): the infoROM black box flush, the NVLink bandwidth
modes, and the system-wide getters whose answers nvml.h and the captures fix.

Expected values come from the real ``nvidia-smi -q -x`` captures (../shared/reference/captures/qx-*.xml), the
structs, version words and return codes nvml.h (13.4.92) documents, and what nvidia-ml-py 13.615.71 passes,
never from the snapshot code under test.
"""

from __future__ import annotations

import ctypes
import xml.etree.ElementTree as ET
from collections.abc import Callable
from functools import partial
from types import ModuleType

import pytest

from tests.nvml.captures import capture_dir, number
from tests.nvml.helpers import NodeSnap
from tests.nvml.test_pynvml import error_of, handles

Nvml = Callable[..., NodeSnap]

NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
"""nvml.h: NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25 (nvidia-ml-py 12.535 predates the name)."""


def library() -> ctypes.CDLL:
    """The fake library pynvml is bound to, for calls its bindings do not make (NULL pointers, raw structs)."""
    return ctypes.CDLL("libnvidia-ml.so.1")


def struct_version(size: int, version: int) -> int:
    """nvml.h: ``#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(nvml ## data ## _v ## ver ## _t) |
    (ver << 24U))``."""
    return size | version << 24


# --------------------------------------------------------------------------------------------------- infoROM BBX


def real_bbx_flush_durations_us() -> list[int]:
    """Every ``<inforom_bbx_flush>/<latest_duration>`` a real GPU of the captures printed ("93088 us"), all GPUs of
    every capture (N/A where the board has no black box)."""
    d = capture_dir()
    if d is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    out = []
    for path in sorted(d.glob("qx-*.xml")):
        for gpu in ET.parse(path).getroot().iter("gpu"):
            text = gpu.findtext("inforom_bbx_flush/latest_duration")
            if text and text != "N/A":
                out.append(number(text))
    return out


def test_bbx_flush_duration_is_in_microseconds_like_the_real_boards(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetLastBBXFlushTime: ``durationUs``, "The duration (us) of the last BBX Flush". The 16 real
    GPUs that print a flush (8 H100, 4 GB200, 4 GB300 in the captures) took 23732-133594 us, and nvidia-smi prints
    the answer as "<n> us". So every GPU of the DGX H100 answers a duration inside the range the real H100s, GB200s
    and GB300s printed: a duration in milliseconds (93 for 93088 us) is not one."""
    n = pynvml_module
    real = real_bbx_flush_durations_us()
    assert len(real) == 16
    nvml("dgx-h100")
    for h in handles(n):
        _, duration = n.nvmlDeviceGetLastBBXFlushTime(h)
        assert min(real) <= duration <= max(real), duration


def test_bbx_flush_is_not_supported_where_the_capture_prints_na(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """qx-b200.xml prints N/A for every B200's <inforom_bbx_flush>: nvmlDeviceGetLastBBXFlushTime answers
    NOT_SUPPORTED (nvml.h: "if the device does not have an infoROM" black box object)."""
    n = pynvml_module
    nvml("dgx-b200")
    for h in handles(n):
        assert error_of(partial(n.nvmlDeviceGetLastBBXFlushTime, h)) == n.NVML_ERROR_NOT_SUPPORTED


# --------------------------------------------------------------------------------------------- NVLink bandwidth modes


class NvlinkGetBwMode(ctypes.Structure):
    """nvml.h: ``nvmlNvlinkGetBwMode_v1_t`` {version, bIsBest, bwMode (unsigned char)}."""

    _fields_ = [("version", ctypes.c_uint), ("bIsBest", ctypes.c_uint), ("bwMode", ctypes.c_uint8)]


class NvlinkSupportedBwModes(ctypes.Structure):
    """nvml.h: ``nvmlNvlinkSupportedBwModes_v1_t`` {version, bwModes[NVML_NVLINK_TOTAL_SUPPORTED_BW_MODES = 23],
    totalBwModes}."""

    _fields_ = [("version", ctypes.c_uint), ("bwModes", ctypes.c_uint8 * 23), ("totalBwModes", ctypes.c_uint8)]


GET_BW_MODE_V1 = struct_version(ctypes.sizeof(NvlinkGetBwMode), 1)
SUPPORTED_BW_MODES_V1 = struct_version(ctypes.sizeof(NvlinkSupportedBwModes), 1)


def test_bw_mode_struct_versions_are_the_headers() -> None:
    """The version words the getters must take: nvidia-ml-py 13.615.71 sets ``nvmlNvlinkGetBwMode_v1 = 0x100000c``
    (12 bytes: two unsigned ints and a byte, padded) and its supported-modes struct is 28 bytes (4 + 23 + 1)."""
    assert (GET_BW_MODE_V1, SUPPORTED_BW_MODES_V1) == (0x100000C, 0x100001C)


def test_nvlink_bw_mode_takes_its_own_struct_version(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetNvlinkBwMode: "For Blackwell or newer fully supported devices";
    ARGUMENT_VERSION_MISMATCH "if the version specified is not supported"; INVALID_ARGUMENT if getBwMode is NULL.
    On a DGX B200 (NVLink5 through NVSwitch) nvmlNvlinkGetBwMode_v1 answers, with bIsBest a boolean and the mode
    one the device lists in nvmlDeviceGetNvlinkSupportedBwModes (nvml.h: "Values can be found from
    nvmlDeviceGetNvlinkSupportedBwModes()"); the supported-modes struct's version word, the neighbouring getter's,
    is a mismatch here, and the other way round."""
    n = pynvml_module
    nvml("dgx-b200")
    lib = library()
    for h in handles(n):
        supported = NvlinkSupportedBwModes(SUPPORTED_BW_MODES_V1)
        assert lib.nvmlDeviceGetNvlinkSupportedBwModes(h, ctypes.byref(supported)) == n.NVML_SUCCESS
        modes = set(supported.bwModes[:supported.totalBwModes])
        assert 0 < supported.totalBwModes <= 23
        mode = NvlinkGetBwMode(GET_BW_MODE_V1)
        assert lib.nvmlDeviceGetNvlinkBwMode(h, ctypes.byref(mode)) == n.NVML_SUCCESS
        assert mode.bIsBest in (0, 1) and mode.bwMode in modes
        wrong = NvlinkGetBwMode(SUPPORTED_BW_MODES_V1)
        assert lib.nvmlDeviceGetNvlinkBwMode(h, ctypes.byref(wrong)) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        wrong_list = NvlinkSupportedBwModes(GET_BW_MODE_V1)
        assert lib.nvmlDeviceGetNvlinkSupportedBwModes(h, ctypes.byref(wrong_list)) == \
            NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        assert lib.nvmlDeviceGetNvlinkBwMode(h, None) == n.NVML_ERROR_INVALID_ARGUMENT


@pytest.mark.parametrize("profile", ["dgx-h100", "dgx-a100"])
def test_nvlink_bw_modes_are_not_supported_before_blackwell(nvml: Nvml, pynvml_module: ModuleType,
                                                            profile: str) -> None:
    """nvml.h puts "For Blackwell or newer fully supported devices" on nvmlDeviceGetNvlinkSupportedBwModes and
    nvmlDeviceGetNvlinkBwMode, and NOT_SUPPORTED "if this feature is not supported by the device": the Hopper
    GPUs of a DGX H100 and the Ampere ones of a DGX A100, NVSwitch-connected both, answer NOT_SUPPORTED to the
    right struct (the shim answered the H100s as if they were Blackwell)."""
    n = pynvml_module
    nvml(profile)
    lib = library()
    for h in handles(n):
        supported = NvlinkSupportedBwModes(SUPPORTED_BW_MODES_V1)
        assert lib.nvmlDeviceGetNvlinkSupportedBwModes(h, ctypes.byref(supported)) == n.NVML_ERROR_NOT_SUPPORTED
        mode = NvlinkGetBwMode(GET_BW_MODE_V1)
        assert lib.nvmlDeviceGetNvlinkBwMode(h, ctypes.byref(mode)) == n.NVML_ERROR_NOT_SUPPORTED
