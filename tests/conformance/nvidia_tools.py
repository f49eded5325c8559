"""NVIDIA's own device plugin and GPU feature discovery (v0.20.0, prebuilt, unmodified) for the tests.

The binaries are shipped next to the project (``../shared/tools/nvidia-k8s-device-plugin/<name>.xz`` with a README
giving the sha256 of each unpacked binary; ``$FAKEHW_NVIDIA_K8S_TOOLS`` names another directory). They are
unpacked once into the repository's ``.cache/`` (written beside and renamed, so a reader never sees half a file),
checked against the README's digests, and never modified. Where they cannot be had the tests that need them skip
with the reason: the project is not at fault then.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VERSION = "v0.20.0"
NAMES = ("nvidia-device-plugin", "gpu-feature-discovery")
ROW = re.compile(r"^\|\s*([\w-]+)\s*\|\s*([0-9a-f]{64})\s*\|\s*$")


class ToolsMissing(RuntimeError):
    """The binaries cannot be had here; the message says where they were looked for."""


def _candidates() -> list[Path]:
    env = os.environ.get("FAKEHW_NVIDIA_K8S_TOOLS")
    if env:
        return [Path(env)]
    sub = Path("shared") / "tools" / "nvidia-k8s-device-plugin"
    return [REPO.parent / sub, REPO.parent.parent / sub, Path("/work") / sub]


def source_dir() -> Path:
    for d in _candidates():
        if (d / "README.md").is_file() and all((d / f"{n}.xz").is_file() for n in NAMES):
            return d
    raise ToolsMissing("NVIDIA's device plugin and GFD are not here (looked in "
                       f"{', '.join(str(c) for c in _candidates())}; set FAKEHW_NVIDIA_K8S_TOOLS)")


def digests(readme: Path) -> dict[str, str]:
    """The README's table: binary name -> sha256 of the unpacked binary."""
    out = {}
    for line in readme.read_text().splitlines():
        m = ROW.match(line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def binary(name: str) -> Path:
    """The unpacked, verified binary ``name`` (unpacked on first use)."""
    src = source_dir()
    want = digests(src / "README.md").get(name)
    if want is None:
        raise ToolsMissing(f"{src / 'README.md'} gives no sha256 for {name}")
    cache = REPO / ".cache" / f"nvidia-k8s-device-plugin-{VERSION}"
    dest = cache / name
    if dest.is_file() and _sha256(dest) == want:
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".{name}.{os.getpid()}"
    with lzma.open(src / f"{name}.xz") as packed, open(tmp, "wb") as out:
        while chunk := packed.read(1 << 20):
            out.write(chunk)
    got = _sha256(tmp)
    if got != want:
        tmp.unlink()
        raise ToolsMissing(f"{src / (name + '.xz')} unpacks to sha256 {got}, the README says {want}")
    tmp.chmod(0o755)
    tmp.replace(dest)
    return dest
