"""The project's own RoCE v2 / PFC codec: parse frames from bytes and build them, fast and without scapy.

The responder and the probes run on this codec (scapy builds the traffic generator's and the fuzzer's frames and
cross-checks this code in the tests: two independent implementations of the same wire format, including the
ICRC). Every layer is one frozen dataclass whose fields are the header's fields, with ``pack`` and ``unpack``.

Parsing never raises anything but :class:`PacketError` (with the byte offset where the frame went wrong): this
code faces fuzzed and hostile input. It checks what a NIC checks before it acts on a packet - lengths, the IPv4
header checksum, BTH padding and the ICRC (``icrc_ok``; a bad ICRC is reported, not raised, because a receiver
counts those) - and nothing it would not.

Layout (reference/platform.md): Ethernet [802.1Q] / IPv4 or IPv6 / UDP 4791 / BTH (12) / extension headers /
payload + pad to 4 bytes / ICRC (4). PFC (802.1Qbb): MAC control (EtherType 0x8808) opcode 0x0101, class-enable
vector, eight 16-bit pause quanta, padded to the 64-byte minimum frame.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from ipaddress import IPv4Address, IPv6Address

ROCE_V2_PORT = 4791
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_8021Q = 0x8100
ETH_P_8021AD = 0x88A8
ETH_P_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
PAUSE_OPCODE = 0x0001
PFC_DST = bytes.fromhex("0180c2000001")
MIN_FRAME = 60
"""Minimum Ethernet frame without the FCS."""
MAX_FRAME = 65535 + 18
MAX_VLAN_TAGS = 2
IB_MTUS = (256, 512, 1024, 2048, 4096)
ROCE_HEADROOM = 40 + 8 + 12 + 4 + 28 + 4
"""Bytes a NIC reserves below its netdev MTU for the biggest RoCE headers (GRH-sized IP header, UDP, BTH, XRC,
AtomicETH, ICRC) when it picks its active RoCE MTU."""


def roce_mtu(netdev_mtu: int) -> int:
    """The active RoCE MTU a NIC derives from an Ethernet MTU (1500 -> 1024, 9000 -> 4096); 0 if none fits."""
    usable = netdev_mtu - ROCE_HEADROOM
    return max((m for m in IB_MTUS if m <= usable), default=0)


class PacketError(ValueError):
    """A frame that cannot be parsed; ``offset`` is the byte where it went wrong."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} (at byte {offset})")
        self.reason = message
        self.offset = offset

    @property
    def key(self) -> str:
        """The reason with its numbers blanked, so errors group by kind of problem."""
        return _NUMBERS.sub("#", self.reason)[:80]


_NUMBERS = re.compile(r"0x[0-9a-f]+|(?<![\w.])\d+(?![\w.])")


def _need(data: bytes | bytearray, offset: int, size: int, what: str) -> None:
    if offset < 0 or len(data) - offset < size:
        have = max(len(data) - offset, 0)
        raise PacketError(f"truncated {what}: need {size} bytes, have {have}", offset)


# --------------------------------------------------------------------------------------------------- opcodes


class Opcode(IntEnum):
    """BTH opcodes used here (transport RC unless named otherwise)."""

    SEND_FIRST = 0x00
    SEND_MIDDLE = 0x01
    SEND_LAST = 0x02
    SEND_LAST_WITH_IMMEDIATE = 0x03
    SEND_ONLY = 0x04
    SEND_ONLY_WITH_IMMEDIATE = 0x05
    RDMA_WRITE_FIRST = 0x06
    RDMA_WRITE_MIDDLE = 0x07
    RDMA_WRITE_LAST = 0x08
    RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RDMA_WRITE_ONLY = 0x0A
    RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RDMA_READ_REQUEST = 0x0C
    RDMA_READ_RESPONSE_FIRST = 0x0D
    RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RDMA_READ_RESPONSE_LAST = 0x0F
    RDMA_READ_RESPONSE_ONLY = 0x10
    ACKNOWLEDGE = 0x11
    ATOMIC_ACKNOWLEDGE = 0x12
    COMPARE_SWAP = 0x13
    FETCH_ADD = 0x14
    SEND_LAST_WITH_INVALIDATE = 0x16
    SEND_ONLY_WITH_INVALIDATE = 0x17
    UD_SEND_ONLY = 0x64
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65
    CNP = 0x81


