"""The kube-scheduler extender protocol as the scheduler speaks it: configuration, requests, response checks.

Every call returns a :class:`CallResult`; nothing an extender sends (or fails to send) raises. The result holds
the decoded value *as kube-scheduler would decode it* (Go's ``encoding/json``: field names matched exactly, then
case-insensitively; unknown keys dropped; a wrong type fails the whole call) and a list of :class:`Check` s, each
with the offending body as evidence, so a conformance test can report precisely what was wrong.

Facts (kube-scheduler ``extender.go`` and ``k8s.io/kube-scheduler/extender/v1``):

- ``POST {urlPrefix}/{verb}`` with JSON; any status but 200 is an error; default timeout 5 s.
- filter: ExtenderArgs{Pod, Nodes, NodeNames} -> ExtenderFilterResult{Nodes, NodeNames, FailedNodes,
  FailedAndUnresolvableNodes, Error}; with ``nodeCacheCapable`` only names are sent and NodeNames are read back.
- prioritize: ExtenderArgs -> HostPriorityList [{Host, Score}], Score 0..10, multiplied by weight and by 10.
- bind: ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node} -> ExtenderBindingResult{Error}.
- preempt: ExtenderPreemptionArgs{Pod, NodeNameToVictims | NodeNameToMetaVictims} ->
  ExtenderPreemptionResult{NodeNameToMetaVictims}.
"""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

MAX_EXTENDER_PRIORITY = 10
MAX_NODE_SCORE = 100
EVIDENCE_BYTES = 4000
T = TypeVar("T")


class ConfigError(ValueError):
    """An extender stanza kube-scheduler would refuse to start with."""


@dataclass(frozen=True, slots=True)
class ManagedResource:
    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True)
class ExtenderConfig:
    """One ``extenders[]`` stanza of a KubeSchedulerConfiguration."""

    url_prefix: str
    filter_verb: str = "filter"
    prioritize_verb: str = "prioritize"
    bind_verb: str = ""
    preempt_verb: str = ""
    weight: int = 1
    node_cache_capable: bool = False
    ignorable: bool = False
    http_timeout: float = 5.0
    managed_resources: tuple[ManagedResource, ...] = ()
    enable_https: bool = False

    def __post_init__(self) -> None:
        problems = []
        url = urlsplit(self.url_prefix)
        if url.scheme not in ("http", "https") or not url.hostname:
            problems.append(f"urlPrefix {self.url_prefix!r} is not an http(s) URL")
        if self.enable_https or url.scheme == "https":
            problems.append("enableHTTPS: the harness speaks plain HTTP on loopback only")
        if self.prioritize_verb and self.weight <= 0:
            problems.append(f"weight must be > 0 when prioritizeVerb is set (got {self.weight})")
        if self.http_timeout <= 0:
            problems.append("httpTimeout must be > 0")
        if problems:
            raise ConfigError("; ".join(problems))

    @classmethod
    def from_stanza(cls, stanza: Mapping[str, Any]) -> ExtenderConfig:
        """From the YAML/JSON keys of kube-scheduler's configuration (``urlPrefix``, ``filterVerb``, ...)."""
        known = {"urlPrefix", "filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb", "weight",
                 "nodeCacheCapable", "ignorable", "httpTimeout", "managedResources", "enableHTTPS", "tlsConfig"}
        unknown = sorted(set(stanza) - known)
        if unknown:
            raise ConfigError(f"unknown extender keys: {', '.join(unknown)}")
        if "urlPrefix" not in stanza:
            raise ConfigError("urlPrefix is required")
        managed = tuple(ManagedResource(str(m["name"]), bool(m.get("ignoredByScheduler", False)))
                        for m in stanza.get("managedResources") or [])
        timeout = stanza.get("httpTimeout", "5s")
        return cls(str(stanza["urlPrefix"]), str(stanza.get("filterVerb", "")),
                   str(stanza.get("prioritizeVerb", "")), str(stanza.get("bindVerb", "")),
                   str(stanza.get("preemptVerb", "")), int(stanza.get("weight", 1)),
                   bool(stanza.get("nodeCacheCapable", False)), bool(stanza.get("ignorable", False)),
                   parse_duration(timeout), managed, bool(stanza.get("enableHTTPS", False)))

    def interested(self, pod: Mapping[str, Any]) -> bool:
        """kube-scheduler only consults an extender with managedResources for pods requesting one of them."""
        if not self.managed_resources:
            return True
        names = {m.name for m in self.managed_resources}
        for c in (pod.get("spec") or {}).get("containers") or []:
            res = c.get("resources") or {}
            if names & (set(res.get("requests") or {}) | set(res.get("limits") or {})):
                return True
        return False


