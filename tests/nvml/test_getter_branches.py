"""Branches of device.c, links.c, gpm.c and fields.c that no other test of the C area takes (issue 16, h-cdev).

tools/c-coverage.py on main f0bec36 listed, per getter, the lines never run and the branches never taken; the
mechanical mutants that survive fresh samples live there. Each test below takes one such branch with an input whose
answer is fixed outside the shim: nvml.h 13.4.92 (its enums' members, its field ids' comments, its error codes'
definitions) and the real ``nvidia-smi -q -x`` captures. Where nvml.h says only "Nonzero NVML_ERROR_? enum on
error" (the GPM calls), the tests first asked no particular code, only that the call or the metric does not answer
SUCCESS with a value nvml.h says is "only valid if nvmlReturn is 0"; since the fourth C round (h-cbrd4) they ask the
code nvml.h gives the same failure elsewhere (an invalid sample pointer: INVALID_ARGUMENT, as nvmlGpmSampleAlloc and
Free document it; a GPU instance looked up by id: nvmlDeviceGetGpuInstanceById's NOT_FOUND and NOT_SUPPORTED) or
that nvmlReturn_t's own definitions name (INVALID_ARGUMENT "A supplied argument is invalid", not UNKNOWN "An
internal driver error occurred").

The section "device.c, third round" (h-cdev3, main 99d5ade's coverage and fresh seeds 10690-10691's survivors) adds
nvidia-smi(1)'s Board ID rule, a real V100's pynvml dump (encoder sampling period), NVIDIA's AV1 / Ada Lovelace note
and the NVENC tables (which boards encode which codec) to those sources. The section "device.c, fifth round"
(h-cdev5, main 3878acc's coverage and fresh seeds 10734-10735's survivors) adds NVIDIA's MIG user guide (no P2P,
PCIe or NVLink, on MIG devices) and the reference hardware table (a GB200 tray's 144 CPUs).
"""

from __future__ import annotations

import ctypes
import re
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import ModuleType

import pytest

from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import FakeProcess
from tests.nvml import references
from tests.nvml.captures import capture_dir
from tests.nvml.helpers import (
    NodeSnap,
    build_preload,
    dgx_h100_with_mig,
    dgx_h100_with_mig_gpu7,
    pcie_rate_metrics,
    run_python,
    write_node,
)
from tests.nvml.test_enum_bounds import _enum_count
from tests.nvml.test_pynvml import board_state, boards_state, error_of, handles

Nvml = Callable[..., NodeSnap]

READ = 0
"""nvml.h: NVML_P2P_CAPS_INDEX_READ = 0 (nvidia-ml-py 12.535 defines it as a one-element tuple)."""


def library() -> ctypes.CDLL:
    """The fake library pynvml is bound to, for calls its bindings do not make (NULL samples, raw structs)."""
    return ctypes.CDLL("libnvidia-ml.so.1")


# --------------------------------------------------------------------------------------------------- ECC fields


def test_ecc_fields_of_a_board_with_ecc_off_answer_as_their_getters(node_snapshot: Callable[..., NodeSnap],
                                                                     pynvml_module: ModuleType) -> None:
    """nvml.h: fields 3-6 (NVML_FI_DEV_ECC_SBE_VOL_TOTAL .. _DBE_AGG_TOTAL) are the totals
    nvmlDeviceGetTotalEccErrors gives and 7-28 (..._SBE_VOL_L1 .. _DBE_AGG_CBU) the per-location counts of
    nvmlDeviceGetMemoryErrorCounter; both getters "Requires ECC Mode to be enabled" and answer NOT_SUPPORTED
    otherwise. Every captured board runs ECC on, so test_fields_match_getters.py never sees ECC off: an H100 with
    ECC turned off (nvidia-smi -e 0) and counts still in its record answers NOT_SUPPORTED to every one of those
    fields, while ECC mode itself (fields 1, 2) still answers, and its neighbour with ECC on answers them all."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    counts = tuple(range(1, 2 * 2 * 8 + 1))  # [error type][volatile, aggregate][location], all non-zero
    with board_state(n, snap, 3, ecc_current=0, ecc_counts=counts) as hs:
        off = n.nvmlDeviceGetFieldValues(hs[3], list(range(1, 29)))
        on = n.nvmlDeviceGetFieldValues(hs[2], list(range(3, 29)))
    assert [v.nvmlReturn for v in off[:2]] == [n.NVML_SUCCESS] * 2
    assert off[0].value.uiVal == n.NVML_FEATURE_DISABLED
    assert {i + 1: v.nvmlReturn for i, v in enumerate(off) if i >= 2} == \
        dict.fromkeys(range(3, 29), n.NVML_ERROR_NOT_SUPPORTED)
    assert {v.nvmlReturn for v in on} == {n.NVML_SUCCESS}


# --------------------------------------------------------------------------------------------------- pair getters


def test_a_pair_with_a_lost_gpu_is_lost_whichever_side_it_is_on(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: NVML_ERROR_GPU_IS_LOST, "The GPU has fallen off the bus or has otherwise become inaccessible". A
    pair getter (nvmlDeviceGetTopologyCommonAncestor, nvmlDeviceGetP2PStatus) reads both GPUs, so a pair with a
    lost GPU cannot be answered, and the pair is the same pair in either order: DGX H100's gpu1 falls off the bus
    (Xid 79) and both getters answer GPU_IS_LOST for (gpu0, gpu1) as for (gpu1, gpu0), while (gpu0, gpu2) is
    still answered (NVSwitch: NVML_TOPOLOGY_... level and P2P status OK for READ over NVLink)."""
    n = pynvml_module
    snap = nvml("dgx-h100")
    hs = handles(n)
    assert n.nvmlDeviceGetP2PStatus(hs[0], hs[1], READ) == n.NVML_P2P_STATUS_OK
    write_node(snap.path, "dgx-h100", faults=[{"kind": "xid", "device": "gpu1", "code": 79}], generation=2)
    for a, b in ((hs[0], hs[1]), (hs[1], hs[0])):
        assert error_of(partial(n.nvmlDeviceGetTopologyCommonAncestor, a, b)) == n.NVML_ERROR_GPU_IS_LOST
        assert error_of(partial(n.nvmlDeviceGetP2PStatus, a, b, READ)) == \
            n.NVML_ERROR_GPU_IS_LOST
    n.nvmlDeviceGetTopologyCommonAncestor(hs[0], hs[2])
    assert n.nvmlDeviceGetP2PStatus(hs[0], hs[2], READ) == n.NVML_P2P_STATUS_OK


def test_a_topology_level_between_nvml_h_s_levels_is_refused(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's nvmlGpuTopologyLevel_t has six members spaced by ten (INTERNAL 0, SINGLE 10, MULTIPLE 20,
    HOSTBRIDGE 30, NODE 40, SYSTEM 50: "there is purposefully no COUNT here because of the need for spacing"), and
    nvmlDeviceGetTopologyNearestGpus answers INVALID_ARGUMENT "if device, level, or count is invalid". A value
    inside the range but between members (5, 15, 45) is no level: refused; each member is not."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    lib = library()
    for level, invalid in ((5, True), (15, True), (45, True), (0, False), (10, False), (40, False), (50, False)):
        count = ctypes.c_uint(0)
        code = lib.nvmlDeviceGetTopologyNearestGpus(h, level, ctypes.byref(count), None)
        assert (code == n.NVML_ERROR_INVALID_ARGUMENT) is invalid, (level, code)


def test_nearest_gpus_refuse_a_null_array_with_a_non_zero_count_at_every_level(nvml: Nvml,
                                                                               pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetTopologyNearestGpus: INVALID_ARGUMENT "if ... \\a deviceArray is NULL with a non-zero
    \\a count", whatever GPUs the level holds: on a DGX H100 gpu0 has four GPUs at NVML_TOPOLOGY_SYSTEM (50, the
    other socket's: `nvidia-smi topo -m` in the DGX H100 user guide) and none at NVML_TOPOLOGY_INTERNAL (0, no GPU
    shares its board), and a count of 4 with no array is refused at both; with a count of 0 the same calls answer
    SUCCESS and the count (4, 0)."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    lib = library()
    for level, found in ((50, 4), (0, 0)):
        count = ctypes.c_uint(4)
        assert lib.nvmlDeviceGetTopologyNearestGpus(h, level, ctypes.byref(count), None) == \
            n.NVML_ERROR_INVALID_ARGUMENT, level
        count = ctypes.c_uint(0)
        assert lib.nvmlDeviceGetTopologyNearestGpus(h, level, ctypes.byref(count), None) == n.NVML_SUCCESS, level
        assert count.value == found, level


