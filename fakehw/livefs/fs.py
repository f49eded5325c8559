"""The FUSE operations of a live ``/sys``: reads of the rendered tree the kernel may cache, writes through the agent.

Errno values are the ones sysfs (kernfs) gives: opening for write a file with no store method (rendered without
write bits) is EACCES even for root, as is opening for read a write-only attribute; ``create`` EACCES, ``mkdir``,
``unlink``, ``rmdir``, ``rename``, ``symlink``, ``link``, ``chmod``, ``chown`` EPERM. ``O_TRUNC`` on a writable
attribute is accepted and does nothing (sysfs ignores the size change).

Caching: the kernel keeps names, attributes, symlink targets and file contents (long entry/attribute timeouts,
``keep_cache`` for readers, cached symlinks); negative lookups are never cached, so a file that appears is found
at once. When the agent renders a change it tells this server which paths changed (:mod:`fakehw.livefs.notify`)
and the server drops them from the kernel's caches (``fuse_invalidate_path``) before the agent answers: the next
read goes to the tree again. Writers get ``direct_io`` (a write is never cached, and holds no page a concurrent
invalidation would wait for).
"""

from __future__ import annotations

import base64
import ctypes
import errno
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import mfusepy

from fakehw.livefs.notify import LIVE_DIR, read_request

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


CACHE_TIMEOUT_S = 86400.0
"""Entry and attribute timeouts: what the kernel caches stays until the server invalidates it."""
FUSE_CAP_CACHE_SYMLINKS = 1 << 23
"""libfuse's capability bit for caching symlink targets in the page cache (fuse_common.h)."""


class _FuseContext(ctypes.Structure):
    _fields_ = [("fuse", ctypes.c_void_p), ("uid", ctypes.c_uint), ("gid", ctypes.c_uint), ("pid", ctypes.c_int),
                ("private_data", ctypes.c_void_p), ("umask", ctypes.c_uint)]


def _libfuse() -> ctypes.CDLL:
    lib: ctypes.CDLL = mfusepy._libfuse
    lib.fuse_get_context.restype = ctypes.POINTER(_FuseContext)
    lib.fuse_invalidate_path.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.fuse_invalidate_path.restype = ctypes.c_int
    return lib


class LiveSysfs(mfusepy.Operations):  # type: ignore[misc]
    """Serves ``tree`` (a rendered ``<root>/sys``) as ``/sys``; ``prefix`` names it to the writer (``sys``)."""

    use_ns = True

    def __init__(self, tree: Path, writer: SysfsWriter, prefix: str = "sys"):
        self.tree = tree
        self.writer = writer
        self.prefix = prefix
        self._fuse: int | None = None
        self._lib: ctypes.CDLL | None = None
        self.invalidated = 0
        self._modes: dict[str, int] = {}
        """Mode of every path the kernel holds attributes of (what getattr answered, until invalidated): open
        checks it without a system call."""

    # ------------------------------------------------------------------------------------------ caching

    def init_with_config(self, conn: Any, config: Any) -> None:
        """Cache symlink targets if the kernel can; remember the session for invalidations."""
        if conn is not None and conn.capable & FUSE_CAP_CACHE_SYMLINKS:
            conn.want |= FUSE_CAP_CACHE_SYMLINKS
        self._lib = _libfuse()
        self._fuse = self._lib.fuse_get_context().contents.fuse

    def invalidate(self, paths: Iterable[str]) -> int:
        """Drop root-relative ``paths`` (``sys/...``) from the kernel's caches; returns how many it knew."""
        if self._lib is None or not self._fuse:
            return 0
        known = 0
        strip = len(self.prefix)
        for rel in paths:
            if rel != self.prefix and not rel.startswith(self.prefix + "/"):
                continue
            path = rel[strip:] or "/"
            self._modes.pop(path, None)
            known += self._lib.fuse_invalidate_path(self._fuse, path.encode()) == 0
        self.invalidated += known
        return known

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
        self._modes[path] = st.st_mode
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
        mode = self._modes.get(path)
        if mode is None:
            mode = self._lstat(path).st_mode
        acc = fi.flags & os.O_ACCMODE
        if acc in (os.O_WRONLY, os.O_RDWR) and not mode & 0o222:
            raise mfusepy.FuseOSError(errno.EACCES)
        if acc in (os.O_RDONLY, os.O_RDWR) and not mode & 0o444:
            raise mfusepy.FuseOSError(errno.EACCES)
        if acc == os.O_RDONLY:
            fi.keep_cache = 1
        else:
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


class ChangeListener:
    """Accepts the agent's change notifications for one live tree (``<node dir>/live-sys/<pid>.sock``) and
    invalidates what they name before acknowledging."""

    def __init__(self, fs: LiveSysfs, node_dir: Path):
        self.fs = fs
        self.dir = node_dir / LIVE_DIR
        self.path = self.dir / f"{os.getpid()}.sock"
        self.sock: socket.socket | None = None

    def start(self) -> ChangeListener:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        sock.listen(16)
        self.sock = sock
        threading.Thread(target=self._loop, name="fakehw-livefs-changes", daemon=True).start()
        return self

    def _loop(self) -> None:
        assert self.sock is not None
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10.0)
                try:
                    self.fs.invalidate(read_request(conn))
                    conn.sendall(b"k")
                except (OSError, ValueError) as exc:
                    log.warning("change notification dropped: %s", exc)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.path.unlink(missing_ok=True)


def serve(tree: Path, mountpoint: Path, writer: SysfsWriter, prefix: str = "sys") -> None:
    """Mount and serve until unmounted (or SIGTERM/SIGINT); blocks. Needs root or fusermount3. The agent's change
    notifications arrive through a socket in the node directory (two levels above ``tree``)."""
    fs = LiveSysfs(tree, writer, prefix)
    listener = ChangeListener(fs, tree.parent.parent).start()
    try:
        mfusepy.FUSE(fs, str(mountpoint), foreground=True, raw_fi=True, nothreads=False,
                      allow_other=os.geteuid() == 0, default_permissions=True, fsname="fakehw-sysfs", subtype="fakehw",
                      attr_timeout=CACHE_TIMEOUT_S, entry_timeout=CACHE_TIMEOUT_S, negative_timeout=0)
    finally:
        listener.close()