def parse_duration(value: Any) -> float:
    """``5s``, ``500ms``, ``1m`` or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * scale
            except ValueError:
                break
    raise ConfigError(f"httpTimeout {value!r} is not a duration like 5s or 500ms")


# --------------------------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Check:
    """One thing the harness verified about a response; ``evidence`` holds the offending body when it failed."""

    name: str
    ok: bool
    message: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "message": self.message, "evidence": dict(self.evidence)}


@dataclass(frozen=True, slots=True)
class FilterResult:
    passed: tuple[str, ...]
    failed: Mapping[str, str]
    unresolvable: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class HostPriority:
    host: str
    score: int


@dataclass(frozen=True, slots=True)
class PreemptResult:
    victims: Mapping[str, tuple[str, ...]]
    """Node -> UIDs of the pods to evict there."""

    def emptied(self, offered: Mapping[str, Sequence[str]]) -> list[str]:
        """The nodes that were offered victims and answered with none, sorted.

        kube-scheduler's callExtenders fails the whole preemption on such a node ("expected at least one victim pod
        on node"; an ignorable extender's node is dropped instead). To turn a node down, an extender leaves it out
        of its answer."""
        return sorted(n for n, uids in self.victims.items() if not uids and offered.get(n))


@dataclass(frozen=True)
class CallResult(Generic[T]):
    """One HTTP call to an extender: what came back, what it means to kube-scheduler, and the checks made."""

    verb: str
    url: str
    status: int | None
    body: str
    elapsed: float
    value: T | None
    error: str | None
    timed_out: bool = False
    checks: tuple[Check, ...] = ()

    @property
    def ok(self) -> bool:
        """The call worked for kube-scheduler (a value came back); checks may still have failed."""
        return self.value is not None and self.error is None

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def evidence(self) -> dict[str, Any]:
        return {"verb": self.verb, "url": self.url, "status": self.status, "body": self.body[:EVIDENCE_BYTES],
                "error": self.error, "elapsed_s": round(self.elapsed, 4)}


# --------------------------------------------------------------------------------------------------- Go decoding


class GoDecodeError(ValueError):
    """What Go's encoding/json would refuse (kube-scheduler then treats the call as failed)."""


@dataclass
class _Keys:
    """Key problems found while decoding, reported as checks (the value is still decoded as Go would)."""

    unknown: list[str] = field(default_factory=list)
    case: list[str] = field(default_factory=list)