TRANSPORTS = {0x00: "RC", 0x20: "UC", 0x40: "RD", 0x60: "UD"}

# extension headers in wire order, by RC operation (low five bits); UC uses the SEND/WRITE subset
_RC_EXT: dict[int, tuple[str, ...]] = {
    0x00: (), 0x01: (), 0x02: (), 0x03: ("immdt",), 0x04: (), 0x05: ("immdt",),
    0x06: ("reth",), 0x07: (), 0x08: (), 0x09: ("immdt",), 0x0A: ("reth",), 0x0B: ("reth", "immdt"),
    0x0C: ("reth",), 0x0D: ("aeth",), 0x0E: (), 0x0F: ("aeth",), 0x10: ("aeth",), 0x11: ("aeth",),
    0x12: ("aeth", "atomicack"), 0x13: ("atomic",), 0x14: ("atomic",), 0x16: ("ieth",), 0x17: ("ieth",),
}
_NO_PAYLOAD = {0x0C, 0x11, 0x12, 0x13, 0x14}
_UD_EXT: dict[int, tuple[str, ...]] = {0x04: ("deth",), 0x05: ("deth", "immdt")}


def extension_headers(opcode: int) -> tuple[str, ...]:
    """Names of the extension headers that follow the BTH for ``opcode``; PacketError if it is not valid."""
    if opcode == Opcode.CNP:
        return ()
    transport, op = opcode & 0xE0, opcode & 0x1F
    if transport == 0x00 and op in _RC_EXT:
        return _RC_EXT[op]
    if transport == 0x20 and op <= 0x0B:
        return _RC_EXT[op]
    if transport == 0x60 and op in _UD_EXT:
        return _UD_EXT[op]
    name = TRANSPORTS.get(transport, "reserved")
    raise PacketError(f"BTH opcode 0x{opcode:02x} is not a valid {name} operation", 0)


def is_request(opcode: int) -> bool:
    """SEND, RDMA WRITE, RDMA READ request or atomic: what a responder answers."""
    op = opcode & 0x1F
    return opcode & 0xE0 in (0x00, 0x20, 0x60) and (op <= 0x0C or op in (0x13, 0x14, 0x16, 0x17))


# --------------------------------------------------------------------------------------------------- layers


@dataclass(frozen=True, slots=True)
class Ethernet:
    dst: bytes
    src: bytes
    ethertype: int
    SIZE = 14

    def pack(self) -> bytes:
        return self.dst + self.src + struct.pack("!H", self.ethertype)

    @classmethod
    def unpack(cls, data: bytes, offset: int = 0) -> Ethernet:
        _need(data, offset, cls.SIZE, "Ethernet header")
        return cls(data[offset:offset + 6], data[offset + 6:offset + 12],
                   struct.unpack_from("!H", data, offset + 12)[0])


@dataclass(frozen=True, slots=True)
class VlanTag:
    """An 802.1Q tag: priority (PCP), drop eligible (DEI), VLAN ID; ``ethertype`` is what follows it."""

    pcp: int
    dei: int
    vid: int
    ethertype: int
    tpid: int = ETH_P_8021Q
    SIZE = 4

    @property
    def tci(self) -> int:
        return (self.pcp << 13) | (self.dei << 12) | self.vid

    def pack(self) -> bytes:
        """The tag's TCI and the next EtherType (the TPID is the previous layer's EtherType)."""
        return struct.pack("!HH", self.tci, self.ethertype)

    @classmethod
    def unpack(cls, data: bytes, offset: int, tpid: int = ETH_P_8021Q) -> VlanTag:
        _need(data, offset, cls.SIZE, "802.1Q tag")
        tci, ethertype = struct.unpack_from("!HH", data, offset)
        return cls(tci >> 13, (tci >> 12) & 1, tci & 0xFFF, ethertype, tpid)


def ipv4_checksum(header: bytes) -> int:
    if len(header) % 2:
        header += b"\x00"
    total: int = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@dataclass(frozen=True, slots=True)
