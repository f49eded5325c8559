"""The MIG and platform journals' compaction (:class:`fakehw.agent.journal.SnapshotCompaction`): rewritten as one
snapshot every ``every`` appended records, and a rewrite that fails after a durable change never fails the change."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import pytest

import fakehw.agent.journal as journal_module
from fakehw.agent.journal import Journal, SnapshotCompaction
from fakehw.render.atomic import atomic_write


def _lines(path: Path) -> list[str]:
    return path.read_bytes().decode().splitlines()


def _appended(journal: Journal, compaction: SnapshotCompaction, n: int) -> None:
    for i in range(n):
        journal.append({"op": "facts", "i": i})
        compaction.appended()


def test_a_facts_journal_is_one_snapshot_again_every_n_records(tmp_path: Path) -> None:
    """At start (``now``) and after every third append the file is the checkpoint and the snapshot; in between it
    grows by one line per record."""
    journal = Journal(tmp_path / "facts.jsonl")
    snapshots: list[int] = []

    def snapshot() -> list[dict[str, Any]]:
        snapshots.append(len(snapshots))
        return [{"op": "snapshot", "n": len(snapshots)}]

    compaction = SnapshotCompaction(journal, snapshot, every=3)
    compaction.now()
    assert len(_lines(journal.path)) == 2
    _appended(journal, compaction, 2)
    assert len(_lines(journal.path)) == 4
    _appended(journal, compaction, 1)
    assert len(_lines(journal.path)) == 2 and len(snapshots) == 2
    journal.close()


def test_a_rewrite_that_fails_is_logged_and_tried_again_after_as_many_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A full disk while rewriting: the append that triggered it already holds (appended() does not raise, the
    records stay in the file), a warning names the journal, and the next rewrite comes ``every`` records later."""
    journal = Journal(tmp_path / "facts.jsonl")
    compaction = SnapshotCompaction(journal, lambda: [{"op": "snapshot"}], every=2)
    compaction.now()
    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal_module, "atomic_write", full_disk)
    with caplog.at_level(logging.WARNING, logger="fakehw.agent.journal"):
        _appended(journal, compaction, 2)
    assert "facts.jsonl not compacted (No space left on device)" in caplog.text
    assert len(_lines(journal.path)) == 4
    monkeypatch.setattr(journal_module, "atomic_write", atomic_write)
    _appended(journal, compaction, 1)
    assert len(_lines(journal.path)) == 5
    _appended(journal, compaction, 1)
    assert len(_lines(journal.path)) == 2
    journal.close()


def test_compacting_after_fewer_than_one_record_is_refused(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "facts.jsonl")
    with pytest.raises(ValueError, match="at least 1 record, not 0"):
        SnapshotCompaction(journal, lambda: [], every=0)
    journal.close()
