"""Parsing of the quantities people write in profiles."""

from __future__ import annotations

import pytest

from fakehw.model.units import PciAddress, format_cpulist, format_size, parse_cpulist, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("80GiB", 80 * 2**30), ("81559MiB", 81559 * 2**20), ("1.5TB", 1_500_000_000_000), (4096, 4096), ("512", 512),
     ("2 KiB", 2048)],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["80 gigs", "-1", -5, True, "1.5B", None, [1]])
def test_parse_size_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(bad)


def test_format_size_round_trips() -> None:
    for size in (81559 * 2**20, 2**30, 1536, 7):
        assert parse_size(format_size(size)) == size
    assert format_size(81559 * 2**20) == "81559MiB"


def test_pci_address_forms() -> None:
    addr = PciAddress.parse("0000:1b:00.0")
    assert (addr.domain, addr.bus, addr.device, addr.function) == (0, 0x1B, 0, 0)
    assert str(addr) == "0000:1b:00.0"
    assert addr.nvml_bus_id == "00000000:1B:00.0"
    assert addr.nvml_bus_id_legacy == "0000:1B:00.0"
    assert str(PciAddress.parse("1b:00.1")) == "0000:1b:00.1"
    assert PciAddress.parse("0008:01:00.0").nvml_bus_id == "00000008:01:00.0"


@pytest.mark.parametrize("bad", ["1b:00", "zz:00.0", "0000:1b:20.0", "10000:00:00.0", "0000:1b:00.8", ""])
def test_pci_address_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="PCI"):
        PciAddress.parse(bad)


def test_cpulist_round_trip() -> None:
    cpus = parse_cpulist("0-55,112-167")
    assert len(cpus) == 112 and cpus[0] == 0 and cpus[-1] == 167
    assert format_cpulist(cpus) == "0-55,112-167"
    assert format_cpulist([3]) == "3"
    assert format_cpulist([]) == ""  # a CPU-less node's cpulist
    assert parse_cpulist("") == ()


@pytest.mark.parametrize("bad", ["0-", "a-3", "5-2", "1,,2", "0-70000"])
def test_cpulist_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_cpulist(bad)
