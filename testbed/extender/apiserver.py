"""The cluster's API for extenders: a store of Nodes and Pods and a minimal Kubernetes API over it.

kube-scheduler tells an extender about one pod at a time; everything else an extender knows (which pods are bound
where, what they hold, pods that were deleted) it learns from kube-apiserver through list and watch, and a binder
extender binds through it. The harness therefore serves the part of that API extenders use, with Kubernetes'
shapes, so an extender written against kube-apiserver needs nothing special here:

=====  ===============================================  =========================================================
GET    /version                                         server version
GET    /api/v1/nodes[/{name}]                           NodeList (list ``metadata.resourceVersion``) or a Node
GET    /api/v1/pods, /api/v1/namespaces/{ns}/pods[/{n}]  PodList or a Pod; ``?limit=1`` is a cheap way to learn
                                                        the current resourceVersion
GET    ...?watch=true&resourceVersion=N                 chunked stream of ``{"type", "object"}`` lines after N
                                                        (ADDED, MODIFIED, DELETED, BOOKMARK); 410 Gone when N is
                                                        older than the kept history
POST   /api/v1/namespaces/{ns}/pods/{name}/binding      ``v1.Binding``; its annotations are copied to the pod
=====  ===============================================  =========================================================

Resource versions are one counter for both kinds (as etcd's revision is), and a watch of one kind sends a
BOOKMARK when the counter moved for the other, so a client can wait until it has seen everything up to a
version it read ("consistent read": read the current version, wait for the watch to reach it).

The store does not judge what extenders do (double bookings are accepted and recorded): finding them is the
conformance suite's job, so the store must not hide them.
"""

from __future__ import annotations

import contextlib
import copy
import heapq
import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testbed.httpservice import JsonHandler, LoopbackJsonServer

Obj = dict[str, Any]
HISTORY = 20_000
WATCH_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class WatchEvent:
    rv: int
    kind: str
    type: str
    obj: Obj


@dataclass(frozen=True, slots=True)
class BindOutcome:
    code: int
    message: str


