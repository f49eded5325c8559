"""The agent's core: runtime state of the nodes it serves, fault injection and healing, events, rendering.

:class:`AgentService` is thread-safe and has no HTTP in it; the control API (:mod:`fakehw.agent.server`) and
tests both drive it. A change is decided under the issue lock (ids, generation and event numbers are handed out
then; a heal also holds the agent's lock, as it chooses among the applied faults), written to the journal, made
durable together with the changes of other requests running at the same time (group commit: one fsync for all of
them, outside any lock), and only then applied and rendered, in journal order, under the agent's lock. A render in
progress holds only the agent's lock, so the changes arriving meanwhile are journaled and synced, and the next
holder applies all of them and renders each node they touched once (one render per node and batch). So when
``inject`` returns, the change is on disk and the node's files show it; when it fails with a 5xx, nothing was
applied, also after a restart; and nobody ever reads a change that might still be lost, or one the files do not
show yet (applying and rendering happen in one hold of the agent's lock, which every reader takes).

The state directory is trusted only when this user owns it (:mod:`fakehw.agent.trust`) and held by one agent at
a time (:class:`~fakehw.agent.statedir.StateDirLock`). When the disk fills after a change was journaled, the
agent releases a reserve of space to finish rendering it and refuses further changes (507) until there is room
(:class:`~fakehw.agent.statedir.DiskReserve`).

Other modules with state of their own (the platform, MIG, CXL writes) keep their own :class:`Journal` and follow
the same order under :attr:`AgentService.lock`: check, ``journal.append`` (durable; a
:class:`~fakehw.agent.journal.JournalWriteError` means nothing happened and is answered 507), apply, then
:meth:`AgentService.nodes_changed` to re-render.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fakehw.agent.faults import (
    FAULT_ADAPTER,
    FAULT_KINDS,
    FaultBase,
    FaultTargetError,
    check_target,
    with_device_defaults,
)
from fakehw.agent.idempotency import Answer, IdempotencyCache
from fakehw.agent.journal import Journal, JournalWriteError
from fakehw.agent.mig import MigManager
from fakehw.agent.platform import Platform
from fakehw.agent.state import ActiveFault, Event, NodeFaults, NodeState, derive_state, events_for
from fakehw.agent.statedir import DISK_FULL_ERRNOS, DiskReserve, StateDirLock, is_disk_full
from fakehw.agent.trust import private_dir
from fakehw.model.system import Node, System
from fakehw.render import RenderMemo, RenderResult, render_node
from fakehw.render.atomic import Releaser

log = logging.getLogger(__name__)
MAX_EVENTS = 10_000
FILES = ("all", "on-demand")
"""Which nodes' files the agent makes: every node's at start, or a node's when asked (:meth:`AgentService.render`)."""
RECENT_EVENTS = 256
"""Events kept per node for its snapshot (the snapshot's event ring holds as many)."""
MAX_ACTIVE_FAULTS = 100_000
RELEASE_WAKE_AT = 8
"""Replaced files waiting to be closed before the releaser's own thread is woken (changes no request follows, or
an agent driven in process): few, since their old content stays in memory until then. Measured in process
(gb200-nvl72, min of 20 batches of 100 Xids): 8 cost 4-8 % less CPU per injection than a wake per render, 64
cost 5-25 % more (the held files' pages are not reused while they are warm)."""
MAX_ANSWERS_KEPT = 1024
"""Journaled idempotency answers carried over by compaction."""
COMPACT_EVERY = 20_000
"""Records a running agent appends to its fault journal before compacting it (at least; see
:meth:`AgentService._compact_if_due`), and to its platform (pools, CXL) and MIG journals before compacting those
(:class:`~fakehw.agent.journal.SnapshotCompaction`). Without it a long chaos run grew the journals without bound,
and the next start read all of them into memory first."""

Idempotency = tuple[str, str]
"""(key, request fingerprint) of a request that carried an ``Idempotency-Key``."""


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


@dataclass
class _Pending:
    """A change written to the journal, waiting for its fsync to be applied."""

    ticket: int
    apply: Callable[[], Iterable[str]]
    """Apply the change in memory; returns the nodes to re-render."""
    settle: Callable[[], None]
    """Called once the change is applied or has failed (bookkeeping of what is in flight)."""
    error: JournalWriteError | None = None
    done: bool = False
    """Applied (or failed) and its nodes rendered: its request may answer."""


