"""The agent core: faults change the state and the rendered files, heal restores the model, restarts replay."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fakehw.agent.journal import JournalDamaged
from fakehw.agent.service import AgentError, AgentService
from fakehw.agent.state import EVENT_DOUBLE_BIT_ECC, EVENT_XID, THROTTLE_HW_THERMAL, THROTTLE_SW_POWER_CAP
from fakehw.model import load_profile
from fakehw.render.atomic import dump_json
from fakehw.render.basic import StateFragments, state_json

NODE = "dgx-h100-0"


@pytest.fixture
def service(tmp_path: Path) -> AgentService:
    """An agent that keeps no node files (``files="on-demand"``, none asked for): the tests that use it check the
    state, faults and events the API reports. Rendering a dgx-h100 node writes ~28,000 entries, and creating and
    later deleting them was most of this file's time (2026-11-28: 667k -> 197k entries left in the temp dir, 107 ->
    38 s of CPU, 147 -> 54 s); the tests of the rendered files use :func:`with_files`."""
    return AgentService(load_profile("dgx-h100"), tmp_path, files="on-demand")


@pytest.fixture
def with_files(fast_tmp: Path) -> AgentService:
    """An agent that renders every node's files and keeps them current (the default, ``files="all"``), in
    ``fast_tmp``: the agent runs in this process and no node view reads its tree, so tmpfs changes nothing the tests
    see, and spares the disk's slow inode allocation ~28,000 entries per test (tests/conftest.py)."""
    return AgentService(load_profile("dgx-h100"), fast_tmp)


def _rendered(svc: AgentService, node: str = NODE) -> dict:  # type: ignore[type-arg]
    return json.loads((svc.node_dir(node) / "state.json").read_text())


def _gpu(state: dict, name: str) -> dict:  # type: ignore[type-arg]
    return next(g for g in state["gpus"] if g["name"] == name)


def test_initial_render_matches_the_model(with_files: AgentService) -> None:
    state = _rendered(with_files)
    h100 = load_profile("dgx-h100").nodes[0].gpus[0].sku
    assert state["health"] == "healthy" and state["generation"] >= 1
    assert [g["uuid"] for g in state["gpus"]] == [g.uuid for g in load_profile("dgx-h100").nodes[0].gpus]
    assert {g["temperature_c"] for g in state["gpus"]} == {h100.thermal.idle_c}
    assert {g["power_limit_w"] for g in state["gpus"]} == {h100.power.default_limit_w}
    node_json = json.loads((with_files.node_dir(NODE) / "node.json").read_text())
    assert node_json["topology"]["nvlinks"][0][1] == 18


def test_xid79_loses_the_gpu_until_healed(with_files: AgentService) -> None:
    before = _rendered(with_files)
    fault = with_files.inject(NODE, {"kind": "xid", "device": "gpu3", "code": 79})
    after = _rendered(with_files)
    assert after["generation"] == before["generation"] + 1
    gpu3 = _gpu(after, "gpu3")
    assert gpu3["lost"] and gpu3["health"] == "lost" and gpu3["xids"] == [79]
    assert all(not g["lost"] for g in after["gpus"] if g["name"] != "gpu3")
    events = with_files.events(since=0)
    assert [(e.device, e.kind, e.data, e.nvml_type) for e in events] == [("gpu3", "xid", 79, EVENT_XID)]
    healed = with_files.heal(fault.id)
    assert [f.id for f in healed] == [fault.id]
    restored = _rendered(with_files)
    assert _gpu(restored, "gpu3") == {**_gpu(before, "gpu3")}
    assert restored["generation"] == after["generation"] + 1


