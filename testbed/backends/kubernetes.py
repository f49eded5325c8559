"""Kubernetes backends: ``kind`` (a local cluster through pytest-kind) and ``kubeconfig`` (an existing cluster).

Both put one fake node's agent on one Kubernetes node, deploy NVIDIA's real k8s-device-plugin against the fake
NVML, and drive faults through the node's agent. What they generate is in :mod:`testbed.kubernetes.manifests`.

These machines cannot start a kind cluster (no ``kindest/node`` image can be pulled, no Kubernetes server
binaries can be had), so ``up`` checks its prerequisites first and says exactly which one is missing; the
GitHub Actions e2e workflow (``.github/workflows/e2e-kind.yml``) runs it for real.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fakehw.agent.client import AgentApi, AgentClient, AgentRequestError
from fakehw.model import System, load_profile
from testbed.backends.base import Backend, BackendError, BackendInputError, NodeInfo, UpRequest, load_request_profile
from testbed.cluster import ClusterRecord, remove_tree_in_background
from testbed.host import trixie_apt_options
from testbed.kubernetes import kwok
from testbed.kubernetes.kubeapi import UNREACHABLE, KubeApi, KubeconfigError
from testbed.kubernetes.manifests import (
    KIND_NODE_IMAGE,
    NAMESPACE,
    NODE_IMAGE,
    NODE_LABEL,
    ClusterPlan,
    KubernetesConfigError,
    agent_daemonset,
    check_kind_nodes,
    device_plugin_daemonset,
    kind_config,
    namespace,
    node_env,
    profile_configmap,
)

READY_TIMEOUT_S = 300.0
log = logging.getLogger(__name__)


TRIXIE_APT = " ".join(["apt-get", *trixie_apt_options()])
"""apt-get on the separate trixie sources list ``testbed host setup`` writes on Debian 12."""


def _tool(name: str, given: str | None, package: str) -> str:
    """The path of ``name`` (``given``, else on PATH), or a BackendError saying how to get it on Debian."""
    path = given or shutil.which(name)
    if given and not Path(given).exists():
        raise BackendInputError(f"--{name}-path {given}: no such file")
    if not path or not Path(path).exists():
        raise BackendError(
            f"{name} is not installed. Debian 13 (trixie): apt-get install {package}. Debian 12 (bookworm) has no "
            f"such package: take trixie's beside bookworm with the sources list 'testbed host setup' writes, as "
            f"root: {TRIXIE_APT} update && {TRIXIE_APT} install -y --no-install-recommends {package}. Or give "
            f"--{name}-path PATH")
    return path


def _image_present(image: str) -> bool:
    docker = shutil.which("docker")
    return bool(docker) and subprocess.run([docker or "docker", "image", "inspect", image],
                                           capture_output=True).returncode == 0


def _dump(objects: Sequence[Mapping[str, Any]]) -> str:
    return yaml.safe_dump_all(list(objects), sort_keys=False)


class _Kubectl:
    """kubectl against one cluster; every failure becomes a BackendError naming the command."""

    def __init__(self, path: str, kubeconfig: str | None):
        self.path = path
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, input: str | None = None, timeout: float = 120, check: bool = True) -> str:
        cmd = [self.path, *(["--kubeconfig", self.kubeconfig] if self.kubeconfig else []), *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise BackendError(f"kubectl {' '.join(args[:3])} failed: {proc.stderr.strip()[:500]}")
        return proc.stdout

    def apply(self, objects: Sequence[Mapping[str, Any]]) -> None:
        self("apply", "-f", "-", input=_dump(objects))

    def node_for(self, fake_node: str) -> str:
        names = self("get", "nodes", "-l", f"{NODE_LABEL}={fake_node}", "-o", "name").split()
        if not names:
            raise BackendInputError(f"no Kubernetes node carries {NODE_LABEL}={fake_node}")
        return names[0].removeprefix("node/")


class KubectlAgentClient(AgentApi):
    """An agent reached by ``kubectl exec`` into its pod (``python -m fakehw.agent.ctl`` is the transport)."""

    def __init__(self, kubectl: _Kubectl, workload: str, timeout: float = 60.0):
        self.timeout = timeout
        self._kubectl = kubectl
        self._workload = workload

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        args = ["exec", "-n", NAMESPACE, self._workload, "--", "/opt/fakehw/venv/bin/python", "-m",
                "fakehw.agent.ctl", method, path]
        if body is not None:
            args.append(json.dumps(body))
        out = self._kubectl(*args, timeout=timeout or self.timeout, check=False)
        try:
            answer = json.loads(out.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            raise AgentRequestError(0, f"no answer from the agent in {self._workload}") from None
        status, payload = int(answer["status"]), answer["body"]
        if status == 0 or status >= 400:
            raise AgentRequestError(status, payload.get("error", "agent error"), payload.get("detail"))
        return payload


class KindBackend(Backend):
    """A kind cluster whose workers are the fake nodes (fakehw kind node image)."""

    name = "kind"

    def preflight(self, options: Mapping[str, Any]) -> tuple[str, str, str]:
        """kind, kubectl and the kind node image, or a BackendError naming what is missing."""
        kind = _tool("kind", options.get("kind_path"), "kind")
        kubectl = _tool("kubectl", options.get("kubectl_path"), "kubernetes-client")
        image = str(options.get("kind_image", KIND_NODE_IMAGE))
        if not _image_present(image):
            raise BackendError(
                f"the kind node image {image} is not available: it is built FROM kindest/node, which no reachable "
                "registry serves on this machine. Build it where a registry is reachable (docker buildx bake -f "
                "images/docker-bake.hcl kind-node --load; the e2e-kind GitHub workflow does), or give --kind-image "
                "IMAGE")
        return kind, kubectl, image

    def up(self, request: UpRequest) -> ClusterRecord:
        system, profile = load_request_profile(request.profile, request.nodes)
        try:
            check_kind_nodes(system)
        except KubernetesConfigError as exc:
            raise BackendInputError(str(exc)) from None
        kind, kubectl_path, image = self.preflight(request.options)
        root = request.state_dir / request.name
        plan = ClusterPlan(f"fakehw-{request.name}", profile, request.nodes, root,
                           kind_image=image, node_image=str(request.options.get("node_image", NODE_IMAGE)))
        record = ClusterRecord(name=request.name, backend=self.name, profile=profile,
                               nodes=[n.name for n in system.nodes], node_count=request.nodes, root=str(root),
                               created=time.time(),
                               extra={"kind_path": kind, "kubectl_path": kubectl_path, "kind_cluster": plan.cluster,
                                      "kubeconfig": str(root / "kubeconfig")})
        try:
            write_kind_files(plan, system)
            record.save()
            from pytest_kind import KindCluster

            cluster = KindCluster(plan.cluster, kubeconfig=root / "kubeconfig", kind_path=Path(kind),
                                  kubectl_path=Path(kubectl_path))
            cluster.create(root / "kind.yaml")
            if _image_present(plan.node_image):  # what test pods and probes run; kind nodes cannot pull it
                cluster.load_docker_image(plan.node_image)
            self._wait_agents(record)
            kubectl = _Kubectl(kubectl_path, record.extra["kubeconfig"])
            kubectl.apply([namespace(), device_plugin_daemonset(plan)])
            kubectl("rollout", "status", "-n", NAMESPACE, "daemonset/nvidia-device-plugin", "--timeout=300s",
                    timeout=READY_TIMEOUT_S)
        except BaseException:
            self.down(record)
            raise
        return record

    def _wait_agents(self, record: ClusterRecord) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for node in record.nodes:
            client = self.agent(record, node)
            while True:
                try:
                    client.health()
                    break
                except AgentRequestError:
                    if time.monotonic() > deadline:
                        raise BackendError(f"the agent of kind worker {node} did not answer within "
                                           f"{READY_TIMEOUT_S:.0f} s (docker logs of the worker show why)") from None
                    time.sleep(1)

    def nodes(self, record: ClusterRecord) -> list[NodeInfo]:
        system = load_profile(record.profile, nodes=record.node_count)
        return [NodeInfo(n.name, n.cpu.arch, len(n.gpus), record.dir / "nodes" / n.name / "agent" / "nodes" / n.name,
                         {}) for n in system.nodes]

    def _kubectl(self, record: ClusterRecord) -> _Kubectl:
        return _Kubectl(record.extra["kubectl_path"], record.extra.get("kubeconfig"))

    def exec(self, record: ClusterRecord, node: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
             timeout: float | None = None, capture: bool = True,
             input: bytes | None = None, host_paths: bool = False) -> subprocess.CompletedProcess[bytes]:
        if node not in record.nodes:
            raise BackendInputError(f"cluster {record.name} has no node {node!r}")
        worker = self._kubectl(record).node_for(node)  # kind names its node containers after the nodes
        flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
        return subprocess.run(["docker", "exec", *(["-i"] if input is not None else []), *flags, worker, *argv],
                              capture_output=capture, timeout=timeout, input=input, check=False)

    def agent(self, record: ClusterRecord, node: str) -> AgentClient:
        return AgentClient(record.dir / "nodes" / node / "agent" / "agent.sock")

    def alive(self, record: ClusterRecord) -> bool:
        kind = record.extra.get("kind_path")
        if not kind or not Path(kind).exists():
            return False
        out = subprocess.run([kind, "get", "clusters"], capture_output=True, text=True)
        return record.extra.get("kind_cluster") in out.stdout.split()

    def down(self, record: ClusterRecord) -> None:
        kind = record.extra.get("kind_path")
        if kind and Path(kind).exists():
            subprocess.run([kind, "delete", "cluster", "--name", record.extra["kind_cluster"]], capture_output=True)
        remove_tree_in_background(record.dir)


def write_kind_files(plan: ClusterPlan, system: System) -> Path:
    """``kind.yaml`` and every worker's ``node.env`` and agent directory, under the cluster directory."""
    for node in system.nodes:
        d = plan.node_dir(node.name)
        (d / "agent").mkdir(parents=True, exist_ok=True)
        (d / "node.env").write_text(node_env(plan, node))
    path = plan.state_dir / "kind.yaml"
    path.write_text(yaml.safe_dump(kind_config(plan, system), sort_keys=False))
    return path


