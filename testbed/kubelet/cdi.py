"""CDI specs as a container runtime reads them: which device nodes a fully qualified CDI device name brings.

A plugin that answers Allocate with CDI devices (``vendor.com/class=name``, in the CDI field or in
``cdi.k8s.io/*`` annotations) relies on a CDI spec that defines them; the container runtime applies the
device's ``containerEdits`` plus the spec's own. NVIDIA's plugin writes its specs (kind
``k8s.device-plugin.nvidia.com/gpu``) into ``/var/run/cdi``; the NVIDIA Container Toolkit's ``nvidia-ctk cdi
generate`` writes ``nvidia.com/gpu`` specs (devices named by index, UUID and ``all``).

:class:`CdiRegistry` loads the specs of a directory (JSON or YAML, as the CDI specification allows) and answers
the device nodes of a qualified name. Files are bounded in size and malformed ones are recorded as problems,
never raised: the directory is written by the plugin under test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MAX_SPEC_BYTES = 4 * 2**20
"""Largest spec file read (a spec for 72 GPUs with every driver file is well under 1 MiB)."""
MAX_SPEC_FILES = 64


@dataclass(frozen=True)
class CdiRegistry:
    """Qualified CDI device name -> container paths of the device nodes it brings (its own and its spec's)."""

    devices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def nodes(self, qualified: str) -> tuple[str, ...] | None:
        return self.devices.get(qualified)

    def kinds(self) -> frozenset[str]:
        return frozenset(name.partition("=")[0] for name in self.devices)

    @classmethod
    def load(cls, directory: Path) -> CdiRegistry:
        devices: dict[str, tuple[str, ...]] = {}
        problems: list[str] = []
        try:
            files = sorted(p for p in directory.iterdir() if p.suffix in (".json", ".yaml", ".yml"))
        except OSError:
            return cls()
        for path in files[:MAX_SPEC_FILES]:
            try:
                devices.update(_spec_devices(_read(path)))
            except (OSError, ValueError, TypeError, yaml.YAMLError) as exc:
                problems.append(f"CDI spec {path.name}: {exc}")
        return cls(devices, tuple(problems))


def _read(path: Path) -> Any:
    if path.stat().st_size > MAX_SPEC_BYTES:
        raise ValueError(f"larger than {MAX_SPEC_BYTES} bytes")
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def _node_paths(edits: Any) -> tuple[str, ...]:
    if not isinstance(edits, dict):
        return ()
    nodes = edits.get("deviceNodes") or []
    if not isinstance(nodes, list):
        raise ValueError("deviceNodes is not a list")
    return tuple(str(n["path"]) for n in nodes if isinstance(n, dict) and isinstance(n.get("path"), str))


def _spec_devices(spec: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str) or "/" not in spec["kind"]:
        raise ValueError("not a CDI spec (no 'vendor/class' kind)")
    kind = spec["kind"]
    common = _node_paths(spec.get("containerEdits"))
    out = {}
    for dev in spec.get("devices") or []:
        if isinstance(dev, dict) and isinstance(dev.get("name"), str):
            out[f"{kind}={dev['name']}"] = (*_node_paths(dev.get("containerEdits")), *common)
    return out
