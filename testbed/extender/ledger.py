"""Who holds what: the GPUs, pool memory and gang bookings of bound pods, read from the cluster's pods.

This is the harness's (and the suites') own reading of the cluster, independent of any extender: the suites judge
double bookings, pool limits and gangs on it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fakehw.views.k8s import Holding, PodRequest, PodSpecError


@dataclass(frozen=True, slots=True)
class PodHold:
    key: str
    uid: str
    request: PodRequest
    holding: Holding

    @property
    def node(self) -> str:
        return self.holding.node


@dataclass(frozen=True)
class Ledger:
    holds: tuple[PodHold, ...]
    pending: tuple[PodRequest, ...]
    problems: tuple[str, ...]
    """Bound pods whose holding annotations could not be read."""

    @classmethod
    def from_pods(cls, pods: Iterable[Mapping[str, Any]]) -> Ledger:
        holds: list[PodHold] = []
        pending: list[PodRequest] = []
        problems: list[str] = []
        for pod in pods:
            try:
                req = PodRequest.from_pod(pod)
                holding = Holding.from_pod(pod)
            except PodSpecError as exc:
                problems.append(str(exc))
                continue
            if holding is None:
                pending.append(req)
            else:
                holds.append(PodHold(req.key, req.uid, req, holding))
        return cls(tuple(holds), tuple(pending), tuple(problems))

    @cached_property
    def _by_node(self) -> dict[str, list[PodHold]]:
        out: dict[str, list[PodHold]] = defaultdict(list)
        for h in self.holds:
            out[h.node].append(h)
        return dict(out)

    def on_node(self, node: str) -> list[PodHold]:
        return list(self._by_node.get(node, ()))

    def gpu_holders(self, node: str) -> dict[int, list[str]]:
        out: dict[int, list[str]] = defaultdict(list)
        for h in self.on_node(node):
            for i in h.holding.gpus:
                out[i].append(h.key)
        return dict(out)

    def requested_gpus(self, node: str) -> int:
        """GPUs requested by pods bound to ``node`` (what kube-scheduler's NodeResourcesFit subtracts)."""
        return sum(h.request.gpus for h in self.on_node(node))

    def pool_use(self, node: str, pool: str) -> tuple[int, int]:
        """(reserved bytes, burst bytes) granted from ``pool`` on ``node``."""
        reserved = burst = 0
        for h in self.on_node(node):
            amount = h.holding.grants.get(pool, 0)
            if h.holding.kind == "reservation":
                reserved += amount
            else:
                burst += amount
        return reserved, burst

    def gangs(self) -> dict[str, list[PodHold]]:
        out: dict[str, list[PodHold]] = defaultdict(list)
        for h in self.holds:
            if h.request.gang:
                out[f"{h.request.namespace}/{h.request.gang}"].append(h)
        return dict(out)
