"""What the docker tests run inside node containers, and the answers the model says they must give.

The probes are Python source run with the node image's own interpreter (``python -c``), so what they report is
what pynvml, the kernel (``uname``) and ``/dev`` show a process in that container. The expected side is computed
from the model (:mod:`fakehw.model`), never written into a test.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fakehw.model.system import Node

NVML_PROBE = r"""
import json, os, pynvml

def text(value):
    return value.decode() if isinstance(value, bytes) else value

pynvml.nvmlInit()
out = {"machine": os.uname().machine, "driver": text(pynvml.nvmlSystemGetDriverVersion()),
       "count": pynvml.nvmlDeviceGetCount(), "gpus": [],
       # The GPU device nodes (the node's other nvidia-uvm, nvidia-modeset, nvidia-caps are there too, as the NVIDIA
       # container runtime gives them to every GPU container).
       "dev": sorted(name for name in os.listdir("/dev") if name == "nvidiactl" or name[6:].isdigit())}
for i in range(out["count"]):
    gpu = {"index": i}
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        gpu["uuid"] = text(pynvml.nvmlDeviceGetUUID(h))
        gpu["name"] = text(pynvml.nvmlDeviceGetName(h))
        gpu["minor"] = pynvml.nvmlDeviceGetMinorNumber(h)
        gpu["bus"] = text(pynvml.nvmlDeviceGetPciInfo(h).busId)
        links = {}
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                links[link] = pynvml.nvmlDeviceGetNvLinkState(h, link)
            except pynvml.NVMLError as exc:
                links[link] = -exc.value
        gpu["links"] = links
    except pynvml.NVMLError as exc:
        gpu["error"] = exc.value
    out["gpus"].append(gpu)
pynvml.nvmlShutdown()
print(json.dumps(out))
"""

XID_PROBE = r"""
import ctypes, json, pathlib, sys, pynvml

def address(handle):
    return ctypes.cast(handle, ctypes.c_void_p).value

ready, seconds = sys.argv[1], float(sys.argv[2])
pynvml.nvmlInit()
events = pynvml.nvmlEventSetCreate()
devices = {}
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    devices[address(h)] = uuid.decode() if isinstance(uuid, bytes) else uuid
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, events)
pathlib.Path(ready).touch()
try:
    data = pynvml.nvmlEventSetWait(events, int(seconds * 1000))
    # The device is lost after an Xid 79, so it is named by its handle, not asked for its UUID.
    out = {"event": {"type": data.eventType, "xid": data.eventData, "uuid": devices.get(address(data.device))}}
except pynvml.NVMLError as exc:
    out = {"error": exc.value}
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Expected:
    """What NVML in a container holding ``gpus`` of ``node`` must report, from the model."""

    machine: str
    count: int
    uuids: list[str]
    names: list[str]
    minors: list[int]
    buses: list[str]
    links: list[dict[int, int]]
    dev: list[str]


UNAME = {"amd64": "x86_64", "arm64": "aarch64", "riscv64": "riscv64"}
NVML_FEATURE_ENABLED = 1
NVML_FEATURE_DISABLED = 0
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_TIMEOUT = 10
EVENT_XID = 8  # nvmlEventTypeXidCriticalError


def expected_for(node: Node, gpu_names: Sequence[str] | None = None) -> Expected:
    gpus = [g for g in node.gpus if gpu_names is None or g.name in gpu_names]
    links = []
    for gpu in gpus:
        per_port = {p.port: NVML_FEATURE_ENABLED if p.up else NVML_FEATURE_DISABLED for p in gpu.ports}
        links.append(per_port)
    return Expected(
        machine=UNAME[node.cpu.arch], count=len(gpus), uuids=[g.uuid for g in gpus],
        names=[g.sku.name for g in gpus], minors=[g.minor for g in gpus],
        buses=[g.address.nvml_bus_id for g in gpus], links=links,
        dev=sorted(["nvidiactl", *(f"nvidia{g.minor}" for g in gpus)]))


def parse(result: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert result.returncode == 0, f"probe failed ({result.returncode}): {result.stderr.decode(errors='replace')}"
    lines = result.stdout.decode().strip().splitlines()
    assert lines, f"probe printed nothing; stderr: {result.stderr.decode(errors='replace')}"
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def check_nvml(answer: dict[str, Any], want: Expected) -> None:
    """Every field pynvml reported against the model, with the first difference in the message."""
    assert answer["machine"] == want.machine
    assert answer["count"] == want.count
    gpus = answer["gpus"]
    assert [g.get("error") for g in gpus] == [None] * want.count, gpus
    assert [g["uuid"] for g in gpus] == want.uuids
    assert [g["name"] for g in gpus] == want.names
    assert [g["minor"] for g in gpus] == want.minors
    assert [g["bus"] for g in gpus] == want.buses
    for gpu, links in zip(gpus, want.links, strict=True):
        seen = {int(k): v for k, v in gpu["links"].items()}
        assert {k: seen[k] for k in links} == links, gpu["uuid"]
        assert all(v != NVML_FEATURE_ENABLED for k, v in seen.items() if k not in links), gpu["uuid"]
    assert answer["dev"] == want.dev
