"""NVIDIA's device plugin (v0.20.0, prebuilt, unmodified) reads each GPU's NUMA node from the node's live ``/sys``,
before and after the node's agent restarts.

Why this test exists: the plugin's NUMA node comes from ``os.ReadFile("/sys/bus/pci/devices/<bdf>/numa_node")``
(``nvmlDevice.GetNumaNode``, internal/rm/nvml_devices.go at v0.20.0); any error there is taken as "no NUMA node"
and reported as a device without topology, never as an error. When an agent restart unmounted the live ``/sys``,
every later plugin start read an empty directory (ENOENT) and reported NUMA none for every GPU, which the pinned
verdicts caught only through DP-TOPO-001 two minutes into a full run. Here the real plugin runs in the live view
(:meth:`LocalBackend.node_view`, through the harness's kubelet) and its answer is checked against a real DGX H100.

Expected values: a DGX H100's ``nvidia-smi topo -m`` shows GPU0-GPU3 with NUMA affinity 0 and GPU4-GPU7 with NUMA
affinity 1 (two Xeon 8480C sockets, four GPUs behind each; e.g. the DGX H100 output reproduced at
https://kubernetes.recipes/recipes/ai/dgx-h100-nvidia-smi-topo-kubernetes/).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance.suites.device_plugin.support import local_view
from fakehw import livefs
from testbed import nodeview
from testbed.api import Testbed
from testbed.backends.local import LocalBackend
from testbed.kubelet.kubelet import Kubelet, short_tmp_dir
from testbed.kubelet.launcher import CommandLauncher, PluginProcess
from tests.conformance.nvidia_tools import ToolsMissing, binary

pytestmark = pytest.mark.slow

NODE = "dgx-h100-0"
RESOURCE = "nvidia.com/gpu"
REAL_DGX_H100_NUMA = (0, 0, 0, 0, 1, 1, 1, 1)
"""NUMA affinity of GPU0..GPU7 in a real DGX H100's ``nvidia-smi topo -m`` (see the module docstring)."""
START_TIMEOUT_S = 90.0


@dataclass
class Harness:
    testbed: Testbed
    backend: LocalBackend
    kubelet: Kubelet
    launcher: CommandLauncher
    view: nodeview.NodeView


@pytest.fixture
def harness(testbed_state_dir: Path) -> Iterator[Harness]:
    for why in (nodeview.unavailable(), livefs.unavailable()):
        if why is not None:
            pytest.skip(f"the plugin runs in the node's live /sys: {why}")
    try:
        plugin = binary("nvidia-device-plugin")
    except ToolsMissing as exc:
        pytest.skip(str(exc))
    tb = Testbed.up("dgx-h100", name="nvdp-live", state_dir=testbed_state_dir)
    work = short_tmp_dir("fhw-nvdp-live-")
    kubelet = Kubelet(work / "plugins")
    try:
        assert isinstance(tb.backend, LocalBackend)
        backend, node = tb.backend, tb.node(NODE)
        base = backend.node_view(tb.record, NODE)
        view, problem = local_view(node, tb.system, work, base)
        assert view is not None and problem is None, problem
        launcher = CommandLauncher(str(plugin), NODE, node.env, work / "logs", view,
                                   lambda: backend.node_view(tb.record, NODE))
        kubelet.start()
        yield Harness(tb, backend, kubelet, launcher, view)
    finally:
        kubelet.stop()
        tb.down()
        shutil.rmtree(work, ignore_errors=True)


def _reported_numa(h: Harness, after: int) -> tuple[dict[str, tuple[int, ...]], int]:
    """Start the plugin, wait for its device list; the NUMA nodes it gave each GPU (by index), and the endpoint's
    generation."""
    process: PluginProcess = h.launcher.start(h.kubelet.plugin_dir)
    try:
        ep = h.kubelet.wait_endpoint(RESOURCE, after=after, timeout=START_TIMEOUT_S, process=process)
        latest = ep.latest
        assert latest is not None
        node = h.testbed.system.node(NODE)
        assert node is not None
        index = {g.uuid.lower(): i for i, g in enumerate(node.gpus)}
        by_gpu = {f"GPU{index[d.id.lower()]}": d.numa for d in latest.devices}
        return by_gpu, ep.generation
    finally:
        process.stop()


def test_the_real_plugin_reports_a_real_dgx_h100_numa_layout_from_the_live_sys(harness: Harness) -> None:
    sys_binds = [b for b in harness.view.binds if b.target == "/sys"]
    assert harness.view.writable_sys and sys_binds, "the plugin must run in the live /sys, not the rendered tree"
    assert livefs.mount.mounted(Path(sys_binds[0].source))
    expected = {f"GPU{i}": (numa,) for i, numa in enumerate(REAL_DGX_H100_NUMA)}

    first, generation = _reported_numa(harness, 0)
    assert first == expected

    harness.backend.stop_agent(harness.testbed.record)  # as DP-CHAOS-004 does
    harness.backend.start_agent(harness.testbed.record)
    again, _ = _reported_numa(harness, generation)
    assert again == expected, "after an agent restart the plugin reads another /sys"
