"""What the Kubernetes backends generate: a kind cluster config, node env files, and the manifests they apply.

Everything here is a pure function of the model and a few names, so it is tested on machines where no cluster
can start (no ``kindest/node`` image here) and is exactly what the GitHub Actions e2e applies.

How fake GPUs reach Kubernetes:

- kind: every fake node is a kind worker built from the fakehw kind node image (``images/kind-node``), whose
  systemd unit runs the node's agent before the kubelet starts. The worker gets ``/etc/fakehw/node.env`` and its
  agent directory from the host through ``extraMounts``, so the host reaches each node's control socket directly.
  The fake NVML sits at ``/opt/fakehw/nvml`` (and in the system library directory) of every worker.
- kubeconfig (an existing cluster): one agent DaemonSet per fake node, pinned by the label ``fakehw.io/node``,
  runs the node image privileged; it installs the fake NVML on the host (``/opt/fakehw/nvml``) and keeps the
  node's files under ``/var/lib/fakehw-agent`` with ``/var/lib/fakehw-agent/node`` pointing at them.
- Either way, NVIDIA's real k8s-device-plugin runs as a DaemonSet that loads the fake ``libnvidia-ml.so.1`` from
  ``/opt/fakehw/nvml`` and finds the GPUs' ``/dev/nvidia*`` nodes; a pod that requests ``nvidia.com/gpu`` gets
  its device nodes and, through the fake NVML, sees exactly those GPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakehw.model.system import Node, System

NAMESPACE = "fakehw-system"
NODE_LABEL = "fakehw.io/node"
KIND_NODE_IMAGE = "fakehw/kind-node:dev"
NODE_IMAGE = "fakehw/node:dev"
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
NVML_DIR = "/opt/fakehw/nvml"
"""Where the fake libnvidia-ml.so.1 lives on every node (kind image build output; kubeconfig agent copies it)."""
AGENT_DIR = "/var/lib/fakehw-agent"
PROFILE_IN_NODE = "/etc/fakehw/profile.yaml"


class KubernetesConfigError(ValueError):
    """The profile cannot be put on this kind of cluster (e.g. riscv64 nodes on kind); says what to use instead."""


@dataclass(frozen=True)
class ClusterPlan:
    """Names and paths the generated objects agree on."""

    cluster: str
    profile: str
    """Built-in profile name, or the path of the profile file on the host."""
    node_count: int | None
    state_dir: Path
    kind_image: str = KIND_NODE_IMAGE
    node_image: str = NODE_IMAGE
    device_plugin_image: str = DEVICE_PLUGIN_IMAGE

    @property
    def profile_is_file(self) -> bool:
        return self.profile.endswith((".yaml", ".yml"))

    @property
    def profile_in_node(self) -> str:
        return PROFILE_IN_NODE if self.profile_is_file else self.profile

    def node_dir(self, node: str) -> Path:
        return self.state_dir / "nodes" / node


def node_labels(system: System, node: Node) -> dict[str, str]:
    """Labels of the Kubernetes node that stands for ``node`` (plus the profile's own labels)."""
    labels = {NODE_LABEL: node.name, "fakehw.io/profile": system.name, "kubernetes.io/arch": node.cpu.arch}
    labels.update(dict(node.labels))
    if node.gpus:
        labels.setdefault("nvidia.com/gpu.count", str(len(node.gpus)))
        labels.setdefault("nvidia.com/gpu.memory", str(node.gpus[0].sku.memory_mib))
    if node.nvlink_domain:
        labels["fakehw.io/nvlink-domain"] = node.nvlink_domain
    return labels


def node_env(plan: ClusterPlan, node: Node) -> str:
    """``/etc/fakehw/node.env`` of a kind worker: what the agent unit needs to become ``node``."""
    lines = [
        f"FAKEHW_NODE={node.name}",
        f"FAKEHW_PROFILE={plan.profile_in_node}",
        f"FAKEHW_DEVICE_MINORS={','.join(str(g.minor) for g in node.gpus)}",
        # The agent's state dir is a directory of this user's on the host: the agent runs as its owner (it
        # refuses a state dir another user owns), as in the docker backend.
        f"FAKEHW_AGENT_UID={os.getuid()}",
        f"FAKEHW_AGENT_GID={os.getgid()}",
    ]
    if plan.node_count is not None:
        lines.append(f"FAKEHW_NODE_COUNT={plan.node_count}")
    return "\n".join(lines) + "\n"


def check_kind_nodes(system: System) -> None:
    bad = sorted({n.cpu.arch for n in system.nodes} - {"amd64", "arm64"})
    if bad:
        raise KubernetesConfigError(
            f"profile {system.name} has {', '.join(bad)} nodes; kind node images exist for amd64 and arm64 only. "
            "Use the docker backend for riscv64 nodes (testbed up --backend docker).")


def kind_config(plan: ClusterPlan, system: System) -> dict[str, Any]:
    """The kind ``Cluster`` config: a control plane and one worker per fake node."""
    check_kind_nodes(system)
    workers = []
    for node in system.nodes:
        mounts = [
            {"hostPath": str(plan.node_dir(node.name) / "agent"), "containerPath": AGENT_DIR},
            {"hostPath": str(plan.node_dir(node.name) / "node.env"), "containerPath": "/etc/fakehw/node.env",
             "readOnly": True},
        ]
        if plan.profile_is_file:
            mounts.append({"hostPath": plan.profile, "containerPath": PROFILE_IN_NODE, "readOnly": True})
        workers.append({"role": "worker", "image": plan.kind_image, "labels": node_labels(system, node),
                        "extraMounts": mounts})
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": plan.cluster,
        "nodes": [{"role": "control-plane", "image": plan.kind_image}, *workers],
    }


