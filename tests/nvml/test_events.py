"""The event API in-process: supported types, registration, wait v1 (24-byte data) and v2, timeouts, free.

Events reach a running process through the snapshot's event ring; here the test writes the new snapshot itself
(as the agent's renderer does) and the wait, already blocked, returns it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fakehw.agent.state import EVENT_DOUBLE_BIT_ECC, EVENT_SINGLE_BIT_ECC, EVENT_XID
from tests.nvml.helpers import NodeSnap, build_preload, run_python, snapshot_env, with_driver, write_node


class EventDataV1(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("eventType", ctypes.c_ulonglong), ("eventData", ctypes.c_ulonglong)]


class EventDataV2(ctypes.Structure):
    _fields_ = [*EventDataV1._fields_, ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


def test_supported_types_and_registration(nvml: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    n = pynvml_module
    nvml("dgx-a100")
    h = n.nvmlDeviceGetHandleByIndex(0)
    supported = n.nvmlDeviceGetSupportedEventTypes(h)
    for bit in (EVENT_SINGLE_BIT_ECC, EVENT_DOUBLE_BIT_ECC, EVENT_XID, n.nvmlEventTypeClock, n.nvmlEventTypePState):
        assert supported & bit
    assert supported & n.nvmlEventMigConfigChange  # A100s are MIG capable
    s = n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(h, supported, s)
    try:
        n.nvmlDeviceRegisterEvents(h, 1 << 40, s)
        raise AssertionError("an unsupported event type was accepted")
    except n.NVMLError_NotSupported:
        pass
    # The wait honours its timeout: not shorter, and nowhere near a wait of a second for 50 ms (the bound leaves
    # a loaded 2-core machine 0.45 s of scheduling slack and still fails a wait that ignores the timeout).
    for timeout_ms in (50, 200):
        t0 = time.monotonic()
        try:
            n.nvmlEventSetWait(s, timeout_ms)
            raise AssertionError("an event came from nowhere")
        except n.NVMLError_Timeout:
            waited = time.monotonic() - t0
        assert timeout_ms / 1000 - 0.005 <= waited < timeout_ms / 1000 + 0.45, waited
    n.nvmlEventSetFree(s)


def test_supported_event_types_into_null_is_an_invalid_argument(nvml: Callable[..., NodeSnap],
                                                                pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceGetSupportedEventTypes: NVML_ERROR_INVALID_ARGUMENT "if \\a eventType is NULL" (the
    comment names the parameter eventTypes without its s, so the header-driven sweep of NULL outputs,
    test_documented_argument_errors.py, passes it by; fresh seed 10713's events.c:90 answered UNKNOWN)."""
    n = pynvml_module
    nvml("dgx-a100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    for h in (n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(7)):
        assert lib.nvmlDeviceGetSupportedEventTypes(h, None) == n.NVML_ERROR_INVALID_ARGUMENT


def test_a_wait_that_is_not_a_whole_number_of_poll_steps_ends_at_its_timeout(nvml: Callable[..., NodeSnap],
                                                                             pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlEventSetWait_v2: "waits ... but not longer than specified timeout". The shim waits in steps of at
    most 100 ms (csrc/events.c POLL_CAP_MS) so that it notices a snapshot replaced under it; its last step must be
    what is left of the timeout, not a whole step, and no wait answers TIMEOUT before its timeout. A quiet 101 ms
    wait then ends at 101 ms or a little later, where a step counted from the wrong end ends it at 200 ms or, when the
    first look took a millisecond, at 100 (fresh seed 10625's events.c:200, ``timeoutms - elapsed`` -> ``+``: seen
    giving 0.200, 0.100, 0.200 s). It also found the shim counting whole milliseconds of the seconds and of the
    nanoseconds apart, so a negative nanosecond part rounded up and about one wait in three answered TIMEOUT at
    100.4 ms (fixed). The fastest of three waits is judged, so a loaded machine's one slow wake does not decide."""
    n = pynvml_module
    nvml("dgx-h100")
    s = n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(0), EVENT_XID, s)
    waits = []
    try:
        for _ in range(3):
            t0 = time.monotonic()
            with pytest.raises(n.NVMLError_Timeout):
                n.nvmlEventSetWait_v2(s, 101)
            waits.append(time.monotonic() - t0)
    finally:
        n.nvmlEventSetFree(s)
    assert 0.101 <= min(waits) < 0.16, waits


def _event_set(lib: ctypes.CDLL, handles: list[Any], mask: int = EVENT_XID | EVENT_DOUBLE_BIT_ECC) -> ctypes.c_void_p:
    """A new event set (nvmlEventSetCreate) with ``mask`` registered on each of ``handles``, both calls succeeding."""
    s = ctypes.c_void_p()
    assert lib.nvmlEventSetCreate(ctypes.byref(s)) == 0
    for h in handles:
        assert lib.nvmlDeviceRegisterEvents(h, ctypes.c_ulonglong(mask), s) == 0
    return s


def test_wait_v1_and_v2_layouts_deliver_a_live_event(nvml: Callable[..., NodeSnap],
                                                    pynvml_module: ModuleType) -> None:
    n = pynvml_module
    snap = nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    hs = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    s = _event_set(lib, hs)
    results: dict[str, object] = {}

    def wait() -> None:
        buf = (ctypes.c_ubyte * 64)(*([0xAB] * 64))
        results["rc"] = lib.nvmlEventSetWait(s, buf, 10000)  # v1: 24 bytes
        results["v1"] = bytes(buf)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.2)
    faults = [{"kind": "ecc", "device": "gpu6", "type": "dbe", "count": 1}]
    write_node(snap.path, "dgx-h100", faults=faults, generation=2, first_seq=100)
    t.join(15)
    assert results["rc"] == 0
    raw = results["v1"]
    assert isinstance(raw, bytes)
    v1 = EventDataV1.from_buffer_copy(raw)
    assert v1.device == ctypes.cast(hs[6], ctypes.c_void_p).value
    assert (v1.eventType, v1.eventData) == (EVENT_DOUBLE_BIT_ECC, 0)
    assert raw[ctypes.sizeof(EventDataV1):] == b"\xab" * (64 - ctypes.sizeof(EventDataV1))
    v2 = EventDataV2()
    assert lib.nvmlEventSetWait_v2(s, ctypes.byref(v2), 1000) == 0  # the Xid 48 that came with it
    assert (v2.eventType, v2.eventData) == (EVENT_XID, 48)
    assert (v2.gpuInstanceId, v2.computeInstanceId) == (0xFFFFFFFF, 0xFFFFFFFF)
    assert lib.nvmlEventSetWait_v2(s, ctypes.byref(v2), 10) == n.NVML_ERROR_TIMEOUT
    assert lib.nvmlEventSetFree(s) == 0



