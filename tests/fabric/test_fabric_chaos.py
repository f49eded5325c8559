"""Chaos without netem on the emulated fabric: every impairment measured with real frames, and reverted."""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from fakehw.fabric.chaos import Chaos, Direction, UnsupportedImpairment, binomial_interval, capabilities
from fakehw.fabric.emulate import EmulatedFabric
from fakehw.fabric.model import NicRef, load_fabric
from fakehw.fabric.plan import BRIDGE
from fakehw.fabric.traffic import LiveFabric, start_responder

RAILS = range(8)
RAIL_NIC = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")
"""The compute NIC of GPU r, rail r (dgx-h100-roce: the DGX H100 User Guide's RDMA names)."""


def nic(node: int, rail: int) -> NicRef:
    return NicRef(f"dgx-h100-{node}", RAIL_NIC[rail])


@pytest.fixture
def chaos(healthy: LiveFabric) -> Iterator[Chaos]:
    c = Chaos(healthy.fabric)
    yield c
    c.clear()
    assert healthy.fabric.ledger.impairments == []


def _send_and_count(live: LiveFabric, a: NicRef, b: NicRef, frames: list[bytes], settle: float = 0.3) -> Counter[bytes]:
    """Send ``frames`` from a; the multiset of those frames b receives."""
    capture = live.fabric.socket(b)
    try:
        capture.drain()
        wanted = set(frames)
        sock = live.prober.sock(a)
        for f in frames:
            assert sock.send(f)
        got: Counter[bytes] = Counter()
        while (r := capture.recv(settle)) is not None:
            if r.frame in wanted:
                got[r.frame] += 1
        return got
    finally:
        capture.close()


def _frames(live: LiveFabric, a: NicRef, b: NicRef, distinct: int, size: int = 64) -> list[bytes]:
    """``distinct`` scapy-built SEND frames without ACK request (each a different PSN)."""
    return [live.prober.request(a, b, bytes(size), ackreq=False)[1] for _ in range(distinct)]


def test_capabilities_are_explicit() -> None:
    caps = capabilities()
    for kind in ("link-down", "flap", "partition", "loss", "bandwidth", "duplicate", "corrupt", "delay"):
        assert caps[kind][0]
    supported, why = caps["reorder"]
    assert not supported and "netem" in why


def test_unsupported_impairments_raise_with_the_reason(chaos: Chaos) -> None:
    with pytest.raises(UnsupportedImpairment, match="sch_netem"):
        chaos.apply("reorder", "dgx-h100-0/mlx5_0", rate=0.1)
    assert chaos.active == {}


def _rtts(live: LiveFabric, a: NicRef, b: NicRef, n: int = 25) -> list[float]:
    out = []
    for _ in range(n):
        r = live.prober.probe(a, b, timeout=1.0)
        assert r.ok and r.rtt is not None
        out.append(r.rtt)
    return out


def test_delay_and_jitter_through_the_userspace_forwarder(healthy: LiveFabric, chaos: Chaos) -> None:
    a, b = nic(1, 0), nic(3, 0)
    base = statistics.median(_rtts(healthy, a, b))
    delay_ms, jitter_ms = 20.0, 8.0
    imp = chaos.delay(a, delay_ms)
    rtts = _rtts(healthy, a, b)
    # the request crosses the cable towards the switch, the ACK back: two delays, never less
    assert min(rtts) >= 2 * delay_ms / 1000
    assert statistics.median(rtts) <= 2 * delay_ms / 1000 + base + 0.03
    obs = healthy.prober.observe(a, b)  # the forwarder keeps 802.1Q tags, DSCP and ECN
    assert obs is not None and (obs.pcp, obs.dscp, obs.ecn) == (obs.sent_pcp, obs.sent_dscp, obs.sent_ecn)
    assert healthy.prober.measure_payload(a, b).largest == healthy.report.path(a, b).max_payload  # type: ignore[union-attr]
    chaos.revert(imp)
    imp = chaos.delay(a, delay_ms, jitter_ms, seed=3)
    rtts = _rtts(healthy, a, b, 40)
    assert min(rtts) >= 2 * (delay_ms - jitter_ms) / 1000
    assert statistics.pstdev(rtts) > jitter_ms / 1000 / 4
    chaos.revert(imp)
    assert statistics.median(_rtts(healthy, a, b)) < 0.01
    ns, ifname = chaos._port(healthy.fabric.model.host_nic(a).peer)  # type: ignore[arg-type]
    names = ns.run(["ip", "-br", "link"]).stdout.decode()
    assert "dl" not in names and "dj" not in names and f"{ifname}@" in names


