"""The journal's report of itself, as the agent's ``GET /v1/health`` shows it (``journals.faults`` is
``Journal.recovery``, fakehw/agent/service.py), and its durability answer to a waiting request.

- docs/agent.md ("Durability and recovery"): a state dir written by an earlier fakehw (plain JSON lines: no
  numbers, checksums or meta file) is taken over and reported with ``upgraded: true``; the rewritten journal is in
  the checked format, so the next start reports no upgrade.
- "A change is answered only once its record is on disk (fdatasync)": a record written but not yet synced is not
  settled; once synced it is, without error.
"""

from __future__ import annotations

import json
from pathlib import Path

from fakehw.agent.journal import Journal


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
