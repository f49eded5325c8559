"""The reference extender's HTTP service: filter, prioritize, bind and preempt over the informer's cache.

Answers use the protocol's Go field names. A request that is not JSON, or lacks the pod, gets HTTP 400 with an
``Error`` (kube-scheduler treats any non-200 as a failed call); nothing a client sends stops the service. All
decisions run one at a time under the informer's lock, so a bind never races a filter.
"""

from __future__ import annotations

import gc
import itertools
import json
import logging
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fakehw.views.k8s import NodeInfo, PodRequest, PodSpecError
from testbed.httpservice import JsonHandler, LoopbackJsonServer, send_json_bytes
from testbed.reference.extender.informer import ApiClient, ApiError, Informer
from testbed.reference.extender.policy import (
    Bound,
    Flags,
    GangPlan,
    Key,
    Placement,
    Policy,
    Refusal,
    Snapshot,
    Verdict,
    parse_bound,
)

log = logging.getLogger("fakehw.reference.extender")
MAX_BODY = 256 * 2**20
SOCKET_BUFFER = 4 * 2**20
"""Send and receive buffers of the service's connections: a call over 10,000 nodes carries ~150-250 KB each way,
which the default 16 KB send buffer passes in pieces, each waiting for the other process to be scheduled (on a
loaded machine those waits were much of the p99). Capped by net.core.[rw]mem_max."""


class BadRequest(Exception):
    """The request cannot be read; answered with HTTP 400."""


@dataclass(frozen=True, slots=True)
class Encoded:
    """An answer already encoded as JSON (sent as it is)."""

    data: bytes


@dataclass(frozen=True)
class Options:
    mutant: str | None = None
    slow_per_pod_s: float = 0.0
    """Sleep this long per bound pod beyond 10 in every filter call (the ``slow`` mutant: an O(pods) decision)."""
    reserve_at_filter: bool = False
    """Hold the best node's GPUs for a pod from its filter call until it is bound (the ``reserve-at-filter``
    mutant: a filter whose bind never comes leaves them held)."""
    forget_on_restart: bool = False
    """Ignore the pods that exist at start (the ``forget-on-restart`` mutant)."""
    own_binds_only: bool = False
    """Count only pods this process bound (the ``own-binds-only`` mutant: an assume cache without an informer
    for pods; deletions and nodes are still watched)."""
    quadratic: bool = False
    """Compare every candidate node with every other one in filter and prioritize (the ``quadratic`` mutant)."""


