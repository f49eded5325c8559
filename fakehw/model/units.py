"""Quantities that appear in profiles: byte sizes, PCI addresses, CPU lists.

Profiles are written by people, so sizes may be given as ``80GiB`` or ``81559MiB`` and PCI addresses as
``0000:1b:00.0``; everything downstream wants plain integers. Parsing lives here, once, with error messages
that say what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_FACTORS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
    "PIB": 2**50,
}
KiB = 2**10
MiB = 2**20
GiB = 2**30


def parse_size(value: object) -> int:
    """Return a byte count from an int or a string such as ``80GiB``, ``512 MiB`` or ``1.5TB``."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 80GiB or a number of bytes, not a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match:
            number, unit = match.groups()
            size = float(number) * _SIZE_FACTORS[(unit or "B").upper()]
            if size != int(size):
                raise ValueError(f"size {value!r} is not a whole number of bytes")
            return int(size)
    raise ValueError(f"expected a size such as 80GiB, 512MiB or a number of bytes, got {value!r}")


def format_size(size: int) -> str:
    """The shortest exact binary-unit spelling of ``size`` (``81559MiB``, ``2GiB``)."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"


Size = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(format_size, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*([KMGTPkmgtp][iI]?[Bb]|[Bb])?\s*$"},
            ],
            "description": "bytes, or a number with a unit such as 80GiB, 512MiB, 1TB",
        }
    ),
]


@dataclass(frozen=True, slots=True, order=True)
class PciAddress:
    """A PCI function address (domain:bus:device.function)."""

    domain: int
    bus: int
    device: int
    function: int = 0

    _RE = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")

    @classmethod
    def parse(cls, text: str) -> PciAddress:
        match = cls._RE.match(text.strip()) if isinstance(text, str) else None
        if not match:
            raise ValueError(f"expected a PCI address such as 0000:1b:00.0, got {text!r}")
        domain, bus, device, function = match.groups()
        parsed = cls(int(domain or "0", 16), int(bus, 16), int(device, 16), int(function))
        if parsed.domain > 0xFFFF:
            raise ValueError(f"PCI domain of {text!r} is larger than ffff")
        if parsed.device > 0x1F:
            raise ValueError(f"PCI device number of {text!r} is larger than 1f")
        return parsed

    def __str__(self) -> str:
        """The sysfs spelling: ``0000:1b:00.0``."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function}"

    @property
    def nvml_bus_id(self) -> str:
        """NVML's ``busId``: eight hex digits of domain, upper case (``00000000:1B:00.0``)."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function}"

    @property
    def nvml_bus_id_legacy(self) -> str:
        """NVML's ``busIdLegacy``: four hex digits of domain (``0000:1B:00.0``)."""
        return f"{self.domain:04X}:{self.bus:02X}:{self.device:02X}.{self.function}"


def _parse_pci(value: Any) -> PciAddress:
    if isinstance(value, PciAddress):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a PCI address string such as 0000:1b:00.0, got {value!r}")
    return PciAddress.parse(value)


PciAddressField = Annotated[
    PciAddress,
    BeforeValidator(_parse_pci),
    PlainSerializer(str, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^([0-9a-fA-F]{1,8}:)?[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}\.[0-7]$",
            "description": "PCI address, e.g. 0000:1b:00.0",
        }
    ),
]


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a Linux cpulist (``0-55,112-167``) into sorted CPU ids."""
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return ()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"expected a cpu list such as 0-55,112-167, got {text!r}")
        start, end = int(lo), int(hi) if sep else int(lo)
        if end < start:
            raise ValueError(f"range {part!r} in cpu list {text!r} runs backwards")
        if end >= 65536:
            raise ValueError(f"cpu id {end} in {text!r} is implausibly large")
        cpus.update(range(start, end + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPU ids the way the kernel's ``cpulist`` files do (``0-55,112-167``); no CPUs print as an empty
    string, as the kernel does for CPU-less nodes."""
    ordered = sorted(cpus)
    ranges: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)
