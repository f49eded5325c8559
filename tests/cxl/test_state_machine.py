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
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule, run_state_machine_as_test

from fakehw.agent.cxl import DCD_BLOCK, REGION_UNIT, CxlState
from fakehw.agent.cxlsysfs import CxlSysfs, SysfsError
from fakehw.agent.platform import Platform, PlatformError
from fakehw.agent.pools import PoolLedger
from fakehw.agent.service import AgentService
from fakehw.agent.statedir import discard_runtime_state
from fakehw.model import System
from fakehw.sysfs import POOLS_FILE, ROOT_DIR
from testbed.cluster import remove_tree_in_background
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
STORES = (
    "sys/bus/cxl/devices/decoder0.1/create_ram_region", "sys/bus/cxl/devices/decoder0.3/create_pmem_region",
    "sys/bus/cxl/devices/decoder0.1/delete_region", "sys/bus/cxl/devices/decoder0.3/delete_region",
    "sys/bus/cxl/devices/region{region}/interleave_ways", "sys/bus/cxl/devices/region{region}/interleave_granularity",
    "sys/bus/cxl/devices/region{region}/size", "sys/bus/cxl/devices/region{region}/uuid",
    "sys/bus/cxl/devices/region{region}/target0", "sys/bus/cxl/devices/region{region}/target1",
    "sys/bus/cxl/devices/region{region}/commit", "sys/bus/cxl/drivers/cxl_region/bind",
    "sys/bus/cxl/drivers/cxl_region/unbind", "sys/bus/cxl/devices/decoder11.1/mode",
    "sys/bus/cxl/devices/decoder11.1/dpa_size", "sys/bus/cxl/devices/decoder12.0/mode",
    "sys/bus/cxl/devices/decoder12.0/dpa_size", "sys/bus/cxl/drivers/cxl_port/unbind",
    "sys/bus/cxl/drivers/cxl_port/bind", "sys/bus/dax/drivers/kmem/unbind", "sys/bus/dax/drivers/device_dax/bind",
)
"""Kernel stores the machine writes (region numbers drawn; endpoint decoders of mem2 and mem3 of cxl-pool)."""
VALUES = ("region{offered}", "region99", "1", "2", "0", "256", "4096", "0x20000000", "0x40000000", "0x7", "ram",
          "pmem", "{uuid}", "decoder11.1", "decoder12.0", "region{offered}", "port1", "port3", "dax0.0", "junk", "")


def _snapshot(pf: Platform) -> str:
    return json.dumps({"cxl": pf.cxl.to_json(), "pools": pf.ledger.to_json()}, sort_keys=True)


def _windows(root: Path) -> list[tuple[int, int]]:
    """The CXL windows' host physical ranges as the root decoders under ``root0`` show them."""
    out = []
    for d in (root / "sys/bus/cxl/devices").glob("decoder0.*"):
        start = int((d / "start").read_text(), 16)
        out.append((start, start + int((d / "size").read_text(), 16)))
    return out


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

    @rule(node=st.sampled_from(NODES), store=st.sampled_from(STORES), region=st.integers(0, 12),
          value=st.sampled_from(VALUES))
    def sysfs_store(self, node: str, store: str, region: int, value: str) -> None:
        """A kernel store through the sysfs route, as a tool would write it; refused: nothing changed (the one
        exception the kernel makes: a dpa_size write releases the old allocation before the new one fails)."""
        path = store.format(region=region)
        data = value.format(offered=self._offered(node, path), uuid="7c8d6b3f-0a39-4f0b-9d6c-2b5e1f8a0c11").encode()
        before = _snapshot(self.pf)
        try:
            CxlSysfs(self.pf).write(node, path, data + b"\0")
        except SysfsError as exc:
            assert exc.errno > 0 and exc.message
            if not path.endswith("/dpa_size"):
                assert _snapshot(self.pf) == before, f"refused ({exc.message}) but the state changed"

    def _offered(self, node: str, path: str) -> int:
        window = next((w for w in self.system.nodes[0].cxl.windows if f"decoder0.{w.index}/" in path), None)
        return self.pf.cxl.root_ids.get((node, window.name), 0) if window else 0

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
            hpa: dict[str, list[tuple[int, int]]] = {}
            for r in regions:
                if r.size:
                    hpa.setdefault(r.window, []).append((r.hpa_offset, r.size))
            for m in node.cxl.memdevs:  # DPA: reservations (skips included) never overlap, inside the device
                decoders = state.endpoints.get((node_name, m.name), ())
                taken = [(d.dpa_base - d.skip, d.skip + d.dpa_size) for d in decoders if d.dpa_size]
                assert not _overlaps(taken) and all(a >= 0 and a + n <= m.ram_size + m.pmem_size for a, n in taken)
                for i, d in enumerate(decoders):  # a decoder in a region is that region's, at its position
                    if d.region:
                        r = state.regions[(node_name, d.region)]
                        assert r.targets[d.position] == m.name and r.decoders[d.position] == i
                        assert d.dpa_size * r.ways == r.size and d.mode == r.mode
                    assert not d.committed or d.region, (m.name, i)
            for r in regions:  # a committed region's endpoint decoders are committed, and only then
                for pos, t in enumerate(r.targets):
                    if t and r.decoders:
                        d = state.endpoints[(node_name, t)][r.decoders[pos]]
                        assert d.committed == r.committed and d.region == r.name, (r.name, t)
                assert r.committed == (r.state == "commit") and (not r.enabled or r.committed)
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
            # An enabled RAM region has its DAX device, bound to the driver the state says; the online memory
            # blocks linked from each NUMA node add up to the CXL memory the view puts there.
            dax_dir = root / "sys/bus/dax/devices"
            dax = {p.name: p for p in dax_dir.iterdir()} if dax_dir.is_dir() else {}
            ram = [rv for rv in view.cxl.regions if rv.region.mode == "ram" and rv.region.enabled]
            assert set(dax) == {f"dax{rv.region.id}.0" for rv in ram}
            for rv in ram:
                link = dax[f"dax{rv.region.id}.0"] / "driver"
                driver = Path(os.readlink(link)).name if link.is_symlink() else ""
                assert driver == rv.region.dax, (node_name, rv.region.name, driver)
            block = int((root / "sys/devices/system/memory/block_size_bytes").read_text(), 16)
            windows = _windows(root)
            for numa, size in view.cxl.numa_memory.items():
                blocks = [b for b in (root / f"sys/devices/system/node/node{numa}").glob("memory*")
                          if (b / "state").read_text().strip() == "online"
                          and any(lo <= int(b.name[6:]) * block < hi for lo, hi in windows)]
                assert len(blocks) * block == size, (node_name, numa, len(blocks), size)
            doc = json.loads((root / POOLS_FILE).read_text())
            rendered = {p["name"]: (p["available"], p["reserved"], p["bursting"]) for p in doc["pools"]}
            assert rendered == {p.name: (p.available, p.reserved, p.bursting) for p in view.pools}


@pytest.fixture(scope="module")
def machine_dir(cxl_system: System, scratch: str | None) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fhw-machine-", dir=scratch))
    AgentService(cxl_system, path).close()  # render once; every run starts incrementally from this tree
    yield path
    remove_tree_in_background(path)  # a whole rendered tree: deleting it inline cost this test's teardown 15-41 s


def test_cxl_and_pool_state_machine(cxl_system: System, machine_dir: Path) -> None:
    run_state_machine_as_test(
        lambda: PlatformMachine(cxl_system, machine_dir),
        settings=settings(max_examples=int(os.environ.get("FAKEHW_MACHINE_EXAMPLES", "20")),
                          stateful_step_count=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]),
    )
