"""Errors in profiles, reported the way a person fixes them: file, line, path in the document, problem."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

PathItem = str | int
LocateFn = Callable[[Sequence[PathItem]], int | None]
"""Maps a path in the document to a 1-based line number, or None when the path is not in the file."""


def format_path(path: Sequence[PathItem]) -> str:
    """``("groups", 0, "node", "gpus", 3, "sku")`` -> ``groups[0].node.gpus[3].sku``."""
    out = ""
    for item in path:
        if isinstance(item, int):
            out += f"[{item}]"
        else:
            out += f".{item}" if out else str(item)
    return out or "(document)"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a profile, at a path in the document."""

    path: tuple[PathItem, ...]
    message: str
    source: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = self.source or "<profile>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {format_path(self.path)}: {self.message}"


class ProfileError(Exception):
    """A profile that cannot be used. ``problems`` lists every issue found (at least one)."""

    def __init__(self, problems: Sequence[Problem]):
        if not problems:
            raise ValueError("ProfileError needs at least one problem")
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        shown = [str(p) for p in self.problems[:20]]
        if len(self.problems) > 20:
            shown.append(f"... and {len(self.problems) - 20} more problems")
        return "\n".join(shown)

    def located(self, source: str, locate: LocateFn | None) -> ProfileError:
        """The same problems, tagged with a file name and (where ``locate`` finds it) a line number."""
        return ProfileError(
            [
                replace(
                    p,
                    source=p.source or source,
                    line=p.line if p.line is not None else (locate(p.path) if locate else None),
                )
                for p in self.problems
            ]
        )


class Problems:
    """Collects problems while a document is checked, so one run reports all of them."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, path: Sequence[PathItem], message: str) -> None:
        self.items.append(Problem(tuple(path), message))

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise ProfileError(self.items)

