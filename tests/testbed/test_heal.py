"""Backend.heal where every node has its own agent (Docker, kind, kubeconfig): each node's agent is asked, and a
fault id is healed on the node whose agent holds it."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from testbed.backends.base import Backend, BackendInputError
from testbed.cluster import ClusterRecord


class NodeAgent:
    """One node's agent; a new one per ``Backend.agent`` call, as the Kubernetes backends make them."""

    def __init__(self, faults: list[dict[str, Any]]):
        self._faults = faults

    def faults(self, node: str | None = None) -> list[dict[str, Any]]:
        return [f for f in self._faults if node in (None, f["node"])]

    def heal(self, fault_id: str | None = None, node: str | None = None, device: str | None = None,
             kind: str | None = None) -> list[dict[str, Any]]:
        hit = [f for f in self.faults(node) if fault_id in (None, f["id"]) and device in (None, f["device"])
               and kind in (None, f["kind"])]
        for f in hit:
            self._faults.remove(f)
        return hit


class PerNodeAgents(Backend):
    name = "per-node"

    def __init__(self, faults: dict[str, list[dict[str, Any]]]):
        self.faults = faults

    def agent(self, record: ClusterRecord, node: str) -> Any:
        return NodeAgent(self.faults[node])

    def up(self, request: Any) -> ClusterRecord:
        raise NotImplementedError

    def nodes(self, record: ClusterRecord) -> list[Any]:
        raise NotImplementedError

    def exec(self, record: ClusterRecord, node: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
             timeout: float | None = None, capture: bool = True,
             input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        raise NotImplementedError

    def alive(self, record: ClusterRecord) -> bool:
        return True

    def down(self, record: ClusterRecord) -> None:
        return None


NODES = [f"n{i}" for i in range(6)]


def cluster() -> tuple[PerNodeAgents, ClusterRecord]:
    """Every node has fault 1 (an Xid on gpu0); n4 also has fault 2 (thermal on gpu1)."""
    faults = {n: [{"id": "1", "node": n, "device": "gpu0", "kind": "xid"}] for n in NODES}
    faults["n4"].append({"id": "2", "node": "n4", "device": "gpu1", "kind": "thermal"})
    record = ClusterRecord(name="c", backend="per-node", profile="dgx-h100", nodes=NODES, node_count=None, root="/x",
                           created=0.0)
    return PerNodeAgents(faults), record


def test_heal_all_asks_every_nodes_agent() -> None:
    backend, record = cluster()
    healed = backend.heal(record)
    assert sorted((f["node"], f["id"]) for f in healed) == sorted([(n, "1") for n in NODES] + [("n4", "2")])
    assert all(not faults for faults in backend.faults.values())


def test_heal_by_id_finds_the_node_that_holds_it() -> None:
    backend, record = cluster()
    assert backend.heal(record, fault_id="2") == [{"id": "2", "node": "n4", "device": "gpu1", "kind": "thermal"}]
    assert [len(backend.faults[n]) for n in NODES] == [1] * 6


def test_heal_by_kind_on_one_node() -> None:
    backend, record = cluster()
    assert [f["id"] for f in backend.heal(record, node="n4", kind="xid")] == ["1"]
    assert [f["id"] for f in backend.faults["n4"]] == ["2"]


def test_heal_names_an_unknown_node() -> None:
    backend, record = cluster()
    with pytest.raises(BackendInputError, match=r"cluster c has no node 'n9' \(nodes: n0, n1, n2, n3, n4, n5\)"):
        backend.heal(record, node="n9")
