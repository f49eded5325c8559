"""The project's RoCE/PFC codec against scapy: two independent implementations of the same wire format."""

from __future__ import annotations

import struct
from ipaddress import IPv4Address

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from fakehw.fabric.layers import BTH, DETH, IETH, RETH, AtomicETH, ImmDt, pfc_frame, roce_bytes, roce_frame
from fakehw.fabric.wire import (
    IB_MTUS,
    Aeth,
    Bth,
    Opcode,
    PacketError,
    PfcFrame,
    Reth,
    RocePacket,
    VlanTag,
    build_cnp,
    build_pfc,
    build_roce,
    extension_headers,
    icrc,
    is_request,
    mac_bytes,
    parse_frame,
    roce_mtu,
)

A, B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
COMMON = {"src_mac": A, "dst_mac": B, "src_ip": "10.1.2.3", "dst_ip": "10.1.2.4", "dqpn": 0x123456, "psn": 0xABCDEF}


@pytest.mark.parametrize("opcode", [op for op in Opcode if op not in (Opcode.CNP,)])
@pytest.mark.parametrize("vlan", [None, 100])
def test_scapy_frames_parse_with_a_valid_icrc(opcode: Opcode, vlan: int | None) -> None:
    names = extension_headers(opcode)
    layers = {"atomic": AtomicETH(va=1, rkey=2, swap_add=3, compare=4), "immdt": ImmDt(imm=0xDEADBEEF),
              "ieth": IETH(rkey=9), "deth": DETH(qkey=0x11111111, src_qp=77)}
    extra = None
    for name in names:
        if name in layers:
            extra = layers[name] if extra is None else extra / layers[name]
    payload = b"" if opcode in (0x0C, 0x11, 0x12, 0x13, 0x14) else b"payload!x"
    reth = {"va": 0x1000, "rkey": 0x42, "dlen": 9} if "reth" in names else None
    pkt = roce_frame(opcode=opcode, payload=payload, vlan=vlan, pcp=5, dscp=26, ecn=2, ackreq=True, reth=reth,
                     extra=extra, **COMMON)  # type: ignore[arg-type]
    if "aeth" in names:
        pkt[BTH].remove_payload()
        pkt[BTH].add_payload(bytes(Aeth(0x1F, 7).pack()) + (b"\x00" * 8 if "atomicack" in names else b"") + payload
                             + b"\x00" * (-len(payload) % 4))
        pkt[BTH].padcount = -len(payload) % 4
    frame = bytes(pkt)
    parsed = parse_frame(frame)
    assert isinstance(parsed, RocePacket)
    assert parsed.icrc_ok, "the codec's ICRC disagrees with scapy's"
    assert (parsed.bth.opcode, parsed.bth.dqpn, parsed.bth.psn, parsed.bth.ackreq) == (opcode, 0x123456, 0xABCDEF, 1)
    assert parsed.payload == payload
    assert parsed.pcp == (5 if vlan else None) and parsed.ip.dscp == 26 and parsed.ip.ecn == 2
    assert len(parsed.extensions) == len(names)
    # the codec's ICRC of the same bytes is the one scapy put at the end
    assert icrc(frame[18 if vlan else 14:-4], False).to_bytes(4, "little") == frame[-4:]
    # and roce_bytes (scapy headers, codec ICRC) gives the very same frame when there is nothing extra
    if extra is None and "aeth" not in names:
        assert roce_bytes(opcode=opcode, payload=payload, vlan=vlan, pcp=5, dscp=26, ecn=2, ackreq=True, reth=reth,
                          **COMMON) == frame


def test_codec_built_frames_dissect_in_scapy() -> None:
    frame = build_roce(src_mac=mac_bytes(A), dst_mac=mac_bytes(B), src_ip=IPv4Address("10.0.0.1"),
                       dst_ip=IPv4Address("10.0.0.2"), bth=Bth(Opcode.RDMA_WRITE_ONLY, 7, 9, ackreq=1),
                       extensions=(Reth(0xFEED, 3, 5),), payload=b"hello", vlan=VlanTag(3, 0, 101, 0x0800),
                       dscp=26, ecn=2, ident=1)
    s = Ether(frame)
    assert s[BTH].opcode == Opcode.RDMA_WRITE_ONLY and s[BTH].padcount == 3 and s[RETH].va == 0xFEED
    rebuilt = s.copy()
    rebuilt[BTH].icrc = None  # let scapy recompute it
    assert bytes(rebuilt) == frame
    cnp = parse_frame(build_cnp(src_mac=mac_bytes(B), dst_mac=mac_bytes(A), src_ip=IPv4Address("10.0.0.2"),
                                dst_ip=IPv4Address("10.0.0.1"), dqpn=7))
    assert isinstance(cnp, RocePacket) and cnp.bth.opcode == Opcode.CNP and cnp.bth.becn == 1 and cnp.icrc_ok
    assert cnp.ip.dscp == 48 and cnp.ip.ecn == 0


