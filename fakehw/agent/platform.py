"""The platform an agent serves beyond its GPUs: CXL memory (regions, memdevs, pooled devices) and memory pools.

:class:`Platform` owns the CXL state (:mod:`fakehw.agent.cxl`) and the pool ledger (:mod:`fakehw.agent.pools`)
of every node the agent serves. A request is checked first (nothing changes when it is refused), then its facts
are journaled (``platform.jsonl``), applied, written to the audit log (``audit.jsonl``, append-only, never
compacted) and the affected nodes are re-rendered through the agent. A restarted agent replays the journal and
comes back with the same regions, assignments, extents, grants, tokens (hashes only) and mappings.

Faults and CXL state meet here: a ``cxl-offline`` fault takes a memdev's regions out of their NUMA node, a lost
GPU takes its memory out of an HBM pool, a ``pool-shrink`` fault lowers a pool's capacity. When a pool ends up
smaller than what is granted from it, grants are preempted (bursts first, newest first) and each preemption is
journaled and audited, so the ledger never promises more than the hardware has.

Pooled CXL devices are shared by hosts. One agent can arbitrate a pool only when it serves every member host
(the local backend's single agent does); elsewhere (one agent per container) pool changes are refused with a
reason and each host shows its boot assignment. See docs/platform.md.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakehw.agent.cxl import CxlEngine, CxlError, CxlState, NodeCxlView, Region, apply_fact, size_text
from fakehw.agent.cxlcore import CxlCore, KernelError
from fakehw.agent.cxlstate import state_facts
from fakehw.agent.journal import COMPACT_AFTER, Journal, JournalWriteError, SnapshotCompaction
from fakehw.agent.pools import GrantKind, PoolError, PoolLedger
from fakehw.agent.state import NodeState, derive_state
from fakehw.model.system import MemoryPool, Node, System
from fakehw.model.units import parse_size
from fakehw.render.atomic import fsync_dir

log = logging.getLogger(__name__)
AUDIT_IN_MEMORY = 50_000
LEDGER_FACTS = frozenset({"grant", "revoke", "map", "unmap"})
EXPIRY_POLL_S = 1.0
SNAPSHOT_VERSION = 2


class PlatformError(Exception):
    """A platform request refused; ``status`` is the HTTP status the control API answers with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# --------------------------------------------------------------------------------------------------- views


@dataclass(frozen=True, slots=True)
class PoolView:
    """A memory pool of a node as a device plugin discovers it: capacity, latency, policy and what is granted."""

    name: str
    resource: str
    tier: str
    policy: str
    source: str
    capacity: int
    """The model's capacity."""
    available: int
    """Capacity the hardware backs now (CXL state, lost GPUs, shrink faults); grants never exceed it."""
    reserved: int
    bursting: int
    latency_domain: str
    latency_rank: int
    latency_ns: int
    bandwidth_gbs: float
    grants: tuple[dict[str, Any], ...]
    mappings: int

    @property
    def free(self) -> int:
        return max(0, self.available - self.reserved - self.bursting)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "resource": self.resource, "tier": self.tier, "policy": self.policy,
            "source": self.source, "capacity": self.capacity, "available": self.available,
            "reserved": self.reserved, "bursting": self.bursting, "free": self.free,
            "latency": {"domain": self.latency_domain, "rank": self.latency_rank, "ns": self.latency_ns},
            "bandwidth_gbs": self.bandwidth_gbs, "grants": list(self.grants), "mappings": self.mappings,
        }


