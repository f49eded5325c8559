"""Where throwaway clusters go (testbed.cluster.scratch_dir): a cluster whose components run in a node view is
kept off a file system mounted nodev or noexec (its node's device files and programs must work there); under
/dev/shm is fine, since the view binds what lies there again (testbed.nodeview.kept_paths); everything else goes
where it is told."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.cluster import scratch_base, scratch_dir


@pytest.fixture(autouse=True)
def no_scratch_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKEHW_SCRATCH_DIR", raising=False)


def mounted_with(monkeypatch: pytest.MonkeyPatch, flags: dict[str, int]) -> None:
    """Make ``os.statvfs`` report ``flags`` for the given paths (this machine mounts nothing nodev or noexec)."""
    real = os.statvfs

    def statvfs(path: str) -> os.statvfs_result:
        got = real(path)
        if str(path) not in flags:
            return got
        fields = list(got)
        fields[8] = flags[str(path)]  # f_flag
        return os.statvfs_result(fields)

    monkeypatch.setattr(os, "statvfs", statvfs)


@pytest.mark.parametrize("flag", [os.ST_NODEV, os.ST_NOEXEC, os.ST_NODEV | os.ST_NOEXEC])
def test_a_node_view_cluster_falls_back_from_a_base_without_devices_or_programs(
        flag: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node's rendered dev holds real character devices (fakehw/sysfs/tree.py mknod), which a nodev mount
    refuses to open (mount(8): nodev), and its components may run from the cluster (noexec)."""
    mounted_with(monkeypatch, {str(tmp_path): flag})
    assert scratch_base(str(tmp_path), for_node_view=True) == "/tmp"
    assert scratch_base(str(tmp_path)) == str(tmp_path)


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or os.statvfs("/dev/shm").f_flag & (os.ST_NODEV | os.ST_NOEXEC),
                    reason="no /dev/shm that allows devices and programs here")
@pytest.mark.parametrize("base", ["/dev/shm", "/dev/shm/clusters"])
def test_a_node_view_cluster_keeps_a_base_under_dev_shm(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The view binds what its components use under /dev/shm again at its own path (testbed.nodeview.kept_paths,
    tests/testbed/test_nodeview.py shows pynvml answering from such a cluster)."""
    assert scratch_base(base, for_node_view=True) == base
    assert scratch_base(base) == base


def test_the_environment_base_is_judged_the_same_way(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FAKEHW_SCRATCH_DIR", str(tmp_path))
    mounted_with(monkeypatch, {str(tmp_path): os.ST_NODEV})
    assert scratch_base(for_node_view=True) == "/tmp"
    assert scratch_base() == str(tmp_path)


def test_a_link_is_judged_by_where_it_leads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """statvfs follows the link: the file system that counts is the one the directory is made on."""
    target = tmp_path / "nodev"
    target.mkdir()
    link = tmp_path / "shm"
    link.symlink_to(target)
    real = os.statvfs

    def statvfs(path: str) -> os.statvfs_result:
        got = real(path)
        if os.path.realpath(path) != str(target):
            return got
        fields = list(got)
        fields[8] = os.ST_NODEV
        return os.statvfs_result(fields)

    monkeypatch.setattr(os, "statvfs", statvfs)
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
    mounted_with(monkeypatch, {str(tmp_path): os.ST_NODEV})
    moved = scratch_dir("fhw-t-", for_node_view=True)
    try:
        assert moved.parent == Path("/tmp")
    finally:
        os.rmdir(moved)