def test_a_fault_and_its_event_as_the_api_gives_them(service: AgentService) -> None:
    """Every member of a fault and of its event, with values from the request and from nvml.h (an Xid is
    ``nvmlEventTypeXidCriticalError`` = 0x8, its data the code): ``to_json`` is written out by hand, so a member left
    out or taken from the wrong field shows here; the same again after a restart (the journal's copy)."""
    fault = service.inject(NODE, {"kind": "xid", "device": "gpu2", "code": 43})
    assert fault.to_json() == {"id": fault.id, "node": NODE, "created": fault.created, "kind": "xid",
                               "device": "gpu2", "code": 43}
    [event] = service.events(since=0)
    assert event.to_json() == {"seq": 1, "time": event.time, "node": NODE, "device": "gpu2", "kind": "xid",
                               "data": 43, "nvml_type": 0x8, "fault": fault.id}
    assert isinstance(event.time, float) and event.time == fault.created
    service.close()
    again = AgentService(load_profile("dgx-h100"), service.state_dir, files="on-demand")
    try:
        assert [f.to_json() for f in again.faults()] == [fault.to_json()]
        assert [e.to_json() for e in again.events(since=0)] == [event.to_json()]
    finally:
        again.close()


def test_each_fault_kind_changes_what_it_should(service: AgentService) -> None:
    h100 = load_profile("dgx-h100").nodes[0].gpus[0].sku
    service.inject(NODE, {"kind": "ecc", "device": "gpu1", "type": "dbe", "count": 2})
    service.inject(NODE, {"kind": "ecc", "device": "gpu1", "type": "sbe", "count": 5, "location": "l2-cache"})
    service.inject(NODE, {"kind": "nvlink-down", "device": "gpu2", "link": 4})
    service.inject(NODE, {"kind": "nvlink-errors", "device": "gpu2", "link": 1, "counter": "crc-flit",
                          "increment": 7})
    service.inject(NODE, {"kind": "thermal", "device": "gpu4", "temperature_c": 93})
    service.inject(NODE, {"kind": "power-cap", "device": "gpu5", "limit_w": 350})
    service.inject(NODE, {"kind": "fabric-degraded", "device": "gpu6"})
    state = service.state(NODE)
    g1, g2, g4, g5, g6 = (state.gpu(n) for n in ("gpu1", "gpu2", "gpu4", "gpu5", "gpu6"))
    assert g1 and g1.ecc_dbe == {"device-memory": 2} and g1.ecc_sbe == {"l2-cache": 5} and g1.retired_pages_dbe == 2
    assert g1.health == "unhealthy" and 48 in g1.xids
    assert g2 and not g2.links[4].up and all(link.up for link in g2.links if link.link != 4)
    assert g2.links[1].errors["crc-flit"] == 7
    gpu2 = service.node(NODE).gpus[2]
    remote = gpu2.ports[4]
    assert (remote.remote_id, remote.remote_port) in state.down_ports
    assert g4 and g4.temperature_c == 93 and g4.throttle_reasons & THROTTLE_HW_THERMAL
    assert h100.thermal.slowdown_c <= 93
    assert g5 and g5.power_limit_w == 350 and g5.throttle_reasons == THROTTLE_SW_POWER_CAP and g5.health == "degraded"
    assert g6 and g6.fabric_health == ("degraded-bandwidth",)
    kinds = [(e.kind, e.nvml_type) for e in service.events()]
    assert ("ecc-dbe", EVENT_DOUBLE_BIT_ECC) in kinds and ("xid", EVENT_XID) in kinds
    assert len(service.heal(node=NODE)) == 7
    assert service.state(NODE).health == "healthy"


def test_heal_by_device_and_kind(service: AgentService) -> None:
    service.inject(NODE, {"kind": "thermal", "device": "gpu0"})
    service.inject(NODE, {"kind": "thermal", "device": "gpu1"})
    service.inject(NODE, {"kind": "xid", "device": "gpu1", "code": 13})
    assert [f.request.device for f in service.heal(kind="thermal", device="gpu1")] == ["gpu1"]
    assert sorted((f.request.device, f.request.kind) for f in service.faults()) == [("gpu0", "thermal"),
                                                                                     ("gpu1", "xid")]