@dataclass(frozen=True)
class PlatformView:
    """What the renderers need beyond the fault-derived state: CXL devices now, NUMA memory now, pools."""

    node: str
    numa_memory: Mapping[int, int]
    """Bytes in every NUMA node now (CXL nodes follow their regions; others keep the model's value)."""
    cxl: NodeCxlView
    pools: tuple[PoolView, ...]

    def to_json(self) -> dict[str, Any]:
        return {"numa_memory": {str(k): v for k, v in sorted(self.numa_memory.items())},
                "cxl": self.cxl.to_json(), "pools": [p.to_json() for p in self.pools]}

    def summary(self) -> dict[str, Any]:
        """The small part that goes into ``state.json`` on every render."""
        return {
            "numa_memory": {str(k): v for k, v in sorted(self.numa_memory.items())},
            "memdevs_offline": [m.name for m in self.cxl.memdevs if not m.online],
            "regions": [r.region.name for r in self.cxl.regions],
            "pools": {p.name: {"available": p.available, "reserved": p.reserved, "bursting": p.bursting}
                      for p in self.pools},
        }


def pool_backing(node: Node, pool: MemoryPool, state: NodeState, cxl: NodeCxlView,
                 numa_memory: Mapping[int, int]) -> int:
    """Bytes the pool's source has now (before shrink faults)."""
    kind, _, arg = pool.source.partition(":")
    if kind == "gpus":
        names = set(arg.split(",")) if arg else set()
        lost = {g.name for g in state.gpus if g.lost}
        return sum(g.memory_bytes for g in node.gpus if g.name in names and g.name not in lost)
    if kind == "numa":
        return numa_memory.get(int(arg), 0)
    if kind == "cxlRegion":
        rv = cxl.region(arg)
        return rv.memory_online if rv is not None else 0
    if kind == "cxlPool":
        return sum(rv.memory_online for rv in cxl.regions if rv.region.pool == arg)
    return pool.capacity


def pool_available(node: Node, pool: MemoryPool, state: NodeState, cxl: NodeCxlView,
                   numa_memory: Mapping[int, int]) -> int:
    shrink = sum(p.model_capacity - p.capacity for p in state.pools if p.name == pool.name)
    return max(0, min(pool.capacity, pool_backing(node, pool, state, cxl, numa_memory)) - shrink)


def runtime_numa_memory(node: Node, cxl: NodeCxlView) -> dict[int, int]:
    """Memory of every NUMA node now: a kind: cxl node holds what CXL regions have online in it; any other node
    its own memory plus CXL memory hot-added into it (a window without a proximity domain of its own)."""
    return {n.id: cxl.numa_memory.get(n.id, n.memory) if n.kind == "cxl" else n.memory + cxl.numa_memory.get(n.id, 0)
            for n in node.numa}


def boot_view(system: System, node: Node, state: NodeState) -> PlatformView:
    """The view of a node no agent serves (``fakehw render``): the model's CXL state, no grants."""
    engine = CxlEngine(system, [node.name])
    down = _fault_offline(state)  # a memdev a fault holds down leaves its regions, as the agent settles it
    cxl = engine.view(engine.settle(engine.boot(), node.name, down), node.name, down)
    numa = runtime_numa_memory(node, cxl)
    pools = tuple(_pool_view(p, pool_available(node, p, state, cxl, numa), PoolLedger()) for p in node.memory_pools)
    return PlatformView(node.name, numa, cxl, pools)


def _fault_offline(state: NodeState) -> frozenset[str]:
    return frozenset(m.name for m in state.memdevs if not m.online)


def _pool_view(p: MemoryPool, available: int, ledger: PoolLedger) -> PoolView:
    usage = ledger.usage(p.node, p.name)
    live = ledger.live(p.node, p.name)
    grants = tuple({k: v for k, v in g.public().items() if k not in ("node", "pool")} for g in live)
    mappings = sum(1 for m in ledger.mappings.values() if m.node == p.node and m.pool == p.name)
    return PoolView(p.name, p.resource_name, p.tier, p.policy, p.source, p.capacity, available, usage.reserved,
                    usage.bursting, p.latency.name, p.latency.rank, p.latency.latency_ns, p.bandwidth_gbs, grants,
                    mappings)


# --------------------------------------------------------------------------------------------------- audit


