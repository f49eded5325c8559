"""A small Kubernetes API client: a kubeconfig's cluster and credentials, JSON over HTTP(S), thread-safe.

Registering ten thousand KWOK nodes is tens of thousands of requests; ``kubectl apply`` (a process per batch,
client-side diffs) is the slow way and gives no per-object errors. This client speaks the REST API directly
(server-side apply, delete-collection by label selector, discovery, SelfSubjectAccessReview) with one keep-alive
connection per worker thread, and turns every failure into a :class:`KubeApiError` that says which request failed
and why (unreachable server, refused credentials, RBAC, a missing API group) instead of a traceback.

Credentials supported from the kubeconfig's current context (or the one named): bearer ``token``/``tokenFile``,
client certificate and key (files or ``-data``), basic auth, the cluster CA (file or ``-data``) or
``insecure-skip-tls-verify``, and ``exec`` credential plugins (client.authentication.k8s.io ExecCredential:
token or client certificate), as cloud clusters use.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import subprocess
import tempfile
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

APPLY_PATCH = "application/apply-patch+yaml"
"""Server-side apply: create or update in one request; JSON is YAML, so the body is JSON."""


UNREACHABLE = 0
"""KubeApiError.status when no HTTP answer came (connection refused, DNS, TLS, timeout)."""


class KubeApiError(RuntimeError):
    """A request to the cluster failed; the message names the request and what the server (or network) said."""

    def __init__(self, message: str, status: int = 0, reason: str = ""):
        super().__init__(message)
        self.status = status
        self.reason = reason


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used: the message names the file, the entry and what is wrong."""


@dataclass(frozen=True)
class Credentials:
    """Where and how to reach one cluster (what a kubeconfig context resolves to)."""

    server: str
    ca_pem: bytes | None = None
    insecure: bool = False
    token: str | None = None
    basic: tuple[str, str] | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    tls_server_name: str | None = None


def _named(config: Mapping[str, Any], kind: str, name: str, path: Path) -> Mapping[str, Any]:
    for entry in config.get(f"{kind}s") or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            body = entry.get(kind)
            if not isinstance(body, Mapping):
                raise KubeconfigError(f"{path}: {kind} {name!r} has no '{kind}' mapping")
            return body
    raise KubeconfigError(f"{path}: no {kind} named {name!r} (the context refers to it)")


def _material(entry: Mapping[str, Any], key: str, base: Path, path: Path) -> bytes | None:
    """``key-data`` (base64) or ``key`` (a file, relative to the kubeconfig's directory)."""
    data = entry.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except ValueError:
            raise KubeconfigError(f"{path}: {key}-data is not base64") from None
    file = entry.get(key)
    if file:
        target = base / str(file)
        try:
            return target.read_bytes()
        except OSError as exc:
            raise KubeconfigError(f"{path}: {key} {target}: {exc.strerror}") from None
    return None


