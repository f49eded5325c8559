"""Where the tests find their outside references, fetched by the project's own scripts into caches:

- the real nvidia-smi and libnvidia-ml of 535, 550 and 555 (tools/fetch-real-nvidia.sh, Debian non-free);
- the newest public nvml.h and nvidia-ml-py 13.615.71 / 12.535.161 (tools/fetch-nvml-references.sh, PyPI).

A test that needs one asks for it here; when it is missing the script is run once, and when the outside source
cannot serve it the test skips with the script's recorded reason (never when the project is at fault).
"""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path

import pytest

from fakehw.nvml.smi import RealNvidia, SmiUnavailable, find_real_nvidia

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("FAKEHW_NVML_REFERENCE_CACHE") or ROOT / ".cache")
NEWEST_HEADER = "13.4.92"
BINDINGS = ("13.615.71", "12.535.161")


@cache
def _run(script: str, *args: str) -> None:
    subprocess.run([str(ROOT / "tools" / script), *args], capture_output=True, text=True, timeout=600, check=False)


def _available(path: Path, script: str, *args: str) -> Path:
    if not path.exists():
        _run(script, *args)
    if path.exists():
        return path
    failed = path.parent / "FAILED"
    why = failed.read_text().strip() if failed.exists() else f"{script} did not produce {path}"
    pytest.skip(why)


def newest_header() -> Path:
    """nvidia-nvml-dev 13.4.92's nvml.h."""
    return _available(CACHE / "nvml-headers" / NEWEST_HEADER / "nvml.h", "fetch-nvml-references.sh")


def bindings(version: str) -> Path:
    """The directory holding nvidia-ml-py ``version``'s pynvml.py (put it first on sys.path)."""
    return _available(CACHE / "nvidia-ml-py" / version / "pynvml.py", "fetch-nvml-references.sh").parent


def real_nvidia(branch: int) -> RealNvidia:
    """The real packages of ``branch`` (535, 550, 555)."""
    try:
        return find_real_nvidia(branch)
    except SmiUnavailable:
        _run("fetch-real-nvidia.sh", str(branch))
    try:
        return find_real_nvidia(branch)
    except SmiUnavailable as exc:
        pytest.skip(str(exc))
