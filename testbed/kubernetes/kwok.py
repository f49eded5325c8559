"""The model's nodes as KWOK-managed Kubernetes nodes: scheduler tests at fleet scale on a real control plane.

KWOK (kwok.sigs.k8s.io) keeps Node objects that no kubelet backs Ready, and runs the pods bound to them through
their lifecycle. So a real kube-scheduler (with the user's extender) can schedule against 10,000 nodes in any
cluster. What a node is made of here, all from the model:

- the ``v1.Node``: the scheduler's view of the node (:func:`fakehw.views.k8s.node_info`: capacity, allocatable,
  the fakehw topology annotations the reference extender reads) with the labels NVIDIA's GFD would write
  (:func:`fakehw.views.gfd.gfd_labels`), hugepage capacities as the kubelet reports them from the node's sysfs,
  and what KWOK's docs prescribe for a node it manages: the annotation ``kwok.x-k8s.io/node: fake`` (the
  controller's default ``--manage-nodes-with-annotation-selector``), ``node.alpha.kubernetes.io/ttl: "0"``, the
  label ``type: kwok``, and the taint ``kwok.x-k8s.io/node=fake:NoSchedule`` so real workloads never land on a
  node that cannot run them (test pods tolerate it: :data:`KWOK_TOLERATION`);
- a ``NodeResourceTopology`` (``topology.node.k8s.io/v1alpha2``) when the cluster serves that CRD;
- a DRA ``ResourceSlice`` (``resource.k8s.io/v1``) for the ``gpu.nvidia.com`` driver when the cluster serves it.

Every object carries the label ``fakehw.io/kwok-cluster=<testbed name>``; ``testbed down`` deletes exactly the
objects with it (delete-collection by label selector). Objects are written by server-side apply, so running
``up`` again updates them in place. Nodes are registered by a bounded pool of workers, objects are rendered
as they are sent (memory stays flat at 10,000 nodes), and progress is reported per batch.

Before anything is written the cluster is checked: reachable, KWOK installed (its ``kwok.x-k8s.io`` API with at
least one Stage), and the kubeconfig's user allowed (SelfSubjectAccessReview) to do every write registration and
removal need; each failure says what is missing and how to get it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from fakehw.model.system import Node, System
from fakehw.sysfs.common import hugepage_sizes_kb
from fakehw.views.gfd import gfd_labels
from fakehw.views.k8s import node_info
from fakehw.views.k8s_topology import RESOURCE_API, node_resource_topology, resource_slice
from testbed.kubernetes.kubeapi import KubeApi, KubeApiError

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Equal", "value": "fake", "effect": "NoSchedule"}
"""What a pod meant for a KWOK node tolerates."""
KWOK_API = "kwok.x-k8s.io/v1alpha1"
OWNER_LABEL = "fakehw.io/kwok-cluster"
FIELD_MANAGER = "fakehw-kwok"
NRT_API = "topology.node.k8s.io/v1alpha2"
KUBELET_VERSION = "v1.35.0-kwok-fakehw"

KWOK_INSTALL = ("install KWOK in the cluster first (kubectl apply -f https://github.com/kubernetes-sigs/kwok/releases/"
                "download/<version>/kwok.yaml and .../stage-fast.yaml; docs/kubernetes.md)")


class KwokError(RuntimeError):
    """The cluster cannot take KWOK nodes (or refused them); the message says what is missing and what to do."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status
        """The HTTP status that caused it (0: the API server could not be reached; None: not an HTTP failure)."""


@dataclass(frozen=True)
class Kind:
    """One kind of object registration writes: where it lives and how it is named in messages."""

    name: str
    api: str
    plural: str

    @property
    def collection(self) -> str:
        base = "/api/v1" if self.api == "v1" else f"/apis/{self.api}"
        return f"{base}/{self.plural}"

    def path(self, name: str) -> str:
        return f"{self.collection}/{name}"


NODES = Kind("Node", "v1", "nodes")
NRTS = Kind("NodeResourceTopology", NRT_API, "noderesourcetopologies")
SLICES = Kind("ResourceSlice", RESOURCE_API, "resourceslices")


def hugepage_capacity(arch: str) -> dict[str, str]:
    """``hugepages-<size>``: 0 for every size the fake sysfs lists for ``arch`` (no pages reserved), as the kubelet
    reports."""
    out = {}
    for kb in hugepage_sizes_kb(arch):
        out[f"hugepages-{kb // 1024 // 1024}Gi" if kb >= 1024 * 1024 else f"hugepages-{kb // 1024}Mi"] = "0"
    return out