def _fields(obj: Any, names: Sequence[str], where: str, keys: _Keys) -> dict[str, Any]:
    """Pick Go struct fields out of a JSON object: exact name first, then case-insensitive; others are unknown."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise GoDecodeError(f"{where}: cannot unmarshal {_json_type(obj)} into a Go struct")
    out: dict[str, Any] = {}
    lower = {n.lower(): n for n in names}
    for key, value in obj.items():
        if key in names:
            out[key] = value
        elif key.lower() in lower:
            name = lower[key.lower()]
            keys.case.append(f"{where}.{key} (field {name})")
            out.setdefault(name, value)
        else:
            keys.unknown.append(f"{where}.{key}")
    return out


def _json_type(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "bool", type(None): "null"}.get(
        type(v), "number")


def _go_string(v: Any, where: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise GoDecodeError(f"{where}: cannot unmarshal {_json_type(v)} into Go value of type string")
    return v


def _go_int64(v: Any, where: str) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise GoDecodeError(f"{where}: cannot unmarshal {_json_type(v)} into Go value of type int64")
    if isinstance(v, float) and not v.is_integer():
        raise GoDecodeError(f"{where}: cannot unmarshal number {v} into Go value of type int64")
    if not -(2**63) <= int(v) < 2**63:
        raise GoDecodeError(f"{where}: number {v} overflows int64")
    return int(v)


def _go_string_map(v: Any, where: str) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise GoDecodeError(f"{where}: cannot unmarshal {_json_type(v)} into Go value of type map[string]string")
    if all(map(isinstance, v.values(), itertools.repeat(str))):  # the common case, checked in C
        return dict(v)
    return {str(k): _go_string(x, f"{where}[{k}]") for k, x in v.items()}


def _go_string_list(v: Any, where: str) -> list[str] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        raise GoDecodeError(f"{where}: cannot unmarshal {_json_type(v)} into Go value of type []string")
    if all(map(isinstance, v, itertools.repeat(str))):  # the common case, checked in C: 10,000 names per answer
        return list(v)
    return [_go_string(x, f"{where}[{i}]") for i, x in enumerate(v)]


def _plain_priorities(data: list[Any]) -> list[HostPriority] | None:
    """A HostPriorityList whose every entry is exactly ``{"Host": string, "Score": int64}``, decoded in one pass;
    None when any entry is not (the checking decoder then says what and where)."""
    out = []
    for item in data:
        if type(item) is not dict or len(item) != 2:
            return None
        host, score = item.get("Host"), item.get("Score")
        if type(host) is not str or type(score) is not int or not -(2**63) <= score < 2**63:
            return None
        out.append(HostPriority(host, score))
    return out


def listed_twice(names: Iterable[str]) -> list[str]:
    """Names that occur more than once, sorted. One pass over a set: an answer naming 10,000 nodes is checked in
    linear time (``list.count`` per name took 1.1 s per check at 10,000 nodes)."""
    seen: set[str] = set()
    twice: set[str] = set()
    for name in names:
        (twice if name in seen else seen).add(name)
    return sorted(twice)


def _key_checks(keys: _Keys, body: str) -> list[Check]:
    out = []
    if keys.unknown:
        out.append(Check("json-keys", False,
                         f"unknown keys {', '.join(keys.unknown)}: kube-scheduler's decoder drops them (the protocol's "
                         "keys are the Go field names, e.g. NodeNames, FailedNodes, Host, Score)",
                         {"body": body[:EVIDENCE_BYTES]}))
    if keys.case:
        out.append(Check("json-keys-case", False,
                         f"keys spelt differently from the Go field names: {', '.join(keys.case)} (Go accepts them "
                         "case-insensitively; the protocol's spelling is exact)", {"body": body[:EVIDENCE_BYTES]}))
    if not out:
        out.append(Check("json-keys", True, "Go field names"))
    return out


def decode_filter(data: Any, sent: Sequence[str], node_cache_capable: bool, body: str
                  ) -> tuple[FilterResult | None, str | None, list[Check]]:
    """An ExtenderFilterResult as kube-scheduler reads it, with checks of its shape and content."""
    keys = _Keys()
    try:
        f = _fields(data, ("Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"),
                    "ExtenderFilterResult", keys)
        error = _go_string(f.get("Error"), "Error")
        names = _go_string_list(f.get("NodeNames"), "NodeNames")
        node_items: list[str] | None = None
        if f.get("Nodes") is not None:
            nl = f["Nodes"]
            if not isinstance(nl, dict):
                raise GoDecodeError(f"Nodes: cannot unmarshal {_json_type(nl)} into Go value of type v1.NodeList")
            items = nl.get("items") or []
            if not isinstance(items, list):
                raise GoDecodeError("Nodes.items: not an array")
            node_items = []
            for i, item in enumerate(items):
                meta = item.get("metadata") if isinstance(item, dict) else None
                if not isinstance(meta, dict):
                    raise GoDecodeError(f"Nodes.items[{i}]: not a Node object")
                node_items.append(_go_string(meta.get("name"), f"Nodes.items[{i}].metadata.name"))
        failed = _go_string_map(f.get("FailedNodes"), "FailedNodes")
        unresolvable = _go_string_map(f.get("FailedAndUnresolvableNodes"), "FailedAndUnresolvableNodes")
    except GoDecodeError as exc:
        return None, f"malformed ExtenderFilterResult: {exc}", [Check("shape", False, str(exc),
                                                                      {"body": body[:EVIDENCE_BYTES]})]
    checks = _key_checks(keys, body)
    checks.append(Check("shape", True, "ExtenderFilterResult"))
    if error:
        checks.append(Check("error-field", False, f"the extender answered with Error: {error}",
                            {"body": body[:EVIDENCE_BYTES]}))
        return None, f"extender error: {error}", checks
    # kube-scheduler: NodeNames when node-cache capable and present, else Nodes.items (matched to what it sent).
    returned = names if node_cache_capable and names is not None else node_items
    if node_cache_capable and names is None and node_items is not None:
        checks.append(Check("node-names", False, "nodeCacheCapable extender answered with Nodes, not NodeNames",
                            {"body": body[:EVIDENCE_BYTES]}))
    if not node_cache_capable and names is not None and node_items is None:
        checks.append(Check("node-names", False, "sent Node objects, answered with NodeNames only: kube-scheduler "
                                                 "reads Nodes and sees no node passing",
                            {"body": body[:EVIDENCE_BYTES]}))
    returned = returned or []
    sent_set = set(sent)
    unknown = sorted({n for n in returned if n not in sent_set}
                     | {n for n in (*failed, *unresolvable) if n not in sent_set})
    if unknown:
        checks.append(Check("known-nodes", False, f"nodes that were not sent: {', '.join(unknown[:10])}",
                            {"body": body[:EVIDENCE_BYTES]}))
    else:
        checks.append(Check("known-nodes", True, "only nodes that were sent"))
    dup = listed_twice(returned)
    both = sorted(set(returned) & (set(failed) | set(unresolvable)))
    if dup or both:
        checks.append(Check("consistent", False, f"nodes listed twice: {', '.join(dup)}; nodes both passed and "
                                                 f"failed: {', '.join(both)}", {"body": body[:EVIDENCE_BYTES]}))
    missing = sorted(sent_set - set(returned) - set(failed) - set(unresolvable))
    if missing:
        checks.append(Check("accounted", False, f"nodes neither passed nor failed with a reason: "
                                                f"{', '.join(missing[:10])}", {"body": body[:EVIDENCE_BYTES]}))
    else:
        checks.append(Check("accounted", True, "every node passed or failed with a reason"))
    passed = tuple(n for n in dict.fromkeys(returned) if n in sent_set)
    return FilterResult(passed, failed, unresolvable), None, checks


def decode_priorities(data: Any, sent: Sequence[str], body: str
                      ) -> tuple[tuple[HostPriority, ...] | None, str | None, list[Check]]:
    keys = _Keys()
    try:
        if data is None:
            data = []
        if not isinstance(data, list):
            raise GoDecodeError(f"cannot unmarshal {_json_type(data)} into Go value of type HostPriorityList")
        plain = _plain_priorities(data)
        out = plain if plain is not None else []
        for i, item in enumerate(data if plain is None else ()):
            f = _fields(item, ("Host", "Score"), f"HostPriorityList[{i}]", keys)
            out.append(HostPriority(_go_string(f.get("Host"), f"[{i}].Host"),
                                    _go_int64(f.get("Score"), f"[{i}].Score")))
    except GoDecodeError as exc:
        return None, f"malformed HostPriorityList: {exc}", [Check("shape", False, str(exc),
                                                                  {"body": body[:EVIDENCE_BYTES]})]
    checks = _key_checks(keys, body)
    checks.append(Check("shape", True, "HostPriorityList"))
    bad = [p for p in out if not 0 <= p.score <= MAX_EXTENDER_PRIORITY]
    checks.append(Check("score-range", not bad,
                        f"scores outside 0..{MAX_EXTENDER_PRIORITY}: "
                        + ", ".join(f"{p.host}={p.score}" for p in bad[:10]) if bad else "scores within 0..10",
                        {"body": body[:EVIDENCE_BYTES]} if bad else {}))
    sent_set = set(sent)
    unknown = sorted({p.host for p in out if p.host not in sent_set})
    dup = listed_twice(p.host for p in out)
    checks.append(Check("known-nodes", not unknown and not dup,
                        (f"hosts that were not sent: {', '.join(unknown[:10])}" if unknown else "")
                        + (f" hosts listed twice: {', '.join(dup)}" if dup else "")
                        if unknown or dup else "only nodes that were sent, once each",
                        {"body": body[:EVIDENCE_BYTES]} if unknown or dup else {}))
    return tuple(out), None, checks


def decode_bind(data: Any, body: str) -> tuple[str | None, str | None, list[Check]]:
    """The ExtenderBindingResult's Error ("" on success)."""
    keys = _Keys()
    try:
        f = _fields(data, ("Error",), "ExtenderBindingResult", keys)
        error = _go_string(f.get("Error"), "Error")
    except GoDecodeError as exc:
        return None, f"malformed ExtenderBindingResult: {exc}", [Check("shape", False, str(exc),
                                                                       {"body": body[:EVIDENCE_BYTES]})]
    checks = [*_key_checks(keys, body), Check("shape", True, "ExtenderBindingResult")]
    if error:
        return error, f"extender bind error: {error}", checks
    return error, None, checks


