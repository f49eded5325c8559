"""Fuzzing the RoCE/PFC handling: scapy ``fuzz()`` of BTH, RETH, AETH and PFC, at the codec and the responder.

Packet ``i`` of a run is a pure function of ``(seed, i)``: the generator seeds Python's ``random`` (which scapy's
random fields draw from) with both before building it, and restores the caller's random state afterwards. So a
finding replays alone, byte for byte, from the seed and its index, and a whole run replays to the same digest
(:func:`replay`). The scapy version is recorded because its ``fuzz()`` decides which fields vary.

Five kinds of packets, in turn: fuzzed BTH (+ random payload), BTH with a RETH opcode + fuzzed RETH, BTH with an
AETH opcode + fuzzed AETH, fuzzed PFC (MAC control), and bit-flipped/truncated copies of a valid request. The
RoCE kinds get valid Ethernet/802.1Q/IPv4/UDP headers (so the kernel delivers them) and, for three in four, a
correct ICRC (so the responder gets past its integrity check and exercises its logic).

Targets:

- ``parser``: :func:`fakehw.fabric.wire.parse_frame` and the responder's request logic, in process. Anything but
  a result or :class:`~fakehw.fabric.wire.PacketError` is a crash; a reply the codec itself cannot parse, or with
  a wrong ICRC, is a finding too; so is a packet that takes more than ``slow`` seconds of CPU.
- ``responder``: the responder process on the emulated fabric, over real veths (PFC from the link partner).
  Every ``check_every`` packets a normal probe must still be answered and the process must be alive; its
  internal errors (handler exceptions it survived) are findings.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import random
import struct
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.packet import Packet, fuzz

from fakehw.fabric.layers import AETH, BTH, RETH
from fakehw.fabric.responder import Endpoint, Responder
from fakehw.fabric.wire import (
    ETH_P_IP,
    ETH_P_MAC_CONTROL,
    PFC_DST,
    ROCE_V2_PORT,
    Bth,
    Ethernet,
    IPv4,
    Opcode,
    PacketError,
    RocePacket,
    Udp,
    VlanTag,
    build_roce,
    icrc,
    ipv4_checksum,
    mac_bytes,
    parse_frame,
)

GENERATOR_VERSION = 1
KINDS = ("bth", "reth", "aeth", "pfc", "mutant")


@dataclass(frozen=True)
class Station:
    """Addresses of one end (MAC, IPv4) and how it tags frames."""

    mac: str
    ip: str
    vlan: int | None = None
    pcp: int = 0


DEFAULT_SRC = Station("02:00:00:00:00:01", "10.0.100.1", 100, 3)
DEFAULT_DST = Station("02:00:00:00:00:02", "10.0.100.2", 100, 3)


@dataclass(frozen=True)
class FuzzPacket:
    index: int
    kind: str
    frame: bytes


class Generator:
    """Deterministic fuzzed frames from ``src`` to ``dst`` (PFC frames come from ``partner_mac``)."""

    def __init__(self, seed: int, src: Station = DEFAULT_SRC, dst: Station = DEFAULT_DST,
                 partner_mac: str = "02:fa:00:00:00:01") -> None:
        self.seed = seed
        self.src, self.dst = src, dst
        self.partner_mac = partner_mac
        # "bth" fuzzes every BTH field; the RETH/AETH kinds keep the P_Key valid and the pad count zero so most
        # of them get past the integrity checks into the responder's request logic; PFC keeps its opcode.
        self._templates: dict[str, Packet] = {
            "bth": fuzz(BTH(icrc=0)),
            "reth": fuzz(BTH(pkey=0xFFFF, padcount=0, icrc=0)) / fuzz(RETH()),
            "aeth": fuzz(BTH(pkey=0xFFFF, padcount=0, icrc=0)) / fuzz(AETH()),
            "pfc": fuzz(MACControlClassBasedFlowControl(_op_code=0x0101, _reserved=0)),
        }
        self._reth_ops = (Opcode.RDMA_WRITE_FIRST, Opcode.RDMA_WRITE_ONLY, Opcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                          Opcode.RDMA_READ_REQUEST)
        self._aeth_ops = (Opcode.ACKNOWLEDGE, Opcode.RDMA_READ_RESPONSE_FIRST, Opcode.RDMA_READ_RESPONSE_LAST,
                          Opcode.RDMA_READ_RESPONSE_ONLY, Opcode.ATOMIC_ACKNOWLEDGE)

    def _rng_seed(self, index: int) -> int:
        digest = hashlib.sha256(f"fakehw-fuzz/{GENERATOR_VERSION}/{self.seed}/{index}".encode()).digest()
        return int.from_bytes(digest[:8], "big")

    def packet(self, index: int) -> FuzzPacket:
        """Packet ``index`` of this seed; the same bytes every time, whatever ran before."""
        saved = random.getstate()
        try:
            random.seed(self._rng_seed(index))
            kind = KINDS[index % len(KINDS)]
            return FuzzPacket(index, kind, self._build(kind))
        finally:
            random.setstate(saved)

    def packets(self, count: int) -> Iterator[FuzzPacket]:
        return (self.packet(i) for i in range(count))

    def _l2(self, src_mac: str, dst_mac: bytes, ethertype: int, station: Station) -> bytes:
        if station.vlan is None:
            return Ethernet(dst_mac, mac_bytes(src_mac), ethertype).pack()
        return Ethernet(dst_mac, mac_bytes(src_mac), 0x8100).pack() + VlanTag(station.pcp, 0, station.vlan,
                                                                             ethertype).pack()

    def _roce(self, l4: bytes, good_icrc: bool) -> bytes:
        """Valid Ethernet/IPv4/UDP around fuzzed transport bytes, then a correct or a random ICRC."""
        udp_len = Udp.SIZE + len(l4) + 4
        header = IPv4((26 << 2) | 0b10, 20 + udp_len, random.randrange(65536), 0b010, 0, 64, 17, 0,
                      IPv4Address(self.src.ip), IPv4Address(self.dst.ip)).pack()
        header = header[:10] + struct.pack("!H", ipv4_checksum(header)) + header[12:]
        packet = header + Udp(random.randrange(0xC000, 0x10000), ROCE_V2_PORT, udp_len, 0).pack() + l4
        crc = icrc(packet, False) if good_icrc else random.getrandbits(32)
        return self._l2(self.src.mac, mac_bytes(self.dst.mac), ETH_P_IP, self.src) + packet + crc.to_bytes(4, "little")

    def _build(self, kind: str) -> bytes:
        good = random.random() < 0.75
        if kind == "pfc":
            body = bytes(self._templates["pfc"])
            frame = self._l2(self.partner_mac, PFC_DST, ETH_P_MAC_CONTROL, Station("", "", None)) + body
            return frame + b"\x00" * max(0, 60 - len(frame))
        if kind == "mutant":
            mutant = bytearray(build_roce(
                src_mac=mac_bytes(self.src.mac), dst_mac=mac_bytes(self.dst.mac), src_ip=IPv4Address(self.src.ip),
                dst_ip=IPv4Address(self.dst.ip), bth=Bth(random.choice(list(Opcode)), random.getrandbits(24),
                                                        random.getrandbits(24), ackreq=1),
                payload=random.randbytes(random.randrange(0, 64)),
                vlan=VlanTag(self.src.pcp, 0, self.src.vlan, ETH_P_IP) if self.src.vlan is not None else None))
            for _ in range(random.randrange(1, 6)):
                pos = random.randrange(14, len(mutant))
                mutant[pos] ^= 1 << random.randrange(8)
            if random.random() < 0.3:
                del mutant[random.randrange(14, len(mutant)):]
            return bytes(mutant)
        raw = bytes(self._templates[kind])[:-4]  # scapy's BTH puts its ICRC field last; ours replaces it
        if kind == "reth":
            raw = bytes([random.choice(self._reth_ops)]) + raw[1:]
        elif kind == "aeth":
            raw = bytes([random.choice(self._aeth_ops)]) + raw[1:]
        if kind == "bth":
            size = random.choice((0, 0, 4, 16, 64, random.randrange(0, 256)))
        else:
            size = random.choice((0, 4, 16, 64, 256, 4 * random.randrange(0, 64), random.randrange(0, 256)))
        return self._roce(raw + random.randbytes(size), good)


# --------------------------------------------------------------------------------------------------- report


@dataclass
class Finding:
    index: int
    kind: str
    what: str
    detail: str
    frame: str

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "packetKind": self.kind, "finding": self.what, "detail": self.detail,
                "frame": self.frame}


@dataclass
class FuzzReport:
    seed: int
    count: int
    target: str
    digest: str = ""
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    responder: dict[str, Any] = field(default_factory=dict)
    liveness_checks: int = 0
    addresses: dict[str, Any] = field(default_factory=dict)
    """src, dst (Station fields) and partner MAC: what replay needs besides seed and count."""
    kernel_drops: int = 0
    """Frames the kernel dropped on this machine during the run, before any socket saw them (the per-CPU input
    backlog overflowed: /proc/net/softnet_stat's second column). A sender's successful send only says the frame
    left its socket; a veth hands it to the peer's backlog, which holds netdev_max_backlog frames and drops the
    rest when the softirq that drains it is starved (a loaded machine). Counts are machine-wide, so this is an
    upper bound on the run's own losses."""

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed, "count": self.count, "target": self.target, "digest": self.digest,
            "generator": {"version": GENERATOR_VERSION, "scapy": _scapy_version()},
            "seconds": round(self.seconds, 3), "packetsPerSecond": round(self.rate, 1),
            "outcomes": dict(self.outcomes.most_common()), "livenessChecks": self.liveness_checks,
            "addresses": self.addresses, "responder": self.responder, "kernelDrops": self.kernel_drops,
            "findings": [f.to_json() for f in self.findings],
            "replay": f"fakehw fabric fuzz --replay REPORT (seed {self.seed}, {self.count} packets)",
        }

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")