def test_faults_survive_a_restart_and_generations_only_grow(fast_tmp: Path) -> None:
    system = load_profile("dgx-h100")
    first = AgentService(system, fast_tmp)
    keep = first.inject(NODE, {"kind": "nvlink-down", "device": "gpu0", "link": 3})
    gone = first.inject(NODE, {"kind": "thermal", "device": "gpu1"})
    first.heal(gone.id)
    generation = first.state(NODE).generation
    last_seq = first.last_seq
    first.close()

    second = AgentService(system, fast_tmp)
    assert [f.id for f in second.faults()] == [keep.id]
    state = second.state(NODE)
    assert state.generation > generation
    gpu0 = state.gpu("gpu0")
    assert gpu0 is not None and not gpu0.links[3].up
    assert _gpu(_rendered(second), "gpu0")["links"][3]["up"] is False
    new = second.inject(NODE, {"kind": "xid", "device": "gpu2", "code": 31})
    assert int(new.id.split("-")[1]) > int(gone.id.split("-")[1])
    assert second.events()[-1].seq > last_seq


def test_a_torn_last_record_is_dropped_and_garbage_is_refused_unless_salvaged(fast_tmp: Path) -> None:
    system = load_profile("dgx-h100")
    first = AgentService(system, fast_tmp)
    first.inject(NODE, {"kind": "xid", "device": "gpu0", "code": 43})
    first.close()
    with open(fast_tmp / "journal.jsonl", "ab") as fh:
        fh.write(b'7 0badc0de {"op": "inject", "fau')  # the agent died writing it: never acknowledged
    second = AgentService(system, fast_tmp)
    assert [f.request.device for f in second.faults()] == ["gpu0"]
    assert second.journal.recovery.dropped == 1 and second.journal.recovery.kept is not None
    second.close()
    with open(fast_tmp / "journal.jsonl", "ab") as fh:
        fh.write(b"not a record at all\n")
    with pytest.raises(JournalDamaged, match="line 4 is not a journal record"):
        AgentService(system, fast_tmp)
    third = AgentService(system, fast_tmp, salvage=True)
    assert [f.request.device for f in third.faults()] == ["gpu0"]
    assert third.journal.recovery.dropped == 1 and Path(str(third.journal.recovery.kept)).exists()
    third.close()


@pytest.mark.parametrize(
    ("node", "body", "status", "message"),
    [
        ("nope", {"kind": "xid", "device": "gpu0", "code": 1}, 404, "unknown node 'nope'"),
        (NODE, {"kind": "melt", "device": "gpu0"}, 422, "unknown or missing fault kind 'melt'"),
        (NODE, {"device": "gpu0"}, 422, "unknown or missing fault kind None"),
        (NODE, {"kind": "xid", "device": "gpu9", "code": 79}, 404, "has no GPU 'gpu9'"),
        (NODE, {"kind": "xid", "device": "gpu0"}, 422, "invalid xid fault: code: Field required"),
        (NODE, {"kind": "xid", "device": "gpu0", "code": 79, "extra": 1}, 422, "extra: Extra inputs"),
        (NODE, {"kind": "nvlink-down", "device": "gpu0", "link": 18}, 422, "link 18 does not exist"),
        (NODE, {"kind": "power-cap", "device": "gpu0", "limit_w": 50}, 422, "outside h100-sxm5-80gb's range"),
        (NODE, {"kind": "cxl-offline", "device": "mem0"}, 404, "has no CXL memory device 'mem0'"),
        (NODE, {"kind": "pool-shrink", "device": "p", "bytes": 1}, 404, "has no memory pool 'p'"),
        (NODE, ["xid"], 400, "a fault is a JSON object"),
    ],
)
def test_bad_fault_requests_are_refused(service: AgentService, node: str, body: object, status: int,
                                        message: str) -> None:
    with pytest.raises(AgentError) as info:
        service.inject(node, body)  # type: ignore[arg-type]
    assert info.value.status == status and message in info.value.message, info.value.message
    assert service.faults() == []


def test_events_wait_for_the_next_injection(service: AgentService) -> None:
    since = service.last_seq
    timer = threading.Timer(0.2, lambda: service.inject(NODE, {"kind": "xid", "device": "gpu5", "code": 94}))
    start = time.monotonic()
    timer.start()
    events = service.events(since=since, wait=5.0)
    assert 0.15 < time.monotonic() - start < 4.0
    assert [(e.device, e.data) for e in events] == [("gpu5", 94)]
    assert service.events(since=events[-1].seq, wait=0.05) == []