def assert_nothing_delivered(n: ModuleType, event_set: object, what: str) -> None:
    """The set's wait times out (20 ms: nothing is pending); the set is freed either way."""
    try:
        n.nvmlEventSetWait(event_set, 20)
        raise AssertionError(what)
    except n.NVMLError_Timeout:
        pass
    finally:
        n.nvmlEventSetFree(event_set)

def test_events_before_registration_are_not_delivered(nvml: Callable[..., NodeSnap],
                                                      pynvml_module: ModuleType) -> None:
    n = pynvml_module
    snap = nvml("edge-pcie", faults=[{"kind": "xid", "device": "gpu0", "code": 43}])
    assert snap.snapshot.events  # the ring holds the old event
    s = n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(0), EVENT_XID, s)
    assert_nothing_delivered(n, s, "an event from before the registration was delivered")


def test_a_lost_gpu_the_set_never_registered_does_not_end_its_wait(nvml: Callable[..., NodeSnap],
                                                                  pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlEventSetWait_v2: "If any of the GPUs registered with the event set falls off the bus,
    NVML_ERROR_GPU_IS_LOST will be returned". A set registered for gpu0 only keeps waiting (and times out) when
    gpu1, which it never registered, falls off the bus (Xid 79); a set that registered gpu1 gets GPU_IS_LOST."""
    n = pynvml_module
    snap = nvml("edge-pcie")
    only_gpu0, with_gpu1 = n.nvmlEventSetCreate(), n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(0), EVENT_XID, only_gpu0)
    n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(1), EVENT_XID, with_gpu1)
    write_node(snap.path, "edge-pcie", faults=[{"kind": "xid", "device": "gpu1", "code": 79}], generation=2,
               first_seq=100)
    try:
        with pytest.raises(n.NVMLError_GpuIsLost):  # the set registered for gpu1 is told it is lost
            n.nvmlEventSetWait(with_gpu1, 1000)  # the Xid 79 itself, then the loss
            n.nvmlEventSetWait(with_gpu1, 1000)
    finally:
        n.nvmlEventSetFree(with_gpu1)
    assert_nothing_delivered(n, only_gpu0, "gpu1's loss ended the wait of a set that never registered it")


def test_a_device_registered_late_gets_none_of_its_earlier_events(nvml: Callable[..., NodeSnap],
                                                                  pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceRegisterEvents: "Starts recording of events on a specified device". A set already waiting
    on gpu0 sees an Xid land on gpu1, and only then registers gpu1: that Xid happened before gpu1's recording
    started, so the set has nothing to deliver (the newest event at registration is the one most easily let in)."""
    n = pynvml_module
    snap = nvml("edge-pcie")
    s = n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(0), EVENT_XID, s)
    write_node(snap.path, "edge-pcie", faults=[{"kind": "xid", "device": "gpu1", "code": 43}], generation=2,
               first_seq=100)
    n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(1), EVENT_XID, s)
    assert_nothing_delivered(n, s, "gpu1's Xid from before its registration was delivered")


def test_registering_a_further_type_keeps_the_events_recorded_since_the_first(nvml: Callable[..., NodeSnap],
                                                                             pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceRegisterEvents: "Starts recording of events on a specified device"; "eventTypes" is "Bitmask
    of Event Types to record", and a set collects the types of every call. Recording of gpu0's Xids starts with the
    first call; an Xid 43 that lands after it is recorded, and a second call adding single-bit ECC errors for the
    same device does not unrecord it: the wait delivers the Xid 43 (a registration that restarted gpu0's recording
    would drop it, as the late registration of another device rightly does)."""
    n = pynvml_module
    snap = nvml("edge-pcie")
    s = n.nvmlEventSetCreate()
    h = n.nvmlDeviceGetHandleByIndex(0)
    n.nvmlDeviceRegisterEvents(h, EVENT_XID, s)
    try:
        write_node(snap.path, "edge-pcie", faults=[{"kind": "xid", "device": "gpu0", "code": 43}], generation=2,
                   first_seq=100)
        n.nvmlDeviceRegisterEvents(h, EVENT_SINGLE_BIT_ECC, s)
        data = n.nvmlEventSetWait(s, 5000)
        assert (data.eventType, data.eventData) == (EVENT_XID, 43)
    finally:
        n.nvmlEventSetFree(s)


def test_the_first_event_of_a_nodes_life_reaches_a_set_registered_before_it(nvml: Callable[..., NodeSnap],
                                                                           pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlDeviceRegisterEvents: "Starts recording of events on a specified device". A set registered on a
    node that has had no event yet must get the node's very first one, which the agent numbers 1 (its sequence
    starts at 0 and counts up before each event): an Xid 43 (GPU stopped processing, NVIDIA's Xid catalog) written
    after the registration comes out of the wait with its code."""
    n = pynvml_module
    snap = nvml("edge-pcie")
    assert snap.snapshot.events == ()
    s = n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(0), EVENT_XID, s)
    try:
        later = write_node(snap.path, "edge-pcie", faults=[{"kind": "xid", "device": "gpu0", "code": 43}],
                           generation=2, first_seq=0)
        assert [e.seq for e in later.events] == [1]
        data = n.nvmlEventSetWait(s, 5000)
        assert (data.eventType, data.eventData) == (EVENT_XID, 43)
    finally:
        n.nvmlEventSetFree(s)


