"""Rendering outside the agent's lock, one batch at a time (fakehw/agent/service.py, ``_flush``).

What a client may rely on, whatever other clients do at the same time: when ``inject`` returns, the node's files
(state.json, the NVML snapshot's event ring) and the API (state, events) show the fault; the API never shows a
change the files do not show yet; files only move forward; and a change made by another module under the agent's
lock (a MIG or platform change) renders while batches are in flight without deadlock. The expected values are the
requests each test made (the fault ids the agent answered with, the events it numbered), not the renderers' output.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehw.agent.service import AgentService
from fakehw.agent.state import Event, NodeState
from fakehw.model import load_profile
from fakehw.nvml.snapshot import SNAPSHOT_FILE, read_snapshot
from fakehw.render import RenderResult

JOIN_S = 60.0
"""A hang guard, not a timing: every thread here finishes in well under a second unless the agent deadlocks."""


@pytest.fixture
def gb200(tmp_path: Path) -> Iterator[AgentService]:
    svc = AgentService(load_profile("gb200-nvl72"), tmp_path)
    yield svc
    svc.close()


def _run(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.start()
    _join(threads)


def _join(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(JOIN_S)
    assert not [t.name for t in threads if t.is_alive()], "the agent deadlocked"


def _fault_ids_in_files(svc: AgentService, node: str) -> set[str]:
    doc = json.loads((svc.node_dir(node) / "state.json").read_text())
    return {f["id"] for f in doc["faults"]}


class _Gate:
    """Holds the next render of any node (``AgentService._write``) until released; counts every render."""

    def __init__(self, svc: AgentService) -> None:
        self.writes = 0
        self.entered = threading.Event()
        self.go = threading.Event()
        self._armed = True
        write = svc._write

        def gated(name: str, state: NodeState, events: tuple[Event, ...], initial: bool) -> RenderResult:
            self.writes += 1
            if self._armed:
                self._armed = False
                self.entered.set()
                assert self.go.wait(JOIN_S)
            return write(name, state, events, initial)

        svc._write = gated  # type: ignore[method-assign]


def test_every_acknowledged_injection_is_in_the_files_and_the_api(gb200: AgentService) -> None:
    """16 clients inject over 18 trays at once; each checks, right after its answer, that the tray's state.json,
    its NVML snapshot's event ring, the API's state and the API's events all carry the fault it was answered."""
    nodes = gb200.node_names
    problems: list[str] = []

    def client(k: int) -> None:
        for i in range(12):
            node = nodes[(k * 12 + i) % len(nodes)]
            fault = gb200.inject(node, {"kind": "xid", "device": f"gpu{i % 4}", "code": 13})
            if fault.id not in _fault_ids_in_files(gb200, node):
                problems.append(f"{fault.id}: not in {node}/state.json")
            ring = {e.seq for e in read_snapshot(gb200.node_dir(node) / SNAPSHOT_FILE).events}
            seqs = {e.seq for e in gb200.events(node=node, limit=10_000) if e.fault == fault.id}
            if not seqs:
                problems.append(f"{fault.id}: no event in the API")
            if not seqs <= ring:
                problems.append(f"{fault.id}: events {sorted(seqs - ring)} not in {node}'s snapshot")
            if fault.id not in {f.id for f in gb200.state(node).faults}:
                problems.append(f"{fault.id}: not in the API's state of {node}")

    _run([threading.Thread(target=client, args=(k,), name=f"client-{k}") for k in range(16)])
    assert problems == []
    assert len(gb200.faults()) == 16 * 12