class ClusterStore:
    """Nodes and pods with a resource version counter and an event history (thread-safe).

    Stored objects are never changed in place: every write stores a new object. Reads therefore hand out the
    stored objects themselves (no copies; callers must treat them as read-only), which keeps a scheduling cycle
    over thousands of nodes cheap.
    """

    def __init__(self, history: int = HISTORY):
        self._cond = threading.Condition()
        self._rv = 0
        self._nodes: dict[str, Obj] = {}
        self._pods: dict[str, Obj] = {}
        self._events: deque[WatchEvent] = deque(maxlen=history)
        self._oldest = 0
        self._closed = False
        self.deleted: list[tuple[Obj, str]] = []
        """Every deleted pod with the reason (``completed``, ``preempted``...), for the suites' checks."""

    # ----------------------------------------------------------------------------------- writes

    def _emit(self, kind: str, type_: str, obj: Obj) -> Obj:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if len(self._events) == self._events.maxlen:
            self._oldest = self._events[0].rv
        self._events.append(WatchEvent(self._rv, kind, type_, obj))
        self._cond.notify_all()
        return obj

    def set_nodes(self, objs: Iterable[Obj], adopt: bool = False) -> int:
        """Make the node set equal to ``objs``: changed nodes are MODIFIED, new ADDED, missing DELETED.

        ``adopt``: the caller hands the objects over and never touches them again, so they are stored as they are
        (copying thousands of Node objects is most of the cost of a large cluster)."""
        changed = 0
        with self._cond:
            seen = set()
            for obj in objs:
                name = obj["metadata"]["name"]
                seen.add(name)
                old = self._nodes.get(name)
                if old is not None and _same(old, obj):
                    continue
                new = obj if adopt else copy.deepcopy(obj)
                self._nodes[name] = self._emit("Node", "ADDED" if old is None else "MODIFIED", new)
                changed += 1
            for name in [n for n in self._nodes if n not in seen]:
                self._emit("Node", "DELETED", copy.deepcopy(self._nodes.pop(name)))
                changed += 1
        return changed

    def create_pod(self, obj: Obj) -> Obj:
        with self._cond:
            pod = copy.deepcopy(obj)
            meta = pod.setdefault("metadata", {})
            meta.setdefault("namespace", "default")
            if not meta.get("uid"):
                meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            key = f"{meta['namespace']}/{meta['name']}"
            if key in self._pods:
                raise ValueError(f"pod {key} already exists")
            pod.setdefault("status", {})["phase"] = "Pending"
            self._pods[key] = self._emit("Pod", "ADDED", pod)
            return pod

    def delete_pod(self, key: str, reason: str = "deleted") -> Obj | None:
        with self._cond:
            old = self._pods.pop(key, None)
            if old is None:
                return None
            self.deleted.append((old, reason))
            return self._emit("Pod", "DELETED", copy.deepcopy(old))

    def bind(self, namespace: str, name: str, node: str, annotations: Mapping[str, str] | None = None,
             uid: str | None = None) -> BindOutcome:
        """Set ``spec.nodeName`` (once) and copy the binding's annotations onto the pod, as kube-apiserver does."""
        with self._cond:
            old = self._pods.get(f"{namespace}/{name}")
            if old is None:
                return BindOutcome(404, f'pods "{name}" not found')
            if uid and old["metadata"].get("uid") != uid:
                return BindOutcome(409, f"pod {namespace}/{name} has uid {old['metadata'].get('uid')}, not {uid}")
            if old["spec"].get("nodeName"):
                return BindOutcome(409, f"pod {namespace}/{name} is already assigned to node "
                                        f"\"{old['spec']['nodeName']}\"")
            if node not in self._nodes:
                return BindOutcome(404, f'nodes "{node}" not found')
            pod = copy.deepcopy(old)
            pod["spec"]["nodeName"] = node
            pod["status"]["phase"] = "Running"
            if annotations:
                pod["metadata"].setdefault("annotations", {}).update({str(k): str(v) for k, v in annotations.items()})
            self._pods[f"{namespace}/{name}"] = self._emit("Pod", "MODIFIED", pod)
            return BindOutcome(201, "bound")

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ----------------------------------------------------------------------------------- reads

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def node(self, name: str) -> Obj | None:
        with self._cond:
            return self._nodes.get(name)

    def pod(self, key: str) -> Obj | None:
        with self._cond:
            return self._pods.get(key)

    def nodes(self) -> list[Obj]:
        with self._cond:
            return [n for _, n in sorted(self._nodes.items())]

    def pods(self) -> list[Obj]:
        with self._cond:
            return [p for _, p in sorted(self._pods.items())]

    def node_names(self) -> list[str]:
        with self._cond:
            return sorted(self._nodes)

    def list_objects(self, kind: str, namespace: str | None = None, limit: int | None = None
                     ) -> tuple[list[Obj], int]:
        with self._cond:
            source = self._nodes if kind == "Node" else self._pods
            keys: Iterable[str] = source
            if namespace is not None:
                keys = [k for k, v in source.items() if v["metadata"].get("namespace") == namespace]
            # ?limit=1 is how clients read the current resourceVersion before every decision: the first items in
            # name order without sorting everything.
            names = heapq.nsmallest(limit, keys) if limit else sorted(keys)
            return [source[k] for k in names], self._rv

    def events_after(self, rv: int, timeout: float) -> list[WatchEvent] | None:
        """Events newer than ``rv`` (waiting up to ``timeout`` for one); None when ``rv`` is too old (410)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._rv <= rv and not self._closed and rv >= self._oldest:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._cond.wait(left)
            if rv < self._oldest:  # events after rv were dropped from the history (also while waiting)
                return None
            return [e for e in self._events if e.rv > rv]

    @property
    def closed(self) -> bool:
        return self._closed


def _same(a: Obj, b: Obj) -> bool:
    """Equal apart from the resource version."""
    def strip(o: Obj) -> Obj:
        meta = {k: v for k, v in o.get("metadata", {}).items() if k != "resourceVersion"}
        return {**o, "metadata": meta}

    return strip(a) == strip(b)


# --------------------------------------------------------------------------------------------------- HTTP


def status_object(code: int, message: str, reason: str) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


_REASONS = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict", 410: "Expired",
            422: "Invalid"}

_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("GET", re.compile(r"^/version$"), "version"),
    ("GET", re.compile(r"^/api/v1/nodes$"), "nodes"),
    ("GET", re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$"), "node"),
    ("GET", re.compile(r"^/api/v1/pods$"), "pods"),
    ("GET", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$"), "pods"),
    ("GET", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$"), "pod"),
    ("POST", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/binding$"), "binding"),
]


class _Handler(JsonHandler):
    server: _Server

    def _fail(self, code: int, message: str) -> None:
        self.send_json(code, status_object(code, message, _REASONS.get(code, "InternalError")))

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        raw = self.read_body()
        for m, pattern, name in _ROUTES:
            match = pattern.match(url.path)
            if match is None:
                continue
            if m != method:
                self._fail(405, f"{method} is not allowed on {url.path}")
                return
            try:
                getattr(self, f"_r_{name}")(match.groupdict(), query, raw)
            except (BrokenPipeError, ConnectionResetError):
                return
            return
        self._fail(404, f"the server could not find the requested resource ({url.path})")

    # routes ----------------------------------------------------------------------------------

    def _r_version(self, p: dict[str, str], q: dict[str, str], raw: bytes) -> None:
        self.send_json(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fakehw", "platform": "linux/amd64"})

    def _list(self, kind: str, q: dict[str, str], namespace: str | None) -> None:
        store = self.server.store
        if q.get("watch") in ("true", "1"):
            self._watch(kind, q, namespace)
            return
        try:
            limit = int(q["limit"]) if "limit" in q else None
        except ValueError:
            self._fail(400, "limit must be an integer")
            return
        items, rv = store.list_objects(kind, namespace, limit)
        self.send_json(200, {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)},
                         "items": items})

    def _r_nodes(self, p: dict[str, str], q: dict[str, str], raw: bytes) -> None:
        self._list("Node", q, None)

    def _r_pods(self, p: dict[str, str], q: dict[str, str], raw: bytes) -> None:
        self._list("Pod", q, p.get("ns"))

    def _r_node(self, p: dict[str, str], q: dict[str, str], raw: bytes) -> None:
        obj = self.server.store.node(p["name"])
        if obj is None:
            self._fail(404, f'nodes "{p["name"]}" not found')
        else:
            self.send_json(200, obj)

    def _r_pod(self, p: dict[str, str], q: dict[str, str], raw: bytes) -> None:
        obj = self.server.store.pod(f"{p['ns']}/{p['name']}")
        if obj is None:
            self._fail(404, f'pods "{p["name"]}" not found')
        else:
            self.send_json(200, obj)

    def _r_binding(self, p: dict[str, str], q: dict[str, str], raw: bytes) -> None:
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            self._fail(400, "the binding is not JSON")
            return
        target = body.get("target") if isinstance(body, dict) else None
        if not isinstance(target, dict) or not isinstance(target.get("name"), str) or not target["name"]:
            self._fail(422, "Binding.target.name is required")
            return
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else None
        outcome = self.server.store.bind(p["ns"], p["name"], target["name"], annotations, meta.get("uid"))
        if outcome.code >= 400:
            self._fail(outcome.code, outcome.message)
        else:
            self.send_json(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})

    def _watch(self, kind: str, q: dict[str, str], namespace: str | None) -> None:
        store = self.server.store
        try:
            rv = int(q.get("resourceVersion") or store.resource_version)
            timeout = float(q.get("timeoutSeconds") or WATCH_TIMEOUT_S)
        except ValueError:
            self._fail(400, "resourceVersion and timeoutSeconds must be numbers")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + timeout
        while not store.closed and not self.server.stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            events = store.events_after(rv, min(left, 1.0))
            if events is None:
                self._chunk({"type": "ERROR", "object": status_object(410, f"too old resource version: {rv}",
                                                                      "Expired")})
                break
            lines: list[Obj] = []
            last_sent = 0
            for e in events:
                rv = e.rv
                if e.kind == kind and (namespace is None or e.obj["metadata"].get("namespace") == namespace):
                    lines.append({"type": e.type, "object": e.obj})
                    last_sent = e.rv
            if events and last_sent != rv:  # the counter moved for the other kind: tell the watcher how far
                lines.append({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "v1",
                                                             "metadata": {"resourceVersion": str(rv)}}})
            if lines:
                self._chunk_many(lines)
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, obj: Obj) -> None:
        self._chunk_many([obj])

    def _chunk_many(self, objs: list[Obj]) -> None:
        data = "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in objs).encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class _Server(LoopbackJsonServer):
    def __init__(self, store: ClusterStore):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.store = store
        self.stopping = threading.Event()


class ApiServer:
    """Serves a :class:`ClusterStore` on loopback (``url``) from a background thread until :meth:`stop`."""

    def __init__(self, store: ClusterStore):
        self.store = store
        self._server = _Server(store)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ApiServer:
        self._server.start_background("fakehw-apiserver")
        return self

    def stop(self) -> None:
        self._server.stopping.set()
        self.store.close()
        self._server.close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
