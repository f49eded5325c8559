"""Rebuilding a node's NVML snapshot after a change without repeating the work whose inputs did not change.

The agent rebuilds a node's snapshot after every fault, heal, MIG or CXL change. Built from scratch that is every
GPU record (18 NVLink records each, readings, topology rows), every MIG profile and compute-instance profile record,
the event ring, all packed into the file: milliseconds per change in Python, most of it for GPUs the change did not
touch. A :class:`SnapshotCache` (one per node, kept by the agent) remembers each part with the inputs it was built
from and the bytes it was packed into; :func:`fakehw.nvml.snapshot.build_snapshot` asks it for every part and only
builds parts whose inputs differ, and :meth:`fakehw.nvml.snapshot.Snapshot.to_bytes` patches the last file's bytes:
it packs only the records that changed (:meth:`SnapshotCache.file`). An injection on one GPU rebuilds and packs that
GPU's record, the header and the events that joined the ring.

What a reused GPU record answers: the readings that move with the node's generation (energy, NVLink utilization
counters, power draw samples) are those of the generation its record was last built at, i.e. a GPU's counters
move on whenever something about that GPU changes that its state shows besides its Xid history (a fault or heal
on it, a link of it going down, its MIG state), not when another GPU of the node changes, and not when only its
Xid history does: an Xid (or the heal of one) that leaves the rest of the GPU's state as it was, its health
included, revises the two fields that show it, the Xid count and the last Xid, in the last record (an injection
touches only what it changes). :meth:`SnapshotCache.generations` says which generation each GPU's record was built
at, and ``build_snapshot(..., gpu_generations=...)`` without a cache builds the same bytes (the test of this
module compares them).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fakehw.nvml import layout

T = TypeVar("T")
E = TypeVar("E")


@dataclass(frozen=True)
class Ring(Generic[T]):
    """A window of events as :meth:`SnapshotCache.ring` gives it."""

    records: list[T]
    """The records of the events that have one, in the window's order (the cache's own list: not to be changed)."""
    ordered: bool
    """Whether the window's events are in order of their numbers (as the agent raises them)."""
    last_seq: int
    """The greatest number of the window's events (0 for none)."""


class SnapshotCache:
    """Parts of one node's last snapshot, each with the inputs it was built from, and its sections as packed."""

    def __init__(self) -> None:
        self._parts: dict[Hashable, tuple[Any, Any]] = {}
        self._generations: dict[str, int] = {}
        self._window: tuple[Any, ...] = ()
        self._window_records: list[Any] = []
        self._ring: Ring[Any] = Ring([], True, 0)
        """The last :meth:`ring` call's events, the record (or None) ``make`` gave for each, and its answer."""
        self._file: bytearray | None = None
        self._shape: tuple[object, ...] = ()
        self._placed: dict[str, tuple[object, ...]] = {}
        """The last file :meth:`file` made (header included: see :meth:`Snapshot.to_bytes`), its shape, and the
        records at the place of each section."""
        self._revised: dict[int, _Revision] = {}
        """The records :meth:`gpu_record` revised since the last :meth:`file`, by identity: what changed in each."""
        self.built = 0
        """Parts built (not reused) since the cache was made: what tests and benchmarks look at."""
        self.written: bytes | None = None
        """The answers of the snapshot last written (see :func:`fakehw.nvml.snapfile.snapshot_answers`)."""
        self.dirty: list[tuple[int, int]] | None = None
        """Where the last :meth:`file` may differ from the one before it, as ``[start, end)`` byte ranges (None: it
        was packed whole); :meth:`fakehw.nvml.snapshot.Snapshot.to_bytes` adds the header it packs. What lets the
        writer skip comparing the whole file (:class:`fakehw.nvml.snapfile.Patch`)."""

    @property
    def packed(self) -> bytearray | None:
        """The last snapshot packed with this cache: the buffer :meth:`file` gave, into which
        :meth:`~fakehw.nvml.snapshot.Snapshot.to_bytes` then packed the header. The one :attr:`dirty` is relative to
        once the next is made (which packs into a copy: this one is not changed again)."""
        return self._file

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

    def gpu_record(self, gpu: str, key: Any, generation: int, make: Callable[[int], T],
                   revise: Callable[[Any, Any, T], dict[str, Any] | None] | None = None) -> T:
        """A GPU's record: rebuilt (at ``generation``) only when its inputs ``key`` changed; first, when they did,
        ``revise(key, old key, old record)`` may give the scalar fields that differ from the last record (None: it
        cannot), which keeps the generation its readings are of (see the module docstring), and lets :meth:`file`
        pack only those fields."""
        hit = self._parts.get(("gpu", gpu))
        if hit is not None and hit[0] == key:
            return hit[1]  # type: ignore[no-any-return]
        if hit is not None and revise is not None:
            changes = revise(key, hit[0], hit[1])
            if changes is not None:
                old = hit[1]
                revised: T = layout.replaced(old, **changes)
                self._parts[("gpu", gpu)] = (key, revised)
                self._revised[id(revised)] = _Revision(revised, old, tuple(
                    layout.scalar_packer(type(old), name, value) for name, value in changes.items()))
                self.built += 1
                return revised
        value = make(generation)
        self._parts[("gpu", gpu)] = (key, value)
        self._generations[gpu] = generation
        self.built += 1
        return value

    def generations(self) -> dict[str, int]:
        """The generation each GPU's record was built at (see the module docstring)."""
        return dict(self._generations)

    def ring(self, events: Sequence[E], make: Callable[[E], T | None], seq: Callable[[E], int]) -> Ring[T]:
        """The records ``make`` gives for ``events`` (None: the event has no record), in the order of ``events``,
        with whether ``events`` are in order of ``seq`` and the greatest ``seq`` among them.

        ``events`` is a node's window of recent events: from one call to the next, events leave at its front and
        new ones join at its back (a fault raises one or two; the window holds hundreds). Only the events that
        joined are made into records, and looked at for their order; any other change of the window makes every
        record again. Events never change once raised, so a record made once stays right. (Walking the whole
        window for its records, its order and its last number cost 60 us of a tray's render once the window was
        full.)"""
        old = self._window
        joined, left, records = len(events), 0, []
        if old and events:
            last = old[-1]
            # Where the last call's newest event is now: near the back, since few events join per change.
            at = next((i for i in range(len(events) - 1, -1, -1) if events[i] is last), -1)
            left = len(old) - (at + 1)
            if at >= 0 and left >= 0 and all(map(operator.is_, events[:at + 1], old[left:])):
                joined, records = len(events) - (at + 1), self._window_records[left:]
        new = [make(e) for e in events[len(events) - joined:]]
        self.built += len(new)
        added = [r for r in new if r is not None]
        if joined < len(events) and self._ring.ordered:
            # The events kept are the end of an ordered window: its newest is still the greatest.
            seqs = [self._ring.last_seq, *map(seq, events[len(events) - joined:])]
            gone = sum(1 for r in self._window_records[:left] if r is not None)
            ring = Ring(self._ring.records[gone:] + added, all(map(operator.le, seqs, seqs[1:])), max(seqs))
        else:
            seqs = list(map(seq, events))
            ring = Ring([r for r in [*records, *new] if r is not None], all(map(operator.le, seqs, seqs[1:])),
                        max(seqs, default=0))
        self._window, self._window_records, self._ring = tuple(events), records + new, ring
        return ring

    def file(self, total: int, sections: Sequence[tuple[str, int, int, int, Sequence[object]]]) -> bytearray:
        """The snapshot file of ``total`` bytes with every section's records at their place (the header is the
        caller's to pack): ``sections`` gives each one's (name, offset, record size, capacity, records), capacity
        being the records its place holds (its count, or more for a section laid out at its capacity).

        The file of the last call is patched: in a file of the same shape (every section at the same offset with
        the same capacity) only records that are not the same objects as last time are packed, into a copy of the
        last file's bytes. A window of records that moved forward (the event ring: events leave at its front and
        join at its back) is moved as bytes and only the records that joined are packed. Any other shape is packed
        whole."""
        shape = (total, tuple((name, base, size, capacity) for name, base, size, capacity, _ in sections))
        last = self._file if shape == self._shape else None
        patch = last is not None
        buf = bytearray(last) if last is not None else bytearray(total)
        placed: dict[str, tuple[object, ...]] = {}
        dirty: list[tuple[int, int]] = []
        for name, base, size, _, records in sections:
            before = self._placed.get(name, ()) if patch else ()
            records = placed[name] = tuple(records)
            if len(before) != len(records) or not all(map(operator.is_, before, records)):
                _place(buf, base, size, before, records, dirty, self._revised if patch else {})
        # The previous records stay referenced until now, so no new record can be one of them by identity.
        self._file, self._shape, self._placed = buf, shape, placed  # the caller packs the header into it
        self._revised = {}
        self.dirty = dirty if patch else None
        return buf


