"""The snapshot file between its one writer (the agent) and its readers (the shim, ``fakehw.nvml`` tools).

A change to a node rewrites a few hundred bytes of its snapshot: the changed GPU's record, the header, the event
ring. Writing a whole new file and renaming it over the old one costs ~0.12 ms per change on ext4 (a new inode, its
pages, the rename, the old inode's release), 30 times what writing the changed bytes into the file in place costs
(measured with bench/bench_agent.py's machine, a 54 KB snapshot: 0.122 ms against 0.004 ms). So the writer updates
the file in place whenever it can, and replaces it only when it must (no file yet, another size, a file it did not
leave whole).

The header's ``superseded`` word is the protocol (docs/nvml.md, "The snapshot format"):

- a file written whole has 0 there;
- an update in place first makes the word odd (the next value), writes the changed bytes, then makes it the next
  even value: a reader that copied the file while the word was one even value before and after its copy, and finds
  that value in its copy, has a whole file (a sequence lock);
- a file a newer one was renamed over gets :data:`REPLACED` (readers that mapped it re-open the path).

A reader that mapped the first page (the shim) sees the word change without a system call and reloads; the close
of the writer's descriptor wakes waiters in inotify (``IN_CLOSE_WRITE``), as the rename of a new file does
(``IN_MOVED_TO``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from fakehw.nvml import layout
from fakehw.nvml.layout import HeaderRecord
from fakehw.render.atomic import Releaser, atomic_write

REPLACED = 0xFFFFFFFF
"""The ``superseded`` word of a file a newer snapshot was renamed over."""
SEQUENCE_MASK = 0x7FFFFFFF
"""Update counts wrap below :data:`REPLACED` (an even count stays even, and never reaches it)."""
READ_WAITS = 200
"""How many 50 us waits a reader gives a writer that is mid-update (10 ms) before the checksum judges alone: the
same bound as the shim's FHW_LOAD_WAITS."""

_WORD = struct.Struct("<I")
_REPLACED = _WORD.pack(REPLACED)
_CHUNK = 512
"""Granularity of the bytes an update writes: a GPU record is ~6 KB, the header under 1 KB."""
_BLOCK = 8192


@dataclass(frozen=True)
class Patch:
    """How a new snapshot was made from the one before it (:class:`~fakehw.nvml.snapcache.SnapshotCache` knows):
    ``base``, the snapshot it was patched from, and ``ranges``, the ``[start, end)`` byte ranges outside which the
    two are equal. When the file still holds ``base``, an update in place writes those ranges without comparing the
    whole file to the new snapshot first (what :func:`changed_ranges` costs: 40 us of a tray's 53 KB, a tenth of
    its render); the file is still read, since only a file that holds ``base`` can be patched so."""

    base: bytes | bytearray
    ranges: list[tuple[int, int]]


def superseded_offset() -> int:
    return layout.layout_of(HeaderRecord).field("superseded").offset


def write_snapshot(path: Path, data: bytes, release: Releaser | None = None, changed: bool = False,
                   patch: Patch | None = None) -> bool:
    """Make the file at ``path`` hold ``data`` (a snapshot as :meth:`~fakehw.nvml.snapshot.Snapshot.to_bytes`
    makes it); False (nothing written) when it already gives the same answers: a re-render with nothing changed
    differs only in its render time, and keeping the old file keeps sample timestamps at the moment the answers last
    changed. ``changed``: the caller knows the answers differ from the file's (it remembers what it wrote last).

    In place when the file is one this protocol can update (a regular file of one link, the same size, whole),
    else replaced atomically. ``release``: where a replaced file is closed (:class:`~fakehw.render.atomic.Releaser`).
    ``patch``: how ``data`` was made from the snapshot before it (:class:`Patch`).
    """
    fd = -1
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    if fd >= 0:
        try:
            written = _update_in_place(fd, data, changed, patch)
        except BaseException:
            os.close(fd)
            raise
        if written is not None:
            os.close(fd)  # after the last write: inotify's IN_CLOSE_WRITE wakes event waiters
            return written
    try:
        written = atomic_write(path, data, same=_same_answers, compare=not changed)
        if written and fd >= 0:
            _mark_replaced(fd)
    finally:
        if fd >= 0:
            if release is not None:
                release.later(fd)
            else:
                os.close(fd)
    return written


