"""The requirement catalogue: every check a certification makes, with a stable ID, a title and a rationale.

Requirements are data (``catalogue/*.yaml``, one file per target kind). A test carries the IDs it checks as a
marker (``@pytest.mark.requirement("DP-HEALTH-002")``); the report is per requirement, not per test. IDs never
change meaning once published; a retired requirement is marked ``retired``, never reused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml

Level = Literal["core", "topology", "resilience", "isolation"]
LEVELS: tuple[Level, ...] = ("core", "topology", "resilience", "isolation")
ID_RE = re.compile(r"^[A-Z]{2,6}(-[A-Z0-9]{2,12})+-\d{3}$")


class CatalogueError(ValueError):
    """The catalogue data itself is malformed (a bug in the package, reported with the file and entry)."""


@dataclass(frozen=True, slots=True)
class Requirement:
    id: str
    title: str
    rationale: str
    category: str
    level: Level
    target: str
    required: bool = True
    retired: bool = False


@dataclass(frozen=True)
class Catalogue:
    requirements: tuple[Requirement, ...]

    def get(self, req_id: str) -> Requirement | None:
        return next((r for r in self.requirements if r.id == req_id), None)

    def for_target(self, target: str) -> tuple[Requirement, ...]:
        return tuple(r for r in self.requirements if r.target == target and not r.retired)

    def select(self, target: str | None = None, category: str | None = None,
               level: str | None = None) -> tuple[Requirement, ...]:
        return tuple(
            r for r in self.requirements
            if not r.retired and (target is None or r.target == target)
            and (category is None or r.category == category) and (level is None or r.level == level)
        )


def _parse(name: str, text: str) -> list[Requirement]:
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(data.get("target"), str) or not isinstance(
            data.get("requirements"), list):
        raise CatalogueError(f"catalogue/{name}: needs 'target' and a list of 'requirements'")
    out = []
    for i, entry in enumerate(data["requirements"]):
        where = f"catalogue/{name}: requirements[{i}]"
        if not isinstance(entry, dict):
            raise CatalogueError(f"{where}: not a mapping")
        unknown = set(entry) - {"id", "title", "rationale", "category", "level", "required", "retired"}
        if unknown:
            raise CatalogueError(f"{where}: unknown keys {sorted(unknown)}")
        req_id = entry.get("id")
        if not isinstance(req_id, str) or not ID_RE.match(req_id):
            raise CatalogueError(f"{where}: id {req_id!r} is not like DP-HEALTH-002")
        for key in ("title", "rationale", "category"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise CatalogueError(f"{where} ({req_id}): {key} is required")
        if entry.get("level") not in LEVELS:
            raise CatalogueError(f"{where} ({req_id}): level must be one of {', '.join(LEVELS)}")
        out.append(Requirement(req_id, entry["title"].strip(), " ".join(entry["rationale"].split()),
                               entry["category"], entry["level"], data["target"], bool(entry.get("required", True)),
                               bool(entry.get("retired", False))))
    return out


def catalogue() -> Catalogue:
    """Every requirement of every target: the package's catalogue plus files in ``$FAKEHW_EXTRA_REQUIREMENTS``.

    The extra directory lets a vendor (or this project's tests) add requirements of their own.
    """
    return _load(os.environ.get("FAKEHW_EXTRA_REQUIREMENTS", ""))


def _fabric_requirements() -> list[Requirement]:
    """The fabric target's requirements, read from the fabric package's own table (its single source).

    Errors are required, warnings recommended; rail and path checks are the topology level, the rest core.
    """
    from fakehw.fabric.requirements import REQUIREMENTS, Severity

    out = []
    for req in REQUIREMENTS.values():
        parts = req.id.split("-")
        category = "measured" if parts[1] == "DYN" else parts[1].lower()
        level: Level = "topology" if parts[1] in ("PATH", "RAIL", "LINK") else "core"
        out.append(Requirement(req.id, req.title, req.rationale, category, level, "fabric",
                               required=req.severity == Severity.ERROR))
    return out


@cache
def _load(extra: str) -> Catalogue:
    reqs: list[Requirement] = []
    folder = resources.files("conformance").joinpath("catalogue")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            reqs.extend(_parse(entry.name, entry.read_text()))
    reqs.extend(_fabric_requirements())
    if extra:
        for path in sorted(Path(extra).glob("*.yaml")):
            reqs.extend(_parse(path.name, path.read_text()))
    seen: set[str] = set()
    for r in reqs:
        if r.id in seen:
            raise CatalogueError(f"requirement {r.id} is defined twice")
        seen.add(r.id)
    return Catalogue(tuple(reqs))
