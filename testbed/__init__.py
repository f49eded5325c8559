"""testbed: stand up clusters of fake GPU nodes (local, docker, kubernetes) and drive them.

``Testbed``, ``BackendError`` and ``NodeInfo`` are imported on first use (PEP 562): processes that only need a
part of the package, such as the reference device plugin or the NVML probe a check starts, do not pay for loading
the model and every backend (half a second of a plugin's start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testbed.api import Testbed
    from testbed.backends import BackendError, NodeInfo

__all__ = ["BackendError", "NodeInfo", "Testbed"]


def __getattr__(name: str) -> Any:
    if name == "Testbed":
        from testbed.api import Testbed

        return Testbed
    if name in ("BackendError", "NodeInfo"):
        from testbed import backends

        return getattr(backends, name)
    raise AttributeError(f"module 'testbed' has no attribute {name!r}")
