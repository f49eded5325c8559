"""What the journal promises about its files on disk, judged by POSIX's rules and docs/agent.md, not by the code.

- docs/agent.md ("Security and trust model"): "journals, meta files, the audit log and the lock file are 0600".
  Every way the journal writes a file (a compaction's atomic rewrite, the meta file's rewrite at a reservation or
  a clean stop, the reopen for appending) leaves mode 0600, whatever the process umask lets through.
- docs/agent.md ("Durability and recovery"): the meta file is "written atomically and fsynced, like every rename
  the agent relies on", and a change is answered "only once its record is on disk". POSIX (fsync(2), rename(2);
  the rule every database follows, e.g. SQLite's atomic commit document and ext4's data=ordered caveats): a file
  replaced by rename survives a crash only once its data was fsynced before the rename AND the directory holding
  the new name was fsynced after it. So when ``reserve`` or ``compact`` returns, the inode that now carries the
  name must have been fsynced, and the directory after it.
- docs/agent.md: records "are numbered from 1 in each file": the first line of a new file is record 1.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehw.agent.journal import Journal, JournalDamaged, decode, encode

RECORD = {"op": "generation", "generations": {}, "fault_counter": 0, "seq": 1}


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """A umask that lets every bit through: a mode the journal gets right only by luck of the umask shows."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class _SyncLog:
    """Stands in for ``os.fsync`` and ``os.fdatasync``: records the (device, inode) of every file or directory
    synced, in order, then syncs it for real."""

    def __init__(self, fsync: object, fdatasync: object) -> None:
        self.real_fsync = fsync
        self.real_fdatasync = fdatasync
        self.synced: list[tuple[int, int]] = []

    @staticmethod
    def _key(fd: int) -> tuple[int, int]:
        st = os.fstat(fd)
        return st.st_dev, st.st_ino

    def fsync(self, fd: int) -> None:
        self.synced.append(self._key(fd))
        self.real_fsync(fd)  # type: ignore[operator]

    def fdatasync(self, fd: int) -> None:
        self.synced.append(self._key(fd))
        self.real_fdatasync(fd)  # type: ignore[operator]

    def durable(self, path: Path, since: int) -> bool:
        """``path``'s inode was synced after position ``since`` of the log, and its directory after that."""
        target = os.stat(path)
        directory = os.stat(path.parent)
        entries = self.synced[since:]
        file_at = next((i for i, k in enumerate(entries) if k == (target.st_dev, target.st_ino)), None)
        return file_at is not None and (directory.st_dev, directory.st_ino) in entries[file_at + 1:]


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> _SyncLog:
    log = _SyncLog(os.fsync, os.fdatasync)
    monkeypatch.setattr(os, "fsync", log.fsync)
    monkeypatch.setattr(os, "fdatasync", log.fdatasync)
    return log


def test_journal_and_meta_file_are_owner_only_however_they_were_written(tmp_path: Path, loose_umask: None) -> None:
    path = tmp_path / "journal.jsonl"
    meta = tmp_path / "journal.jsonl.meta"
    journal = Journal(path)
    try:
        journal.compact([])  # the meta file first (no meta yet), then the journal rewritten atomically
        assert (_mode(path), _mode(meta)) == (0o600, 0o600)
        journal.append(RECORD)
        journal.reserve("fault-id", 1)  # the meta file rewritten
        assert (_mode(path), _mode(meta)) == (0o600, 0o600)
    finally:
        journal.close()  # the meta file rewritten with the high-water mark
    assert (_mode(path), _mode(meta)) == (0o600, 0o600)
    again = Journal(path)  # a restart: reopened for appending, then compacted over the old file
    try:
        again.compact(again.replay())
        assert (_mode(path), _mode(meta)) == (0o600, 0o600)
    finally:
        again.close()


