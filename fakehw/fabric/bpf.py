"""A tiny eBPF toolchain for one job: flip one random bit in a random fraction of frames (honest corruption).

This kernel has no ``sch_netem`` and no tc ``pedit`` action, but it has ``cls_bpf``. A direct-action classifier
program can draw a random number per frame, pick a random byte of the frame beyond the Ethernet header and flip a
random bit of it - what ``netem corrupt`` does - and count what it did in an array map. There is no compiler on
the machine, so the program is assembled here from its instructions (a few dozen), loaded with the ``bpf(2)``
system call and attached with pyroute2. The verifier's log is part of any load error.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from dataclasses import dataclass

BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "riscv64": 280}
BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_PROG_LOAD = 0, 1, 5
BPF_PROG_TYPE_SCHED_CLS = 3
BPF_MAP_TYPE_ARRAY = 2
BPF_PSEUDO_MAP_FD = 1

# instruction classes, sizes, modes, operations
LD, LDX, STX, ALU64, JMP = 0x00, 0x01, 0x03, 0x07, 0x05
W, B, DW = 0x00, 0x10, 0x18
IMM, MEM = 0x00, 0x60
K, X = 0x00, 0x08
ADD, SUB, AND, LSH, MOD, XOR, MOV = 0x00, 0x10, 0x50, 0x60, 0x90, 0xA0, 0xB0
JNE, JGE, JSLE, CALL, EXIT = 0x50, 0x30, 0xD0, 0x80, 0x90
XADD = 0xC0  # atomic add (BPF_ATOMIC mode with imm BPF_ADD)

FN_MAP_LOOKUP_ELEM, FN_SKB_STORE_BYTES, FN_GET_PRANDOM_U32, FN_SKB_LOAD_BYTES = 1, 9, 7, 26
TC_ACT_OK = 0
RATE_SCALE = 1 << 20


class BpfError(OSError):
    """Loading or using an eBPF object failed; the message includes the verifier's log when there is one."""


@dataclass(frozen=True, slots=True)
class Insn:
    code: int
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0

    def pack(self) -> bytes:
        return struct.pack("<BBhi", self.code, (self.src << 4) | self.dst, self.off, self.imm)