def _exec_credentials(spec: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """Run a kubeconfig ``exec`` credential plugin and return its ExecCredential ``status``."""
    command = spec.get("command")
    if not command:
        raise KubeconfigError(f"{path}: user exec has no command")
    env = dict(os.environ)
    env.update({str(e["name"]): str(e["value"]) for e in spec.get("env") or [] if isinstance(e, Mapping)})
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": spec.get("apiVersion"), "kind": "ExecCredential",
                                              "spec": {"interactive": False}})
    try:
        proc = subprocess.run([str(command), *[str(a) for a in spec.get("args") or []]], env=env,
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KubeconfigError(f"{path}: exec credential plugin {command}: {exc}") from None
    if proc.returncode != 0:
        raise KubeconfigError(f"{path}: exec credential plugin {command} exited {proc.returncode}: "
                              f"{proc.stderr.strip()[:300]}")
    try:
        status = json.loads(proc.stdout)["status"]
    except (ValueError, KeyError, TypeError):
        raise KubeconfigError(f"{path}: exec credential plugin {command} printed no ExecCredential status") from None
    if not isinstance(status, dict):
        raise KubeconfigError(f"{path}: exec credential plugin {command}: status is not an object")
    return status


def load_kubeconfig(path: Path, context: str | None = None) -> Credentials:
    """The server and credentials of ``context`` (default: the current context) of the kubeconfig at ``path``."""
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise KubeconfigError(f"{path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"{path}: not YAML: {exc}") from None
    if not isinstance(config, Mapping):
        raise KubeconfigError(f"{path}: not a kubeconfig (no mapping at the top)")
    name = context or config.get("current-context")
    if not name:
        raise KubeconfigError(f"{path}: no current-context; name one")
    ctx = _named(config, "context", str(name), path)
    cluster = _named(config, "cluster", str(ctx.get("cluster")), path)
    user: Mapping[str, Any] = _named(config, "user", str(ctx.get("user")), path) if ctx.get("user") else {}
    server = str(cluster.get("server") or "")
    if urllib.parse.urlsplit(server).scheme not in ("http", "https"):
        raise KubeconfigError(f"{path}: cluster {ctx.get('cluster')!r} has no http(s) server URL ({server!r})")
    base = path.parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        try:
            token = (base / str(user["tokenFile"])).read_text().strip()
        except OSError as exc:
            raise KubeconfigError(f"{path}: tokenFile {user['tokenFile']}: {exc.strerror}") from None
    cert = _material(user, "client-certificate", base, path)
    key = _material(user, "client-key", base, path)
    if isinstance(user.get("exec"), Mapping):
        status = _exec_credentials(user["exec"], path)
        token = status.get("token") or token
        if status.get("clientCertificateData"):
            cert = str(status["clientCertificateData"]).encode()
            key = str(status.get("clientKeyData", "")).encode()
    if user.get("auth-provider"):
        raise KubeconfigError(f"{path}: user {ctx.get('user')!r} uses an auth-provider plugin, which is not "
                              "supported; use a token, a client certificate or an exec plugin")
    if bool(cert) != bool(key):
        raise KubeconfigError(f"{path}: user {ctx.get('user')!r} has a client certificate without a key or a key "
                              "without a certificate")
    basic = (str(user["username"]), str(user.get("password", ""))) if user.get("username") else None
    return Credentials(server=server.rstrip("/"), ca_pem=_material(cluster, "certificate-authority", base, path),
                       insecure=bool(cluster.get("insecure-skip-tls-verify")), token=str(token) if token else None,
                       basic=basic, cert_pem=cert, key_pem=key, tls_server_name=cluster.get("tls-server-name"))


def _ssl_context(creds: Credentials) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if creds.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif creds.ca_pem:
        ctx.load_verify_locations(cadata=creds.ca_pem.decode(errors="replace"))
    if creds.cert_pem and creds.key_pem:
        # ssl can only load a client certificate from files: a private directory, removed at once.
        with tempfile.TemporaryDirectory(prefix="fakehw-kube-") as tmp:
            cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            for p, data in ((cert, creds.cert_pem), (key, creds.key_pem)):
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            ctx.load_cert_chain(cert, key)
    return ctx


@dataclass
class Response:
    status: int
    body: Any


@dataclass
class KubeApi:
    """One cluster's API; :meth:`request` is safe to call from many threads (a connection per thread)."""

    creds: Credentials
    timeout: float = 30.0
    user_agent: str = "fakehw-testbed"
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _ssl: ssl.SSLContext | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        url = urllib.parse.urlsplit(self.creds.server)
        self._scheme, self._host, self._port = url.scheme, url.hostname or "", url.port
        self._prefix = url.path.rstrip("/")
        if self._scheme == "https":
            try:
                self._ssl = _ssl_context(self.creds)
            except (ssl.SSLError, ValueError) as exc:
                raise KubeconfigError(f"the kubeconfig's TLS material cannot be used: {exc}") from None
        self._headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if self.creds.token:
            self._headers["Authorization"] = f"Bearer {self.creds.token}"
        elif self.creds.basic:
            raw = f"{self.creds.basic[0]}:{self.creds.basic[1]}".encode()
            self._headers["Authorization"] = f"Basic {base64.b64encode(raw).decode()}"

    @classmethod
    def from_kubeconfig(cls, path: Path, context: str | None = None, timeout: float = 30.0) -> KubeApi:
        return cls(load_kubeconfig(path, context), timeout=timeout)

    def _conn(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._scheme == "https":
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout, context=self._ssl)
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: Mapping[str, str] | None = None) -> Response:
        """One request; a reply of any status is returned, a connection failure raises KubeApiError."""
        url = self._prefix + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):  # a kept-alive connection the server closed is retried once on a fresh one
            conn = self._conn()
            try:
                conn.request(method, url, body=data, headers=headers)
                reply = conn.getresponse()
                raw = reply.read()
                break
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                self.close()
                if attempt == 2 or isinstance(exc, (ssl.SSLCertVerificationError, TimeoutError)):
                    raise KubeApiError(f"cannot reach the Kubernetes API at {self.creds.server} ({method} {path}): "
                                       f"{exc or type(exc).__name__}", UNREACHABLE) from None
        try:
            parsed: Any = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return Response(reply.status, parsed)

    def checked(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: Mapping[str, str] | None = None, what: str = "") -> Any:
        """Like :meth:`request`, but any status >= 300 raises a KubeApiError naming ``what`` and the reason."""
        reply = self.request(method, path, body, content_type, query)
        if reply.status >= 300:
            raise api_error(reply, what or f"{method} {path}")
        return reply.body

    def apply(self, path: str, obj: Mapping[str, Any], field_manager: str, what: str = "") -> Any:
        """Server-side apply ``obj`` at ``path`` (create or update; our fields win over other managers')."""
        return self.checked("PATCH", path, obj, APPLY_PATCH, {"fieldManager": field_manager, "force": "true"},
                            what or f"apply {obj.get('kind')} {obj.get('metadata', {}).get('name')}")

    def served(self, group_version: str) -> set[str] | None:
        """The resources a group/version serves (``resource.k8s.io/v1``), or None if the cluster has no such API."""
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        reply = self.request("GET", path)
        if reply.status == 404:
            return None
        if reply.status >= 300:
            raise api_error(reply, f"discovery of {group_version}")
        return {str(r.get("name")) for r in (reply.body or {}).get("resources", []) if isinstance(r, dict)}

    def can(self, verb: str, group: str, resource: str, subresource: str = "") -> tuple[bool, str]:
        """Whether this kubeconfig's user may ``verb`` ``resource`` (a SelfSubjectAccessReview), and why not."""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                  "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                                  "subresource": subresource}}}
        body = self.checked("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review,
                            what="SelfSubjectAccessReview")
        status = (body or {}).get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or "")


def api_error(reply: Response, what: str) -> KubeApiError:
    """A KubeApiError for a refused request, with the Status message and what usually fixes it."""
    body = reply.body if isinstance(reply.body, dict) else {}
    message = str(body.get("message") or reply.body or "")[:400]
    reason = str(body.get("reason") or "")
    hint = {401: " (the kubeconfig's credentials were not accepted: expired token or certificate?)",
            403: " (RBAC: the kubeconfig's user is not allowed to; docs/kubernetes.md lists the ClusterRole it "
                 "needs)",
            404: " (the cluster does not serve this API or object)",
            422: " (the object was refused as invalid)"}.get(reply.status, "")
    return KubeApiError(f"{what}: HTTP {reply.status} {reason}: {message}{hint}", reply.status, reason)
