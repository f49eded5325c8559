"""Small helpers shared by the benchmarks: repeated timing, medians and percentiles, child-process RSS."""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], repeat: int = 5) -> tuple[float, Any]:
    """Median wall seconds of ``fn`` over ``repeat`` runs, and its last result."""
    times = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def in_child(code: str) -> tuple[dict[str, Any], float]:
    """Run ``code`` (which prints one JSON object) in a fresh interpreter; return it and the child's peak RSS MiB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return json.loads(out.stdout.strip().splitlines()[-1]), max(after, before) / 1024


def row(label: str, *cells: str) -> None:
    print(f"  {label:<46}" + "  ".join(cells), flush=True)
