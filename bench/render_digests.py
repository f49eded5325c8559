"""Digests of the files a node's render writes after each change of a fixed sequence, for comparing two checkouts.

A cut in the render must leave its files byte for byte as they were. Tests compare a render with memory against a
render without it in the same tree, which cannot see a change both share (a cached reading, a packed field). This
prints, for the first two nodes of dgx-h100 and gb200-nvl72 after each change of a mixed sequence of faults and heals
(Xid, thermal, ECC, NVLink down, NVLink errors, a heal, fallen off the bus, a heal), the sha256 of every file a
full render (no memory) and an incremental render (one memory across the sequence) write, with the wall clock frozen:

    PYTHONPATH=<checkout A> python bench/render_digests.py > a.txt
    PYTHONPATH=<checkout B> python bench/render_digests.py > b.txt
    diff a.txt b.txt

Asserts nothing; identical output means identical files. The two columns differ from each other by design for the
snapshot: an incremental render keeps an unchanged GPU's record, readings and all, at the generation it was built
at, where a fresh render builds every GPU at the node's generation; each column is compared across checkouts.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fakehw.agent.faults import FAULT_ADAPTER
from fakehw.agent.state import ActiveFault, Event, derive_state, events_for
from fakehw.model import load_profile
from fakehw.model.system import Node
from fakehw.render import RenderMemo, render_node

SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None

FILES = ("nvml.snapshot", "state.json", "node.json")
OUTPUTS = frozenset({"nvml", "state", "model"})
"""The fake root tree (~17,000 entries a fresh render) is left out: tests/render/test_incremental.py compares it."""


def changes(node: Node) -> Iterator[dict[str, Any] | str]:
    """Fault requests, and device names to heal, touching GPU records, links and the event ring."""
    first, last = node.gpus[0], node.gpus[-1]
    linked = next(g for g in node.gpus if g.ports)
    yield {"kind": "xid", "device": first.name, "code": 13}
    yield {"kind": "thermal", "device": last.name, "temperature_c": 95}
    yield {"kind": "ecc", "device": first.name, "type": "dbe", "count": 2, "location": "device-memory"}
    yield {"kind": "nvlink-down", "device": linked.name, "link": 0}
    yield {"kind": "nvlink-errors", "device": linked.name, "link": 0, "counter": "replay", "increment": 5}
    yield {"kind": "xid", "device": last.name, "code": 79}
    yield first.name
    yield {"kind": "fallen-off-bus", "device": last.name}
    yield linked.name
    yield last.name


def digests(profile: str, nodes: int = 2) -> Iterator[str]:
    system = load_profile(profile)
    for node in system.nodes[:nodes]:
        faults: dict[str, ActiveFault] = {}
        events: list[Event] = []
        memo, gpu_memo = RenderMemo(), {}  # type: ignore[var-annotated]
        with tempfile.TemporaryDirectory(dir=SCRATCH) as kept:
            for generation, change in enumerate(changes(node), start=2):
                if isinstance(change, dict):
                    fault = ActiveFault(f"f-{generation:06d}", node.name, FAULT_ADAPTER.validate_python(change),
                                        1000.0 + generation)
                    faults[fault.id] = fault
                    for kind, data, nvml_type in events_for(fault):
                        events.append(Event(len(events) + 1, fault.created, node.name, change["device"], kind, data,
                                            nvml_type, fault.id))
                    label = change["kind"]
                else:
                    faults = {k: f for k, f in faults.items() if f.request.device != change}
                    label = f"heal {change}"
                state = derive_state(node, list(faults.values()), generation, system.seed, memo=gpu_memo)
                render_node(system, node, state, Path(kept), initial=generation == 2, events=tuple(events),
                            memo=memo, outputs=OUTPUTS)
                with tempfile.TemporaryDirectory(dir=SCRATCH) as fresh:
                    render_node(system, node, state, Path(fresh), initial=True, events=tuple(events),
                                outputs=OUTPUTS)
                    for name in FILES:
                        full = hashlib.sha256((Path(fresh) / name).read_bytes()).hexdigest()[:16]
                        incremental = hashlib.sha256((Path(kept) / name).read_bytes()).hexdigest()[:16]
                        yield f"{profile} {node.name} {label}: {name} full {full} incremental {incremental}"


def main() -> int:
    time.time = lambda: 1.7e9  # retired pages are stamped with the wall clock
    for profile in sys.argv[1:] or ("dgx-h100", "gb200-nvl72"):
        for line in digests(profile):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
