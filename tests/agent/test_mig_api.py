"""The agent's MIG API: refusals are 4xx naming what was wrong (with NVML's code), nothing is half-applied, state
survives a restart and ids are never reused.

Expected ids and placements are what real drivers print (see tests/nvml/test_mig_smi.py); return codes are nvml.h's
for the same request (``nvmlDeviceCreateGpuInstance``: NOT_SUPPORTED when MIG is off, INSUFFICIENT_RESOURCES when it
cannot be created; ``nvmlGpuInstanceDestroy``: IN_USE while compute instances are active).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakehw.agent.client import AgentClient, AgentRequestError
from fakehw.agent.main import run_agent
from fakehw.model import load_profile

NODE = "dgx-a100-0"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Callable[[], AgentClient]]:
    """``start()`` runs an agent for dgx-a100 on ``tmp_path`` (again after ``stop``: a restart on the same state),
    making no node files (none is asked for)."""
    running: list[tuple[threading.Thread, threading.Event]] = []

    def stop() -> None:
        while running:
            thread, event = running.pop()
            event.set()
            thread.join(20)

    def start() -> AgentClient:
        stop()
        ready, event = threading.Event(), threading.Event()
        thread = threading.Thread(target=run_agent, daemon=True, kwargs={
            "system": load_profile("dgx-a100"), "state_dir": tmp_path, "ready": ready, "stop": event,
            "files": "on-demand"})  # the API is what is checked; a node's ~25,000 files were most of the time
        thread.start()
        assert ready.wait(60)
        running.append((thread, event))
        return AgentClient(tmp_path / "agent.sock")

    yield start
    stop()


def refused(client: AgentClient, status: int, nvml: str, words: str, call: Callable[[], Any]) -> None:
    before = client.mig(NODE), client.state(NODE)["generation"], client.nodes()
    with pytest.raises(AgentRequestError) as err:
        call()
    assert err.value.status == status, err.value
    assert words in err.value.message, err.value.message
    assert err.value.detail["nvml"] == f"NVML_ERROR_{nvml}"
    assert (client.mig(NODE), client.state(NODE)["generation"], client.nodes()) == before


def test_refusals(agent: Callable[[], AgentClient]) -> None:
    c = agent()
    refused(c, 409, "NOT_SUPPORTED", "MIG is disabled on gpu0", lambda: c.create_gpu_instance(NODE, "gpu0", 19))
    c.set_mig_mode(NODE, "gpu0", True)
    refused(c, 404, "INVALID_ARGUMENT", "has no GPU 'gpu9'", lambda: c.create_gpu_instance(NODE, "gpu9", 19))
    refused(c, 422, "INVALID_ARGUMENT", "has no GPU instance profile 77",
            lambda: c.create_gpu_instance(NODE, "gpu0", 77))
    refused(c, 422, "INVALID_ARGUMENT", "has no GPU instance profile '5g.50gb'",
            lambda: c.create_gpu_instance(NODE, "gpu0", "5g.50gb"))
    refused(c, 422, "INVALID_ARGUMENT", "cannot start at memory slice 2 (possible placements: 0, 4)",
            lambda: c.create_gpu_instance(NODE, "gpu0", "3g.40gb", placement=2))
    gi = c.create_gpu_instance(NODE, "gpu0", "4g.40gb")
    assert (gi["created_id"], gi["gpu_instance"]["start"]) == (2, 0)
    refused(c, 409, "INSUFFICIENT_RESOURCES", "already has the 1 4g.40gb instance(s)",
            lambda: c.create_gpu_instance(NODE, "gpu0", 5))
    refused(c, 409, "INSUFFICIENT_RESOURCES", "overlaps an existing GPU instance",
            lambda: c.create_gpu_instance(NODE, "gpu0", 14, placement=2))
    ci = c.create_compute_instance(NODE, "gpu0", 2, "2c.4g.40gb")
    assert ci["compute_instance"]["start"] == 0
    refused(c, 422, "NOT_SUPPORTED", "has no compute instance profile '3c.4g.40gb'",
            lambda: c.create_compute_instance(NODE, "gpu0", 2, "3c.4g.40gb"))
    refused(c, 409, "INSUFFICIENT_RESOURCES", "compute slices in use: [0, 1]",
            lambda: c.create_compute_instance(NODE, "gpu0", 2, None))
    refused(c, 409, "IN_USE", "still has compute instances (0)", lambda: c.destroy_gpu_instance(NODE, "gpu0", 2))
    refused(c, 409, "IN_USE", "still has GPU instances (2)", lambda: c.set_mig_mode(NODE, "gpu0", False))
    refused(c, 404, "INVALID_ARGUMENT", "has no GPU instance 5", lambda: c.destroy_gpu_instance(NODE, "gpu0", 5))
    refused(c, 404, "INVALID_ARGUMENT", "has no compute instance 3",
            lambda: c.destroy_compute_instance(NODE, "gpu0", 2, 3))
    c.inject(NODE, "fallen-off-bus", "gpu0")
    refused(c, 409, "GPU_IS_LOST", "gpu0 has fallen off the bus",
            lambda: c.destroy_compute_instance(NODE, "gpu0", 2, 0))


MALFORMED = [
    ([], 400, "expected a JSON object"),
    ({"profile": 9, "colour": "red"}, 422, "unknown field(s) colour"),
    ({}, 422, "profile must be a profile ID or name"),
    ({"profile": True}, 422, "profile must be a profile ID or name"),
    ({"profile": 9, "placement": -1}, 422, "placement is the start slice"),
    ({"profile": "x" * 100}, 422, "profile must be a profile ID or name"),
]


def test_malformed_bodies(agent: Callable[[], AgentClient]) -> None:
    c = agent()
    c.set_mig_mode(NODE, "gpu0", True)
    before = c.mig(NODE)
    for body, status, words in MALFORMED:
        with pytest.raises(AgentRequestError) as err:
            c.request("POST", f"/v1/nodes/{NODE}/gpus/gpu0/mig/gpu-instances", body)
        assert (err.value.status, words in err.value.message) == (status, True), (body, err.value)
    assert c.mig(NODE) == before


def test_mode_body_and_non_mig_gpu(agent: Callable[[], AgentClient]) -> None:
    c = agent()
    with pytest.raises(AgentRequestError) as err:
        c.request("POST", f"/v1/nodes/{NODE}/gpus/gpu0/mig/mode", {"enabled": "yes"})
    assert err.value.status == 422 and "enabled must be true or false" in err.value.message
    with pytest.raises(AgentRequestError) as err:
        c.request("POST", "/v1/nodes/nowhere/gpus/gpu0/mig/mode", {"enabled": True})
    assert err.value.status == 404


def test_restart_restores_instances_and_never_reuses_ids(agent: Callable[[], AgentClient], tmp_path: Path) -> None:
    c = agent()
    c.set_mig_mode(NODE, "gpu0", True)
    gi = c.create_gpu_instance(NODE, "gpu0", 9)["created_id"]
    first = c.create_compute_instance(NODE, "gpu0", gi)["compute_instance"]["uuid"]
    boot_gpu7 = c.mig(NODE)["gpus"]["gpu7"]
    state = c.mig(NODE)
    generation = c.state(NODE)["generation"]
    c = agent()  # restart on the same state directory
    assert c.mig(NODE)["gpus"] == state["gpus"]
    assert c.state(NODE)["generation"] > generation  # never backwards: consumers wait for generations
    c.destroy_compute_instance(NODE, "gpu0", gi, 0)
    c = agent()
    again = c.create_compute_instance(NODE, "gpu0", gi)["compute_instance"]
    assert again["id"] == 0 and again["uuid"] != first  # the id comes back, the MIG device is a new one
    assert c.mig(NODE)["gpus"]["gpu7"] == boot_gpu7  # the profile's boot instances are untouched
    # A torn last line (the agent died mid-write) is skipped; everything before it stands.
    with (tmp_path / "mig.jsonl").open("a") as fh:
        fh.write('{"op": "facts", "node": "dgx-a100-0", "facts": [{"fact": "gi", "gp')
    state = c.mig(NODE)
    c = agent()
    assert c.mig(NODE)["gpus"] == state["gpus"]
