"""The snapshot file's protocol between the agent (the one writer) and its readers (fakehw/nvml/snapfile.py).

What is judged here is the contract docs/nvml.md states for the ``superseded`` word (0 in a file written whole; odd
while an update in place is under way, then the next even value; 0xFFFFFFFF in a file a newer one was renamed
over) and issue 19's rule that a change writes only what it changes. The shim's side of the same contract runs
under sanitizers in tests/nvml/test_sanitizers.py (``inplace``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.model import load_profile
from fakehw.nvml import layout, snapfile
from fakehw.nvml.snapfile import REPLACED, Patch, read_whole, write_snapshot
from fakehw.nvml.snapshot import Snapshot, SnapshotError, build_snapshot, read_snapshot
from tests.nvml.helpers import faults_state

WORD = layout.layout_of(layout.HeaderRecord).field("superseded").offset


def dgx(temperature: int | None, time_s: float = 1.0) -> bytes:
    """dgx-h100's snapshot with gpu2 at ``temperature`` (None: no fault): every variant has one size."""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    faults = [] if temperature is None else [{"kind": "thermal", "device": "gpu2", "temperature_c": temperature}]
    state, _ = faults_state(node, faults, system.seed, 2)
    return build_snapshot(system, node, state, (), render_time=time_s).to_bytes()


def word_of(path: Path) -> int:
    value: int = struct.unpack_from("<I", path.read_bytes(), WORD)[0]
    return value


def set_word(path: Path, value: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, struct.pack("<I", value), WORD)
    finally:
        os.close(fd)


def _on_pwrite(monkeypatch: pytest.MonkeyPatch, note: Callable[[int, bytes], None]) -> None:
    """Call ``note(offset, data)`` for every ``os.pwrite`` from now on (until ``monkeypatch.undo()``), then write."""
    real = os.pwrite

    def recording(fd: int, data: bytes | memoryview, offset: int) -> int:
        note(offset, bytes(data))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", recording)