def test_changes_applied_while_a_batch_renders_share_the_next_one(tmp_path: Path) -> None:
    """The point of batching: while one render runs, the other clients' changes are journaled and applied, and one
    more render of the node shows all of them (not one render each)."""
    svc = AgentService(load_profile("dgx-h100"), tmp_path)
    try:
        gate = _Gate(svc)
        node = svc.node_names[0]
        first = threading.Thread(target=svc.inject, args=(node, {"kind": "xid", "device": "gpu0", "code": 13}))
        first.start()
        assert gate.entered.wait(JOIN_S)
        others = [threading.Thread(target=svc.inject, args=(node, {"kind": "xid", "device": f"gpu{k % 8}",
                                                                   "code": 31}), name=f"client-{k}")
                  for k in range(12)]
        for t in others:
            t.start()
        deadline = time.monotonic() + JOIN_S
        while svc._applied < 13:  # every change journaled and applied while the first render is held
            assert time.monotonic() < deadline, f"{svc._applied} of 13 changes applied"
            time.sleep(0.005)
        assert svc.events(node=node) == [], "the API showed changes whose files were not written yet"
        gate.go.set()
        _join([first, *others])
        assert gate.writes == 2, f"{gate.writes} renders for 13 changes held behind one render (want 2)"
        assert len(_fault_ids_in_files(svc, node)) == 13
    finally:
        svc.close()


def test_the_api_shows_a_change_only_once_the_files_do(tmp_path: Path) -> None:
    """A change applied but not yet rendered is in neither the API's events nor its state; after the render it is
    in both (the agent's rule: the API never reports what the files do not show yet)."""
    svc = AgentService(load_profile("dgx-h100"), tmp_path)
    try:
        node = svc.node_names[0]
        gate = _Gate(svc)
        before = svc.state(node)
        t = threading.Thread(target=svc.inject, args=(node, {"kind": "xid", "device": "gpu2", "code": 79}))
        t.start()
        assert gate.entered.wait(JOIN_S)
        assert svc.events() == [] and svc.last_seq == 0
        assert svc.state(node) is before
        assert svc.events(wait=0.05) == []  # a waiting reader is not woken by the unrendered change either
        gate.go.set()
        _join([t])
        assert [e.kind for e in svc.events()] != [] and svc.last_seq > 0
        assert [f.request.device for f in svc.state(node).faults] == ["gpu2"]
    finally:
        svc.close()


def test_a_change_under_the_lock_renders_behind_a_batch_without_deadlock(gb200: AgentService) -> None:
    """Other modules (MIG, platform, CXL) change nodes while holding the agent's lock and want the files to show it
    before they return (``nodes_changed``). With a batch's render in flight that must neither deadlock nor let the
    older batch overwrite the newer files."""
    gate = _Gate(gb200)
    a, b = gb200.node_names[:2]
    t = threading.Thread(target=gb200.inject, args=(a, {"kind": "xid", "device": "gpu0", "code": 13}))
    t.start()
    assert gate.entered.wait(JOIN_S)
    generation = gb200.state(b).generation

    def other_module() -> None:
        with gb200.lock:
            gb200.nodes_changed([b])

    changer = threading.Thread(target=other_module)
    changer.start()
    changer.join(0.2)
    assert changer.is_alive(), "rendered while another batch was still writing files"
    gate.go.set()
    _join([t, changer])
    assert gb200.state(b).generation > generation
    assert json.loads((gb200.node_dir(b) / "state.json").read_text())["generation"] == gb200.state(b).generation
    assert len(_fault_ids_in_files(gb200, a)) == 1


def test_a_render_that_fails_leaves_the_node_stale_and_the_change_acknowledged(gb200: AgentService) -> None:
    """The change is durable before anything renders, so a renderer's failure does not turn it into an error
    answer (which would tell the client nothing was applied); health names the node, and the next batch renders
    it again."""
    node = gb200.node_names[3]
    real = gb200._write
    calls = {"n": 0}

    def broken(name: str, state: NodeState, events: tuple[Event, ...], initial: bool) -> RenderResult:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("renderer bug")
        return real(name, state, events, initial)

    gb200._write = broken  # type: ignore[method-assign]
    fault = gb200.inject(node, {"kind": "xid", "device": "gpu1", "code": 13})
    assert "renderer bug" in gb200.health()["stale_nodes"][node]
    assert fault.id not in _fault_ids_in_files(gb200, node)
    second = gb200.inject(gb200.node_names[4], {"kind": "xid", "device": "gpu1", "code": 13})
    assert gb200.health()["stale_nodes"] == {}
    assert fault.id in _fault_ids_in_files(gb200, node)
    assert second.id in _fault_ids_in_files(gb200, gb200.node_names[4])
