"""The node image: built offline for amd64 and riscv64 by buildx, and runs on both (testcontainers).

Acceptance: inside the riscv64 container ``uname -m`` is riscv64, the fake NVML is a RISC-V ELF (read by the
host's ``readelf``), and pynvml lists the model's GPUs with their NVLink state. The same for amd64.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from testcontainers.core.container import DockerContainer

from fakehw.agent.client import AgentClient, AgentRequestError
from fakehw.model import load_profile
from testbed.images import (
    IMAGES_DIR,
    NODE_DOCKERFILE,
    REPO_ROOT,
    ImageBuilder,
    ImageRef,
    image_platforms,
    parse_platforms,
)
from tests.docker.conftest import NodeImages
from tests.docker.probes import NVML_PROBE, UNAME, check_nvml, expected_for

BIN = Path(sys.executable).parent
PROFILE_OF = {"amd64": "dgx-h100", "riscv64": "riscv-nvlink-fusion"}
TRIPLET = {"amd64": "x86_64-linux-gnu", "riscv64": "riscv64-linux-gnu"}
ELF_MACHINE = {"amd64": "Advanced Micro Devices X86-64", "riscv64": "RISC-V"}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short host directory (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="fhw-img-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_platforms_are_parsed_and_bad_ones_refused() -> None:
    assert parse_platforms(["linux/amd64,linux/riscv64"]) == ("amd64", "riscv64")
    assert parse_platforms(["riscv64", "linux/riscv64", "amd64"]) == ("riscv64", "amd64")
    for bad in (["linux/sparc"], ["windows/amd64"], [","], []):
        with pytest.raises(ValueError):
            parse_platforms(bad)


def test_bad_platform_is_a_clear_error_not_a_traceback() -> None:
    for command in (["images", "build", "--platform", "linux/sparc64"], ["host", "check", "--platform", "s390x"]):
        proc = subprocess.run([str(BIN / "testbed"), *command], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc
        assert "unknown platform" in proc.stderr and "linux/riscv64" in proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("arch", ["amd64", "riscv64"])
def test_node_image_runs_on_both_platforms(arch: str, node_images: NodeImages, short_dir: Path) -> None:
    node_image = node_images.get(arch)
    assert image_platforms(node_image.tag) == {arch}
    assert node_image.tag.startswith(f"fakehw/node:{arch}-")
    system = load_profile(PROFILE_OF[arch])
    node = system.nodes[0]
    assert node.cpu.arch == arch
    container = (DockerContainer(node_image.tag, platform=f"linux/{arch}")
                 .with_env("FAKEHW_NODE", node.name)
                 .with_env("FAKEHW_PROFILE", PROFILE_OF[arch])
                 .with_env("FAKEHW_DEVICE_MINORS", ",".join(str(g.minor) for g in node.gpus))
                 .with_volume_mapping(str(short_dir), "/var/lib/fakehw-agent", "rw"))
    with container:
        wrapped = container.get_wrapped_container()
        agent = AgentClient(short_dir / "agent.sock", timeout=5)
        deadline = time.monotonic() + 180
        while True:
            try:
                agent.health()
                break
            except AgentRequestError:
                wrapped.reload()
                assert wrapped.status == "running", wrapped.logs().decode(errors="replace")
                assert time.monotonic() < deadline, "the agent in the container did not answer"
                time.sleep(0.2)

        uname = container.exec(["uname", "-m"])
        assert uname.exit_code == 0 and uname.output.decode().strip() == UNAME[arch]

        lib = f"/usr/lib/{TRIPLET[arch]}/libnvidia-ml.so.1"
        stream, _ = wrapped.get_archive(lib)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile("libnvidia-ml.so.1")
            assert member is not None
            (short_dir / "shim.so").write_bytes(member.read())
        header = subprocess.run(["readelf", "-h", "-d", str(short_dir / "shim.so")], capture_output=True, text=True,
                                check=True).stdout
        assert re.search(r"Machine:\s+" + re.escape(ELF_MACHINE[arch]), header), header
        assert "Library soname: [libnvidia-ml.so.1]" in header

        probe = container.exec(["python", "-c", NVML_PROBE])
        assert probe.exit_code == 0, probe.output.decode(errors="replace")
        answer = json.loads(probe.output.decode().strip().splitlines()[-1])
        check_nvml(answer, expected_for(node))
        assert answer["driver"] == system.driver.version


def test_a_second_build_is_instant(node_image_amd64: ImageRef, node_image_riscv64: ImageRef) -> None:
    """Everything is found by its content tag: no debootstrap, no buildx, no mirror asked."""
    builder = ImageBuilder(log=lambda _m: None)
    first = builder.node_images(("amd64", "riscv64"))  # the checkout as it is now (others may be editing it)
    start = time.monotonic()
    again = builder.node_images(("amd64", "riscv64"))
    assert {a: r.tag for a, r in again.items()} == {a: r.tag for a, r in first.items()}
    assert {r.how for r in again.values()} == {"cached"}
    proc = subprocess.run([str(BIN / "testbed"), "images", "base", "--platform", "linux/amd64,linux/riscv64"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("(cached)") == 2, proc.stdout
    assert time.monotonic() - start < 15


def test_base_images_need_root_and_say_so(node_image_amd64: ImageRef) -> None:
    """As a user without root, a missing base image is a clear error naming the fix, not a traceback."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (to drop to another user) and setpriv")
    env = {**os.environ, "FAKEHW_IMAGE_WORK": "/tmp"}
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(BIN / "python"),
                           "-c", "from testbed.images import ImageBuilder, ImageError\n"
                           "b = ImageBuilder(log=print)\n"
                           "b.base_key = lambda arch, suite: 'x' * 64\n"
                           "try:\n    b.base_image('riscv64')\nexcept ImageError as e:\n    print('ERR', e)\n"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert "ERR making the riscv64 base image needs root" in proc.stdout, proc
    assert "Traceback" not in proc.stderr