def _record_pwrites(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The [start, end) ranges every ``os.pwrite`` writes from now on (until ``monkeypatch.undo()``), in order."""
    writes: list[tuple[int, int]] = []
    _on_pwrite(monkeypatch, lambda offset, data: writes.append((offset, offset + len(data))))
    return writes


def _record_words(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The values of the ``superseded`` word in every ``os.pwrite`` that covers it from now on (until
    ``monkeypatch.undo()``), in order."""
    seen: list[int] = []

    def note(offset: int, data: bytes) -> None:
        if offset <= WORD < offset + len(data):
            seen.append(struct.unpack_from("<I", data, WORD - offset)[0])

    _on_pwrite(monkeypatch, note)
    return seen


def _words_of_an_update(path: Path, monkeypatch: pytest.MonkeyPatch, word: int) -> tuple[list[int], int]:
    """Write a snapshot at ``path`` whose ``superseded`` word is ``word``, update it in place (gpu2 at 91 C): the
    word's values while the update was under way, and its last value."""
    write_snapshot(path, dgx(80))
    set_word(path, word)
    seen = _record_words(monkeypatch)
    assert write_snapshot(path, dgx(91, 2.0))
    monkeypatch.undo()
    *busy, done = seen
    return busy, done


def test_an_update_in_place_writes_the_header_and_the_changed_gpus_record_only(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A thermal fault on gpu2 changes gpu2's record and the header (render time, checksum): every byte written
    lies there (in 512-byte steps), plus the superseded word before and after, and the file reads back as the new
    snapshot. Offsets from the header of the file itself."""
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, dgx(None))
    new = dgx(91, 2.0)
    header = Snapshot.from_bytes(new).header
    gpu2 = (header.gpu_offset + 2 * header.gpu_record_size, header.gpu_offset + 3 * header.gpu_record_size)
    writes = _record_pwrites(monkeypatch)
    assert write_snapshot(path, new)
    monkeypatch.undo()
    assert writes[0] == writes[-1] == (WORD, WORD + 4)
    for start, end in writes[1:-1]:
        in_header = end <= header.header_size + 512
        in_gpu2 = start >= gpu2[0] - 512 and end <= gpu2[1] + 512
        assert in_header or in_gpu2, f"wrote [{start}, {end}) outside the header and gpu2's record {gpu2}"
    assert sum(end - start for start, end in writes[1:-1]) < header.header_size + header.gpu_record_size + 2048
    assert read_snapshot(path).gpus[2].temperature == 91
    assert word_of(path) == 2


def test_a_reader_waits_out_an_update_under_way_and_gets_the_new_snapshot(tmp_path: Path) -> None:
    """The word is odd (a writer between its first and last write): read_snapshot must not take the file as it is
    (the old bytes under an odd word), but wait for the even word and read what the writer finished."""
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, dgx(None))
    set_word(path, 1)
    finished = bytearray(dgx(91, 2.0))
    struct.pack_into("<I", finished, WORD, 1)

    def writer() -> None:
        time.sleep(0.003)
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, bytes(finished), 0)
            os.pwrite(fd, struct.pack("<I", 2), WORD)
        finally:
            os.close(fd)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        snap = read_snapshot(path)
    finally:
        thread.join()
    assert snap.gpus[2].temperature == 91
    assert snap.header.superseded == 2


def test_a_word_a_dead_writer_left_odd_is_waited_for_a_bounded_time_then_judged_by_the_checksum(
        tmp_path: Path) -> None:
    """A writer that died mid-update leaves the word odd for good: a reader gives up waiting (10 ms) and lets the
    checksum judge: a whole file reads, a torn one is refused with the checksum named, neither hangs."""
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, dgx(80))
    set_word(path, 7)
    assert read_snapshot(path).gpus[2].temperature == 80
    torn = bytearray(path.read_bytes())
    header = Snapshot.from_bytes(bytes(torn)).header
    torn[header.gpu_offset + 100] ^= 0xFF
    path.write_bytes(bytes(torn))
    with pytest.raises(SnapshotError, match="checksum"):
        read_snapshot(path)


def test_a_file_the_writer_cannot_know_whole_is_replaced_not_written_through(tmp_path: Path) -> None:
    """Three files the writer must not update in place, each replaced by rename (new inode, word 0) with the old
    one marked 0xFFFFFFFF: one whose word is odd (a dead writer's), one with a second name (a hard link: writing
    through it would change the other name's file too), one of another size."""
    path = tmp_path / "nvml.snapshot"
    def odd_word() -> None:
        set_word(path, 5)

    def second_name() -> None:
        os.link(path, tmp_path / "other")

    def nothing() -> None:
        pass

    cases: dict[str, Callable[[], None]] = {"odd word": odd_word, "second name": second_name, "other size": nothing}
    for temperature, (case, prepare) in enumerate(cases.items(), 81):
        write_snapshot(path, dgx(None) if case != "other size" else dgx(None) + bytes(8))
        if case != "other size":
            write_snapshot(path, dgx(80))  # same size as the next write (nothing odd yet)
        prepare()
        held = os.open(path, os.O_RDONLY)
        try:
            before = path.read_bytes()
            assert write_snapshot(path, dgx(temperature, float(temperature)))
            assert os.stat(path).st_ino != os.fstat(held).st_ino, case
            assert struct.unpack("<I", os.pread(held, 4, WORD))[0] == REPLACED, case
            if case == "second name":
                assert (tmp_path / "other").read_bytes()[:WORD] == before[:WORD]
                (tmp_path / "other").unlink()
        finally:
            os.close(held)
        assert word_of(path) == 0
        assert read_snapshot(path).gpus[2].temperature == temperature


CORE_C = Path(__file__).resolve().parents[2] / "fakehw" / "nvml" / "csrc" / "core.c"


def shims_wait_for_a_dead_writer() -> tuple[int, float]:
    """How many times, and for how long each (s), the shim's reader (csrc/core.c ``read_whole``) waits for an odd
    word before it reads the file as it is: FHW_LOAD_WAITS and the nanosleep's timespec, read from the C source."""
    source = CORE_C.read_text()
    waits = re.search(r"#define FHW_LOAD_WAITS (\d+)", source)
    body = source[source.index("static size_t read_whole("):]
    pause = re.search(r"struct timespec ts = \{0, (\d+)\};", body[:body.index("\n}\n")])
    assert waits is not None and pause is not None, "core.c's read_whole changed: read its wait again"
    return int(waits.group(1)), int(pause.group(1)) / 1e9


def test_a_dead_writers_odd_word_is_waited_for_as_long_as_the_shim_waits(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's reader gives a writer that died mid-update the same grace as the shim's: docs/nvml.md ("Writing and
    noticing a new generation": a word left odd for 10 ms is no longer waited for) and csrc/core.c's read_whole
    (FHW_LOAD_WAITS pauses of 50 us, then the checksum judges). Counted, not timed: the pauses are recorded instead
    of slept, so the file's word (odd for good) must cost exactly the shim's number of pauses, 10 ms in all."""
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, dgx(80))
    set_word(path, 7)
    pauses: list[float] = []
    monkeypatch.setattr(time, "sleep", pauses.append)
    data = read_whole(path)
    monkeypatch.undo()
    waits, pause = shims_wait_for_a_dead_writer()
    assert (len(pauses), set(pauses)) == (waits, {pause})
    assert sum(pauses) == pytest.approx(0.010)
    assert data == path.read_bytes()  # then the file as it is (its checksum judges it)


def test_a_symlink_at_the_snapshot_path_is_replaced_not_written_through(tmp_path: Path) -> None:
    """A symbolic link at the snapshot's path (to a copy kept elsewhere, say) is a second name for that file, like a
    hard link: an update in place would write through it into the other file. The writer replaces it as rename(2)
    does (POSIX: the link named by ``new`` is removed, not the file it points to): the path becomes a regular file
    holding the new snapshot and the file the link named keeps every byte, its word included (no 0xFFFFFFFF: it was
    never the snapshot's file), even though it is of the same size and whole, a file the writer would update."""
    kept = tmp_path / "kept.snapshot"
    write_snapshot(kept, dgx(80))
    before = kept.read_bytes()
    path = tmp_path / "nvml.snapshot"
    path.symlink_to(kept)
    assert write_snapshot(path, dgx(91, 2.0))
    assert not path.is_symlink() and path.is_file()
    assert kept.read_bytes() == before
    assert read_snapshot(path).gpus[2].temperature == 91
    assert word_of(path) == 0


def test_a_replaced_file_that_cannot_be_flagged_still_leaves_the_new_snapshot_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 0xFFFFFFFF written into the old file after the rename is a courtesy to readers that mapped it: the shim
    also stat()s the path (csrc/core.c ``snap_stale``: a new inode at the path is a new file, checked at most every
    10 ms) and notices the new file without it. So when the old file's filesystem refuses the flag (EROFS, "read-only
    file system" in POSIX's list of write(2) errors; simulated, as remounting needs root) the write has still
    succeeded: the new snapshot is at the path and write_snapshot says it wrote, rather than raising after the
    fact. Only the flag's write fails here (a file of another size, so nothing is updated in place)."""
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, dgx(80) + bytes(8))
    real = os.pwrite
    refused: list[int] = []

    def read_only(fd: int, data: bytes | memoryview, offset: int) -> int:
        if offset == WORD and bytes(data) == struct.pack("<I", REPLACED):
            refused.append(fd)
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", read_only)
    assert write_snapshot(path, dgx(91, 2.0))
    monkeypatch.undo()
    assert len(refused) == 1
    assert read_snapshot(path).gpus[2].temperature == 91
    assert word_of(path) == 0


@pytest.mark.parametrize("word", [0, 0x7FFFFFFE, 0xFFFFFFFE], ids=["first", "wrap", "highest-even"])
def test_an_update_marks_the_word_odd_then_even_never_replaced_nor_the_old_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, word: int) -> None:
    """The values an update in place writes into the word, as the shim reads them (csrc/core.c): ``read_whole``
    waits while the word is odd *and* not 0xFFFFFFFF (that value means "replaced, reopen": it does not wait, so an
    update showing it would be copied torn), and ``snap_stale`` notices a change only when the mapped word differs
    from the one its copy was read under. So from any even word (the first update's 0, the count's wrap, the highest
    even value a file can hold) every write of the word until the last is one odd value other than 0xFFFFFFFF, and
    the last is even and not the word the update started from (docs/nvml.md: "the next odd value ... then the next
    even value")."""
    path = tmp_path / "nvml.snapshot"
    busy, done = _words_of_an_update(path, monkeypatch, word)
    seen = [*busy, done]
    assert busy and len(set(busy)) == 1, seen
    assert busy[0] & 1 and busy[0] != REPLACED, [hex(v) for v in seen]
    assert not done & 1 and done != word, [hex(v) for v in seen]
    assert word_of(path) == done
    assert read_snapshot(path).gpus[2].temperature == 91


_ON_DESCRIPTOR_0 = """
import json, os, sys
from pathlib import Path
from fakehw.nvml.snapfile import write_snapshot
path, new = Path(sys.argv[1]), Path(sys.argv[2]).read_bytes()
os.close(0)
probe = os.open(path, os.O_RDONLY)
os.close(probe)
assert probe == 0, probe
written = write_snapshot(path, new)
try:
    os.fstat(0)
    still_open = True
except OSError:
    still_open = False
print(json.dumps({"written": written, "descriptor 0 open": still_open}))
"""


@pytest.mark.parametrize("grow", [0, 8], ids=["in place", "replaced"])
def test_a_snapshot_opened_as_descriptor_0_is_written_like_any_other(tmp_path: Path, grow: int) -> None:
    """A writer whose standard input is closed (a daemon's) gets descriptor 0 for the snapshot: POSIX open()
    returns "the lowest file descriptor not currently open", and 0 is a descriptor like any other (only -1 is an
    error). So a file of the same size is updated in place there too (the same inode, the word 2 after the first
    update); one of another size is replaced and the old file, which a reader holds here, gets 0xFFFFFFFF (docs/nvml.md,
    "Writing and noticing a new generation"); and either way the descriptor is closed when the call returns (POSIX
    rename(): a replaced file's contents stay until its last descriptor is closed). Run in a child process
    (PYTHONPATH as this one's) that closes its descriptor 0 first and checks that the next open gets it."""
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, dgx(80) + bytes(grow))
    inode = os.stat(path).st_ino
    new = tmp_path / "new.bytes"
    new.write_bytes(dgx(91, 2.0))
    held = os.open(path, os.O_RDONLY)
    try:
        proc = subprocess.run([sys.executable, "-c", _ON_DESCRIPTOR_0, str(path), str(new)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == {"written": True, "descriptor 0 open": False}
        old_word = struct.unpack("<I", os.pread(held, 4, WORD))[0]
    finally:
        os.close(held)
    if grow:
        assert (os.stat(path).st_ino != inode, old_word, word_of(path)) == (True, REPLACED, 0)
    else:
        assert (os.stat(path).st_ino, word_of(path)) == (inode, 2)
    assert read_snapshot(path).gpus[2].temperature == 91


@pytest.mark.parametrize("word", [0, 2, REPLACED], ids=["written whole", "updated", "replaced"])
def test_a_file_under_an_even_or_replaced_word_is_read_without_a_pause(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       word: int) -> None:
    """Only an odd word other than 0xFFFFFFFF is a writer at work: csrc/core.c's read_whole sleeps only for
    ``(before & 1u) && before != FHW_REPLACED``, and docs/nvml.md's reader "copied the file while the word held one
    even value" has nothing to wait for. A file written whole (0), one updated in place (2) and one a newer file was
    renamed over (0xFFFFFFFF: its readers reopen the path, the writer will never finish it) are read at once, as
    they are. Counted, not timed: pauses are recorded instead of slept."""
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, dgx(80))
    set_word(path, word)
    pauses: list[float] = []
    monkeypatch.setattr(time, "sleep", pauses.append)
    data = read_whole(path)
    monkeypatch.undo()
    assert pauses == []
    assert data == path.read_bytes()


def test_a_change_spanning_two_chunks_after_a_gap_writes_those_chunks_alone(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/nvml.md: an update "writes the 512-byte chunks that differ" (issue 19: a change writes only what it
    changes). Two changed bytes in adjacent chunks far from the header ([8192, 9216): chunks 16 and 17) are written
    as that one range, not joined to the header's chunk before the gap: the writes are the word (odd), the chunk
    holding the word (which differs by it), [8192, 9216), and the word again (even); the file then holds the new
    bytes. Raw bytes, not a model change: the writer's contract is the bytes, and this way the chunks that differ are
    known by construction."""
    path = tmp_path / "nvml.snapshot"
    old = dgx(80)
    write_snapshot(path, old)
    new = bytearray(old)
    for offset in (8192 + 100, 8192 + 600):
        new[offset] ^= 0xFF
    writes = _record_pwrites(monkeypatch)
    assert write_snapshot(path, bytes(new), changed=True)
    monkeypatch.undo()
    word_chunk = (WORD // 512 * 512, WORD // 512 * 512 + 512)
    assert writes == [(WORD, WORD + 4), word_chunk, (8192, 9216), (WORD, WORD + 4)]
    struct.pack_into("<I", new, WORD, 2)
    assert path.read_bytes() == bytes(new)


def test_a_patch_onto_the_file_it_was_made_from_writes_its_ranges_and_compares_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that knows how the new snapshot was made from the one in the file (:class:`Patch`: the ranges its
    cache packed) writes those ranges, merged where they touch or overlap, between the word's odd and even values,
    without searching the file for what differs; the file then holds the new bytes. Raw bytes with the ranges known
    by construction: [8192, 8704) and [8600, 9000) overlap, [9000, 9100) touches them, [20000, 20010) stands alone.
    The file was updated in place twice since it was written whole (its word is 4, the base's 0): still the base."""
    path = tmp_path / "nvml.snapshot"
    old = dgx(80)
    write_snapshot(path, old)
    set_word(path, 4)
    new = bytearray(old)
    ranges = [(20000, 20010), (8600, 9000), (9000, 9100), (8192, 8704)]
    for start, end in ranges:
        new[start:end] = bytes(b ^ 0x5A for b in new[start:end])

    def no_search(old: bytes, new: bytes) -> list[tuple[int, int]]:
        raise AssertionError("the file was searched for changes the patch names")

    monkeypatch.setattr(snapfile, "changed_ranges", no_search)
    writes = _record_pwrites(monkeypatch)
    assert write_snapshot(path, bytes(new), changed=True, patch=Patch(old, ranges))
    monkeypatch.undo()
    assert writes == [(WORD, WORD + 4), (8192, 9100), (20000, 20010), (WORD, WORD + 4)]
    struct.pack_into("<I", new, WORD, 6)
    assert path.read_bytes() == bytes(new)


def test_a_patch_is_not_trusted_onto_a_file_that_does_not_hold_its_base(tmp_path: Path) -> None:
    """A patch's ranges say where the new snapshot differs from its base, not from the file: when the file holds
    something else (an earlier render's write failed, or someone wrote into it), bytes outside the ranges differ
    too, and writing the ranges alone would leave them. The writer compares the file with the base and, when they
    differ, writes what it finds differs: the file ends as the new snapshot, byte for byte. The word differing from
    the base's is not such a difference (every update in place counts it)."""
    path = tmp_path / "nvml.snapshot"
    base = dgx(80)
    write_snapshot(path, base)
    set_word(path, 6)  # three updates in place since it was written whole: still the base
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, b"\xff" * 8, 30000)  # outside any range of the patch
    finally:
        os.close(fd)
    new = dgx(91, 2.0)
    header = Snapshot.from_bytes(new).header
    assert write_snapshot(path, new, changed=True, patch=Patch(base, [(0, header.header_size)]))
    expected = bytearray(new)
    struct.pack_into("<I", expected, WORD, 8)
    assert path.read_bytes() == bytes(expected)


def test_a_reader_keeps_the_whole_copy_it_verified_when_a_writer_starts_right_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/nvml.md: a reader that copied the file while the word held one even value before and after its copy,
    and finds that value in its copy, "has a whole file". So once a copy is verified it is the answer, even when a
    writer starts its next update the moment after (here one that then dies mid-update: the word stays odd and a
    GPU record is half written): read_whole returns the verified copy, not the torn file it would find if it went on
    reading. The writer is started from the reader's second read of the word (the check after its copy)."""
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, dgx(80))
    whole = path.read_bytes()
    header = Snapshot.from_bytes(whole).header
    word_reads = 0
    real = os.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        nonlocal word_reads
        data = real(fd, size, offset)
        if (size, offset) == (4, WORD):
            word_reads += 1
            if word_reads == 2:
                set_word(path, 3)
                with path.open("r+b") as f:
                    f.seek(header.gpu_offset + 2 * header.gpu_record_size + 100)
                    f.write(b"\xff" * 64)
        return data

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    data = read_whole(path)
    monkeypatch.undo()
    assert word_reads == 2
    assert data == whole
    assert path.read_bytes() != whole  # the writer did tear the file


@pytest.mark.parametrize("word", [5, REPLACED], ids=["dead writer's odd word", "replaced flag"])
def test_a_rerender_with_nothing_changed_still_replaces_a_file_not_known_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, word: int) -> None:
    """A writer killed after its last chunk but before its last word leaves every byte of the new snapshot under an
    odd word; a restarted agent then renders the same answers. docs/nvml.md ("Writing and noticing a new
    generation"): the file is replaced "when its word is odd", and keeping it costs every reader: csrc/core.c's
    read_whole pauses FHW_LOAD_WAITS times (10 ms) on each load while the word is odd and not 0xFFFFFFFF, and its
    snap_stale takes a mapped 0xFFFFFFFF for "replaced, reopen the path" on every call, even when the copy was read
    under it. So a re-render whose answers equal the file's still replaces a file under either word: it says it
    wrote, the path holds a new file (another inode) whose word is 0 (written whole), and a reader takes it at once.
    Pauses are counted, not timed. 5 is the word of an update from 4 (its low bit alone tells it odd)."""
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, dgx(80))
    set_word(path, word)
    inode = os.stat(path).st_ino
    assert write_snapshot(path, dgx(80, 5.0))
    assert (os.stat(path).st_ino != inode, word_of(path)) == (True, 0)
    pauses: list[float] = []
    monkeypatch.setattr(time, "sleep", pauses.append)
    data = read_whole(path)
    monkeypatch.undo()
    assert pauses == []
    assert Snapshot.from_bytes(data).gpus[2].temperature == 80


@pytest.mark.parametrize("name", ["hard link", "symbolic link"])
def test_a_rerender_with_nothing_changed_keeps_a_file_with_a_second_name(tmp_path: Path, name: str) -> None:
    """A re-render whose answers equal the file's keeps the file (test_determinism.py::
    test_a_rerender_with_nothing_changed_keeps_the_file: only the render time differs, so the file and the time its
    samples carry stay), and that holds for a file the writer would not update in place because it has a second
    name, too: nothing is written, so nothing can be written through the other name, and nothing is renamed. The
    consumer's view: csrc/core.c's snap_stale reloads when the path's inode, size or mtime changes, and a reloaded
    copy answers the new render time as every sample's and field value's timestamp (board.c, device.c, fields.c
    read ``render_time_us``), so a replacement would tell every process of a change that did not happen. Here the
    path keeps its inode (the hard link) or stays the symbolic link, every byte stays, the first render time
    included, and write_snapshot says it wrote nothing. The file was updated in place once before (word 2: even,
    a whole file) so that the word is not the 0 of a file written whole."""
    kept = tmp_path / "kept.snapshot"
    write_snapshot(kept, dgx(80))
    assert write_snapshot(kept, dgx(91, 2.0)) and word_of(kept) == 2
    path = tmp_path / "nvml.snapshot"
    if name == "hard link":
        os.link(kept, path)
    else:
        path.symlink_to(kept)
    before = path.read_bytes()
    inode = os.lstat(path).st_ino
    assert not write_snapshot(path, dgx(91, 5.0))
    assert (os.lstat(path).st_ino, path.is_symlink()) == (inode, name == "symbolic link")
    assert path.read_bytes() == kept.read_bytes() == before
    assert Snapshot.from_bytes(before).header.render_time_us == 2_000_000


@pytest.mark.parametrize("word", [0, 2], ids=["first update", "second update"])
def test_an_update_counts_the_word_to_the_next_odd_then_the_next_even_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, word: int) -> None:
    """docs/nvml.md ("Writing and noticing a new generation"): an update in place "sets ``superseded`` to the next
    odd value, writes the 512-byte chunks that differ, then sets the next even value". From the word a file written
    whole has (0) and the one the first update leaves (2), every write of the word before the last is that value
    plus one (1, then 3) and the last that value plus two: the word only counts up, so its odd values name the
    update under way."""
    path = tmp_path / "nvml.snapshot"
    busy, done = _words_of_an_update(path, monkeypatch, word)
    assert (set(busy), done) == ({word + 1}, word + 2), (busy, done)
    assert word_of(path) == word + 2


