"""Device health of the reference plugin: NVML events make a GPU unhealthy, a periodic re-check makes it healthy.

Becoming unhealthy (fast, event-driven): one NVML event set watches every present GPU for critical Xid and
double-bit ECC events. Any Xid except the application-level ones (:data:`APPLICATION_XIDS`: the GPU is fine, the
program was not) marks the GPU unhealthy at once. ``GPU_IS_LOST`` from the wait means a GPU fell off the bus:
every GPU is probed, the lost ones are marked, and the event set is rebuilt without them (a set that still holds
a lost GPU would report ``GPU_IS_LOST`` forever).

Becoming healthy again (the re-check, every ``recheck_s`` seconds): NVML has no "the Xid condition has cleared"
signal, so recovery needs evidence per reason:

- ``lost``: the GPU answers NVML again (it is back on the bus);
- ``xid-N``: a :class:`RecoveryOracle` says the condition is no longer active. On fakehw that is the node agent
  (the equivalent of an operator's GPU reset or a health service like DCGM); without an oracle (real hardware
  with no such service) an Xid keeps the GPU unhealthy until the plugin restarts, as NVIDIA's plugin does.

A reason is only cleared by oracle answers fetched after the reason was raised, so an event racing a re-check
cannot be lost. The re-check also probes healthy GPUs for ``GPU_IS_LOST`` in case an event was missed, and at
start the oracle's active conditions are applied, so a restarted plugin does not advertise a GPU that faulted
while it was down.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from testbed.reference.device_plugin.inventory import GpuInfo

log = logging.getLogger("fakehw.reference.health")

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""Xids caused by the application, not the GPU (graphics exception, MMU fault, channel reset, preemptive
removal, video processor exception, context switch timeout): they do not make a GPU unhealthy."""
LOST = "lost"
WAIT_MS = 250
EVENT_XID = 0x8
EVENT_DBE = 0x2
XID_DBE = 48


def xid_reason(code: int) -> str:
    return f"xid-{code}"


class RecoveryOracle(Protocol):
    """Says which Xid conditions of a GPU are still active (None: cannot tell now)."""

    def active_xids(self) -> dict[str, frozenset[int]] | None:
        """Active Xid codes per GPU UUID."""


@dataclass
class _Reason:
    name: str
    since: float


