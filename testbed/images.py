"""Node images: offline base images (debootstrap) and the node image of each architecture (docker buildx).

No registry is reachable on the machines this project runs on, so nothing can be pulled, not even
``debian:trixie-slim``. Base images are therefore made locally: ``debootstrap --variant=minbase`` of Debian
for each architecture (riscv64 runs its package scripts under QEMU user mode), imported with
``docker import --platform``. Online (GitHub Actions) the node Dockerfile takes ``debian:trixie-slim`` through a
build argument instead and installs the same packages with apt.

Mirrors fail (one served trixie's riscv64 index with a size its InRelease disagreed with, for hours). Before
debootstrap runs, the suite's index is checked (:mod:`testbed.archive`); an inconsistent one is skipped for the
next suite or mirror of :class:`BaseSources` (``images/base/sources.toml``, ``FAKEHW_DEBIAN_SUITES``,
``FAKEHW_DEBIAN_MIRRORS``), and when none works the error says which mirror served what, in a few lines
(:class:`MirrorError`), with debootstrap's own log left in a file.

Each architecture's node image is built on its own (``fakehw/node:<arch>-<key>``), so an amd64 node never waits
for riscv64 (minutes under QEMU) nor fails because riscv64's mirror is broken.

Everything is cached by content. A base image's tag carries a hash of what went into it (suite, architecture,
package list, recipe version); a cached base of any configured suite is used without asking a mirror. A node
image's tag carries a hash of its whole build context (Dockerfile, package list, the project's sources) and of the
base images it was built on. A second run finds the tags and returns at once. Builds of the same image by several
processes (pytest workers, a conformance run beside them) are serialised by a lock file: the second finds the
first's image instead of building it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from testbed.archive import DebianSource, IndexCheck, Opener, first_consistent
from testbed.host import NATIVE_ARCH, binfmt_entry, debian_mirror

SUPPORTED_ARCHES = ("amd64", "riscv64", "arm64")
REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGES_DIR = REPO_ROOT / "images"
PACKAGES_FILE = IMAGES_DIR / "base" / "packages.txt"
BUILD_PACKAGES_FILE = IMAGES_DIR / "base" / "build-packages.txt"
SOURCES_FILE = IMAGES_DIR / "base" / "sources.toml"
WHEELS_DIR = IMAGES_DIR / "node" / "wheels"
NVIDIA_ML_PY = "nvidia-ml-py==12.535.161"
"""The pynvml the node image gets; the same pin as the test extra of pyproject.toml."""
NODE_DOCKERFILE = IMAGES_DIR / "node" / "Dockerfile"
DEFAULT_SUITES = ("trixie", "forky", "sid")
"""Used when images/base/sources.toml names none: trixie (stable), then testing and unstable (same packages,
newer), which have riscv64 as an official architecture too."""
FALLBACK_MIRROR = "http://deb.debian.org/debian"
BASE_REPO = "fakehw/base"
NODE_REPO = "fakehw/node"
ONLINE_BASE = "debian:trixie-slim"
BASE_RECIPE = "2"
"""Bump when the way base images are made changes (not their package list: that is hashed)."""
NODE_RECIPE = "2"
"""Bump when the way node images are built changes (2: one image per architecture)."""
NODE_CONTEXT = ("pyproject.toml", "README.md", "setup.py", "fakehw", "testbed", "conformance", "images/base",
                "images/node")
"""What the node image's build context holds (mirrors images/node/Dockerfile.dockerignore)."""
CROSS_GCC = {"amd64": "gcc-x86-64-linux-gnu", "arm64": "gcc-aarch64-linux-gnu", "riscv64": "gcc-riscv64-linux-gnu"}
SKIP_PARTS = {"__pycache__", "_lib", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
SKIP_SUFFIXES = (".pyc", ".so", ".o")
LABEL_KEY = "org.fakehw.content-key"
KEEP_NODE_IMAGES = 2
"""Node images of earlier contents kept per architecture besides the current one (another checkout may use them)."""
PLATFORMS_LABEL = "org.fakehw.platforms"
SUITE_LABEL = "org.fakehw.suite"
MIRROR_FAULT = re.compile(r"Couldn't download|was corrupt|Invalid Release|Failed getting release|"
                          r"Release signed by unknown key|from mirror$")
"""debootstrap errors that mean the mirror served something wrong or nothing (COULDNTDL, COULDNTDLPKGS,
CORRUPTFILE, NOGETREL, NOGETRELSIG, INVALIDREL, MISSINGRELENTRY, BADRELSIG, UNKNOWNRELSIG, WRONGSUITE), not the
project's fault (LEFTOVERDEBS: a package the list names does not exist)."""


MIRROR_FAULT_MESSAGE = "the mirror's fault, not this project's"
"""Words every :class:`MirrorError` carries (a test seeing them in a child's output knows who is at fault)."""


class ImageError(Exception):
    """An image could not be made; the message says what failed and what to do."""


class ImageInputError(ImageError):
    """An unknown platform, a bad image reference or a bad sources setting."""


class MirrorError(ImageError):
    """No configured Debian source served a consistent suite for an architecture: the mirror's fault, not ours.

    Tests that need the image skip on this (with its message); everything else about a build failing fails them."""

    def __init__(self, arch: str, message: str, checks: tuple[IndexCheck, ...] = ()) -> None:
        super().__init__(message)
        self.arch = arch
        self.checks = checks


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

_SUITE_NAME = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
_MIRROR_URL = re.compile(r"^(?:https?|file)://\S+$")


def _split(value: str) -> list[str]:
    return [item for item in re.split(r"[\s,]+", value) if item]


@dataclass(frozen=True)
class BaseSources:
    """Where base images come from: suites in order of preference, the mirrors tried for each, and the keyring
    their InRelease is checked against (debootstrap's default, the Debian archive keyring, when None).

    The setting is ``images/base/sources.toml`` (kept with the package lists). ``testbed images --suite/--mirror``,
    else ``FAKEHW_DEBIAN_SUITES`` / ``FAKEHW_DEBIAN_MIRRORS`` (comma- or space-separated), replace its lists; with
    no mirror set anywhere, this machine's own apt mirror and then deb.debian.org are tried."""

    suites: tuple[str, ...]
    mirrors: tuple[str, ...]
    keyring: str | None = None

    @classmethod
    def load(cls, path: Path = SOURCES_FILE, environ: Mapping[str, str] | None = None,
             suites: Iterable[str] = (), mirrors: Iterable[str] = ()) -> BaseSources:
        env = os.environ if environ is None else environ
        file_suites, file_mirrors, keyring = _read_sources_setting(path)
        chosen_suites = list(suites) or _split(env.get("FAKEHW_DEBIAN_SUITES", "")) or file_suites \
            or list(DEFAULT_SUITES)
        chosen_mirrors = list(mirrors) or _split(env.get("FAKEHW_DEBIAN_MIRRORS", "")) or file_mirrors \
            or [debian_mirror(), FALLBACK_MIRROR]
        for suite in chosen_suites:
            if not _SUITE_NAME.match(suite):
                raise ImageInputError(f"suite {suite!r}: not a Debian suite name (e.g. trixie, forky, sid)")
        for mirror in chosen_mirrors:
            if not _MIRROR_URL.match(mirror):
                raise ImageInputError(f"mirror {mirror!r}: expected an http://, https:// or file:// URL of a "
                                      "Debian archive (e.g. http://deb.debian.org/debian)")
        if keyring is not None and not Path(keyring).is_file():
            raise ImageInputError(f"{path}: keyring {keyring}: no such file")
        return cls(tuple(dict.fromkeys(chosen_suites)), tuple(dict.fromkeys(m.rstrip("/") for m in chosen_mirrors)),
                   keyring)

    def candidates(self) -> list[DebianSource]:
        """Every (suite, mirror) in the order tried: the preferred suite on every mirror before the next suite."""
        return [DebianSource(mirror, suite) for suite in self.suites for mirror in self.mirrors]


def _read_sources_setting(path: Path) -> tuple[list[str], list[str], str | None]:
    """(suites, mirrors, keyring) of images/base/sources.toml; a bad file is a bad-input error naming it."""
    try:
        setting = tomllib.loads(path.read_text()) if path.is_file() else {}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ImageInputError(f"{path}: not a readable TOML file ({exc})") from None
    unknown = set(setting) - {"suites", "mirrors", "keyring"}
    if unknown:
        raise ImageInputError(f"{path}: unknown setting {', '.join(sorted(unknown))} (known: suites, mirrors, "
                              "keyring)")
    for key in ("suites", "mirrors"):
        value = setting.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ImageInputError(f"{path}: {key} must be a list of strings, got {value!r}")
    keyring = setting.get("keyring")
    if keyring is not None and not isinstance(keyring, str):
        raise ImageInputError(f"{path}: keyring must be a file name, got {keyring!r}")
    return list(setting.get("suites", [])), list(setting.get("mirrors", [])), keyring


@dataclass(frozen=True)
class ImageRef:
    """An image this module made or found: its tag, content key, and how it came to be (for the user)."""

    tag: str
    key: str
    how: str
    """'cached' (found, nothing done), 'built in 73.1 s', 'imported ...'."""
    seconds: float = 0.0
    suite: str = ""
    """The Debian suite a base image (or the base of a node image) holds; '' when not known (online builds)."""


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


def _check_arch(arch: str) -> None:
    if arch not in SUPPORTED_ARCHES:
        raise ImageInputError(f"unknown architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHES)})")


@dataclass
class ImageBuilder:
    """Makes base images and node images. ``online`` uses debian:trixie-slim from a registry."""

    online: bool = field(default_factory=lambda: online_by_default())
    progress: str = "auto"
    """buildx --progress value; 'quiet' also silences debootstrap."""
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))
    sources: BaseSources | None = None
    """Where base images come from (default: :meth:`BaseSources.load`, read when first needed)."""
    work_dir: Path = field(default_factory=lambda: Path(os.environ.get("FAKEHW_IMAGE_WORK", "/var/tmp")))
    opener: Opener | None = None
    """How mirror indexes are fetched (tests serve their own); None: urllib."""

    # ------------------------------------------------------------------------------------------ base

    def packages(self, arch: str) -> list[str]:
        """What the base image of ``arch`` holds: the node packages, plus the compilers on the build machine's
        own architecture (its base is also the build stage of the fake NVML)."""
        names = [*base_packages(), *DEBOOTSTRAP_EXTRA]
        if arch == NATIVE_ARCH:
            own = (CROSS_GCC.get(arch), f"libc6-dev-{arch}-cross")
            names += [p for p in base_packages(BUILD_PACKAGES_FILE) if p not in own]
        return names

    def base_sources(self) -> BaseSources:
        if self.sources is None:
            self.sources = BaseSources.load()
        return self.sources

    def base_key(self, arch: str, suite: str) -> str:
        spec = {"suite": suite, "arch": arch, "packages": self.packages(arch), "recipe": BASE_RECIPE}
        return _digest([json.dumps(spec, sort_keys=True).encode()])

    def base_tag(self, arch: str, suite: str) -> str:
        return f"{BASE_REPO}:{suite}-{arch}-{self.base_key(arch, suite)[:12]}"

    def cached_base(self, arch: str) -> ImageRef | None:
        """A base image of ``arch`` already in the store, for the most preferred configured suite that has one."""
        for suite in self.base_sources().suites:
            tag = self.base_tag(arch, suite)
            if image_platforms(tag) is not None:
                return ImageRef(tag, self.base_key(arch, suite), "cached", suite=suite)
        return None

    def base_image(self, arch: str, rebuild: bool = False) -> ImageRef:
        """The offline base image for ``arch``: a cached one of any configured suite, else debootstrapped from the
        first suite and mirror whose index is consistent (:class:`MirrorError` when none is)."""
        _check_arch(arch)
        found = None if rebuild else self.cached_base(arch)
        if found is None:
            with self._lock(f"base-{arch}"):
                found = None if rebuild else self.cached_base(arch)  # another process may have made it meanwhile
                if found is None:
                    found = self._make_base(arch)
        self._tag(found.tag, f"{BASE_REPO}:{arch}")
        self._tag(found.tag, f"{BASE_REPO}:{found.suite}-{arch}")
        return found

    def _make_base(self, arch: str) -> ImageRef:
        if os.geteuid() != 0:
            raise ImageError(f"making the {arch} base image needs root (debootstrap); run 'sudo .venv/bin/testbed "
                             "images base' once, or build online with --online")
        if shutil.which("debootstrap") is None:
            raise ImageError("debootstrap is not installed; run 'testbed host setup' (as root)")
        self._check_emulation(arch)
        start = time.monotonic()
        checks: list[IndexCheck] = []
        remaining = self.base_sources().candidates()
        while remaining:
            source, tried = self.choose_source(arch, remaining)
            checks += tried
            if source is None:
                break
            remaining = remaining[remaining.index(source) + 1:]
            tag = self.base_tag(arch, source.suite)
            key = self.base_key(arch, source.suite)
            with self._scratch(f"base-{arch}-") as root:
                fault = self._debootstrap(arch, root, source)
                if fault is not None:
                    checks.append(IndexCheck(source, arch, fault, 0.0))
                    continue
                self._import(arch, root, tag, key, source.suite)
            self.prune(BASE_REPO, keep={tag.split(":", 1)[1]}, prefix=f"{source.suite}-{arch}-")
            seconds = time.monotonic() - start
            return ImageRef(tag, key, f"debootstrapped {source} and imported in {seconds:.1f} s", seconds,
                            source.suite)
        raise MirrorError(arch, _mirror_message(arch, checks), tuple(checks))

    def choose_source(self, arch: str, candidates: list[DebianSource] | None = None
                      ) -> tuple[DebianSource | None, list[IndexCheck]]:
        """The first of ``candidates`` (default: every configured source) whose index of ``arch`` is consistent,
        and the checks made to find it (each skipped source is logged in one line)."""
        todo = self.base_sources().candidates() if candidates is None else candidates
        return first_consistent(todo, arch, log=self.log, opener=self.opener)

    def _check_emulation(self, arch: str) -> None:
        if arch != NATIVE_ARCH:
            entry = binfmt_entry(arch)
            if entry is None or entry.get("enabled") != "enabled":
                raise ImageError(f"{arch} binaries cannot run here (no QEMU binfmt entry); run 'testbed host "
                                 "setup' (as root)")

    def base_images(self, arches: Iterable[str]) -> dict[str, ImageRef]:
        """Base images for ``arches``, one after the other (each architecture's are independent)."""
        return {arch: self.base_image(arch) for arch in dict.fromkeys(arches)}

    @contextlib.contextmanager
    def _scratch(self, prefix: str) -> Iterator[Path]:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=f"fakehw-{prefix}", dir=self.work_dir))
        try:
            yield path / "root"
        finally:
            _unmount_below(path)
            shutil.rmtree(path, ignore_errors=True)

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        """Hold ``<work_dir>/fakehw-<name>.lock`` (one process builds an image; the others then find it)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with open(self.work_dir / f"fakehw-{name}.lock", "a") as handle:
            if not _try_lock(handle.fileno()):
                self.log(f"images: waiting for another process building {name} ({self.work_dir}/fakehw-{name}.lock)")
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def debootstrap_log(self, arch: str) -> Path:
        """Where the last debootstrap for ``arch`` left its whole output."""
        return self.work_dir / f"fakehw-debootstrap-{arch}.log"

    def _debootstrap(self, arch: str, root: Path, source: DebianSource) -> str | None:
        """Debootstrap ``source`` into ``root``. None when it worked; the mirror's fault in one line when the
        mirror served something wrong (the caller tries the next source); :class:`ImageError` otherwise."""
        include = ",".join(self.packages(arch))
        keyring = self.base_sources().keyring
        argv = ["debootstrap", "--variant=minbase", f"--arch={arch}", f"--include={include}",
                *([f"--keyring={keyring}"] if keyring else []), source.suite, str(root), source.mirror]
        slow = " (minutes: package scripts run under QEMU)" if arch != NATIVE_ARCH else ""
        self.log(f"images: debootstrap {source.suite} for {arch} from {source.mirror}{slow}")
        log_path = self.debootstrap_log(arch)
        code, errors = _run_logged(argv, log_path, self.log if self.progress != "quiet" else None)
        if code != 0:
            inner = root / "debootstrap" / "debootstrap.log"
            if inner.is_file():
                with log_path.open("a") as out:
                    out.write("\n--- debootstrap/debootstrap.log ---\n" + inner.read_text(errors="replace"))
            first = errors[0] if errors else f"exit {code}"
            if any(MIRROR_FAULT.search(line) for line in errors):
                return f"debootstrap: {first.removeprefix('E: ')} (log: {log_path})"
            raise ImageError(f"debootstrap of {source} for {arch} failed: {first.removeprefix('E: ')} "
                             f"(whole log: {log_path})")
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
        return None

    def _import(self, arch: str, root: Path, tag: str, key: str, suite: str) -> None:
        self.log(f"images: importing {root} as {tag} (linux/{arch})")
        changes = ["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ENV LANG=C.UTF-8",
                   'CMD ["/bin/bash"]', f"LABEL {LABEL_KEY}={key}", f"LABEL {SUITE_LABEL}={suite}"]
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

    def node_bases(self, arch: str) -> dict[str, ImageRef]:
        """The base images the node image of ``arch`` is built from: its own, and the build machine's (the
        build stages), found or made. Online: none (debian:trixie-slim)."""
        if self.online:
            return {}
        return self.base_images(dict.fromkeys((arch, NATIVE_ARCH)))

    def node_key(self, arch: str, bases: Mapping[str, ImageRef]) -> str:
        """Hash of the build context, the architecture and the base images it is built on."""
        used = [ONLINE_BASE] if self.online else [f"{a}={ref.key}" for a, ref in sorted(bases.items())]
        return _digest([context_key().encode(), arch.encode(), NODE_RECIPE.encode(), *(b.encode() for b in used)])

    def node_image(self, arch: str, rebuild: bool = False) -> ImageRef:
        """The node image of ``arch`` (``fakehw/node:<arch>-<key>``): found by its content tag, else built.

        Only ``arch``'s base and the build machine's are needed: amd64 never waits for, nor fails with, riscv64."""
        _check_arch(arch)
        bases = self.node_bases(arch)
        key = self.node_key(arch, bases)
        tag = f"{NODE_REPO}:{arch}-{key[:12]}"
        suite = bases[arch].suite if arch in bases else ""
        if not rebuild and image_platforms(tag) is not None:
            self._tag(tag, f"{NODE_REPO}:{arch}")
            return ImageRef(tag, key, "cached", suite=suite)
        with self._lock(f"node-{arch}"):
            if not rebuild and image_platforms(tag) is not None:
                return ImageRef(tag, key, "cached (built by another process)", suite=suite)
            seconds = self._buildx(arch, bases, tag, key)
        self._tag(tag, f"{NODE_REPO}:{arch}")
        self.prune(NODE_REPO, keep={tag.split(":", 1)[1], arch}, newest=KEEP_NODE_IMAGES, prefix=f"{arch}-")
        return ImageRef(tag, key, f"built in {seconds:.1f} s", seconds, suite)

    def node_images(self, arches: Iterable[str], rebuild: bool = False) -> dict[str, ImageRef]:
        """Node images of ``arches`` (each on its own; the first failure is raised)."""
        return {arch: self.node_image(arch, rebuild) for arch in dict.fromkeys(arches)}

    def _buildx(self, arch: str, bases: Mapping[str, ImageRef], tag: str, key: str) -> float:
        build_args: dict[str, str] = {}
        build_base = ONLINE_BASE if self.online else bases[NATIVE_ARCH].tag
        for other in SUPPORTED_ARCHES:  # stages of other architectures are never built; any local image will do
            build_args[f"BASE_{other.upper()}"] = ONLINE_BASE if self.online else bases.get(other, bases[
                NATIVE_ARCH]).tag
        build_args["BUILD_BASE"] = build_base
        self.fetch_wheels()
        start = time.monotonic()
        argv = ["docker", "buildx", "build", "--platform", f"linux/{arch}", "--file", str(NODE_DOCKERFILE),
                "--tag", tag, "--label", f"{LABEL_KEY}={key}", "--label", f"{PLATFORMS_LABEL}={arch}", "--load",
                f"--progress={'plain' if self.progress == 'quiet' else self.progress}"]
        for name, value in build_args.items():
            argv += ["--build-arg", f"{name}={value}"]
        if not self.online:
            # Offline means offline: no build step may reach a network (the bases have every package and the
            # wheel of nvidia-ml-py is in the context), so a build that works here works without one.
            argv += ["--network", "none"]
        argv.append(str(REPO_ROOT))
        self.log(f"images: building {tag} for linux/{arch} (docker buildx)")
        _stream(argv, self.log if self.progress != "quiet" else None, f"docker buildx build ({arch})")
        return time.monotonic() - start

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


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _mirror_message(arch: str, checks: list[IndexCheck]) -> str:
    """The few lines a user needs: that it is the mirror, what each source served, and what to change."""
    lines = [f"no Debian source served a consistent {arch} index ({MIRROR_FAULT_MESSAGE}):"]
    lines += [f"  {check.describe()}" for check in checks if not check.ok]
    lines.append(f"  try another mirror or suite: FAKEHW_DEBIAN_MIRRORS=URL or FAKEHW_DEBIAN_SUITES=a,b "
                 f"({SOURCES_FILE.relative_to(REPO_ROOT)}), or retry later")
    return "\n".join(lines)


def _run_logged(argv: list[str], log_path: Path, log: Callable[[str], None] | None) -> tuple[int, list[str]]:
    """Run ``argv`` with its whole output in ``log_path`` (and line by line to ``log``); exit status and its
    error lines (``E: ...``, else its last warning)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    warnings: list[str] = []
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, errors="replace")
    except FileNotFoundError:
        raise ImageError(f"{argv[0]} is not installed; run 'testbed host setup' (as root)") from None
    assert proc.stdout is not None
    with log_path.open("w") as out:
        for line in proc.stdout:
            out.write(line)
            line = line.rstrip("\n")
            if line.startswith("E: "):
                errors.append(line)
            elif line.startswith("W: "):
                warnings.append(line)
            if log is not None:
                log(f"  {line}")
    proc.wait()
    return proc.returncode, errors or warnings[-1:]


def _stream(argv: list[str], log: Callable[[str], None] | None, what: str) -> None:
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
        raise ImageError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail[-20:]))


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
