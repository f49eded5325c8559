"""Running the real ``nvidia-smi`` against the fake library.

The binary comes from Debian's non-free ``nvidia-smi`` package, extracted (never installed) by
``tools/fetch-real-nvidia.sh`` into ``.cache/nvidia-535`` (or ``$FAKEHW_REAL_NVIDIA_DIR``). It loads
``libnvidia-ml.so.1`` through ``LD_LIBRARY_PATH`` like any consumer.

What it needs beyond NVML was found by tracing it: nothing from ``/proc/driver/nvidia`` or ``/dev/nvidia*`` for
``-L``, ``-q``, ``-q -x``, ``topo -m`` and ``nvlink -s``; for ``topo -m`` it finds the NICs itself in sysfs
(``/sys/bus/pci/drivers/mlx5_core/<bdf>`` and ``/sys/bus/pci/devices/<bdf>/infiniband/<name>``) and asks the
library (export-table slot 23) for the distance of each pair. :func:`run_nvidia_smi` therefore runs it in a
private mount namespace with a small ``/sys/bus/pci`` made from the snapshot's NIC records bind-mounted over the
real one (or the node's rendered fake root tree, once that provides one). Without the privilege to make a mount
namespace it runs without one and ``topo -m`` shows no NIC columns.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fakehw.nvml import SNAPSHOT_ENV, library_dir
from fakehw.nvml.snapshot import Snapshot, read_snapshot

REAL_NVIDIA_ENV = "FAKEHW_REAL_NVIDIA_DIR"
REPO_ROOT = Path(__file__).resolve().parents[2]


class SmiUnavailable(RuntimeError):
    """The real nvidia-smi is not there (run tools/fetch-real-nvidia.sh as root)."""


@dataclass(frozen=True)
class RealNvidia:
    """The extracted real NVIDIA user space: nvidia-smi, the real libnvidia-ml and nvml.h."""

    root: Path
    version: str
    """Debian package version, e.g. ``535.261.03-1``."""

    @property
    def driver_version(self) -> str:
        return self.version.split("-")[0]

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


def find_real_nvidia(root: Path | None = None) -> RealNvidia:
    """The extracted packages, or :class:`SmiUnavailable` saying how to get them."""
    base = root or Path(os.environ.get(REAL_NVIDIA_ENV) or REPO_ROOT / ".cache" / "nvidia-535")
    try:
        version = (base / "VERSION").read_text().strip()
    except OSError:
        raise SmiUnavailable(f"the real NVIDIA 535 packages are not in {base}: run tools/fetch-real-nvidia.sh "
                             f"(as root) or set {REAL_NVIDIA_ENV}") from None
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


def run_nvidia_smi(args: Sequence[str], snapshot_path: Path, real: RealNvidia | None = None,
                   env: Mapping[str, str] | None = None, timeout: float = 60,
                   sysfs: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real nvidia-smi with ``args`` against the fake library reading ``snapshot_path``.

    ``sysfs``: give it the node's NICs through a private ``/sys/bus/pci`` (needs a mount namespace; skipped
    silently when one cannot be made).
    """
    real = real or find_real_nvidia()
    full_env = dict(os.environ if env is None else env)
    full_env[SNAPSHOT_ENV] = str(snapshot_path)
    lib = str(library_dir())
    full_env["LD_LIBRARY_PATH"] = lib + (":" + full_env["LD_LIBRARY_PATH"] if full_env.get("LD_LIBRARY_PATH") else "")
    cmd = [str(real.smi), *args]
    with tempfile.TemporaryDirectory(prefix="fhw-smi-") as tmp:
        prefix = _namespace_prefix() if sysfs else None
        if prefix is not None:
            node_root = os.environ.get("FAKEHW_ROOT")
            pci = Path(node_root) / "sys" / "bus" / "pci" if node_root else None
            if pci is None or not (pci / "drivers").is_dir():
                pci = render_pci_sysfs(read_snapshot(snapshot_path), Path(tmp) / "pci")
            script = 'mount --bind "$1" /sys/bus/pci && shift && exec "$@"'
            cmd = [*prefix, "sh", "-c", script, "sh", str(pci), *cmd]
        return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False)
