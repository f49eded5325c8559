"""A fake Kubernetes API server at the HTTP boundary: records every request and holds objects to the published schemas.

It serves what KWOK registration uses (discovery, SelfSubjectAccessReview, server-side apply of Nodes and their
status, NodeResourceTopologies and ResourceSlices, list and delete-collection by label selector) and refuses an
object the real API server would refuse, with a 422 naming every violation (also kept in ``invalid`` so a test
can assert there were none). The rules are the API's own, as published (not our renderers'):

- names: Nodes and most objects are DNS-1123 subdomains (253); device names DNS-1123 labels (63);
- labels and annotation keys are qualified names (optional DNS-subdomain prefix of 253, name of 63
  ``[A-Za-z0-9][-A-Za-z0-9_.]*``); label values at most 63 of the same alphabet (or empty);
- quantities match resource.Quantity's grammar; extended resources (domain-prefixed) must be whole numbers;
- taint effects are NoSchedule, PreferNoSchedule or NoExecute;
- NodeResourceTopology v1alpha2 (noderesourcetopology-api CRD): ``zones`` required, a zone needs ``name`` and
  ``type``, costs ``name`` and an integer ``value``, resources ``name``, ``capacity``, ``allocatable``,
  ``available`` (quantities);
- ResourceSlice resource.k8s.io/v1: ``driver`` a DNS subdomain of at most 63, ``pool`` with ``name``,
  ``generation`` >= 0 and ``resourceSliceCount`` >= 1, exactly one of nodeName/nodeSelector/allNodes/
  perDeviceNodeSelection, at most 128 devices with unique DNS-label names, attributes and capacities together
  at most 32 per device, attribute names C identifiers of at most 32 (optionally domain-qualified), each value
  exactly one of int/bool/string/version, strings at most 64, versions strict semver 2.0.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$")
C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
                    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")
TAINT_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}
APPLY = "application/apply-patch+yaml"


def _subdomain(value: Any, limit: int = 253) -> bool:
    return isinstance(value, str) and 0 < len(value) <= limit and bool(SUBDOMAIN.match(value))


def _qualified(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    return (not prefix or _subdomain(prefix)) and len(name) <= 63 and bool(NAME_PART.match(name))


def check_metadata(meta: Any, errors: list[str]) -> None:
    if not isinstance(meta, dict):
        errors.append("metadata: required")
        return
    if not _subdomain(meta.get("name")):
        errors.append(f"metadata.name {meta.get('name')!r}: not a DNS-1123 subdomain")
    for key, value in (meta.get("labels") or {}).items():
        if not _qualified(key):
            errors.append(f"metadata.labels: key {key!r} is not a qualified name")
        if not isinstance(value, str) or len(value) > 63 or (value and not NAME_PART.match(value)):
            errors.append(f"metadata.labels[{key}]: value {value!r} is not a valid label value")
    size = 0
    for key, value in (meta.get("annotations") or {}).items():
        if not _qualified(key):
            errors.append(f"metadata.annotations: key {key!r} is not a qualified name")
        if not isinstance(value, str):
            errors.append(f"metadata.annotations[{key}]: not a string")
        size += len(key) + len(str(value))
    if size > 256 * 1024:
        errors.append(f"metadata.annotations: {size} bytes, more than 256 KiB")


def _quantity(where: str, value: Any, errors: list[str], whole: bool = False) -> None:
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not QUANTITY.match(text):
        errors.append(f"{where}: {value!r} is not a quantity")
    elif whole and not re.fullmatch(r"[0-9]+", text):
        errors.append(f"{where}: {value!r}: extended resources must be whole numbers")


def _resources(where: str, resources: Any, errors: list[str]) -> None:
    if not isinstance(resources, dict):
        errors.append(f"{where}: not a map")
        return
    for name, value in resources.items():
        if not _qualified(name):
            errors.append(f"{where}: resource name {name!r} is not a qualified name")
        extended = "/" in name and not name.split("/")[0].endswith("kubernetes.io")
        _quantity(f"{where}[{name}]", value, errors, whole=extended)


def _header(obj: dict[str, Any], api: str, kind: str, errors: list[str]) -> None:
    """apiVersion, kind and metadata of any object."""
    if obj.get("apiVersion") != api or obj.get("kind") != kind:
        errors.append(f"apiVersion/kind: must be {api} {kind}")
    check_metadata(obj.get("metadata"), errors)


def check_node(obj: dict[str, Any], errors: list[str], status_only: bool = False) -> None:
    _header(obj, "v1", "Node", errors)
    if not status_only:
        for i, taint in enumerate((obj.get("spec") or {}).get("taints") or []):
            if not _qualified(taint.get("key")):
                errors.append(f"spec.taints[{i}].key: not a qualified name")
            if taint.get("effect") not in TAINT_EFFECTS:
                errors.append(f"spec.taints[{i}].effect: {taint.get('effect')!r}")
    status = obj.get("status") or {}
    for key in ("capacity", "allocatable"):
        if key in status:
            _resources(f"status.{key}", status[key], errors)


def check_nrt(obj: dict[str, Any], errors: list[str]) -> None:
    _header(obj, "topology.node.k8s.io/v1alpha2", "NodeResourceTopology", errors)
    zones = obj.get("zones")
    if not isinstance(zones, list):
        errors.append("zones: required")
        return
    for i, zone in enumerate(zones):
        for key in ("name", "type"):
            if not isinstance(zone.get(key), str) or not zone.get(key):
                errors.append(f"zones[{i}].{key}: required string")
        for j, cost in enumerate(zone.get("costs") or []):
            if not isinstance(cost.get("name"), str) or not isinstance(cost.get("value"), int):
                errors.append(f"zones[{i}].costs[{j}]: needs name and an integer value")
        for j, res in enumerate(zone.get("resources") or []):
            if not isinstance(res.get("name"), str):
                errors.append(f"zones[{i}].resources[{j}].name: required")
            for key in ("capacity", "allocatable", "available"):
                if key not in res:
                    errors.append(f"zones[{i}].resources[{j}].{key}: required")
                else:
                    _quantity(f"zones[{i}].resources[{j}].{key}", res[key], errors)
        for j, attr in enumerate(zone.get("attributes") or []):
            if not isinstance(attr.get("name"), str) or not isinstance(attr.get("value"), str):
                errors.append(f"zones[{i}].attributes[{j}]: needs name and value strings")


def _attribute_name(name: Any) -> bool:
    if not isinstance(name, str):
        return False
    domain, _, ident = name.rpartition("/")
    return (not domain or _subdomain(domain, 63)) and len(ident) <= 32 and bool(C_IDENT.match(ident))


def _device(where: str, dev: Any, errors: list[str]) -> None:
    if not isinstance(dev, dict):
        errors.append(f"{where}: not an object")
        return
    if "basic" in dev:
        errors.append(f"{where}.basic: resource.k8s.io/v1 has no 'basic' (that was v1beta1)")
    name = dev.get("name")
    if not isinstance(name, str) or len(name) > 63 or not LABEL.match(name):
        errors.append(f"{where}.name {name!r}: not a DNS-1123 label")
    attrs, caps = dev.get("attributes") or {}, dev.get("capacity") or {}
    if len(attrs) + len(caps) > 32:
        errors.append(f"{where}: {len(attrs) + len(caps)} attributes and capacities, more than 32")
    for key, value in attrs.items():
        if not _attribute_name(key):
            errors.append(f"{where}.attributes: {key!r} is not a C identifier of <= 32 (optionally qualified)")
        kinds = [k for k in ("int", "bool", "string", "version") if k in (value or {})]
        if len(kinds) != 1 or len(value) != 1:
            errors.append(f"{where}.attributes[{key}]: exactly one of int, bool, string, version")
            continue
        v = value[kinds[0]]
        if kinds[0] == "int" and (not isinstance(v, int) or isinstance(v, bool)):
            errors.append(f"{where}.attributes[{key}].int: {v!r}")
        elif kinds[0] == "bool" and not isinstance(v, bool):
            errors.append(f"{where}.attributes[{key}].bool: {v!r}")
        elif kinds[0] == "string" and (not isinstance(v, str) or len(v) > 64):
            errors.append(f"{where}.attributes[{key}].string: not a string of at most 64")
        elif kinds[0] == "version" and (not isinstance(v, str) or len(v) > 64 or not SEMVER.match(v)):
            errors.append(f"{where}.attributes[{key}].version: {v!r} is not semver 2.0")
    for key, value in caps.items():
        if not _attribute_name(key):
            errors.append(f"{where}.capacity: {key!r} is not a valid name")
        if not isinstance(value, dict) or "value" not in value:
            errors.append(f"{where}.capacity[{key}].value: required")
        else:
            _quantity(f"{where}.capacity[{key}].value", value["value"], errors)


def check_slice(obj: dict[str, Any], errors: list[str]) -> None:
    _header(obj, "resource.k8s.io/v1", "ResourceSlice", errors)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        errors.append("spec: required")
        return
    if not _subdomain(spec.get("driver"), 63):
        errors.append(f"spec.driver {spec.get('driver')!r}: not a DNS subdomain of <= 63")
    pool = spec.get("pool") or {}
    pname = pool.get("name")
    if not isinstance(pname, str) or len(pname) > 253 or not all(_subdomain(p) for p in pname.split("/")):
        errors.append(f"spec.pool.name {pname!r}: invalid")
    if not isinstance(pool.get("generation"), int) or pool["generation"] < 0:
        errors.append("spec.pool.generation: required, >= 0")
    if not isinstance(pool.get("resourceSliceCount"), int) or pool["resourceSliceCount"] < 1:
        errors.append("spec.pool.resourceSliceCount: required, >= 1")
    chosen = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(chosen) != 1:
        errors.append(f"spec: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection ({chosen})")
    if spec.get("nodeName") and not _subdomain(spec["nodeName"]):
        errors.append("spec.nodeName: not a DNS subdomain")
    devices = spec.get("devices") or []
    if len(devices) > 128:
        errors.append(f"spec.devices: {len(devices)}, more than 128")
    names = [d.get("name") for d in devices if isinstance(d, dict)]
    if len(set(names)) != len(names):
        errors.append("spec.devices: duplicate names")
    for i, dev in enumerate(devices):
        _device(f"spec.devices[{i}]", dev, errors)


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    authorization: str
    body: Any


@dataclass
class FakeApiServer:
    """State and knobs of the fake; ``url`` once started."""

    token: str | None = "t0ken"
    groups: dict[str, set[str]] = field(default_factory=lambda: {
        "v1": {"nodes", "nodes/status", "pods"},
        "kwok.x-k8s.io/v1alpha1": {"stages", "attaches", "clusterattaches"},
        "topology.node.k8s.io/v1alpha2": {"noderesourcetopologies"},
        "resource.k8s.io/v1": {"resourceslices", "resourceclaims", "deviceclasses"},
    })
    stages: int = 4
    denied: set[tuple[str, str, str]] = field(default_factory=set)
    """(verb, resource, subresource) SelfSubjectAccessReview answers 'no' to."""
    refuse: dict[str, int] = field(default_factory=dict)
    """Path prefix -> HTTP status the server answers writes to it with (an RBAC change mid-run)."""
    store: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    record_bodies: bool = True
    url: str = ""
    inflight: int = 0
    max_inflight: int = 0
    delay_s: float = 0.0
    """Each request takes at least this long (so concurrency shows in ``max_inflight``)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def objects(self, collection: str) -> dict[str, dict[str, Any]]:
        prefix = collection.rstrip("/") + "/"
        return {p[len(prefix):]: o for p, o in self.store.items()
                if p.startswith(prefix) and "/" not in p[len(prefix):]}


