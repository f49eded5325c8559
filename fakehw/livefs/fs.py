"""The FUSE operations of a live ``/sys``: passthrough reads over the rendered tree, writes through the agent.

Errno values are the ones sysfs (kernfs) gives: opening for write a file with no store method (rendered without
write bits) is EACCES even for root, as is opening for read a write-only attribute; ``create`` EACCES, ``mkdir``,
``unlink``, ``rmdir``, ``rename``, ``symlink``, ``link``, ``chmod``, ``chown`` EPERM. ``O_TRUNC`` on a writable
attribute is accepted and does nothing (sysfs ignores the size change).
"""

from __future__ import annotations

import base64
import errno
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mfusepy

log = logging.getLogger(__name__)

SysfsWriter = Callable[[str, bytes], int]
"""``writer(path, data)``: the bytes consumed, or raise ``OSError(errno)``; ``path`` is root-relative (``sys/...``)."""


def agent_writer(socket_path: str, node: str, timeout: float = 30.0) -> SysfsWriter:
    """A writer that asks the node's agent (unix socket) to apply each write; the agent's errno is raised."""
    from fakehw.agent.client import AgentClient, AgentRequestError

    client = AgentClient(socket_path, timeout=timeout)

    def write(path: str, data: bytes) -> int:
        try:
            answer = client.request("POST", f"/v1/nodes/{node}/sysfs",
                                    {"path": path, "data": base64.b64encode(data).decode()})
        except (AgentRequestError, OSError) as exc:
            log.warning("sysfs write to /%s not delivered: %s", path, exc)
            raise OSError(errno.EIO, f"agent unreachable: {exc}") from None
        code = int(answer.get("errno", errno.EIO))
        if code:
            log.info("write to /%s refused: %s", path, answer.get("error"))
            raise OSError(code, str(answer.get("error", "")))
        return int(answer["written"])

    return write


class LiveSysfs(mfusepy.Operations):  # type: ignore[misc]
    """Serves ``tree`` (a rendered ``<root>/sys``) as ``/sys``; ``prefix`` names it to the writer (``sys``)."""

    use_ns = True

    def __init__(self, tree: Path, writer: SysfsWriter, prefix: str = "sys"):
        self.tree = tree
        self.writer = writer
        self.prefix = prefix

    def _real(self, path: str) -> str:
        rel = path.lstrip("/")
        if ".." in rel.split("/"):
            raise mfusepy.FuseOSError(errno.ENOENT)
        return os.path.join(self.tree, rel)

    def _lstat(self, path: str) -> os.stat_result:
        try:
            return os.lstat(self._real(path))
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno or errno.ENOENT) from None

    # ------------------------------------------------------------------------------------------ reads

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        st = self._lstat(path)
        keys = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_rdev", "st_ino")
        out: dict[str, Any] = {k: getattr(st, k) for k in keys}
        out.update(st_atime_ns=st.st_atime_ns, st_mtime_ns=st.st_mtime_ns, st_ctime_ns=st.st_ctime_ns)
        return out

    def readlink(self, path: str) -> str:
        try:
            return os.readlink(self._real(path))
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno or errno.EINVAL) from None

    def readdir(self, path: str, fh: Any) -> list[str]:
        try:
            return [".", "..", *sorted(os.listdir(self._real(path)))]
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno or errno.ENOENT) from None

    def open(self, path: str, fi: Any) -> int:
        mode = self._lstat(path).st_mode
        acc = fi.flags & os.O_ACCMODE
        if acc in (os.O_WRONLY, os.O_RDWR) and not mode & 0o222:
            raise mfusepy.FuseOSError(errno.EACCES)
        if acc in (os.O_RDONLY, os.O_RDWR) and not mode & 0o444:
            raise mfusepy.FuseOSError(errno.EACCES)
        fi.direct_io = 1
        fi.fh = 0
        return 0

    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        try:
            with open(self._real(path), "rb") as fh:
                fh.seek(offset)
                return fh.read(size)
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None

    def access(self, path: str, amode: int) -> int:
        mode = self._lstat(path).st_mode
        if amode & os.W_OK and not stat.S_ISDIR(mode) and not mode & 0o222:
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_namemax": 255}

    # ------------------------------------------------------------------------------------------ writes

    def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
        if not self._lstat(path).st_mode & 0o222:
            raise mfusepy.FuseOSError(errno.EACCES)
        try:
            return self.writer(f"{self.prefix}/{path.lstrip('/')}", data)
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None

    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        if not self._lstat(path).st_mode & 0o222:
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        raise mfusepy.FuseOSError(errno.EACCES)

    def _eperm(self, *args: Any) -> int:
        raise mfusepy.FuseOSError(errno.EPERM)

    mkdir = unlink = rmdir = rename = symlink = link = chmod = chown = utimens = mknod = _eperm
    setxattr = removexattr = _eperm

    def getxattr(self, path: str, name: str, position: int = 0) -> bytes:
        raise mfusepy.FuseOSError(errno.ENODATA)

    def listxattr(self, path: str) -> list[str]:
        return []


def serve(tree: Path, mountpoint: Path, writer: SysfsWriter, prefix: str = "sys") -> None:
    """Mount and serve until unmounted (or SIGTERM/SIGINT); blocks. Needs root or fusermount3."""
    mfusepy.FUSE(LiveSysfs(tree, writer, prefix), str(mountpoint), foreground=True, raw_fi=True, nothreads=False,
                  allow_other=os.geteuid() == 0, fsname="fakehw-sysfs", subtype="fakehw",
                  attr_timeout=0, entry_timeout=0, negative_timeout=0)
