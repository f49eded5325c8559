"""A full certification run and what the report machinery costs.

1. ``conformance run`` of the reference device plugin on dgx-h100 (local backend, every category, the suite's
   default isolation-fuzz budget: 6 runs x 12 steps per isolation requirement), wall time.
2. The same suite under plain pytest (the plugin's fixtures, no results file, no report) against pytest with the
   results file written after every test plus the report built and rendered in all four formats, in the same
   session: the difference is the report machinery's overhead.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import row

BIN = Path(sys.executable).parent
SUITE = Path(__file__).parents[1] / "conformance" / "suites" / "device_plugin"
PROFILE = "dgx-h100"
ROUNDS = 2


def _pytest(results: Path | None, cwd: Path) -> float:
    argv = [sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider", "--import-mode=importlib",
            "--profile", PROFILE, "--target", "device-plugin=reference"]
    if results is not None:
        argv += ["--conformance-results", str(results)]
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, capture_output=True, check=False)
    return time.perf_counter() - start


def _write_cost(results: Path) -> tuple[int, float]:
    """How many tests the results file holds and what one incremental write of it costs (serialise + atomic
    replace), measured directly: the whole-run difference below is within run-to-run noise."""
    from fakehw.render.atomic import atomic_write

    doc = json.loads(results.read_text())
    target = results.with_name("rewrite.json")
    rounds = 50
    start = time.perf_counter()
    for i in range(rounds):
        doc["updated"] = i
        atomic_write(target, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    return len(doc["tests"]), (time.perf_counter() - start) / rounds


def main() -> None:
    from conformance.report import report_from_results, write_reports

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        proc = subprocess.run([str(BIN / "conformance"), "run", "--target", "device-plugin=reference", "--profile",
                               PROFILE, "--out", str(work / "cert")], cwd=work, capture_output=True, text=True)
        full = time.perf_counter() - start
        verdict = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "?"
        bare, with_results = [], []
        for _ in range(ROUNDS):  # interleaved, so drift in machine load hits both alike; the best of each
            bare.append(_pytest(None, work))
            with_results.append(_pytest(work / "results.json", work))
        tests, write = _write_cost(work / "results.json")
        start = time.perf_counter()
        report = report_from_results(work / "results.json")
        write_reports(report, work / "report")
        render = time.perf_counter() - start
    b, w = min(bare), min(with_results)
    print(f"certification: device-plugin (reference) on {PROFILE}, local backend, default fuzz budget")
    row("conformance run (all categories)", f"{full:7.1f} s", verdict)
    row(f"bare pytest of the suite (best of {ROUNDS})", f"{b:7.1f} s", "baseline")
    row(f"pytest + results file (best of {ROUNDS})", f"{w:7.1f} s", f"{(w - b) / b * 100:+5.1f}% vs bare")
    row("one incremental results write", f"{write * 1e3:7.2f} ms",
        f"x {tests} tests = {tests * write:.2f} s = {tests * write / b * 100:.2f}% of the bare run")
    row("build + seal + render json/junit/md/html", f"{render * 1e3:7.1f} ms",
        f"{len(report.results)} requirements = {render / b * 100:.2f}% of the bare run")


if __name__ == "__main__":
    main()
