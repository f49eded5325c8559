"""The testbed's Python API: the same verbs as the CLI, for tests and scripts.

    with Testbed.up("dgx-h100") as tb:
        tb.exec("dgx-h100-0", ["python", "-c", "import pynvml; ..."])
        fault = tb.inject("dgx-h100-0", "xid", "gpu3", code=79)
        tb.heal(fault["id"])
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any

from fakehw.agent.client import AgentApi
from fakehw.agent.trust import private_dir
from fakehw.model import System, builtin_profiles, load_profile
from fakehw.model.drivers import UnknownBranch, branch_of
from fakehw.render.atomic import atomic_write
from testbed.backends import Backend, BackendError, BackendInputError, NodeInfo, UpRequest, get_backend
from testbed.cluster import ClusterRecord, cluster_dir, default_state_dir, find_cluster, trusted_state_dir


def pin_driver(profile: str, driver: str, state_dir: Path, name: str) -> Path:
    """A profile file ``<state>/profiles/<name>.yaml`` that is ``profile`` running ``driver``.

    The version is checked here (a driver version of a branch fakehw knows) so that a typo is named as the
    ``--driver`` value, not as a line of a file the user never wrote; whether the GPUs run on that branch
    (Blackwell needs 570) is the profile loader's check, as for any profile."""
    try:
        branch_of(driver)
    except UnknownBranch as exc:
        raise BackendInputError(f"--driver: {exc}") from None
    base = profile if profile in builtin_profiles() else os.path.abspath(profile)
    state = trusted_state_dir(state_dir, create=True)
    assert state is not None  # created
    path = private_dir(state / "profiles") / f"{name}.yaml"
    text = f"# testbed up --driver {driver}\nextends: {json.dumps(base)}\ndriver: {{version: {json.dumps(driver)}}}\n"
    atomic_write(path, text.encode(), mode=0o600)
    return path


class Testbed:
    """A running cluster of fake nodes. Create with :meth:`up` or :meth:`attach`; end with :meth:`down`."""

    __test__ = False  # not a pytest test class

    def __init__(self, record: ClusterRecord, backend: Backend):
        self.record = record
        self.backend = backend

    @classmethod
    def up(
        cls,
        profile: str,
        nodes: int | None = None,
        backend: str = "local",
        name: str = "default",
        state_dir: Path | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
        driver: str | None = None,
        **options: Any,
    ) -> Testbed:
        """Stand up ``profile``; refuses if a live cluster of that name exists (stale ones are cleaned).

        ``driver`` pins the NVIDIA driver every node runs (``535.261.03``): the profile is then a small one of the
        state directory's that ``extends`` the given one, as a user would write it (docs/nvml.md)."""
        state = state_dir or default_state_dir()
        cluster_dir(name, state)  # validates the name
        impl = get_backend(backend)
        if driver is not None:
            profile = str(pin_driver(profile, driver, state, name))
        existing = find_cluster(name, state)
        if existing is not None:
            old = get_backend(existing.backend)
            if old.alive(existing):
                raise BackendError(f"cluster {name!r} is already up ({existing.profile}, {existing.backend}); "
                                   f"run 'testbed down --name {name}' first")
            old.down(existing)
        record = impl.up(UpRequest(profile, name, state, nodes, options, progress))
        return cls(record, impl)

    @classmethod
    def attach(cls, name: str = "default", state_dir: Path | None = None) -> Testbed:
        record = find_cluster(name, state_dir)
        if record is None:
            raise BackendInputError(f"no cluster {name!r} (start one with 'testbed up --profile P --name {name}')")
        return cls(record, get_backend(record.backend))

    @cached_property
    def system(self) -> System:
        return load_profile(self.record.profile, nodes=self.record.node_count)

    @property
    def name(self) -> str:
        return self.record.name

    def nodes(self) -> list[NodeInfo]:
        return self.backend.nodes(self.record)

    def node(self, name: str) -> NodeInfo:
        """One node, its files made (on the local backend, :meth:`nodes` makes every node's)."""
        return self.backend.node(self.record, name)

    @property
    def node_names(self) -> list[str]:
        """The nodes' names (nothing is made or loaded)."""
        return list(self.record.nodes)

    def exec(self, node: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
             timeout: float | None = 120, capture: bool = True,
             input: bytes | None = None, host_paths: bool = False) -> subprocess.CompletedProcess[bytes]:
        return self.backend.exec(self.record, node, argv, env=env, timeout=timeout, capture=capture, input=input,
                                 host_paths=host_paths)

    def agent(self, node: str | None = None) -> AgentApi:
        return self.backend.agent(self.record, node or self.record.nodes[0])

    def inject(self, node: str, kind: str, device: str, **params: Any) -> dict[str, Any]:
        return self.backend.inject(self.record, node, kind, device, **params)

    def heal(self, fault_id: str | None = None, node: str | None = None, device: str | None = None,
             kind: str | None = None) -> list[dict[str, Any]]:
        return self.backend.heal(self.record, fault_id=fault_id, node=node, device=device, kind=kind)

    def state(self, node: str) -> dict[str, Any]:
        return self.agent(node).state(node)

    def alive(self) -> bool:
        return self.backend.alive(self.record)

    def down(self) -> None:
        self.backend.down(self.record)

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()
