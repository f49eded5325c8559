"""Helpers for the fake-NVML tests: snapshots of a node in a given fault state, the library, pynvml in-process.

Where expected values come from (the rule of these tests): from outside the code under test. That is

- a real board's reading: the captures in ``../shared/reference/captures`` (:mod:`tests.nvml.captures`);
- a public specification: NVIDIA's documented topology and P2P rules, the public ``nvml.h`` of a branch, the
  real libraries' exported symbols (:mod:`tests.nvml.references`);
- what a real consumer prints: nvidia-smi 535/550/555, nvidia-ml-py 12.x/13.x, gpustat, nvitop;
- the test's own input: what a profile or a fault request says (a bus address written in the YAML, the
  temperature a fault sets), stated in the test, not recomputed by the snapshot or topology code.

Recomputing an answer with the model code that produced it (``fakehw.model.topology``, ``fakehw.nvml.snapshot``)
is not a test of it and is not used as an oracle.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakehw.agent.faults import FAULT_ADAPTER, check_target
from fakehw.agent.state import ActiveFault, Event, NodeState, derive_state, events_for
from fakehw.model import load_profile
from fakehw.model.system import Node, System
from fakehw.nvml import library_dir
from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import FakeProcess, Snapshot, build_snapshot

LIB_NAME = "libnvidia-ml.so.1"


@dataclass
class NodeSnap:
    """A node, its runtime state and the snapshot written for it."""

    system: System
    node: Node
    state: NodeState
    events: tuple[Event, ...]
    snapshot: Snapshot
    path: Path


def give_first_gpu_two_fans(snap: NodeSnap, speed: int = 41) -> None:
    """Rewrite ``snap``'s file with its first GPU as a workstation card's record: two fans at ``speed`` %. None of
    the captured boards has a fan (every capture prints fan_speed N/A), so fan getters need a record made here."""
    gpus = (dataclasses.replace(snap.snapshot.gpus[0], fan_count=2, fan_speed=speed), *snap.snapshot.gpus[1:])
    write_snapshot(snap.path, dataclasses.replace(snap.snapshot, gpus=gpus).to_bytes())


def enable_accounting_on_first_gpu(snap: NodeSnap) -> None:
    """Rewrite ``snap``'s file with accounting mode enabled on its first GPU (and no process accounted since). Every
    capture prints accounting_mode Disabled, so the enabled state's answers need a record made here."""
    gpus = (dataclasses.replace(snap.snapshot.gpus[0], accounting_mode=1), *snap.snapshot.gpus[1:])
    write_snapshot(snap.path, dataclasses.replace(snap.snapshot, gpus=gpus).to_bytes())


def pcie_rate_metrics(n: Any, first: Any, second: Any) -> Any:
    """nvmlGpmMetricsGet of the PCIe TX and RX rates (metrics[0], metrics[1]) between two GPM samples, through
    pynvml module ``n``: the request, answered."""
    request = n.c_nvmlGpmMetricsGet_t()
    request.version = n.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = 2
    request.sample1, request.sample2 = first, second
    request.metrics[0].metricId = n.NVML_GPM_METRIC_PCIE_TX_PER_SEC
    request.metrics[1].metricId = n.NVML_GPM_METRIC_PCIE_RX_PER_SEC
    n.nvmlGpmMetricsGet(request)
    return request


def faults_state(node: Node, faults: Sequence[dict[str, Any]], seed: int, generation: int = 1,
                 first_seq: int = 0) -> tuple[NodeState, tuple[Event, ...]]:
    """The state and events the agent derives for ``faults`` (dicts like the control API takes)."""
    active = []
    events = []
    seq = first_seq
    for i, body in enumerate(faults):
        request = FAULT_ADAPTER.validate_python(body)
        check_target(request, node)
        fault = ActiveFault(f"f-{i + 1:06d}", node.name, request, 1000.0 + i)
        active.append(fault)
        for kind, data, nvml_type in events_for(fault):
            seq += 1
            events.append(Event(seq, fault.created, node.name, request.device, kind, data, nvml_type, fault.id))
    return derive_state(node, active, generation, seed), tuple(events)


def write_node(path: Path, profile: str | Path | System, node_index: int = 0, faults: Sequence[dict[str, Any]] = (),
               processes: Sequence[FakeProcess] = (), generation: int = 1, first_seq: int = 0) -> NodeSnap:
    system = profile if isinstance(profile, System) else load_profile(str(profile))
    node = system.nodes[node_index]
    state, events = faults_state(node, faults, system.seed, generation, first_seq)
    snap = build_snapshot(system, node, state, events, processes)
    write_snapshot(path, snap.to_bytes())
    return NodeSnap(system, node, state, events, snap, path)


