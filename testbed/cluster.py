"""Where testbed clusters live on disk, and the record each one keeps (``cluster.json``).

A cluster is a directory ``<state dir>/<name>/`` holding its record, the agent's state (journal, socket, node
outputs) and the agent's log. The state dir defaults to ``$FAKEHW_STATE_DIR`` or ``/tmp/fakehw-<uid>``: short,
because the agent's unix socket lives inside it and socket paths are limited to 107 bytes.

A record says which directory to delete and which process to signal, so it is trusted only when this user owns
the state dir, the cluster dir and the record and nobody else can write them (:mod:`fakehw.agent.trust`): the
default name in ``/tmp`` is predictable and another user could create it first. A record must also name its own
directory as its root. Anything else is refused with the path and the reason.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fakehw.agent.trust import UntrustedPathError, check_dir, private_dir, read_trusted
from fakehw.render.atomic import atomic_write

log = logging.getLogger(__name__)
MAX_RECORD_BYTES = 1 << 20
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")


def default_state_dir() -> Path:
    env = os.environ.get("FAKEHW_STATE_DIR")
    return Path(env) if env else Path(f"/tmp/fakehw-{os.getuid()}")


def scratch_dir(prefix: str, base: str | None = None, *, for_node_view: bool = False) -> Path:
    """A new private directory for a throwaway cluster (a suite's testbed, its sockets and work files).

    Under :func:`scratch_base` (``base``, else ``$FAKEHW_SCRATCH_DIR``, else ``/tmp``): short either way, as unix
    socket paths below it are limited to 107 bytes. The Slurm and scheduler tests put theirs on tmpfs: a node's
    fake root is some 28,000 files, and making and deleting them on a busy ext4 disk mounted with ``discard`` took
    20-40 s per two-node cluster where tmpfs takes 2-3 s (measured on these 2-core machines). ``for_node_view``: the
    cluster's components run in a node view (the device-plugin suite), which needs a base that runs programs and
    honours device nodes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_base(base, for_node_view=for_node_view)))


def scratch_base(base: str | None = None, *, for_node_view: bool = False) -> str:
    """Where :func:`scratch_dir` makes its directory: ``base``, else ``$FAKEHW_SCRATCH_DIR``, else ``/tmp``.

    With ``for_node_view``, ``/tmp`` instead of a base on a file system mounted ``nodev`` or ``noexec``: a node
    view puts the node's rendered ``dev`` (real character devices: nvidia0, nvidiactl, cxl/mem0 ...) at ``/dev``,
    where a ``nodev`` mount makes every open fail, and the cluster's components may be run from it. A base under
    ``/dev/shm`` is fine otherwise: the view binds what the components use there again at its own path
    (:func:`testbed.nodeview.kept_paths`), so the node's own ``/dev`` hides none of it."""
    chosen = base or os.environ.get("FAKEHW_SCRATCH_DIR") or "/tmp"
    if for_node_view:
        try:
            flags = os.statvfs(chosen).f_flag
        except OSError:
            return chosen  # mkdtemp says why it cannot be used
        if flags & (os.ST_NODEV | os.ST_NOEXEC):
            return "/tmp"
    return chosen


def trusted_state_dir(state_dir: Path | None = None, create: bool = False) -> Path | None:
    """The state dir after the ownership and mode checks (created mode 0700 with ``create``); None when it does
    not exist and ``create`` is false."""
    path = Path(os.path.abspath(state_dir or default_state_dir()))
    if create:
        return private_dir(path)
    if not os.path.lexists(path):
        return None
    check_dir(path)
    return path


@dataclass
class ClusterRecord:
    """What ``testbed up`` stood up: enough for any later command (or process) to find and drive it."""

    name: str
    backend: str
    profile: str
    nodes: list[str]
    node_count: int | None
    root: str
    created: float
    agent_pid: int | None = None
    agent_socket: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return Path(self.root)

    @property
    def agent_dir(self) -> Path:
        return self.dir / "agent"

    def node_dir(self, node: str) -> Path:
        return self.agent_dir / "nodes" / node

    def save(self) -> None:
        atomic_write(self.dir / "cluster.json", (json.dumps(asdict(self), indent=2) + "\n").encode(), 0o600,
                     durable=True)

    @classmethod
    def load(cls, path: Path) -> ClusterRecord:
        """The record in cluster dir ``path``, refused (:class:`UntrustedPathError`) unless this user owns the
        directory and the record, nobody else can write them, and the record's root is ``path`` itself."""
        check_dir(path)
        record_file = path / "cluster.json"
        data = json.loads(read_trusted(record_file, MAX_RECORD_BYTES))
        record = cls(**data)
        if os.path.realpath(record.root) != os.path.realpath(path):
            raise UntrustedPathError(record_file, f"its root {record.root!r} is not the directory it lives in",
                                     "a record only ever describes its own directory; remove it")
        socket = record.agent_socket
        if socket is not None and os.path.dirname(os.path.realpath(socket)) != os.path.realpath(record.agent_dir):
            raise UntrustedPathError(record_file, f"its agent socket {socket!r} is outside {record.agent_dir}")
        return record


def cluster_dir(name: str, state_dir: Path | None = None) -> Path:
    if not NAME_RE.match(name):
        raise ValueError(f"cluster name {name!r}: use 1-31 lower-case letters, digits and '-'")
    return (state_dir or default_state_dir()) / name


def find_cluster(name: str, state_dir: Path | None = None) -> ClusterRecord | None:
    """The record of cluster ``name``; None when there is none (or it does not parse). A record that cannot be
    trusted raises :class:`UntrustedPathError`: it is someone else's, not a missing one."""
    root = trusted_state_dir(state_dir)
    if root is None:
        return None
    path = cluster_dir(name, root)
    if not os.path.lexists(path / "cluster.json"):
        return None
    try:
        return ClusterRecord.load(path)
    except UntrustedPathError:
        raise
    except (OSError, ValueError, TypeError):
        return None


def all_clusters(state_dir: Path | None = None) -> list[ClusterRecord]:
    """Every cluster record in the state dir; records that cannot be trusted are left out with a warning."""
    root = trusted_state_dir(state_dir)
    out = []
    for path in sorted(root.glob("*/cluster.json")) if root is not None else []:
        try:
            out.append(ClusterRecord.load(path.parent))
        except UntrustedPathError as exc:
            log.warning("%s", exc)
        except (OSError, ValueError, TypeError):
            continue
    return out


def remove_tree_in_background(path: Path) -> None:
    """Remove a cluster (or any) directory without waiting for it.

    A node's fake root holds some 15,000 files and unlinking them takes seconds per node on a busy disk: the
    directory is renamed out of the way at once (gone as far as any command can see; a cluster record inside it
    is removed first so no listing finds the trash) and deleted by a detached ``rm`` that outlives this process.
    """
    if not path.exists():
        return
    (path / "cluster.json").unlink(missing_ok=True)
    trash = path.with_name(f".trash-{path.name}-{uuid.uuid4().hex[:8]}")
    try:
        path.rename(trash)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    try:
        # sh backgrounds rm and exits at once: rm is re-parented to init, so no zombie is left in this process.
        subprocess.run(["sh", "-c", 'rm -rf -- "$0" </dev/null >/dev/null 2>&1 &', str(trash)], check=False,
                       start_new_session=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        shutil.rmtree(trash, ignore_errors=True)
