"""MIG geometry against what real A100/H100 drivers print: placements, GPU instance ids, boot configurations.

Expected values are real outputs, not recomputations:

- ``nvidia-smi mig -lgipp`` on A100/H100 (NVIDIA MIG user guide, "Supported MIG Profiles" and "List GPU Instance
  Profiles"): 1g ``{0,1,2,3,4,5,6}:1``, 1g.20gb ``{0,2,4,6}:2``, 2g ``{0,2,4}:2``, 3g ``{0,4}:4``, 4g ``{0}:4``,
  7g ``{0}:8``;
- ``nvidia-smi mig -cgi 19,19,19,19,19,19,19`` on a fresh A100 40GB printed GPU instance ids 9, 7, 8, 11, 12, 13, 14
  (rapidsai/dask-cuda#583);
- ``nvidia-smi mig -cgi 9,3g.20gb`` printed ids 2 then 1, and ``-lgi`` placements 0:4 for id 2, 4:4 for id 1 (MIG
  user guide, "Creating GPU Instances");
- ``/proc/driver/nvidia-caps/mig-minors`` names gi0..gi14 (NVIDIA open kernel module, nv-caps.c).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakehw.cli import main as fakehw_main
from fakehw.model.catalogue import catalogue
from fakehw.model.mig import (
    MAX_GPU_INSTANCES,
    ci_profiles,
    gi_block,
    gi_id,
    gi_placements,
    gi_remaining,
    place_in_order,
)
from tests.model.test_validation import SMALL

LGIPP = {"1g.10gb": ((0, 1, 2, 3, 4, 5, 6), 1), "1g.10gb+me": ((0, 1, 2, 3, 4, 5, 6), 1),
         "1g.20gb": ((0, 2, 4, 6), 2), "2g.20gb": ((0, 2, 4), 2), "3g.40gb": ((0, 4), 4), "4g.40gb": ((0,), 4),
         "7g.80gb": ((0,), 8)}


@pytest.mark.parametrize("sku_id", ["a100-sxm4-80gb", "h100-sxm5-80gb"])
def test_placements_are_the_published_ones(sku_id: str) -> None:
    mig = catalogue().gpus[sku_id].mig
    assert mig is not None
    got = {p.name: (gi_placements(mig, p), p.memory_slices) for p in mig.profiles}
    assert got == LGIPP


def test_default_placements_give_the_ids_real_drivers_print() -> None:
    mig = catalogue().gpus["a100-sxm4-40gb"].mig
    assert mig is not None
    one = mig.profile("1g.5gb")
    three = mig.profile("3g.20gb")
    assert one is not None and three is not None
    assert [gid for _, gid in place_in_order(mig, [one] * 7)] == [9, 7, 8, 11, 12, 13, 14]
    assert place_in_order(mig, [three, three]) == [(0, 2), (4, 1)]


def test_instance_ids_cover_the_fifteen_blocks_once() -> None:
    blocks = [gi_block(i) for i in range(MAX_GPU_INSTANCES)]
    assert len(set(blocks)) == MAX_GPU_INSTANCES
    assert all(gi_id(start, size) == i for i, (start, size) in enumerate(blocks))


def test_remaining_capacity_follows_what_is_taken() -> None:
    mig = catalogue().gpus["h100-sxm5-80gb"].mig
    assert mig is not None
    by = {p.name: p for p in mig.profiles}
    taken = set(range(0, 4))  # a 3g at 0:4
    assert gi_remaining(mig, by["1g.10gb"], taken, 0) == 3  # slices 4, 5, 6
    assert gi_remaining(mig, by["3g.40gb"], taken, 1) == 1
    assert gi_remaining(mig, by["4g.40gb"], taken, 0) == 0
    assert gi_remaining(mig, by["1g.10gb+me"], set(), 1) == 0  # one media-extension instance per GPU


def test_compute_instance_profiles_split_the_gpu_instance() -> None:
    mig = catalogue().gpus["a100-sxm4-40gb"].mig
    assert mig is not None
    three = mig.profile("3g.20gb")
    assert three is not None
    # MIG user guide, "nvidia-smi mig -lcip -gi 1" on an A100 3g.20gb: 1c 0/3 14 SMs, 2c 0/1 28, 3g 0/1 42 (default)
    assert [(c.index, c.name, c.instances, c.multiprocessors, c.full) for c in ci_profiles(three)] == [
        (0, "1c.3g.20gb", 3, 14, False), (1, "2c.3g.20gb", 1, 28, False), (2, "3g.20gb", 1, 42, True)]


@pytest.mark.parametrize(
    ("instances", "message"),
    [
        pytest.param("[3g.40gb, 3g.40gb, 1g.10gb]", "instance 2 (1g.10gb) does not fit", id="no-room"),
        pytest.param("[1g.10gb+me, 1g.10gb+me]", "instance 1 (1g.10gb+me) does not fit", id="one-media-instance"),
        pytest.param("[5g.50gb]", "has no MIG profile '5g.50gb'", id="unknown-profile"),
    ],
)
def test_boot_instances_that_cannot_exist_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      instances: str, message: str) -> None:
    text = SMALL.replace('parent: hb0}', f'parent: hb0, mig: {{instances: {instances}}}}}')
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    assert fakehw_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "groups[0].node.gpus[0].mig" in err and f"{path}:" in err


def test_boot_instances_with_media_extensions_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text(SMALL.replace('parent: hb0}', 'parent: hb0, mig: {instances: [1g.10gb+me, 3g.40gb]}}'))
    assert fakehw_main(["validate", str(path)]) == 0, capsys.readouterr().err
