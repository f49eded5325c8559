"""The agent's control API: HTTP + JSON on a unix socket (mode 0600), optionally TCP on loopback with a token.

Routes (all JSON; errors are ``{"error": message, "detail": ...}`` with a 4xx status):

=======  ==================================  ====================================================
GET      /v1/health                          agent is up: nodes served, last event sequence
GET      /v1/kinds                           fault kinds and their parameters
GET      /v1/nodes                           nodes with health summaries
GET      /v1/nodes/{node}                    runtime state of a node
GET      /v1/nodes/{node}/devices/{device}   runtime state of one GPU, memdev or pool
GET      /v1/faults[?node=]                  active faults
POST     /v1/faults                          inject: {"node", "kind", "device", ...params}
GET      /v1/faults/{id}                     one active fault
DELETE   /v1/faults/{id}                     heal one fault
POST     /v1/heal                            heal all matching {"node", "device", "kind"} (any subset)
GET      /v1/events?since=&node=&wait=       events after a sequence number (long-poll up to wait s)
=======  ==================================  ====================================================

Nothing a client sends can stop the server: bad input gets a 4xx, a bug gets a 500 and a log line.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import re
import socket
import socketserver
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fakehw.agent.faults import describe_kinds
from fakehw.agent.mig_api import ROUTES as MIG_ROUTES
from fakehw.agent.platform_api import ROUTES as PLATFORM_ROUTES
from fakehw.agent.service import AgentError, AgentService
from fakehw.agent.state import GpuState, MemdevState, PoolState

log = logging.getLogger(__name__)
MAX_BODY = 64 * 1024
REQUEST_TIMEOUT_S = 30.0

Handler = Callable[[AgentService, dict[str, str], dict[str, str], Any], tuple[int, Any]]


def _health(svc: AgentService, _p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    return 200, {"status": "ok", "system": svc.system.name, "nodes": svc.node_names, "last_seq": svc.last_seq,
                 "pid": os.getpid()}


def _kinds(_svc: AgentService, _p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    return 200, describe_kinds()


def _nodes(svc: AgentService, _p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    out = []
    for name in svc.node_names:
        st = svc.state(name)
        out.append({"name": name, "health": st.health, "generation": st.generation, "gpus": len(st.gpus),
                    "faults": len(st.faults), "dir": str(svc.node_dir(name))})
    return 200, out


def _node(svc: AgentService, p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    return 200, svc.state(p["node"]).to_json()


def _device(svc: AgentService, p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    st = svc.state(p["node"])
    items: list[GpuState | MemdevState | PoolState] = [*st.gpus, *st.memdevs, *st.pools]
    for item in items:
        if item.name == p["device"]:
            return 200, item.to_json()
    raise AgentError(404, f"node {p['node']} has no device {p['device']!r}")


def _list_faults(svc: AgentService, _p: dict[str, str], q: dict[str, str], _b: Any) -> tuple[int, Any]:
    return 200, [f.to_json() for f in svc.faults(q.get("node"))]


def _inject(svc: AgentService, _p: dict[str, str], _q: dict[str, str], body: Any) -> tuple[int, Any]:
    if not isinstance(body, dict):
        raise AgentError(400, "expected a JSON object with node, kind and device")
    node = body.get("node")
    if not isinstance(node, str):
        raise AgentError(422, "missing \"node\": the node to inject the fault into")
    request = {k: v for k, v in body.items() if k != "node"}
    return 201, svc.inject(node, request).to_json()


def _get_fault(svc: AgentService, p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    return 200, svc.fault(p["id"]).to_json()


def _heal_one(svc: AgentService, p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    return 200, {"healed": [f.to_json() for f in svc.heal(fault_id=p["id"])]}


def _heal(svc: AgentService, _p: dict[str, str], _q: dict[str, str], body: Any) -> tuple[int, Any]:
    body = {} if body is None else body
    if not isinstance(body, dict):
        raise AgentError(400, "expected a JSON object with any of node, device, kind, id")
    unknown = set(body) - {"node", "device", "kind", "id"}
    if unknown:
        raise AgentError(422, f"unknown field(s) {', '.join(sorted(unknown))} (heal takes node, device, kind, id)")
    for key, value in body.items():
        if value is not None and not isinstance(value, str):
            raise AgentError(422, f"{key} must be a string")
    healed = svc.heal(fault_id=body.get("id"), node=body.get("node"), device=body.get("device"),
                      kind=body.get("kind"))
    return 200, {"healed": [f.to_json() for f in healed]}


def _events(svc: AgentService, _p: dict[str, str], q: dict[str, str], _b: Any) -> tuple[int, Any]:
    try:
        since = int(q.get("since", "0"))
        wait = float(q.get("wait", "0"))
        limit = int(q.get("limit", "1000"))
    except ValueError:
        raise AgentError(400, "since and limit are integers, wait is seconds") from None
    if not 0 <= wait <= 60 or not 1 <= limit <= 10_000:
        raise AgentError(400, "wait must be 0..60 seconds and limit 1..10000")
    events = svc.events(since=since, node=q.get("node"), wait=wait, limit=limit)
    return 200, {"events": [e.to_json() for e in events], "last_seq": svc.last_seq}


ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    ("GET", re.compile(r"^/v1/health$"), _health),
    ("GET", re.compile(r"^/v1/kinds$"), _kinds),
    ("GET", re.compile(r"^/v1/nodes$"), _nodes),
    ("GET", re.compile(r"^/v1/nodes/(?P<node>[^/]+)$"), _node),
    ("GET", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/devices/(?P<device>[^/]+)$"), _device),
    ("GET", re.compile(r"^/v1/faults$"), _list_faults),
    ("POST", re.compile(r"^/v1/faults$"), _inject),
    ("GET", re.compile(r"^/v1/faults/(?P<id>[^/]+)$"), _get_fault),
    ("DELETE", re.compile(r"^/v1/faults/(?P<id>[^/]+)$"), _heal_one),
    ("POST", re.compile(r"^/v1/heal$"), _heal),
    ("GET", re.compile(r"^/v1/events$"), _events),
    *PLATFORM_ROUTES,  # CXL and memory pools: fakehw/agent/platform_api.py
    *MIG_ROUTES,  # MIG mode and instances: fakehw/agent/mig_api.py
]


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakehw-agent/1"
    timeout = REQUEST_TIMEOUT_S

    def address_string(self) -> str:
        return "unix" if isinstance(self.client_address, str | bytes) or not self.client_address else \
            str(self.client_address[0])

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def _send(self, status: int, payload: Any) -> None:
        data = (json.dumps(payload, sort_keys=True) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        token: str | None = getattr(self.server, "token", None)
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

    def _body(self) -> Any:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise AgentError(411, "send the body with a Content-Length (chunked bodies are not accepted)")
        raw_length = self.headers.get("Content-Length")
        if raw_length is None:
            return None
        try:
            length = int(raw_length)
        except ValueError:
            self.close_connection = True
            raise AgentError(400, f"bad Content-Length {raw_length!r}") from None
        if length < 0:
            self.close_connection = True
            raise AgentError(400, "negative Content-Length")
        if length > MAX_BODY:
            self.close_connection = True
            raise AgentError(413, f"body of {length} bytes is larger than the {MAX_BODY}-byte limit")
        raw = self.rfile.read(length)
        if len(raw) != length:
            self.close_connection = True
            raise AgentError(400, "body shorter than its Content-Length")
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise AgentError(400, f"malformed JSON body: {exc}") from None

    def _dispatch(self, method: str) -> None:
        try:
            if not self._authorized():
                self.close_connection = True
                raise AgentError(401, "missing or wrong bearer token")
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            allowed = []
            for route_method, pattern, handler in ROUTES:
                match = pattern.match(url.path)
                if match is None:
                    continue
                allowed.append(route_method)
                if route_method != method:
                    continue
                body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
                status, payload = handler(self.server.service, match.groupdict(), query, body)  # type: ignore[attr-defined]
                self._send(status, payload)
                return
            if allowed:
                raise AgentError(405, f"{method} is not allowed on {url.path} (allowed: {', '.join(allowed)})")
            raise AgentError(404, f"no such endpoint {url.path} (see the routes in GET /v1/health's docs)")
        except AgentError as exc:
            self._send(exc.status, {"error": exc.message, "detail": exc.detail})
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        except Exception as exc:  # never let a bug take the agent down
            log.exception("internal error serving %s %s", method, self.path)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._send(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})


class UnixAgentServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The control API on a unix socket created with mode 0600."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path: Path, service: AgentService):
        self.service = service
        self.token: str | None = None
        self.socket_path = path
        if len(str(path).encode()) >= 107:
            raise ValueError(f"unix socket path {path} is longer than the 107 bytes the kernel allows; "
                             "use a shorter --state-dir")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_socket() or path.exists():
            path.unlink()
        old = os.umask(0o177)
        try:
            super().__init__(str(path), _RequestHandler)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)

    def server_close(self) -> None:
        super().server_close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()


class TcpAgentServer(ThreadingHTTPServer):
    """The control API on loopback TCP; every request needs ``Authorization: Bearer <token>``."""

    daemon_threads = True

    def __init__(self, host: str, port: int, token: str, service: AgentService):
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError(f"the TCP control API listens on loopback only, not {host}")
        if len(token) < 16:
            raise ValueError("the bearer token must be at least 16 characters")
        self.service = service
        self.token = token
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.address_family = family
        super().__init__((host, port), _RequestHandler)


def serve(servers: list[socketserver.BaseServer], stop: threading.Event) -> None:
    """Serve on every server until ``stop`` is set."""
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True) for s in servers]
    for t in threads:
        t.start()
    stop.wait()
    for s in servers:
        s.shutdown()
        s.server_close()