def test_bake_file_defines_the_node_and_kind_node_targets(docker_engine: None) -> None:
    bake = IMAGES_DIR / "docker-bake.hcl"
    printed = subprocess.run(["docker", "buildx", "bake", "-f", str(bake), "--print", "node", "node-online",
                              "kind-node"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert printed.returncode == 0, printed.stderr
    targets = json.loads(printed.stdout)["target"]
    assert targets["node"]["platforms"] == ["linux/amd64", "linux/riscv64"]
    assert targets["node-online"]["platforms"] == ["linux/amd64", "linux/riscv64"]
    assert set(targets["node-online"]["args"].values()) == {"debian:trixie-slim"}
    assert targets["node"]["args"]["BASE_RISCV64"] == "fakehw/base:riscv64"
    assert targets["node"]["args"]["BUILD_BASE"] == "fakehw/base:amd64"
    # Every ARG of the Dockerfile that names an image is set by both node targets.
    image_args = {rest.split("=", 1)[0] for word, rest in _instructions(NODE_DOCKERFILE)
                  if word == "ARG" and "BASE" in rest}
    assert image_args == set(targets["node"]["args"]) == set(targets["node-online"]["args"])
    for target in targets.values():
        assert (REPO_ROOT / target["context"] / target["dockerfile"]).is_file()
    assert targets["kind-node"]["dockerfile"] == "images/kind-node/Dockerfile"
    assert targets["kind-node"]["args"]["KIND_NODE_IMAGE"].startswith("kindest/node:v")


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, f"{dockerfile} ends inside a continued line"
    out = []
    for text in logical:
        word, _, rest = text.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


KNOWN = {"FROM", "ARG", "ENV", "RUN", "COPY", "LABEL", "STOPSIGNAL", "ENTRYPOINT", "CMD", "WORKDIR", "USER"}


@pytest.mark.parametrize("dockerfile", [NODE_DOCKERFILE, IMAGES_DIR / "kind-node" / "Dockerfile"],
                         ids=["node", "kind-node"])
def test_dockerfiles_copy_only_what_exists_and_their_context_allows(dockerfile: Path) -> None:
    """Every COPY source exists in the repository and passes the Dockerfile's own .dockerignore."""
    instructions = _instructions(dockerfile)
    assert {word for word, _ in instructions} <= KNOWN
    ignore = Path(f"{dockerfile}.dockerignore").read_text().splitlines()
    allowed = [line[1:] for line in ignore if line.startswith("!")]
    for word, rest in instructions:
        if word != "COPY" or rest.startswith("--from"):
            continue
        *sources, _dest = rest.split()
        for source in sources:
            if "[" in source:  # an optional file (setup.p[y]): may be absent
                continue
            assert (REPO_ROOT / source).exists(), f"{dockerfile.name}: COPY {source}: no such file"
            assert any(source.rstrip("/") == a or source.startswith(a.rstrip("/") + "/") for a in allowed), \
                f"{dockerfile.name}: COPY {source} is excluded by its .dockerignore"


def test_kind_node_puts_the_shim_and_agent_where_they_are_expected() -> None:
    dockerfile = IMAGES_DIR / "kind-node" / "Dockerfile"
    instructions = _instructions(dockerfile)
    assert instructions[0] == ("ARG", "KIND_NODE_IMAGE=kindest/node:v1.37.0")
    assert instructions[1] == ("FROM", "${KIND_NODE_IMAGE}")
    runs = "\n".join(rest for word, rest in instructions if word == "RUN")
    # The library directory the NVIDIA container toolkit and the device plugin's driver-root search use.
    assert 'libdir=/usr/lib/$(gcc -dumpmachine)' in runs
    assert 'install -m 0755 /opt/fakehw/nvml/libnvidia-ml.so.1 "$libdir/libnvidia-ml.so.1"' in runs
    assert "ldconfig" in runs
    assert "multi-user.target.wants/fakehw-agent.service" in runs
    import configparser

    unit = configparser.ConfigParser(strict=True, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(IMAGES_DIR / "kind-node" / "fakehw-agent.service")
    assert unit["Service"]["ExecStart"] == "/opt/fakehw/venv/bin/python -m testbed.node_entry"
    assert unit["Service"]["EnvironmentFile"] == "/etc/fakehw/node.env"
    assert unit["Unit"]["ConditionPathExists"] == "/etc/fakehw/node.env"
    assert unit["Unit"]["Before"] == "kubelet.service"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    copies = [rest for word, rest in instructions if word == "COPY"]
    assert "images/kind-node/fakehw-agent.service /etc/systemd/system/fakehw-agent.service" in copies
    assert "/opt/fakehw/venv" in runs
