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
    out.write("state.json", state_json(ctx.state, ctx.memo.get("state", StateFragments)))


class StateFragments:
    """JSON text of the parts of ``state.json`` that rarely change (a GPU's state, an active fault), by the object
    it was made from: a change re-encodes what it changed, not every fault of the node."""

    def __init__(self) -> None:
        self.gpus: dict[int, tuple[object, str]] = {}
        self.faults: dict[str, str] = {}


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def state_json(state: NodeState, memo: StateFragments) -> bytes:
    """``state.json``: the same bytes as ``dump_json(state.to_json(), compact=True)``, from remembered fragments."""
    gpus: dict[int, tuple[object, str]] = {}
    for g in state.gpus:
        hit = memo.gpus.get(id(g))
        if hit is None or hit[0] is not g:
            hit = (g, _compact(g.to_json()))
        gpus[id(g)] = hit
    faults: dict[str, str] = {}
    for f in state.faults:
        text = memo.faults.get(f.id)
        faults[f.id] = text if text is not None else _compact(f.to_json())
    memo.gpus, memo.faults = gpus, faults
    doc = state.to_json(gpus=False, faults=False)
    raw = {"gpus": "[" + ",".join(t for _, t in gpus.values()) + "]", "faults": "[" + ",".join(faults.values()) + "]"}
    parts = [f"{_compact(k)}:{raw[k] if k in raw else _compact(doc[k])}" for k in sorted([*doc, *raw])]
    return ("{" + ",".join(parts) + "}\n").encode()
