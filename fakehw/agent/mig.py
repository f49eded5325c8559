"""MIG state of the GPUs an agent serves: mode, GPU instances, compute instances; journaled, survives restarts.

The state of one GPU is a value (:class:`GpuMig`); a request is checked against the GPU's MIG geometry
(:mod:`fakehw.model.mig`) and turned into facts (``{"fact": "gi", ...}``) *before* anything changes, so a refused
request leaves nothing half-applied. Facts are journaled (``mig.jsonl``), applied, and the node is re-rendered
through the agent, whose snapshot and ``/proc/driver/nvidia/capabilities`` then show the change. A restarted agent
replays the journal and comes back with the same instances, ids and MIG device UUIDs (UUIDs come from a per-GPU
serial that only grows, so an id is never reused).

Refusals carry the NVML return code the real library gives for the same request (nvml.h), so the shim hands a
consumer exactly what the real driver would: ``NOT_SUPPORTED`` when MIG is disabled, ``INSUFFICIENT_RESOURCES``
when there is no room, ``IN_USE`` when a GPU instance still has compute instances, ``INVALID_ARGUMENT`` for an
unknown profile, placement or instance.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fakehw.agent.journal import COMPACT_AFTER, Journal, SnapshotCompaction
from fakehw.agent.state import NodeState
from fakehw.model import mig as geo
from fakehw.model.catalogue import MigCapability, MigProfile
from fakehw.model.expand import stable_uuid
from fakehw.model.system import Gpu, Node, System

log = logging.getLogger(__name__)
SNAPSHOT_VERSION = 1

# nvmlReturn_t values (nvml.h) a refusal maps to.
NVML_RETURN = {"INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3, "NOT_FOUND": 6, "GPU_IS_LOST": 15, "IN_USE": 19,
               "INSUFFICIENT_RESOURCES": 23}


class MigError(Exception):
    """A MIG request refused: ``status`` for HTTP, ``nvml`` the NVML return code name the library answers with."""

    def __init__(self, status: int, nvml: str, message: str):
        super().__init__(message)
        self.status = status
        self.nvml = nvml
        self.message = message

    @property
    def detail(self) -> dict[str, Any]:
        return {"nvml": f"NVML_ERROR_{self.nvml}", "nvml_code": NVML_RETURN[self.nvml]}


# --------------------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ComputeInstance:
    id: int
    profile: int
    """``NVML_COMPUTE_INSTANCE_PROFILE_*`` index."""
    start: int
    """Placement start in compute slices of its GPU instance."""
    uuid: str
    """Of the MIG device this compute instance is."""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "profile": self.profile, "start": self.start, "uuid": self.uuid}


@dataclass(frozen=True)
class GpuInstance:
    id: int
    profile: str
    """GPU instance profile name (``3g.40gb``)."""
    start: int
    """Placement start in memory slices."""
    serial: int
    """Per-GPU creation number, never reused (NVML handles of a destroyed instance never name a new one)."""
    cis: tuple[ComputeInstance, ...] = ()

    def ci(self, cid: int) -> ComputeInstance | None:
        return next((c for c in self.cis if c.id == cid), None)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "profile": self.profile, "start": self.start, "serial": self.serial,
                "compute_instances": [c.to_json() for c in self.cis]}


@dataclass(frozen=True)
class GpuMig:
    """MIG state of one MIG-capable GPU."""

    gpu: str
    current: bool
    pending: bool
    gis: tuple[GpuInstance, ...] = ()
    next_serial: int = 1

    def gi(self, gid: int) -> GpuInstance | None:
        return next((g for g in self.gis if g.id == gid), None)

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "current": self.current, "pending": self.pending,
                "gpu_instances": [g.to_json() for g in sorted(self.gis, key=lambda g: g.id)],
                "next_serial": self.next_serial}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> GpuMig:
        gis = tuple(GpuInstance(int(g["id"]), str(g["profile"]), int(g["start"]), int(g["serial"]),
                                tuple(ComputeInstance(int(c["id"]), int(c["profile"]), int(c["start"]), str(c["uuid"]))
                                      for c in g["compute_instances"]))
                    for g in raw["gpu_instances"])
        return cls(str(raw["gpu"]), bool(raw["current"]), bool(raw["pending"]), gis, int(raw["next_serial"]))


@dataclass(frozen=True)
class NodeMig:
    """MIG state of a node's MIG-capable GPUs, by the model's GPU name."""

    node: str
    gpus: Mapping[str, GpuMig]

    def gpu(self, name: str) -> GpuMig | None:
        return self.gpus.get(name)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "gpus": {n: g.to_json() for n, g in self.gpus.items()}}


# --------------------------------------------------------------------------------------------------- boot


def boot_gpu(gpu: Gpu) -> GpuMig | None:
    """The GPU as the profile boots it (None: not MIG-capable): its GPU instances, each with one full compute
    instance whose UUID is the model's."""
    if gpu.sku.mig is None:
        return None
    gis = []
    for m in gpu.mig_instances:
        full = next(c for c in geo.ci_profiles(m.profile) if c.full)
        gis.append(GpuInstance(m.gpu_instance_id, m.profile.name, m.start_slice, m.index + 1,
                               (ComputeInstance(0, full.index, 0, m.uuid),)))
    return GpuMig(gpu.name, gpu.mig_enabled, gpu.mig_enabled, tuple(gis), len(gis) + 1)


