"""Local testbed at fleet scale: ``testbed up`` and ``down`` of 100 / 1,000 / 10,000 dgx-h100 nodes.

For each size, in this order and in the same run:

- model: loading the N-node profile in a fresh interpreter (the floor ``up`` cannot beat: the agent loads it too);
- up: ``Testbed.up`` on the local backend, from the call to the agent answering (the agent makes a node's files
  when they are asked for, so this is model load + journal + socket); the agent's peak RSS after it;
- one node asked for: ``Testbed.node`` of the last node (its files made), then an NVML snapshot read and a /sys
  attribute read, so every node still answers when asked; the cluster directory's entries, distinct inodes and
  disk blocks after it;
- down: ``Testbed.down`` returning, and until the cluster directory is gone from disk (the backend renames it
  away and removes it in the background).

The baseline that shows what on-demand files buy is one node rendered eagerly (``files="all"``, as every node was
before) in the same run: its seconds and entries, times N, is what an eager ``up`` would cost.

Prints figures; asserts nothing. ``python bench/bench_testbed.py [--sizes 100,1000,10000]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import row

PROFILE = "dgx-h100"


def tree_cost(root: Path) -> tuple[int, int, int]:
    """Entries, distinct inodes and bytes of disk blocks under ``root`` (hard links counted once)."""
    entries = 0
    inodes: set[tuple[int, int]] = set()
    blocks = 0
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            entries += 1
            st = os.lstat(os.path.join(base, name))
            key = (st.st_dev, st.st_ino)
            if key not in inodes:
                inodes.add(key)
                blocks += st.st_blocks * 512
    return entries, len(inodes), blocks


def peak_rss_mib(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def model_load_s(nodes: int) -> float:
    code = ("import time; s = time.perf_counter(); from fakehw.model import load_profile; "
            f"load_profile({PROFILE!r}, nodes={nodes}); print(time.perf_counter() - s)")
    return float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)


def eager_node(base: Path) -> tuple[float, int]:
    """Seconds and entries of one node rendered eagerly (every file up front)."""
    from fakehw.agent.service import AgentService
    from fakehw.model import load_profile

    system = load_profile(PROFILE)
    d = Path(tempfile.mkdtemp(dir=base))
    start = time.perf_counter()
    AgentService(system, d, files="all")
    took = time.perf_counter() - start
    entries, _, _ = tree_cost(d)
    shutil.rmtree(d)
    return took, entries


def one_size(nodes: int, base: Path) -> None:
    from fakehw.nvml.snapshot import read_snapshot
    from testbed.api import Testbed

    state = base / f"state-{nodes}"
    model = model_load_s(nodes)
    start = time.perf_counter()
    tb = Testbed.up(PROFILE, nodes=nodes, backend="local", name=f"bench{nodes}", state_dir=state)
    up = time.perf_counter() - start
    rss = peak_rss_mib(tb.record.agent_pid)
    try:
        last = tb.node_names[-1]
        start = time.perf_counter()
        info = tb.node(last)
        header = read_snapshot(info.dir / "nvml.snapshot").header
        online = (info.dir / "root" / "sys" / "devices" / "system" / "cpu" / "online").read_text().strip()
        asked = time.perf_counter() - start
        assert header.node_name == last and online, (header.node_name, online)
        entries, inodes, blocks = tree_cost(tb.record.dir)
    finally:
        start = time.perf_counter()
        tb.down()
        down = time.perf_counter() - start
        cluster = tb.record.dir
        while cluster.exists() or any(cluster.parent.glob(f".trash-{cluster.name}-*")):  # rm in the background
            time.sleep(0.05)
        gone = time.perf_counter() - start
    row(f"{nodes}", f"{model:6.2f}", f"{up:6.2f}", f"{up / model:5.2f}", f"{rss:7.0f}", f"{asked:6.2f}",
        f"{entries:8d}", f"{inodes:7d}", f"{blocks / 2**20:7.1f}", f"{down:5.2f}", f"{gone:6.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="comma-separated node counts (default: 100,1000)")
    parser.add_argument("--dir", type=Path, default=None, help="where the state dirs go (default: a temp dir)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = Path(tempfile.mkdtemp(prefix="fhw-bench-testbed-", dir=args.dir))
    try:
        took, entries = eager_node(base)
        print(f"baseline: one {PROFILE} node rendered eagerly: {took:.2f} s, {entries} entries "
              f"(x1,000 nodes: {took * 1000:.0f} s, {entries * 1000:,} entries)")
        print(f"== testbed up/down, local backend, {PROFILE} (files on demand)")
        row("nodes", "model s", "up s", "up/model", "agent RSS MiB", "1 node asked s", "entries", "inodes",
            "disk MiB", "down s", "gone s")
        for n in sizes:
            one_size(n, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
