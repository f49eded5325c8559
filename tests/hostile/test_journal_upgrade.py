"""The journal's report of itself, as the agent's ``GET /v1/health`` shows it (``journals.faults`` is
``Journal.recovery``, fakehw/agent/service.py), and its durability answer to a waiting request.

- docs/agent.md ("Durability and recovery"): a state dir written by an earlier fakehw (plain JSON lines: no
  numbers, checksums or meta file) is taken over and reported with ``upgraded: true``; the rewritten journal is in
  the checked format, so the next start reports no upgrade.
- "A change is answered only once its record is on disk (fdatasync)": a record written but not yet synced is not
  settled; once synced it is, without error.
- "concurrent requests share one sync (group commit)": records written while a sync is in flight wait for it to
  end and are then made durable by ONE more sync, never by one each (what etcd's WAL and PostgreSQL's commit
  delay do: the point of a group commit is the number of fsyncs).
- "A record that cannot be made durable is cut off the file again: its request gets 507 and a restart does not
  bring it back": after a failed sync the journal still numbers its records from 1 without a gap, so the next
  record is accepted and a restart replays exactly what was acknowledged, without calling the journal damaged.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest

from fakehw.agent.journal import Journal, JournalWriteError

RECORD = {"op": "generation", "generations": {}, "fault_counter": 0, "seq": 1}


def test_an_old_format_journal_is_reported_upgraded_once(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    old = [{"op": "generation", "generations": {"n0": 2}, "fault_counter": 3, "seq": 4},
           {"op": "inject", "fault": {"id": "f-000003"}, "generation": 3, "events": []}]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    journal = Journal(path)
    try:
        report = journal.recovery.to_json()
        assert report["upgraded"] is True and report["dropped"] == 0 and report["records"] == 2, report
        assert journal.replay() == old
        journal.compact(journal.replay())
    finally:
        journal.close()
    journal = Journal(path)
    try:
        report = journal.recovery.to_json()
        assert report["upgraded"] is False and report["problems"] == [], report
        assert [r["op"] for r in journal.replay()] == ["generation", "inject"]
    finally:
        journal.close()


def test_a_journal_in_the_checked_format_is_not_reported_upgraded(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    try:
        journal.compact([])  # as the agent starts a new journal: its checkpoint first
        journal.append({"op": "generation", "generations": {}, "fault_counter": 0, "seq": 0})
    finally:
        journal.close()
    journal = Journal(tmp_path / "journal.jsonl")
    try:
        assert journal.recovery.to_json()["upgraded"] is False
    finally:
        journal.close()


def test_a_record_is_settled_only_once_it_is_synced(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    try:
        journal.compact([])
        ticket = journal.write({"op": "generation", "generations": {}, "fault_counter": 0, "seq": 1})
        assert journal.settled(ticket) == (False, None), "written, not yet on disk"
        journal.wait(ticket)
        assert journal.settled(ticket) == (True, None)
    finally:
        journal.close()


def test_an_unreadable_line_of_an_old_format_journal_is_named_by_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    good = {"op": "generation", "generations": {"n0": 2}, "fault_counter": 3, "seq": 4}
    path.write_text(json.dumps(good) + "\n{not json\n" + json.dumps(good) + "\n")
    journal = Journal(path, salvage=True)
    try:
        report = journal.recovery.to_json()
        assert report["upgraded"] is True and report["dropped"] == 1, report
        assert report["problems"] == ["line 2 of the old-format journal does not parse"], report
        assert journal.replay() == [good, good]
    finally:
        journal.close()


def test_a_blank_line_of_an_old_format_journal_is_skipped_and_what_follows_kept(tmp_path: Path) -> None:
    """JSON Lines (jsonlines.org, the old format) has one value per line; a blank line holds none, so it is no
    record and no damage: the records after it are taken like those before it and nothing is counted lost."""
    path = tmp_path / "journal.jsonl"
    first = {"op": "generation", "generations": {"n0": 2}, "fault_counter": 3, "seq": 4}
    later = {"op": "inject", "fault": {"id": "f-000003"}, "generation": 3, "events": []}
    path.write_text(json.dumps(first) + "\n\n   \n" + json.dumps(later) + "\n")
    journal = Journal(path)
    try:
        report = journal.recovery.to_json()
        assert report["upgraded"] is True and report["dropped"] == 0 and report["problems"] == [], report
        assert journal.replay() == [first, later]
    finally:
        journal.close()


class _Died(Exception):
    """The agent stopping dead at this point (power loss, SIGKILL)."""


def test_a_first_compaction_that_dies_before_its_last_meta_write_leaves_a_journal_that_opens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agent.md: "A journal that is empty, missing, shorter than the mark, or of another epoch is damage", and
    the journal never loses what it acknowledged. A new state dir's first compaction writes the checkpointed journal
    and then records its epoch in the meta file; an agent that dies between the two must start again from that
    journal without --salvage-journal (it lost nothing): the meta file has to exist before the journal does."""
    import fakehw.agent.journal as journal_module

    path = tmp_path / "journal.jsonl"
    real_write = journal_module.atomic_write

    def dies_after_the_journal(target: Path, data: bytes, *args: object, **kwargs: object) -> None:
        if target.name.endswith(".meta") and path.stat().st_size > 0:  # the new journal is in place
            raise _Died(target)
        real_write(target, data, *args, **kwargs)  # type: ignore[arg-type]

    journal = Journal(path)
    monkeypatch.setattr(journal_module, "atomic_write", dies_after_the_journal)
    with pytest.raises(_Died):
        journal.compact([RECORD])
    monkeypatch.setattr(journal_module, "atomic_write", real_write)
    os.close(journal._fd)  # the process is gone: nothing else of it runs
    again = Journal(path)
    try:
        assert again.replay() == [RECORD] and again.recovery.problems == [], again.recovery.to_json()
    finally:
        again.close()


