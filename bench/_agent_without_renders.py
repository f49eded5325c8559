"""The agent with every render after its start skipped: ``python bench/_agent_without_renders.py agent ...``.

A measuring instrument for ``bench_agent.py --render-floor``, never a way to run the agent: a change is journaled,
synced, applied and answered as usual, but no node's files follow it. Injections/s and agent CPU per injection
through it are what everything but the render costs (HTTP, validation, the journal and its fsync, applying the
change); the difference from the real agent in the same run is the render's share.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import fakehw.agent.service as service
from fakehw.cli import main
from fakehw.render import RenderResult, render_node


def _render_at_start_only(system: Any, node: Any, state: Any, out: Path, initial: bool = False,
                          **kwargs: Any) -> RenderResult:
    if initial:  # the start-up render stays: the agent serves nodes whose files exist
        return render_node(system, node, state, out, initial=initial, **kwargs)
    return RenderResult(node.name, 0, 0)


service.render_node = _render_at_start_only  # type: ignore[attr-defined]  # the name the service renders through

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