def test_link_down_and_up(healthy: LiveFabric, chaos: Chaos) -> None:
    a, b, c = nic(0, 2), nic(1, 2), nic(2, 2)
    imp = chaos.link_down(b)
    ns, ifname = chaos._port(healthy.fabric.model.host_nic(b).peer)  # type: ignore[arg-type]
    state = json.loads(ns.run(["ip", "-j", "link", "show", ifname]).stdout)[0]
    assert "UP" not in state["flags"]
    res = healthy.prober.probe_pairs([(a, b), (a, c)], timeout=0.3)
    assert [r.ok for r in res] == [False, True]
    chaos.revert(imp)
    assert healthy.prober.probe(a, b).ok


def test_flapping_alternates_and_ends_up(healthy: LiveFabric, chaos: Chaos) -> None:
    a, b = nic(0, 3), nic(2, 3)
    # Each state lasts period / 2 = 300 ms: a probe (50 ms timeout) every ~70 ms samples each state several times
    # even when the machine is loaded (at 150 ms per state, CI at load 8-15 once sampled too few states to see 7
    # of the 10 changes).
    period, duration = 0.6, 3.0
    imp = chaos.flap(b, period, duration=duration)
    outcomes = []
    end = time.monotonic() + duration
    while time.monotonic() < end:
        outcomes.append(healthy.prober.probe(a, b, timeout=0.05, retries=0).ok)
        time.sleep(0.02)
    assert imp._thread is not None
    imp._thread.join(5)
    assert True in outcomes and False in outcomes
    changes = sum(1 for x, y in itertools.pairwise(outcomes) if x != y)
    assert changes >= 2 * int(duration / period) - 3, f"{changes} changes in {len(outcomes)} probes: {outcomes}"
    assert imp.params["transitions"] >= 2 * int(duration / period) - 1
    assert healthy.prober.probe(a, b).ok


def test_partition_and_heal(healthy: LiveFabric, chaos: Chaos) -> None:
    left, right = ["dgx-h100-0", "dgx-h100-1"], ["dgx-h100-2", "dgx-h100-3"]
    paths = healthy.report.paths
    pairs = [(p.a, p.b) for p in paths] + [(p.b, p.a) for p in paths]
    imp = chaos.partition(left, right)
    res = healthy.prober.probe_pairs(pairs, timeout=0.3)
    for r in res:
        across = (r.a.node in left) != (r.b.node in left)
        assert r.ok is not across, r
    assert chaos.counters(imp)["anonymous"] >= sum(1 for r in res if not r.ok)
    chaos.revert(imp)
    assert all(r.ok for r in healthy.prober.probe_pairs(pairs))