def decode_preempt(data: Any, offered: Mapping[str, Sequence[str]], body: str
                   ) -> tuple[PreemptResult | None, str | None, list[Check]]:
    keys = _Keys()
    try:
        f = _fields(data, ("NodeNameToMetaVictims",), "ExtenderPreemptionResult", keys)
        raw = f.get("NodeNameToMetaVictims")
        victims: dict[str, tuple[str, ...]] = {}
        if raw is not None:
            if not isinstance(raw, dict):
                raise GoDecodeError("NodeNameToMetaVictims: not an object")
            for node, mv in raw.items():
                g = _fields(mv, ("Pods", "NumPDBViolations"), f"MetaVictims[{node}]", keys)
                pods = g.get("Pods") or []
                if not isinstance(pods, list):
                    raise GoDecodeError(f"MetaVictims[{node}].Pods: not an array")
                uids = []
                for i, mp in enumerate(pods):
                    h = _fields(mp, ("UID",), f"MetaVictims[{node}].Pods[{i}]", keys)
                    uids.append(_go_string(h.get("UID"), f"MetaVictims[{node}].Pods[{i}].UID"))
                _go_int64(g.get("NumPDBViolations"), f"MetaVictims[{node}].NumPDBViolations")
                victims[str(node)] = tuple(uids)
    except GoDecodeError as exc:
        return None, f"malformed ExtenderPreemptionResult: {exc}", [Check("shape", False, str(exc),
                                                                          {"body": body[:EVIDENCE_BYTES]})]
    checks = [*_key_checks(keys, body), Check("shape", True, "ExtenderPreemptionResult")]
    unknown = sorted(n for n in victims if n not in offered)
    checks.append(Check("known-nodes", not unknown,
                        f"nodes that were not offered for preemption: {', '.join(unknown)}" if unknown
                        else "only offered nodes", {"body": body[:EVIDENCE_BYTES]} if unknown else {}))
    result = PreemptResult(victims)
    emptied = result.emptied(offered)
    checks.append(Check("victims-per-node", not emptied,
                        f"nodes offered victims and answered with none (kube-scheduler fails the preemption: "
                        f"expected at least one victim pod on node): {', '.join(emptied)}" if emptied
                        else "at least one victim on every node offered some", {"body": body[:EVIDENCE_BYTES]}
                        if emptied else {}))
    return result, None, checks


