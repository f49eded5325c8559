"""A userspace forwarder that delays frames: latency and jitter without ``sch_netem``.

The chaos engine splices it into one cable at the switch: the switch port ``P`` leaves the bridge and is renamed;
a new veth pair takes its place - one end, named ``P``, in the bridge (so the VLAN rules, which match by name,
still apply), the other end (``inject``) outside it. This process reads frames arriving on the old port (from
the NIC) and sends them on ``inject`` into the bridge, and reads what the bridge sends towards the NIC on
``inject`` and sends it out of the old port - each after ``delay`` plus a random ``jitter`` (uniform in
[-jitter, +jitter], never below zero). With ``keep_order`` a frame never overtakes an earlier one of the same
direction (jitter then only stretches gaps), as on a real link; without it frames may reorder.

Run as ``python -m fakehw.fabric.forwarder CONFIG.json``; SIGTERM stops it.
"""

from __future__ import annotations

import heapq
import json
import random
import select
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fakehw.fabric.netns import Netns
from fakehw.fabric.rawio import PacketSocket

MARKER = "fakehw.fabric.forwarder"
MAX_QUEUE = 100_000


@dataclass
class Direction:
    name: str
    src: PacketSocket
    dst: PacketSocket
    last_release: float = 0.0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {MARKER} CONFIG.json", file=sys.stderr)
        return 2
    try:
        cfg = json.loads(Path(args[0]).read_text())
        ns = Netns.borrowed(cfg["ns"])
        delay, jitter = float(cfg["delay"]), float(cfg["jitter"])
        keep_order = bool(cfg.get("keep_order", True))
        rng = random.Random(int(cfg.get("seed", 0)))
        port = PacketSocket(ns, cfg["port"])
        inject = PacketSocket(ns, cfg["inject"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"forwarder: bad config {args[0]}: {exc}", file=sys.stderr)
        return 2
    to_switch = Direction("to-switch", port, inject)
    to_node = Direction("to-node", inject, port)
    by_fd = {port.fileno(): to_switch, inject.fileno(): to_node}
    queue: list[tuple[float, int, Direction, bytes]] = []
    seq = 0
    running = True

    def stop(_sig: int, _frame: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("ready", flush=True)
    while running:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, d, frame = heapq.heappop(queue)
            d.dst.send(frame)
        timeout = max(0.0, queue[0][0] - now) if queue else 0.5
        try:
            ready, _, _ = select.select(list(by_fd), [], [], min(timeout, 0.5))
        except InterruptedError:
            continue
        for fd in ready:
            d = by_fd[fd]
            while (got := d.src._read()) is not None:
                arrived = time.monotonic()
                wait = max(0.0, delay + (rng.uniform(-jitter, jitter) if jitter else 0.0))
                release = arrived + wait
                if keep_order:
                    release = max(release, d.last_release)
                d.last_release = release
                if len(queue) >= MAX_QUEUE:
                    continue
                heapq.heappush(queue, (release, seq, d, got.frame))
                seq += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
