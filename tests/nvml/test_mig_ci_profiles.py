"""Compute instance profiles of every GPU instance profile of every MIG-capable built-in board, and GPU-instance calls
nvml.h gives an answer for that no other test makes (a NULL instance array, a GPU instance of a GPU that is lost).

Expected values, from outside the shim:

- nvml.h 13.4.92: ``NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE`` (1 -> 0, 2 -> 1, 3 -> 2, 4 -> 3, 7 -> 4, 8 -> 5,
  6 -> 6) and ``NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED``: "All the engines except multiprocessors would be
  shared", so every compute instance profile of a GPU instance has the GPU instance's copy engines, decoders,
  encoders, JPEG and OFA engines; nvmlGpuInstanceGetComputeInstanceProfileInfo(V): NOT_SUPPORTED "If profile isn't
  supported" (a compute instance larger than its GPU instance).
- NVIDIA's MIG user guide: a GPU instance of ``g`` compute slices holds ``g`` one-slice compute instances, and one
  compute instance of all ``g`` slices, which has all the GPU instance's SMs (the default compute instance
  ``nvidia-smi mig -cgi ... -C`` creates); its ``nvidia-smi mig -lcip`` example of an A100-SXM4-40GB's 3g.20gb
  GPU instance: 1c 14 SMs (3 instances), 2c 28 SMs (1), 3c 42 SMs (1).
- nvml.h's capability bits: NVML_COMPUTE_INSTANCE_PROFILE_CAPS_GFX (0x1) in a v3 compute instance profile's
  ``capabilities``; the boards' GPU instance profiles are none of them graphics ones (the published -lgip names a
  GFX-capable profile ``+gfx``: an RTX PRO 6000's ``MIG 1g.24gb+gfx``, NVIDIA's MIG user guide), so every compute
  instance profile's capabilities are 0 (seed 10630's surviving mig.c:498 set the bit).
- The published ``nvidia-smi mig -lgip`` of an H100 80GB and an A100 80GB (``migtools``), and of a B200
  (NVIDIA/mig-parted#187: 1g.23gb 18 SMs CE 2 DEC 1 JPEG 1 OFA 0, 1g.23gb+me the same with OFA 1, 1g.45gb 30 SMs,
  2g.45gb 36 SMs CE 4 DEC 2 JPEG 2): the full compute instance of each has that row's SMs and engines.

Every GPU instance profile gets a GPU instance: the node's first GPUs take [2g, the 2-slot 1g, 1g+me, 1g],
[4g, 3g] and [7g] (a board with fewer GPUs takes the rest in later snapshots). The first GPU holds a 1g (profile
index 0), so the snapshot's first compute instance profile record (first MIG GPU, first GPU instance profile,
1-slice compute instance: seed 10621's surviving mig.c:183 skipped it) is asked for.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

import fakehw
from tests.nvml.helpers import NodeSnap, dgx_h100_with_mig_gpu7, snapshot_env, write_node
from tests.nvml.migtools import A100_80GB_LGIP, H100_80GB_LGIP, LGIPP

CI_INDEX = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
"""nvml.h: NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE by slice count n."""
SHARED = 0
"""nvml.h: NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED."""
GI_PROFILE_COUNT = 0x12
"""nvml.h 13.4.92: NVML_GPU_INSTANCE_PROFILE_COUNT."""
NOT_SUPPORTED, INVALID_ARGUMENT, NO_PERMISSION, GPU_IS_LOST = 3, 2, 4, 15
"""nvml.h: NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NO_PERMISSION, NVML_ERROR_GPU_IS_LOST."""



class CiProfileInfoV3(ctypes.Structure):
    """nvml.h 13.4.92's nvmlComputeInstanceProfileInfo_v3_t (nvidia-ml-py has no v3)."""

    _fields_ = [("version", ctypes.c_uint), ("id", ctypes.c_uint), ("sliceCount", ctypes.c_uint),
                ("instanceCount", ctypes.c_uint), ("multiprocessorCount", ctypes.c_uint),
                ("sharedCopyEngineCount", ctypes.c_uint), ("sharedDecoderCount", ctypes.c_uint),
                ("sharedEncoderCount", ctypes.c_uint), ("sharedJpegCount", ctypes.c_uint),
                ("sharedOfaCount", ctypes.c_uint), ("name", ctypes.c_char * 96), ("capabilities", ctypes.c_uint)]


CI_PROFILE_INFO_V3 = ctypes.sizeof(CiProfileInfoV3) | 3 << 24
"""nvml.h: nvmlComputeInstanceProfileInfo_v3 = NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 3)."""

B200_LGIP = [
    # name, ID, instances total, memory GiB, SM, DEC, ENC, CE, JPEG, OFA: NVIDIA/mig-parted#187's `nvidia-smi mig -lgip`
    # of a B200, the rows that output shows.
    ("MIG 1g.23gb", 19, 7, "20.50", 18, 1, 0, 2, 1, 0),
    ("MIG 1g.23gb+me", 20, 1, "20.50", 18, 1, 0, 2, 1, 1),
    ("MIG 1g.45gb", 15, 4, "44.25", 30, 1, 0, 2, 1, 0),
    ("MIG 2g.45gb", 14, 3, "44.25", 36, 2, 0, 4, 2, 0),
]
PUBLISHED = {row[0]: row for row in (*H100_80GB_LGIP, *A100_80GB_LGIP, *B200_LGIP)}
"""Published GPU instance profile rows by name (the names are distinct across the three boards but for the
1g.10gb/2g.20gb/3g.40gb of A100 and H100, told apart by the board below)."""
BOARDS = {"dgx-a100": A100_80GB_LGIP, "dgx-h100": H100_80GB_LGIP, "dgx-b200": B200_LGIP, "hgx-h200": [],
          "gh200": [], "gb200-nvl72": [], "gb300-nvl72": []}
"""One built-in profile per MIG-capable GPU model, with its published -lgip rows (none: only nvml.h's and the
user guide's relations are checked)."""
GROUP = {"gb200-nvl72": "gb200-tray", "gb300-nvl72": "gb300-tray"}
"""The profile's group whose GPUs get the instances (default: the profile's name)."""


def layouts(names: list[str]) -> list[list[str]]:
    """Three GPUs' GPU instances that together use every profile once: [2g, 2-slot 1g, 1g+me, 1g], [4g, 3g], [7g]."""
    one_g = sorted((n for n in names if n.startswith("1g.") and "+" not in n), key=lambda n: int(n[3:-2]))
    by_slices = {int(n.split("g.")[0]): n for n in names if "+" not in n}
    me = next(n for n in names if n.endswith("+me"))
    return [[by_slices[2], one_g[1], me, one_g[0]], [by_slices[4], by_slices[3]], [by_slices[7]]]