def test_a_journal_found_readable_by_others_is_made_owner_only_when_opened(tmp_path: Path,
                                                                          loose_umask: None) -> None:
    """A journal put back from a backup (``cp`` without ``-p``) or left by an earlier fakehw can be 0644; the agent
    appends to it from the moment it opens it (a compaction may yet fail on a full disk), so opening it already
    makes it 0600: open(2)'s mode applies only to a file it creates."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    journal.close()
    path.chmod(0o644)
    again = Journal(path)
    try:
        assert _mode(path) == 0o600
    finally:
        again.close()


def test_a_reservation_is_on_disk_when_reserve_returns(tmp_path: Path, syncs: _SyncLog) -> None:
    """An id is handed out only after its reservation returns; were the meta file's new content not fsynced
    before the rename and the directory after it, a power cut could bring back the older, lower mark and a
    restarted agent would hand the same id out again ("ids never go backwards")."""
    journal = Journal(tmp_path / "journal.jsonl")
    try:
        journal.compact([])
        since = len(syncs.synced)
        journal.reserve("fault-id", 7)
        assert syncs.durable(tmp_path / "journal.jsonl.meta", since), syncs.synced[since:]
    finally:
        journal.close()


def test_a_compaction_is_on_disk_when_compact_returns(tmp_path: Path, syncs: _SyncLog) -> None:
    """The compacted journal replaces the one holding every acknowledged record: it must be on disk (file, then
    directory) before the agent goes on, and so must the meta file naming its epoch."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    journal.append(RECORD)
    journal.close()
    again = Journal(path)
    try:
        since = len(syncs.synced)
        again.compact(again.replay())
        assert syncs.durable(path, since), syncs.synced[since:]
        assert syncs.durable(path.with_name("journal.jsonl.meta"), since), syncs.synced[since:]
    finally:
        again.close()


def test_a_clean_stop_leaves_the_high_water_mark_on_disk(tmp_path: Path, syncs: _SyncLog) -> None:
    """close() records the high-water mark so that a later loss of the journal's end is noticed; a mark that
    a power cut can take back notices nothing."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    journal.append(RECORD)
    since = len(syncs.synced)
    journal.close()
    assert syncs.durable(path.with_name("journal.jsonl.meta"), since), syncs.synced[since:]


def test_the_first_record_of_a_new_file_is_record_1(tmp_path: Path) -> None:
    """docs/agent.md: records are numbered from 1 in each file, whatever the record (the agent's first is the
    checkpoint its compaction writes; a journal written without one is damage for other reasons)."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    try:
        journal.append(RECORD)
    finally:
        journal.close()
    assert decode(path.read_bytes().split(b"\n")[0])[0] == 1


def test_a_stop_never_lowers_the_high_water_mark_nor_rewrites_it_for_nothing(tmp_path: Path) -> None:
    """The meta file's mark says "the journal held at least this many records" (docs/agent.md): a clean stop may
    only raise it. A journal whose end was lost, opened with salvage and stopped before it was compacted again (an
    agent that could not finish starting), must leave the mark where it was, or the next start would take the short
    journal for a whole one. And a stop with nothing new to record leaves the meta file alone (the same file, not a
    fresh copy: no durable write on the way out, as a covered reservation writes nothing)."""
    path = tmp_path / "journal.jsonl"
    meta = tmp_path / "journal.jsonl.meta"
    journal = Journal(path)
    journal.compact([])
    for seq in range(1, 5):
        journal.append({**RECORD, "seq": seq})
    journal.close()
    marked = meta.read_bytes()
    assert b'"records": 5' in marked
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(lines[:3]) + b"\n")  # the last two records are gone
    salvaged = Journal(path, salvage=True)
    # What was lost is counted from the mark (GET /v1/health's "records lost"): 5 held, 3 left, 2 lost.
    assert salvaged.recovery.dropped == 2, salvaged.recovery.to_json()
    salvaged.close()
    assert meta.read_bytes() == marked, "the mark stays at 5"
    sound = Journal(tmp_path / "other.jsonl")
    sound.compact([])
    sound.close()
    other_meta = tmp_path / "other.jsonl.meta"
    before = os.stat(other_meta)
    again = Journal(tmp_path / "other.jsonl")
    again.close()
    after = os.stat(other_meta)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "rewritten for nothing"


