"""``testbed host setup``: make this machine able to build and run multi-arch node images.

The docker backend needs a Docker engine with the containerd image store (only that store keeps a
multi-platform image under one tag, which ``docker buildx build --platform a,b --load`` needs), the buildx
plugin, QEMU user-mode emulation registered with binfmt_misc (riscv64 nodes run their own binaries under it) and
debootstrap (base images are made offline; no registry is reachable). The recipe is the one recorded in
``../shared/HOST.md``: on Debian 12 the engine comes from the trixie suite through a separate apt sources list,
so the machine is not switched to trixie.

Setup is a list of checks. Each one finds what is there; when something is missing and this process may act
(root, apt-get) it fixes it and says what it did, otherwise it prints the exact commands to run. When everything
is present it only reads a few files and asks the engine once, so ``make test`` can call it every time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

MIN_DOCKER_MAJOR = 25
"""Oldest engine whose built-in BuildKit loads multi-platform images into the containerd store."""
DOCKER_PACKAGES = ("docker.io", "docker-buildx", "containerd")
EMULATION_PACKAGES = ("qemu-user-static", "binfmt-support")
BASE_IMAGE_PACKAGES = ("debootstrap", "debian-archive-keyring")
QEMU_NAMES = {"riscv64": "riscv64", "arm64": "aarch64", "amd64": "x86_64"}
"""Docker architecture -> QEMU's name for it (binfmt entry ``qemu-<name>``), which is also the kernel's."""
NATIVE_ARCH = {machine: arch for arch, machine in QEMU_NAMES.items()}.get(os.uname().machine, "")
"""This machine's Docker architecture ("" for one the testbed does not know)."""
DAEMON_JSON = Path("/etc/docker/daemon.json")
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
APT_DIR = Path("/var/lib/fakehw/apt")
"""Where the separate trixie sources list and its package lists live (never /etc/apt/sources.list.d)."""
DOCKERD_LOG = Path("/var/log/fakehw-dockerd.log")
CONTAINERD_STORE = "io.containerd.snapshotter.v1"


@dataclass(frozen=True)
class Finding:
    """One thing the docker backend needs: whether it is there, what was seen, and how to get it if not."""

    name: str
    ok: bool
    detail: str
    fix: tuple[str, ...] = ()
    """Shell commands (for a root shell) that would provide it."""


