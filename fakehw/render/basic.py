"""The node's own description: ``node.json`` (model and derived topology) and ``state.json`` (runtime)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fakehw.model.export import node_to_json
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir

if TYPE_CHECKING:
    from fakehw.agent.state import NodeState


def render_model(ctx: RenderContext, out: OutputDir) -> None:
    if ctx.initial or not (out.root / "node.json").exists():
        out.write_json("node.json", node_to_json(ctx.system, ctx.node))


def render_state(ctx: RenderContext, out: OutputDir) -> None:
    if ctx.memo is None:
        out.write_json("state.json", ctx.state.to_json(), compact=True)
        return
    memo = ctx.memo.get("state", StateFragments)
    data = state_json(ctx.state, memo)
    # What was written last is remembered: a change is written without reading the file back; the same bytes
    # again are compared with the file (which puts it back if someone removed it).
    out.write("state.json", data, changed=data != memo.written)
    memo.written = data


class StateFragments:
    """JSON text of the parts of ``state.json`` that rarely change (a GPU's state, an active fault), by the object
    it was made from: a change re-encodes what it changed, not every fault of the node."""

    def __init__(self) -> None:
        self.gpus: dict[int, tuple[object, str]] = {}
        self.faults: dict[str, str] = {}
        self.fault_list: tuple[object, ...] = ()
        """The faults the last ``state.json`` listed, and their JSON text (``fault_text``): an injection appends
        one fault, so its text is appended to the last one's instead of walking every active fault again."""
        self.fault_text = ""
        self.written: bytes | None = None
        """The bytes of the last ``state.json`` written."""


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _faults_text(state: NodeState, memo: StateFragments) -> str:
    """The active faults as a JSON list's inside: appended to when the last list is a prefix of this one (an
    injection), else rebuilt from the remembered text of each fault (a heal)."""
    old, new = memo.fault_list, state.faults
    if old and len(new) >= len(old) and new[:len(old)] == old:  # the same objects: compared by identity first
        added = [_compact(f.to_json()) for f in new[len(old):]]
        memo.faults.update((f.id, t) for f, t in zip(new[len(old):], added, strict=True))
        text = ",".join([memo.fault_text, *added]) if added else memo.fault_text
    else:
        faults: dict[str, str] = {}
        for f in new:
            known = memo.faults.get(f.id)
            faults[f.id] = known if known is not None else _compact(f.to_json())
        memo.faults = faults
        text = ",".join(faults.values())
    memo.fault_list, memo.fault_text = new, text
    return text


def state_json(state: NodeState, memo: StateFragments) -> bytes:
    """``state.json``: the same bytes as ``dump_json(state.to_json(), compact=True)``, from remembered fragments."""
    gpus: dict[int, tuple[object, str]] = {}
    for g in state.gpus:
        hit = memo.gpus.get(id(g))
        if hit is None or hit[0] is not g:
            hit = (g, _compact(g.to_json()))
        gpus[id(g)] = hit
    memo.gpus = gpus
    doc = state.to_json(gpus=False, faults=False)
    raw = {"gpus": "[" + ",".join(t for _, t in gpus.values()) + "]", "faults": "[" + _faults_text(state, memo) + "]"}
    parts = [f"{_compact(k)}:{raw[k] if k in raw else _compact(doc[k])}" for k in sorted([*doc, *raw])]
    return ("{" + ",".join(parts) + "}\n").encode()
