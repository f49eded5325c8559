"""``image:`` components on the docker backend (issue #15): a device plugin given as a container image certifies.

The reference device plugin is packaged as an image (images/device-plugin-reference, built offline on this run's
node image, without the node image's fake NVML: it must find it in the driver root the node presents) and run
through ``conformance run --target device-plugin=image:TAG --backend docker``. Its container is its own, beside
the node's, seeing the node's /sys and devices, the driver root and /var/lib/kubelet/device-plugins. The judge is
the same plugin run as a ``cmd:`` target in the node's container: every requirement's status and every level's
verdict must be the same. Bad ``image:`` values are refused before anything runs (exit 2, one line).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.images import REPO_ROOT, ImageRef

BIN = Path(sys.executable).parent
PLUGIN_IMAGE_DIR = REPO_ROOT / "images" / "device-plugin-reference"
SUITE_ARGS = ["--profile", "dgx-h100", "--backend", "docker", "--fuzz-examples", "1", "--fuzz-steps", "4"]


@pytest.fixture(scope="module")
def plugin_image(node_image_amd64: ImageRef) -> str:
    tag = f"fakehw/device-plugin-reference:{node_image_amd64.tag.rsplit(':', 1)[1]}"
    done = subprocess.run(["docker", "build", "--quiet", "--network", "none", "--build-arg",
                           f"NODE_IMAGE={node_image_amd64.tag}", "--tag", tag, str(PLUGIN_IMAGE_DIR)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return tag


def _conformance(*args: str, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([str(BIN / "conformance"), "run", *args, "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _statuses(report: dict[str, object]) -> tuple[dict[str, str], dict[str, str]]:
    results = report["results"]
    verdicts = report["verdicts"]
    assert isinstance(results, list) and isinstance(verdicts, dict)
    return ({r["id"]: r["status"] for r in results},
            {level: v["verdict"] for level, v in verdicts["levels"].items()})


def test_the_reference_plugin_as_an_image_certifies_as_its_cmd_run_does(plugin_image: str, tmp_path: Path) -> None:
    no_nvml = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", plugin_image, "-c",
                              "ls /usr/lib/*/libnvidia-ml.so* /opt/fakehw/nvml 2>&1; true"],
                             capture_output=True, text=True, timeout=120, check=False)
    assert "No such file" in no_nvml.stdout and "libnvidia-ml.so.1\n" not in no_nvml.stdout, no_nvml.stdout
    # Both runs at once: each brings up its own cluster (its own state directory and container names).
    image_run = _conformance("--target", f"device-plugin=image:{plugin_image}", *SUITE_ARGS, out=tmp_path / "image")
    cmd_run = _conformance("--target", "device-plugin=cmd:python -m testbed.reference.device_plugin", *SUITE_ARGS,
                           out=tmp_path / "cmd")
    image_out, _ = image_run.communicate(timeout=1200)
    cmd_out, _ = cmd_run.communicate(timeout=1200)
    assert image_run.returncode == 0, image_out[-4000:]
    assert cmd_run.returncode == 0, cmd_out[-4000:]
    image = json.loads((tmp_path / "image" / "report.json").read_text())
    cmd = json.loads((tmp_path / "cmd" / "report.json").read_text())
    assert _statuses(image) == _statuses(cmd)
    assert image["verdicts"]["overall"] == "certified"
    components = image["manifest"]["components"]
    assert [c["spec"] for c in components] == [f"image:{plugin_image}"]
    image_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", plugin_image],
                              capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert components[0]["digest"] == image_id
    results = json.loads((tmp_path / "image" / "results.json").read_text())
    assert "the plugin's own container (image " in json.dumps(results)
    left = subprocess.run(["docker", "ps", "--all", "--quiet", "--filter", f"ancestor={plugin_image}"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert left == ""  # every plugin container was removed with its run


BAD_IMAGES = {
    "not in the local image store": ("image:fakehw/no-such-plugin:1", "is not in the local image store"),
    "upper-case name": ("image:Fakehw/Plugin", "'Fakehw/Plugin' is not an image reference"),
    "empty": ("image:", "no image given"),
}


@pytest.mark.parametrize("case", list(BAD_IMAGES))
def test_a_bad_image_value_is_exit_2_in_one_line(case: str, docker_engine: None, tmp_path: Path) -> None:
    spec, expected = BAD_IMAGES[case]
    proc = _conformance("--target", f"device-plugin={spec}", *SUITE_ARGS, out=tmp_path / "out")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    assert out.strip().splitlines() == [out.strip()] and out.startswith("conformance: error: --target device-plugin=")
    assert expected in out and "Traceback" not in out
    assert not (tmp_path / "out").exists()
