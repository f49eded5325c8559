"""KWOK registration (testbed up --backend kubeconfig --kwok) to the API boundary, and on a real cluster in CI.

Here the cluster is a fake API server at the HTTP level (fake_apiserver.py) that records every request and holds
each object to the published API rules; expected labels come from what NVIDIA's real GFD v0.20.0 prints on these
profiles (tests/conformance/test_nvidia_gfd.py), device attributes from NVIDIA's DRA driver's published set.
The end-to-end test (a real kube-scheduler with the reference extender scheduling a GPU pod onto a KWOK node)
runs in the kwok job of .github/workflows/e2e-kind.yml and skips elsewhere, naming what it needs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakehw.model import load_profile
from fakehw.views.gfd import gfd_labels
from fakehw.views.k8s import NodeInfo, node_info
from fakehw.views.k8s_topology import resource_slice
from testbed.api import Testbed
from testbed.backends import BackendError, BackendInputError
from testbed.cli import main as cli_main
from testbed.extender.harness import SchedulingHarness, Workload
from testbed.extender.process import ExtenderProcess, ExtenderTarget
from testbed.kubernetes import kwok
from testbed.kubernetes.kubeapi import KubeApi, KubeconfigError, load_kubeconfig
from tests.conformance.test_nvidia_gfd import EXPECTED as GFD_EXPECTED
from tests.kubernetes.fake_apiserver import FakeApiServer, check_node, check_slice, kubeconfig_text, running

NODES = "/api/v1/nodes"
NRTS = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with running(FakeApiServer()) as server:
        yield server


def _kubeconfig(tmp_path: Path, fake: FakeApiServer, token: str | None = "t0ken") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(fake.url, token))
    return path


def _up(tmp_path: Path, fake: FakeApiServer, profile: str = "dgx-h100", nodes: int | None = 3,
        name: str = "fleet", **options: Any) -> Testbed:
    return Testbed.up(profile, nodes=nodes, backend="kubeconfig", name=name, state_dir=tmp_path / "state",
                      kubeconfig=str(_kubeconfig(tmp_path, fake)), kwok=True, **options)


# --------------------------------------------------------------------------------------------------- objects


@pytest.mark.parametrize("profile", ["dgx-h100", "edge-pcie", "dgx-a100", "gb200-r580"])
def test_node_labels_are_what_real_gfd_prints(profile: str) -> None:
    key = next(k for k in GFD_EXPECTED if k == profile or k.endswith(f"{profile.split('-')[0]}-nvl72-r580.yaml"))
    system = load_profile(key)
    labels = kwok.kwok_node(system, system.nodes[0], "o")["metadata"]["labels"]
    expected = GFD_EXPECTED[key]
    assert {k: labels.get(k) for k in expected} == expected
    assert gfd_labels(system, system.nodes[0]).items() <= labels.items()


def test_the_reference_extender_reads_a_kwok_node_as_the_harness_renders_it() -> None:
    system = load_profile("gb200-nvl72")
    node = system.nodes[0]
    read = NodeInfo.from_object(kwok.kwok_node(system, node, "o"))
    want = node_info(system, node)
    assert (read.gpus, read.latency, read.pools, read.clique, read.domain, read.arch, read.cpus, read.memory) == (
        want.gpus, want.latency, want.pools, want.clique, want.domain, want.arch, want.cpus, want.memory)


def test_the_reference_extender_places_gpu_pods_among_kwok_nodes(tmp_path: Path) -> None:
    """The reference extender process, watching a cluster API that serves KWOK Node objects (the harness's
    store), filters, scores and binds as kube-scheduler drives it: the local stand-in of the CI kwok job."""
    system = load_profile("dgx-h100", nodes=20)
    with SchedulingHarness(system) as h:
        nodes = [kwok.kwok_node(system, n, "o") for n in system.nodes]
        for obj in nodes:  # what KWOK's node-initialize stage adds once it manages the node
            obj["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
        h.store.set_nodes(nodes)
        target = ExtenderTarget.parse("reference")
        ext = ExtenderProcess(target, h.api_url, tmp_path / "extender.log")
        ext.start()
        try:
            h.add_extender(target.config(ext.url))
            decisions = [h.run_one(Workload(f"job-{i}", gpus=4)) for i in range(3)]
        finally:
            ext.stop()
    assert all(d.status == "bound" and d.node in {n.name for n in system.nodes} for d in decisions), decisions
    holds = h.ledger().holds
    assert len(holds) == 3 and all(len(hold.holding.gpus) == 4 for hold in holds)
    verbs = {c.verb for d in decisions for c in d.calls}
    assert verbs >= {"filter", "prioritize", "bind"}, verbs  # the extender decided and bound, not the harness


def _bad_slice_device(**change: Any) -> dict[str, Any]:
    system = load_profile("dgx-h100", nodes=1)
    rs = resource_slice(system, system.nodes[0])
    rs["spec"]["devices"][0]["attributes"].update(change)
    return rs


@pytest.mark.parametrize(("obj", "error"), [
    (_bad_slice_device(driverVersion={"version": "580.105.08"}), "is not semver 2.0"),
    (_bad_slice_device(productName={"string": "x" * 65}), "at most 64"),
    (_bad_slice_device(**{"fakehw.io/a-b": {"int": 1}}), "not a C identifier"),
    (_bad_slice_device(index={"int": 1, "string": "1"}), "exactly one of"),
    ({**_bad_slice_device(), "apiVersion": "resource.k8s.io/v1beta1"}, "must be resource.k8s.io/v1"),
])
def test_the_fake_refuses_a_slice_the_api_would(obj: dict[str, Any], error: str) -> None:
    errors: list[str] = []
    check_slice(obj, errors)
    assert any(error in e for e in errors), errors


@pytest.mark.parametrize(("change", "error"), [
    ({"metadata": {"name": "Node_0"}}, "not a DNS-1123 subdomain"),
    ({"metadata": {"name": "n", "labels": {"a": "x" * 64}}}, "not a valid label value"),
    ({"metadata": {"name": "n", "labels": {"bad key": "x"}}}, "not a qualified name"),
    ({"status": {"capacity": {"memory": "80GB"}}}, "is not a quantity"),
    ({"status": {"capacity": {"nvidia.com/gpu": "1.5"}}}, "whole numbers"),
    ({"spec": {"taints": [{"key": "k", "effect": "Never"}]}}, "effect"),
])
def test_the_fake_refuses_a_node_the_api_would(change: dict[str, Any], error: str) -> None:
    system = load_profile("dgx-h100", nodes=1)
    obj = {**kwok.kwok_node(system, system.nodes[0], "o"), **change}
    errors: list[str] = []
    check_node(obj, errors)
    assert any(error in e for e in errors), errors


def test_registration_writes_schema_valid_objects_as_kwok_prescribes(tmp_path: Path, fake: FakeApiServer) -> None:
    tb = _up(tmp_path, fake, "gb200-nvl72", nodes=None)
    assert fake.invalid == []
    system = load_profile("gb200-nvl72")
    names = [n.name for n in system.nodes]
    assert sorted(fake.objects(NODES)) == sorted(names) == sorted(tb.record.nodes)
    assert sorted(fake.objects(NRTS)) == sorted(names)
    assert sorted(fake.objects(SLICES)) == sorted(f"{n}-gpu.nvidia.com" for n in names)
    node = fake.objects(NODES)[names[0]]
    meta = node["metadata"]
    assert meta["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["spec"]["taints"] == [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
    assert meta["labels"]["type"] == "kwok" and meta["labels"]["fakehw.io/kwok-cluster"] == "fleet"
    assert "fakehw.io/node" not in meta["labels"]  # that label pins agents of the non-KWOK mode to real nodes
    assert meta["labels"]["nvidia.com/gpu.clique"].endswith(".32766")
    cap = node["status"]["capacity"]
    # A DGX GB200 tray: 2 Grace CPUs of 72 cores, 4 GPUs; hugepages as the kubelet reports them (none reserved),
    # one per size a 64K-page arm64 kernel has (Documentation/arch/arm64/hugetlbpage.rst: 2M, 512M, 16G; no 1G).
    assert cap["nvidia.com/gpu"] == "4" and cap["cpu"] == "144" and cap["pods"] == "110"
    assert {k: v for k, v in cap.items() if k.startswith("hugepages-")} == \
        {"hugepages-2Mi": "0", "hugepages-512Mi": "0", "hugepages-16Gi": "0"}
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    rs = fake.objects(SLICES)[f"{names[0]}-gpu.nvidia.com"]
    dev = rs["spec"]["devices"][0]
    assert rs["apiVersion"] == "resource.k8s.io/v1" and rs["spec"]["nodeName"] == names[0]
    # NVIDIA's DRA driver's attribute set (GpuInfo.Attributes) and capacity; capture qx-gb200.xml: 189471 MiB,
    # driver 580.173.02 (a strict semver attribute: 580.173.2), CUDA 13.0, CC 10.0, "NVIDIA GB200".
    attrs = dev["attributes"]
    assert {k: next(iter(v.values())) for k, v in attrs.items() if "/" not in k} == {
        "type": "gpu", "uuid": system.nodes[0].gpus[0].uuid, "productName": "NVIDIA GB200", "brand": "Nvidia",
        "architecture": "Blackwell", "cudaComputeCapability": "10.0.0", "driverVersion": "580.173.2",
        "cudaDriverVersion": "13.0.0"}
    assert attrs["resource.kubernetes.io/pciBusID"]["string"] == str(system.nodes[0].gpus[0].address)
    assert dev["capacity"] == {"memory": {"value": "189471Mi"}}
    nrt = fake.objects(NRTS)[names[0]]
    assert [z["name"] for z in nrt["zones"]][:2] == ["node-0", "node-1"]
    assert nrt["metadata"]["labels"]["fakehw.io/kwok-cluster"] == "fleet"


def test_every_write_is_a_server_side_apply_with_credentials(tmp_path: Path, fake: FakeApiServer) -> None:
    _up(tmp_path, fake)
    writes = [r for r in fake.requests if r.method == "PATCH"]
    assert len(writes) == 3 * 4  # per node: Node, Node status, NodeResourceTopology, ResourceSlice
    assert all(r.content_type == "application/apply-patch+yaml" for r in writes)
    assert all(r.query == {"fieldManager": "fakehw-kwok", "force": "true"} for r in writes)
    assert all(r.authorization == "Bearer t0ken" for r in fake.requests)
    status = [r for r in writes if r.path.endswith("/status")]
    assert len(status) == 3 and all(set(r.body) == {"apiVersion", "kind", "metadata", "status"} for r in status)


def test_rerun_updates_in_place_and_down_deletes_exactly_its_own(tmp_path: Path, fake: FakeApiServer) -> None:
    fake.store[f"{NODES}/real-worker"] = {"metadata": {"name": "real-worker", "labels": {}}}
    fake.store[f"{NODES}/other-0"] = {"metadata": {"name": "other-0", "labels": {"fakehw.io/kwok-cluster": "other"}}}
    tb = _up(tmp_path, fake)
    before = dict(fake.store)
    api = KubeApi.from_kubeconfig(_kubeconfig(tmp_path, fake))
    plan = kwok.preflight(api, "fleet")
    report = kwok.register(api, plan, tb.system)
    assert report.nodes == 3 and report.objects == 9 and report.requests == 12
    assert fake.store.keys() == before.keys() and fake.invalid == []
    assert tb.alive()
    tb.down()
    assert sorted(fake.store) == [f"{NODES}/other-0", f"{NODES}/real-worker"]
    deletes = [r for r in fake.requests if r.method == "DELETE"]
    assert {r.query["labelSelector"] for r in deletes} == {"fakehw.io/kwok-cluster=fleet"}
    assert not tb.alive()


def test_registration_is_concurrent_but_bounded(tmp_path: Path, fake: FakeApiServer) -> None:
    fake.delay_s = 0.01
    system = load_profile("dgx-h100", nodes=40)
    api = KubeApi.from_kubeconfig(_kubeconfig(tmp_path, fake))
    seen: list[dict[str, Any]] = []
    report = kwok.register(api, kwok.preflight(api, "b"), system, workers=4, batch=16, progress=seen.append)
    assert 1 < fake.max_inflight <= 4
    assert [p["done"] for p in seen] == [16, 32, 40] and report.objects == 120


def test_without_the_optional_apis_only_nodes_are_written(tmp_path: Path, fake: FakeApiServer) -> None:
    del fake.groups["topology.node.k8s.io/v1alpha2"], fake.groups["resource.k8s.io/v1"]
    notes: list[dict[str, Any]] = []
    tb = Testbed.up("dgx-h100", nodes=2, backend="kubeconfig", name="n", state_dir=tmp_path / "state",
                    kubeconfig=str(_kubeconfig(tmp_path, fake)), kwok=True, progress=notes.append)
    texts = [n["notice"] for n in notes if "notice" in n]
    assert any("NodeResourceTopology" in t for t in texts) and any("ResourceSlice" in t for t in texts)
    assert {r.path.split("/")[1] for r in fake.requests if r.method == "PATCH"} == {"api"}
    assert tb.record.extra["kwok_kinds"] == ["Node"]
    tb.down()
    assert fake.store == {}


# --------------------------------------------------------------------------------------------------- bad input


def test_an_unreachable_cluster_is_named(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(f"http://127.0.0.1:{port}", "x"))
    with pytest.raises(BackendError, match=rf"cannot reach the Kubernetes API at http://127.0.0.1:{port}"):
        Testbed.up("dgx-h100", nodes=1, backend="kubeconfig", name="x", state_dir=tmp_path / "s",
                   kubeconfig=str(path), kwok=True)


def test_a_cluster_gone_for_good_does_not_leave_a_record_that_cannot_go(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    with running(FakeApiServer()) as fake:
        tb = _up(tmp_path, fake, nodes=1)
    tb.down()  # the API server is gone: the record goes, with a warning naming the label of what may remain
    assert "cannot reach the Kubernetes API" in caplog.text and "fakehw.io/kwok-cluster=fleet" in caplog.text
    with running(FakeApiServer()) as fake:  # the name can be used again, on another cluster
        _up(tmp_path, fake, nodes=1).down()


def test_a_cluster_without_kwok_is_refused_before_any_write(tmp_path: Path, fake: FakeApiServer) -> None:
    del fake.groups["kwok.x-k8s.io/v1alpha1"]
    with pytest.raises(BackendError, match=r"KWOK is not installed in the cluster .*kwok\.yaml"):
        _up(tmp_path, fake)
    fake.groups["kwok.x-k8s.io/v1alpha1"] = {"stages"}
    fake.stages = 0
    with pytest.raises(BackendError, match=r"no Stage.*stage-fast\.yaml"):
        _up(tmp_path, fake)
    assert not [r for r in fake.requests if r.method == "PATCH"]


def test_rbac_refusals_are_named_before_any_write(tmp_path: Path, fake: FakeApiServer) -> None:
    fake.denied = {("patch", "resourceslices", ""), ("patch", "nodes", "status")}
    with pytest.raises(BackendError) as err:
        _up(tmp_path, fake)
    assert "may not patch nodes/status" in str(err.value)
    assert "patch resourceslices.resource.k8s.io (RBAC: no rule allows it)" in str(err.value)
    assert not [r for r in fake.requests if r.method == "PATCH"]


def test_a_refusal_mid_run_names_the_object_and_stops(tmp_path: Path, fake: FakeApiServer) -> None:
    fake.refuse = {SLICES: 403}
    with pytest.raises(BackendError, match=r"apply ResourceSlice dgx-h100-\d-gpu.nvidia.com: HTTP 403 Forbidden.*"
                                           r"RBAC.*testbed down --name fleet"):
        _up(tmp_path, fake)
    tb = Testbed.attach("fleet", tmp_path / "state")  # recorded before the first write: down removes it
    tb.down()
    assert fake.store == {}


def test_refused_credentials_are_named(tmp_path: Path, fake: FakeApiServer) -> None:
    fake.token = "other"
    with pytest.raises(BackendError, match=r"HTTP 401.*credentials were not accepted"):
        _up(tmp_path, fake)


@pytest.mark.parametrize(("text", "error"), [
    ("{", "not YAML"),
    ("[]", "no mapping"),
    (json.dumps({"contexts": []}), "no current-context"),
    (json.dumps({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k"}}]}),
     "no cluster named 'k'"),
    (json.dumps({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k"}}],
                 "clusters": [{"name": "k", "cluster": {"server": "ftp://x"}}]}), "no http\\(s\\) server URL"),
    (json.dumps({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                 "clusters": [{"name": "k", "cluster": {"server": "https://x"}}],
                 "users": [{"name": "u", "user": {"client-certificate-data": "Zm9v"}}]}), "without a key"),
    (json.dumps({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k"}}],
                 "clusters": [{"name": "k", "cluster": {"server": "https://x", "certificate-authority-data": "!"}}]}),
     "not base64"),
])
def test_a_bad_kubeconfig_is_named(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(KubeconfigError, match=error):
        load_kubeconfig(path)
    with pytest.raises(BackendInputError, match=error):
        Testbed.up("dgx-h100", nodes=1, backend="kubeconfig", name="x", state_dir=tmp_path / "s",
                   kubeconfig=str(path), kwok=True)


def test_an_exec_credential_plugin_gives_the_token(tmp_path: Path, fake: FakeApiServer) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text("import json; print(json.dumps({'kind': 'ExecCredential', 'status': {'token': 't0ken'}}))\n")
    path = tmp_path / "kubeconfig"
    config = json.loads(kubeconfig_text(fake.url, None))
    config["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                                           "args": [str(plugin)]}}
    path.write_text(json.dumps(config))
    assert load_kubeconfig(path).token == "t0ken"
    assert KubeApi.from_kubeconfig(path).served("v1") == {"nodes", "nodes/status", "pods"}


def _cert(name: str, issuer: tuple[Any, Any] | None, tmp: Path, server: bool) -> tuple[Any, Any, Path, Path]:
    """A key and certificate (self-signed CA when ``issuer`` is None), written as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer[0].subject if issuer else subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(hours=1))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True))
    if issuer is None:
        builder = builder.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                        critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    cert_path, key_path = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert, key, cert_path, key_path


