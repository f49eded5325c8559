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
from collections.abc import Mapping, Sequence
from pathlib import Path

from fakehw.agent.client import AgentClient, AgentRequestError
from fakehw.agent.trust import private_dir
from fakehw.model import load_profile
from testbed import nodeview
from testbed.backends.base import Backend, BackendError, BackendInputError, NodeInfo, UpRequest, load_request_profile
from testbed.cluster import ClusterRecord, remove_tree_in_background, trusted_state_dir
from testbed.environment import merged_environment, node_environment

AGENT_START_TIMEOUT_S = 180.0
"""The agent answers once it has rendered every node's tree: a GB200 rack is some 600k entries (memory blocks,
BARs, IOMMU groups ...), which a loaded ext4 writes at 0.1-0.5 ms each."""


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
        record.save()
        try:
            self.start_agent(record)
        except BaseException:
            self.down(record)
            raise
        return record

    def start_agent(self, record: ClusterRecord, salvage: bool = False) -> None:
        """Start (or restart) the cluster's agent and wait until it answers; ``salvage``: from a damaged
        journal (see ``fakehw agent --salvage-journal``)."""
        private_dir(record.agent_dir)
        cmd = [sys.executable, "-m", "fakehw.cli", "agent", "--profile", record.profile,
               "--state-dir", str(record.agent_dir)]
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
        deadline = time.monotonic() + AGENT_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise BackendError(f"the agent exited with status {proc.returncode} while starting; its log "
                                   f"({log_path}) ends:\n{tail}")
            try:
                client.health()
                return
            except AgentRequestError:
                time.sleep(0.05)
        proc.kill()
        raise BackendError(f"the agent did not answer within {AGENT_START_TIMEOUT_S:.0f} s (log: {log_path})")

    def stop_agent(self, record: ClusterRecord, kill: bool = False, timeout: float = 10.0) -> None:
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
        system = load_profile(record.profile, nodes=record.node_count)
        out = []
        for node in system.nodes:
            d = record.node_dir(node.name)
            out.append(NodeInfo(node.name, node.cpu.arch, len(node.gpus), d,
                                node_environment(node.name, d, Path(record.agent_socket or ""))))
        return out

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
        d = record.node_dir(node)
        extra = node_environment(node, d, Path(record.agent_socket or ""))
        full = merged_environment({**extra, **(env or {})})
        run = list(argv)
        if not host_paths and nodeview.unavailable() is None:
            if shutil.which(run[0], path=full.get("PATH")) is None and "/" not in run[0]:
                raise BackendInputError(f"command not found: {run[0]}")
            run = nodeview.command(nodeview.NodeView(root=str(d / "root")), run)
        try:
            return subprocess.run(run, env=full, timeout=timeout, input=input, capture_output=capture, check=False)
        except FileNotFoundError:
            raise BackendInputError(f"command not found: {argv[0]}") from None

    def agent(self, record: ClusterRecord, node: str) -> AgentClient:
        if record.agent_socket is None:
            raise BackendError(f"cluster {record.name} has no agent")
        return AgentClient(record.agent_socket)

    def alive(self, record: ClusterRecord) -> bool:
        return _pid_alive(record.agent_pid) and _agent_of(record.agent_pid, record)

    def down(self, record: ClusterRecord) -> None:
        self.stop_agent(record)
        remove_tree_in_background(record.dir)