def profile_file(tmp: Path, profile: str, gpus: dict[str, list[str]]) -> Path:
    """A profile that is ``profile`` with MIG on and ``gpus[name]``'s GPU instances on those GPUs."""
    group = GROUP.get(profile, profile)
    base = yaml.safe_load((Path(fakehw.__file__).parent / "profiles" / f"{profile}.yaml").read_text())
    key = "override" if "from" in next(g for g in base["groups"] if g["name"] == group) else "node"
    lines = [f"extends: {profile}", "groups:", f"  - name: {group}", f"    {key}:", "      gpus:"]
    for name, instances in gpus.items():
        lines.append(f"        - {{name: {name}, mig: {{enabled: true, instances: [{', '.join(instances)}]}}}}")
    path = tmp / f"{profile}-{len(list(tmp.iterdir()))}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def gpu_instances(n: ModuleType, dev: Any) -> list[tuple[int, Any, Any]]:
    """(NVML_GPU_INSTANCE_PROFILE_* index, its profile info, GPU instance handle) of every GPU instance of ``dev``."""
    out = []
    for index in range(GI_PROFILE_COUNT):
        try:
            info = n.nvmlDeviceGetGpuInstanceProfileInfo(dev, index)
        except n.NVMLError_NotSupported:
            continue
        array = (n.c_nvmlGpuInstance_t * 8)()
        count = ctypes.c_uint(0)
        n.nvmlDeviceGetGpuInstances(dev, info.id, array, ctypes.byref(count))
        out += [(index, info, array[k]) for k in range(count.value)]
    return out


def ci_info(n: ModuleType, gi: Any, index: int, version: int) -> tuple[int, Any]:
    """(return code, info) of nvmlGpuInstanceGetComputeInstanceProfileInfo (version 1) or its V form (2, 3)."""
    if version == 1:
        info: Any = n.c_nvmlComputeInstanceProfileInfo_t()
        fn = n._nvmlGetFunctionPointer("nvmlGpuInstanceGetComputeInstanceProfileInfo")
    else:
        info = n.c_nvmlComputeInstanceProfileInfo_v2_t() if version == 2 else CiProfileInfoV3()
        info.version = n.nvmlComputeInstanceProfileInfo_v2 if version == 2 else CI_PROFILE_INFO_V3
        fn = n._nvmlGetFunctionPointer("nvmlGpuInstanceGetComputeInstanceProfileInfoV")
    return fn(gi, ctypes.c_uint(index), ctypes.c_uint(SHARED), ctypes.byref(info)), info


def text(name: str | bytes) -> str:
    """A structure's name field (nvidia-ml-py's printable structures decode it already)."""
    return name.decode() if isinstance(name, bytes) else name


def engines(info: Any) -> tuple[int, int, int, int, int]:
    """(copy engines, decoders, encoders, JPEG, OFA) of a GPU or compute instance profile structure."""
    if hasattr(info, "sharedCopyEngineCount"):
        return (info.sharedCopyEngineCount, info.sharedDecoderCount, info.sharedEncoderCount, info.sharedJpegCount,
                info.sharedOfaCount)
    return info.copyEngineCount, info.decoderCount, info.encoderCount, info.jpegCount, info.ofaCount


def check_gi(n: ModuleType, board: str, gi_info: Any, gi: Any) -> list[str]:
    """What is wrong with the compute instance profiles of one GPU instance (empty: nothing)."""
    g = gi_info.sliceCount
    where = f"{board} GPU instance profile {gi_info.id} ({g} slices)"
    bad = []
    for slices, index in CI_INDEX.items():
        answers = [ci_info(n, gi, index, v) for v in (1, 2, 3)]
        codes = {r for r, _ in answers}
        if slices > g:
            if codes != {NOT_SUPPORTED}:
                bad.append(f"{where}: a {slices}-slice compute instance answers {codes}, not NOT_SUPPORTED")
            continue
        if slices in (1, g) and codes != {0}:
            bad.append(f"{where}: the {slices}-slice compute instance profile answers {codes}")
            continue
        if codes != {0}:
            continue  # a size between 1 and g that this GPU instance does not offer: nvml.h allows NOT_SUPPORTED
        for version, (_, info) in zip((1, 2, 3), answers, strict=True):
            got = (info.id, info.sliceCount, engines(info))
            if got != (index, slices, engines(gi_info)):
                bad.append(f"{where} v{version}: CI profile {index} is (id, slices, engines) {got}, not "
                           f"{(index, slices, engines(gi_info))} (engines are shared with the GPU instance)")
            if info.instanceCount * slices > g or info.instanceCount * info.multiprocessorCount > \
                    gi_info.multiprocessorCount:
                bad.append(f"{where} v{version}: {info.instanceCount} x {slices}-slice compute instances of "
                           f"{info.multiprocessorCount} SMs do not fit the GPU instance")
            if version == 3 and info.capabilities != 0:
                bad.append(f"{where}: CI profile {index}'s capabilities are {info.capabilities:#x}: not a +gfx "
                           "profile, so no NVML_COMPUTE_INSTANCE_PROFILE_CAPS_GFX")
            if slices == 1 and info.instanceCount != g:
                bad.append(f"{where} v{version}: {info.instanceCount} one-slice compute instances, not {g}")
            if slices == g and (info.instanceCount, info.multiprocessorCount) != (1, gi_info.multiprocessorCount):
                bad.append(f"{where} v{version}: the full compute instance is {info.instanceCount} of "
                           f"{info.multiprocessorCount} SMs, not 1 of the GPU instance's {gi_info.multiprocessorCount}")
    return bad


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_every_gpu_instance_profile_s_compute_instance_profiles(board: str, tmp_path: Path,
                                                                pynvml_module: ModuleType) -> None:
    n = pynvml_module
    probe = write_node(tmp_path / "probe.snapshot", board)
    gpus = [g for g in probe.node.gpus if g.sku.mig is not None]
    mig = gpus[0].sku.mig
    assert mig is not None
    plan = layouts([p.name for p in mig.profiles])
    rounds = [plan[k:k + len(gpus)] for k in range(0, len(plan), len(gpus))]
    bad: list[str] = []
    seen: set[int] = set()
    for part in rounds:
        path = profile_file(tmp_path, board, {gpus[k].name: instances for k, instances in enumerate(part)})
        snap = write_node(tmp_path / f"{path.stem}.snapshot", path)
        with snapshot_env(snap.path):
            n.nvmlInit()
            try:
                bad += check_round(n, board, len(part), seen)
            finally:
                n.nvmlShutdown()
    assert len(seen) == sum(len(p) for p in plan), f"{board}: GPU instances of profiles {sorted(seen)} only"
    assert bad == []


def check_round(n: ModuleType, board: str, count: int, seen: set[int]) -> list[str]:
    """check_gi on every GPU instance of the first ``count`` GPUs, and their full compute instances against the
    published -lgip rows; ``seen`` gets the GPU instance profile IDs met."""
    bad: list[str] = []
    for k in range(count):
        dev = n.nvmlDeviceGetHandleByIndex(k)
        for gi_index, gi_info, gi in gpu_instances(n, dev):
            seen.add(gi_info.id)
            bad += check_gi(n, board, gi_info, gi)
            full = ci_info(n, gi, CI_INDEX[gi_info.sliceCount], 2)[1]
            v2 = n.c_nvmlGpuInstanceProfileInfo_v2_t()
            v2.version = n.nvmlGpuInstanceProfileInfo_v2
            assert n._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")(
                dev, ctypes.c_uint(gi_index), ctypes.byref(v2)) == 0
            name = text(v2.name)
            assert "+gfx" not in name  # the premise of check_gi's capabilities check
            row = next((r for r in BOARDS[board] if r[1] == gi_info.id), None)
            if row is not None:
                assert name == row[0]
                sm, dec, enc, ce, jpeg, ofa = row[4:10]
                published = (sm, (ce, dec, enc, jpeg, ofa))
                if (full.multiprocessorCount, engines(full)) != published:
                    bad.append(f"{board} {name}: the full compute instance has {full.multiprocessorCount} SMs "
                               f"and engines {engines(full)}, not the published {published}")
            if text(full.name) != name:
                bad.append(f"{board}: the full compute instance of {name} is named {text(full.name)!r}")
    return bad