def test_tls_with_the_cluster_ca_and_a_client_certificate_as_kind_writes_them(tmp_path: Path) -> None:
    """kind's kubeconfig: certificate-authority-data and client-certificate-data/client-key-data, no token."""
    import base64
    import ssl

    ca, ca_key, ca_path, _ = _cert("ca", None, tmp_path, False)
    _, _, server_crt, server_key = _cert("apiserver", (ca, ca_key), tmp_path, True)
    _, _, client_crt, client_key = _cert("kubernetes-admin", (ca, ca_key), tmp_path, False)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(server_crt, server_key)
    tls.load_verify_locations(ca_path)
    tls.verify_mode = ssl.CERT_REQUIRED
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    with running(FakeApiServer(token=None), tls) as fake:
        config = json.loads(kubeconfig_text(fake.url, None))
        config["clusters"][0]["cluster"]["certificate-authority-data"] = b64(ca_path)
        config["users"][0]["user"] = {"client-certificate-data": b64(client_crt), "client-key-data": b64(client_key)}
        path = tmp_path / "kubeconfig"
        path.write_text(json.dumps(config))
        tb = Testbed.up("dgx-h100", nodes=2, backend="kubeconfig", name="tls", state_dir=tmp_path / "s",
                        kubeconfig=str(path), kwok=True)
        assert len(fake.objects(NODES)) == 2 and fake.invalid == []
        tb.down()
        # The same server with another CA in the kubeconfig: refused, and said so.
        _, _, other_path, _ = _cert("other-ca", None, tmp_path, False)
        config["clusters"][0]["cluster"]["certificate-authority-data"] = b64(other_path)
        path.write_text(json.dumps(config))
        with pytest.raises(BackendError, match=r"cannot reach the Kubernetes API.*CERTIFICATE_VERIFY_FAILED"):
            Testbed.up("dgx-h100", nodes=1, backend="kubeconfig", name="tls2", state_dir=tmp_path / "s",
                       kubeconfig=str(path), kwok=True)