class HealthMonitor:
    """Tracks the health of ``gpus``; calls ``on_change()`` after every change (from its own thread)."""

    def __init__(self, nvml: Any, gpus: Sequence[GpuInfo], on_change: Callable[[], None],
                 oracle: RecoveryOracle | None = None, recheck_s: float = 1.0):
        self.nvml = nvml
        self.gpus = list(gpus)
        self.on_change = on_change
        self.oracle = oracle
        self.recheck_s = recheck_s
        self._lock = threading.Lock()
        self._reasons: dict[str, dict[str, _Reason]] = {g.uuid: {} for g in self.gpus}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rebuild = True

    # ------------------------------------------------------------------------------------------ state

    def healthy(self, uuid: str) -> bool:
        with self._lock:
            return not self._reasons.get(uuid)

    def reasons(self, uuid: str) -> list[str]:
        with self._lock:
            return sorted(self._reasons.get(uuid, {}))

    def _mark(self, uuid: str, reason: str) -> bool:
        with self._lock:
            reasons = self._reasons.setdefault(uuid, {})
            if reason in reasons:
                return False
            reasons[reason] = _Reason(reason, time.monotonic())
        log.warning("GPU %s unhealthy: %s", uuid, reason)
        return True

    def _clear(self, uuid: str, reason: str, fetched: float) -> bool:
        with self._lock:
            r = self._reasons.get(uuid, {}).get(reason)
            if r is None or r.since >= fetched:
                return False
            del self._reasons[uuid][reason]
            left = sorted(self._reasons[uuid])
        log.warning("GPU %s: %s cleared%s", uuid, reason, f" (still {', '.join(left)})" if left else "; healthy")
        return True

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        # The event set exists before the initial look, so nothing that happens in between is missed.
        self._es: Any = None
        self._by_handle: dict[int, str] = {}
        self._es, self._by_handle = self._event_set()
        self._rebuild = False
        self._initial()
        self._thread = threading.Thread(target=self._run, name="health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _initial(self) -> None:
        for g in self.gpus:
            if self._lost(g):
                self._mark(g.uuid, LOST)
        active = self._oracle()
        for uuid, codes in (active or {}).items():
            for code in codes:
                if code not in APPLICATION_XIDS and uuid in self._reasons:
                    self._mark(uuid, xid_reason(code))

    def _oracle(self) -> dict[str, frozenset[int]] | None:
        if self.oracle is None:
            return None
        try:
            return self.oracle.active_xids()
        except Exception as exc:  # an unreachable oracle must not stop health monitoring
            log.info("recovery oracle unavailable: %s", exc)
            return None

    # ------------------------------------------------------------------------------------------ NVML

    def _handle(self, g: GpuInfo) -> Any:
        return self.nvml.nvmlDeviceGetHandleByUUID(g.uuid)

    def _lost(self, g: GpuInfo) -> bool:
        nvml = self.nvml
        try:
            nvml.nvmlDeviceGetMinorNumber(self._handle(g))
            return False
        except nvml.NVMLError as exc:
            return bool(exc.value == nvml.NVML_ERROR_GPU_IS_LOST)

    def _event_set(self) -> tuple[Any, dict[int, str]]:
        nvml = self.nvml
        es = nvml.nvmlEventSetCreate()
        by_handle: dict[int, str] = {}
        for g in self.gpus:
            if LOST in self._reasons.get(g.uuid, {}):
                continue
            try:
                h = self._handle(g)
                supported = nvml.nvmlDeviceGetSupportedEventTypes(h)
                nvml.nvmlDeviceRegisterEvents(h, supported & (EVENT_XID | EVENT_DBE), es)
            except nvml.NVMLError as exc:
                if exc.value == nvml.NVML_ERROR_GPU_IS_LOST:
                    self._mark(g.uuid, LOST)
                continue
            by_handle[ctypes.cast(h, ctypes.c_void_p).value or 0] = g.uuid
        return es, by_handle

    def _drain(self, es: Any, by_handle: dict[int, str]) -> bool:
        """Deliver what an event set still holds (events come before GPU_IS_LOST), without waiting."""
        nvml = self.nvml
        changed = False
        for _ in range(10_000):
            try:
                data = nvml.nvmlEventSetWait_v2(es, 0)
            except nvml.NVMLError:
                break  # TIMEOUT or GPU_IS_LOST: nothing left
            uuid = by_handle.get(ctypes.cast(data.device, ctypes.c_void_p).value or 0)
            if uuid is not None:
                changed |= self._event(uuid, int(data.eventType), int(data.eventData))
        return changed

    def _run(self) -> None:
        nvml = self.nvml
        es, by_handle = self._es, self._by_handle
        next_check = time.monotonic() + self.recheck_s
        while not self._stop.is_set():
            changed = False
            try:
                if self._rebuild or es is None:
                    # The new set starts at the newest event; the old one still holds anything older that was not
                    # delivered yet (e.g. an Xid that came right after a GPU was lost), so drain it before freeing.
                    new, new_by_handle = self._event_set()
                    if es is not None:
                        changed |= self._drain(es, by_handle)
                        nvml.nvmlEventSetFree(es)
                    es, by_handle = new, new_by_handle
                    self._rebuild = False
                data = nvml.nvmlEventSetWait_v2(es, WAIT_MS)
                uuid = by_handle.get(ctypes.cast(data.device, ctypes.c_void_p).value or 0)
                if uuid is not None:
                    changed |= self._event(uuid, int(data.eventType), int(data.eventData))
            except nvml.NVMLError as exc:
                if exc.value == nvml.NVML_ERROR_TIMEOUT:
                    pass
                elif exc.value == nvml.NVML_ERROR_GPU_IS_LOST:
                    for g in self.gpus:
                        if self._lost(g):
                            changed |= self._mark(g.uuid, LOST)
                    self._rebuild = True
                else:
                    log.warning("NVML event wait failed (%s); rebuilding the event set", exc)
                    self._rebuild = True
                    self._stop.wait(0.2)
            if time.monotonic() >= next_check:
                changed |= self.recheck()
                next_check = time.monotonic() + self.recheck_s
            if changed:
                self.on_change()

    def _event(self, uuid: str, event_type: int, data: int) -> bool:
        if event_type & EVENT_XID and data not in APPLICATION_XIDS:
            return self._mark(uuid, LOST if data == 79 and self._lost_uuid(uuid) else xid_reason(data))
        if event_type & EVENT_DBE:
            return self._mark(uuid, xid_reason(XID_DBE))
        return False

    def _lost_uuid(self, uuid: str) -> bool:
        g = next((g for g in self.gpus if g.uuid == uuid), None)
        return g is not None and self._lost(g)

    def recheck(self) -> bool:
        """One re-check pass (see the module docstring); True when something changed."""
        changed = False
        fetched = time.monotonic()
        active = self._oracle()
        for g in self.gpus:
            lost = self._lost(g)
            reasons = self.reasons(g.uuid)
            if lost and LOST not in reasons:
                changed |= self._mark(g.uuid, LOST)
                self._rebuild = True
            elif not lost and LOST in reasons:
                changed |= self._clear(g.uuid, LOST, fetched + 1e9)  # back on the bus: no oracle needed
                self._rebuild = True
            if active is None:
                continue
            codes = active.get(g.uuid, frozenset())
            for reason in reasons:
                if reason.startswith("xid-") and int(reason[4:]) not in codes:
                    changed |= self._clear(g.uuid, reason, fetched)
        return changed


class AgentOracle:
    """The fakehw node agent as recovery oracle: active Xids per GPU from the node's runtime state."""

    def __init__(self, socket: str, node: str, timeout: float = 2.0):
        from fakehw.agent.client import AgentClient

        self.client = AgentClient(socket, timeout=timeout)
        self.node = node

    def active_xids(self) -> dict[str, frozenset[int]] | None:
        state = self.client.state(self.node)
        return {str(g["uuid"]): frozenset(int(x) for x in g.get("xids", [])) for g in state.get("gpus", [])}