def test_cxl_and_pool_faults_on_the_cxl_profile(tmp_path: Path) -> None:
    svc = AgentService(load_profile("cxl-pool"), tmp_path, files="on-demand")
    svc.inject("cxl-host-1", {"kind": "cxl-offline", "device": "mem4"})
    svc.inject("cxl-host-1", {"kind": "pool-shrink", "device": "cxl-pooled", "bytes": 2**34})
    state = svc.state("cxl-host-1")
    assert [m.name for m in state.memdevs if not m.online] == ["mem4"]
    pooled = next(p for p in state.pools if p.name == "cxl-pooled")
    assert pooled.capacity == pooled.model_capacity - 2**34
    assert all(m.online for m in svc.state("cxl-host-0").memdevs)
    with pytest.raises(AgentError, match="cannot shrink by"):
        svc.inject("cxl-host-1", {"kind": "pool-shrink", "device": "cxl-local", "bytes": 2**40})


def test_state_json_follows_a_change_of_the_platform_alone(tmp_path: Path) -> None:
    """``state.json`` keeps the text of a node's members besides its generation, GPUs and faults while the objects
    they come from are equal (an Xid changes none of them): a pool reservation changes only the platform's summary
    (no fault, no GPU), and ``state.json`` must say it as the API does (docs/agent.md: ``GET /v1/nodes/{node}`` is
    the same as ``state.json``). The agent's states through the renderer's encoding, without files (a CXL host's
    first render takes seconds)."""
    svc = AgentService(load_profile("cxl-pool"), tmp_path, files="on-demand")
    node = "cxl-host-0"
    memo = StateFragments()
    try:
        svc.inject(node, {"kind": "xid", "device": svc.node(node).gpus[0].name, "code": 13})
        before = json.loads(state_json(svc.state(node), memo))["platform"]["pools"]["cxl-local"]["reserved"]
        svc.platform.grant(node, "cxl-local", {"tenant": "a", "size": "2GiB"}, "reservation")
        state = svc.state(node)
        encoded = state_json(state, memo)
        assert json.loads(encoded)["platform"]["pools"]["cxl-local"]["reserved"] == before + 2**31
        assert encoded == dump_json(state.to_json(), compact=True)
    finally:
        svc.close()


def test_state_json_follows_a_change_of_mig_alone(fast_tmp: Path) -> None:
    """The same for MIG: enabling it on a GPU changes the node's ``mig`` member and nothing ``state.json`` encodes
    per GPU, and the encoding must say it as the API does."""
    svc = AgentService(load_profile("dgx-h100"), fast_tmp, files="on-demand")
    memo = StateFragments()
    try:
        svc.inject(NODE, {"kind": "xid", "device": "gpu1", "code": 13})
        before = json.loads(state_json(svc.state(NODE), memo))["mig"]["gpu0"]
        assert (before["current"], before["pending"]) == (False, False)
        svc.mig.set_mode(NODE, "gpu0", True)
        state = svc.state(NODE)
        encoded = state_json(state, memo)
        after = json.loads(encoded)["mig"]["gpu0"]
        assert True in (after["current"], after["pending"])
        assert encoded == dump_json(state.to_json(), compact=True)
    finally:
        svc.close()


