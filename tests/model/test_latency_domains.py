"""Memory-pool latency domains: one order, by rank and by nanoseconds, as documented and as the hardware reference
puts the tiers (reference/hardware.md, "Memory tiers"; a GPU's view: CXL memory is reached over PCIe)."""

from __future__ import annotations

import re
from pathlib import Path

from fakehw.model.expand import LATENCY_DOMAINS

REFERENCE_NS = {  # (low, high) from reference/hardware.md
    "hbm": (300, 500),
    "c2c": (0, 1000),
    "nvlink": (1000, 2000),
    "cxl": (2000 + 170, 5000 + 250),  # PCIe round trip 2-5 us + the CXL device's 170-250 ns
    "cxl-switched": (2000 + 170 + 100, 5000 + 250 + 100),
    "rdma": (1000, 5000),
}


def test_rank_and_nanoseconds_give_one_order() -> None:
    by_rank = sorted(LATENCY_DOMAINS.values(), key=lambda d: d.rank)
    by_ns = sorted(LATENCY_DOMAINS.values(), key=lambda d: d.latency_ns)
    assert [d.name for d in by_rank] == [d.name for d in by_ns]
    for domain in LATENCY_DOMAINS.values():
        low, high = REFERENCE_NS[domain.name]
        assert low <= domain.latency_ns <= high, domain


def test_the_documented_order_is_the_models() -> None:
    text = (Path(__file__).parents[2] / "docs" / "profiles.md").read_text()
    line = " ".join(text[text.index("**Memory pools**"):].split("\n\n")[0].split())
    documented = re.findall(r"`([a-z0-9-]+)` \(", line)
    assert documented == [d.name for d in sorted(LATENCY_DOMAINS.values(), key=lambda d: d.rank)]
