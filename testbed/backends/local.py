"""The local backend (the embedded default): node directories and one agent process on this machine.

No Docker, no Kubernetes, no root. Each node is a directory the agent renders (``nodes/<node>/``); a command
"runs on" a node when it gets that node's environment (:mod:`testbed.environment`). One agent process serves
every node, as the design allows, and can be killed and restarted (it comes back from its journal).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fakehw import livefs
from fakehw.agent.client import AgentClient, AgentRequestError
from fakehw.agent.trust import private_dir
from fakehw.livefs.nodes import NodeMounts
from fakehw.model import System, load_profile
from fakehw.model.system import Node
from testbed import nodeview
from testbed.backends.base import Backend, BackendError, BackendInputError, NodeInfo, UpRequest, load_request_profile
from testbed.backends.startwatch import STALL_S, StartWatch, process_cpu_seconds
from testbed.cluster import ClusterRecord, remove_tree_in_background, trusted_state_dir
from testbed.environment import merged_environment, node_environment

"""The agent is given up on when, for this long, it neither answered, reported progress, nor used any CPU: a bigger
fleet takes longer to start but never stands still (see :mod:`fakehw.agent.progress`)."""
RENDER_BATCH = 16
"""Nodes per ``POST /v1/render`` when many nodes' files are asked for at once."""


def _agent_of(pid: int | None, record: ClusterRecord) -> bool:
    """Is ``pid`` this cluster's agent (this user's ``fakehw agent`` on its state dir)? A record names a pid, and
    pids are reused: nothing is signalled on the record's word alone."""
    if not pid:
        return False
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.geteuid():
            return False
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0")]
    except OSError:
        return False
    if "fakehw.cli" not in argv or "agent" not in argv or "--state-dir" not in argv[:-1]:
        return False
    state_dir = argv[argv.index("--state-dir") + 1]
    with contextlib.suppress(OSError):
        state_dir = os.path.join(os.readlink(f"/proc/{pid}/cwd"), state_dir)  # as the agent resolved it
    return os.path.realpath(state_dir) == os.path.realpath(record.agent_dir)


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


