"""The kernel's memory block size for a node (``/sys/devices/system/memory/block_size_bytes``).

One fact shared by what renders memory blocks (:mod:`fakehw.sysfs.memory`) and what hot-adds CXL memory in them
(:mod:`fakehw.agent.cxlcore`: dax kmem adds and onlines whole blocks): 2 GiB on x86 servers with 64 GiB or more
(arch/x86/mm/init_64.c, probe_memory_block_size), else 128 MiB; 512 MiB on arm64 with 64 KiB pages (its
SECTION_SIZE_BITS of 29; GB200 trays run 64 KiB pages); 128 MiB on riscv64.
"""

from __future__ import annotations

from fakehw.model.system import Node

MiB = 1 << 20
GiB = 1 << 30


def block_size(node: Node) -> int:
    """The kernel's memory block size for the node's architecture (and, on x86, its memory)."""
    if node.cpu.arch == "arm64":
        return 512 * MiB
    if node.cpu.arch == "amd64":
        boot = sum(n.memory for n in node.numa if n.kind in ("dram", "lpddr"))
        return 2 * GiB if boot >= 64 * GiB else 128 * MiB
    return 128 * MiB


def kmem_blocks(start: int, size: int, block: int) -> range:
    """The memory blocks dax kmem hot-adds for ``[start, start + size)``: the range shrunk to whole blocks
    (drivers/dax/kmem.c, dax_kmem_range: start rounded up, end rounded down); empty when no whole block fits, and
    kmem then rejects the device ("rejecting DAX region without any memory after alignment", EINVAL)."""
    return range(-(-start // block), (start + size) // block)
