"""The one interface every testbed backend implements, so a conformance test never knows which it runs on.

A backend stands up the nodes of a profile (``up``), lists them (``nodes``), runs commands that see one node's
fake hardware (``exec``), injects and heals faults through that node's agent (``inject``/``heal``) and tears
everything down (``down``), leaving nothing behind, also after a failed ``up``.
"""

from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakehw.agent.client import AgentApi
from fakehw.model import ProfileError, System, load_profile
from testbed.cluster import ClusterRecord


class BackendError(Exception):
    """A backend could not do what was asked; the message says what to do about it."""


class BackendInputError(BackendError):
    """What was asked for does not exist or is not valid (a profile, cluster, node or command): exit code 2."""


def load_request_profile(profile: str, nodes: int | None) -> tuple[System, str]:
    """The profile of an ``up`` request, and how to refer to it from elsewhere: built-in names stay names, files
    become absolute paths (agents and containers run in other directories). Bad profiles are bad input."""
    path = Path(profile)
    ref = str(path.resolve()) if path.suffix in (".yaml", ".yml") and path.is_file() else profile
    try:
        return load_profile(ref, nodes=nodes), ref
    except ProfileError as exc:
        raise BackendInputError(f"profile {profile} is not valid:\n{exc}") from None


@dataclass(frozen=True)
class UpRequest:
    profile: str
    name: str
    state_dir: Path
    nodes: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    progress: Callable[[dict[str, Any]], None] | None = None
    """Told what a long start is doing (``{"phase", "done", "total"}``), where the backend can say."""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    arch: str
    gpus: int
    dir: Path
    env: Mapping[str, str]
    """Variables that make a process on this machine see the node (local backend)."""


class Backend(ABC):
    name: str = ""

    @abstractmethod
    def up(self, request: UpRequest) -> ClusterRecord: ...

    @abstractmethod
    def nodes(self, record: ClusterRecord) -> list[NodeInfo]: ...

    def node(self, record: ClusterRecord, name: str) -> NodeInfo:
        """One node, ready to be used (a backend that makes nodes' files on demand makes this one's only)."""
        for info in self.nodes(record):
            if info.name == name:
                return info
        raise BackendInputError(f"cluster {record.name} has no node {name!r}")

    @abstractmethod
    def exec(
        self,
        record: ClusterRecord,
        node: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        capture: bool = True,
        input: bytes | None = None,
        host_paths: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` on ``node``. It sees the node's tree at ``/sys``, ``/dev`` and ``/proc/driver`` where the
        backend can show it (containers always; the local backend as root, see :mod:`testbed.nodeview`);
        ``host_paths=True`` asks the local backend for this machine's paths instead (the node's tree is still
        at ``$FAKEHW_ROOT``)."""

    @abstractmethod
    def agent(self, record: ClusterRecord, node: str) -> AgentApi:
        """A client for the agent that serves ``node``."""

    def inject(self, record: ClusterRecord, node: str, kind: str, device: str, **params: Any) -> dict[str, Any]:
        return self.agent(record, node).inject(node, kind, device, **params)

    def heal(self, record: ClusterRecord, fault_id: str | None = None, node: str | None = None,
             device: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """Heal faults node by node, asking the agent that serves each one: an agent may serve one node (Docker,
        Kubernetes) or all of them (local), and a fault id is only unique within its agent."""
        if node is not None and node not in record.nodes:
            raise BackendInputError(f"cluster {record.name} has no node {node!r} (nodes: {', '.join(record.nodes)})")
        healed: list[dict[str, Any]] = []
        for n in [node] if node else record.nodes:
            client = self.agent(record, n)
            if fault_id is not None:
                if not any(f["id"] == fault_id for f in client.faults(n)):
                    continue
                healed += client.heal(fault_id=fault_id, device=device, kind=kind, node=n)
            else:
                healed += client.heal(node=n, device=device, kind=kind)
        return healed

    def netns_path(self, record: ClusterRecord, node: str) -> str | None:
        """The network namespace a fabric should put ``node``'s NICs into (None: the node has no namespace of its
        own, so an emulated fabric makes one)."""
        return None

    @abstractmethod
    def alive(self, record: ClusterRecord) -> bool:
        """Whether the cluster's agents are running."""

    @abstractmethod
    def down(self, record: ClusterRecord) -> None: ...
