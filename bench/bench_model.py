"""Model scale: load + validate + derive topology for gb200-nvl72 and a 1,000-node x 8-GPU fleet; render a fleet.

Targets (issue 2): NVL72 under 1 s, the 8,000-GPU fleet under 10 s on a 2-core machine, memory reported;
rendering the nodes' outputs: seconds and files (the fleet's basic files and NVML snapshots; the full root tree for
one NVL72 rack, since a fleet's trees are millions of files: bench_sysfs.py measures those). Each scenario runs
in a fresh interpreter (no caches, honest RSS). The baseline is parsing the same YAML alone, in the same run.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import in_child, row

LOAD = """
import json, time, yaml
from pathlib import Path
from fakehw.model import load_profile
from fakehw.model.loader import builtin_profiles
path = {path!r}
start = time.perf_counter(); yaml.safe_load(Path(path).read_text()); parse = time.perf_counter() - start
start = time.perf_counter()
system = load_profile(Path(path))
loaded = time.perf_counter() - start
start = time.perf_counter()
topo = system.topology
derived = time.perf_counter() - start
print(json.dumps({{"parse": parse, "load": loaded, "derive": derived, "nodes": len(system.nodes),
                  "gpus": system.gpu_count, "domains": len(system.nvlink_domains)}}))
"""

RENDER = """
import json, os, time
from pathlib import Path
from fakehw.model import load_profile
from fakehw.agent.state import derive_state
from fakehw.render import render_node
system = load_profile(Path({path!r}))
out = Path({out!r})
outputs = frozenset({outputs!r}) if {outputs!r} else None
start = time.perf_counter()
for node in system.nodes:
    render_node(system, node, derive_state(node, [], 1, 0), out / node.name, initial=True, outputs=outputs)
first = time.perf_counter() - start
files = sum(len(f) for _, _, f in os.walk(out))
start = time.perf_counter()
again = 0
for node in system.nodes:
    again += render_node(system, node, derive_state(node, [], 1, 0), out / node.name, outputs=outputs).written
second = time.perf_counter() - start
print(json.dumps({{"seconds": first, "files": files, "rerender": second, "rewritten": again}}))
"""


def main() -> None:
    from fakehw.model.loader import builtin_dir

    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(f"extends: {builtin_dir() / 'dgx-h100.yaml'}\nname: fleet\ndescription: 1000 DGX H100\n"
                         "nodes: 1000\n")
        racks = Path(tmp) / "racks.yaml"
        racks.write_text(f"extends: {builtin_dir() / 'gb200-nvl72.yaml'}\nname: racks\ndescription: 111 NVL72\n"
                         "nodes: 1998\n")
        print("model: load + validate + expand, then derive topology (fresh interpreter each)")
        for label, path in (("gb200-nvl72 (18 nodes, 72 GPUs)", builtin_dir() / "gb200-nvl72.yaml"),
                            ("fleet: 1,000 x dgx-h100 (8,000 GPUs)", fleet),
                            ("fleet: 111 x NVL72 racks (7,992 GPUs)", racks)):
            res, rss = in_child(LOAD.format(path=str(path)))
            total = res["load"] + res["derive"]
            row(label, f"{total:6.3f} s", f"(load {res['load']:.3f} + derive {res['derive']:.3f})",
                f"peak RSS {rss:5.0f} MiB", f"{total / max(res['parse'], 1e-9):6.0f}x YAML parse")
        print("render: every node's outputs, then again with nothing changed (files = on disk afterwards)")
        cases = (
            ("fleet 1,000 x dgx-h100: node.json, state.json", fleet, ["model", "state"]),
            ("fleet 1,000 x dgx-h100: + NVML snapshots", fleet, ["model", "state", "nvml"]),
            ("gb200-nvl72 (18 trays): everything, root tree too", builtin_dir() / "gb200-nvl72.yaml", []),
        )
        for i, (label, path, outputs) in enumerate(cases):
            res, _ = in_child(RENDER.format(path=str(path), out=str(Path(tmp) / f"out-{i}"), outputs=outputs))
            row(label, f"{res['seconds']:6.2f} s", f"{res['files']:>7} files",
                f"re-render {res['rerender']:.2f} s, {res['rewritten']} rewritten")
        print("  (the full root tree of a 1,000-node fleet is bench/bench_sysfs.py --fleet: millions of files)")


if __name__ == "__main__":
    main()