def with_driver(tmp: Path, profile: str, version: str) -> Path:
    """A profile file that is the built-in ``profile`` with its driver set to ``version`` (what a user writes to
    pin a driver: ``extends`` plus a ``driver`` section)."""
    path = tmp / f"{profile}-{version}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"extends: {profile}\ndriver: {{version: {version}}}\n")
    return path


def dgx_h100_with_mig_gpu7(tmp: Path) -> Path:
    """dgx-h100's profile with its gpu7 (module 2) running two 3g.40gb GPU instances: a Hopper MIG GPU beside seven
    GPUs with MIG off (dgx-a100's gpu7 is the Ampere one)."""
    return dgx_h100_with_mig(tmp, {"2": "[3g.40gb, 3g.40gb]"})

def dgx_h100_with_mig(tmp: Path, instances_by_module: dict[str, str]) -> Path:
    """dgx-h100's profile with MIG on in the GPUs of the given module ids (gpu6 is module 4, gpu7 module 2), each
    running the GPU instances given in the profile's list syntax."""
    text = (Path(__file__).parents[2] / "fakehw" / "profiles" / "dgx-h100.yaml").read_text()
    for module, instances in instances_by_module.items():
        assert text.count(f"moduleId: {module}}}") == 1
        mig = f"mig: {{enabled: true, instances: {instances}}}"
        text = text.replace(f"moduleId: {module}}}", f"moduleId: {module}, {mig}}}")
    profile = tmp / "dgx-h100-mig.yaml"
    profile.write_text(text)
    return profile


def lib_path() -> Path:
    return library_dir() / LIB_NAME


def preload_library() -> ctypes.CDLL:
    """Load the fake library in this process so pynvml's dlopen("libnvidia-ml.so.1") finds it by SONAME."""
    return ctypes.CDLL(str(lib_path()), mode=ctypes.RTLD_GLOBAL)


@contextmanager
def snapshot_env(path: Path, **extra: str | None) -> Iterator[None]:
    """Point this process's next nvmlInit at ``path`` (and set/clear other FAKEHW_ variables)."""
    saved = {k: os.environ.get(k) for k in ("FAKEHW_NVML_SNAPSHOT", *extra)}
    os.environ["FAKEHW_NVML_SNAPSHOT"] = str(path)
    for k, v in extra.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def subprocess_env(snapshot: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["FAKEHW_NVML_SNAPSHOT"] = str(snapshot)
    env["LD_LIBRARY_PATH"] = str(library_dir())
    env.pop("FAKEHW_VISIBLE_DEVICES", None)
    env.update(extra)
    return env


def run_python(code: str, snapshot: Path, *, timeout: float = 60, **extra: str) -> Any:
    """Run ``code`` in a fresh interpreter against ``snapshot``; it prints one JSON document, returned here."""
    proc = subprocess.run([sys.executable, "-c", code], env=subprocess_env(snapshot, **extra), capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return json.loads(proc.stdout)


CONSUMER = Path(__file__).with_name("consumer.py")


class Consumer:
    """A running NVML consumer process (tests/nvml/consumer.py) steered one JSON line at a time."""

    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, str(CONSUMER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.count = int(self._read(30)["ready"])

    def _read(self, timeout: float) -> dict[str, Any]:
        import select

        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"consumer gave no answer within {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"consumer exited ({self.proc.poll()}): {err}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def send(self, request: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def ask(self, request: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        self.send(request)
        return self._read(timeout)

    def call(self, fn: str, *args: Any) -> Any:
        """The value, or the NVML error code as ``("err", code)``."""
        answer = self.ask({"call": fn, "args": list(args)})
        return answer["ok"] if "ok" in answer else ("err", answer["err"])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"quit": True})
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def build_preload(directory: Path, name: str, source: str) -> Path:
    """``source`` (C) built as ``directory/name.so``, a library for ``LD_PRELOAD`` that interposes system calls the
    shim makes (short or interrupted reads, writes, polls); the test is skipped where no C compiler exists."""
    import pytest  # only the tests that interpose need it

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    src = directory / f"{name}.c"
    src.write_text(source)
    lib = src.with_suffix(".so")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", str(src), "-o", str(lib), "-ldl"], check=True)
    return lib