class LocalBackend(Backend):
    name = "local"
    stall_s = STALL_S
    """How long a starting agent may stand still before ``up`` gives up (see :mod:`testbed.backends.startwatch`)."""

    def __init__(self) -> None:
        self._systems: dict[tuple[str, int | None], System] = {}

    def up(self, request: UpRequest) -> ClusterRecord:
        system, profile = load_request_profile(request.profile, request.nodes)
        state_dir = trusted_state_dir(request.state_dir, create=True)
        assert state_dir is not None
        root = state_dir / request.name
        record = ClusterRecord(
            name=request.name,
            backend=self.name,
            profile=profile,
            nodes=[n.name for n in system.nodes],
            node_count=request.nodes,
            root=str(root),
            created=time.time(),
        )
        record.agent_socket = str(record.agent_dir / "agent.sock")
        if len(record.agent_socket.encode()) >= 107:
            raise BackendError(f"state dir {request.state_dir} is too deep for a unix socket; use a shorter "
                               "--state-dir (or FAKEHW_STATE_DIR)")
        private_dir(root)
        self.live_mounts(record).stop_all()  # a crashed cluster of the same name may have left mounts behind
        record.save()
        self._systems[(profile, request.nodes)] = system
        try:
            self.start_agent(record, report=request.progress)
        except BaseException:
            self.down(record)
            raise
        return record

    def _system(self, record: ClusterRecord) -> System:
        """The cluster's model, loaded once per backend object (a 10,000-node model takes seconds to expand)."""
        key = (record.profile, record.node_count)
        if key not in self._systems:
            self._systems[key] = load_profile(record.profile, nodes=record.node_count)
        return self._systems[key]

    def start_agent(self, record: ClusterRecord, salvage: bool = False,
                    report: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Start (or restart) the cluster's agent and wait until it answers; ``salvage``: from a damaged
        journal (see ``fakehw agent --salvage-journal``). ``report`` is given the agent's progress while it starts
        (``{"phase", "done", "total"}``, see :mod:`fakehw.agent.progress`).

        The agent makes a node's files when they are asked for (:meth:`node`, :meth:`nodes`, :meth:`exec`), so a
        fleet starts in the time it takes to load its model, and there is no fixed limit to beat: the wait ends
        when the agent answers, exits, or stands still (no progress and no CPU used) for :data:`STALL_S`."""
        private_dir(record.agent_dir)
        cmd = [sys.executable, "-m", "fakehw.cli", "agent", "--profile", record.profile,
               "--state-dir", str(record.agent_dir), "--files", "on-demand"]
        if record.node_count is not None:
            cmd += ["--nodes", str(record.node_count)]
        if salvage:
            cmd.append("--salvage-journal")
        log_path = record.dir / "agent.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=record.dir)
        record.agent_pid = proc.pid
        record.save()
        client = AgentClient(record.agent_socket, timeout=5.0, retries=0)
        watch = StartWatch(record.agent_dir, self.stall_s)
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise BackendError(f"the agent exited with status {proc.returncode} while starting; its log "
                                   f"({log_path}) ends:\n{tail}")
            try:
                client.health()
                return
            except AgentRequestError:
                pass
            progress = watch.poll(process_cpu_seconds(proc.pid))
            if progress is not None and report is not None:
                report(progress)
            if watch.stalled():
                proc.kill()
                raise BackendError(f"the agent stopped making progress while starting ({watch.describe()}; "
                                   f"log: {log_path})")
            time.sleep(0.05)

    def render(self, record: ClusterRecord, names: Sequence[str]) -> None:
        """Have the agent make these nodes' files (those it made before cost nothing)."""
        if record.agent_socket is None:
            raise BackendError(f"cluster {record.name} has no agent")
        client = AgentClient(record.agent_socket, timeout=600.0)
        for i in range(0, len(names), RENDER_BATCH):
            client.render(list(names[i:i + RENDER_BATCH]))

    def stop_agent(self, record: ClusterRecord, kill: bool = False, timeout: float = 10.0) -> None:
        """Stop the agent (``kill``: as a crash would). The nodes' live ``/sys`` stay mounted and served, as a
        kernel's sysfs outlives any daemon: their reads are of the files the agent left (the restarted agent renders
        what changed and tells them), writes fail with EIO until it answers again. Only :meth:`down` unmounts."""
        pid = record.agent_pid
        if not _pid_alive(pid) or not _agent_of(pid, record):
            return
        assert pid is not None
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.02)
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)

    def nodes(self, record: ClusterRecord) -> list[NodeInfo]:
        """Every node, with its files made (what a node's files cost is paid here for every node: for one node of a
        big fleet use :meth:`node`; for names only, ``record.nodes``)."""
        system = self._system(record)
        self.render(record, [n.name for n in system.nodes])
        return [self._info(record, node) for node in system.nodes]

    def node(self, record: ClusterRecord, name: str) -> NodeInfo:
        node = self._system(record).node(name)
        if node is None:
            raise BackendInputError(f"cluster {record.name} has no node {name!r}")
        self.render(record, [name])
        return self._info(record, node)

    def _info(self, record: ClusterRecord, node: Node) -> NodeInfo:
        d = record.node_dir(node.name)
        return NodeInfo(node.name, node.cpu.arch, len(node.gpus), d,
                        node_environment(node.name, d, Path(record.agent_socket or "")))

    def exec(
        self,
        record: ClusterRecord,
        node: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        capture: bool = True,
        input: bytes | None = None,
        host_paths: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        if node not in record.nodes:
            raise BackendInputError(f"cluster {record.name} has no node {node!r} (nodes: {', '.join(record.nodes)})")
        if not argv:
            raise BackendInputError("nothing to run: give a command after --")
        self.render(record, [node])
        d = record.node_dir(node)
        extra = node_environment(node, d, Path(record.agent_socket or ""))
        full = merged_environment({**extra, **(env or {})})
        run = list(argv)
        if not host_paths and nodeview.unavailable() is None:
            if shutil.which(run[0], path=full.get("PATH")) is None and "/" not in run[0]:
                raise BackendInputError(f"command not found: {run[0]}")
            run = nodeview.command(self.node_view(record, node), run)
        try:
            return subprocess.run(run, env=full, timeout=timeout, input=input, capture_output=capture, check=False)
        except FileNotFoundError:
            raise BackendInputError(f"command not found: {argv[0]}") from None

    def live_mounts(self, record: ClusterRecord) -> NodeMounts:
        """The nodes' live ``/sys`` mounts (:mod:`fakehw.livefs.nodes`), at ``<cluster>/live/<node>/sys``."""
        return NodeMounts(record.dir / "live", Path(record.agent_socket or record.agent_dir / "agent.sock"),
                          lambda n: record.node_dir(n) / "root" / "sys")

    def node_view(self, record: ClusterRecord, node: str) -> nodeview.NodeView:
        """What a command on ``node`` sees: its tree at the real paths, with ``/sys`` served live (kernel semantics
        for writes, mounted on first use) when this machine can (root and FUSE), else the rendered tree read-only."""
        root = str(record.node_dir(node) / "root")
        if self.alive(record):
            self.render(record, [node])  # the agent makes a node's files when first asked (no cost after that)
        if livefs.unavailable() is not None or not self.alive(record):
            return nodeview.NodeView(root=root)
        try:
            mountpoint = self.live_mounts(record).ensure(node)
        except (RuntimeError, OSError) as exc:
            raise BackendError(f"cannot serve the live /sys of {node}: {exc}") from None
        return nodeview.NodeView(root=root, binds=(nodeview.Bind(str(mountpoint), "/sys"),), writable_sys=True)

    def agent(self, record: ClusterRecord, node: str) -> AgentClient:
        if record.agent_socket is None:
            raise BackendError(f"cluster {record.name} has no agent")
        return AgentClient(record.agent_socket)

    def alive(self, record: ClusterRecord) -> bool:
        return _pid_alive(record.agent_pid) and _agent_of(record.agent_pid, record)

    def down(self, record: ClusterRecord) -> None:
        self.live_mounts(record).stop_all()  # first: nothing may stay mounted in a tree that is being removed
        self.stop_agent(record)
        remove_tree_in_background(record.dir)
