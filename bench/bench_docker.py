"""Docker backend: node image build time (cold and warm, per platform), ``up`` to all agents ready for 4 and 16
nodes on amd64 vs riscv64 (the ratio is the price of QEMU user-mode emulation), and ``down``.

Cold means no BuildKit cache and no node image (the debootstrap base images are kept: they are made once per
machine; ``--cold-base`` makes them again too, which takes minutes). Warm means the same build again with the
cache (``--rebuild``), and "found" the content-addressed lookup every later call does. Needs a Docker engine
(``testbed host setup``); prints a line and exits 0 without one.

    .venv/bin/python bench/bench_docker.py [--cold-base] [--skip-build] [--nodes 4,16]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import row

from testbed.api import Testbed
from testbed.host import engine_problem
from testbed.images import ImageBuilder

PROFILE = {"amd64": "dgx-h100",
           "riscv64": str(Path(__file__).resolve().parent.parent / "tests" / "docker" / "profiles" / "riscv-hgx.yaml")}
"""The same DGX H100 board behind each CPU architecture, so the ratio is the price of emulation alone."""


def quiet(_message: str) -> None:
    return None


def build_times(cold_base: bool) -> dict[str, str]:
    """Cold and warm build per platform; returns the image of each platform for the ``up`` runs."""
    print("node image build (buildx, offline bases)")
    builder = ImageBuilder(progress="quiet", log=quiet)
    for arch in ("amd64", "riscv64"):
        if cold_base:
            start = time.perf_counter()
            builder.base_image(arch, rebuild=True)
            row(f"base image {arch} (debootstrap + import)", f"{time.perf_counter() - start:8.1f} s")
        else:
            builder.base_image(arch)
    for arch in ("amd64", "riscv64"):
        subprocess.run(["docker", "builder", "prune", "-af"], capture_output=True, check=True)
        start = time.perf_counter()
        builder.node_image(arch, rebuild=True)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        builder.node_image(arch, rebuild=True)
        warm = time.perf_counter() - start
        row(f"node image linux/{arch}", f"cold {cold:7.1f} s", f"warm {warm:6.1f} s")
    start = time.perf_counter()
    refs = builder.node_images(("amd64", "riscv64"))
    row("node images of both platforms found by content", f"{time.perf_counter() - start:5.2f} s")
    return {arch: ref.tag for arch, ref in refs.items()}


def up_down(tag: dict[str, str], counts: list[int]) -> None:
    print("up (to every agent answering) and down")
    with tempfile.TemporaryDirectory(prefix="fhw-bench-", dir="/tmp") as state:
        results: dict[tuple[str, int], float] = {}
        for count in counts:
            for arch in ("amd64", "riscv64"):
                start = time.perf_counter()
                tb = Testbed.up(PROFILE[arch], nodes=count, backend="docker", name=f"b{arch[:2]}{count}",
                                state_dir=Path(state), image=tag, timeout=600)
                up = time.perf_counter() - start
                start = time.perf_counter()
                tb.down()
                down = time.perf_counter() - start
                results[(arch, count)] = up
                row(f"{count:2d} nodes {arch:8} ({Path(PROFILE[arch]).stem})", f"up {up:7.1f} s",
                    f"down {down:5.1f} s")
            ratio = results[("riscv64", count)] / results[("amd64", count)]
            row(f"{count:2d} nodes riscv64 / amd64 (price of emulation)", f"{ratio:7.1f} x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold-base", action="store_true", help="also remake the debootstrap base images")
    parser.add_argument("--skip-build", action="store_true", help="only up/down, with the current node image")
    parser.add_argument("--nodes", default="4,16", help="node counts for up/down (default: 4,16)")
    args = parser.parse_args()
    problem = engine_problem()
    if problem is not None:
        print(f"docker benchmarks skipped: {problem}")
        return
    if args.skip_build:
        tag = {a: r.tag for a, r in ImageBuilder(progress="quiet", log=quiet).node_images(("amd64", "riscv64")).items()}
    else:
        tag = build_times(args.cold_base)
    up_down(tag, [int(n) for n in args.nodes.split(",")])


if __name__ == "__main__":
    main()