def test_a_journal_of_the_unchecked_format_is_taken_over(fast_tmp: Path) -> None:
    """State dirs written by earlier versions (plain JSON lines, no meta file) come back, then in the new format."""
    fault = {"id": "f-000007", "node": NODE, "created": 1.0, "kind": "xid", "device": "gpu2", "code": 43}
    lines = [{"op": "generation", "generations": {NODE: 5}, "fault_counter": 9, "seq": 12},
             {"op": "inject", "fault": fault, "generation": 6, "events": []},
             {"op": "inject", "fault": {**fault, "id": "f-000008"}, "generation": 7, "events": []},
             {"op": "heal", "node": NODE, "ids": ["f-000008"], "generation": 8, "events": []}]
    (fast_tmp / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    svc = AgentService(load_profile("dgx-h100"), fast_tmp)
    try:
        assert [f.id for f in svc.faults()] == ["f-000007"] and svc.journal.recovery.upgraded
        assert svc.state(NODE).generation > 8 and svc.last_seq >= 12
        assert svc.inject(NODE, {"kind": "xid", "device": "gpu0", "code": 13}).id == "f-000010"
    finally:
        svc.close()
    assert (fast_tmp / "journal.jsonl").read_text().startswith("1 "), "rewritten with numbered, checked records"
    AgentService(load_profile("dgx-h100"), fast_tmp).close()


def test_state_json_follows_injections_and_heals_in_any_order(with_files: AgentService) -> None:
    """Faults are kept grouped by device and ``state.json``'s fault list is appended to on an injection and
    rebuilt on a heal: after heals in the middle, of the last one and of a whole GPU, every GPU lists exactly the
    faults the test left on it (its own bookkeeping), in injection order, and the file says what the API says."""
    gpus = ["gpu0", "gpu3", "gpu5"]
    mine: dict[str, list[str]] = {g: [] for g in gpus}
    codes: dict[str, int] = {}

    def inject(gpu: str, code: int) -> None:
        fault = with_files.inject(NODE, {"kind": "xid", "device": gpu, "code": code})
        mine[gpu].append(fault.id)
        codes[fault.id] = code

    def check() -> None:
        rendered = _rendered(with_files)
        assert rendered == json.loads(json.dumps(with_files.state(NODE).to_json()))
        assert [f["id"] for f in rendered["faults"]] == sorted(i for ids in mine.values() for i in ids)
        for gpu in gpus:
            assert _gpu(rendered, gpu)["faults"] == mine[gpu], gpu
            assert _gpu(rendered, gpu)["xids"] == [codes[i] for i in mine[gpu]], gpu

    for i in range(9):
        inject(gpus[i % 3], 13 + i)
        check()
    middle = mine["gpu3"].pop(1)
    with_files.heal(middle)
    check()
    inject("gpu5", 31)
    last = mine["gpu5"].pop()
    with_files.heal(last)
    check()
    with_files.heal(node=NODE, device="gpu0")
    mine["gpu0"].clear()
    check()
    inject("gpu0", 43)
    check()


def test_injections_on_one_gpu_carry_its_state_on_and_leave_earlier_states_alone(service: AgentService) -> None:
    """The agent adds a new fault to the GPU's remembered fold instead of walking its faults again: after every
    change the state must be what deriving it from scratch gives, and a state handed out earlier must not move."""
    from fakehw.agent.state import derive_state

    node = service.node(NODE)
    requests = [
        {"kind": "nvlink-errors", "device": "gpu2", "link": 1, "counter": "crc-flit", "increment": 7},
        {"kind": "ecc", "device": "gpu2", "type": "sbe", "count": 5, "location": "l2-cache"},
        {"kind": "xid", "device": "gpu2", "code": 13},
        {"kind": "thermal", "device": "gpu2", "temperature_c": 93},
        {"kind": "nvlink-errors", "device": "gpu2", "link": 1, "counter": "crc-flit", "increment": 3},
        {"kind": "power-cap", "device": "gpu2", "limit_w": 350},
        {"kind": "fabric-degraded", "device": "gpu2"},
        {"kind": "ecc", "device": "gpu2", "type": "dbe", "count": 2},
        {"kind": "xid", "device": "gpu2", "code": 79},
    ]
    earlier = []
    for i, request in enumerate(requests):
        fault = service.inject(NODE, request)
        state = service.state(NODE)
        scratch = derive_state(node, state.faults, state.generation, state.seed)
        assert state.gpu("gpu2") == scratch.gpu("gpu2"), f"after injection {i} ({request['kind']})"
        earlier.append((state.gpu("gpu2"), state.gpu("gpu2").to_json()))  # type: ignore[union-attr]
        if i == 4:  # a heal in between: the fold starts over from the remaining faults
            service.heal(fault_id=fault.id)
            state = service.state(NODE)
            assert state.gpu("gpu2") == derive_state(node, state.faults, state.generation, state.seed).gpu("gpu2")
    for gpu, seen in earlier:
        assert gpu is not None and gpu.to_json() == seen
    assert earlier[0][1]["links"][1]["errors"]["crc-flit"] == 7
    final = service.state(NODE).gpu("gpu2")
    assert final is not None and final.links[1].errors["crc-flit"] == 7 and final.lost  # the +3 was healed


def test_a_state_given_the_agents_views_is_what_dataclasses_replace_gives(service: AgentService) -> None:
    """Every render attaches the platform and MIG views to the fault-derived state with ``NodeState.with_views``,
    a copy made without the constructor: it must be the state ``dataclasses.replace`` (the standard library's copy
    with changes) gives, field for field, and leave the state it was made from as it was."""
    import dataclasses

    service.inject(NODE, {"kind": "thermal", "device": "gpu2", "temperature_c": 91})
    state = service.state(NODE)
    assert state.platform is not None and state.mig is not None
    bare = dataclasses.replace(state, platform=None, mig=None)
    viewed = bare.with_views(state.platform, state.mig)
    assert type(viewed) is type(state)
    assert viewed == dataclasses.replace(bare, platform=state.platform, mig=state.mig) == state
    assert vars(viewed) == vars(state)
    assert bare.platform is None and bare.mig is None


def _journal_lines(state_dir: Path) -> int:
    return len((state_dir / "journal.jsonl").read_bytes().splitlines())


def test_a_running_agent_compacts_its_journal_and_a_restart_gets_the_same_state(tmp_path: Path) -> None:
    """docs/agent.md ("The journal stays small"): a running agent rewrites its journal once it has grown by
    ``compact_every`` records past what it held after its last compaction, so 400 injections and heals with
    ``compact_every=50`` leave at most 1 checkpoint + 1 counters record + the active faults + fewer than 50 + 50
    appended records (the bound is the documented rule, not a count taken from the code). What a restart replays
    from the compacted journal is what the running agent had: the same active faults, and ids that only grow."""
    system = load_profile("dgx-h100")
    svc = AgentService(system, tmp_path, compact_every=50, files="on-demand")
    kept: list[str] = []
    try:
        for i in range(200):
            fault = svc.inject(NODE, {"kind": "xid", "device": f"gpu{i % 8}", "code": 13})
            if i % 25 == 0:
                kept.append(fault.id)  # 8 faults stay active
            else:
                svc.heal(fault.id)
        lines = _journal_lines(tmp_path)
        assert lines <= 2 + len(kept) + 100, lines  # 400 changes were journaled; without compaction 400+ lines
        generation = svc.state(NODE).generation
    finally:
        svc.close()
    again = AgentService(system, tmp_path, compact_every=50, files="on-demand")
    try:
        assert sorted(f.id for f in again.faults()) == sorted(kept)
        assert again.state(NODE).generation >= generation
        later = again.inject(NODE, {"kind": "xid", "device": "gpu0", "code": 13})
        assert int(later.id.removeprefix("f-")) > 200  # fault ids are never reused (f-000001 .. f-000200 were)
    finally:
        again.close()


def test_compact_every_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="compact_every must be at least 1"):
        AgentService(load_profile("dgx-h100"), tmp_path, compact_every=0)


