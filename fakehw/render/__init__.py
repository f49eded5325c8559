"""Renderings of a node: pure functions of (system, node, runtime state) written atomically to a directory.

Each renderer owns some files of a node's directory (``nodes/<node>/``). The agent calls :func:`render_node`
after every state change; ``fakehw render`` calls it once per node. Renderers registered later (the NVML
snapshot, the fake sysfs root) plug in through :data:`RENDERERS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fakehw.render.atomic import OutputDir, Releaser

T = TypeVar("T")

if TYPE_CHECKING:  # the agent imports this package; importing it back here would be a cycle
    from fakehw.agent.state import Event, NodeState
    from fakehw.model.system import Node, System


class RenderMemo:
    """What the renderers of one node remember between its renders, so a re-render after a change repeats only the
    work the change needs (the agent keeps one per node; a render without one starts from nothing). Each renderer
    keeps its own object under its own name."""

    def __init__(self) -> None:
        self._parts: dict[str, Any] = {}

    def get(self, name: str, factory: Callable[[], T]) -> T:
        part = self._parts.get(name)
        if part is None:
            part = self._parts[name] = factory()
        return part


@dataclass(frozen=True)
class RenderContext:
    system: System
    node: Node
    state: NodeState
    initial: bool
    """True on the first render of a node dir (renderers of static content only write then)."""
    events: tuple[Event, ...] = ()
    """The node's recent events, oldest first (the NVML snapshot carries them to event waits)."""
    memo: RenderMemo | None = None
    """The node's memory of earlier renders (None: render from scratch)."""


Renderer = Callable[[RenderContext, OutputDir], None]


@dataclass(frozen=True)
class RenderResult:
    node: str
    written: int
    unchanged: int


OUTPUTS = ("model", "state", "nvml", "root")
"""What a node's directory holds: node.json, state.json, nvml.snapshot, and the fake root tree root/."""
CHANGE_ORDER = ("nvml", "model", "state", "root")
"""The order of a re-render after a change: the NVML snapshot first, since its writing (the close after an update
in place, or a rename) is what wakes consumers blocked in nvmlEventSetWait (inotify), so a fault reaches them
before the agent spends time on the files nobody waits on. A first render keeps :data:`OUTPUTS`' order (node.json
exists before anything refers to the node)."""


def _renderers(outputs: frozenset[str] | None, initial: bool = True) -> tuple[Renderer, ...]:
    from fakehw.nvml.render import render_nvml_snapshot
    from fakehw.render.basic import render_model, render_state
    from fakehw.sysfs import render_root

    by_name: dict[str, Renderer] = {"model": render_model, "state": render_state, "nvml": render_nvml_snapshot,
                                    "root": render_root}
    order = OUTPUTS if initial else CHANGE_ORDER
    return tuple(by_name[name] for name in order if outputs is None or name in outputs)


def render_node(system: System, node: Node, state: NodeState, out: Path, initial: bool = False,
                events: tuple[Event, ...] = (), outputs: frozenset[str] | None = None,
                memo: RenderMemo | None = None, release: Releaser | None = None) -> RenderResult:
    """Render the outputs of ``node`` (all of :data:`OUTPUTS` unless ``outputs`` names some) into ``out``; only
    files whose content changed are rewritten."""
    unknown = set(outputs or ()) - set(OUTPUTS)
    if unknown:
        raise ValueError(f"unknown output(s) {', '.join(sorted(unknown))} (outputs: {', '.join(OUTPUTS)})")
    ctx = RenderContext(system, node, state, initial, events, memo)
    paths: dict[str, Path] = memo.get("paths", dict) if memo is not None else {}
    if paths.get("") != out:  # the paths made under another directory are not this one's
        paths.clear()
        paths[""] = out
    target = OutputDir(out, release=release, paths=paths)
    for renderer in _renderers(outputs, initial):
        renderer(ctx, target)
    return RenderResult(node.name, target.written, target.unchanged)