def test_a_single_bit_error_is_delivered_as_one_and_a_link_going_down_as_its_xid(
        nvml: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """nvml.h's event types: a correctable (single-bit) ECC error is nvmlEventTypeSingleBitEccError (0x1); a link
    going down has no event type of its own and reaches a set as Xid 74 (NVLink error, NVIDIA's Xid catalog). A set
    registered for both on an H100 gets the SBE with no data (nvml.h: eventData is only the Xid's code) and then
    the Xid 74, in that order."""
    n = pynvml_module
    snap = nvml("dgx-h100")
    s = n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(3), EVENT_SINGLE_BIT_ECC | EVENT_XID, s)
    try:
        write_node(snap.path, "dgx-h100", generation=2, first_seq=10,
                   faults=[{"kind": "ecc", "device": "gpu3", "type": "sbe", "count": 2, "location": "l2-cache"},
                           {"kind": "nvlink-down", "device": "gpu3", "link": 0}])
        first, second = n.nvmlEventSetWait(s, 5000), n.nvmlEventSetWait(s, 5000)
        assert (first.eventType, first.eventData) == (EVENT_SINGLE_BIT_ECC, 0)
        assert (second.eventType, second.eventData) == (EVENT_XID, 74)
    finally:
        n.nvmlEventSetFree(s)


def test_events_without_an_nvml_type_take_no_place_in_the_ring(nvml: Callable[..., NodeSnap],
                                                               pynvml_module: ModuleType) -> None:
    """A link going down raises an event of the agent's own (``nvlink-down``) with no NVML event type, beside the
    Xid 74 an NVML client gets (fakehw/agent/state.py). The snapshot's ring holds the node's last 256 events for the
    event API: 100 Xids followed by 200 events NVML has no type for must still reach a set registered before them,
    all 100, in order, with none of the others in their place."""
    from fakehw.agent.state import Event
    from fakehw.nvml.snapfile import write_snapshot
    from fakehw.nvml.snapshot import build_snapshot
    from tests.nvml.helpers import faults_state

    n = pynvml_module
    snap = nvml("edge-pcie")
    s = n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(0), EVENT_XID, s)
    try:
        node = snap.node.name
        xids = [Event(seq, 1000.0 + seq, node, "gpu0", "xid", 100 + seq, EVENT_XID) for seq in range(1, 101)]
        untyped = [Event(seq, 1000.0 + seq, node, "gpu0", "nvlink-down", 0, 0) for seq in range(101, 301)]
        state, _ = faults_state(snap.node, [], snap.system.seed, generation=2)
        write_snapshot(snap.path, build_snapshot(snap.system, snap.node, state, (*xids, *untyped)).to_bytes())
        got = [n.nvmlEventSetWait(s, 5000) for _ in xids]
        assert [(d.eventType, d.eventData) for d in got] == [(EVENT_XID, 100 + seq) for seq in range(1, 101)]
    finally:
        n.nvmlEventSetFree(s)


class EventSetWaitV3(ctypes.Structure):
    """nvml.h's nvmlEventSetWait_v3_t (615 and later)."""

    _fields_ = [("timeoutMs", ctypes.c_uint), ("dataType", ctypes.c_uint), ("uuid", ctypes.c_char * 96),
                ("sourceModule", ctypes.c_char * 16), ("eventType", ctypes.c_ulonglong),
                ("eventData", ctypes.c_ulonglong), ("groupCursor", ctypes.c_ulonglong),
                ("instanceId", ctypes.c_ulonglong), ("timestampUsec", ctypes.c_ulonglong),
                ("traceId", ctypes.c_ulonglong),
                *((name, ctypes.c_uint) for name in ("gpuInstanceId", "computeInstanceId", "severity", "categoryId",
                                                     "moduleEventCode", "scope", "originator", "moduleInstance",
                                                     "chipletId", "logLevel", "attributes", "groupCperSize",
                                                     "groupAttributes")),
                ("groupSize", ctypes.c_ubyte), ("groupIndex", ctypes.c_ubyte)]


def _wait_v3_for_a_dbe(nvml: Callable[..., NodeSnap], n: ModuleType, tmp_path: Path,
                       gpu: int) -> tuple[int, EventSetWaitV3, NodeSnap, NodeSnap]:
    """A set registered for double-bit ECC errors on GPU ``gpu`` of a 615 DGX H100, one raised on it afterwards (at
    1000.0 s of the epoch), and ``nvmlEventSetWait_v3`` asked for it with a 10000 ms timeout: (its return code,
    the filled parameters, the node as loaded, the node as written with the fault)."""
    profile = str(with_driver(tmp_path / "profile", "dgx-h100", "615.10.01"))
    snap = nvml(profile)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    s = _event_set(lib, [n.nvmlDeviceGetHandleByIndex(gpu)], EVENT_DOUBLE_BIT_ECC)
    written = write_node(snap.path, profile, faults=[{"kind": "ecc", "device": f"gpu{gpu}", "type": "dbe",
                                                      "count": 1}], generation=2, first_seq=100)
    params = EventSetWaitV3(timeoutMs=10000)
    rc = lib.nvmlEventSetWait_v3(s, ctypes.byref(params))
    assert lib.nvmlEventSetFree(s) == 0
    return rc, params, snap, written