class IPv4:
    tos: int
    total_length: int
    ident: int
    flags: int
    frag_offset: int
    ttl: int
    proto: int
    checksum: int
    src: IPv4Address
    dst: IPv4Address
    ihl: int = 5
    options: bytes = b""

    @property
    def dscp(self) -> int:
        return self.tos >> 2

    @property
    def ecn(self) -> int:
        return self.tos & 3

    @property
    def header_length(self) -> int:
        return self.ihl * 4

    def pack(self) -> bytes:
        """The header with ``checksum`` as given (use :func:`ipv4_header` to compute it)."""
        return struct.pack("!BBHHHBBH4s4s", 0x40 | self.ihl, self.tos, self.total_length, self.ident,
                           (self.flags << 13) | self.frag_offset, self.ttl, self.proto, self.checksum,
                           self.src.packed, self.dst.packed) + self.options

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> IPv4:
        _need(data, offset, 20, "IPv4 header")
        vihl, tos, total, ident, frag, ttl, proto, csum, src, dst = struct.unpack_from("!BBHHHBBH4s4s", data, offset)
        if vihl >> 4 != 4:
            raise PacketError(f"IPv4 version field is {vihl >> 4}", offset)
        ihl = vihl & 0xF
        if ihl < 5:
            raise PacketError(f"IPv4 header length {ihl * 4} is below 20", offset)
        _need(data, offset, ihl * 4, "IPv4 options")
        if total < ihl * 4:
            raise PacketError(f"IPv4 total length {total} is shorter than its header ({ihl * 4})", offset + 2)
        if total > len(data) - offset:
            raise PacketError(f"IPv4 total length {total} exceeds the frame ({len(data) - offset} bytes)", offset + 2)
        if ipv4_checksum(data[offset:offset + ihl * 4]) != 0:
            raise PacketError("IPv4 header checksum is wrong", offset + 10)
        return cls(tos, total, ident, frag >> 13, frag & 0x1FFF, ttl, proto, csum, IPv4Address(src),
                   IPv4Address(dst), ihl, bytes(data[offset + 20:offset + ihl * 4]))


@dataclass(frozen=True, slots=True)
class IPv6:
    traffic_class: int
    flow_label: int
    payload_length: int
    next_header: int
    hop_limit: int
    src: IPv6Address
    dst: IPv6Address
    SIZE = 40

    @property
    def dscp(self) -> int:
        return self.traffic_class >> 2

    @property
    def ecn(self) -> int:
        return self.traffic_class & 3

    def pack(self) -> bytes:
        word = (6 << 28) | (self.traffic_class << 20) | self.flow_label
        return struct.pack("!IHBB16s16s", word, self.payload_length, self.next_header, self.hop_limit,
                           self.src.packed, self.dst.packed)

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> IPv6:
        _need(data, offset, cls.SIZE, "IPv6 header")
        word, plen, nh, hlim, src, dst = struct.unpack_from("!IHBB16s16s", data, offset)
        if word >> 28 != 6:
            raise PacketError(f"IPv6 version field is {word >> 28}", offset)
        if plen > len(data) - offset - cls.SIZE:
            raise PacketError(f"IPv6 payload length {plen} exceeds the frame", offset + 4)
        return cls((word >> 20) & 0xFF, word & 0xFFFFF, plen, nh, hlim, IPv6Address(src), IPv6Address(dst))


@dataclass(frozen=True, slots=True)
class Udp:
    sport: int
    dport: int
    length: int
    checksum: int
    SIZE = 8

    def pack(self) -> bytes:
        return struct.pack("!HHHH", self.sport, self.dport, self.length, self.checksum)

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> Udp:
        _need(data, offset, cls.SIZE, "UDP header")
        return cls(*struct.unpack_from("!HHHH", data, offset))


@dataclass(frozen=True, slots=True)
class Bth:
    """Base transport header (12 bytes)."""

    opcode: int
    dqpn: int
    psn: int
    solicited: int = 0
    migreq: int = 0
    padcount: int = 0
    version: int = 0
    pkey: int = 0xFFFF
    fecn: int = 0
    becn: int = 0
    resv6: int = 0
    ackreq: int = 0
    resv7: int = 0
    SIZE = 12

    def pack(self) -> bytes:
        b1 = (self.solicited << 7) | (self.migreq << 6) | (self.padcount << 4) | self.version
        b4 = (self.fecn << 7) | (self.becn << 6) | self.resv6
        b8 = (self.ackreq << 7) | self.resv7
        return struct.pack("!BBHB", self.opcode, b1, self.pkey, b4) + self.dqpn.to_bytes(3, "big") + \
            bytes([b8]) + self.psn.to_bytes(3, "big")

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> Bth:
        _need(data, offset, cls.SIZE, "BTH")
        op, b1, pkey, b4 = struct.unpack_from("!BBHB", data, offset)
        b8 = data[offset + 8]
        return cls(op, int.from_bytes(data[offset + 5:offset + 8], "big"), int.from_bytes(
            data[offset + 9:offset + 12], "big"), b1 >> 7, (b1 >> 6) & 1, (b1 >> 4) & 3, b1 & 0xF, pkey, b4 >> 7,
            (b4 >> 6) & 1, b4 & 0x3F, b8 >> 7, b8 & 0x7F)


