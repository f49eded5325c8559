"""The emulated fabric: plans (no root), build, complete teardown (also after failures and crashes), borrowed
namespaces, and the dynamic requirements measured with scapy-crafted frames on real veths."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakehw.cli import main as fakehw_main
from fakehw.fabric.checks import run_checks
from fakehw.fabric.emulate import EmulatedFabric, FabricBuildError, Ledger, leftovers
from fakehw.fabric.lint import lint
from fakehw.fabric.loader import broken_examples
from fakehw.fabric.model import NicRef, PortRef, load_fabric
from fakehw.fabric.netns import Netns, create_named, remove_named
from fakehw.fabric.plan import EmulationError, NodeAttachment, plan
from fakehw.fabric.traffic import LiveFabric, Prober, start_responder

# --------------------------------------------------------------------------------------------------- plans


def test_plan_follows_the_config() -> None:
    model = load_fabric("dgx-h100-rail")
    p = plan(model, run_id="abc123")
    assert p.prefix == "fhabc123"
    nodes = {n.name for n in model.system.nodes}
    assert {k for k in p.namespaces if k.startswith("node:")} == {f"node:{n}" for n in nodes}
    assert {k for k in p.namespaces if k.startswith("switch:")} == {f"switch:{s.name}" for s in model.switches}
    assert all(ns.name.startswith("fhabc123-") and ns.owned for ns in p.namespaces.values())
    assert len(p.links) == len(model.links)
    for nic in model.nics:
        np_ = p.nics[nic.ref]
        assert (np_.ifname, np_.mac, np_.mtu, np_.vlan) == (nic.nic.netdev, nic.nic.mac, nic.mtu, nic.vlan)
        assert np_.ip in model.vlan(np_.segment_vlan or 0).subnet
    ips = [n.ip for n in p.nics.values()]
    assert len(set(ips)) == len(ips)
    for port in model.ports():
        assert p.ports[port.ref].mtu == port.mtu
        assert f'"{p.ports[port.ref].ifname}"' in p.nft[f"switch:{port.switch}"]


def test_plan_refuses_what_this_kernel_cannot_emulate(tmp_path: Path) -> None:
    with pytest.raises(EmulationError, match="loops through"):
        plan(load_fabric(broken_examples()["FAB-VLAN-002-loop"]))
    f = tmp_path / "mixed.yaml"
    f.write_text("extends: dgx-h100-rail\nname: mixed\nswitches:\n  - name: leaf-rail0\n    ports:\n"
                 "      - {name: p0, vlan: {untagged: 100}}\n")
    with pytest.raises(EmulationError, match="VLAN 100 is untagged on leaf-rail0/p0 but tagged on"):
        plan(load_fabric(f))
    with pytest.raises(EmulationError, match="run id"):
        plan(load_fabric("dgx-h100-rail"), run_id="Bad/Id")
    with pytest.raises(EmulationError, match="not in the fabric: nosuch"):
        plan(load_fabric("dgx-h100-rail"), attachments={"nosuch": NodeAttachment("/proc/1/ns/net")})


# --------------------------------------------------------------------------------------------------- build


def _ip_json(ns: Netns, *args: str) -> list[dict[str, object]]:
    out = ns.run(["ip", "-j", *args]).stdout
    data: list[dict[str, object]] = json.loads(out or b"[]")
    return data


def _root_state() -> tuple[set[str], set[str], set[str]]:
    links = {str(x["ifname"]) for x in json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True,
                                                                   check=True).stdout)}
    tables = set(subprocess.run(["nft", "list", "tables"], capture_output=True, check=True).stdout.decode()
                 .splitlines())
    netns = set(subprocess.run(["ip", "netns", "list"], capture_output=True, check=True).stdout.decode().split())
    return links, tables, netns


OURS = re.compile(r"^(fh[0-9a-z]{1,8}-|fhbr$|dup[ib]|enp\d+s0np0$|enP\d+p3s0np0$|p\d+$|up\d+$)")


def _leaks(before: tuple[set[str], set[str], set[str]]) -> list[str]:
    """What appeared in the root namespace since ``before`` and could be the fabric's. Other jobs share this
    machine, so only names this package uses count (namespaces fh<run>-..., its interface and table names)."""
    after = _root_state()
    links = [f"link {x}" for x in after[0] - before[0] if OURS.match(x)]
    tables = [f"nft {x}" for x in after[1] - before[1] if "fakehw" in x or " fh" in x]
    netns = [f"netns {x}" for x in after[2] - before[2] if OURS.match(x)]
    return links + tables + netns


def _ns_inodes_in_use() -> set[int]:
    inodes = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                inodes.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
    return inodes


def test_build_matches_plan_and_teardown_leaves_nothing(need_root: None, tmp_path: Path) -> None:
    model = load_fabric("dgx-h100-rail")
    before = _root_state()
    fabric = EmulatedFabric.build(model, state_dir=tmp_path)
    inodes = {os.stat(ns.path).st_ino for ns in fabric.plan.namespaces.values()}
    try:
        assert Ledger.load(tmp_path).complete
        listed = set(subprocess.run(["ip", "netns", "list"], capture_output=True, check=True).stdout.decode().split())
        assert {ns.name for ns in fabric.plan.namespaces.values()} <= listed
        node0 = model.system.nodes[0]
        links = {str(x["ifname"]).split("@")[0]: x for x in _ip_json(fabric.node_netns(node0.name), "link")}
        for host in (n for n in model.nics if n.node == node0.name):  # the NICs this fabric cables
            got = links[host.nic.netdev]
            assert (got["mtu"], got["address"]) == (host.mtu, host.nic.mac)
        sw = model.switches[3]
        ports = {str(x["ifname"]).split("@")[0]: x for x in _ip_json(fabric.switch_netns(sw.name), "link")}
        for port in sw.ports:
            assert ports[port.name]["mtu"] == port.mtu and ports[port.name]["master"] == "fhbr"
        tables = fabric.switch_netns(sw.name).run(["nft", "list", "tables"]).stdout.decode()
        assert "table bridge fakehw_vlan" in tables
    finally:
        report = fabric.teardown()
    assert report.leftovers == [] and report.errors == []
    assert not (tmp_path / "fabric.json").exists()
    assert _leaks(before) == []
    assert not inodes & _ns_inodes_in_use(), "a process still holds one of the fabric's namespaces"


def test_failed_build_is_removed_completely(need_root: None, tmp_path: Path) -> None:
    before = _root_state()
    with pytest.raises(FabricBuildError, match="injected failure after 5 link"):
        EmulatedFabric.build(load_fabric("dgx-h100-rail"), state_dir=tmp_path, fail_after=5)
    assert _leaks(before) == []
    assert not (tmp_path / "fabric.json").exists()


def test_down_cleans_up_after_a_killed_process(need_root: None, tmp_path: Path) -> None:
    """A process that built a fabric (with a responder) dies by SIGKILL; ``fakehw fabric down`` removes it all."""
    before = _root_state()
    script = (
        "import sys, time\n"
        "from fakehw.fabric.model import load_fabric\n"
        "from fakehw.fabric.emulate import EmulatedFabric\n"
        "from fakehw.fabric.traffic import start_responder\n"
        f"f = EmulatedFabric.build(load_fabric('dgx-h100-rail'), state_dir={str(tmp_path)!r})\n"
        "start_responder(f)\n"
        "print('built', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"built"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ledger = Ledger.load(tmp_path)
    assert ledger.processes and leftovers(ledger)
    assert fakehw_main(["fabric", "down", "--state-dir", str(tmp_path)]) == 0
    assert leftovers(ledger) == []
    assert _leaks(before) == []


def test_a_node_can_live_in_an_existing_namespace(need_root: None, tmp_path: Path) -> None:
    """The hook the Docker backend needs: a node's NICs go into a namespace the fabric did not create, and only
    those NICs leave again."""
    name = f"fhtest{os.getpid()}"
    create_named(name)
    outside = Netns.named(name, owned=False)
    try:
        outside.run(["ip", "link", "add", "keepme", "type", "veth", "peer", "name", "keepme2"])
        model = load_fabric("dgx-h100-rail")
        node = model.system.nodes[1].name
        with EmulatedFabric.build(model, state_dir=tmp_path,
                                  attachments={node: NodeAttachment(outside.path)}) as fabric:
            assert not fabric.plan.node_ns(node).owned
            names = {str(x["ifname"]).split("@")[0] for x in _ip_json(outside, "link")}
            assert {n.nic.netdev for n in model.nics if n.node == node} <= names
            responder = start_responder(fabric, [NicRef(node, "mlx5_4"), NicRef(model.system.nodes[0].name,
                                                                                  "mlx5_4")])
            prober = Prober(fabric)
            assert prober.probe(NicRef(model.system.nodes[0].name, "mlx5_4"), NicRef(node, "mlx5_4")).ok
            responder.stop()
        assert outside.exists()
        names = {str(x["ifname"]).split("@")[0] for x in _ip_json(outside, "link")}
        assert names == {"lo", "keepme", "keepme2"}
    finally:
        remove_named(name)


# --------------------------------------------------------------------------------------------------- traffic


def test_healthy_fabric_passes_every_dynamic_check(healthy: LiveFabric) -> None:
    result = run_checks(healthy.fabric, healthy.report, healthy.prober, mtu="sample")
    assert result.passed, result.format()
    reach = result.by_id("FAB-DYN-REACH-001")
    assert len(reach) == len(healthy.report.paths)
    rails = {healthy.fabric.model.host_nic(NicRef(*r.subject.split(" <-> ")[0].split("/"))).rail for r in reach}
    assert rails == {n.rail for n in healthy.fabric.model.nics}
    assert {r.id for r in result.results} == {"FAB-DYN-REACH-001", "FAB-DYN-MTU-001", "FAB-DYN-PRIO-001",
                                             "FAB-DYN-CNP-001", "FAB-DYN-PFC-001"}
    stats = healthy.responder.stats()
    assert stats["internal_errors"] == 0 and stats["stats"]["acks_sent"] >= 2 * len(reach)


def test_read_request_returns_the_memory_pattern(healthy: LiveFabric) -> None:
    from fakehw.fabric.responder import read_payload
    from fakehw.fabric.wire import Opcode, RocePacket

    a, b = NicRef("dgx-h100-0", "mlx5_6"), NicRef("dgx-h100-2", "mlx5_6")
    sock = healthy.prober.sock(a)
    sock.drain()
    length, va = 3000, 0x1234
    psn, frame = healthy.prober.request(a, b, opcode=Opcode.RDMA_READ_REQUEST,
                                        reth={"va": va, "rkey": 7, "dlen": length})
    sock.send(frame)
    chunks: dict[int, bytes] = {}
    for _got, pkt in sock.frames(2):
        if isinstance(pkt, RocePacket) and pkt.bth.opcode in range(0x0D, 0x11) and pkt.bth.dqpn == healthy.prober.qp:
            chunks[pkt.bth.psn] = pkt.payload
            if len(b"".join(chunks.values())) >= length:
                break
    data = b"".join(chunks[k] for k in sorted(chunks))
    assert data == read_payload(va, length)
    # one response per RoCE MTU (4096 for 9000-byte NICs): 3000 bytes fit in one READ RESPONSE ONLY
    assert list(chunks) == [psn]


def test_write_is_acknowledged_and_ce_marks_arrive(healthy: LiveFabric) -> None:
    from fakehw.fabric.wire import Opcode

    a, b = NicRef("dgx-h100-1", "mlx5_10"), NicRef("dgx-h100-3", "mlx5_10")
    prober = healthy.prober
    sock = prober.sock(a)
    sock.drain()
    psn, frame = prober.request(a, b, b"written data", opcode=Opcode.RDMA_WRITE_ONLY,
                                reth={"va": 0x8000, "rkey": 1, "dlen": 12})
    pending = {(a, psn): (b, time.monotonic())}
    sock.send(frame)
    assert prober._collect(pending, 2.0)  # the responder acknowledged the RDMA WRITE
    obs = prober.observe(a, b, ecn=0b11)  # a CE-marked frame, captured in b's namespace
    assert obs is not None and obs.ecn == 0b11 and obs.sent_ecn == 0b11


def test_one_1500_port_measured_equals_lint(need_root: None, tmp_path: Path) -> None:
    model = load_fabric(broken_examples()["FAB-MTU-001-port-1500"])
    report = lint(model)
    bad = PortRef("leaf-rail3", "p1")
    affected = [p for p in report.paths if bad in p.ports]
    assert affected and all(p.max_payload < p.mtus[0] - 44 for p in affected)
    healthy_path = next(p for p in report.paths if bad not in p.ports)
    with EmulatedFabric.build(model, state_dir=tmp_path) as fabric:
        start_responder(fabric)
        prober = Prober(fabric)
        for path in [*affected, healthy_path]:
            m = prober.measure_payload(path.a, path.b)
            assert m.largest == path.max_payload, (path.id, m)
            # the direction in which the 1500 port receives the frame (from its own NIC) is exact; Linux lets
            # the other direction exceed a bridge port's MTU by the 4 bytes it keeps for a VLAN tag
            if bad in path.ports:
                faced = model.port(bad).peer
                into_port = m.a_to_b if faced == path.a else m.b_to_a
                assert into_port == path.max_payload


def test_vlan_mismatch_drops_where_lint_says(need_root: None, tmp_path: Path) -> None:
    """FAB-VLAN-001 on the emulated fabric: the mis-tagged NIC is cut off, its rail peers still talk."""
    model = load_fabric(broken_examples()["FAB-VLAN-001-host-vlan"])
    odd = NicRef("dgx-h100-3", "mlx5_3")  # the rail-1 NIC
    peers = [NicRef(f"dgx-h100-{i}", "mlx5_3") for i in range(3)]
    with EmulatedFabric.build(model, state_dir=tmp_path) as fabric:
        start_responder(fabric, [odd, *peers])
        prober = Prober(fabric)
        res = prober.probe_pairs([(odd, peers[0]), (peers[0], peers[1]), (peers[2], peers[1])], timeout=0.3)
        assert [r.ok for r in res] == [False, True, True]
        counters = fabric.switch_netns("leaf-rail1").run(["nft", "list", "table", "bridge", "fakehw_vlan"])
        assert b"VLAN not on port" in counters.stdout


def test_spine_leaf_reaches_across_spines_and_splits_where_lint_says(need_root: None, tmp_path: Path) -> None:
    """gb200-nvl72 spine-leaf: every rail reaches across the spines (VLAN trunks enforced by nftables); with
    VLAN 202 pruned from one uplink (FAB-PATH-001) rail 2 breaks exactly between the two leaves."""
    healthy_model = load_fabric("gb200-nvl72-spine-leaf")
    report = lint(healthy_model)
    with EmulatedFabric.build(healthy_model, state_dir=tmp_path / "ok") as fabric:
        start_responder(fabric)
        result = run_checks(fabric, report, Prober(fabric), mtu="sample", priorities=False)
        assert result.passed, result.format()
        assert len(result.by_id("FAB-DYN-REACH-001")) == len(report.paths)
    broken = load_fabric(broken_examples()["FAB-PATH-001-split-rail"])
    with EmulatedFabric.build(broken, state_dir=tmp_path / "split") as fabric:
        rail2 = [n.ref for n in broken.nics if n.rail == 2]
        start_responder(fabric, rail2)
        prober = Prober(fabric)
        leaf = {r: broken.host_nic(r).peer.switch for r in rail2}  # type: ignore[union-attr]
        pairs = [(x, y) for x in rail2 for y in rail2 if x != y and x.node < y.node][:60]
        results = prober.probe_pairs(pairs, timeout=0.3)
        for r in results:
            assert r.ok == (leaf[r.a] == leaf[r.b]), r
        assert any(r.ok for r in results) and not all(r.ok for r in results)


def test_without_root_everything_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """What a non-root user (or CI without privileges) sees: a reason, never a traceback; the tests skip with it."""
    import fakehw.fabric.emulate as emulate

    monkeypatch.setattr(emulate, "have_root", lambda: False)
    reason = emulate.root_problem()
    assert reason is not None and "needs root" in reason
    with pytest.raises(FabricBuildError, match="needs root"):
        EmulatedFabric.build(load_fabric("dgx-h100-rail"))
    assert fakehw_main(["fabric", "up", "dgx-h100-rail", "--state-dir", str(tmp_path)]) == 1
    assert "needs root" in capsys.readouterr().err
    assert fakehw_main(["fabric", "lint", "dgx-h100-rail"]) == 0  # static conformance needs no privileges
