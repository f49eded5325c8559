"""CXL operations and memory-pool requests: what works, and every way a request is refused (with its reason and
the state left as it was)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fakehw.agent.cxl import DCD_BLOCK, MAX_EXTENTS_PER_HOST, GiB, MiB
from fakehw.agent.platform import Platform, PlatformError
from fakehw.agent.service import AgentService

H0, H1 = "cxl-host-0", "cxl-host-1"
MakeAgent = Callable[..., tuple[AgentService, Any]]


def snapshot(pf: Platform) -> str:
    return json.dumps({"cxl": pf.cxl.to_json(), "pools": pf.ledger.to_json()}, sort_keys=True)


def refused(pf: Platform, call: Callable[[], object], status: int, fragment: str) -> None:
    before = snapshot(pf)
    with pytest.raises(PlatformError) as info:
        call()
    assert info.value.status == status, info.value.message
    assert fragment in info.value.message, info.value.message
    assert snapshot(pf) == before, "a refused request changed the state"


def region(**body: Any) -> dict[str, Any]:
    return body


# (id, request on the platform, HTTP status, words of the reason)
CXL_REFUSALS: list[tuple[str, Callable[[Platform], object], int, str]] = [
    ("unknown-node", lambda pf: pf.create_region("nope", region(window="cfmws0", targets=["mem1"])), 404,
     "unknown node"),
    ("unknown-window", lambda pf: pf.create_region(H0, region(window="cfmws9", targets=["mem1"])), 404,
     "no CXL window 'cfmws9'"),
    ("pool-window", lambda pf: pf.create_region(H0, region(window="cfmws4", targets=["mem1"])), 409,
     "decodes the pooled device pool0"),
    ("mode-not-decoded", lambda pf: pf.create_region(H0, region(window="cfmws0", targets=["mem6"], mode="pmem")),
     422, "decodes ram memory only"),
    ("bad-mode", lambda pf: pf.create_region(H0, region(window="cfmws0", targets=["mem1"], mode="flash")), 422,
     "mode must be ram or pmem"),
    ("no-targets", lambda pf: pf.create_region(H0, region(window="cfmws0", targets=[])), 422, "at least one"),
    ("targets-not-a-list", lambda pf: pf.create_region(H0, region(window="cfmws0", targets="mem1")), 422,
     "list of memory device names"),
    ("target-twice", lambda pf: pf.create_region(H0, region(window="cfmws0", targets=["mem1", "mem1"])), 422,
     "listed twice"),
    ("unknown-memdev", lambda pf: pf.create_region(H0, region(window="cfmws0", targets=["mem42"])), 404,
     "no CXL memory device 'mem42'"),
    ("five-ways", lambda pf: pf.create_region(H0, region(window="cfmws2", targets=["mem1", "mem2", "mem3", "mem5",
                                                                                   "mem6"])), 422,
     "5-way interleave is not possible"),
    ("across-host-bridges-without-a-window", lambda pf: pf.create_region(
        H0, region(window="cfmws0", targets=["mem1", "mem5"])), 422, "which window cfmws0 does not interleave"),
    ("uneven-over-host-bridges", lambda pf: pf.create_region(
        H0, region(window="cfmws2", targets=["mem1", "mem2"])), 422, "spread evenly"),
    ("granularity-not-power-of-two", lambda pf: pf.create_region(
        H0, region(window="cfmws0", targets=["mem1"], granularity=300)), 422, "granularity 300 is not possible"),
    ("granularity-differs-from-interleaved-window", lambda pf: pf.create_region(
        H0, region(window="cfmws2", targets=["mem1", "mem5"], granularity=512)), 422, "must use that granularity"),
    ("granularity-too-large-below", lambda pf: pf.create_region(
        H0, region(window="cfmws0", targets=["mem1", "mem2"], granularity=16384)), 422,
     "would need granularity 32768"),
    ("size-not-a-multiple", lambda pf: pf.create_region(
        H0, region(window="cfmws0", targets=["mem1", "mem2"], size="768MiB")), 422, "multiple of 512MiB"),
    ("size-not-a-size", lambda pf: pf.create_region(H0, region(window="cfmws0", targets=["mem1"], size="lots")),
     422, "expected a size"),
    ("capacity-in-another-region", lambda pf: pf.create_region(H0, region(window="cfmws0", targets=["mem0"],
                                                                          size="1GiB")), 409,
     "mem0 has 0 B of ram capacity free"),
    ("bad-name", lambda pf: pf.create_region(H0, region(window="cfmws0", targets=["mem1"], name="mine")), 422,
     "regionN"),
    ("name-taken", lambda pf: pf.create_region(H0, region(window="cfmws0", targets=["mem1"], name="region0")), 409,
     "already has region0"),
    ("unknown-field", lambda pf: pf.create_region(H0, region(window="cfmws0", targets=["mem1"], ways=2)), 422,
     "unknown field(s) ways"),
    ("not-an-object", lambda pf: pf.create_region(H0, ["cfmws0"]), 400, "expected a JSON object"),
    ("destroy-unknown", lambda pf: pf.destroy_region(H0, "region77"), 404, "no region 'region77'"),
    ("destroy-pooled-ld-region", lambda pf: pf.destroy_region(H0, next(
        r.name for r in pf.cxl.node_regions(H0) if r.origin == "pooled-ld")), 409, "release the logical device"),
    ("offline-unknown-memdev", lambda pf: pf.set_memdev(H0, "mem42", False), 404, "no CXL memory device 'mem42'"),
    ("offline-pooled-ld", lambda pf: pf.set_memdev(H0, "pool0.ld0", False), 404, "assigned and released"),
    ("unknown-pool", lambda pf: pf.assign_ld("pool9", {"ld": 0, "node": H0}), 404, "no pooled CXL device 'pool9'"),
    ("ld-out-of-range", lambda pf: pf.assign_ld("pool0", {"ld": 16, "node": H0}), 422,
     "logical devices 0..15, not 16"),
    ("ld-not-an-integer", lambda pf: pf.assign_ld("pool0", {"ld": "3", "node": H0}), 422, "ld must be an integer"),
    ("host-not-a-member", lambda pf: pf.assign_ld("pool0", {"ld": 9, "node": "elsewhere"}), 422,
     "not a member host of pool pool0"),
    ("ld-held-by-another-host", lambda pf: pf.assign_ld("pool0", {"ld": 0, "node": H1}), 409,
     "logical device 0 of pool0 is held by cxl-host-0"),
    ("release-unassigned-ld", lambda pf: pf.release_ld("pool0", {"ld": 12}), 409, "is not assigned to any host"),
    ("release-someone-elses-ld", lambda pf: pf.release_ld("pool0", {"ld": 0, "node": H1}), 409,
     "held by cxl-host-0, not cxl-host-1"),
    ("extent-not-whole-blocks", lambda pf: pf.add_extent("pool0", {"node": H0, "size": 100 * MiB}), 422,
     "multiple of the 256MiB block size"),
    ("extent-misaligned", lambda pf: pf.add_extent("pool0", {"node": H0, "size": "256MiB", "offset": 12345}), 422,
     "offset must be a multiple"),
    ("extent-over-an-ld", lambda pf: pf.add_extent("pool0", {"node": H1, "size": "256MiB", "offset": 0}), 409,
     "overlaps capacity held"),
    ("extent-bigger-than-free", lambda pf: pf.add_extent("pool0", {"node": H1, "size": "64GiB"}), 409,
     "no 64GiB of contiguous free capacity"),
    ("release-unknown-extent", lambda pf: pf.release_extent("pool0", "pool0-e999999"), 404,
     "no extent 'pool0-e999999'"),
]


@pytest.fixture
def platform(make_agent: MakeAgent) -> Platform:
    svc, _ = make_agent()
    return svc.platform


@pytest.mark.parametrize(("request_", "status", "fragment"), [c[1:] for c in CXL_REFUSALS],
                         ids=[c[0] for c in CXL_REFUSALS])
def test_impossible_cxl_requests_are_refused_with_a_reason(platform: Platform, request_: Callable[[Platform], object],
                                                            status: int, fragment: str) -> None:
    refused(platform, lambda: request_(platform), status, fragment)


def test_region_lifecycle_moves_memory_into_its_numa_node_and_back(platform: Platform) -> None:
    before = platform.view(H0).numa_memory
    r = platform.create_region(H0, region(window="cfmws2", targets=["mem5", "mem1"], size="2GiB"))
    # Positions follow the window's host-bridge order (cxlhb0 first), as the kernel requires.
    assert r["targets"] == ["mem1", "mem5"] and r["granularity"] == 256 and r["numa"] == 1
    assert platform.view(H0).numa_memory[1] == before[1] + 2 * GiB
    platform.destroy_region(H0, r["name"])
    assert platform.view(H0).numa_memory == before


def test_decoders_run_out_at_the_endpoint(platform: Platform) -> None:
    decoders = next(m for m in platform.system.nodes[0].cxl.memdevs if m.name == "mem6").decoders
    made = [platform.create_region(H0, region(window="cfmws1", targets=["mem6"], size="256MiB"))
            for _ in range(decoders)]
    refused(platform, lambda: platform.create_region(H0, region(window="cfmws1", targets=["mem6"], size="256MiB")),
            409, "no free HDM decoder on the endpoint of mem6")
    # The kernel frees a device's DPA newest decoder first (drivers/cxl/core/hdm.c cxl_dpa_free): destroying the
    # older region first is refused, naming the order; newest first works.
    refused(platform, lambda: platform.destroy_region(H0, made[0]["name"]), 409, "decreasing decoder order")
    for r in reversed(made):
        platform.destroy_region(H0, r["name"])


def test_pooled_logical_devices_and_extents_move_between_hosts(platform: Platform) -> None:
    ld_size = platform.system.cxl_pools[0].ld_size
    pooled = {h: platform.view(h).numa_memory[2] for h in (H0, H1)}
    platform.release_ld("pool0", {"ld": 3, "node": H0})
    platform.assign_ld("pool0", {"ld": 3, "node": H1})
    # 2 GiB: a host with 512 GiB of x86 RAM has 2 GiB memory blocks, and dax kmem hot-adds whole blocks only.
    ext = platform.add_extent("pool0", {"node": H0, "size": "2GiB"})
    assert ext["offset"] % DCD_BLOCK == 0
    refused(platform, lambda: platform.assign_ld("pool0", {"ld": ext["offset"] // ld_size, "node": H1}), 409,
            "partly given out as dynamic-capacity extent")
    assert platform.view(H0).numa_memory[2] == pooled[H0] - ld_size + 2 * GiB
    assert platform.view(H1).numa_memory[2] == pooled[H1] + ld_size
    platform.release_extent("pool0", ext["id"])
    assert platform.view(H0).numa_memory[2] == pooled[H0] - ld_size


# ------------------------------------------------------------------------------------------ memory pools


def test_capacity_in_use_is_not_released(platform: Platform) -> None:
    grant = platform.grant(H0, "cxl-local", {"tenant": "team-a", "size": "3GiB"}, "reservation")
    refused(platform, lambda: platform.set_memdev(H0, "mem4", False), 409, "release those grants first")
    refused(platform, lambda: platform.destroy_region(H0, "region0"), 409, "reserved or bursting")
    platform.grant(H0, "cxl-pooled", {"tenant": "team-a", "size": "16GiB"}, "reservation")
    refused(platform, lambda: platform.release_ld("pool0", {"ld": 0}), 409, "shrink memory pool cxl-pooled")
    platform.release_grant(grant["grant"]["id"], {"token": grant["token"]})
    platform.set_memdev(H0, "mem4", False)  # nothing reserved any more: allowed
    assert platform.view(H0).numa_memory[1] == 0


POOL_REFUSALS: list[tuple[str, Callable[[Platform], object], int, str]] = [
    ("unknown-pool", lambda pf: pf.grant(H0, "nope", {"tenant": "a", "size": 1}, "reservation"), 404,
     "no memory pool 'nope'"),
    ("bad-tenant", lambda pf: pf.grant(H0, "hbm", {"tenant": "a b", "size": 1}, "reservation"), 422,
     "tenant must be"),
    ("zero-size", lambda pf: pf.grant(H0, "hbm", {"tenant": "a", "size": 0}, "reservation"), 422,
     "positive number of bytes"),
    ("size-not-a-size", lambda pf: pf.grant(H0, "hbm", {"tenant": "a", "size": "big"}, "burst"), 422,
     "expected a size"),
    ("ttl-zero", lambda pf: pf.grant(H0, "hbm", {"tenant": "a", "size": 1, "ttl": 0}, "reservation"), 422,
     "ttl must be"),
    ("more-than-capacity", lambda pf: pf.grant(H0, "cxl-local", {"tenant": "a", "size": "5GiB"}, "reservation"),
     409, "4GiB of its 4GiB is not reserved"),
    ("burst-more-than-free", lambda pf: pf.grant(H0, "cxl-local", {"tenant": "a", "size": "5GiB"}, "burst"), 409,
     "cannot burst 5GiB"),
    ("missing-fields", lambda pf: pf.grant(H0, "hbm", {"tenant": "a"}, "reservation"), 422, "missing field(s) size"),
    ("release-unknown-grant", lambda pf: pf.release_grant("g-999999", {"token": "fhw1.t-1.x"}), 404,
     "no live grant"),
]


@pytest.mark.parametrize(("request_", "status", "fragment"), [c[1:] for c in POOL_REFUSALS],
                         ids=[c[0] for c in POOL_REFUSALS])
def test_impossible_pool_requests_are_refused(platform: Platform, request_: Callable[[Platform], object],
                                              status: int, fragment: str) -> None:
    refused(platform, lambda: request_(platform), status, fragment)


def test_exclusive_pool_is_held_by_one_tenant(platform: Platform) -> None:
    platform.grant(H0, "cxl-pooled", {"tenant": "team-a", "size": "1GiB"}, "reservation")
    refused(platform, lambda: platform.grant(H0, "cxl-pooled", {"tenant": "team-b", "size": "1GiB"}, "reservation"),
            409, "exclusive and held by tenant team-a")
    refused(platform, lambda: platform.grant(H0, "cxl-pooled", {"tenant": "team-b", "size": "1GiB"}, "burst"),
            409, "exclusive and held by tenant team-a")
    platform.grant(H0, "cxl-pooled", {"tenant": "team-a", "size": "1GiB"}, "burst")  # the holder may burst


def test_release_and_unmap_need_the_grants_token(platform: Platform) -> None:
    a = platform.grant(H0, "cxl-local", {"tenant": "a", "size": "1GiB"}, "reservation")
    b = platform.grant(H0, "cxl-local", {"tenant": "b", "size": "1GiB"}, "reservation")
    refused(platform, lambda: platform.release_grant(a["grant"]["id"], {"token": b["token"]}), 403,
            "does not belong to grant")
    refused(platform, lambda: platform.release_grant(a["grant"]["id"], {}), 422, "missing field(s) token")
    m = platform.map(H0, "cxl-local", {"token": a["token"], "who": "pod-a"})
    refused(platform, lambda: platform.unmap(m["id"], {"token": b["token"]}), 403, "does not belong")
    platform.unmap(m["id"], {"token": a["token"]})


def test_a_mapping_without_a_valid_token_is_refused_and_logged(platform: Platform) -> None:
    g = platform.grant(H0, "cxl-local", {"tenant": "a", "size": "1GiB"}, "reservation")
    other = platform.grant(H0, "hbm", {"tenant": "a", "size": "1GiB"}, "reservation")
    # One character of the secret changed (the one replaced must differ from it: a random secret's second-to-last
    # character is "A" one time in 64, which made the "tampered" token the real one).
    tampered = g["token"][:-2] + ("A" if g["token"][-2] != "A" else "B") + g["token"][-1]
    assert tampered != g["token"]
    cases = [
        ({"who": "pod-1"}, "no access token"),
        ({"who": "pod-1", "token": "not-a-token"}, "unknown or malformed access token"),
        ({"who": "pod-1", "token": tampered}, "does not belong to grant"),
        ({"who": "pod-1", "token": other["token"]}, "is for pool hbm"),
        ({"who": "pod-1", "token": g["token"], "offset": 0, "length": 2 * GiB}, "outside the"),
    ]
    for body, reason in cases:
        seq = platform.audit.seq
        refused(platform, lambda body=body: platform.map(H0, "cxl-local", body), 403, reason)
        (entry,) = platform.audit.query(since=seq)
        assert entry["action"] == "map-refused" and entry["who"] == "pod-1" and reason in entry["reason"]
    platform.release_grant(g["grant"]["id"], {"token": g["token"]})
    seq = platform.audit.seq
    refused(platform, lambda: platform.map(H0, "cxl-local", {"who": "pod-1", "token": g["token"]}), 403,
            "was revoked (released)")
    assert platform.audit.query(since=seq)[0]["action"] == "map-refused"


def test_host_bridge_decoders_run_out(platform: Platform) -> None:
    # region0 already uses one decoder of cxlhb1; three more regions below it use the rest.
    made = [platform.create_region(H0, region(window="cfmws1", targets=[dev], size="256MiB"))
            for dev in ("mem5", "mem6", "mem7")]
    refused(platform, lambda: platform.create_region(H0, region(window="cfmws1", targets=["mem6"], size="256MiB")),
            409, "no free HDM decoder on host bridge cxlhb1")
    assert len(made) == 3


def test_a_grant_needs_a_contiguous_range(platform: Platform) -> None:
    grants = [platform.grant(H0, "cxl-local", {"tenant": "a", "size": "1GiB"}, "reservation") for _ in range(4)]
    for g in (grants[0], grants[2]):
        platform.release_grant(g["grant"]["id"], {"token": g["token"]})
    refused(platform, lambda: platform.grant(H0, "cxl-local", {"tenant": "a", "size": "2GiB"}, "reservation"), 409,
            "no contiguous 2GiB free")


def test_a_host_accepts_a_bounded_number_of_extents(platform: Platform) -> None:
    for _ in range(MAX_EXTENTS_PER_HOST):
        platform.add_extent("pool0", {"node": H1, "size": "256MiB"})
    refused(platform, lambda: platform.add_extent("pool0", {"node": H1, "size": "256MiB"}), 409,
            f"already holds {MAX_EXTENTS_PER_HOST} extents")


def test_an_agent_serving_some_hosts_of_a_pool_cannot_arbitrate_it(cxl_system: Any, cxl_template: Path) -> None:
    svc = AgentService(cxl_system, Path(tempfile.mkdtemp(dir=cxl_template)), nodes=[H0])
    try:
        pf = svc.platform
        refused(pf, lambda: pf.assign_ld("pool0", {"ld": 9, "node": H0}), 409,
                "shared with hosts this agent does not serve (cxl-host-1)")
        refused(pf, lambda: pf.add_extent("pool0", {"node": H0, "size": "256MiB"}), 409, "only the agent serving")
        # It still shows the host's boot assignment and serves everything local.
        assert [p["arbitrated_here"] for p in pf.cxl_pools()] == [False]
        assert pf.view(H0).numa_memory[2] == next(n.memory for n in cxl_system.node(H0).numa if n.id == 2)
    finally:
        svc.close()


def test_a_running_agent_compacts_its_platform_journal_and_a_restart_gets_the_same_pools(make_agent: MakeAgent) -> None:
    """docs/agent.md ("The journal stays small"): the platform journal (pool grants, mappings, CXL changes) is
    rewritten as one snapshot once ``compact_every`` records were appended since the last time, so 60 grants and
    releases with ``compact_every=8`` leave at most the checkpoint, the snapshot and 7 records (without it: 60+).
    A restart replays the compacted journal to the same CXL state and ledger, and grant ids are never reused."""
    svc, _ = make_agent(compact_every=8)
    platform = svc.platform
    kept = platform.grant(H0, "cxl-local", {"tenant": "keep", "size": "1GiB"}, "reservation")
    ids = [kept["grant"]["id"]]
    for _ in range(30):
        g = platform.grant(H0, "cxl-local", {"tenant": "churn", "size": "1GiB"}, "reservation")
        ids.append(g["grant"]["id"])
        platform.release_grant(g["grant"]["id"], {"token": g["token"]})
    lines = (svc.state_dir / "platform.jsonl").read_bytes().splitlines()
    assert len(lines) <= 2 + 7, len(lines)
    before = snapshot(platform)
    state_dir = svc.state_dir
    svc.close()
    again, _ = make_agent(state_dir=state_dir)
    assert snapshot(again.platform) == before
    later = again.platform.grant(H0, "cxl-local", {"tenant": "keep", "size": "1GiB"}, "reservation")
    assert later["grant"]["id"] not in ids
