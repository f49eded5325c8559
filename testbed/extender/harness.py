"""The extender harness: a testbed cluster seen as Kubernetes, kube-scheduler's cycle, and the extender under test.

    with SchedulingHarness(system, testbed) as h:
        h.add_extender(ExtenderConfig("http://127.0.0.1:8888", bind_verb="bind", node_cache_capable=True))
        d = h.run(Workload("train", gpus=4))
        d.node, d.top, d.failed_checks

Nodes are rendered from the model and the agent's runtime state (:mod:`fakehw.views.k8s`) and refreshed after
faults (:meth:`refresh_nodes`); pods live in the harness's store, served to extenders over the minimal
Kubernetes API of :mod:`testbed.extender.apiserver`.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from fakehw.model.system import System
from fakehw.views.k8s import (
    ANN_GPUS,
    LABEL_CLIQUE,
    LABEL_DOMAIN,
    LABEL_HOSTNAME,
    NodeInfo,
    PoolPolicy,
    node_objects,
    pod_object,
)
from testbed.extender.apiserver import ApiServer, ClusterStore
from testbed.extender.ledger import Ledger
from testbed.extender.protocol import CallResult, ExtenderClient, ExtenderConfig
from testbed.extender.scheduler import Decision, Scheduler

if TYPE_CHECKING:
    from testbed.api import Testbed


@dataclass(frozen=True)
class Workload:
    """A job's pod as the suites describe it (rendered with :func:`fakehw.views.k8s.pod_object`)."""

    name: str
    tenant: str = "default"
    gpus: int = 0
    memory: int = 0
    memory_bound: bool = False
    priority: int = 0
    platforms: tuple[str, ...] = ()
    isa: tuple[str, ...] = ()
    gang: str | None = None
    gang_size: int = 1
    node_selector: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.name}"

    def pod(self, uid: str) -> dict[str, Any]:
        return pod_object(self.tenant, self.name, uid, gpus=self.gpus, memory=self.memory,
                          memory_bound=self.memory_bound, priority=self.priority, platforms=self.platforms,
                          isa=self.isa, gang=self.gang, gang_size=self.gang_size,
                          node_selector=dict(self.node_selector))

    def members(self) -> list[Workload]:
        """A gang's pods (``name-0`` ...), or just this workload."""
        if not self.gang:
            return [self]
        return [replace(self, name=f"{self.name}-{i}") for i in range(self.gang_size)]


def replicated_nodes(objs: Sequence[Mapping[str, Any]], total: int) -> list[dict[str, Any]]:
    """``total`` Node objects: ``objs`` (a profile's nodes, as rendered) and copies of them named ``NAME-cK``.

    Copy K of a node is the same hardware in copy K of its NVLink domain (domain and clique labels get the same
    suffix, so gangs still find whole domains) with its own GPU UUIDs. This is how a suite puts an extender in
    front of a fleet of thousands of nodes without rendering thousands of nodes from the model: the extender cannot
    tell, since it reads only the Node objects.
    """
    if not objs:
        raise ValueError("no nodes to replicate")
    out = [json.loads(json.dumps(o)) for o in objs]
    texts = [json.dumps(o) for o in objs]
    k = 1
    while len(out) < total:
        for text in texts:
            if len(out) >= total:
                break
            out.append(_copy_of(json.loads(text), k))
        k += 1
    return out


def _copy_of(node: dict[str, Any], k: int) -> dict[str, Any]:
    meta = node["metadata"]
    name = f"{meta['name']}-c{k}"
    meta["name"] = name
    meta["uid"] = f"node-{name}"
    labels = meta.setdefault("labels", {})
    labels[LABEL_HOSTNAME] = name
    if LABEL_DOMAIN in labels:
        labels[LABEL_DOMAIN] = f"{labels[LABEL_DOMAIN]}-c{k}"
    if LABEL_CLIQUE in labels:  # <ClusterUUID>.<CliqueId>, as GFD writes it: a cluster UUID of the copy's own
        cluster, _, clique = labels[LABEL_CLIQUE].rpartition(".")
        labels[LABEL_CLIQUE] = f"{uuid.uuid5(uuid.NAMESPACE_OID, f'{cluster}/{k}')}.{clique}"
    ann = meta.setdefault("annotations", {})
    if ANN_GPUS in ann:
        gpus = json.loads(ann[ANN_GPUS])
        for g in gpus:
            g["uuid"] = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"{g['uuid']}/{k}"))
        ann[ANN_GPUS] = json.dumps(gpus, separators=(",", ":"))
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "Hostname":
            address["address"] = name
    return node