class AuditLog:
    """Append-only JSON lines: every grant, revocation, mapping and refused mapping (never compacted)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self.entries: deque[dict[str, Any]] = deque(maxlen=AUDIT_IN_MEMORY)
        self.seq = 0
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        entry = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(entry, dict) and isinstance(entry.get("seq"), int):
                        self.entries.append(entry)
                        self.seq = max(self.seq, entry["seq"])
        except FileNotFoundError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)  # it names tenants and token ids: for the agent's user only
        fsync_dir(path.parent)  # a new audit log is there after a crash too
        self._fh = open(fd, "a", encoding="utf-8")  # noqa: SIM115 - held open for the agent's lifetime

    def record(self, entry: dict[str, Any], now: float) -> dict[str, Any]:
        with self._lock:
            self.seq += 1
            full = {"seq": self.seq, "time": now, **entry}
            self.entries.append(full)
            self._fh.write(json.dumps(full, sort_keys=True, separators=(",", ":")) + "\n")
            self._fh.flush()
            os.fdatasync(self._fh.fileno())
            return full

    def query(self, node: str | None = None, pool: str | None = None, since: int = 0,
              limit: int = 1000) -> list[dict[str, Any]]:
        with self._lock:
            out = [e for e in self.entries if e["seq"] > since and (node is None or e.get("node") == node)
                   and (pool is None or e.get("pool") == pool)]
        return out[:limit]

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()


# --------------------------------------------------------------------------------------------------- platform


class Platform:
    """CXL and memory-pool state of the nodes an agent serves, with journaling, audit and re-rendering.

    ``on_change(nodes)`` is the agent's hook to bump generations and re-render nodes after a change; ``lock`` is
    the agent's lock (every change to any state of the agent happens under it).
    """

    def __init__(
        self,
        system: System,
        nodes: Mapping[str, Node],
        state_dir: Path,
        clock: Callable[[], float],
        lock: threading.RLock,
        on_change: Callable[[Iterable[str]], None],
        salvage: bool = False,
        compact_after: int = COMPACT_AFTER,
    ):
        self.system = system
        self.nodes = dict(nodes)
        self.engine = CxlEngine(system, self.nodes)
        self._clock = clock
        self._lock = lock
        self._on_change = on_change
        self.cxl = self.engine.boot()
        self.ledger = PoolLedger()
        self._fault_states: dict[str, NodeState] = {}
        self._applied = 0
        """Facts applied so far: the ledger's version (its grants and mappings change only by :meth:`_apply`)."""
        self._views: dict[str, tuple[tuple[object, ...], PlatformView]] = {}
        """Per node: the last view :meth:`_build_view` made of the current state, with what it was made from."""
        self.started = threading.Event()
        """Set by the agent once it has reconciled the nodes it starts with (the expiry timer waits for it)."""
        self.audit = AuditLog(state_dir / "audit.jsonl")
        self.journal = Journal(state_dir / "platform.jsonl", salvage)
        self._replay()
        if self.journal.recovery.problems:  # grant, token and mapping ids handed out before are never reused
            self.ledger.seq = max(self.ledger.seq, self.journal.floor("pool-id"))
        self._compaction = SnapshotCompaction(self.journal, self._snapshot, compact_after)
        self._compaction.now()
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._expiry_loop, name="fakehw-token-expiry", daemon=True)
        self._timer.start()

    def _expiry_loop(self) -> None:
        """Revoke expired grants within a second of their expiry, so the rendered tree never shows them for
        long even when no request comes in (requests also expire what is due before they look)."""
        while not self._stop.wait(EXPIRY_POLL_S):
            if not self.started.is_set():
                continue  # the agent is still starting; it expires as it goes
            try:
                with self._lock:
                    if any(g.expires <= self._clock() for g in self.ledger.grants.values()):
                        self._expire()
            except Exception:  # never let the timer die; the next request expires what is due anyway
                log.exception("token expiry failed")

    # ------------------------------------------------------------------------------------------ journal

    def _replay(self) -> None:
        for record in self.journal.replay():
            try:
                if record["op"] == "snapshot":
                    if record.get("version") != SNAPSHOT_VERSION or record.get("digest") != self.system.digest:
                        log.warning("platform snapshot of another profile or version ignored; starting from boot")
                        continue
                    self.cxl = CxlState.from_json(record["cxl"])
                    self.ledger = PoolLedger.from_json(record["pools"])
                elif record["op"] == "facts":
                    self._apply(record["facts"], audit=False)
                else:
                    log.warning("platform journal record with unknown op %r skipped", record["op"])
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("platform journal record not replayed: %s", exc)

    def _snapshot(self) -> list[dict[str, Any]]:
        """The one record a compacted journal holds: the CXL state and the pool ledger."""
        return [{"op": "snapshot", "version": SNAPSHOT_VERSION, "digest": self.system.digest,
                 "cxl": self.cxl.to_json(), "pools": self.ledger.to_json()}]

    def _cxl_after(self, facts: list[dict[str, Any]]) -> CxlState:
        """The CXL state after the CXL facts among ``facts``, computed on a copy (``self.cxl`` is a value): a
        fact that cannot apply raises here and changes nothing."""
        cxl = self.cxl
        for fact in facts:
            if fact["fact"] not in LEDGER_FACTS:
                cxl = apply_fact(cxl, fact)
        return cxl

    def _apply(self, facts: list[dict[str, Any]], audit: bool = True, cxl: CxlState | None = None) -> None:
        """Apply ``facts``: CXL facts first, then ledger facts. ``cxl`` is :meth:`_cxl_after` of ``facts`` when
        the caller has it already."""
        now = self._clock()
        self.cxl = self._cxl_after(facts) if cxl is None else cxl
        self._applied += 1
        for fact in facts:
            if fact["fact"] in LEDGER_FACTS:
                self.ledger.apply(fact, (lambda e: self._record(e, now)) if audit else None)

    def _record(self, entry: dict[str, Any], now: float) -> None:
        self.audit.record(entry, now)

    def _commit(self, facts: list[dict[str, Any]], nodes: Iterable[str], cxl: CxlState | None = None) -> None:
        """Journal, apply and re-render. The caller holds the lock and has checked the facts; ``cxl`` is
        :meth:`_cxl_after` of ``facts`` when the caller has it already."""
        if not facts:
            return
        if cxl is None:
            cxl = self._cxl_after(facts)  # prove the CXL facts apply before anything is journaled
        self.journal.reserve("pool-id", self.ledger.seq + 1)
        self.journal.append({"op": "facts", "facts": facts, "time": self._clock()})
        self._apply(facts, cxl=cxl)
        self._compaction.appended()
        self._on_change(sorted(set(nodes)))

    def close(self) -> None:
        self._stop.set()
        if self._timer.is_alive() and self._timer is not threading.current_thread():
            self._timer.join(timeout=5)
        with self._lock:
            self.journal.close()
            self.audit.close()

    # ------------------------------------------------------------------------------------------ views

    def attach(self, node_name: str, state: NodeState) -> PlatformView:
        """Reconcile the node with its fault-derived ``state`` (preempting what the hardware no longer backs)
        and return its view. Called by the agent on every render of the node."""
        with self._lock:
            self._fault_states[node_name] = state
            now = self._clock()
            facts = self.ledger.expire(now)
            self._apply_quietly(facts)
            settled = self.engine.settle(self.cxl, node_name, _fault_offline(state))
            if settled is not self.cxl:  # settle hands back the state it was given when nothing moved
                self._apply_quietly(state_facts(self.cxl, settled))
            view = self._build_view(node_name)
            if not self.ledger.grants:  # nothing to revoke or preempt (an Xid fleet's every render)
                return view
            node = self.nodes[node_name]
            shrink: list[dict[str, Any]] = self.ledger.drop_pool(node_name, [p.name for p in node.memory_pools], now)
            for p in view.pools:
                shrink += self.ledger.shrink(node_name, p.name, p.available, now,
                                             f"pool {p.name} has {size_text(p.available)} available")
            if shrink:
                self._apply_quietly(shrink)
                view = self._build_view(node_name)
            return view

    def _apply_quietly(self, facts: list[dict[str, Any]]) -> None:
        """Journal and apply facts found while reconciling (no re-render: the caller is rendering)."""
        if facts:
            try:
                self.journal.append({"op": "facts", "facts": facts, "time": self._clock()})
            except JournalWriteError as exc:  # found again on the next render
                log.warning("expiries/preemptions not applied yet: %s", exc)
                return
            self._apply(facts)
            self._compaction.appended()

    def _state(self, node_name: str) -> NodeState:
        state = self._fault_states.get(node_name)
        if state is None:
            state = derive_state(self.nodes[node_name], [])
        return state

    def _build_view(self, node_name: str, cxl: CxlState | None = None) -> PlatformView:
        """The node's view with the CXL state ``cxl`` (default: the current one). The current state's view is
        remembered with what it was made from (the CXL state, the ledger's version, the memdevs faults hold
        offline, the GPUs lost, the pools' shrink faults), since every render of the node asks for it and most
        changes (an Xid, a thermal fault) touch none of those."""
        node = self.nodes[node_name]
        state = self._state(node_name)
        offline = _fault_offline(state)
        key: tuple[object, ...] = ()
        if cxl is None:
            key = (self.cxl, self.ledger, self._applied, offline, frozenset(g.name for g in state.gpus if g.lost),
                   state.pools)
            hit = self._views.get(node_name)
            if hit is not None and hit[0] == key:
                return hit[1]
        cview = self.engine.view(cxl or self.cxl, node_name, offline)
        numa = runtime_numa_memory(node, cview)
        pools = tuple(_pool_view(p, pool_available(node, p, state, cview, numa), self.ledger)
                      for p in node.memory_pools)
        view = PlatformView(node_name, numa, cview, pools)
        if cxl is None:
            self._views[node_name] = (key, view)
        return view

    def view(self, node_name: str) -> PlatformView:
        self._node(node_name)
        with self._lock:
            self._expire()
            return self._build_view(node_name)

    def _node(self, name: str) -> Node:
        if not isinstance(name, str) or name not in self.nodes:
            raise PlatformError(404, f"unknown node {name!r} (nodes: {', '.join(list(self.nodes)[:8])})")
        return self.nodes[name]

    def _expire(self) -> None:
        facts = self.ledger.expire(self._clock())
        if facts:
            nodes = {self.ledger.grants[f["grant"]].node for f in facts if f["grant"] in self.ledger.grants}
            self._commit(facts, nodes)

    # ------------------------------------------------------------------------------------------ CXL

    def _in_use_check(self, new: CxlState, nodes: Iterable[str], what: str) -> None:
        """Refuse a CXL change that would leave a memory pool smaller than what is granted from it."""
        for name in nodes:
            if name not in self.nodes:
                continue
            before = {v.name: v.available for v in self._build_view(name).pools}
            for p in self._build_view(name, new).pools:
                usage = self.ledger.usage(name, p.name)
                if p.available < before[p.name] and p.available < usage.used:
                    raise PlatformError(409, f"{what} would shrink memory pool {p.name} on {name} to "
                                        f"{size_text(p.available)} but {size_text(usage.used)} of it is reserved or "
                                        f"bursting (tenants: {', '.join(usage.tenants)}); release those grants first")

    def _run(self, facts: list[dict[str, Any]], nodes: Iterable[str], what: str | None) -> None:
        nodes = list(nodes)
        new = self._cxl_after(facts)  # computed once: checked here, then journaled and applied by _commit
        if what is not None:
            self._in_use_check(new, nodes, what)
        self._commit(facts, nodes, new)

    def create_region(self, node: str, body: Any) -> dict[str, Any]:
        args = _fields(body, required={"window", "targets"}, optional={"granularity", "size", "mode", "name"},
                       what="region")
        targets = args["targets"]
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise PlatformError(422, "targets is a list of memory device names, e.g. [\"mem0\", \"mem4\"]")
        window = _str(args["window"], "window")
        granularity = _opt_int(args.get("granularity"), "granularity")
        size = _opt_size(args.get("size"), "size")
        mode = _str(args.get("mode", "ram"), "mode")
        name = None if args.get("name") is None else _str(args["name"], "name")
        self._node(node)
        with self._lock:
            try:
                facts, region = self.engine.create_region(self.cxl, node, window, targets, granularity, size, mode,
                                                          name, _fault_offline(self._state(node)))
            except CxlError as exc:
                raise PlatformError(exc.status, exc.message) from None
            self._run(facts, [node], None)
            return self._region_json(node, region)

    def destroy_region(self, node: str, name: str) -> dict[str, Any]:
        self._node(node)
        with self._lock:
            try:
                facts, region = self.engine.destroy_region(self.cxl, node, name)
            except CxlError as exc:
                raise PlatformError(exc.status, exc.message) from None
            self._run(facts, [node], f"destroying {name}")
            return region.to_json()

    def set_memdev(self, node: str, memdev: str, online: bool) -> dict[str, Any]:
        self._node(node)
        with self._lock:
            try:
                facts = self.engine.set_memdev(self.cxl, node, memdev, online, _fault_offline(self._state(node)))
            except CxlError as exc:
                raise PlatformError(exc.status, exc.message) from None
            self._run(facts, [node], None if online else f"taking {memdev} offline")
            view = self._build_view(node).cxl.memdev(memdev)
            assert view is not None
            return {**view.to_json(), "changed": bool(facts)}

    def kernel_store(self, node: str, store: Callable[[CxlCore, CxlState], CxlState], what: str) -> bool:
        """Apply a sysfs store the kernel acts on (:mod:`fakehw.agent.cxlsysfs`): journaled, applied and
        re-rendered before it returns whether anything changed. Raises KernelError (nothing changed, except
        what the kernel itself keeps: ``KernelError.keep``) or PlatformError 409 (memory in use by grants)."""
        self._node(node)
        with self._lock:
            core = self.engine.core(node, _fault_offline(self._state(node)))
            try:
                new = store(core, self.cxl)
            except KernelError as exc:
                if exc.keep is not None:
                    self._run(state_facts(self.cxl, exc.keep), [node], what)
                raise
            facts = state_facts(self.cxl, new)
            self._run(facts, [node], what)
            return bool(facts)

    def assign_ld(self, pool: str, body: Any) -> dict[str, Any]:
        args = _fields(body, required={"ld", "node"}, optional=set(), what="assignment")
        ld = _int(args["ld"], "ld")
        node = _str(args["node"], "node")
        with self._lock:
            try:
                facts, region = self.engine.assign_ld(self.cxl, pool, ld, node)
            except CxlError as exc:
                raise PlatformError(exc.status, exc.message) from None
            self._run(facts, [node], None)
            return {"pool": pool, "ld": ld, "node": node, "changed": bool(facts),
                    "region": region.to_json() if region else None}

    def release_ld(self, pool: str, body: Any) -> dict[str, Any]:
        args = _fields(body, required={"ld"}, optional={"node"}, what="release")
        ld = _int(args["ld"], "ld")
        node = None if args.get("node") is None else _str(args["node"], "node")
        with self._lock:
            try:
                facts = self.engine.release_ld(self.cxl, pool, ld, node)
            except CxlError as exc:
                raise PlatformError(exc.status, exc.message) from None
            owner = self.cxl.ld_owner[(pool, ld)]
            self._run(facts, [owner], f"releasing logical device {ld} of {pool}")
            return {"pool": pool, "ld": ld, "node": owner, "released": True}

    def add_extent(self, pool: str, body: Any) -> dict[str, Any]:
        args = _fields(body, required={"node", "size"}, optional={"offset"}, what="extent")
        node = _str(args["node"], "node")
        size = _size(args["size"], "size")
        offset = _opt_int(args.get("offset"), "offset")
        with self._lock:
            try:
                facts, ext = self.engine.add_extent(self.cxl, pool, node, size, offset)
            except CxlError as exc:
                raise PlatformError(exc.status, exc.message) from None
            self._run(facts, [node], None)
            return ext.to_json()

    def release_extent(self, pool: str, extent_id: str) -> dict[str, Any]:
        with self._lock:
            try:
                facts, ext = self.engine.release_extent(self.cxl, pool, extent_id)
            except CxlError as exc:
                raise PlatformError(exc.status, exc.message) from None
            self._run(facts, [ext.node], f"releasing extent {ext.id}")
            return ext.to_json()

    def cxl_pools(self) -> list[dict[str, Any]]:
        """Pooled devices: who holds which logical device, the extents, and the free ranges."""
        with self._lock:
            out = []
            for pool in self.system.cxl_pools:
                served = [n for n in pool.nodes if n in self.nodes]
                if not served:
                    continue
                holes = self.engine.device_holes(self.cxl, pool)
                out.append({
                    "name": pool.name, "capacity": pool.capacity, "logical_devices": pool.logical_devices,
                    "ld_size": pool.ld_size, "hosts": list(pool.nodes), "host_port": pool.host_port,
                    "window": pool.window, "arbitrated_here": self.engine.arbitrable(pool),
                    "owners": {str(ld): self.cxl.ld_owner.get((pool.name, ld))
                               for ld in range(pool.logical_devices)},
                    "extents": [e.to_json() for e in sorted(self.cxl.extents.values(), key=lambda e: e.id)
                                if e.pool == pool.name],
                    "free": sum(length for _, length in holes),
                    "free_ranges": [[s, length] for s, length in holes],
                })
            return out

    def _region_json(self, node: str, region: Region) -> dict[str, Any]:
        rv = self._build_view(node).cxl.region(region.name)
        return rv.to_json() if rv is not None else region.to_json()

    # ------------------------------------------------------------------------------------------ pools

    def _pool(self, node: str, name: str) -> MemoryPool:
        n = self._node(node)
        pool = next((p for p in n.memory_pools if p.name == name), None)
        if pool is None:
            known = ", ".join(p.name for p in n.memory_pools) or "none"
            raise PlatformError(404, f"node {node} has no memory pool {name!r} (pools: {known})")
        return pool

    def pools(self, node: str) -> list[dict[str, Any]]:
        return [p.to_json() for p in self.view(node).pools]

    def grant(self, node: str, pool_name: str, body: Any, kind: GrantKind) -> dict[str, Any]:
        args = _fields(body, required={"tenant", "size"}, optional={"ttl"}, what=kind)
        size = _size(args["size"], "size")
        ttl = args.get("ttl")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float)):
            raise PlatformError(422, "ttl is a number of seconds")
        pool = self._pool(node, pool_name)
        with self._lock:
            self._expire()
            available = next(p.available for p in self._build_view(node).pools if p.name == pool_name)
            try:
                facts, grant, token = self.ledger.grant(node, pool_name, args["tenant"], size, kind, self._clock(),
                                                        available, pool.capacity, pool.policy == "exclusive",
                                                        None if ttl is None else float(ttl))
            except PoolError as exc:
                raise PlatformError(exc.status, exc.message) from None
            self._commit(facts, [node])
            preempted = [f["grant"] for f in facts if f["fact"] == "revoke"]
            return {"grant": grant.public(), "token": token, "preempted": preempted}

    def release_grant(self, grant_id: str, body: Any) -> dict[str, Any]:
        args = _fields(body or {}, required={"token"}, optional=set(), what="release")
        with self._lock:
            self._expire()
            try:
                facts, grant = self.ledger.release(grant_id, _opt_str(args["token"]), self._clock())
            except PoolError as exc:
                if exc.audit is not None:
                    self._record(exc.audit, self._clock())
                raise PlatformError(exc.status, exc.message) from None
            self._commit(facts, [grant.node])
            return {"released": grant.public()}

    def map(self, node: str, pool_name: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise PlatformError(400, "expected a JSON object with token, who and optionally offset and length")
        unknown = set(body) - {"token", "who", "offset", "length"}
        if unknown:
            raise PlatformError(422, f"unknown field(s) {', '.join(sorted(unknown))} (a mapping takes token, who, "
                                "offset, length)")
        self._pool(node, pool_name)
        offset = body.get("offset", 0)
        length = body.get("length")
        with self._lock:
            self._expire()
            try:
                facts, mapping = self.ledger.map(node, pool_name, _opt_str(body.get("token")),
                                                 body.get("who", ""), offset, length, self._clock())
            except PoolError as exc:
                if exc.audit is not None:
                    self._record(exc.audit, self._clock())
                raise PlatformError(exc.status, exc.message) from None
            self._commit(facts, [node])
            return mapping.to_json()

    def unmap(self, mapping_id: str, body: Any) -> dict[str, Any]:
        args = _fields(body or {}, required={"token"}, optional=set(), what="unmap")
        with self._lock:
            self._expire()
            try:
                facts, mapping = self.ledger.unmap(mapping_id, _opt_str(args["token"]), self._clock())
            except PoolError as exc:
                if exc.audit is not None:
                    self._record(exc.audit, self._clock())
                raise PlatformError(exc.status, exc.message) from None
            self._commit(facts, [mapping.node])
            return {"unmapped": mapping.to_json()}

    def tokens(self, node: str | None = None) -> list[dict[str, Any]]:
        if node is not None:
            self._node(node)
        with self._lock:
            self._expire()
            return [t.to_json() for t in sorted(self.ledger.tokens.values(), key=lambda t: t.token_id)
                    if node is None or t.node == node]

    def mappings(self, node: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [m.to_json() for m in sorted(self.ledger.mappings.values(), key=lambda m: m.id)
                    if node is None or m.node == node]


# --------------------------------------------------------------------------------------------------- bodies


def _fields(body: Any, required: set[str], optional: set[str], what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise PlatformError(400, f"expected a JSON object for the {what} with {', '.join(sorted(required))}")
    missing = required - set(body)
    if missing:
        raise PlatformError(422, f"missing field(s) {', '.join(sorted(missing))} for the {what}")
    unknown = set(body) - required - optional
    if unknown:
        allowed = ", ".join(sorted(required | optional))
        raise PlatformError(422, f"unknown field(s) {', '.join(sorted(unknown))} (the {what} takes {allowed})")
    return dict(body)


def _str(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise PlatformError(422, f"{name} must be a non-empty string")
    return value


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlatformError(422, f"{name} must be an integer, not {value!r}")
    return value


def _opt_int(value: Any, name: str) -> int | None:
    return None if value is None else _int(value, name)


def _size(value: Any, name: str) -> int:
    try:
        size = parse_size(value)
    except (ValueError, OverflowError) as exc:
        raise PlatformError(422, f"{name}: {exc}") from None
    if size >= 2**63:
        raise PlatformError(422, f"{name}: {value!r} does not fit in 64 bits")
    return size


def _opt_size(value: Any, name: str) -> int | None:
    return None if value is None else _size(value, name)
