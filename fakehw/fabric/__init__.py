"""Fabric emulation and fabric-config conformance for RoCE v2 fabrics.

- :mod:`~fakehw.fabric.spec`, :mod:`~fakehw.fabric.loader`, :mod:`~fakehw.fabric.model`: the fabric config
  (YAML, validated like hardware profiles) resolved against a hardware profile;
- :mod:`~fakehw.fabric.lint`: static conformance with requirement IDs (:mod:`~fakehw.fabric.requirements`);
- the emulated fabric (network namespaces, veth pairs, Linux bridges), traffic, chaos and fuzzing live in the
  other modules of this package and need root.
"""

from fakehw.fabric.lint import Finding, LintReport, lint
from fakehw.fabric.loader import FabricError, builtin_fabrics, load_fabric_spec
from fakehw.fabric.model import FabricModel, load_fabric
from fakehw.fabric.requirements import REQUIREMENTS, Requirement, Severity, requirement

__all__ = [
    "REQUIREMENTS",
    "FabricError",
    "FabricModel",
    "Finding",
    "LintReport",
    "Requirement",
    "Severity",
    "builtin_fabrics",
    "lint",
    "load_fabric",
    "load_fabric_spec",
    "requirement",
]
