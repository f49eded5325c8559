"""Load fabric configs the way profiles load: built-in names or files, ``extends``, errors that point at the line.

YAML parsing (line numbers, duplicate keys), ``extends`` merging (named lists merge by ``name``) and the
``file:line: path: message`` errors are the hardware model's (:mod:`fakehw.model.loader`,
:mod:`fakehw.model.merge`, :mod:`fakehw.model.errors`); only the pydantic error rewriting is repeated here because
the model's version is bound to the profile schema for its did-you-mean hints.

Every failure is a :class:`FabricError` (a :class:`~fakehw.model.errors.ProfileError`), never a traceback.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from fakehw.fabric.spec import FabricConfigSpec
from fakehw.model.errors import PathItem, Problem, ProfileError
from fakehw.model.loader import Document, find_document, not_found, parse_yaml, validation_problems
from fakehw.model.merge import merge_documents

MAX_EXTENDS_DEPTH = 8


class FabricError(ProfileError):
    """A fabric config that cannot be used; ``problems`` says where and why (file:line: path: message)."""


def examples_dir() -> Path:
    return Path(str(resources.files("fakehw.fabric").joinpath("examples")))


@cache
def builtin_fabrics() -> dict[str, Path]:
    """Built-in (healthy) fabric configs by name."""
    return {p.stem: p for p in sorted(examples_dir().glob("*.yaml"))}


def broken_examples() -> dict[str, Path]:
    """The deliberately broken configs: each file name starts with the requirement ID it violates."""
    return {p.stem: p for p in sorted((examples_dir() / "broken").glob("*.yaml"))}


def find_fabric(ref: str, relative_to: Path | None = None) -> Path:
    """A fabric reference is a file path (relative to the including file) or a built-in name."""
    path = find_document(ref, relative_to, builtin_fabrics())
    if path is None:
        raise FabricError([Problem((), not_found("fabric config", ref, relative_to, builtin_fabrics()))])
    return path


@dataclass(frozen=True, slots=True)
class SourceKey:
    """Where an imported setting came from: the operator's file, the key in it (``PORT|Ethernet8.mtu``) and its
    line when the file's syntax lets us know it."""

    source: str
    key: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.key}"


NoteKind = Literal["ignored", "unknown", "info"]


@dataclass(frozen=True, slots=True)
class ImportNote:
    """Something an importer read but did not turn into the fabric: a table irrelevant to RoCE (``ignored``), a
    key it does not know (``unknown``), or how it interpreted a setting (``info``). Named, never silent."""

    at: SourceKey
    kind: NoteKind
    message: str

    def __str__(self) -> str:
        return f"{self.at}: {self.kind}: {self.message}"


@dataclass(frozen=True)
class LoadedFabric:
    """A validated fabric document, the documents of its ``extends`` chain (for locating lines) and its digest.

    An imported fabric (SONiC, NVUE) carries ``provenance``: for document paths of the generated config, the
    operator's file and key that produced them, so findings point there instead of at generated YAML."""

    spec: FabricConfigSpec
    documents: tuple[Document, ...]
    digest: str
    merged: Any = None
    """The merged document the spec was validated from (list indices in paths refer to it)."""
    provenance: Mapping[tuple[PathItem, ...], SourceKey] | None = None
    notes: tuple[ImportNote, ...] = ()

    @property
    def source(self) -> str:
        """How to load this fabric again: the file, built-in name or import reference (``sonic:/dir``)."""
        return self.documents[0].source

    def origin(self, path: Sequence[PathItem]) -> SourceKey | None:
        """The operator's file and key behind ``path`` (its deepest recorded prefix), for imported fabrics."""
        if self.provenance is None:
            return None
        key = tuple(path)
        while True:
            found = self.provenance.get(key)
            if found is not None or not key:
                return found
            key = key[:-1]

    def locate(self, path: Sequence[PathItem]) -> tuple[str, int | None]:
        """The file of the extends chain that holds the deepest part of ``path``, and the line there."""
        if self.provenance is not None:
            found = self.origin(path)
            return (found.source, found.line) if found is not None else (self.source, None)
        return locate_in(self.merged, self.documents, path)

    def key(self, path: Sequence[PathItem]) -> str | None:
        """The operator's key behind ``path`` (imported fabrics only)."""
        found = self.origin(path)
        return found.key if found is not None else None

    def problem(self, path: Sequence[PathItem], message: str) -> Problem:
        """A problem at ``path``, located in the operator's file and key when the fabric was imported."""
        source, line = self.locate(path)
        key = self.key(path)
        return Problem((key,) if key is not None else tuple(path), message, source, line)


