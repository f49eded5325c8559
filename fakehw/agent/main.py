"""``fakehw agent``: run the agent process until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import os
import signal
import socketserver
import threading
from pathlib import Path

from fakehw.agent.server import TcpAgentServer, UnixAgentServer, serve
from fakehw.agent.service import AgentService
from fakehw.model.system import System

log = logging.getLogger("fakehw.agent")


def run_agent(
    system: System,
    state_dir: Path,
    nodes: list[str] | None = None,
    socket_path: Path | None = None,
    listen: str | None = None,
    token: str | None = None,
    ready: threading.Event | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Serve until ``stop`` is set or a termination signal arrives (in the main thread)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    service = AgentService(system, state_dir, nodes)
    servers: list[socketserver.BaseServer] = [UnixAgentServer(socket_path or state_dir / "agent.sock", service)]
    if listen:
        host, _, port = listen.rpartition(":")
        if not token:
            raise ValueError("--listen needs a bearer token (--token-file)")
        servers.append(TcpAgentServer(host or "127.0.0.1", int(port), token, service))
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