def boot_mig(node: Node) -> NodeMig:
    return NodeMig(node.name, {g.name: m for g in node.gpus if (m := boot_gpu(g)) is not None})


def ci_uuid(gpu: Gpu, serial: int) -> str:
    """The MIG device UUID of a compute instance created at run time (boot ones keep the model's)."""
    return f"MIG-{stable_uuid(gpu.uuid, 'compute-instance', str(serial))}"


# --------------------------------------------------------------------------------------------------- geometry views


def capability(gpu: Gpu) -> MigCapability:
    if gpu.sku.mig is None:
        raise MigError(409, "NOT_SUPPORTED", f"{gpu.name} ({gpu.sku.name}) does not support MIG")
    return gpu.sku.mig


def profile_of(gpu: Gpu, gi: GpuInstance) -> MigProfile:
    p = capability(gpu).profile(gi.profile)
    if p is None:  # only a journal of another catalogue could name one
        raise MigError(409, "INVALID_ARGUMENT", f"{gpu.name} has no MIG profile {gi.profile!r}")
    return p


def used_memory_slices(gpu: Gpu, state: GpuMig) -> set[int]:
    out: set[int] = set()
    for gi in state.gis:
        out |= set(range(gi.start, gi.start + profile_of(gpu, gi).memory_slices))
    return out


def used_compute_slices(gi: GpuInstance, profile: MigProfile) -> set[int]:
    out: set[int] = set()
    for c in gi.cis:
        ci = geo.ci_profile(profile, c.profile)
        out |= set(range(c.start, c.start + (ci.slices if ci else 1)))
    return out


def gi_remaining(gpu: Gpu, state: GpuMig, profile: MigProfile) -> int:
    if not state.current:
        return 0
    same = sum(1 for g in state.gis if g.profile == profile.name)
    return geo.gi_remaining(capability(gpu), profile, used_memory_slices(gpu, state), same)


def ci_remaining(gi: GpuInstance, profile: MigProfile, ci: geo.CiProfile) -> int:
    same = sum(1 for c in gi.cis if c.profile == ci.index)
    return geo.ci_remaining(ci, used_compute_slices(gi, profile), same)


# --------------------------------------------------------------------------------------------------- requests


def _gpu_profile(gpu: Gpu, profile: int | str) -> MigProfile:
    cap = capability(gpu)
    found = cap.profile(profile) if isinstance(profile, str) else cap.by_id(profile)
    if found is None:
        known = ", ".join(f"{p.id} ({p.name})" for p in cap.profiles)
        raise MigError(422, "INVALID_ARGUMENT", f"{gpu.name} ({gpu.sku.name}) has no GPU instance profile "
                       f"{profile!r}; it offers {known}")
    return found


def set_mode(gpu: Gpu, state: GpuMig, enabled: bool) -> list[dict[str, Any]]:
    """Facts that switch MIG on or off (none when it already is)."""
    if enabled == state.current and enabled == state.pending:
        return []
    if not enabled and state.gis:
        ids = ", ".join(str(g.id) for g in sorted(state.gis, key=lambda g: g.id))
        raise MigError(409, "IN_USE", f"{gpu.name} still has GPU instances ({ids}); destroy them before disabling MIG")
    return [{"fact": "mode", "gpu": gpu.name, "enabled": enabled}]


