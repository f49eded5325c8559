"""Finding 3: on a full disk the agent's answers tell the truth, its files never lag its API, nothing is left over.

Before: with the disk full, 543 of 800 injects answered 500 but 197 of those were applied (12 only after a
restart); ``state.json`` stayed at an old generation while the API reported a newer one; on a 2 MiB tmpfs the
agent died with a traceback and left temporary files. The state directory here is a small tmpfs in a private
mount namespace (root only), filled to the brim while injects keep coming.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from fakehw.agent.client import AgentRequestError
from tests.hostile.conftest import AgentProcess, SmallDisk, start_agent

PROFILE = "gh200"
NODE = "gh200-0"
INJECTS = 150
TEMP_NAME = re.compile(r"^\..+\.(fakehw-\d+-\d+|tmp-\d+|[a-z0-9_]{8})$")
"""Temporary names of atomic_write (.NAME.fakehw-PID-N), of the tree writer (.NAME.fakehw-PID-TID, .root.tmp-PID) and
of mkstemp (.NAME.XXXXXXXX)."""


def leftovers(root: Path) -> list[str]:
    return [str(p) for p in root.rglob(".*") if TEMP_NAME.match(p.name)]


def agent_on(disk: SmallDisk, tmp_path: Path, *extra: str, wait: bool = True) -> AgentProcess:
    return start_agent(PROFILE, disk.mountpoint / "state", tmp_path / "agent.sock", *extra,
                       wrap=disk.run_inside(), wait=wait)


def test_answers_on_a_full_disk_tell_the_truth(small_disk: Callable[[str], SmallDisk], tmp_path: Path) -> None:
    disk = small_disk("96m")  # a gh200 node tree is ~48 MB in 4 KiB pages
    agent = agent_on(disk, tmp_path)
    try:
        client = agent.client(retries=0)
        filler = disk.fill(leave=48 * 1024)
        acknowledged: list[str] = []
        refused = 0
        for i in range(INJECTS):
            try:
                acknowledged.append(client.inject(NODE, "xid", "gpu0", code=13 + i % 7)["id"])
            except AgentRequestError as exc:
                assert exc.status == 507 and exc.message.startswith("not applied"), (exc.status, exc.message)
                refused += 1
        assert refused > 0, "the disk never filled up: the test proves nothing"
        assert {f["id"] for f in client.faults()} == set(acknowledged), "a 507 was applied, or a 201 was not"
        state_file = disk.view / "state" / "nodes" / NODE / "state.json"
        assert client.state(NODE)["generation"] == json.loads(state_file.read_text())["generation"]
        health = client.health()
        assert health["status"] == "degraded" and "No space left on device" in health["disk_full"], health
        assert leftovers(disk.view) == []

        filler.unlink()  # room again: changes are accepted again
        acknowledged.append(client.inject(NODE, "xid", "gpu0", code=31)["id"])
        assert client.health()["status"] == "ok"
    finally:
        agent.stop()
    again = agent_on(disk, tmp_path)
    try:
        assert {f["id"] for f in again.client().faults()} == set(acknowledged), "after a restart too"
    finally:
        again.stop()


def test_an_agent_on_a_disk_too_small_exits_with_a_clear_error(small_disk: Callable[[str], SmallDisk],
                                                              tmp_path: Path) -> None:
    disk = small_disk("2m")
    agent = agent_on(disk, tmp_path, wait=False)
    try:
        code = agent.proc.wait(300)
    finally:
        agent.stop()
    out = agent.output()
    assert code == 2 and "Traceback" not in out, out[-2000:]
    assert f"cannot start the agent in {disk.mountpoint / 'state'}: No space left on device" in out
    assert leftovers(disk.view) == []


def test_a_restart_after_the_disk_filled_replays_exactly_what_was_acknowledged(
        small_disk: Callable[[str], SmallDisk], tmp_path: Path) -> None:
    """The agent is killed (no clean stop) while the disk is full; the restart finds only acknowledged faults."""
    disk = small_disk("96m")  # a gh200 node tree is ~48 MB in 4 KiB pages
    agent = agent_on(disk, tmp_path)
    acknowledged: list[str] = []
    refused = 0
    try:
        client = agent.client(retries=0)
        filler = disk.fill(leave=32 * 1024)
        # Until a few are refused: a change needs only its journal record and state.json's new copy (the NVML
        # snapshot is updated in place), so how many fit in the 32 KiB left depends on the records' sizes.
        for i in range(2000):
            try:
                acknowledged.append(client.inject(NODE, "thermal", "gpu0", temperature_c=80 + i % 9)["id"])
            except AgentRequestError as exc:
                assert exc.status == 507, exc.message
                refused += 1
                if refused == 5:
                    break
        assert refused > 0, "the disk never filled up: the test proves nothing"
    finally:
        agent.proc.kill()
        agent.proc.wait(30)
    filler.unlink()
    again = agent_on(disk, tmp_path)
    try:
        assert {f["id"] for f in again.client().faults()} == set(acknowledged)
    finally:
        again.stop()