def namespace() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE,
                                                                    "labels": {"app.kubernetes.io/part-of": "fakehw"}}}


def _host_path(name: str, path: str, kind: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def device_plugin_daemonset(plan: ClusterPlan) -> dict[str, Any]:
    """NVIDIA's real k8s-device-plugin, loading the fake NVML on every fake GPU node."""
    labels = {"app.kubernetes.io/name": "nvidia-device-plugin", "app.kubernetes.io/part-of": "fakehw"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "nvidia-device-plugin"}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": NODE_LABEL, "operator": "Exists"}]}]}}},
                    "containers": [{
                        "name": "nvidia-device-plugin",
                        "image": plan.device_plugin_image,
                        "env": [
                            {"name": "LD_LIBRARY_PATH", "value": NVML_DIR},
                            {"name": "FAIL_ON_INIT_ERROR", "value": "true"},
                            {"name": "DEVICE_LIST_STRATEGY", "value": "envvar"},
                            {"name": "DEVICE_ID_STRATEGY", "value": "uuid"},
                            {"name": "MIG_STRATEGY", "value": "none"},
                            {"name": "PASS_DEVICE_SPECS", "value": "true"},
                            {"name": "FAKEHW_NVML_SNAPSHOT", "value": "/var/lib/fakehw/nvml.snapshot"},
                        ],
                        "securityContext": {"privileged": True},
                        "volumeMounts": [
                            {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
                            {"name": "fake-nvml", "mountPath": NVML_DIR, "readOnly": True},
                            {"name": "fakehw-node", "mountPath": "/var/lib/fakehw", "readOnly": True},
                            {"name": "dev", "mountPath": "/dev"},
                        ],
                    }],
                    "volumes": [
                        _host_path("device-plugin", "/var/lib/kubelet/device-plugins", "Directory"),
                        _host_path("fake-nvml", NVML_DIR, "Directory"),
                        _host_path("fakehw-node", "/var/lib/fakehw", "Directory"),
                        _host_path("dev", "/dev", "Directory"),
                    ],
                },
            },
        },
    }