@dataclass(frozen=True, slots=True)
class Reth:
    """RDMA extended transport header: remote virtual address, key, DMA length (16 bytes)."""

    va: int
    rkey: int
    dma_length: int
    SIZE = 16

    def pack(self) -> bytes:
        return struct.pack("!QII", self.va, self.rkey, self.dma_length)

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> Reth:
        _need(data, offset, cls.SIZE, "RETH")
        return cls(*struct.unpack_from("!QII", data, offset))


class Syndrome(IntEnum):
    """AETH syndrome high bits: 0b000 ACK, 0b001 RNR NAK, 0b011 NAK (low five bits: credits/timer/code)."""

    ACK = 0x00
    RNR_NAK = 0x20
    NAK = 0x60


NAK_INVALID_REQUEST = 0x61
NAK_REMOTE_ACCESS = 0x62
NAK_PSN_SEQUENCE = 0x60
ACK_CREDITS_INVALID = 0x1F


@dataclass(frozen=True, slots=True)
class Aeth:
    """ACK extended transport header: syndrome and message sequence number (4 bytes)."""

    syndrome: int
    msn: int
    SIZE = 4

    @property
    def is_ack(self) -> bool:
        return self.syndrome & 0xE0 == Syndrome.ACK

    def pack(self) -> bytes:
        return bytes([self.syndrome]) + self.msn.to_bytes(3, "big")

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> Aeth:
        _need(data, offset, cls.SIZE, "AETH")
        return cls(data[offset], int.from_bytes(data[offset + 1:offset + 4], "big"))


@dataclass(frozen=True, slots=True)
class AtomicEth:
    va: int
    rkey: int
    swap_add: int
    compare: int
    SIZE = 28

    def pack(self) -> bytes:
        return struct.pack("!QIQQ", self.va, self.rkey, self.swap_add, self.compare)

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> AtomicEth:
        _need(data, offset, cls.SIZE, "AtomicETH")
        return cls(*struct.unpack_from("!QIQQ", data, offset))


@dataclass(frozen=True, slots=True)
class AtomicAckEth:
    original: int
    SIZE = 8

    def pack(self) -> bytes:
        return struct.pack("!Q", self.original)

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> AtomicAckEth:
        _need(data, offset, cls.SIZE, "AtomicAckETH")
        return cls(struct.unpack_from("!Q", data, offset)[0])


@dataclass(frozen=True, slots=True)
class ImmDt:
    imm: int
    SIZE = 4

    def pack(self) -> bytes:
        return struct.pack("!I", self.imm)

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> ImmDt:
        _need(data, offset, cls.SIZE, "ImmDt")
        return cls(struct.unpack_from("!I", data, offset)[0])


@dataclass(frozen=True, slots=True)
class Ieth:
    rkey: int
    SIZE = 4

    def pack(self) -> bytes:
        return struct.pack("!I", self.rkey)

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> Ieth:
        _need(data, offset, cls.SIZE, "IETH")
        return cls(struct.unpack_from("!I", data, offset)[0])


@dataclass(frozen=True, slots=True)
class Deth:
    qkey: int
    src_qp: int
    SIZE = 8

    def pack(self) -> bytes:
        return struct.pack("!I", self.qkey) + b"\x00" + self.src_qp.to_bytes(3, "big")

    @classmethod
    def unpack(cls, data: bytes, offset: int) -> Deth:
        _need(data, offset, cls.SIZE, "DETH")
        return cls(struct.unpack_from("!I", data, offset)[0], int.from_bytes(data[offset + 5:offset + 8], "big"))


