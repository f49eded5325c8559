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

import json
import operator
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def atomic_write(path: Path, data: bytes, mode: int = 0o644, same: Callable[[bytes, bytes], bool] = operator.eq,
                 durable: bool = False) -> bool:
    """Write ``data`` to ``path`` atomically; return False (and write nothing) when it already holds the same
    (``same(old, new)``; byte equality unless the format has fields that may differ without meaning anything).

    ``durable``: the new content is on disk when this returns (file and directory fsynced). A failure (a full
    disk) leaves the old file in place and no temporary file behind."""
    if not durable:
        try:
            if path.stat().st_size == len(data) and same(path.read_bytes(), data):
                return False
        except OSError:
            pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)
    return True


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

    def write(self, relpath: str, data: bytes | str, mode: int = 0o644) -> Path:
        path = self.root / relpath
        raw = data.encode() if isinstance(data, str) else data
        self.count(atomic_write(path, raw, mode))
        return path

    def count(self, written: bool) -> None:
        """Count a file a renderer wrote by other means (True: written, False: left alone)."""
        if written:
            self.written += 1
        else:
            self.unchanged += 1

    def write_json(self, relpath: str, value: Any, compact: bool = False) -> Path:
        return self.write(relpath, dump_json(value, compact))
