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
POST     /v1/render                          make nodes' files and keep them current: {"nodes": [...]}
=======  ==================================  ====================================================

Nothing a client sends can stop the server: bad input gets a 4xx, a bug gets a 500 and a log line.

What a peer can make the agent hold before it is authenticated is bounded (a TCP peer may be any local user):
request line and headers together at most :data:`MAX_HEADER_BYTES`, read within :data:`HEADER_DEADLINE_S` in
total (a deadline per request, not per ``recv``: a peer dripping one byte at a time is cut off), at most
:data:`MAX_UNAUTHENTICATED` connections that have not yet shown the token and :data:`MAX_CONNECTIONS` in all
(more are answered 503 and closed). The listen backlog is sized for the nodes served, so a burst of clients is
queued, not refused.

Bodies need a ``Content-Length`` (411 without one on POST/PUT/PATCH; a second ``Content-Length``, or one with
``Transfer-Encoding``, is 400) and are strict JSON: integers beyond 64 bits and non-finite numbers are refused.
A mutating request may carry an ``Idempotency-Key`` (:mod:`fakehw.agent.idempotency`). A change that could not
be made durable (a full disk) is 507 and was not applied.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import hmac
import http.client
import json
import logging
import math
import os
import re
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fakehw.agent.faults import describe_kinds
from fakehw.agent.idempotency import IdempotencyError, check_key, fingerprint
from fakehw.agent.journal import JournalWriteError
from fakehw.agent.mig_api import ROUTES as MIG_ROUTES
from fakehw.agent.platform_api import ROUTES as PLATFORM_ROUTES
from fakehw.agent.service import AgentError, AgentService, Idempotency
from fakehw.agent.state import GpuState, MemdevState, PoolState

log = logging.getLogger(__name__)
MAX_BODY = 64 * 1024
REQUEST_TIMEOUT_S = 30.0
"""Longest wait for one ``recv`` or ``send`` (and for a request's body and answer, in total)."""
MAX_HEADER_BYTES = 16 * 1024
HEADER_DEADLINE_S = 10.0
MAX_CONNECTIONS = 512
MAX_UNAUTHENTICATED = 64
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
INT64 = 2**63

Handler = Callable[[AgentService, dict[str, str], dict[str, str], Any], tuple[int, Any]]
"""(service, path parameters, query, body) -> (status, payload). The path parameters of a request carrying an
``Idempotency-Key`` also hold ``idempotency-key`` and ``idempotency-fingerprint`` (see :func:`_idempotency`)."""