_Step = PathItem | tuple[str, str]


def _named_steps(merged: Any, path: Sequence[PathItem]) -> list[_Step]:
    """Turn list indices of the merged document into ``("name", value)`` steps where the item has a name,
    because ``extends`` merges named lists by name and each file numbers its items differently."""
    steps: list[_Step] = []
    data = merged
    for item in path:
        if isinstance(data, list) and isinstance(item, int) and 0 <= item < len(data):
            element = data[item]
            name = element.get("name") if isinstance(element, dict) else None
            steps.append(("name", name) if isinstance(name, str) else item)
            data = element
        elif isinstance(data, dict) and item in data:
            steps.append(item)
            data = data[item]
        else:
            steps.append(item)
            data = None
    return steps


def _walk(data: Any, steps: Sequence[_Step]) -> tuple[int, tuple[PathItem, ...]]:
    """How deep ``steps`` go into one document, and the path in that document's own numbering."""
    local: list[PathItem] = []
    for step in steps:
        if isinstance(step, tuple):
            if not isinstance(data, list):
                break
            index = next((i for i, x in enumerate(data) if isinstance(x, dict) and x.get("name") == step[1]), None)
            if index is None:
                break
            local.append(index)
            data = data[index]
        elif isinstance(data, dict) and step in data:
            local.append(step)
            data = data[step]
        elif isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data):
            local.append(step)
            data = data[step]
        else:
            break
    return len(local), tuple(local)


def locate_in(merged: Any, documents: Sequence[Document], path: Sequence[PathItem]) -> tuple[str, int | None]:
    """Source and line for a path of the merged document: the deepest match wins, the child file on a tie."""
    steps = _named_steps(merged, path) if merged is not None else list(path)
    best_doc, best_depth = documents[0], -1
    best_local: tuple[PathItem, ...] = ()
    for doc in documents:
        depth, local = _walk(doc.data, steps)
        if depth > best_depth:
            best_doc, best_depth, best_local = doc, depth, local
    return best_doc.source, best_doc.locate(best_local)


def _resolve(path: Path, text: str | None, chain: tuple[Path, ...] = ()) -> tuple[Any, list[Document]]:
    source = str(path)
    if len(chain) > MAX_EXTENDS_DEPTH:
        raise FabricError([Problem(("extends",), f"extends chain longer than {MAX_EXTENDS_DEPTH}", source)])
    if text is None:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise FabricError([Problem((), f"cannot read fabric config: {exc}", source)]) from None
    try:
        doc = parse_yaml(text, source)
    except ProfileError as exc:
        raise FabricError(exc.problems) from None
    data = doc.data
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise FabricError([Problem((), f"a fabric config is a YAML mapping, this document is {kind}", source, 1)])
    ref = data.get("extends")
    if ref is None:
        return data, [doc]
    line = doc.locate(("extends",))
    if not isinstance(ref, str):
        raise FabricError([Problem(("extends",), "extends names one fabric config (a string)", source, line)])
    try:
        base_path = find_fabric(ref, path)
    except FabricError as exc:
        raise FabricError([Problem(("extends",), p.message, source, line) for p in exc.problems]) from None
    if base_path.resolve() in {p.resolve() for p in (*chain, path)}:
        raise FabricError([Problem(("extends",), f"extends loops back to {base_path}", source, line)])
    base, docs = _resolve(base_path, None, (*chain, path))
    child = {k: v for k, v in data.items() if k != "extends"}
    return merge_documents(base, child), [doc, *docs]


def load_fabric_spec(ref: str | Path, text: str | None = None) -> LoadedFabric:
    """Parse and validate a fabric config (a built-in name, a file, or ``text`` named ``ref``)."""
    path = Path(str(ref)) if text is not None or isinstance(ref, Path) else find_fabric(ref)
    data, docs = _resolve(path, text)
    try:
        spec = FabricConfigSpec.model_validate(data)
    except ValidationError as exc:
        problems = []
        for p in validation_problems(exc, str(path), FabricConfigSpec):
            source, line = locate_in(data, docs, p.path)
            problems.append(Problem(p.path, p.message, source, line))
        raise FabricError(problems) from None
    except (RecursionError, OverflowError, ValueError, TypeError) as exc:
        raise FabricError([Problem((), f"cannot read fabric config: {exc}", str(path))]) from None
    canonical = json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))
    return LoadedFabric(spec, tuple(docs), hashlib.sha256(canonical.encode()).hexdigest(), data)
