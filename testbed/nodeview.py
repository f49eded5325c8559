"""Run a command as it would run on a fake node: the node's tree at ``/sys``, ``/dev`` and ``/proc/driver``.

Why: real consumers read fixed paths, not ``$FAKEHW_ROOT``. numactl and libnuma read ``/sys/devices/system/node``,
``cxl``/``daxctl`` walk ``/sys/bus/cxl`` and open ``/dev/cxl/memN``, nvidia-smi 550+ runs its embedded hwloc over
all of ``/sys`` for the NIC columns of ``topo -m``, NVIDIA's device plugin reads
``/sys/bus/pci/devices/<bdf>/numa_node`` and ``/proc/driver/nvidia-caps/mig-minors``. On the Docker backend the
container's mounts give them the node; on the local backend this module does the same for one command: a private
mount namespace (and UTS namespace, so ``hostname`` is the node's) in which

- ``<root>/sys`` is bind-mounted on ``/sys`` (read-only unless the tree is served live, since a write to a rendered
  file would stick where a kernel would refuse it),
- ``<root>/dev`` on ``/dev`` (the node's character devices; the renderer also puts the standard ones there:
  null, zero, random, tty, fd ...; the host's ``/dev/pts`` and a fresh ``/dev/shm`` are mounted inside first),
- ``<root>/proc/driver`` on ``/proc/driver`` and the node's ``cpuinfo``, ``meminfo`` and ``devices`` over
  ``/proc``'s own,
- and any extra binds the caller names (a device plugin's socket directory at
  ``/var/lib/kubelet/device-plugins``, a driver root), with their mount points created when missing.

A tree kept on tmpfs under the host's ``/dev/shm`` (where tests keep them: making files there is many times cheaper
than on disk) would be hidden by the node's ``/dev``, and with it what the command finds by its host path: the
snapshot the fake libnvidia-ml reads (``$FAKEHW_NVML_SNAPSHOT``), ``$FAKEHW_ROOT``, the agent socket. So every such
path (:func:`kept_paths`) is bound again at the same path after ``/dev`` is covered, on a mount point made in the
view's own fresh ``/dev/shm``: nothing is created in the node's tree or on the host.

Nothing is visible outside the namespace, and the namespace ends with the command. Making one needs
``CAP_SYS_ADMIN`` (root); :func:`unavailable` says why it cannot be made, so callers can say what is not presented.

The part that runs inside the namespace is this file executed as a script (``python -I nodeview.py SPEC --
ARGV``): it imports only the standard library, so it adds a few tens of milliseconds, not the testbed's imports.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

# <linux/sched.h>, <sys/mount.h>
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 0x2

EXIT_SETUP = 125
"""Exit status when the view could not be set up (as ``docker run`` uses it for its own failures)."""
EXIT_NOT_FOUND = 127

PROC_FILES = ("cpuinfo", "meminfo", "devices")
"""Files of the node's ``proc/`` laid over ``/proc``'s own (what lscpu, free and device-number lookups read)."""


@dataclass(frozen=True)
class Bind:
    """An extra bind mount: ``source`` (on this machine) appears at ``target`` (absolute) inside the view."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class NodeView:
    """What a command on ``node`` sees: its fake root tree at the real paths, plus ``binds``."""

    root: str
    """The node's fake root (holds ``sys/``, ``dev/``, ``proc/``)."""
    binds: tuple[Bind, ...] = ()
    writable_sys: bool = False
    """Mount ``/sys`` read-write (only for a tree served live, whose writes have kernel semantics)."""
    hostname: str | None = None
    """The hostname inside the view (default: the tree's ``proc/sys/kernel/hostname``)."""
    dev: bool = True
    """Bind the node's ``dev`` over ``/dev``. False where the caller presents the devices itself: a node container
    whose ``/dev`` holds only the GPUs it was given (the docker backend mirrors the rest, see
    :func:`mirror_devices`)."""
    keep: tuple[str, ...] = ()
    """Host paths the command uses by their own path (a cluster's directory, an agent socket's): bound again at the
    same path when they lie under the host's ``/dev/shm`` (:func:`kept_paths`)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> NodeView:
        data = json.loads(text)
        binds = tuple(Bind(**b) for b in data.pop("binds", ()))
        return cls(binds=binds, **data)


@dataclass(frozen=True)
class Mount:
    """One step of :func:`plan`: ``mount(source, target, fstype, flags, data)``; ``make`` creates the target."""

    source: str
    target: str
    fstype: str | None = None
    flags: int = 0
    data: str | None = None
    make: str | None = field(default=None)
    """"dir" or "file": create the mount point if it is missing."""
    owners: tuple[tuple[str, int, int, int], ...] = ()
    """Directories to make on the way to the mount point, each ``(path, mode, uid, gid)`` as on the host: a kept
    path's parents made in the view's fresh ``/dev/shm`` show what the host shows (a private 0700 directory stays
    private), not the 0755 a plain ``makedirs`` gives."""


CONTAINER_DEV = frozenset({"console", "core", "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm",
                           "stderr", "stdin", "stdout", "tty", "urandom", "zero"})
"""What a container runtime itself puts in a container's ``/dev``: never replaced by :func:`mirror_devices`."""