def _scapy_version() -> str:
    try:
        return importlib.metadata.version("scapy")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def digest_of(frames: Iterator[bytes]) -> str:
    """sha256 over the frames with their lengths (so frame boundaries count)."""
    h = hashlib.sha256()
    for f in frames:
        h.update(len(f).to_bytes(4, "big"))
        h.update(f)
    return h.hexdigest()


# --------------------------------------------------------------------------------------------------- targets


def _endpoint_for(station: Station, mtu: int = 9000) -> Endpoint:
    return Endpoint("fuzz-target", "/proc/self/ns/net", "fuzz0", station.mac, station.ip, station.vlan, station.pcp,
                    26, 48, 6, mtu)


def fuzz_parser(seed: int, count: int, *, src: Station = DEFAULT_SRC, dst: Station = DEFAULT_DST,
                slow: float = 0.5) -> FuzzReport:
    """Feed ``count`` packets to the codec and to the responder's logic, in process."""
    gen = Generator(seed, src, dst)
    report = FuzzReport(seed, count, "parser")
    report.addresses = _addresses(gen)
    responder = Responder([], None)
    ep = _endpoint_for(dst)
    h = hashlib.sha256()
    start = time.monotonic()
    for pkt in gen.packets(count):
        h.update(len(pkt.frame).to_bytes(4, "big"))
        h.update(pkt.frame)
        t0 = time.thread_time()  # CPU time: a loaded machine's scheduling delays are not the parser's cost
        try:
            parsed = parse_frame(pkt.frame)
            report.outcomes[f"{pkt.kind}: {type(parsed).__name__}"
                            f"{'' if not isinstance(parsed, RocePacket) or parsed.icrc_ok else ' (bad ICRC)'}"] += 1
        except PacketError as exc:
            report.outcomes[f"{pkt.kind}: PacketError: {exc.key}"] += 1
        except Exception as exc:  # the codec promises PacketError only
            report.findings.append(Finding(pkt.index, pkt.kind, "crash", f"parse_frame raised {exc!r}",
                                           pkt.frame.hex()))
        try:
            for reply in responder.handle(ep, pkt.frame):
                parsed_reply = parse_frame(reply)
                if not isinstance(parsed_reply, RocePacket) or not parsed_reply.icrc_ok:
                    report.findings.append(Finding(pkt.index, pkt.kind, "bad-reply",
                                                   f"the responder's reply does not parse as valid RoCE: "
                                                   f"{reply.hex()}", pkt.frame.hex()))
        except Exception as exc:
            report.findings.append(Finding(pkt.index, pkt.kind, "crash", f"responder logic raised {exc!r}",
                                           pkt.frame.hex()))
        if (spent := time.thread_time() - t0) > slow:
            report.findings.append(Finding(pkt.index, pkt.kind, "slow", f"took {spent:.3f} s of CPU",
                                           pkt.frame.hex()))
    report.seconds = time.monotonic() - start
    report.digest = h.hexdigest()
    report.responder = {"stats": dict(responder.stats), "malformed": dict(responder.malformed)}
    return report