def test_wait_v3_stamps_an_event_with_the_time_it_happened_in_microseconds(nvml: Callable[..., NodeSnap],
                                                                         pynvml_module: ModuleType,
                                                                         tmp_path: Path) -> None:
    """nvml.h (615), nvmlEventSetWait_v3_t.timestampUsec: "Event timestamp in microseconds" (of the Unix epoch, as
    nvmlSample_t's CPU timestamps are), and the GPU is named by its UUID. A double-bit ECC error raised on gpu6
    after the set was registered reaches it stamped with the time the fault was raised, in microseconds (the
    helper raises it at 1000.0 s of the epoch, long before the wait reads it: the shim used to answer the time of
    the wait), with gpu6's UUID (the profile's)."""
    rc, params, snap, written = _wait_v3_for_a_dbe(nvml, pynvml_module, tmp_path, 6)
    assert rc == 0
    assert (params.eventType, params.uuid.decode()) == (EVENT_DOUBLE_BIT_ECC, snap.node.gpus[6].uuid)
    assert {e.time for e in written.events} == {1000.0}  # the ECC error and its Xid 48
    assert params.timestampUsec == 1_000_000_000


@pytest.mark.parametrize("time_us", [0, 1])
def test_wait_v3_answers_0_for_an_event_whose_time_is_unavailable(nvml: Callable[..., NodeSnap],
                                                                  pynvml_module: ModuleType, tmp_path: Path,
                                                                  time_us: int) -> None:
    """nvml.h (615), nvmlEventSetWait_v3_t.timestampUsec: "Event timestamp in microseconds. 0 if unavailable." A
    snapshot's event record with no time (``time_us`` 0, the format's default: docs/nvml.md) is an event whose time
    is unavailable, so the wait delivers it stamped 0; one stamped 1 us after the epoch has a time, and is delivered
    with it, 1. (The agent stamps every event it raises, so only a hand-written ring has an event without a time:
    seeds 10651 and 10682's open events.c:140.) The event is on gpu0, whose UUID names it as any other GPU's does
    (the other v3 tests wait on gpu6 and gpu2: visible index 0 was never asked)."""
    import dataclasses

    from fakehw.nvml.snapfile import write_snapshot

    n = pynvml_module
    profile = str(with_driver(tmp_path / "profile", "dgx-h100", "615.10.01"))
    snap = nvml(profile)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    s = _event_set(lib, [n.nvmlDeviceGetHandleByIndex(0)], EVENT_DOUBLE_BIT_ECC)
    staged = tmp_path / "staged" / "nvml.snapshot"
    written = write_node(staged, profile, faults=[{"kind": "ecc", "device": "gpu0", "type": "dbe", "count": 1}],
                         generation=2, first_seq=100)
    assert written.snapshot.events
    events = tuple(dataclasses.replace(e, time_us=time_us) for e in written.snapshot.events)
    write_snapshot(snap.path, dataclasses.replace(written.snapshot, events=events).to_bytes())
    params = EventSetWaitV3(timeoutMs=10000, timestampUsec=12345)
    assert lib.nvmlEventSetWait_v3(s, ctypes.byref(params)) == 0
    assert lib.nvmlEventSetFree(s) == 0
    assert (params.eventType, params.uuid.decode()) == (EVENT_DOUBLE_BIT_ECC, snap.node.gpus[0].uuid)
    assert params.timestampUsec == time_us


def test_wait_v3_keeps_the_callers_timeout_and_answers_in_the_event_bit_format(nvml: Callable[..., NodeSnap],
                                                                             pynvml_module: ModuleType,
                                                                             tmp_path: Path) -> None:
    """nvml.h (615), nvmlEventSetWait_v3: params is "[in,out] Wait parameters and returned event data", and in
    nvmlEventSetWait_v3_t timeoutMs is the one "[in]" field ("Maximum amount of time to wait"); every other field is
    "[out]". An event of nvmlDeviceRegisterEvents comes back with dataType NVML_EVENT_DATA_TYPE_NVML_EVENT (0), its
    event bit, and gpuInstanceId / computeInstanceId NVML_GPU_INSTANCE_ID_ANY / NVML_COMPUTE_INSTANCE_ID_ANY
    (0xFFFFFFFF) "when not applicable" (a GPU without MIG). After delivering a double-bit ECC error raised on gpu2,
    the caller's timeout is still the 10000 ms it asked for, so the same request can wait again."""
    rc, params, snap, _ = _wait_v3_for_a_dbe(nvml, pynvml_module, tmp_path, 2)
    assert rc == 0
    assert params.timeoutMs == 10000
    assert (params.dataType, params.eventType, params.uuid.decode()) == (0, EVENT_DOUBLE_BIT_ECC,
                                                                         snap.node.gpus[2].uuid)
    assert (params.gpuInstanceId, params.computeInstanceId) == (0xFFFFFFFF, 0xFFFFFFFF)


