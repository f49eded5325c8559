"""testbed.nodeview: a command on a local node sees the node at the real paths, judged by real tools.

Expected values are facts about the real machine the profile models (NVIDIA DGX H100 user guide: two Xeon
Platinum 8480C sockets, 2 x 56 cores with SMT = 224 logical CPUs, two NUMA nodes, eight GPUs), read back through
numactl, lscpu, hostname and the device nodes, not recomputed from our model.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed import Testbed, nodeview
from testbed.backends.base import BackendInputError
from tests.scratch import cluster_scratch_base

pytestmark = pytest.mark.skipif(nodeview.unavailable() is not None, reason=f"{nodeview.unavailable()}")


@pytest.fixture(scope="module")
def h100(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A rendered dgx-h100 node root (no agent needed to look at a tree), on tmpfs where device nodes work there
    (tests.scratch.cluster_scratch_base: some 28,000 files; the view binds its root again under /dev/shm)."""
    base = cluster_scratch_base()
    out = Path(tempfile.mkdtemp(prefix="fhw-nvr-", dir=base)) if base else tmp_path_factory.mktemp("render")
    try:
        subprocess.run([sys.executable, "-m", "fakehw.cli", "render", "dgx-h100", "--out", str(out), "-q"],
                       check=True, capture_output=True)
        yield out / "dgx-h100-0" / "root"
    finally:
        if base:
            shutil.rmtree(out, ignore_errors=True)


