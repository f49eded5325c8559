"""Memory pools as extended resources: ``nvidia.com/gpu.memoryPool.<pool>``, one device per slice of capacity.

The node's pools come from the fakehw agent (pools are a platform feature; NVML does not know them). A shared
pool is cut into slices of ``slice_bytes`` (at most :data:`MAX_SLICES`), each a device ``<pool>-sNNN``; an
exclusive pool is one device (one tenant at a time). Allocating slices reserves their capacity in the pool through
the agent and hands the container the grant's access token (``FAKEHW_MEMORY_POOL_<POOL>_TOKEN``), so only that
container can map the memory.

The device plugin API has no "free": the kubelet simply hands a device out again once its pod is gone. So a
grant belongs to the slices it was made for, and allocating a slice that a grant still holds first releases that
grant (revoking the old token: the previous tenant's access ends exactly when the capacity moves on). The grant
table is checkpointed (``state_file``, mode 0600, holds tokens) so a restarted plugin can still release grants it
made before.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fakehw.render.atomic import atomic_write

log = logging.getLogger("fakehw.reference.pools")

MAX_SLICES = 64
DEFAULT_SLICE_BYTES = 16 * 2**30
MAX_TTL_S = 30 * 24 * 3600.0


def env_key(pool: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", pool.upper())


@dataclass(frozen=True)
class PoolSpec:
    name: str
    resource: str
    capacity: int
    policy: str
    slice_bytes: int
    slices: int

    def device_ids(self) -> list[str]:
        if self.slices == 1:
            return [f"{self.name}-all"]
        return [f"{self.name}-s{i:03d}" for i in range(self.slices)]


@dataclass
class GrantRecord:
    grant: str
    token: str
    pool: str
    devices: list[str]
    size: int


@dataclass
class PoolState:
    grants: list[GrantRecord] = field(default_factory=list)


class PoolError(Exception):
    pass


class PoolManager:
    """Grants of this plugin in the node's pools, through the agent's API."""

    def __init__(self, agent: Any, node: str, state_file: Path, slice_bytes: int = DEFAULT_SLICE_BYTES,
                 share_tokens: bool = False):
        self.agent = agent
        self.node = node
        self.state_file = state_file
        self.slice_bytes = slice_bytes
        self.share_tokens = share_tokens
        """Mutant behaviour: every allocation of a pool gets the first grant's token."""
        self._lock = threading.Lock()
        self.state = self._load()
        self.specs: dict[str, PoolSpec] = {}

    def _load(self) -> PoolState:
        try:
            data = json.loads(self.state_file.read_text())
            return PoolState([GrantRecord(**g) for g in data.get("grants", [])])
        except (OSError, ValueError, TypeError):
            return PoolState()

    def _save(self) -> None:
        atomic_write(self.state_file, json.dumps(asdict(self.state)).encode(), mode=0o600)

    def discover(self) -> list[PoolSpec]:
        specs = []
        for p in self.agent.pools(self.node):
            # what this node can reserve now (a pooled CXL device lends each host only the LDs assigned to it),
            # not the pool's size in the model
            capacity = int(p.get("available", p["capacity"]))
            exclusive = p.get("policy") == "exclusive"
            slice_bytes = max(self.slice_bytes, -(-capacity // MAX_SLICES))
            slices = 1 if exclusive or capacity <= slice_bytes else capacity // slice_bytes
            size = capacity if slices == 1 else slice_bytes
            specs.append(PoolSpec(str(p["name"]), str(p.get("resource") or f"nvidia.com/gpu.memoryPool.{p['name']}"),
                                  capacity, str(p.get("policy", "shared")), size, slices))
        self.specs = {s.name: s for s in specs}
        return specs

    def allocate(self, pool: str, devices: Sequence[str]) -> dict[str, str]:
        """Reserve capacity for ``devices`` (slices of ``pool``) and return the container's variables."""
        spec = self.specs[pool]
        unknown = sorted(set(devices) - set(spec.device_ids()))
        if unknown:
            raise PoolError(f"unknown devices of pool {pool}: {unknown}")
        with self._lock:
            self._release_holders(set(devices))
            if self.share_tokens and (first := next((g for g in self.state.grants if g.pool == pool), None)):
                record = first
            else:
                size = spec.slice_bytes * len(devices)
                tenant = f"devplugin:{self.node}:{devices[0]}.x{len(devices)}"[:128]
                answer = self.agent.reserve(self.node, pool, tenant, size, ttl=MAX_TTL_S)
                record = GrantRecord(str(answer["grant"]["id"]), str(answer["token"]), pool, list(devices), size)
                self.state.grants.append(record)
                self._save()
        key = env_key(pool)
        return {f"FAKEHW_MEMORY_POOL_{key}_TOKEN": record.token, f"FAKEHW_MEMORY_POOL_{key}_GRANT": record.grant,
                f"FAKEHW_MEMORY_POOL_{key}_BYTES": str(record.size)}

    def _release_holders(self, devices: set[str]) -> None:
        """Release grants that still hold any of ``devices`` (their pods are gone: the kubelet reuses them)."""
        keep = []
        for g in self.state.grants:
            if devices & set(g.devices) and not self.share_tokens:
                try:
                    self.agent.release_grant(g.grant, g.token)
                except Exception as exc:  # already expired or revoked: nothing left to release
                    log.info("grant %s: %s", g.grant, exc)
            else:
                keep.append(g)
        if len(keep) != len(self.state.grants):
            self.state.grants = keep
            self._save()
