"""NVIDIA's GPU feature discovery (v0.20.0, unmodified) on fake nodes labels them as it labels the real machines.

GFD runs once (``--oneshot``) in the node's view (its tree at /sys, /dev, /proc/driver; the fake NVML on the
library path) and writes its labels to a file. Every expected value comes from outside the model: product names
and memory sizes from the real ``nvidia-smi -q -x`` captures in ``../shared/reference/captures`` (or public
nvidia-smi output where no capture exists), compute capabilities from NVIDIA's CUDA GPU list, GPU counts and DMI
product names from the systems' documentation, driver versions from the capture the profile's driver follows.
GFD derives ``gpu.family`` from the compute capability and ``gpu.mode`` from the PCI class (0x0302: compute).
Its MIG labels (mixed strategy on dgx-a100) are checked by tests/nvml/test_mig_device_plugin.py.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import nodeview
from testbed.api import Testbed
from testbed.cluster import remove_tree_in_background
from testbed.environment import merged_environment
from tests.conformance.nvidia_tools import ToolsMissing, binary

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parent / "data"
GB200_R580 = str(DATA / "gb200-nvl72-r580.yaml")

EXPECTED: dict[str, dict[str, str]] = {
    # DGX H100: 8x H100 SXM5 80GB; capture qx-h100.xml: "NVIDIA H100 80GB HBM3", 81559 MiB, driver 580.105.08 /
    # CUDA 13.0 (the driver dgx-h100 runs); CC 9.0.
    "dgx-h100": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559",
                 "nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "hopper",
                 "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
                 "nvidia.com/gpu.machine": "DGXH100", "nvidia.com/gpu.mode": "compute",
                 "nvidia.com/mig.capable": "true", "nvidia.com/cuda.driver.major": "580",
                 "nvidia.com/cuda.driver.minor": "105", "nvidia.com/cuda.driver.rev": "08",
                 "nvidia.com/cuda.runtime.major": "13", "nvidia.com/cuda.runtime.minor": "0"},
    # 8x L4 24GB in a PowerEdge R760xa; nvidia-smi shows 23034 MiB for an L4; CC 8.9; the L4 has no MIG.
    "edge-pcie": {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034",
                  "nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "ada-lovelace",
                  "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "9",
                  "nvidia.com/gpu.machine": "PowerEdge-R760xa", "nvidia.com/gpu.mode": "compute",
                  "nvidia.com/mig.capable": "false"},
    # A DGX GB200 compute tray: 2 Grace + 4 Blackwell; capture qx-gb200.xml: "NVIDIA GB200", 189471 MiB, driver
    # 580.173.02 / CUDA 13.0; CC 10.0.
    GB200_R580: {"nvidia.com/gpu.product": "NVIDIA-GB200", "nvidia.com/gpu.memory": "189471",
                 "nvidia.com/gpu.count": "4", "nvidia.com/gpu.family": "blackwell",
                 "nvidia.com/gpu.compute.major": "10", "nvidia.com/gpu.compute.minor": "0",
                 "nvidia.com/gpu.machine": "DGX-GB200", "nvidia.com/gpu.mode": "compute",
                 "nvidia.com/mig.capable": "true", "nvidia.com/cuda.driver.major": "580",
                 "nvidia.com/cuda.driver.minor": "173", "nvidia.com/cuda.driver.rev": "02",
                 "nvidia.com/cuda.runtime.major": "13", "nvidia.com/cuda.runtime.minor": "0"},
    # DGX A100 80GB: 8x A100-SXM4-80GB (nvidia-smi: "NVIDIA A100-SXM4-80GB", 81920 MiB); CC 8.0.
    "dgx-a100": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920",
                 "nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "ampere",
                 "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0",
                 "nvidia.com/gpu.machine": "DGXA100", "nvidia.com/gpu.mode": "compute",
                 "nvidia.com/mig.capable": "true"},
}
@pytest.fixture(scope="module")
def gfd() -> Path:
    if nodeview.unavailable() is not None:
        pytest.skip(f"GFD reads /sys at its real path: {nodeview.unavailable()}")
    try:
        return binary("gpu-feature-discovery")
    except ToolsMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture
def testbed_of(fast_node_tmp: Path) -> Iterator[list[Testbed]]:
    """The test's clusters, down after it. Their state is under ``fast_node_tmp`` (tmpfs when it lets the node's
    device files open; tests/conftest.py), removed after this: a gb200 tray's first render is some 78,000 files,
    each 30-400 us of kernel CPU on this machine's ext4 and 9 us on tmpfs (docs/testbed.md)."""
    made: list[Testbed] = []
    yield made
    for tb in made:
        tb.down()
    remove_tree_in_background(fast_node_tmp / "state")


def run_gfd(gfd: Path, tb: Testbed, *args: str) -> dict[str, str]:
    """GFD's labels of the cluster's first node with GPUs. Only that node's files are made (``tb.node``):
    ``tb.nodes()`` would render every node, all 18 trays of gb200-nvl72 (some 1.4 million files)."""
    node = tb.node(next(n.name for n in tb.system.nodes if n.gpus))
    out = Path(tempfile.mkdtemp(prefix="fhw-gfd-")) / "labels"
    argv = nodeview.command(nodeview.NodeView(str(node.dir / "root")),
                            [str(gfd), "--oneshot", f"--output-file={out}", "--use-node-feature-api=false", *args])
    proc = subprocess.run(argv, env=merged_environment(node.env), capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0 and out.is_file(), f"GFD failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    labels = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    out.unlink()
    out.parent.rmdir()
    return labels


def _check(labels: dict[str, str], expected: dict[str, str]) -> None:
    wrong = {k: (labels.get(k), v) for k, v in expected.items() if labels.get(k) != v}
    assert not wrong, f"labels GFD gave that a real machine does not get (got, real): {wrong}\nall: {labels}"
    assert "unknown" not in labels.values(), f"GFD could not tell something: {labels}"


@pytest.mark.parametrize("profile", list(EXPECTED), ids=lambda p: Path(p).stem)
def test_gfd_labels_a_fake_node_as_the_real_machine(gfd: Path, profile: str, fast_node_tmp: Path,
                                                    testbed_of: list[Testbed]) -> None:
    tb = Testbed.up(profile, name="gfd", state_dir=fast_node_tmp / "state")
    testbed_of.append(tb)
    _check(run_gfd(gfd, tb), EXPECTED[profile])
