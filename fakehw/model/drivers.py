"""NVIDIA driver branches a profile can name, and what each implies.

A driver version ``580.105.08`` belongs to branch 580. The branch fixes the CUDA version the driver reports
(``nvmlSystemGetCudaDriverVersion``) and the NVML generation its ``libnvidia-ml`` presents: which functions exist
(``fakehw/nvml/nvml_symbols.txt``) and which struct versions they accept. Facts, per branch:

- the CUDA version is what that branch's driver reports; it is also the version of the public ``nvml.h`` shipped
  with that CUDA release (PyPI ``nvidia-nvml-dev-cu12`` 12.x / ``nvidia-nvml-dev`` 13.x), which is how later
  branches' function sets were taken;
- 535, 550 and 555 are the branches whose real ``nvidia-smi`` and ``libnvidia-ml1`` Debian ships (bookworm,
  trixie, experimental non-free); ``tools/fetch-real-nvidia.sh`` fetches them;
- branches newer than the newest known header are not accepted: nothing says what their library looks like.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DriverBranch:
    """A driver branch: its number and the CUDA version its driver reports."""

    number: int
    cuda: str
    gpm_metric_max: int
    """``NVML_GPM_METRIC_MAX`` of the branch's header: how many metrics one ``nvmlGpmMetricsGet`` call takes."""
    debian_suite: str | None = None
    """Debian suite whose non-free archive has this branch's real nvidia-smi (None: not to be had here)."""

    @property
    def cuda_driver_version(self) -> int:
        """``nvmlSystemGetCudaDriverVersion``: 12.2 -> 12020."""
        major, minor = self.cuda.split(".")
        return int(major) * 1000 + int(minor) * 10


BRANCHES: tuple[DriverBranch, ...] = (
    DriverBranch(535, "12.2", 98, "bookworm"),
    DriverBranch(550, "12.4", 98, "trixie"),
    DriverBranch(555, "12.5", 98, "experimental"),
    DriverBranch(560, "12.6", 98),
    DriverBranch(570, "12.8", 98),
    DriverBranch(575, "12.9", 210),
    DriverBranch(580, "13.0", 210),
    DriverBranch(590, "13.1", 210),
    DriverBranch(595, "13.2", 333),
    DriverBranch(610, "13.3", 333),
    DriverBranch(615, "13.4", 477),
)
"""Known branches, oldest first (565 shipped too, but no public header of its CUDA 12.7 is at hand)."""

_BY_NUMBER = {b.number: b for b in BRANCHES}
VERSION_PATTERN = r"^\d{3}\.\d{1,3}(\.\d{1,3})?$"
DEFAULT_DRIVER = "580.105.08"
"""A production 580 release (the one the reference H100 and B200 captures report); every catalogue SKU runs on it."""


class UnknownBranch(ValueError):
    """A driver version whose branch is not one of :data:`BRANCHES`."""


def branch_number(version: str) -> int:
    """``580.105.08`` -> 580 (the version must look like a driver version)."""
    if not re.match(VERSION_PATTERN, version):
        raise UnknownBranch(f"{version!r} is not a driver version like 580.105.08")
    return int(version.split(".", 1)[0])


def branch_of(version: str) -> DriverBranch:
    """The branch of a driver version, or :class:`UnknownBranch` naming the known ones."""
    number = branch_number(version)
    found = _BY_NUMBER.get(number)
    if found is None:
        known = ", ".join(str(b.number) for b in BRANCHES)
        raise UnknownBranch(f"driver {version} is of branch {number}, which fakehw does not know (known: {known})")
    return found