def _gpu_device(name: str) -> bool:
    """``nvidiactl`` and ``nvidia<minor>``: in a node container, those of the GPUs it was given (its entrypoint
    makes them; the fake NVML shows a GPU only when its node exists)."""
    return name == "nvidiactl" or (name.startswith("nvidia") and name[6:].isdigit())


def mirror_devices(node_dev: str, dev: str) -> int:
    """Make the container ``/dev`` at ``dev`` (reached from outside as ``/proc/PID/root/dev``) hold the node's
    device files from its rendered ``node_dev`` (``cxl/memN``, ``daxX.Y``, ``infiniband/*``, ``nvidia-caps/*``,
    ``nvidia-uvm`` ...), and none it no longer has; the runtime's own entries and the given GPUs are left alone.
    Returns how many entries changed. Runs as root outside the container, so it never follows a link the
    container could have planted: every directory is opened with ``O_NOFOLLOW`` and worked on by descriptor."""
    src = os.open(node_dev, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dst = os.open(dev, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        os.close(src)
        raise
    try:
        return _mirror_dir(src, dst, top=True)
    finally:
        os.close(src)
        os.close(dst)


def _mirror_dir(src: int, dst: int, top: bool) -> int:
    def ours(name: str) -> bool:
        return not top or (name not in CONTAINER_DEV and not _gpu_device(name))

    wanted = {name: os.stat(name, dir_fd=src, follow_symlinks=False) for name in os.listdir(src) if ours(name)}
    changed = 0
    for name in os.listdir(dst):
        if ours(name) and name not in wanted:
            _remove_at(dst, name)
            changed += 1
    for name, st in sorted(wanted.items()):
        changed += _mirror_entry(src, dst, name, st)
    return changed


def _mirror_entry(src: int, dst: int, name: str, st: os.stat_result) -> int:
    try:
        have: os.stat_result | None = os.stat(name, dir_fd=dst, follow_symlinks=False)
    except FileNotFoundError:
        have = None
    kind = stat.S_IFMT(st.st_mode)
    if have is not None and (stat.S_IFMT(have.st_mode) != kind or (
            kind in (stat.S_IFCHR, stat.S_IFBLK) and (have.st_rdev, have.st_mode) != (st.st_rdev, st.st_mode))):
        _remove_at(dst, name)
        have = None
    if kind == stat.S_IFDIR:
        if have is None:
            os.mkdir(name, stat.S_IMODE(st.st_mode), dir_fd=dst)
        sub_src = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
        try:
            sub_dst = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst)
            try:
                return int(have is None) + _mirror_dir(sub_src, sub_dst, top=False)
            finally:
                os.close(sub_dst)
        finally:
            os.close(sub_src)
    if have is not None:
        return 0
    if kind == stat.S_IFLNK:
        os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
    elif kind in (stat.S_IFCHR, stat.S_IFBLK):
        os.mknod(name, st.st_mode, st.st_rdev, dir_fd=dst)
        os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=dst)  # mknod applies the umask
    else:
        return 0  # a device directory holds no regular files worth copying
    return 1


def _remove_at(dirfd: int, name: str) -> None:
    st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dirfd)
        return
    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    try:
        for child in os.listdir(sub):
            _remove_at(sub, child)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=dirfd)


def unavailable() -> str | None:
    """Why a node view cannot be made here (None when it can)."""
    if os.geteuid() != 0:
        return "not root: a private mount namespace needs CAP_SYS_ADMIN"
    if not os.path.exists("/proc/self/ns/mnt"):
        return "this kernel has no mount namespaces"
    return None


