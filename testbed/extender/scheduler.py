"""One kube-scheduler scheduling cycle, with extenders, over the harness's cluster store.

What kube-scheduler does and this reproduces (``pkg/scheduler/schedule_one.go``, ``extender.go``,
``framework/preemption``):

1. In-tree filters: the node is Ready, matches ``spec.nodeSelector``, and has room for the pod's
   ``nvidia.com/gpu`` (allocatable minus what pods bound there requested) and pod count.
2. Extender filters, in order, on the nodes still feasible. An error (transport, timeout, non-200, malformed
   body, ``Error`` set) fails the pod's scheduling unless the extender is ``ignorable``, in which case it is
   skipped.
3. If no node is left: preemption. Nodes the extenders failed as resolvable (``FailedNodes``, not
   ``FailedAndUnresolvableNodes``) or that lack only resources are candidates; victims are lower-priority pods
   there, fewest first; extenders with a preempt verb may trim or change the victims, or leave a node out (a
   node offered victims and answered with none fails the preemption, "expected at least one victim pod on
   node", unless the extender is ignorable: then the node is dropped). Victims are evicted and the pod is tried
   again.
4. Scores: in-tree plugins score every feasible node equally here (the suites' pods request only extended
   resources, which kube-scheduler's default scoring ignores); each extender's prioritize scores (0..10) are
   multiplied by its weight and by 10 (MaxNodeScore / MaxExtenderPriority). A prioritize error is ignored.
5. The node with the highest total wins. kube-scheduler picks randomly among ties; the decision keeps all of
   them (``top``) so the suites can require that *every* node the scheduler might pick is a right one, and
   binds the first by name so runs are reproducible.
6. Bind: by the extender with a bind verb if there is one, else by the harness itself (the kubelet then
   assigns the lowest free healthy GPU indices, as a device plugin without preferences would).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fakehw.views.k8s import GPU_RESOURCE, HOLD_GPUS, HOLD_KIND, NodeInfo, PodRequest, PodSpecError, parse_quantity
from testbed.extender.apiserver import ClusterStore
from testbed.extender.ledger import Ledger
from testbed.extender.protocol import (
    MAX_EXTENDER_PRIORITY,
    MAX_NODE_SCORE,
    CallResult,
    Check,
    ExtenderClient,
    binding_args,
    extender_args,
    preemption_args,
)

Status = Literal["bound", "unschedulable", "error"]
MAX_PODS = 110
MAX_CACHED_NODES = 100_000


@dataclass
class Decision:
    """The outcome of scheduling one pod, with every call made and every check recorded."""

    pod: str
    status: Status = "unschedulable"
    node: str | None = None
    feasible: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    scores: dict[str, int] = field(default_factory=dict)
    top: tuple[str, ...] = ()
    victims: tuple[str, ...] = ()
    calls: list[CallResult[Any]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    message: str = ""
    skipped_extenders: list[str] = field(default_factory=list)

    @property
    def failed_checks(self) -> list[Check]:
        out = [c for c in self.checks if not c.ok]
        for call in self.calls:
            out.extend(call.failed_checks)
        return out

    def evidence(self) -> dict[str, Any]:
        return {"pod": self.pod, "status": self.status, "node": self.node, "message": self.message,
                "feasible": list(self.feasible), "top": list(self.top), "scores": self.scores,
                "failed": self.failed, "unresolvable": self.unresolvable, "victims": list(self.victims),
                "failed_checks": [c.to_json() for c in self.failed_checks],
                "calls": [c.evidence() for c in self.calls]}


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the in-tree filters read of one Node version."""

    schedulable: bool
    """Ready and not cordoned."""
    gpus: int
    """Allocatable ``nvidia.com/gpu``."""

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeFacts:
        status = node.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        return cls(ready and not (node.get("spec") or {}).get("unschedulable"),
                   parse_quantity((status.get("allocatable") or {}).get(GPU_RESOURCE, 0)))


@dataclass
class Extender:
    """An extender as kube-scheduler is configured with it."""

    client: ExtenderClient

    @property
    def name(self) -> str:
        return self.client.config.url_prefix