def _update_in_place(fd: int, data: bytes, changed: bool, patch: Patch | None = None) -> bool | None:
    """Write what differs between the file and ``data`` into the file; None when the file cannot be updated so.
    What differs: ``patch``'s ranges when the file holds its base, else what a comparison finds."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size != len(data):
        return None
    old = os.pread(fd, len(data), 0)
    offset = superseded_offset()
    if len(old) != len(data) or len(data) < offset + _WORD.size:
        return None
    (word,) = _WORD.unpack_from(old, offset)
    if word & 1:  # replaced (REPLACED is odd), or a writer died mid-update: the file is not known whole
        return None
    if not changed and snapshot_answers(old) == snapshot_answers(data):
        return False
    busy = (word + 1) & SEQUENCE_MASK
    new = bytearray(data)
    _WORD.pack_into(new, offset, busy)  # the chunk holding the word leaves it odd until every chunk is in
    if patch is not None and _holds(old, patch.base, offset):
        ranges = _merged(patch.ranges)
    else:
        ranges = changed_ranges(old, new)
    os.pwrite(fd, _WORD.pack(busy), offset)
    for start, end in ranges:
        _pwrite_all(fd, memoryview(new)[start:end], start)
    os.pwrite(fd, _WORD.pack((word + 2) & SEQUENCE_MASK), offset)
    return True


def _holds(old: bytes, base: bytes | bytearray, offset: int) -> bool:
    """Whether the file's bytes ``old`` are ``base`` apart from the ``superseded`` word at ``offset`` (which the
    updates in place count on)."""
    end = offset + _WORD.size
    return len(old) == len(base) and old[:offset] == base[:offset] and old[end:] == base[end:]


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` in order, those that overlap or touch made one."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        elif end > start:
            out.append((start, end))
    return out


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def changed_ranges(old: bytes | bytearray, new: bytes | bytearray) -> list[tuple[int, int]]:
    """The ``[start, end)`` ranges, in :data:`_CHUNK` steps and merged when adjacent, where ``new`` differs from
    ``old`` (of the same length). Blocks of :data:`_BLOCK` bytes that are equal are skipped whole."""
    out: list[tuple[int, int]] = []
    size = len(new)
    for block in range(0, size, _BLOCK):
        if old[block:block + _BLOCK] == new[block:block + _BLOCK]:
            continue
        for start in range(block, min(block + _BLOCK, size), _CHUNK):
            end = min(start + _CHUNK, size)
            if old[start:end] == new[start:end]:
                continue
            if out and out[-1][1] == start:
                out[-1] = (out[-1][0], end)
            else:
                out.append((start, end))
    return out


def _same_answers(old: bytes, new: bytes) -> bool:
    """Whether the file at the path (``old``) can be kept for ``new``: the same answers, and a word that is even. An
    odd word (a writer that died after its last chunk, or :data:`REPLACED` in a file put at the path) is not kept
    even when every answer matches: the shim's reader pauses 10 ms on each load under a writer's word and reopens
    the path on every call under :data:`REPLACED` (csrc/core.c ``read_whole``, ``snap_stale``). ``atomic_write``
    asks only when the file is of ``new``'s size, so it holds the whole header."""
    if _WORD.unpack_from(old, superseded_offset())[0] & 1:
        return False
    return snapshot_answers(old) == snapshot_answers(new)


def snapshot_answers(data: bytes) -> bytes:
    """The snapshot without the header fields that change when nothing else does (render time, checksum, the
    ``superseded`` word)."""
    buf = bytearray(data)
    hdr = layout.layout_of(HeaderRecord)
    for name in ("render_time_us", "checksum", "superseded"):
        fld = hdr.field(name)
        if len(buf) >= fld.offset + fld.size:
            buf[fld.offset:fld.offset + fld.size] = bytes(fld.size)
    return bytes(buf)


def _mark_replaced(fd: int) -> None:
    offset = superseded_offset()
    try:
        if os.fstat(fd).st_size >= offset + _WORD.size:
            os.pwrite(fd, _WORD.pack(REPLACED), offset)
    except OSError as exc:  # a read-only mount: readers fall back to noticing by stat()
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM, errno.EBADF):
            raise


def read_whole(path: Path) -> bytes:
    """The file's bytes as of one moment: a copy taken while no update was under way (see the module docstring).
    After :data:`READ_WAITS` tries (a writer that died mid-update leaves the word odd) the last copy is returned as
    read; its checksum then says whether it is whole. OSError as ``Path.read_bytes`` raises it."""
    offset = superseded_offset()
    with path.open("rb") as f:
        fd = f.fileno()
        for tries in range(READ_WAITS + 1):
            before = os.pread(fd, _WORD.size, offset)
            last = tries == READ_WAITS
            if not last and len(before) == _WORD.size and before != _REPLACED and _WORD.unpack(before)[0] & 1:
                time.sleep(50e-6)
                continue
            f.seek(0)
            data = f.read()
            if last or os.pread(fd, _WORD.size, offset) == before == data[offset:offset + _WORD.size]:
                break
    return data