def fuzz_responder(fabric: Any, a: Any, b: Any, seed: int, count: int, *, check_every: int = 1000,
                   liveness_timeout: float = 3.0) -> FuzzReport:
    """Send ``count`` fuzzed packets from NIC ``a`` (PFC from b's link partner) at a fresh responder on ``b``."""
    from fakehw.fabric.model import PortRef
    from fakehw.fabric.traffic import Prober, start_responder

    plan_a, plan_b = fabric.plan.nics[a], fabric.plan.nics[b]
    host_a, host_b = fabric.model.host_nic(a), fabric.model.host_nic(b)
    port = host_b.peer
    src = Station(plan_a.mac, str(plan_a.ip), plan_a.vlan, host_a.roce.priority)
    dst = Station(plan_b.mac, str(plan_b.ip), plan_b.vlan, host_b.roce.priority)
    partner = fabric.plan.ports[PortRef(port.switch, port.port)]
    gen = Generator(seed, src, dst, partner_mac=_partner_mac(fabric, partner.ns, partner.ifname))
    report = FuzzReport(seed, count, "responder")
    report.addresses = _addresses(gen)
    responder = start_responder(fabric, [a, b])
    prober = Prober(fabric, qp=0x2F00)
    sock_a = prober.sock(a)
    sock_partner = fabric.socket(PortRef(port.switch, port.port))
    sent_by_hex: dict[str, int] = {}
    h = hashlib.sha256()
    drops_before = backlog_drops()
    start = time.monotonic()
    try:
        for pkt in gen.packets(count):
            h.update(len(pkt.frame).to_bytes(4, "big"))
            h.update(pkt.frame)
            if len(sent_by_hex) < 200_000:
                sent_by_hex.setdefault(pkt.frame.hex(), pkt.index)
            ok = (sock_partner if pkt.kind == "pfc" else sock_a).send(pkt.frame)
            report.outcomes[f"{pkt.kind}: {'sent' if ok else 'dropped by the kernel'}"] += 1
            if (pkt.index + 1) % check_every == 0 or pkt.index + 1 == count:
                report.liveness_checks += 1
                if not responder.alive():
                    report.findings.append(Finding(pkt.index, pkt.kind, "dead",
                                                   f"responder exited with {responder.proc.returncode}: "
                                                   f"{responder.log_path.read_text(errors='replace')[-500:]}",
                                                   pkt.frame.hex()))
                    break
                if not prober.probe(a, b, timeout=liveness_timeout, retries=2).ok:
                    report.findings.append(Finding(pkt.index, pkt.kind, "hang",
                                                   f"no ACK to a valid probe within {liveness_timeout} s after "
                                                   f"packet {pkt.index}", pkt.frame.hex()))
        report.seconds = time.monotonic() - start
        report.digest = h.hexdigest()
        stats = responder.stats() if responder.alive() else {}
        report.kernel_drops = backlog_drops() - drops_before
        report.responder = stats
        for err in stats.get("errors", []):
            frame_hex = err.split(":", 1)[0].removeprefix("frame ").strip()
            index = sent_by_hex.get(frame_hex, -1)
            report.findings.append(Finding(index, "?", "internal-error", err[-800:], frame_hex))
        if stats.get("internal_errors", 0) > len(stats.get("errors", [])):
            report.findings.append(Finding(-1, "?", "internal-error",
                                           f"{stats['internal_errors']} handler exceptions in all", ""))
    finally:
        responder.stop()
        prober.close()
        sock_partner.close()
    return report


