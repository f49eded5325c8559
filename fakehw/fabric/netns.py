"""Network namespaces without forking: create, enter (one thread), open sockets and netlink handles inside.

A socket or netlink handle created while the calling thread is inside a namespace stays bound to that namespace
after the thread leaves, so one process can drive hundreds of namespaces: enter, create the handle, leave. That is
about twenty times faster than pyroute2's ``IPRoute(netns=...)``, which forks a helper per handle; the fabric
benchmarks build 64-node fabrics in seconds because of it.

A :class:`Netns` is either *owned* (created here, deleted on teardown) or *borrowed* (an existing namespace
such as a container's ``/proc/<pid>/ns/net``: only what we put into it is removed). That distinction is what lets
the Docker backend hand its container namespaces to the fabric builder later.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

NETNS_RUN_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20
MNT_DETACH = 2

T = TypeVar("T")


class NetnsError(OSError):
    """A namespace operation failed; the message names the namespace and the operation."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise NetnsError(err, f"{what}: {os.strerror(err)}")


def have_root() -> bool:
    return os.geteuid() == 0


@contextlib.contextmanager
def entered(path: str | Path) -> Iterator[None]:
    """Run the body with the calling thread inside the network namespace at ``path``."""
    libc = _libc()
    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            target = os.open(str(path), os.O_RDONLY)
        except OSError as exc:
            raise NetnsError(exc.errno or errno.ENOENT, f"cannot open network namespace {path}: {exc.strerror}") \
                from None
        try:
            _check(libc.setns(target, CLONE_NEWNET), f"setns into {path}")
        finally:
            os.close(target)
        try:
            yield
        finally:
            _check(libc.setns(saved, CLONE_NEWNET), "setns back to the original namespace")
    finally:
        os.close(saved)


def _prepare_run_dir() -> None:
    """Make /run/netns a shared mount point, as iproute2 does, so bind mounts of namespaces propagate."""
    libc = _libc()
    NETNS_RUN_DIR.mkdir(parents=True, exist_ok=True)
    if libc.mount(b"", str(NETNS_RUN_DIR).encode(), b"none", MS_SHARED | MS_REC, None) == 0:
        return
    if ctypes.get_errno() != errno.EINVAL:
        _check(-1, f"mount --make-shared {NETNS_RUN_DIR}")
    d = str(NETNS_RUN_DIR).encode()
    _check(libc.mount(d, d, b"none", MS_BIND | MS_REC, None), f"bind mount {NETNS_RUN_DIR}")
    _check(libc.mount(b"", d, b"none", MS_SHARED | MS_REC, None), f"mount --make-shared {NETNS_RUN_DIR}")


def create_named(name: str) -> Path:
    """Create /run/netns/<name> (like ``ip netns add``) without forking; NetnsError if it exists."""
    if "/" in name or name in ("", ".", ".."):
        raise NetnsError(errno.EINVAL, f"invalid namespace name {name!r}")
    _prepare_run_dir()
    path = NETNS_RUN_DIR / name
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o444))
    except FileExistsError:
        raise NetnsError(errno.EEXIST, f"network namespace {name} already exists") from None
    libc = _libc()
    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            path.unlink(missing_ok=True)
            raise NetnsError(err, f"unshare a network namespace for {name}: {os.strerror(err)}")
        try:
            rc = libc.mount(b"/proc/thread-self/ns/net", str(path).encode(), b"none", MS_BIND, None)
            if rc != 0:
                err = ctypes.get_errno()
                path.unlink(missing_ok=True)
                raise NetnsError(err, f"bind the namespace to {path}: {os.strerror(err)}")
        finally:
            _check(libc.setns(saved, CLONE_NEWNET), "setns back to the original namespace")
    finally:
        os.close(saved)
    return path


def remove_named(name: str) -> bool:
    """Unmount and delete /run/netns/<name> (like ``ip netns del``); False if it did not exist."""
    path = NETNS_RUN_DIR / name
    if not path.exists():
        return False
    _libc().umount2(str(path).encode(), MNT_DETACH)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return True


def list_named(prefix: str = "") -> list[str]:
    if not NETNS_RUN_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_RUN_DIR.iterdir() if p.name.startswith(prefix))


def inode(path: str | Path) -> int:
    return os.stat(path).st_ino


@dataclass(frozen=True)
class Netns:
    """A network namespace by path, and whether this package created it (and so deletes it)."""

    path: str
    owned: bool
    name: str

    @classmethod
    def named(cls, name: str, owned: bool = True) -> Netns:
        return cls(str(NETNS_RUN_DIR / name), owned, name)

    @classmethod
    def borrowed(cls, path: str, name: str | None = None) -> Netns:
        return cls(path, False, name or path)

    def exists(self) -> bool:
        return Path(self.path).exists()

    def call(self, fn: Callable[[], T]) -> T:
        with entered(self.path):
            return fn()

    def socket(self, family: int, kind: int, proto: int = 0) -> socket.socket:
        """A socket that lives in this namespace."""
        return self.call(lambda: socket.socket(family, kind, proto))

    def iproute(self) -> Any:
        """A pyroute2 IPRoute bound to this namespace (close it when done)."""
        from pyroute2 import IPRoute  # imported here: the responder process must start fast

        return self.call(IPRoute)

    def sysctl(self, key: str, value: str) -> None:
        """Write a per-namespace sysctl (net.*)."""
        path = "/proc/sys/" + key.replace(".", "/")

        def write() -> None:
            with open(path, "w") as f:
                f.write(value)

        self.call(write)

    def run(self, argv: Sequence[str], input: bytes | None = None, timeout: float = 30,
            check: bool = True) -> subprocess.CompletedProcess[bytes]:
        """Run a program inside this namespace (nsenter; works for named and borrowed namespaces)."""
        cmd = ["nsenter", f"--net={self.path}", "--", *argv]
        try:
            proc = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout, check=False)
        except FileNotFoundError as exc:
            raise NetnsError(errno.ENOENT, f"{exc.filename} is not installed (tools/install-system-deps.sh)") \
                from None
        except subprocess.TimeoutExpired:
            raise NetnsError(errno.ETIMEDOUT, f"{' '.join(argv)} in {self.name} timed out") from None
        if check and proc.returncode != 0:
            msg = proc.stderr.decode(errors="replace").strip() or proc.stdout.decode(errors="replace").strip()
            raise NetnsError(errno.EIO, f"{' '.join(argv)} in {self.name} failed ({proc.returncode}): {msg}")
        return proc