def inotify_descriptors() -> int:
    """How many inotify instances this process holds (/proc/self/fd links read "anon_inode:inotify")."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor, closed by now
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
    return count


@contextlib.contextmanager
def gpu6_dbe_written_during_a_wait(lib: ctypes.CDLL, event_set: ctypes.c_void_p, snapshot: Path) -> Iterator[None]:
    """A thread waits (up to 10 s) on ``event_set``; the body runs 0.2 s into the wait, while it sleeps; then a
    double-bit error on gpu6 is written to the dgx-h100 ``snapshot`` and the wait must return it."""
    got: dict[str, int] = {}

    def wait() -> None:
        data = EventDataV2()
        got["rc"] = lib.nvmlEventSetWait_v2(event_set, ctypes.byref(data), 10000)
        got["type"] = data.eventType

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.2)
    yield
    write_node(snapshot, "dgx-h100", faults=[{"kind": "ecc", "device": "gpu6", "type": "dbe", "count": 1}],
               generation=2, first_seq=100)
    t.join(15)
    assert got == {"rc": 0, "type": EVENT_DOUBLE_BIT_ECC}


def test_a_wait_on_a_snapshot_named_relative_to_the_working_directory_is_woken_by_its_writer(
        pynvml_module: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FAKEHW_NVML_SNAPSHOT may name the file relative to the working directory, as any path (POSIX path
    resolution: a pathname without a slash names an entry of the current directory); then the directory the wait
    watches is the working directory (docs/nvml.md: the wait "sleeps on inotify on the snapshot's directory ... until
    the timeout"). A wait blocked on such a snapshot gets the double-bit error written 0.2 s later, as the absolute
    path's wait does in test_wait_v1_and_v2_layouts_deliver_a_live_event, with its Xid 48 after it; while it waits
    the process holds one inotify instance more than before (the watch the document names, not a poll)."""
    n = pynvml_module
    snap = write_node(tmp_path / "nvml.snapshot", "dgx-h100")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAKEHW_NVML_SNAPSHOT", "nvml.snapshot")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    n.nvmlInit()
    try:
        s = _event_set(lib, [n.nvmlDeviceGetHandleByIndex(6)])
        watches = inotify_descriptors()
        with gpu6_dbe_written_during_a_wait(lib, s, snap.path):
            watching = inotify_descriptors()
        assert watching == watches + 1
        v2 = EventDataV2()
        assert lib.nvmlEventSetWait_v2(s, ctypes.byref(v2), 1000) == 0
        assert (v2.eventType, v2.eventData) == (EVENT_XID, 48)
        assert lib.nvmlEventSetFree(s) == 0
    finally:
        n.nvmlShutdown()


IN_CLOSE_WRITE, IN_MOVED_TO = 0x8, 0x80
"""inotify(7) (<sys/inotify.h>): "File opened for writing was closed", "Generated for the directory containing the new
filename when a file is renamed"."""


def inotify_watches() -> set[tuple[int, int, int, int]]:
    """Every watch of this process's inotify instances as (inode, major, minor, mask) of the watched object. proc(5),
    /proc/pid/fdinfo: an inotify descriptor has a line per watch, "inotify wd:%x ino:%lx sdev:%x mask:%x ...", the
    inode and the kernel's device number (major in the bits above 20, linux/kdev_t.h MINORBITS) in hexadecimal."""
    watches = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor, closed by now
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
                if line.startswith("inotify "):
                    field = dict(word.split(":", 1) for word in line.split()[1:])
                    sdev = int(field["sdev"], 16)
                    watches.add((int(field["ino"], 16), sdev >> 20, sdev & (1 << 20) - 1, int(field["mask"], 16)))
    return watches