@dataclass(frozen=True)
class _Revision:
    """A record made from ``old`` with some scalar fields changed, and a packer of each (see
    :func:`fakehw.nvml.layout.scalar_packer`): where the buffer holds ``old``, packing those is packing ``record``."""

    record: object
    """Held so that its ``id``, the key it is found by, names no other object while the entry exists."""
    old: object
    fields: tuple[layout.ScalarPacker, ...]


def _place(buf: bytearray, base: int, size: int, before: tuple[object, ...], records: tuple[object, ...],
           dirty: list[tuple[int, int]], revised: dict[int, _Revision]) -> None:
    """Make the section at ``base`` of ``buf``, which holds ``before``, hold ``records``: records that are the same
    objects at the same index are kept; a record revised from the one at its index (``revised``) has only its
    changed fields packed; a window that moved forward by ``left`` records is moved by as many bytes first; places
    past the new count that held records are zeroed. Every range of bytes written is added to ``dirty``."""
    kept = 0
    if before and records:
        last = before[-1]
        # Where the newest record of before is now: near the back when a window moved (few records join at once).
        at = next((i for i in range(len(records) - 1, -1, -1) if records[i] is last), -1)
        left = len(before) - (at + 1)
        if at >= 0 and left >= 0 and all(map(operator.is_, records[:at + 1], before[left:])):
            if left:
                buf[base:base + (at + 1) * size] = buf[base + left * size:base + len(before) * size]
                dirty.append((base, base + (at + 1) * size))
            kept = at + 1
    if not kept:  # not a window: the records that are the same objects at the same index stay
        kept = len(before)
        for i, (record, was) in enumerate(zip(records, before, strict=False)):
            if record is not was:
                revision = revised.get(id(record))
                if revision is not None and revision.old is was:
                    for packer in revision.fields:
                        dirty.append(packer.pack_into(buf, base + i * size))
                    continue
                layout.pack_into(buf, base + i * size, record)
                dirty.append((base + i * size, base + (i + 1) * size))
    for i in range(kept, len(records)):
        layout.pack_into(buf, base + i * size, records[i])
    if kept < len(records):
        dirty.append((base + kept * size, base + len(records) * size))
    if len(records) < len(before):
        start, end = base + len(records) * size, base + len(before) * size
        buf[start:end] = bytes(end - start)
        dirty.append((start, end))