def command(view: NodeView, argv: Sequence[str], python: str | None = None) -> list[str]:
    """The argv that runs ``argv`` inside ``view`` (a child process: its environment and cwd pass through)."""
    if not argv:
        raise ValueError("nothing to run")
    return [python or sys.executable, "-I", os.path.abspath(__file__), view.to_json(), "--", *argv]


HOST_SHM = "/dev/shm"
"""The host's tmpfs under ``/dev``: what lies below it (resolved) is hidden once the node's ``dev`` covers ``/dev``,
and the view's own fresh ``/dev/shm`` is where mount points for it can be made without touching anything else."""

PATH_VARIABLES = ("FAKEHW_ROOT", "FAKEHW_NODE_DIR", "FAKEHW_NVML_SNAPSHOT", "FAKEHW_AGENT_SOCKET", "FAKEHW_DEV_ROOT")
"""Variables whose value is a path the command uses as it is (testbed.environment.node_environment and the fake
libnvidia-ml's own, fakehw/nvml/csrc/core.c and agentc.c)."""
PATH_LISTS = ("LD_LIBRARY_PATH", "LD_PRELOAD")
"""Variables holding a list of such paths (the fake libnvidia-ml's directory, a preloaded library)."""


def _hidden_by_dev(path: str) -> str | None:
    """``path`` resolved, when it lies strictly below the host's ``/dev/shm`` (else None)."""
    real = os.path.realpath(path)
    shm = os.path.realpath(HOST_SHM)
    if not Path(shm).is_relative_to("/dev") or real == shm or not Path(real).is_relative_to(shm):
        return None
    return real


