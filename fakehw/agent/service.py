"""The agent's core: runtime state of the nodes it serves, fault injection and healing, events, rendering.

:class:`AgentService` is thread-safe and has no HTTP in it; the control API (:mod:`fakehw.agent.server`) and
tests both drive it. Every change is journaled first, then applied, then the affected node is re-rendered
before the call returns, so when ``inject`` returns the node's files already show the fault.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fakehw.agent.faults import FAULT_ADAPTER, FAULT_KINDS, FaultBase, FaultTargetError, check_target
from fakehw.agent.journal import Journal
from fakehw.agent.mig import MigManager
from fakehw.agent.platform import Platform
from fakehw.agent.state import ActiveFault, Event, NodeState, derive_state, events_for
from fakehw.model.system import Node, System
from fakehw.render import RenderResult, render_node

log = logging.getLogger(__name__)
MAX_EVENTS = 10_000
MAX_ACTIVE_FAULTS = 100_000


class AgentError(Exception):
    """A request the agent refuses; ``status`` is the HTTP status the control API answers with."""

    def __init__(self, status: int, message: str, detail: Any = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail


def validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ".".join(str(x) for x in e["loc"]), "msg": e["msg"].removeprefix("Value error, ")}
        for e in exc.errors(include_url=False)
    ]


class AgentService:
    def __init__(
        self,
        system: System,
        state_dir: Path,
        nodes: Sequence[str] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.system = system
        self.state_dir = state_dir
        self._clock = clock
        served = list(nodes) if nodes else [n.name for n in system.nodes]
        unknown = [n for n in served if system.node(n) is None]
        if unknown:
            raise AgentError(404, f"profile {system.name} has no node(s) {', '.join(unknown)}")
        self._nodes: dict[str, Node] = {n: system.node(n) for n in served}  # type: ignore[misc]
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._faults: dict[str, ActiveFault] = {}
        self._events: deque[Event] = deque(maxlen=MAX_EVENTS)
        self._seq = 0
        self._fault_counter = 0
        self._generation: dict[str, int] = dict.fromkeys(self._nodes, 1)
        self._states: dict[str, NodeState] = {}
        self.journal = Journal(state_dir / "journal.jsonl")
        self._replay()
        self._compact()
        self.platform = Platform(system, self._nodes, state_dir, clock, self._lock, self._platform_changed)
        self.mig = MigManager(system, self._nodes, state_dir, self._lock, self._platform_changed)
        for name in self._nodes:
            self._render(name, initial=True)

    # ------------------------------------------------------------------------------------------ queries

    @property
    def node_names(self) -> list[str]:
        return list(self._nodes)

    def node(self, name: str) -> Node:
        node = self._nodes.get(name)
        if node is None:
            raise AgentError(404, f"unknown node {name!r} (nodes: {', '.join(self._nodes)})")
        return node

    def node_dir(self, name: str) -> Path:
        return self.state_dir / "nodes" / name

    def state(self, name: str) -> NodeState:
        self.node(name)
        with self._lock:
            return self._states[name]

    def faults(self, node: str | None = None) -> list[ActiveFault]:
        if node is not None:
            self.node(node)
        with self._lock:
            return [f for f in self._faults.values() if node is None or f.node == node]

    def fault(self, fault_id: str) -> ActiveFault:
        with self._lock:
            fault = self._faults.get(fault_id)
        if fault is None:
            raise AgentError(404, f"no active fault {fault_id!r}")
        return fault

    def events(self, since: int = 0, node: str | None = None, wait: float = 0.0, limit: int = 1000) -> list[Event]:
        """Events with ``seq > since``; with ``wait`` block up to that many seconds for the first one."""
        if node is not None:
            self.node(node)
        deadline = self._clock() + max(0.0, min(wait, 60.0))

        def pick() -> list[Event]:
            return [e for e in self._events if e.seq > since and (node is None or e.node == node)][:limit]

        with self._changed:
            found = pick()
            while not found and wait > 0:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
                found = pick()
            return found

    @property
    def last_seq(self) -> int:
        return self._seq

    # ------------------------------------------------------------------------------------------ changes

    def parse_fault(self, body: Any) -> FaultBase:
        if not isinstance(body, dict):
            raise AgentError(400, "a fault is a JSON object such as {\"kind\": \"xid\", \"device\": \"gpu0\", "
                             "\"code\": 79}")
        try:
            return FAULT_ADAPTER.validate_python(body)
        except ValidationError as exc:
            detail = validation_detail(exc)
            tag = f"{body.get('kind')}."
            for d in detail:  # drop the discriminated union's tag ("xid.code" -> "code")
                d["loc"] = d["loc"].removeprefix(tag)
            kind_problem = next((d for d in detail if d["loc"] in ("", "kind")), None)
            if kind_problem is not None or "kind" not in body:
                raise AgentError(422, f"unknown or missing fault kind {body.get('kind')!r} (kinds: "
                                 f"{', '.join(FAULT_KINDS)})", detail) from None
            raise AgentError(422, f"invalid {body.get('kind')} fault: " + "; ".join(
                f"{d['loc']}: {d['msg']}" for d in detail), detail) from None

    def inject(self, node_name: str, request: FaultBase | dict[str, Any]) -> ActiveFault:
        node = self.node(node_name)
        fault_req = request if isinstance(request, FaultBase) else self.parse_fault(request)
        try:
            check_target(fault_req, node)
        except FaultTargetError as exc:
            raise AgentError(exc.status, str(exc)) from None
        with self._lock:
            if len(self._faults) >= MAX_ACTIVE_FAULTS:
                raise AgentError(429, f"{MAX_ACTIVE_FAULTS} faults are active; heal some first")
            self._fault_counter += 1
            fault = ActiveFault(f"f-{self._fault_counter:06d}", node_name, fault_req, self._clock())
            generation = self._generation[node_name] + 1
            new_events = self._new_events(fault)
            self.journal.append({"op": "inject", "fault": fault.to_json(), "generation": generation,
                                 "events": [e.to_json() for e in new_events]})
            self._apply_inject(fault, generation, new_events)
            self._render(node_name)
            self._changed.notify_all()
            return fault

    def heal(
        self,
        fault_id: str | None = None,
        node: str | None = None,
        device: str | None = None,
        kind: str | None = None,
    ) -> list[ActiveFault]:
        """Heal one fault by id, or every fault matching node/device/kind. Returns what was healed."""
        if node is not None:
            self.node(node)
        with self._lock:
            if fault_id is not None:
                chosen = [self.fault(fault_id)]
            else:
                chosen = [
                    f for f in self._faults.values()
                    if (node is None or f.node == node)
                    and (device is None or f.request.device == device)
                    and (kind is None or f.request.kind == kind)  # type: ignore[attr-defined]
                ]
            touched = sorted({f.node for f in chosen})
            for name in touched:
                generation = self._generation[name] + 1
                ids = [f.id for f in chosen if f.node == name]
                self._seq += 1
                event = Event(self._seq, self._clock(), name, ",".join(sorted({self._faults[i].request.device
                                                                                 for i in ids})),
                              "heal", len(ids), 0, ",".join(ids))
                self.journal.append({"op": "heal", "node": name, "ids": ids, "generation": generation,
                                     "events": [event.to_json()]})
                for i in ids:
                    del self._faults[i]
                self._events.append(event)
                self._generation[name] = generation
                self._render(name)
            if touched:
                self._changed.notify_all()
            return chosen

    # ------------------------------------------------------------------------------------------ internals

    def _new_events(self, fault: ActiveFault) -> list[Event]:
        out = []
        for kind, data, nvml_type in events_for(fault):
            self._seq += 1
            out.append(Event(self._seq, fault.created, fault.node, fault.request.device, kind, data, nvml_type,
                             fault.id))
        return out

    def _apply_inject(self, fault: ActiveFault, generation: int, events: list[Event]) -> None:
        self._faults[fault.id] = fault
        self._events.extend(events)
        self._generation[fault.node] = generation

    def _render(self, name: str, initial: bool = False) -> RenderResult:
        node = self._nodes[name]
        faults = [f for f in self._faults.values() if f.node == name]
        state = derive_state(node, faults, self._generation[name], self.system.seed)
        state = dataclasses.replace(state, platform=self.platform.attach(name, state), mig=self.mig.attach(name, state))
        self._states[name] = state
        return render_node(self.system, node, state, self.node_dir(name), initial=initial,
                           events=self._recent_events(name))

    def _recent_events(self, name: str, limit: int = 256) -> tuple[Event, ...]:
        """The node's latest ``limit`` events, oldest first (newest are at the right of the deque)."""
        recent = list(itertools.islice((e for e in reversed(self._events) if e.node == name), limit))
        return tuple(reversed(recent))

    def _replay(self) -> None:
        for record in self.journal.replay():
            try:
                self._replay_record(record)
            except (KeyError, TypeError, ValueError, ValidationError, AgentError) as exc:
                log.warning("journal record %s not replayed: %s", record.get("op"), exc)

    def _replay_record(self, record: dict[str, Any]) -> None:
        op = record["op"]
        events = [Event(**e) for e in record.get("events", [])]
        for e in events:
            self._seq = max(self._seq, e.seq)
        node = record.get("node") or record.get("fault", {}).get("node")
        if op == "inject":
            raw = dict(record["fault"])
            fid, fnode, created = raw.pop("id"), raw.pop("node"), raw.pop("created")
            self._fault_counter = max(self._fault_counter, int(fid.split("-")[1]))
            if fnode not in self._nodes:
                return
            request = FAULT_ADAPTER.validate_python(raw)
            check_target(request, self._nodes[fnode])
            self._apply_inject(ActiveFault(fid, fnode, request, created), int(record["generation"]), events)
        elif op == "heal":
            if node not in self._nodes:
                return
            for fid in record["ids"]:
                self._faults.pop(fid, None)
            self._events.extend(events)
            self._generation[node] = int(record["generation"])
        elif op == "generation":
            for name, gen in record["generations"].items():
                if name in self._generation:
                    self._generation[name] = max(self._generation[name], int(gen))
            self._fault_counter = max(self._fault_counter, int(record.get("fault_counter", 0)))
            self._seq = max(self._seq, int(record.get("seq", 0)))
        else:
            log.warning("journal record with unknown op %r skipped", op)

    def _compact(self) -> None:
        """Rewrite the journal as: counters, then one inject per active fault (events kept only if recent)."""
        records: list[dict[str, Any]] = [{
            "op": "generation",
            "generations": {n: g + 1 for n, g in self._generation.items()},
            "fault_counter": self._fault_counter,
            "seq": self._seq,
        }]
        for n in self._generation:
            self._generation[n] += 1  # a restart is a change: consumers must re-read
        for f in self._faults.values():
            records.append({"op": "inject", "fault": f.to_json(), "generation": self._generation[f.node],
                            "events": []})
        self.journal.compact(records)

    def _platform_changed(self, nodes: Iterable[str]) -> None:
        """A CXL, memory-pool or MIG change (already journaled by its owner): new generation, re-render."""
        with self._lock:
            for name in nodes:
                if name in self._nodes:
                    self._generation[name] += 1
                    # so a restarted agent never hands out a generation a consumer has already seen
                    self.journal.append({"op": "generation", "generations": {name: self._generation[name]}})
                    self._render(name)
            self._changed.notify_all()

    def close(self) -> None:
        self.platform.close()
        self.mig.close()
        self.journal.close()