def create_gpu_instance(gpu: Gpu, state: GpuMig, profile: int | str,
                        placement: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """Facts that create a GPU instance, and its id."""
    cap = capability(gpu)
    prof = _gpu_profile(gpu, profile)
    if not state.current:
        raise MigError(409, "NOT_SUPPORTED", f"MIG is disabled on {gpu.name}; enable it first")
    used = used_memory_slices(gpu, state)
    if placement is not None:
        starts = geo.gi_placements(cap, prof)
        if placement not in starts:
            raise MigError(422, "INVALID_ARGUMENT", f"{prof.name} cannot start at memory slice {placement} "
                           f"(possible placements: {', '.join(map(str, starts))})")
        if not geo.gi_fits(cap, prof, placement, used):
            raise MigError(409, "INSUFFICIENT_RESOURCES", f"placement {placement}:{prof.memory_slices} of {gpu.name} "
                           "overlaps an existing GPU instance")
    if sum(1 for g in state.gis if g.profile == prof.name) >= prof.max_instances:
        raise MigError(409, "INSUFFICIENT_RESOURCES", f"{gpu.name} already has the {prof.max_instances} "
                       f"{prof.name} instance(s) the GPU allows")
    start = placement if placement is not None else geo.choose_gi_placement(cap, prof, used)
    if start is None:
        raise MigError(409, "INSUFFICIENT_RESOURCES", f"no room for a {prof.name} GPU instance on {gpu.name} "
                       f"(memory slices in use: {sorted(used)})")
    gid = geo.gi_id(start, prof.memory_slices, cap.memory_slices)
    return [{"fact": "gi", "gpu": gpu.name, "id": gid, "profile": prof.name, "start": start,
             "serial": state.next_serial}], gid


def _gi(gpu: Gpu, state: GpuMig, gid: int) -> GpuInstance:
    if not state.current:
        raise MigError(409, "NOT_SUPPORTED", f"MIG is disabled on {gpu.name}")
    gi = state.gi(gid)
    if gi is None:
        raise MigError(404, "INVALID_ARGUMENT", f"{gpu.name} has no GPU instance {gid}")
    return gi


def destroy_gpu_instance(gpu: Gpu, state: GpuMig, gid: int) -> list[dict[str, Any]]:
    gi = _gi(gpu, state, gid)
    if gi.cis:
        raise MigError(409, "IN_USE", f"GPU instance {gid} of {gpu.name} still has compute instances "
                       f"({', '.join(str(c.id) for c in gi.cis)}); destroy them first")
    return [{"fact": "gi-destroy", "gpu": gpu.name, "id": gid}]


def create_compute_instance(gpu: Gpu, state: GpuMig, gid: int, profile: int | str | None,
                            placement: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """Facts that create a compute instance in GPU instance ``gid`` (``profile`` None: the full-size one)."""
    gi = _gi(gpu, state, gid)
    gprof = profile_of(gpu, gi)
    options = geo.ci_profiles(gprof)
    if profile is None:
        ci = next(c for c in options if c.full)
    else:
        found = next((c for c in options if (c.name == profile if isinstance(profile, str) else c.index == profile)),
                     None)
        if found is None:
            known = ", ".join(f"{c.index} ({c.name})" for c in options)
            raise MigError(422, "NOT_SUPPORTED", f"GPU instance {gid} ({gprof.name}) has no compute instance profile "
                           f"{profile!r}; it offers {known}")
        ci = found
    used = used_compute_slices(gi, gprof)
    if placement is not None:
        if placement not in ci.placements:
            raise MigError(422, "INVALID_ARGUMENT", f"{ci.name} cannot start at compute slice {placement} "
                           f"(possible placements: {', '.join(map(str, ci.placements))})")
        if not geo.ci_fits(ci, placement, used):
            raise MigError(409, "INSUFFICIENT_RESOURCES", f"placement {placement}:{ci.slices} overlaps a compute "
                           f"instance of GPU instance {gid}")
    if sum(1 for c in gi.cis if c.profile == ci.index) >= ci.instances:
        raise MigError(409, "INSUFFICIENT_RESOURCES", f"GPU instance {gid} already has the {ci.instances} "
                       f"{ci.name} compute instance(s) it allows")
    start = placement if placement is not None else geo.choose_ci_placement(ci, used)
    cid = geo.lowest_free((c.id for c in gi.cis), geo.MAX_COMPUTE_INSTANCES)
    if start is None or cid is None:
        raise MigError(409, "INSUFFICIENT_RESOURCES", f"no room for a {ci.name} compute instance in GPU instance "
                       f"{gid} of {gpu.name} (compute slices in use: {sorted(used)})")
    return [{"fact": "ci", "gpu": gpu.name, "gi": gid, "id": cid, "profile": ci.index, "start": start,
             "serial": state.next_serial, "uuid": ci_uuid(gpu, state.next_serial)}], cid


def destroy_compute_instance(gpu: Gpu, state: GpuMig, gid: int, cid: int) -> list[dict[str, Any]]:
    gi = _gi(gpu, state, gid)
    if gi.ci(cid) is None:
        raise MigError(404, "INVALID_ARGUMENT", f"GPU instance {gid} of {gpu.name} has no compute instance {cid}")
    return [{"fact": "ci-destroy", "gpu": gpu.name, "gi": gid, "id": cid}]


def apply_fact(state: GpuMig, fact: Mapping[str, Any]) -> GpuMig:
    """The GPU's state after ``fact`` (a value: ``state`` is unchanged); ValueError when it cannot apply."""
    kind = fact["fact"]
    if kind == "mode":
        enabled = bool(fact["enabled"])
        return replace(state, current=enabled, pending=enabled)
    if kind in ("gi", "gi-destroy"):
        return _apply_gi(state, kind == "gi", fact)
    if kind in ("ci", "ci-destroy"):
        return _apply_ci(state, kind == "ci", fact)
    raise ValueError(f"unknown MIG fact {kind!r}")


def _apply_gi(state: GpuMig, create: bool, fact: Mapping[str, Any]) -> GpuMig:
    gid = int(fact["id"])
    exists = state.gi(gid) is not None
    if create == exists:
        raise ValueError(f"GPU instance {gid} {'exists already' if exists else 'does not exist'}")
    if not create:
        return replace(state, gis=tuple(g for g in state.gis if g.id != gid))
    gi = GpuInstance(gid, str(fact["profile"]), int(fact["start"]), int(fact["serial"]))
    return replace(state, gis=(*state.gis, gi), next_serial=max(state.next_serial, gi.serial + 1))


def _apply_ci(state: GpuMig, create: bool, fact: Mapping[str, Any]) -> GpuMig:
    gid, cid = int(fact["gi"]), int(fact["id"])
    gi = state.gi(gid)
    if gi is None:
        raise ValueError(f"no GPU instance {gid}")
    exists = gi.ci(cid) is not None
    if create == exists:
        raise ValueError(f"compute instance {gid}/{cid} {'exists already' if exists else 'does not exist'}")
    serial = state.next_serial
    if create:
        ci = ComputeInstance(cid, int(fact["profile"]), int(fact["start"]), str(fact["uuid"]))
        new = replace(gi, cis=(*gi.cis, ci))
        serial = max(serial, int(fact["serial"]) + 1)
    else:
        new = replace(gi, cis=tuple(c for c in gi.cis if c.id != cid))
    return replace(state, gis=tuple(new if g.id == gid else g for g in state.gis), next_serial=serial)


# --------------------------------------------------------------------------------------------------- manager


class MigManager:
    """MIG state of every node an agent serves, with its journal. ``on_change(nodes)`` is the agent's hook to bump
    generations and re-render; ``lock`` is the agent's lock (every change of any agent state happens under it)."""

    def __init__(self, system: System, nodes: Mapping[str, Node], state_dir: Path, lock: threading.RLock,
                 on_change: Callable[[Iterable[str]], None], salvage: bool = False,
                 compact_after: int = COMPACT_AFTER):
        self.system = system
        self.nodes = dict(nodes)
        self._lock = lock
        self._on_change = on_change
        self._state: dict[str, dict[str, GpuMig]] = {n: dict(boot_mig(node).gpus) for n, node in self.nodes.items()}
        self._lost: dict[str, frozenset[str]] = {}
        self.journal = Journal(state_dir / "mig.jsonl", salvage)
        self._replay()
        self._compaction = SnapshotCompaction(self.journal, self._snapshot, compact_after)
        self._compaction.now()

    # ------------------------------------------------------------------------------------------ journal

    def _replay(self) -> None:
        for record in self.journal.replay():
            try:
                if record["op"] == "snapshot":
                    if record.get("version") != SNAPSHOT_VERSION or record.get("digest") != self.system.digest:
                        log.warning("MIG snapshot of another profile or version ignored; starting from boot")
                        continue
                    for node, gpus in record["nodes"].items():
                        if node in self._state:
                            for name, raw in gpus.items():
                                if name in self._state[node]:
                                    self._state[node][name] = GpuMig.from_json(raw)
                elif record["op"] == "facts":
                    node = record["node"]
                    if node in self._state:
                        self._apply(node, record["facts"])
                else:
                    log.warning("MIG journal record with unknown op %r skipped", record["op"])
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("MIG journal record not replayed: %s", exc)

    def _snapshot(self) -> list[dict[str, Any]]:
        """The one record a compacted journal holds: every node's MIG state."""
        return [{"op": "snapshot", "version": SNAPSHOT_VERSION, "digest": self.system.digest,
                 "nodes": {n: {g: s.to_json() for g, s in gpus.items()} for n, gpus in self._state.items()}}]

    def _after(self, node: str, facts: Iterable[Mapping[str, Any]]) -> dict[str, GpuMig]:
        states = dict(self._state[node])
        for fact in facts:
            gpu = str(fact["gpu"])
            if gpu not in states:
                raise ValueError(f"{node} has no MIG-capable GPU {gpu!r}")
            states[gpu] = apply_fact(states[gpu], fact)
        return states

    def _apply(self, node: str, facts: Iterable[Mapping[str, Any]]) -> None:
        self._state[node] = self._after(node, facts)

    def _commit(self, node: str, facts: list[dict[str, Any]]) -> None:
        """Journal, apply, re-render. The caller holds the lock and has checked the facts."""
        if not facts:
            return
        after = self._after(node, facts)  # proves the facts apply before anything is journaled
        self.journal.append({"op": "facts", "node": node, "facts": facts})
        self._state[node] = after
        self._compaction.appended()
        self._on_change([node])

    def close(self) -> None:
        with self._lock:
            self.journal.close()

    # ------------------------------------------------------------------------------------------ views

    def attach(self, node: str, state: NodeState) -> NodeMig:
        """The node's MIG state for a render; remembers which GPUs are lost (they refuse MIG changes)."""
        with self._lock:
            self._lost[node] = frozenset(g.name for g in state.gpus if g.lost)
            return self.view(node)

    def view(self, node: str) -> NodeMig:
        with self._lock:
            return NodeMig(node, dict(self._state[node]))

    # ------------------------------------------------------------------------------------------ requests

    def _target(self, node: str, gpu: str) -> tuple[Gpu, GpuMig]:
        n = self.nodes.get(node)
        if n is None:
            raise MigError(404, "INVALID_ARGUMENT", f"unknown node {node!r} (nodes: {', '.join(self.nodes)})")
        g = n.gpu(gpu)
        if g is None:
            raise MigError(404, "INVALID_ARGUMENT", f"node {node} has no GPU {gpu!r} "
                           f"(GPUs: {', '.join(x.name for x in n.gpus)})")
        capability(g)
        if gpu in self._lost.get(node, frozenset()):
            raise MigError(409, "GPU_IS_LOST", f"{gpu} has fallen off the bus; heal it first")
        return g, self._state[node][gpu]

    def set_mode(self, node: str, gpu: str, enabled: bool) -> GpuMig:
        with self._lock:
            g, st = self._target(node, gpu)
            self._commit(node, set_mode(g, st, enabled))
            return self._state[node][gpu]

    def create_gpu_instance(self, node: str, gpu: str, profile: int | str, placement: int | None = None) -> int:
        with self._lock:
            g, st = self._target(node, gpu)
            facts, gid = create_gpu_instance(g, st, profile, placement)
            self._commit(node, facts)
            return gid

    def destroy_gpu_instance(self, node: str, gpu: str, gid: int) -> None:
        with self._lock:
            g, st = self._target(node, gpu)
            self._commit(node, destroy_gpu_instance(g, st, gid))

    def create_compute_instance(self, node: str, gpu: str, gid: int, profile: int | str | None,
                                placement: int | None = None) -> int:
        with self._lock:
            g, st = self._target(node, gpu)
            facts, cid = create_compute_instance(g, st, gid, profile, placement)
            self._commit(node, facts)
            return cid

    def destroy_compute_instance(self, node: str, gpu: str, gid: int, cid: int) -> None:
        with self._lock:
            g, st = self._target(node, gpu)
            self._commit(node, destroy_compute_instance(g, st, gid, cid))
