"""Control API: fault injections per second, and latency from an injection to the node's rendered state changing.

The baseline is a ``GET /v1/health`` round trip over the same unix socket in the same run (the HTTP floor).
The agent runs as its own process, as in the local backend. The latency is measured by a thread that watches
``state.json`` for the new generation, so it includes the journal write and the render, as a consumer sees it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import percentile, row

from fakehw.agent.client import AgentClient, AgentRequestError

N = 400
NODE = "dgx-h100-0"


def main() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        agent = subprocess.Popen([sys.executable, "-m", "fakehw.cli", "agent", "--profile", "dgx-h100",
                                  "--state-dir", tmp])
        client = AgentClient(Path(tmp) / "agent.sock")
        for _ in range(600):
            try:
                client.health()
                break
            except AgentRequestError:
                time.sleep(0.05)
        state_file = Path(tmp) / "nodes" / NODE / "state.json"

        start = time.perf_counter()
        for _ in range(N):
            client.health()
        health = (time.perf_counter() - start) / N

        start = time.perf_counter()
        ids = [client.inject(NODE, "thermal", f"gpu{i % 8}", temperature_c=80 + i % 10)["id"] for i in range(N)]
        inject = (time.perf_counter() - start) / N
        start = time.perf_counter()
        for fid in ids:
            client.heal(fid)
        heal = (time.perf_counter() - start) / N

        latencies = []
        for i in range(100):
            generation = json.loads(state_file.read_text())["generation"]
            seen = threading.Event()

            def watch(target: int = generation + 1, done: threading.Event = seen) -> None:
                while json.loads(state_file.read_text() or "{}").get("generation", 0) < target:
                    time.sleep(0.0002)
                done.set()

            watcher = threading.Thread(target=watch)
            watcher.start()
            sent = time.perf_counter()
            fid = client.inject(NODE, "xid", f"gpu{i % 8}", code=13)["id"]
            seen.wait(10)
            latencies.append(time.perf_counter() - sent)
            watcher.join()
            client.heal(fid)
        agent.terminate()
        agent.wait(10)

    print("agent control API over its unix socket (dgx-h100, 8 GPUs)")
    row("GET /v1/health round trip (baseline)", f"{health * 1e3:6.2f} ms", f"{1 / health:7.0f} req/s")
    row("inject (POST /v1/faults, journaled + rendered)", f"{inject * 1e3:6.2f} ms",
        f"{1 / inject:7.0f} injections/s", f"{inject / health:4.1f}x baseline")
    row("heal (DELETE /v1/faults/{id})", f"{heal * 1e3:6.2f} ms", f"{1 / heal:7.0f} heals/s")
    row("inject -> state.json shows it", f"p50 {percentile(latencies, 50) * 1e3:5.2f} ms",
        f"p99 {percentile(latencies, 99) * 1e3:5.2f} ms")


if __name__ == "__main__":
    main()