def test_cpu_affinity_is_the_node_scope_call_for_every_handle(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetCpuAffinity: "This is equivalent to calling nvmlDeviceGetCpuAffinityWithinScope with
    NVML_AFFINITY_SCOPE_NODE" (0). So the two answer alike, return code and mask words, for every handle a caller
    can hold: each GPU of a DGX A100, the MIG device handles of its gpu7 (MIG on), and, after gpu1 falls off the
    bus (Xid 79), gpu1's handle; for one mask word and for four."""
    n = pynvml_module
    snap = nvml("dgx-a100")
    lib = library()
    hs = handles(n)
    migs = [n.nvmlDeviceGetMigDeviceHandleByIndex(hs[7], k) for k in range(2)]

    def both(h: object, size: int) -> tuple[tuple[int, list[int]], tuple[int, list[int]]]:
        plain, scoped = (ctypes.c_ulong * size)(), (ctypes.c_ulong * size)()
        a = lib.nvmlDeviceGetCpuAffinity(h, size, plain)
        b = lib.nvmlDeviceGetCpuAffinityWithinScope(h, size, scoped, 0)
        return (a, list(plain)), (b, list(scoped))

    answered = 0
    for h in hs + migs:
        for size in (1, 4):
            plain, scoped = both(h, size)
            assert plain == scoped, (h, size)
            answered += plain[0] == n.NVML_SUCCESS
    assert answered >= 2 * len(hs)
    write_node(snap.path, "dgx-a100", faults=[{"kind": "xid", "device": "gpu1", "code": 79}], generation=2)
    plain, scoped = both(hs[1], 1)
    assert plain == scoped and plain[0] == n.NVML_ERROR_GPU_IS_LOST


# --------------------------------------------------------------------------------------------------- GPM


def _request(n: ModuleType, first: object, second: object, ids: list[int]) -> tuple[int, list[int]]:
    """nvmlGpmMetricsGet of ``ids`` from ``first`` and ``second`` (either may be None): the call's code and each
    metric's nvmlReturn."""
    code, request = _gpm_call(n, first, second, ids)
    return code, [request.metrics[i].nvmlReturn for i in range(len(ids))]


def _gpm_call(n: ModuleType, first: object, second: object, ids: list[int],
              after: int | None = None) -> tuple[int, ctypes.Structure]:
    """nvmlGpmMetricsGet of ``ids`` from ``first`` and ``second``: the call's code and the request it filled.
    ``after``: the slot past the ``ids`` asks for this metric id too, with a return code no call gives (0xDEAD)."""

    class Request(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", ctypes.c_void_p),
                    ("sample2", ctypes.c_void_p), ("metrics", n.c_nvmlGpmMetric_t * n.NVML_GPM_METRIC_MAX)]

    def pointer(sample: object) -> int | None:
        return None if sample is None else ctypes.cast(sample, ctypes.c_void_p).value  # type: ignore[arg-type]

    request = Request(version=n.NVML_GPM_METRICS_GET_VERSION, numMetrics=len(ids), sample1=pointer(first),
                      sample2=pointer(second))
    for i, metric in enumerate(ids):
        request.metrics[i].metricId = metric
    if after is not None:
        request.metrics[len(ids)].metricId = after
        request.metrics[len(ids)].nvmlReturn = 0xDEAD
    code = library().nvmlGpmMetricsGet(ctypes.byref(request))
    return code, request


def _answered(n: ModuleType, result: tuple[int, list[int]]) -> bool:
    """Whether a request gave a value nvml.h calls valid: the call and its metric both SUCCESS."""
    code, returns = result
    return code == n.NVML_SUCCESS and returns == [n.NVML_SUCCESS]


def test_gpm_metrics_need_two_samples_of_one_gpu_taken_in_order(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlGpmMetricsGet: the user allocates sample1 and sample2 with nvmlGpmSampleAlloc, "then calls the
    nvmlGpmSampleGet() API twice to obtain 2 samples of counters" of a device, and the metrics are computed from
    those two; a metric's value "Is only valid if nvmlReturn is 0". So SM utilization (NVML_GPM_METRIC_SM_UTIL) of
    an H100 is answered from two samples of gpu0 taken one after the other, and not answered when either sample
    is missing (NULL), was allocated but never taken, belongs to another GPU, or the two were taken in the other
    order (sample2 before sample1: counters running backwards)."""
    n = pynvml_module
    nvml("dgx-h100")
    hs = handles(n)
    sm = [n.NVML_GPM_METRIC_SM_UTIL]
    a, b, other, blank = (n.nvmlGpmSampleAlloc() for _ in range(4))
    try:
        n.nvmlGpmSampleGet(hs[0], a)
        n.nvmlGpmSampleGet(hs[1], other)
        n.nvmlGpmSampleGet(hs[0], b)
        assert _answered(n, _request(n, a, b, sm))
        for first, second in ((None, b), (a, None), (blank, b), (a, blank), (a, other), (other, b), (b, a)):
            # a supplied argument that is invalid (nvmlReturn_t's INVALID_ARGUMENT), not an internal error (UNKNOWN)
            assert _request(n, first, second, sm)[0] == n.NVML_ERROR_INVALID_ARGUMENT, (first, second)
    finally:
        for s in (a, b, other, blank):
            n.nvmlGpmSampleFree(s)


def test_gpm_metrics_past_num_metrics_are_left_as_the_caller_set_them(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlGpmMetricsGet_t: numMetrics is "How many metrics to retrieve in metrics[]" (IN), of
    the array's NVML_GPM_METRIC_MAX slots: the slots after them are not the call's to answer. A request for SM
    utilization alone, with the next slot holding another metric id and a return code no call gives, leaves that
    slot as it was."""
    n = pynvml_module
    nvml("dgx-h100")
    hs = handles(n)
    a, b = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    try:
        n.nvmlGpmSampleGet(hs[0], a)
        n.nvmlGpmSampleGet(hs[0], b)
        code, request = _gpm_call(n, a, b, [n.NVML_GPM_METRIC_SM_UTIL], after=n.NVML_GPM_METRIC_GRAPHICS_UTIL)
    finally:
        n.nvmlGpmSampleFree(a)
        n.nvmlGpmSampleFree(b)
    assert code == n.NVML_SUCCESS and request.metrics[0].nvmlReturn == n.NVML_SUCCESS
    past = request.metrics[1]
    graphics = n.NVML_GPM_METRIC_GRAPHICS_UTIL
    assert (past.metricId, past.nvmlReturn, past.metricInfo.shortName) == (graphics, 0xDEAD, None)


def test_pcie_byte_counters_keep_counting_when_a_new_generation_lowers_the_rate(
        node_snapshot: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """nvml.h: NVML_FI_DEV_PCIE_COUNT_TX_BYTES (197) and _RX_BYTES (198) are "PCIe transmit / receive bytes. Value
    can be wrapped": counters, which only grow (a wrap is at 2^64, not a few GB down), and grow over a span by the
    traffic in it, which nvmlDeviceGetPcieThroughput gives as a rate in KB/s. NVML_GPM_METRIC_PCIE_TX_PER_SEC (20)
    and _RX_PER_SEC (21) are that traffic between two GPM samples in MiB/s, so a mean of the rates in between:
    no less than the lower, no more than the higher. An H100 moving 900 / 800 KB/s is read, then the agent
    renders a generation in which it moves 300 / 250 KB/s, and it is read again. Before 2026-11-29 the shim made
    the counters the current rate times the generation (fields) or the time since boot (GPM), so a lower rate
    ran them backwards: fields 197, 198 fell by MBs and the GPM rates wrapped round to ~10^13 MiB/s."""

    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    before, after = (900, 800), (300, 250)
    with board_state(n, snap, 0, pcie_tx_kbs=before[0], pcie_rx_kbs=before[1]) as hs:
        h = hs[0]
        assert [n.nvmlDeviceGetPcieThroughput(h, d) for d in (0, 1)] == list(before)  # NVML_PCIE_UTIL_TX/RX_BYTES
        first, second = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
        try:
            start = time.monotonic()
            old = [v.value.ullVal for v in n.nvmlDeviceGetFieldValues(h, [197, 198])]
            n.nvmlGpmSampleGet(h, first)
            gpus = list(snap.snapshot.gpus)
            gpus[0] = replace(gpus[0], pcie_tx_kbs=after[0], pcie_rx_kbs=after[1])
            header = replace(snap.snapshot.header, generation=snap.snapshot.header.generation + 1)
            write_snapshot(snap.path, replace(snap.snapshot, header=header, gpus=tuple(gpus)).to_bytes(), changed=True)
            time.sleep(0.05)
            assert [n.nvmlDeviceGetPcieThroughput(h, d) for d in (0, 1)] == list(after)
            n.nvmlGpmSampleGet(h, second)
            new = [v.value.ullVal for v in n.nvmlDeviceGetFieldValues(h, [197, 198])]
            elapsed = time.monotonic() - start
            request = pcie_rate_metrics(n, first, second)
        finally:
            n.nvmlGpmSampleFree(first)
            n.nvmlGpmSampleFree(second)
    for direction in (0, 1):
        grown = new[direction] - old[direction]
        assert 0 < grown <= before[direction] * 1024 * elapsed + 1, (direction, old, new)
        metric = request.metrics[direction]
        assert metric.nvmlReturn == n.NVML_SUCCESS
        assert after[direction] / 1024 * 0.99 <= metric.value <= before[direction] / 1024 * 1.01, direction


def test_pcie_byte_counters_grow_by_the_rate_over_more_than_a_second(node_snapshot: Callable[..., NodeSnap],
                                                                    pynvml_module: ModuleType) -> None:
    """nvml.h: fields 197 / 198 (NVML_FI_DEV_PCIE_COUNT_TX_BYTES / _RX_BYTES) count the PCIe bytes sent and received,
    and nvmlDeviceGetPcieThroughput gives that traffic's rate in KB/s. An H100 moving a steady 900 KB/s out and
    800 KB/s in, read 1.2 s apart (no new snapshot in between), has counted at least the rate times the 1.2 s that
    passed between the two reads and not more than the rate times the time the test saw pass around them (a KB
    taken as 1000 bytes for the one bound and as 1024 for the other: nvml.h does not say which). A clock that ran
    backwards or wrapped each second would count less than a second's traffic."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    rates = (900, 800)
    with board_state(n, snap, 0, pcie_tx_kbs=rates[0], pcie_rx_kbs=rates[1]) as hs:
        h = hs[0]
        assert [n.nvmlDeviceGetPcieThroughput(h, d) for d in (0, 1)] == list(rates)  # NVML_PCIE_UTIL_TX/RX_BYTES
        start = time.monotonic()
        old = [v.value.ullVal for v in n.nvmlDeviceGetFieldValues(h, [197, 198])]
        time.sleep(1.2)
        new = [v.value.ullVal for v in n.nvmlDeviceGetFieldValues(h, [197, 198])]
        elapsed = time.monotonic() - start
    for direction, rate in enumerate(rates):
        grown = new[direction] - old[direction]
        assert rate * 1000 * 1.2 - 1 <= grown <= rate * 1024 * elapsed + 1, (direction, grown, elapsed)


_GPM_ALLOC_WITHOUT_MEMORY = """
import ctypes, json, resource
lib = ctypes.CDLL("libnvidia-ml.so.1")
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
alloc, free = lib.nvmlGpmSampleAlloc, lib.nvmlGpmSampleFree
alloc.argtypes, free.argtypes = [ctypes.POINTER(ctypes.c_void_p)], [ctypes.c_void_p]
assert lib.nvmlInit_v2() == 0
sample = ctypes.c_void_p()
where = ctypes.pointer(sample)
# every call made once before the limit, so that none of them needs memory of its own under it
assert alloc(where) == 0 and free(sample) == 0
libc.free(libc.malloc(16))
held = (ctypes.c_void_p * 100_000)()
sizes = [1 << k for k in range(20, 10, -1)] + list(range(1024, 0, -16))
with open("/proc/self/statm") as f:
    mapped = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (mapped, resource.RLIM_INFINITY))  # no new mapping, no heap growth
count = 0
for size in sizes:  # then every free block the heap still has, largest first, each 16-byte size class down to 16
    while count < len(held):
        block = libc.malloc(size)
        if block is None:
            break
        held[count] = block
        count += 1
without = alloc(where)
for i in range(count):
    libc.free(held[i])
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(json.dumps({"without": without, "with": alloc(where), "blocks": count}))
"""


def test_a_gpm_sample_cannot_be_allocated_without_memory(tmp_path: Path) -> None:
    """nvml.h, nvmlGpmSampleAlloc: NVML_ERROR_MEMORY (20) "if system memory is insufficient". A process whose address
    space may not grow (RLIMIT_AS, setrlimit(2), at what it has mapped) and whose heap has handed out every free block
    asks for a sample: MEMORY; given its memory back, SUCCESS."""
    snap = write_node(tmp_path / "nvml.snapshot", "dgx-h100")
    answer = run_python(_GPM_ALLOC_WITHOUT_MEMORY, snap.path)
    assert (answer["without"], answer["with"]) == (20, 0), answer
    assert answer["blocks"] < 100_000  # the heap ran out before the loop did


def test_a_gpm_sample_pointer_that_is_not_one_is_refused(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlGpmSampleAlloc and nvmlGpmSampleFree answer NVML_ERROR_INVALID_ARGUMENT "if an invalid pointer is
    provided" (a wording test_documented_argument_errors.py's NULL sweep does not read): NULL to either is
    refused, and so is NULL as the buffer nvmlGpmSampleGet reads into (a "Nonzero NVML_ERROR_?" there) and as
    nvmlGpmMetricsGet's request; a real sample is allocated, filled and freed."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    lib = library()
    invalid = n.NVML_ERROR_INVALID_ARGUMENT
    assert lib.nvmlGpmSampleAlloc(None) == invalid
    assert lib.nvmlGpmSampleFree(None) == invalid
    # nvmlGpmSampleGet documents only "Nonzero NVML_ERROR_?": a NULL buffer is the invalid pointer Alloc and Free
    # call INVALID_ARGUMENT, nvmlReturn_t's "A supplied argument is invalid" (UNKNOWN: "An internal driver error")
    assert lib.nvmlGpmSampleGet(h, None) == invalid
    assert lib.nvmlGpmMetricsGet(None) == invalid
    sample = ctypes.c_void_p()
    assert lib.nvmlGpmSampleAlloc(ctypes.byref(sample)) == n.NVML_SUCCESS
    assert lib.nvmlGpmSampleGet(h, sample) == n.NVML_SUCCESS
    # Memory that nvmlGpmSampleAlloc did not hand out (a zeroed buffer of the caller's) is no sample either: not
    # freed (INVALID_ARGUMENT), not read into, and no metric is answered from it.
    foreign = ctypes.create_string_buffer(4096)
    assert lib.nvmlGpmSampleFree(foreign) == invalid
    assert lib.nvmlGpmSampleGet(h, foreign) == invalid
    assert foreign.raw == bytes(4096)
    assert not _answered(n, _request(n, sample, ctypes.cast(foreign, ctypes.c_void_p), [n.NVML_GPM_METRIC_SM_UTIL]))
    assert lib.nvmlGpmSampleFree(sample) == n.NVML_SUCCESS


def test_gpm_metric_ids_nvml_h_does_not_define_are_not_answered(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's nvmlGpmMetricId_t numbers the metrics with gaps: 1-13, 20-21, NVDEC 30-37, NVJPG 40-47, NVOFA
    50-51, NVLink totals 60-61 and per link 62-97 (L0_RX .. L17_TX), C2C from 100. An id in a gap (0, 14, 19, 22,
    29, 38, 39, 48, 49, 52, 59, 98, 99: the ones between the engine kinds too) names no metric, so its nvmlReturn is
    not SUCCESS and its metricInfo (nvml.h: "Metric name and unit. Those can be NULL if not defined") has no name or
    unit, NULL, rather than some defined metric's (until 2026-11-29 38, 39, 48 and 49 carried GRAPHICS_UTIL's); the
    defined ids at each edge of the gaps that an H100 SXM5 has (18 NVLinks: the capture's <nvlink> count is not
    printed, NVIDIA's H100 datasheet gives 18 fourth-generation links) are answered, link 17's transmit rate (97)
    included."""
    n = pynvml_module
    header = references.newest_header().read_text()
    defined = {int(v) for v in re.findall(r"NVML_GPM_METRIC_\w+\s*=\s*(\d+),", header)}
    gaps = [0, 14, 19, 22, 29, 38, 39, 48, 49, 52, 59, 98, 99]
    edges = [1, 13, 20, 21, 30, 60, 61, 62, 96, 97]
    assert not defined & set(gaps) and set(edges) <= defined
    nvml("dgx-h100")
    h = handles(n)[0]
    assert n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_LINK_COUNT])[0].value.uiVal == 18
    a, b = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    try:
        n.nvmlGpmSampleGet(h, a)
        n.nvmlGpmSampleGet(h, b)
        code, request = _gpm_call(n, a, b, gaps + edges)
    finally:
        n.nvmlGpmSampleFree(a)
        n.nvmlGpmSampleFree(b)
    returns = [request.metrics[i].nvmlReturn for i in range(len(gaps + edges))]
    info = [request.metrics[i].metricInfo for i in range(len(gaps))]
    assert code == n.NVML_SUCCESS
    assert [(m, x.shortName, x.longName, x.unit) for m, x in zip(gaps, info, strict=True)] == \
        [(m, None, None, None) for m in gaps]
    # an id that is no NVML_GPM_METRIC_? define is the caller's mistake, not "An internal driver error" (nvmlReturn_t's
    # UNKNOWN): an invalid argument, or a metric not available on the device
    assert [m for m, r in zip(gaps, returns, strict=False)
            if r not in (n.NVML_ERROR_INVALID_ARGUMENT, n.NVML_ERROR_NOT_SUPPORTED)] == []
    assert dict(zip(edges, returns[len(gaps):], strict=True)) == dict.fromkeys(edges, n.NVML_SUCCESS)