def test_a_reservation_covers_the_ids_asked_for_also_after_a_restart(tmp_path: Path) -> None:
    """Journal.reserve: "make sure ids of counter name up to value are durably reserved before one is handed out":
    once it returns, the floor a restarted agent resumes above is at least ``value`` (ids up to it may have been
    handed out), even when the journal itself is lost."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    journal.reserve("fault-id", 5)
    assert journal.floor("fault-id") >= 5
    journal.close()
    path.unlink()
    again = Journal(path, salvage=True)
    try:
        assert again.floor("fault-id") >= 5
    finally:
        again.close()


def test_a_journal_on_descriptor_0_is_closed_like_any_other(tmp_path: Path) -> None:
    """open(2) returns the lowest descriptor not in use (POSIX), so an agent started with its standard input closed
    (a daemon that closed it) holds its journal on descriptor 0. Its clean stop must still sync the journal and
    record the high-water mark: 0 is a valid descriptor, only a negative one means closed."""
    path = tmp_path / "journal.jsonl"
    saved = os.dup(0)
    os.close(0)
    try:
        journal = Journal(path)
        journal.compact([])
        journal.append(RECORD)
        assert journal._fd == 0, "the lowest free descriptor"
        journal.close()
        assert b'"records": 2' in path.with_name("journal.jsonl.meta").read_bytes()
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_closing_twice_is_harmless(tmp_path: Path) -> None:
    """close() may be reached twice (an error path, then the agent's own stop): like Python's file objects ("calling
    close() more than once is allowed", io.IOBase) the second call does nothing, rather than closing a descriptor
    number that may by then belong to another file."""
    journal = Journal(tmp_path / "journal.jsonl")
    journal.compact([])
    journal.close()
    journal.close()


def test_a_journal_that_is_only_a_torn_line_counts_one_record_lost(tmp_path: Path) -> None:
    """Recovery.dropped counts "records lost: a torn last line, or records whose lines did not check out or are
    missing". A journal that held one record (its checkpoint: the meta file's mark is 1) and now holds only that
    line cut short lost one record, not two (the torn line and the record the mark counts are the same one)."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    journal.close()
    path.write_bytes(encode(1, {"op": "checkpoint", "epoch": 1})[:20])
    salvaged = Journal(path, salvage=True)
    try:
        assert salvaged.recovery.dropped == 1, salvaged.recovery.to_json()
    finally:
        salvaged.close()


def test_the_damaged_original_is_on_disk_before_the_compaction_replaces_it(tmp_path: Path, syncs: _SyncLog) -> None:
    """docs/agent.md: a recovery "copies the damaged file to journal.jsonl.damaged-<time> first" and never
    overwrites the original. The compaction that follows renames a new journal over the original, so from then on
    the copy is the only place its records are: by POSIX's rule (above) the copy's data must have been fsynced, and
    its directory after it, before the new journal is even written. Else a power cut after the compaction's rename
    leaves neither the original nor a whole copy of it. The same holds for the copy of the meta file."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    journal.append(RECORD)
    journal.close()
    with open(path, "ab") as fh:
        fh.write(encode(3, RECORD)[:25])  # torn: recovered without --salvage-journal, the original kept
    recovered = Journal(path)
    try:
        since = len(syncs.synced)
        recovered.compact(recovered.replay())
        assert recovered.recovery.kept is not None
        kept = Path(recovered.recovery.kept)
        kept_meta = kept.with_name(kept.name + ".meta")
        assert kept.read_bytes().endswith(encode(3, RECORD)[:25]) and kept_meta.is_file()
        journal_inode = os.stat(path).st_ino
        rewritten_at = since + next(i for i, (_, ino) in enumerate(syncs.synced[since:]) if ino == journal_inode)
        del syncs.synced[rewritten_at:]  # what was on disk when the new journal was written
        assert syncs.durable(kept, since), syncs.synced[since:]
        assert syncs.durable(kept_meta, since), syncs.synced[since:]
    finally:
        recovered.close()


def test_a_reservation_never_lowers_the_high_water_mark(tmp_path: Path) -> None:
    """The meta file's mark says "the journal held at least this many records" (docs/agent.md) and a reservation
    rewrites the meta file: it may raise the mark to what is durable, never lower it. A journal whose end was lost,
    salvaged, asked for ids and stopped before it was compacted again must still be refused at the next start (the
    end is still missing), not taken for a whole journal because the reservation wrote the short journal's count."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    for seq in range(1, 5):
        journal.append({**RECORD, "seq": seq})
    journal.close()  # mark: 5 records
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(lines[:3]) + b"\n")  # the last two records are gone
    salvaged = Journal(path, salvage=True)
    salvaged.reserve("fault-id", 1)
    salvaged.close()
    assert salvaged.floor("fault-id") >= 1
    with pytest.raises(JournalDamaged, match=r"ends at record 3 but journal\.jsonl\.meta says it held at least 5"):
        Journal(path)


def test_closing_again_closes_no_other_descriptor(tmp_path: Path) -> None:
    """close() may be reached twice (above). Descriptor numbers are reused (POSIX: open(2) returns the lowest one
    free), so the second call must touch none: not the journal's old number, which may by now be another file's,
    nor any other (standard output included: a journal that took itself for descriptor 1 after closing would close
    the agent's stdout). The process's open descriptors (/proc/self/fd) are the same before and after it."""
    journal = Journal(tmp_path / "journal.jsonl")
    journal.compact([])
    journal.close()
    saved = {fd: os.dup(fd) for fd in (0, 1, 2)}  # put back afterwards, whatever happens
    try:
        before = sorted(os.listdir("/proc/self/fd"))
        journal.close()
        after = sorted(os.listdir("/proc/self/fd"))
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
    assert after == before