def test_the_user_guide_s_a100_3g_20gb_compute_instances(pynvml_module: ModuleType,
                                                         nvml: Callable[..., NodeSnap]) -> None:
    """The MIG user guide's ``nvidia-smi mig -lcip`` of an A100-SXM4-40GB 3g.20gb GPU instance: 1c.3g.20gb 14 SMs,
    3 instances; 2c.3g.20gb 28 SMs, 1; 3g.20gb 42 SMs, 1 (tests/nvml/profiles/a100-40gb.yaml: gpu7 runs two)."""
    n = pynvml_module
    nvml(str(Path(__file__).parent / "profiles" / "a100-40gb.yaml"))
    gis = gpu_instances(n, n.nvmlDeviceGetHandleByIndex(7))
    assert len(gis) == 2
    for _, _, gi in gis:
        got = []
        for index in (0, 1, 2):
            r, info = ci_info(n, gi, index, 1)
            assert r == 0
            got.append((info.multiprocessorCount, info.instanceCount))
        assert got == [(14, 3), (28, 1), (42, 1)]
        assert re.fullmatch(r"MIG 1c\.3g\.20gb", text(ci_info(n, gi, 0, 2)[1].name))


def gpu7_instance(n: ModuleType) -> tuple[Any, Any]:
    """dgx-a100's gpu7 (MIG on, two 3g.40gb GPU instances, profile ID 9) and its first GPU instance."""
    dev = n.nvmlDeviceGetHandleByIndex(7)
    gis = gpu_instances(n, dev)
    assert len(gis) == 2 and {info.id for _, info, _ in gis} == {9}
    return dev, gis[0][2]


def test_null_arguments_nvml_h_calls_invalid(pynvml_module: ModuleType, nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h: nvmlDeviceGetGpuInstances, INVALID_ARGUMENT "If device, profileId, gpuInstances or count are
    invalid" (a NULL array is not a size query there: "the buffer must be large enough to accommodate the
    instances"; seed 10621's surviving mig.c:406 answered UNKNOWN); nvmlDeviceSetMigMode, INVALID_ARGUMENT "If
    device, mode or activationStatus are invalid" (modes: NVML_DEVICE_MIG_DISABLE 0, NVML_DEVICE_MIG_ENABLE 1), both
    refused before any agent is asked."""
    n = pynvml_module
    nvml("dgx-a100")
    dev, _ = gpu7_instance(n)
    lib = n.nvmlLib
    count = ctypes.c_uint(8)
    array = (n.c_nvmlGpuInstance_t * 8)()
    assert lib.nvmlDeviceGetGpuInstances(dev, ctypes.c_uint(9), None, ctypes.byref(count)) == INVALID_ARGUMENT
    assert lib.nvmlDeviceGetGpuInstances(dev, ctypes.c_uint(9), array, None) == INVALID_ARGUMENT
    status = ctypes.c_int(-1)
    assert lib.nvmlDeviceSetMigMode(dev, ctypes.c_uint(2), ctypes.byref(status)) == INVALID_ARGUMENT
    assert lib.nvmlDeviceSetMigMode(dev, ctypes.c_uint(1), None) == INVALID_ARGUMENT


def test_a_compute_instance_id_the_gpu_instance_lacks_is_not_found(pynvml_module: ModuleType,
                                                                   nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h, nvmlGpuInstanceGetComputeInstanceById: NOT_FOUND "If the compute instance is not found". Each of
    gpu7's GPU instances has the one compute instance ``nvidia-smi mig -cgi ... -C`` creates, id 0 (the first id,
    ci0 in /proc/driver/nvidia-caps/mig-minors); ids 1-7 name none."""
    n = pynvml_module
    nvml("dgx-a100")
    _, gi = gpu7_instance(n)
    ci = n.c_nvmlComputeInstance_t()
    assert n.nvmlLib.nvmlGpuInstanceGetComputeInstanceById(gi, ctypes.c_uint(0), ctypes.byref(ci)) == 0
    for cid in range(1, 8):
        assert n.nvmlLib.nvmlGpuInstanceGetComputeInstanceById(gi, ctypes.c_uint(cid), ctypes.byref(ci)) == 6


def test_a_gpu_instance_of_a_lost_gpu_answers_gpu_is_lost(pynvml_module: ModuleType,
                                                          nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h defines NVML_ERROR_GPU_IS_LOST as "The GPU has fallen off the bus or has otherwise become
    inaccessible": a GPU instance is part of its GPU, so once gpu7 falls off the bus (Xid 79, as the agent injects
    it) a handle of one of its GPU instances taken before answers GPU_IS_LOST, not UNKNOWN (seed 10621's surviving
    mig.c:142) and not a stale success. nvmlDeviceGetHandleByUUID lists GPU_IS_LOST "if any GPU has fallen off the
    bus": asked for gpu7's UUID or one of its MIG devices', it answers that, not a handle and not NOT_FOUND."""
    n = pynvml_module
    snap = nvml("dgx-a100")
    dev, gi = gpu7_instance(n)
    assert n.nvmlGpuInstanceGetInfo(gi).profileId == 9
    uuids = [n.nvmlDeviceGetUUID(dev), n.nvmlDeviceGetUUID(n.nvmlDeviceGetMigDeviceHandleByIndex(dev, 0))]
    write_node(snap.path, "dgx-a100", faults=[{"kind": "xid", "device": "gpu7", "code": 79}], generation=2)
    for uuid in uuids:
        found = n.c_nvmlDevice_t()
        assert n.nvmlLib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(found)) == GPU_IS_LOST, uuid
    info = n.c_nvmlGpuInstanceInfo_t()
    assert n.nvmlLib.nvmlGpuInstanceGetInfo(gi, ctypes.byref(info)) == GPU_IS_LOST
    ci = n.c_nvmlComputeInstanceProfileInfo_t()
    assert n.nvmlLib.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, SHARED, ctypes.byref(ci)) == GPU_IS_LOST


def test_a_hidden_gpu_s_mig_devices_are_not_found(tmp_path: Path, pynvml_module: ModuleType) -> None:
    """A process that sees only gpu0 (FAKEHW_VISIBLE_DEVICES, as a container given one GPU) does not reach the MIG
    devices of dgx-a100's gpu7: nvml.h, nvmlDeviceGetHandleByUUID, NOT_FOUND "If uuid does not match a valid device
    on the system" (it takes a MIG device's UUID too). The same UUIDs are found when gpu7 is visible."""
    n = pynvml_module
    snap = write_node(tmp_path / "nvml.snapshot", "dgx-a100")
    with snapshot_env(snap.path, FAKEHW_VISIBLE_DEVICES=None):
        n.nvmlInit()
        try:
            gpu7 = n.nvmlDeviceGetHandleByIndex(7)
            uuids = [n.nvmlDeviceGetUUID(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu7, k)) for k in range(2)]
            assert all(u.startswith("MIG-") for u in uuids)
            assert [n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByUUID(u)) for u in uuids] == uuids
        finally:
            n.nvmlShutdown()
    with snapshot_env(snap.path, FAKEHW_VISIBLE_DEVICES="0"):
        n.nvmlInit()
        try:
            assert n.nvmlDeviceGetCount() == 1
            handle = n.c_nvmlDevice_t()
            for uuid in uuids:
                assert n.nvmlLib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(handle)) == 6
        finally:
            n.nvmlShutdown()


