"""A small client for the agent's control API (unix socket or loopback TCP with a token).

:class:`AgentClient` retries what is safe to retry, with exponential backoff and jitter (bounded: a handful of
attempts within a few seconds): a connection the agent did not accept (its queue was full: ``EAGAIN``), an answer
503 (too many connections) or 409 for a request still running under the same key, and a connection that broke
before the answer. A timeout is not retried (the agent is slow; asking again would only wait longer). Every
mutating request carries a fresh ``Idempotency-Key``, reused by its retries, so a retry after a lost answer never
applies a change twice.

Each thread keeps its connection open between requests (HTTP/1.1 keep-alive): a new connection costs the agent an
accept and a thread (measured: 0.25 ms of agent CPU per health request with a connection each, 0.07 ms on a kept
one). A kept connection the agent closed meanwhile (idle deadline, restart) is replaced by a fresh one and the
request sent again, whatever ``retries`` says: nothing reached the agent on the closed one, and a change carries
its Idempotency-Key anyway.
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import random
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fakehw.agent.mig_client import MigClientMixin
from fakehw.agent.platform_client import PlatformClientMixin

RETRY_ERRNOS = frozenset({errno.EAGAIN, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT})
RETRY_STATUSES = frozenset({409, 503})
BROKEN = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, http.client.RemoteDisconnected,
          http.client.IncompleteRead)
"""A connection that broke before the answer came (not one that timed out)."""
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class _Retry(Exception):
    """An attempt that may be repeated (see the module docstring)."""

    def __init__(self, error: AgentRequestError):
        super().__init__(str(error))
        self.error = error


class AgentRequestError(Exception):
    """The agent answered with an error status (or could not be reached)."""

    def __init__(self, status: int, message: str, detail: Any = None):
        super().__init__(f"{message} (HTTP {status})" if status else message)
        self.status = status
        self.message = message
        self.detail = detail


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class AgentApi(PlatformClientMixin, MigClientMixin, ABC):
    """The agent's verbs over some transport. Subclasses implement :meth:`request`: HTTP here
    (:class:`AgentClient`); backends may add others (``kubectl exec`` into an agent pod)."""

    timeout: float = 30.0

    @abstractmethod
    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        """Send one request; return the decoded JSON answer or raise :class:`AgentRequestError`."""

    # Verbs ----------------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")  # type: ignore[no-any-return]

    def kinds(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/kinds")  # type: ignore[no-any-return]

    def nodes(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/nodes")  # type: ignore[no-any-return]

    def render(self, nodes: list[str], timeout: float | None = None) -> dict[str, str]:
        """Make these nodes' files (an agent started with ``--files on-demand`` makes none by itself): node name
        -> its directory."""
        answer = self.request("POST", "/v1/render", {"nodes": nodes}, timeout=timeout)
        return answer["rendered"]  # type: ignore[no-any-return]

    def state(self, node: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/nodes/{node}")  # type: ignore[no-any-return]

    def device(self, node: str, device: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/nodes/{node}/devices/{device}")  # type: ignore[no-any-return]

    def faults(self, node: str | None = None) -> list[dict[str, Any]]:
        query = f"?{urlencode({'node': node})}" if node else ""
        return self.request("GET", f"/v1/faults{query}")  # type: ignore[no-any-return]

    def inject(self, node: str, kind: str, device: str, **params: Any) -> dict[str, Any]:
        body = {"node": node, "kind": kind, "device": device, **params}
        return self.request("POST", "/v1/faults", body)  # type: ignore[no-any-return]

    def heal(self, fault_id: str | None = None, node: str | None = None, device: str | None = None,
             kind: str | None = None) -> list[dict[str, Any]]:
        if fault_id is not None and node is None and device is None and kind is None:
            return self.request("DELETE", f"/v1/faults/{fault_id}")["healed"]  # type: ignore[no-any-return]
        body = {k: v for k, v in {"id": fault_id, "node": node, "device": device, "kind": kind}.items() if v}
        return self.request("POST", "/v1/heal", body)["healed"]  # type: ignore[no-any-return]

    def events(self, since: int = 0, node: str | None = None, wait: float = 0.0) -> dict[str, Any]:
        query: dict[str, Any] = {"since": since, "wait": wait}
        if node:
            query["node"] = node
        return self.request("GET", f"/v1/events?{urlencode(query)}", timeout=self.timeout + wait)  # type: ignore[no-any-return]


class AgentClient(AgentApi):
    """HTTP to the agent: ``AgentClient(socket_path)`` or ``AgentClient(url="http://127.0.0.1:7077", token=...)``.

    ``retries``: how many times a request is repeated when that is safe (0: never; for polling loops)."""

    def __init__(self, socket_path: Path | str | None = None, url: str | None = None, token: str | None = None,
                 timeout: float = 30.0, retries: int = 6):
        if (socket_path is None) == (url is None):
            raise ValueError("give either socket_path or url")
        self.socket_path = str(socket_path) if socket_path is not None else None
        self.url = url
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self._kept = threading.local()
        """Per thread: the connection kept open after its last answer (``conn``), if any."""

    def close(self) -> None:
        """Close the calling thread's kept connection (others close when their thread's client goes away)."""
        conn = getattr(self._kept, "conn", None)
        self._kept.conn = None
        if conn is not None and getattr(self._kept, "pid", None) == os.getpid():
            conn.close()

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixConnection(self.socket_path, timeout)
        assert self.url is not None
        rest = self.url.split("://", 1)[-1].rstrip("/")
        host, _, port = rest.rpartition(":")
        return http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if method in MUTATING:
            headers["Idempotency-Key"] = uuid.uuid4().hex
        delay = 0.02
        for attempt in range(self.retries + 1):
            try:
                return self._attempt(method, path, data, headers, timeout or self.timeout)
            except _Retry as retry:
                if attempt == self.retries:
                    raise retry.error from None
                time.sleep(random.uniform(0, delay))  # full jitter, so retrying clients spread out
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def _attempt(self, method: str, path: str, data: bytes | None, headers: dict[str, str], timeout: float) -> Any:
        kept: http.client.HTTPConnection | None = getattr(self._kept, "conn", None)
        self._kept.conn = None
        if kept is not None and getattr(self._kept, "pid", None) != os.getpid():
            kept = None  # inherited through fork: the parent's socket, not ours to use (nor to close)
        if kept is not None:
            try:
                resp, raw = self._exchange(kept, method, path, data, headers, timeout)
            except _Retry:
                kept = None  # closed by the agent while idle: ask again on a fresh connection
            except BaseException:
                kept.close()
                raise
        if kept is None:
            conn = self._connection(timeout)
            where = self.socket_path or self.url
            try:
                conn.connect()
            except OSError as exc:
                conn.close()
                error = AgentRequestError(0, f"cannot reach the agent at {where}: {exc}")
                if exc.errno in RETRY_ERRNOS:
                    raise _Retry(error) from None
                raise error from None
            resp, raw = self._exchange(conn, method, path, data, headers, timeout)
        return self._answer(resp, raw)

    def _exchange(self, conn: http.client.HTTPConnection, method: str, path: str, data: bytes | None,
                  headers: dict[str, str], timeout: float) -> tuple[http.client.HTTPResponse, bytes]:
        """One request on ``conn``; the connection is kept for the thread's next request when the agent keeps it."""
        where = self.socket_path or self.url
        try:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            error = AgentRequestError(0, f"lost the connection to the agent at {where}: {exc}")
            if isinstance(exc, BROKEN):
                raise _Retry(error) from None  # safe: GETs change nothing, changes carry an Idempotency-Key
            raise error from None  # a timeout: the agent is slow, asking again would only wait longer
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        else:
            self._kept.conn, self._kept.pid = conn, os.getpid()
        return resp, raw

    def _answer(self, resp: http.client.HTTPResponse, raw: bytes) -> Any:
        try:
            payload = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            raise AgentRequestError(resp.status, f"agent sent a non-JSON answer: {raw[:200]!r}") from None
        if resp.status >= 400:
            message = payload.get("error", resp.reason) if isinstance(payload, dict) else resp.reason
            detail = payload.get("detail") if isinstance(payload, dict) else None
            error = AgentRequestError(resp.status, message, detail)
            if resp.status in RETRY_STATUSES and (resp.status == 503 or "still running" in str(message)):
                raise _Retry(error)
            raise error
        return payload