def _selected(obj: dict[str, Any], selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message,
            "code": code}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self) -> None:
        fake = self.server.fake
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with fake.lock:
            fake.requests.append(Recorded(self.command, url.path, query, self.headers.get("Content-Type", ""),
                                          self.headers.get("Authorization", ""), body if fake.record_bodies else None))
        if fake.token and self.headers.get("Authorization") != f"Bearer {fake.token}":
            self._send(401, _status(401, "Unauthorized", "Unauthorized"))
            return
        with fake.lock:
            fake.inflight += 1
            fake.max_inflight = max(fake.max_inflight, fake.inflight)
        try:
            if fake.delay_s:
                time.sleep(fake.delay_s)
            code, answer = self._route(fake, self.command, url.path, query, body)
        finally:
            with fake.lock:
                fake.inflight -= 1
        self._send(code, answer)

    do_GET = do_POST = do_PATCH = do_DELETE = _handle

    def _route(self, fake: FakeApiServer, method: str, path: str, query: dict[str, str],
               body: Any) -> tuple[int, Any]:
        gv = "v1" if path.startswith("/api/v1") else "/".join(path.split("/")[2:4])
        if method == "GET" and path in ("/api/v1", f"/apis/{gv}"):
            if gv not in fake.groups:
                return 404, _status(404, "NotFound", "the server could not find the requested resource")
            return 200, {"kind": "APIResourceList", "groupVersion": gv,
                         "resources": [{"name": r} for r in sorted(fake.groups[gv])]}
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
            attrs = body["spec"]["resourceAttributes"]
            denied = (attrs["verb"], attrs["resource"], attrs.get("subresource", "")) in fake.denied
            return 201, {**body, "status": {"allowed": not denied,
                                            **({"reason": "RBAC: no rule allows it"} if denied else {})}}
        base = "/api/v1" if gv == "v1" else f"/apis/{gv}"
        rest = path[len(base) + 1:].split("/")
        if gv not in fake.groups or not rest or rest[0] not in fake.groups[gv]:
            return 404, _status(404, "NotFound", f"the server could not find the requested resource ({path})")
        if method != "GET":
            for prefix, code in fake.refuse.items():
                if path.startswith(prefix):
                    return code, _status(code, "Forbidden", f"{method} {path} is forbidden: RBAC says no")
        collection = f"{base}/{rest[0]}"
        if len(rest) == 1:
            return self._collection(fake, method, collection, rest[0], query)
        return self._object(fake, method, collection, rest, query, body)

    @staticmethod
    def _collection(fake: FakeApiServer, method: str, collection: str, plural: str,
                    query: dict[str, str]) -> tuple[int, Any]:
        with fake.lock:
            if plural == "stages":
                return 200, {"items": [{"metadata": {"name": f"stage-{i}"}} for i in range(fake.stages)]}
            items = [o for o in fake.objects(collection).values() if _selected(o, query.get("labelSelector", ""))]
            if method == "GET":
                if query.get("limit"):
                    items = items[:int(query["limit"])]
                return 200, {"kind": "List", "items": items}
            if method == "DELETE":
                for o in items:
                    del fake.store[f"{collection}/{o['metadata']['name']}"]
                return 200, {"kind": "List", "items": items}
        return 405, _status(405, "MethodNotAllowed", method)

    @staticmethod
    def _object(fake: FakeApiServer, method: str, collection: str, rest: list[str], query: dict[str, str],
                body: Any) -> tuple[int, Any]:
        name, sub = rest[1], (rest[2] if len(rest) > 2 else "")
        key = f"{collection}/{name}"
        if method == "GET":
            with fake.lock:
                obj = fake.store.get(key)
            return (200, obj) if obj else (404, _status(404, "NotFound", f"{name} not found"))
        if method != "PATCH":
            return 405, _status(405, "MethodNotAllowed", method)
        errors: list[str] = []
        if not query.get("fieldManager"):
            errors.append("fieldManager is required for apply patch")
        if not isinstance(body, dict):
            return 400, _status(400, "BadRequest", "no body")
        if body.get("metadata", {}).get("name") != name:
            errors.append(f"metadata.name {body.get('metadata', {}).get('name')!r} does not match the path's {name}")
        plural = rest[0]
        if plural == "nodes":
            check_node(body, errors, status_only=sub == "status")
        elif plural == "noderesourcetopologies":
            check_nrt(body, errors)
        elif plural == "resourceslices":
            check_slice(body, errors)
        if errors:
            with fake.lock:
                fake.invalid += [f"{key}: {e}" for e in errors]
            return 422, _status(422, "Invalid", f"{name} is invalid: " + "; ".join(errors))
        with fake.lock:
            old = fake.store.get(key)
            if sub == "status":
                if old is None:
                    return 404, _status(404, "NotFound", f"nodes {name} not found")
                old["status"] = body["status"]
                return 200, old
            new = json.loads(json.dumps(body))
            if old is not None and plural == "nodes":
                new["status"] = old.get("status", {})  # the main resource ignores status on update
            new["metadata"]["resourceVersion"] = str(len(fake.requests))
            fake.store[key] = new
        return (200 if old else 201), new


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeApiServer):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


@contextmanager
def running(fake: FakeApiServer, tls: ssl.SSLContext | None = None) -> Iterator[FakeApiServer]:
    """Serve ``fake`` on a free port (HTTPS with ``tls``: a server context, client certificates as it requires)."""
    server = _Server(fake)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    fake.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def kubeconfig_text(url: str, token: str | None) -> str:
    user = {"token": token} if token else {}
    return json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                       "clusters": [{"name": "fake", "cluster": {"server": url}}],
                       "users": [{"name": "u", "user": user}],
                       "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}]})


def main() -> None:
    """``python -m tests.kubernetes.fake_apiserver``: serve until killed (bench/bench_kwok.py runs it apart from
    the client, so the two do not share a GIL); prints the URL, keeps no request bodies."""
    fake = FakeApiServer(token=None, record_bodies=False)
    with running(fake):
        print(fake.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
