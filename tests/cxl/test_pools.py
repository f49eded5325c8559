"""Memory pools over time: preemption, token expiry, faults that shrink pools, an agent restart, and the files a
device plugin discovers pools from."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fakehw.agent.cxl import GiB
from fakehw.agent.pools import DEFAULT_TTL_S
from fakehw.agent.service import AgentService
from fakehw.sysfs import POOLS_FILE, ROOT_DIR

H0 = "cxl-host-0"
MakeAgent = Callable[..., tuple[AgentService, Any]]


def actions(svc: AgentService, since: int = 0) -> list[tuple[str, str | None, str]]:
    return [(e["action"], e.get("grant"), e.get("reason", "")) for e in svc.platform.audit.query(since=since)]


def test_a_reservation_preempts_bursts_newest_first(make_agent: MakeAgent) -> None:
    svc, _ = make_agent()
    pf = svc.platform
    old = pf.grant(H0, "cxl-local", {"tenant": "b", "size": "2GiB"}, "burst")
    new = pf.grant(H0, "cxl-local", {"tenant": "c", "size": "2GiB"}, "burst")
    mapping = pf.map(H0, "cxl-local", {"token": new["token"], "who": "pod-c"})
    seq = pf.audit.seq
    r = pf.grant(H0, "cxl-local", {"tenant": "a", "size": "2GiB"}, "reservation")
    assert r["preempted"] == [new["grant"]["id"]]
    *revoked, granted = actions(svc, seq)
    assert revoked == [
        ("unmap", new["grant"]["id"], "grant revoked: preempted by a reservation of a"),
        ("revoke", new["grant"]["id"], "preempted by a reservation of a"),
    ]
    assert granted[:2] == ("grant-reservation", r["grant"]["id"]) and granted[2].startswith("expires "), granted
    assert mapping["id"] not in {m["id"] for m in pf.mappings()}
    token = {t["token_id"]: t for t in pf.tokens()}[new["grant"]["token_id"]]
    assert token["revoked"] is not None and token["reason"] == "preempted by a reservation of a"
    assert old["grant"]["id"] in {g["id"] for p in pf.pools(H0) for g in p["grants"]}


def test_tokens_expire(make_agent: MakeAgent) -> None:
    svc, clock = make_agent()
    pf = svc.platform
    g = pf.grant(H0, "hbm", {"tenant": "a", "size": "1GiB", "ttl": 60}, "reservation")
    pf.map(H0, "hbm", {"token": g["token"], "who": "pod-a"})
    clock.advance(61)
    seq = pf.audit.seq
    pools = {p["name"]: p for p in pf.pools(H0)}
    assert pools["hbm"]["reserved"] == 0
    assert [a[0] for a in actions(svc, seq)] == ["unmap", "revoke"]
    assert actions(svc, seq)[1][2] == "token expired"


def test_pool_shrink_and_cxl_offline_faults_preempt_bursts_before_reservations(make_agent: MakeAgent) -> None:
    svc, _ = make_agent()
    pf = svc.platform
    res = pf.grant(H0, "cxl-local", {"tenant": "a", "size": "2GiB"}, "reservation")
    burst = pf.grant(H0, "cxl-local", {"tenant": "b", "size": "2GiB"}, "burst")
    fault = svc.inject(H0, {"kind": "pool-shrink", "device": "cxl-local", "bytes": 2 * GiB})
    live = {g["id"] for p in pf.pools(H0) for g in p["grants"]}
    assert live == {res["grant"]["id"]}, "the burst went first"
    svc.inject(H0, {"kind": "cxl-offline", "device": "mem0"})  # region0 loses a target: the pool is empty
    assert not [g for p in pf.pools(H0) for g in p["grants"] if p["name"] == "cxl-local"]
    reasons = [a[2] for a in actions(svc) if a[0] == "revoke"]
    assert reasons == ["preempted: pool cxl-local has 2GiB available", "preempted: pool cxl-local has 0 B available"]
    svc.heal(fault_id=fault.id)
    svc.heal(node=H0, device="mem0")
    assert {p["name"]: p["available"] for p in pf.pools(H0)}["cxl-local"] == 4 * GiB
    del burst


def test_a_lost_gpu_takes_its_memory_out_of_an_hbm_pool(make_agent: MakeAgent) -> None:
    svc, _ = make_agent()
    pf = svc.platform
    node = svc.system.node(H0)
    assert node is not None
    model = next(p for p in node.memory_pools if p.name == "hbm")
    members = model.source.removeprefix("gpus:").split(",")
    assert "gpu1" in members
    svc.inject(H0, {"kind": "fallen-off-bus", "device": "gpu1"})
    left = sum(g.memory_bytes for g in node.gpus if g.name in members and g.name != "gpu1")
    after = next(p for p in pf.pools(H0) if p["name"] == "hbm")
    assert after["available"] == min(model.capacity, left) < model.capacity


def test_a_memdev_in_no_region_goes_offline_and_back_with_its_fault(make_agent: MakeAgent) -> None:
    """A ``cxl-offline`` fault on a memdev that backs no region changes no region, no pool and no grant, only
    the memdev's state: the node's platform view (what ``state.json`` and the sysfs tree are rendered from) must
    still show it offline, and online again once healed. (The agent remembers each node's view with what it was
    made from; the memdevs faults hold offline are one of those inputs.)"""
    svc, _ = make_agent()
    view = svc.state(H0).platform
    assert view is not None
    in_regions = {t for r in view.cxl.regions for t in r.region.targets}
    spare = next(m.name for m in view.cxl.memdevs if m.name not in in_regions)
    assert view.summary()["memdevs_offline"] == []
    svc.inject(H0, {"kind": "cxl-offline", "device": spare})
    after = svc.state(H0).platform
    assert after is not None and after.summary()["memdevs_offline"] == [spare]
    assert [r.region.name for r in after.cxl.regions] == [r.region.name for r in view.cxl.regions]
    svc.heal(node=H0, device=spare)
    healed = svc.state(H0).platform
    assert healed is not None and healed.summary()["memdevs_offline"] == []


def test_grants_tokens_and_cxl_state_survive_an_agent_restart(make_agent: MakeAgent) -> None:
    svc, clock = make_agent()
    pf = svc.platform
    pf.create_region(H0, {"window": "cfmws0", "targets": ["mem1", "mem2"], "size": "2GiB"})
    pf.release_ld("pool0", {"ld": 2})
    ext = pf.add_extent("pool0", {"node": H0, "size": "512MiB"})
    g = pf.grant(H0, "cxl-pooled", {"tenant": "a", "size": "4GiB"}, "reservation")
    pf.map(H0, "cxl-pooled", {"token": g["token"], "who": "pod-a"})
    pf.set_memdev(H0, "mem7", False)
    before = (pf.cxl.to_json(), pf.ledger.to_json(), pf.view(H0).numa_memory, pf.audit.seq)
    state_dir = svc.state_dir
    svc.close()
    again, _ = make_agent(state_dir=state_dir, clock=clock)
    pf2 = again.platform
    assert (pf2.cxl.to_json(), pf2.ledger.to_json(), pf2.view(H0).numa_memory, pf2.audit.seq) == before
    # The token issued before the restart still opens its grant (only its hash was kept).
    pf2.map(H0, "cxl-pooled", {"token": g["token"], "who": "pod-b"})
    assert ext["id"] in {e["id"] for p in pf2.cxl_pools() for e in p["extents"]}
    journal = (state_dir / "platform.jsonl").read_text() + (state_dir / "audit.jsonl").read_text()
    assert g["token"].split(".")[2] not in journal, "the token secret is never written down"


def test_pools_are_rendered_for_device_plugins(make_agent: MakeAgent) -> None:
    svc, _ = make_agent()
    pf = svc.platform
    pf.grant(H0, "cxl-pooled", {"tenant": "a", "size": "4GiB", "ttl": DEFAULT_TTL_S}, "reservation")
    pf.grant(H0, "hbm", {"tenant": "b", "size": "1GiB"}, "burst")
    doc = json.loads((svc.node_dir(H0) / ROOT_DIR / POOLS_FILE).read_text())
    node = svc.system.node(H0)
    assert node is not None and doc["node"] == H0
    by_name = {p["name"]: p for p in doc["pools"]}
    assert set(by_name) == {p.name for p in node.memory_pools}
    for p in node.memory_pools:
        rendered = by_name[p.name]
        assert rendered["capacity"] == p.capacity and rendered["policy"] == p.policy and rendered["tier"] == p.tier
        assert rendered["latency"] == {"domain": p.latency.name, "rank": p.latency.rank, "ns": p.latency.latency_ns}
        assert rendered["resource"] == p.resource_name
    assert by_name["cxl-pooled"]["reserved"] == 4 * GiB and by_name["hbm"]["bursting"] == GiB
    assert "token" not in json.dumps(doc).replace("token_id", "")
