"""Finding 2: every journal corruption is refused with a clear error, or recovered loudly with the original kept.

Before: unreadable lines were skipped, a zero-length or deleted journal came back as 0 faults and fault ids
restarted at f-000001 (an old client could heal someone else's fault), the event sequence and generations went
backwards, 4 KiB of zeros dropped 19 of 35 faults with one warning, a valid-JSON edit of a heal record
resurrected a fault, and every start compacted the journal over the damaged original.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakehw.agent.journal import Journal, JournalDamaged, decode, encode
from fakehw.agent.service import AgentService
from fakehw.model import load_profile
from fakehw.model.system import System

PROFILE = "gh200"
NODE = "gh200-0"
FAULTS = 35
FILES = "on-demand"
"""The agents here make no node files (none is asked for): what is checked is the journal and what the API reports,
and rendering each agent's node (~14,000 entries) was most of this file's time."""


@pytest.fixture(scope="module")
def system() -> System:
    return load_profile(PROFILE)


@dataclass
class Before:
    """What the agent had handed out before the damage."""

    ids: list[str]
    active: set[str]
    generation: int
    last_seq: int


def build(system: System, state_dir: Path, heal_every: int = 3) -> Before:
    """35 faults, every third healed, then a clean stop (the journal holds injects and heals)."""
    svc = AgentService(system, state_dir, files=FILES)
    ids = [svc.inject(NODE, {"kind": "xid", "device": "gpu0", "code": 13 + i % 5}).id for i in range(FAULTS)]
    for fid in ids[::heal_every]:
        svc.heal(fid)
    before = Before(ids, {f.id for f in svc.faults()}, svc.state(NODE).generation, svc.last_seq)
    svc.close()
    return before


def lines_of(journal: Path) -> list[bytes]:
    return journal.read_bytes().split(b"\n")[:-1]


def zero_length(d: Path) -> None:
    (d / "journal.jsonl").write_bytes(b"")


def deleted(d: Path) -> None:
    (d / "journal.jsonl").unlink()


def zeros_in_the_middle(d: Path) -> None:
    data = (d / "journal.jsonl").read_bytes()
    middle = len(data) // 3
    (d / "journal.jsonl").write_bytes(data[:middle] + b"\0" * 4096 + data[middle + 4096:])


def heal_record_edited(d: Path) -> None:
    """A change that keeps the line valid JSON (a flipped bit in a fault id): the healed fault would come back."""
    journal = d / "journal.jsonl"
    lines = lines_of(journal)
    k = next(i for i, line in enumerate(lines) if b'"op":"heal"' in line)
    lines[k] = lines[k].replace(b'"f-0000', b'"f-0001', 1)
    journal.write_bytes(b"\n".join(lines) + b"\n")


def line_removed(d: Path) -> None:
    journal = d / "journal.jsonl"
    lines = lines_of(journal)
    del lines[len(lines) // 2]
    journal.write_bytes(b"\n".join(lines) + b"\n")


def end_cut_at_a_line(d: Path) -> None:
    journal = d / "journal.jsonl"
    journal.write_bytes(b"\n".join(lines_of(journal)[:-5]) + b"\n")


def meta_deleted(d: Path) -> None:
    (d / "journal.jsonl.meta").unlink()


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "zero-length": (zero_length, "the journal is empty but journal.jsonl.meta says it held at least"),
    "deleted": (deleted, "the journal is missing but journal.jsonl.meta says it held at least"),
    "4 KiB of zeros": (zeros_in_the_middle, "zeroed bytes"),
    "valid-JSON edit of a heal": (heal_record_edited, "fails its checksum (altered)"),
    "a line removed": (line_removed, "records are missing or out of order"),
    "end cut at a line": (end_cut_at_a_line, "(its end is missing)"),
    "meta file deleted": (meta_deleted, "journal.jsonl.meta is missing"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damage_is_refused_then_salvaged_loudly_with_the_original_kept(system: System, tmp_path: Path,
                                                                     case: str) -> None:
    damage, message = DAMAGE[case]
    before = build(system, tmp_path)
    damage(tmp_path)
    journal = tmp_path / "journal.jsonl"
    damaged = journal.read_bytes() if journal.exists() else None

    with pytest.raises(JournalDamaged) as refused:  # never a silent start (no fault lost or brought back)
        AgentService(system, tmp_path, files=FILES)
    assert message in str(refused.value) and "--salvage-journal" in str(refused.value), str(refused.value)
    assert (journal.read_bytes() if journal.exists() else None) == damaged, "a refusal changes nothing"

    svc = AgentService(system, tmp_path, files=FILES, salvage=True)
    try:
        recovery = svc.journal.recovery
        assert recovery.problems and any(message in p for p in recovery.problems), recovery.problems
        if damaged is not None:
            assert recovery.kept is not None and Path(recovery.kept).read_bytes() == damaged
        assert {f.id for f in svc.faults()} <= set(before.ids), "nothing made up"
        health = svc.health()["journals"]["faults"]
        assert health["problems"] and health["kept"] == recovery.kept
        # Nothing handed out before is handed out again, and nothing goes backwards.
        fresh = svc.inject(NODE, {"kind": "xid", "device": "gpu0", "code": 31})
        assert int(fresh.id.split("-")[1]) > max(int(i.split("-")[1]) for i in before.ids)
        assert svc.state(NODE).generation > before.generation
        assert svc.last_seq > before.last_seq
    finally:
        svc.close()
    # The salvaged journal is sound: the next start needs no salvage and finds the same faults.
    again = AgentService(system, tmp_path, files=FILES)
    try:
        assert fresh.id in {f.id for f in again.faults()} and not again.journal.recovery.problems
    finally:
        again.close()


def test_zeros_in_the_middle_are_counted_and_the_rest_is_kept(system: System, tmp_path: Path) -> None:
    before = build(system, tmp_path, heal_every=FAULTS)
    zeros_in_the_middle(tmp_path)
    svc = AgentService(system, tmp_path, files=FILES, salvage=True)
    try:
        kept = {f.id for f in svc.faults()}
        recovery = svc.journal.recovery
        assert 0 < len(kept) < len(before.active)
        # Every inject whose record was lost is counted (35 injects, 1 heal: the heal was not in the zeros).
        assert recovery.dropped == len(before.active) - len(kept), recovery
    finally:
        svc.close()


def test_a_torn_last_record_is_dropped_with_a_warning(system: System, tmp_path: Path) -> None:
    before = build(system, tmp_path)
    whole = len(lines_of(tmp_path / "journal.jsonl"))
    with open(tmp_path / "journal.jsonl", "ab") as fh:
        fh.write(encode(999, {"op": "inject"})[:25])  # the agent died writing it: it was never acknowledged
    svc = AgentService(system, tmp_path, files=FILES)  # no salvage needed
    try:
        assert {f.id for f in svc.faults()} == before.active
        # Named by its line number in the file as an editor or `sed -n Np` counts it: after the whole lines.
        assert svc.journal.recovery.dropped == 1
        assert svc.journal.recovery.problems[0].startswith(f"line {whole + 1} is torn"), svc.journal.recovery.problems
        assert svc.journal.recovery.kept is not None
    finally:
        svc.close()


def test_an_older_journal_put_back_is_refused(system: System, tmp_path: Path) -> None:
    build(system, tmp_path)
    old = (tmp_path / "journal.jsonl").read_bytes()
    AgentService(system, tmp_path, files=FILES).close()  # a restart compacts into a new epoch
    (tmp_path / "journal.jsonl").write_bytes(old)
    with pytest.raises(JournalDamaged, match="an older or foreign journal"):
        AgentService(system, tmp_path, files=FILES)


def test_a_damaged_platform_journal_is_refused_too(tmp_path: Path) -> None:
    system = load_profile("cxl-pool")
    AgentService(system, tmp_path, files=FILES).close()
    (tmp_path / "platform.jsonl").write_bytes(b"")
    with pytest.raises(JournalDamaged, match=r"platform\.jsonl is damaged: the journal is empty"):
        AgentService(system, tmp_path, files=FILES)


def test_the_cli_refuses_with_a_clear_message_and_no_traceback(system: System, tmp_path: Path) -> None:
    build(system, tmp_path)
    zero_length(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "fakehw.cli", "agent", "--profile", PROFILE, "--state-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"journal {tmp_path / 'journal.jsonl'} is damaged: the journal is empty" in proc.stderr
    assert "--salvage-journal" in proc.stderr


def test_records_are_numbered_and_checksummed(system: System, tmp_path: Path) -> None:
    build(system, tmp_path)
    numbers = [decode(line)[0] for line in lines_of(tmp_path / "journal.jsonl")]
    assert numbers == list(range(1, len(numbers) + 1))
    meta = json.loads((tmp_path / "journal.jsonl.meta").read_text())
    assert meta["records"] == numbers[-1], "a clean stop records the high-water mark"
    assert meta["reserved"]["fault-id"] > FAULTS, "ids are reserved ahead of use"


def test_the_first_fault_id_is_reserved_too(system: System, tmp_path: Path) -> None:
    """docs/agent.md: fault ids "only ever grow, across restarts and after a salvage". The first id an agent hands
    out (f-000001, ids start at 1) must be reserved like every later one: with one fault and the journal lost,
    the salvaged agent must not hand f-000001 out again (an old client could heal someone else's fault)."""
    svc = AgentService(system, tmp_path, files=FILES)
    first = svc.inject(NODE, {"kind": "xid", "device": "gpu0", "code": 13}).id
    svc.close()
    assert first == "f-000001"
    deleted(tmp_path)
    svc = AgentService(system, tmp_path, files=FILES, salvage=True)
    try:
        fresh = svc.inject(NODE, {"kind": "xid", "device": "gpu0", "code": 31}).id
        assert int(fresh.split("-")[1]) > 1, f"{fresh} after f-000001 was handed out and the journal lost"
    finally:
        svc.close()


def test_a_checksum_field_edited_to_the_same_value_is_still_damage(tmp_path: Path) -> None:
    """docs/agent.md: "Anything else [than a torn last line] stops the agent with a message naming the file, the
    line and the problem." A zero put in front of a record's checksum leaves its value, but the line is not what
    the journal wrote (a record is ``<number> <crc32 as 8 hex digits> <json>``): it is refused, not read."""
    path = _closed_journal(tmp_path, 1, 2)
    lines = lines_of(path)
    number, crc, body = lines[1].split(b" ", 2)
    lines[1] = b" ".join([number, b"0" + crc, body])
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert "line 2 is not a journal record" in str(refused.value), str(refused.value)


def test_what_was_lost_is_logged_once_and_a_sound_journal_logs_nothing(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """docs/agent.md: a recovered journal "logs what was lost" (a warning an operator sees once, at the start
    that recovered it); a journal that checked out is no news, and later compactions do not repeat it."""
    path = _closed_journal(tmp_path, 1)
    caplog.set_level(logging.WARNING, logger="fakehw.agent.journal")
    sound = Journal(path)
    sound.compact(sound.replay())
    sound.close()
    assert not [r for r in caplog.records if "recovered" in r.getMessage()], caplog.text
    with open(path, "ab") as fh:
        fh.write(encode(3, {"op": "inject"})[:25])  # torn: a record lost
    recovered = Journal(path)
    recovered.compact(recovered.replay())
    recovered.compact(recovered.replay())
    recovered.close()
    said = [r.getMessage() for r in caplog.records if "recovered" in r.getMessage()]
    assert len(said) == 1 and "1 records lost" in said[0] and "line 3 is torn" in said[0], said


@pytest.mark.parametrize("garbage", [b'{"version": 1, "epoch"', b"[]\n", b'{"version": 1, "epoch": 0, "records": "3"}'])
def test_a_meta_file_that_does_not_parse_is_damage_named_by_its_file(tmp_path: Path, garbage: bytes) -> None:
    """docs/agent.md: the meta file holds the journal's high-water mark and epoch, and damage "stops the agent with a
    message naming the file ... and the problem" (never a traceback). A meta file cut short, of another shape, or
    with a mark that is not a number is that: refused, then salvaged from the journal's own records."""
    path = _closed_journal(tmp_path, 1)
    path.with_name("journal.jsonl.meta").write_bytes(garbage)
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert "journal.jsonl.meta does not parse" in str(refused.value), str(refused.value)
    salvaged = Journal(path, salvage=True)
    try:
        assert [r["seq"] for r in salvaged.replay()] == [1]
        assert any("journal.jsonl.meta does not parse" in p for p in salvaged.recovery.problems)
    finally:
        salvaged.close()


@pytest.mark.parametrize("count", range(1, 9))
def test_the_refusal_names_or_counts_every_problem(tmp_path: Path, count: int) -> None:
    """A refusal shows the first problems and counts the rest ("; and N more"): however many there are, each one is
    either shown or counted, exactly once, so an operator never reads fewer problems than the journal has (and is
    never told of "0 more")."""
    import re

    problems = [f"line {i} fails its checksum (altered)" for i in range(1, count + 1)]
    message = str(JournalDamaged(tmp_path / "journal.jsonl", problems))
    shown = sum(p in message for p in problems)
    more = re.search(r"; and (\d+) more\.", message)
    assert shown + (int(more.group(1)) if more else 0) == count, message
    assert more is None or int(more.group(1)) > 0, message  # never "and 0 more"
    assert shown >= 1 and all(p in message for p in problems[:shown]), message  # the first ones, in order


def test_records_damaged_past_the_high_water_mark_are_counted_lost(tmp_path: Path) -> None:
    """The meta file's high-water mark is only raised now and then (at a reservation or a clean stop), so records
    after it are known only from the journal itself. Two such records whose lines no longer check out (a flipped
    bit each) are two records lost: the salvage report says 2, not 0 because the numbers still run without a gap."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    for seq in range(1, 6):
        journal.append({"op": "generation", "generations": {}, "fault_counter": 0, "seq": seq})
    os.close(journal._fd)  # the agent stops dead: no clean close raises the mark
    lines = lines_of(path)
    for k in (-2, -1):
        lines[k] = lines[k].replace(b'"seq":', b'"seQ":')
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    salvaged = Journal(path, salvage=True)
    try:
        assert [r["seq"] for r in salvaged.replay()] == [1, 2, 3]
        assert salvaged.recovery.dropped == 2, salvaged.recovery.to_json()
    finally:
        salvaged.close()


def test_a_meta_file_that_cannot_be_read_is_damage_named_by_its_file(tmp_path: Path) -> None:
    """docs/agent.md: damage "stops the agent with a message naming the file ... and the problem", never a traceback.
    A meta file that cannot be read at all (here a directory stands at its name: read(2) fails with EISDIR, which a
    root agent gets where permissions would not stop it) is refused naming it and why, then salvaged from the
    journal's own records."""
    path = _closed_journal(tmp_path, 1)
    meta = path.with_name("journal.jsonl.meta")
    meta.unlink()
    meta.mkdir()
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert f"{meta} cannot be read (Is a directory)" in str(refused.value), str(refused.value)
    salvaged = Journal(path, salvage=True)
    try:
        assert [r["seq"] for r in salvaged.replay()] == [1]
    finally:
        salvaged.close()


def test_a_sound_journal_is_never_copied_aside(tmp_path: Path) -> None:
    """docs/agent.md ("Durability and recovery"): only a journal that was damaged is copied to
    ``journal.jsonl.damaged-<time>``, and ``GET /v1/health`` then says where (``kept``). A journal that checks out is
    compacted in place at every start: copying it aside too would leave a "damaged" file per restart (filling the
    disk, and telling an operator of damage there never was)."""
    path = tmp_path / "journal.jsonl"
    first = Journal(path)  # a new state dir: no journal yet
    first.compact([])
    first.append({"op": "generation", "generations": {}, "fault_counter": 0, "seq": 1})
    first.close()
    assert first.recovery.kept is None, first.recovery.to_json()
    again = Journal(path)  # a restart from a sound journal
    again.compact(again.replay())
    again.close()
    assert again.recovery.kept is None and again.recovery.to_json()["kept"] is None, again.recovery.to_json()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.jsonl", "journal.jsonl.meta"]


_OPEN_UNDER_A_MEMORY_CAP = """
import resource, sys
from pathlib import Path
from fakehw.agent.journal import Journal, JournalDamaged
size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
cap = size + (256 << 20)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
try:
    Journal(Path(sys.argv[1]))
except JournalDamaged as exc:
    print(exc)
"""


def test_a_huge_meta_file_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    """The guide: "never ... unbounded memory"; docs/agent.md: damage stops the agent "with a message naming the file
    ... and the problem", never a traceback. The meta file the agent writes is a few hundred bytes (version, epoch,
    mark, three counters); one of 4 GiB (a sparse file: no disk used) is not one it wrote, and must be refused by
    looking at its beginning, not by reading all of it into memory. The journal is opened in a process whose
    address space is capped at 256 MiB above what it uses (setrlimit(2) RLIMIT_AS: an allocation past it fails
    whatever the kernel's overcommit setting), so reading the whole file cannot succeed there."""
    path = _closed_journal(tmp_path)
    meta = path.with_name("journal.jsonl.meta")
    with open(meta, "r+b") as fh:
        fh.truncate(4 << 30)  # the real meta file's bytes first, then 4 GiB of holes (zeros)
    proc = subprocess.run([sys.executable, "-c", _OPEN_UNDER_A_MEMORY_CAP, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"{meta} is larger than a meta file can be" in proc.stdout, proc.stdout


def test_a_meta_file_is_read_up_to_its_bound_and_refused_past_it(tmp_path: Path) -> None:
    """The refusal above says "more than N bytes": a meta file of exactly N bytes (the agent's own JSON, then
    spaces, which JSON allows after a value: RFC 8259, section 2) is read and used; one byte more is refused, naming
    the file, and a salvage then goes on from the journal's own records."""
    from fakehw.agent.journal import MAX_META_BYTES

    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    journal.append({"op": "generation", "generations": {}, "fault_counter": 0, "seq": 1})
    journal.reserve("fault-id", 3)
    journal.close()
    meta = path.with_name("journal.jsonl.meta")
    written = meta.read_bytes()
    meta.write_bytes(written + b" " * (MAX_META_BYTES - len(written)))
    at_bound = Journal(path)
    try:
        assert at_bound.recovery.problems == [] and at_bound.floor("fault-id") >= 3, at_bound.recovery.to_json()
    finally:
        at_bound.close()
    meta.write_bytes(written + b" " * (MAX_META_BYTES + 1 - len(written)))
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert f"{meta} is larger than a meta file can be (more than {MAX_META_BYTES} bytes" in str(refused.value)
    salvaged = Journal(path, salvage=True)
    try:
        assert [r["seq"] for r in salvaged.replay()] == [1]
    finally:
        salvaged.close()


@pytest.mark.parametrize("body", [b"[]", b'{"seq":1}', b'{"op":3}', b"NaN", b"{"])
def test_a_checksummed_line_that_is_no_record_is_damage_named_by_its_line(tmp_path: Path, body: bytes) -> None:
    """docs/agent.md: a line is ``<number> <crc32> <json>`` and damage "stops the agent with a message naming the
    file, the line and the problem" (never a traceback). A line whose CRC-32 of number and body checks out (written
    by something else, or a collision) but whose JSON is not a record object with its ``op`` name is that damage:
    refused, then skipped by a salvage that keeps the records around it."""
    import zlib

    path = _closed_journal(tmp_path, 1)
    line = f"3 {zlib.crc32(b'3 ' + body):08x} ".encode() + body + b"\n"
    with open(path, "ab") as fh:
        fh.write(line + encode(4, {"op": "generation", "generations": {}, "fault_counter": 0, "seq": 4}))
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert f"journal {path} is damaged: line 3 is not a journal record" in str(refused.value), str(refused.value)
    salvaged = Journal(path, salvage=True)
    try:
        assert [r["seq"] for r in salvaged.replay()] == [1, 4] and salvaged.recovery.dropped == 1
    finally:
        salvaged.close()


@pytest.mark.parametrize(("meta", "why"), [
    (b'{"version": 2, "epoch": 1, "records": 2, "reserved": {}}', "unknown format"),
    (b'{"epoch": 1, "records": 2, "reserved": {}}', "unknown format"),
    (b'{"version": 1, "epoch": 1, "records": 2, "reserved": []}', "bad reservations"),
    (b'{"version": 1, "epoch": 1, "records": 2, "reserved": {"fault-id": "1025"}}', "bad reservations"),
    (b'{"version": 1, "epoch": "1", "records": 2, "reserved": {}}', "bad epoch or high-water mark"),
    (b'{"version": 1, "records": 2, "reserved": {}}', "bad epoch or high-water mark"),
    # JSON's true is a literal name, not a number (RFC 8259, sections 3 and 6); Python reads it as a bool, an int
    # equal to 1, so each of these would pass for epoch 1, a mark of 1 or a reserved block ending at 1.
    (b'{"version": 1, "epoch": true, "records": 2, "reserved": {}}', "bad epoch or high-water mark"),
    (b'{"version": 1, "epoch": 1, "records": true, "reserved": {}}', "bad epoch or high-water mark"),
    (b'{"version": 1, "epoch": 1, "records": 2, "reserved": {"fault-id": true}}', "bad reservations"),
    # Counts: the agent writes epochs, marks and id blocks of 0 and up; a negative one is not one it wrote.
    (b'{"version": 1, "epoch": 1, "records": -1, "reserved": {}}', "bad epoch or high-water mark"),
    (b'{"version": 1, "epoch": -1, "records": 2, "reserved": {}}', "bad epoch or high-water mark"),
    (b'{"version": 1, "epoch": 1, "records": 2, "reserved": {"fault-id": -1}}', "bad reservations"),
])
def test_a_meta_file_of_another_shape_is_refused_saying_what_is_wrong(tmp_path: Path, meta: bytes, why: str) -> None:
    """The meta file holds ids the agent must never hand out again (docs/agent.md: they "only ever grow, across
    restarts"); one from a newer format, without its version, or with reservations, epoch or mark that are not
    counts is not read as if it were sound (a string "1025" or ``true`` taken as a number, a list taken for
    reservations), nor does it crash the agent: it is refused naming the file and what is wrong."""
    path = _closed_journal(tmp_path, 1)
    path.with_name("journal.jsonl.meta").write_bytes(meta)
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert f"journal.jsonl.meta does not parse ({why})" in str(refused.value), str(refused.value)


def test_two_recoveries_in_one_second_keep_both_originals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agent.md: a salvage "copies the damaged file to journal.jsonl.damaged-<time> first", and recovery never
    overwrites an original. The time is to the second (ISO 8601's basic format, UTC), so two recoveries within one
    second (an agent that dies again right after recovering) must both find a name of their own: the first copy is
    named by the time alone, the second one differently, and the first copy still holds the first original."""
    import datetime
    import time

    import fakehw.agent.journal as journal_module

    when = datetime.datetime(2026, 11, 26, 15, 4, 5, tzinfo=datetime.UTC)
    frozen = time.gmtime(when.timestamp())
    monkeypatch.setattr(journal_module.time, "gmtime", lambda *_: frozen)
    path = _closed_journal(tmp_path)
    originals, kept = [], []
    for seq in (1, 2):
        with open(path, "ab") as fh:
            fh.write(encode(2, {"op": "inject", "seq": seq})[:25])  # torn: a recovery keeps the original
        originals.append(path.read_bytes())
        recovered = Journal(path)
        recovered.compact(recovered.replay())
        recovered.close()
        assert recovered.recovery.kept is not None
        kept.append(Path(recovered.recovery.kept))
    assert kept[0].name == "journal.jsonl.damaged-20261126T150405Z", kept
    assert kept[1] != kept[0] and kept[1].name.startswith(kept[0].name), kept
    assert [k.read_bytes() for k in kept] == originals


def test_zeroed_bytes_are_counted_and_a_zeroed_line_is_named_so(tmp_path: Path) -> None:
    """docs/agent.md: damage is refused "with a message naming the file, the line and the problem". Zeros are what
    a lost or unwritten disk block reads back as (ext4 and XFS after a crash, a sparse hole): a line partly
    overwritten by 7 zero bytes says so with that count, and a line that is nothing but zeros says it is zeroed."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    for seq in range(1, 4):
        journal.append({"op": "generation", "generations": {}, "fault_counter": 0, "seq": seq})
    journal.close()
    lines = lines_of(path)
    lines[1] = lines[1][:12] + b"\0" * 7 + lines[1][19:]
    lines[2] = b"\0" * len(lines[2])
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert "line 2 holds 7 zeroed bytes; line 3 is blank or zeroed" in str(refused.value), str(refused.value)


def test_a_checkpoint_in_the_middle_of_a_journal_is_damage(tmp_path: Path) -> None:
    """A journal starts with the checkpoint its compaction wrote (docs/agent.md: a journal from another epoch is
    damage, and the checkpoint names the epoch). A checkpoint further down, even numbered in sequence and with its
    checksum right (a journal spliced after another), would silently move the journal to another epoch: it is
    refused naming its line."""
    path = _closed_journal(tmp_path, 1)
    with open(path, "ab") as fh:
        fh.write(encode(3, {"op": "checkpoint", "epoch": 2, "time": 0.0}))
        fh.write(encode(4, {"op": "generation", "generations": {}, "fault_counter": 0, "seq": 4}))
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert "line 3 is a checkpoint in the middle of the journal" in str(refused.value), str(refused.value)


def test_a_journal_that_held_only_its_checkpoint_and_is_emptied_is_damage(tmp_path: Path) -> None:
    """docs/agent.md: "A journal that is empty, missing, shorter than the mark ... is damage, not a fresh start."
    The smallest journal an agent leaves is its checkpoint alone (a start with no fault since: the mark is 1); that
    one emptied is damage too, with the mark it held named."""
    path = _closed_journal(tmp_path)
    path.write_bytes(b"")
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert "the journal is empty but journal.jsonl.meta says it held at least 1 records" in str(refused.value)


def test_ids_reserved_before_the_first_compaction_survive_a_fresh_start(tmp_path: Path) -> None:
    """A reservation may come before the journal's first compaction (the meta file then marks 0 records: the
    journal never held one). A start from there finds the empty journal the first open created: no damage (nothing
    was acknowledged), and the ids reserved are never handed out again (docs/agent.md: ids "only ever grow")."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.reserve("fault-id", 1)
    journal.close()
    again = Journal(path)
    try:
        assert again.recovery.problems == [] and again.replay() == [], again.recovery.to_json()
        assert again.floor("fault-id") >= 1
    finally:
        again.close()



def _closed_journal(tmp_path: Path, *seqs: int) -> Path:
    """A journal as a cleanly stopped agent leaves it: compacted (so it has its meta file), one generation record
    per ``seqs``, closed. The path of its journal file."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    for seq in seqs:
        journal.append({"op": "generation", "generations": {}, "fault_counter": 0, "seq": seq})
    journal.close()
    return path

def _record_whose_crc_starts_with_00(tmp_path: Path) -> tuple[Path, int]:
    """A journal (checkpoint, then one record) whose second line's CRC-32 is below 0x01000000 (its 8 hex digits
    start with "00", room for a "0x" prefix of the same value) and has a letter among its digits, and that line's
    index."""
    import zlib

    for seq in range(100_000):
        body = json.dumps({"op": "generation", "generations": {}, "fault_counter": 0, "seq": seq},
                          separators=(",", ":"), sort_keys=True)
        crc = zlib.crc32(f"2 {body}".encode())
        if crc < 1 << 24 and set(f"{crc:08x}") & set("abcdef"):
            break
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.compact([])
    journal.append({"op": "generation", "generations": {}, "fault_counter": 0, "seq": seq})
    journal.close()
    assert lines_of(path)[1].split(b" ")[1].startswith(b"00")
    return path, 1


@pytest.mark.parametrize("edit", ["0x prefix", "+ prefix", "underscore", "upper case"])
def test_a_checksum_spelled_otherwise_with_the_same_value_is_damage(tmp_path: Path, edit: str) -> None:
    """A record is ``<number> <crc32 as 8 hex digits> <json>`` (docs/agent.md), and the journal writes those digits
    in lower case (as zlib's CRC-32 printed ``%08x``). A checksum field edited so that it keeps its value when read
    as a number the lenient way (Python's int(x, 16) also takes "0x", a sign, underscores and upper case) is still
    not what the journal wrote: the line is refused as no record, never read as sound."""
    path, k = _record_whose_crc_starts_with_00(tmp_path)
    lines = lines_of(path)
    number, crc, body = lines[k].split(b" ", 2)
    spelled = {"0x prefix": b"0x" + crc[2:], "+ prefix": b"+" + crc[1:], "underscore": crc[:1] + b"_" + crc[2:],
               "upper case": crc.upper()}[edit]
    assert len(spelled) == 8 and spelled != crc and int(spelled, 16) == int(crc, 16)
    lines[k] = b" ".join([number, spelled, body])
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert f"line {k + 1} is not a journal record" in str(refused.value), str(refused.value)


def _journal_with_altered_lines(tmp_path: Path, records: int, altered: range) -> Path:
    """A cleanly closed journal (checkpoint, then ``records`` records) whose lines ``altered`` (1-based, as an editor
    counts them) each had one character of their JSON changed after the fact: each fails its checksum."""
    path = _closed_journal(tmp_path, *range(1, records + 1))
    lines = lines_of(path)
    for n in altered:
        lines[n - 1] = lines[n - 1].replace(b'"seq":', b'"seQ":')
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def test_the_health_report_lists_twenty_problems_and_counts_the_rest(tmp_path: Path) -> None:
    """docs/agent.md: ``GET /v1/health`` reports a recovered journal's problems (``journals.faults``), the first 20
    of them and ``problems_left_out``, how many more there were (the report is bounded however damaged the journal;
    an operator must still learn that there was more than it shows). A hand-damaged journal: lines 2 to 26 altered
    (25 problems, one per line) and line 27 then the first record read after record 1 (one more: records are
    missing): 26 problems, so 20 shown, in the order of the file, and 6 left out."""
    path = _journal_with_altered_lines(tmp_path, 30, range(2, 27))
    salvaged = Journal(path, salvage=True)
    try:
        report = salvaged.recovery.to_json()
    finally:
        salvaged.close()
    assert report["problems"] == [f"line {n} fails its checksum (altered)" for n in range(2, 22)], report
    assert report["problems_left_out"] == 6, report
    assert report["dropped"] == 25 and report["records"] == 5, report


def test_a_health_report_with_few_problems_leaves_none_out(tmp_path: Path) -> None:
    """The same report with 20 problems exactly (lines 2 to 20 altered, then the gap at line 21) lists them all and
    leaves none out; a sound journal reports none at all."""
    path = _journal_with_altered_lines(tmp_path, 25, range(2, 21))
    salvaged = Journal(path, salvage=True)
    try:
        report = salvaged.recovery.to_json()
    finally:
        salvaged.close()
    assert len(report["problems"]) == 20 and report["problems"][-1] == "line 21 is record 21, expected 2 (records " \
        "are missing or out of order)", report
    assert report["problems_left_out"] == 0, report
    sound = Journal(_closed_journal(tmp_path / "sound", 1))
    try:
        assert sound.recovery.to_json()["problems"] == [] and sound.recovery.to_json()["problems_left_out"] == 0
    finally:
        sound.close()


def test_the_recovery_warning_names_or_counts_every_problem(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """docs/agent.md: a salvage "logs what was lost". The warning names the first problems and counts the rest, like
    the refusal does ("; and N more"), so the log never reads as if there were fewer. Lines 2 to 8 of a journal
    altered by hand (7 problems, plus the gap they leave before line 9): 8 problems, the first 5 named in the
    file's order and 3 counted."""
    path = _journal_with_altered_lines(tmp_path, 10, range(2, 9))
    caplog.set_level(logging.WARNING, logger="fakehw.agent.journal")
    salvaged = Journal(path, salvage=True)
    salvaged.compact(salvaged.replay())
    salvaged.close()
    said = [r.getMessage() for r in caplog.records if "recovered" in r.getMessage()]
    assert len(said) == 1, said
    named = "; ".join(f"line {n} fails its checksum (altered)" for n in range(2, 7))
    assert f"({named}; and 3 more)" in said[0], said[0]
    assert "7 records lost" in said[0], said[0]



def test_an_older_journal_put_back_after_a_salvage_that_lost_the_meta_file_is_refused(tmp_path: Path) -> None:
    """docs/agent.md: "A journal that is ... of another epoch is damage, not a fresh start". The epoch is in two
    places, the meta file and the journal's checkpoint; a salvage after the meta file was lost has only the
    checkpoint left, and its compaction must still move to an epoch past it. Else the journal from before the
    salvage, put back (a backup restored, a snapshot rolled back), would carry the new epoch and be read as sound,
    bringing back what the salvaged agent has done since."""
    path = _closed_journal(tmp_path, 1)
    again = Journal(path)  # a restart: the journal is now at epoch 2 (the first compaction made epoch 1)
    again.compact(again.replay())
    again.close()
    old = path.read_bytes()
    path.with_name("journal.jsonl.meta").unlink()
    salvaged = Journal(path, salvage=True)
    salvaged.compact(salvaged.replay())
    salvaged.append({"op": "generation", "generations": {}, "fault_counter": 0, "seq": 2})
    salvaged.close()
    path.write_bytes(old)
    with pytest.raises(JournalDamaged, match=r"the journal is from epoch 2 but journal\.jsonl\.meta is at epoch 3"):
        Journal(path)


def test_a_new_state_dir_has_handed_out_no_id(tmp_path: Path) -> None:
    """Journal.floor: "ids of counter name up to this value may have been handed out before". A state dir the agent
    has never used (no journal, no meta file) has handed out none: every counter's floor is 0, so the first id is 1
    (tests above: the first fault id is f-000001). The state dir and its parents are made as needed."""
    journal = Journal(tmp_path / "new" / "state" / "journal.jsonl")
    try:
        assert journal.floor("fault-id") == journal.floor("pool-id") == 0
        assert journal.replay() == [] and journal.recovery.problems == []
    finally:
        journal.close()


def test_a_salvage_that_knows_of_no_lost_record_counts_none(tmp_path: Path) -> None:
    """Recovery.dropped counts records lost: torn or damaged lines seen, or records the meta file's mark says were
    there. With the meta file unreadable (garbage in it) and no journal at all, neither is known: the salvage reports
    the damage (the meta file named) and 0 records lost, not a count it made up."""
    path = tmp_path / "journal.jsonl"
    path.with_name("journal.jsonl.meta").write_bytes(b"\x00garbage")
    salvaged = Journal(path, salvage=True)
    try:
        report = salvaged.recovery.to_json()
        assert report["dropped"] == 0 and report["records"] == 0, report
        assert any("journal.jsonl.meta does not parse" in p for p in report["problems"]), report
    finally:
        salvaged.close()


@pytest.mark.parametrize(("epoch", "said"), [
    (True, "true is not a count"),  # JSON's true (RFC 8259: a literal name, no number) would pass for epoch 1
    ("1", '"1" is not a count'),
    (-1, "-1 is not a count"),
    (None, "it has none"),
])
def test_a_checkpoint_without_a_valid_epoch_is_damage_named_by_its_line(tmp_path: Path, epoch: object,
                                                                        said: str) -> None:
    """docs/agent.md: the compacted journal starts with a checkpoint naming its epoch, and a journal "of another epoch
    is damage"; damage "stops the agent with a message naming the file, the line and the problem". A checkpoint whose
    line checks out (its CRC-32 recomputed: written by something else) but whose epoch is no count, or missing, says
    nothing the meta file's epoch can be held against: refused naming line 1, then salvaged from the records after
    it, and the salvaged journal is sound at the next start."""
    import zlib

    path = _closed_journal(tmp_path, 1)  # epoch 1 in the checkpoint and in the meta file
    lines = lines_of(path)
    checkpoint = {"op": "checkpoint", "time": 0.0, **({} if epoch is None else {"epoch": epoch})}
    body = json.dumps(checkpoint, separators=(",", ":"), sort_keys=True).encode()
    lines[0] = f"1 {zlib.crc32(b'1 ' + body):08x} ".encode() + body
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    with pytest.raises(JournalDamaged) as refused:
        Journal(path)
    assert f"journal {path} is damaged: line 1 is a checkpoint without a valid epoch ({said})" in str(refused.value)
    salvaged = Journal(path, salvage=True)
    try:
        assert [r["seq"] for r in salvaged.replay()] == [1]
        salvaged.compact(salvaged.replay())
    finally:
        salvaged.close()
    again = Journal(path)
    try:
        assert again.recovery.problems == [] and [r["seq"] for r in again.replay()] == [1]
    finally:
        again.close()
