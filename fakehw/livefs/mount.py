"""Starting and stopping a node's live ``/sys`` server (:mod:`fakehw.livefs.fs`) as a child process."""

from __future__ import annotations

import contextlib
import ctypes.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

MOUNT_TIMEOUT_S = 10.0


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


def mounted(mountpoint: Path) -> bool:
    """Whether a fakehw live sysfs is mounted at ``mountpoint`` (per /proc/self/mountinfo)."""
    target = os.path.realpath(mountpoint)
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) > 4 and fields[4] == target and "fakehw-sysfs" in line:
                return True
    return False


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
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> LiveMount:
        why = unavailable()
        if why is not None:
            raise RuntimeError(f"cannot serve a live /sys: {why}")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "fakehw.livefs", "--tree", str(self.tree), "--mount", str(self.mountpoint),
                "--socket", str(self.socket_path), "--node", self.node]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not mounted(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the live /sys of {self.node} did not mount at {self.mountpoint}: {tail}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if mounted(self.mountpoint):
            tool = shutil.which("fusermount3")
            cmd = [tool, "-u", "-z", str(self.mountpoint)] if tool else ["umount", "-l", str(self.mountpoint)]
            subprocess.run(cmd, check=False, capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None

    def __enter__(self) -> LiveMount:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
