"""A driver root for a fake node: the files NVIDIA's components look for under ``--driver-root``.

NVIDIA's device plugin and GPU feature discovery run in a DaemonSet pod that sees the host's driver installation
at ``/driver-root`` (``--driver-root-ctr-path``). They load ``libnvidia-ml.so.1`` from its library directories,
and the CDI device-list strategies generate a CDI spec from what the NVIDIA Container Toolkit's discovery
(``nvcdi``) finds there: it infers the driver version from the suffix of ``libcuda.so.<version>`` (or
``libnvidia-ml.so.<version>``), takes the directories of ``lib*.so.<version>`` as the driver's library
directories, and mounts every ``*.so.<version>`` it finds into the container.

:func:`build_driver_root` lays out such a root: the fake NVML as ``libnvidia-ml.so.<driver version>`` with its
``.so.1`` link, and a stand-in ``libcuda.so.<driver version>`` (a real shared object with the SONAME
``libcuda.so.1`` whose ``cuInit`` reports no device and whose ``cuDriverGetVersion`` reports the model's CUDA
version; built with the C compiler) with its ``.so.1`` and ``.so`` links, as a driver package installs them.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

CONTAINER_DRIVER_ROOT = "/driver-root"
"""Where NVIDIA's DaemonSet mounts the host's driver root (the plugin's ``--driver-root-ctr-path`` default)."""
MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu", "riscv64": "riscv64-linux-gnu"}

LIBCUDA_C = """\
/* Stand-in libcuda.so.1 of a fakehw driver root: discovery finds it by name; a program that loads it learns the
   driver's CUDA version and that there is no device to run on (CUDA_ERROR_NO_DEVICE). */
typedef int CUresult;
CUresult cuInit(unsigned int flags) { (void)flags; return 100; }
CUresult cuDriverGetVersion(int *version) {
    if (!version) return 1;
    *version = FHW_CUDA_VERSION;
    return 0;
}
"""


class DriverRootError(RuntimeError):
    """The driver root could not be laid out; the message says what is missing."""


def cuda_version_number(cuda: str) -> int:
    """'12.2' -> 12020 (the encoding of cuDriverGetVersion and nvmlSystemGetCudaDriverVersion)."""
    major, _, minor = cuda.partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


def _nvml_library(env: Mapping[str, str]) -> Path:
    for entry in env.get("LD_LIBRARY_PATH", "").split(":"):
        candidate = Path(entry) / "libnvidia-ml.so.1"
        if entry and candidate.is_file():
            return candidate.resolve()
    raise DriverRootError("the fake libnvidia-ml.so.1 is not on the node's LD_LIBRARY_PATH")


def _link(target: str, path: Path) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def _build_libcuda(out: Path, cuda: str) -> bool:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return False
    with tempfile.TemporaryDirectory(prefix="fhw-libcuda-") as tmp:
        src = Path(tmp) / "libcuda.c"
        src.write_text(LIBCUDA_C)
        proc = subprocess.run([cc, "-shared", "-fPIC", "-O2", f"-DFHW_CUDA_VERSION={cuda_version_number(cuda)}",
                               "-Wl,-soname,libcuda.so.1", "-o", str(out), str(src)],
                              capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise DriverRootError(f"building the stand-in libcuda failed: {proc.stderr.strip()[-500:]}")
    return True


def build_driver_root(dest: Path, env: Mapping[str, str], version: str, cuda: str,
                      machine: str | None = None, libcuda: bool = True) -> Path:
    """Lay out in ``dest`` the driver root of a node whose environment is ``env`` (the fake NVML is on its
    ``LD_LIBRARY_PATH``) and whose driver reports ``version`` and CUDA ``cuda``; returns ``dest``. ``libcuda``:
    also the stand-in libcuda (built by this machine's compiler, so only for a root of this machine's
    architecture)."""
    arch = MULTIARCH.get(machine or platform.machine())
    if arch is None:
        raise DriverRootError(f"no library directory convention for {machine or platform.machine()}")
    nvml = _nvml_library(env)
    lib = dest / "usr" / "lib" / arch
    lib.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(nvml, lib / f"libnvidia-ml.so.{version}")
    _link(f"libnvidia-ml.so.{version}", lib / "libnvidia-ml.so.1")
    if libcuda and _build_libcuda(lib / f"libcuda.so.{version}", cuda):
        _link(f"libcuda.so.{version}", lib / "libcuda.so.1")
        _link("libcuda.so.1", lib / "libcuda.so")
    return dest