def test_a_wait_watches_the_snapshot_s_own_directory_for_the_writer_s_close_and_rename(
        pynvml_module: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/nvml.md, Events: a wait with nothing to deliver "sleeps on inotify on the snapshot's directory (the
    writer's close after an update in place, or the rename of a new file, wakes it)". A wait blocked on a snapshot
    named by an absolute path, from a process whose working directory is another, holds one new watch: on the
    snapshot's directory (its inode and device, as stat(2) gives them), for IN_CLOSE_WRITE and IN_MOVED_TO at least;
    and the double-bit error written then reaches it. (A watch of the working directory, or one missing either
    event, still delivers at the wait's next 100 ms look, so only the watch itself tells.)"""
    n = pynvml_module
    snap = write_node(tmp_path / "node" / "nvml.snapshot", "dgx-h100")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    with snapshot_env(snap.path):
        n.nvmlInit()
    try:
        s = _event_set(lib, [n.nvmlDeviceGetHandleByIndex(6)])
        before = inotify_watches()
        with gpu6_dbe_written_during_a_wait(lib, s, snap.path):
            new = inotify_watches() - before
        d = snap.path.parent.stat()
        assert [w[:3] for w in new] == [(d.st_ino, os.major(d.st_dev), os.minor(d.st_dev))], new
        assert all(w[3] & IN_CLOSE_WRITE and w[3] & IN_MOVED_TO for w in new), new
        assert lib.nvmlEventSetFree(s) == 0
    finally:
        n.nvmlShutdown()


def test_a_freed_event_set_keeps_no_inotify_instance(nvml: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """nvml.h, nvmlEventSetFree: "Releases events in the set". The inotify instance a set's wait opened on the
    snapshot's directory (docs/nvml.md: the wait "sleeps on inotify on the snapshot's directory") is the set's own,
    so freeing the set releases it: after a wait that timed out (50 ms) the process holds one inotify instance more
    than before the set was made, and after the free as many as before (fresh seed 10713's events.c:82 kept it
    open: one descriptor lost per set a program frees)."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    before = inotify_descriptors()
    s = _event_set(lib, [n.nvmlDeviceGetHandleByIndex(0)])
    data = EventDataV2()
    assert lib.nvmlEventSetWait_v2(s, ctypes.byref(data), 50) == n.NVML_ERROR_TIMEOUT
    assert inotify_descriptors() == before + 1
    assert lib.nvmlEventSetFree(s) == n.NVML_SUCCESS
    assert inotify_descriptors() == before


GPU6_EVENT_SET = """
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
h, s = ctypes.c_void_p(), ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(6, ctypes.byref(h)) == 0
assert lib.nvmlEventSetCreate(ctypes.byref(s)) == 0
assert lib.nvmlDeviceRegisterEvents(h, ctypes.c_ulonglong(EVENT_TYPES), s) == 0
"""
"""The start of the scripts below (after their imports): the library, and a set holding gpu6 for EVENT_TYPES."""

WAITS_WITHOUT_STDIN = r"""
import contextlib, ctypes, json, os
""" + GPU6_EVENT_SET + r"""
with contextlib.suppress(OSError):
    os.close(0)


def instances():
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                lines = open(f"/proc/self/fdinfo/{fd}").read().splitlines()
                found[fd] = [int(dict(w.split(":", 1) for w in ln.split()[1:])["ino"], 16)
                             for ln in lines if ln.startswith("inotify ")]
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            pass
    return found


data = (ctypes.c_ulonglong * 4)()
rcs = [lib.nvmlEventSetWait_v2(s, data, 20) for _ in range(3)]
during = instances()
assert lib.nvmlEventSetFree(s) == 0
print(json.dumps({"rcs": rcs, "during": during, "after": instances(),
                  "dir": os.stat(os.path.dirname(os.environ["FAKEHW_NVML_SNAPSHOT"])).st_ino}))
"""


def test_a_set_s_inotify_instance_may_be_descriptor_0(node_snapshot: Callable[..., NodeSnap]) -> None:
    """POSIX: a new file descriptor is "the lowest numbered file descriptor not currently open", so in a process that
    closed its standard input (a daemon does) the instance a wait opens on the snapshot's directory (docs/nvml.md) is
    descriptor 0, a descriptor like any other (inotify_init1(2): "a new file descriptor", -1 on error). Three waits
    of 20 ms (TIMEOUT each) share that one instance, which watches the snapshot's directory, and freeing the set
    closes it (nvml.h, nvmlEventSetFree: "Releases events in the set"). (Fresh seed 10713's events.c:173 took a
    descriptor of 0 for no instance and watched nothing; `inotify_fd <= 0` opened another per wait, `> 0` at the
    free kept it.)"""
    snap = node_snapshot("dgx-h100")
    code = WAITS_WITHOUT_STDIN.replace("EVENT_TYPES", str(EVENT_XID | EVENT_DOUBLE_BIT_ECC))
    got = run_python(code, snap.path, timeout=60)
    timeout = 10  # nvml.h: NVML_ERROR_TIMEOUT
    assert got["rcs"] == [timeout] * 3
    assert got["during"] == {"0": [got["dir"]]}, got
    assert got["after"] == {}, got


WAIT_WITHOUT_INOTIFY = r"""
import ctypes, json, os, resource, threading, time
""" + GPU6_EVENT_SET + r"""
path = os.environ["FAKEHW_NVML_SNAPSHOT"]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
lowest = os.dup(0)
os.close(lowest)
got = {}


def wait():
    data = (ctypes.c_ulonglong * 4)()
    got["rc"] = lib.nvmlEventSetWait_v2(s, data, 10000)
    got["type"] = data[1]
    got["at"] = time.monotonic()




def cpu():
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))  # no descriptor is free: inotify_init1 fails (EMFILE)
t = threading.Thread(target=wait)
t.start()
time.sleep(0.05)
idle = cpu()
time.sleep(0.2)
idle = cpu() - idle
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
watching = []
for fd in os.listdir("/proc/self/fd"):
    try:
        watching.append(os.readlink(f"/proc/self/fd/{fd}"))
    except FileNotFoundError:  # the listing's own descriptor, closed by now
        pass
os.replace(path + ".next", path)
written = time.monotonic()
t.join(15)
print(json.dumps({"inotify": [w for w in watching if "inotify" in w], "rc": got["rc"], "type": got["type"],
                  "after": got["at"] - written, "cpu": idle}))
"""


def test_a_wait_that_cannot_have_inotify_still_wakes_for_an_event_soon_after_it_is_written(
        node_snapshot: Callable[..., NodeSnap]) -> None:
    """nvml.h, nvmlEventSetWait: "If there are no events ready to be delivered, function sleeps till event arrives
    but not longer than specified timeout". A wait begun when the process has no free file descriptor (its
    RLIMIT_NOFILE soft limit at the lowest free one, so inotify_init1 fails with EMFILE, inotify_init(2)) watches no
    directory (no inotify descriptor is open in the process while it waits); it must still wake for a double-bit
    error renamed into place 0.25 s later (the limit raised again before, so the file can be read): well within
    0.5 s of the rename, not at the 10 s timeout. And it sleeps meanwhile: over 0.2 s of that wait the process
    uses less than 0.02 s of CPU (getrusage(2), user and system; about 0.002 s here), where one that polls with
    zero-length sleeps used 0.045 s."""
    first = node_snapshot("dgx-h100")
    nxt = write_node(first.path.with_name("nvml.snapshot.next"), "dgx-h100", generation=2, first_seq=100,
                     faults=[{"kind": "ecc", "device": "gpu6", "type": "dbe", "count": 1}])
    assert nxt.path.exists()
    code = WAIT_WITHOUT_INOTIFY.replace("EVENT_TYPES", str(EVENT_XID | EVENT_DOUBLE_BIT_ECC))
    got = run_python(code, first.path, timeout=60)
    assert got["inotify"] == []
    assert (got["rc"], got["type"]) == (0, EVENT_DOUBLE_BIT_ECC)
    assert got["after"] < 0.5, got
    assert got["cpu"] < 0.02, got


def test_a_process_gets_no_event_of_a_gpu_it_cannot_see(pynvml_module: ModuleType, tmp_path: Path) -> None:
    """A process shown only gpu0 and gpu1 of the node (FAKEHW_VISIBLE_DEVICES=0,1, as a container given two GPUs
    sees two) and registered for double-bit errors and Xids on both: nvml.h's nvmlDeviceRegisterEvents starts
    recording "events on device" for the set, so gpu6's double-bit error, on a GPU the process has no handle for,
    is delivered to nobody (the wait times out, on neither handle), and gpu0's, written after it, comes on gpu0's
    handle with its Xid 48, and nothing of gpu6 after them."""
    n = pynvml_module
    path = tmp_path / "nvml.snapshot"
    write_node(path, "dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    with snapshot_env(path, FAKEHW_VISIBLE_DEVICES="0,1"):
        n.nvmlInit()
    try:
        assert n.nvmlDeviceGetCount() == 2
        hs = [n.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
        s = _event_set(lib, hs)
        gpu6 = {"kind": "ecc", "device": "gpu6", "type": "dbe", "count": 1}
        write_node(path, "dgx-h100", faults=[gpu6], generation=2, first_seq=100)
        data = EventDataV2()
        assert lib.nvmlEventSetWait_v2(s, ctypes.byref(data), 300) == n.NVML_ERROR_TIMEOUT
        write_node(path, "dgx-h100", faults=[gpu6, {"kind": "ecc", "device": "gpu0", "type": "dbe", "count": 1}],
                   generation=3, first_seq=100)
        got = []
        while lib.nvmlEventSetWait_v2(s, ctypes.byref(data), 300) == 0:
            got.append((data.device, data.eventType, data.eventData))
        here = ctypes.cast(hs[0], ctypes.c_void_p).value
        assert got == [(here, EVENT_DOUBLE_BIT_ECC, 0), (here, EVENT_XID, 48)]
        assert lib.nvmlEventSetFree(s) == 0
    finally:
        n.nvmlShutdown()


def test_a_wait_whose_node_went_away_reports_its_gpus_lost(pynvml_module: ModuleType, tmp_path: Path) -> None:
    """nvml.h, nvmlEventSetWait_v2: NVML_ERROR_GPU_IS_LOST "if a GPU has fallen off the bus or is otherwise
    inaccessible". When the node's snapshot is removed (the node went away: docs/nvml.md, "GPU_IS_LOST for device
    calls while the file is missing") every GPU is inaccessible, so a wait of a set registered on gpu0 answers
    GPU_IS_LOST, as the device calls do, and well before its 5 s timeout, not UNKNOWN or TIMEOUT."""
    n = pynvml_module
    path = tmp_path / "nvml.snapshot"
    write_node(path, "dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    with snapshot_env(path):
        n.nvmlInit()
    try:
        h = n.nvmlDeviceGetHandleByIndex(0)
        s = _event_set(lib, [h])
        path.unlink()
        data = EventDataV2()
        started = time.monotonic()
        assert lib.nvmlEventSetWait_v2(s, ctypes.byref(data), 5000) == n.NVML_ERROR_GPU_IS_LOST
        assert time.monotonic() - started < 2.5
        with pytest.raises(n.NVMLError_GpuIsLost):
            n.nvmlDeviceGetUUID(h)
        assert lib.nvmlEventSetFree(s) == 0
    finally:
        n.nvmlShutdown()


FREE_AT_POLL = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <time.h>

/* Another thread's nvmlEventSetFree, made at the moment the waiting thread blocks: the test stores the set and
   the library's nvmlEventSetFree here, and the next poll (or nanosleep, the wait's fallback without inotify) with
   time to wait frees the set first, once, and keeps what the free answered. */
void *fhw_test_set;
int (*fhw_test_set_free)(void *);
int fhw_test_freed = -1;

static void free_now(void) {
    void *set = fhw_test_set;
    if (set == NULL || fhw_test_set_free == NULL) return;
    fhw_test_set = NULL;
    fhw_test_freed = fhw_test_set_free(set);
}

int poll(struct pollfd *fds, nfds_t n, int timeout) {
    static int (*real)(struct pollfd *, nfds_t, int);
    if (real == NULL) real = (int (*)(struct pollfd *, nfds_t, int))dlsym(RTLD_NEXT, "poll");
    if (timeout > 0) free_now();
    return real(fds, n, timeout);
}

int nanosleep(const struct timespec *want, struct timespec *left) {
    static int (*real)(const struct timespec *, struct timespec *);
    if (real == NULL) real = (int (*)(const struct timespec *, struct timespec *))dlsym(RTLD_NEXT, "nanosleep");
    free_now();
    return real(want, left);
}
"""

