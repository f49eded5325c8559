"""``fakehw agent``: run the agent process until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import os
import signal
import socketserver
import threading
from pathlib import Path

from fakehw.agent.journal import JournalDamaged
from fakehw.agent.progress import StartProgress
from fakehw.agent.server import TcpAgentServer, UnixAgentServer, serve
from fakehw.agent.service import AgentService
from fakehw.agent.statedir import is_disk_full
from fakehw.model.system import System

log = logging.getLogger("fakehw.agent")


class AgentStartError(ValueError):
    """The agent cannot start (its state directory is damaged, full or not writable); the message says why."""


def run_agent(
    system: System,
    state_dir: Path,
    nodes: list[str] | None = None,
    socket_path: Path | None = None,
    listen: str | None = None,
    token: str | None = None,
    ready: threading.Event | None = None,
    stop: threading.Event | None = None,
    salvage: bool = False,
    files: str = "all",
) -> None:
    """Serve until ``stop`` is set or a termination signal arrives (in the main thread). ``files``: "all" renders
    every node's files at start, "on-demand" only when asked (``POST /v1/render``)."""
    if listen and not token:
        raise ValueError("--listen needs a bearer token (--token-file)")
    try:
        service = AgentService(system, state_dir, nodes, salvage=salvage, files=files,
                               progress=StartProgress(state_dir))
    except JournalDamaged as exc:
        raise AgentStartError(str(exc)) from None
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        full = "; the state directory needs room for the rendered nodes" if is_disk_full(exc) else ""
        raise AgentStartError(f"cannot start the agent in {state_dir}: {exc.strerror or exc}{where}{full}") from None
    servers: list[socketserver.BaseServer] = []
    try:
        servers.append(UnixAgentServer(socket_path or state_dir / "agent.sock", service))
        if listen:
            host, _, port = listen.rpartition(":")
            servers.append(TcpAgentServer(host or "127.0.0.1", int(port), token or "", service))
    except BaseException:
        for server in servers:
            server.server_close()
        service.close()
        raise
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    pid_file = state_dir / "agent.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    log.info("agent for %s serving %d node(s) in %s", system.name, len(service.node_names), state_dir)
    if ready is not None:
        ready.set()
    try:
        serve(servers, stop)
    finally:
        service.close()
        pid_file.unlink(missing_ok=True)
        log.info("agent stopped")
