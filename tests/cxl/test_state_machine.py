"""A hypothesis state machine over everything that changes CXL memory and memory pools.

Random sequences of region create/destroy, memdev online/offline (by operators and by faults), logical-device
assign/release, dynamic-capacity extents, reservations, bursts, releases, mappings with good, revoked, forged and
missing tokens, time passing and agent restarts. After every step:

- no capacity is assigned twice (device ranges, DPA, HPA, pool grants);
- totals are conserved (held + free = capacity; granted <= available);
- every live mapping has a valid token;
- the audit log has an entry for every grant and every revocation;
- the rendered tree (NUMA meminfo, /sys/bus/cxl, the pools file) agrees with the state;
- a refused request changed nothing.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule, run_state_machine_as_test

from fakehw.agent.cxl import DCD_BLOCK, REGION_UNIT, CxlState
from fakehw.agent.platform import Platform, PlatformError
from fakehw.agent.pools import PoolLedger
from fakehw.agent.service import AgentService
from fakehw.agent.statedir import discard_runtime_state
from fakehw.model import System
from fakehw.sysfs import POOLS_FILE, ROOT_DIR
from tests.cxl.conftest import Clock

NODES = ("cxl-host-0", "cxl-host-1")
MEMDEVS = tuple(f"mem{i}" for i in range(8))
WINDOWS = ("cfmws0", "cfmws1", "cfmws2", "cfmws3", "cfmws4")
POOLS = ("cxl-local", "cxl-pooled", "hbm")
TENANTS = ("team-a", "team-b", "team-c")
PLAUSIBLE: list[tuple[str, list[str]]] = [
    ("cfmws0", ["mem1"]), ("cfmws0", ["mem2"]), ("cfmws0", ["mem1", "mem3"]), ("cfmws0", ["mem1", "mem2", "mem3",
                                                                                        "mem0"]),
    ("cfmws1", ["mem5"]), ("cfmws1", ["mem6"]), ("cfmws1", ["mem6", "mem7"]), ("cfmws1", ["mem5", "mem7"]),
    ("cfmws2", ["mem1", "mem5"]), ("cfmws2", ["mem2", "mem6"]), ("cfmws2", ["mem3", "mem7"]),
]
"""Requests a window of cxl-pool can take while capacity lasts (the rest of the time: anything)."""


def _snapshot(pf: Platform) -> str:
    return json.dumps({"cxl": pf.cxl.to_json(), "pools": pf.ledger.to_json()}, sort_keys=True)


def _overlaps(ranges: list[tuple[int, int]]) -> bool:
    ordered = sorted(ranges)
    return any(a[0] + a[1] > b[0] for a, b in itertools.pairwise(ordered))


class PlatformMachine(RuleBasedStateMachine):
    grants = Bundle("grants")
    extents = Bundle("extents")
    mappings = Bundle("mappings")

    def __init__(self, system: System, state_dir: Path):
        super().__init__()
        self.system = system
        self.state_dir = state_dir
        discard_runtime_state(state_dir)
        self.clock = Clock()
        self.svc = AgentService(system, state_dir, clock=self.clock)
        self.faults: list[str] = []

    @property
    def pf(self) -> Platform:
        return self.svc.platform

    def teardown(self) -> None:
        self.svc.close()

    def attempt(self, call: Any) -> Any:
        """Run a request; a refusal must be a 4xx with a reason and leave the state as it was."""
        before = _snapshot(self.pf)
        try:
            return call()
        except PlatformError as exc:
            assert 400 <= exc.status < 500 and exc.message
            assert _snapshot(self.pf) == before, f"refused ({exc.message}) but the state changed"
            return None

    # ------------------------------------------------------------------------------------------ CXL rules

    @rule(node=st.sampled_from(NODES),
          request=st.one_of(st.sampled_from(PLAUSIBLE),
                            st.tuples(st.sampled_from(WINDOWS),
                                      st.lists(st.sampled_from(MEMDEVS), min_size=1, max_size=4, unique=True))),
          units=st.one_of(st.none(), st.integers(1, 3)), mode=st.sampled_from(["ram", "ram", "ram", "pmem"]),
          granularity=st.sampled_from([None, None, 256, 1024, 16384]))
    def create_region(self, node: str, request: tuple[str, list[str]], units: int | None, mode: str,
                      granularity: int | None) -> None:
        window, devices = request
        body: dict[str, Any] = {"window": window, "targets": devices, "mode": mode}
        if units is not None:
            body["size"] = units * REGION_UNIT * len(devices)
        if granularity is not None:
            body["granularity"] = granularity
        self.attempt(lambda: self.pf.create_region(node, body))

    @rule(node=st.sampled_from(NODES), pick=st.integers(0, 12))
    def destroy_region(self, node: str, pick: int) -> None:
        names = [*(r.name for r in self.pf.cxl.node_regions(node)), "region99"]
        self.attempt(lambda: self.pf.destroy_region(node, names[pick % len(names)]))

    @rule(node=st.sampled_from(NODES), memdev=st.sampled_from(MEMDEVS), online=st.booleans())
    def memdev_admin(self, node: str, memdev: str, online: bool) -> None:
        self.attempt(lambda: self.pf.set_memdev(node, memdev, online))

    @rule(node=st.sampled_from(NODES), memdev=st.sampled_from(MEMDEVS))
    def memdev_fails(self, node: str, memdev: str) -> None:
        self.faults.append(self.svc.inject(node, {"kind": "cxl-offline", "device": memdev}).id)

    @rule(data=st.data())
    def heal_a_fault(self, data: st.DataObject) -> None:
        if self.faults:
            fault = self.faults.pop(data.draw(st.integers(0, len(self.faults) - 1)))
            self.svc.heal(fault_id=fault)

    @rule(ld=st.integers(0, 16), node=st.sampled_from(NODES))
    def assign_ld(self, ld: int, node: str) -> None:
        self.attempt(lambda: self.pf.assign_ld("pool0", {"ld": ld, "node": node}))

    @rule(ld=st.integers(0, 15), node=st.one_of(st.none(), st.sampled_from(NODES)))
    def release_ld(self, ld: int, node: str | None) -> None:
        body: dict[str, Any] = {"ld": ld} if node is None else {"ld": ld, "node": node}
        self.attempt(lambda: self.pf.release_ld("pool0", body))

    @rule(target=extents, node=st.sampled_from(NODES), blocks=st.integers(1, 12),
          at=st.one_of(st.none(), st.integers(0, 255)))
    def add_extent(self, node: str, blocks: int, at: int | None) -> str:
        body: dict[str, Any] = {"node": node, "size": blocks * DCD_BLOCK}
        if at is not None:
            body["offset"] = at * DCD_BLOCK
        answer = self.attempt(lambda: self.pf.add_extent("pool0", body))
        return str(answer["id"]) if answer else "pool0-e999999"

    @rule(extent=consumes(extents))
    def release_extent(self, extent: str) -> None:
        self.attempt(lambda: self.pf.release_extent("pool0", extent))

    # ------------------------------------------------------------------------------------------ pool rules

    @rule(target=grants, node=st.sampled_from(NODES), pool=st.sampled_from(POOLS), tenant=st.sampled_from(TENANTS),
          quarter_gib=st.integers(1, 40), burst=st.booleans(), ttl=st.sampled_from([30.0, 3600.0]))
    def grant(self, node: str, pool: str, tenant: str, quarter_gib: int, burst: bool, ttl: float) -> Any:
        body = {"tenant": tenant, "size": quarter_gib * 2**28, "ttl": ttl}
        answer = self.attempt(lambda: self.pf.grant(node, pool, body, "burst" if burst else "reservation"))
        return answer or {"grant": {"id": "g-999999", "node": node, "pool": pool}, "token": None}

    @rule(g=consumes(grants), honest=st.booleans())
    def release(self, g: dict[str, Any], honest: bool) -> None:
        token = g["token"] if honest else "fhw1.t-000001.forged"
        self.attempt(lambda: self.pf.release_grant(g["grant"]["id"], {"token": token}))

    @rule(target=mappings, g=grants, who=st.sampled_from(["pod-1", "pod-2"]),
          token_kind=st.sampled_from(["own", "own", "none", "forged"]), offset=st.integers(0, 2**31))
    def map(self, g: dict[str, Any], who: str, token_kind: str, offset: int) -> Any:
        token = {"own": g["token"], "none": None, "forged": "fhw1.t-000001.AAAA"}[token_kind]
        body = {"who": who, "offset": offset, "length": 2**20}
        node, pool = g["grant"]["node"], g["grant"]["pool"]
        seq = self.pf.audit.seq
        answer = self.attempt(lambda: self.pf.map(node, pool, {k: v for k, v in body.items() if v is not None}
                                                  | ({"token": token} if token else {})))
        if answer is None:
            refusals = self.pf.audit.query(since=seq)
            assert refusals and refusals[-1]["action"] == "map-refused", "a refused mapping is logged"
            return {"id": "m-999999", "token": token}
        return {"id": answer["id"], "token": token}

    @rule(m=consumes(mappings))
    def unmap(self, m: dict[str, Any]) -> None:
        self.attempt(lambda: self.pf.unmap(m["id"], {"token": m["token"]}))

    @rule(seconds=st.sampled_from([1.0, 20.0, 45.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def restart_agent(self) -> None:
        before = (_snapshot(self.pf), self.pf.audit.seq)
        self.svc.close()
        self.svc = AgentService(self.system, self.state_dir, clock=self.clock)
        assert (_snapshot(self.pf), self.pf.audit.seq) == before

    # ------------------------------------------------------------------------------------------ invariants

    def settle(self) -> None:
        """Let due expiries happen (as the agent's timer or any request would) before looking at raw state."""
        for node in NODES:
            self.pf.view(node)

    @invariant()
    def nothing_is_assigned_twice_and_totals_are_conserved(self) -> None:
        self.settle()
        state: CxlState = self.pf.cxl
        pool = self.system.cxl_pools[0]
        held = [(ld * pool.ld_size, pool.ld_size) for (p, ld) in state.ld_owner if p == pool.name]
        held += [(e.offset, e.length) for e in state.extents.values()]
        assert not _overlaps(held) and all(s >= 0 and s + n <= pool.capacity for s, n in held)
        blocks = [False] * (pool.capacity // DCD_BLOCK)
        for s, n in held:
            for b in range(s // DCD_BLOCK, (s + n) // DCD_BLOCK):
                blocks[b] = True
        assert sum(n for _, n in held) + blocks.count(False) * DCD_BLOCK == pool.capacity
        for node_name in NODES:
            node = self.system.node(node_name)
            assert node is not None
            regions = state.node_regions(node_name)
            dpa: dict[tuple[str, str], list[tuple[int, int]]] = {}
            hpa: dict[str, list[tuple[int, int]]] = {}
            for r in regions:
                hpa.setdefault(r.window, []).append((r.hpa_offset, r.size))
                for t, off in zip(r.targets, r.dpa_offsets, strict=True):
                    dpa.setdefault((t, r.mode), []).append((off, r.size // r.ways))
            for (t, mode), ranges in dpa.items():
                dev = node.cxl.memdev(t)
                limit = (dev.ram_size if mode == "ram" else dev.pmem_size) if dev else pool.capacity
                assert not _overlaps(ranges) and all(s + n <= limit for s, n in ranges), (t, mode, ranges)
            windows = {w.name: w.size for w in node.cxl.windows}
            for w, ranges in hpa.items():
                assert not _overlaps(ranges) and all(s + n <= windows[w] for s, n in ranges), (w, ranges)
            for p in self.pf.view(node_name).pools:
                model = next(m for m in node.memory_pools if m.name == p.name)
                live = self.pf.ledger.live(node_name, p.name)
                assert not _overlaps([(g.start, g.size) for g in live])
                assert all(g.start + g.size <= model.capacity for g in live)
                assert p.reserved + p.bursting == sum(g.size for g in live) <= p.available <= model.capacity
                assert p.free == p.available - p.reserved - p.bursting >= 0

    @invariant()
    def every_mapping_has_a_valid_token(self) -> None:
        self.settle()
        ledger: PoolLedger = self.pf.ledger
        now = self.clock()
        for m in ledger.mappings.values():
            g = ledger.grants.get(m.grant)
            assert g is not None and g.expires > now
            record = ledger.tokens[g.token_id]
            assert record.revoked is None and record.grant == g.id
            assert m.offset + m.length <= g.size

    @invariant()
    def audit_has_every_grant_and_revocation(self) -> None:
        self.settle()
        entries = self.pf.audit.query(limit=100_000)
        granted = {e["token_id"] for e in entries if e["action"].startswith("grant-")}
        revoked = {e["token_id"] for e in entries if e["action"] == "revoke"}
        tokens = self.pf.ledger.tokens.values()
        assert granted == {t.token_id for t in tokens}
        assert revoked == {t.token_id for t in tokens if t.revoked is not None}
        assert len([e for e in entries if e["action"].startswith("grant-")]) == len(granted)

    @invariant()
    def the_rendered_tree_agrees_with_the_state(self) -> None:
        for node_name in NODES:
            view = self.pf.view(node_name)
            root = self.svc.node_dir(node_name) / ROOT_DIR
            for numa, size in view.numa_memory.items():
                first = (root / f"sys/devices/system/node/node{numa}/meminfo").read_text().splitlines()[0]
                assert int(first.split()[3]) * 1024 == size, (node_name, numa, first)
            bus = {p.name for p in (root / "sys/bus/cxl/devices").iterdir()}
            assert {n for n in bus if n.startswith("region")} == {rv.region.name for rv in view.cxl.regions}
            assert {n for n in bus if n.startswith("mem")} == {m.sysfs_name for m in view.cxl.memdevs}
            rendered_state = {m.name: "online" if (root / "sys/bus/cxl/devices" / m.sysfs_name / "driver").is_symlink()
                              else "offline" for m in view.cxl.memdevs}
            for m in view.cxl.memdevs:
                assert rendered_state[m.name] == ("online" if m.online else "offline")
            # A RAM region's DAX device is bound to kmem (its memory is in a NUMA node) exactly when the region is
            # active, i.e. when the tree shows every target online; the kmem-bound devices add up to what the
            # CXL NUMA nodes hold.
            dax_dir = root / "sys/bus/dax/devices"
            dax = {p.name: p for p in dax_dir.iterdir()} if dax_dir.is_dir() else {}
            # A region that lost a target (memdev offline) is torn down as the kernel does: no DAX device.
            ram = [rv for rv in view.cxl.regions if rv.region.mode == "ram"
                   and all(rendered_state.get(t, "online") == "online" for t in rv.region.targets)]
            assert set(dax) == {f"dax{rv.region.id}.0" for rv in ram}
            in_kmem: dict[int, int] = {}
            for rv in ram:
                dev = dax[f"dax{rv.region.id}.0"]
                driver = Path(os.readlink(dev / "driver")).name
                targets_online = all(rendered_state[t] == "online" for t in rv.region.targets)
                assert driver == ("kmem" if rv.active else "device_dax"), (node_name, rv.region.name, driver)
                assert rv.active == targets_online, (node_name, rv.region.name, rendered_state)
                if driver == "kmem":
                    target = int((dev / "target_node").read_text())
                    in_kmem[target] = in_kmem.get(target, 0) + int((dev / "size").read_text())
            assert {n: in_kmem.get(n, 0) for n in view.cxl.numa_memory} == dict(view.cxl.numa_memory)
            doc = json.loads((root / POOLS_FILE).read_text())
            rendered = {p["name"]: (p["available"], p["reserved"], p["bursting"]) for p in doc["pools"]}
            assert rendered == {p.name: (p.available, p.reserved, p.bursting) for p in view.pools}


@pytest.fixture(scope="module")
def machine_dir(cxl_system: System, scratch: str | None) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fhw-machine-", dir=scratch))
    AgentService(cxl_system, path).close()  # render once; every run starts incrementally from this tree
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_cxl_and_pool_state_machine(cxl_system: System, machine_dir: Path) -> None:
    run_state_machine_as_test(
        lambda: PlatformMachine(cxl_system, machine_dir),
        settings=settings(max_examples=int(os.environ.get("FAKEHW_MACHINE_EXAMPLES", "20")),
                          stateful_step_count=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]),
    )