KWOK_WORKERS = 16
"""Requests in flight while registering KWOK nodes (``--kwok-workers``): enough to keep a real API server busy
without tripping its default max-requests-inflight (400 mutating)."""


class KubeconfigBackend(Backend):
    """An existing cluster reached by a kubeconfig: agents as DaemonSets on nodes labelled ``fakehw.io/node``, or
    (``kwok``) the model's nodes registered as KWOK-managed Node objects, with no agent behind them."""

    name = "kubeconfig"

    def up(self, request: UpRequest) -> ClusterRecord:
        system, profile = load_request_profile(request.profile, request.nodes)
        kubeconfig = request.options.get("kubeconfig")
        if not kubeconfig or not Path(str(kubeconfig)).is_file():
            raise BackendInputError(f"the kubeconfig backend needs a kubeconfig file (testbed up --backend kubeconfig "
                                    f"--kubeconfig FILE){f'; {kubeconfig} does not exist' if kubeconfig else ''}")
        if request.options.get("kwok"):
            return self._up_kwok(request, system, profile, Path(str(kubeconfig)))
        if request.options.get("kwok_workers") is not None:
            raise BackendInputError("--kwok-workers is for --kwok registration")
        kubectl = _Kubectl(_tool("kubectl", request.options.get("kubectl_path"), "kubernetes-client"),
                           str(kubeconfig))
        root = request.state_dir / request.name
        plan = ClusterPlan(f"fakehw-{request.name}", profile, request.nodes, root,
                           node_image=str(request.options.get("node_image", NODE_IMAGE)))
        record = ClusterRecord(name=request.name, backend=self.name, profile=profile,
                               nodes=[n.name for n in system.nodes], node_count=request.nodes, root=str(root),
                               created=time.time(), extra={"kubectl_path": kubectl.path, "kubeconfig": str(kubeconfig),
                                                           "labelled": []})
        root.mkdir(parents=True, exist_ok=True)
        record.save()
        try:
            record.extra["labelled"] = self._label_nodes(kubectl, system)
            record.save()
            objects: list[dict[str, Any]] = [namespace()]
            if plan.profile_is_file:
                objects.append(profile_configmap(Path(profile).read_text()))
            objects += [agent_daemonset(plan, n) for n in system.nodes]
            objects.append(device_plugin_daemonset(plan))
            kubectl.apply(objects)
            for node in system.nodes:
                kubectl("rollout", "status", "-n", NAMESPACE, f"daemonset/fakehw-agent-{node.name}", "--timeout=300s",
                        timeout=READY_TIMEOUT_S)
        except BaseException:
            self.down(record)
            raise
        return record

    def _up_kwok(self, request: UpRequest, system: System, profile: str, kubeconfig: Path) -> ClusterRecord:
        """Register every model node as a KWOK node (Node, NodeResourceTopology, ResourceSlice); no agents."""
        unused = [f"--{k.replace('_', '-')}" for k in ("node_image", "kubectl_path") if request.options.get(k)]
        if unused:
            raise BackendInputError(f"{' and '.join(unused)}: not used with --kwok (KWOK nodes run no node image and "
                                    "registration talks to the API directly, not through kubectl)")
        given = request.options.get("kwok_workers")
        workers = KWOK_WORKERS if given is None else int(given)
        if workers < 1:
            raise BackendInputError(f"--kwok-workers {workers}: at least 1")
        try:
            api = KubeApi.from_kubeconfig(kubeconfig)
        except KubeconfigError as exc:
            raise BackendInputError(str(exc)) from None

        def notice(text: str) -> None:
            if request.progress is not None:
                request.progress({"phase": "kwok", "notice": text})

        try:
            plan = kwok.preflight(api, request.name, notice=notice)
        except kwok.KwokError as exc:
            raise BackendError(str(exc)) from None
        root = request.state_dir / request.name
        record = ClusterRecord(name=request.name, backend=self.name, profile=profile,
                               nodes=[n.name for n in system.nodes], node_count=request.nodes, root=str(root),
                               created=time.time(),
                               extra={"kubeconfig": str(kubeconfig), "kwok": True, "kwok_owner": plan.owner,
                                      "kwok_kinds": [k.name for k in plan.kinds]})
        root.mkdir(parents=True, exist_ok=True)
        record.save()  # before the first write: a failed or interrupted up is still removed by 'testbed down'
        try:
            report = kwok.register(api, plan, system, workers=workers, progress=request.progress)
        except kwok.KwokError as exc:
            raise BackendError(f"registering KWOK nodes: {exc} (what was written stays for a re-run to update; "
                               f"'testbed down --name {request.name}' removes it)") from None
        record.extra["kwok_objects"] = report.objects
        record.extra["kwok_seconds"] = round(report.seconds, 3)
        record.save()
        return record

    @staticmethod
    def _label_nodes(kubectl: _Kubectl, system: System) -> list[str]:
        """Use nodes already labelled with a fake node's name; label free schedulable nodes for the rest."""
        data = json.loads(kubectl("get", "nodes", "-o", "json"))
        taken = {n["metadata"]["labels"].get(NODE_LABEL): n["metadata"]["name"] for n in data["items"]}
        free = sorted(n["metadata"]["name"] for n in data["items"]
                      if NODE_LABEL not in n["metadata"]["labels"] and not n["spec"].get("unschedulable")
                      and "node-role.kubernetes.io/control-plane" not in n["metadata"]["labels"])
        missing = [n.name for n in system.nodes if n.name not in taken]
        if len(missing) > len(free):
            raise BackendInputError(f"{len(missing)} fake node(s) need a Kubernetes node but only {len(free)} free "
                                    f"worker(s) exist; label nodes with {NODE_LABEL}=<fake node> or use fewer nodes")
        labelled = []
        for fake, real in zip(missing, free, strict=False):
            kubectl("label", "node", real, f"{NODE_LABEL}={fake}")
            labelled.append(real)
        return labelled

    def _kubectl(self, record: ClusterRecord) -> _Kubectl:
        return _Kubectl(record.extra["kubectl_path"], record.extra["kubeconfig"])

    @staticmethod
    def _kwok_api(record: ClusterRecord) -> KubeApi:
        try:
            return KubeApi.from_kubeconfig(Path(record.extra["kubeconfig"]))
        except KubeconfigError as exc:
            raise BackendError(str(exc)) from None

    @staticmethod
    def _no_agent(record: ClusterRecord, node: str) -> BackendInputError:
        if node not in record.nodes:
            return BackendInputError(f"cluster {record.name} has no node {node!r}")
        return BackendInputError(f"{node} of cluster {record.name} is a KWOK node: it exists only as API objects "
                                 "(Node, NodeResourceTopology, ResourceSlice), with no agent, processes or files; "
                                 "run without --kwok for nodes that have them")

    def nodes(self, record: ClusterRecord) -> list[NodeInfo]:
        system = load_profile(record.profile, nodes=record.node_count)
        root = Path("/nonexistent/kwok") if record.extra.get("kwok") else Path("/var/lib/fakehw-agent/nodes")
        return [NodeInfo(n.name, n.cpu.arch, len(n.gpus), root / n.name, {}) for n in system.nodes]

    def exec(self, record: ClusterRecord, node: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
             timeout: float | None = None, capture: bool = True,
             input: bytes | None = None, host_paths: bool = False) -> subprocess.CompletedProcess[bytes]:
        if node not in record.nodes or record.extra.get("kwok"):
            raise self._no_agent(record, node)
        cmd = [record.extra["kubectl_path"], "--kubeconfig", record.extra["kubeconfig"], "exec",
               *(["-i"] if input is not None else []), "-n", NAMESPACE, f"daemonset/fakehw-agent-{node}", "--",
               "env", *[f"{k}={v}" for k, v in (env or {}).items()], *argv]
        return subprocess.run(cmd, capture_output=capture, timeout=timeout, input=input, check=False)

    def agent(self, record: ClusterRecord, node: str) -> AgentApi:
        if record.extra.get("kwok"):
            raise self._no_agent(record, node)
        return KubectlAgentClient(self._kubectl(record), f"daemonset/fakehw-agent-{node}")

    def alive(self, record: ClusterRecord) -> bool:
        if record.extra.get("kwok"):
            try:
                return bool(kwok.owned_nodes(self._kwok_api(record), record.extra["kwok_owner"]))
            except (kwok.KwokError, BackendError):
                return False
        out = self._kubectl(record)("get", "namespace", NAMESPACE, "-o", "name", check=False)
        return bool(out.strip())

    def down(self, record: ClusterRecord) -> None:
        if record.extra.get("kwok"):
            try:
                kwok.unregister(self._kwok_api(record), record.extra["kwok_owner"])
            except kwok.KwokError as exc:
                if exc.status != UNREACHABLE:
                    raise BackendError(f"removing the KWOK nodes of {record.name}: {exc}") from None
                # The cluster is gone (or away): keep no record that can never be taken down, and say what may be
                # left behind should it come back.
                log.warning("%s; the record of cluster %s is removed, and any of its objects left in that cluster "
                            "are those labelled %s=%s", exc, record.name, kwok.OWNER_LABEL, record.extra["kwok_owner"])
            remove_tree_in_background(record.dir)
            return
        kubectl = self._kubectl(record)
        kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=300, check=False)
        for real in record.extra.get("labelled", []):
            kubectl("label", "node", real, f"{NODE_LABEL}-", check=False)
        remove_tree_in_background(record.dir)
