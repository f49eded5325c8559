"""Atomic file output: a reader sees the old file or the new one, never half of either.

Renderers write through :class:`OutputDir`, which writes to a temporary file in the same directory and renames
it over the target, skips files whose content did not change (so an incremental re-render touches only what
changed, and mtimes mean something), and counts what it did.

Durability is a separate promise from atomicity: a rename survives a crash only once the file's data and then its
directory are on disk. Files someone relies on after being told "done" (journals, records, counters) are written
with ``durable=True``, which fsyncs the temporary file before the rename and the directory after it. Rendered
outputs skip that cost: the agent re-renders every node from its journal when it starts.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import operator
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class Releaser:
    """Closes, on a thread of its own, the last handle of files that were replaced by a rename.

    Why: on ext4 (with ``discard``, as on these machines and many cloud disks) the last close of a replaced file
    frees its blocks, which waits for the filesystem's journal: milliseconds typically and tens of milliseconds
    under load, paid by whoever drops the last reference. A renderer that renames a new snapshot over the old one
    would pay it on every fault, inside the time a consumer waits for the fault to show. Holding the old file open
    across the rename and closing it here moves that cost off the path (the rename itself then costs microseconds).
    At most ``limit`` handles wait; beyond that the caller closes inline (the disk sets the pace, memory stays
    bounded).

    The thread is woken once per batch, not once per handle: only the handle that finds the list empty wakes it,
    and it closes everything that gathered meanwhile (a wake per replaced file, two or three per render, cost the
    agent a thread switch each). It does not linger to gather more: a close postponed by milliseconds lands in
    the middle of the next change's rename and fsync, which then wait behind it (measured: sequential
    inject -> answered p50 3.6 -> 8 ms with a 5 ms linger).

    ``wake_at`` > 1: an owner with a moment of its own that is off every request's path calls :meth:`drain`
    there, and the thread is woken only when that many handles wait (a backstop for changes no such moment
    follows). The agent drains on the thread that answered the request, once its answer is sent: the close is
    as soon as with a wake and costs no thread switch (a wake per render was two context switches per injection
    on gb200-nvl72, where most injections render a tray of their own)."""

    def __init__(self, limit: int = 4096, wake_at: int = 1):
        self._limit = limit
        self._wake_at = max(1, min(wake_at, limit))
        self._pending: list[int] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None

    def later(self, fd: int) -> None:
        """Close ``fd`` soon (inline when too many wait)."""
        wake = False
        with self._lock:
            inline = len(self._pending) >= self._limit
            if not inline:
                self._pending.append(fd)
                wake = len(self._pending) == self._wake_at
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="fakehw-releaser", daemon=True)
                    self._thread.start()
        if inline:
            os.close(fd)
        elif wake:
            self._wake.set()

    def drain(self) -> None:
        """Close every handle waiting, on the caller's thread (see ``wake_at``)."""
        with self._lock:
            if not self._pending:
                return
            batch, self._pending = self._pending, []
        _close_all(batch)

    def hold(self, path: Path | str) -> int | None:
        """A handle on the regular file at ``path`` (None when there is none), to pass to :meth:`later` once
        ``path`` has been replaced."""
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None

    def _run(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                self._wake.clear()
                batch, self._pending = self._pending, []
                stop = self._stop
            _close_all(batch)
            if stop:
                return

    def close(self) -> None:
        """Close everything waiting and stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop = thread is not None
        if thread is not None:
            self._wake.set()
            thread.join()
        with self._lock:
            batch, self._pending, self._stop = self._pending, [], False
        _close_all(batch)  # given after the thread took its last batch


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o644, same: Callable[[bytes, bytes], bool] = operator.eq,
                 durable: bool = False, release: Releaser | None = None, compare: bool = True) -> bool:
    """Write ``data`` to ``path`` atomically; return False (and write nothing) when it already holds the same
    (``same(old, new)``; byte equality unless the format has fields that may differ without meaning anything).

    ``durable``: the new content is on disk when this returns (file and directory fsynced). A failure (a full
    disk) leaves the old file in place and no temporary file behind. ``release``: the replaced file's last close
    happens there (see :class:`Releaser`). ``compare`` False: the caller knows the content changed (the file is
    not read back)."""
    if compare and not durable:
        try:
            if path.stat().st_size == len(data) and same(path.read_bytes(), data):
                return False
        except OSError:
            pass
    try:
        fd, tmp = _temporary(path)
    except FileNotFoundError:  # the directory is made once, not asked for on every write (a syscall each)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _temporary(path)
    try:
        try:
            view = memoryview(data)
            while view:  # a raw write loop: a buffered file object costs an ioctl, an lseek and a flush per file
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        held = release.hold(path) if release is not None else None
        try:
            os.replace(tmp, path)
        finally:
            if held is not None:
                release.later(held)  # type: ignore[union-attr]
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)
    return True


_TEMPORARY_NUMBERS = itertools.count()
"""Numbers of this process's temporary files (``next`` on it is atomic under the GIL)."""
_TEMPORARY_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _temporary(path: Path) -> tuple[int, str]:
    """A new file beside ``path``, open for writing, mode 0600 until its content is in (what ``mkstemp`` gives,
    without its random name: ``O_EXCL`` is what makes the name ours, and a name taken by someone else is skipped;
    the random name cost more than the rest of the write, twice per render of a node)."""
    head, sep, name = str(path).rpartition("/")  # path.parent and path.name without making two Path objects
    prefix = f"{head if sep else '.'}/.{name}.fakehw-{os.getpid()}-"
    for _ in range(10_000):
        tmp = f"{prefix}{next(_TEMPORARY_NUMBERS)}"
        try:
            return os.open(tmp, _TEMPORARY_FLAGS, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", prefix)


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (a rename, a new or removed file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dump_json(value: Any, compact: bool = False) -> bytes:
    """JSON with sorted keys; ``compact`` for files machines rewrite often, indented for people otherwise."""
    if compact:
        return (json.dumps(value, sort_keys=True, separators=(",", ":")) + "\n").encode()
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


@dataclass
class OutputDir:
    """A directory a renderer writes into, with counts of files written and left alone."""

    root: Path
    written: int = 0
    unchanged: int = 0
    release: Releaser | None = None
    """Where replaced files are closed (see :class:`Releaser`; None: inline)."""
    paths: dict[str, Path] = field(default_factory=dict)
    """The paths of entries under ``root`` made so far, by relative path (see :meth:`path`)."""

    def path(self, relpath: str) -> Path:
        """``root / relpath``, made once: the agent hands each node's renders the same dict, and joining paths
        again cost 2-3 % of an injection's CPU."""
        known = self.paths.get(relpath)
        if known is None:
            known = self.paths[relpath] = self.root / relpath
        return known

    def write(self, relpath: str, data: bytes | str, mode: int = 0o644, changed: bool = False) -> Path:
        """Write ``relpath`` unless it already holds ``data``. ``changed``: the caller knows the content differs
        from what is there (it remembers what it wrote last), so the file is neither stat'ed nor read back."""
        path = self.path(relpath)
        raw = data.encode() if isinstance(data, str) else data
        self.count(atomic_write(path, raw, mode, release=self.release, compare=not changed))
        return path

    def count(self, written: bool) -> None:
        """Count a file a renderer wrote by other means (True: written, False: left alone)."""
        if written:
            self.written += 1
        else:
            self.unchanged += 1

    def write_json(self, relpath: str, value: Any, compact: bool = False) -> Path:
        return self.write(relpath, dump_json(value, compact))