def test_gpu_and_compute_instance_calls_refuse_what_nvml_h_calls_invalid(pynvml_module: ModuleType,
                                                                         nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h's INVALID_ARGUMENT / NOT_FOUND / NOT_SUPPORTED rows of the GPU- and compute-instance calls, on
    dgx-a100's gpu7 (two 3g.40gb GPU instances, each with compute instance 0 of profile 3_SLICE = 2):
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT (9) and engine profile 1 (= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT) are
    invalid profiles; a NULL output or count and a handle the library never gave are invalid arguments;
    nvmlDeviceGetMigDeviceHandleByIndex: INVALID_ARGUMENT for an index past nvmlDeviceGetMaxMigDeviceCount (7 on an
    A100: the MIG user guide's seven instances) and NOT_FOUND "if no valid MIG device was found at index" below it;
    nvmlDeviceGetDeviceHandleFromMigDeviceHandle: INVALID_ARGUMENT "if migDevice ... is invalid" for a GPU's own
    handle; nvmlDeviceGetGpuInstanceId on a GPU handle: NOT_SUPPORTED "if this query is not supported by the
    device"."""
    n = pynvml_module
    nvml("dgx-a100")
    dev, gi = gpu7_instance(n)
    lib = n.nvmlLib
    u = ctypes.c_uint
    count = u(8)
    cis = (n.c_nvmlComputeInstance_t * 8)()
    placements = (n.c_nvmlComputeInstancePlacement_t * 8)()
    bogus = ctypes.create_string_buffer(256)  # no handle of the library's
    ci = n.c_nvmlComputeInstance_t()
    assert lib.nvmlGpuInstanceGetComputeInstanceById(gi, u(0), ctypes.byref(ci)) == 0
    ci_info_v2 = n.c_nvmlComputeInstanceInfo_t()
    profile = n.c_nvmlComputeInstanceProfileInfo_t()
    gi_info = n.c_nvmlGpuInstanceInfo_t()
    answers = {
        "GetComputeInstances NULL array": lib.nvmlGpuInstanceGetComputeInstances(gi, u(2), None, ctypes.byref(count)),
        "GetComputeInstances NULL count": lib.nvmlGpuInstanceGetComputeInstances(gi, u(2), cis, None),
        "GetComputeInstances profile 9": lib.nvmlGpuInstanceGetComputeInstances(gi, u(9), cis, ctypes.byref(count)),
        "GetComputeInstanceById NULL": lib.nvmlGpuInstanceGetComputeInstanceById(gi, u(0), None),
        "RemainingCapacity NULL": lib.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, u(2), None),
        "RemainingCapacity profile 9": lib.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
            gi, u(9), ctypes.byref(count)),
        "PossiblePlacements NULL count": lib.nvmlGpuInstanceGetComputeInstancePossiblePlacements(
            gi, u(2), placements, None),
        "PossiblePlacements profile 9": lib.nvmlGpuInstanceGetComputeInstancePossiblePlacements(
            gi, u(9), placements, ctypes.byref(count)),
        "ProfileInfo engine profile 1": lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, u(0), u(1), ctypes.byref(profile)),
        "ProfileInfo profile 9": lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, u(9), u(SHARED), ctypes.byref(profile)),
        "ProfileInfo NULL": lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, u(0), u(SHARED), None),
        "GpuInstanceGetInfo NULL": lib.nvmlGpuInstanceGetInfo(gi, None),
        "GpuInstanceGetInfo foreign handle": lib.nvmlGpuInstanceGetInfo(bogus, ctypes.byref(gi_info)),
        "ComputeInstanceGetInfo_v2 NULL": lib.nvmlComputeInstanceGetInfo_v2(ci, None),
        "ComputeInstanceGetInfo_v2 foreign handle": lib.nvmlComputeInstanceGetInfo_v2(
            bogus, ctypes.byref(ci_info_v2)),
        "ComputeInstanceGetInfo NULL": lib.nvmlComputeInstanceGetInfo(ci, None),
        "ComputeInstanceGetInfo foreign handle": lib.nvmlComputeInstanceGetInfo(bogus, ctypes.byref(ci_info_v2)),
        "DeviceHandleFromMigDeviceHandle of a GPU": lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
            dev, ctypes.byref(n.c_nvmlDevice_t())),
    }
    assert {k: v for k, v in answers.items() if v != INVALID_ARGUMENT} == {}
    maximum = n.nvmlDeviceGetMaxMigDeviceCount(dev)
    assert maximum == 7
    handle = n.c_nvmlDevice_t()
    by_index = [lib.nvmlDeviceGetMigDeviceHandleByIndex(dev, u(k), ctypes.byref(handle)) for k in range(maximum + 2)]
    assert by_index == [0, 0] + [6] * (maximum - 2) + [INVALID_ARGUMENT] * 2
    ids = ctypes.c_uint(77)
    assert lib.nvmlDeviceGetGpuInstanceId(dev, ctypes.byref(ids)) == NOT_SUPPORTED
    assert lib.nvmlDeviceGetComputeInstanceId(dev, ctypes.byref(ids)) == NOT_SUPPORTED


def test_a_compute_instance_with_placement_without_an_agent(pynvml_module: ModuleType,
                                                            nvml: Callable[..., NodeSnap]) -> None:
    """nvmlGpuInstanceCreateComputeInstanceWithPlacement on gpu7's 3g.40gb GPU instance, in a process with no
    agent socket: a NULL placement is INVALID_ARGUMENT (nvml.h lists the placement among the invalid arguments of
    the GPU-instance form, nvmlDeviceCreateGpuInstanceWithPlacement; a NULL one places nothing); a one-slice compute
    instance at slice 1 (one of the placements nvmlGpuInstanceGetComputeInstancePossiblePlacements lists) is
    NO_PERMISSION, "If user doesn't have permission to perform the operation" (docs/nvml.md: no agent socket is a
    process without the right to change MIG, like a non-root user); nothing is created. Destroying either instance
    is NO_PERMISSION too, a handle the library never gave INVALID_ARGUMENT."""
    n = pynvml_module
    nvml("dgx-a100", env={"FAKEHW_AGENT_SOCKET": None})
    _, gi = gpu7_instance(n)
    lib = n.nvmlLib
    ci = n.c_nvmlComputeInstance_t()
    listed = (n.c_nvmlComputeInstancePlacement_t * 8)()
    count = ctypes.c_uint(8)
    assert lib.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, 0, listed, ctypes.byref(count)) == 0
    assert (1, 1) in [(listed[k].start, listed[k].size) for k in range(count.value)]
    assert lib.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, 0, None, ctypes.byref(ci)) == INVALID_ARGUMENT
    placement = n.c_nvmlComputeInstancePlacement_t()
    placement.start, placement.size = 1, 1
    assert lib.nvmlGpuInstanceCreateComputeInstanceWithPlacement(
        gi, 0, ctypes.byref(placement), ctypes.byref(ci)) == NO_PERMISSION
    array = (n.c_nvmlComputeInstance_t * 8)()
    assert lib.nvmlGpuInstanceGetComputeInstances(gi, 0, array, ctypes.byref(count)) == 0 and count.value == 0
    # Destroying: nvml.h, INVALID_ARGUMENT "If computeInstance is invalid" / "If gpuInstance is invalid" (a handle
    # the library never gave), else NO_PERMISSION without an agent; the instances are still there after.
    bogus = ctypes.create_string_buffer(256)
    assert lib.nvmlComputeInstanceDestroy(bogus) == INVALID_ARGUMENT
    assert lib.nvmlGpuInstanceDestroy(bogus) == INVALID_ARGUMENT
    assert lib.nvmlGpuInstanceGetComputeInstanceById(gi, 0, ctypes.byref(ci)) == 0
    assert lib.nvmlComputeInstanceDestroy(ci) == NO_PERMISSION
    assert lib.nvmlGpuInstanceDestroy(gi) == NO_PERMISSION
    assert lib.nvmlGpuInstanceGetComputeInstanceById(gi, 0, ctypes.byref(ci)) == 0