@pytest.mark.parametrize("direction", ["in", "out"])
@pytest.mark.parametrize("learned", [True, False], ids=["learned", "flooded"])
def test_random_loss_is_within_binomial_bounds(healthy: LiveFabric, chaos: Chaos, learned: bool,
                                               direction: Direction) -> None:
    """Each frame is dropped once or not at all, also when the switch floods it to every port because it has
    not learned (or has aged out) the destination's MAC address. ``in`` impairs the sender's port (frames into
    the switch), ``out`` the receiver's (frames out of the switch)."""
    a, b = nic(1, 5), nic(3, 5)
    n, rate = 2000, 0.25
    frames = _frames(healthy, a, b, 50) * (n // 50)
    baseline = _send_and_count(healthy, a, b, frames)
    assert sum(baseline.values()) == n  # no loss without the impairment
    imp = chaos.loss(a if direction == "in" else b, rate, direction=direction)
    if not learned:
        ns, _ = chaos._port(healthy.fabric.model.host_nic(a).peer)  # type: ignore[arg-type]
        ns.run(["bridge", "fdb", "flush", "dev", BRIDGE, "dynamic"])
    got = _send_and_count(healthy, a, b, frames)
    received = sum(got.values())
    counters = chaos.counters(imp)
    dropped = counters[f"dropped_{direction}"]
    assert counters[f"dropped_{'out' if direction == 'in' else 'in'}"] == 0
    assert received + dropped == n, (received, dropped)
    lo, hi = binomial_interval(n, rate)
    assert lo <= dropped <= hi, f"{dropped} of {n} dropped, expected {lo}..{hi} for rate {rate}"
    chaos.revert(imp)
    assert sum(_send_and_count(healthy, a, b, frames).values()) == n


@pytest.mark.parametrize("kind", ["tbf", "htb"])
def test_bandwidth_limit(healthy: LiveFabric, chaos: Chaos, kind: str) -> None:
    a, b = nic(0, 6), nic(1, 6)
    limit_mbit, size, count = 8.0, 1000, 1000
    frames = _frames(healthy, a, b, 10, size) * (count // 10)

    def rate_mbit() -> float:
        capture = healthy.fabric.socket(b, timestamps=True)
        try:
            capture.drain()
            sock = healthy.prober.sock(a)
            wanted = set(frames)
            gap = (len(frames[0]) * 8) / (2 * limit_mbit * 1e6)  # offer twice the limit
            t0 = time.monotonic()
            for i, f in enumerate(frames):
                sock.send(f)
                while time.monotonic() < t0 + (i + 1) * gap:
                    pass
            stamps = []
            while (r := capture.recv(0.3)) is not None:
                if r.frame in wanted:
                    stamps.append((r.at, len(r.frame)))
        finally:
            capture.close()
        assert len(stamps) > 10
        span = stamps[-1][0] - stamps[0][0]
        return sum(n for _, n in stamps[1:]) * 8 / span / 1e6

    imp = chaos.bandwidth(b, limit_mbit, direction="out", kind=kind)  # type: ignore[arg-type]
    shaped = rate_mbit()
    assert 0.8 * limit_mbit <= shaped <= 1.1 * limit_mbit, shaped
    chaos.revert(imp)
    assert rate_mbit() > 1.6 * limit_mbit  # the offered rate gets through again


def test_duplication_is_counted_and_byte_identical(healthy: LiveFabric, chaos: Chaos) -> None:
    a, b = nic(2, 7), nic(0, 7)
    n, rate = 2000, 0.2
    frames = _frames(healthy, a, b, 200) * (n // 200)
    imp = chaos.duplicate(a, rate)
    got = _send_and_count(healthy, a, b, frames)
    dups = chaos.counters(imp)["duplicated"]
    assert sum(got.values()) == n + dups  # every copy arrived and is byte for byte one of the frames sent
    lo, hi = binomial_interval(n, rate)
    assert lo <= dups <= hi
    chaos.revert(imp)
    assert sum(_send_and_count(healthy, a, b, frames).values()) == n
    names = chaos._port(healthy.fabric.model.host_nic(a).peer)[0].run(["ip", "-br", "link"]).stdout  # type: ignore[arg-type]
    assert b"dup" not in names


def test_corruption_flips_exactly_one_bit_in_the_counted_frames(healthy: LiveFabric, chaos: Chaos) -> None:
    a, b = nic(3, 4), nic(1, 4)
    n, rate = 2000, 0.2
    frames = _frames(healthy, a, b, n, size=64)
    imp = chaos.corrupt(a, rate)
    got = _send_and_count(healthy, a, b, frames)  # only frames received byte for byte as sent
    counters = chaos.counters(imp)
    chaos.revert(imp)
    clean = sum(got.values())
    assert counters["seen"] == n
    assert clean + counters["corrupted"] == n
    lo, hi = binomial_interval(n, rate)
    assert lo <= counters["corrupted"] <= hi
    assert sum(_send_and_count(healthy, a, b, frames).values()) == n  # reverted: all clean again


UDP_DPORT, UDP_CHECKSUM, BTH_RESV8A = (2, 2), (6, 2), (4, 1)
"""(offset, size) of the fields a one-bit flip can leave unseen by a RoCE v2 receiver, from the start of the UDP
header (RFC 768) and of the BTH (IBTA Vol. 1, 9.2). The ICRC (IBTA Annex A17, RoCE v2) is computed with the IPv4
TOS, TTL and header checksum, the UDP checksum and the BTH's resv8a replaced by ones, so flips there leave it
intact; TOS and TTL are still covered by the IPv4 header checksum (RFC 791), the UDP checksum and resv8a by
nothing. A flipped destination port (4791 identifies RoCE v2, IANA) makes the datagram another UDP one, which a
RoCE receiver never sees as a corrupt RoCE packet."""


def _unseen_offsets(frame: bytes) -> set[int]:
    """Offsets in ``frame`` (Ethernet, one 802.1Q tag or none, IPv4 without options, UDP, BTH) of
    :data:`UDP_DPORT`, :data:`UDP_CHECKSUM` and :data:`BTH_RESV8A`."""
    udp = (18 if frame[12:14] == b"\x81\x00" else 14) + 20
    bth = udp + 8
    return {base + off + i for base, (off, size) in ((udp, UDP_DPORT), (udp, UDP_CHECKSUM), (bth, BTH_RESV8A))
            for i in range(size)}


def _flipped_offset(damaged: bytes, sent: list[bytes]) -> int:
    """The offset of the one bit in which ``damaged`` differs from the frame it was sent as."""
    for f in sent:
        diffs = [i for i, (x, y) in enumerate(zip(damaged, f, strict=True)) if x != y]
        if len(diffs) == 1 and bin(damaged[diffs[0]] ^ f[diffs[0]]).count("1") == 1:
            return diffs[0]
    raise AssertionError(f"{damaged.hex()} is not one bit away from any frame sent")


def test_corrupted_frames_differ_by_one_bit(healthy: LiveFabric, chaos: Chaos) -> None:
    """Every frame is corrupted by exactly one bit flip, and every flip outside the fields a RoCE v2 receiver
    cannot check (:data:`UDP_DPORT`) is caught by the parser (ICRC or IPv4 header checksum).

    The flips land uniformly in the frame after its 802.1Q tag: the veth hands the classifier the frame with the
    tag already moved into the packet's metadata, so the program's "after the Ethernet header" starts at the IPv4
    header. The share of flips in the unseen fields is judged against that uniform draw with
    :func:`binomial_interval` (at most one false failure in a million runs); a fixed 90 % bound failed about one
    run in a hundred, since 40 of the 608 bits (6.6 %) are unseen."""
    from fakehw.fabric.wire import PacketError, RocePacket, parse_frame

    a, b = nic(3, 1), nic(2, 1)
    frames = _frames(healthy, a, b, 300, size=32)
    by_len: dict[int, list[bytes]] = {}
    for f in frames:
        by_len.setdefault(len(f), []).append(f)
    chaos.corrupt(a, 1.0)
    capture = healthy.fabric.socket(b)
    try:
        capture.drain()
        for f in frames:
            healthy.prober.sock(a).send(f)
        damaged = []
        while (r := capture.recv(0.3)) is not None:
            if r.frame[6:12] == frames[0][6:12] and r.frame not in frames:
                damaged.append(r.frame)
    finally:
        capture.close()
    assert len(damaged) == len(frames)
    unseen = 0
    for d in damaged:
        offset = _flipped_offset(d, by_len[len(d)])
        try:
            pkt = parse_frame(d)
            detected = isinstance(pkt, RocePacket) and not pkt.icrc_ok
        except PacketError:
            detected = True
        if offset in _unseen_offsets(d):
            unseen += 1
        else:
            assert detected, f"a flip at byte {offset} went unseen: {d.hex()}"
    first = 18 if frames[0][12:14] == b"\x81\x00" else 14
    bits = (len(frames[0]) - first) * 8
    lo, hi = binomial_interval(len(damaged), len(_unseen_offsets(frames[0])) * 8 / bits)
    assert lo <= unseen <= hi, f"{unseen} of {len(damaged)} flips in the unseen fields, expected {lo}-{hi}"


def test_binomial_interval_is_exact_enough() -> None:
    lo, hi = binomial_interval(2000, 0.25)
    assert lo < 500 < hi and lo > 400 and hi < 600
    assert binomial_interval(100, 0.0) == (0, 0)
    assert binomial_interval(100, 1.0) == (100, 100)
    with pytest.raises(ValueError):
        binomial_interval(10, 1.5)


def test_everything_is_reverted_on_teardown_after_a_failure(
    need_root: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    state = tmp_path_factory.mktemp("chaos-fail")
    model = load_fabric("dgx-h100-rail")
    with pytest.raises(RuntimeError, match="boom"), EmulatedFabric.build(model, state_dir=state) as fabric:
        start_responder(fabric, [nic(0, 0), nic(1, 0)])
        c = Chaos(fabric)
        c.loss(nic(0, 0), 0.5)
        c.bandwidth(nic(1, 0), 5, direction="in")  # tc on the NIC's own end
        c.duplicate(nic(1, 1), 0.1)
        c.partition(["dgx-h100-0"], ["dgx-h100-3"])
        c.flap(nic(2, 2), 0.2)
        c.link_down(nic(3, 3))
        c.corrupt(nic(2, 4), 0.5)
        c.delay(nic(0, 5), 5, 1)
        assert len(fabric.ledger.impairments) == 8
        ledger = fabric.ledger
        raise RuntimeError("boom")
    assert ledger.impairments == [] and ledger.processes == []
    assert not (state / "fabric.json").exists()
