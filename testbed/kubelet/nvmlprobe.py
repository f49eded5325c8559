"""What NVML enumerates inside a container with given device nodes: ``python -m testbed.kubelet.nvmlprobe``.

A long-lived helper that runs where the node's NVML is (with the node's environment locally, or inside the node
container). Each input line is a JSON request ``{"dev_nodes": ["nvidiactl", "nvidia3"]}``; the helper makes a
private ``/dev``-like directory holding exactly those nodes, initialises NVML with it as the device root (the fake
library enumerates a GPU only if its ``nvidia<minor>`` node exists, as inside a container), and answers one JSON
line ``{"uuids": [...], "lost": N}`` (``lost`` counts enumerated GPUs that are off the bus, whose UUID NVML cannot
tell; or ``{"error": "..."}``). Staying alive makes a check take
milliseconds instead of an interpreter start.

:class:`NvmlProbe` is the harness's end: it starts the helper with a command and asks it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.environment import merged_environment


def _serve() -> int:
    import pynvml

    base = Path(tempfile.mkdtemp(prefix="fhw-probe-"))
    try:
        for n, line in enumerate(sys.stdin):
            try:
                request = json.loads(line)
                nodes = [str(x) for x in request.get("dev_nodes", [])]
                root = base / str(n)
                root.mkdir()
                for name in nodes:
                    if "/" in name or name in ("", ".", ".."):
                        raise ValueError(f"bad device node name {name!r}")
                    (root / name).parent.mkdir(parents=True, exist_ok=True)
                    (root / name).touch()
                os.environ.pop("FAKEHW_VISIBLE_DEVICES", None)
                os.environ["FAKEHW_DEV_ROOT"] = str(root)
                pynvml.nvmlInit()
                uuids: list[str] = []
                lost = 0
                try:
                    for i in range(pynvml.nvmlDeviceGetCount()):
                        try:
                            uuids.append(str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))))
                        except pynvml.NVMLError_GpuIsLost:
                            lost += 1  # enumerated, but gone from the bus: NVML cannot name it
                finally:
                    pynvml.nvmlShutdown()
                answer: dict[str, Any] = {"uuids": uuids, "lost": lost}
            except Exception as exc:  # reported to the harness, which turns it into a failed check
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                shutil.rmtree(base / str(n), ignore_errors=True)
            print(json.dumps(answer), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


class ProbeError(RuntimeError):
    pass


class NvmlProbe:
    """The harness side: ``NvmlProbe(argv, env).view(["nvidiactl", "nvidia0"])`` -> (UUIDs, GPUs off the bus)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 30.0):
        self.argv = list(argv)
        self.env = merged_environment(dict(env or {}))
        self.timeout = timeout
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, bufsize=1)
        return self._proc

    def view(self, dev_nodes: Sequence[str]) -> tuple[list[str], int]:
        """(UUIDs NVML enumerates, number of enumerated GPUs that are off the bus)."""
        with self._lock:
            proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps({"dev_nodes": list(dev_nodes)}) + "\n")
                proc.stdin.flush()
            except OSError as exc:
                raise ProbeError(f"NVML probe died: {exc}; stderr: {self._stderr()}") from None
            answer = self._read_line(proc)
        if "error" in answer:
            raise ProbeError(f"NVML probe: {answer['error']}")
        return [str(u) for u in answer["uuids"]], int(answer.get("lost", 0))

    def _read_line(self, proc: subprocess.Popen[str]) -> dict[str, Any]:
        assert proc.stdout is not None
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(proc.stdout.readline() if proc.stdout else ""),
                                  daemon=True)
        reader.start()
        reader.join(self.timeout)
        if not result:
            proc.kill()
            raise ProbeError(f"NVML probe did not answer within {self.timeout:g} s")
        if not result[0]:
            raise ProbeError(f"NVML probe exited: {self._stderr()}")
        data: dict[str, Any] = json.loads(result[0])
        return data

    def _stderr(self) -> str:
        proc = self._proc
        if proc is None or proc.stderr is None or proc.poll() is None:
            return ""
        return proc.stderr.read()[-2000:]

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                if proc.stdin:
                    proc.stdin.close()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


if __name__ == "__main__":
    sys.exit(_serve())
