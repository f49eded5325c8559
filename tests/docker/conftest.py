"""Fixtures of the docker tests: an engine that can run node containers, the node image (built once per run).

Tests here need a Docker engine with the containerd image store and, for riscv64, QEMU registered with
binfmt_misc (``testbed host setup``, which ``make test`` runs as root; these fixtures run it too when root and
apt-get are there and something is missing). Where the engine cannot run they skip and say why; where this
machine could be set up but still cannot run them, they fail, so CI never passes by skipping them.
``FAKEHW_DOCKER_TESTS=skip`` skips them on purpose.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # no registry: the reaper image cannot be pulled

from fakehw.model import load_profile
from testbed.api import Testbed
from testbed.cluster import remove_tree_in_background, scratch_dir
from testbed.host import NATIVE_ARCH, HostSetup, binfmt_entry, engine_problem
from testbed.images import ImageBuilder, ImageError, ImageRef, MirrorError

PLATFORMS = ("amd64", "riscv64")


def _can_set_up() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def _unavailable(reason: str, report: str = "") -> None:
    """Skip (the engine cannot run here) or fail (it could, and CI must run these tests)."""
    if os.environ.get("FAKEHW_DOCKER_TESTS") == "skip":
        pytest.skip(f"FAKEHW_DOCKER_TESTS=skip ({reason})")
    if _can_set_up():
        pytest.fail(f"{reason}, although this machine can be set up (root, apt-get) and 'testbed host setup' ran:\n"
                    f"{report}\nSet FAKEHW_DOCKER_TESTS=skip to skip these tests on purpose")
    pytest.skip(reason)


def _emulation_problem() -> str | None:
    if NATIVE_ARCH == "riscv64":
        return None
    entry = binfmt_entry("riscv64")
    if entry is None or entry.get("enabled") != "enabled" or "F" not in entry.get("flags", ""):
        return "riscv64 binaries cannot run here (no qemu-riscv64 binfmt entry with the F flag)"
    return None


@pytest.fixture(scope="session")
def host_ready() -> str:
    """Set the machine up when these tests can and must run (root, apt-get; e.g. a CI job that went straight to
    pytest), exactly as ``make test`` does through tools/install-system-deps.sh. Returns the setup's report."""
    if os.environ.get("FAKEHW_DOCKER_TESTS") == "skip" or not _can_set_up():
        return ""
    if engine_problem() is None and _emulation_problem() is None:
        return ""
    return HostSetup(platforms=PLATFORMS).run().render()


@pytest.fixture(scope="session")
def docker_engine(host_ready: str) -> None:
    problem = engine_problem()
    if problem is not None:
        _unavailable(problem, host_ready)


@pytest.fixture(scope="session")
def riscv64_emulation(docker_engine: None, host_ready: str) -> None:
    problem = _emulation_problem()
    if problem is not None:
        _unavailable(problem, host_ready)


@dataclass
class NodeImages:
    """The node image of each architecture, built (or found by its content tag) at most once per session.

    Each architecture on its own: an amd64 test never waits for riscv64 (minutes under QEMU), and a Debian mirror
    that serves riscv64 inconsistently on every configured suite skips the riscv64 tests (with the mirror's
    problem as the reason) instead of failing them or the amd64 ones. Any other failure to build fails."""

    futures: dict[str, Future[ImageRef]] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def start(self, arches: tuple[str, ...] = PLATFORMS) -> None:
        for arch in arches:
            if arch not in self.futures:
                pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"node-image-{arch}")
                self.futures[arch] = pool.submit(ImageBuilder(progress="plain", log=self.log.append).node_image,
                                                 arch)
                pool.shutdown(wait=False)

    def get(self, arch: str) -> ImageRef:
        if arch != NATIVE_ARCH:
            problem = _emulation_problem()
            if problem is not None:
                _unavailable(problem)
        self.start((arch,))
        try:
            return self.futures[arch].result()
        except MirrorError as exc:
            pytest.skip(f"linux/{arch} node image: {exc}")
        except ImageError as exc:
            pytest.fail(f"the linux/{arch} node image does not build: {exc}", pytrace=False)


IMAGES = pytest.StashKey[NodeImages]()
IMAGE_FIXTURES = {"node_images", "node_image_amd64", "node_image_riscv64", "docker_testbed"}


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the node images as soon as the tests are collected, if any test here will need one.

    Making the base images and the images takes minutes on a fresh machine (riscv64's package scripts run under
    QEMU, mostly on one core); started here, it overlaps with the test modules that run before these. Every
    xdist worker collects every test: the builds' lock files make the second worker wait for the first's
    images instead of building them again."""
    if not any(IMAGE_FIXTURES.intersection(getattr(item, "fixturenames", ())) for item in session.items):
        return
    if os.environ.get("FAKEHW_DOCKER_TESTS") == "skip" or engine_problem() is not None \
            or _emulation_problem() is not None:
        return  # the session fixtures set the machine up first, then build
    images = NodeImages()
    images.start()
    session.config.stash[IMAGES] = images


@pytest.fixture(scope="session")
def node_images(request: pytest.FixtureRequest, docker_engine: None) -> NodeImages:
    """The session's node images, per architecture (``node_images.get("riscv64")``)."""
    images = request.config.stash.get(IMAGES, None)
    if images is None:
        images = NodeImages()
        request.config.stash[IMAGES] = images
    return images


@pytest.fixture(scope="session")
def node_image_amd64(node_images: NodeImages) -> ImageRef:
    return node_images.get("amd64")


@pytest.fixture(scope="session")
def node_image_riscv64(node_images: NodeImages, riscv64_emulation: None) -> ImageRef:
    return node_images.get("riscv64")


@pytest.fixture
def docker_testbed(testbed_factory: Callable[..., Testbed], node_images: NodeImages) -> Callable[..., Testbed]:
    """``docker_testbed("mixed-arch", gpus=...)``: a docker-backend cluster from this run's node images (only
    the architectures the profile has are needed)."""

    def make(profile: str, nodes: int | None = None, **options: Any) -> Testbed:
        if "image" not in options:
            arches = sorted({n.cpu.arch for n in load_profile(profile).nodes})
            options["image"] = {arch: node_images.get(arch).tag for arch in arches}
        return testbed_factory(profile, nodes=nodes, backend="docker", **options)

    return make


@pytest.fixture(scope="session")
def testbed_state_dir() -> Iterator[Path]:
    """testbed.fixtures' own (``$FAKEHW_SCRATCH_DIR``, else ``/tmp``), not the tmpfs one of tests/conftest.py:
    the node containers bind-mount their agents' directories and device files from it, which has not been tried
    from tmpfs."""
    path = scratch_dir("fhw-")
    yield path
    remove_tree_in_background(path)


@pytest.fixture
def profiles_dir() -> Path:
    return Path(__file__).parent / "profiles"


@pytest.fixture
def no_leftovers(testbed_state_dir: Path) -> Iterator[Callable[[], list[str]]]:
    """A function listing this session's labelled containers, networks and volumes (what must be gone)."""
    import docker

    from testbed.backends.docker import LABEL_STATE_DIR

    client = docker.from_env()
    label = f"{LABEL_STATE_DIR}={testbed_state_dir.resolve()}"

    def listing() -> list[str]:
        out = [f"container {c.name}" for c in client.containers.list(all=True, filters={"label": label})]
        out += [f"network {n.name}" for n in client.networks.list(filters={"label": label})]
        out += [f"volume {v.name}" for v in client.volumes.list(filters={"label": label})]
        return out

    yield listing
    client.close()
