"""Fault propagation: time from ``inject`` returning to a waiting nvmlEventSetWait_v2 returning (p50, p99).

Stands up dgx-h100 on the local backend, starts a process blocked in nvmlEventSetWait_v2 (registered for Xid on
every GPU), injects Xid faults one at a time through the agent's control API and times when the waiter wakes.
CLOCK_MONOTONIC is shared by both processes on Linux. A negative time means the waiter returned before the
agent's reply reached the injector (the snapshot is renamed into place before the reply is sent). Prints
figures; asserts nothing.
"""

from __future__ import annotations

import json
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.api import Testbed
from testbed.environment import merged_environment

WAITER = r"""
import json, sys, time, pynvml
pynvml.nvmlInit()
s = pynvml.nvmlEventSetCreate()
for i in range(pynvml.nvmlDeviceGetCount()):
    pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(i), pynvml.nvmlEventTypeXidCriticalError, s)
print(json.dumps({"ready": True}), flush=True)
while True:
    try:
        e = pynvml.nvmlEventSetWait(s, 10000)
    except pynvml.NVMLError_Timeout:
        continue
    print(json.dumps({"t": time.monotonic(), "xid": e.eventData}), flush=True)
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> int:
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory(prefix="fhw-", dir="/tmp") as tmp:
        tb = Testbed.up("dgx-h100", name="bench-faults", state_dir=Path(tmp))
        try:
            node = tb.nodes()[0]
            waiter = subprocess.Popen([sys.executable, "-c", WAITER], stdout=subprocess.PIPE, text=True,
                                      env=merged_environment(node.env))
            assert waiter.stdout is not None
            json.loads(waiter.stdout.readline())
            after_return: list[float] = []
            after_start: list[float] = []
            for i in range(samples):
                code = 13 + i % 50
                if code == 79:
                    code = 80
                start = time.monotonic()
                tb.inject(node.name, "xid", f"gpu{i % 8}", code=code)
                returned = time.monotonic()
                ready, _, _ = select.select([waiter.stdout], [], [], 10)
                if not ready:
                    print(f"event {i} never arrived")
                    return 1
                event = json.loads(waiter.stdout.readline())
                assert event["xid"] == code
                after_return.append((event["t"] - returned) * 1000)
                after_start.append((event["t"] - start) * 1000)
                if i % 25 == 24:
                    tb.heal(node=node.name)
            waiter.kill()
            waiter.wait()
        finally:
            tb.down()
    print(f"fault propagation, {samples} Xid injections through the agent (dgx-h100, local backend):")
    for label, values in (("inject returned -> wait returned", after_return),
                          ("inject called   -> wait returned", after_start)):
        print(f"  {label}: p50 {statistics.median(values):6.2f} ms   p99 {percentile(values, 99):6.2f} ms   "
              f"max {max(values):6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