def test_pfc_frames_agree_with_scapy() -> None:
    quanta = {3: 0xFFFF, 6: 100}
    ours = build_pfc(src_mac=mac_bytes(A), quanta=quanta)
    theirs = bytes(pfc_frame(src_mac=A, quanta=quanta))
    assert ours == theirs and len(ours) == 60
    parsed = parse_frame(ours)
    assert isinstance(parsed, PfcFrame) and parsed.paused() == quanta
    assert Ether(ours)[MACControlClassBasedFlowControl].c3_pause_time == 0xFFFF
    with pytest.raises(ValueError):
        build_pfc(src_mac=mac_bytes(A), quanta={8: 1})


def test_bad_icrc_is_reported_not_raised() -> None:
    frame = roce_bytes(opcode=Opcode.SEND_ONLY, payload=b"abcd", **COMMON)
    bad = frame[:-1] + bytes([frame[-1] ^ 1])
    parsed = parse_frame(bad)
    assert isinstance(parsed, RocePacket) and not parsed.icrc_ok
    # a variant field (TTL) is masked out of the ICRC; an invariant one (the payload) is not
    ttl_changed = bytearray(frame)
    ttl_changed[14 + 8] = 7
    ttl_changed[14 + 10:14 + 12] = b"\x00\x00"
    from fakehw.fabric.wire import ipv4_checksum
    ttl_changed[14 + 10:14 + 12] = struct.pack("!H", ipv4_checksum(bytes(ttl_changed[14:34])))
    assert parse_frame(bytes(ttl_changed)).icrc_ok  # type: ignore[union-attr]
    payload_changed = bytearray(frame)
    payload_changed[-5] ^= 1  # the last payload byte, just before the 4-byte ICRC
    parsed = parse_frame(bytes(payload_changed))
    assert isinstance(parsed, RocePacket) and parsed.payload == b"abce" and not parsed.icrc_ok


@pytest.mark.parametrize(
    ("mutate", "reason", "offset"),
    [
        (lambda f: f[:10], "truncated Ethernet header", 0),
        (lambda f: f[:20], "truncated IPv4 header", 14),
        (lambda f: f[:14] + bytes([0x65]) + f[15:], "IPv4 version field is 6", 14),
        (lambda f: f[:24] + b"\x00\x00" + f[26:], "IPv4 header checksum is wrong", 24),
        (lambda f: f[:16] + b"\x0f\xff" + f[18:], "exceeds the frame", 16),
        (lambda f: f[:42] + bytes([0xFF]) + f[43:], "is not a valid reserved operation", 42),
        (lambda f: f[:12] + b"\x81\x00" + b"\x00\x01\x81\x00" * 2 + b"\x00\x01" + f[12:], "more than 2 VLAN tags",
         22),
        (lambda f: f[:12] + b"\x88\x08\x00\x07", "MAC control opcode 0x0007", 14),
    ],
)
def test_malformed_frames_raise_packet_error_with_offset(mutate, reason: str, offset: int) -> None:  # type: ignore[no-untyped-def]
    frame = roce_bytes(opcode=Opcode.SEND_ONLY, payload=b"abcdefgh", **COMMON)
    with pytest.raises(PacketError) as info:
        parse_frame(mutate(frame))
    assert reason in info.value.reason
    assert info.value.offset == offset


def test_unpadded_payload_is_rejected() -> None:
    from scapy.packet import Raw

    pkt = roce_frame(opcode=Opcode.SEND_ONLY, payload=b"abcd", **COMMON)  # type: ignore[arg-type]
    pkt[Raw].load = b"abcde"
    with pytest.raises(PacketError) as info:
        parse_frame(bytes(pkt))
    assert "payload and pad of 5 bytes is not a multiple of 4" in info.value.reason
    assert info.value.offset == 14 + 20 + 8 + 12


def test_every_truncation_of_a_valid_frame_is_a_clean_error() -> None:
    frame = roce_bytes(opcode=Opcode.RDMA_READ_REQUEST, vlan=100, reth={"va": 1, "rkey": 2, "dlen": 3},
                       **COMMON)
    errors = 0
    for n in range(len(frame)):
        try:
            parse_frame(frame[:n])
        except PacketError:
            errors += 1
    assert errors == len(frame)  # no prefix of a RoCE frame is a complete frame


def test_opcode_tables() -> None:
    assert extension_headers(Opcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE) == ("reth", "immdt")
    assert extension_headers(Opcode.UD_SEND_ONLY) == ("deth",)
    assert extension_headers(0x2A) == ("reth",)  # UC RDMA WRITE ONLY
    for bad in (0x2C, 0x40, 0x18, 0xFF):
        with pytest.raises(PacketError):
            extension_headers(bad)
    assert is_request(Opcode.SEND_ONLY) and is_request(Opcode.RDMA_READ_REQUEST)
    assert not is_request(Opcode.ACKNOWLEDGE) and not is_request(Opcode.RDMA_READ_RESPONSE_ONLY)
    assert roce_mtu(1500) == 1024 and roce_mtu(9000) == IB_MTUS[-1]
