"""Load profiles: built-in names or files, ``extends`` chains, and errors that point at the line.

Every failure while loading (YAML syntax, duplicate keys, unknown keys, wrong types, broken references) is a
:class:`ProfileError` naming the file, the line where it could be found, the path in the document and the
problem. Nothing else escapes: callers (the CLI, the agent) can rely on that.

A profile is input from anyone, so what it can cost is bounded before any work: a file is checked (a regular
file, at most :data:`MAX_PROFILE_BYTES`) before it is read, and YAML aliases may not expand the document past
:data:`MAX_EXPANDED_NODES` nodes (a 700-byte "billion laughs" of nested aliases would otherwise expand to 10^9
values in the steps that walk the data).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import stat
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from fakehw.model.errors import PathItem, Problem, ProfileError
from fakehw.model.expand import expand
from fakehw.model.merge import merge_documents
from fakehw.model.spec import ProfileSpec
from fakehw.model.system import System

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_PROFILE_BYTES = 4 * 2**20
MAX_EXTENDS_DEPTH = 8
MAX_EXPANDED_NODES = 200_000
"""Nodes of a document with every alias counted as often as it is used (the built-in profiles have < 2,000)."""


# --------------------------------------------------------------------------------------------------- YAML


@dataclass(frozen=True)
class Document:
    """A parsed YAML document and the node tree it came from (for line numbers)."""

    source: str
    data: Any
    root: yaml.Node | None

    def locate(self, path: Sequence[PathItem]) -> int | None:
        """1-based line of the deepest node on ``path`` that exists in this document."""
        node = self.root
        if node is None:
            return None
        line = node.start_mark.line + 1
        for item in path:
            nxt: yaml.Node | None = None
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if isinstance(key, yaml.ScalarNode) and key.value == str(item):
                        nxt = value
                        line = key.start_mark.line + 1
                        break
            elif isinstance(node, yaml.SequenceNode) and isinstance(item, int) and 0 <= item < len(node.value):
                nxt = node.value[item]
                line = nxt.start_mark.line + 1
            if nxt is None:
                break
            node = nxt
        return line


def parse_yaml(text: str, source: str) -> Document:
    """Parse one YAML document; syntax errors and duplicate keys become a ProfileError with a line."""
    if len(text) > MAX_PROFILE_BYTES:
        raise ProfileError([Problem((), f"profile is larger than {MAX_PROFILE_BYTES} bytes", source)])
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            _check_expansion(root, source)
            _check_duplicate_keys(root, source)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        msg = " ".join(x for x in (exc.context, exc.problem) if x) or "malformed YAML"
        raise ProfileError([Problem((), f"malformed YAML: {msg}", source, line)]) from None
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError) as exc:
        raise ProfileError([Problem((), f"malformed YAML: {exc}", source)]) from None
    finally:
        loader.dispose()
    return Document(source, data, root)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Refuse a document whose aliases expand it past :data:`MAX_EXPANDED_NODES` nodes, or refer to themselves.

    Each distinct node is visited once (its expanded size is remembered), so the check costs what the composed
    document costs, not what it would expand to."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            if size[key] > MAX_EXPANDED_NODES:
                raise ProfileError([Problem((), f"the document expands to more than {MAX_EXPANDED_NODES} values "
                                            "(YAML aliases counted as often as they are used); refusing it", source,
                                            node.start_mark.line + 1)])
            continue
        if key in size:
            continue
        if key in on_path:
            raise ProfileError([Problem((), "a YAML alias refers to a node that contains it (a recursive "
                                        "document)", source, node.start_mark.line + 1)])
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def _check_duplicate_keys(root: yaml.Node, source: str) -> None:
    stack: list[yaml.Node] = [root]
    seen_ids: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen_ids:  # YAML aliases can share nodes; visit each once
            continue
        seen_ids.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in keys:
                        raise ProfileError([Problem((), f"duplicate key {key.value!r}", source,
                                                    key.start_mark.line + 1)])
                    keys.add(key.value)
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


# --------------------------------------------------------------------------------------------------- finding


def builtin_dir() -> Path:
    return Path(str(resources.files("fakehw").joinpath("profiles")))


@cache
def builtin_profiles() -> dict[str, Path]:
    """Built-in profile names and their files, by name (``dgx-h100`` before ``dgx-h100-roce``)."""
    return {p.stem: p for p in sorted(builtin_dir().glob("*.yaml"), key=lambda p: p.stem)}


def find_document(ref: str, relative_to: Path | None, builtins: Mapping[str, Path]) -> Path | None:
    """A reference is a YAML file path (tried relative to the including file first) or a built-in name."""
    candidates = [relative_to.parent / ref] if relative_to is not None else []
    candidates.append(Path(ref))
    for c in candidates:
        if c.suffix in (".yaml", ".yml") and c.is_file():
            return c
    return builtins.get(ref)


def not_found(kind: str, ref: str, relative_to: Path | None, builtins: Mapping[str, Path]) -> str:
    """Why ``ref`` names no document: a path that does not exist, a file that is not YAML, or an unknown name."""
    known = ", ".join(builtins)
    path = relative_to.parent / ref if relative_to is not None and not Path(ref).is_absolute() else Path(ref)
    if path.suffix in (".yaml", ".yml") or "/" in ref:
        if not path.exists():
            return f"no {kind} {ref!r}: no such file (built-in {kind}s: {known})"
        if path.is_dir():
            return f"no {kind} {ref!r}: a directory, not a .yaml file"
        if path.suffix not in (".yaml", ".yml"):
            return f"no {kind} {ref!r}: not a .yaml file"
    return f"no {kind} {ref!r}: not a built-in ({known}) nor a .yaml file"


def _find(ref: str, relative_to: Path | None) -> Path:
    path = find_document(ref, relative_to, builtin_profiles())
    if path is None:
        raise ProfileError([Problem((), not_found("profile", ref, relative_to, builtin_profiles()))])
    return path


def read_profile_text(path: Path) -> str:
    """The text of a profile file, checked before it is read: a regular file (not a FIFO or device, which could
    block or never end) of at most :data:`MAX_PROFILE_BYTES` bytes (a larger or sparse file is never read)."""
    source = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ProfileError([Problem((), f"cannot read profile: {exc.strerror}", source)]) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError([Problem((), "cannot read profile: not a regular file", source)])
        if st.st_size > MAX_PROFILE_BYTES:
            raise ProfileError([Problem((), f"profile is {st.st_size} bytes, larger than the {MAX_PROFILE_BYTES}-byte "
                                        "limit", source)])
        chunks: list[bytes] = []
        while chunk := os.read(fd, MAX_PROFILE_BYTES + 1 - sum(map(len, chunks))):
            chunks.append(chunk)
            if sum(map(len, chunks)) > MAX_PROFILE_BYTES:
                break
        data = b"".join(chunks)
        if len(data) > MAX_PROFILE_BYTES:  # it grew after the check
            raise ProfileError([Problem((), f"profile is larger than {MAX_PROFILE_BYTES} bytes", source)])
        return data.decode()
    except OSError as exc:
        raise ProfileError([Problem((), f"cannot read profile: {exc.strerror}", source)]) from None
    except UnicodeDecodeError as exc:
        raise ProfileError([Problem((), f"cannot read profile: not UTF-8 text ({exc.reason} at byte {exc.start})",
                                    source)]) from None
    finally:
        os.close(fd)


def _resolve_document(path: Path, text: str | None = None, chain: tuple[Path, ...] = ()) -> tuple[Any, list[Document]]:
    """The merged document for ``path`` (its ``extends`` chain applied) and the documents involved."""
    source = str(path)
    if len(chain) > MAX_EXTENDS_DEPTH:
        raise ProfileError([Problem(("extends",), f"extends chain longer than {MAX_EXTENDS_DEPTH}", source)])
    if text is None:
        text = read_profile_text(path)
    doc = parse_yaml(text, source)
    data = doc.data
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise ProfileError([Problem((), f"a profile is a YAML mapping, this document is {kind}", source, 1)])
    ref = data.get("extends")
    if ref is None:
        return data, [doc]
    if not isinstance(ref, str):
        raise ProfileError([Problem(("extends",), "extends names one profile (a string)", source,
                                    doc.locate(("extends",)))])
    try:
        base_path = _find(ref, path)
    except ProfileError as exc:
        raise ProfileError([Problem(("extends",), p.message, source, doc.locate(("extends",)))
                            for p in exc.problems]) from None
    if base_path.resolve() in {p.resolve() for p in (*chain, path)}:
        raise ProfileError([Problem(("extends",), f"extends loops back to {base_path}", source,
                                    doc.locate(("extends",)))])
    base, docs = _resolve_document(base_path, chain=(*chain, path))
    child = {k: v for k, v in data.items() if k != "extends"}
    return merge_documents(base, child), [doc, *docs]


# --------------------------------------------------------------------------------------------------- pydantic


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "tuple"}


def _clean_loc(loc: Sequence[Any]) -> tuple[PathItem, ...]:
    """Drop pydantic's union/validator tags (``str``, ``list[str]``, ``function-after[...]``) from a location."""
    return tuple(x for x in loc if not (isinstance(x, str) and ("[" in x or x in _TYPE_TAGS)))


