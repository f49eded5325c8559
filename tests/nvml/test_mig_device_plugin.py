"""NVIDIA's own device plugin (v0.20.0, from ../shared/tools through tests/conformance/nvidia_tools.py) finds MIG
devices made at run time and hands out their capability device nodes.

The plugin runs unmodified on a node's view (``testbed.nodeview``: the node's ``/proc/driver``, ``/dev`` and
``/sys`` at the real paths), its fixed ``/var/lib/kubelet/device-plugins`` bound to the harness kubelet's directory,
with ``--mig-strategy=mixed --pass-device-specs``. It reads ``/proc/driver/nvidia-caps/mig-minors`` and
``/proc/driver/nvidia/capabilities/gpuN/mig/giX/ciY/access`` and answers Allocate with ``/dev/nvidia<minor>`` and
the two ``/dev/nvidia-caps/nvidia-cap<minor>`` nodes. The minors are the kernel module's table (``nv-caps.c``: after
``fabric-mgmt`` 0, ``mig/config`` 1 and ``mig/monitor`` 2, 135 per GPU minor, 9 per GPU instance: its ``access``
then ``ci0``..``ci7``).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import nodeview
from testbed.api import Testbed
from testbed.environment import merged_environment
from testbed.kubelet.kubelet import Kubelet, short_tmp_dir
from tests.conformance.nvidia_tools import ToolsMissing, binary

RESOURCE = "nvidia.com/mig-1g.10gb"


@pytest.fixture(scope="module")
def device_plugin() -> Path:
    why = nodeview.unavailable()
    if why is not None:
        pytest.skip(f"no node view: {why}")
    try:
        return binary("nvidia-device-plugin")
    except ToolsMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture
def kubelet() -> Iterator[Kubelet]:
    d = short_tmp_dir()
    k = Kubelet(d)
    k.start()
    yield k
    k.stop()
    shutil.rmtree(d, ignore_errors=True)


def _caps_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    base = 3 + gpu_minor * 135 + gi * 9
    return base if ci is None else base + 1 + ci


def test_plugin_allocates_a_mig_device_made_at_run_time(fast_node_tmp: Path, kubelet: Kubelet,
                                                        device_plugin: Path) -> None:
    """On tmpfs where it can be (fast_node_tmp): the cluster's node is some 28,000 files."""
    with Testbed.up("dgx-a100", name="mig", state_dir=fast_node_tmp) as tb:
        _allocate_a_mig_device_made_at_run_time(tb, kubelet, device_plugin)


def _allocate_a_mig_device_made_at_run_time(tb: Testbed, kubelet: Kubelet, device_plugin: Path) -> None:
    node = tb.system.nodes[0]
    agent = tb.agent(node.name)
    agent.set_mig_mode(node.name, "gpu0", True)
    gi = agent.create_gpu_instance(node.name, "gpu0", "1g.10gb")["created_id"]
    uuid = agent.create_compute_instance(node.name, "gpu0", gi)["compute_instance"]["uuid"]

    env = merged_environment(tb.node(node.name).env)
    view = nodeview.NodeView(root=env["FAKEHW_ROOT"],
                             binds=(nodeview.Bind(str(kubelet.plugin_dir), "/var/lib/kubelet/device-plugins"),))
    argv = nodeview.command(view, [str(device_plugin), "--mig-strategy=mixed", "--pass-device-specs"])
    log = kubelet.plugin_dir / "plugin.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        kubelet.wait_endpoint(RESOURCE, timeout=60)
        assert kubelet.available(RESOURCE) == [uuid]
        response = kubelet.allocate(RESOURCE, [[uuid]]).container_responses[0]
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(15)
    gpu0 = node.gpus[0]
    caps = [_caps_minor(gpu0.minor, gi), _caps_minor(gpu0.minor, gi, 0)]
    paths = {d.host_path for d in response.devices}
    assert {f"/dev/nvidia{gpu0.minor}", *(f"/dev/nvidia-caps/nvidia-cap{m}" for m in caps)} <= paths, log.read_text()
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == uuid
    # The nodes exist in the node's /dev as character devices of the nvidia-caps major /proc/devices names.
    root = Path(env["FAKEHW_ROOT"])
    major = next(int(line.split()[0]) for line in (root / "proc/devices").read_text().splitlines()
                 if line.endswith(" nvidia-caps"))
    for m in caps:  # as root (the node view needs it) the renderer makes real device nodes
        st = (root / f"dev/nvidia-caps/nvidia-cap{m}").lstat()
        assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, m)


@pytest.fixture(scope="module")
def feature_discovery() -> Path:
    if nodeview.unavailable() is not None:
        pytest.skip(f"no node view: {nodeview.unavailable()}")
    try:
        return binary("gpu-feature-discovery")
    except ToolsMissing as exc:
        pytest.skip(str(exc))


def test_feature_discovery_labels_mig_devices_as_published(fast_node_tmp: Path, feature_discovery: Path) -> None:
    """GFD (mixed strategy) labels dgx-a100's two boot 3g.40gb devices with the published A100-80GB 3g.40gb row
    (NVIDIA/mig-parted#97: SM 42, DEC 2, ENC 0, CE 3, JPEG 0, OFA 0, 39.25 GiB = 40192 MiB)."""
    from fakehw.model import load_profile
    from fakehw.render import render_node
    from testbed.environment import node_environment
    from tests.nvml.helpers import faults_state

    system = load_profile("dgx-a100")
    node = system.nodes[0]
    state, _ = faults_state(node, [], system.seed)
    render_node(system, node, state, fast_node_tmp / "node", initial=True)
    env = merged_environment(node_environment(node.name, fast_node_tmp / "node", None))
    out = fast_node_tmp / "out"
    out.mkdir()
    view = nodeview.NodeView(root=str(fast_node_tmp / "node" / "root"),
                             binds=(nodeview.Bind(str(out), "/tmp/gfd-out"),))
    argv = nodeview.command(view, [str(feature_discovery), "--oneshot", "--output-file=/tmp/gfd-out/labels",
                                   "--use-node-feature-api=false", "--mig-strategy=mixed"])
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    labels = dict(line.split("=", 1) for line in (out / "labels").read_text().splitlines() if "=" in line)
    prefix = "nvidia.com/mig-3g.40gb."
    got = {k.removeprefix(prefix): v for k, v in labels.items() if k.startswith(prefix)}
    assert got.items() >= {
        "count": "2", "multiprocessors": "42", "engines.decoder": "2", "engines.encoder": "0", "engines.copy": "3",
        "engines.jpeg": "0", "engines.ofa": "0", "memory": "40192", "slices.gi": "3", "slices.ci": "3"}.items()
    assert labels["nvidia.com/mig.capable"] == "true"
