"""An append-only journal of what the agent was told, kept the way databases keep their logs.

A restarted agent comes back from its journals, so a journal must never lose an acknowledged change silently:

- **Every record is checked.** A line is ``<number> <crc32> <json>``: records are numbered from 1 within a file
  and carry a CRC-32 of their number and body, so a flipped bit, a zeroed block, a removed or reordered line is
  found on replay (etcd's WAL and SQLite's checksummed pages do the same).
- **Durable before acknowledged.** :meth:`Journal.append` returns once the record is on disk (``fdatasync``).
  Concurrent writers share fsyncs (group commit): :meth:`Journal.write` queues a record and returns a ticket,
  :meth:`Journal.wait` blocks until a sync covers it, and one sync serves every record written before it began.
  A record that cannot be made durable (a full disk, an I/O error) is cut off the file again and the writer gets
  a :class:`JournalWriteError`: "not applied" is then true, also after a restart.
- **Loss is detected, not guessed.** A small durable side file, ``<journal>.meta``, holds a high-water mark (the
  journal held at least this many records) and the epoch of the last compaction; the compacted file starts with
  a checkpoint naming its epoch. A journal that is empty, deleted, shorter than the mark, or from another epoch is
  damage, not a fresh start.
- **Ids never go backwards.** The same file reserves blocks of ids (:meth:`Journal.reserve`): a counter resumes
  above anything it may have handed out, even when the journal itself was lost.
- **Damage is refused or recovered loudly.** A torn last line (the agent died mid-write; it was never
  acknowledged) is dropped with a warning. Anything else stops the agent with :class:`JournalDamaged`, naming
  the file, the line and the problem, unless it was started with ``salvage``: then the records that check out are
  used, the damaged file is kept beside it (``<journal>.damaged-<time>``) and the :attr:`Journal.recovery` report
  counts what was dropped. Recovery never overwrites the original.

The API other agent modules build on (the platform, MIG, CXL writes) is small: ``Journal(path, salvage)``,
:meth:`~Journal.replay` at start, :meth:`~Journal.compact` once replayed, then :meth:`~Journal.append` (or
:meth:`~Journal.write` + :meth:`~Journal.wait`) per change, :meth:`~Journal.reserve` / :meth:`~Journal.floor`
for ids, :meth:`~Journal.close`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from fakehw.render.atomic import atomic_write, fsync_dir

log = logging.getLogger(__name__)
META_VERSION = 1
RESERVE_BLOCK = 1024
MAX_FAILED_RANGES = 1024
MAX_META_BYTES = 1 << 16
PROBLEMS_SHOWN = 5
"""How many problems a refusal or a recovery's log line names; the rest are counted ("; and N more")."""
PROBLEMS_REPORTED = 20
"""How many problems ``GET /v1/health`` lists per journal; ``problems_left_out`` counts the rest."""
_HEX_DIGITS = frozenset(b"0123456789abcdef")


