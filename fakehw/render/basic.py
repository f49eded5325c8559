"""The node's own description: ``node.json`` (model and derived topology) and ``state.json`` (runtime)."""

from __future__ import annotations

from fakehw.model.export import node_to_json
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir


def render_model(ctx: RenderContext, out: OutputDir) -> None:
    if ctx.initial or not (out.root / "node.json").exists():
        out.write_json("node.json", node_to_json(ctx.system, ctx.node))


def render_state(ctx: RenderContext, out: OutputDir) -> None:
    out.write_json("state.json", ctx.state.to_json(), compact=True)