def _health(svc: AgentService, _p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    condition = svc.health()
    degraded = condition["disk_full"] or condition["stale_nodes"]
    return 200, {"status": "degraded" if degraded else "ok", "system": svc.system.name, "nodes": svc.node_names,
                 "last_seq": svc.last_seq, "pid": os.getpid(), **condition}


def _idempotency(p: dict[str, str]) -> Idempotency | None:
    key = p.get("idempotency-key")
    return None if key is None else (key, p["idempotency-fingerprint"])


def _kinds(_svc: AgentService, _p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    return 200, describe_kinds()


def _nodes(svc: AgentService, _p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    out = []
    for name in svc.node_names:
        st = svc.state(name)
        out.append({"name": name, "health": st.health, "generation": st.generation, "gpus": len(st.gpus),
                    "faults": len(st.faults), "dir": str(svc.node_dir(name)), "rendered": svc.rendered(name)})
    return 200, out


def _render(svc: AgentService, _p: dict[str, str], _q: dict[str, str], body: Any) -> tuple[int, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("nodes"), list) or \
            not all(isinstance(n, str) for n in body["nodes"]):
        raise AgentError(400, "expected {\"nodes\": [names]}: the nodes whose files to make")
    if len(body["nodes"]) > len(svc.node_names):
        raise AgentError(422, f"{len(body['nodes'])} names for {len(svc.node_names)} nodes")
    dirs = svc.render(body["nodes"])
    return 200, {"rendered": {n: str(d) for n, d in zip(body["nodes"], dirs, strict=False)}}


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


def _inject(svc: AgentService, p: dict[str, str], _q: dict[str, str], body: Any) -> tuple[int, Any]:
    if not isinstance(body, dict):
        raise AgentError(400, "expected a JSON object with node, kind and device")
    node = body.get("node")
    if not isinstance(node, str):
        raise AgentError(422, "missing \"node\": the node to inject the fault into")
    request = {k: v for k, v in body.items() if k != "node"}
    return 201, svc.inject(node, request, _idempotency(p)).to_json()


def _get_fault(svc: AgentService, p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    return 200, svc.fault(p["id"]).to_json()


def _heal_one(svc: AgentService, p: dict[str, str], _q: dict[str, str], _b: Any) -> tuple[int, Any]:
    return 200, {"healed": [f.to_json() for f in svc.heal(fault_id=p["id"], idempotency=_idempotency(p))]}


def _heal(svc: AgentService, p: dict[str, str], _q: dict[str, str], body: Any) -> tuple[int, Any]:
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
                      kind=body.get("kind"), idempotency=_idempotency(p))
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
    ("POST", re.compile(r"^/v1/render$"), _render),
    *PLATFORM_ROUTES,  # CXL and memory pools: fakehw/agent/platform_api.py
    *MIG_ROUTES,  # MIG mode and instances: fakehw/agent/mig_api.py
]


class _HeaderTooLarge(http.client.HTTPException):
    """The request line and headers exceed :data:`MAX_HEADER_BYTES`."""


class _BadHead(Exception):
    """A request line or header field that RFC 9112 says to refuse: answered ``status`` and the connection closed."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


MAX_HEADERS = 100
"""Header fields per request (http.server's limit, kept): more is 431."""
_TCHAR = r"[!#$%&'*+.^_`|~0-9A-Za-z-]"
REQUEST_LINE = re.compile(rf"({_TCHAR}+) ([^\x00-\x20\x7f]+) HTTP/(\d)\.(\d)")
"""RFC 9112 3: method SP request-target SP HTTP-version, single spaces, the method a token (RFC 9110 9.1)."""
FIELD_LINE = re.compile(rf"({_TCHAR}+):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*?)[ \t]*")
"""RFC 9112 5: field-name ":" OWS field-value OWS. The name is a token, so whitespace before the colon (5.1) and a
line starting with whitespace (obs-fold, 5.2) do not match; the value holds no CR, LF, NUL or other control but
HTAB (RFC 9110 5.5)."""


class Headers:
    """A request's header fields by lower-cased name (names are case-insensitive, RFC 9110 5.1), values in arrival
    order: the two calls the server makes of ``email.message.Message``, without the email package's parser."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, list[str]]):
        self._fields = fields

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self._fields.get(name.lower())
        return values[0] if values else default

    def get_all(self, name: str) -> list[str] | None:
        return self._fields.get(name.lower())


def _line(raw: bytes) -> str:
    """One line of the head without its terminator (CRLF, or a lone LF: RFC 9112 2.2 lets a recipient take it);
    a line cut short by the peer closing is not a line."""
    if not raw.endswith(b"\n"):
        raise _BadHead(400, "the request ended inside its head")
    return raw[:-2 if raw.endswith(b"\r\n") else -1].decode("latin-1")


def parse_request_line(raw: bytes) -> tuple[str, str, tuple[int, int]]:
    """(method, target, (major, minor)) of a request line (RFC 9112 3); HTTP/2 and later are 505 (a version this
    server does not speak, RFC 9110 15.6.6), anything else malformed 400."""
    match = REQUEST_LINE.fullmatch(_line(raw))
    if match is None:
        raise _BadHead(400, f"bad request line {raw[:80]!r}")
    method, target, major, minor = match.groups()
    if major != "1":
        raise _BadHead(505 if major > "1" else 400, f"HTTP/{major}.{minor} is not spoken here (HTTP/1.1 is)")
    return method, target, (1, int(minor))


def read_headers(readline: Callable[[], bytes]) -> Headers:
    """The header fields up to the empty line, from ``readline`` (which enforces the byte budget): at most
    :data:`MAX_HEADERS` (431), each a strict field line (400), repeated names kept in order."""
    fields: dict[str, list[str]] = {}
    for _ in range(MAX_HEADERS + 1):
        line = _line(readline())
        if not line:
            return Headers(fields)
        match = FIELD_LINE.fullmatch(line)
        if match is None:
            raise _BadHead(400, f"bad header field {line[:80]!r} (RFC 9112 5: name, colon, value; no folding)")
        fields.setdefault(match[1].lower(), []).append(match[2])
    raise _BadHead(431, f"more than {MAX_HEADERS} header fields")


@functools.lru_cache(maxsize=1)
def _imf_fixdate(second: int) -> str:
    return email.utils.formatdate(second, usegmt=True)


def _http_date() -> str:
    """The Date header's IMF-fixdate (RFC 9110 5.6.7), formatted once a second (a pure function of the second,
    cached: no state of ours to share between handler threads)."""
    return _imf_fixdate(int(time.time()))


class _HeaderBudget:
    """The connection's reader with a byte budget for the request line and headers of one request."""

    def __init__(self, raw: Any, budget: int):
        self.raw = raw
        self.left = budget

    def readline(self, limit: int = -1) -> bytes:
        cap = self.left + 1 if limit < 0 else min(limit, self.left + 1)
        line: bytes = self.raw.readline(cap)
        self.left -= len(line)
        if self.left < 0:
            raise _HeaderTooLarge(f"request line and headers are larger than {MAX_HEADER_BYTES} bytes")
        return line

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.raw.read(size)
        return data

    def close(self) -> None:
        self.raw.close()


class Deadlines:
    """Cuts off connections that take too long to send a request (or to take its answer): one thread per server
    checks the deadlines and shuts the late sockets down, which ends any ``recv`` or ``send`` blocked on them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due: dict[socket.socket, float] = {}
        self._expired: set[socket.socket] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fakehw-agent-deadlines", daemon=True)
        self._thread.start()

    def set(self, conn: socket.socket, seconds: float | None) -> None:
        with self._lock:
            if seconds is None:
                self._due.pop(conn, None)
            else:
                self._due[conn] = time.monotonic() + seconds

    def expired(self, conn: socket.socket) -> bool:
        with self._lock:
            return conn in self._expired

    def forget(self, conn: socket.socket) -> None:
        with self._lock:
            self._due.pop(conn, None)
            self._expired.discard(conn)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with self._lock:
                late = [c for c, due in self._due.items() if due <= now]
                for conn in late:
                    del self._due[conn]
                    self._expired.add(conn)
            for conn in late:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def _strict_int(text: str) -> int:
    if len(text.lstrip("-")) > 19 or not -INT64 <= (value := int(text)) < INT64:
        raise ValueError(f"integer {text[:24]}{'...' if len(text) > 24 else ''} does not fit in 64 bits")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:24]} is out of range")
    return value


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


_STRICT_JSON = json.JSONDecoder(parse_int=_strict_int, parse_float=_finite_float, parse_constant=_no_constant)
"""Made once (``json.loads`` with hooks makes a decoder per call); a decoder holds no state between calls."""


def parse_json(raw: bytes) -> Any:
    """Strict JSON: integers within 64 bits, finite numbers only (no NaN/Infinity). Bytes are decoded as
    ``json.loads`` decodes them (UTF-8, -16 or -32 by their first bytes; a UTF-8 byte order mark is dropped)."""
    return _STRICT_JSON.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakehw-agent/1"
    timeout = REQUEST_TIMEOUT_S
    server: _AgentServerMixin  # type: ignore[assignment]
    raw_requestline: bytes  # set by http.server's handle_one_request

    def address_string(self) -> str:
        return "unix" if isinstance(self.client_address, str | bytes) or not self.client_address else \
            str(self.client_address[0])

    def log_message(self, format: str, *args: Any) -> None:
        if log.isEnabledFor(logging.DEBUG):  # http.server logs every request: format it only when it is shown
            log.debug("%s %s", self.address_string(), format % args)

    def setup(self) -> None:
        super().setup()
        self._raw_rfile = self.rfile
        self.authenticated = self.server.token is None

    def finish(self) -> None:
        self.server.deadlines.forget(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def handle_one_request(self) -> None:
        """One request, with the header budget and deadline (a peer that exceeds either is cut off)."""
        self.rfile = _HeaderBudget(self._raw_rfile, MAX_HEADER_BYTES)  # type: ignore[assignment]
        self.server.deadlines.set(self.connection, HEADER_DEADLINE_S)
        try:
            super().handle_one_request()
        except _HeaderTooLarge as exc:  # in the request line (parse_request answers it for headers)
            self.close_connection = True
            self.requestline, self.request_version, self.command = "", "HTTP/1.1", ""
            with contextlib.suppress(OSError):
                self.send_error(431, str(exc))
        except OSError:
            self.close_connection = True
        finally:
            if self.server.deadlines.expired(self.connection):
                self.close_connection = True
            self.server.service.answered()

    def parse_request(self) -> bool:
        """The request line (read by http.server) and the headers, strictly (:func:`parse_request_line`,
        :func:`read_headers`); False when it was answered with an error or the peer was cut off."""
        self.command, self.request_version, self.close_connection = "", "HTTP/1.1", True
        raw = self.raw_requestline
        self.requestline = raw.rstrip(b"\r\n").decode("latin-1")
        try:
            if raw in (b"\r\n", b"\n"):  # RFC 9112 2.2: one empty line before the request line is ignored
                raw = self.rfile.readline()
                self.requestline = raw.rstrip(b"\r\n").decode("latin-1")
            self.command, self.path, version = parse_request_line(raw)
            self.request_version = f"HTTP/1.{version[1]}"
            self.headers = read_headers(self.rfile.readline)  # type: ignore[assignment]
        except _HeaderTooLarge as exc:
            self.send_error(431, str(exc))
            return False
        except _BadHead as exc:
            if not self.server.deadlines.expired(self.connection):
                self.send_error(exc.status, str(exc))
            return False
        if self.server.deadlines.expired(self.connection):  # cut off mid-headers: do not act on a fragment
            return False
        if self.path.startswith("//"):  # as http.server: not a scheme-relative URL
            self.path = "/" + self.path.lstrip("/")
        connection = {t.strip().lower() for t in ",".join(self.headers.get_all("Connection") or []).split(",")}
        self.close_connection = "close" in connection or (version < (1, 1) and "keep-alive" not in connection)
        if version >= (1, 1) and (self.headers.get("Expect") or "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.server.deadlines.set(self.connection, REQUEST_TIMEOUT_S)  # the body, within the same bound
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors found by the HTTP layer (bad request line or headers, headers too large) in the API's shape."""
        self.close_connection = True
        self._send(code, {"error": message or http.client.responses.get(code, "error"), "detail": explain})

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

    def _send(self, status: int, payload: Any, replayed: bool = False) -> None:
        """The answer in one write: status line, headers (those http.server would send) and the JSON body."""
        data = (json.dumps(payload, sort_keys=True) + "\n").encode()
        self.server.deadlines.set(self.connection, REQUEST_TIMEOUT_S)  # a peer that does not read is cut off
        self.log_request(status, len(data))
        reason = self.responses[status][0] if status in self.responses else ""
        head = (f"HTTP/1.1 {status} {reason}\r\nServer: {self.version_string()}\r\nDate: {_http_date()}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                + ("Idempotent-Replayed: true\r\n" if replayed else "")
                + ("Connection: close\r\n" if self.close_connection else "") + "\r\n")
        self.wfile.write(head.encode("latin-1") + data)
        self.server.deadlines.set(self.connection, None)

    def _authorized(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return False
        if not self.authenticated:
            self.authenticated = True
            self.server.authenticated(self.request)
        return True

    def _body(self, method: str) -> Any:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise AgentError(411 if not self.headers.get("Content-Length") else 400,
                             "send the body with a Content-Length (chunked bodies are not accepted)")
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) > 1:
            self.close_connection = True
            raise AgentError(400, f"{len(lengths)} Content-Length headers; send one")
        if not lengths:
            if method in ("POST", "PUT", "PATCH"):
                self.close_connection = True
                raise AgentError(411, f"{method} needs a Content-Length (use 0 and no body for an empty one)")
            return None
        raw_length = lengths[0].strip()
        if not raw_length.isascii() or not raw_length.isdigit() or len(raw_length) > 12:
            self.close_connection = True
            raise AgentError(400, f"bad Content-Length {raw_length[:20]!r}")
        length = int(raw_length)
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
            return parse_json(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise AgentError(400, f"malformed JSON body: {exc}") from None

    def _route(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        allowed = []
        for route_method, pattern, handler in ROUTES:
            match = pattern.match(path)
            if match is None:
                continue
            allowed.append(route_method)
            if route_method == method:
                return handler, match.groupdict()
        if allowed:
            raise AgentError(405, f"{method} is not allowed on {path} (allowed: {', '.join(allowed)})")
        raise AgentError(404, f"no such endpoint {path} (see the routes in GET /v1/health's docs)")

    def _dispatch(self, method: str) -> None:
        try:
            if not self._authorized():
                self.close_connection = True
                raise AgentError(401, "missing or wrong bearer token")
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            handler, params = self._route(method, url.path)
            body = self._body(method) if method in MUTATING else None
            self.server.deadlines.set(self.connection, None)  # the request is in: handlers may wait (events)
            if method in MUTATING:
                self.server.service.check_writable()  # every kind of change is refused (507) while the disk is full
            keys = (self.headers.get_all("Idempotency-Key") or []) if method in MUTATING else []
            if len(keys) > 1:
                raise AgentError(400, "more than one Idempotency-Key header")
            if not keys:
                self._send(*handler(self.server.service, params, query, body))
                return
            self._idempotent(check_key(keys[0].strip()), fingerprint(method, url.path, body), handler, params,
                             query, body)
        except IdempotencyError as exc:
            self._send(exc.status, {"error": exc.message, "detail": None})
        except AgentError as exc:
            self._send(exc.status, {"error": exc.message, "detail": exc.detail})
        except JournalWriteError as exc:
            self._send(507, {"error": f"not applied: {exc}", "detail": None})
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        except Exception as exc:  # never let a bug take the agent down
            log.exception("internal error serving %s %s", method, self.path)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._send(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})

    def _idempotent(self, key: str, fp: str, handler: Handler, params: dict[str, str], query: dict[str, str],
                    body: Any) -> None:
        """Run a request that carries an Idempotency-Key: the stored answer if it ran before, else run it once."""
        cache = self.server.service.idempotency
        answer = cache.begin(key, fp)
        if answer is not None:
            self._send(answer.status, answer.payload, replayed=True)
            return
        status, payload = None, None
        try:
            status, payload = handler(self.server.service, {**params, "idempotency-key": key,
                                                            "idempotency-fingerprint": fp}, query, body)
        finally:
            cache.end(key, status, payload)
        self._send(status, payload)


class _AgentServerMixin:
    """What both servers add to socketserver: the service, the token, deadlines and connection limits."""

    service: AgentService
    token: str | None
    deadlines: Deadlines

    def _setup_limits(self) -> None:
        self.deadlines = Deadlines()
        self._count_lock = threading.Lock()
        self._open = 0
        self._unauthenticated = 0
        self._authenticated: set[Any] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._count_lock:
            refuse = self._open >= MAX_CONNECTIONS or (self.token is not None
                                                       and self._unauthenticated >= MAX_UNAUTHENTICATED)
            if not refuse:
                self._open += 1
                self._unauthenticated += self.token is not None
        if refuse:
            _turn_away(request)
            return
        super().process_request(request, client_address)  # type: ignore[misc]

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            with self._count_lock:
                self._open -= 1
                if self.token is not None and request not in self._authenticated:
                    self._unauthenticated -= 1
                self._authenticated.discard(request)

    def authenticated(self, request: Any) -> None:
        """The connection ``request`` showed the token: it no longer counts against the pre-auth limit."""
        with self._count_lock:
            if request not in self._authenticated:
                self._authenticated.add(request)
                self._unauthenticated -= 1

    def close_limits(self) -> None:
        self.deadlines.close()


def _turn_away(request: socket.socket) -> None:
    """Answer 503 to a connection over the limits, without waiting for it, and close it."""
    with contextlib.suppress(OSError):
        request.setblocking(False)
        body = b'{"error": "too many connections; retry shortly"}\n'
        request.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     b"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    with contextlib.suppress(OSError):
        request.close()


def listen_backlog(nodes: int) -> int:
    """A backlog that queues a burst of clients for every node served (bounded by the kernel's somaxconn)."""
    try:
        with open("/proc/sys/net/core/somaxconn") as fh:
            limit = int(fh.read())
    except (OSError, ValueError):
        limit = 4096
    return max(128, min(limit, 64 * nodes))


class UnixAgentServer(_AgentServerMixin, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The control API on a unix socket created with mode 0600."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path: Path, service: AgentService):
        self.service = service
        self.token = None
        self.socket_path = path
        self.request_queue_size = listen_backlog(len(service.node_names))
        self._setup_limits()
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
        self.close_limits()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()


class TcpAgentServer(_AgentServerMixin, ThreadingHTTPServer):
    """The control API on loopback TCP; every request needs ``Authorization: Bearer <token>``."""

    daemon_threads = True

    def __init__(self, host: str, port: int, token: str, service: AgentService):
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError(f"the TCP control API listens on loopback only, not {host}")
        if len(token) < 16:
            raise ValueError("the bearer token must be at least 16 characters")
        self.service = service
        self.token = token
        self.request_queue_size = listen_backlog(len(service.node_names))
        self._setup_limits()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.address_family = family
        super().__init__((host, port), _RequestHandler)

    def server_close(self) -> None:
        super().server_close()
        self.close_limits()


def serve(servers: list[socketserver.BaseServer], stop: threading.Event) -> None:
    """Serve on every server until ``stop`` is set."""
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True) for s in servers]
    for t in threads:
        t.start()
    stop.wait()
    for s in servers:
        s.shutdown()
        s.server_close()