def test_an_update_whose_writes_come_back_short_still_leaves_every_byte_of_the_new_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """POSIX pwrite(): "shall return the number of bytes actually written", which may be fewer than asked (write():
    "If write() is interrupted by a signal after it successfully writes some data, it shall return the number of bytes
    written"); Python's ``os.pwrite`` passes that count on. With every write of the changed chunks cut to 100 bytes,
    an update in place still leaves the file byte for byte the new snapshot (docs/nvml.md: the file is the snapshot;
    the ``superseded`` word, 0 in it, is 2 after the first update) and the checksum the shim's reader checks
    (csrc/core.c) holds. The 4-byte writes of the word are left whole."""
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, dgx(None))
    new = dgx(91, 2.0)
    real = os.pwrite
    calls: list[int] = []

    def short(fd: int, data: bytes | memoryview, offset: int) -> int:
        calls.append(len(data))
        return real(fd, data[:100] if len(data) > 4 else data, offset)

    monkeypatch.setattr(os, "pwrite", short)
    assert write_snapshot(path, new)
    monkeypatch.undo()
    assert any(n > 100 for n in calls), "no write was long enough to be cut short"
    expected = bytearray(new)
    expected[WORD:WORD + 4] = struct.pack("<I", 2)
    assert path.read_bytes() == bytes(expected)
    assert read_snapshot(path).gpus[2].temperature == 91
