"""scapy layers RoCE v2 needs beyond ``scapy.contrib.roce``, and scapy builders for the fabric's traffic.

``scapy.contrib.roce`` has BTH (with ICRC), AETH and CNP padding; ``scapy.contrib.mac_control`` has PFC. This
module adds the other extension headers as scapy layers (one class per header, fields declared as data) and
binds them to the BTH opcodes that carry them, so scapy builds, dissects and ``fuzz()``-es complete SEND, RDMA
WRITE, RDMA READ, atomic and UD packets. The traffic generator, the probes and the fuzzer build their frames here;
the project's own codec (:mod:`fakehw.fabric.wire`) parses them.
"""

from __future__ import annotations

import logging
from ipaddress import IPv4Address
from typing import Any

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
logging.getLogger("scapy.loading").setLevel(logging.ERROR)

from scapy.contrib.mac_control import MACControlClassBasedFlowControl  # noqa: E402
from scapy.contrib.roce import AETH, BTH, CNPPadding  # noqa: E402
from scapy.fields import ByteField, IntField, X3BytesField, XIntField, XLongField  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402
from scapy.packet import Packet, Raw, bind_layers  # noqa: E402

from fakehw.fabric.wire import ROCE_V2_PORT, Opcode, icrc  # noqa: E402

__all__ = ["AETH", "BTH", "DETH", "IETH", "RETH", "AtomicAETH", "AtomicAckETH", "AtomicETH", "CNPPadding", "ImmDt",
           "pfc_frame", "roce_bytes", "roce_frame"]


class _Ext(Packet):
    """An extension header: what follows it depends on the BTH opcode two layers down."""

    def _opcode(self) -> int | None:
        layer = self.underlayer
        while layer is not None and not isinstance(layer, BTH):
            layer = layer.underlayer
        return int(layer.opcode) if layer is not None else None

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes | None]:
        return s, None


class RETH(_Ext):
    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dlen", 0)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        op = self._opcode()
        return ImmDt if op is not None and op & 0x1F == Opcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE else Raw


class AtomicETH(_Ext):
    name = "AtomicETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), XLongField("swap_add", 0), XLongField("compare", 0)]


class AtomicAckETH(_Ext):
    name = "AtomicAckETH"
    fields_desc = [XLongField("orig", 0)]


class ImmDt(_Ext):
    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class IETH(_Ext):
    name = "IETH"
    fields_desc = [XIntField("rkey", 0)]


class DETH(_Ext):
    name = "DETH"
    fields_desc = [XIntField("qkey", 0), ByteField("reserved", 0), X3BytesField("src_qp", 0)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        op = self._opcode()
        return ImmDt if op == Opcode.UD_SEND_ONLY_WITH_IMMEDIATE else Raw


for _op in (0x06, 0x0A, 0x0B, 0x0C, 0x26, 0x2A, 0x2B):
    bind_layers(BTH, RETH, opcode=_op)
class AtomicAETH(_Ext):
    """The AETH of an ATOMIC ACKNOWLEDGE, which (unlike other AETHs) is followed by an AtomicAckETH."""

    name = "AETH"
    fields_desc = AETH.fields_desc

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return AtomicAckETH


for _op in (0x0D, 0x0F, 0x10):
    bind_layers(BTH, AETH, opcode=_op)
bind_layers(BTH, AtomicAETH, opcode=Opcode.ATOMIC_ACKNOWLEDGE)
for _op in (0x13, 0x14):
    bind_layers(BTH, AtomicETH, opcode=_op)
for _op in (0x03, 0x05, 0x09, 0x23, 0x25, 0x29):
    bind_layers(BTH, ImmDt, opcode=_op)
for _op in (0x16, 0x17):
    bind_layers(BTH, IETH, opcode=_op)
for _op in (0x64, 0x65):
    bind_layers(BTH, DETH, opcode=_op)


def _stack(*layers: Packet | None) -> Packet:
    """Chain layers without the copies scapy's ``/`` makes of both operands at every step."""
    present = [x for x in layers if x is not None]
    for upper, lower in zip(present[1:], present, strict=False):
        lower.add_payload(upper)
    return present[0]


def roce_frame(*, src_mac: str, dst_mac: str, src_ip: IPv4Address | str, dst_ip: IPv4Address | str, opcode: int,
               dqpn: int, psn: int, payload: bytes = b"", vlan: int | None = None, pcp: int = 0, dscp: int = 0,
               ecn: int = 0, ackreq: bool = False, sport: int = 0xC000, reth: dict[str, int] | None = None,
               extra: Packet | None = None, ident: int = 0) -> Packet:
    """A RoCE v2 frame (IPv4, DF, UDP checksum 0, ICRC computed by scapy) with the payload padded to 4 bytes."""
    pad = -len(payload) % 4
    return _stack(
        Ether(src=src_mac, dst=dst_mac),
        Dot1Q(vlan=vlan, prio=pcp) if vlan is not None else None,
        IP(src=str(src_ip), dst=str(dst_ip), tos=(dscp << 2) | ecn, flags="DF", id=ident, ttl=64),
        UDP(sport=sport, dport=ROCE_V2_PORT, chksum=0),
        BTH(opcode=opcode, dqpn=dqpn, psn=psn, ackreq=int(ackreq), padcount=pad),
        RETH(va=reth.get("va", 0), rkey=reth.get("rkey", 0), dlen=reth.get("dlen", 0)) if reth is not None else None,
        extra,
        Raw(payload + b"\x00" * pad) if payload or pad else None,
    )


def roce_bytes(**kwargs: Any) -> bytes:
    """:func:`roce_frame` as bytes, with the ICRC filled in by the project's codec instead of scapy.

    scapy's ICRC routine copies and rebuilds the whole packet, which doubles the cost of every probe; the codec's
    ICRC equals scapy's (tests/fabric/test_fabric_wire.py checks it on every opcode), so probes in bulk use it."""
    pkt = roce_frame(**kwargs)
    pkt[BTH].icrc = 0
    frame = bytes(pkt)
    l3 = 18 if pkt.haslayer(Dot1Q) else 14  # roce_frame adds at most one 802.1Q tag
    return frame[:-4] + icrc(frame[l3:-4], False).to_bytes(4, "little")


def pfc_frame(*, src_mac: str, quanta: dict[int, int], vlan: int | None = None, pcp: int = 0) -> Packet:
    """An 802.1Qbb PFC frame (scapy's MAC control layer pads it to the 64-byte minimum)."""
    fields: dict[str, Any] = {}
    for prio, q in quanta.items():
        fields[f"c{prio}_enabled"] = 1
        fields[f"c{prio}_pause_time"] = q
    l2: Packet = Ether(src=src_mac, dst="01:80:c2:00:00:01")
    if vlan is not None:
        l2 = l2 / Dot1Q(vlan=vlan, prio=pcp)
    return l2 / MACControlClassBasedFlowControl(**fields)
