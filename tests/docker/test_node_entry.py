"""The node image's entrypoint: its configuration, device nodes and links (no Docker needed)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from testbed.node_entry import NVIDIA_MAJOR, NVIDIACTL_MINOR, EntryError, NodeConfig, link_node_dir, make_device_nodes


def test_config_from_env_and_its_errors() -> None:
    env = {"FAKEHW_NODE": "dgx-h100-1", "FAKEHW_PROFILE": "dgx-h100", "FAKEHW_NODE_COUNT": "2",
           "FAKEHW_DEVICE_MINORS": "2, 5", "FAKEHW_AGENT_UID": "1000", "FAKEHW_AGENT_GID": "1000"}
    config = NodeConfig.from_env(env)
    assert config == NodeConfig("dgx-h100-1", "dgx-h100", 2, (2, 5), 1000, 1000)
    assert NodeConfig.from_env({**env, "FAKEHW_DEVICE_MINORS": ""}).minors == ()
    for bad, message in (({"FAKEHW_NODE": ""}, "FAKEHW_NODE and FAKEHW_PROFILE must name"),
                         ({"FAKEHW_DEVICE_MINORS": "two"}, "bad number"),
                         ({"FAKEHW_DEVICE_MINORS": "255"}, "must be 0..254"),
                         ({"FAKEHW_AGENT_UID": "root"}, "bad number")):
        with pytest.raises(EntryError, match=message):
            NodeConfig.from_env({**env, **bad})


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of character devices needs root")
def test_device_nodes_are_exactly_the_given_gpus(tmp_path: Path) -> None:
    os.mknod(tmp_path / "nvidia7", 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, 7))  # from an earlier start
    (tmp_path / "nvidia-uvm").touch()  # not a GPU: left alone
    assert make_device_nodes((2, 5), tmp_path) == ["nvidia2", "nvidia5", "nvidiactl"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nvidia-uvm", "nvidia2", "nvidia5", "nvidiactl"]
    for name, minor in (("nvidia2", 2), ("nvidia5", 5), ("nvidiactl", NVIDIACTL_MINOR)):
        st = os.stat(tmp_path / name)
        assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (NVIDIA_MAJOR, minor)


def test_node_dir_link(tmp_path: Path) -> None:
    target = tmp_path / "agent" / "nodes" / "n0"
    link = tmp_path / "fakehw"
    link.mkdir()  # an empty directory (as an image may have) is replaced
    link_node_dir(link, target)
    assert link.is_symlink() and os.readlink(link) == str(target)
    link_node_dir(link, target)  # again, on a restart
    assert link.is_symlink()
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").touch()
    with pytest.raises(EntryError, match="directory with content"):
        link_node_dir(full, target)