def gpu_test_pod(plan: ClusterPlan, node: Node, gpus: int, name: str = "fakehw-gpu-test") -> dict[str, Any]:
    """A pod that asks for ``gpus`` GPUs on ``node`` and prints what NVML and /dev show it."""
    script = (
        "import glob, json, pynvml\n"
        "pynvml.nvmlInit()\n"
        "n = pynvml.nvmlDeviceGetCount()\n"
        "uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(n)]\n"
        "print(json.dumps({'count': n, 'uuids': uuids, 'dev': sorted(glob.glob('/dev/nvidia[0-9]*'))}))\n"
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/part-of": "fakehw"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {NODE_LABEL: node.name},
            "containers": [{
                "name": "probe",
                "image": plan.node_image,
                "command": ["/opt/fakehw/venv/bin/python", "-c", script],
                "env": [{"name": "LD_LIBRARY_PATH", "value": NVML_DIR}],
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                "volumeMounts": [
                    {"name": "fake-nvml", "mountPath": NVML_DIR, "readOnly": True},
                    {"name": "fakehw-node", "mountPath": "/var/lib/fakehw", "readOnly": True},
                ],
            }],
            "volumes": [
                _host_path("fake-nvml", NVML_DIR, "Directory"),
                _host_path("fakehw-node", "/var/lib/fakehw", "Directory"),
            ],
        },
    }


def agent_daemonset(plan: ClusterPlan, node: Node) -> dict[str, Any]:
    """For an existing cluster: the agent of fake node ``node`` on the Kubernetes node labelled with its name.

    It installs the fake NVML on the host, makes ``/var/lib/fakehw`` on the host point at the node's rendered
    files (what the device plugin mounts), and runs the node image's entrypoint (device nodes, then the agent).
    """
    name = f"fakehw-agent-{node.name}"[:63].rstrip("-")
    labels = {"app.kubernetes.io/name": "fakehw-agent", "app.kubernetes.io/part-of": "fakehw", NODE_LABEL: node.name}
    env = [{"name": "FAKEHW_NODE", "value": node.name}, {"name": "FAKEHW_PROFILE", "value": plan.profile_in_node},
           {"name": "FAKEHW_DEVICE_MINORS", "value": ",".join(str(g.minor) for g in node.gpus)}]
    if plan.node_count is not None:
        env.append({"name": "FAKEHW_NODE_COUNT", "value": str(plan.node_count)})
    setup = (f"set -e; mkdir -p /host{NVML_DIR}; cp -f /opt/fakehw/nvml/libnvidia-ml.so.1 /host{NVML_DIR}/; "
             f"ln -sfn {AGENT_DIR}/nodes/{node.name} /host/var/lib/fakehw")
    mounts: list[dict[str, Any]] = [{"name": "agent-state", "mountPath": AGENT_DIR},
                                    {"name": "dev", "mountPath": "/dev"}]
    volumes = [_host_path("agent-state", AGENT_DIR, "DirectoryOrCreate"), _host_path("dev", "/dev", "Directory"),
               _host_path("host-nvml", NVML_DIR, "DirectoryOrCreate"), _host_path("host-var-lib", "/var/lib",
                                                                                 "Directory")]
    if plan.profile_is_file:
        mounts.append({"name": "profile", "mountPath": PROFILE_IN_NODE, "subPath": "profile.yaml", "readOnly": True})
        volumes.append({"name": "profile", "configMap": {"name": "fakehw-profile"}})
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "fakehw-agent", NODE_LABEL: node.name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {NODE_LABEL: node.name},
                    "initContainers": [{
                        "name": "install-nvml",
                        "image": plan.node_image,
                        "command": ["sh", "-c", setup],
                        "volumeMounts": [{"name": "host-nvml", "mountPath": f"/host{NVML_DIR}"},
                                         {"name": "host-var-lib", "mountPath": "/host/var/lib"}],
                    }],
                    "containers": [{
                        "name": "agent",
                        "image": plan.node_image,
                        "env": env,
                        "securityContext": {"privileged": True},
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    }


def profile_configmap(profile_text: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "fakehw-profile", "namespace": NAMESPACE}, "data": {"profile.yaml": profile_text}}
