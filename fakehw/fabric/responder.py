"""A small RoCE v2 responder: answers BTH requests on emulated NICs so a path can be probed end to end.

Run as its own process (``python -m fakehw.fabric.responder CONFIG.json``) so a crash or a hang is visible from
outside - the fuzzer depends on that. It parses every frame with the project's codec (:mod:`fakehw.fabric.wire`)
and behaves like the receive side of an RC queue pair, as far as a probe needs:

- SEND / RDMA WRITE with the ACK-request bit (and every READ and atomic) -> ACKNOWLEDGE with the request's PSN;
- RDMA READ request -> READ RESPONSE packets (first/middle/last or only), at most the NIC's RoCE MTU each, with a
  payload derived from the virtual address so the requester can check it; DMA lengths above 64 KiB get a NAK
  (invalid request) instead of megabytes of replies;
- a CE-marked request -> a CNP (opcode 0x81) to the sender, in the NIC's CNP DSCP and priority (DCQCN's
  notification point);
- bad ICRC, wrong P_Key, frames for another address -> dropped and counted, as a NIC does;
- PFC / PAUSE frames -> counted per priority; anything malformed -> counted by reason.

Replies use the probe convention that the ACK goes to the request's destination QP. An unexpected exception in
the handler is counted (``internal_errors``, with the first tracebacks) and the responder keeps serving: the
fuzzer reports it as a finding. SIGTERM writes the statistics and exits; SIGUSR1 writes them and carries on.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback
from collections import Counter, OrderedDict
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from fakehw.fabric.netns import Netns
from fakehw.fabric.rawio import PacketSocket
from fakehw.fabric.wire import (
    ACK_CREDITS_INVALID,
    NAK_INVALID_REQUEST,
    Aeth,
    AtomicAckEth,
    Bth,
    IPv4,
    Opcode,
    PacketError,
    PauseFrame,
    PfcFrame,
    RocePacket,
    VlanTag,
    build_cnp,
    build_roce,
    is_request,
    mac_bytes,
    parse_frame,
    roce_mtu,
)
from fakehw.render.atomic import atomic_write, dump_json

MAX_READ = 64 * 1024
MAX_QPS = 4096
MARKER = "fakehw.fabric.responder"


@dataclass(frozen=True)
class Endpoint:
    """One NIC the responder answers for."""

    name: str
    ns_path: str
    ifname: str
    mac: str
    ip: str
    vlan: int | None
    pcp: int
    dscp: int
    cnp_dscp: int
    cnp_priority: int
    mtu: int

    @property
    def roce_mtu(self) -> int:
        return roce_mtu(self.mtu)


def read_payload(va: int, length: int) -> bytes:
    """What an RDMA READ of ``length`` bytes at ``va`` returns from the responder's (pretend) memory."""
    return bytes((va + i) & 0xFF for i in range(length))


