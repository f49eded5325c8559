"""Operator files as the importers read them: parsed once, every value locatable (file, key, line), every
failure a :class:`~fakehw.fabric.loader.FabricError` that names the file, the key and the line.

JSON is parsed by :mod:`json` (the arbiter of validity, with its line and column on error) and then once more by
the YAML loader, which is a JSON superset for the files switches write and knows line numbers; when that second
parse fails the values still load, only without lines.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from fakehw.fabric.loader import FabricError, ImportNote, NoteKind, SourceKey
from fakehw.model.errors import PathItem, Problem, ProfileError
from fakehw.model.loader import Document, parse_yaml

MAX_SOURCE_BYTES = 16 * 2**20
"""Largest operator file read (a 64-port SONiC config_db.json is about 200 KB)."""


def fail(source: str, key: str, message: str, line: int | None = None) -> NoReturn:
    raise FabricError([Problem((key,) if key else (), message, source, line)])


@dataclass(frozen=True)
class SourceFile:
    """One operator file: where it is, how findings name it, its data and (when known) its line numbers."""

    path: Path
    name: str
    """How findings and errors name the file."""
    data: Any
    document: Document | None

    def line(self, path: Sequence[PathItem]) -> int | None:
        return self.document.locate(path) if self.document is not None else None

    def at(self, key: str, path: Sequence[PathItem] = ()) -> SourceKey:
        """A pointer to ``key`` (the operator's spelling, ``PORT|Ethernet8.mtu``) at ``path`` in the data."""
        return SourceKey(self.name, key, self.line(path))

    def fail(self, key: str, path: Sequence[PathItem], message: str) -> NoReturn:
        fail(self.name, key, message, self.line(path))

    def note(self, key: str, path: Sequence[PathItem], kind: NoteKind, message: str) -> ImportNote:
        return ImportNote(self.at(key, path), kind, message)


def _read_text(path: Path, name: str) -> str:
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            fail(name, "", f"larger than {MAX_SOURCE_BYTES} bytes; not a switch or host config")
        return path.read_text()
    except UnicodeDecodeError as exc:
        fail(name, "", f"not text (UTF-8): {exc.reason} at byte {exc.start}")
    except OSError as exc:
        fail(name, "", f"cannot read: {exc.strerror or exc}")


def read_json(path: Path, name: str) -> SourceFile:
    text = _read_text(path, name)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(name, "", f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", exc.lineno)
    except (RecursionError, ValueError) as exc:
        fail(name, "", f"not valid JSON: {exc}")
    try:
        document: Document | None = parse_yaml(text, name)
    except ProfileError:
        document = None
    return SourceFile(path, name, data, document)


def read_yaml(path: Path, name: str) -> SourceFile:
    text = _read_text(path, name)
    try:
        document = parse_yaml(text, name)
    except ProfileError as exc:
        problem = exc.problems[0]
        fail(name, "", f"not valid YAML: {problem.message.removeprefix('malformed YAML: ')}", problem.line)
    return SourceFile(path, name, document.data, document)


def as_int(src: SourceFile, key: str, path: Sequence[PathItem], value: Any, lo: int, hi: int, what: str) -> int:
    """An integer the operator wrote as a number or a string ("9100"), in [lo, hi]."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text is None or not text.lstrip("-").isdigit():
        src.fail(key, path, f"{what} must be an integer, got {value!r}")
    number = int(text)
    if not lo <= number <= hi:
        src.fail(key, path, f"{what} {number} is outside {lo}-{hi}")
    return number


def int_list(src: SourceFile, key: str, path: Sequence[PathItem], value: Any, lo: int, hi: int,
             what: str) -> list[int]:
    """``"3,4"``, ``"0-2,5"``, ``[3, 4]`` or ``3`` -> [3, 4] (ranges expanded, order kept, duplicates removed)."""
    items: list[Any]
    if isinstance(value, list):
        items = value
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    elif isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    else:
        src.fail(key, path, f"{what} must be a list of integers, got {value!r}")
    out: list[int] = []
    for item in items:
        text = str(item)
        lo_text, dash, hi_text = text.partition("-")
        if dash and lo_text.isdigit() and hi_text.isdigit():
            first = as_int(src, key, path, lo_text, lo, hi, what)
            last = as_int(src, key, path, hi_text, lo, hi, what)
            if last < first:
                src.fail(key, path, f"{what} range {text!r} runs backwards")
            numbers = list(range(first, last + 1))
        else:
            numbers = [as_int(src, key, path, item, lo, hi, what)]
        out += [n for n in numbers if n not in out]
    return out