def test_a_journal_made_again_after_a_failed_compaction_is_owner_only(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agent.md (security): journals are mode 0600. A journal file removed from under the agent while its
    compaction fails (a full disk) is made again when the agent reopens it for appending: with mode 0600, like
    the one it replaces, whatever the umask lets through."""
    import fakehw.agent.journal as journal_module

    path = tmp_path / "journal.jsonl"
    journal = Journal(path)

    real_write = journal_module.atomic_write

    def disk_full(target: Path, data: bytes, *args: object, **kwargs: object) -> None:
        if target == path:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(target, data, *args, **kwargs)  # type: ignore[arg-type]

    path.unlink()
    monkeypatch.setattr(journal_module, "atomic_write", disk_full)
    try:
        with pytest.raises(OSError):
            journal.compact([RECORD])
        assert path.stat().st_mode & 0o777 == 0o600
    finally:
        journal.close()


def test_a_reservation_already_covered_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Journal.reserve: "make sure ids ... up to value are durably reserved before one is handed out". Ids up to
    the reserved mark are covered already, the mark included: asking for them again costs no meta write (no fsync
    on the path of every id handed out) and leaves the floor where it was."""
    import fakehw.agent.journal as journal_module

    journal = Journal(tmp_path / "journal.jsonl")
    try:
        journal.compact([])
        journal.reserve("fault", 1)
        mark = journal.floor("fault")
        writes: list[Path] = []
        real_write = journal_module.atomic_write

        def counted(target: Path, data: bytes, *args: object, **kwargs: object) -> bool:
            writes.append(target)
            return real_write(target, data, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(journal_module, "atomic_write", counted)
        journal.reserve("fault", mark)
        journal.reserve("fault", mark - 1)
        assert writes == [] and journal.floor("fault") == mark
    finally:
        journal.close()


class _Syncs:
    """Stands in for ``os.fdatasync`` on the journal's file: counts the calls, holds the first one until released
    (a slow disk), and fails the calls it is told to (a full disk)."""

    def __init__(self, real: object, fd: int, fail: int = 0) -> None:
        self.real = real
        self.fd = fd
        self.calls = 0
        self.in_flight = 0
        self.fail = fail
        self.first_entered = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        if fd != self.fd:
            self.real(fd)  # type: ignore[operator]
            return
        with self.lock:
            self.calls += 1
            first = self.calls == 1
            self.in_flight += 1
        try:
            if first:
                self.first_entered.set()
                self.release.wait(10)
            if self.fail:
                self.fail -= 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.real(fd)  # type: ignore[operator]
        finally:
            with self.lock:
                self.in_flight -= 1


def test_records_written_during_a_sync_share_one_more_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    try:
        journal.compact([])
        syncs = _Syncs(os.fdatasync, journal._fd)
        monkeypatch.setattr(os, "fdatasync", syncs)
        first = journal.write(RECORD)
        waiters = [threading.Thread(target=journal.wait, args=(first,))]
        waiters[0].start()
        assert syncs.first_entered.wait(10), "the first waiter syncs"
        # Written while that sync is in flight: it cannot cover them (it began before they were written).
        later = [journal.write(RECORD) for _ in range(3)]
        waiters += [threading.Thread(target=journal.wait, args=(t,)) for t in later]
        for w in waiters[1:]:
            w.start()
        deadline = time.monotonic() + 1.0  # time for a waiter that wrongly starts its own sync to start it
        while time.monotonic() < deadline and syncs.calls == 1:
            time.sleep(0.01)
        started_meanwhile = syncs.calls - 1
        syncs.release.set()
        for w in waiters:
            w.join(10)
        assert not any(w.is_alive() for w in waiters)
        assert started_meanwhile == 0, "a second sync started while one was in flight"
        assert syncs.calls == 2, f"{syncs.calls} syncs for a record and 3 written during its sync (group commit: 2)"
        assert all(journal.settled(t) == (True, None) for t in [first, *later])
    finally:
        monkeypatch.undo()
        journal.close()


def test_a_record_that_could_not_be_synced_is_cut_off_and_the_numbering_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    try:
        journal.compact([])
        journal.append({**RECORD, "seq": 1})  # acknowledged
        syncs = _Syncs(os.fdatasync, journal._fd, fail=1)
        syncs.release.set()
        monkeypatch.setattr(os, "fdatasync", syncs)
        with pytest.raises(JournalWriteError, match=r"cannot make .* durable"):
            journal.append({**RECORD, "seq": 2})  # the disk is full: 507, not applied
        journal.append({**RECORD, "seq": 3})  # the disk has room again
    finally:
        monkeypatch.undo()
        journal.close()
    lines = path.read_bytes().split(b"\n")[:-1]
    assert [int(line.split(b" ", 1)[0]) for line in lines] == [1, 2, 3], "checkpoint, seq 1, seq 3: numbered from 1"
    again = Journal(path)
    try:
        assert again.recovery.problems == [], again.recovery.problems
        assert [r["seq"] for r in again.replay()] == [1, 3], "what was acknowledged, not the refused record"
    finally:
        again.close()


def test_a_record_the_disk_could_not_take_is_cut_off_and_the_numbering_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agent.md: "A record that cannot be made durable is cut off the file again: its request gets 507 and a
    restart does not bring it back". Here the disk fills in the middle of writing the record (write(2) takes part of
    it, then fails with ENOSPC): the writer is told why (the errno the API maps to 507), the part written is cut off,
    and the next record is the next number, so a restart replays exactly what was acknowledged, without damage."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    try:
        journal.compact([])
        journal.append({**RECORD, "seq": 1})
        real_write = os.write
        calls = {"n": 0}

        def fills_up(fd: int, data: bytes) -> int:
            if fd != journal._fd:
                return real_write(fd, data)
            calls["n"] += 1
            if calls["n"] == 1:
                return real_write(fd, bytes(data)[:10])  # part of the line reaches the file
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(os, "write", fills_up)
        with pytest.raises(JournalWriteError) as refused:
            journal.append({**RECORD, "seq": 2})
        assert refused.value.errno == errno.ENOSPC and "cannot write to" in str(refused.value)
        monkeypatch.undo()
        journal.append({**RECORD, "seq": 3})
    finally:
        monkeypatch.undo()
        journal.close()
    lines = path.read_bytes().split(b"\n")[:-1]
    assert [int(line.split(b" ", 1)[0]) for line in lines] == [1, 2, 3], "checkpoint, seq 1, seq 3"
    again = Journal(path)
    try:
        assert again.recovery.problems == [] and [r["seq"] for r in again.replay()] == [1, 3]
    finally:
        again.close()


def test_a_refused_record_that_cannot_be_cut_off_stops_every_later_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When a refused record cannot be cut off either (ftruncate fails too), the file holds a record the caller was
    told was not applied: nothing more may be written after it (a later acknowledged record would make it look
    applied on replay), every later write is refused with the way out docs/agent.md gives (restart with
    --salvage-journal), and a clean stop does not raise the high-water mark over the refused record."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    journal.append({**RECORD, "seq": 1})
    journal.close()
    journal = Journal(path)
    journal.compact(journal.replay())
    meta_before = path.with_name("journal.jsonl.meta").read_bytes()
    syncs = _Syncs(os.fdatasync, journal._fd, fail=1)
    syncs.release.set()

    def cannot_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fdatasync", syncs)
    monkeypatch.setattr(os, "ftruncate", cannot_truncate)
    try:
        with pytest.raises(JournalWriteError, match=r"cannot make .* durable"):
            journal.append({**RECORD, "seq": 2})
        monkeypatch.undo()
        with pytest.raises(JournalWriteError, match="--salvage-journal"):
            journal.write({**RECORD, "seq": 3})
    finally:
        monkeypatch.undo()
        journal.close()
    assert path.with_name("journal.jsonl.meta").read_bytes() == meta_before
    assert b'"seq":3' not in path.read_bytes()


def test_a_failed_sync_does_not_take_back_what_an_earlier_one_made_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed sync refuses only the records written since the last sync that succeeded: a record acknowledged
    before it stays settled without error (docs/agent.md: a change is answered once on disk; only a record that
    cannot be made durable is refused, 507)."""
    journal = Journal(tmp_path / "journal.jsonl")
    try:
        journal.compact([])
        first = journal.write({**RECORD, "seq": 1})
        second = journal.write({**RECORD, "seq": 2})
        journal.wait(second)
        syncs = _Syncs(os.fdatasync, journal._fd, fail=1)
        syncs.release.set()
        monkeypatch.setattr(os, "fdatasync", syncs)
        refused = journal.write({**RECORD, "seq": 3})
        with pytest.raises(JournalWriteError):
            journal.wait(refused)
        monkeypatch.undo()
        assert journal.settled(first) == (True, None) and journal.settled(second) == (True, None)
        assert journal.settled(refused)[0] is True and journal.settled(refused)[1] is not None
    finally:
        monkeypatch.undo()
        journal.close()


def test_a_state_dir_an_earlier_agent_wrote_is_read_as_it_is(tmp_path: Path) -> None:
    """State dirs outlive the agent that wrote them: one written by an earlier fakehw (the checked format of
    docs/agent.md: lines ``<number> <crc32> <json>``, numbered from 1, the CRC-32 of number and body as 8 hex
    digits; and its meta file, version 1, with the epoch, the high-water mark and the reserved id blocks) is read as
    it is, without --salvage-journal: the records it holds come back, and ids resume above what it reserved. Every
    fakehw since the checked journal came in (commit edaa7fa, issue 17) writes meta version 1, keys sorted."""
    import zlib

    path = tmp_path / "journal.jsonl"
    bodies = ['{"epoch":3,"op":"checkpoint","time":1764000000.0}',
              '{"fault_counter":7,"generations":{"n0":4},"op":"generation","seq":9}']
    path.write_bytes(b"".join(f"{n} {zlib.crc32(f'{n} {b}'.encode()):08x} {b}\n".encode()
                              for n, b in enumerate(bodies, 1)))
    path.with_name("journal.jsonl.meta").write_bytes(
        b'{"epoch": 3, "records": 2, "reserved": {"event-seq": 1033, "fault-id": 1031}, "version": 1}\n')
    journal = Journal(path)
    try:
        assert journal.recovery.problems == [] and journal.recovery.upgraded is False, journal.recovery.to_json()
        assert journal.replay() == [{"fault_counter": 7, "generations": {"n0": 4}, "op": "generation", "seq": 9}]
        assert (journal.floor("fault-id"), journal.floor("event-seq"), journal.floor("pool-id")) == (1031, 1033, 0)
    finally:
        journal.close()
