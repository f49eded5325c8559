"""Ownership and mode checks on the directories and files the tools trust (state dirs, records, token files).

A state directory in ``/tmp`` has a predictable name, so another local user can create it first and plant files
in it: a ``cluster.json`` whose ``root`` and ``agent_pid`` point at anything, a journal that injects faults. The
tools therefore trust a directory or file only when this user (the effective uid) owns it, nobody else can write
it, it is not a symbolic link, and every directory above it is owned by root or this user and not writable by
others unless sticky (``/tmp`` is). Secrets (token files) must not be readable by others either. This is what
OpenSSH checks of ``~/.ssh`` and ``authorized_keys`` (``StrictModes``), applied to our files.

A refusal is an :class:`UntrustedPathError` naming the path, what is wrong and how to fix it; nothing is
"repaired" behind the user's back.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_SECRET_BYTES = 4096


class UntrustedPathError(ValueError):
    """A directory or file the tools would trust is not safe to trust."""

    def __init__(self, path: Path | str, problem: str, fix: str = ""):
        self.path = Path(path)
        self.problem = problem
        self.fix = fix
        super().__init__(f"refusing to trust {path}: {problem}" + (f"; {fix}" if fix else ""))


def _owner_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _check_stat(path: Path, st: os.stat_result, kind: str, secret: bool) -> None:
    me = os.geteuid()
    if st.st_uid != me:
        raise UntrustedPathError(path, f"the {kind} belongs to {_owner_name(st.st_uid)}, not to {_owner_name(me)}",
                                 "another user may have created it; remove it or use another --state-dir")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        who = "group and others" if mode & 0o022 == 0o022 else "its group" if mode & 0o020 else "others"
        raise UntrustedPathError(path, f"the {kind} is writable by {who} (mode {mode:04o})", f"chmod go-w {path}")
    if secret and mode & 0o077:
        raise UntrustedPathError(path, f"the {kind} is readable by group or others (mode {mode:04o})",
                                 f"chmod 600 {path}")


def check_ancestors(path: Path) -> None:
    """Every directory above ``path`` is owned by root or this user and not writable by others unless sticky."""
    me = os.geteuid()
    for parent in Path(os.path.abspath(path)).parents:
        try:
            st = os.stat(parent)
        except OSError as exc:
            raise UntrustedPathError(parent, f"cannot inspect it: {exc.strerror}") from None
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in (0, me):
            raise UntrustedPathError(path, f"its parent directory {parent} belongs to {_owner_name(st.st_uid)}",
                                     "use a directory under one that root or you own")
        if mode & 0o022 and not mode & stat.S_ISVTX:
            raise UntrustedPathError(path, f"its parent directory {parent} is writable by others and not sticky "
                                     f"(mode {mode:04o}), so they could replace it", f"chmod go-w {parent}")


def check_dir(path: Path) -> None:
    """``path`` is a real directory this user owns, not writable by others, under trusted parents."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UntrustedPathError(path, f"cannot inspect it: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UntrustedPathError(path, "it is a symbolic link (to a directory someone else may control)",
                                 "use the real directory")
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedPathError(path, "it is not a directory")
    _check_stat(path, st, "directory", secret=False)
    check_ancestors(path)


def private_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700, parents too) or check an existing one with :func:`check_dir`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UntrustedPathError(path, f"cannot create it: {exc.strerror}") from None
    check_dir(path)
    return path


def check_file(path: Path, fd: int, secret: bool = False) -> None:
    """The file open on ``fd`` (opened from ``path`` with ``O_NOFOLLOW``) is a regular file this user owns that
    nobody else can write (or, with ``secret``, read)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UntrustedPathError(path, "it is not a regular file")
    _check_stat(path, st, "file", secret)


def read_trusted(path: Path, max_bytes: int, secret: bool = False) -> bytes:
    """Read a file the tools act on (a record, a token), after the checks of :func:`check_file` and of its
    parents; at most ``max_bytes`` (a larger file is refused without being read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symbolic link
            raise UntrustedPathError(path, "it is a symbolic link", "use the real file") from None
        raise
    try:
        check_file(path, fd, secret)
        check_ancestors(path)
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise UntrustedPathError(path, f"it holds {size} bytes, more than the {max_bytes} expected")
        chunks = []
        while True:
            chunk = os.read(fd, max_bytes + 1)
            if not chunk:
                break
            chunks.append(chunk)
            if sum(map(len, chunks)) > max_bytes:
                raise UntrustedPathError(path, f"it holds more than the {max_bytes} bytes expected")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_token_file(path: Path) -> str:
    """A bearer token from a file only this user can read and write (like ``ssh`` treats private keys)."""
    try:
        raw = read_trusted(path, MAX_SECRET_BYTES, secret=True)
    except OSError as exc:
        raise UntrustedPathError(path, f"cannot read the token file: {exc.strerror}") from None
    try:
        return raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise UntrustedPathError(path, "the token file is not ASCII text") from None