def _syscall(cmd: int, attr: bytes) -> int:
    number = BPF_SYSCALL.get(platform.machine())
    if number is None:
        raise BpfError(0, f"no bpf(2) syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(number, cmd, buf, len(attr))
    if fd < 0:
        err = ctypes.get_errno()
        raise BpfError(err, os.strerror(err))
    return int(fd)


def create_counter_map(slots: int = 2) -> int:
    """An array map of ``slots`` u64 counters; returns its fd."""
    attr = struct.pack("=IIIII", BPF_MAP_TYPE_ARRAY, 4, 8, slots, 0).ljust(128, b"\0")
    try:
        return _syscall(BPF_MAP_CREATE, attr)
    except BpfError as exc:
        raise BpfError(exc.errno or 0, f"cannot create a BPF map: {exc.strerror}") from None


def read_counter(map_fd: int, slot: int) -> int:
    key = ctypes.c_uint32(slot)
    value = ctypes.c_uint64(0)
    attr = struct.pack("=IIQQ", map_fd, 0, ctypes.addressof(key), ctypes.addressof(value)).ljust(128, b"\0")
    _syscall(BPF_MAP_LOOKUP_ELEM, attr)
    return int(value.value)


def load_program(insns: list[Insn], name: str = "fakehw") -> int:
    """Load a SCHED_CLS program; returns its fd. BpfError carries the verifier's complaint."""
    code = b"".join(i.pack() for i in insns)
    code_buf = ctypes.create_string_buffer(code, len(code))
    license_buf = ctypes.create_string_buffer(b"Apache-2.0")

    def attempt(log_size: int) -> tuple[int, str]:
        log = ctypes.create_string_buffer(max(log_size, 1))
        attr = struct.pack("=IIQQIIQII16s", BPF_PROG_TYPE_SCHED_CLS, len(insns), ctypes.addressof(code_buf),
                           ctypes.addressof(license_buf), 1 if log_size else 0, log_size,
                           ctypes.addressof(log) if log_size else 0, 0, 0, name.encode()[:15]).ljust(128, b"\0")
        try:
            return _syscall(BPF_PROG_LOAD, attr), ""
        except BpfError as exc:
            return -(exc.errno or 1), log.value.decode(errors="replace").strip()

    fd, _ = attempt(0)
    if fd >= 0:
        return fd
    _, text = attempt(1 << 20)  # again, to get the verifier's explanation
    raise BpfError(-fd, f"the kernel refused the eBPF program: {os.strerror(-fd)}"
                        + (f"\n{text[-2000:]}" if text else ""))


def _map_fd_load(dst: int, map_fd: int) -> list[Insn]:
    """ld_imm64 dst = map (a two-slot instruction)."""
    return [Insn(LD | DW | IMM, dst, BPF_PSEUDO_MAP_FD, 0, map_fd), Insn(0, 0, 0, 0, 0)]


def _count(map_fd: int, slot: int) -> list[Insn]:
    """counters[slot] += 1 (clobbers r0-r5; key on the stack at r10-16)."""
    return [
        Insn(0x62, 10, 0, -16, slot),                    # *(u32 *)(r10 - 16) = slot   (ST | MEM | W)
        *_map_fd_load(1, map_fd),
        Insn(ALU64 | MOV | X, 2, 10), Insn(ALU64 | ADD | K, 2, 0, 0, -16),
        Insn(JMP | CALL, imm=FN_MAP_LOOKUP_ELEM),
        Insn(JMP | 0x10 | K, 0, 0, 2, 0),                # if r0 == 0 goto +2
        Insn(ALU64 | MOV | K, 1, 0, 0, 1),
        Insn(STX | DW | XADD, 0, 1, 0, 0),               # lock *(u64 *)(r0 + 0) += r1
    ]


def corrupt_program(rate: float, map_fd: int) -> list[Insn]:
    """With probability ``rate`` flip one random bit of one random byte after the Ethernet header.

    counters[0]: frames seen; counters[1]: frames corrupted."""
    threshold = round(rate * RATE_SCALE)
    body: list[Insn] = [
        Insn(ALU64 | MOV | X, 6, 1),                     # r6 = skb
        *_count(map_fd, 0),
        Insn(JMP | CALL, imm=FN_GET_PRANDOM_U32),
        Insn(ALU64 | AND | K, 0, 0, 0, RATE_SCALE - 1),
    ]
    tail: list[Insn | None] = [
        Insn(JMP | CALL, imm=FN_GET_PRANDOM_U32),
        Insn(ALU64 | MOV | X, 7, 0),                     # r7 = random
        Insn(LDX | MEM | W, 2, 6, 0, 0),                 # r2 = skb->len
        Insn(ALU64 | SUB | K, 2, 0, 0, 14),
        None,                                            # if r2 s<= 0 goto pass (patched below)
        Insn(ALU64 | MOD | X, 7, 2),                     # r7 %= r2
        Insn(ALU64 | ADD | K, 7, 0, 0, 14),              # r7 = offset in [14, len)
        Insn(ALU64 | MOV | X, 1, 6), Insn(ALU64 | MOV | X, 2, 7),
        Insn(ALU64 | MOV | X, 3, 10), Insn(ALU64 | ADD | K, 3, 0, 0, -8), Insn(ALU64 | MOV | K, 4, 0, 0, 1),
        Insn(JMP | CALL, imm=FN_SKB_LOAD_BYTES),
        None,                                            # if r0 != 0 goto pass (patched below)
        Insn(JMP | CALL, imm=FN_GET_PRANDOM_U32),
        Insn(ALU64 | AND | K, 0, 0, 0, 7),
        Insn(ALU64 | MOV | K, 8, 0, 0, 1),
        Insn(ALU64 | LSH | X, 8, 0),                     # r8 = 1 << (random & 7)
        Insn(LDX | MEM | B, 9, 10, -8, 0),
        Insn(ALU64 | XOR | X, 9, 8),
        Insn(STX | MEM | B, 10, 9, -8, 0),               # the byte, one bit flipped
        Insn(ALU64 | MOV | X, 1, 6), Insn(ALU64 | MOV | X, 2, 7),
        Insn(ALU64 | MOV | X, 3, 10), Insn(ALU64 | ADD | K, 3, 0, 0, -8), Insn(ALU64 | MOV | K, 4, 0, 0, 1),
        Insn(ALU64 | MOV | K, 5, 0, 0, 0),
        Insn(JMP | CALL, imm=FN_SKB_STORE_BYTES),
        Insn(JMP | 0x10 | K, 0, 0, 0, 0),                # placeholder: if r0 == 0 goto count (patched)
    ]
    count = _count(map_fd, 1)
    finish = [Insn(ALU64 | MOV | K, 0, 0, 0, TC_ACT_OK), Insn(JMP | EXIT)]
    # layout: body, [if r0 >= threshold goto pass], tail, [goto pass], count, pass: finish
    gate_at = len(body)
    tail_start = gate_at + 1
    tail_end = tail_start + len(tail)
    pass_at = tail_end + 1 + len(count)
    program: list[Insn | None] = [*body, None, *tail, None, *count, *finish]

    def jump(at: int, to: int, code: int, dst: int, imm: int) -> Insn:
        return Insn(code, dst, 0, to - at - 1, imm)

    program[gate_at] = jump(gate_at, pass_at, JMP | JGE | K, 0, threshold)
    skip_short = tail_start + tail.index(None)
    program[skip_short] = jump(skip_short, pass_at, JMP | JSLE | K, 2, 0)
    load_failed = tail_start + [i for i, x in enumerate(tail) if x is None][1]
    program[load_failed] = jump(load_failed, pass_at, JMP | JNE | K, 0, 0)
    stored = tail_end - 1
    program[stored] = jump(stored, tail_end + 1, JMP | 0x10 | K, 0, 0)   # stored fine: go count it
    program[tail_end] = jump(tail_end, pass_at, JMP, 0, 0)                # store failed: pass uncounted
    assert all(i is not None for i in program)
    return [i for i in program if i is not None]
