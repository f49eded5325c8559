"""Node images: offline base images (debootstrap) and the multi-arch node image (docker buildx).

No registry is reachable on the machines this project runs on, so nothing can be pulled, not even
``debian:trixie-slim``. Base images are therefore made locally: ``debootstrap --variant=minbase`` of Debian
trixie for each architecture (riscv64 runs its package scripts under QEMU user mode), imported with
``docker import --platform``. Online (GitHub Actions) the node Dockerfile takes ``debian:trixie-slim`` through a
build argument instead and installs the same packages with apt.

Everything is cached by content. A base image's tag carries a hash of what went into it (suite, architecture,
package list, recipe version); the node image's tag carries a hash of its whole build context (Dockerfile,
package list, the project's sources) and of the base images it was built on. A second run finds the tags and
returns at once; nothing is rebuilt unless its inputs changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from testbed.host import NATIVE_ARCH, binfmt_entry, debian_mirror

SUPPORTED_ARCHES = ("amd64", "riscv64", "arm64")
REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGES_DIR = REPO_ROOT / "images"
PACKAGES_FILE = IMAGES_DIR / "base" / "packages.txt"
BUILD_PACKAGES_FILE = IMAGES_DIR / "base" / "build-packages.txt"
WHEELS_DIR = IMAGES_DIR / "node" / "wheels"
NVIDIA_ML_PY = "nvidia-ml-py==12.535.161"
"""The pynvml the node image gets; the same pin as the test extra of pyproject.toml."""
NODE_DOCKERFILE = IMAGES_DIR / "node" / "Dockerfile"
BASE_SUITE = "trixie"
BASE_REPO = "fakehw/base"
NODE_REPO = "fakehw/node"
ONLINE_BASE = "debian:trixie-slim"
BASE_RECIPE = "2"
"""Bump when the way base images are made changes (not their package list: that is hashed)."""
NODE_CONTEXT = ("pyproject.toml", "README.md", "setup.py", "fakehw", "testbed", "conformance", "images/base",
                "images/node")
"""What the node image's build context holds (mirrors images/node/Dockerfile.dockerignore)."""
CROSS_GCC = {"amd64": "gcc-x86-64-linux-gnu", "arm64": "gcc-aarch64-linux-gnu", "riscv64": "gcc-riscv64-linux-gnu"}
SKIP_PARTS = {"__pycache__", "_lib", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
SKIP_SUFFIXES = (".pyc", ".so", ".o")
LABEL_KEY = "org.fakehw.content-key"
KEEP_NODE_IMAGES = 2
"""Node images of earlier contents kept besides the current one (another checkout may be using them)."""
PLATFORMS_LABEL = "org.fakehw.platforms"


class ImageError(Exception):
    """An image could not be made; the message says what failed and what to do."""


class ImageInputError(ImageError):
    """An unknown platform or a bad image reference."""


def online_by_default() -> bool:
    """``FAKEHW_IMAGES_ONLINE=1`` (set on runners that reach a registry) builds from debian:trixie-slim."""
    return os.environ.get("FAKEHW_IMAGES_ONLINE", "") == "1"


def parse_platforms(values: Iterable[str]) -> tuple[str, ...]:
    """``["linux/amd64,linux/riscv64"]`` or ``["riscv64"]`` -> ``("amd64", "riscv64")`` (order kept, no repeats)."""
    out: list[str] = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            arch = item.removeprefix("linux/")
            if "/" in arch or arch not in SUPPORTED_ARCHES:
                raise ValueError(f"unknown platform {item!r}")
            if arch not in out:
                out.append(arch)
    if not out:
        raise ValueError("no platform given")
    return tuple(out)


def base_packages(path: Path = PACKAGES_FILE) -> tuple[str, ...]:
    """A package list of images/base/ (comments and blank lines skipped)."""
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return tuple(names)


# Debootstrap resolves plain dependencies only, not virtual packages. These provide what the packages above
# depend on through a virtual name (python3-grpcio needs libre2-11-absl20240722, provided by libre2-11).
DEBOOTSTRAP_EXTRA = ("libre2-11",)


@dataclass(frozen=True)
class ImageRef:
    """An image this module made or found: its tag, content key, and how it came to be (for the user)."""

    tag: str
    key: str
    how: str
    """'cached' (found, nothing done), 'built in 73.1 s', 'imported ...'."""
    seconds: float = 0.0


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def context_files(root: Path = REPO_ROOT) -> list[Path]:
    """Every file of the node image's build context, sorted: what its content key is computed over."""
    files: list[Path] = []
    for entry in NODE_CONTEXT:
        path = root / entry
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            for sub in path.rglob("*"):
                rel = sub.relative_to(root)
                if sub.is_file() and not SKIP_PARTS.intersection(rel.parts) and not sub.name.endswith(SKIP_SUFFIXES):
                    files.append(sub)
    return sorted(files)


def context_key(root: Path = REPO_ROOT) -> str:
    parts: list[bytes] = []
    for path in context_files(root):
        parts.append(str(path.relative_to(root)).encode())
        parts.append(path.read_bytes())
    return _digest(parts)


def _docker(argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise ImageError("no docker CLI; run 'testbed host setup' (as root)") from None


def image_platforms(tag: str) -> set[str] | None:
    """Architectures ``tag`` holds in the local image store (None if there is no such image).

    Engines before API 1.48 inspect one platform of a multi-platform image only, so images built here carry the
    list in the label :data:`PLATFORMS_LABEL`; any other image counts as its inspected architecture alone."""
    out = _docker(["image", "inspect", tag, "--format", "{{.Architecture}} {{json .Config.Labels}}"])
    if out.returncode != 0:
        return None
    arch, _, labels_json = out.stdout.strip().partition(" ")
    try:
        labels = json.loads(labels_json) or {}
    except json.JSONDecodeError:
        labels = {}
    listed = labels.get(PLATFORMS_LABEL, "") if isinstance(labels, dict) else ""
    return {a for a in listed.split(",") if a} or {arch}


@dataclass
class ImageBuilder:
    """Makes base images and the node image. ``online`` uses debian:trixie-slim from a registry."""

    online: bool = field(default_factory=lambda: online_by_default())
    progress: str = "auto"
    """buildx --progress value; 'quiet' also silences debootstrap."""
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))
    mirror: str | None = None
    work_dir: Path = field(default_factory=lambda: Path(os.environ.get("FAKEHW_IMAGE_WORK", "/var/tmp")))

    # ------------------------------------------------------------------------------------------ base

    def packages(self, arch: str) -> list[str]:
        """What the base image of ``arch`` holds: the node packages, plus the compilers on the build machine's
        own architecture (its base is also the build stage of the fake NVML)."""
        names = [*base_packages(), *DEBOOTSTRAP_EXTRA]
        if arch == NATIVE_ARCH:
            own = (CROSS_GCC.get(arch), f"libc6-dev-{arch}-cross")
            names += [p for p in base_packages(BUILD_PACKAGES_FILE) if p not in own]
        return names

    def base_key(self, arch: str) -> str:
        spec = {"suite": BASE_SUITE, "arch": arch, "packages": self.packages(arch), "recipe": BASE_RECIPE}
        return _digest([json.dumps(spec, sort_keys=True).encode()])

    def base_tag(self, arch: str) -> str:
        return f"{BASE_REPO}:{BASE_SUITE}-{arch}-{self.base_key(arch)[:12]}"

    def base_image(self, arch: str, rebuild: bool = False) -> ImageRef:
        """The offline base image for ``arch``: found by its content tag, else debootstrapped and imported."""
        if arch not in SUPPORTED_ARCHES:
            raise ImageInputError(f"unknown architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHES)})")
        key = self.base_key(arch)
        tag = self.base_tag(arch)
        alias = f"{BASE_REPO}:{BASE_SUITE}-{arch}"
        if not rebuild and image_platforms(tag) is not None:
            self._tag(tag, alias)
            return ImageRef(tag, key, "cached")
        if os.geteuid() != 0:
            raise ImageError(f"making the {arch} base image needs root (debootstrap); run 'sudo .venv/bin/testbed "
                             "images base' once, or build online with --online")
        if shutil.which("debootstrap") is None:
            raise ImageError("debootstrap is not installed; run 'testbed host setup' (as root)")
        start = time.monotonic()
        with self._scratch(f"base-{arch}-") as root:
            self._debootstrap(arch, root)
            self._import(arch, root, tag, key)
        self._tag(tag, alias)
        self.prune(BASE_REPO, keep={tag.split(":", 1)[1], alias.split(":", 1)[1]}, prefix=f"{BASE_SUITE}-{arch}-")
        seconds = time.monotonic() - start
        return ImageRef(tag, key, f"debootstrapped and imported in {seconds:.1f} s", seconds)

    def base_images(self, arches: Iterable[str]) -> dict[str, ImageRef]:
        """Base images for ``arches``, the missing ones made at the same time (debootstrap under QEMU is mostly
        waiting on one core; a native one fits beside it)."""
        wanted = list(dict.fromkeys(arches))
        with ThreadPoolExecutor(max_workers=len(wanted) or 1) as pool:
            futures = {arch: pool.submit(self.base_image, arch) for arch in wanted}
            return {arch: future.result() for arch, future in futures.items()}

    @contextlib.contextmanager
    def _scratch(self, prefix: str) -> Iterator[Path]:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=f"fakehw-{prefix}", dir=self.work_dir))
        try:
            yield path / "root"
        finally:
            _unmount_below(path)
            shutil.rmtree(path, ignore_errors=True)

    def _debootstrap(self, arch: str, root: Path) -> None:
        if arch != NATIVE_ARCH:
            entry = binfmt_entry(arch)
            if entry is None or entry.get("enabled") != "enabled":
                raise ImageError(f"{arch} binaries cannot run here (no QEMU binfmt entry); run 'testbed host "
                                 "setup' (as root)")
        mirror = self.mirror or debian_mirror()
        include = ",".join(self.packages(arch))
        argv = ["debootstrap", "--variant=minbase", f"--arch={arch}", f"--include={include}", BASE_SUITE,
                str(root), mirror]
        slow = " (minutes: package scripts run under QEMU)" if arch != NATIVE_ARCH else ""
        self.log(f"images: debootstrap {BASE_SUITE} for {arch} from {mirror}{slow}")
        _stream(argv, self.log if self.progress != "quiet" else None, f"debootstrap ({arch})",
                tail_file=root / "debootstrap" / "debootstrap.log")
        # What a container never needs: downloaded .debs, package lists (apt update refetches them), manual
        # pages, translations and documentation other than the copyright files.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (root / sub).glob("*"):
                if item.is_file():
                    item.unlink()
        for sub in ("usr/share/man", "usr/share/info", "usr/share/locale"):
            shutil.rmtree(root / sub, ignore_errors=True)
        for item in (root / "usr/share/doc").rglob("*"):
            if item.is_file() and item.name != "copyright":
                item.unlink()

    def _import(self, arch: str, root: Path, tag: str, key: str) -> None:
        self.log(f"images: importing {root} as {tag} (linux/{arch})")
        changes = ["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ENV LANG=C.UTF-8",
                   'CMD ["/bin/bash"]', f"LABEL {LABEL_KEY}={key}"]
        argv = ["docker", "import", "--platform", f"linux/{arch}"]
        for change in changes:
            argv += ["--change", change]
        argv += ["-", tag]
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        try:
            imp = subprocess.run(argv, stdin=tar.stdout, capture_output=True, text=True, check=False)
        finally:
            tar.stdout.close()
            tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise ImageError(f"docker import of the {arch} base image failed: {imp.stderr.strip()}")

    def _tag(self, source: str, alias: str) -> None:
        _docker(["image", "tag", source, alias])

    # ------------------------------------------------------------------------------------------ node

    def fetch_wheels(self) -> None:
        """Put the nvidia-ml-py wheel into the build context (pure Python), so the build needs no index.

        pip on this machine reaches the index (its proxy's certificate is trusted here, not in containers)."""
        name, _, version = NVIDIA_ML_PY.partition("==")
        if any(WHEELS_DIR.glob(f"{name.replace('-', '_')}-{version}-*.whl")):
            return
        out = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                              "--dest", str(WHEELS_DIR), NVIDIA_ML_PY], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            self.log(f"images: could not download {NVIDIA_ML_PY} ({out.stderr.strip().splitlines()[-1:]}); the "
                     "build will ask the index")

    def node_key(self) -> str:
        """Hash of the build context and of the recipe of every base image (not of which platforms are in it)."""
        bases = [ONLINE_BASE] if self.online else [self.base_key(a) for a in SUPPORTED_ARCHES]
        return _digest([context_key().encode(), *(b.encode() for b in bases)])

    def node_tag(self) -> str:
        return f"{NODE_REPO}:{self.node_key()[:12]}"

    def node_image(self, platforms: tuple[str, ...] = ("amd64", "riscv64"), rebuild: bool = False) -> ImageRef:
        """The node image holding (at least) ``platforms`` under one multi-platform tag named by its content.

        Found: returned at once. Otherwise built with buildx, for ``platforms`` plus whatever platforms the tag
        already had (the new image replaces the tag; BuildKit's cache makes those platforms cheap)."""
        for arch in platforms:
            if arch not in SUPPORTED_ARCHES:
                raise ImageInputError(f"unknown architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHES)})")
        key = self.node_key()
        tag = self.node_tag()
        have = image_platforms(tag)
        if not rebuild and have is not None and set(platforms) <= have:
            return ImageRef(tag, key, "cached")
        platforms = tuple(a for a in SUPPORTED_ARCHES if a in set(platforms) | (have or set()))
        build_args: dict[str, str] = {}
        if self.online:
            for arch in (*platforms, NATIVE_ARCH):
                build_args[f"BASE_{arch.upper()}"] = ONLINE_BASE
            build_args["BUILD_BASE"] = ONLINE_BASE
        else:
            for arch, ref in self.base_images((*platforms, NATIVE_ARCH)).items():
                build_args[f"BASE_{arch.upper()}"] = ref.tag
            build_args["BUILD_BASE"] = build_args[f"BASE_{NATIVE_ARCH.upper()}"]
        self.fetch_wheels()
        start = time.monotonic()
        argv = ["docker", "buildx", "build", "--platform", ",".join(f"linux/{a}" for a in platforms),
                "--file", str(NODE_DOCKERFILE), "--tag", tag, "--label", f"{LABEL_KEY}={key}",
                "--label", f"{PLATFORMS_LABEL}={','.join(platforms)}", "--load",
                f"--progress={'plain' if self.progress == 'quiet' else self.progress}"]
        for name, value in build_args.items():
            argv += ["--build-arg", f"{name}={value}"]
        if not self.online:
            # Offline means offline: no build step may reach a network (the bases have every package and the
            # wheel of nvidia-ml-py is in the context), so a build that works here works without one.
            argv += ["--network", "none"]
        argv.append(str(REPO_ROOT))
        self.log(f"images: building {tag} for {', '.join(platforms)} (docker buildx)")
        _stream(argv, self.log if self.progress != "quiet" else None, "docker buildx build")
        seconds = time.monotonic() - start
        self._tag(tag, f"{NODE_REPO}:latest")
        self.prune(NODE_REPO, keep={tag.split(":", 1)[1], "latest"}, newest=KEEP_NODE_IMAGES)
        return ImageRef(tag, key, f"built for {', '.join(platforms)} in {seconds:.1f} s", seconds)

    def prune(self, repo: str, keep: set[str], newest: int = 0, prefix: str = "") -> list[str]:
        """Remove tags of ``repo`` (starting with ``prefix``) other than ``keep`` and the ``newest`` others.

        Every change to the project makes a new content tag; without this, each edit would leave a gigabyte behind.
        An image a container still uses is left alone (the engine refuses), and so are dangling layers of other
        tools: only images labelled by this module are pruned."""
        out = _docker(["image", "ls", repo, "--format", "{{.Tag}}\t{{.CreatedAt}}"])
        rows = [line.split("\t", 1) for line in out.stdout.splitlines() if "\t" in line]
        candidates = sorted((r for r in rows if r[0] not in keep and r[0].startswith(prefix)),
                            key=lambda r: r[1], reverse=True)[newest:]
        removed = []
        for tag, _created in candidates:
            if _docker(["image", "rm", f"{repo}:{tag}"]).returncode == 0:
                removed.append(f"{repo}:{tag}")
        _docker(["image", "prune", "--force", "--filter", f"label={LABEL_KEY}"], timeout=300)
        return removed


def _stream(argv: list[str], log: Callable[[str], None] | None, what: str, tail_file: Path | None = None) -> None:
    """Run ``argv`` showing its output line by line (or keeping only the tail); fail with that tail."""
    tail: list[str] = []
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, errors="replace")
    except FileNotFoundError:
        raise ImageError(f"{argv[0]} is not installed; run 'testbed host setup' (as root)") from None
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        tail.append(line)
        del tail[:-40]
        if log is not None:
            log(f"  {line}")
    proc.wait()
    if proc.returncode != 0:
        extra = ""
        if tail_file is not None and tail_file.is_file():
            extra = "\n" + "\n".join(tail_file.read_text(errors="replace").splitlines()[-15:])
        raise ImageError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail[-20:]) + extra)


def _unmount_below(path: Path) -> None:
    """Unmount whatever a failed debootstrap left mounted inside ``path`` (proc, sys), deepest first."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    prefix = str(path.resolve()) + "/"
    targets = sorted((m.split()[1] for m in mounts if m.split()[1].startswith(prefix)), key=len, reverse=True)
    for target in targets:
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)