def test_compactions_between_concurrent_injections_lose_no_acknowledged_fault(fast_tmp: Path) -> None:
    """A compaction rewrites the journal while other threads are injecting (group commit queues their records):
    docs/agent.md promises an acknowledged change is durable, so every fault an ``inject`` returned must come back
    after a restart, however the compactions (``compact_every=16``: dozens of them) fell between the writes."""
    system = load_profile("dgx-h100")
    svc = AgentService(system, fast_tmp, compact_every=16)
    acknowledged: list[str] = []
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(40):
                fault = svc.inject(NODE, {"kind": "xid", "device": f"gpu{(k + i) % 8}", "code": 13})
                if i % 5:
                    assert [f.id for f in svc.heal(fault.id)] == [fault.id]
                else:
                    acknowledged.append(fault.id)  # 8 per thread stay active
        except BaseException as exc:  # reported below, with the thread's own traceback lost
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        # 240 injections and 192 heals were journaled; compacted, what is left is 48 active faults and the records
        # since the last compaction (fewer than 16 + 48 by the documented rule), with the checkpoint and counters
        assert _journal_lines(fast_tmp) < 2 + 48 + 16 + 48
    finally:
        svc.close()
    again = AgentService(system, fast_tmp)
    try:
        assert sorted(f.id for f in again.faults()) == sorted(acknowledged) and len(acknowledged) == 48
    finally:
        again.close()


