"""Raw Ethernet I/O on one interface of a namespace, with 802.1Q tags restored on receive.

Linux strips the VLAN tag of a received frame into packet metadata before AF_PACKET sockets see it; the tag
comes back only as ``PACKET_AUXDATA``. :class:`PacketSocket` puts it back into the bytes, so what a capture returns
is the frame as it was on the wire (PCP, VID and all) - the priority checks depend on that.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

from fakehw.fabric.netns import Netns
from fakehw.fabric.wire import Frame, PacketError, parse_frame

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_AUXDATA = 8
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("qq")
_AUX = struct.Struct("IIIHHHH")
MAX_FRAME = 65536 + 64


class SendError(OSError):
    """The kernel refused to send a frame for a reason other than a drop on the path."""


@dataclass(frozen=True, slots=True)
class Received:
    frame: bytes
    at: float
    """When it was read (monotonic clock), or with ``timestamps`` when the kernel received it (wall clock)."""
    outgoing: bool


class PacketSocket:
    """An AF_PACKET socket bound to ``ifname`` inside ``ns``."""

    def __init__(self, ns: Netns, ifname: str, *, rcvbuf: int = 16 * 2**20, ignore_outgoing: bool = True,
                 timestamps: bool = False) -> None:
        self.ns = ns
        self.ifname = ifname
        sock = ns.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
            if timestamps:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            if ignore_outgoing:
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
                sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 4 * 2**20)
            sock.bind((ifname, ETH_P_ALL))
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self.sock = sock

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> PacketSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, frame: bytes) -> bool:
        """Send one frame. False when the kernel dropped it on the way out (a veth peer refusing it as larger
        than its MTU shows up here as ENOBUFS); SendError for anything else."""
        try:
            self.sock.send(frame)
            return True
        except BlockingIOError:
            select.select([], [self.sock], [], 1.0)
            try:
                self.sock.send(frame)
                return True
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    return False
                raise SendError(exc.errno, f"send on {self.ifname}: {exc.strerror}") from None
        except OSError as exc:
            if exc.errno in (errno.ENOBUFS, errno.ENETDOWN):
                return False
            raise SendError(exc.errno or errno.EIO, f"send {len(frame)} bytes on {self.ifname} in {self.ns.name}: "
                            f"{exc.strerror}") from None

    def _read(self) -> Received | None:
        try:
            data, ancdata, _flags, addr = self.sock.recvmsg(
                MAX_FRAME, socket.CMSG_SPACE(_AUX.size) + socket.CMSG_SPACE(_TIMESPEC.size))
        except (BlockingIOError, InterruptedError):
            return None
        at = time.monotonic()
        for level, kind, cdata in ancdata:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(cdata) >= _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack_from(cdata)
                at = sec + nsec / 1e9
            if level == SOL_PACKET and kind == PACKET_AUXDATA and len(cdata) >= _AUX.size:
                status, _len, _snap, _mac, _net, tci, tpid = _AUX.unpack_from(cdata)
                if status & TP_STATUS_VLAN_VALID:
                    tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID and tpid else 0x8100
                    data = data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
        return Received(data, at, addr[2] == PACKET_OUTGOING)

    def recv(self, timeout: float) -> Received | None:
        """The next frame within ``timeout`` seconds, or None."""
        deadline = time.monotonic() + timeout
        while True:
            got = self._read()
            if got is not None:
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            select.select([self.sock], [], [], left)

    def frames(self, timeout: float) -> Iterator[tuple[Received, Frame]]:
        """Each frame received within ``timeout`` seconds, with its parse; frames that do not parse are skipped."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            got = self.recv(left)
            if got is None:
                return
            try:
                parsed = parse_frame(got.frame)
            except PacketError:
                continue
            yield got, parsed

    def drain(self) -> int:
        """Discard queued frames; returns how many."""
        n = 0
        while self._read() is not None:
            n += 1
        return n
