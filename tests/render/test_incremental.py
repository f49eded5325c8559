"""Incremental renders give what a render from scratch gives, and redo only the work a change needs.

The oracle of every test here is the renderer without memory (the full build), which the rest of the suite checks
against real consumers and captures: a re-render after a change must produce the same bytes (snapshot,
``state.json``) and the same tree (sysfs) as rendering the new state afresh.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import types
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fakehw.agent.faults import FAULT_ADAPTER
from fakehw.agent.service import RECENT_EVENTS
from fakehw.agent.state import ActiveFault, Event, NodeFaults, NodeState, derive_state, events_for
from fakehw.model import System, load_profile
from fakehw.model.system import Node
from fakehw.nvml import layout, snapfile, snapshot
from fakehw.nvml.snapcache import SnapshotCache
from fakehw.nvml.snapshot import _Peers, build_snapshot
from fakehw.render import RenderMemo, render_node
from fakehw.render.atomic import Releaser, _temporary, atomic_write, dump_json
from fakehw.render.basic import StateFragments, _Template, state_json
from fakehw.sysfs.tree import RootWriter

PROFILES = sorted(p.stem for p in (Path(snapshot.__file__).parents[1] / "profiles").glob("*.yaml"))


@dataclass
class Scenario:
    """A node and the agent-like bookkeeping of faults injected and healed on it."""

    system: System
    node: Node
    faults: dict[str, ActiveFault] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    generation: int = 1
    counter: int = 0
    gpu_memo: dict[str, Any] = field(default_factory=dict)

    def inject(self, body: dict[str, Any]) -> None:
        self.counter += 1
        self.generation += 1
        fault = ActiveFault(f"f-{self.counter:06d}", self.node.name, FAULT_ADAPTER.validate_python(body),
                            1000.0 + self.counter)
        self.faults[fault.id] = fault
        for kind, data, nvml_type in events_for(fault):
            seq = len(self.events) + 1
            self.events.append(Event(seq, fault.created, self.node.name, body["device"], kind, data, nvml_type,
                                     fault.id))

    def heal(self, device: str) -> None:
        self.generation += 1
        for fid in [f.id for f in self.faults.values() if f.request.device == device]:
            del self.faults[fid]

    def state(self) -> NodeState:
        return derive_state(self.node, list(self.faults.values()), self.generation, self.system.seed,
                            memo=self.gpu_memo)


def changes(node: Node) -> Iterator[dict[str, Any] | str]:
    """Fault requests (and device names to heal) that touch GPU records, links, topology and the event ring."""
    gpus = [g for g in node.gpus]
    if not gpus:
        return
    first, last = gpus[0], gpus[-1]
    yield {"kind": "xid", "device": first.name, "code": 13}
    # Each kind twice with another value: the second changes one field of the GPU's state and not its health or
    # reasons, which is where a record revised instead of rebuilt would go stale.
    yield {"kind": "thermal", "device": last.name, "temperature_c": 60}  # warm: no throttling, only the reading
    yield {"kind": "thermal", "device": last.name, "temperature_c": 61}
    yield {"kind": "ecc", "device": last.name, "type": "sbe", "count": 3, "location": "device-memory"}
    yield {"kind": "ecc", "device": last.name, "type": "sbe", "count": 1, "location": "device-memory"}
    yield {"kind": "power-cap", "device": last.name, "limit_w": 400}
    yield {"kind": "power-cap", "device": last.name, "limit_w": 350}
    yield {"kind": "thermal", "device": last.name, "temperature_c": 95}
    yield {"kind": "xid", "device": last.name, "code": 31}  # an Xid on a GPU whose state is not its boot state
    yield {"kind": "ecc", "device": first.name, "type": "dbe", "count": 2, "location": "device-memory"}
    linked = next((g for g in gpus if g.ports), None)
    if linked is not None:
        yield {"kind": "nvlink-down", "device": linked.name, "link": 0}
        yield {"kind": "nvlink-errors", "device": linked.name, "link": 0, "counter": "replay", "increment": 5}
        yield {"kind": "nvlink-errors", "device": linked.name, "link": 0, "counter": "replay", "increment": 2}
    yield first.name
    yield {"kind": "fallen-off-bus", "device": last.name}
    if linked is not None:
        yield linked.name


def node_changes(node: Node) -> Iterator[dict[str, Any] | str]:
    """Faults that change the node's members besides its GPUs (its memdevs, its pools), each healed after."""
    if node.cxl.memdevs:
        yield {"kind": "cxl-offline", "device": node.cxl.memdevs[0].name}
        yield node.cxl.memdevs[0].name
    for pool in node.memory_pools[:1]:
        yield {"kind": "pool-shrink", "device": pool.name, "bytes": 2**30}
        yield pool.name


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshot stamps retired pages with the wall clock: freeze it so builds at different times compare."""
    monkeypatch.setattr(snapshot, "time", types.SimpleNamespace(time=lambda: 1_700_000_000.0))


def first_nodes(system: System) -> list[Node]:
    """One node per node template (what differs between templates is what the snapshot is built from)."""
    seen: set[int] = set()
    out = []
    for node in system.nodes:
        if node.template not in seen:
            seen.add(node.template)
            out.append(node)
    return out


def packed_with(cache: SnapshotCache, snap: snapshot.Snapshot) -> bytes:
    """``snap`` packed with ``cache``, having checked what the cache then says changed: outside its dirty ranges
    every byte is that of the snapshot it packed before, since the writer writes only those ranges into a file that
    holds that one (:class:`fakehw.nvml.snapfile.Patch`); a range left out would leave stale bytes in the file."""
    before = cache.packed
    data = snap.to_bytes(cache)
    if before is not None and cache.dirty is not None:
        outside = bytearray(data)
        for start, end in cache.dirty:
            outside[start:end] = before[start:end]
        assert bytes(outside) == before, "a byte changed outside the ranges the cache gives"
    return data


@pytest.mark.usefixtures("fixed_clock")
@pytest.mark.parametrize("profile", PROFILES)
def test_a_snapshot_rebuilt_from_its_cache_is_the_full_build(profile: str) -> None:
    system = load_profile(profile)
    for node in first_nodes(system)[:3]:
        run = Scenario(system, node)
        cache = SnapshotCache()
        for change in [None, *changes(node)]:
            if isinstance(change, dict):
                run.inject(change)
            elif isinstance(change, str):
                run.heal(change)
            state, events = run.state(), tuple(run.events)
            incremental = packed_with(cache, build_snapshot(system, node, state, events, render_time=5.0,
                                                            cache=cache))
            full = build_snapshot(system, node, state, events, render_time=5.0,
                                  gpu_generations=cache.generations()).to_bytes()
            assert incremental == full, f"{profile} {node.name} after {change}"
            assert change is None or cache.dirty is not None, "a change of the same shape is patched"


@pytest.mark.usefixtures("fixed_clock")
def test_a_fault_on_one_gpu_rebuilds_that_gpu_only() -> None:
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    run = Scenario(system, node)
    cache = SnapshotCache()
    build_snapshot(system, node, run.state(), (), cache=cache).to_bytes(cache)
    before = cache.generations()
    built = cache.built
    run.inject({"kind": "power-cap", "device": "gpu3", "limit_w": 400})
    build_snapshot(system, node, run.state(), tuple(run.events), cache=cache).to_bytes(cache)
    after = cache.generations()
    assert cache.built - built == 1 + len(run.events)  # gpu3's record and the new events' records
    assert {g for g in after if after[g] != before[g]} == {"gpu3"}
    assert after["gpu3"] == run.generation


@pytest.mark.usefixtures("fixed_clock")
def test_an_xid_changes_the_two_fields_that_show_it_and_nothing_else() -> None:
    """An Xid (or its heal) changes a GPU's Xid history and nothing NVML reads beyond its count and last code
    (nvmlEventData_t.eventData carries the code through the event ring): the GPU's record is the last one with
    those two fields changed, its readings still those of the generation they were made at, and the snapshot the
    same as one built in full at that generation. (Xid 32 is not among the codes the fake counts as critical,
    ``CRITICAL_XIDS``: the GPU's health, which the record does not show, stays as it is.)"""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    run = Scenario(system, node)
    cache = SnapshotCache()
    first = build_snapshot(system, node, run.state(), (), cache=cache)
    first.to_bytes(cache)
    before = cache.generations()
    for code in (32, 32):
        run.inject({"kind": "xid", "device": "gpu3", "code": code})
    snap = build_snapshot(system, node, run.state(), tuple(run.events), cache=cache)
    assert cache.generations() == before
    was, now = first.gpus[3].__dict__, snap.gpus[3].__dict__
    assert {name for name in now if now[name] != was[name]} == {"xid_count", "last_xid"}
    assert (now["xid_count"], now["last_xid"]) == (2, 32)
    data = packed_with(cache, snap)
    assert data == build_snapshot(system, node, run.state(), tuple(run.events),
                                  gpu_generations=cache.generations()).to_bytes()
    # Packed as the two fields: of the GPU section, only their bytes in gpu3's record were written.
    header = layout.unpack(layout.HeaderRecord, data)
    gpus = (header.gpu_offset, header.gpu_offset + header.gpu_count * header.gpu_record_size)
    gpu3 = header.gpu_offset + 3 * header.gpu_record_size
    fields = {(gpu3 + f.offset, gpu3 + f.offset + f.size) for f in layout.layout_of(layout.GpuRecord).fields
              if f.name in ("xid_count", "last_xid")}
    assert {r for r in cache.dirty or () if r[0] < gpus[1] and r[1] > gpus[0]} == fields
    run.heal("gpu3")
    healed = build_snapshot(system, node, run.state(), tuple(run.events), cache=cache)
    assert healed.gpus[3].__dict__ == was  # the two fields back, the readings where they were


@pytest.mark.usefixtures("fixed_clock")
def test_a_critical_xid_rebuilds_the_record_once_and_its_repeats_revise_it() -> None:
    """The first critical Xid of a GPU changes its health (the state's verdict, which the revision compares though
    no record field shows it): a record built afresh at the new generation; the same code again changes only the
    history (the verdict names each code once), so the record is revised and its readings stay."""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    run = Scenario(system, node)
    cache = SnapshotCache()
    build_snapshot(system, node, run.state(), (), cache=cache).to_bytes(cache)
    run.inject({"kind": "xid", "device": "gpu3", "code": 13})
    build_snapshot(system, node, run.state(), tuple(run.events), cache=cache).to_bytes(cache)
    assert run.state().gpus[3].health == "unhealthy" and cache.generations()["gpu3"] == run.generation
    rebuilt = cache.generations()
    run.inject({"kind": "xid", "device": "gpu3", "code": 13})
    snap = build_snapshot(system, node, run.state(), tuple(run.events), cache=cache)
    assert cache.generations() == rebuilt
    assert snap.gpus[3].xid_count == 2


@pytest.mark.usefixtures("fixed_clock")
def test_the_event_ring_follows_a_moving_window_of_events() -> None:
    """The agent hands the snapshot a window of the node's last RECENT_EVENTS events: it moves forward, some events
    have no NVML record (a memdev's, or of a kind NVML does not report). Through hundreds of changes, past the
    point where events leave the window and the ring is full, the cached build equals the full build, and each
    build makes records only for the events that joined."""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    state = derive_state(node, [], 1, system.seed)
    cache = SnapshotCache()
    build_snapshot(system, node, state, (), cache=cache).to_bytes(cache)  # every GPU's record: none after this
    window: deque[Event] = deque(maxlen=RECENT_EVENTS)
    seq = 0
    for step in range(RECENT_EVENTS + 60):
        joined = 1 + step % 3
        for k in range(joined):
            seq += 1
            device = ("mem0" if k == 2 else node.gpus[seq % len(node.gpus)].name)
            window.append(Event(seq, 1000.0 + seq, node.name, device, "xid", 13 + seq % 50, 0 if seq % 7 == 0 else 8))
        built = cache.built
        events = tuple(window)
        incremental = packed_with(cache, build_snapshot(system, node, state, events, render_time=5.0, cache=cache))
        assert cache.built - built == joined, f"step {step}"
        assert cache.dirty is not None, f"step {step}"
        full = build_snapshot(system, node, state, events, render_time=5.0).to_bytes()
        assert incremental == full, f"step {step}"
    ring = snapshot.Snapshot.from_bytes(full).events
    assert len(ring) == min(layout.MAX_EVENTS, sum(1 for e in window if e.nvml_type and e.device != "mem0"))
    # A window that did not move forward (the agent restarted; another window) is made again, whole; the file
    # patched from the full ring holds only its records (the places the ring no longer fills are zeros again).
    built = cache.built
    incremental = packed_with(cache, build_snapshot(system, node, state, events[:10], render_time=5.0, cache=cache))
    assert cache.built - built == 10
    assert incremental == build_snapshot(system, node, state, events[:10], render_time=5.0).to_bytes()


@pytest.mark.usefixtures("fixed_clock")
def test_a_window_whose_events_came_out_of_order_is_put_in_order_whatever_joined_after() -> None:
    """The snapshot's event ring is in order of the events' numbers and its header names the greatest (the shim
    hands waiters the events past the last number they saw: docs/nvml.md). The agent raises events in order, and
    the cache checks only the events that join; a window where one joined out of order (a number below the
    newest's) must still be put in order, by the incremental build as by the full one, while it stays in the
    window and after events join behind it, and the greatest number must not be taken from the newest event."""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    state = derive_state(node, [], 1, system.seed)
    cache = SnapshotCache()
    window: deque[Event] = deque(maxlen=8)
    numbers = [1, 2, 3, 10, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15]  # 10 joins before 4..9: out of order until it leaves
    for step, seq in enumerate(numbers):
        window.append(Event(seq, 1000.0 + seq, node.name, node.gpus[seq % len(node.gpus)].name, "xid", 13, 8))
        events = tuple(window)
        incremental = packed_with(cache, build_snapshot(system, node, state, events, render_time=5.0, cache=cache))
        full = build_snapshot(system, node, state, events, render_time=5.0).to_bytes()
        assert incremental == full, f"step {step}"
        parsed = snapshot.Snapshot.from_bytes(incremental)
        assert [e.seq for e in parsed.events] == sorted(e.seq for e in events), f"step {step}"
        assert parsed.header.event_last_seq == max(e.seq for e in events), f"step {step}"


def old_peers(system: System, node: Node) -> _Peers:
    """The lookup as it was before it was restricted to what the node's ports reach: every switch of the node and
    its domain, every GPU of the fleet (the answers for the node's ports must not change)."""
    peers = _Peers()
    for sw in node.nvswitches:
        peers.device_id[sw.id] = (sw.sku.pci_device_id << 16) | 0x10DE
    domain = system.domain_of(node)
    if domain is not None:
        for sw in domain.switches:
            peers.device_id[sw.id] = (sw.sku.pci_device_id << 16) | 0x10DE
    for g in system.gpus():
        peers.device_id[g.id] = g.sku.pci_device_vendor_id
        peers.subsystem_id[g.id] = g.sku.pci_subsystem_id
    return peers


@pytest.mark.usefixtures("fixed_clock")
@pytest.mark.parametrize("profile", PROFILES)
def test_peers_of_the_node_and_its_domain_answer_as_the_whole_fleet_did(profile: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    system = load_profile(profile)
    for node in system.nodes:
        state = derive_state(node, [], 3, system.seed)
        new = build_snapshot(system, node, state, render_time=1.0).to_bytes()
        with monkeypatch.context() as m:
            m.setattr(snapshot, "_peers", old_peers)
            old = build_snapshot(system, node, state, render_time=1.0).to_bytes()
        assert new == old, f"{profile} {node.name}"


def test_a_link_to_another_gpu_reports_that_gpus_pci_ids() -> None:
    """From the catalogue (the board's PCI ids), not from the code that builds the record."""
    system = load_profile("riscv-nvlink-fusion")
    for node in system.nodes:
        peers = snapshot._peers(system, node)
        for gpu in node.gpus:
            for port in gpu.ports:
                if port.remote_kind == "gpu":
                    owner, _, name = port.remote_id.rpartition("/")
                    remote = system.node(owner).gpu(name)  # type: ignore[union-attr]
                    assert remote is not None
                    assert peers.device_id[port.remote_id] == remote.sku.pci_device_vendor_id


@pytest.mark.parametrize("profile", ["dgx-h100", "gb200-nvl72", "cxl-pool"])
def test_state_json_from_fragments_is_the_full_encoding(profile: str) -> None:
    system = load_profile(profile)
    node = system.nodes[0]
    run = Scenario(system, node)
    memo = StateFragments()
    for change in [None, *changes(node), *node_changes(node)]:
        if isinstance(change, dict):
            run.inject(change)
        elif isinstance(change, str):
            run.heal(change)
        state = run.state()
        assert state_json(state, memo) == dump_json(state.to_json(), compact=True)


def tree(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under ``root``: kind or mode, and content."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(base) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir", "")
            elif path.is_char_device():
                out[rel] = ("chr", str(path.stat().st_rdev))
            else:
                st = path.stat()
                # A BAR's resourceN file is sparse and as big as the BAR (GiBs): its size is what it says.
                sparse = st.st_size > 1 << 20 and st.st_blocks * 512 < st.st_size
                out[rel] = (oct(st.st_mode & 0o777), f"sparse {st.st_size}" if sparse else path.read_bytes())
    return out


def test_a_node_rendered_with_memory_is_the_node_rendered_afresh(fast_tmp: Path) -> None:
    """Every change is rendered with memory; the tree is compared with a fresh render after a GPU fell off the
    bus and once everything is healed (a fresh tree is ~17,000 entries: two comparisons keep this test quick)."""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    run = Scenario(system, node)
    memo = RenderMemo()
    release = Releaser()
    steps = [*changes(node), *(g.name for g in node.gpus)]
    compare = {steps.index(next(c for c in steps if isinstance(c, dict) and c["kind"] == "fallen-off-bus")),
               len(steps) - 1}
    try:
        render_node(system, node, run.state(), fast_tmp / "kept", initial=True, memo=memo, release=release)
        for i, change in enumerate(steps):
            if isinstance(change, dict):
                run.inject(change)
            else:
                run.heal(change)
            state = run.state()
            render_node(system, node, state, fast_tmp / "kept", events=tuple(run.events), memo=memo, release=release)
            if i not in compare:
                continue
            fresh = fast_tmp / f"fresh-{i}"
            render_node(system, node, state, fresh, initial=True, events=tuple(run.events))
            kept = tree(fast_tmp / "kept" / "root")
            assert kept == tree(fresh / "root"), f"after {change}"
            assert (fast_tmp / "kept" / "state.json").read_bytes() == (fresh / "state.json").read_bytes()
    finally:
        release.close()


def test_the_releaser_closes_what_it_is_given_and_closes_inline_when_full(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    release = Releaser(limit=1)
    fds = [release.hold(path) for _ in range(50)]
    assert all(fd is not None for fd in fds)
    for fd in fds:
        release.later(fd)  # type: ignore[arg-type]
    release.close()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)  # type: ignore[arg-type]
    assert release.hold(tmp_path / "missing") is None


def open_handles(fds: list[int]) -> list[int]:
    """Those of ``fds`` still open in this process (fstat(2) fails with EBADF on a closed one)."""
    still = []
    for fd in fds:
        try:
            os.fstat(fd)
        except OSError:
            continue
        still.append(fd)
    return still


def test_a_releaser_that_wakes_at_a_count_leaves_closes_to_drain_until_that_many_wait(tmp_path: Path) -> None:
    """``wake_at``: below it, handles wait for :meth:`Releaser.drain` on the caller's thread (the agent's moment
    after an answer is sent); at it, the releaser's thread closes the batch itself (a change no request follows
    must not keep replaced files open for ever)."""
    path = tmp_path / "f"
    path.write_bytes(b"x")
    release = Releaser(wake_at=3)

    def handed(count: int) -> list[int]:
        fds = [fd for fd in (release.hold(path) for _ in range(count)) if fd is not None]
        assert len(fds) == count
        for fd in fds:
            release.later(fd)
        return fds

    try:
        waiting = handed(2)
        time.sleep(0.05)  # a woken thread would have closed them by now
        assert open_handles(waiting) == waiting, "two of three: nothing woke the thread"
        release.drain()
        assert open_handles(waiting) == []
        batch = handed(3)
        deadline = time.monotonic() + 5
        while open_handles(batch) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert open_handles(batch) == [], "the third handle woke the thread"
    finally:
        release.close()


def test_a_snapshot_rendered_with_memory_is_written_when_its_answers_change_and_put_back_when_removed(
        tmp_path: Path) -> None:
    """The renderer remembers the answers it wrote last, so a change is written without reading the file back;
    a render that changes nothing leaves the file alone (its mtime stays) unless the file is gone."""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    run = Scenario(system, node)
    memo = RenderMemo()
    path = tmp_path / snapshot.SNAPSHOT_FILE

    def render() -> snapshot.Snapshot:
        render_node(system, node, run.state(), tmp_path, initial=not path.exists(), events=tuple(run.events),
                    outputs=frozenset({"nvml"}), memo=memo)
        return snapshot.Snapshot.from_bytes(path.read_bytes())

    assert render().gpus[0].xid_count == 0
    run.inject({"kind": "xid", "device": node.gpus[0].name, "code": 13})
    changed = render()
    assert changed.gpus[0].xid_count == 1 and changed.gpus[0].last_xid == 13 and len(changed.events) == 1
    before = path.stat().st_mtime_ns
    assert snapfile.snapshot_answers(render().to_bytes()) == snapfile.snapshot_answers(changed.to_bytes())
    assert path.stat().st_mtime_ns == before, "nothing changed: the file is left alone"
    path.unlink()
    assert render().gpus[0].xid_count == 1, "the same answers again: a removed file is put back"


def _object_text(doc: dict[str, Any], raw: dict[str, str]) -> str:
    """``doc``'s JSON text with the members of ``raw`` given as text, through a template made for them."""
    return _Template(doc, raw).fill(raw)


@pytest.mark.parametrize("value", ["\x00raw\x00xids", "\x00raw\x00faults", "a \x00raw\x00xids and \x00raw\x00faults"])
def test_a_value_that_holds_a_placeholder_is_still_encoded_as_json_dumps_would(value: str) -> None:
    """``_object_text`` splices members given as text into one ``json.dumps`` of the object at placeholders; a value
    of the object that holds a placeholder's own text must not be taken for it (the oracle: ``json.dumps`` of the
    whole object, the standard library's encoding of the same document)."""
    doc = {"name": value, "zeta": [value], "index": 3}
    raw = {"xids": "[13,79]", "faults": '["f-000001"]'}
    whole = {**doc, "xids": [13, 79], "faults": ["f-000001"]}
    assert _object_text(doc, raw) == json.dumps(whole, sort_keys=True, separators=(",", ":"))


def test_a_temporary_name_someone_else_holds_is_skipped_and_left_alone(tmp_path: Path) -> None:
    """``atomic_write``'s temporary files are created with ``O_EXCL`` under a per-process numbered name: a name that
    already exists (another writer's, or a leftover) is neither opened nor truncated; the write goes on under the
    next free name and the target gets the new content."""
    target = tmp_path / "state.json"
    fd, first = _temporary(target)
    os.close(fd)
    os.unlink(first)
    prefix, _, number = first.rpartition("-")
    squatters = [Path(f"{prefix}-{int(number) + k}") for k in (1, 2, 3)]
    for path in squatters:
        path.write_bytes(b"someone else's")
    atomic_write(target, b"{}\n")
    assert target.read_bytes() == b"{}\n"
    assert [p.read_bytes() for p in squatters] == [b"someone else's"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["state.json", *(p.name for p in squatters)])
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)


def test_a_temporary_file_sits_beside_its_target_whatever_its_path(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The temporary must be in the target's directory (a rename does not cross filesystems): for an absolute
    path, a relative one and a bare name (the working directory)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    for target in (tmp_path / "sub" / "a.json", Path("sub/b.json"), Path("c.json")):
        fd, tmp = _temporary(target)
        os.close(fd)
        assert Path(tmp).resolve().parent == target.resolve().parent and Path(tmp).name.startswith(f".{target.name}.")
        os.unlink(tmp)


@dataclass
class Kept:
    """A dgx-h100 node rendered with memory into ``out``, as an agent keeps its node between renders."""

    run: Scenario
    out: Path
    memo: RenderMemo = field(default_factory=RenderMemo)
    release: Releaser = field(default_factory=Releaser)

    def render(self, initial: bool = False) -> None:
        run = self.run
        render_node(run.system, run.node, run.state(), self.out, initial=initial, events=tuple(run.events),
                    memo=self.memo, release=self.release)

    def fresh(self, out: Path) -> dict[str, tuple[str, bytes | str]]:
        """The tree a render without memory makes of the same state (the oracle)."""
        run = self.run
        render_node(run.system, run.node, run.state(), out, initial=True, events=tuple(run.events))
        return tree(out / "root")


@pytest.fixture
def kept(fast_tmp: Path) -> Iterator[Kept]:
    system = load_profile("dgx-h100")
    node = Kept(Scenario(system, system.nodes[0]), fast_tmp / "kept")
    node.render(initial=True)
    yield node
    node.release.close()


def test_a_root_tree_removed_is_written_again_by_a_change_that_touches_none_of_it(kept: Kept,
                                                                                  fast_tmp: Path) -> None:
    """An Xid changes nothing the fake root is built from, so a re-render with memory leaves the tree alone; a tree
    someone removed meanwhile must still come back (as a render without memory would make it), not be taken for
    the one the memory describes."""
    shutil.rmtree(kept.out / "root")
    kept.run.inject({"kind": "xid", "device": kept.run.node.gpus[0].name, "code": 13})
    kept.render()
    assert tree(kept.out / "root") == kept.fresh(fast_tmp / "fresh")


def test_a_root_render_that_failed_half_way_is_completed_by_the_next_render_of_the_same_state(
        kept: Kept, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU falling off the bus changes the fake root (its PCI function goes); if writing that change fails (a
    full disk: ENOSPC, write(2)), the next render of the same state must finish the job, as a render without memory
    would, rather than take the memory of what it meant to write for what is on disk."""
    kept.run.inject({"kind": "fallen-off-bus", "device": kept.run.node.gpus[-1].name})
    with monkeypatch.context() as patch:
        def full_disk(*_: object, **__: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")
        patch.setattr(RootWriter, "_write_all", full_disk)
        patch.setattr(RootWriter, "_remove", full_disk)
        with pytest.raises(OSError):
            kept.render()
    kept.render()
    assert tree(kept.out / "root") == kept.fresh(fast_tmp / "fresh")


def test_state_json_follows_a_gpu_whose_only_change_besides_its_lists_is_one_value() -> None:
    """``state.json`` keeps a GPU's text when only its growing lists changed; each fault here changes one more
    member of the same GPU besides its lists (a temperature below the H100's 89 C slowdown, so no throttle or health
    change; a replay counter of one link; a power cap), and a heal shrinks the lists back. Every file must be the
    json module's encoding of the whole state (``dump_json``), the reference that knows nothing of remembered text."""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    gpu = node.gpus[2].name
    run = Scenario(system, node)
    memo = StateFragments()
    steps: list[dict[str, Any] | str] = [
        {"kind": "xid", "device": gpu, "code": 13},
        {"kind": "xid", "device": gpu, "code": 13},
        {"kind": "thermal", "device": gpu, "temperature_c": 60},
        {"kind": "thermal", "device": gpu, "temperature_c": 61},
        {"kind": "nvlink-errors", "device": gpu, "link": 3, "counter": "replay", "increment": 1},
        {"kind": "nvlink-errors", "device": gpu, "link": 3, "counter": "replay", "increment": 1},
        {"kind": "power-cap", "device": gpu, "limit_w": 500},
        gpu,
        {"kind": "xid", "device": gpu, "code": 13},
    ]
    temperatures = []
    for step in [None, *steps]:
        if isinstance(step, dict):
            run.inject(step)
        elif isinstance(step, str):
            run.heal(step)
        state = run.state()
        data = state_json(state, memo)
        assert data == dump_json(state.to_json(), compact=True), step
        temperatures.append(json.loads(data)["gpus"][2]["temperature_c"])
    assert temperatures == [29, 29, 29, 60, 61, 61, 61, 61, 29, 29], "idle 29 C, then the hottest fault's"


def test_a_devices_faults_follow_every_add_and_remove_in_injection_order() -> None:
    """NodeFaults keeps each device's answer until that device's faults change: after any mix of injections and
    heals, ``on(device)`` is the faults still active on it in the order they were injected (the list a fresh
    reader would make from the active faults), and an unchanged device keeps its answer."""
    faults = [ActiveFault(f"f-{i:06d}", "n", FAULT_ADAPTER.validate_python(
        {"kind": "xid", "device": f"gpu{i % 3}", "code": 13}), float(i)) for i in range(12)]
    grouped = NodeFaults()
    active: list[ActiveFault] = []
    steps: list[tuple[str, int]] = [("add", i) for i in range(6)] + [("remove", 1), ("add", 6), ("remove", 0),
                                                                      ("add", 7), ("remove", 6), ("add", 8)]
    for verb, i in steps:
        before = {d: grouped.on(d) for d in ("gpu0", "gpu1", "gpu2")}
        if verb == "add":
            grouped.add(faults[i])
            active.append(faults[i])
        else:
            grouped.remove(faults[i].id)
            active.remove(faults[i])
        touched = faults[i].request.device
        for device in ("gpu0", "gpu1", "gpu2"):
            assert grouped.on(device) == tuple(f for f in active if f.request.device == device), (verb, i, device)
            if device != touched:
                assert grouped.on(device) is before[device], "an unchanged device keeps its answer"