@dataclass
class HostReport:
    """What ``setup`` found and did. ``ready`` means images can be built and node containers run."""

    findings: list[Finding] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    acted: bool = False
    """Whether this run was allowed to change the machine (root and apt-get)."""

    @property
    def ready(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def missing(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    def render(self) -> str:
        lines = [f"  did      {a}" for a in self.actions]
        for f in self.findings:
            lines.append(f"  {'ok' if f.ok else 'MISSING':8} {f.name}: {f.detail}")
        missing = self.missing
        if missing:
            lines.append("")
            lines.append("to finish, run as root (or: sudo .venv/bin/testbed host setup):" if not self.acted else
                         "these could not be fixed automatically; run as root:")
            seen: set[str] = set()
            for f in missing:
                for cmd in f.fix:
                    if cmd not in seen:
                        seen.add(cmd)
                        lines.append(f"    {cmd}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- probing


def _run(argv: Sequence[str], timeout: float = 30.0, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run a probe; a missing program is an ordinary failed result, not an exception."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                              input=input.decode() if input is not None else None)
    except FileNotFoundError:
        return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]}: timed out after {timeout:.0f} s")


def installed_version(package: str) -> str | None:
    out = _run(["dpkg-query", "-W", "-f", "${Status}\t${Version}", package])
    if out.returncode != 0 or "install ok installed" not in out.stdout:
        return None
    return out.stdout.split("\t", 1)[1].strip()


def major_version(version: str | None) -> int:
    """``26.1.5+dfsg1-9`` -> 26; anything unreadable -> 0."""
    match = re.match(r"^(?:\d+:)?(\d+)", version or "")
    return int(match.group(1)) if match else 0


@dataclass(frozen=True)
class OsInfo:
    id: str
    codename: str

    @classmethod
    def read(cls, path: Path = Path("/etc/os-release")) -> OsInfo:
        values: dict[str, str] = {}
        try:
            for line in path.read_text().splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    values[key.strip()] = value.strip().strip('"')
        except OSError:
            pass
        return cls(values.get("ID", "unknown"), values.get("VERSION_CODENAME", ""))


def debian_mirror(sources_dir: Path = Path("/etc/apt")) -> str:
    """The Debian archive this machine already uses (deb822 or one-line sources), for the trixie list."""
    candidates = sorted((sources_dir / "sources.list.d").glob("*.sources")) if sources_dir.is_dir() else []
    for path in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        for match in re.finditer(r"^URIs:\s*(\S+)", text, re.MULTILINE):
            uri = match.group(1).rstrip("/")
            if uri.endswith("/debian"):
                return uri
    for path in [sources_dir / "sources.list", *sorted((sources_dir / "sources.list.d").glob("*.list"))]:
        try:
            text = path.read_text()
        except OSError:
            continue
        for match in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+/debian)/?\s", text, re.MULTILINE):
            return match.group(1)
    return "http://deb.debian.org/debian"


def trixie_apt_options() -> list[str]:
    """apt-get options that use the separate trixie sources list (and lists) setup writes on Debian 12, leaving
    the machine's own apt configuration alone."""
    return [f"-o Dir::Etc::SourceList={APT_DIR}/trixie.list", "-o Dir::Etc::SourceParts=/dev/null",
            f"-o Dir::State::Lists={APT_DIR}/lists"]


def engine_info() -> dict[str, object] | None:
    """``docker info`` as a dict, or None when no engine answers."""
    out = _run(["docker", "info", "--format", "{{json .}}"], timeout=20)
    if out.returncode != 0:
        return None
    try:
        info = json.loads(out.stdout)
    except json.JSONDecodeError:
        return None
    if not isinstance(info, dict) or info.get("ServerVersion") in (None, ""):
        return None
    return info


def uses_containerd_store(info: dict[str, object]) -> bool:
    status = info.get("DriverStatus") or []
    return any(isinstance(row, list) and CONTAINERD_STORE in row for row in status)  # type: ignore[attr-defined]


def binfmt_entry(arch: str) -> dict[str, str] | None:
    """The binfmt_misc registration that runs ``arch`` binaries, or None. Keys: enabled, interpreter, flags."""
    path = BINFMT_DIR / f"qemu-{QEMU_NAMES.get(arch, arch)}"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    entry = {"enabled": lines[0].strip() if lines else ""}
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        entry[key.rstrip(":")] = value.strip()
    return entry


# --------------------------------------------------------------------------------------------------- setup


@dataclass
class HostSetup:
    """Checks (and, when allowed, fixes) the machine for ``platforms`` (Docker architectures, e.g. riscv64)."""

    platforms: tuple[str, ...] = ("amd64", "riscv64")
    act: bool = True
    """Change the machine when root and apt-get are there; False only reports."""
    base_images: bool = field(default_factory=lambda: os.environ.get("FAKEHW_IMAGES_ONLINE", "") != "1")
    """Whether offline base images will be made here (needs debootstrap); not on online (GitHub) runners."""
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True)
    os_info: OsInfo = field(default_factory=OsInfo.read)

    @property
    def can_act(self) -> bool:
        return self.act and os.geteuid() == 0 and shutil.which("apt-get") is not None

    def run(self) -> HostReport:
        report = HostReport(acted=self.can_act)
        self._packages(report)
        self._daemon_json(report)
        self._engine(report)
        self._buildx(report)
        self._binfmt(report)
        return report

    # -- packages -------------------------------------------------------------------------------------

    def _docker_source(self) -> str:
        """Where a new enough engine comes from on this distribution: 'trixie', 'main' or '' (unknown)."""
        if self.os_info.id == "debian":
            return "trixie" if self.os_info.codename in ("bookworm", "bullseye") else "main"
        if self.os_info.id == "ubuntu":
            return "main"
        return ""

    def _docker_install_commands(self) -> tuple[str, ...]:
        packages = " ".join(DOCKER_PACKAGES)
        if self._docker_source() == "trixie":
            opts = self._trixie_apt_options()
            return (f"mkdir -p {APT_DIR}/lists/partial && echo '{self._trixie_line()}' > {APT_DIR}/trixie.list",
                    f"apt-get {' '.join(opts)} update",
                    f"apt-get {' '.join(opts)} install -y --no-install-recommends {packages}")
        if self._docker_source() == "main":
            return ("apt-get update", f"apt-get install -y --no-install-recommends {packages}")
        return (f"install a Docker engine >= {MIN_DOCKER_MAJOR} with the buildx plugin "
                "(https://docs.docker.com/engine/install/)",)

    def _trixie_line(self) -> str:
        """The trixie source of the Docker packages: the first of ``FAKEHW_DEBIAN_MIRRORS`` (the mirror setting
        the base images use too) if set, else this machine's own mirror."""
        chosen = os.environ.get("FAKEHW_DEBIAN_MIRRORS", "").replace(",", " ").split()
        mirror = chosen[0].rstrip("/") if chosen else debian_mirror()
        return f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {mirror} trixie main"

    def _trixie_apt_options(self) -> list[str]:
        return trixie_apt_options()

    def _packages(self, report: HostReport) -> None:
        dockerd = installed_version("docker.io") or installed_version("docker-ce")
        buildx = installed_version("docker-buildx") or installed_version("docker-buildx-plugin")
        have_engine = major_version(dockerd) >= MIN_DOCKER_MAJOR and shutil.which("dockerd") is not None
        if not (have_engine and buildx) and self.can_act and self._docker_source():
            self._install_docker(report)
            dockerd = installed_version("docker.io") or installed_version("docker-ce")
            buildx = installed_version("docker-buildx") or installed_version("docker-buildx-plugin")
            have_engine = major_version(dockerd) >= MIN_DOCKER_MAJOR and shutil.which("dockerd") is not None
        if have_engine:
            report.findings.append(Finding("docker engine", True, f"dockerd {dockerd}"))
        else:
            seen = f"dockerd {dockerd} is too old (multi-platform images need >= {MIN_DOCKER_MAJOR})" if dockerd \
                else "no dockerd"
            report.findings.append(Finding("docker engine", False, seen, self._docker_install_commands()))
        if buildx:
            report.findings.append(Finding("buildx package", True, f"buildx {buildx}"))
        else:
            report.findings.append(Finding("buildx package", False, "no docker-buildx package",
                                           self._docker_install_commands()))

        # QEMU registered some other way (docker/setup-qemu-action, tonistiigi/binfmt) needs no packages here.
        emulated = [a for a in self._foreign_platforms() if not _emulation_ready(binfmt_entry(a))]
        wanted = list(EMULATION_PACKAGES) if emulated else []
        if self.base_images:
            wanted += BASE_IMAGE_PACKAGES
        missing = [p for p in wanted if installed_version(p) is None]
        if missing and self.can_act:
            self.log(f"host setup: installing {' '.join(missing)}")
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            self._apt(["apt-get", "update", "-qq"], env, report, quiet=True)
            self._apt(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env, report)
            report.actions.append(f"installed {' '.join(missing)}")
            missing = [p for p in wanted if installed_version(p) is None]
        for pkg in wanted:
            version = installed_version(pkg)
            report.findings.append(Finding(pkg, version is not None, version or "not installed",
                                           () if version else ("apt-get update",
                                                               f"apt-get install -y --no-install-recommends {pkg}")))

    def _apt(self, argv: list[str], env: dict[str, str], report: HostReport, quiet: bool = False) -> None:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if out.returncode != 0 and not quiet:
            tail = (out.stderr or out.stdout).strip().splitlines()[-5:]
            self.log("host setup: " + " ".join(argv[:2]) + " failed:\n    " + "\n    ".join(tail))

    def _install_docker(self, report: HostReport) -> None:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        # The engine reads daemon.json when the package starts it: write it first.
        self._write_daemon_json(report)
        packages = list(DOCKER_PACKAGES)
        if self._docker_source() == "trixie":
            (APT_DIR / "lists" / "partial").mkdir(parents=True, exist_ok=True)
            (APT_DIR / "trixie.list").write_text(self._trixie_line() + "\n")
            opts = [o for opt in self._trixie_apt_options() for o in opt.split(" ", 1)]
            self.log("host setup: installing docker.io, docker-buildx, containerd from Debian trixie "
                     f"(separate sources list {APT_DIR}/trixie.list)")
            self._apt(["apt-get", *opts, "update", "-qq"], env, report, quiet=True)
            self._apt(["apt-get", *opts, "install", "-y", "-qq", "--no-install-recommends", *packages], env, report)
            report.actions.append(f"installed {' '.join(packages)} from trixie ({APT_DIR}/trixie.list)")
        else:
            self.log(f"host setup: installing {' '.join(packages)}")
            self._apt(["apt-get", "update", "-qq"], env, report, quiet=True)
            self._apt(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env, report)
            report.actions.append(f"installed {' '.join(packages)}")

    def _foreign_platforms(self) -> list[str]:
        return [p for p in self.platforms if p != NATIVE_ARCH]

    # -- daemon.json ----------------------------------------------------------------------------------

    def _daemon_config(self) -> dict[str, object]:
        try:
            data = json.loads(DAEMON_JSON.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_daemon_json(self, report: HostReport) -> bool:
        """Turn the containerd image store on in daemon.json, keeping every other setting. True if changed."""
        config = self._daemon_config()
        features = config.get("features")
        features = dict(features) if isinstance(features, dict) else {}
        if features.get("containerd-snapshotter") is True:
            return False
        features["containerd-snapshotter"] = True
        config["features"] = features
        DAEMON_JSON.parent.mkdir(parents=True, exist_ok=True)
        DAEMON_JSON.write_text(json.dumps(config, indent=2) + "\n")
        report.actions.append(f"enabled the containerd image store in {DAEMON_JSON}")
        return True

    def _daemon_json(self, report: HostReport) -> None:
        features = self._daemon_config().get("features")
        on = isinstance(features, dict) and features.get("containerd-snapshotter") is True
        if not on and self.can_act:
            on = True
            self._write_daemon_json(report)
        fix = (f"write {DAEMON_JSON} with {{\"features\": {{\"containerd-snapshotter\": true}}}} and restart "
               "the engine",)
        report.findings.append(Finding("containerd image store configured", on,
                                       f"{DAEMON_JSON}: features.containerd-snapshotter is "
                                       f"{'on' if on else 'off'}", () if on else fix))

    # -- the engine -----------------------------------------------------------------------------------

    def _engine(self, report: HostReport) -> None:
        info = engine_info()
        if self.can_act and shutil.which("dockerd"):
            if info is None:
                self._start_engine(report)
                info = engine_info()
            elif not uses_containerd_store(info):
                self._restart_engine(report)
                info = engine_info()
        start = ("systemctl start docker" if _systemd() else
                 f"nohup dockerd > {DOCKERD_LOG} 2>&1 &")
        if info is None:
            report.findings.append(Finding("docker engine running", False, "no engine answers `docker info`",
                                           (start,)))
            return
        version = str(info.get("ServerVersion", "?"))
        if uses_containerd_store(info):
            report.findings.append(Finding("docker engine running", True,
                                           f"{version}, containerd image store, {info.get('Driver')}"))
        else:
            restart = "systemctl restart docker" if _systemd() else "stop dockerd, then: " + start
            report.findings.append(Finding("docker engine running", False,
                                           f"{version} runs without the containerd image store "
                                           "(multi-platform images cannot be loaded)", (restart,)))

    def _start_engine(self, report: HostReport) -> None:
        if _systemd():
            _run(["systemctl", "start", "docker"], timeout=120)
            how = "systemctl start docker"
        else:
            DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
            with open(DOCKERD_LOG, "ab") as log:
                subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
            how = f"started dockerd (log: {DOCKERD_LOG})"
        self.log(f"host setup: {how}")
        if _wait_for_engine(60.0):
            report.actions.append(how)
        else:
            self.log(f"host setup: the engine did not answer within 60 s; see {DOCKERD_LOG}")

    def _restart_engine(self, report: HostReport) -> None:
        """Restart an engine that runs without the containerd store (it only reads daemon.json at start)."""
        if _systemd():
            _run(["systemctl", "restart", "docker"], timeout=120)
            _wait_for_engine(60.0)
            report.actions.append("restarted the engine (systemctl) for the containerd image store")
            return
        pid = _dockerd_pid()
        if pid is None:
            self.log("host setup: the engine runs without the containerd store and its pid is unknown; "
                     "restart it by hand")
            return
        self.log(f"host setup: restarting dockerd (pid {pid}) for the containerd image store")
        os.kill(pid, 15)
        deadline = time.monotonic() + 60
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        self._start_engine(report)
        report.actions.append("restarted dockerd for the containerd image store")

    # -- buildx and emulation -------------------------------------------------------------------------

    def _buildx(self, report: HostReport) -> None:
        out = _run(["docker", "buildx", "version"], timeout=20)
        if out.returncode == 0:
            report.findings.append(Finding("buildx plugin", True, out.stdout.strip().split("\n")[0]))
        else:
            report.findings.append(Finding("buildx plugin", False, "`docker buildx version` failed: "
                                           + (out.stderr.strip().splitlines() or ["?"])[-1],
                                           self._docker_install_commands()))

    def _binfmt(self, report: HostReport) -> None:
        foreign = self._foreign_platforms()
        if not foreign:
            return
        mounted = (BINFMT_DIR / "status").exists()
        if not mounted and self.can_act:
            out = _run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)])
            mounted = (BINFMT_DIR / "status").exists()
            if mounted:
                report.actions.append(f"mounted binfmt_misc on {BINFMT_DIR}")
            else:
                self.log(f"host setup: mounting binfmt_misc failed: {out.stderr.strip()}")
        if not mounted:
            report.findings.append(Finding("binfmt_misc", False, f"not mounted on {BINFMT_DIR}",
                                           (f"mount -t binfmt_misc binfmt_misc {BINFMT_DIR}",)))
            return
        for arch in foreign:
            qemu = f"qemu-{QEMU_NAMES.get(arch, arch)}"
            entry = binfmt_entry(arch)
            if (entry is None or entry.get("enabled") != "enabled") and self.can_act \
                    and shutil.which("update-binfmts"):
                _run(["update-binfmts", "--enable", qemu])
                entry = binfmt_entry(arch)
                if entry is not None and entry.get("enabled") == "enabled":
                    report.actions.append(f"enabled {qemu} in binfmt_misc")
            fix = (f"apt-get install -y qemu-user-static binfmt-support && update-binfmts --enable {qemu}",)
            if entry is None:
                report.findings.append(Finding(f"{arch} emulation", False, f"no {qemu} binfmt entry", fix))
            elif entry.get("enabled") != "enabled":
                report.findings.append(Finding(f"{arch} emulation", False, f"{qemu} is registered but disabled",
                                               fix))
            elif "F" not in entry.get("flags", ""):
                report.findings.append(Finding(
                    f"{arch} emulation", False,
                    f"{qemu} lacks the F (fix-binary) flag, so containers cannot find {entry.get('interpreter')}",
                    ("apt-get install -y qemu-user-static (its binfmt entries use fix-binary)",)))
            else:
                report.findings.append(Finding(f"{arch} emulation", True,
                                               f"{qemu} -> {entry.get('interpreter')} (flags {entry['flags']})"))


def _emulation_ready(entry: dict[str, str] | None) -> bool:
    return entry is not None and entry.get("enabled") == "enabled" and "F" in entry.get("flags", "")


def _systemd() -> bool:
    try:
        return Path("/proc/1/comm").read_text().strip() == "systemd"
    except OSError:
        return False


def _dockerd_pid() -> int | None:
    for path in (Path("/var/run/docker.pid"), Path("/run/docker.pid")):
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            continue
    return None


def _wait_for_engine(timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine_info() is not None:
            return True
        time.sleep(0.5)
    return False


def engine_problem() -> str | None:
    """Why node containers cannot run here (None when they can): for skips and errors that name the fix."""
    if shutil.which("docker") is None:
        return "no docker CLI; run 'testbed host setup' (as root) to install the engine"
    info = engine_info()
    if info is None:
        return "no Docker engine answers `docker info`; run 'testbed host setup' (as root)"
    if not uses_containerd_store(info):
        return ("the Docker engine runs without the containerd image store (multi-platform images cannot be "
                "loaded); run 'testbed host setup' (as root)")
    return None
