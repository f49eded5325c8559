"""Finding 4: a second agent on the same state directory is refused, naming the holder.

Before: both served (the second unlinked the first's socket), both issued fault f-000001, and an acknowledged
inject was lost at the next restart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.agent.service import AgentService
from fakehw.agent.statedir import StateDirBusy
from fakehw.model import load_profile
from tests.hostile.conftest import AgentProcess, start_agent

PROFILE = "gh200"
ON_DEMAND = ("--files", "on-demand")
"""The agents here render no node files: what is checked is the state dir's lock, the sockets, the faults the API
reports and the refused agent's output, none of a node's tree (each eager start wrote ~14,500 entries to disk)."""


def test_a_second_agent_is_refused_and_the_first_keeps_serving(agents: Callable[..., AgentProcess],
                                                                tmp_path: Path) -> None:
    first = agents(PROFILE, tmp_path, tmp_path / "first.sock", *ON_DEMAND)
    fault = first.client().inject("gh200-0", "xid", "gpu0", code=13)
    second = start_agent(PROFILE, tmp_path, tmp_path / "second.sock", *ON_DEMAND, wait=False)
    try:
        code = second.proc.wait(120)
    finally:
        second.stop()
    out = second.output()
    assert code == 2 and "Traceback" not in out, out
    assert f"state dir {tmp_path} is in use by another agent (pid {first.proc.pid}" in out
    assert not (tmp_path / "second.sock").exists(), "the refused agent opened no socket"
    assert [f["id"] for f in first.client().faults()] == [fault["id"]], "the first agent is undisturbed"
    first.stop()
    third = agents(PROFILE, tmp_path, tmp_path / "third.sock", *ON_DEMAND)  # the lock dies with its holder
    assert [f["id"] for f in third.client().faults()] == [fault["id"]]


def test_two_services_in_one_process_are_refused_too(tmp_path: Path) -> None:
    system = load_profile(PROFILE)
    first = AgentService(system, tmp_path, files="on-demand")
    try:
        with pytest.raises(StateDirBusy, match="is in use by another agent"):
            AgentService(system, tmp_path, files="on-demand")
    finally:
        first.close()
    AgentService(system, tmp_path, files="on-demand").close()
