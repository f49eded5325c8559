"""MIG through nvidia-ml-py (NVIDIA's Python bindings) on a node with its agent: what nvml.h documents.

Expected values: the published ``nvidia-smi mig -lgip`` of an H100 80GB (``migtools.H100_80GB_LGIP``; memory is the
GiB column x 1024), NVML's profile constants (nvml.h: ``NVML_GPU_INSTANCE_PROFILE_1_SLICE`` 0, ``2_SLICE`` 1,
``3_SLICE`` 2, ``4_SLICE`` 3, ``7_SLICE`` 4, ``1_SLICE_REV1`` 7 = "+me", ``1_SLICE_REV2`` 9 = the 2-memory-slice
1g, ``COUNT`` 0x12 in the newest header), and the return codes nvml.h gives each call.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest

from testbed.api import Testbed
from tests.nvml.helpers import run_python, snapshot_env
from tests.nvml.migtools import H100_80GB_LGIP

INDEX_OF = {"1g.10gb": 0, "1g.10gb+me": 7, "1g.20gb": 9, "2g.20gb": 1, "3g.40gb": 2, "4g.40gb": 3, "7g.80gb": 4}
NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION = 2, 3, 4
NVML_ERROR_IN_USE, NVML_ERROR_INSUFFICIENT_RESOURCES = 19, 23


@pytest.fixture
def h100(testbed_factory: Callable[..., Testbed], pynvml_module: ModuleType) -> Iterator[tuple[ModuleType, Testbed]]:
    """nvidia-ml-py initialised on a dgx-h100 node whose agent runs (its socket in the environment)."""
    tb = testbed_factory("dgx-h100")
    env = tb.node(tb.system.nodes[0].name).env
    with snapshot_env(env["FAKEHW_NVML_SNAPSHOT"], FAKEHW_AGENT_SOCKET=env["FAKEHW_AGENT_SOCKET"]):  # type: ignore[arg-type]
        pynvml_module.nvmlInit()
        try:
            yield pynvml_module, tb
        finally:
            pynvml_module.nvmlShutdown()


@contextmanager
def nvml_error(n: ModuleType, code: int) -> Iterator[None]:
    with pytest.raises(n.NVMLError) as err:
        yield
    assert err.value.value == code, str(err.value)


def test_profiles_answer_by_index_as_the_published_table(h100: tuple[ModuleType, Testbed]) -> None:
    n, _ = h100
    h = n.nvmlDeviceGetHandleByIndex(0)
    with nvml_error(n, NVML_ERROR_NOT_SUPPORTED):  # MIG is off
        n.nvmlDeviceGetGpuInstanceProfileInfo(h, 0)
    assert n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_ENABLE) == 0
    assert n.nvmlDeviceGetMigMode(h) == [1, 1]
    by_index: dict[int, Any] = {}
    for index in range(0x12):
        try:
            by_index[index] = n.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
        except n.NVMLError as exc:
            assert exc.value == NVML_ERROR_NOT_SUPPORTED, (index, str(exc))
    with nvml_error(n, NVML_ERROR_INVALID_ARGUMENT):
        n.nvmlDeviceGetGpuInstanceProfileInfo(h, 0x12)
    assert sorted(by_index) == sorted(INDEX_OF.values())
    for name, pid, total, gib, sm, dec, enc, ce, jpeg, ofa in H100_80GB_LGIP:
        info = by_index[INDEX_OF[name.removeprefix("MIG ")]]
        assert (info.name.decode() if isinstance(info.name, bytes) else info.name) == name
        assert (info.id, info.instanceCount, info.multiprocessorCount, info.decoderCount, info.encoderCount,
                info.copyEngineCount, info.jpegCount, info.ofaCount) == (pid, total, sm, dec, enc, ce, jpeg, ofa)
        assert f"{info.memorySizeMB / 1024:.2f}" == gib  # as nvidia-smi prints it
        assert n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, pid) == total


def test_instances_appear_everywhere_and_vanish(h100: tuple[ModuleType, Testbed]) -> None:
    n, tb = h100
    h = n.nvmlDeviceGetHandleByIndex(0)
    n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_ENABLE)
    gi = n.nvmlDeviceCreateGpuInstance(h, 9)  # 3g.40gb: first at 0:4 with id 2 (MIG user guide)
    info = n.nvmlGpuInstanceGetInfo(gi)
    assert (info.id, info.profileId, info.placement.start, info.placement.size) == (2, 9, 0, 4)
    ci_profile = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 2, 0)  # the full 3-slice compute profile
    assert (ci_profile.sliceCount, ci_profile.multiprocessorCount) == (3, 60)
    ci = n.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
    assert n.nvmlComputeInstanceGetInfo(ci).id == 0

    mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)  # no re-init: this process sees the new generation
    uuid = n.nvmlDeviceGetUUID(mig)
    agent = tb.agent(tb.system.nodes[0].name).mig(tb.system.nodes[0].name)["gpus"]["gpu0"]
    assert uuid == agent["gpu_instances"][0]["compute_instances"][0]["uuid"]
    assert (n.nvmlDeviceGetGpuInstanceId(mig), n.nvmlDeviceGetComputeInstanceId(mig)) == (2, 0)
    assert n.nvmlDeviceGetMemoryInfo(mig).total == 40448 * 2**20  # 39.50 GiB, the published 3g.40gb
    assert ctypes.addressof(n.nvmlDeviceGetHandleByUUID(uuid).contents) == ctypes.addressof(mig.contents)

    env = tb.node(tb.system.nodes[0].name).env
    other = run_python("import json, pynvml; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0); "
                       "print(json.dumps(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0))))",
                       env["FAKEHW_NVML_SNAPSHOT"])  # type: ignore[arg-type]
    assert other == uuid

    n.nvmlComputeInstanceDestroy(ci)
    with nvml_error(n, NVML_ERROR_INVALID_ARGUMENT):  # the handle of a destroyed instance names nothing
        n.nvmlDeviceGetUUID(mig)
    n.nvmlGpuInstanceDestroy(gi)
    with nvml_error(n, NVML_ERROR_INVALID_ARGUMENT):
        n.nvmlGpuInstanceGetInfo(gi)
    destroyed = gi
    gi = n.nvmlDeviceCreateGpuInstance(h, 9)  # the same id again, a new instance
    assert n.nvmlGpuInstanceGetInfo(gi).id == 2
    ci = n.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    assert n.nvmlDeviceGetUUID(n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)) != uuid  # UUIDs are never reused
    # A process may still hold the destroyed instances' handles (a monitor that cached them): they stay invalid
    # (nvml.h: INVALID_ARGUMENT "if gpuInstance is invalid") rather than come to name the new instances, which
    # would hand it another instance's readings without an error (the shim gives a new instance a free handle
    # while there is one; seed 10601's mechanical mutant mig.c:86 handed out the destroyed one's).
    assert ctypes.addressof(gi.contents) != ctypes.addressof(destroyed.contents)
    with nvml_error(n, NVML_ERROR_INVALID_ARGUMENT):
        n.nvmlGpuInstanceGetInfo(destroyed)
    with nvml_error(n, NVML_ERROR_INVALID_ARGUMENT):
        n.nvmlDeviceGetUUID(mig)


def test_refusals_carry_nvml_codes_and_change_nothing(h100: tuple[ModuleType, Testbed]) -> None:
    n, tb = h100
    node = tb.system.nodes[0].name
    agent = tb.agent(node)
    h = n.nvmlDeviceGetHandleByIndex(0)

    def refused(code: int, call: Callable[[], Any]) -> None:
        before = agent.mig(node), agent.state(node)["generation"]
        with nvml_error(n, code):
            call()
        assert (agent.mig(node), agent.state(node)["generation"]) == before

    refused(NVML_ERROR_NOT_SUPPORTED, lambda: n.nvmlDeviceCreateGpuInstance(h, 19))  # MIG disabled
    n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_ENABLE)
    refused(NVML_ERROR_INVALID_ARGUMENT, lambda: n.nvmlDeviceCreateGpuInstance(h, 77))  # no such profile ID
    bad = ctypes.byref(n.c_nvmlGpuInstancePlacement_t(2, 4))  # 3g.40gb may start at 0 or 4 only
    refused(NVML_ERROR_INVALID_ARGUMENT, lambda: n.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, bad))
    gi = n.nvmlDeviceCreateGpuInstance(h, 5)  # 4g.40gb at 0:4
    refused(NVML_ERROR_INSUFFICIENT_RESOURCES, lambda: n.nvmlDeviceCreateGpuInstance(h, 5))  # one per GPU
    overlap = ctypes.byref(n.c_nvmlGpuInstancePlacement_t(2, 2))
    refused(NVML_ERROR_INSUFFICIENT_RESOURCES, lambda: n.nvmlDeviceCreateGpuInstanceWithPlacement(h, 14, overlap))
    n.nvmlGpuInstanceCreateComputeInstance(gi, 3)  # 4c: the whole GPU instance
    refused(NVML_ERROR_INSUFFICIENT_RESOURCES, lambda: n.nvmlGpuInstanceCreateComputeInstance(gi, 0))
    refused(NVML_ERROR_NOT_SUPPORTED, lambda: n.nvmlGpuInstanceCreateComputeInstance(gi, 2))  # no 3c in a 4g
    refused(NVML_ERROR_IN_USE, lambda: n.nvmlGpuInstanceDestroy(gi))  # it has a compute instance
    before = agent.mig(node)
    assert n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_DISABLE) == NVML_ERROR_IN_USE  # the activation status
    assert agent.mig(node) == before and n.nvmlDeviceGetMigMode(h) == [1, 1]


def test_without_an_agent_changes_are_not_permitted(pynvml_module: ModuleType,
                                                   node_snapshot: Callable[..., Any]) -> None:
    """Reads need only the snapshot; a change needs the agent ($FAKEHW_AGENT_SOCKET), like a non-root user."""
    n = pynvml_module
    snap = node_snapshot("dgx-a100")
    with snapshot_env(snap.path, FAKEHW_AGENT_SOCKET=None):  # type: ignore[arg-type]
        n.nvmlInit()
        try:
            h = n.nvmlDeviceGetHandleByIndex(7)  # MIG on with two 3g.40gb at boot
            assert n.nvmlDeviceGetMigMode(h) == [1, 1]
            assert [n.nvmlGpuInstanceGetInfo(n.nvmlDeviceGetGpuInstanceById(h, i)).placement.start
                    for i in (1, 2)] == [4, 0]
            with nvml_error(n, NVML_ERROR_NO_PERMISSION):
                n.nvmlDeviceCreateGpuInstance(h, 19)
            with nvml_error(n, NVML_ERROR_NO_PERMISSION):
                n.nvmlDeviceSetMigMode(n.nvmlDeviceGetHandleByIndex(0), n.NVML_DEVICE_MIG_ENABLE)
        finally:
            n.nvmlShutdown()