@pytest.mark.parametrize("function", ["nvmlDeviceGetGpuInstancePossiblePlacements",
                                      "nvmlDeviceGetGpuInstancePossiblePlacements_v2"])
def test_gpu_instance_placements_whether_mig_is_on_or_not(function: str, pynvml_module: ModuleType,
                                                          nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h: the placements call "only returns all the possible placements for the given profile regardless of
    whether MIG is enabled or not"; placements "Can be NULL to discover number of allowed placements". On a
    dgx-h100 (MIG off on every GPU) both forms give every profile's placements as the MIG user guide's
    ``nvidia-smi mig -lgipp`` lists them (migtools.LGIPP), and the count alone for a NULL array; an array of exactly
    that count is "large enough to accommodate the placements"."""
    n = pynvml_module
    nvml("dgx-h100")
    dev = n.nvmlDeviceGetHandleByIndex(0)
    fn = getattr(n.nvmlLib, function)
    got = {}
    for profile_id in LGIPP:
        count = ctypes.c_uint(0)
        assert fn(dev, ctypes.c_uint(profile_id), None, ctypes.byref(count)) == 0
        array = (n.c_nvmlGpuInstancePlacement_t * 8)()
        listed = ctypes.c_uint(count.value)  # exactly large enough
        assert fn(dev, ctypes.c_uint(profile_id), array, ctypes.byref(listed)) == 0
        assert listed.value == count.value
        sizes = {array[k].size for k in range(listed.value)}
        assert len(sizes) == 1
        starts = ",".join(str(array[k].start) for k in range(listed.value))
        got[profile_id] = f"{{{starts}}}:{sizes.pop()}"
    assert got == LGIPP


@pytest.mark.parametrize("function", ["nvmlDeviceGetGpuInstancePossiblePlacements",
                                      "nvmlDeviceGetGpuInstancePossiblePlacements_v2"])
def test_gpu_instance_placements_of_a_mig_device_are_refused(function: str, pynvml_module: ModuleType,
                                                              nvml: Callable[..., NodeSnap], tmp_path: Path) -> None:
    """GPU instances are made on a GPU, never inside a MIG device (the MIG user guide: a GPU instance is a slice of
    the GPU; a MIG device is a compute instance within one): nvml.h's INVALID_ARGUMENT "if device ... is invalid"
    for a MIG device handle, from both forms of the placements call alike, while the MIG device's parent GPU
    answers (fresh seed 10626's mig.c:400: the deprecated form let MIG handles through)."""
    n = pynvml_module
    nvml(dgx_h100_with_mig_gpu7(tmp_path))
    gpu7 = n.nvmlDeviceGetHandleByIndex(7)
    mig = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu7, 0)
    fn = getattr(n.nvmlLib, function)
    profile = n.NVML_GPU_INSTANCE_PROFILE_1_SLICE
    count = ctypes.c_uint(0)
    assert fn(gpu7, ctypes.c_uint(profile), None, ctypes.byref(count)) == n.NVML_SUCCESS and count.value > 0
    count = ctypes.c_uint(0)
    assert fn(mig, ctypes.c_uint(profile), None, ctypes.byref(count)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_mig_handles_outlive_a_new_generation_of_the_snapshot(pynvml_module: ModuleType,
                                                             nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h: a compute instance handle becomes invalid when the instance is destroyed ("the compute instance
    handle would become invalid. The compute instance must be recreated"), and GPU instance IDs "remain valid until
    the GPU instance is destroyed": handles of instances that still exist stay valid. A process holds gpu7's MIG
    device and compute instance handles while the node's snapshot is re-rendered as generation 2 (gpu0 runs hot;
    gpu7's instances unchanged): both still name the same instance (seed 10631's surviving mig.c:44, a registry
    lookup that never matched, gave every instance a new slot each generation)."""
    n = pynvml_module
    snap = nvml("dgx-a100")
    dev, gi = gpu7_instance(n)
    migs = [n.nvmlDeviceGetMigDeviceHandleByIndex(dev, k) for k in range(2)]
    uuids = [n.nvmlDeviceGetUUID(m) for m in migs]
    ci = n.c_nvmlComputeInstance_t()
    assert n.nvmlLib.nvmlGpuInstanceGetComputeInstanceById(gi, 0, ctypes.byref(ci)) == 0
    before = n.c_nvmlComputeInstanceInfo_t()
    assert n.nvmlLib.nvmlComputeInstanceGetInfo_v2(ci, ctypes.byref(before)) == 0
    write_node(snap.path, "dgx-a100", faults=[{"kind": "thermal", "device": "gpu0", "temperature_c": 91}],
               generation=2)
    assert n.nvmlDeviceGetTemperature(n.nvmlDeviceGetHandleByIndex(0), 0) == 91  # generation 2 is read
    assert [n.nvmlDeviceGetUUID(m) for m in migs] == uuids
    after = n.c_nvmlComputeInstanceInfo_t()
    assert n.nvmlLib.nvmlComputeInstanceGetInfo_v2(ci, ctypes.byref(after)) == 0
    assert (after.id, after.profileId, n.nvmlGpuInstanceGetInfo(after.gpuInstance).id) == \
        (before.id, before.profileId, n.nvmlGpuInstanceGetInfo(before.gpuInstance).id)


def device_gi_calls(n: ModuleType, profile_id: int, gi_id: int) -> dict[str, Callable[[Any], int]]:
    """Each device-level GPU instance call nvml.h 13.4.92 declares (but the placements, above), as a function of
    the device handle to its return code; the other arguments valid for dgx-h100's gpu7 with two 3g.40gb
    instances (GPU instance profile index 0 = NVML_GPU_INSTANCE_PROFILE_1_SLICE, ``profile_id`` of 3g.40gb, GPU
    instance ``gi_id``)."""
    lib = n.nvmlLib
    out = ctypes.c_uint(0)

    def info_v(fn: str, version: int, key: int) -> Callable[[Any], int]:
        def call(dev: Any) -> int:
            info = n.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.version = version
            return int(getattr(lib, fn)(dev, ctypes.c_uint(key), ctypes.byref(info)))
        return call

    def instances(dev: Any) -> int:
        array = (n.c_nvmlGpuInstance_t * 8)()
        return int(lib.nvmlDeviceGetGpuInstances(dev, ctypes.c_uint(profile_id), array, ctypes.byref(out)))

    v2 = n.nvmlGpuInstanceProfileInfo_v2
    return {
        "nvmlDeviceGetGpuInstanceProfileInfo": lambda dev: int(lib.nvmlDeviceGetGpuInstanceProfileInfo(
            dev, ctypes.c_uint(0), ctypes.byref(n.c_nvmlGpuInstanceProfileInfo_t()))),
        "nvmlDeviceGetGpuInstanceProfileInfoV": info_v("nvmlDeviceGetGpuInstanceProfileInfoV", v2, 0),
        "nvmlDeviceGetGpuInstanceProfileInfoByIdV": info_v("nvmlDeviceGetGpuInstanceProfileInfoByIdV", v2,
                                                           profile_id),
        "nvmlDeviceGetGpuInstanceRemainingCapacity": lambda dev: int(lib.nvmlDeviceGetGpuInstanceRemainingCapacity(
            dev, ctypes.c_uint(profile_id), ctypes.byref(out))),
        "nvmlDeviceGetGpuInstances": instances,
        "nvmlDeviceGetGpuInstanceById": lambda dev: int(lib.nvmlDeviceGetGpuInstanceById(
            dev, ctypes.c_uint(gi_id), ctypes.byref(n.c_nvmlGpuInstance_t()))),
    }


def test_gpu_instance_calls_refuse_a_mig_device_and_a_gpu_with_mig_off(pynvml_module: ModuleType,
                                                                        nvml: Callable[..., NodeSnap],
                                                                        tmp_path: Path) -> None:
    """Every device-level GPU instance call of nvml.h 13.4.92, on dgx-h100 with gpu7's two 3g.40gb instances:
    gpu7 answers SUCCESS; a MIG device of gpu7 is INVALID_ARGUMENT ("If device ... [is] invalid": a GPU instance is a
    slice of a GPU, never of a MIG device, the MIG user guide; as the placements test above; fresh seed 10692's
    mig.c:349, the by-id profile call taking MIG handles, survived); gpu0, whose MIG mode is off, is NOT_SUPPORTED
    (each of these calls' doc: "If device doesn't have MIG mode enabled"; fresh seed 10692's mig.c:407,
    GetGpuInstances listing none with MIG off, survived); the v1 profile call's doc says NOT_SUPPORTED "If device
    doesn't support MIG", which gpu0 does, so its answer there is not judged."""
    n = pynvml_module
    nvml(dgx_h100_with_mig_gpu7(tmp_path))
    gpu7, gpu0 = n.nvmlDeviceGetHandleByIndex(7), n.nvmlDeviceGetHandleByIndex(0)
    mig = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu7, 0)
    three = next(row for row in H100_80GB_LGIP if row[0] == "MIG 3g.40gb")[1]
    gi_id = n.nvmlDeviceGetGpuInstanceId(mig)
    calls = device_gi_calls(n, three, gi_id)
    assert {name: call(gpu7) for name, call in calls.items()} == dict.fromkeys(calls, n.NVML_SUCCESS)
    assert {name: call(mig) for name, call in calls.items()} == dict.fromkeys(calls, INVALID_ARGUMENT)
    mig_mode_enabled = [name for name in calls if name != "nvmlDeviceGetGpuInstanceProfileInfo"]
    assert {name: calls[name](gpu0) for name in mig_mode_enabled} == dict.fromkeys(mig_mode_enabled, NOT_SUPPORTED)


def address(handle: Any) -> int:
    """The address a ctypes handle (a pointer to an opaque struct) holds."""
    value = ctypes.cast(handle, ctypes.c_void_p).value
    assert value is not None
    return value


def test_addresses_next_to_the_instance_handles_the_library_gave_are_invalid(pynvml_module: ModuleType,
                                                                             nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h: nvmlGpuInstanceGetInfo, INVALID_ARGUMENT "If gpuInstance or info are invalid";
    nvmlComputeInstanceGetInfo_v2 "If computeInstance or info are invalid"; nvmlGpuInstanceDestroy and
    nvmlComputeInstanceDestroy "If gpuInstance / computeInstance is invalid". An instance handle is valid only as the
    library handed it out. On dgx-a100 (gpu7: two 3g.40gb GPU instances, a compute instance each), with no agent,
    every address from 64 bytes below the lowest GPU (compute) instance handle the library gave to 4 KiB above the
    highest, byte by byte, that is not one of those handles (below the first, misaligned, unused, past the end of
    wherever the handles live, and whatever follows) answers INVALID_ARGUMENT from each call, and so does every GPU
    and MIG device handle given as an instance handle; the handles themselves answer SUCCESS (info) and
    NO_PERMISSION (a change with no agent socket, docs/nvml.md). The earlier foreign-handle checks used one buffer
    of the caller's, far from the handles: a range check one slot too wide (mig.c:120 and :126, `>=` as `>`, `||`
    as `&&`) took the address just past the handles for an instance."""
    n = pynvml_module
    nvml("dgx-a100", env={"FAKEHW_AGENT_SOCKET": None})
    lib = n.nvmlLib
    dev, _ = gpu7_instance(n)
    gis = [gi for _, _, gi in gpu_instances(n, dev)]
    cis = []
    for gi in gis:
        ci = n.c_nvmlComputeInstance_t()
        assert lib.nvmlGpuInstanceGetComputeInstanceById(gi, 0, ctypes.byref(ci)) == 0
        cis.append(ci)
    devices = [n.nvmlDeviceGetHandleByIndex(k) for k in range(n.nvmlDeviceGetCount())]
    devices += [n.nvmlDeviceGetMigDeviceHandleByIndex(dev, k) for k in range(2)]
    others = [address(d) for d in devices]
    gi_info = n.c_nvmlGpuInstanceInfo_t()
    ci_info_v2 = n.c_nvmlComputeInstanceInfo_t()
    Call = Callable[[ctypes.c_void_p], int]
    kinds: dict[str, tuple[list[int], dict[str, tuple[Call, int]]]] = {
        "GPU instance": ([address(g) for g in gis], {
            "nvmlGpuInstanceGetInfo": (lambda h: int(lib.nvmlGpuInstanceGetInfo(h, ctypes.byref(gi_info))), 0),
            "nvmlGpuInstanceDestroy": (lambda h: int(lib.nvmlGpuInstanceDestroy(h)), NO_PERMISSION)}),
        "compute instance": ([address(c) for c in cis], {
            "nvmlComputeInstanceGetInfo_v2": (lambda h: int(lib.nvmlComputeInstanceGetInfo_v2(
                h, ctypes.byref(ci_info_v2))), 0),
            "nvmlComputeInstanceDestroy": (lambda h: int(lib.nvmlComputeInstanceDestroy(h)), NO_PERMISSION)}),
    }
    for kind, (handles, calls) in kinds.items():
        given = set(handles)
        assert len(given) == 2, f"two {kind} handles"
        window = range(min(given) - 64, max(given) + 4096)
        foreign = [a for a in window if a not in given] + others
        for name, (call, valid) in calls.items():
            assert [call(ctypes.c_void_p(a)) for a in sorted(given)] == [valid, valid], name
            wrong = {hex(a): code for a in foreign if (code := call(ctypes.c_void_p(a))) != INVALID_ARGUMENT}
            assert wrong == {}, f"{name}: addresses that are no {kind} handle of the library's"


def test_a_placement_of_another_size_than_the_profile_s_is_invalid(pynvml_module: ModuleType,
                                                                    nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h: nvmlDeviceCreateGpuInstanceWithPlacement, INVALID_ARGUMENT "If device, profile, profileId, placement or
    gpuInstance are invalid"; the placement is one of nvmlDeviceGetGpuInstancePossiblePlacements_v2's, whose size is
    the "Number of memory slices occupied" (nvmlGpuInstancePlacement_t): the MIG user guide's ``nvidia-smi mig
    -lgipp`` gives 1g.10gb (profile ID 19) ``{0,...,6}:1`` and 3g.40gb (9) ``{0,4}:4``. A compute instance's
    placement size is its "Number of compute slices occupied" (nvmlComputeInstancePlacement_t), the slice count
    nvml.h names its profile by (NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0, _3_SLICE = 2); nvml.h lists no
    placement row for nvmlGpuInstanceCreateComputeInstanceWithPlacement, so the GPU instance form's code is taken
    (as the NULL placement above). On dgx-a100's gpu7 with no agent socket, a placement of the profile's size is
    NO_PERMISSION (docs/nvml.md), one of any other size (0, one less, one more, another profile's) INVALID_ARGUMENT:
    judged before anyone is asked, as nothing could make it valid. Before this test only placements with a wrong
    start were refused (by the agent), so a size check that never refused (mig.c:753 and :823, `p != NULL` as `==`)
    or refused with UNKNOWN survived."""
    n = pynvml_module
    nvml("dgx-a100", env={"FAKEHW_AGENT_SOCKET": None})
    lib = n.nvmlLib
    dev, gi = gpu7_instance(n)
    new_gi = n.c_nvmlGpuInstance_t()
    new_ci = n.c_nvmlComputeInstance_t()

    def gi_code(profile_id: int, start: int, size: int) -> int:
        placement = n.c_nvmlGpuInstancePlacement_t(start, size)
        return int(lib.nvmlDeviceCreateGpuInstanceWithPlacement(dev, profile_id, ctypes.byref(placement),
                                                                ctypes.byref(new_gi)))

    def ci_code(profile: int, start: int, size: int) -> int:
        placement = n.c_nvmlComputeInstancePlacement_t(start, size)
        return int(lib.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, profile, ctypes.byref(placement),
                                                                         ctypes.byref(new_ci)))

    assert {size: gi_code(19, 6, size) for size in (0, 1, 2, 4)} == \
        {0: INVALID_ARGUMENT, 1: NO_PERMISSION, 2: INVALID_ARGUMENT, 4: INVALID_ARGUMENT}
    assert {size: gi_code(9, 4, size) for size in (1, 3, 4, 5, 8)} == \
        {1: INVALID_ARGUMENT, 3: INVALID_ARGUMENT, 4: NO_PERMISSION, 5: INVALID_ARGUMENT, 8: INVALID_ARGUMENT}
    assert {size: ci_code(CI_INDEX[1], 1, size) for size in (0, 1, 2, 3)} == \
        {0: INVALID_ARGUMENT, 1: NO_PERMISSION, 2: INVALID_ARGUMENT, 3: INVALID_ARGUMENT}
    assert {size: ci_code(CI_INDEX[3], 0, size) for size in (1, 2, 3, 4)} == \
        {1: INVALID_ARGUMENT, 2: INVALID_ARGUMENT, 3: NO_PERMISSION, 4: INVALID_ARGUMENT}
    assert len(gpu_instances(n, dev)) == 2


def test_placements_never_go_past_the_caller_s_count(pynvml_module: ModuleType,
                                                     nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h, both placement calls: ``placements`` "If non-NULL must be large enough to accommodate the placements
    supported by the profile", ``count`` "Returns number of allowed placemenets for the profile". On dgx-a100's gpu7
    (A100: the MIG user guide's ``-lgipp``, migtools.LGIPP; its 3g.40gb GPU instance's one-slice compute instances at
    0, 1, 2 and the three-slice one at 0, nvml.h's NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE / _3_SLICE), each call gets
    an array one entry longer than the placements, filled with a marker: told the exact count it fills that many and
    leaves the extra entry alone; told one less, or 0, it writes nothing at all, answers the number of placements in
    ``count``, and refuses: INSUFFICIENT_SIZE ("An input argument is not large enough", nvmlReturn_t) or the
    function's own INVALID_ARGUMENT "If ... count [is] invalid", never SUCCESS nor UNKNOWN ("An internal driver
    error occurred": the caller's count is not one). No test gave a count too small before (mig.c:378 `<` as `>`
    wrote past it; the answer UNKNOWN survived), nor looked past the count (:382 `<=` wrote one entry more)."""
    n = pynvml_module
    nvml("dgx-a100")
    lib = n.nvmlLib
    dev, gi = gpu7_instance(n)
    insufficient_size = 7  # nvml.h: NVML_ERROR_INSUFFICIENT_SIZE
    marker = (0xDEAD, 0xBEEF)

    def call(kind: str, profile: int, array: Any, count: ctypes.c_uint) -> int:
        if kind == "GPU instance":
            return int(lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev, profile, array, ctypes.byref(count)))
        return int(lib.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, profile, array, ctypes.byref(count)))

    expected: dict[tuple[str, int], list[tuple[int, int]]] = {
        ("compute instance", CI_INDEX[1]): [(0, 1), (1, 1), (2, 1)],
        ("compute instance", CI_INDEX[3]): [(0, 3)],
    }
    for profile_id, listed in LGIPP.items():
        if profile_id in {row[1] for row in A100_80GB_LGIP}:
            starts, size = listed.strip("{").split("}:")
            expected["GPU instance", profile_id] = [(int(s), int(size)) for s in starts.split(",")]
    assert len(expected) == 6
    bad = []
    for (kind, profile), places in expected.items():
        for told in sorted({len(places), len(places) - 1, 0}):
            array = (n.c_nvmlGpuInstancePlacement_t * (len(places) + 1))(*[marker] * (len(places) + 1))
            count = ctypes.c_uint(told)
            code = call(kind, profile, array, count)
            got = [(p.start, p.size) for p in array]
            filled = places if told == len(places) else []
            want = filled + [marker] * (len(places) + 1 - len(filled))
            ok_codes = {0} if told == len(places) else {insufficient_size, INVALID_ARGUMENT}
            if code not in ok_codes or got != want or count.value != len(places):
                bad.append(f"{kind} profile {profile}, told {told}: code {code}, count {count.value}, array {got}")
    assert bad == []


def test_mig_management_calls_refuse_a_mig_device(pynvml_module: ModuleType, nvml: Callable[..., NodeSnap]) -> None:
    """MIG mode and GPU instances belong to a GPU (NVIDIA's MIG user guide: MIG mode is enabled per GPU, GPU
    instances are created on a GPU, and a MIG device, a compute instance of a GPU instance, is not partitioned
    further); nvml.h names the argument of these calls "The identifier of the target device" / "Reference to the
    parent GPU device handle" / "a given parent NVML device". Given dgx-a100's gpu7's first MIG device, with no
    agent socket (docs/nvml.md: a change is then NO_PERMISSION): nvmlDeviceSetMigMode and both
    nvmlDeviceCreateGpuInstance forms are INVALID_ARGUMENT ("If device ... [is] invalid"), while gpu7 itself gets
    NO_PERMISSION, so the refusal is the handle's; nvmlDeviceGetMigDeviceHandleByIndex finds nothing under it (any
    refusal, never a handle); nvmlDeviceGetMaxMigDeviceCount is INVALID_ARGUMENT or 0 ("Returns zero if MIG is not
    supported or enabled"), never gpu7's 7; nvmlDeviceGetMigMode is INVALID_ARGUMENT or NOT_SUPPORTED ("If device
    doesn't support MIG mode"), never gpu7's mode. No test gave these calls a MIG device before: each would have let
    it through to its parent GPU (mig.c:711 and :749 `fhw_enter_dev(..., 0)` as 1, :206, :217, :235 the flags 0
    as 1, FHW_ALLOW_MIG)."""
    n = pynvml_module
    nvml("dgx-a100", env={"FAKEHW_AGENT_SOCKET": None})
    lib = n.nvmlLib
    gpu7, _ = gpu7_instance(n)
    mig = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu7, 0)
    u = ctypes.c_uint
    status = ctypes.c_int(-1)
    new_gi = n.c_nvmlGpuInstance_t()
    placement = n.c_nvmlGpuInstancePlacement_t(6, 1)  # 1g.10gb (profile ID 19) at slice 6: the -lgipp {0..6}:1

    def changes(dev: Any) -> dict[str, int]:
        return {
            "nvmlDeviceSetMigMode": int(lib.nvmlDeviceSetMigMode(dev, u(1), ctypes.byref(status))),
            "nvmlDeviceCreateGpuInstance": int(lib.nvmlDeviceCreateGpuInstance(dev, u(19), ctypes.byref(new_gi))),
            "nvmlDeviceCreateGpuInstanceWithPlacement": int(lib.nvmlDeviceCreateGpuInstanceWithPlacement(
                dev, u(19), ctypes.byref(placement), ctypes.byref(new_gi))),
        }

    assert changes(gpu7) == dict.fromkeys(changes(gpu7), NO_PERMISSION)
    assert changes(mig) == dict.fromkeys(changes(mig), INVALID_ARGUMENT)
    under = n.c_nvmlDevice_t()
    assert lib.nvmlDeviceGetMigDeviceHandleByIndex(mig, u(0), ctypes.byref(under)) != 0
    count = u(77)
    code = lib.nvmlDeviceGetMaxMigDeviceCount(mig, ctypes.byref(count))
    assert code == INVALID_ARGUMENT or (code, count.value) == (0, 0)
    current, pending = u(77), u(77)
    assert lib.nvmlDeviceGetMigMode(mig, ctypes.byref(current), ctypes.byref(pending)) in {INVALID_ARGUMENT,
                                                                                          NOT_SUPPORTED}


def test_a_gpu_instance_profile_id_the_gpu_lacks_is_refused_as_nvml_h_says(pynvml_module: ModuleType,
                                                                            nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h, nvmlDeviceGetGpuInstanceRemainingCapacity and nvmlDeviceGetGpuInstancePossiblePlacements_v2:
    INVALID_ARGUMENT "If device, profileId or count are invalid", NOT_SUPPORTED "If ... profileId isn't supported".
    On dgx-a100's gpu7 (MIG on), profile IDs the A100's ``nvidia-smi mig -lgip`` does not list (1, 77, 2^31) get
    one of those two from the capacity call and from both placement forms (the deprecated one maps to _v2 in
    nvml.h), with and without an array; never SUCCESS, nor UNKNOWN ("An internal driver error occurred"): no test
    asked for a profile the GPU lacks before (mig.c:362 and :396 answering UNKNOWN survived)."""
    n = pynvml_module
    nvml("dgx-a100")
    lib = n.nvmlLib
    gpu7, _ = gpu7_instance(n)
    listed = {row[1] for row in A100_80GB_LGIP} | {5, 0}  # -lgip's rows and -lgipp's 4g.40gb (5) and 7g.80gb (0)
    absent = [1, 77, 2**31]
    assert not listed & set(absent)
    count = ctypes.c_uint(0)
    array = (n.c_nvmlGpuInstancePlacement_t * 8)()
    answers = {}
    for pid in absent:
        answers[f"RemainingCapacity {pid}"] = lib.nvmlDeviceGetGpuInstanceRemainingCapacity(
            gpu7, ctypes.c_uint(pid), ctypes.byref(count))
        for fn in ("nvmlDeviceGetGpuInstancePossiblePlacements", "nvmlDeviceGetGpuInstancePossiblePlacements_v2"):
            for out in (None, array):
                count.value = 8
                answers[f"{fn} {pid} {'array' if out else 'NULL'}"] = getattr(lib, fn)(
                    gpu7, ctypes.c_uint(pid), out, ctypes.byref(count))
    assert {k: v for k, v in answers.items() if v not in (INVALID_ARGUMENT, NOT_SUPPORTED)} == {}
    assert lib.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu7, ctypes.c_uint(9), ctypes.byref(count)) == 0


def test_a_compute_instance_profile_version_nvml_h_does_not_define_is_refused(
        pynvml_module: ModuleType, nvml: Callable[..., NodeSnap]) -> None:
    """nvml.h, nvmlGpuInstanceGetComputeInstanceProfileInfoV: INVALID_ARGUMENT "If ... info->version [is] invalid";
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH is "The provided version is invalid/unsupported" (what the device-level
    versioned calls answer, test_buffer_sizes_and_versions.py). On gpu7's 3g.40gb GPU instance, the one-slice compute
    instance profile asked with a version word nvml.h does not define (0, v1's number with v2's size, v4's number
    with v3's size, v2's number with v3's size) is refused with one of those two codes, never UNKNOWN ("An internal
    driver error occurred"), and nothing of the caller's struct but the version word is written; v2 and v3
    (nvmlComputeInstanceProfileInfo_v2 / _v3) answer. The device-level sweep does not reach this GPU instance call:
    its refusal answering UNKNOWN (fresh seed 10730's mig.c:491) survived."""
    n = pynvml_module
    nvml("dgx-a100")
    _, gi = gpu7_instance(n)
    fn = n.nvmlLib.nvmlGpuInstanceGetComputeInstanceProfileInfoV
    v2, v3 = n.nvmlComputeInstanceProfileInfo_v2, CI_PROFILE_INFO_V3
    size2, size3 = ctypes.sizeof(n.c_nvmlComputeInstanceProfileInfo_v2_t), ctypes.sizeof(CiProfileInfoV3)
    assert (v2 >> 24, v2 & 0xFFFFFF, v3 >> 24) == (2, size2, 3)

    def answer(version: int) -> tuple[int, bytes]:
        buffer = ctypes.create_string_buffer(b"\xa5" * (size3 + 16), size3 + 16)
        ctypes.c_uint.from_buffer(buffer).value = version
        code = fn(gi, ctypes.c_uint(CI_INDEX[1]), ctypes.c_uint(SHARED), buffer)
        return int(code), buffer.raw[4:]

    untouched = b"\xa5" * (size3 + 12)
    for version in (v2, v3):
        code, raw = answer(version)
        assert code == 0 and raw != untouched, hex(version)
    bad = {hex(version): answer(version) for version in (0, size2 | 1 << 24, size3 | 4 << 24, size3 | 2 << 24)}
    assert {k: code for k, (code, raw) in bad.items()
            if code not in (n.NVML_ERROR_ARGUMENT_VERSION_MISMATCH, INVALID_ARGUMENT) or raw != untouched} == {}