Extension = Reth | Aeth | AtomicEth | AtomicAckEth | ImmDt | Ieth | Deth
_EXT_CLASSES: dict[str, type[Reth] | type[Aeth] | type[AtomicEth] | type[AtomicAckEth] | type[ImmDt] | type[Ieth]
                   | type[Deth]] = {
    "reth": Reth, "aeth": Aeth, "atomic": AtomicEth, "atomicack": AtomicAckEth, "immdt": ImmDt, "ieth": Ieth,
    "deth": Deth,
}
CNP_PADDING = 16


# --------------------------------------------------------------------------------------------------- frames


@dataclass(frozen=True, slots=True)
class RocePacket:
    eth: Ethernet
    vlans: tuple[VlanTag, ...]
    ip: IPv4 | IPv6
    udp: Udp
    bth: Bth
    extensions: tuple[Extension, ...]
    payload: bytes
    icrc: int
    icrc_ok: bool

    def ext(self, kind: type[Extension]) -> Extension | None:
        return next((e for e in self.extensions if isinstance(e, kind)), None)

    @property
    def reth(self) -> Reth | None:
        e = self.ext(Reth)
        return e if isinstance(e, Reth) else None

    @property
    def aeth(self) -> Aeth | None:
        e = self.ext(Aeth)
        return e if isinstance(e, Aeth) else None

    @property
    def pcp(self) -> int | None:
        return self.vlans[0].pcp if self.vlans else None

    @property
    def vid(self) -> int | None:
        return self.vlans[0].vid if self.vlans else None


@dataclass(frozen=True, slots=True)
class PfcFrame:
    """802.1Qbb priority flow control: which priorities to pause and for how many quanta (512 bit times)."""

    eth: Ethernet
    vlans: tuple[VlanTag, ...]
    class_enable: int
    quanta: tuple[int, ...]

    def paused(self) -> dict[int, int]:
        return {p: self.quanta[p] for p in range(8) if self.class_enable >> p & 1}


@dataclass(frozen=True, slots=True)
class PauseFrame:
    """802.3x link-level PAUSE."""

    eth: Ethernet
    vlans: tuple[VlanTag, ...]
    quanta: int


@dataclass(frozen=True, slots=True)
class OtherFrame:
    """A well-formed frame that is neither RoCE v2 nor MAC control (IPv4 ICMP, UDP to another port...)."""

    eth: Ethernet
    vlans: tuple[VlanTag, ...]
    ethertype: int
    summary: str


Frame = RocePacket | PfcFrame | PauseFrame | OtherFrame


def icrc(ip_and_rest: bytes, ipv6: bool) -> int:
    """The RoCE v2 invariant CRC over IP header ... payload (``ip_and_rest`` excludes the ICRC itself): CRC32 of
    eight 0xff bytes and the packet with its variant fields (TOS/traffic class, TTL/hop limit, flow label, IP and
    UDP checksums, BTH FECN/BECN/reserved byte) set to all ones."""
    b = bytearray(ip_and_rest)
    if ipv6:
        _need(b, 0, 40 + 8 + 5, "packet for ICRC")
        b[0] |= 0x0F
        b[1] = 0xFF
        b[2] = b[3] = 0xFF
        b[7] = 0xFF
        udp = 40
    else:
        _need(b, 0, 20, "packet for ICRC")
        udp = (b[0] & 0xF) * 4
        _need(b, 0, udp + 8 + 5, "packet for ICRC")
        b[1] = 0xFF
        b[8] = 0xFF
        b[10] = b[11] = 0xFF
    b[udp + 6] = b[udp + 7] = 0xFF
    b[udp + 8 + 4] = 0xFF
    return zlib.crc32(bytes(b), zlib.crc32(b"\xff" * 8)) & 0xFFFFFFFF


def parse_frame(data: bytes) -> Frame:
    """Parse one Ethernet frame (without FCS). Raises :class:`PacketError` and nothing else on bad input."""
    try:
        return _parse(bytes(data))
    except PacketError:
        raise
    except (struct.error, ValueError, IndexError, OverflowError) as exc:  # a bug, but never let it escape raw
        raise PacketError(f"unparseable frame: {type(exc).__name__}: {exc}", 0) from None


