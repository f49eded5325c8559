"""The live ``/sys`` of every node of a cluster, each mounted on first use and taken down with the cluster.

Why lazily: one server per node is a Python process (about 30 MB and a quarter of a second to start); a
72-node rack whose commands touch two nodes should not pay for 72. The first command that needs a node's live
``/sys`` mounts it (under a per-node lock, so concurrent commands start one server), later ones reuse it; the
cluster's ``down`` (and an agent stop) unmounts them all. A mount whose server died (a crash, a ``kill -9``) is
stale and is replaced by the next command that needs it, and removed by the next ``up`` or ``down``.

Layout: ``<base>/<node>/sys`` (mount point), ``sys.pid`` (server), ``sys.log`` (its log), ``lock``.
"""

from __future__ import annotations

import fcntl
import re
from collections.abc import Callable
from pathlib import Path

from fakehw.livefs.mount import LiveMount, live_mounts, unmount

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class NodeMounts:
    """Live ``/sys`` mounts of a cluster's nodes under ``base``, served from ``tree_of(node)`` (the node's rendered
    ``sys``) and writing through the agent at ``socket_path`` (one agent for every node), or at
    ``socket_path(node)`` (an agent per node: the docker backend's node containers)."""

    def __init__(self, base: Path, socket_path: Path | Callable[[str], Path], tree_of: Callable[[str], Path]):
        self.base = base
        self.socket_path = socket_path
        self.tree_of = tree_of

    def _mount(self, node: str) -> LiveMount:
        if not _NODE.match(node):
            raise ValueError(f"not a node name: {node!r}")
        socket_path = self.socket_path(node) if callable(self.socket_path) else self.socket_path
        return LiveMount(self.tree_of(node), self.base / node / "sys", socket_path, node)

    def mountpoint(self, node: str) -> Path:
        return self.base / node / "sys"

    def ensure(self, node: str) -> Path:
        """The node's live ``/sys``, mounted now if it is not (a stale mount is replaced)."""
        mount = self._mount(node)
        (self.base / node).mkdir(parents=True, exist_ok=True)
        with open(self.base / node / "lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not mount.alive():
                mount.stop()
                mount.start(detach=True)
        return mount.mountpoint

    def stop_all(self) -> int:
        """Unmount every node's live ``/sys`` and end its server (stale mounts too); returns how many were up."""
        stopped = 0
        if self.base.is_dir():
            for node_dir in sorted(p for p in self.base.iterdir() if p.is_dir()):
                if not _NODE.match(node_dir.name):
                    continue
                mount = self._mount(node_dir.name)
                if mount.server_pid() is not None:
                    stopped += 1
                mount.stop()
        for point in live_mounts(self.base):  # anything left (a renamed node, a half-started server)
            unmount(point)
        return stopped
