"""KWOK registration at fleet scale: ``testbed up --backend kubeconfig --kwok`` of 1,000 and 10,000 dgx-h100 nodes.

The API server is the fake of tests/kubernetes (same HTTP, same validation of every object, in its own process
so client and server do not share an interpreter). Per size it prints:

- the model build (``load_profile``) apart from registration, since a user pays it once per profile and size;
- rendering alone (every Node, NodeResourceTopology and ResourceSlice built, nothing sent): objects/s;
- registration end to end (preflight, then every object applied, Node status through its subresource): seconds,
  objects/s and requests/s, and the growth of this process's peak RSS over the model's (objects are rendered as
  they are sent, so it should not grow with the fleet);
- the floor: the same number of requests as trivial GETs through the same client and workers, and the ratio
  of registration to it (what the rendering and validation cost over bare HTTP on this machine).

Nothing is asserted. A real API server is slower per write than this fake (etcd); the CI kwok job prints what
1,000 nodes take on a kind cluster.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from _util import row  # noqa: E402

from fakehw.model import load_profile  # noqa: E402
from testbed.kubernetes import kwok  # noqa: E402
from testbed.kubernetes.kubeapi import Credentials, KubeApi  # noqa: E402


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _floor(api: KubeApi, requests: int, workers: int) -> float:
    def one(_: int) -> int:
        return api.request("GET", "/api/v1").status

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, range(requests)))
    return time.perf_counter() - start


def run(size: int, url: str, workers: int) -> None:
    start = time.perf_counter()
    system = load_profile("dgx-h100", nodes=size)
    built = time.perf_counter() - start
    rss_model = _rss_mib()
    plan = kwok.Plan(f"bench-{size}", topology=True, slices=True)
    start = time.perf_counter()
    rendered = sum(1 for n in system.nodes for _ in plan.objects(system, n))
    render_s = time.perf_counter() - start
    api = KubeApi(Credentials(server=url))
    start = time.perf_counter()
    plan = kwok.preflight(api, f"bench-{size}")
    report = kwok.register(api, plan, system, workers=workers)
    total = time.perf_counter() - start
    floor = _floor(api, report.requests, workers)
    print(f"\n{size} dgx-h100 nodes ({workers} workers):")
    row("model build (load_profile)", f"{built:8.2f} s")
    row("render only", f"{render_s:8.2f} s", f"{rendered / render_s:10.0f} objects/s")
    row("register end to end", f"{total:8.2f} s", f"{report.objects / total:10.0f} objects/s",
        f"{report.requests / total:8.0f} requests/s")
    row("floor: as many trivial GETs", f"{floor:8.2f} s", f"{report.requests / floor:10.0f} requests/s",
        f"ratio {total / floor:5.2f}x")
    row("peak RSS: after model / after registration", f"{rss_model:8.0f} MiB", f"{_rss_mib():8.0f} MiB")
    kwok.unregister(api, f"bench-{size}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000", help="node counts (default 1000,10000)")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-m", "tests.kubernetes.fake_apiserver"], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        print("KWOK registration against the fake API server (tests/kubernetes/fake_apiserver.py)")
        for size in (int(s) for s in args.sizes.split(",")):
            run(size, url, args.workers)
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