class SchedulingHarness:
    """kube-scheduler and the cluster API over ``system`` (and ``testbed``'s runtime state when given)."""

    def __init__(self, system: System, testbed: Testbed | None = None, policy: PoolPolicy | None = None,
                 preemption: bool = True):
        self.system = system
        self.testbed = testbed
        self.policy = policy or PoolPolicy()
        self.store = ClusterStore()
        self.api = ApiServer(self.store).start()
        self.extenders: list[ExtenderClient] = []
        self.preemption = preemption
        self.calls: list[CallResult[Any]] = []
        self._uids = itertools.count(1)
        self._infos: dict[tuple[str, Any], NodeInfo] = {}
        self.refresh_nodes()
        self._scheduler: Scheduler | None = None

    @property
    def api_url(self) -> str:
        return self.api.url

    def close(self) -> None:
        for c in self.extenders:
            c.close()
        self.api.stop()

    def __enter__(self) -> SchedulingHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------- nodes

    def states(self) -> dict[str, Mapping[str, Any]]:
        if self.testbed is None:
            return {}
        return {n.name: self.testbed.state(n.name) for n in self.system.nodes}

    def refresh_nodes(self) -> int:
        """Re-render every Node from the model and the agent's state now; returns how many changed."""
        return self.store.set_nodes(node_objects(self.system, self.states(), self.policy))

    def _info(self, obj: Mapping[str, Any]) -> NodeInfo:
        key = (obj["metadata"]["name"], obj["metadata"].get("resourceVersion"))
        info = self._infos.get(key)
        if info is None:
            info = self._infos[key] = NodeInfo.from_object(obj)
        return info

    def node_info(self, name: str) -> NodeInfo:
        obj = self.store.node(name)
        if obj is None:
            raise KeyError(name)
        return self._info(obj)

    def node_infos(self) -> dict[str, NodeInfo]:
        """Every node as a scheduler reads it (parsed once per node version)."""
        return {o["metadata"]["name"]: self._info(o) for o in self.store.nodes()}

    # ----------------------------------------------------------------------------------- extenders

    def set_extenders(self, configs: Iterable[ExtenderConfig]) -> None:
        for c in self.extenders:
            c.close()
        self.extenders = [ExtenderClient(c) for c in configs]
        self._scheduler = None

    def add_extender(self, config: ExtenderConfig) -> ExtenderClient:
        client = ExtenderClient(config)
        self.extenders.append(client)
        self._scheduler = None
        return client

    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            self._scheduler = Scheduler(self.store, self.extenders, self.preemption, on_call=self.calls.append)
        return self._scheduler

    # ----------------------------------------------------------------------------------- pods

    def submit(self, workload: Workload) -> list[str]:
        keys = []
        for w in workload.members():
            pod = self.store.create_pod(w.pod(f"uid-{next(self._uids):06d}"))
            keys.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        return keys

    def schedule(self, key: str) -> Decision:
        return self.scheduler.schedule(key)

    def run(self, workload: Workload) -> list[Decision]:
        """Create the workload's pods and schedule each once, in order (a gang's members one after another)."""
        return [self.schedule(k) for k in self.submit(workload)]

    def run_one(self, workload: Workload) -> Decision:
        decisions = self.run(workload)
        if len(decisions) != 1:
            raise ValueError("run_one is for single pods; use run for gangs")
        return decisions[0]

    def delete(self, key: str, reason: str = "completed") -> bool:
        return self.store.delete_pod(key, reason) is not None

    def reset(self) -> None:
        """Delete every pod (the cluster goes back to empty)."""
        for pod in self.store.pods():
            self.store.delete_pod(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", "reset")

    def ledger(self) -> Ledger:
        return Ledger.from_pods(self.store.pods())

    def pod(self, key: str) -> dict[str, Any] | None:
        return self.store.pod(key)
