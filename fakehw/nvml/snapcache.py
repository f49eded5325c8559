"""Rebuilding a node's NVML snapshot after a change without repeating the work whose inputs did not change.

The agent rebuilds a node's snapshot after every fault, heal, MIG or CXL change. Built from scratch that is every
GPU record (18 NVLink records each, readings, topology rows), every MIG profile and compute-instance profile record,
the event ring, all packed into the file: milliseconds per change in Python, most of it for GPUs the change did not
touch. A :class:`SnapshotCache` (one per node, kept by the agent) remembers each part with the inputs it was built
from and the bytes it was packed into; :func:`fakehw.nvml.snapshot.build_snapshot` asks it for every part and only
builds parts whose inputs differ, and :meth:`fakehw.nvml.snapshot.Snapshot.to_bytes` only packs records it has not
packed before. An injection on one GPU rebuilds that GPU's record and the small header and event parts.

What a reused GPU record answers: the readings that move with the node's generation (energy, NVLink utilization
counters, power draw samples) are those of the generation its record was last built at, i.e. a GPU's counters
move on whenever something about that GPU changes (a fault or heal on it, a link of it going down, its MIG state),
not when another GPU of the node changes. :meth:`SnapshotCache.generations` says which generation each GPU's record
was built at, and ``build_snapshot(..., gpu_generations=...)`` without a cache builds the same bytes (the test of
this module compares them).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from fakehw.nvml import layout

T = TypeVar("T")
E = TypeVar("E")


class SnapshotCache:
    """Parts of one node's last snapshot, each with the inputs it was built from, and its sections as packed."""

    def __init__(self) -> None:
        self._parts: dict[Hashable, tuple[Any, Any]] = {}
        self._generations: dict[str, int] = {}
        self._window: tuple[Any, ...] = ()
        self._window_records: list[Any] = []
        """The last :meth:`ring` call's events, and the record (or None) ``make`` gave for each."""
        self._sections: dict[str, tuple[tuple[object, ...], tuple[bytes, ...], bytes]] = {}
        self.built = 0
        """Parts built (not reused) since the cache was made: what tests and benchmarks look at."""
        self.written: bytes | None = None
        """The answers of the snapshot last written (see :func:`fakehw.nvml.snapfile.snapshot_answers`)."""

    def part(self, name: Hashable, key: Any, make: Callable[[], T]) -> T:
        """The part called ``name`` built from inputs ``key``: the remembered one when ``key`` equals the inputs it
        was built from (compared with ``==``), else ``make()``."""
        hit = self._parts.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]  # type: ignore[no-any-return]
        value = make()
        self._parts[name] = (key, value)
        self.built += 1
        return value

    def gpu_record(self, gpu: str, key: Any, generation: int, make: Callable[[int], T]) -> T:
        """A GPU's record: rebuilt (at ``generation``) only when its inputs ``key`` changed."""
        hit = self._parts.get(("gpu", gpu))
        if hit is not None and hit[0] == key:
            return hit[1]  # type: ignore[no-any-return]
        value = make(generation)
        self._parts[("gpu", gpu)] = (key, value)
        self._generations[gpu] = generation
        self.built += 1
        return value

    def generations(self) -> dict[str, int]:
        """The generation each GPU's record was built at (see the module docstring)."""
        return dict(self._generations)

    def ring(self, events: Sequence[E], make: Callable[[E], T | None]) -> list[T]:
        """The records ``make`` gives for ``events`` (None: the event has no record), in the order of ``events``.

        ``events`` is a node's window of recent events: from one call to the next, events leave at its front and
        new ones join at its back (a fault raises one or two; the window holds hundreds). Only the events that
        joined are made into records; any other change of the window makes every record again. Events never
        change once raised, so a record made once stays right."""
        old = self._window
        joined, records = len(events), []
        if old and events:
            last = old[-1]
            # Where the last call's newest event is now: near the back, since few events join per change.
            at = next((i for i in range(len(events) - 1, -1, -1) if events[i] is last), -1)
            left = len(old) - (at + 1)
            if at >= 0 and left >= 0 and all(map(operator.is_, events[:at + 1], old[left:])):
                joined, records = len(events) - (at + 1), self._window_records[left:]
        for e in events[len(events) - joined:]:
            records.append(make(e))
            self.built += 1
        self._window, self._window_records = tuple(events), records
        return [r for r in records if r is not None]

    def section(self, name: str, records: Sequence[object]) -> bytes:
        """A section's records packed one after the other. The same record objects as last time give the bytes of
        last time (a node's MIG profile section is hundreds of records a fault does not touch); otherwise only the
        records that are new objects are packed."""
        hit = self._sections.get(name)
        if hit is not None and len(hit[0]) == len(records) and all(map(operator.is_, hit[0], records)):
            return hit[2]
        # The previous records are alive (held by the entry), so no new record can share an id with one of them.
        before = {id(r): b for r, b in zip(hit[0], hit[1], strict=True)} if hit is not None else {}
        parts = tuple(before.get(id(r)) or _pack(r) for r in records)
        blob = b"".join(parts)
        self._sections[name] = (tuple(records), parts, blob)
        return blob


def _pack(record: object) -> bytes:
    buf = bytearray(layout.layout_of(type(record)).size)
    layout.pack_into(buf, 0, record)
    return bytes(buf)