class Responder:
    def __init__(self, endpoints: list[Endpoint], stats_path: Path | None) -> None:
        self.endpoints = endpoints
        self.stats_path = stats_path
        self.sockets: list[tuple[PacketSocket, Endpoint]] = []
        self.stats: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter()
        self.pfc: Counter[str] = Counter()
        self.errors: list[str] = []
        self.msn: OrderedDict[tuple[str, int], int] = OrderedDict()
        self.running = True
        self.started = time.time()

    def open(self) -> None:
        for ep in self.endpoints:
            self.sockets.append((PacketSocket(Netns.borrowed(ep.ns_path), ep.ifname), ep))

    # ---- replies

    def _vlan(self, ep: Endpoint, pcp: int) -> VlanTag | None:
        return VlanTag(pcp, 0, ep.vlan, 0x0800) if ep.vlan is not None else None

    def _next_msn(self, ep: Endpoint, qp: int) -> int:
        key = (ep.name, qp)
        msn = (self.msn.pop(key, 0) + 1) & 0xFFFFFF
        self.msn[key] = msn
        while len(self.msn) > MAX_QPS:
            self.msn.popitem(last=False)
        return msn

    def _reply(self, ep: Endpoint, req: RocePacket, opcode: int, psn: int, extensions: tuple[Any, ...],
               payload: bytes = b"") -> bytes:
        assert isinstance(req.ip, IPv4)
        return build_roce(src_mac=mac_bytes(ep.mac), dst_mac=req.eth.src, src_ip=IPv4Address(ep.ip),
                          dst_ip=req.ip.src, bth=Bth(opcode, req.bth.dqpn, psn & 0xFFFFFF), extensions=extensions,
                          payload=payload, vlan=self._vlan(ep, ep.pcp), dscp=ep.dscp, ecn=0b10,
                          sport=req.udp.sport)

    def answer(self, ep: Endpoint, pkt: RocePacket) -> list[bytes]:
        """The frames to send back for one request (empty when none are due)."""
        op = pkt.bth.opcode
        out: list[bytes] = []
        if pkt.ip.ecn == 0b11:
            self.stats["ce_marked"] += 1
            assert isinstance(pkt.ip, IPv4)
            out.append(build_cnp(src_mac=mac_bytes(ep.mac), dst_mac=pkt.eth.src, src_ip=IPv4Address(ep.ip),
                                 dst_ip=pkt.ip.src, dqpn=pkt.bth.dqpn, vlan=self._vlan(ep, ep.cnp_priority),
                                 dscp=ep.cnp_dscp))
            self.stats["cnp_sent"] += 1
        transport, low = op & 0xE0, op & 0x1F
        if transport == 0x60:
            self.stats["ud_received"] += 1
            return out
        if low == Opcode.RDMA_READ_REQUEST and transport == 0x00:
            reth = pkt.reth
            assert reth is not None
            if reth.dma_length > MAX_READ:
                self.stats["nak_sent"] += 1
                out.append(self._reply(ep, pkt, Opcode.ACKNOWLEDGE, pkt.bth.psn,
                                       (Aeth(NAK_INVALID_REQUEST, self._next_msn(ep, pkt.bth.dqpn)),)))
                return out
            data = read_payload(reth.va, reth.dma_length)
            chunk = max(ep.roce_mtu, 256)
            pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] or [b""]
            msn = self._next_msn(ep, pkt.bth.dqpn)
            for i, piece in enumerate(pieces):
                ext: tuple[Aeth, ...]
                if len(pieces) == 1:
                    code, ext = Opcode.RDMA_READ_RESPONSE_ONLY, (Aeth(ACK_CREDITS_INVALID, msn),)
                elif i == 0:
                    code, ext = Opcode.RDMA_READ_RESPONSE_FIRST, (Aeth(ACK_CREDITS_INVALID, msn),)
                elif i == len(pieces) - 1:
                    code, ext = Opcode.RDMA_READ_RESPONSE_LAST, (Aeth(ACK_CREDITS_INVALID, msn),)
                else:
                    code, ext = Opcode.RDMA_READ_RESPONSE_MIDDLE, ()
                out.append(self._reply(ep, pkt, code, pkt.bth.psn + i, ext, piece))
            self.stats["read_responses"] += len(pieces)
            return out
        if low in (Opcode.COMPARE_SWAP, Opcode.FETCH_ADD) and transport == 0x00:
            out.append(self._reply(ep, pkt, Opcode.ATOMIC_ACKNOWLEDGE, pkt.bth.psn,
                                   (Aeth(ACK_CREDITS_INVALID, self._next_msn(ep, pkt.bth.dqpn)), AtomicAckEth(0))))
            self.stats["atomic_acks"] += 1
            return out
        if pkt.bth.ackreq and transport == 0x00:
            out.append(self._reply(ep, pkt, Opcode.ACKNOWLEDGE, pkt.bth.psn,
                                   (Aeth(ACK_CREDITS_INVALID, self._next_msn(ep, pkt.bth.dqpn)),)))
            self.stats["acks_sent"] += 1
        return out

    def handle(self, ep: Endpoint, frame: bytes) -> list[bytes]:
        self.stats["frames"] += 1
        try:
            pkt = parse_frame(frame)
        except PacketError as exc:
            self.malformed[exc.key] += 1
            self.stats["malformed"] += 1
            return []
        if isinstance(pkt, PfcFrame):
            self.stats["pfc"] += 1
            for prio, quanta in pkt.paused().items():
                self.pfc[f"priority{prio}"] += 1
                self.pfc[f"quanta{prio}"] += quanta
            return []
        if isinstance(pkt, PauseFrame):
            self.stats["pause"] += 1
            return []
        if not isinstance(pkt, RocePacket):
            self.stats["other"] += 1
            return []
        if pkt.eth.dst != mac_bytes(ep.mac) or not isinstance(pkt.ip, IPv4) or str(pkt.ip.dst) != ep.ip:
            self.stats["not_for_us"] += 1
            return []
        if not pkt.icrc_ok:
            self.stats["bad_icrc"] += 1
            return []
        if pkt.bth.pkey & 0x7FFF != 0x7FFF:
            self.stats["bad_pkey"] += 1
            return []
        if pkt.bth.opcode == Opcode.CNP:
            self.stats["cnp_received"] += 1
            return []
        if not is_request(pkt.bth.opcode):
            self.stats["responses_received"] += 1
            return []
        self.stats["requests"] += 1
        return self.answer(ep, pkt)

    # ---- loop

    def snapshot(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "uptime": time.time() - self.started, "stats": dict(self.stats),
                "malformed": dict(self.malformed), "pfc": dict(self.pfc), "internal_errors": len(self.errors),
                "errors": self.errors[:5]}

    def write_stats(self) -> None:
        if self.stats_path is None:
            return
        atomic_write(self.stats_path, dump_json(self.snapshot()))

    def serve(self) -> None:
        by_fd = {s.fileno(): (s, ep) for s, ep in self.sockets}
        while self.running:
            try:
                ready, _, _ = select.select(list(by_fd), [], [], 0.5)
            except InterruptedError:
                continue
            for fd in ready:
                sock, ep = by_fd[fd]
                for _ in range(256):
                    got = sock._read()
                    if got is None:
                        break
                    try:
                        replies = self.handle(ep, got.frame)
                        for frame in replies:
                            sock.send(frame)
                    except Exception:
                        self.stats["internal_errors"] += 1
                        if len(self.errors) < 20:
                            self.errors.append(f"frame {got.frame.hex()}:\n{traceback.format_exc()}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {MARKER} CONFIG.json", file=sys.stderr)
        return 2
    try:
        config = json.loads(Path(args[0]).read_text())
        endpoints = [Endpoint(**e) for e in config["endpoints"]]
        stats_path = Path(config["stats"]) if config.get("stats") else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"responder: bad config {args[0]}: {exc}", file=sys.stderr)
        return 2
    responder = Responder(endpoints, stats_path)
    try:
        responder.open()
    except OSError as exc:
        print(f"responder: cannot open sockets: {exc}", file=sys.stderr)
        return 1

    def stop(_sig: int, _frame: object) -> None:
        responder.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGUSR1, lambda _s, _f: responder.write_stats())
    responder.write_stats()
    print("ready", flush=True)
    responder.serve()
    responder.write_stats()
    return 0


if __name__ == "__main__":
    sys.exit(main())