def _parse(data: bytes) -> Frame:
    if len(data) > MAX_FRAME:
        raise PacketError(f"frame of {len(data)} bytes is larger than any Ethernet frame", MAX_FRAME)
    eth = Ethernet.unpack(data)
    offset = Ethernet.SIZE
    ethertype = eth.ethertype
    vlans: list[VlanTag] = []
    while ethertype in (ETH_P_8021Q, ETH_P_8021AD):
        if len(vlans) == MAX_VLAN_TAGS:
            raise PacketError(f"more than {MAX_VLAN_TAGS} VLAN tags", offset)
        tag = VlanTag.unpack(data, offset, ethertype)
        vlans.append(tag)
        ethertype = tag.ethertype
        offset += VlanTag.SIZE
    tags = tuple(vlans)
    if ethertype == ETH_P_MAC_CONTROL:
        return _parse_mac_control(data, offset, eth, tags)
    if ethertype == ETH_P_IP:
        ip4 = IPv4.unpack(data, offset)
        if ip4.proto != 17:
            return OtherFrame(eth, tags, ethertype, f"IPv4 protocol {ip4.proto}")
        if ip4.flags & 1 or ip4.frag_offset:
            raise PacketError("fragmented IPv4 packet (RoCE is never fragmented)", offset + 6)
        ip: IPv4 | IPv6 = ip4
        ip_start, l4 = offset, offset + ip4.header_length
        end = offset + ip4.total_length
    elif ethertype == ETH_P_IPV6:
        ip6 = IPv6.unpack(data, offset)
        if ip6.next_header != 17:
            return OtherFrame(eth, tags, ethertype, f"IPv6 next header {ip6.next_header}")
        ip = ip6
        ip_start, l4 = offset, offset + IPv6.SIZE
        end = l4 + ip6.payload_length
    else:
        return OtherFrame(eth, tags, ethertype, f"EtherType 0x{ethertype:04x}")
    udp = Udp.unpack(data, l4)
    if udp.dport != ROCE_V2_PORT:
        return OtherFrame(eth, tags, ethertype, f"UDP to port {udp.dport}")
    if udp.length != end - l4:
        raise PacketError(f"UDP length {udp.length} disagrees with the IP packet ({end - l4} bytes)", l4 + 4)
    return _parse_roce(data[:end], ip_start, l4 + Udp.SIZE, eth, tags, ip, udp)


def _parse_roce(data: bytes, ip_start: int, offset: int, eth: Ethernet, tags: tuple[VlanTag, ...],
                ip: IPv4 | IPv6, udp: Udp) -> RocePacket:
    bth = Bth.unpack(data, offset)
    try:
        names = extension_headers(bth.opcode)
    except PacketError as exc:
        raise PacketError(exc.reason, offset) from None
    pos = offset + Bth.SIZE
    exts: list[Extension] = []
    for name in names:
        cls = _EXT_CLASSES[name]
        exts.append(cls.unpack(data, pos))
        pos += cls.SIZE
    _need(data, pos, 4, "ICRC")
    body = data[pos:len(data) - 4]
    if bth.opcode == Opcode.CNP:
        if len(body) != CNP_PADDING:
            raise PacketError(f"CNP carries {len(body)} bytes instead of {CNP_PADDING} of padding", pos)
    elif len(body) % 4:
        raise PacketError(f"payload and pad of {len(body)} bytes is not a multiple of 4", pos)
    if bth.padcount > len(body):
        raise PacketError(f"pad count {bth.padcount} exceeds the {len(body)}-byte payload", offset + 1)
    if bth.opcode & 0x1F in _NO_PAYLOAD and bth.opcode & 0xE0 in (0x00, 0x20) and body:
        raise PacketError(f"opcode 0x{bth.opcode:02x} carries no payload but has {len(body)} bytes", pos)
    payload = body[:len(body) - bth.padcount] if bth.opcode != Opcode.CNP else b""
    got = int.from_bytes(data[len(data) - 4:], "little")
    ok = icrc(data[ip_start:len(data) - 4], isinstance(ip, IPv6)) == got
    return RocePacket(eth, tags, ip, udp, bth, tuple(exts), payload, got, ok)