def run_in(view: nodeview.NodeView, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(nodeview.command(view, ["sh", "-c", script]), capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl is not installed (tools/install-system-deps.sh)")
def test_numactl_lscpu_and_hostname_see_the_node(h100: Path) -> None:
    out = run_in(nodeview.NodeView(root=str(h100)), "numactl -H; echo ===; lscpu; echo ===; hostname")
    assert out.returncode == 0, out.stderr
    numa, cpu, host = out.stdout.split("===\n")
    assert numa.startswith("available: 2 nodes (0-1)")
    assert "CPU(s):                  224" in cpu or "CPU(s):              224" in cpu
    assert "Xeon(R) Platinum 8480C" in cpu
    assert host.strip() == "dgx-h100-0"
    assert os.uname().nodename != "dgx-h100-0", "the hostname changed only inside the view"


def test_dev_has_the_gpus_and_still_works_as_dev(h100: Path) -> None:
    out = run_in(nodeview.NodeView(root=str(h100)),
                 "ls /dev; echo data > /dev/null && echo null-ok; head -c 4 /dev/zero | od -An -tx1; "
                 "test -d /dev/pts && test -w /dev/shm && echo pts-shm-ok; cat /proc/driver/nvidia/version")
    assert out.returncode == 0, out.stderr
    listed = set(out.stdout.split())
    assert {f"nvidia{i}" for i in range(8)} | {"nvidiactl", "nvidia-uvm", "null", "zero", "pts"} <= listed
    assert "null-ok" in out.stdout and "00 00 00 00" in out.stdout and "pts-shm-ok" in out.stdout
    assert "NVRM version: NVIDIA UNIX" in out.stdout


def test_sys_is_the_node_and_refuses_stray_writes(h100: Path) -> None:
    """A rendered tree is not a kernel: a write there would stick, so /sys is read-only unless served live."""
    out = run_in(nodeview.NodeView(root=str(h100)),
                 "cat /sys/bus/pci/devices/*/numa_node | sort -u | tr '\\n' ' '; "
                 "echo 1 > /sys/devices/system/node/node0/cpulist; echo rc=$?")
    assert out.stdout.split()[:2] == ["0", "1"]
    assert "rc=0" not in out.stdout and "Read-only file system" in out.stderr


def test_extra_binds_appear_at_their_targets_and_nothing_leaks(h100: Path, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "kubelet.sock.marker").write_text("here\n")
    target = "/var/lib/kubelet/device-plugins"
    view = nodeview.NodeView(root=str(h100), binds=(nodeview.Bind(str(plugins), target),))
    out = run_in(view, f"cat {target}/kubelet.sock.marker; touch {target}/written")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "here\n" and (plugins / "written").exists()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(h100) not in mounts and str(plugins) not in mounts, "a mount escaped the private namespace"


def test_a_view_that_cannot_be_made_says_which_step(tmp_path: Path, h100: Path) -> None:
    view = nodeview.NodeView(root=str(h100), binds=(nodeview.Bind(str(tmp_path / "absent"), "/mnt/x"),))
    out = run_in(view, "true")
    assert out.returncode == nodeview.EXIT_SETUP
    assert out.stderr.startswith("testbed: cannot show the node's tree at the real paths: mount ")
    assert "/mnt/x" in out.stderr and "Traceback" not in out.stderr
    missing = subprocess.run(nodeview.command(nodeview.NodeView(root=str(h100)), ["no-such-command-xyz"]),
                             capture_output=True, text=True)
    assert missing.returncode == nodeview.EXIT_NOT_FOUND
    assert missing.stderr == "testbed: command not found: no-such-command-xyz\n"


def test_the_plan_mounts_terminals_before_covering_dev(h100: Path) -> None:
    steps = nodeview.plan(nodeview.NodeView(root=str(h100)))
    targets = [s.target for s in steps]
    assert targets.index(str(h100 / "dev" / "pts")) < targets.index("/dev")
    assert targets[:2] == ["/sys", "/sys"] and steps[1].flags & nodeview.MS_RDONLY
    live = nodeview.plan(nodeview.NodeView(root=str(h100), writable_sys=True))
    assert [s.target for s in live].count("/sys") == 1


def test_the_plan_binds_what_lies_under_dev_shm_again_after_covering_dev(tmp_path: Path) -> None:
    """A tree under the host's /dev/shm is hidden once the node's dev covers /dev: its root, its binds' sources
    and the paths the command's environment names come back at their own path (a file's by its directory, the
    outermost only), after /dev and as directories made in the view's own /dev/shm; nothing on disk is added."""
    if not os.path.isdir(nodeview.HOST_SHM) or not os.access(nodeview.HOST_SHM, os.W_OK):
        pytest.skip(f"no writable {nodeview.HOST_SHM} here")
    shm = Path(tempfile.mkdtemp(prefix="fhw-plan-", dir=nodeview.HOST_SHM))
    try:
        node = shm / "nodes" / "n0"
        root, agent, driver = node / "root", shm / "agent", shm / "driver-root"
        for d in (root / "sys", root / "dev", agent, driver):
            d.mkdir(parents=True)
        (node / "nvml.snapshot").write_text("")
        link = tmp_path / "cluster"
        link.symlink_to(shm)  # the caller may name it through a link: what counts is where it resolves to
        view = nodeview.NodeView(root=str(link / "nodes" / "n0" / "root"),
                                 binds=(nodeview.Bind(str(driver), "/driver-root"),
                                        nodeview.Bind(str(tmp_path), "/elsewhere")))
        env = {"FAKEHW_NVML_SNAPSHOT": str(node / "nvml.snapshot"), "FAKEHW_ROOT": str(root),
               "FAKEHW_AGENT_SOCKET": str(agent / "agent.sock"), "LD_LIBRARY_PATH": f"{tmp_path}:{driver}/lib"}
        steps = nodeview.plan(view, env)
        targets = [s.target for s in steps]
        again = [s for s in steps if s.source == s.target]
        assert [s.target for s in again] == sorted([str(agent), str(driver), str(node)])
        assert all(s.make == "dir" and s.flags & nodeview.MS_BIND for s in again)
        assert all(targets.index(s.target) > targets.index("/dev") for s in again)
        assert [s.target for s in nodeview.plan(view) if s.source == s.target] == [str(driver), str(root)]
        assert not any(s.target == str(tmp_path) for s in steps), "a path on disk is never hidden"
        assert not any(s.source == s.target for s in nodeview.plan(nodeview.NodeView(str(root), dev=False), env)), \
            "with the host's /dev in place nothing is hidden"
    finally:
        shutil.rmtree(shm)


@pytest.fixture
def shm_state_dir() -> Iterator[Path]:
    """A cluster state directory on the host's /dev/shm tmpfs (where tests keep big trees), removed after."""
    if not os.path.isdir(nodeview.HOST_SHM) or not os.access(nodeview.HOST_SHM, os.W_OK):
        pytest.skip(f"no writable {nodeview.HOST_SHM} here")
    path = Path(tempfile.mkdtemp(prefix="fhw-nv-", dir=nodeview.HOST_SHM))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def tree_of(top: Path) -> list[str]:
    """Every path below ``top`` (what a mount point made in it would change)."""
    return sorted(os.path.join(d, n) for d, dirs, files in os.walk(top) for n in dirs + files)


PYNVML_AND_SYS = """
import os, pynvml
pynvml.nvmlInit()
print(pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))
print(' '.join(sorted({open(f'/sys/bus/pci/devices/{d}/numa_node').read().strip()
                       for d in os.listdir('/sys/bus/pci/devices')})))
print(' '.join(sorted(d for d in os.listdir('/dev') if d.startswith('nvidia') and d[6:].isdigit())))
"""


def test_a_cluster_kept_under_dev_shm_answers_as_its_node_in_the_view(shm_state_dir: Path) -> None:
    """pynvml through the fake libnvidia-ml, /sys and /dev, run on a local cluster kept on tmpfs under /dev/shm.
    Expected: the machine dgx-h100 models, as a real one reports it: 8 x "NVIDIA H100 80GB HBM3"
    (/work/shared/reference/captures/qx-h100.xml: attached_gpus, product_name), GPUs on NUMA nodes 0 and 1 (the
    DGX H100 user guide: two sockets), device nodes nvidia0-7. Before the view bound /dev/shm paths again,
    NVML said "Driver Not Loaded": the snapshot under /dev/shm was hidden by the node's /dev."""
    tb = Testbed.up("dgx-h100", name="shm", state_dir=shm_state_dir)
    try:
        info = tb.nodes()[0]
        node_dev = info.dir / "root" / "dev"
        before = tree_of(node_dev)
        out = tb.exec(info.name, [sys.executable, "-c", PYNVML_AND_SYS])
        assert out.returncode == 0, out.stderr.decode()
        gpus, numa, devices = out.stdout.decode().splitlines()
        assert gpus == "8 NVIDIA H100 80GB HBM3"
        assert {"0", "1"} <= set(numa.split())
        assert devices.split() == sorted(f"nvidia{i}" for i in range(8))
        assert tree_of(node_dev) == before, "a mount point was made in the node's tree"
        # The directories on the way to what the view binds again show what the host shows (mkdtemp's 0700,
        # Python's tempfile docs): the view's mount points do not open a private directory to other users.
        ways = [p for p in (info.dir / "root").parents if p.is_relative_to(shm_state_dir)]
        shown = tb.exec(info.name, ["stat", "-c", "%n %a %u %g", *map(str, ways)])
        assert shown.returncode == 0, shown.stderr.decode()
        host = [f"{p} {os.stat(p).st_mode & 0o7777:o} {os.stat(p).st_uid} {os.stat(p).st_gid}" for p in ways]
        assert shown.stdout.decode().splitlines() == host
        assert f"{shm_state_dir} 700 " in shown.stdout.decode()
    finally:
        tb.down()


def test_a_program_kept_under_dev_shm_runs_in_the_view_from_where_it_lies(shm_state_dir: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout cloned under /dev/shm runs its own programs in a node view (``make run``'s certification runs the
    checkout's ``.venv/bin/python`` there): the program, what lies beside it and the working directory are where
    the host has them, whether the program is named by its path or found on PATH (execvp, POSIX). Before, the
    node's dev covered /dev/shm and the view said "command not found" (exit 127)."""
    checkout = Path(tempfile.mkdtemp(prefix="fhw-prog-", dir=nodeview.HOST_SHM))
    try:
        (checkout / "bin").mkdir()
        (checkout / "share").mkdir()
        (checkout / "share" / "msg").write_text("beside the program\n")
        program = checkout / "bin" / "hello"
        program.write_text('#!/bin/sh\ncat "$(dirname "$0")/../share/msg"\npwd\n')
        program.chmod(0o755)
        monkeypatch.chdir(checkout / "share")
        tb = Testbed.up("dgx-h100", name="prog", state_dir=shm_state_dir)
        try:
            node = tb.nodes()[0].name
            expected = f"beside the program\n{checkout / 'share'}\n"
            by_path = tb.exec(node, [str(program)])
            assert (by_path.returncode, by_path.stdout.decode()) == (0, expected), by_path.stderr.decode()
            by_name = tb.exec(node, ["hello"], env={"PATH": f"{checkout / 'bin'}:{os.defpath}"})
            assert (by_name.returncode, by_name.stdout.decode()) == (0, expected), by_name.stderr.decode()
        finally:
            tb.down()
    finally:
        shutil.rmtree(checkout)


def test_local_exec_runs_in_the_view(testbed_factory: Callable[..., Testbed]) -> None:
    tb = testbed_factory(profile="dgx-h100")
    node = tb.nodes()[0].name
    inside = tb.exec(node, ["hostname"])
    assert inside.stdout.decode().strip() == node
    outside = tb.exec(node, ["hostname"], host_paths=True)
    assert outside.stdout.decode().strip() == os.uname().nodename
    with pytest.raises(BackendInputError, match="command not found: no-such-command-xyz"):
        tb.exec(node, ["no-such-command-xyz"])


@pytest.mark.skipif(os.geteuid() != 0, reason="making device nodes needs root")
def test_mirror_devices_copies_the_nodes_devices_and_follows_no_link_the_container_planted(tmp_path: Path) -> None:
    """What the docker backend does to a node container's /dev from outside (as root, through /proc/PID/root):
    the node's device files appear, the runtime's own entries and the given GPUs stay, devices the node no longer
    has go, and a directory the container replaced by a link to elsewhere is replaced, never written through."""
    import stat as st

    node, dev, elsewhere = tmp_path / "node-dev", tmp_path / "container-dev", tmp_path / "host-etc"
    for d in (node / "cxl", dev, elsewhere):
        d.mkdir(parents=True)
    os.mknod(node / "cxl" / "mem0", 0o600 | st.S_IFCHR, os.makedev(250, 0))
    os.mknod(node / "dax0.0", 0o600 | st.S_IFCHR, os.makedev(251, 0))
    os.mknod(node / "nvidia3", 0o666 | st.S_IFCHR, os.makedev(195, 3))  # not given to this container
    os.mknod(node / "null", 0o666 | st.S_IFCHR, os.makedev(1, 3))
    os.mknod(dev / "nvidia0", 0o666 | st.S_IFCHR, os.makedev(195, 0))  # given: made by the entrypoint
    (dev / "null").write_text("the runtime's own")
    os.mknod(dev / "dax9.0", 0o600 | st.S_IFCHR, os.makedev(251, 9))  # the node no longer has it
    (dev / "cxl").symlink_to(elsewhere)  # planted by the container

    assert nodeview.mirror_devices(str(node), str(dev)) > 0
    assert sorted(os.listdir(dev)) == ["cxl", "dax0.0", "null", "nvidia0"]
    assert (dev / "cxl").is_dir() and not (dev / "cxl").is_symlink() and os.listdir(elsewhere) == []
    mem0 = os.stat(dev / "cxl" / "mem0")
    assert st.S_ISCHR(mem0.st_mode) and mem0.st_rdev == os.makedev(250, 0) and st.S_IMODE(mem0.st_mode) == 0o600
    assert (dev / "null").read_text() == "the runtime's own"
    assert nodeview.mirror_devices(str(node), str(dev)) == 0  # nothing to do the second time