def program_trees(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> list[str]:
    """What a command runs from under ``/dev/shm``, each as the top directory below ``/dev/shm`` that holds it: the
    working directory, the program (as ``execvp`` finds it on the command's ``PATH``) and ``PATH``'s directories.
    A program there needs its neighbours too: a virtualenv's ``bin/python`` finds ``pyvenv.cfg`` and ``lib/``
    beside ``bin/``, a checkout's console script imports the checkout (a clone under /dev/shm could not run
    ``make run`` in a node view: its ``.venv/bin/python`` was "not found")."""
    search = env.get("PATH", os.defpath)
    program = None if not argv else argv[0] if "/" in argv[0] else shutil.which(argv[0], path=search)
    found = [cwd, *([program] if program else []), *(p for p in search.split(":") if p)]
    shm = os.path.realpath(HOST_SHM)
    tops = set()
    for path in found:
        real = _hidden_by_dev(os.path.join(cwd, path))
        if real is not None:
            tops.add(os.path.join(shm, Path(real).relative_to(shm).parts[0]))
    return sorted(tops)


def kept_paths(view: NodeView, env: Mapping[str, str] | None = None, also: Sequence[str] = ()) -> list[str]:
    """The host paths under ``/dev/shm`` that the command still needs at their own path once the node's ``dev``
    covers ``/dev``, outermost first and none inside another: the view's root, its binds' sources, ``view.keep``,
    the paths ``env`` hands the command (:data:`PATH_VARIABLES`, :data:`PATH_LISTS`) and ``also`` (what the command
    runs from: :func:`program_trees`). A file is kept by its directory, since the testbed replaces snapshots by a
    rename and makes sockets anew, which a bind of the file itself would not show."""
    wanted = [view.root, *(b.source for b in view.binds if b.source.startswith("/")), *view.keep, *also]
    for name in PATH_VARIABLES:
        if (env or {}).get(name):
            wanted.append((env or {})[name])
    for name in PATH_LISTS:
        wanted.extend(p for p in (env or {}).get(name, "").replace(" ", ":").split(":") if p)
    found: set[str] = set()
    for path in wanted:
        real = _hidden_by_dev(path)
        if real is not None and not os.path.isdir(real):
            real = _hidden_by_dev(os.path.dirname(real))
        if real is not None and os.path.isdir(real):
            found.add(real)
    kept: list[str] = []
    for path in sorted(found):
        if not any(Path(path).is_relative_to(outer) for outer in kept):
            kept.append(path)
    return kept


def _host_owners(path: str) -> tuple[tuple[str, int, int, int], ...]:
    """Mode and owner of every directory from below the host's ``/dev/shm`` down to ``path``, outermost first."""
    shm = Path(os.path.realpath(HOST_SHM))
    chain = [p for p in (Path(path), *Path(path).parents) if p.is_relative_to(shm) and p != shm]
    out = []
    for p in reversed(chain):
        st = os.stat(p)
        out.append((str(p), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid))
    return tuple(out)


def plan(view: NodeView, env: Mapping[str, str] | None = None, also: Sequence[str] = ()) -> list[Mount]:
    """The mounts that make ``view``, in order (a pure function of the view, the command's environment ``env``,
    what it runs from, ``also`` (see :func:`kept_paths`), and what the tree holds)."""
    root = Path(view.root)
    steps: list[Mount] = []
    sys_dir, dev_dir = root / "sys", root / "dev"
    if sys_dir.is_dir():
        steps.append(Mount(str(sys_dir), "/sys", flags=MS_BIND | MS_REC))
        if not view.writable_sys:
            steps.append(Mount("none", "/sys", flags=MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV))
    if dev_dir.is_dir() and view.dev:
        # The host's terminals and a fresh shared-memory mount, placed inside the node's /dev first so that the
        # recursive bind below carries them along (after it, the host's /dev/pts is covered).
        steps.append(Mount("/dev/pts", str(dev_dir / "pts"), flags=MS_BIND, make="dir"))
        steps.append(Mount("tmpfs", str(dev_dir / "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", make="dir"))
        steps.append(Mount(str(dev_dir), "/dev", flags=MS_BIND | MS_REC))
        # What the command finds by its host path under /dev/shm, again at that path: the mount point is made in
        # the fresh tmpfs just mounted (now the view's /dev/shm), never in the node's tree or on the host.
        steps.extend(Mount(path, path, flags=MS_BIND | MS_REC, make="dir", owners=_host_owners(path))
                     for path in kept_paths(view, env, also))
    driver = root / "proc" / "driver"
    if driver.is_dir() and os.path.isdir("/proc/driver"):
        steps.append(Mount(str(driver), "/proc/driver", flags=MS_BIND | MS_REC))
    for name in PROC_FILES:
        if (root / "proc" / name).is_file():
            steps.append(Mount(str(root / "proc" / name), f"/proc/{name}", flags=MS_BIND))
    for b in view.binds:
        kind = "dir" if os.path.isdir(b.source) else "file"
        steps.append(Mount(b.source, b.target, flags=MS_BIND | MS_REC, make=kind))
        if b.read_only:
            steps.append(Mount("none", b.target, flags=MS_BIND | MS_REMOUNT | MS_RDONLY))
    return steps


def view_hostname(view: NodeView) -> str | None:
    if view.hostname:
        return view.hostname
    try:
        return (Path(view.root) / "proc" / "sys" / "kernel" / "hostname").read_text().strip() or None
    except OSError:
        return None


# ------------------------------------------------------------------------------------------ inside the namespace


class SetupError(Exception):
    """The view could not be made; the message names the step."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)} ({errno.errorcode.get(err, err)})")


def _make_point(target: str, kind: str | None, owners: tuple[tuple[str, int, int, int], ...] = ()) -> None:
    if kind is None or os.path.lexists(target):
        return
    try:
        for path, mode, uid, gid in owners:
            if not os.path.lexists(path):
                os.mkdir(path, mode)
                os.chown(path, uid, gid)
                os.chmod(path, mode)  # mkdir applies the umask
        if kind == "dir":
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError as exc:
        raise SetupError(f"cannot create mount point {target}: {exc.strerror}") from None


def _require_entries(source: str) -> None:
    """Refuse an empty ``/sys`` (a live server's mount point with nothing mounted on it): every reader would get
    ENOENT and most would carry on as if the machine had no such device, which is the wrong answer, not an error."""
    try:
        with os.scandir(source) as entries:
            if next(entries, None) is not None:
                return
    except OSError as exc:
        raise SetupError(f"cannot read {source} (for /sys): {exc.strerror}") from None
    raise SetupError(f"{source} (for /sys) is empty: the node's live /sys is not mounted there")


def enter(view: NodeView, env: Mapping[str, str] | None = None, also: Sequence[str] = ()) -> None:
    """Make this process's private namespaces and mount ``view`` for a command run with ``env`` from ``also``
    (:func:`program_trees`; the process then execs the command)."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare(CLONE_NEWNS|CLONE_NEWUTS)")
    # Nothing mounted from here on may propagate back to the host's namespace.
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    _mount_all(libc, plan(view, env, also))
    name = view_hostname(view)
    if name:
        raw = name.encode()
        _check(libc.sethostname(raw, len(raw)), f"sethostname({name})")


def join(view: NodeView, namespace: str, files_only: bool = False) -> None:
    """Mount ``view`` in an existing mount namespace (``/proc/PID/ns/mnt`` of a node container), as the NVIDIA
    container runtime's hook mounts a GPU container's driver files from outside: the container needs no capability
    of its own, and every process that later enters it (``docker exec``) sees the view. ``view``'s paths are the
    container's.

    ``files_only``: mount again only the single files laid over ``/proc``'s own (``meminfo``...), replacing the
    earlier ones. A render replaces a file by a rename, so a bind of the old file shows the old content for as long
    as the namespace lives (directories are never replaced, so their binds stay current)."""
    libc = _libc()  # loaded here: the library search may run programs, which the container need not have
    try:
        fd = os.open(namespace, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise SetupError(f"open {namespace}: {exc.strerror}") from None
    try:
        _check(libc.setns(fd, CLONE_NEWNS), f"setns({namespace})")
    finally:
        os.close(fd)
    steps = plan(view)
    if files_only:
        steps = [m for m in steps if m.target in {f"/proc/{name}" for name in PROC_FILES}]
        for m in steps:
            libc.umount2(m.target.encode(), MNT_DETACH)  # EINVAL when nothing is mounted there: nothing to undo
    # By path: this process is not in the container's pid namespace, so the container's /proc/self is not it.
    _mount_all(libc, steps, by_fd=False)


def _mount_all(libc: ctypes.CDLL, steps: list[Mount], by_fd: bool = True) -> None:
    # Hold every bind source open first: once the node's /dev is over /dev, a tree kept under /dev/shm (tests use
    # tmpfs there) is out of reach by path, and its /proc/driver and other sources with it.
    sources: dict[str, int] = {}
    try:
        for m in steps:
            if by_fd and m.flags & MS_BIND and not m.flags & MS_REMOUNT and m.source.startswith("/"):
                if m.source not in sources:
                    try:
                        sources[m.source] = os.open(m.source, os.O_PATH | os.O_CLOEXEC)
                    except OSError as exc:
                        code = errno.errorcode.get(exc.errno or 0, exc.errno)
                        raise SetupError(f"mount {m.source} on {m.target}: {exc.strerror} ({code})") from None
                # Also when the source is already held: one under /dev/shm is first bound again at its own path
                # (kept_paths), and an empty /sys from there was shown as the node's (found with the tests' trees
                # on tmpfs).
                if m.target == "/sys":
                    _require_entries(m.source)
        for m in steps:
            _make_point(m.target, m.make, m.owners)
            source = f"/proc/self/fd/{sources[m.source]}" if m.source in sources else m.source
            _check(libc.mount(source.encode(), m.target.encode(), m.fstype.encode() if m.fstype else None,
                              m.flags, m.data.encode() if m.data else None),
                   f"mount {m.source} on {m.target}")
    finally:
        for fd in sources.values():
            os.close(fd)


def _main(args: Sequence[str], env: Mapping[str, str]) -> int:
    if len(args) in (3, 4) and args[0] == "--join" and args[3:] in ([], ["--files"]):
        try:
            join(NodeView.from_json(args[2]), args[1], files_only=args[3:] == ["--files"])
        except SetupError as exc:
            print(f"testbed: cannot show the node's tree at the real paths in {args[1]}: {exc}", file=sys.stderr)
            return EXIT_SETUP
        return 0
    if len(args) < 3 or args[1] != "--":
        print("usage: nodeview.py VIEW-JSON -- COMMAND [ARG...]\n"
              "       nodeview.py --join /proc/PID/ns/mnt VIEW-JSON [--files]", file=sys.stderr)
        return 2
    view = NodeView.from_json(args[0])
    cwd = os.getcwd()
    try:
        enter(view, env, program_trees(args[2:], env, cwd))
    except SetupError as exc:
        print(f"testbed: cannot show the node's tree at the real paths: {exc}", file=sys.stderr)
        return EXIT_SETUP
    try:
        os.chdir(cwd)
    except OSError:
        os.chdir("/")
    argv = list(args[2:])
    try:
        os.execvpe(argv[0], argv, dict(env))
    except FileNotFoundError:
        print(f"testbed: command not found: {argv[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except OSError as exc:
        print(f"testbed: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 126 if exc.errno in (errno.EACCES, errno.ENOEXEC) else EXIT_SETUP


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:], os.environ))