def backlog_drops(softnet_stat: Path = Path("/proc/net/softnet_stat")) -> int:
    """Frames dropped so far because a CPU's input backlog was full, summed over CPUs (0 when unreadable)."""
    try:
        rows = softnet_stat.read_text().split("\n")
        return sum(int(row.split()[1], 16) for row in rows if row.strip())
    except (OSError, ValueError, IndexError):
        return 0


def _addresses(gen: Generator) -> dict[str, Any]:
    return {"src": asdict(gen.src), "dst": asdict(gen.dst), "partner": gen.partner_mac}


def _partner_mac(fabric: Any, ns_key: str, ifname: str) -> str:
    link = next(lk for lk in fabric.plan.links if lk.a.ns == ns_key and lk.a.ifname == ifname)
    return str(link.a.mac)


def replay(report_path: str | Path, src: Station | None = None, dst: Station | None = None,
           partner_mac: str | None = None) -> tuple[bool, str]:
    """Regenerate a recorded run and compare: (same bytes?, explanation). Findings are checked one by one."""
    try:
        data = json.loads(Path(report_path).read_text())
        seed, count = int(data["seed"]), int(data["count"])
        recorded = str(data["digest"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{report_path} is not a fuzz report: {exc}") from None
    addresses = data.get("addresses") or {}
    try:
        src = src or (Station(**addresses["src"]) if "src" in addresses else DEFAULT_SRC)
        dst = dst or (Station(**addresses["dst"]) if "dst" in addresses else DEFAULT_DST)
    except TypeError as exc:
        raise ValueError(f"{report_path}: bad addresses: {exc}") from None
    partner = partner_mac or str(addresses.get("partner", "02:fa:00:00:00:01"))
    gen = Generator(seed, src, dst, partner)
    digest = digest_of(p.frame for p in gen.packets(count))
    if digest != recorded:
        version = data.get("generator", {}).get("scapy")
        note = f" (recorded with scapy {version}, this is {_scapy_version()})" if version != _scapy_version() else ""
        return False, f"digest {digest} differs from the recorded {recorded}{note}"
    for f in data.get("findings", []):
        if f.get("index", -1) >= 0 and f.get("frame") and gen.packet(int(f["index"])).frame.hex() != f["frame"]:
            return False, f"finding at packet {f['index']} does not regenerate its frame"
    return True, f"{count} packets of seed {seed} regenerate byte for byte (sha256 {digest})"