class Scheduler:
    """kube-scheduler's cycle against ``store`` with ``extenders`` (in configuration order)."""

    def __init__(self, store: ClusterStore, extenders: Sequence[ExtenderClient] = (),
                 preemption: bool = True, on_call: Callable[[CallResult[Any]], None] | None = None):
        self.store = store
        self.extenders = [Extender(c) for c in extenders]
        binders = [e for e in self.extenders if e.client.config.bind_verb]
        if len(binders) > 1:
            raise ValueError("only one extender may bind (kube-scheduler refuses more)")
        self.binder = binders[0] if binders else None
        self.preemption = preemption
        self.on_call = on_call
        self._node_facts: dict[tuple[str, Any], NodeFacts] = {}

    def _record(self, decision: Decision, call: CallResult[Any]) -> None:
        decision.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)

    # ----------------------------------------------------------------------------------- cycle

    def schedule(self, key: str, allow_preemption: bool = True) -> Decision:
        decision = Decision(key)
        pod = self.store.pod(key)
        if pod is None:
            decision.status, decision.message = "error", f"no pod {key}"
            return decision
        if (pod.get("spec") or {}).get("nodeName"):
            decision.status, decision.node = "bound", pod["spec"]["nodeName"]
            decision.message = "already bound"
            return decision
        nodes = self.store.nodes()
        ledger = Ledger.from_pods(self.store.pods())
        feasible = self._in_tree_filter(pod, nodes, ledger, decision)
        by_name = {n["metadata"]["name"]: n for n in nodes}
        for ext in self.extenders:
            if not feasible:
                break
            cfg = ext.client.config
            if not cfg.filter_verb or not cfg.interested(pod):
                continue
            names = [n["metadata"]["name"] for n in feasible]
            call = ext.client.filter(extender_args(pod, feasible, cfg.node_cache_capable), names)
            self._record(decision, call)
            if not call.ok or call.value is None:
                if cfg.ignorable:
                    decision.skipped_extenders.append(ext.name)
                    continue
                decision.status = "error"
                decision.message = f"extender {ext.name} filter failed: {call.error}"
                return decision
            result = call.value
            decision.failed.update(result.failed)
            decision.unresolvable.update(result.unresolvable)
            feasible = [by_name[n] for n in result.passed]
        decision.feasible = tuple(n["metadata"]["name"] for n in feasible)
        if not feasible:
            decision.status = "unschedulable"
            decision.message = "0 nodes are available"
            if allow_preemption and self.preemption:
                victims = self._preempt(pod, nodes, ledger, decision)
                if victims:
                    retry = self.schedule(key, allow_preemption=False)
                    retry.victims = tuple(victims)
                    retry.calls[:0] = decision.calls
                    retry.checks[:0] = decision.checks
                    return retry
            return decision
        totals = {n["metadata"]["name"]: 0 for n in feasible}
        for ext in self.extenders:
            cfg = ext.client.config
            if not cfg.prioritize_verb or not cfg.interested(pod):
                continue
            names = list(totals)
            scored = ext.client.prioritize(extender_args(pod, feasible, cfg.node_cache_capable), names)
            self._record(decision, scored)
            if not scored.ok or scored.value is None:
                continue  # kube-scheduler ignores prioritize errors
            for hp in scored.value:
                if hp.host in totals:
                    totals[hp.host] += hp.score * cfg.weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
        decision.scores = totals
        best = max(totals.values())
        decision.top = tuple(sorted(n for n, s in totals.items() if s == best))
        node = decision.top[0]
        self._bind(pod, node, ledger, by_name[node], decision)
        return decision

    # ----------------------------------------------------------------------------------- in-tree

    def _in_tree_filter(self, pod: Mapping[str, Any], nodes: Sequence[dict[str, Any]], ledger: Ledger,
                        decision: Decision) -> list[dict[str, Any]]:
        try:
            request = PodRequest.from_pod(pod)
        except PodSpecError as exc:
            for n in nodes:
                decision.unresolvable[n["metadata"]["name"]] = f"pod spec: {exc}"
            return []
        out = []
        for n in nodes:
            name = n["metadata"]["name"]
            reason, resolvable = self._fits(request, n, ledger, set(), self._facts(n))
            if reason is None:
                out.append(n)
            elif resolvable:
                decision.failed[name] = reason
            else:
                decision.unresolvable[name] = reason
        return out

    def _facts(self, node: Mapping[str, Any]) -> NodeFacts:
        """What the in-tree filters read of a Node, worked out once per node version (not once per pod)."""
        meta = node["metadata"]
        key = (meta["name"], meta.get("resourceVersion"))
        facts = self._node_facts.get(key)
        if facts is None:
            if len(self._node_facts) > 4 * MAX_CACHED_NODES:
                self._node_facts.clear()
            facts = self._node_facts[key] = NodeFacts.of(node)
        return facts

    @staticmethod
    def _fits(request: PodRequest, node: Mapping[str, Any], ledger: Ledger, without: set[str],
              facts: NodeFacts | None = None) -> tuple[str | None, bool]:
        """None if the pod fits (ignoring pods in ``without``); else the reason and whether preemption may help."""
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        facts = facts or NodeFacts.of(node)
        if not facts.schedulable:
            return "node(s) were not ready or unschedulable", False
        for k, v in request.node_selector.items():
            if labels.get(k) != v:
                return "node(s) didn't match Pod's node affinity/selector", False
        on_node = [h for h in ledger.on_node(name) if h.key not in without]
        if len(on_node) + 1 > MAX_PODS:
            return "Too many pods", True
        if request.gpus:
            alloc = facts.gpus
            used = sum(h.request.gpus for h in on_node)
            if used + request.gpus > alloc:
                return f"Insufficient {GPU_RESOURCE}", True
        return None, True

    # ----------------------------------------------------------------------------------- preemption

    def _preempt(self, pod: Mapping[str, Any], nodes: Sequence[dict[str, Any]], ledger: Ledger,
                 decision: Decision) -> list[str]:
        try:
            request = PodRequest.from_pod(pod)
        except PodSpecError:
            return []
        candidates: dict[str, list[dict[str, Any]]] = {}
        pods_by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in self.store.pods()}
        for n in nodes:
            name = n["metadata"]["name"]
            if name in decision.unresolvable:
                continue
            lower = sorted((h for h in ledger.on_node(name) if h.request.priority < request.priority),
                           key=lambda h: (-h.request.priority, h.key))
            removed = {h.key for h in lower}
            if self._fits(request, n, ledger, removed)[0] is not None:
                continue
            victims = []
            for h in lower:  # reprieve the most important first, keep as victims only what must go
                removed.discard(h.key)
                if self._fits(request, n, ledger, removed)[0] is not None:
                    removed.add(h.key)
                    victims.append(h.key)
            candidates[name] = [pods_by_key[k] for k in victims if k in pods_by_key]
        if not candidates:
            return []
        prio = {h.uid: h.request.priority for h in ledger.holds}
        node_of = {h.uid: h.node for h in ledger.holds}
        key_of = {h.uid: h.key for h in ledger.holds}
        for ext in self.extenders:
            cfg = ext.client.config
            if not cfg.preempt_verb or not cfg.interested(pod) or not candidates:
                continue
            offered = {n: [p["metadata"]["uid"] for p in ps] for n, ps in candidates.items()}
            call = ext.client.preempt(preemption_args(pod, candidates, cfg.node_cache_capable), offered)
            self._record(decision, call)
            if not call.ok or call.value is None:
                if cfg.ignorable:
                    continue
                return []
            trimmed: dict[str, list[dict[str, Any]]] = {}
            emptied = set(call.value.emptied(offered))
            for node, uids in call.value.victims.items():
                if node not in candidates:
                    continue
                if node in emptied:
                    if cfg.ignorable:
                        continue
                    return []
                chosen = []
                for uid in uids:
                    if node_of.get(uid) != node or prio.get(uid, 0) >= request.priority:
                        decision.checks.append(Check(
                            "preempt-victims", False,
                            f"victim {uid} is not a lower-priority pod on {node}", {"node": node, "uid": uid}))
                        continue
                    chosen.append(pods_by_key[key_of[uid]])
                trimmed[node] = chosen
            candidates = trimmed
        viable = {n: ps for n, ps in candidates.items() if ps}
        if not viable:
            return []
        node = min(viable, key=lambda n: (max(int((p.get("spec") or {}).get("priority") or 0) for p in viable[n]),
                                          len(viable[n]), n))
        evicted = []
        for p in viable[node]:
            key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            if self.store.delete_pod(key, reason=f"preempted by {decision.pod}") is not None:
                evicted.append(key)
        decision.message = f"preempted {len(evicted)} pod(s) on {node}"
        return evicted

    # ----------------------------------------------------------------------------------- bind

    def _bind(self, pod: Mapping[str, Any], node: str, ledger: Ledger, node_obj: Mapping[str, Any],
              decision: Decision) -> None:
        key = decision.pod
        if self.binder is not None and self.binder.client.config.interested(pod):
            call = self.binder.client.bind(binding_args(pod, node))
            self._record(decision, call)
            after = self.store.pod(key)
            bound_to = (after or {}).get("spec", {}).get("nodeName")
            if not call.ok:
                decision.status = "error"
                decision.message = f"extender bind failed: {call.error}"
                if bound_to:
                    decision.checks.append(Check("bind-effect", False, f"bind answered an error but the pod is "
                                                 f"bound to {bound_to}", {"pod": key}))
                return
            if bound_to != node:
                decision.status = "error"
                decision.message = f"bind answered success but the pod is bound to {bound_to!r}, not {node}"
                decision.checks.append(Check("bind-effect", False, decision.message, {"pod": key}))
                return
            decision.checks.append(Check("bind-effect", True, f"pod bound to {node}"))
            decision.status, decision.node = "bound", node
            return
        annotations = self._kubelet_assignment(pod, node, ledger, node_obj)
        outcome = self.store.bind(pod["metadata"]["namespace"], pod["metadata"]["name"], node, annotations)
        if outcome.code >= 400:
            decision.status, decision.message = "error", outcome.message
            return
        decision.status, decision.node = "bound", node

    @staticmethod
    def _kubelet_assignment(pod: Mapping[str, Any], node: str, ledger: Ledger, node_obj: Mapping[str, Any]
                            ) -> dict[str, str]:
        """What the kubelet and a preference-less device plugin would give: the lowest free healthy GPUs."""
        try:
            request = PodRequest.from_pod(pod)
            info = NodeInfo.from_object(node_obj)
        except (PodSpecError, ValueError, KeyError, TypeError):
            return {}
        held = set(ledger.gpu_holders(node))
        free = [i for i in info.healthy_gpus if i not in held]
        return {HOLD_GPUS: ",".join(str(i) for i in free[: request.gpus]), HOLD_KIND: "burst"}