class AgentService:
    def __init__(
        self,
        system: System,
        state_dir: Path,
        nodes: Sequence[str] | None = None,
        clock: Callable[[], float] = time.time,
        salvage: bool = False,
        files: str = "all",
        progress: Callable[..., None] | None = None,
        compact_every: int = COMPACT_EVERY,
    ):
        if files not in FILES:
            raise ValueError(f"files must be one of {', '.join(FILES)}, not {files!r}")
        self.system = system
        self.state_dir = state_dir
        self._clock = clock
        served = list(nodes) if nodes else [n.name for n in system.nodes]
        unknown = [n for n in served if system.node(n) is None]
        if unknown:
            raise AgentError(404, f"profile {system.name} has no node(s) {', '.join(unknown)}")
        self._nodes: dict[str, Node] = {n: system.node(n) for n in served}  # type: ignore[misc]
        self._node_dirs = {n: state_dir / "nodes" / n for n in served}
        self.lock = threading.RLock()
        """The agent's lock: every change to the applied state (what readers see) and every render happen under
        it."""
        self._changed = threading.Condition(self.lock)
        self._issue = threading.Lock()
        """Issuing a fault change: ids, generations, event numbers, its journal record and its place in the queue
        (``_pending``). An inject takes only this lock, so it is journaled and synced while another request renders
        under :attr:`lock`; the next render then carries every change made durable meanwhile (one render per node
        and batch, not per request). Whoever needs both takes :attr:`lock` first."""
        self._drained = threading.Condition(self._issue)
        """Notified when a due compaction was made or failed (see :meth:`_wait_for_compaction`)."""
        # Applied (what readers see):
        self._faults: dict[str, ActiveFault] = {}
        self._node_faults: dict[str, NodeFaults] = {n: NodeFaults() for n in self._nodes}
        """The active faults of each node, in injection order and by device (a render walks neither the fleet's
        faults nor all of its node's)."""
        self._events: deque[Event] = deque(maxlen=MAX_EVENTS)
        self._node_events: dict[str, deque[Event]] = {}
        """Each node's latest events (what its snapshot's event ring carries)."""
        self._release = Releaser(wake_at=RELEASE_WAKE_AT)
        """Closes replaced files off the request path (see :class:`~fakehw.render.atomic.Releaser`): on the thread
        of a request once it is answered (:meth:`answered`), or on its own thread when many wait."""
        self._memos: dict[str, RenderMemo] = {}
        """Per node: what its renderers remember, so a re-render repeats only what a change needs."""
        self._gpu_memos: dict[str, dict[str, Any]] = {}
        """Per node: GPU states by the faults they were derived from (see :func:`derive_state`)."""
        self._seq = 0
        self._generation: dict[str, int] = dict.fromkeys(self._nodes, 1)
        self._states: dict[str, NodeState] = {}
        self.files = files
        self._rendered: set[str] = set()
        """Nodes whose files exist and are kept current (all of them unless ``files`` is "on-demand")."""
        self._stale: dict[str, str] = {}
        """Nodes whose files are behind (a render failed) and why; rendered again on the next change."""
        self._disk_error: str | None = None
        """The last change refused because the disk was full (cleared by the next change that succeeds)."""
        self._work = {"changes_applied": 0, "node_updates": 0}
        """Fault changes applied since the start and node updates (a render, or a state derived for a node without
        files) they took: changes made durable while another batch held the lock are applied together and each node
        they touched is updated once, so the ratio says how much batching saved (health reports both)."""
        # Handed out (ahead of the applied state while changes wait for their fsync; under ``_issue``):
        self._fault_counter = 0
        self._issued_seq = 0
        self._issued_generation: dict[str, int] = dict.fromkeys(self._nodes, 1)
        self._pending: deque[_Pending] = deque()
        self._pending_injects = 0
        self._healing: set[str] = set()
        if compact_every < 1:
            raise ValueError(f"compact_every must be at least 1, not {compact_every}")
        self._compact_every = compact_every
        self._compact_at = 0
        """The journal's record count at which the running agent compacts it next."""
        self.idempotency = IdempotencyCache(clock)
        self.reserve: DiskReserve | None = None
        step = progress or (lambda *_a, **_k: None)
        private_dir(state_dir)
        self._dir_lock = StateDirLock(state_dir)
        try:
            step("replaying journals")
            self.journal = Journal(state_dir / "journal.jsonl", salvage)
            self._replay()
            self._compact()
            self.platform = Platform(system, self._nodes, state_dir, clock, self.lock, self.nodes_changed,
                                     salvage=salvage, compact_after=compact_every)
            self.mig = MigManager(system, self._nodes, state_dir, self.lock, self.nodes_changed, salvage=salvage,
                                  compact_after=compact_every)
            self._start(step)
            self.reserve = DiskReserve(state_dir)
        except BaseException:
            self.close()
            raise

    def _start(self, step: Callable[..., None]) -> None:
        """Derive the state of the nodes that differ from their boot state and render the nodes whose files must
        exist: all of them, or (on demand) those rendered before this start, whose readers may still be there."""
        changed = [n for n in self._nodes if self._node_faults[n] or self._nodes[n].memory_pools
                   or self._nodes[n].cxl.memdevs]
        for i, name in enumerate(changed):
            step("deriving node states", i, len(changed))
            self._derive(name)
        if self.files == "all":
            wanted = list(self._nodes)
        else:
            base = self.state_dir / "nodes"
            wanted = [n for n in self._nodes if (base / n).is_dir()]
        for i, name in enumerate(wanted):
            step("rendering nodes", i, len(wanted))
            self._render(name, initial=True)
            self._rendered.add(name)
        self.platform.started.set()
        step("serving", len(wanted), len(wanted))

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
        known = self._node_dirs.get(name)  # made once per node: a path join was 1 % of an injection's CPU
        return known if known is not None else self.state_dir / "nodes" / name

    def state(self, name: str) -> NodeState:
        self.node(name)
        with self.lock:
            state = self._states.get(name)
            return state if state is not None else self._derive(name)

    def rendered(self, name: str) -> bool:
        """Whether the node's files exist and are kept current."""
        return name in self._rendered

    def render(self, names: Iterable[str]) -> list[Path]:
        """Make the files of ``names`` (the nodes' directories) and keep them current from now on. Costs what the
        node's tree costs once (static parts are hard links to one copy per node template); nodes already rendered
        cost nothing. What a consumer that reads a node's files (not the API) must call first when the agent runs
        with ``files="on-demand"``."""
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            self.node(name)
        with self.lock:
            for name in wanted:
                if name in self._rendered:
                    continue
                self.check_writable()
                self._render_safely(name, initial=True)
                if name in self._stale:
                    raise AgentError(507, f"cannot render {name}: {self._stale[name]}")
                self._rendered.add(name)
        return [self.node_dir(n) for n in wanted]

    def faults(self, node: str | None = None) -> list[ActiveFault]:
        if node is not None:
            self.node(node)
        with self.lock:
            return [f for f in self._faults.values() if node is None or f.node == node]

    def fault(self, fault_id: str) -> ActiveFault:
        with self.lock:
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

    def health(self) -> dict[str, Any]:
        """What ``GET /v1/health`` adds about the agent's own condition: journal recovery, disk, stale nodes, and
        the work done since the start (fault changes applied, node updates they took)."""
        with self.lock:
            journals = {"faults": self.journal.recovery.to_json(),
                        "platform": self.platform.journal.recovery.to_json()}
            full = (self.reserve.released if self.reserve else None) or self._disk_error
            return {"journals": journals, "disk_full": full, "stale_nodes": dict(self._stale), "work": dict(self._work)}

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

    def inject(self, node_name: str, request: FaultBase | dict[str, Any],
               idempotency: Idempotency | None = None) -> ActiveFault:
        node = self.node(node_name)
        fault_req = request if isinstance(request, FaultBase) else self.parse_fault(request)
        try:
            check_target(fault_req, node)
        except FaultTargetError as exc:
            raise AgentError(exc.status, str(exc)) from None
        fault_req = with_device_defaults(fault_req, node)
        self.check_writable()  # takes the agent's lock, and so comes before the issue lock (the lock order)
        with self._issue:
            self._wait_for_compaction()
            if len(self._faults) + self._pending_injects >= MAX_ACTIVE_FAULTS:
                raise AgentError(429, f"{MAX_ACTIVE_FAULTS} faults are active; heal some first")
            fault = ActiveFault(self._next_fault_id(), node_name, fault_req, self._clock())
            generation = self._next_generation(node_name)
            new_events = self._new_events(fault)
            record: dict[str, Any] = {"op": "inject", "fault": fault.to_json(), "generation": generation,
                                      "events": [e.to_json() for e in new_events]}
            _tag(record, idempotency)

            def apply() -> list[str]:
                self._apply_inject(fault, generation, new_events)
                self._remember(idempotency, 201, fault.to_json())
                return [node_name]

            def settle() -> None:
                self._pending_injects -= 1

            self._pending_injects += 1
            pending = self._submit(record, apply, settle)
        self._finish(pending)
        return fault

    def heal(
        self,
        fault_id: str | None = None,
        node: str | None = None,
        device: str | None = None,
        kind: str | None = None,
        idempotency: Idempotency | None = None,
    ) -> list[ActiveFault]:
        """Heal one fault by id, or every fault matching node/device/kind. Returns what was healed."""
        if node is not None:
            self.node(node)
        self.check_writable()
        with self._issue:
            self._wait_for_compaction()  # not under the agent's lock: the queue drains under it
        with self.lock, self._issue:  # it chooses among the applied faults and issues a change
            if fault_id is not None:
                if fault_id in self._healing:
                    raise AgentError(404, f"no active fault {fault_id!r} (it is being healed)")
                chosen = [self.fault(fault_id)]
            else:
                chosen = [
                    f for f in self._faults.values()
                    if f.id not in self._healing
                    and (node is None or f.node == node)
                    and (device is None or f.request.device == device)
                    and (kind is None or f.request.kind == kind)  # type: ignore[attr-defined]
                ]
            if not chosen:
                self._remember(idempotency, 200, {"healed": []})
                return []
            per_node: dict[str, dict[str, Any]] = {}
            events = []
            for name in sorted({f.node for f in chosen}):
                ids = [f.id for f in chosen if f.node == name]
                devices = ",".join(sorted({f.request.device for f in chosen if f.node == name}))
                self._issued_seq += 1
                events.append(Event(self._issued_seq, self._clock(), name, devices, "heal", len(ids), 0,
                                    ",".join(ids)))
                per_node[name] = {"ids": ids, "generation": self._next_generation(name)}
            self._reserve("event-seq", self._issued_seq)
            record: dict[str, Any] = {"op": "heal", "nodes": per_node, "events": [e.to_json() for e in events]}
            _tag(record, idempotency)
            healing = {f.id for f in chosen}
            self._healing |= healing

            def apply() -> list[str]:
                self._remember(idempotency, 200, {"healed": [f.to_json() for f in chosen]})
                self._apply_heal(per_node, events)
                return list(per_node)

            def settle() -> None:
                self._healing -= healing

            pending = self._submit(record, apply, settle)
        self._finish(pending)
        return chosen

    def nodes_changed(self, nodes: Iterable[str]) -> None:
        """Another module changed these nodes (already journaled and applied): new generation, re-render."""
        with self.lock:
            for name in nodes:
                if name in self._nodes:
                    with self._issue:
                        self._generation[name] = self._next_generation(name, strict=False)
                    self._update(name)
            self._changed.notify_all()

    def check_writable(self) -> None:
        """Refuse a change (507, nothing applied) while the disk is full, before anything is journaled."""
        reserve = self.reserve
        if reserve is None or reserve.released is None:
            return
        with self.lock:
            if reserve.make():
                log.warning("there is room in %s again: changes are accepted", self.state_dir)
                for name in list(self._stale):
                    self._render_safely(name)
                return
            raise AgentError(507, f"not applied: the disk of {self.state_dir} is full ({reserve.released}); "
                             f"free some space there, changes are accepted again once the agent can set aside its "
                             f"{reserve.size >> 20} MiB reserve")

    # ------------------------------------------------------------------------------------------ commit

    def _submit(self, record: dict[str, Any], apply: Callable[[], Iterable[str]],
                settle: Callable[[], None]) -> _Pending:
        """Under the lock: write ``record`` (not yet durable) and queue its change."""
        try:
            ticket = self.journal.write(record)
        except JournalWriteError as exc:
            settle()
            self._note_failure(exc)
            raise AgentError(507, f"not applied: {exc}") from None
        pending = _Pending(ticket, apply, settle)
        self._pending.append(pending)
        return pending

    def _finish(self, pending: _Pending) -> None:
        """Wait (without a lock) until the change is durable, then apply every change that is, in order, and render
        their nodes; or return at once if a request that got the agent's lock first did that for this change (while
        a render holds the lock, others are journaled and synced, and the next render carries all of them)."""
        with contextlib.suppress(JournalWriteError):  # the queue below learns it from the journal, in order
            self.journal.wait(pending.ticket)
        with self.lock:
            if not pending.done:
                self._apply_ready()
            if pending.error is not None:
                self._note_failure(pending.error)
                raise AgentError(507, f"not applied: {pending.error}")
            self._disk_error = None

    def _apply_ready(self) -> None:
        """Under the agent's lock: apply every queued change that is durable, in journal order, then render each
        node they touched once (applying and rendering in one hold of the lock: readers never see a change the
        files do not show yet)."""
        touched: set[str] = set()
        applied: list[_Pending] = []
        with self._issue:
            while self._pending:
                pending = self._pending[0]
                settled, error = self.journal.settled(pending.ticket)
                if not settled:
                    break
                self._pending.popleft()
                applied.append(pending)
                if error is not None:
                    pending.error = error
                else:
                    touched.update(pending.apply())
                pending.settle()
        for name in sorted(touched | set(self._stale)):
            self._update(name)
        self._work["changes_applied"] += len(applied)
        self._work["node_updates"] += len(touched)
        for pending in applied:  # only now: its request may answer
            pending.done = True
        if touched:
            self._changed.notify_all()
        self._compact_if_due()

    def _note_failure(self, error: JournalWriteError) -> None:
        if error.errno in DISK_FULL_ERRNOS:
            self._disk_error = str(error)

    def _next_fault_id(self) -> str:
        self._reserve("fault-id", self._fault_counter + 1)
        self._fault_counter += 1
        return f"f-{self._fault_counter:06d}"

    def _next_generation(self, name: str, strict: bool = True) -> int:
        generation = self._issued_generation[name] + 1
        try:
            self._reserve("generation", generation)
        except AgentError:
            if strict:
                raise
            log.warning("generation %d of %s handed out without a reservation (disk full)", generation, name)
        self._issued_generation[name] = generation
        return generation

    def _reserve(self, counter: str, value: int) -> None:
        try:
            self.journal.reserve(counter, value)
        except JournalWriteError as exc:
            self._note_failure(exc)
            raise AgentError(507, f"not applied: {exc}") from None

    def _new_events(self, fault: ActiveFault) -> list[Event]:
        out = []
        for kind, data, nvml_type in events_for(fault):
            self._issued_seq += 1
            out.append(Event(self._issued_seq, fault.created, fault.node, fault.request.device, kind, data,
                             nvml_type, fault.id))
        self._reserve("event-seq", self._issued_seq)
        return out

    def _remember(self, idempotency: Idempotency | None, status: int, payload: Any) -> None:
        if idempotency is not None:
            key, fp = idempotency
            self.idempotency.remember(key, Answer(fp, status, payload, self._clock(), durable=True))

    def _apply_inject(self, fault: ActiveFault, generation: int, events: list[Event]) -> None:
        self._faults[fault.id] = fault
        self._node_faults[fault.node].add(fault)
        self._add_events(events)
        self._generation[fault.node] = max(self._generation[fault.node], generation)

    def _apply_heal(self, per_node: dict[str, dict[str, Any]], events: list[Event]) -> None:
        for name, change in per_node.items():
            for fid in change["ids"]:
                self._faults.pop(fid, None)
                self._node_faults[name].remove(fid)
            self._generation[name] = max(self._generation[name], int(change["generation"]))
        self._add_events(events)

    def _add_events(self, events: Iterable[Event]) -> None:
        for e in events:
            self._events.append(e)
            recent = self._node_events.get(e.node)
            if recent is None:
                recent = self._node_events[e.node] = deque(maxlen=RECENT_EVENTS)
            recent.append(e)
            self._seq = max(self._seq, e.seq)

    # ------------------------------------------------------------------------------------------ rendering

    def _state_now(self, name: str) -> NodeState:
        """The node's state from its faults, platform and MIG now (neither remembered nor rendered)."""
        state = derive_state(self._nodes[name], self._node_faults[name], self._generation[name], self.system.seed,
                             memo=self._gpu_memos.setdefault(name, {}))
        return state.with_views(self.platform.attach(name, state), self.mig.attach(name, state))

    def _derive(self, name: str) -> NodeState:
        """The node's state now, remembered for the API; files are not touched."""
        state = self._states[name] = self._state_now(name)
        return state

    def _update(self, name: str) -> None:
        """After a change of ``name``: render it if its files are kept, else only derive its state."""
        if name in self._rendered:
            self._render_safely(name)
        else:
            self._derive(name)

    def _render(self, name: str, initial: bool = False) -> RenderResult:
        node = self._nodes[name]
        state = self._state_now(name)
        memo = self._memos.get(name)
        if memo is None:
            memo = self._memos[name] = RenderMemo()
        result = render_node(self.system, node, state, self.node_dir(name), initial=initial,
                             events=self._recent_events(name), memo=memo, release=self._release)
        self._states[name] = state  # only now: the API never reports what the files do not show yet
        return result

    def _render_safely(self, name: str, initial: bool = False) -> None:
        """Render a node whose change is already durable: if the disk is full, release the reserve and try again;
        if that fails too, the node is marked stale (reported by health) and rendered on the next change."""
        for attempt in (1, 2):
            try:
                self._render(name, initial=initial)
            except OSError as exc:
                if attempt == 1 and is_disk_full(exc) and self.reserve and self.reserve.released is None:
                    self.reserve.release(f"rendering {name}: {exc.strerror}")
                    continue
                self._stale[name] = f"files behind the journal since rendering failed: {exc}"
                log.error("cannot render %s: %s (rendered again on the next change)", name, exc)
                return
            self._stale.pop(name, None)
            return

    def _recent_events(self, name: str) -> tuple[Event, ...]:
        """The node's latest events, oldest first."""
        return tuple(self._node_events.get(name, ()))

    # ------------------------------------------------------------------------------------------ replay

    def _replay(self) -> None:
        for record in self.journal.replay():
            try:
                self._replay_record(record)
            except (KeyError, TypeError, ValueError, ValidationError, AgentError) as exc:
                log.warning("journal record %s not replayed: %s", record.get("op"), exc)
        if self.journal.recovery.problems:  # ids handed out before may be missing from what was recovered
            self._fault_counter = max(self._fault_counter, self.journal.floor("fault-id"))
            self._seq = max(self._seq, self.journal.floor("event-seq"))
        # Generations also move with CXL, pool and MIG changes, which other journals hold: resume above the
        # reservation, which covers every generation handed out (a restart may skip ahead).
        floor = self.journal.floor("generation")
        for name in self._generation:
            self._generation[name] = max(self._generation[name], floor) + 1  # a restart is a change: re-read
        self._issued_seq = self._seq
        self._issued_generation = dict(self._generation)

    def _replay_record(self, record: dict[str, Any]) -> None:
        op = record["op"]
        events = [Event(**e) for e in record.get("events", [])]
        for e in events:
            self._seq = max(self._seq, e.seq)
        if op == "inject":
            raw = dict(record["fault"])
            fid, fnode, created = raw.pop("id"), raw.pop("node"), raw.pop("created")
            self._fault_counter = max(self._fault_counter, int(fid.split("-")[1]))
            if fnode not in self._nodes:
                return
            request = FAULT_ADAPTER.validate_python(raw)
            check_target(request, self._nodes[fnode])
            fault = ActiveFault(fid, fnode, request, created)
            self._apply_inject(fault, int(record["generation"]), events)
            self._replay_answer(record, 201, fault.to_json())
        elif op == "heal":
            per_node = record["nodes"] if "nodes" in record else \
                {record["node"]: {"ids": record["ids"], "generation": record["generation"]}}  # before 2026-11
            per_node = {n: c for n, c in per_node.items() if n in self._nodes}
            healed = [self._faults[i].to_json() for c in per_node.values() for i in c["ids"] if i in self._faults]
            self._replay_answer(record, 200, {"healed": healed})
            self._apply_heal(per_node, [e for e in events if e.node in self._nodes])
        elif op in ("counters", "generation"):
            for name, gen in record["generations"].items():
                if name in self._generation:
                    self._generation[name] = max(self._generation[name], int(gen))
            self._fault_counter = max(self._fault_counter, int(record.get("fault_counter", 0)))
            self._seq = max(self._seq, int(record.get("seq", 0)))
        elif op == "answers":
            for entry in record["entries"]:
                self.idempotency.remember(str(entry["key"]), Answer(str(entry["fp"]), int(entry["status"]),
                                                                   entry["payload"], float(entry["time"]), True))
        else:
            log.warning("journal record with unknown op %r skipped", op)

    def _replay_answer(self, record: dict[str, Any], status: int, payload: Any) -> None:
        if isinstance(record.get("key"), str) and isinstance(record.get("fp"), str):
            self.idempotency.remember(record["key"], Answer(record["fp"], status, payload, self._clock(), True))

    def _compact(self) -> None:
        """Rewrite the journal as: counters, one inject per active fault, the idempotency answers to keep."""
        records: list[dict[str, Any]] = [{
            "op": "counters",
            "generations": dict(self._generation),
            "fault_counter": self._fault_counter,
            "seq": self._seq,
        }]
        for f in self._faults.values():
            records.append({"op": "inject", "fault": f.to_json(), "generation": self._generation[f.node],
                            "events": []})
        answers = self.idempotency.durable()[-MAX_ANSWERS_KEPT:]
        if answers:
            records.append({"op": "answers", "entries": [
                {"key": k, "fp": a.fingerprint, "status": a.status, "payload": a.payload, "time": a.time}
                for k, a in answers]})
        self.journal.compact(records)
        self._reserve("fault-id", self._fault_counter)
        self._reserve("event-seq", self._seq)
        self._reserve("generation", max(self._generation.values(), default=0))
        self._plan_compaction()

    def _plan_compaction(self) -> None:
        """The next compaction once the journal has grown by as many records as it holds now, and by at least
        ``compact_every``: a compaction rewrites what is active, so its cost stays a fraction of the appends
        between two of them however many faults are active."""
        base = self.journal.records
        self._compact_at = base + max(self._compact_every, base)

    def _wait_for_compaction(self) -> None:
        """Under the issue lock (not the agent's), before a change issues ids: once a compaction is due, let the
        queued changes drain (their writers apply them and the last one compacts) instead of queueing more, and wait
        for that compaction (or its failure, which plans the next). Under steady concurrent changes the queue is
        never empty otherwise, and the journal would never be compacted. It waits while the queue is empty too:
        between the last change leaving the queue and the compaction (the render of that batch runs between them,
        without the issue lock) a change that went ahead would put off the compaction again."""
        while self.journal.records >= self._compact_at:
            self._drained.wait()

    def _compact_if_due(self) -> None:
        """Under the agent's lock, with no change queued (every record written is applied, and no fsync of it runs;
        the issue lock keeps new ones out meanwhile): compact the journal once it has grown past the planned size.
        A compaction that fails (a full disk) leaves the journal as it was and is tried again after as many records
        more."""
        if self._pending or self.journal.records < self._compact_at:  # a cheap look first, then under the lock
            return
        with self._issue:
            if self._pending or self.journal.records < self._compact_at:
                return
            try:
                self._compact()
            except (OSError, JournalWriteError, AgentError) as exc:
                self._compact_at = self.journal.records + self._compact_every
                log.warning("journal %s not compacted (%s); tried again after %d more records", self.journal.path,
                            getattr(exc, "strerror", None) or exc, self._compact_every)
            else:
                log.info("journal %s compacted to %d records", self.journal.path, self.journal.records)
            self._drained.notify_all()  # changes waiting for it go on

    def answered(self) -> None:
        """A request was answered (called by the server on the thread that answered it): close the files its
        change replaced, off its answer's path and without waking a thread (see
        :class:`~fakehw.render.atomic.Releaser`)."""
        self._release.drain()

    def close(self) -> None:
        """Stop: sync and close the journals, let another agent have the state directory. Safe to call twice."""
        for part in (getattr(self, "platform", None), getattr(self, "mig", None), getattr(self, "journal", None),
                     getattr(self, "_release", None)):
            if part is not None:
                part.close()
        self._dir_lock.release()


def _tag(record: dict[str, Any], idempotency: Idempotency | None) -> None:
    if idempotency is not None:
        record["key"], record["fp"] = idempotency