# --------------------------------------------------------------------------------------------------- client


WIRE_BUFFER = 4 * 2**20
"""Socket buffer for extender calls: a filter over 10,000 nodes is ~150-250 KB each way. With the default 16 KB
send buffer, a request or answer goes out in pieces, each waiting for the other process to be scheduled and read
one; on a loaded machine those waits, not the work, were much of the p99 at 10,000 nodes."""


def connect(conn: http.client.HTTPConnection) -> None:
    """Connect as kube-scheduler's Go client does: without Nagle's algorithm (Go's net package sets TCP_NODELAY on
    every TCP connection; http.client sends headers and body in two writes, and Nagle would hold the body's last
    segment back until the headers are acknowledged), and with buffers that hold one call's request or answer at
    once (capped by net.core.[rw]mem_max)."""
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        conn.sock.setsockopt(socket.SOL_SOCKET, opt, WIRE_BUFFER)


class ExtenderClient:
    """HTTP to one extender with kube-scheduler's rules: POST JSON, 200 only, a timeout per call.

    Keeps one keep-alive connection (as Go's client does) and opens a new one after any failure.
    """

    def __init__(self, config: ExtenderConfig):
        self.config = config
        url = urlsplit(config.url_prefix)
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or 80
        self._prefix = url.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def url(self, verb: str) -> str:
        return f"{self.config.url_prefix.rstrip('/')}/{verb}"

    def post(self, verb: str, payload: Any) -> tuple[int | None, str, float, str | None, bool]:
        """(status, body, elapsed, transport error, timed out)."""
        data = json.dumps(payload, separators=(",", ":")).encode()
        start = time.monotonic()
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.config.http_timeout)
            conn = self._conn
            try:
                if conn.sock is None:
                    connect(conn)
                conn.request("POST", f"{self._prefix}/{verb}", body=data,
                             headers={"Content-Type": "application/json", "Accept": "application/json"})
                resp = conn.getresponse()
                raw = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.close()
                return resp.status, raw.decode("utf-8", "replace"), time.monotonic() - start, None, False
            except TimeoutError:
                self.close()
                return None, "", time.monotonic() - start, (
                    f"timed out after {self.config.http_timeout:g} s (httpTimeout)"), True
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                # A kept-alive connection the server closed: retry once on a fresh one.
                self.close()
                if attempt == 0 and time.monotonic() - start < self.config.http_timeout:
                    continue
                return None, "", time.monotonic() - start, f"connection failed: {exc}", False
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                return None, "", time.monotonic() - start, f"connection failed: {exc}", False
        return None, "", time.monotonic() - start, "connection failed", False

    def _verb(self, verb: str, payload: Any, decode: Callable[[Any, str], tuple[T | None, str | None, list[Check]]]
              ) -> CallResult[T]:
        """POST ``payload`` to ``verb``; a 200 JSON answer is checked and decoded by ``decode(data, body)``."""
        status, body, elapsed, error, timed_out = self.post(verb, payload)
        checks: list[Check] = []
        value: T | None = None
        if error is not None:
            checks.append(Check("reachable", False, error, {"url": self.url(verb)}))
        elif status != 200:
            error = f"HTTP {status} from {self.url(verb)}"
            checks.append(Check("status", False, f"answered HTTP {status}; kube-scheduler accepts only 200",
                                {"status": status, "body": body[:EVIDENCE_BYTES]}))
        else:
            checks.append(Check("status", True, "HTTP 200"))
            try:
                data = json.loads(body)
            except json.JSONDecodeError as exc:
                error = f"the body is not JSON: {exc}"
                checks.append(Check("json", False, error, {"body": body[:EVIDENCE_BYTES]}))
            else:
                value, error, more = decode(data, body)
                checks += more
        return CallResult(verb, self.url(verb), status, body, elapsed, value, error, timed_out, tuple(checks))

    def filter(self, args: Mapping[str, Any], sent: Sequence[str]) -> CallResult[FilterResult]:
        cache = self.config.node_cache_capable
        return self._verb(self.config.filter_verb, args, lambda data, body: decode_filter(data, sent, cache, body))

    def prioritize(self, args: Mapping[str, Any], sent: Sequence[str]) -> CallResult[tuple[HostPriority, ...]]:
        return self._verb(self.config.prioritize_verb, args, lambda data, body: decode_priorities(data, sent, body))

    def bind(self, args: Mapping[str, Any]) -> CallResult[str]:
        return self._verb(self.config.bind_verb, args, decode_bind)

    def preempt(self, args: Mapping[str, Any], offered: Mapping[str, Sequence[str]]) -> CallResult[PreemptResult]:
        return self._verb(self.config.preempt_verb, args, lambda data, body: decode_preempt(data, offered, body))

    def raw(self, verb: str, body: bytes, content_type: str = "application/json") -> tuple[int | None, str]:
        """Send arbitrary bytes (for the suites' malformed-request checks); never raises."""
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self.config.http_timeout)
        try:
            conn.request("POST", f"{self._prefix}/{verb}", body=body, headers={"Content-Type": content_type})
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            return None, f"connection failed: {exc}"
        finally:
            conn.close()


# --------------------------------------------------------------------------------------------------- requests


def extender_args(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], node_cache_capable: bool
                  ) -> dict[str, Any]:
    """ExtenderArgs: the pod, and the candidate nodes as objects or (node-cache capable) names."""
    if node_cache_capable:
        return {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
    return {"Pod": pod, "Nodes": {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": list(nodes)},
            "NodeNames": None}


def binding_args(pod: Mapping[str, Any], node: str) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    return {"PodName": meta.get("name", ""), "PodNamespace": meta.get("namespace", "default"),
            "PodUID": meta.get("uid", ""), "Node": node}


def preemption_args(pod: Mapping[str, Any], victims: Mapping[str, Sequence[Mapping[str, Any]]],
                    node_cache_capable: bool) -> dict[str, Any]:
    if node_cache_capable:
        return {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": p["metadata"]["uid"]} for p in pods], "NumPDBViolations": 0}
            for node, pods in victims.items()}}
    return {"Pod": pod, "NodeNameToMetaVictims": None, "NodeNameToVictims": {
        node: {"Pods": list(pods), "NumPDBViolations": 0} for node, pods in victims.items()}}
