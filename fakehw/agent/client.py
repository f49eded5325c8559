"""A small client for the agent's control API (unix socket or loopback TCP with a token)."""

from __future__ import annotations

import http.client
import json
import socket
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fakehw.agent.mig_client import MigClientMixin
from fakehw.agent.platform_client import PlatformClientMixin


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
    """HTTP to the agent: ``AgentClient(socket_path)`` or ``AgentClient(url="http://127.0.0.1:7077", token=...)``."""

    def __init__(self, socket_path: Path | str | None = None, url: str | None = None, token: str | None = None,
                 timeout: float = 30.0):
        if (socket_path is None) == (url is None):
            raise ValueError("give either socket_path or url")
        self.socket_path = str(socket_path) if socket_path is not None else None
        self.url = url
        self.token = token
        self.timeout = timeout

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixConnection(self.socket_path, timeout)
        assert self.url is not None
        rest = self.url.split("://", 1)[-1].rstrip("/")
        host, _, port = rest.rpartition(":")
        return http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        conn = self._connection(timeout or self.timeout)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            where = self.socket_path or self.url
            raise AgentRequestError(0, f"cannot reach the agent at {where}: {exc}") from None
        finally:
            conn.close()
        try:
            payload = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            raise AgentRequestError(resp.status, f"agent sent a non-JSON answer: {raw[:200]!r}") from None
        if resp.status >= 400:
            message = payload.get("error", resp.reason) if isinstance(payload, dict) else resp.reason
            detail = payload.get("detail") if isinstance(payload, dict) else None
            raise AgentRequestError(resp.status, message, detail)
        return payload
