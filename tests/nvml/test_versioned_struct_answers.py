"""Versioned-struct getters whose answering lines no test of the area ran (issue 16, coverage-directed): the
temperature by struct (nvmlDeviceGetTemperatureV), the unrepairable-memory flag, and the v3 compute instance
profile info.

Each test fills the struct with a value no answer can have before the call, so a getter that returns SUCCESS
without writing its field is caught. Expected values come from nvml.h (13.4.92: structs, version words, return
codes), the real ``nvidia-smi -q -x`` captures (../shared/reference/captures) and the MIG user guide's ``-lcip``
table, never from the snapshot code under test.
"""

from __future__ import annotations

import ctypes
import dataclasses
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from fakehw.nvml.snapfile import write_snapshot
from tests.nvml.captures import capture_dir
from tests.nvml.helpers import NodeSnap, with_driver
from tests.nvml.test_more_board_getters import A100_3G_LCIP, library, struct_version
from tests.nvml.test_pynvml import handles

Nvml = Callable[..., NodeSnap]

NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
"""nvml.h's nvmlReturn_t values."""

UNWRITTEN = 0x5A5A5A5A
"""A fill no field of these structs holds after a successful call (no GPU is at 1.5e9 degrees C)."""


class Temperature(ctypes.Structure):
    """nvml.h: nvmlTemperature_v1_t, ``{unsigned int version; nvmlTemperatureSensors_t sensorType; int
    temperature;}``, version ``NVML_STRUCT_VERSION(Temperature, 1)``."""

    _fields_ = [("version", ctypes.c_uint), ("sensorType", ctypes.c_uint), ("temperature", ctypes.c_int)]


class UnrepairableMemoryStatus(ctypes.Structure):
    """nvml.h: nvmlUnrepairableMemoryStatus_v1_t, ``{unsigned int bUnrepairableMemory;}`` (no version word)."""

    _fields_ = [("bUnrepairableMemory", ctypes.c_uint)]


class ComputeInstanceProfileInfoV3(ctypes.Structure):
    """nvml.h: nvmlComputeInstanceProfileInfo_v3_t: version, id, sliceCount, instanceCount, multiprocessorCount, the
    five shared engine counts (copy, decoder, encoder, JPEG, OFA), ``char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE]``
    (96) and ``unsigned int capabilities``."""

    _fields_ = [("version", ctypes.c_uint), ("id", ctypes.c_uint), ("sliceCount", ctypes.c_uint),
                ("instanceCount", ctypes.c_uint), ("multiprocessorCount", ctypes.c_uint),
                ("sharedCopyEngineCount", ctypes.c_uint), ("sharedDecoderCount", ctypes.c_uint),
                ("sharedEncoderCount", ctypes.c_uint), ("sharedJpegCount", ctypes.c_uint),
                ("sharedOfaCount", ctypes.c_uint), ("name", ctypes.c_char * 96), ("capabilities", ctypes.c_uint)]


def capture_gpu_temps(board: str) -> list[int]:
    """Every ``<temperature>/<gpu_temp>`` of ``qx-<board>.xml`` ("27 C"), in the capture's GPU order."""
    d = capture_dir()
    if d is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    return [int((g.findtext("temperature/gpu_temp") or "").split()[0])
            for g in ET.parse(d / f"qx-{board}.xml").getroot().iter("gpu")]


# ----------------------------------------------------------------------------------------------- temperature