def test_kwok_nodes_have_no_agent_to_drive(tmp_path: Path, fake: FakeApiServer) -> None:
    tb = _up(tmp_path, fake, nodes=1)
    with pytest.raises(BackendInputError, match="is a KWOK node: it exists only as API objects"):
        tb.backend.agent(tb.record, "dgx-h100-0")
    with pytest.raises(BackendInputError, match="KWOK node"):
        tb.backend.exec(tb.record, "dgx-h100-0", ["true"])
    tb.down()


def test_the_cli_registers_reports_and_removes(tmp_path: Path, fake: FakeApiServer,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    config = _kubeconfig(tmp_path, fake)
    common = ["--name", "cli", "--state-dir", str(tmp_path / "state")]
    assert cli_main(["up", "--backend", "kubeconfig", "--kubeconfig", str(config), "--kwok", "--nodes", "5",
                         "--kwok-workers", "2", *common]) == 0
    assert len(fake.objects(NODES)) == 5
    assert cli_main(["status", *common]) == 0
    assert "5 KWOK node(s)" in capsys.readouterr().out
    assert cli_main(["down", *common]) == 0
    assert fake.store == {}
    assert cli_main(["up", "--kwok", *common]) == 2
    assert "--kwok is for the kubeconfig backend" in capsys.readouterr().err
    assert cli_main(["up", "--backend", "kubeconfig", "--kubeconfig", str(config), "--kwok",
                         "--kwok-workers", "0", *common]) == 2
    assert "--kwok-workers 0: at least 1" in capsys.readouterr().err
    assert cli_main(["up", "--backend", "kubeconfig", "--kubeconfig", str(config), "--kwok",
                     "--node-image", "x:1", *common]) == 2
    assert "--node-image: not used with --kwok" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------- real cluster


E2E_KUBECONFIG = os.environ.get("FAKEHW_KWOK_KUBECONFIG")
E2E_NODES = int(os.environ.get("FAKEHW_KWOK_NODES", "1000"))
SCHEDULER = "fakehw-scheduler"


def _e2e_missing() -> str | None:
    if not E2E_KUBECONFIG:
        return "FAKEHW_KWOK_KUBECONFIG is not set (a cluster with KWOK; the kwok job of e2e-kind.yml sets it)"
    for tool in ("kube-scheduler", "kubectl"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH"
    return None


def _scheduler_config(tmp_path: Path, kubeconfig: str, extender: str) -> Path:
    """A KubeSchedulerConfiguration: a second scheduler whose profile calls the reference extender."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig, "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": SCHEDULER}],
        "extenders": [{"urlPrefix": extender, "filterVerb": "filter", "prioritizeVerb": "prioritize",
                       "bindVerb": "bind", "weight": 1, "nodeCacheCapable": True, "httpTimeout": "30s",
                       "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]}],
    }
    path = tmp_path / "scheduler.yaml"
    path.write_text(json.dumps(config))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class KwokCluster:
    tb: Testbed
    kubectl: list[str]

    def run(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.kubectl, *args], input=input, capture_output=True, text=True, check=check)

    def apply(self, *objects: dict[str, Any]) -> None:
        proc = self.run("apply", "-f", "-", input="\n".join(json.dumps(o) for o in objects), check=False)
        assert proc.returncode == 0, proc.stderr

    def get(self, kind: str, name: str) -> dict[str, Any]:
        got: dict[str, Any] = json.loads(self.run("get", kind, name, "-o", "json").stdout)
        return got

    def wait_running(self, pod: str) -> dict[str, Any]:
        done = self.run("wait", "--for=jsonpath={.status.phase}=Running", f"pod/{pod}", "--timeout=300s",
                        check=False)
        got = self.get("pod", pod)
        if done.returncode != 0:
            events = self.run("get", "events", "--field-selector", f"involvedObject.name={pod}", check=False).stdout
            pytest.fail(f"{pod} is not Running: {json.dumps(got.get('status'))}\n{events}")
        return got


@pytest.fixture(scope="module")
def kwok_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KwokCluster]:
    """E2E_NODES dgx-h100 nodes registered as KWOK nodes in the cluster of FAKEHW_KWOK_KUBECONFIG, all Ready."""
    missing = _e2e_missing()
    if missing is not None:
        pytest.skip(missing)
    assert E2E_KUBECONFIG is not None
    start = time.monotonic()
    tb = Testbed.up("dgx-h100", nodes=E2E_NODES, backend="kubeconfig", name="kwok-e2e",
                    state_dir=tmp_path_factory.mktemp("kwok-state"), kubeconfig=E2E_KUBECONFIG, kwok=True,
                    progress=lambda p: print(p, file=sys.stderr, flush=True))
    print(f"registered {E2E_NODES} KWOK nodes ({tb.record.extra['kwok_objects']} objects) in "
          f"{time.monotonic() - start:.1f} s", file=sys.stderr)
    cluster = KwokCluster(tb, ["kubectl", "--kubeconfig", E2E_KUBECONFIG])
    try:
        ready = cluster.run("wait", "--for=condition=Ready", "node", "-l", f"{kwok.OWNER_LABEL}=kwok-e2e",
                            "--timeout=300s", check=False)
        assert ready.returncode == 0, ready.stderr
        print(f"all {E2E_NODES} Ready after {time.monotonic() - start:.1f} s", file=sys.stderr)
        yield cluster
    finally:
        tb.down()


def _gpu_pod(name: str, scheduler: str | None = None, gpus: int = 0,
             claim: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    spec: dict[str, Any] = {"tolerations": [kwok.KWOK_TOLERATION], "containers": [container]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if claim:
        container["resources"] = {"claims": [{"name": "gpus"}]}
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def test_kwok_e2e_real_scheduler_and_extender_place_a_gpu_pod(kwok_cluster: KwokCluster, tmp_path: Path) -> None:
    """The real kube-scheduler, with the reference extender (filter, prioritize, bind), binds a 4-GPU pod to a
    KWOK node, and KWOK runs it."""
    assert E2E_KUBECONFIG is not None
    proxy_port, ext_port = _free_port(), _free_port()
    procs = [subprocess.Popen([*kwok_cluster.kubectl, "proxy", f"--port={proxy_port}"])]
    try:
        time.sleep(2)
        procs.append(subprocess.Popen([sys.executable, "-m", "testbed.reference.extender", "--port", str(ext_port),
                                       "--api", f"http://127.0.0.1:{proxy_port}"]))
        config = _scheduler_config(tmp_path, E2E_KUBECONFIG, f"http://127.0.0.1:{ext_port}")
        procs.append(subprocess.Popen(["kube-scheduler", f"--config={config}", "--bind-address=127.0.0.1",
                                       f"--secure-port={_free_port()}", "-v=2"]))
        kwok_cluster.apply(_gpu_pod("gpu-job", SCHEDULER, gpus=4))
        got = kwok_cluster.wait_running("gpu-job")
        node = got["spec"]["nodeName"]
        assert node in kwok_cluster.tb.record.nodes, f"bound to {node}, not a KWOK node"
        # The reference extender bound it (bindVerb): its binding annotations name the 4 GPUs it holds.
        assert len(got["metadata"]["annotations"]["fakehw.io/gpus"].split(",")) == 4
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=30)
        kwok_cluster.run("delete", "pod", "gpu-job", "--ignore-not-found", "--wait=false", check=False)


def test_kwok_e2e_dra_claim_is_allocated_from_the_models_resource_slices(kwok_cluster: KwokCluster) -> None:
    """The cluster's own scheduler (its DRA plugin, GA since 1.34) allocates a ResourceClaim for 2 H100s, chosen
    by a CEL selector on NVIDIA's attribute names (an H100 has 81559 MiB: at least 80 GB, less than 80 GiB),
    from the ResourceSlices registration published."""
    device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "two-h100", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2,
                 "selectors": [{"cel": {"expression":
                                        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
                                        ' && device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80G")) >= 0'
                                        }}]}}]}}}
    try:
        kwok_cluster.apply(device_class, claim)
        kwok_cluster.apply(_gpu_pod("dra-job", claim="two-h100"))
        node = kwok_cluster.wait_running("dra-job")["spec"]["nodeName"]
        allocation = kwok_cluster.get("resourceclaim", "two-h100")["status"]["allocation"]
        results = allocation["devices"]["results"]
        assert len(results) == 2 and {r["driver"] for r in results} == {"gpu.nvidia.com"}
        assert {r["pool"] for r in results} == {node} and node in kwok_cluster.tb.record.nodes
        assert len({r["device"] for r in results}) == 2
    finally:
        kwok_cluster.run("delete", "pod", "dra-job", "--ignore-not-found", "--wait=false", check=False)
        kwok_cluster.run("delete", "resourceclaim", "two-h100", "--ignore-not-found", "--wait=false", check=False)
        kwok_cluster.run("delete", "deviceclass", "gpu.nvidia.com", "--ignore-not-found", check=False)