def test_each_gpm_metric_an_h100_answers_has_its_own_name_and_nvml_h_s_unit(nvml: Nvml,
                                                                           pynvml_module: ModuleType) -> None:
    """nvml.h gives each nvmlGpmMetricId_t its own line of description and with it its unit: "Percentage of ..." /
    "Percent utilization of ..." with "0.0 - 100.0" (a percentage), or "... in MiB/sec". A metric's metricInfo is
    its "Metric name and unit": so every metric an H100 answers (nvmlReturn SUCCESS) carries a short and a long name
    no other metric carries, since no two ids are described alike (NVDEC 0 is not NVDEC 1, link 3's read bandwidth
    is not its write bandwidth nor link 4's, and none of them is the graphics engine), and the unit its description
    states: "%" for a percentage, "MiB/sec" for a rate. Until 2026-11-29 every engine metric (30-50) was named as
    GRAPHICS_UTIL and every per-link NVLink metric (62-97), reads and writes alike, as the total read rate (60)."""
    n = pynvml_module
    header = references.newest_header().read_text()
    # ids 1-97: the metrics of the first GPM headers (525), each a percentage or a rate; C2C (100-143) and the later
    # counters (cycles, bytes since reboot) are none an H100 answers here
    described = {int(i): text.strip() for i, text in
                 re.findall(r"NVML_GPM_METRIC_\w+\s*=\s*(\d+),\s*//!<\s*([^\n]*)", header) if int(i) < 100}
    assert len(described) == 13 + 2 + 8 + 8 + 2 + 2 + 36 and described[63] == \
        "NvLink write bandwidth for link 0 in MiB/sec"
    unit = {}
    for metric, text in described.items():
        percent = text.startswith(("Percentage of", "Percent utilization of")) and "0.0 - 100.0" in text
        rate = text.endswith("in MiB/sec")
        assert percent != rate, (metric, text)  # each description states exactly one of the two units
        unit[metric] = "%" if percent else "MiB/sec"
    nvml("dgx-h100")
    h = handles(n)[0]
    ids = sorted(described)
    a, b = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    try:
        n.nvmlGpmSampleGet(h, a)
        n.nvmlGpmSampleGet(h, b)
        code, request = _gpm_call(n, a, b, ids)
    finally:
        n.nvmlGpmSampleFree(a)
        n.nvmlGpmSampleFree(b)
    assert code == n.NVML_SUCCESS
    answered = {m: request.metrics[i].metricInfo for i, m in enumerate(ids)
                if request.metrics[i].nvmlReturn == n.NVML_SUCCESS}
    # the H100's own: the activities, PCIe, its 7 NVDEC and NVJPG and 1 NVOFA engines, its 18 links both ways
    assert {1, 2, 13, 20, 21, 30, 36, 40, 46, 50, 60, 61, 62, 97} <= set(answered)
    assert {m: info.unit for m, info in answered.items()} == {m: unit[m].encode() for m in answered}
    shorts = [info.shortName for info in answered.values()]
    longs = [info.longName for info in answered.values()]
    assert None not in shorts and None not in longs
    assert sorted(m for m in answered if shorts.count(answered[m].shortName) > 1) == []
    assert sorted(m for m in answered if longs.count(answered[m].longName) > 1) == []


def test_the_gpm_nvlink_write_rate_of_all_links_sums_the_first_and_the_last_link(nvml: Nvml,
                                                                                 pynvml_module: ModuleType) -> None:
    """nvml.h: NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC (61) is the "NvLink write bandwidth for all links", and
    NVLINK_L0_TX_PER_SEC (63) and NVLINK_L17_TX_PER_SEC (97) the write bandwidth of link 0 and of link 17, an H100's
    first and last of its 18 (NVML_FI_DEV_NVLINK_LINK_COUNT). Between two samples only those two links transmit
    (their transmitted-bytes counters, nvmlDeviceGetNvLinkUtilizationCounter's TX, grow by 32 and 96 MiB): the all-
    links rate is the sum of theirs, each positive, link 17's three times link 0's, link 0's 32 MiB over the time
    between the samples (at least the 10 ms slept, at most the time the test saw), and nothing is read (60)."""
    import math

    n = pynvml_module
    snap = nvml("dgx-h100")
    h = handles(n)[5]
    first, second = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    try:
        start = time.monotonic()
        n.nvmlGpmSampleGet(h, first)
        links = list(snap.snapshot.gpus[5].links)
        for link, mib in ((0, 32), (17, 96)):
            rec = links[link]
            links[link] = replace(rec, util_tx=(rec.util_tx[0] + mib * 2**20, rec.util_tx[1]))
        gpus = list(snap.snapshot.gpus)
        gpus[5] = replace(gpus[5], links=tuple(links))
        write_snapshot(snap.path, replace(snap.snapshot, gpus=tuple(gpus)).to_bytes(), changed=True)
        time.sleep(0.01)
        n.nvmlGpmSampleGet(h, second)
        elapsed = time.monotonic() - start
        ids = [61, 63, 97, 60]
        code, request = _gpm_call(n, first, second, ids)
    finally:
        n.nvmlGpmSampleFree(first)
        n.nvmlGpmSampleFree(second)
    assert code == n.NVML_SUCCESS
    assert [request.metrics[i].nvmlReturn for i in range(len(ids))] == [n.NVML_SUCCESS] * len(ids)
    total, link0, link17, read = (request.metrics[i].value for i in range(len(ids)))
    assert link0 > 0 and link17 > 0
    assert 32 / elapsed <= link0 <= 32 / 0.01  # 32 MiB over the time between the samples, 10 ms at least
    assert math.isclose(total, link0 + link17, rel_tol=1e-9)
    assert math.isclose(link17, 3 * link0, rel_tol=1e-9)
    assert read == 0.0


def test_rates_between_a_gpm_sample_and_itself_are_numbers(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's GPM rates (PCIe 20, 21; NVLink 60-97) are traffic "in MiB/sec", a metric's value "only valid if
    nvmlReturn is 0". A request whose sample1 and sample2 are one sample spans no time: whatever the library makes of
    it, a rate it answers with SUCCESS is a number of MiB/sec, not below 0 and not NaN (no traffic over no time is
    not 0 / 0 handed to the caller as valid)."""
    import math

    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    ids = [20, 21, 60, 61, 62, 97]
    sample = n.nvmlGpmSampleAlloc()
    try:
        n.nvmlGpmSampleGet(h, sample)
        code, request = _gpm_call(n, sample, sample, ids)
    finally:
        n.nvmlGpmSampleFree(sample)
    answered = {m: request.metrics[i].value for i, m in enumerate(ids)
                if code == n.NVML_SUCCESS and request.metrics[i].nvmlReturn == n.NVML_SUCCESS}
    assert {m: math.isfinite(v) and v >= 0.0 for m, v in answered.items()} == dict.fromkeys(answered, True)


def test_a_gpm_sample_of_a_gpu_instance_the_gpu_does_not_have_is_not_taken(nvml: Nvml, pynvml_module: ModuleType,
                                                                           tmp_path: Path) -> None:
    """nvml.h, nvmlGpmMigSampleGet: a sample "for a MIG GPU Instance", named by its "MIG GPU Instance ID"; any
    failure is a "Nonzero NVML_ERROR_? enum". A DGX H100 whose gpu7 runs two 3g.40gb instances samples each by
    the id its MIG device gives (nvmlDeviceGetGpuInstanceId), but not an id none of its MIG devices has (NOT_FOUND),
    and its gpu0, MIG off, has no GPU instance to sample at all (NOT_SUPPORTED): the codes nvmlDeviceGetGpuInstanceById
    documents for the same look-up and answers for the same ids."""
    n = pynvml_module
    nvml(dgx_h100_with_mig_gpu7(tmp_path))
    hs = handles(n)
    ids = {n.nvmlDeviceGetGpuInstanceId(n.nvmlDeviceGetMigDeviceHandleByIndex(hs[7], k)) for k in range(2)}
    absent = next(i for i in range(1, 16) if i not in ids)
    sample = n.nvmlGpmSampleAlloc()
    try:
        for gid in ids:
            n.nvmlGpmMigSampleGet(hs[7], gid, sample)
        # nvml.h, nvmlDeviceGetGpuInstanceById (the look-up of a GPU instance by the same id): NOT_FOUND "If the GPU
        # instance is not found", NOT_SUPPORTED "If device doesn't have MIG mode enabled"; the sample's look-up of
        # the instance answers as that one does.
        assert error_of(partial(n.nvmlGpmMigSampleGet, hs[7], absent, sample)) == n.NVML_ERROR_NOT_FOUND == \
            error_of(partial(n.nvmlDeviceGetGpuInstanceById, hs[7], absent))
        for gid in sorted(ids):
            assert error_of(partial(n.nvmlGpmMigSampleGet, hs[0], gid, sample)) == n.NVML_ERROR_NOT_SUPPORTED == \
                error_of(partial(n.nvmlDeviceGetGpuInstanceById, hs[0], gid))
    finally:
        n.nvmlGpmSampleFree(sample)



def test_a_gpm_sample_of_another_gpu_s_gpu_instance_is_not_taken(nvml: Nvml, pynvml_module: ModuleType,
                                                                 tmp_path: Path) -> None:
    """nvml.h, nvmlGpmMigSampleGet(device, gpuInstanceId, ...): a sample of "a MIG GPU Instance" of ``device``, named
    by its "MIG GPU Instance ID"; GPU instance ids are the GPU's own (NVIDIA's MIG user guide: `nvidia-smi mig -lgi`
    lists each instance as a GPU index and a GI ID, and the ids of different GPUs may coincide or differ). A DGX H100
    whose gpu6 runs two 3g.40gb instances and whose gpu7 (the next GPU) runs a 2g.20gb and three 1g.10gb ones: each
    GPU samples each of its own instances (the ids its MIG devices give), and gpu6 samples none of the ids only gpu7
    has, the one of gpu7's first instance included."""
    n = pynvml_module
    nvml(str(dgx_h100_with_mig(tmp_path, {"4": "[3g.40gb, 3g.40gb]", "2": "[1g.10gb, 1g.10gb, 1g.10gb, 2g.20gb]"})))
    hs = handles(n)

    def instance_ids(gpu: int, count: int) -> set[int]:
        return {n.nvmlDeviceGetGpuInstanceId(n.nvmlDeviceGetMigDeviceHandleByIndex(hs[gpu], k)) for k in range(count)}

    six, seven = instance_ids(6, 2), instance_ids(7, 4)
    assert len(six) == 2 and len(seven) == 4 and seven - six
    sample = n.nvmlGpmSampleAlloc()
    try:
        for gpu, ids in ((6, six), (7, seven)):
            for gid in sorted(ids):
                n.nvmlGpmMigSampleGet(hs[gpu], gid, sample)
        refused = {gid: error_of(partial(n.nvmlGpmMigSampleGet, hs[6], gid, sample)) for gid in sorted(seven - six)}
    finally:
        n.nvmlGpmSampleFree(sample)
    # nvml.h's nvmlReturn_t: NOT_FOUND is "A query to find an object was unsuccessful" (UNKNOWN "An internal driver
    # error occurred"), and nvmlDeviceGetGpuInstanceById answers NOT_FOUND "If the GPU instance is not found": so
    # does the sample of an instance gpu6 does not have.
    assert refused == dict.fromkeys(sorted(seven - six), n.NVML_ERROR_NOT_FOUND)
    assert {gid: error_of(partial(n.nvmlDeviceGetGpuInstanceById, hs[6], gid)) for gid in sorted(seven - six)} == \
        refused


def test_a_mig_gpu_without_mig_devices_finds_none_at_index_0_when_the_next_gpu_has_one(
        nvml: Nvml, pynvml_module: ModuleType, tmp_path: Path) -> None:
    """nvml.h, nvmlDeviceGetMigDeviceHandleByIndex: NOT_FOUND "if no valid MIG device was found at index". dgx-h100
    with MIG on in gpu6 and no GPU instance made there (nvidia-smi mig -lgi: "No GPU instances found"), and gpu7 (the
    next GPU) running one 7g.80gb: gpu6 has no MIG device at index 0 although gpu7 has one there (a search one record
    past gpu6's own finds gpu7's)."""
    n = pynvml_module
    nvml(str(dgx_h100_with_mig(tmp_path, {"4": "[]", "2": "[7g.80gb]"})))
    hs = handles(n)
    assert n.nvmlDeviceGetMigMode(hs[6])[0] == n.NVML_DEVICE_MIG_ENABLE
    seven = n.nvmlDeviceGetMigDeviceHandleByIndex(hs[7], 0)
    assert n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(seven) is not None
    assert error_of(partial(n.nvmlDeviceGetMigDeviceHandleByIndex, hs[6], 0)) == n.NVML_ERROR_NOT_FOUND


