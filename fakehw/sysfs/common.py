"""Small formatting helpers shared by the sysfs/procfs sections: CPU masks as the kernel prints them, meminfo lines."""

from __future__ import annotations

from collections.abc import Iterable


def cpumask(cpus: Iterable[int], nbits: int) -> str:
    """A kernel bitmap (``%*pb``): 32-bit hex words, most significant first, comma separated, ``nbits`` wide.

    The first word is as wide as the bits left over (``3`` for two CPUs), the others are 8 digits.
    """
    value = 0
    for c in cpus:
        value |= 1 << c
    nbits = max(1, nbits)
    words = (nbits + 31) // 32
    parts = []
    for i in range(words - 1, -1, -1):
        chunk = (value >> (32 * i)) & 0xFFFFFFFF
        width = (nbits % 32 + 3) // 4 if i == words - 1 and nbits % 32 else 8
        parts.append(f"{chunk:0{width}x}")
    return ",".join(parts)


RISCV_MMU = "sv57"
"""The paging mode the RISC-V hosts' kernel runs (the widest their harts have): /proc/cpuinfo's ``mmu`` line, and what
sizes the kernel's vmalloc area."""


def kb(size: int) -> int:
    return size // 1024


def page_size(arch: str) -> int:
    """The kernel's base page size in bytes: 4 KiB on x86-64 (its only one) and riscv64; the arm64 nodes (Grace)
    run a kernel built with 64 KiB pages, as NVIDIA recommends for Grace and its distributions ship (``-64k``)."""
    return 65536 if arch == "arm64" else 4096


def hugepage_sizes_kb(arch: str) -> tuple[int, ...]:
    """The huge page sizes the kernel offers (``hugepages-<size>kB``), smallest first; the default one
    (``Hugepagesize`` in meminfo, no ``default_hugepagesz=``) is the PMD size, :func:`default_hugepage_kb`.

    x86-64 and riscv64 (4 KiB pages): 2 MiB (PMD) and 1 GiB (PUD; x86 with pdpe1gb). arm64 with the 64 KiB
    granule of :func:`page_size` (Documentation/arch/arm64/hugetlbpage.rst, its table for 64K): 2 MiB (contiguous
    PTEs), 512 MiB (PMD) and 16 GiB (contiguous PMDs); 1 GiB does not exist there."""
    return (2048, 524288, 16777216) if page_size(arch) == 65536 else (2048, 1048576)


def default_hugepage_kb(page: int) -> int:
    """The default huge page size in kB for a kernel of base page size ``page`` (bytes): the PMD size
    (hugetlbpage.rst: HPAGE_SIZE unless ``default_hugepagesz=``), 2 MiB with 4 KiB pages, 512 MiB with arm64's
    64 KiB granule."""
    return 524288 if page == 65536 else 2048


def meminfo_line(label: str, value: int, prefix: str = "", unit: bool = True) -> str:
    """One meminfo line: label padded to 16 columns, the value right-aligned in 8, then ``kB``."""
    return f"{prefix}{label + ':':<16}{value:>8}" + (" kB" if unit else "") + "\n"
