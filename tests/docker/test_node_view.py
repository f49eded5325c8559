"""A docker node shows the same node as local ``testbed exec``: the live /sys, /dev, /proc/driver (issue #14).

The local backend's view (a private mount namespace over the node's tree, :mod:`testbed.nodeview`) is what the
tools were checked against (HOST.md: numactl, ``cxl``/``daxctl``, NVIDIA's plugin, nvidia-smi read the fake tree
there). A docker node must print the same for the same profile, byte for byte, with its container's own POSIX
message-queue mount (``/dev/mqueue``) the only extra; and the view must be the node's, checked against the
kernel's ABI rather than against itself: every CXL memdev's ``dev`` attribute names the character device
``/dev/cxl/memN`` carries, every GPU of the model has its ``/proc/driver/nvidia/gpus/<bdf>`` directory. Runtime
changes show at once in both, and a write from inside the container reaches the node's agent with the kernel's
answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from fakehw import livefs
from testbed import Testbed, nodeview

Factory = Callable[..., Testbed]

PROBE = r"""
echo "## ls"; ls /sys /sys/kernel /sys/dev /sys/dev/char
echo "## dev"; ls /dev | grep -vx mqueue
for d in /dev/cxl /dev/infiniband /dev/nvidia-caps /dev/dax* /dev/nvidia-uvm /dev/nvidiactl; do
  [ -e "$d" ] && find "$d" -exec stat -c '%n %F %t:%T %a' {} + | sort
done
echo "## driver"; find /proc/driver/nvidia | sort; cat /proc/driver/nvidia/gpus/*/information
echo "## cxl"; for m in /sys/bus/cxl/devices/*; do echo "$m $(readlink $m/driver) $(cat $m/dev 2>/dev/null)"; done
echo "## char"; for c in /sys/dev/char/*; do echo "$c -> $(readlink $c)"; done
echo "## infiniband"; ls /sys/class/infiniband /sys/class/infiniband_verbs
echo "## numa"; cat /sys/devices/system/node/online /sys/devices/system/node/node*/cpulist
echo "## pci"; for p in /sys/bus/pci/devices/*; do echo "$p $(cat $p/numa_node) $(cat $p/vendor):$(cat $p/device)"; done
echo "## proc"; grep -c processor /proc/cpuinfo; head -1 /proc/meminfo; grep -i "cxl\|dax\|nvidia" /proc/devices
"""


@pytest.fixture(autouse=True)
def _views_can_be_made() -> None:
    why = nodeview.unavailable() or livefs.unavailable()
    if why is not None:
        pytest.skip(f"neither backend can show the node's live tree here: {why}")


def _view(tb: Testbed, node: str) -> str:
    done = tb.exec(node, ["sh", "-c", PROBE], timeout=120)
    return done.stdout.decode() + done.stderr.decode()


def _section(text: str, name: str) -> list[str]:
    return text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0].splitlines()


def _same_node(local: Testbed, docker: Testbed) -> str:
    """The docker node prints what the local one prints, and that is the node's; returns what it printed."""
    node = local.system.nodes[0]
    want, got = _view(local, node.name), _view(docker, node.name)
    assert got == want
    # The node's, by the kernel's ABI and the model (not a view compared with a copy of itself):
    assert _section(got, "ls")[:7] == ["/sys:", "bus", "class", "dev", "devices", "kernel", "module"]
    gpus = {line.split("/")[-1] for line in _section(got, "driver") if re.search(r"/gpus/[^/]+$", line)}
    assert gpus == {str(g.address).lower() for g in node.gpus} and gpus
    devices = dict(re.findall(r"^/dev/cxl/(mem\d+) character special file (\w+:\w+) 600$", got, re.M))
    attrs = dict(re.findall(r"^/sys/bus/cxl/devices/(mem\d+) \S* (\d+:\d+)$", got, re.M))
    assert {m: ":".join(str(int(x, 16)) for x in mm.split(":")) for m, mm in devices.items()} == attrs
    if node.cxl.memdevs:
        assert set(attrs) == {m["memdev"] for m in docker.agent(node.name).cxl(node.name)["memdevs"]}
    else:
        assert not attrs and any(line.startswith("/dev/infiniband/uverbs") for line in got.splitlines())
    return got


def test_a_docker_gpu_node_prints_what_local_exec_prints(docker_testbed: Factory, testbed_factory: Factory) -> None:
    _same_node(testbed_factory("dgx-h100"), docker_testbed("dgx-h100"))


def test_a_docker_cxl_node_prints_what_local_exec_prints_also_after_changes_and_writes_from_inside(
        docker_testbed: Factory, testbed_factory: Factory) -> None:
    local, docker = testbed_factory("cxl-pool"), docker_testbed("cxl-pool")
    assert len(re.findall(r"^/dev/cxl/mem", _same_node(local, docker), re.M)) == 13  # 8 memdevs, 4 LDs, 1 DCD
    node = local.system.nodes[0].name
    for tb in (local, docker):
        assert tb.agent(node).memdev_online(node, "mem4", False)["changed"]
    offline = _same_node(local, docker)
    assert not re.search(r"^/sys/bus/cxl/devices/mem4 \S", offline, re.M)  # unbound: no driver link

    bind = "echo mem4 > /sys/bus/cxl/drivers/cxl_mem/bind && readlink /sys/bus/cxl/devices/mem4/driver"
    done = docker.exec(node, ["sh", "-c", bind], timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip().endswith("/bus/cxl/drivers/cxl_mem")
    mem4 = next(m for m in docker.agent(node).cxl(node)["memdevs"] if m["name"] == "mem4")
    assert mem4["online"]
    # A write the kernel refuses fails the same way in both, and changes nothing.
    refused = "echo mem99 > /sys/bus/cxl/drivers/cxl_mem/bind; echo status=$?"
    answers = [tb.exec(node, ["sh", "-c", refused], timeout=60) for tb in (local, docker)]
    assert answers[0].stdout == answers[1].stdout == b"status=1\n"  # the write failed, as the kernel fails it
    assert answers[0].stderr == answers[1].stderr != b"", answers
