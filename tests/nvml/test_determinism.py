"""Readings and counters are a pure function of (seed, node, GPU, generation): same seed, same answers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from fakehw.model import load_profile
from fakehw.nvml.layout import GpuRecord
from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import FakeProcess, Snapshot, build_snapshot
from tests.nvml.helpers import NodeSnap, faults_state, run_python, snapshot_env

READ = ("import json, pynvml\npynvml.nvmlInit()\nout=[]\nfor i in range(pynvml.nvmlDeviceGetCount()):\n"
        "    h = pynvml.nvmlDeviceGetHandleByIndex(i)\n    u = pynvml.nvmlDeviceGetUtilizationRates(h)\n"
        "    out.append([pynvml.nvmlDeviceGetPowerUsage(h), u.gpu, u.memory, "
        "pynvml.nvmlDeviceGetTotalEnergyConsumption(h), pynvml.nvmlDeviceGetNvLinkUtilizationCounter(h, 0, 0)])\n"
        "print(json.dumps(out))\n")


def readings(rec: GpuRecord) -> GpuRecord:
    """A GPU record without the wall-clock fields."""
    return dataclasses.replace(rec, retired_time=0)


def test_same_seed_same_snapshot_contents() -> None:
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    faults = [{"kind": "ecc", "device": "gpu1", "type": "dbe", "count": 1}]
    a = build_snapshot(system, node, faults_state(node, faults, system.seed, 7)[0], render_time=1.0)
    b = build_snapshot(system, node, faults_state(node, faults, system.seed, 7)[0], render_time=2.0)
    assert [readings(r) for r in a.gpus] == [readings(r) for r in b.gpus]
    reseeded = dataclasses.replace(system, seed=system.seed + 1)
    c = build_snapshot(reseeded, node, faults_state(node, faults, reseeded.seed, 7)[0])
    assert [r.power_usage_mw for r in a.gpus] != [r.power_usage_mw for r in c.gpus]


def test_counters_move_on_with_the_generation() -> None:
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    early = build_snapshot(system, node, faults_state(node, [], system.seed, 3)[0])
    late = build_snapshot(system, node, faults_state(node, [], system.seed, 4)[0])
    for e, la in zip(early.gpus, late.gpus, strict=True):
        assert la.energy_mj > e.energy_mj
        assert la.links[0].util_rx[0] > e.links[0].util_rx[0]


def test_two_processes_on_two_renders_read_the_same(node_snapshot: Callable[..., NodeSnap]) -> None:
    first = node_snapshot("dgx-h100", faults=[{"kind": "thermal", "device": "gpu2", "temperature_c": 91}])
    second = node_snapshot("dgx-h100", faults=[{"kind": "thermal", "device": "gpu2", "temperature_c": 91}])
    assert run_python(READ, first.path) == run_python(READ, second.path)


def test_a_rerender_with_nothing_changed_keeps_the_file(tmp_path: Path) -> None:
    """Only the render time differs: the file (and the time its samples carry) stays; a real change rewrites it."""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    path = tmp_path / "nvml.snapshot"
    state = faults_state(node, [], system.seed, 3)[0]
    assert write_snapshot(path, build_snapshot(system, node, state, render_time=1.0).to_bytes())
    first = path.read_bytes()
    assert not write_snapshot(path, build_snapshot(system, node, state, render_time=2.0).to_bytes())
    assert path.read_bytes() == first
    assert Snapshot.from_bytes(first).header.render_time_us == 1_000_000
    changed = faults_state(node, [{"kind": "thermal", "device": "gpu2", "temperature_c": 91}], system.seed, 4)[0]
    assert write_snapshot(path, build_snapshot(system, node, changed, render_time=3.0).to_bytes())
    assert Snapshot.from_bytes(path.read_bytes()).header.render_time_us == 3_000_000


def test_a_reader_that_holds_the_file_sees_its_superseded_word_change_on_every_change(tmp_path: Path) -> None:
    """write_snapshot's contract with the shim (docs/nvml.md, "The snapshot format"): a process that mapped the
    file learns of a change from its ``superseded`` word (csrc/core.c reads it on every call, without a system
    call). A re-render that keeps the file leaves it alone; a change of the same size is written into the file in
    place and moves the word to the next even value (2, then 4); a change of size (a process adds a record)
    renames a new file over it, whose word is 0, and sets the old file's to 0xFFFFFFFF. The renderer closes only what
    it opened: its own stdin (descriptor 0, what an unset "no old file" descriptor must never be taken for) stays
    open."""
    import os
    import struct

    from fakehw.nvml import layout

    system = load_profile("dgx-h100")
    node = system.nodes[0]
    path = tmp_path / "nvml.snapshot"
    offset = layout.layout_of(layout.HeaderRecord).field("superseded").offset

    def flag(fd: int) -> int:
        word: int = struct.unpack("<I", os.pread(fd, 4, offset))[0]
        return word

    def render(faults: list[dict[str, object]], generation: int, time: float,
               processes: tuple[FakeProcess, ...] = ()) -> bytes:
        state, raised = faults_state(node, faults, system.seed, generation)
        return build_snapshot(system, node, state, raised, processes, render_time=time).to_bytes()

    try:
        stdin_before: os.stat_result | None = os.fstat(0)
    except OSError:  # run with stdin closed: nothing to check there
        stdin_before = None
    hot = {"kind": "thermal", "device": "gpu2", "temperature_c": 91}
    assert write_snapshot(path, render([], 3, 1.0))
    assert stdin_before is None or os.fstat(0) == stdin_before
    held = os.open(path, os.O_RDONLY)
    try:
        assert flag(held) == 0
        assert not write_snapshot(path, render([], 3, 2.0))
        assert flag(held) == 0, "a kept file is not touched"
        assert write_snapshot(path, render([hot], 4, 3.0))
        assert flag(held) == 2, "a change of the same size is written in place"
        assert write_snapshot(path, render([{**hot, "temperature_c": 92}], 5, 4.0))
        assert flag(held) == 4
        assert os.stat(path).st_ino == os.fstat(held).st_ino
        assert Snapshot.from_bytes(path.read_bytes()).gpus[2].temperature == 92
        assert write_snapshot(path, render([hot], 6, 5.0, (FakeProcess("gpu1", 4242, 2**30, "trainer"),)))
        assert flag(held) == 0xFFFFFFFF, "a file of another size is replaced, the old one marked"
        assert os.stat(path).st_ino != os.fstat(held).st_ino
        new = os.open(path, os.O_RDONLY)
        try:
            assert flag(new) == 0
        finally:
            os.close(new)
    finally:
        os.close(held)
    assert stdin_before is None or os.fstat(0) == stdin_before


def test_a_file_too_short_to_hold_the_superseded_word_is_not_written_to(tmp_path: Path) -> None:
    """The writer marks the replaced file "in place" (docs/nvml.md, header table): it overwrites the 4-byte
    ``superseded`` word at its offset and nothing else. A file at the snapshot path that ends before that word
    (16 bytes here, 4 short of it: a torn copy, which the shim refuses anyway) has no such word, and POSIX
    pwrite(2) at an offset past the end of a file extends it (the gap reads as zeros). So a process still holding
    that file must find it exactly as it was: 16 bytes, its own contents, after a snapshot is renamed over it."""
    import os

    from fakehw.nvml import layout

    system = load_profile("dgx-h100")
    node = system.nodes[0]
    path = tmp_path / "nvml.snapshot"
    offset = layout.layout_of(layout.HeaderRecord).field("superseded").offset
    torn = b"FHWNVML\0" + bytes(range(1, offset - 4 - 8 + 1))
    assert len(torn) == offset - 4
    path.write_bytes(torn)
    old = os.open(path, os.O_RDONLY)
    try:
        assert write_snapshot(path, build_snapshot(system, node, faults_state(node, [], system.seed, 1)[0],
                                                   render_time=1.0).to_bytes())
        assert os.fstat(old).st_size == len(torn)
        assert os.pread(old, 64, 0) == torn
    finally:
        os.close(old)


def test_the_agents_cached_packing_writes_the_file_a_full_packing_writes() -> None:
    """The agent packs each new snapshot through its node's cache (fakehw/nvml/render.py: ``to_bytes(cache)``),
    copying the sections that did not change from the last file. What the shim reads must not depend on that: at
    every step (a fault, then another and an Xid), the cached bytes are those of the same snapshot packed in full,
    every section (GPUs, events, NICs, platform) at its place."""
    from fakehw.nvml.snapcache import SnapshotCache

    system = load_profile("dgx-h100")
    node = system.nodes[0]
    cache = SnapshotCache()
    steps: list[list[dict[str, object]]] = [[], [{"kind": "thermal", "device": "gpu2", "temperature_c": 91}],
                                            [{"kind": "thermal", "device": "gpu2", "temperature_c": 91},
                                             {"kind": "xid", "device": "gpu5", "code": 43}]]
    for generation, faults in enumerate(steps, 1):
        state, events = faults_state(node, faults, system.seed, generation)
        cached = build_snapshot(system, node, state, events, render_time=1.0, cache=cache).to_bytes(cache)
        full = build_snapshot(system, node, state, events, render_time=1.0,
                              gpu_generations=cache.generations()).to_bytes()
        assert cached == full, f"step {generation}"
        assert len(Snapshot.from_bytes(cached).events) == len(events)


def test_an_old_file_opened_at_descriptor_zero_is_flagged_and_closed(tmp_path: Path) -> None:
    """POSIX open() returns the lowest-numbered descriptor not open in the process, so a renderer started with its
    stdin closed (a daemon) opens the old snapshot at descriptor 0: a valid descriptor (POSIX: open returns -1 only
    on failure). The replaced file must still be flagged superseded and the descriptor closed afterwards, leaving
    descriptor 0 free again, not leaked once per render."""
    import errno
    import os
    import struct

    from fakehw.nvml import layout

    system = load_profile("dgx-h100")
    node = system.nodes[0]
    path = tmp_path / "nvml.snapshot"
    offset = layout.layout_of(layout.HeaderRecord).field("superseded").offset
    first = faults_state(node, [], system.seed, 3)[0]
    assert write_snapshot(path, build_snapshot(system, node, first, render_time=1.0).to_bytes())
    changed = faults_state(node, [{"kind": "thermal", "device": "gpu2", "temperature_c": 91}], system.seed, 4)[0]
    data = build_snapshot(system, node, changed, render_time=2.0).to_bytes()
    old = os.open(path, os.O_RDONLY)
    saved = os.dup(0)
    try:
        os.close(0)
        assert write_snapshot(path, data)
        with pytest.raises(OSError) as closed:
            os.fstat(0)
        assert closed.value.errno == errno.EBADF, "descriptor 0 left open by the renderer"
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    try:
        assert struct.unpack("<I", os.pread(old, 4, offset))[0] != 0
    finally:
        os.close(old)


def test_a_broken_file_just_long_enough_for_the_word_is_left_at_once_when_replaced(
        pynvml_module: ModuleType, node_snapshot: Callable[..., NodeSnap]) -> None:
    """docs/nvml.md ("Writing and noticing a new generation"): a replaced file gets ``0xFFFFFFFF`` in its
    ``superseded`` word, and every call compares the mapped word with the value it loaded, while the path is
    stat()ed only at most every 10 ms. The word is bytes 20-23 of the file (the header table there; layout.py), so a
    file of exactly 24 bytes holds it: no snapshot (it ends before the header, NVML_ERROR_UNKNOWN), but a file
    whose replacement is announced by that word like any other's. A process that read such a file must take the
    good snapshot renamed over it on its very next call, not up to 10 ms later when stat() tells it. Each round
    replaces the file right after the failing call, well inside those 10 ms; five rounds, so that one slow step
    (a preempted test) cannot hide a reader that waited for stat(). (Seed 10603's open survivor core.c:446: a file
    of exactly 24 bytes not mapped.)"""
    import os

    from fakehw.nvml import layout

    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    good = snap.path.read_bytes()
    offset = layout.layout_of(layout.HeaderRecord).field("superseded").offset
    broken = bytes(offset + 4)  # ends with the word, which reads 0 like a file written whole
    assert len(broken) == 24
    with snapshot_env(snap.path):
        n.nvmlInit()
        try:
            h = n.nvmlDeviceGetHandleByIndex(0)
            for round_ in range(5):
                assert write_snapshot(snap.path, broken)
                with pytest.raises(n.NVMLError_Unknown):
                    n.nvmlDeviceGetUUID(h)  # the reader now holds the 24-byte file, checked by stat() just now
                assert write_snapshot(snap.path, good)
                assert os.path.getsize(snap.path) == len(good)
                assert n.nvmlDeviceGetUUID(h) == snap.node.gpus[0].uuid, f"round {round_}"
        finally:
            n.nvmlShutdown()