def kwok_node(system: System, node: Node, owner: str) -> dict[str, Any]:
    """The ``v1.Node`` KWOK manages for ``node``. Its status is in the object, but the API takes status only
    through the ``nodes/status`` subresource on updates, so :func:`register` applies it there too.

    No ``fakehw.io/node`` label: that one marks real nodes that run a fake node's agent (the kubeconfig backend
    without ``--kwok`` pins agent DaemonSets by it), and a KWOK node runs nothing."""
    obj = node_info(system, node).to_object()
    meta = obj["metadata"]
    del meta["uid"], meta["resourceVersion"]  # the API server's to assign
    labels = dict(meta["labels"])
    labels.update(gfd_labels(system, node))
    labels.update({"type": "kwok", OWNER_LABEL: owner, "fakehw.io/profile": system.name})
    meta["labels"] = labels
    meta["annotations"] = {**meta["annotations"], KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"}
    obj["spec"] = {"taints": [dict(KWOK_TAINT)]}
    status = obj["status"]
    for key in ("capacity", "allocatable"):
        status[key] = {**status[key], **hugepage_capacity(node.cpu.arch)}
    status["nodeInfo"] = {**status["nodeInfo"], "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": "",
                          "containerRuntimeVersion": "kwok://fake", "kernelVersion": "", "osImage": "",
                          "machineID": "", "systemUUID": "", "bootID": ""}
    # KWOK's node stage reports conditions (Ready, heartbeats) and addresses: not ours to own.
    del status["conditions"], status["addresses"]
    return obj


def _owned(obj: dict[str, Any], owner: str) -> dict[str, Any]:
    obj["metadata"].setdefault("labels", {})[OWNER_LABEL] = owner
    return obj


@dataclass(frozen=True)
class Plan:
    """What registration writes for one testbed: which kinds the cluster serves and who owns the objects."""

    owner: str
    topology: bool
    """The cluster serves NodeResourceTopology (the CRD of the NFD topology updater is installed)."""
    slices: bool
    """The cluster serves resource.k8s.io/v1 ResourceSlices (DRA; GA and on by default since Kubernetes 1.34)."""

    @property
    def kinds(self) -> list[Kind]:
        return [NODES, *([NRTS] if self.topology else []), *([SLICES] if self.slices else [])]

    def objects(self, system: System, node: Node) -> Iterator[tuple[Kind, dict[str, Any]]]:
        yield NODES, kwok_node(system, node, self.owner)
        if self.topology:
            yield NRTS, _owned(node_resource_topology(system, node), self.owner)
        if self.slices and node.gpus:
            yield SLICES, _owned(resource_slice(system, node), self.owner)


def _access_for(kind: Kind) -> list[tuple[str, str, str, str]]:
    """(verb, group, resource, subresource) registration and removal of ``kind`` need: server-side apply is a
    patch (creating too), ``down`` lists and deletes by label selector."""
    group = kind.api.rpartition("/")[0]
    access = [("patch", group, kind.plural, ""), ("list", group, kind.plural, ""),
              ("deletecollection", group, kind.plural, "")]
    if kind is NODES:
        access.append(("patch", group, kind.plural, "status"))
    return access


def preflight(api: KubeApi, owner: str, topology: bool = True, slices: bool = True,
              notice: Callable[[str], None] = lambda _: None) -> Plan:
    """Check the cluster can take KWOK nodes before anything is written; the Plan says what will be written.

    Raises KwokError for what makes registration impossible (KWOK missing, a write refused by RBAC); an optional
    API the cluster does not serve (NodeResourceTopology CRD, DRA) is skipped with a ``notice``."""
    try:
        kwok = api.served(KWOK_API)
        if kwok is None:
            raise KwokError(f"KWOK is not installed in the cluster at {api.creds.server}: it serves no {KWOK_API} "
                            f"API, so nothing would keep fake nodes Ready or run their pods; {KWOK_INSTALL}")
        if "stages" in kwok:
            stages = api.checked("GET", f"/apis/{KWOK_API}/stages", query={"limit": "1"}, what="list KWOK stages")
            if not (stages or {}).get("items"):
                raise KwokError("KWOK is installed but has no Stage: its nodes would never become Ready and their "
                                "pods never run; apply KWOK's stage-fast.yaml of the same release")
        has_nrt = topology and _serves(api, NRTS)
        if topology and not has_nrt:
            notice(f"the cluster does not serve {NRT_API} NodeResourceTopology (the CRD is not installed): "
                   "no NodeResourceTopology objects are written")
        has_rs = slices and _serves(api, SLICES)
        if slices and not has_rs:
            notice(f"the cluster does not serve {RESOURCE_API} ResourceSlices (DRA is GA since Kubernetes 1.34; "
                   "older clusters need it enabled): no ResourceSlices are written")
        plan = Plan(owner, has_nrt, has_rs)
        refused = []
        for verb, group, resource, sub in (a for kind in plan.kinds for a in _access_for(kind)):
            allowed, reason = api.can(verb, group, resource, sub)
            if not allowed:
                what = f"{resource}/{sub}" if sub else resource
                refused.append(f"{verb} {what}{'.' + group if group else ''}" + (f" ({reason})" if reason else ""))
    except KubeApiError as exc:
        raise KwokError(str(exc)) from None
    if refused:
        raise KwokError("the kubeconfig's user may not " + "; ".join(refused) + ". Registering KWOK nodes needs "
                        "these verbs (docs/kubernetes.md has a ClusterRole with them)")
    return plan


def _serves(api: KubeApi, kind: Kind) -> bool:
    resources = api.served(kind.api)
    return resources is not None and kind.plural in resources


@dataclass
class Progress:
    """Counts shared by the registration workers (under a lock) and reported per batch."""

    total_nodes: int
    done_nodes: int = 0
    objects: int = 0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass(frozen=True)
class Report:
    nodes: int
    objects: int
    requests: int
    seconds: float
    kinds: tuple[str, ...]

    @property
    def objects_per_s(self) -> float:
        return self.objects / self.seconds if self.seconds > 0 else 0.0


def _register_node(api: KubeApi, plan: Plan, system: System, node: Node, progress: Progress) -> None:
    objects = requests = 0
    for kind, obj in plan.objects(system, node):
        name = obj["metadata"]["name"]
        what = f"{kind.name} {name}"
        try:
            api.apply(kind.path(name), obj, FIELD_MANAGER, what=f"apply {what}")
            requests += 1
            if kind is NODES:  # on update the API ignores status in the object: apply it to the subresource
                api.apply(kind.path(name) + "/status", {"apiVersion": "v1", "kind": "Node",
                                                         "metadata": {"name": name}, "status": obj["status"]},
                          FIELD_MANAGER, what=f"apply {what} status")
                requests += 1
        except KubeApiError as exc:
            raise KwokError(str(exc)) from None
        objects += 1
    with progress.lock:
        progress.done_nodes += 1
        progress.objects += objects
        progress.requests += requests


def _batches(nodes: Iterable[Node], size: int) -> Iterator[list[Node]]:
    batch: list[Node] = []
    for node in nodes:
        batch.append(node)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def register(api: KubeApi, plan: Plan, system: System, workers: int = 16, batch: int = 500,
             progress: Callable[[dict[str, Any]], None] | None = None) -> Report:
    """Write every node of ``system`` (its Node, NodeResourceTopology, ResourceSlice) with ``workers`` requests in
    flight at most; stops at the first refusal (KwokError naming the object) after the batch in flight."""
    if workers < 1 or batch < 1:
        raise ValueError("workers and batch must be at least 1")
    state = Progress(len(system.nodes))
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kwok") as pool:
        for chunk in _batches(system.nodes, batch):
            futures: list[Future[None]] = [pool.submit(_register_node, api, plan, system, n, state) for n in chunk]
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            for f in pending:
                f.cancel()
            wait(pending)
            for f in done:
                f.result()  # the first failure, as a KwokError
            if progress is not None:
                progress({"phase": "kwok", "done": state.done_nodes, "total": state.total_nodes,
                          "objects": state.objects, "seconds": time.monotonic() - start})
    return Report(state.done_nodes, state.objects, state.requests, time.monotonic() - start,
                  tuple(k.name for k in plan.kinds))


def unregister(api: KubeApi, owner: str, kinds: Iterable[Kind] = (SLICES, NRTS, NODES)) -> dict[str, int]:
    """Delete every object labelled ``fakehw.io/kwok-cluster=<owner>`` (slices and topologies before their
    nodes); a kind the cluster no longer serves is skipped. Returns how many of each kind went."""
    selector = {"labelSelector": f"{OWNER_LABEL}={owner}"}
    gone: dict[str, int] = {}
    for kind in kinds:
        try:
            if kind is not NODES and not _serves(api, kind):
                continue
            listed = api.checked("GET", kind.collection, query=selector, what=f"list {kind.name}s of {owner}")
            gone[kind.name] = len((listed or {}).get("items") or [])
            if gone[kind.name]:
                api.checked("DELETE", kind.collection, query=selector, what=f"delete {kind.name}s of {owner}")
        except KubeApiError as exc:
            raise KwokError(str(exc), exc.status) from None
    return gone


def owned_nodes(api: KubeApi, owner: str) -> list[str]:
    """Names of the Nodes of ``owner`` the cluster has now."""
    try:
        listed = api.checked("GET", NODES.collection, query={"labelSelector": f"{OWNER_LABEL}={owner}"},
                             what=f"list Nodes of {owner}")
    except KubeApiError as exc:
        raise KwokError(str(exc)) from None
    return [str(i["metadata"]["name"]) for i in (listed or {}).get("items") or []]


def node_counts(objects: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in objects.items())
