"""Where throwaway clusters go (testbed.cluster.scratch_dir): a cluster whose components run in a node view is
kept out of the host's ``/dev``, which the view replaces with the node's own; everything else goes where it is
told. The device-plugin suite failed every requirement with "Driver Not Loaded" when its cluster sat in /dev/shm."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.cluster import scratch_base, scratch_dir


@pytest.fixture(autouse=True)
def no_scratch_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKEHW_SCRATCH_DIR", raising=False)


@pytest.mark.parametrize("base", ["/dev/shm", "/dev", "/dev/shm/clusters"])
def test_a_node_view_cluster_falls_back_outside_dev(base: str) -> None:
    assert scratch_base(base, for_node_view=True) == "/tmp"


@pytest.mark.parametrize("base", ["/dev/shm", "/dev/shm/clusters"])
def test_other_clusters_keep_a_base_under_dev(base: str) -> None:
    assert scratch_base(base) == base


def test_the_environment_base_is_judged_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKEHW_SCRATCH_DIR", "/dev/shm")
    assert scratch_base(for_node_view=True) == "/tmp"
    assert scratch_base() == "/dev/shm"


def test_a_link_into_dev_is_under_dev(tmp_path: Path) -> None:
    link = tmp_path / "shm"
    link.symlink_to("/dev/shm")
    assert scratch_base(str(link), for_node_view=True) == "/tmp"
    assert scratch_base(str(link)) == str(link)


@pytest.mark.parametrize("base", ["/devices", "/srv/dev", "/tmp/x"])
def test_a_node_view_cluster_keeps_a_base_outside_dev(base: str) -> None:
    assert scratch_base(base, for_node_view=True) == base


def test_default_is_tmp() -> None:
    assert scratch_base() == scratch_base(for_node_view=True) == "/tmp"


def test_scratch_dir_makes_a_private_directory_under_the_chosen_base(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKEHW_SCRATCH_DIR", str(tmp_path))
    kept = scratch_dir("fhw-t-", for_node_view=True)
    assert kept.parent == tmp_path and kept.name.startswith("fhw-t-") and kept.stat().st_mode & 0o777 == 0o700
    monkeypatch.setenv("FAKEHW_SCRATCH_DIR", "/dev/shm")
    moved = scratch_dir("fhw-t-", for_node_view=True)
    try:
        assert moved.parent == Path("/tmp")
    finally:
        os.rmdir(moved)