def _parse_mac_control(data: bytes, offset: int, eth: Ethernet, tags: tuple[VlanTag, ...]) -> Frame:
    _need(data, offset, 2, "MAC control opcode")
    opcode = struct.unpack_from("!H", data, offset)[0]
    if opcode == PFC_OPCODE:
        _need(data, offset, 2 + 2 + 16, "PFC frame")
        vector = struct.unpack_from("!H", data, offset + 2)[0]
        if vector >> 8:
            raise PacketError(f"PFC class-enable vector 0x{vector:04x} sets reserved bits", offset + 2)
        quanta = struct.unpack_from("!8H", data, offset + 4)
        return PfcFrame(eth, tags, vector, tuple(quanta))
    if opcode == PAUSE_OPCODE:
        _need(data, offset, 4, "PAUSE frame")
        return PauseFrame(eth, tags, struct.unpack_from("!H", data, offset + 2)[0])
    raise PacketError(f"MAC control opcode 0x{opcode:04x} is not PAUSE or PFC", offset)


# --------------------------------------------------------------------------------------------------- build


def _l2(src: bytes, dst: bytes, vlan: VlanTag | None, ethertype: int) -> bytes:
    if vlan is None:
        return Ethernet(dst, src, ethertype).pack()
    return Ethernet(dst, src, vlan.tpid).pack() + VlanTag(vlan.pcp, vlan.dei, vlan.vid, ethertype).pack()


def build_roce(*, src_mac: bytes, dst_mac: bytes, src_ip: IPv4Address, dst_ip: IPv4Address, bth: Bth,
               extensions: tuple[Extension, ...] = (), payload: bytes = b"", vlan: VlanTag | None = None,
               dscp: int = 0, ecn: int = 0, ttl: int = 64, sport: int = 0xC000, ident: int = 0,
               bad_icrc: bool = False) -> bytes:
    """A RoCE v2 frame over IPv4 with correct lengths, IP checksum, pad count and ICRC (DF set, UDP checksum 0).

    ``bth.padcount`` is replaced by the pad this payload needs."""
    pad = -len(payload) % 4 if bth.opcode != Opcode.CNP else 0
    if pad != bth.padcount:
        bth = Bth(bth.opcode, bth.dqpn, bth.psn, bth.solicited, bth.migreq, pad, bth.version, bth.pkey, bth.fecn,
                  bth.becn, bth.resv6, bth.ackreq, bth.resv7)
    l4_body = bth.pack() + b"".join(e.pack() for e in extensions) + payload + b"\x00" * pad
    udp_len = Udp.SIZE + len(l4_body) + 4
    total = 20 + udp_len
    header = IPv4((dscp << 2) | ecn, total, ident, 0b010, 0, ttl, 17, 0, src_ip, dst_ip).pack()
    header = header[:10] + struct.pack("!H", ipv4_checksum(header)) + header[12:]
    packet = header + Udp(sport, ROCE_V2_PORT, udp_len, 0).pack() + l4_body
    crc = icrc(packet, False) ^ (0xFFFFFFFF if bad_icrc else 0)
    return _l2(src_mac, dst_mac, vlan, ETH_P_IP) + packet + crc.to_bytes(4, "little")


def build_cnp(*, src_mac: bytes, dst_mac: bytes, src_ip: IPv4Address, dst_ip: IPv4Address, dqpn: int,
              vlan: VlanTag | None = None, dscp: int = 48, sport: int = 0xC000) -> bytes:
    """A congestion notification packet: opcode 0x81, BECN set, 16 bytes of zero padding, not ECN-capable."""
    bth = Bth(Opcode.CNP, dqpn, 0, becn=1)
    return build_roce(src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip, dst_ip=dst_ip, bth=bth,
                      payload=b"\x00" * CNP_PADDING, vlan=vlan, dscp=dscp, ecn=0, sport=sport)


def build_pfc(*, src_mac: bytes, quanta: dict[int, int], vlan: VlanTag | None = None) -> bytes:
    """A PFC frame pausing each priority in ``quanta`` for that many quanta, padded to the minimum frame."""
    vector = 0
    times = [0] * 8
    for prio, q in quanta.items():
        if not 0 <= prio <= 7 or not 0 <= q <= 0xFFFF:
            raise ValueError(f"PFC priority {prio} / quanta {q} out of range")
        vector |= 1 << prio
        times[prio] = q
    frame = _l2(src_mac, PFC_DST, vlan, ETH_P_MAC_CONTROL) + struct.pack("!HH8H", PFC_OPCODE, vector, *times)
    return frame + b"\x00" * max(0, MIN_FRAME - len(frame))


def mac_bytes(mac: str) -> bytes:
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return bytes(int(p, 16) for p in parts)


def mac_text(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)
