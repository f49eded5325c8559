"""Read latency of a node's live /sys (fakehw.livefs, FUSE) against the plain rendered tree, in the same run.

Figures are printed, nothing is asserted. One cxl-pool host is served by an in-process agent; its rendered
``sys`` is read directly (the baseline) and through the FUSE mount: single attribute reads (open, read, close, as
libcxl's sysfs_read_attr does), a walk of ``/sys/bus/cxl/devices`` resolving every link and reading every attribute
below it (what one ``cxl list -M -P -D -E -R`` costs), and one sysfs write that acts (cxl_mem unbind + bind,
journaled and re-rendered) for scale; then what the local testbed adds to each command it runs on a node
(``testbed exec``): the node's mount found (or started: the first command on a node pays for its server) and
``true`` run in the node view with the rendered tree read-only against the same with the live /sys bound on
``/sys``. Needs root and FUSE.

Usage: ``python bench/bench_sysfs_live.py [--reads N]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import percentile, row

from fakehw.agent.server import UnixAgentServer, serve
from fakehw.agent.service import AgentService
from fakehw.livefs import LiveMount, unavailable
from fakehw.livefs.nodes import NodeMounts
from fakehw.model import load_profile
from testbed import nodeview

NODE = "cxl-host-0"
ATTRS = ("bus/cxl/devices/mem0/serial", "bus/cxl/devices/decoder0.0/size", "bus/cxl/devices/region0/commit",
         "devices/system/node/node1/meminfo")


def read_once(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def attr_reads(sys_dir: Path, n: int) -> list[float]:
    paths = [str(sys_dir / a) for a in ATTRS]
    out = []
    for i in range(n):
        p = paths[i % len(paths)]
        t = time.perf_counter()
        read_once(p)
        out.append(time.perf_counter() - t)
    return out


def walk(sys_dir: Path) -> int:
    """Every attribute below every CXL device, links resolved: the reads one `cxl list` does, and more."""
    count = 0
    for dev in sorted((sys_dir / "bus/cxl/devices").iterdir()):
        real = os.path.realpath(dev)
        for base, dirs, files in os.walk(real):
            dirs[:] = [d for d in dirs if not d.startswith(("port", "endpoint", "decoder", "region", "dax"))]
            for f in files:
                try:
                    read_once(os.path.join(base, f))
                    count += 1
                except OSError:
                    pass  # write-only attributes
    return count


def per_exec(base: Path, rendered: Path, root: Path, runs: int = 20) -> None:
    """What the local testbed adds to each command run on a node: finding (or starting) the node's live mount, and
    entering the node view with it bound on /sys."""
    mounts = NodeMounts(base / "live", base / "agent.sock", lambda n: rendered)
    try:
        t = time.perf_counter()
        point = mounts.ensure(NODE)
        row("first command on a node: mount its live /sys", f"{(time.perf_counter() - t) * 1e3:8.1f} ms")
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            mounts.ensure(NODE)
            times.append(time.perf_counter() - t)
        row("later commands: find the node's mount", f"{statistics.median(times) * 1e3:8.2f} ms")
        if nodeview.unavailable() is not None:
            return
        views = (("node view, rendered /sys (read-only)", nodeview.NodeView(root=str(root))),
                 ("node view, live /sys", nodeview.NodeView(root=str(root), binds=(nodeview.Bind(str(point), "/sys"),),
                                                            writable_sys=True)))
        argvs = [nodeview.command(view, ["true"]) for _, view in views]
        spent: list[list[float]] = [[] for _ in views]
        for _ in range(runs):  # alternated, so that a busy moment costs both the same
            for argv, out in zip(argvs, spent, strict=True):
                t = time.perf_counter()
                subprocess.run(argv, check=True)
                out.append(time.perf_counter() - t)
        for (name, _), out in zip(views, spent, strict=True):
            row(f"`true` in the {name}", f"{statistics.median(out) * 1e3:8.1f} ms")
    finally:
        mounts.stop_all()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=5000)
    args = parser.parse_args()
    why = unavailable() or (None if os.geteuid() == 0 else "not root")
    if why:
        print(f"bench_sysfs_live: skipped: {why}")
        return 0
    base = Path(tempfile.mkdtemp(prefix="fhw-bl-", dir="/tmp"))
    svc = AgentService(load_profile("cxl-pool"), base / "state", nodes=[NODE])
    server = UnixAgentServer(base / "agent.sock", svc)
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=([server], stop), daemon=True)
    thread.start()
    rendered = svc.node_dir(NODE) / "root" / "sys"
    mount = LiveMount(rendered, base / "live-sys", base / "agent.sock", NODE)
    try:
        mount.start()
        live = base / "live-sys"
        print(f"one {NODE} tree, {args.reads} attribute reads each (median / p99 per read)")
        plain = attr_reads(rendered, args.reads)
        fuse = attr_reads(live, args.reads)
        for name, values in (("rendered tree", plain), ("live /sys (FUSE)", fuse)):
            row(name, f"{statistics.median(values) * 1e6:8.1f} us", f"p99 {percentile(values, 99) * 1e6:8.1f} us")
        row("ratio live/rendered (median)", f"{statistics.median(fuse) / statistics.median(plain):8.1f} x")
        for name, d in (("walk of bus/cxl/devices, rendered", rendered), ("walk of bus/cxl/devices, live", live)):
            t = time.perf_counter()
            n = walk(d)
            row(name, f"{(time.perf_counter() - t) * 1e3:8.1f} ms", f"{n} attributes")
        t = time.perf_counter()
        for op in ("unbind", "bind"):
            fd = os.open(live / f"bus/cxl/drivers/cxl_mem/{op}", os.O_WRONLY)
            os.write(fd, b"mem3\n")
            os.close(fd)
        row("cxl_mem unbind + bind through the agent", f"{(time.perf_counter() - t) * 1e3:8.1f} ms")
        per_exec(base, rendered, svc.node_dir(NODE) / "root")
    finally:
        mount.stop()
        stop.set()
        thread.join(timeout=10)
        svc.close()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
