"""A list+watch cache of the cluster's Nodes and Pods, as client-go's informers keep one.

The extender decides from this cache. Before each decision it makes a *consistent read*: it asks the API for
the current resource version (a list with ``limit=1``) and waits until both watches have delivered everything up
to it, so a pod bound or deleted a moment ago is never missed (kube-apiserver's consistent reads from cache do the
same). A watch that fails or is told its version is too old (410) relists.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import threading
import time
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("fakehw.reference.extender")
Obj = dict[str, Any]


class ApiError(Exception):
    """The cluster API could not be reached or answered an error."""


class ApiClient:
    """Plain HTTP to the cluster API (no TLS: loopback in the testbed)."""

    def __init__(self, base: str, timeout: float = 10.0):
        url = urlsplit(base)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"cluster API URL {base!r}: expected http://host:port")
        self.host = url.hostname
        self.port = url.port or 80
        self.timeout = timeout
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (0, 1):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
            except (OSError, http.client.HTTPException, json.JSONDecodeError) as exc:
                conn.close()
                self._local.conn = None
                if attempt == 1:
                    raise ApiError(f"{method} {path}: {exc}") from None
        raise ApiError(f"{method} {path}: failed")

    def stream(self, path: str) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout + 330)
        conn.request("GET", path)
        resp = conn.getresponse()
        if resp.status != 200:
            body = resp.read()
            conn.close()
            raise ApiError(f"GET {path}: HTTP {resp.status} {body[:200]!r}")
        return resp


class Informer:
    """Nodes (by name) and pods (by namespace/name), kept current by two watches."""

    def __init__(self, api: ApiClient):
        self.api = api
        self.lock = threading.RLock()
        self._cond = threading.Condition(self.lock)
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[str, Obj] = {}
        self.version = 0
        """Bumped on every change: consumers cache derived state per version."""
        self._dirty: dict[str, set[str] | None] = {"Node": None, "Pod": None}
        """Keys changed since :meth:`changes` was last asked, by kind (None: everything, after a relist)."""
        self._seen = {"Node": 0, "Pod": 0}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, timeout: float = 30.0, forget_existing_pods: bool = False) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                for kind in ("Node", "Pod"):
                    self._relist(kind)
                if forget_existing_pods:
                    with self._cond:
                        self.pods = {}
                        self._changed()
                break
            except ApiError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for kind in ("Node", "Pod"):
            t = threading.Thread(target=self._watch_loop, args=(kind,), name=f"watch-{kind}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()

    @staticmethod
    def _path(kind: str) -> str:
        return "/api/v1/nodes" if kind == "Node" else "/api/v1/pods"

    @staticmethod
    def _key(kind: str, obj: Obj) -> str:
        """The cache key of a ``kind`` object: a Node's name, a Pod's namespace/name."""
        meta = obj["metadata"]
        return meta["name"] if kind == "Node" or "namespace" not in meta else f"{meta['namespace']}/{meta['name']}"

    def _relist(self, kind: str) -> int:
        status, body = self.api.request("GET", self._path(kind))
        if status != 200 or not isinstance(body, dict):
            raise ApiError(f"list {kind}: HTTP {status}")
        rv = int(body["metadata"]["resourceVersion"])
        items = {self._key(kind, i): i for i in body.get("items", [])}
        with self._cond:
            if kind == "Node":
                self.nodes = items
            else:
                self.pods = items
            self._seen[kind] = max(self._seen[kind], rv)
            self._changed(kind)
        return rv

    def _changed(self, kind: str = "Pod", key: str | None = None) -> None:
        """Something of ``kind`` changed: ``key`` only, or (None) possibly everything."""
        self.version += 1
        dirty = self._dirty[kind]
        if key is None:
            self._dirty[kind] = None
        elif dirty is not None:
            dirty.add(key)
        self._cond.notify_all()

    def changes(self, kind: str) -> set[str] | None:
        """The keys of ``kind`` changed since the last call (None: re-read everything); call with the lock held.
        What a consumer needs to keep state derived from the cache current in time linear in what changed."""
        dirty = self._dirty[kind]
        self._dirty[kind] = set()
        return dirty

    def put_node(self, obj: Obj) -> None:
        """A Node learnt from elsewhere (a scheduler that sent Node objects); call with the lock held."""
        key = self._key("Node", obj)
        self.nodes[key] = obj
        self._changed("Node", key)

    def _watch_loop(self, kind: str) -> None:
        rv = self._seen[kind]
        while not self._stop.is_set():
            try:
                resp = self.api.stream(f"{self._path(kind)}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"
                                       f"&timeoutSeconds=300")
            except (ApiError, OSError, http.client.HTTPException) as exc:
                log.debug("watch %s: %s", kind, exc)
                self._stop.wait(0.2)
                with contextlib.suppress(ApiError, OSError, http.client.HTTPException):
                    rv = self._relist(kind)
                continue
            try:
                while not self._stop.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    event = json.loads(line)
                    etype = event.get("type")
                    obj = event.get("object") or {}
                    if etype == "ERROR":
                        rv = self._relist(kind)
                        break
                    rv = int(obj.get("metadata", {}).get("resourceVersion", rv))
                    with self._cond:
                        if etype in ("ADDED", "MODIFIED", "DELETED"):
                            store = self.nodes if kind == "Node" else self.pods
                            key = self._key(kind, obj)
                            if etype == "DELETED":
                                store.pop(key, None)
                            else:
                                store[key] = obj
                            self._seen[kind] = rv
                            self._changed(kind, key)
                        else:
                            self._seen[kind] = rv
                            self._cond.notify_all()
            except (OSError, http.client.HTTPException, json.JSONDecodeError, ValueError, KeyError, ApiError) as exc:
                log.debug("watch %s broke: %s", kind, exc)
            finally:
                with contextlib.suppress(OSError):
                    resp.close()

    def sync(self, timeout: float = 2.0) -> bool:
        """Consistent read: wait until the cache holds everything the API had when this was called."""
        try:
            status, body = self.api.request("GET", "/api/v1/pods?limit=1")
        except ApiError:
            return False
        if status != 200 or not isinstance(body, dict):
            return False
        want = int(body["metadata"]["resourceVersion"])
        deadline = time.monotonic() + timeout
        with self._cond:
            while min(self._seen.values()) < want:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def assume(self, pod: Obj) -> None:
        """Record a pod this extender just bound, before the watch brings it (kube-scheduler's assume)."""
        with self._cond:
            key = self._key("Pod", pod)
            self.pods[key] = pod
            self._changed("Pod", key)
