"""Running the real ``nvidia-smi`` against the fake library.

The binaries come from Debian's non-free ``nvidia-smi`` packages of three driver branches (535 bookworm, 550
trixie, 555 experimental), extracted (never installed) by ``tools/fetch-real-nvidia.sh`` into
``.cache/nvidia-<branch>`` (or ``$FAKEHW_REAL_NVIDIA_CACHE/nvidia-<branch>``). Each loads ``libnvidia-ml.so.1``
through ``LD_LIBRARY_PATH`` like any consumer, and each accepts only a library of its own driver release (the
fake refuses its export table to another release's nvidia-smi, which then prints "Mismatch in versions"), so
:func:`run_nvidia_smi` picks the nvidia-smi of the snapshot's driver.

What it needs beyond NVML was found by tracing it: nothing from ``/proc/driver/nvidia`` or ``/dev/nvidia*`` for
``-L``, ``-q``, ``-q -x``, ``topo -m`` and ``nvlink -s``. For ``topo -m`` the 535 binary finds the NICs itself in
sysfs (``/sys/bus/pci/drivers/mlx5_core/<bdf>`` and ``/sys/bus/pci/devices/<bdf>/infiniband/<name>``), so the
runner gives it a small ``/sys/bus/pci`` made from the snapshot's NIC records in a private mount namespace; 550
and 555 read all of ``/sys`` with their embedded hwloc, which needs the node's whole tree at ``/sys``: callers
pass ``wrap`` (the testbed's node view, :mod:`testbed.nodeview`) for that. Without the privilege to make a mount
namespace it runs without one and ``topo -m`` shows no NIC columns.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fakehw.model.drivers import BRANCHES, branch_number
from fakehw.nvml import SNAPSHOT_ENV, library_dir
from fakehw.nvml.snapshot import Snapshot, read_snapshot

REAL_NVIDIA_CACHE_ENV = "FAKEHW_REAL_NVIDIA_CACHE"
"""Directory holding ``nvidia-<branch>`` caches (default ``.cache`` in the checkout)."""
REAL_NVIDIA_ENV = "FAKEHW_REAL_NVIDIA_DIR"
"""The 535 cache itself (kept for checkouts that share one 535 extraction)."""
REPO_ROOT = Path(__file__).resolve().parents[2]
DEBIAN_BRANCHES = tuple(b.number for b in BRANCHES if b.debian_suite is not None)
"""Branches whose real nvidia-smi Debian ships: 535, 550, 555."""


class SmiUnavailable(RuntimeError):
    """The real nvidia-smi of a branch is not there (run tools/fetch-real-nvidia.sh as root), or none exists."""


@dataclass(frozen=True)
class RealNvidia:
    """The extracted real NVIDIA user space of one branch: nvidia-smi, the real libnvidia-ml (and 535's nvml.h)."""

    root: Path
    version: str
    """Debian package version, e.g. ``535.261.03-1``."""

    @property
    def driver_version(self) -> str:
        return self.version.split("-")[0]

    @property
    def branch(self) -> int:
        return branch_number(self.driver_version)

    @property
    def smi(self) -> Path:
        return self.root / "usr" / "lib" / "nvidia" / "current" / "nvidia-smi"

    @property
    def header(self) -> Path:
        return self.root / "usr" / "include" / "nvml.h"

    @property
    def library(self) -> Path:
        found = sorted(self.root.glob(f"usr/lib/*/nvidia/current/libnvidia-ml.so.{self.driver_version}"))
        if not found:
            raise SmiUnavailable(f"no libnvidia-ml.so.{self.driver_version} under {self.root}")
        return found[0]


def real_nvidia_dir(branch: int) -> Path:
    """Where the packages of ``branch`` are extracted."""
    if branch == 535 and os.environ.get(REAL_NVIDIA_ENV):
        return Path(os.environ[REAL_NVIDIA_ENV])
    return Path(os.environ.get(REAL_NVIDIA_CACHE_ENV) or REPO_ROOT / ".cache") / f"nvidia-{branch}"


def find_real_nvidia(branch: int = 535, root: Path | None = None) -> RealNvidia:
    """The extracted packages of ``branch``, or :class:`SmiUnavailable` saying why they are not there."""
    if branch not in DEBIAN_BRANCHES:
        raise SmiUnavailable(f"no real nvidia-smi of branch {branch} can be had here (Debian ships "
                             f"{', '.join(map(str, DEBIAN_BRANCHES))}); pynvml, go-nvml and NVIDIA's components see "
                             f"branch {branch} as its header defines it. For the real nvidia-smi, run a node on one of "
                             "those drivers: 'testbed up --driver 535.261.03' (or 550.163.01, 555.58.02), or a "
                             "profile with 'extends: <profile>' and 'driver: {version: 535.261.03}'; Blackwell GPUs "
                             "need 570 or newer")
    base = root or real_nvidia_dir(branch)
    try:
        version = (base / "VERSION").read_text().strip()
    except OSError:
        try:
            why = (base / "FAILED").read_text().strip()
        except OSError:
            why = "tools/fetch-real-nvidia.sh has not run (it needs root)"
        raise SmiUnavailable(f"the real NVIDIA {branch} packages are not in {base}: {why}") from None
    real = RealNvidia(base, version)
    if not os.access(real.smi, os.X_OK):
        raise SmiUnavailable(f"{real.smi} is missing or not executable")
    return real


def render_pci_sysfs(snapshot: Snapshot, out: Path) -> Path:
    """A minimal ``/sys/bus/pci`` with the node's NICs as nvidia-smi looks for them; returns ``out``."""
    drivers = out / "drivers" / "mlx5_core"
    drivers.mkdir(parents=True, exist_ok=True)
    for nic in snapshot.nics:
        bdf = f"{nic.domain:04x}:{nic.bus:02x}:{nic.device:02x}.{nic.function}"
        (out / "devices" / bdf / "infiniband" / nic.name).mkdir(parents=True, exist_ok=True)
        link = drivers / bdf
        if not link.is_symlink():
            link.symlink_to(Path("..") / ".." / "devices" / bdf)
    return out


def _namespace_prefix() -> list[str] | None:
    """The command prefix that gives nvidia-smi a private mount namespace, if this process may make one."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ([unshare, "-m", "--propagation", "private"], [unshare, "-r", "-m", "--propagation", "private"]):
        probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
        if probe.returncode == 0:
            return prefix
    return None


Wrap = Callable[[list[str]], list[str]]
"""Turns an argv into one that runs it somewhere else (the testbed's node view)."""


def run_nvidia_smi(args: Sequence[str], snapshot_path: Path, real: RealNvidia | None = None,
                   env: Mapping[str, str] | None = None, timeout: float = 60,
                   sysfs: bool = True, wrap: Wrap | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real nvidia-smi with ``args`` against the fake library reading ``snapshot_path``.

    ``real``: default the nvidia-smi of the snapshot's driver branch. ``wrap``: run it through this (e.g. a node
    view that shows the node's tree at ``/sys``, which 550 and 555 need for the NIC columns of ``topo -m``).
    Otherwise ``sysfs`` gives it the node's NICs through a private ``/sys/bus/pci`` (enough for 535; needs a mount
    namespace, skipped silently when one cannot be made).
    """
    if real is None:
        branch = branch_number(read_snapshot(snapshot_path).header.driver_version)
        real = find_real_nvidia(branch)
    full_env = dict(os.environ if env is None else env)
    full_env[SNAPSHOT_ENV] = str(snapshot_path)
    lib = str(library_dir())
    full_env["LD_LIBRARY_PATH"] = lib + (":" + full_env["LD_LIBRARY_PATH"] if full_env.get("LD_LIBRARY_PATH") else "")
    cmd = [str(real.smi), *args]
    with tempfile.TemporaryDirectory(prefix="fhw-smi-") as tmp:
        if wrap is not None:
            cmd = wrap(cmd)
        else:
            prefix = _namespace_prefix() if sysfs else None
            if prefix is not None:
                node_root = os.environ.get("FAKEHW_ROOT")
                pci = Path(node_root) / "sys" / "bus" / "pci" if node_root else None
                if pci is None or not (pci / "drivers").is_dir():
                    pci = render_pci_sysfs(read_snapshot(snapshot_path), Path(tmp) / "pci")
                script = 'mount --bind "$1" /sys/bus/pci && shift && exec "$@"'
                cmd = [*prefix, "sh", "-c", script, "sh", str(pci), *cmd]
        return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False)