class Extender:
    """The decision side, kept current in time linear in what changed: node infos parsed once per node version,
    usage updated pod by pod, verdicts cached per (node template, usage state, request shape) across decisions."""

    def __init__(self, api: ApiClient, options: Options):
        self.api = api
        self.options = options
        self.flags = Flags.for_mutant(options.mutant)
        self.informer = Informer(api)
        self._infos: dict[str, tuple[str, NodeInfo, int]] = {}
        """Node -> (resourceVersion, parsed info, template id): each node version is parsed once."""
        self._templates: dict[tuple[Any, ...], int] = {}
        """Static facts of a node (what decisions depend on) -> a small id shared by identical nodes."""
        self._bounds: dict[str, tuple[str, Bound | None]] = {}
        """Pod -> (resourceVersion, its request and holding): each pod version is parsed once."""
        self._node_infos: dict[str, NodeInfo] = {}
        self._node_templates: dict[str, int] = {}
        """Every usable node's info and template id (what the snapshot reads), updated node by node."""
        self._snapshot: Snapshot | None = None
        self._verdicts: dict[tuple[Any, ...], Verdict] = {}
        self._keys: dict[Key, Key] = {}
        """Usage states interned across snapshots (the verdict cache's keys hold them)."""
        self._policy: tuple[int, Policy] | None = None
        self._dirty: set[str] = set()
        """Pods whose contribution changed for reasons the informer does not see (own binds, provisional holds)."""
        self._own: set[str] = set()
        """Keys of the pods this process bound (all the ``own-binds-only`` mutant counts)."""
        self._provisional: dict[str, dict[str, Any]] = {}
        """reserve-at-filter mutant: pod key -> a pod object holding what its filter call set aside."""
        self._host_json: dict[str, str] = {}
        """Node -> the start of its HostPriority in JSON (``{"Host":"name","Score":``), made once per node."""

    def start(self) -> None:
        """List the cluster and read every node before answering (the first decision does not pay for it)."""
        self.informer.start(forget_existing_pods=self.options.forget_on_restart)
        with self.informer.lock:
            self.policy()

    # ----------------------------------------------------------------------------------- state

    def _node_info(self, name: str, obj: Mapping[str, Any] | None = None) -> NodeInfo | None:
        source = obj if obj is not None else self.informer.nodes.get(name)
        if source is None:
            return None
        rv = str(source["metadata"].get("resourceVersion", ""))
        cached = self._infos.get(name)
        if cached is not None and cached[0] == rv and rv:
            return cached[1]
        try:
            info = NodeInfo.from_object(source)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("node %s: cannot read its topology annotations: %s", name, exc)
            self._infos.pop(name, None)
            return None
        static = (info.arch, info.isa, info.latency, tuple((g.memory, g.health) for g in info.gpus),
                  tuple((p.name, p.tier, p.capacity, p.available, p.latency_ns, p.policy) for p in info.pools),
                  info.policy)
        template = self._templates.setdefault(static, len(self._templates))
        self._infos[name] = (rv, info, template)
        return info

    def _bound(self, key: str, pod: Mapping[str, Any]) -> Bound | None:
        rv = str(pod.get("metadata", {}).get("resourceVersion", ""))
        cached = self._bounds.get(key)
        if cached is not None and cached[0] == rv and rv:
            return cached[1]
        b = parse_bound(pod)
        self._bounds[key] = (rv, b)
        return b

    def _contribution(self, key: str) -> Bound | None:
        """What the pod ``key`` holds as this extender counts it (None: nothing)."""
        pod = self.informer.pods.get(key)
        if pod is None:
            self._bounds.pop(key, None)
            return None
        held = self._provisional.get(key)
        if held is not None and not pod.get("spec", {}).get("nodeName"):
            return parse_bound(held)
        if self.options.own_binds_only and key not in self._own:
            return None
        return self._bound(key, pod)

    def _update_nodes(self) -> bool:
        """Bring node infos up to date with the informer; whether any changed."""
        changed = self.informer.changes("Node")
        if changed is None:
            self._infos = {k: v for k, v in self._infos.items() if k in self.informer.nodes}
            changed = set(self.informer.nodes) | set(self._node_infos)
        for name in changed:
            info = self._node_info(name)
            if info is None:
                self._node_infos.pop(name, None)
                self._node_templates.pop(name, None)
                self._host_json.pop(name, None)
            else:
                self._node_infos[name] = info
                self._node_templates[name] = self._infos[name][2]
        return bool(changed)

    def policy(self) -> Policy:
        """The decisions over the cache as it is now (one Policy per cache version)."""
        version = self.informer.version
        if self._policy is not None and self._policy[0] == version:
            return self._policy[1]
        pods = self.informer.changes("Pod")
        dirty, self._dirty = self._dirty, set()
        snap = self._snapshot
        if self._update_nodes() or pods is None or snap is None:
            # Nodes changed (rare: faults): usage is recounted for the new node set.
            bounds = [b for k in self.informer.pods if (b := self._contribution(k)) is not None]
            snap = self._snapshot = Snapshot(self._node_infos, bounds, self.flags, self._keys)
            self._bounds = {k: v for k, v in self._bounds.items() if k in self.informer.pods}
        else:
            for key in pods | dirty:
                snap.put(key, self._contribution(key))
        snap.pending_plans = {}  # bookings a filter made and no bind took are for that decision only
        policy = Policy(snap, self._node_templates, self._verdicts)
        self._policy = (version, policy)
        return policy

    def _sync(self) -> None:
        self.informer.sync()

    # ----------------------------------------------------------------------------------- verbs

    @staticmethod
    def _request(args: Any) -> PodRequest:
        if not isinstance(args, dict) or not isinstance(args.get("Pod"), dict):
            raise BadRequest("ExtenderArgs.Pod is missing")
        try:
            return PodRequest.from_pod(args["Pod"])
        except PodSpecError as exc:
            raise BadRequest(f"pod: {exc}") from None

    def _names(self, args: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]] | None]:
        names = args.get("NodeNames")
        nodes = args.get("Nodes")
        if isinstance(names, list) and all(map(isinstance, names, itertools.repeat(str))):
            return names, None
        if isinstance(nodes, dict) and isinstance(nodes.get("items"), list):
            items = [i for i in nodes["items"] if isinstance(i, dict) and isinstance(i.get("metadata"), dict)]
            return [str(i["metadata"].get("name")) for i in items], items
        raise BadRequest("ExtenderArgs has neither NodeNames nor Nodes")

    def _refresh_from(self, items: list[dict[str, Any]] | None) -> None:
        """Nodes sent as objects win over the cache when they are newer (or unknown to it)."""
        if not items:
            return
        for obj in items:
            name = str(obj["metadata"].get("name"))
            cached = self.informer.nodes.get(name)
            if cached is None or cached["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self.informer.put_node(obj)

    def _alike_pairwise(self, names: list[str]) -> dict[str, list[str]]:
        """The ``quadratic`` mutant's grouping of nodes with the same GPU topology: each candidate's latency matrix
        compared with every other candidate's (the reference hashes it once per node version instead)."""
        infos = self._node_infos
        out: dict[str, list[str]] = {}
        for n in names:
            a = infos.get(n)
            if a is not None:
                out[n] = [m for m in names if (b := infos.get(m)) is not None and b.latency == a.latency]
        return out

    def filter(self, args: Any) -> dict[str, Any]:
        req = self._request(args)
        names, items = self._names(args)
        if self.options.quadratic:
            self._alike_pairwise(names)
        if self.options.slow_per_pod_s:
            bound = sum(1 for p in list(self.informer.pods.values()) if p.get("spec", {}).get("nodeName"))
            time.sleep(self.options.slow_per_pod_s * max(0, bound - 10))
        self._sync()
        with self.informer.lock:
            self._refresh_from(items)
            self._drop_provisional(req.key)
            policy = self.policy()
            passed, failed, unresolvable = policy.filter(req, names)
            if self.options.reserve_at_filter and passed and not req.gang:
                self._reserve(policy, req, passed)
        out: dict[str, Any] = {"FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
        if items is None:
            out["NodeNames"] = passed
            out["Nodes"] = None
        else:
            keep = set(passed)
            out["Nodes"] = {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                            "items": [i for i in items if i["metadata"].get("name") in keep]}
            out["NodeNames"] = None
        return out

    def _drop_provisional(self, key: str) -> None:
        """A pod's own provisional hold never counts against it (only the mutant makes any)."""
        if self._provisional.pop(key, None) is not None:
            self._dirty.add(key)
            self.informer.version += 1

    def _reserve(self, policy: Policy, req: PodRequest, passed: list[str]) -> None:
        scores = policy.prioritize(req, passed)
        node = max(passed, key=lambda n: (scores.get(n, 0), n))
        verdict = policy.evaluate(req, node)
        live = self.informer.pods.get(req.key)
        if isinstance(verdict, Placement) and live is not None:
            held = json.loads(json.dumps(live))
            held["spec"]["nodeName"] = node
            held["metadata"].setdefault("annotations", {}).update(_holding_annotations(node, verdict, None))
            self._provisional[req.key] = held
            self._dirty.add(req.key)
            self.informer.version += 1

    def prioritize(self, args: Any) -> Encoded:
        req = self._request(args)
        names, items = self._names(args)
        if self.options.quadratic:
            self._alike_pairwise(names)
        self._sync()
        with self.informer.lock:
            self._refresh_from(items)
            self._drop_provisional(req.key)
            groups = self.policy().score_groups(req, names)
            return Encoded(self._priorities_json(groups, 10 if self.options.mutant == "score-100" else 1))

    def _priorities_json(self, groups: list[tuple[int, list[str]]], scale: int) -> bytes:
        """The HostPriorityList ``[{"Host": name, "Score": score}, ...]``, one JSON head per node made once and
        joined per score (json.dumps of 10,000 fresh dicts was a fifth of a decision at 10,000 nodes)."""
        chunks = []
        for score, names in groups:
            if not names:
                continue
            heads = list(map(self._host_json.get, names))
            if None in heads:
                heads = [h if h is not None else self._host_head(n) for h, n in zip(heads, names, strict=True)]
            tail = f"{score * scale}}}"
            chunks.append(f"{tail},".join(heads) + tail)  # type: ignore[arg-type]
        return f"[{','.join(chunks)}]".encode()

    def _host_head(self, name: str) -> str:
        head = '{"Host":' + json.dumps(name) + ',"Score":'
        if name in self._node_infos:  # kept for known nodes only: what a client sends cannot grow it
            self._host_json[name] = head
        return head

    def bind(self, args: Any) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise BadRequest("ExtenderBindingArgs must be an object")
        ns, name, uid, node = (args.get(k) for k in ("PodNamespace", "PodName", "PodUID", "Node"))
        if not all(isinstance(x, str) and x for x in (ns, name, node)):
            raise BadRequest("ExtenderBindingArgs needs PodName, PodNamespace and Node")
        assert isinstance(ns, str) and isinstance(name, str) and isinstance(node, str)
        self._sync()
        with self.informer.lock:
            pod = self.informer.pods.get(f"{ns}/{name}")
            if pod is None:
                try:
                    status, pod = self.api.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
                except ApiError as exc:
                    return {"Error": f"cannot read pod {ns}/{name}: {exc}"}
                if status != 200 or not isinstance(pod, dict):
                    return {"Error": f"pod {ns}/{name} not found"}
            if uid and pod["metadata"].get("uid") != uid:
                return {"Error": f"pod {ns}/{name} has uid {pod['metadata'].get('uid')}, not {uid}"}
            try:
                req = PodRequest.from_pod(pod)
            except PodSpecError as exc:
                return {"Error": f"pod {ns}/{name}: {exc}"}
            self._drop_provisional(req.key)
            policy = self.policy()
            plan: GangPlan | None = None
            own = 0
            if req.gang and not self.flags.split_gangs:
                got = policy.gang_plan(req, [node])
                if isinstance(got, Refusal):
                    return {"Error": got.reason}
                plan = got
                if plan.open_slots().get(node, 0) <= 0:
                    return {"Error": f"gang {plan.gang} is booked elsewhere than {node}"}
                own = policy.own_slots(req, node)
            verdict = policy.evaluate(req, node, own)
            if not isinstance(verdict, Placement):
                return {"Error": f"{ns}/{name} no longer fits {node}: {verdict.reason}"}
            annotations = _holding_annotations(node, verdict, plan)
            body = {"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name, "namespace": ns, "uid": uid or pod["metadata"].get("uid"),
                                 "annotations": annotations},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
            try:
                status, answer = self.api.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", body)
            except ApiError as exc:
                return {"Error": f"binding failed: {exc}"}
            if status >= 300:
                msg = answer.get("message") if isinstance(answer, dict) else answer
                return {"Error": f"binding refused (HTTP {status}): {msg}"}
            bound = json.loads(json.dumps(pod))
            bound["spec"]["nodeName"] = node
            bound["metadata"].setdefault("annotations", {}).update(annotations)
            self._own.add(f"{ns}/{name}")
            self.informer.assume(bound)  # marks the pod changed: the next snapshot counts it
            if plan is not None:
                policy.snap.pending_plans.pop(plan.gang, None)
        return {"Error": ""}

    def preempt(self, args: Any) -> dict[str, Any]:
        req = self._request(args)
        offered: dict[str, list[str]] = {}
        meta = args.get("NodeNameToMetaVictims")
        full = args.get("NodeNameToVictims")
        if isinstance(meta, dict):
            for node, v in meta.items():
                offered[str(node)] = [str(p.get("UID")) for p in (v or {}).get("Pods") or [] if isinstance(p, dict)]
        elif isinstance(full, dict):
            for node, v in full.items():
                offered[str(node)] = [str((p.get("metadata") or {}).get("uid")) for p in (v or {}).get("Pods") or []
                                      if isinstance(p, dict)]
        else:
            raise BadRequest("ExtenderPreemptionArgs has no victims map")
        self._sync()
        out: dict[str, Any] = {}
        with self.informer.lock:
            policy = self.policy()
            for node, uids in offered.items():
                chosen = policy.victims(req, node, uids)
                if chosen is not None:
                    out[node] = {"Pods": [{"UID": u} for u in chosen], "NumPDBViolations": 0}
        return {"NodeNameToMetaVictims": out}


def _holding_annotations(node: str, p: Placement, plan: GangPlan | None) -> dict[str, str]:
    from fakehw.views.k8s import Holding

    holding = Holding(node, p.gpus, dict(p.grants), p.kind,
                      plan.domain if plan else None, plan.token if plan else None, plan.nodes if plan else ())
    return holding.annotations()


_SNAKE = {"FailedNodes": "failed_nodes", "FailedAndUnresolvableNodes": "failed_and_unresolvable_nodes"}


def _snake(obj: Any) -> Any:
    """The ``snake-keys`` mutant's spelling of a filter result (what a hand-rolled encoder might produce)."""
    if isinstance(obj, dict):
        return {_SNAKE.get(k, k): v for k, v in obj.items()}
    return obj


class _Handler(JsonHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, code: int, body: Any) -> None:
        if isinstance(body, Encoded):
            send_json_bytes(self, code, body.data)
            return
        if self.server.ext.options.mutant == "snake-keys":
            body = _snake(body)
        self.send_json(code, body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/healthz", "/readyz"):
            self._send(200, {"ok": True, "mutant": self.server.ext.options.mutant})
        else:
            self._send(404, {"Error": f"no such path {self.path}"})

    def do_POST(self) -> None:
        verb = self.path.strip("/").rsplit("/", 1)[-1]
        try:
            raw = self.read_body(MAX_BODY)
        except ValueError as exc:
            self._send(400, {"Error": str(exc)})
            return
        handler = {"filter": self.server.ext.filter, "prioritize": self.server.ext.prioritize,
                   "bind": self.server.ext.bind, "preempt": self.server.ext.preempt}.get(verb)
        if handler is None:
            self._send(404, {"Error": f"unknown verb {verb!r} (filter, prioritize, bind, preempt)"})
            return
        try:
            args = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, nesting too deep
            self._send(400, {"Error": f"the request is not JSON: {type(exc).__name__}: {str(exc)[:200]}"})
            return
        try:
            self._send(200, handler(args))
        except BadRequest as exc:
            self._send(400, {"Error": str(exc)})
        except Exception as exc:  # never let one request take the service down
            log.exception("%s failed", verb)
            self._send(500, {"Error": f"internal error in {verb}: {type(exc).__name__}: {exc}"})


class _Server(LoopbackJsonServer):
    def __init__(self, address: tuple[str, int], ext: Extender):
        super().__init__(address, _Handler)
        self.ext = ext

    def server_bind(self) -> None:
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):  # accepted connections inherit them
            self.socket.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        super().server_bind()


def serve(host: str, port: int, api: str, options: Options) -> None:
    ext = Extender(ApiClient(api), options)
    ext.start()
    # What the first list built (10,000 Node objects are millions of Python objects) lives as long as the process:
    # kept out of the collector, a full collection no longer walks it (that walk was most of the p99 at 10,000 nodes).
    gc.freeze()
    server = _Server((host, port), ext)
    log.info("reference extender on http://%s:%d (cluster API %s, mutant %s)", host, server.server_address[1], api,
             options.mutant or "none")
    try:
        server.serve_forever()
    finally:
        server.server_close()
