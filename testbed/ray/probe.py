"""Start a Ray head node in this process and report what Ray made of the GPUs, as one JSON line.

Run with a node's environment so Ray's own GPU autodetection (its vendored pynvml) loads the node's fake
``libnvidia-ml.so.1``::

    testbed exec NODE -- python -m testbed.ray.probe [--tasks N] [--temp-dir DIR]

Reports ``ray.cluster_resources()`` and, when ``--tasks`` is given, what N concurrent one-GPU tasks saw: their
``ray.get_gpu_ids()`` and ``CUDA_VISIBLE_DEVICES`` (the tasks wait for each other, so they hold their GPUs at the
same time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.ray.probe")
    parser.add_argument("--tasks", type=int, default=0, help="one-GPU tasks to run at the same time")
    parser.add_argument("--temp-dir", default=None, help="Ray's session directory (default: a new one in /tmp)")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as exc:
        print(json.dumps({"error": f"ray is not installed: {exc}"}))
        return 3
    temp = args.temp_dir or tempfile.mkdtemp(prefix="fhw-ray-", dir="/tmp")
    try:
        return _probe(ray, args, temp)
    finally:
        if args.temp_dir is None:  # made here: gone with this process (a given one is the caller's)
            shutil.rmtree(temp, ignore_errors=True)


def _probe(ray: Any, args: argparse.Namespace, temp: str) -> int:
    ray.init(num_cpus=max(2, args.tasks + 1), include_dashboard=False, log_to_driver=False, _temp_dir=temp,
             configure_logging=False)
    out: dict[str, Any] = {"version": ray.__version__, "resources": ray.cluster_resources(),
                           "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        if args.tasks:
            out["tasks"] = _tasks(ray, args.tasks)
    finally:
        ray.shutdown()
    print(json.dumps(out), flush=True)
    return 0


def _tasks(ray: Any, n: int) -> list[dict[str, Any]]:
    @ray.remote
    class Barrier:
        def __init__(self, parties: int):
            self.parties = parties
            self.arrived = 0

        def arrive(self) -> None:
            self.arrived += 1

        def count(self) -> int:
            return self.arrived

    @ray.remote(num_gpus=1, num_cpus=0)  # type: ignore[untyped-decorator]
    def task(barrier: Any) -> dict[str, Any]:
        import time

        ray.get(barrier.arrive.remote())
        deadline = time.monotonic() + 60
        while ray.get(barrier.count.remote()) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return {"gpu_ids": [str(i) for i in ray.get_gpu_ids()], "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "together": ray.get(barrier.count.remote()) >= n}

    barrier = Barrier.options(num_cpus=0).remote(n)  # type: ignore[attr-defined]
    return list(ray.get([task.remote(barrier) for _ in range(n)], timeout=120))


if __name__ == "__main__":
    sys.exit(main())
