"""Traffic on the emulated fabric: the responder process, and probes built with scapy and sent on real veths.

A probe is a RoCE v2 request (scapy-built: Ether / 802.1Q / IPv4 / UDP 4791 / BTH [/ RETH] / payload / ICRC)
sent from one NIC's namespace; the responder in the other NIC's namespace answers with an ACK, and the probe
counts it only when the ACK comes back with the request's PSN. Measurements built on that:

- :meth:`Prober.probe_pairs`: reachability, many pairs in flight at once;
- :meth:`Prober.largest_payload`: the largest SEND payload that crosses one direction, by ladders of probes
  (16 sizes per round) and a confirmation of the boundary, because the kernel drops oversized frames silently;
- :meth:`Prober.observe`: a request captured at the receiver, to compare its PCP, DSCP and ECN with what was sent;
- :meth:`Prober.cnp`: a CE-marked request and the CNP it earns;
- :meth:`Prober.pfc`: a PFC frame sent by a NIC, seen by its link partner and by nobody further.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fakehw.fabric.analysis import max_send_payload
from fakehw.fabric.emulate import EmulatedFabric
from fakehw.fabric.layers import pfc_frame, roce_bytes
from fakehw.fabric.lint import LintReport
from fakehw.fabric.model import NicRef, PortRef
from fakehw.fabric.rawio import PacketSocket
from fakehw.fabric.responder import MARKER, Endpoint
from fakehw.fabric.wire import Opcode, PacketError, PfcFrame, RocePacket, mac_bytes, parse_frame
from fakehw.polling import wait_until

DEFAULT_TIMEOUT = 0.5


class TrafficError(RuntimeError):
    """The traffic machinery itself failed (no responder, a NIC without address...)."""


# --------------------------------------------------------------------------------------------------- responder


def endpoint(fabric: EmulatedFabric, ref: NicRef) -> Endpoint:
    nic = fabric.plan.nics[ref]
    host = fabric.model.host_nic(ref)
    if nic.ip is None:
        raise TrafficError(f"{ref} has no VLAN segment and so no address (is it cabled?)")
    ns = fabric.plan.namespaces[nic.ns]
    return Endpoint(str(ref), ns.path, nic.ifname, nic.mac, str(nic.ip), nic.vlan, host.roce.priority,
                    host.roce.dscp, host.roce.cnp_dscp, host.roce.cnp_priority, nic.mtu)


class ResponderProcess:
    """A running responder (a separate process) and its statistics file."""

    def __init__(self, fabric: EmulatedFabric, nics: Sequence[NicRef], workdir: Path) -> None:
        self.fabric = fabric
        self.nics = list(nics)
        self.config = workdir / f"responder-{fabric.plan.run_id}-{os.getpid()}-{id(self):x}.json"
        self.stats_path = self.config.with_suffix(".stats.json")
        self.log_path = self.config.with_suffix(".log")
        self.config.write_text(json.dumps({
            "endpoints": [asdict(endpoint(fabric, r)) for r in self.nics], "stats": str(self.stats_path)}))
        self.marker = f"{MARKER} {self.config}"
        log = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child, closed below
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", MARKER, str(self.config)], stdout=subprocess.PIPE,
                                         stderr=log, start_new_session=True)
        finally:
            log.close()
        fabric.record_process(self.proc.pid, "responder", self.marker)
        fabric.on_teardown(f"responder {self.proc.pid}", self.stop)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 15)
        line = self.proc.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.stop()
            raise TrafficError(f"responder did not start: {self.log_path.read_text(errors='replace')[-2000:]}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stats(self, timeout: float = 5.0) -> dict[str, Any]:
        """Fresh statistics (SIGUSR1 makes the responder write them)."""
        before = self.stats_path.stat().st_mtime_ns if self.stats_path.exists() else 0
        if self.alive():
            os.kill(self.proc.pid, signal.SIGUSR1)
            wait_until(lambda: self.stats_path.exists() and self.stats_path.stat().st_mtime_ns != before,
                       timeout, interval=0.01)
        data: dict[str, Any] = json.loads(self.stats_path.read_text())
        return data

    def stop(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self.fabric.forget_process(self.proc.pid)
        try:
            data: dict[str, Any] = json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            data = {}
        for p in (self.config, self.stats_path):
            p.unlink(missing_ok=True)
        return data


def start_responder(fabric: EmulatedFabric, nics: Iterable[NicRef] | None = None,
                    workdir: Path | None = None) -> ResponderProcess:
    """Start one responder process answering on ``nics`` (default: every cabled NIC of the fabric)."""
    refs = list(nics) if nics is not None else [r for r, n in fabric.plan.nics.items() if n.ip is not None]
    d = workdir or Path(fabric.ledger.state_dir or tempfile.gettempdir())
    d.mkdir(parents=True, exist_ok=True)
    return ResponderProcess(fabric, refs, d)


# --------------------------------------------------------------------------------------------------- probes


@dataclass(frozen=True)
class ProbeResult:
    a: NicRef
    b: NicRef
    ok: bool
    rtt: float | None


@dataclass(frozen=True)
class PayloadMeasurement:
    a: NicRef
    b: NicRef
    a_to_b: int | None
    b_to_a: int | None
    probes: int

    @property
    def largest(self) -> int | None:
        """The connection's figure: both directions must carry it (an RC queue pair sends both ways)."""
        if self.a_to_b is None or self.b_to_a is None:
            return None
        return min(self.a_to_b, self.b_to_a)