FREED_DURING_AND_BEFORE = r"""
import ctypes, json, os, time
""" + GPU6_EVENT_SET + r"""
pre = ctypes.CDLL(os.environ["LD_PRELOAD"])
ctypes.c_void_p.in_dll(pre, "fhw_test_set_free").value = ctypes.cast(lib.nvmlEventSetFree, ctypes.c_void_p).value
data = (ctypes.c_ulonglong * 4)()
ctypes.c_void_p.in_dll(pre, "fhw_test_set").value = s.value
t0 = time.monotonic()
during = lib.nvmlEventSetWait_v2(s, data, 20000)
waited = time.monotonic() - t0
freed = ctypes.c_int.in_dll(pre, "fhw_test_freed").value
other = ctypes.c_void_p()
assert lib.nvmlEventSetCreate(ctypes.byref(other)) == 0
assert lib.nvmlDeviceRegisterEvents(h, ctypes.c_ulonglong(EVENT_TYPES), other) == 0
assert lib.nvmlEventSetFree(other) == 0
before = lib.nvmlEventSetWait_v2(other, data, 20000)
print(json.dumps({"during": during, "before": before, "freed": freed, "waited": waited}))
"""


def test_a_wait_whose_set_another_thread_frees_answers_as_a_wait_on_a_freed_set(
        node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    """A thread blocks in nvmlEventSetWait_v2 (20 s, no event comes) and another frees the set under it
    (nvmlEventSetFree: "Releases events in the set"). The caller cannot tell a free made just after its wait began
    from one made just before it (the two orders of the same race), so the wait must answer as a wait on a set
    already freed does: INVALID_ARGUMENT, nvml.h's code for a wait given no set ("if set ... is NULL"), and at once,
    not after its 20 s. Deterministic: an LD_PRELOAD interposer makes the free at the wait's first blocking poll (or
    nanosleep, its fallback). (events.c:217's INVALID_ARGUMENT made UNKNOWN answers the two orders differently.)"""
    snap = node_snapshot("dgx-h100")
    preload = build_preload(tmp_path, "free_at_poll", FREE_AT_POLL)
    code = FREED_DURING_AND_BEFORE.replace("EVENT_TYPES", str(EVENT_XID | EVENT_DOUBLE_BIT_ECC))
    got = run_python(code, snap.path, timeout=60, LD_PRELOAD=str(preload))
    invalid_argument = 2  # nvml.h
    assert got["freed"] == 0, got  # NVML_SUCCESS: the set was freed while the wait held it
    assert got["before"] == invalid_argument, got
    assert got["during"] == got["before"], got
    assert got["waited"] < 10, got


COUNT_WAITS = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <sys/stat.h>
#include <time.h>

/* Every poll(2) and nanosleep(2) the process makes while the test sets fhw_test_counting: the ways the shim's event
   wait waits (a poll of its inotify descriptor, or the fallback's sleep). */
int fhw_test_counting;
int fhw_test_waits;

int poll(struct pollfd *fds, nfds_t n, int timeout) {
    static int (*real)(struct pollfd *, nfds_t, int);
    if (real == NULL) real = (int (*)(struct pollfd *, nfds_t, int))dlsym(RTLD_NEXT, "poll");
    if (fhw_test_counting) fhw_test_waits++;
    return real(fds, n, timeout);
}

int nanosleep(const struct timespec *want, struct timespec *left) {
    static int (*real)(const struct timespec *, struct timespec *);
    if (real == NULL) real = (int (*)(const struct timespec *, struct timespec *))dlsym(RTLD_NEXT, "nanosleep");
    if (fhw_test_counting) fhw_test_waits++;
    return real(want, left);
}

/* And every stat(2) of a path: how the shim looks for a writer that does not use the update word. */
int fhw_test_stats;

int stat(const char *path, struct stat *st) {
    static int (*real)(const char *, struct stat *);
    if (real == NULL) real = (int (*)(const char *, struct stat *))dlsym(RTLD_NEXT, "stat");
    if (fhw_test_counting) fhw_test_stats++;
    return real(path, st);
}
"""

ZERO_TIMEOUT_WAITS = r"""
import ctypes, json, os, time
""" + GPU6_EVENT_SET + r"""
pre = ctypes.CDLL(os.environ["LD_PRELOAD"])
data = (ctypes.c_ulonglong * 4)()
counting = ctypes.c_int.in_dll(pre, "fhw_test_counting")
counting.value = 1
t0 = time.monotonic()
rcs = [lib.nvmlEventSetWait_v2(s, data, 0) for _ in range(50)]
elapsed = time.monotonic() - t0
counting.value = 0
waits = ctypes.c_int.in_dll(pre, "fhw_test_waits").value
stats = ctypes.c_int.in_dll(pre, "fhw_test_stats").value
assert lib.nvmlEventSetFree(s) == 0
print(json.dumps({"rcs": rcs, "waits": waits, "stats": stats, "elapsed": elapsed}))
"""


def test_a_wait_with_a_zero_timeout_looks_once_and_does_not_wait(node_snapshot: Callable[..., NodeSnap],
                                                                tmp_path: Path) -> None:
    """nvml.h, nvmlEventSetWait_v2: "If timeoutms is zero, skip waiting for event". With no event pending, fifty
    zero-timeout waits each answer NVML_ERROR_TIMEOUT having looked once: none polls the set's watch or sleeps (an
    LD_PRELOAD interposer counts the process's poll(2) and nanosleep(2) calls while the waits run). Nor does each
    look stat() the snapshot's path: docs/nvml.md has the shim do that "at most every 10 ms". (Seed 10612's
    events.c:199, the timeout reached only once `elapsed > timeoutms`, went on polling with 0 ms left until a
    millisecond had passed: a zero-timeout wait that waited; seed 10618's events.c:191, each wait's first look
    forced, stat()ed fifty times in 0.13 ms.)"""
    snap = node_snapshot("dgx-h100")
    preload = build_preload(tmp_path, "count_waits", COUNT_WAITS)
    code = ZERO_TIMEOUT_WAITS.replace("EVENT_TYPES", str(EVENT_XID | EVENT_DOUBLE_BIT_ECC))
    got = run_python(code, snap.path, timeout=60, LD_PRELOAD=str(preload))
    timeout = 10  # nvml.h: NVML_ERROR_TIMEOUT
    assert got["rcs"] == [timeout] * 50, got
    assert got["waits"] == 0, got
    # docs/nvml.md: the shim stat()s the snapshot's path "at most every 10 ms" (a writer not using the update word
    # is caught that way): fifty looks within a few milliseconds are not fifty stats (seed 10618's events.c:191,
    # every wait's first look forced, stat()ed at each)
    assert got["stats"] <= got["elapsed"] * 1000 / 10 + 2, got