def test_changes_synced_during_a_render_are_rendered_together_by_the_next(fast_tmp: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 ("faults at memory speed"): under load a render must carry every change made durable while the
    previous one ran, not one render per request. docs/agent.md: a change is answered only once it is durable and
    its node's files show it. So: while one render of the node is held back, 8 more injections on the same node are
    journaled and synced (they do not queue behind the render for the agent's lock); once it ends, one render
    carries all 8, and every inject returns with state.json showing its fault."""
    import fakehw.agent.service as service_module

    svc = AgentService(load_profile("dgx-h100"), fast_tmp)
    real = service_module.render_node
    entered, gate = threading.Event(), threading.Event()
    generations: list[int] = []

    def held_render(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("initial"):
            generations.append(args[2].generation)
            if len(generations) == 1:
                entered.set()
                gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(service_module, "render_node", held_render)
    synced: list[int] = []
    real_wait = svc.journal.wait

    def counted_wait(ticket: int) -> None:
        real_wait(ticket)
        synced.append(ticket)

    monkeypatch.setattr(svc.journal, "wait", counted_wait)
    returned: list[str] = []

    def inject(gpu: str) -> None:
        fault = svc.inject(NODE, {"kind": "xid", "device": gpu, "code": 13})
        assert fault.id in {f["id"] for f in _rendered(svc)["faults"]}  # its files show it when it returns
        returned.append(fault.id)

    first = threading.Thread(target=inject, args=("gpu0",))
    others = [threading.Thread(target=inject, args=(f"gpu{k % 8}",)) for k in range(1, 9)]
    try:
        first.start()
        assert entered.wait(30)
        for t in others:
            t.start()
        deadline = time.monotonic() + 10
        while len(synced) < 9:
            assert time.monotonic() < deadline, "the injections were not journaled and synced while a render ran"
            time.sleep(0.01)
    finally:
        gate.set()
        first.join()
        for t in others:
            t.join()
    work = svc.health()["work"]
    svc.close()
    assert len(returned) == 9
    assert len(generations) == 2  # the held render, then one for the 8 changes synced meanwhile
    assert work == {"changes_applied": 9, "node_updates": 2}  # what health reports of it (bench_agent.py prints it)
    assert _rendered(svc)["generation"] == generations[1]
    assert len(_rendered(svc)["faults"]) == 9


def test_a_due_compaction_is_not_put_off_by_changes_arriving_during_the_last_render(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agent.md ("The journals stay small"): a due compaction happens between changes, and changes arriving
    meanwhile wait for the queued ones to drain. Changes are journaled while a render runs, so the moment between
    the last queued change being applied and the compaction after its render must not let a new change in: under
    steady load one always would, and the journal would never be compacted. Here the compaction falls due while
    the last queued change is being rendered; an injection arriving then writes nothing until the compaction is
    made, and its record is the first after the compacted journal's."""
    import fakehw.agent.service as service_module

    svc = AgentService(load_profile("dgx-h100"), fast_tmp)
    real = service_module.render_node
    entered, gate = threading.Event(), threading.Event()

    def held_render(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("initial") and not gate.is_set():
            entered.set()
            gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(service_module, "render_node", held_render)
    ids: list[str] = []
    first = threading.Thread(target=lambda: ids.append(svc.inject(NODE, {"kind": "xid", "device": "gpu0",
                                                                         "code": 13}).id))
    second = threading.Thread(target=lambda: ids.append(svc.inject(NODE, {"kind": "xid", "device": "gpu1",
                                                                          "code": 13}).id))
    try:
        first.start()
        assert entered.wait(30)
        records = svc.journal.records
        svc._compact_at = records  # due now, with the queue empty (its last change is being rendered)
        second.start()
        time.sleep(0.5)
        assert svc.journal.records == records, "a change was journaled ahead of the due compaction"
    finally:
        gate.set()
        first.join()
        second.join()
    svc.close()
    ops = [json.loads(line.split(b" ", 2)[2])["op"] for line in (fast_tmp / "journal.jsonl").read_bytes().splitlines()]
    assert ops == ["checkpoint", "counters", "inject", "inject"] and len(ids) == 2  # compacted: A, then B
