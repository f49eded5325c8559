"""The environment a process needs to see one fake node's hardware (local backend).

Consumers (pynvml, nvidia-smi, device plugins) find the node's NVML snapshot, fake root tree and agent through
these variables; the fake ``libnvidia-ml.so.1`` is put first on ``LD_LIBRARY_PATH`` once it is built.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path

NODE_VARS = ("FAKEHW_NODE", "FAKEHW_NODE_DIR", "FAKEHW_AGENT_SOCKET", "FAKEHW_NVML_SNAPSHOT", "FAKEHW_ROOT")


def node_environment(node: str, node_dir: Path, agent_socket: Path | None) -> dict[str, str]:
    """Variables (only the fakehw ones) that point a process at ``node``."""
    env = {
        "FAKEHW_NODE": node,
        "FAKEHW_NODE_DIR": str(node_dir),
        "FAKEHW_NVML_SNAPSHOT": str(node_dir / "nvml.snapshot"),
        "FAKEHW_ROOT": str(node_dir / "root"),
    }
    if agent_socket is not None:
        env["FAKEHW_AGENT_SOCKET"] = str(agent_socket)
    lib = _nvml_library_dir()
    if lib is not None:
        env["LD_LIBRARY_PATH"] = str(lib)
    return env


def merged_environment(extra: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``extra`` on top; library paths are prepended."""
    env = dict(os.environ if base is None else base)
    for key, value in extra.items():
        if key == "LD_LIBRARY_PATH" and env.get(key):
            env[key] = f"{value}:{env[key]}"
        else:
            env[key] = value
    return env


def _nvml_library_dir() -> Path | None:
    """Directory holding the fake libnvidia-ml.so.1, when the NVML shim is available."""
    try:
        nvml = importlib.import_module("fakehw.nvml")
    except ImportError:
        return None
    library_dir = getattr(nvml, "library_dir", None)
    if library_dir is None:
        return None
    result = library_dir()
    return Path(result) if result is not None else None
