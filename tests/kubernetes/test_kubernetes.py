"""The Kubernetes backends up to the boundary of this machine: generated kind config, manifests, topology objects.

A kind cluster cannot start here (no kindest/node image can be pulled, no Kubernetes server binaries), so the
end-to-end test skips with a message naming what is missing; .github/workflows/e2e-kind.yml runs it for real.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakehw.model import load_profile
from fakehw.model.loader import builtin_dir
from fakehw.views.k8s_topology import node_resource_topology, resource_slice
from testbed.backends import BackendError, BackendInputError, UpRequest, get_backend
from testbed.backends.kubernetes import KubectlAgentClient, _Kubectl, write_kind_files
from testbed.kubernetes.manifests import (
    NVML_DIR,
    ClusterPlan,
    KubernetesConfigError,
    agent_daemonset,
    device_plugin_daemonset,
    gpu_test_pod,
    kind_config,
    node_env,
)
from tests.agent_thread import agent_thread


def _plan(tmp_path: Path, profile: str = "dgx-h100", nodes: int | None = None) -> ClusterPlan:
    return ClusterPlan("fakehw-t", profile, nodes, tmp_path)


def _check_pod_spec(spec: dict[str, Any]) -> None:
    volumes = {v["name"] for v in spec["volumes"]}
    for container in spec.get("initContainers", []) + spec["containers"]:
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes, f"{container['name']} mounts unknown volume {mount['name']}"


def test_kind_config_has_a_worker_per_fake_node(tmp_path: Path) -> None:
    system = load_profile("gb200-nvl72")
    config = kind_config(_plan(tmp_path, "gb200-nvl72"), system)
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4" and config["kind"] == "Cluster"
    roles = [n["role"] for n in config["nodes"]]
    assert roles == ["control-plane"] + ["worker"] * 18
    for worker, node in zip(config["nodes"][1:], system.nodes, strict=True):
        labels = worker["labels"]
        assert labels["fakehw.io/node"] == node.name
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-GB200" and labels["nvidia.com/gpu.count"] == "4"
        assert labels["fakehw.io/nvlink-domain"] == "nvl72" and labels["kubernetes.io/arch"] == "arm64"
        mounts = {m["containerPath"]: m["hostPath"] for m in worker["extraMounts"]}
        assert mounts["/var/lib/fakehw-agent"] == str(tmp_path / "nodes" / node.name / "agent")
        assert mounts["/etc/fakehw/node.env"] == str(tmp_path / "nodes" / node.name / "node.env")
    yaml.safe_load(yaml.safe_dump(config))  # what kind reads


def test_kind_files_are_written_per_node(tmp_path: Path) -> None:
    system = load_profile("dgx-h100")
    plan = _plan(tmp_path)
    config_path = write_kind_files(plan, system)
    assert yaml.safe_load(config_path.read_text()) == kind_config(plan, system)
    env = dict(line.split("=", 1) for line in (tmp_path / "nodes" / "dgx-h100-0" / "node.env").read_text().split())
    assert env == {"FAKEHW_NODE": "dgx-h100-0", "FAKEHW_PROFILE": "dgx-h100",
                   "FAKEHW_DEVICE_MINORS": ",".join(str(g.minor) for g in system.nodes[0].gpus),
                   "FAKEHW_AGENT_UID": str(os.getuid()), "FAKEHW_AGENT_GID": str(os.getgid())}
    assert (tmp_path / "nodes" / "dgx-h100-0" / "agent").is_dir()


def test_a_profile_file_is_mounted_into_the_nodes(tmp_path: Path) -> None:
    path = str(builtin_dir() / "edge-pcie.yaml")
    system = load_profile(path)
    plan = _plan(tmp_path, path)
    worker = kind_config(plan, system)["nodes"][1]
    assert {"hostPath": path, "containerPath": "/etc/fakehw/profile.yaml", "readOnly": True} in worker["extraMounts"]
    assert "FAKEHW_PROFILE=/etc/fakehw/profile.yaml" in node_env(plan, system.nodes[0])


def test_riscv64_nodes_are_refused_for_kind_with_the_alternative(tmp_path: Path) -> None:
    with pytest.raises(KubernetesConfigError, match="riscv64 nodes; kind node images exist for amd64 and arm64 only"):
        kind_config(_plan(tmp_path, "mixed-arch"), load_profile("mixed-arch"))
    with pytest.raises(BackendInputError, match="Use the docker backend"):
        get_backend("kind").up(UpRequest("riscv-nvlink-fusion", "t", tmp_path))


def test_device_plugin_daemonset_loads_the_fake_nvml(tmp_path: Path) -> None:
    ds = device_plugin_daemonset(_plan(tmp_path))
    spec = ds["spec"]["template"]["spec"]
    _check_pod_spec(spec)
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    container = spec["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["LD_LIBRARY_PATH"] == NVML_DIR and env["FAIL_ON_INIT_ERROR"] == "true"
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert paths["fake-nvml"] == NVML_DIR == mounts["fake-nvml"]
    assert mounts["device-plugin"] == "/var/lib/kubelet/device-plugins"
    assert container["image"].startswith("nvcr.io/nvidia/k8s-device-plugin:")


def test_agent_daemonsets_pin_one_fake_node_each(tmp_path: Path) -> None:
    system = load_profile("gb200-nvl72")
    plan = _plan(tmp_path, "gb200-nvl72")
    names = set()
    for node in system.nodes:
        ds = agent_daemonset(plan, node)
        spec = ds["spec"]["template"]["spec"]
        _check_pod_spec(spec)
        assert spec["nodeSelector"] == {"fakehw.io/node": node.name}
        env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
        assert env["FAKEHW_NODE"] == node.name and env["FAKEHW_DEVICE_MINORS"] == "0,1,2,3"
        assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
        assert len(ds["metadata"]["name"]) <= 63
        names.add(ds["metadata"]["name"])
    assert len(names) == 18


def test_gpu_test_pod_asks_for_gpus_on_its_node(tmp_path: Path) -> None:
    node = load_profile("dgx-h100").nodes[0]
    pod = gpu_test_pod(_plan(tmp_path), node, 2)
    _check_pod_spec(pod["spec"])
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert pod["spec"]["nodeSelector"] == {"fakehw.io/node": "dgx-h100-0"}


def test_node_resource_topology_follows_the_model() -> None:
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    nrt = node_resource_topology(system, node)
    assert nrt["kind"] == "NodeResourceTopology" and nrt["metadata"]["name"] == "dgx-h100-0"
    zones = {z["name"]: z for z in nrt["zones"]}
    assert list(zones) == ["node-0", "node-1"]
    for numa, zone in zip(node.numa, nrt["zones"], strict=True):
        res = {r["name"]: r["capacity"] for r in zone["resources"]}
        assert res["cpu"] == str(len(numa.cpus)) == "112"
        assert res["nvidia.com/gpu"] == str(sum(g.numa == numa.id for g in node.gpus)) == "4"
        assert [c["value"] for c in zone["costs"]] == list(node.distances[node.numa.index(numa)])
    gb = load_profile("gb200-nvl72")
    hbm = [z for z in node_resource_topology(gb, gb.nodes[0])["zones"] if z["attributes"][0]["value"] == "hbm"]
    assert len(hbm) == 4
    assert all({r["name"] for r in z["resources"]} == {"memory"} for z in hbm)


def test_resource_slices_publish_every_gpu() -> None:
    system = load_profile("gb200-nvl72")
    slices = [resource_slice(system, n) for n in system.nodes]
    for node, rs in zip(system.nodes, slices, strict=True):
        spec = rs["spec"]
        assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == node.name
        assert [d["attributes"]["uuid"]["string"] for d in spec["devices"]] == [g.uuid for g in node.gpus]
        assert {d["capacity"]["memory"]["value"] for d in spec["devices"]} == {"189471Mi"}
    cliques = {d["attributes"]["fakehw.io/cliqueID"]["string"] for rs in slices for d in rs["spec"]["devices"]}
    fabric = system.nvlink_domains[0].fabric
    assert fabric is not None and cliques == {f"{fabric.cluster_uuid}.{fabric.clique_id}"}
    edge = load_profile("edge-pcie")
    assert "fakehw.io/cliqueID" not in resource_slice(edge, edge.nodes[0])["spec"]["devices"][0]["attributes"]


def test_kind_up_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = get_backend("kind")
    with pytest.raises(BackendInputError, match="--kind-path /nonexistent/kind: no such file"):
        backend.up(UpRequest("dgx-h100", "t", tmp_path, options={"kind_path": "/nonexistent/kind"}))
    monkeypatch.setenv("PATH", str(tmp_path))  # no kind, no kubectl
    with pytest.raises(BackendError) as missing:
        backend.up(UpRequest("dgx-h100", "t", tmp_path))
    text = str(missing.value)
    assert text.startswith("kind is not installed. Debian 13 (trixie): apt-get install kind. Debian 12 (bookworm)")
    assert "Dir::Etc::SourceList=/var/lib/fakehw/apt/trixie.list" in text and "--kind-path PATH" in text
    assert "kind_path" not in text  # a CLI user never sees a Python keyword
    fake = {"kind_path": "/bin/true", "kubectl_path": "/bin/true", "kind_image": "fakehw/kind-node:absent"}
    with pytest.raises(BackendError, match="kind node image fakehw/kind-node:absent is not available: it is built "
                                           "FROM kindest/node"):
        backend.up(UpRequest("dgx-h100", "t", tmp_path, options=fake))
    with pytest.raises(BackendInputError, match=r"needs a kubeconfig file \(testbed up --backend kubeconfig "
                                                r"--kubeconfig FILE\)"):
        get_backend("kubeconfig").up(UpRequest("dgx-h100", "t", tmp_path))


@pytest.fixture
def agent_socket(tmp_path: Path) -> Iterator[Path]:
    """An agent serving gh200 on a unix socket. It renders no node files (``files="on-demand"``): its test drives
    the API through the kubectl transport and reads no file (the eager render wrote ~14,500 entries to disk)."""
    with agent_thread(system=load_profile("gh200"), state_dir=tmp_path, files="on-demand"):
        yield tmp_path / "agent.sock"


def test_the_kubectl_exec_transport_drives_a_real_agent(agent_socket: Path, tmp_path: Path) -> None:
    """kubectl is replaced by a script that does what ``kubectl exec`` would: run the command in the pod."""
    script = tmp_path / "kubectl"
    script.write_text(f"#!/bin/sh\n# drop: --kubeconfig K exec -n NS WORKLOAD -- python -m fakehw.agent.ctl\n"
                      f"shift 10\nexec {sys.executable} -m fakehw.agent.ctl --socket {agent_socket} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    client = KubectlAgentClient(_Kubectl(str(script), "kubeconfig"), "daemonset/fakehw-agent-gh200-0")
    assert client.health()["nodes"] == ["gh200-0"]
    fault = client.inject("gh200-0", "xid", "gpu0", code=79)
    assert client.device("gh200-0", "gpu0")["lost"] is True
    from fakehw.agent.client import AgentRequestError

    with pytest.raises(AgentRequestError) as info:
        client.inject("gh200-0", "xid", "gpu7", code=79)
    assert info.value.status == 404 and "has no GPU 'gpu7'" in info.value.message
    assert [f["id"] for f in client.heal(fault["id"])] == [fault["id"]]


def test_ctl_reports_an_unreachable_agent(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "fakehw.agent.ctl", "--socket", str(tmp_path / "none.sock"), "GET",
                           "/v1/health"], capture_output=True, text=True)
    assert proc.returncode == 1 and json.loads(proc.stdout)["status"] == 0


def _kind_missing() -> str | None:
    if not shutil.which("kind"):
        return "kind is not installed"
    image = os.environ.get("FAKEHW_KIND_IMAGE", "fakehw/kind-node:dev")
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
        return (f"the kind node image {image} is missing: it is built FROM kindest/node, which cannot be pulled "
                "here; .github/workflows/e2e-kind.yml builds it and runs this test")
    return None


KIND_MISSING = _kind_missing()


@pytest.mark.skipif(KIND_MISSING is not None, reason=str(KIND_MISSING))
def test_kind_e2e_real_device_plugin_gives_a_pod_its_gpus(testbed_state_dir: Path) -> None:
    from testbed import Testbed

    profile = os.environ.get("FAKEHW_E2E_PROFILE", "dgx-h100")
    with Testbed.up(profile, backend="kind", name="e2e", state_dir=testbed_state_dir,
                    kind_image=os.environ.get("FAKEHW_KIND_IMAGE", "fakehw/kind-node:dev")) as tb:
        system = tb.system
        backend = tb.backend
        assert isinstance(backend, type(get_backend("kind")))
        kubectl = _Kubectl(tb.record.extra["kubectl_path"], tb.record.extra["kubeconfig"])
        nodes = json.loads(kubectl("get", "nodes", "-l", "fakehw.io/node", "-o", "json"))["items"]
        assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == str(len(system.nodes[0].gpus))
        plan = ClusterPlan("fakehw-e2e", profile, None, tb.record.dir)
        kubectl.apply([gpu_test_pod(plan, system.nodes[0], 2)])
        kubectl("wait", "-n", "fakehw-system", "--for=jsonpath={.status.phase}=Succeeded", "pod/fakehw-gpu-test",
                "--timeout=300s", timeout=330)
        seen = json.loads(kubectl("logs", "-n", "fakehw-system", "fakehw-gpu-test").strip().splitlines()[-1])
        assert seen["count"] == 2 and len(seen["dev"]) == 2
        assert set(seen["uuids"]) <= {g.uuid for g in system.nodes[0].gpus}
