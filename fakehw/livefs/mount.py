"""Starting and stopping a node's live ``/sys`` server (:mod:`fakehw.livefs.fs`) as a child process.

A server can be held by the process that started it (``with LiveMount(...)``: tests, benchmarks) or detached
(``start(detach=True)``: the testbed's lazily started mounts, which outlive the ``testbed exec`` that started them).
Either way the server's pid is kept next to the mount point (``<mountpoint>.pid``), so any process can tell a live
mount from a stale one (its server died: every access fails with ENOTCONN) and take it down.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

MOUNT_TIMEOUT_S = 10.0
FSNAME = "fakehw-sysfs"


def unavailable() -> str | None:
    """Why a live ``/sys`` cannot be served here (None when it can)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (the kernel has no FUSE or it is not exposed here)"
    if ctypes.util.find_library("fuse3") is None:
        return "libfuse3 is not installed (Debian: fuse3; tools/install-system-deps.sh)"
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return "not root and no fusermount3 to mount as a user"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"the FUSE binding (mfusepy) does not load: {exc}"
    return None


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes are octal escapes."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def live_mounts(under: Path | None = None) -> list[Path]:
    """Mount points of fakehw live sysfs servers (per /proc/self/mountinfo), optionally only those under ``under``;
    stale ones (their server gone) included."""
    prefix = os.path.realpath(under) + "/" if under is not None else "/"
    out: list[Path] = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) < 10 or " - " not in line:
                continue
            source = line.split(" - ", 1)[1].split()
            if len(source) < 2 or source[1] != FSNAME:
                continue
            point = _unescape(fields[4])
            if (point + "/").startswith(prefix):
                out.append(Path(point))
    return out


def mounted(mountpoint: Path) -> bool:
    """Whether a fakehw live sysfs is mounted at ``mountpoint``."""
    return Path(os.path.realpath(mountpoint)) in live_mounts()


def unmount(mountpoint: Path) -> None:
    """Detach the mount at ``mountpoint`` lazily (works for a stale mount whose server is gone)."""
    tool = shutil.which("fusermount3")
    cmd = [tool, "-u", "-z", str(mountpoint)] if tool and os.geteuid() != 0 else ["umount", "-l", str(mountpoint)]
    subprocess.run(cmd, check=False, capture_output=True)


class LiveMount:
    """A node's rendered ``sys`` tree (``<node dir>/root/sys``) served live at ``mountpoint``.

    ``with LiveMount(tree, mountpoint, socket, node): ...`` mounts (waiting until the mount is there) and unmounts
    on exit; the server logs to ``log`` (default: ``<mountpoint>.log``).
    """

    def __init__(self, tree: Path, mountpoint: Path, socket_path: Path, node: str, log: Path | None = None):
        self.tree = tree
        self.mountpoint = mountpoint
        self.socket_path = socket_path
        self.node = node
        self.log = log or mountpoint.with_name(mountpoint.name + ".log")
        self.pidfile = mountpoint.with_name(mountpoint.name + ".pid")
        self.proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------------------------------ state

    def server_pid(self) -> int | None:
        """The pid of this mount's server if it is running (the pid file's process, checked by its command line
        so that a reused pid is never taken for it)."""
        try:
            pid = int(self.pidfile.read_text().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except (OSError, ValueError):
            return None
        if b"fakehw.livefs" not in argv or os.fsencode(str(self.mountpoint)) not in argv:
            return None
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
                if fh.read().split(") ", 1)[1][0] == "Z":
                    return None
        except (OSError, IndexError):
            return None
        return pid

    def alive(self) -> bool:
        """Mounted and served (a mount whose server died is stale: every access fails with ENOTCONN)."""
        return self.server_pid() is not None and mounted(self.mountpoint)

    # ------------------------------------------------------------------------------------------ start/stop

    def start(self, detach: bool = False) -> LiveMount:
        """Mount and wait until the mount is there. ``detach``: the server outlives this process (its own session,
        stopped by any process through :meth:`stop`)."""
        why = unavailable()
        if why is not None:
            raise RuntimeError(f"cannot serve a live /sys: {why}")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "fakehw.livefs", "--tree", str(self.tree), "--mount", str(self.mountpoint),
                "--socket", str(self.socket_path), "--node", self.node]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=detach)
        self.pidfile.write_text(f"{self.proc.pid}\n")
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not mounted(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the live /sys of {self.node} did not mount at {self.mountpoint}: {tail}")
            time.sleep(0.02)
        if detach:
            self.proc = None  # not ours to reap: it lives in its own session (init reaps it)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Unmount (also a stale mount) and end the server, from this or any other process."""
        if mounted(self.mountpoint):
            unmount(self.mountpoint)
        pid = self.proc.pid if self.proc is not None else self.server_pid()
        if pid is not None:
            self._end(pid, timeout)
        self.proc = None
        self.pidfile.unlink(missing_ok=True)

    def _end(self, pid: int, timeout: float) -> None:
        """Wait for the server to leave after its unmount; terminate, then kill it if it does not."""
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc is not None:
                    if self.proc.poll() is not None:
                        return
                elif not _running(pid):
                    return
                time.sleep(0.02)

    def __enter__(self) -> LiveMount:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False
