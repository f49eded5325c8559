"""The agent's state directory: who may use it (one agent, this user) and room to finish what it acknowledged.

- :class:`StateDirLock`: an exclusive ``flock`` on ``agent.lock``, held for the agent's life. Two agents on one
  directory would both issue fault ids and overwrite each other's journal; the second is refused with a message
  naming the holder (pid, start time, command line, as the holder wrote them into the lock file). The kernel
  drops the lock when the holder dies, however it dies, so a stale lock never blocks a restart.
- :class:`DiskReserve`: a few MiB set aside in the directory (a "ballast" file, as CockroachDB keeps one). When a
  render of an acknowledged change finds the disk full, the reserve is released so the render can finish and the
  node's files never stay behind what the API reports; until the reserve can be made again, changes are refused
  (507, nothing applied) instead of half applied.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)
LOCK_FILE = "agent.lock"
RESERVE_FILE = "agent.reserve"
RESERVE_BYTES = 4 * 2**20
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
RUNTIME_FILES = ("journal.jsonl", "journal.jsonl.meta", "platform.jsonl", "platform.jsonl.meta", "mig.jsonl",
                 "mig.jsonl.meta", "audit.jsonl")


class StateDirBusy(ValueError):
    """Another agent holds the state directory."""


class StateDirLock:
    """Hold the state directory for this process (see the module docstring)."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / LOCK_FILE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe_holder(fd)
            os.close(fd)
            raise StateDirBusy(f"state dir {state_dir} is in use by another agent ({holder}); stop that agent first "
                               f"(testbed down, or kill its pid), or give this one another --state-dir") from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        info = {"pid": os.getpid(), "started": time.time(), "host": socket.gethostname(), "argv": sys.argv[:8]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)

    def release(self) -> None:
        """Let another agent have the directory (the file stays: unlinking a lock file races with its next user)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = -1


def _describe_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["started"])))
        return f"pid {int(info['pid'])} on {info.get('host', '?')}, started {started}: {' '.join(info.get('argv', []))}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"


class DiskReserve:
    """Space set aside in the state directory for finishing a change when the disk fills (see the docstring)."""

    def __init__(self, state_dir: Path, size: int = RESERVE_BYTES):
        self.path = state_dir / RESERVE_FILE
        self.size = size
        self.released: str | None = None
        """Why the reserve was given up (the disk filled); None while it is held."""
        if not self.make():
            log.warning("no room for the %d-byte disk reserve in %s (%s): the agent runs without one", size,
                        state_dir, self.released)

    def make(self) -> bool:
        """(Re)create the reserve; False (with :attr:`released` saying why) when there is no room for it."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            self.released = f"cannot create {self.path}: {exc.strerror}"
            return False
        try:
            os.posix_fallocate(fd, 0, self.size)
            os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            self.released = f"no room for the {self.size >> 20} MiB disk reserve: {exc.strerror}"
            return False
        os.close(fd)
        self.released = None
        return True

    def release(self, why: str) -> None:
        """Give the reserve's space back to the file system (the disk is full and a change must finish)."""
        self.path.unlink(missing_ok=True)
        self.released = why
        log.error("disk full in %s: %s; released the disk reserve to finish; changes are refused until there is "
                  "room again", self.path.parent, why)


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def discard_runtime_state(state_dir: Path) -> None:
    """Forget what an agent journaled in ``state_dir`` (faults, CXL and pool state, audit), keeping the rendered
    trees: for tests that reuse a rendered directory. The agent must not be running."""
    for name in RUNTIME_FILES:
        (state_dir / name).unlink(missing_ok=True)