def test_gpm_streaming_set_on_a_hopper_gpu_is_the_state_it_then_reports(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlGpmSetStreamingEnabled(device, state), "state: GPM stream state, NVML_FEATURE_DISABLED or
    NVML_FEATURE_ENABLED", answers NVML_SUCCESS "if current GPM stream state is successfully set" and lists no
    permission error (INVALID_ARGUMENT only "if device is invalid"); nvmlGpmQueryIfStreamingEnabled "Returns GPM
    stream state NVML_FEATURE_DISABLED or NVML_FEATURE_ENABLED" of "the target device". On an H100 (Hopper: "For
    Hopper or newer fully supported devices") each of the two states is set and then reported, for that GPU alone
    (its neighbour keeps its own), and a state that is neither (2) is an invalid argument (nvmlReturn_t: "A supplied
    argument is invalid") that leaves the report one of the two. Until 2026-11-29 the setter answered NO_PERMISSION
    to both states."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = library()
    hs = handles(n)
    h, neighbour = hs[2], hs[3]
    before = n.nvmlGpmQueryIfStreamingEnabled(neighbour)
    try:
        for state in (n.NVML_FEATURE_ENABLED, n.NVML_FEATURE_DISABLED, n.NVML_FEATURE_ENABLED):
            assert lib.nvmlGpmSetStreamingEnabled(h, state) == n.NVML_SUCCESS, state
            assert n.nvmlGpmQueryIfStreamingEnabled(h) == state
            assert n.nvmlGpmQueryIfStreamingEnabled(neighbour) == before
        # 2 is neither state: nvmlReturn_t's INVALID_ARGUMENT, "A supplied argument is invalid"
        assert lib.nvmlGpmSetStreamingEnabled(h, 2) == n.NVML_ERROR_INVALID_ARGUMENT
        assert n.nvmlGpmQueryIfStreamingEnabled(h) in (n.NVML_FEATURE_DISABLED, n.NVML_FEATURE_ENABLED)
    finally:
        lib.nvmlGpmSetStreamingEnabled(h, n.NVML_FEATURE_DISABLED)


def test_gpm_support_is_asked_with_the_version_nvml_h_defines(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlGpmSupport_t's ``version`` is "IN: Set to NVML_GPM_SUPPORT_VERSION" (1), and
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH is "The provided version is invalid/unsupported". An H100 (Hopper: "For
    Hopper or newer fully supported devices") asked with version 1 answers that it supports GPM; asked with 0 or 2,
    that mismatch, with its answer field left as the caller had it."""

    class Support(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("isSupportedDevice", ctypes.c_uint)]

    n = pynvml_module
    header = references.newest_header().read_text()
    found = re.search(r"#define NVML_GPM_SUPPORT_VERSION\s+(\d+)", header)
    assert found is not None and int(found.group(1)) == 1
    nvml("dgx-h100")
    lib = library()
    h = handles(n)[0]
    support = Support(version=1, isSupportedDevice=7)
    assert lib.nvmlGpmQueryDeviceSupport(h, ctypes.byref(support)) == n.NVML_SUCCESS
    assert support.isSupportedDevice == 1
    for version in (0, 2):
        support = Support(version=version, isSupportedDevice=7)
        assert lib.nvmlGpmQueryDeviceSupport(h, ctypes.byref(support)) == n.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        assert support.isSupportedDevice == 7


# --------------------------------------------------------------------------------------------------- samples


def _field(n: ModuleType, h: object, fid: int, scope: int) -> tuple[int, int]:
    """(nvmlReturn, value) of one field value with its scopeId."""
    value = (n.c_nvmlFieldValue_t * 1)()
    value[0].fieldId, value[0].scopeId = fid, scope
    assert library().nvmlDeviceGetFieldValues(h, 1, value) == n.NVML_SUCCESS
    return value[0].nvmlReturn, value[0].value.uiVal


def _sample(n: ModuleType, h: object, kind: int) -> tuple[int, int | None]:
    """(code, the one sample's value or None) of nvmlDeviceGetSamples of ``kind``, from timestamp 0."""
    value_type, count = ctypes.c_uint(), ctypes.c_uint(4)
    samples = (n.c_nvmlSample_t * 4)()
    code = library().nvmlDeviceGetSamples(h, kind, ctypes.c_ulonglong(0), ctypes.byref(value_type),
                                          ctypes.byref(count), samples)
    return code, samples[count.value - 1].sampleValue.uiVal if code == n.NVML_SUCCESS else None


def test_every_sampling_type_nvml_h_defines_answers_as_its_own_getter(node_snapshot: Callable[..., NodeSnap],
                                                                      pynvml_module: ModuleType) -> None:
    """nvml.h 13.4's nvmlSamplingType_t has ten members: after the clocks (5, 6), NVML_MODULE_POWER_SAMPLES (7)
    "module power samples for total module starting Grace Hopper", NVML_JPG_UTILIZATION_SAMPLES (8) and
    NVML_OFA_UTILIZATION_SAMPLES (9), "percent of time during which NVJPG / NVOFA remains busy"; its
    nvmlDeviceGetSamples lists INVALID_ARGUMENT only for a bad device or count, so a defined type is never refused
    as one. Each answers what its direct reading answers: JPEG and OFA the figures nvmlDeviceGetJpgUtilization
    and nvmlDeviceGetOfaUtilization give (here 37 % and 12 %, set apart from every other reading), module power
    what field NVML_FI_DEV_POWER_INSTANT (186) answers with scopeId NVML_POWER_SCOPE_MODULE (1, "the whole module
    (e.g. CPU + GPU)"), code and value: a GB200 (Grace + Blackwell) has a module, an H100 on an x86 host does not
    ("x86 or non-NVIDIA ARM is not supported"). A MIG-enabled A100 (dgx-a100's gpu7) answers JPEG and OFA
    samples as it answers their getters (NOT_SUPPORTED); its gpu6, MIG off, answers them. Before 2026-11-29 the
    shim refused 7-9 as INVALID_ARGUMENT."""
    n = pynvml_module
    for profile, module in (("gb200-nvl72", True), ("dgx-h100", False)):
        snap = node_snapshot(profile)
        with board_state(n, snap, 1, util_jpeg=37, util_ofa=12) as hs:
            h = hs[1]
            assert _sample(n, h, 8) == (n.NVML_SUCCESS, n.nvmlDeviceGetJpgUtilization(h)[0]) == (n.NVML_SUCCESS, 37)
            assert _sample(n, h, 9) == (n.NVML_SUCCESS, n.nvmlDeviceGetOfaUtilization(h)[0]) == (n.NVML_SUCCESS, 12)
            code, watts = _field(n, h, 186, 1)
            assert (code == n.NVML_SUCCESS) is module, profile
            assert _sample(n, h, 7) == (code, watts if module else None), profile
    nvml_a100 = node_snapshot("dgx-a100")  # gpu7 runs MIG (the profile's two 3g.40gb instances)
    with board_state(n, nvml_a100, 7, util_jpeg=37, util_ofa=12) as hs:
        for kind, getter in ((8, n.nvmlDeviceGetJpgUtilization), (9, n.nvmlDeviceGetOfaUtilization)):
            assert _sample(n, hs[7], kind) == (error_of(partial(getter, hs[7])), None)
            assert _sample(n, hs[6], kind)[0] == n.NVML_SUCCESS


def test_field_ids_outside_nvml_h_s_range_are_invalid_arguments(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's field identifiers run from NVML_FI_DEV_ECC_CURRENT (1) to NVML_FI_MAX - 1 (307; NVML_FI_MAX, 308, is
    "One greater than the largest field ID defined above"): 0 and 308 identify no field, a supplied argument that
    is invalid (its value's nvmlReturn NVML_ERROR_INVALID_ARGUMENT), while 1 and 307 are fields, answered or not
    supported but never refused as an argument."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    codes = {fid: _field(n, h, fid, 0)[0] for fid in (0, 1, 307, 308)}
    assert codes[0] == codes[308] == n.NVML_ERROR_INVALID_ARGUMENT
    assert n.NVML_ERROR_INVALID_ARGUMENT not in (codes[1], codes[307]), codes


def test_each_power_scope_answers_as_nvml_h_defines_it(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h's power fields NVML_FI_DEV_POWER_AVERAGE .. _REQUESTED_LIMIT (185-192) take the power scope in
    scopeId ("scopeId needs to be specified"), and nvmlPowerScopeType_t ends at NVML_POWER_SCOPE_COUNT (4U,
    "Maximum number of power scopes"), on a GB200 that has a module to meter and an H100 on an x86 host that has
    none:

    - scope 0 (NVML_POWER_SCOPE_GPU) answers every field on both;
    - scope 3 (NVML_POWER_SCOPE_GPU_BASE, "Targets base GPU power"; the fields' comment: "GPU base Power metrics
      ... Only supports _MIN_LIMIT, _MAX_LIMIT, _DEFAULT_LIMIT, and _CURRENT_LIMIT fields") names a scope, so it is
      not an invalid argument; none of the seven captured boards' ``nvidia-smi -q -x`` (drivers 570-595) has a
      base power section beside its GPU, module and memory power readings, so no board here meters it:
      NVML_ERROR_NOT_SUPPORTED ("device doesn't support this feature") for every field (the fake refused it as
      INVALID_ARGUMENT before, as if the scopes ended at MEMORY);
    - scope 4 and 0xFFFFFFFF name no scope, a supplied argument that is invalid (NVML_ERROR_INVALID_ARGUMENT, not
      UNKNOWN's "internal driver error" nor NOT_SUPPORTED's "device doesn't support")."""
    captures = capture_dir()
    assert captures is not None, "../shared/reference/captures is missing"
    xmls = sorted(captures.glob("qx-*.xml"))
    assert len(xmls) == 7, xmls
    for capture in xmls:
        sections = set(re.findall(r"<([a-z_]*power_readings)>", capture.read_text()))
        assert sections <= {"gpu_power_readings", "module_power_readings", "gpu_memory_power_readings"}, sections
    n = pynvml_module
    expected = {0: n.NVML_SUCCESS, 3: n.NVML_ERROR_NOT_SUPPORTED, 4: n.NVML_ERROR_INVALID_ARGUMENT,
                0xFFFFFFFF: n.NVML_ERROR_INVALID_ARGUMENT}
    for profile in ("gb200-nvl72", "dgx-h100"):
        nvml(profile)
        h = handles(n)[0]
        for fid in range(185, 193):
            got = {scope: _field(n, h, fid, scope)[0] for scope in expected}
            assert got == expected, (profile, fid)


RESETLESS_MIG, MIG_QUERY_CAPABLE = 184, 199
"""nvml.h: NVML_FI_DEV_IS_RESETLESS_MIG_SUPPORTED ("Device's Restless MIG Capability") and
NVML_FI_DEV_IS_MIG_MODE_INDEPENDENT_MIG_QUERY_CAPABLE ("MIG mode independent, MIG query capable device. 1=yes.
0=no.")."""


@pytest.mark.parametrize(("profile", "mig"), [("dgx-a100", True), ("l40s-server", False), ("t4-cloud", False)])
def test_no_board_that_needs_a_reset_for_mig_or_has_no_mig_claims_resetless_mig(nvml: Nvml, pynvml_module: ModuleType,
                                                                               profile: str, mig: bool) -> None:
    """The DGX A100 User Guide ("Multi-Instance GPU"): "Enablement of MIG requires a GPU reset", so no A100 has
    resetless MIG (field 184 is not 1); the L40S and the T4 are not among the MIG user guide's supported GPUs, so
    they have no MIG, resetless or queryable (184 and 199 are not 1). Whether such a board answers 0 or
    NOT_SUPPORTED nvml.h does not say, so either passes; where a value is given it is nvml.h's 0 or 1."""
    n = pynvml_module
    nvml(profile)
    for h in handles(n):
        answers = {fid: _field(n, h, fid, 0) for fid in (RESETLESS_MIG, MIG_QUERY_CAPABLE)}
        for code, value in answers.values():
            assert code != n.NVML_SUCCESS or value in (0, 1), answers
        claims = {fid for fid, (code, value) in answers.items() if code == n.NVML_SUCCESS and value == 1}
        assert not claims & ({RESETLESS_MIG} if mig else {RESETLESS_MIG, MIG_QUERY_CAPABLE}), answers


# --------------------------------------------------------------------------------------------------- NVLink counters


class _UtilControl(ctypes.Structure):
    """nvml.h's nvmlNvLinkUtilizationControl_t: units (nvmlNvLinkUtilizationCountUnits_t), pktfilter."""

    _fields_ = [("units", ctypes.c_uint), ("pktfilter", ctypes.c_uint)]


def test_nvlink_utilization_counters_are_0_or_1_and_reserved_units_are_refused(nvml: Nvml,
                                                                                pynvml_module: ModuleType) -> None:
    """nvml.h (13.4, deprecated but exported): nvmlDeviceGetNvLinkUtilizationControl and
    nvmlDeviceSetNvLinkUtilizationControl take "the counter ... (0 or 1)" and answer INVALID_ARGUMENT "if device,
    counter, link, or control is invalid"; nvmlDeviceGetNvLinkUtilizationCounter takes "the counter that should be
    read (0 or 1)", INVALID_ARGUMENT "if device, counter, or link is invalid or rxcounter or txcounter are NULL".
    nvmlNvLinkUtilizationCountUnits_t's NVML_NVLINK_COUNTER_UNIT_RESERVED (3) is "reserved for internal use", so a
    control with those units is invalid. On an H100's link 0, counter 2, a NULL txcounter and RESERVED units are
    refused; counter 1 with BYTES (2) and PKTFILTER_ALL (0xFF) is not."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    lib = library()
    invalid = n.NVML_ERROR_INVALID_ARGUMENT
    rx, tx = ctypes.c_ulonglong(), ctypes.c_ulonglong()
    good, reserved, out = _UtilControl(2, 0xFF), _UtilControl(3, 0xFF), _UtilControl()
    assert lib.nvmlDeviceGetNvLinkUtilizationControl(h, 0, 2, ctypes.byref(out)) == invalid
    assert lib.nvmlDeviceSetNvLinkUtilizationControl(h, 0, 2, ctypes.byref(good), 0) == invalid
    assert lib.nvmlDeviceSetNvLinkUtilizationControl(h, 0, 1, ctypes.byref(reserved), 0) == invalid
    assert lib.nvmlDeviceGetNvLinkUtilizationCounter(h, 0, 2, ctypes.byref(rx), ctypes.byref(tx)) == invalid
    assert lib.nvmlDeviceGetNvLinkUtilizationCounter(h, 0, 1, ctypes.byref(rx), None) == invalid
    assert lib.nvmlDeviceSetNvLinkUtilizationControl(h, 0, 1, ctypes.byref(good), 0) != invalid
    assert lib.nvmlDeviceGetNvLinkUtilizationControl(h, 0, 1, ctypes.byref(out)) != invalid
    assert lib.nvmlDeviceGetNvLinkUtilizationCounter(h, 0, 1, ctypes.byref(rx), ctypes.byref(tx)) != invalid


# --------------------------------------------------------------------------------------------------- remapped rows


def test_each_remapped_rows_output_left_null_is_refused(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetRemappedRows: NVML_ERROR_INVALID_ARGUMENT "If corrRows, uncRows, isPending or
    failureOccurred is invalid" (the "is invalid" wording the NULL sweep of test_documented_argument_errors.py
    does not read as "is NULL"). On an H100 (Hopper remaps rows: the capture's <remapped_rows> has counts), each of
    the four left NULL, the other three given, is refused; all four given is answered."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    lib = library()
    for missing in range(4):
        outs = [ctypes.c_uint() for _ in range(4)]
        args = [None if i == missing else ctypes.byref(o) for i, o in enumerate(outs)]
        assert lib.nvmlDeviceGetRemappedRows(h, *args) == n.NVML_ERROR_INVALID_ARGUMENT, missing
    outs = [ctypes.c_uint() for _ in range(4)]
    assert lib.nvmlDeviceGetRemappedRows(h, *(ctypes.byref(o) for o in outs)) == n.NVML_SUCCESS


# --------------------------------------------------------------------------------------------------- fabric


def test_fabric_info_v4_is_not_supported_where_the_capture_prints_no_fabric(nvml: Nvml, pynvml_module: ModuleType,
                                                                            tmp_path: Path) -> None:
    """qx-l40s.xml prints <fabric><state>N/A</state> (a PCIe L40S has no NVLink fabric), and nvml.h's fabric
    getters answer NOT_SUPPORTED "if the device does not support this feature": an L40S on a 615 driver answers
    NOT_SUPPORTED to nvmlDeviceGetGpuFabricInfo_v4 as to nvmlDeviceGetGpuFabricInfoV (v3), and writes nothing
    into the caller's struct. The GB200 case is test_more_board_getters.py's."""
    from tests.nvml.capture_view import FabricInfoV3
    from tests.nvml.captures import board_capture
    from tests.nvml.helpers import with_driver
    from tests.nvml.test_more_board_getters import FabricInfoV4

    assert board_capture("l40s")["/fabric/state"] == "N/A"
    n = pynvml_module
    nvml(str(with_driver(tmp_path, "l40s-server", "615.10.01")))
    lib = library()
    for h in handles(n):
        v3 = FabricInfoV3(version=ctypes.sizeof(FabricInfoV3) | 3 << 24)
        assert lib.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v3)) == n.NVML_ERROR_NOT_SUPPORTED
        v4 = FabricInfoV4(numCliques=77, state=77)
        assert lib.nvmlDeviceGetGpuFabricInfo_v4(h, ctypes.byref(v4)) == n.NVML_ERROR_NOT_SUPPORTED
        assert (v4.numCliques, v4.state) == (77, 77)


# --------------------------------------------------------------------------------------------------- remote link ids


def test_no_two_nvlinks_land_on_one_port_of_a_switch(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: field NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID (146), "Remote device NVLink ID", the link given "in the
    scopeId field". A link is one cable with one port at each end, so across a node no two GPU links can name the
    same port of the same remote device (nvmlDeviceGetNvLinkRemotePciInfo's bus id). A DGX H100's 8 GPUs x 18
    links (NVIDIA's DGX H100 user guide: four NVSwitch chips, 18 NVLink4 links a GPU) all answer the field, and
    the 144 (remote bus id, remote link) pairs are distinct."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = library()
    ends: list[tuple[str, int]] = []
    for h in handles(n):
        values = (n.c_nvmlFieldValue_t * 18)()
        for link in range(18):
            values[link].fieldId, values[link].scopeId = 146, link
        assert lib.nvmlDeviceGetFieldValues(h, 18, values) == n.NVML_SUCCESS
        assert [v.nvmlReturn for v in values] == [n.NVML_SUCCESS] * 18
        for link in range(18):
            ends.append((n.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId, values[link].value.uiVal))
    assert len(ends) == 144
    assert len(set(ends)) == 144, sorted(e for e in ends if ends.count(e) > 1)[:4]


# --------------------------------------------------------------------------------------------------- per-link fields


@pytest.mark.parametrize("profile", ["dgx-a100", "l40s-server"])
def test_per_link_speed_and_bandwidth_fields_answer_for_the_links_the_board_has(
        node_snapshot: Callable[..., NodeSnap], pynvml_module: ModuleType, profile: str) -> None:
    """nvml.h numbers the old per-link fields NVML_FI_DEV_NVLINK_SPEED_MBPS_L0..L5 (84-89) and L6..L11 (132-137),
    NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L0..L5 (60-65), _C1_L0..L5 (67-72), C0_L6..L11 (120-125), C1_L6..L11
    (126-131): one field per link, so each answers as that link does. For links 0-11 of every GPU of a DGX A100
    (12 NVLink3 links a GPU) and an L40S server (PCIe only: qx-l40s.xml prints no NVLink and fabric N/A), each of
    these fields has the return code nvmlDeviceGetNvLinkState gives for its link, and a speed field answers the
    speed field 164 (NVML_FI_DEV_NVLINK_GET_SPEED, "NVLink Speed in MBps") gives with the link as scopeId (GPU 0's
    links each given a speed of their own here, so a field reading its neighbour's link shows)."""
    n = pynvml_module
    lib = library()
    snap = node_snapshot(profile)
    links = tuple(replace(k, speed_mbps=k.speed_mbps + i) if k.speed_mbps else k
                  for i, k in enumerate(snap.snapshot.gpus[0].links))
    with board_state(n, snap, 0, links=links) as hs:
        _check_links(n, lib, hs, profile)


def test_a_board_with_one_nvlink_totals_that_link(node_snapshot: Callable[..., NodeSnap],
                                                  pynvml_module: ModuleType) -> None:
    """nvml.h's all-link fields over a GPU that has one NVLink (a two-board bridge's single link; here an H100's
    record cut to its link 0): NVML_FI_DEV_NVLINK_LINK_COUNT (91) "Number of NVLinks present on the device" is 1;
    the totals "for all Lanes" of the error counters (38 flow-control CRC, 45 data CRC, 52 replay, 59 recovery,
    160 data ECC) and of the bandwidth counter sets (66 C0, 73 C1) are the one link's per-lane fields (32, 39, 46,
    53, 148, 60, 67); 90 "Common NVLink Speed in MBps for active links" is its speed; 138-141, the TX / RX
    throughput "in KiB", are its utilization counter 0 (nvmlDeviceGetNvLinkUtilizationCounter, bytes) in KiB. One
    link is not none: nothing answers NOT_SUPPORTED. Every counter of the link is set to a figure of its own."""
    from fakehw.nvml.layout import LinkRecord

    n = pynvml_module
    lib = library()
    snap = node_snapshot("dgx-h100")
    gpu = snap.snapshot.gpus[0]
    link = replace(gpu.links[0], errors=(11, 12, 13, 14, 15), util_rx=(5 << 20, 6 << 20), util_tx=(7 << 20, 9 << 20))
    links = (link,) + (LinkRecord(),) * (len(gpu.links) - 1)
    totals = {38: 32, 45: 39, 52: 46, 59: 53, 160: 148, 66: 60, 73: 67}
    ids = [91, 90, 164, 138, 139, 140, 141, *totals, *totals.values()]
    with board_state(n, snap, 0, nvlink_count=1, links=links) as hs:
        values = (n.c_nvmlFieldValue_t * len(ids))()
        for v, fid in zip(values, ids, strict=True):
            v.fieldId = fid  # scopeId 0: link 0 for 164 (NVML_FI_DEV_NVLINK_GET_SPEED)
        assert lib.nvmlDeviceGetFieldValues(hs[0], len(ids), values) == n.NVML_SUCCESS
        rx, tx = n.nvmlDeviceGetNvLinkUtilizationCounter(hs[0], 0, 0)
    got = {fid: (v.nvmlReturn, v.value.uiVal if fid in (90, 91, 164) else v.value.ullVal)
           for fid, v in zip(ids, values, strict=True)}
    assert {fid: code for fid, (code, _) in got.items()} == dict.fromkeys(ids, n.NVML_SUCCESS)
    assert got[91][1] == 1
    assert got[90][1] == got[164][1] > 0
    assert [got[fid][1] for fid in (138, 139, 140, 141)] == [tx // 1024, rx // 1024, tx // 1024, rx // 1024]
    assert (rx, tx) == (5 << 20, 7 << 20)
    assert {total: got[total][1] for total in totals} == {total: got[lane][1] for total, lane in totals.items()}
    assert len({got[total][1] for total in totals}) == len(totals)


def _check_links(n: ModuleType, lib: ctypes.CDLL, hs: list[object], profile: str) -> None:
    """The body of the per-link field test, for each GPU's links 0-11."""
    for h in hs:
        for link in range(12):
            low = link < 6
            ids = [(84 + link if low else 132 + link - 6, 0), (164, link),
                   (60 + link if low else 120 + link - 6, 0), (67 + link if low else 126 + link - 6, 0)]
            values = (n.c_nvmlFieldValue_t * 4)()
            for v, (fid, scope) in zip(values, ids, strict=True):
                v.fieldId, v.scopeId = fid, scope
            assert lib.nvmlDeviceGetFieldValues(h, 4, values) == n.NVML_SUCCESS
            state = ctypes.c_uint()
            code = lib.nvmlDeviceGetNvLinkState(h, link, ctypes.byref(state))
            assert (profile == "dgx-a100") is (code == n.NVML_SUCCESS), link
            assert [v.nvmlReturn for v in values] == [code] * 4, link
            if code == n.NVML_SUCCESS:
                assert values[0].value.uiVal == values[1].value.uiVal > 0, link


def test_each_tensor_pipe_is_busy_no_longer_than_any_tensor_pipe(pynvml_module: ModuleType,
                                                                 node_snapshot: Callable[..., NodeSnap]) -> None:
    """nvml.h's GPM metrics: ANY_TENSOR_UTIL (5) is the "Percentage of time the GPU's SMs were doing ANY tensor
    operations", DFMA_TENSOR_UTIL (6), HMMA_TENSOR_UTIL (7) and IMMA_TENSOR_UTIL (9) the time doing DFMA, HMMA and
    IMMA tensor operations, each "0.0 - 100.0". Time doing one kind is time doing some kind, so each of 6, 7, 9 is
    at most 5, and none is above 100: on an H100 whose tensor activity is 90 % (the record's hundredths) and at 0 %,
    where every tensor pipe must then be idle too, while every other activity it records is at 100 %."""
    from tests.nvml.test_pynvml import gpm_request

    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    for activity in (9000, 0):
        busy = dict.fromkeys(("gpm_graphics_activity", "gpm_sm_activity", "gpm_sm_occupancy", "gpm_dram_bw_util",
                              "gpm_fp64_activity", "gpm_fp32_activity", "gpm_fp16_activity"), 10000)
        with board_state(n, snap, 0, gpm_tensor_activity=activity, **busy) as hs:
            code, values = gpm_request(n, hs[0], [5, 6, 7, 9], n.NVML_GPM_METRIC_MAX)
        assert code == n.NVML_SUCCESS
        assert [ret for ret, _ in values] == [n.NVML_SUCCESS] * 4
        any_tensor = values[0][1]
        assert any_tensor == activity / 100
        for metric, (_, value) in zip((6, 7, 9), values[1:], strict=True):
            assert 0.0 <= value <= any_tensor <= 100.0, (activity, metric, value)


# ------------------------------------------------------------------------------------------------ device.c, third round


def test_gpus_of_one_multi_gpu_board_are_on_the_same_board(node_snapshot: Callable[..., NodeSnap],
                                                           pynvml_module: ModuleType) -> None:
    """nvidia-smi(1) (Debian's 555 package), "Board ID": "If two or more GPUs have the same board ID and the above
    "MultiGPU" field is true then the GPUs are on the same board"; nvml.h: nvmlDeviceOnSameBoard answers whether two
    GPUs "are on the same physical board". Every captured board is a single-GPU one (multigpu_board No), so no
    other test holds the multi-GPU rule: gpu0 and gpu1 of a DGX H100 made one dual-GPU board (both MultiGPU, one
    board id) are on the same board in both orders; gpu2, MultiGPU on a board of its own id, is on neither's, and
    gpu3 (single-GPU, as built) on none of theirs."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    dual, other = 0x1B00, 0x4300
    records: dict[int, dict[str, object]] = {0: {"multi_gpu_board": 1, "board_id": dual},
                                             1: {"multi_gpu_board": 1, "board_id": dual},
                                             2: {"multi_gpu_board": 1, "board_id": other}}
    with boards_state(n, snap, records) as hs:
        assert [n.nvmlDeviceGetMultiGpuBoard(h) for h in hs[:3]] == [1, 1, 1]
        assert [n.nvmlDeviceGetBoardId(h) for h in hs[:3]] == [dual, dual, other]
        assert n.nvmlDeviceOnSameBoard(hs[0], hs[1]) and n.nvmlDeviceOnSameBoard(hs[1], hs[0])
        for a, b in ((0, 2), (2, 0), (1, 2), (0, 3)):
            assert not n.nvmlDeviceOnSameBoard(hs[a], hs[b]), (a, b)
        assert n.nvmlDeviceOnSameBoard(hs[2], hs[2])


def test_thermal_settings_of_all_targets_are_the_one_sensor_s(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlDeviceGetThermalSettings' sensorIndex names a sensor, and nvmlThermalTarget_t's
    NVML_THERMAL_TARGET_ALL (15) asks for every sensor at once; the call answers INVALID_ARGUMENT only "if device is
    invalid or pThermalSettings is NULL". A board whose one sensor is the GPU's (count 1, target GPU: what index 0
    answers) gives the same settings whether that sensor or all of them are asked for. No test asked for ALL."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    lib = library()
    answers = []
    for index in (0, 15):
        settings = n.c_nvmlGpuThermalSettings_t()
        assert lib.nvmlDeviceGetThermalSettings(h, index, ctypes.byref(settings)) == n.NVML_SUCCESS, index
        answers.append(bytes(settings))
    assert answers[0] == answers[1]
    assert n.c_nvmlGpuThermalSettings_t.from_buffer_copy(answers[1]).count == 1


def test_the_dram_encryption_inforom_object_of_a_board_without_it_is_not_supported(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h 13.4's nvmlInforomObject_t has four objects, OEM 0, ECC 1, POWER 2 and DEN 3 ("DRAM Encryption
    object", which nvmlDeviceGetDramEncryptionMode "Requires ... version 1.0 or higher"), and
    nvmlDeviceGetInforomVersion answers INVALID_ARGUMENT only "if version is NULL": DEN is a valid object. The
    captured H100 prints DRAM encryption N/A (nvmlDeviceGetDramEncryptionMode NOT_SUPPORTED here too) and its
    pwr_object N/A, the answer of an object the board does not carry: DEN is NOT_SUPPORTED as POWER is, not
    INVALID_ARGUMENT (the shim refused object 3 before)."""
    n = pynvml_module
    nvml("dgx-h100")
    h = handles(n)[0]
    lib = library()
    version = ctypes.create_string_buffer(16)
    assert lib.nvmlDeviceGetInforomVersion(h, 2, version, 16) == n.NVML_ERROR_NOT_SUPPORTED  # pwr_object N/A
    assert lib.nvmlDeviceGetInforomVersion(h, 3, version, 16) == n.NVML_ERROR_NOT_SUPPORTED
    assert lib.nvmlDeviceGetInforomVersion(h, 1, version, 16) == n.NVML_SUCCESS  # ecc_object 7.16
    assert version.value == b"7.16"
    modes = (ctypes.c_uint * 2)(8 | 1 << 24), (ctypes.c_uint * 2)(8 | 1 << 24)  # nvmlDramEncryptionInfo_v1
    assert lib.nvmlDeviceGetDramEncryptionMode(h, modes[0], modes[1]) == n.NVML_ERROR_NOT_SUPPORTED


def test_a_clock_domain_the_board_does_not_report_is_not_supported_by_any_clock_getter(
        node_snapshot: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlDeviceGetClockInfo answers NOT_SUPPORTED "if the device cannot report the specified clock",
    nvmlDeviceGetMaxCustomerBoostClock "if the device or the clockType on this device does not support this feature"
    and nvmlDeviceGetClock "if the device does not support this feature" (nvidia-smi prints N/A): never SUCCESS with
    0 MHz. An H100 record with no video clock at all (current and maximum 0, the record's encoding of a domain the
    board does not report, as in test_pynvml's max-clock test) answers NOT_SUPPORTED through every getter and clock
    id that reads it, while its graphics domain still answers the capture's 1980 MHz (qx-h100.xml max_clocks,
    max_customer_boost_clocks). Only nvmlDeviceGetMaxClockInfo was asked before."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    gpu0 = snap.snapshot.gpus[0]
    video = n.NVML_CLOCK_VIDEO

    def without_video(clocks: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(0 if t == video else mhz for t, mhz in enumerate(clocks))

    fields = {"clocks_current": without_video(gpu0.clocks_current), "clocks_max": without_video(gpu0.clocks_max)}
    with board_state(n, snap, 0, **fields) as hs:
        h = hs[0]
        calls = {"current": partial(n.nvmlDeviceGetClockInfo, h, video),
                 "id current": partial(n.nvmlDeviceGetClock, h, video, n.NVML_CLOCK_ID_CURRENT),
                 "boost": partial(n.nvmlDeviceGetMaxCustomerBoostClock, h, video),
                 "id boost": partial(n.nvmlDeviceGetClock, h, video, n.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX)}
        assert {k: error_of(call) for k, call in calls.items()} == dict.fromkeys(calls, n.NVML_ERROR_NOT_SUPPORTED)
        assert n.nvmlDeviceGetMaxCustomerBoostClock(h, n.NVML_CLOCK_GRAPHICS) == 1980
        assert n.nvmlDeviceGetClock(h, n.NVML_CLOCK_GRAPHICS, n.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX) == 1980


def test_a_temperature_threshold_the_board_does_not_report_is_not_supported(
        node_snapshot: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetTemperatureThreshold: NOT_SUPPORTED "if the device does not have a temperature sensor or
    is unsupported", never SUCCESS with 0 C. The L40S and T4 captures print gpu_temp_max_mem_(tlimit_)threshold N/A,
    which a GpuRecord holds as 0 (snapshot.py: ``mem_max_c or 0``); an H100 record with its memory and GPU maximum
    thresholds at 0 (the same N/A) answers NOT_SUPPORTED for both (NVML_TEMPERATURE_THRESHOLD_MEM_MAX 2, _GPU_MAX
    3), while its shutdown threshold still answers."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    with board_state(n, snap, 0, temp_mem_max=0, temp_gpu_max=0) as hs:
        for threshold in (2, 3):
            assert error_of(partial(n.nvmlDeviceGetTemperatureThreshold, hs[0], threshold)) == \
                n.NVML_ERROR_NOT_SUPPORTED, threshold
        assert n.nvmlDeviceGetTemperatureThreshold(hs[0], 0) > 0
        assert n.nvmlDeviceGetTemperatureThreshold(hs[1], 3) > 0


def test_encoder_and_decoder_utilization_are_sampled_every_sixth_of_a_second(nvml: Nvml,
                                                                             pynvml_module: ModuleType) -> None:
    """nvml.h gives nvmlDeviceGetEncoderUtilization's and nvmlDeviceGetDecoderUtilization's samplingPeriodUs no
    value; a real Tesla V100-SXM2 (driver 418.67) answers [0, 167000] to both, 167 ms, a sixth of a second
    (vsoch/watchme, docs/_docs/watcher-tasks/gpu.md, its pynvml dump), the period gpustat's tests mock for every
    GPU (wookayin/gpustat, gpustat/test_gpustat.py). An idle H100 answers the same period, 0 % busy."""
    n = pynvml_module
    nvml("dgx-h100")
    for h in handles(n)[:2]:
        assert n.nvmlDeviceGetEncoderUtilization(h) == [0, 167000]
        assert n.nvmlDeviceGetDecoderUtilization(h) == [0, 167000]


def test_dynamic_pstates_present_only_the_utilization_domains_nvml_h_defines(nvml: Nvml,
                                                                           pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlGpuDynamicPstatesInfo_t holds NVML_MAX_GPU_UTILIZATIONS (8) entries, each with bIsPresent "Set if
    this utilization domain is present on this GPU", and nvmlGpuUtilizationDomainId_t defines four domains, GPU 0,
    FB 1, VID 2 and BUS 3. Entries 4-7 name no domain, so none is present on any GPU (and the caller's bytes there,
    0xab here, are not left as an answer); 0-3 are, each a percentage of "the last 1-second interval" (0-100);
    flags is "Reserved for future use" (0). Each present domain's thresholds are utilizations (0-100) that "can
    trigger a perf-increasing" and "a perf-decreasing P-State change when crossed": the decreasing one lies below
    the increasing one, or a utilization between them would ask for both changes at once."""
    n = pynvml_module
    nvml("dgx-h100")
    for h in handles(n)[:2]:
        info = n.c_nvmlGpuDynamicPstatesInfo_t()
        ctypes.memset(ctypes.byref(info), 0xAB, ctypes.sizeof(info))
        assert library().nvmlDeviceGetDynamicPstatesInfo(h, ctypes.byref(info)) == n.NVML_SUCCESS
        assert info.flags == 0
        assert [info.utilization[d].bIsPresent for d in range(8)] == [1, 1, 1, 1, 0, 0, 0, 0]
        assert all(0 <= info.utilization[d].percentage <= 100 for d in range(4))
        assert all(0 <= info.utilization[d].decThreshold < info.utilization[d].incThreshold <= 100 for d in range(4))
        absent = [(u.bIsPresent, u.percentage, u.incThreshold, u.decThreshold) for u in info.utilization[4:]]
        assert absent == [(0, 0, 0, 0)] * 4


@pytest.mark.parametrize(("profile", "av1"), [("t4-cloud", False), ("l40s-server", True), ("dgx-a100", None)])
def test_an_idle_encoder_has_its_whole_capacity_for_each_codec_it_encodes(nvml: Nvml, pynvml_module: ModuleType,
                                                                         profile: str, av1: bool | None) -> None:
    """nvml.h, nvmlDeviceGetEncoderCapacity: "the current capacity of the device's encoder, as a percentage of maximum
    encoder capacity", NOT_SUPPORTED "if device does not support the encoder specified in encodeQueryType". With no
    encoder session (nvmlDeviceGetEncoderStats: 0 sessions) nothing of the maximum is taken: 100 for H.264 (0) and
    HEVC (1) on the T4 (Turing) and the L40S (Ada). AV1 (2): NVIDIA's developer blog "Improving Video Quality and
    Performance with AV1 and NVIDIA Ada Lovelace Architecture": Ampere brought AV1 decoding, "Ada Lovelace
    architecture supports both AV1 encoding and decoding", so the L40S encodes AV1 and the T4 does not (the shim
    answered 100 for the T4's AV1 before). The A100 (GA100) has no NVENC at all (NVIDIA's Video Encode and Decode
    GPU Support Matrix lists A100 with 0 NVENC; Wikipedia's NVENC table: GA100 "No NVENC encoders available"):
    every codec is NOT_SUPPORTED there."""
    n = pynvml_module
    nvml(profile)
    h = handles(n)[0]
    if av1 is None:
        for codec in (0, 1, 2):
            assert error_of(partial(n.nvmlDeviceGetEncoderCapacity, h, codec)) == n.NVML_ERROR_NOT_SUPPORTED, codec
        return
    assert n.nvmlDeviceGetEncoderStats(h)[0] == 0
    assert [n.nvmlDeviceGetEncoderCapacity(h, codec) for codec in (0, 1)] == [100, 100]
    if av1:
        assert n.nvmlDeviceGetEncoderCapacity(h, 2) == 100
    else:
        assert error_of(partial(n.nvmlDeviceGetEncoderCapacity, h, 2)) == n.NVML_ERROR_NOT_SUPPORTED


def test_each_video_engine_utilization_getter_reads_its_own_engine(node_snapshot: Callable[..., NodeSnap],
                                                                   pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlDeviceGetEncoderUtilization, ...DecoderUtilization, ...JpgUtilization and ...OfaUtilization each
    answer the "current utilization" of one engine (NVENC, NVDEC, NVJPG, NVOFA), and nvmlDeviceGetSamples'
    NVML_ENC_UTILIZATION_SAMPLES (3) and NVML_DEC_UTILIZATION_SAMPLES (4) sample the first two. Every built-in
    board idles its video engines at 0 %, where any getter could read any engine: an L40S record (it has all four
    engines) with four distinct figures (21, 34, 37, 12 %) answers each through its own getter and sample type."""
    n = pynvml_module
    snap = node_snapshot("l40s-server")
    busy = {"util_encoder": 21, "util_decoder": 34, "util_jpeg": 37, "util_ofa": 12}
    with board_state(n, snap, 0, **busy) as hs:
        h = hs[0]
        answers = [getter(h)[0] for getter in (n.nvmlDeviceGetEncoderUtilization, n.nvmlDeviceGetDecoderUtilization,
                                               n.nvmlDeviceGetJpgUtilization, n.nvmlDeviceGetOfaUtilization)]
        assert answers == [21, 34, 37, 12]
        assert [_sample(n, h, kind) for kind in (3, 4)] == [(n.NVML_SUCCESS, 21), (n.NVML_SUCCESS, 34)]


def test_a_one_fan_card_answers_its_fan_through_the_unindexed_getter(node_snapshot: Callable[..., NodeSnap],
                                                                      pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlDeviceGetFanSpeed gives "the intended operating speed of the device's fan" (no index: the first,
    fan 0, of nvmlDeviceGetFanSpeed_v2's "zero indexed" fans), and an index that is not one of the fans is
    INVALID_ARGUMENT. A single-fan card's record (one fan at 57 %; every capture is passively cooled) answers 57
    without an index and for fan 0, and refuses fan 1; the two-fan test of test_pynvml cannot tell fan 0 from 1."""
    n = pynvml_module
    snap = node_snapshot("edge-pcie")
    with board_state(n, snap, 0, fan_count=1, fan_speed=57) as hs:
        h = hs[0]
        assert n.nvmlDeviceGetNumFans(h) == 1
        assert n.nvmlDeviceGetFanSpeed(h) == n.nvmlDeviceGetFanSpeed_v2(h, 0) == 57
        assert error_of(partial(n.nvmlDeviceGetFanSpeed_v2, h, 1)) == n.NVML_ERROR_INVALID_ARGUMENT


def test_a_gpu_running_without_gsp_firmware_has_no_gsp_version(node_snapshot: Callable[..., NodeSnap],
                                                                 pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetGspFirmwareVersion: NOT_SUPPORTED "if GSP firmware is not enabled for GPU" (nvidia-smi
    prints GSP Firmware Version N/A then). Every capture runs GSP firmware of its driver's version (qx-*.xml
    gsp_firmware_version); a record whose GPU 0 has none (the driver loaded with GSP off) answers NOT_SUPPORTED,
    never a version, while GPU 1 still answers its driver's version."""
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    with board_state(n, snap, 0, gsp_firmware="") as hs:
        buf = ctypes.create_string_buffer(b"\xab" * 64, 64)
        assert library().nvmlDeviceGetGspFirmwareVersion(hs[0], buf) == n.NVML_ERROR_NOT_SUPPORTED
        assert library().nvmlDeviceGetGspFirmwareVersion(hs[1], buf) == n.NVML_SUCCESS
        assert buf.value.decode() == n.nvmlSystemGetDriverVersion()


# ------------------------------------------------------------------------------------------------ device.c, fifth round


def test_enum_values_past_nvml_h_s_enums_are_invalid_arguments_where_the_return_list_is_silent(
        nvml: Nvml, pynvml_module: ModuleType) -> None:
    """Three getters take an enum whose past-the-end value their nvml.h ``@return`` list does not name
    (test_enum_bounds.py leaves them out for that reason), and no test gave them one: tools/c-coverage.py on main
    3878acc listed their refusals as the only lines of device.c never run (:150, :555, :786), so each refusal could
    answer anything. The rule of test_getter_branches.py's docstring applies: the code nvml.h gives the same failure
    elsewhere, else the one nvmlReturn_t's definitions name. nvmlDeviceGetClock's own list answers
    INVALID_ARGUMENT "if ... clockType is invalid", so an invalid clockId (NVML_CLOCK_ID_COUNT) is refused alike;
    an infoROM object past nvmlInforomObject_t (NVML_INFOROM_COUNT) and a sampling type past nvmlSamplingType_t
    (NVML_SAMPLINGTYPE_COUNT) are "a supplied argument [that] is invalid" (INVALID_ARGUMENT), not "an internal
    driver error" (UNKNOWN). Each enum's last member is not refused so (the bound is the enum's end)."""
    n = pynvml_module
    header = references.newest_header().read_text()
    counts = {name: _enum_count(header, name)
              for name in ("NVML_INFOROM_COUNT", "NVML_CLOCK_ID_COUNT", "NVML_SAMPLINGTYPE_COUNT")}
    assert counts == {"NVML_INFOROM_COUNT": 4, "NVML_CLOCK_ID_COUNT": 4, "NVML_SAMPLINGTYPE_COUNT": 10}
    nvml("dgx-h100")
    h = handles(n)[0]
    lib = library()

    def inforom(obj: int) -> int:
        return int(lib.nvmlDeviceGetInforomVersion(h, obj, ctypes.create_string_buffer(16), 16))

    def clock(clock_id: int) -> int:
        return int(lib.nvmlDeviceGetClock(h, n.NVML_CLOCK_GRAPHICS, clock_id, ctypes.byref(ctypes.c_uint())))

    def samples(kind: int) -> int:
        value_type, count = ctypes.c_uint(), ctypes.c_uint(0)
        return int(lib.nvmlDeviceGetSamples(h, kind, ctypes.c_ulonglong(0), ctypes.byref(value_type),
                                            ctypes.byref(count), None))

    for getter, count in ((inforom, counts["NVML_INFOROM_COUNT"]), (clock, counts["NVML_CLOCK_ID_COUNT"]),
                          (samples, counts["NVML_SAMPLINGTYPE_COUNT"])):
        assert getter(count) == n.NVML_ERROR_INVALID_ARGUMENT, getter.__name__
        assert getter(count - 1) != n.NVML_ERROR_INVALID_ARGUMENT, getter.__name__


def test_a_mig_enabled_gpu_samples_power_and_clocks_but_not_the_utilizations_nvml_h_names(
        node_snapshot: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetSamples: "On MIG-enabled GPUs, querying the following sample types,
    NVML_GPU_UTILIZATION_SAMPLES, NVML_MEMORY_UTILIZATION_SAMPLES NVML_ENC_UTILIZATION_SAMPLES and
    NVML_DEC_UTILIZATION_SAMPLES, is not currently supported" (1-4). The note names those four, so the power and
    clock samples (NVML_TOTAL_POWER_SAMPLES 0, NVML_PROCESSOR_CLK_SAMPLES 5, NVML_MEMORY_CLK_SAMPLES 6) are
    still answered: dgx-a100's gpu7 (MIG enabled) answers 0, 5 and 6 (the memory clock sample is the memory clock
    nvmlDeviceGetClockInfo answers) and NOT_SUPPORTED to 1-4; gpu6 (MIG off) answers all seven. Fresh seed 10734's
    surviving device.c:791 (``type <= 4`` made ``<= 5``) refused the processor clock on the MIG GPU."""
    n = pynvml_module
    snap = node_snapshot("dgx-a100")
    with board_state(n, snap, 7) as hs:
        mig, whole = hs[7], hs[6]
        assert n.nvmlDeviceGetMigMode(mig)[0] == n.NVML_DEVICE_MIG_ENABLE
        assert {kind: _sample(n, mig, kind)[0] for kind in range(7)} == {
            0: n.NVML_SUCCESS, 1: n.NVML_ERROR_NOT_SUPPORTED, 2: n.NVML_ERROR_NOT_SUPPORTED,
            3: n.NVML_ERROR_NOT_SUPPORTED, 4: n.NVML_ERROR_NOT_SUPPORTED, 5: n.NVML_SUCCESS, 6: n.NVML_SUCCESS}
        assert _sample(n, mig, 6)[1] == n.nvmlDeviceGetClockInfo(mig, n.NVML_CLOCK_MEM)
        assert {_sample(n, whole, kind)[0] for kind in range(7)} == {n.NVML_SUCCESS}


def test_the_row_remapper_histogram_classifies_every_bank_once_in_nvml_h_s_order(
        node_snapshot: Callable[..., NodeSnap], pynvml_module: ModuleType, h100: dict[str, str]) -> None:
    """nvml.h, nvmlRowRemapperHistogramValues_t: "Possible values that classify the remap availability for each
    bank", in the order max (all reserved rows available), high, partial, low, none (no reserved row left); so the
    five are a partition of the GPU's banks. The real H100 (qx-h100.xml, row_remapper_histogram) has 2560 banks,
    all at max: a clean DGX H100 GPU answers (2560, 0, 0, 0, 0). A record whose banks are spread over all five
    classes (2550, 4, 3, 2, 1: still 2560 banks) answers each class in its own member; the earlier test read only
    max and high, so partial, low and none could answer a neighbour's class (device.c d_remap_hist's indices)."""
    n = pynvml_module
    path = "/remapped_rows/row_remapper_histogram/row_remapper_histogram_"
    captured = tuple(int(h100[path + name].split()[0]) for name in ("max", "high", "partial", "low", "none"))
    assert captured == (2560, 0, 0, 0, 0)
    spread = (2550, 4, 3, 2, 1)
    assert sum(spread) == sum(captured)
    snap = node_snapshot("dgx-h100")
    with board_state(n, snap, 3, remap_histogram=spread) as hs:
        for h, expected in ((hs[0], captured), (hs[3], spread)):
            hist = n.nvmlDeviceGetRowRemapperHistogram(h)
            assert (hist.max, hist.high, hist.partial, hist.low, hist.none) == expected


def test_processes_sharing_a_gpu_share_its_utilization(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlUtilization_t.gpu is the "percent of time over the past sample period during which one or more
    kernels was executing on the GPU", and nvmlDeviceGetProcessUtilization's nvmlProcessUtilizationSample_t gives
    each process's own "SM (3D/Compute) Util Value" and "Frame Buffer Memory Util Value", percentages of that
    period. Two compute processes time-slicing one GPU (no MPS) are each busy for part of the time the GPU was
    busy, so each figure is at most 100 and their sum at most the GPU's own (and likewise for memory); the earlier
    tests ran one process, for which a share of the GPU's utilization multiplied by the process count instead of
    divided (device.c d_proc_util, ``util / n`` made ``util * n``) reads the same."""
    n = pynvml_module
    nvml("dgx-h100", processes=[FakeProcess("gpu3", 7171, 2**30, "trainer", kinds=1, utilization=40),
                                FakeProcess("gpu3", 7272, 2**30, "evaluator", kinds=1, utilization=30)])
    h = handles(n)[3]
    whole = n.nvmlDeviceGetUtilizationRates(h)
    samples = n.nvmlDeviceGetProcessUtilization(h, 0)
    assert sorted(s.pid for s in samples) == [7171, 7272]
    assert whole.gpu > 50  # so that two shares of it, multiplied, could not both stay at or below 100
    for s in samples:
        assert 0 <= s.smUtil <= 100 and 0 <= s.memUtil <= 100, (s.pid, s.smUtil, s.memUtil)
    assert sum(s.smUtil for s in samples) <= whole.gpu
    assert sum(s.memUtil for s in samples) <= whole.memory


def test_affinity_masks_longer_than_the_node_s_cpus_and_nodes_are_zero_past_them(nvml: Nvml,
                                                                                pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetCpuAffinity: "an array of unsigned ints (sized to cpuSetSize) of bitmasks with the ideal
    CPU affinity for the device" (bit k of word w is CPU 64 w + k), and nvmlDeviceGetMemoryAffinity the same of
    NUMA nodes. A GB200 compute tray has two Grace CPUs of 72 cores, CPUs 0-143 (reference hardware.md), and a few
    NUMA nodes, so a caller offering more words than that (20 words: CPUs up to 1279; 8 words: nodes up to 511)
    gets zeros in every word past CPU 143 and past node 63. The earlier tests offered 1 or 4 words, so the shim
    could read past its own masks for a longer array (links.c a_mask's ``bit / 64 < words`` made ``<=``: the
    word after the last one the snapshot holds)."""
    n = pynvml_module
    nvml("gb200-nvl72")
    lib = library()
    for gpu, h in enumerate(handles(n)):
        cpus = (ctypes.c_ulong * 20)(*([0xAB] * 20))
        assert lib.nvmlDeviceGetCpuAffinity(h, 20, cpus) == n.NVML_SUCCESS
        listed = {w * 64 + b for w, word in enumerate(cpus) for b in range(64) if word >> b & 1}
        assert listed == (set(range(72)) if gpu < 2 else set(range(72, 144))), gpu
        nodes = (ctypes.c_ulong * 8)(*([0xAB] * 8))
        assert lib.nvmlDeviceGetMemoryAffinity(h, 8, nodes, n.NVML_AFFINITY_SCOPE_NODE) == n.NVML_SUCCESS
        assert nodes[0] != 0 and list(nodes[1:]) == [0] * 7, (gpu, list(nodes))


def test_an_ampere_encoder_encodes_h264_and_hevc_but_not_av1(node_snapshot: Callable[..., NodeSnap],
                                                              pynvml_module: ModuleType) -> None:
    """NVIDIA's AV1 / Ada Lovelace developer blog (the source of the test above): Ampere brought AV1 *decoding*, and
    Ada is the first architecture that "supports both AV1 encoding and decoding". The built-in boards with NVENC
    are Turing (T4) and Ada (L4, L40S), and Ampere's A100 has none, so no board stood between the two: an Ampere
    board with NVENC (the A10, A40 and RTX A6000 have one; here the L40S's record as such a board,
    nvmlDeviceGetArchitecture NVML_DEVICE_ARCH_AMPERE, 7) answers 100 for H.264 and HEVC and NOT_SUPPORTED for AV1
    (nvml.h: "if device does not support the encoder specified"). device.c d_encoder_capacity's ``architecture <
    8`` made ``< 7`` answered 100 for it."""
    n = pynvml_module
    snap = node_snapshot("l40s-server")
    with board_state(n, snap, 0, architecture=n.NVML_DEVICE_ARCH_AMPERE) as hs:
        h = hs[0]
        assert n.nvmlDeviceGetArchitecture(h) == n.NVML_DEVICE_ARCH_AMPERE == 7
        assert [n.nvmlDeviceGetEncoderCapacity(h, codec) for codec in (0, 1)] == [100, 100]
        assert error_of(partial(n.nvmlDeviceGetEncoderCapacity, h, 2)) == n.NVML_ERROR_NOT_SUPPORTED
        assert n.nvmlDeviceGetEncoderCapacity(hs[1], 2) == 100  # its Ada neighbour still encodes AV1


def test_a_mig_device_is_given_no_peer_to_peer_access(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """NVIDIA's MIG user guide, application considerations: "GPU to GPU P2P (both PCIe and NVLink) is not
    supported" on MIG devices. So a MIG device handle (dgx-a100's gpu7 runs two 3g.40gb MIG devices; its GPUs meet
    over NVSwitch, P2P status OK between whole GPUs) is answered no P2P status OK toward another GPU, for any of
    nvml.h's capability indices (READ, WRITE, NVLINK, ATOMICS, PROP), and no NVLink of it reports
    NVML_NVLINK_CAP_P2P_SUPPORTED or _P2P_ATOMICS: whatever the code (the shim refuses the handle as invalid for
    these physical-GPU calls), never SUCCESS with a P2P answer. links.c's physical-only flag made MIG-allowing (the
    pair getters' ``fhw_enter_dev(c, a, 0)``, nvmlDeviceGetNvLinkCapability's FHW_DEV_CALL) answered the parent's
    OK and 1 for the MIG device."""
    n = pynvml_module
    nvml("dgx-a100")
    hs = handles(n)
    lib = library()
    migs = [n.nvmlDeviceGetMigDeviceHandleByIndex(hs[7], k) for k in range(2)]
    assert n.nvmlDeviceGetP2PStatus(hs[6], hs[0], READ) == n.NVML_P2P_STATUS_OK  # whole GPUs: NVSwitch P2P
    for mig in migs:
        for index in range(5):  # nvml.h: NVML_P2P_CAPS_INDEX_READ 0 ... _PROP 4 (UNKNOWN 5 is no capability)
            status = ctypes.c_uint(n.NVML_P2P_STATUS_OK)
            code = lib.nvmlDeviceGetP2PStatus(mig, hs[0], index, ctypes.byref(status))
            assert not (code == n.NVML_SUCCESS and status.value == n.NVML_P2P_STATUS_OK), index
        for link in range(12):  # an A100 has 12 NVLinks
            for cap in (n.NVML_NVLINK_CAP_P2P_SUPPORTED, n.NVML_NVLINK_CAP_P2P_ATOMICS):
                result = ctypes.c_uint(1)
                code = lib.nvmlDeviceGetNvLinkCapability(mig, link, cap, ctypes.byref(result))
                assert not (code == n.NVML_SUCCESS and result.value == 1), (link, cap)


AFFINITY_INTERPOSER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* FHW_TEST_ONE_CPU: a host with one configured CPU, CPU 0. FHW_TEST_NO_AFFINITY: every affinity request refused as
   sched_setaffinity(2) refuses a mask with no CPU the thread is permitted (a cpuset that shuts them out): EINVAL. */
long sysconf(int name) {
    static long (*real)(int);
    if (!real) real = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
    if (name == _SC_NPROCESSORS_CONF && getenv("FHW_TEST_ONE_CPU")) return 1;
    if (name == _SC_NPROCESSORS_CONF && getenv("FHW_TEST_CPUS")) return atol(getenv("FHW_TEST_CPUS"));
    return real(name);
}

/* FHW_TEST_RECORD=path: the request is written there (pid, then its CPUs) and not made (a host with the model's
   CPUs, where it would succeed). */
int sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *set) {
    static int (*real)(pid_t, size_t, const cpu_set_t *);
    if (!real) real = (int (*)(pid_t, size_t, const cpu_set_t *))dlsym(RTLD_NEXT, "sched_setaffinity");
    if (getenv("FHW_TEST_NO_AFFINITY")) {
        errno = EINVAL;
        return -1;
    }
    if (getenv("FHW_TEST_RECORD")) {
        FILE *f = fopen(getenv("FHW_TEST_RECORD"), "w");
        if (f == NULL) return -1;
        fprintf(f, "%d", (int)pid);
        for (size_t cpu = 0; cpu < size * 8; cpu++)
            if (CPU_ISSET_S(cpu, size, set)) fprintf(f, " %zu", cpu);
        fclose(f);
        return 0;
    }
    return real(pid, size, set);
}
"""

RECORDING_CALLER = """
import ctypes, json, os, sys, pynvml
pynvml.nvmlInit()
lib = ctypes.CDLL("libnvidia-ml.so.1")
record = os.environ["FHW_TEST_RECORD"]

def requested(call, h):
    code = call(h)
    with open(record) as f:
        pid, *cpus = (int(x) for x in f.read().split())
    os.remove(record)
    return [code, pid, cpus]

out = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    words = pynvml.nvmlDeviceGetCpuAffinity(h, 4)
    ideal = [w * 64 + b for w, word in enumerate(words) for b in range(64) if word >> b & 1]
    out.append({"ideal": ideal, "set": requested(lib.nvmlDeviceSetCpuAffinity, h),
                "clear": requested(lib.nvmlDeviceClearCpuAffinity, h)})
print(json.dumps(out))
"""

AFFINITY_CALLER = """
import ctypes, json, os, pynvml
pynvml.nvmlInit()
lib = ctypes.CDLL("libnvidia-ml.so.1")
out = {}
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    before = sorted(os.sched_getaffinity(0))
    cpus = pynvml.nvmlDeviceGetCpuAffinity(h, 4)
    code = lib.nvmlDeviceSetCpuAffinity(h)
    out[i] = {"cpu0": bool(cpus[0] & 1), "any": any(cpus), "set": code, "before": before,
              "after": sorted(os.sched_getaffinity(0)), "clear": lib.nvmlDeviceClearCpuAffinity(h),
              "cleared": sorted(os.sched_getaffinity(0))}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def affinity_interposer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_preload(tmp_path_factory.mktemp("affinity"), "affinity", AFFINITY_INTERPOSER)


def test_a_gpu_whose_cpus_the_thread_cannot_run_on_is_an_unexpected_error_not_unsupported(
        node_snapshot: Callable[..., NodeSnap], affinity_interposer: Path) -> None:
    """nvml.h, nvmlDeviceSetCpuAffinity: NOT_SUPPORTED "if the device does not support this feature", UNKNOWN "on any
    unexpected error" (and nvmlDeviceClearCpuAffinity lists UNKNOWN alone, no OPERATING_SYSTEM). A GPU whose
    nvmlDeviceGetCpuAffinity answers a set supports the feature, so a binding that fails because none of those CPUs
    is one the thread may run on here (sched_setaffinity(2): EINVAL, "The affinity bit mask mask contains no
    processors that are currently physically on the system and permitted to the thread") is an unexpected error, as
    a real NVML answered it in a container ("nvmlDeviceSetCpuAffinity() failed: Unknown Error", NVIDIA/nccl-tests#10),
    and the thread's affinity is left as it was. Made deterministic by an LD_PRELOAD interposer: a host with CPU 0
    only, where dgx-h100's GPUs of socket 1 (CPU 0 not among their CPUs) have none of their CPUs, while the binding
    of a GPU of socket 0 still takes CPU 0; then every sched_setaffinity refused, as a cpuset shutting the GPU's CPUs
    out refuses it. links.c:351 (the shim's own NOT_SUPPORTED for "the model's CPUs do not exist on this host", open
    since the fifth C round with its mutant to UNKNOWN) was the fake's choice against nvml.h: the fake is fixed."""
    snap = node_snapshot("dgx-h100")
    one = run_python(AFFINITY_CALLER, snap.path, LD_PRELOAD=str(affinity_interposer), FHW_TEST_ONE_CPU="1")
    unknown = 999  # nvml.h: NVML_ERROR_UNKNOWN
    assert all(gpu["any"] for gpu in one.values()), one
    assert {gpu["cpu0"] for gpu in one.values()} == {True, False}, one  # both sockets' GPUs
    for gpu in one.values():
        expected = (0, [0]) if gpu["cpu0"] else (unknown, gpu["before"])
        assert (gpu["set"], gpu["after"]) == expected, one
    refused = run_python(AFFINITY_CALLER, snap.path, LD_PRELOAD=str(affinity_interposer), FHW_TEST_NO_AFFINITY="1")
    for gpu in refused.values():
        assert (gpu["set"], gpu["after"], gpu["clear"], gpu["cleared"]) == \
            (unknown, gpu["before"], unknown, gpu["before"]), refused


def test_set_cpu_affinity_asks_for_exactly_the_cpus_get_cpu_affinity_answers(
        node_snapshot: Callable[..., NodeSnap], affinity_interposer: Path, tmp_path: Path) -> None:
    """nvml.h, nvmlDeviceSetCpuAffinity: "Sets the ideal affinity for the calling thread and device using the
    guidelines given in nvmlDeviceGetCpuAffinity()", and nvmlDeviceClearCpuAffinity: "Clear all affinity bindings
    for the calling thread". On a host that has the model's CPUs (an LD_PRELOAD interposer: 256 CPUs configured,
    sched_setaffinity(2) recorded rather than made, as it would succeed there) every dgx-h100 GPU's request is for
    the calling thread (pid 0) and exactly the CPUs nvmlDeviceGetCpuAffinity answers for it (two sockets of 112
    CPUs each, so CPUs 63 and 64, 127 and 128 sit inside the sets), and clearing asks for all 256; with 100 CPUs
    configured, the GPUs' CPUs below 100 and all 100 (the shim pins only to CPUs the host has). This host has 2
    CPUs, where sched_setaffinity keeps only the CPUs that exist: a set built with the wrong bit for CPU 63 or past
    a word (fresh C seed 10625's `cpu % 63`, recorded equivalent then, and the loop's bounds) pins the same 2 CPUs, so
    only the request itself tells them apart."""
    snap = node_snapshot("dgx-h100")
    record = tmp_path / "request"
    for cpus in (256, 100):  # 100: a host with only the CPUs below one the GPUs' sets hold, which keeps those
        got = run_python(RECORDING_CALLER, snap.path, LD_PRELOAD=str(affinity_interposer), FHW_TEST_CPUS=str(cpus),
                         FHW_TEST_RECORD=str(record))
        assert len(got) == 8
        assert any({63, 64, 99, 100} <= set(gpu["ideal"]) for gpu in got), got
        for gpu in got:
            assert gpu["set"] == [0, 0, [cpu for cpu in gpu["ideal"] if cpu < cpus]], (cpus, gpu)
            assert gpu["clear"] == [0, 0, list(range(cpus))], (cpus, gpu)
