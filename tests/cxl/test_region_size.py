"""A CXL region's size, judged from outside fakehw's model: the kernel's cxl_test numbers and ndctl's arithmetic,
read through the real ``cxl list`` on the node's live ``/sys``.

- cxl_test's firmware region is 512 MiB over two devices (tools/testing/cxl/test/cxl.c, mock_init_hdm_decoder:
  ``size = SZ_512M``, 2 ways, each endpoint decoder reserving ``size / interleave_ways`` of DPA);
- a region ``cxl create-region`` makes without ``-s`` is ndctl's ``ep_min_size x ways`` (the smallest target's
  capacity of the mode, from ``cxl list -M``), cut to the root decoder's ``max_available_extent`` aligned down to
  ``256 MiB x ways`` (cxl/region.c create_region);
- the kernel's invariants as ``cxl list`` shows them: ``size = ways x dpa_size`` of every endpoint decoder in the
  region (cxl_region_attach refuses anything else), a multiple of 256 MiB per way (alloc_hpa), inside its root
  decoder's range.

If the renderer or the state machine got a size, an offset or a DPA reservation wrong, one of these fails.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakehw.livefs import unavailable
from testbed.api import Testbed

ROOT = Path(__file__).resolve().parents[2]
CXL = ROOT / ".cache/ndctl-81/bin/cxl"
NODE = "cxl-test-0"
MiB = 2**20

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or unavailable() is not None or not CXL.exists(),
                                reason="needs root, FUSE (a live /sys) and ndctl v81 (tools/install-system-deps.sh)")


@pytest.fixture(scope="module")
def tb(testbed_state_dir: Path) -> Iterator[Testbed]:
    cluster = Testbed.up("cxl-test", name="cxl-size", state_dir=testbed_state_dir)
    yield cluster
    cluster.down()


def cxl(tb: Testbed, *args: str) -> Any:
    done = tb.exec(NODE, [str(CXL), *args], timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    out = done.stdout.decode().strip()
    return json.loads(out) if out.startswith(("[", "{")) else out


def _one(listing: Any) -> dict[str, Any]:
    return listing if isinstance(listing, dict) else listing[0]


def check_geometry(tb: Testbed, region: str) -> dict[str, Any]:
    """The kernel's invariants for ``region`` as cxl list shows them; returns the region's listing."""
    r = _one(cxl(tb, "list", "-R", "-r", region))
    ways, size = r["interleave_ways"], r["size"]
    decoders = cxl(tb, "list", "-D", "-d", "endpoint", "-r", region)
    assert len(decoders) == ways, decoders
    assert {d["dpa_size"] for d in decoders} == {size // ways}  # every target holds size / ways of DPA
    assert size % (256 * MiB * ways) == 0
    root = next(d for d in cxl(tb, "list", "-D", "-d", "root") if d["decoder"] == _root_of(tb, region))
    assert root["resource"] <= r["resource"] and r["resource"] + size <= root["resource"] + root["size"]
    return r


def _root_of(tb: Testbed, region: str) -> str:
    for d in cxl(tb, "list", "-D", "-d", "root", "-R"):
        if any(r["region"] == region for r in d.get("regions:" + d["decoder"], [])):
            return str(d["decoder"])
    raise AssertionError(f"no root decoder lists {region}")


def test_the_firmware_region_is_cxl_tests_512_mib_over_two_devices(tb: Testbed) -> None:
    r = check_geometry(tb, "region0")
    assert (r["size"], r["interleave_ways"], r["interleave_granularity"]) == (512 * MiB, 2, 4096)


def test_a_region_cxl_create_region_sizes_is_ndctls_arithmetic(tb: Testbed) -> None:
    root = next(d for d in cxl(tb, "list", "-D", "-d", "root") if d.get("pmem_capable") and d["nr_targets"] == 2)
    ways = root["nr_targets"]
    mems = [_under(tb, root["decoder"], pos) for pos in range(ways)]  # one per host bridge, in position order
    listed = {m["memdev"]: m for m in cxl(tb, "list", "-M", "-m", ",".join(mems))}
    expected = min(listed[m]["pmem_size"] for m in mems) * ways
    if expected > root["max_available_extent"]:
        align = 256 * MiB * ways
        expected = root["max_available_extent"] // align * align
    made = _one(cxl(tb, "create-region", "-t", "pmem", "-d", root["decoder"], "-m", *mems))
    try:
        assert made["size"] == expected
        assert check_geometry(tb, made["region"])["size"] == expected
    finally:
        cxl(tb, "destroy-region", "-f", made["region"])


def _under(tb: Testbed, decoder: str, position: int) -> str:
    """The first memdev below the host bridge at ``position`` of a root decoder (as the ndctl tests pick them)."""
    target = next(t["target"] for t in _one(cxl(tb, "list", "-T", "-d", decoder))["targets"]
                  if t["position"] == position)
    return str(cxl(tb, "list", "-M", "-p", target)[0]["memdev"])