def _unwrap(tp: Any) -> list[Any]:
    """The model classes an annotation can hold (through Optional, list, dict and Annotated)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType, list, tuple, dict):
        out: list[Any] = []
        for arg in typing.get_args(tp):
            out.extend(_unwrap(arg))
        return out
    return [tp] if isinstance(tp, type) and issubclass(tp, BaseModel) else []


def allowed_keys(root: type[BaseModel], loc: tuple[PathItem, ...]) -> list[str]:
    """Keys allowed in the mapping at ``loc`` of a document validated by ``root`` (for did-you-mean hints)."""
    models: list[Any] = [root]
    for item in loc:
        if isinstance(item, int):
            continue
        nxt: list[Any] = []
        for model in models:
            for name, f in model.model_fields.items():
                if (f.alias or name) == item:
                    nxt.extend(_unwrap(f.annotation))
        models = nxt or models
    return sorted({f.alias or n for m in models for n, f in m.model_fields.items()})


def validation_problems(exc: ValidationError, source: str, root: type[BaseModel]) -> list[Problem]:
    """Pydantic's errors for a document validated by ``root``, as located problems people can act on:
    unknown keys with a did-you-mean, missing keys named, the offending value shown; one per path."""
    unique: dict[tuple[PathItem, ...], Problem] = {}
    for err in exc.errors(include_url=False):
        loc = _clean_loc(err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden" and loc:
            key = str(loc[-1])
            allowed = allowed_keys(root, loc[:-1])
            near = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else f" (allowed: {', '.join(allowed)})"
            msg = f"unknown key {key!r}{hint}"
        elif kind == "missing" and loc:
            msg = f"missing required key {str(loc[-1])!r}"
        else:
            msg = str(err["msg"]).removeprefix("Value error, ")
            inp = err.get("input")
            if kind != "model_type" and isinstance(inp, str | int | float) and not isinstance(inp, bool):
                msg = f"{msg} (got {repr(inp)[:60]})"
        # pydantic lists every union branch that failed; the first says it
        unique.setdefault(loc, Problem(loc, msg, source))
    return list(unique.values())


# --------------------------------------------------------------------------------------------------- API


@dataclass(frozen=True)
class LoadedProfile:
    spec: ProfileSpec
    documents: tuple[Document, ...]
    digest: str

    def locate(self, path: Sequence[PathItem]) -> tuple[str, int | None]:
        """The file (in the extends chain) that holds ``path``, and its line."""
        best: tuple[str, int | None] = (self.documents[0].source, self.documents[0].locate(path))
        best_depth = -1
        for doc in self.documents:
            depth = _depth(doc, path)
            if depth > best_depth:
                best, best_depth = (doc.source, doc.locate(path)), depth
        return best


def _depth(doc: Document, path: Sequence[PathItem]) -> int:
    data: Any = doc.data
    depth = 0
    for item in path:
        if isinstance(data, dict) and item in data:
            data = data[item]
        elif isinstance(data, list) and isinstance(item, int) and 0 <= item < len(data):
            data = data[item]
        else:
            break
        depth += 1
    return depth


def _locate_problems(exc: ProfileError, loaded_docs: Sequence[Document]) -> ProfileError:
    fixed = []
    for p in exc.problems:
        if p.source is not None and p.line is not None:
            fixed.append(p)
            continue
        doc = max(loaded_docs, key=lambda d: _depth(d, p.path))
        fixed.append(Problem(p.path, p.message, p.source or doc.source, p.line or doc.locate(p.path)))
    return ProfileError(fixed)


def load_spec(ref: str | Path, text: str | None = None) -> LoadedProfile:
    """Parse and check a profile document (with its extends chain) without expanding it."""
    path = Path(str(ref)) if text is not None else ref if isinstance(ref, Path) else _find(str(ref), None)
    data, docs = _resolve_document(path, text)
    try:
        spec = ProfileSpec.model_validate(data)
    except ValidationError as exc:
        raise _locate_problems(ProfileError(validation_problems(exc, str(path), ProfileSpec)), docs) from None
    except (RecursionError, OverflowError, ValueError, TypeError) as exc:
        raise ProfileError([Problem((), f"cannot read profile: {exc}", str(path))]) from None
    canonical = json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))
    return LoadedProfile(spec, tuple(docs), hashlib.sha256(canonical.encode()).hexdigest())


def load_profile(ref: str | Path, text: str | None = None, nodes: int | None = None) -> System:
    """Load, check and expand a profile (a built-in name, a file, or ``text`` with ``ref`` as its name).

    ``nodes`` overrides the node count (like ``nodes:`` in the document).
    """
    if text is None and nodes is None and isinstance(ref, str) and ref in builtin_profiles():
        return _load_builtin(ref)
    loaded = load_spec(ref, text)
    spec = loaded.spec if nodes is None else loaded.spec.model_copy(update={"nodes": nodes})
    base = Path(loaded.documents[0].source)

    def resolve(name: str) -> ProfileSpec:
        return load_spec(_find(name, base)).spec

    try:
        return expand(spec, resolve, loaded.digest)
    except ProfileError as exc:
        raise _locate_problems(exc, loaded.documents) from None


@cache
def _load_builtin(name: str) -> System:
    loaded = load_spec(builtin_profiles()[name])
    base = builtin_profiles()[name]
    try:
        return expand(loaded.spec, lambda ref: load_spec(_find(ref, base)).spec, loaded.digest)
    except ProfileError as exc:
        raise _locate_problems(exc, loaded.documents) from None


def profile_summary(ref: str) -> str:
    """One line describing a built-in profile (for ``fakehw profiles``)."""
    loaded = load_spec(builtin_profiles()[ref])
    return loaded.spec.description