def test_the_temperature_struct_reads_what_the_legacy_getter_reads(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlDeviceGetTemperatureV "Retrieves the current temperature readings (in degrees C)" into
    nvmlTemperature_v1_t for the sensorType given (NVML_TEMPERATURE_GPU = 0), the same reading as the deprecated
    nvmlDeviceGetTemperature(device, NVML_TEMPERATURE_GPU) it replaces. Every GPU of the DGX H100 answers SUCCESS
    with that reading, within 20 C of the range the real idle H100s printed (qx-h100.xml's gpu_temp), and keeps the
    version and sensor it was given. An invalid sensorType (NVML_TEMPERATURE_COUNT, 2 in 13.4.92, after
    NVML_TEMPERATURE_GPU_MAX = 1) is INVALID_ARGUMENT ("sensorType is invalid") and a wrong version
    ARGUMENT_VERSION_MISMATCH, the temperature left as it was."""
    n = pynvml_module
    real = capture_gpu_temps("h100")
    assert len(real) == 8
    nvml("dgx-h100")
    lib = library()
    version = struct_version(ctypes.sizeof(Temperature), 1)
    for h in handles(n):
        t = Temperature(version=version, sensorType=0, temperature=UNWRITTEN)
        assert lib.nvmlDeviceGetTemperatureV(h, ctypes.byref(t)) == NVML_SUCCESS
        assert t.temperature == n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        assert min(real) - 20 <= t.temperature <= max(real) + 20, t.temperature
        assert (t.version, t.sensorType) == (version, 0)
        bad = Temperature(version=version, sensorType=2, temperature=UNWRITTEN)
        assert lib.nvmlDeviceGetTemperatureV(h, ctypes.byref(bad)) == NVML_ERROR_INVALID_ARGUMENT
        assert bad.temperature == UNWRITTEN
        old = Temperature(version=version + (1 << 24), sensorType=0, temperature=UNWRITTEN)
        assert lib.nvmlDeviceGetTemperatureV(h, ctypes.byref(old)) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        assert old.temperature == UNWRITTEN


# ------------------------------------------------------------------------------------------ unrepairable memory


def test_the_unrepairable_memory_flag_is_no_on_a_healthy_gb200_and_yes_after_a_remap_failure(
        nvml: Nvml, pynvml_module: ModuleType, tmp_path: Path) -> None:
    """qx-gb200.xml prints ``<unrepairable_memory>No</unrepairable_memory>`` for each of its GB200s: on the
    GB200 NVL72 every GPU answers nvmlDeviceGetUnrepairableMemoryFlag_v1 SUCCESS with bUnrepairableMemory 0 (nvml.h:
    "For Hopper or newer"; the field is a boolean), overwriting what the struct held. A GPU whose row remapper has
    failed (nvidia-smi -q's "Remapping Failure Occurred: Yes": a row that could not be remapped) has memory no
    repair reaches: its flag is 1, and only its flag. The getter is a 590 addition (nvidia-smi 580 reads the flag by
    other means), so the board runs the 595.91.07 driver of the L40S and T4 captures."""
    n = pynvml_module
    d = capture_dir()
    if d is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    printed = [g.findtext("ecc_errors/unrepairable_memory")
               for g in ET.parse(d / "qx-gb200.xml").getroot().iter("gpu")]
    assert printed and set(printed) == {"No"}
    snap = nvml(str(with_driver(tmp_path, "gb200-nvl72", "595.91.07")))
    lib = library()

    def flags() -> list[int]:
        out = []
        for h in handles(n):
            s = UnrepairableMemoryStatus(bUnrepairableMemory=UNWRITTEN)
            assert lib.nvmlDeviceGetUnrepairableMemoryFlag_v1(h, ctypes.byref(s)) == NVML_SUCCESS
            out.append(s.bUnrepairableMemory)
        return out

    healthy = flags()
    assert healthy == [0] * len(healthy) and len(healthy) == len(printed)
    gpus = (dataclasses.replace(snap.snapshot.gpus[0], remap_failure=1), *snap.snapshot.gpus[1:])
    write_snapshot(snap.path, dataclasses.replace(snap.snapshot, gpus=gpus).to_bytes())
    assert flags() == [1] + [0] * (len(healthy) - 1)


# ------------------------------------------------------------------------------------ compute instance profiles


def test_the_v3_compute_instance_profile_info_matches_the_mig_user_guide_and_v2(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """dgx-a100's gpu7 boots with two 3g.40gb GPU instances. The MIG user guide's ``nvidia-smi mig -lcip`` of an A100
    3g GPU instance (A100_3G_LCIP: compute profile 0 1c.3g, 3 instances of 14 SMs; 1 2c.3g, one of 28; 2 3g, one
    of 42) with shared engines "DEC 2, ENC 0, OFA 0, CE 3, JPEG 0" for each, names ``MIG 1c.3g.40gb``,
    ``MIG 2c.3g.40gb`` and ``MIG 3g.40gb`` on the 80GB board (the guide's 40GB board prints ``.20gb``). The v3
    struct (nvml.h, 580+) answers exactly that, its id being the profile, and the v2 struct the same fields
    (v3 is v2 plus ``capabilities``). nvml.h: an invalid ``info->version`` is refused and a NULL info is
    INVALID_ARGUMENT."""
    n = pynvml_module
    nvml("dgx-a100")
    lib = library()
    gi = n.nvmlDeviceGetGpuInstanceById(handles(n)[7], 1)
    shared = n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    v3 = struct_version(ctypes.sizeof(ComputeInstanceProfileInfoV3), 3)
    names = {0: "MIG 1c.3g.40gb", 1: "MIG 2c.3g.40gb", 2: "MIG 3g.40gb"}
    for profile, (instances, sms, slices) in A100_3G_LCIP.items():
        info = ComputeInstanceProfileInfoV3(UNWRITTEN, *([UNWRITTEN] * 9), b"x" * 95, UNWRITTEN)
        info.version = v3
        assert lib.nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, profile, shared, ctypes.byref(info)) == \
            NVML_SUCCESS, profile
        assert (info.version, info.id, info.sliceCount, info.instanceCount, info.multiprocessorCount) == \
            (v3, profile, slices, instances, sms), profile
        assert (info.sharedDecoderCount, info.sharedEncoderCount, info.sharedOfaCount, info.sharedCopyEngineCount,
                info.sharedJpegCount) == (2, 0, 0, 3, 0), profile
        assert info.name.decode() == names[profile]
        old = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, profile, shared)
        assert (old.id, old.sliceCount, old.instanceCount, old.multiprocessorCount, old.sharedCopyEngineCount,
                old.sharedDecoderCount, old.sharedEncoderCount, old.sharedJpegCount, old.sharedOfaCount) == \
            (info.id, info.sliceCount, info.instanceCount, info.multiprocessorCount, info.sharedCopyEngineCount,
             info.sharedDecoderCount, info.sharedEncoderCount, info.sharedJpegCount, info.sharedOfaCount)
    wrong = ComputeInstanceProfileInfoV3(version=struct_version(ctypes.sizeof(ComputeInstanceProfileInfoV3), 4))
    assert lib.nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, 0, shared, ctypes.byref(wrong)) != NVML_SUCCESS
    assert lib.nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, 0, shared, None) == NVML_ERROR_INVALID_ARGUMENT


# ------------------------------------------------------------------------------------------------ NVLink info


class NvlinkFirmwareVersion(ctypes.Structure):
    """nvml.h: nvmlNvlinkFirmwareVersion_t, ``{unsigned char ucodeType; unsigned int major, minor, subMinor;}``."""

    _fields_ = [("ucodeType", ctypes.c_ubyte), ("major", ctypes.c_uint), ("minor", ctypes.c_uint),
                ("subMinor", ctypes.c_uint)]


class NvLinkInfoV2(ctypes.Structure):
    """nvml.h: nvmlNvLinkInfo_v2_t: ``version``, ``isNvleEnabled``, then nvmlNvlinkFirmwareInfo_t
    (``firmwareVersion[NVML_NVLINK_FIRMWARE_VERSION_LENGTH]``, 100, and ``numValidEntries``)."""

    _fields_ = [("version", ctypes.c_uint), ("isNvleEnabled", ctypes.c_uint),
                ("firmwareVersion", NvlinkFirmwareVersion * 100), ("numValidEntries", ctypes.c_uint)]


class NvLinkInfoV1(ctypes.Structure):
    """nvml.h: nvmlNvLinkInfo_v1_t, ``{unsigned int version; unsigned int isNvleEnabled;}``."""

    _fields_ = [("version", ctypes.c_uint), ("isNvleEnabled", ctypes.c_uint)]


def test_the_v2_nvlink_info_answers_encryption_off_and_a_firmware_count_its_array_holds(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvmlDeviceGetNvLinkInfo (580+; the DGX H100 runs the H100 capture's 580.105.08) with nvml.h's v2 struct:
    SUCCESS on every NVLink GPU, the version kept. NVLink encryption (NVLE) is a confidential-computing multi-GPU
    mode (nvml.h: NVML_CC_SYSTEM_MULTIGPU_NVLE); CC is off on the captured H100s (0 MiB of protected memory), so
    isNvleEnabled is 0, as the v1 struct says too. numValidEntries counts entries of firmwareVersion, an array of
    100 (NVML_NVLINK_FIRMWARE_VERSION_LENGTH): it is at most 100, whatever the struct held before."""
    n = pynvml_module
    d = capture_dir()
    if d is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    protected = {g.findtext("cc_protected_memory_usage/total")
                 for g in ET.parse(d / "qx-h100.xml").getroot().iter("gpu")}
    assert protected == {"0 MiB"}
    nvml("dgx-h100")
    lib = library()
    v2 = struct_version(ctypes.sizeof(NvLinkInfoV2), 2)
    v1 = struct_version(ctypes.sizeof(NvLinkInfoV1), 1)
    for h in handles(n):
        info = NvLinkInfoV2(version=v2, isNvleEnabled=UNWRITTEN, numValidEntries=UNWRITTEN)
        assert lib.nvmlDeviceGetNvLinkInfo(h, ctypes.byref(info)) == NVML_SUCCESS
        assert (info.version, info.isNvleEnabled) == (v2, 0)
        assert info.numValidEntries <= 100
        old = NvLinkInfoV1(version=v1, isNvleEnabled=UNWRITTEN)
        assert lib.nvmlDeviceGetNvLinkInfo(h, ctypes.byref(old)) == NVML_SUCCESS
        assert (old.version, old.isNvleEnabled) == (v1, 0)
