"""Fabric lint at fleet scale: the class-based linter against the all-pairs one (``exhaustive=True``, the linter
as it was before path classes), both in the same run, on rail-optimised dgx-h100 fabrics of 64-512 nodes (each
rail a segment of N NICs: N(N-1)/2 paths). No root needed. Figures only, nothing asserted.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import row


def main() -> int:
    from fakehw.fabric.generate import rail_optimised, to_yaml
    from fakehw.fabric.lint import lint
    from fakehw.fabric.loader import load_fabric_spec
    from fakehw.fabric.model import resolve

    print("fabric lint, dgx-h100 rail-optimised (8 rails), class-based vs every path on its own (same run)")
    for nodes in (64, 128, 256, 512):
        model = resolve(load_fabric_spec(f"bench-{nodes}.yaml", to_yaml(rail_optimised("dgx-h100-roce", nodes))))
        start = time.perf_counter()
        report = lint(model)
        fast = time.perf_counter() - start
        if nodes <= 256:
            start = time.perf_counter()
            lint(model, exhaustive=True)
            slow = time.perf_counter() - start
            ratio = f"{slow / fast:7.0f}x"
            slow_text = f"all paths {slow:7.2f} s"
        else:
            slow_text, ratio = "all paths   (skipped: ~4x the 256-node time)", ""
        row(f"{nodes} nodes: {report.path_count} paths, {len(report.classes)} classes",
            f"classes {fast:6.3f} s", slow_text, ratio)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
