"""The NVML snapshot renderer: one ``nvml.snapshot`` per node directory, rewritten on every state change."""

from __future__ import annotations

from fakehw.nvml.snapcache import SnapshotCache
from fakehw.nvml.snapfile import Patch, snapshot_answers, write_snapshot
from fakehw.nvml.snapshot import SNAPSHOT_FILE, build_snapshot
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir


def render_nvml_snapshot(ctx: RenderContext, out: OutputDir) -> None:
    """Write the node's snapshot (events included, so event waits in running processes see them)."""
    cache = ctx.memo.get("nvml", SnapshotCache) if ctx.memo is not None else None
    base = cache.packed if cache is not None else None
    data = build_snapshot(ctx.system, ctx.node, ctx.state, ctx.events, cache=cache).to_bytes(cache)
    if cache is None:
        out.count(write_snapshot(out.path(SNAPSHOT_FILE), data, out.release))
        return
    # What was written last is remembered: answers that differ are written without reading the file back; the
    # same answers again are compared with the file (which puts it back if someone removed it).
    answers = snapshot_answers(data)
    changed = cache.written is not None and answers != cache.written
    patch = Patch(base, cache.dirty) if base is not None and cache.dirty is not None else None
    out.count(write_snapshot(out.path(SNAPSHOT_FILE), data, out.release, changed=changed, patch=patch))
    cache.written = answers