@dataclass(frozen=True)
class Observation:
    """A frame as the receiver saw it, next to what was sent."""

    sent_pcp: int | None
    sent_dscp: int
    sent_ecn: int
    pcp: int | None
    vid: int | None
    dscp: int
    ecn: int
    icrc_ok: bool


@dataclass(frozen=True)
class CnpResult:
    received: bool
    dscp: int | None
    pcp: int | None
    ecn: int | None
    becn: int | None
    dqpn: int | None


@dataclass(frozen=True)
class PfcResult:
    at_partner: dict[int, int] | None
    """Priority -> quanta as the switch port received them (None: nothing arrived)."""
    leaked_to: list[str]
    """NICs beyond the link that saw the frame (must stay empty)."""


class Prober:
    """Sends scapy-built requests from NICs of an emulated fabric and matches the responder's ACKs."""

    def __init__(self, fabric: EmulatedFabric, qp: int = 0x1F00) -> None:
        self.fabric = fabric
        self.qp = qp
        self._socks: dict[NicRef, PacketSocket] = {}
        self._psn = itertools.count(1)
        self.sent = 0

    def sock(self, ref: NicRef) -> PacketSocket:
        if ref not in self._socks:
            self._socks[ref] = self.fabric.socket(ref)
        return self._socks[ref]

    def close(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()

    def _next_psn(self) -> int:
        return next(self._psn) & 0xFFFFFF

    def request(self, a: NicRef, b: NicRef, payload: bytes = b"", *, opcode: int = Opcode.SEND_ONLY,
                ecn: int = 0b10, ackreq: bool = True, psn: int | None = None,
                reth: dict[str, int] | None = None) -> tuple[int, bytes]:
        """A scapy-built request from ``a`` to ``b`` with a's RoCE class; returns (psn, frame bytes)."""
        na, nb = self.fabric.plan.nics[a], self.fabric.plan.nics[b]
        host = self.fabric.model.host_nic(a)
        if na.ip is None or nb.ip is None:
            raise TrafficError(f"{a} or {b} has no address")
        psn = self._next_psn() if psn is None else psn
        frame = roce_bytes(src_mac=na.mac, dst_mac=nb.mac, src_ip=na.ip, dst_ip=nb.ip, opcode=opcode,
                           dqpn=self.qp, psn=psn, payload=payload, vlan=na.vlan, pcp=host.roce.priority,
                           dscp=host.roce.dscp, ecn=ecn, ackreq=ackreq, reth=reth)
        return psn, frame

    def _collect(self, pending: dict[tuple[NicRef, int], tuple[NicRef, float]], timeout: float,
                 sentinel: tuple[NicRef, int] | None = None) -> dict[tuple[NicRef, int], float]:
        """Wait for ACKs of ``pending`` ((sender, psn) -> (receiver, sent at)); returns RTT per answered key.

        ``sentinel`` is a small request sent after all the others on the same path: frames on one path arrive
        in order, so once its ACK is in, whatever is still missing was dropped, not delayed. A short grace
        period covers reordering between CPUs; the callers confirm boundaries with patience anyway."""
        answered: dict[tuple[NicRef, int], float] = {}
        deadline = time.monotonic() + timeout
        senders = {a for a, _ in pending}
        socks = {self.sock(a).fileno(): a for a in senders}
        while len(answered) < len(pending):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(socks), [], [], left)
            for fd in ready:
                a = socks[fd]
                while (got := self.sock(a)._read()) is not None:
                    for key in self._match(a, got.frame, pending):
                        if key not in answered:
                            answered[key] = got.at - pending[key][1]
                            if key == sentinel:
                                deadline = min(deadline, time.monotonic() + 0.02 + 2 * answered[key])
        return answered

    def _match(self, a: NicRef, frame: bytes,
               pending: dict[tuple[NicRef, int], tuple[NicRef, float]]) -> list[tuple[NicRef, int]]:
        try:
            pkt = parse_frame(frame)
        except PacketError:
            return []
        if not isinstance(pkt, RocePacket) or pkt.bth.opcode != Opcode.ACKNOWLEDGE or pkt.bth.dqpn != self.qp:
            return []
        key = (a, pkt.bth.psn)
        if key in pending and pkt.icrc_ok and pkt.aeth is not None and pkt.aeth.is_ack:
            b = pending[key][0]
            if str(pkt.ip.src) == str(self.fabric.plan.nics[b].ip):
                return [key]
        return []

    def probe_pairs(self, pairs: Sequence[tuple[NicRef, NicRef]], payload: int = 0,
                    timeout: float = DEFAULT_TIMEOUT, retries: int = 1) -> list[ProbeResult]:
        """One request per (sender, receiver) pair, all in flight together; unanswered ones are retried."""
        results: dict[int, ProbeResult] = {}
        todo = list(enumerate(pairs))
        for attempt in range(retries + 1):
            pending: dict[tuple[NicRef, int], tuple[NicRef, float]] = {}
            index: dict[tuple[NicRef, int], int] = {}
            for i, (a, b) in todo:
                psn, frame = self.request(a, b, bytes(payload))
                pending[(a, psn)] = (b, time.monotonic())
                index[(a, psn)] = i
                self.sock(a).send(frame)
                self.sent += 1
            answered = self._collect(pending, timeout)
            for key, i in index.items():
                a, b = pairs[i]
                if key in answered:
                    results[i] = ProbeResult(a, b, True, answered[key])
                elif attempt == retries:
                    results[i] = ProbeResult(a, b, False, None)
            todo = [(i, pairs[i]) for i in index.values() if i not in results]
            if not todo:
                break
        return [results[i] for i in range(len(pairs))]

    def probe(self, a: NicRef, b: NicRef, payload: int = 0, timeout: float = DEFAULT_TIMEOUT,
              retries: int = 1) -> ProbeResult:
        return self.probe_pairs([(a, b)], payload, timeout, retries)[0]

    def _ladder(self, a: NicRef, b: NicRef, sizes: Sequence[int], timeout: float) -> set[int]:
        """Send one request per size (ascending, then an empty sentinel); the sizes that were acknowledged."""
        pending: dict[tuple[NicRef, int], tuple[NicRef, float]] = {}
        size_of: dict[tuple[NicRef, int], int] = {}
        sentinel: tuple[NicRef, int] | None = None
        for size in [*sorted(sizes), -1]:
            psn, frame = self.request(a, b, bytes(max(size, 0)))
            key = (a, psn)
            pending[key] = (b, time.monotonic())
            if size < 0:
                sentinel = key
            else:
                size_of[key] = size
            self.sock(a).send(frame)
            self.sent += 1
        answered = self._collect(pending, timeout, sentinel)
        return {size_of[k] for k in answered if k in size_of}

    def largest_payload(self, a: NicRef, b: NicRef, timeout: float = 0.3, confirm_timeout: float = 1.0,
                        width: int = 16) -> tuple[int | None, int]:
        """Largest SEND payload (a multiple of 4) from ``a`` that ``b`` acknowledges, and the probes it took;
        None when not even an empty request gets through. Sizes above the sender's own MTU are never tried.

        Ladders of ``width`` sizes narrow the range quickly with a short timeout; the boundary is then confirmed
        with a patient one (lo must pass, lo + 4 must fail twice), so a late ACK cannot shrink the result."""
        start = self.sent
        top = max_send_payload(self.fabric.plan.nics[a].mtu)
        if not (self._ladder(a, b, [0], confirm_timeout) or self._ladder(a, b, [0], confirm_timeout)):
            return None, self.sent - start
        lo, hi = 0, top  # lo crosses; everything above hi is believed not to
        while True:
            while hi > lo:
                steps = (hi - lo) // 4
                if steps <= width:
                    sizes = [lo + 4 * k for k in range(1, steps + 1)]
                else:
                    sizes = sorted({lo + 4 * max(1, round(steps * k / width)) for k in range(1, width + 1)})
                ok = self._ladder(a, b, sizes, timeout)
                lo = max([s for s in sizes if s in ok], default=lo)
                failed_above = [s for s in sizes if s not in ok and s > lo]
                if failed_above:
                    hi = min(failed_above) - 4
            if lo >= top:
                return lo, self.sent - start
            if self._ladder(a, b, [lo + 4], confirm_timeout) or self._ladder(a, b, [lo + 4], confirm_timeout):
                lo, hi = lo + 4, top
                continue
            if lo == 0 or self._ladder(a, b, [lo], confirm_timeout) or self._ladder(a, b, [lo], confirm_timeout):
                return lo, self.sent - start
            lo, hi = 0, lo - 4

    def measure_payload(self, a: NicRef, b: NicRef) -> PayloadMeasurement:
        ab, n1 = self.largest_payload(a, b)
        ba, n2 = self.largest_payload(b, a)
        return PayloadMeasurement(a, b, ab, ba, n1 + n2)

    def observe(self, a: NicRef, b: NicRef, ecn: int = 0b10, timeout: float = 1.0) -> Observation | None:
        """Send one request and capture it at ``b``: the PCP, DSCP and ECN it arrived with."""
        capture = self.fabric.socket(b)
        try:
            capture.drain()
            psn, frame = self.request(a, b, b"prio", ecn=ecn, ackreq=False)
            sent = parse_frame(frame)
            assert isinstance(sent, RocePacket)
            self.sock(a).send(frame)
            self.sent += 1
            for _got, pkt in capture.frames(timeout):
                if isinstance(pkt, RocePacket) and pkt.bth.psn == psn and pkt.bth.dqpn == self.qp:
                    return Observation(sent.pcp, sent.ip.dscp, sent.ip.ecn, pkt.pcp, pkt.vid, pkt.ip.dscp,
                                       pkt.ip.ecn, pkt.icrc_ok)
            return None
        finally:
            capture.close()

    def cnp(self, a: NicRef, b: NicRef, timeout: float = 1.0) -> CnpResult:
        """Send a CE-marked request from ``a``; the CNP ``b``'s responder sends back, as ``a`` receives it."""
        sock = self.sock(a)
        sock.drain()
        _psn, frame = self.request(a, b, b"congested", ecn=0b11, ackreq=False)
        sock.send(frame)
        self.sent += 1
        for _got, pkt in sock.frames(timeout):
            if isinstance(pkt, RocePacket) and pkt.bth.opcode == Opcode.CNP and pkt.icrc_ok:
                return CnpResult(True, pkt.ip.dscp, pkt.pcp, pkt.ip.ecn, pkt.bth.becn, pkt.bth.dqpn)
        return CnpResult(False, None, None, None, None, None)

    def pfc(self, a: NicRef, quanta: dict[int, int], others: Sequence[NicRef] = (),
            timeout: float = 0.5) -> PfcResult:
        """Send a PFC frame from ``a`` (scapy-built); capture it on a's switch port and check ``others``."""
        port_ref = self.fabric.model.host_nic(a).peer
        if port_ref is None:
            raise TrafficError(f"{a} is not cabled")
        partner = self.fabric.socket(PortRef(port_ref.switch, port_ref.port))
        watchers = {str(o): self.fabric.socket(o) for o in others}
        try:
            for s in (partner, *watchers.values()):
                s.drain()
            na = self.fabric.plan.nics[a]
            self.sock(a).send(bytes(pfc_frame(src_mac=na.mac, quanta=quanta)))
            self.sent += 1
            seen: dict[int, int] | None = None
            for _got, pkt in partner.frames(timeout):
                if isinstance(pkt, PfcFrame) and pkt.eth.src == mac_bytes(na.mac):
                    seen = pkt.paused()
                    break
            leaked = []
            for name, s in watchers.items():
                while (got := s.recv(0.05)) is not None:
                    try:
                        if isinstance(parse_frame(got.frame), PfcFrame):
                            leaked.append(name)
                            break
                    except PacketError:
                        continue
            return PfcResult(seen, leaked)
        finally:
            partner.close()
            for s in watchers.values():
                s.close()


@dataclass
class LiveFabric:
    """A built fabric with a responder on its NICs, a prober and the linter's report (what the checks need)."""

    fabric: EmulatedFabric
    report: LintReport
    responder: ResponderProcess
    prober: Prober
