"""Fabric emulation and fabric-config conformance for RoCE v2 fabrics.

- :mod:`~fakehw.fabric.spec`, :mod:`~fakehw.fabric.loader`, :mod:`~fakehw.fabric.model`: the fabric config
  (YAML, validated like hardware profiles) resolved against a hardware profile;
- :mod:`~fakehw.fabric.lint`: static conformance with requirement IDs (:mod:`~fakehw.fabric.requirements`);
- :mod:`~fakehw.fabric.emulate`, :mod:`~fakehw.fabric.traffic`, :mod:`~fakehw.fabric.chaos`,
  :mod:`~fakehw.fabric.fuzz`: the emulated fabric (network namespaces, veth pairs, Linux bridges), traffic,
  impairments and fuzzing; they need root.

The names below load on first use, so a process that only needs the packet codec (the responder) starts fast.
The linter itself is ``fakehw.fabric.lint.lint`` (the package attribute ``lint`` is that module).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakehw.fabric.lint import Finding as Finding
    from fakehw.fabric.lint import LintReport as LintReport
    from fakehw.fabric.loader import FabricError as FabricError
    from fakehw.fabric.loader import builtin_fabrics as builtin_fabrics
    from fakehw.fabric.loader import load_fabric_spec as load_fabric_spec
    from fakehw.fabric.model import FabricModel as FabricModel
    from fakehw.fabric.model import load_fabric as load_fabric
    from fakehw.fabric.requirements import REQUIREMENTS as REQUIREMENTS
    from fakehw.fabric.requirements import Requirement as Requirement
    from fakehw.fabric.requirements import Severity as Severity
    from fakehw.fabric.requirements import requirement as requirement

_EXPORTS = {
    "Finding": "lint", "LintReport": "lint",
    "FabricError": "loader", "builtin_fabrics": "loader", "load_fabric_spec": "loader",
    "FabricModel": "model", "load_fabric": "model",
    "REQUIREMENTS": "requirements", "Requirement": "requirements", "Severity": "requirements",
    "requirement": "requirements",
}

__all__ = [
    "REQUIREMENTS",
    "FabricError",
    "FabricModel",
    "Finding",
    "LintReport",
    "Requirement",
    "Severity",
    "builtin_fabrics",
    "load_fabric",
    "load_fabric_spec",
    "requirement",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fakehw.fabric' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fakehw.fabric.{module}"), name)
