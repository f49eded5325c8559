"""Fake NVML: a binary-compatible ``libnvidia-ml.so.1`` that answers from a per-node snapshot.

The Python side (:mod:`fakehw.nvml.snapshot`) writes the snapshot from the model and the agent's runtime state;
the C shim in ``csrc/`` reads it. See docs/nvml.md.

Only :func:`library_dir` lives here, and this module imports nothing beyond the standard library, so the
build (which runs before the package's dependencies are installed) can import the package.
"""

from __future__ import annotations

from pathlib import Path

SNAPSHOT_ENV = "FAKEHW_NVML_SNAPSHOT"
"""Environment variable naming the snapshot a process reads."""
DEFAULT_SNAPSHOT = Path("/var/lib/fakehw/nvml.snapshot")
"""Where the shim looks when the variable is unset (containers mount the node's snapshot there)."""
VISIBLE_ENV = "FAKEHW_VISIBLE_DEVICES"
"""Devices a process may see in the local backend (``all``, or indices, UUIDs, model names, bus ids)."""
DEV_ROOT_ENV = "FAKEHW_DEV_ROOT"
"""Directory holding ``nvidiactl``/``nvidiaN`` (default ``/dev``): with ``nvidiactl`` present, a GPU is visible
only if its ``nvidia<minor>`` exists, which is how containers restrict devices."""
TRACE_ENV = "FAKEHW_NVML_TRACE"


def library_dir() -> Path:
    """Directory holding the fake ``libnvidia-ml.so.1`` for this host (built on first use if needed)."""
    from fakehw.nvml.build import ensure_library

    return ensure_library().parent
