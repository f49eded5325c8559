"""ndctl v81's cxl-topology.sh run unchanged against fakehw (tests/peer/ndctl.py says how); a file of its own so that
xdist's loadfile runs it beside the other long script."""

from __future__ import annotations

from pathlib import Path

from tests.peer.ndctl import run_and_judge


def test_topology_passes_unchanged_with_its_checks_run(testbed_state_dir: Path, shims: Path) -> None:
    run_and_judge("cxl-topology.sh", testbed_state_dir, shims)