class JournalDamaged(Exception):
    """The journal (or its meta file) does not check out; the agent refuses to start from it."""

    def __init__(self, path: Path, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__(f"journal {path} is damaged: {summarize(problems)}. Nothing was changed. Start the agent "
                         "with --salvage-journal to continue from the records that check out (the damaged file is kept "
                         "beside it), or remove the state directory to start afresh")


def summarize(problems: list[str]) -> str:
    """The first :data:`PROBLEMS_SHOWN` problems and how many more there are: every problem is named or counted."""
    left_out = len(problems) - PROBLEMS_SHOWN
    return "; ".join(problems[:PROBLEMS_SHOWN]) + (f"; and {left_out} more" if left_out > 0 else "")


class JournalWriteError(Exception):
    """A record could not be made durable; it is not in the journal (the change was not applied)."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


@dataclass
class Recovery:
    """What opening a journal found and did (served by ``GET /v1/health``)."""

    records: int = 0
    """Records replayed."""
    dropped: int = 0
    """Records lost: a torn last line, or (on salvage) records whose lines did not check out or are missing."""
    problems: list[str] = field(default_factory=list)
    kept: str | None = None
    """Where the damaged original was kept."""
    upgraded: bool = False
    """The journal was in the unchecked format of earlier versions."""

    def to_json(self) -> dict[str, Any]:
        """The report, bounded: the first :data:`PROBLEMS_REPORTED` problems, and how many were left out."""
        return {"records": self.records, "dropped": self.dropped, "problems": self.problems[:PROBLEMS_REPORTED],
                "problems_left_out": max(0, len(self.problems) - PROBLEMS_REPORTED), "kept": self.kept,
                "upgraded": self.upgraded}


def encode(number: int, record: dict[str, Any]) -> bytes:
    body = json.dumps(record, separators=(",", ":"), sort_keys=True)
    head = f"{number} {body}"
    return f"{number} {zlib.crc32(head.encode()):08x} {body}\n".encode()


def decode(line: bytes) -> tuple[int, dict[str, Any]]:
    """(number, record) of one line without its newline; ValueError saying what is wrong otherwise."""
    number_text, _, rest = line.partition(b" ")
    crc_text, _, body = rest.partition(b" ")
    # The checksum as encode() writes it: 8 lower-case hex digits (int(x, 16) alone also takes "0x", a sign,
    # underscores and upper case, so an edited field of the same value would pass for what was written).
    if not number_text.isdigit() or len(crc_text) != 8 or not _HEX_DIGITS.issuperset(crc_text) or not body:
        raise ValueError("not a journal record")
    if zlib.crc32(number_text + b" " + body) != int(crc_text, 16):
        raise ValueError("checksum mismatch")
    record = json.loads(body)
    if not isinstance(record, dict) or not isinstance(record.get("op"), str):
        raise ValueError("not a journal record")
    return int(number_text), record


@dataclass
class _Meta:
    epoch: int = 0
    records: int = 0
    """High-water mark: the journal of this epoch held at least this many records."""
    reserved: dict[str, int] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return (json.dumps({"version": META_VERSION, "epoch": self.epoch, "records": self.records,
                            "reserved": self.reserved}, sort_keys=True) + "\n").encode()

    @classmethod
    def parse(cls, data: bytes) -> _Meta:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("version") != META_VERSION:
            raise ValueError("unknown format")
        reserved = doc.get("reserved", {})
        if not isinstance(reserved, dict) or not all(_is_count(v) for v in reserved.values()):
            raise ValueError("bad reservations")
        epoch, records = doc.get("epoch"), doc.get("records")
        if not _is_count(epoch) or not _is_count(records):
            raise ValueError("bad epoch or high-water mark")
        return cls(epoch, records, {str(k): int(v) for k, v in reserved.items()})


_NO_EPOCH = object()
"""What a checkpoint without an ``epoch`` key is read as: no count, so it is damage."""


def _shown(epoch: object) -> str:
    return "it has none" if epoch is _NO_EPOCH else f"{json.dumps(epoch)} is not a count"


def _is_count(value: object) -> TypeGuard[int]:
    """A JSON number that is a whole count (0 or more), as the agent writes epochs, marks and id blocks. Python reads
    JSON ``true`` and ``false`` as bools, which are ints to isinstance (True == 1): they are not counts."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class Journal:
    def __init__(self, path: Path, salvage: bool = False):
        self.path = path
        self.meta_path = path.with_name(path.name + ".meta")
        self.recovery = Recovery()
        self._salvage = salvage
        self._lock = threading.Lock()
        self._synced = threading.Condition(self._lock)
        self._meta_lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._meta, meta_problem = self._read_meta()
        self._records, problems = self._read(meta_problem)
        if problems:
            self._damaged(problems)
        self.recovery.records = len(self._records)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.fchmod(self._fd, 0o600)
        self._number = self._last_number
        self._size = os.fstat(self._fd).st_size
        self._durable = (self._number, self._size)
        self._ticket = 0
        self._durable_ticket = 0
        self._failed: deque[tuple[int, int, JournalWriteError]] = deque(maxlen=MAX_FAILED_RANGES)
        """(first ticket, last ticket, why) of records that could not be made durable, newest last."""
        self._syncing = False
        self._broken: str | None = None
        self._reported = False

    # ------------------------------------------------------------------------------------------ opening

    def _read_meta(self) -> tuple[_Meta | None, str | None]:
        """The meta file, read no further than the largest one it can be (a damaged or foreign file of any size
        costs the agent at most that much memory)."""
        try:
            with open(self.meta_path, "rb") as fh:
                data = fh.read(MAX_META_BYTES + 1)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, f"{self.meta_path} cannot be read ({exc.strerror})"
        if len(data) > MAX_META_BYTES:
            return None, (f"{self.meta_path} is larger than a meta file can be (more than {MAX_META_BYTES} bytes; "
                          "the agent writes a few hundred)")
        try:
            return _Meta.parse(data), None
        except ValueError as exc:
            return None, f"{self.meta_path} does not parse ({exc})"

    def _read(self, meta_problem: str | None) -> tuple[list[dict[str, Any]], list[str]]:
        """The records that check out, and the problems found (empty when the journal is sound)."""
        problems = [meta_problem] if meta_problem else []
        self._last_number = 0
        self._epoch_seen = 0
        self._lost = 0
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = None
        if data is None or not data:
            if self._meta is not None and self._meta.records > 0:
                what = "is missing" if data is None else "is empty"
                problems.append(f"the journal {what} but {self.meta_path.name} says it held at least "
                                f"{self._meta.records} records")
                self._lost = self._meta.records
            return [], problems
        if self._meta is None and meta_problem is None and data.lstrip()[:1] == b"{":
            return self._read_legacy(data), problems
        if self._meta is None and meta_problem is None:
            problems.append(f"{self.meta_path.name} is missing (it is written before the journal)")
        lines = data.split(b"\n")
        torn = lines.pop()  # after the last newline: empty, or a line the agent died writing (never acknowledged)
        if torn:
            self.recovery.dropped += 1
            self.recovery.problems.append(f"line {len(lines) + 1} is torn (the agent stopped while writing it)")
        records: list[dict[str, Any]] = []
        expected = 1
        epoch = None
        numbers: set[int] = set()
        unreadable = 0
        for index, line in enumerate(lines, 1):
            try:
                number, record = decode(line)
            except (ValueError, UnicodeDecodeError) as exc:
                problems.append(f"line {index} {_describe(line, exc)}")
                unreadable += 1
                continue
            numbers.add(number)
            if number != expected:
                problems.append(f"line {index} is record {number}, expected {expected} (records are missing or "
                                "out of order)")
            expected = number + 1
            self._last_number = max(self._last_number, number)
            if record["op"] == "checkpoint":
                if number != 1:
                    problems.append(f"line {index} is a checkpoint in the middle of the journal")
                epoch = record.get("epoch", _NO_EPOCH)
                if _is_count(epoch):  # the checkpoint names its epoch as a count, as the meta file does
                    self._epoch_seen = epoch
                else:
                    problems.append(f"line {index} is a checkpoint without a valid epoch ({_shown(epoch)})")
                continue
            records.append(record)
        problems += self._check_against_meta(epoch)
        if problems:  # records lost: numbers missing below the last one seen (or below the high-water mark)
            hwm = self._meta.records if self._meta is not None and epoch == self._meta.epoch else 0
            self._lost = max(max(self._last_number, hwm) - len(numbers), unreadable)
        return records, problems

    def _check_against_meta(self, epoch: Any) -> list[str]:
        if epoch is None:
            return ["the journal does not start with its checkpoint (its beginning is missing)"]
        meta = self._meta
        if meta is None or not _is_count(epoch):  # no meta file, or no epoch to hold against it (named at its line)
            return []
        if epoch == meta.epoch + 1:
            return []  # compacted, then stopped before the meta file was updated: the journal is the newer one
        if epoch != meta.epoch:
            return [f"the journal is from epoch {epoch} but {self.meta_path.name} is at epoch {meta.epoch} (an "
                    "older or foreign journal)"]
        if self._last_number < meta.records:
            return [f"the journal ends at record {self._last_number} but {self.meta_path.name} says it held at "
                    f"least {meta.records} (its end is missing)"]
        return []

    def _read_legacy(self, data: bytes) -> list[dict[str, Any]]:
        """A journal of the unchecked format (JSON lines) from before: used once, rewritten by compaction."""
        self.recovery.upgraded = True
        records = []
        for index, line in enumerate(data.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                record = None
            if isinstance(record, dict) and isinstance(record.get("op"), str):
                records.append(record)
            else:
                self.recovery.dropped += 1
                self.recovery.problems.append(f"line {index} of the old-format journal does not parse")
        log.warning("journal %s is in the unchecked format of earlier versions: %d records taken, %d lines "
                    "dropped; it is rewritten in the checked format", self.path, len(records), self.recovery.dropped)
        return records

    def _damaged(self, problems: list[str]) -> None:
        if not self._salvage:
            raise JournalDamaged(self.path, problems)
        self.recovery.dropped += self._lost
        self.recovery.problems += problems

    def _keep_original(self) -> None:
        """Copy the journal (and its meta file) aside before anything rewrites it."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        kept = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        for n in range(1, 1000):
            if not kept.exists():
                break
            kept = self.path.with_name(f"{self.path.name}.damaged-{stamp}-{n}")
        if self.path.exists():
            _copy_durably(self.path, kept)
        if self.meta_path.exists():
            _copy_durably(self.meta_path, kept.with_name(kept.name + ".meta"))
        fsync_dir(self.path.parent)
        self.recovery.kept = str(kept)

    # ------------------------------------------------------------------------------------------ reading

    def replay(self) -> list[dict[str, Any]]:
        """The records that checked out when the journal was opened, in the order they were written (until the first
        compaction, which replaces them and lets them go: the agent does not hold its start's records for life)."""
        return list(self._records)

    @property
    def records(self) -> int:
        """Records the file holds now (its checkpoint included): what a compaction would shrink."""
        with self._lock:
            return self._number

    def floor(self, name: str) -> int:
        """Ids of counter ``name`` up to this value may have been handed out before: resume above it."""
        with self._meta_lock:
            return self._meta.reserved.get(name, 0) if self._meta is not None else 0

    # ------------------------------------------------------------------------------------------ writing

    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` and return once it is durable (:class:`JournalWriteError` if it cannot be)."""
        self.wait(self.write(record))

    def write(self, record: dict[str, Any]) -> int:
        """Write ``record`` (not yet durable) and return its ticket for :meth:`wait`."""
        with self._lock:
            if self._broken:
                raise JournalWriteError(self._broken)
            number = self._number + 1
            data = encode(number, record)
            try:
                _write_all(self._fd, data)
            except OSError as exc:
                self._cut(self._size)
                raise JournalWriteError(f"cannot write to {self.path}: {exc.strerror}", exc.errno) from None
            self._number = number
            self._size += len(data)
            self._ticket += 1
            return self._ticket

    def wait(self, ticket: int) -> None:
        """Return once the record of ``ticket`` is durable; one fsync serves every record written before it."""
        with self._lock:
            while True:
                failed = self._failure(ticket)
                if failed is not None:
                    raise failed
                if ticket <= self._durable_ticket:
                    return
                if self._syncing:
                    self._synced.wait()
                    continue
                self._sync_locked()

    def settled(self, ticket: int) -> tuple[bool, JournalWriteError | None]:
        """(True, None) once ``ticket`` is durable, (True, error) if it failed, (False, None) while neither."""
        with self._lock:
            failed = self._failure(ticket)
            if failed is not None:
                return True, failed
            return ticket <= self._durable_ticket, None

    def _failure(self, ticket: int) -> JournalWriteError | None:
        for first, last, why in reversed(self._failed):
            if first <= ticket <= last:
                return why
        return None

    def _sync_locked(self) -> None:
        self._syncing = True
        target = (self._ticket, self._number, self._size)
        self._lock.release()
        error: OSError | None = None
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            error = exc
        finally:
            self._lock.acquire()
            self._syncing = False
        if error is None:
            self._durable_ticket = target[0]
            self._durable = (target[1], target[2])
        else:
            failure = JournalWriteError(f"cannot make {self.path} durable: {error.strerror}", error.errno)
            self._failed.append((self._durable_ticket + 1, self._ticket, failure))
            self._durable_ticket = self._ticket
            self._cut(self._durable[1])
        self._synced.notify_all()

    def _cut(self, size: int) -> None:
        """Under the lock: drop everything after ``size`` (records that were not acknowledged)."""
        try:
            os.ftruncate(self._fd, size)
            os.fdatasync(self._fd)
        except OSError as exc:
            self._broken = (f"{self.path} holds records that were refused and cannot be cut off ({exc.strerror}); "
                            "stop the agent and restart it with --salvage-journal")
            log.critical("%s", self._broken)
            return
        self._size = size
        self._number = self._durable[0] if size == self._durable[1] else self._number

    def reserve(self, name: str, value: int) -> None:
        """Make sure ids of counter ``name`` up to ``value`` are durably reserved before one is handed out."""
        with self._meta_lock:
            meta = self._meta or _Meta()
            if value <= meta.reserved.get(name, 0):
                return
            updated = _Meta(meta.epoch, max(meta.records, self._durable[0]),
                            {**meta.reserved, name: value + RESERVE_BLOCK})
            self._write_meta(updated)

    def _write_meta(self, meta: _Meta) -> None:
        try:
            atomic_write(self.meta_path, meta.to_bytes(), 0o600, durable=True)
        except OSError as exc:
            raise JournalWriteError(f"cannot write {self.meta_path}: {exc.strerror}", exc.errno) from None
        self._meta = meta

    def compact(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace the journal by ``records`` (what still matters), durably, in a new epoch. A journal that was
        recovered is kept aside first."""
        if (self.recovery.problems or self.recovery.dropped) and self.recovery.kept is None:
            self._keep_original()  # once: later compactions rewrite the journal this one wrote
        with self._meta_lock:
            meta = self._meta or _Meta()
            if self._meta is None:
                self._write_meta(meta)  # the meta file exists before any journal of its epochs
            epoch = max(meta.epoch, self._epoch_seen) + 1
            lines = [encode(1, {"op": "checkpoint", "epoch": epoch, "time": time.time()})]
            lines += [encode(n, r) for n, r in enumerate(records, 2)]
            data = b"".join(lines)
            with self._lock:
                old_inode = os.fstat(self._fd).st_ino
                os.close(self._fd)
                try:
                    atomic_write(self.path, data, 0o600, durable=True)
                finally:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                    # The new file is in place also when only the fsync of its directory failed: appends then
                    # number on from it (a running agent goes on after a compaction that failed).
                    if os.fstat(self._fd).st_ino != old_inode:
                        self._number = len(lines)
                        self._size = len(data)
                        self._durable = (self._number, self._size)
            self._write_meta(_Meta(epoch, len(lines), dict(meta.reserved)))
            self._records = []
        if self.recovery.problems and not self._reported:
            self._reported = True
            log.warning("journal %s recovered: %d records used, %d records lost (%s); the damaged original is "
                        "kept as %s", self.path, self.recovery.records, self.recovery.dropped,
                        summarize(self.recovery.problems), self.recovery.kept)

    def close(self) -> None:
        """Sync what was written and record the high-water mark, so a later loss of the end is noticed."""
        with self._lock:
            if self._fd < 0:
                return
            try:
                os.fdatasync(self._fd)
                self._durable = (self._number, self._size)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = -1
        with self._meta_lock:
            if self._meta is not None and self._durable[0] > self._meta.records and not self._broken:
                try:
                    self._write_meta(_Meta(self._meta.epoch, self._durable[0], dict(self._meta.reserved)))
                except JournalWriteError as exc:
                    log.warning("%s", exc)


COMPACT_AFTER = 10_000
"""Records appended to a facts journal (MIG, platform) after which it is rewritten as one snapshot."""


class SnapshotCompaction:
    """Keeps a journal of facts short by rewriting it as one snapshot record: at start, and again once ``every``
    records were appended since the last rewrite (the MIG and platform journals; the fault journal has its own
    policy, see fakehw/agent/service.py). ``snapshot`` gives the records that replace the journal's.

    The append an owner reports has already been made durable and applied, so a rewrite that fails after it (a
    full disk) must not fail the change: it is logged and tried again after as many records more."""

    def __init__(self, journal: Journal, snapshot: Callable[[], list[dict[str, Any]]], every: int) -> None:
        if every < 1:
            raise ValueError(f"a journal is compacted after at least 1 record, not {every}")
        self._journal = journal
        self._snapshot = snapshot
        self.every = every
        self._since = 0

    def now(self) -> None:
        """Rewrite the journal now (its errors propagate: at start the owner cannot go on without it)."""
        self._journal.compact(self._snapshot())
        self._since = 0

    def appended(self) -> None:
        """One more record was appended: rewrite the journal if ``every`` were since the last time."""
        self._since += 1
        if self._since < self.every:
            return
        try:
            self.now()
        except (OSError, JournalWriteError) as exc:
            self._since = 0
            log.warning("%s not compacted (%s); tried again after %d more records", self._journal.path,
                        getattr(exc, "strerror", None) or exc, self.every)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _copy_durably(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` and fsync the copy: once the original is replaced, the copy is all there is of
    it (its directory entry is fsynced by the caller)."""
    shutil.copy2(source, target)
    fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _describe(line: bytes, exc: Exception) -> str:
    if not line.strip(b"\0 \t\r"):
        return "is blank or zeroed"
    if b"\0" in line:
        return f"holds {line.count(0)} zeroed bytes"
    if isinstance(exc, ValueError) and str(exc) == "checksum mismatch":
        return "fails its checksum (altered)"
    return "is not a journal record"
