"""The cluster API extenders read: list, watch with bookmarks and 410, binding; the reference informer over it."""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from fakehw.model import load_profile
from fakehw.polling import wait_until
from fakehw.views.k8s import NodeInfo, node_objects, pod_object
from testbed.extender.apiserver import ApiServer, ClusterStore
from testbed.extender.harness import replicated_nodes
from testbed.reference.extender.informer import ApiClient, Informer


@pytest.fixture
def api() -> Iterator[ApiServer]:
    store = ClusterStore(history=8)
    store.set_nodes(node_objects(load_profile("dgx-h100", nodes=2)))
    with ApiServer(store) as server:
        yield server


def request(api: ApiServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    host, port = api.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def test_list_and_get(api: ApiServer) -> None:
    api.store.create_pod(pod_object("t", "p", "u1", gpus=1))
    status, body = request(api, "GET", "/api/v1/nodes")
    assert status == 200 and body["kind"] == "NodeList" and len(body["items"]) == 2
    assert int(body["metadata"]["resourceVersion"]) == api.store.resource_version
    assert request(api, "GET", "/api/v1/namespaces/t/pods/p")[1]["metadata"]["uid"] == "u1"
    assert request(api, "GET", "/api/v1/namespaces/other/pods")[1]["items"] == []
    assert request(api, "GET", "/api/v1/pods?limit=1")[1]["metadata"]["resourceVersion"] == str(
        api.store.resource_version)
    status, body = request(api, "GET", "/api/v1/nodes/nope")
    assert status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound"
    assert request(api, "GET", "/api/v1/pods?limit=x")[0] == 400
    assert request(api, "DELETE", "/api/v1/nodes")[0] == 405
    assert request(api, "GET", "/apis/apps/v1/deployments")[0] == 404
    assert request(api, "GET", "/version")[1]["major"] == "1"


def test_binding(api: ApiServer) -> None:
    api.store.create_pod(pod_object("t", "p", "u1", gpus=1))
    node = api.store.node_names()[0]
    binding = {"metadata": {"name": "p", "annotations": {"fakehw.io/gpus": "0"}}, "target": {"name": node}}
    assert request(api, "POST", "/api/v1/namespaces/t/pods/p/binding", binding)[0] == 201
    pod = api.store.pod("t/p")
    assert pod is not None and pod["spec"]["nodeName"] == node and pod["metadata"]["annotations"]["fakehw.io/gpus"] \
        == "0"
    status, body = request(api, "POST", "/api/v1/namespaces/t/pods/p/binding", binding)
    assert status == 409 and "already assigned" in body["message"]
    assert request(api, "POST", "/api/v1/namespaces/t/pods/q/binding", binding)[0] == 404
    api.store.create_pod(pod_object("t", "q", "u2"))
    assert request(api, "POST", "/api/v1/namespaces/t/pods/q/binding", {"target": {}})[0] == 422
    assert request(api, "POST", "/api/v1/namespaces/t/pods/q/binding",
                   {"target": {"name": "no-node"}})[1]["message"] == 'nodes "no-node" not found'
    assert request(api, "POST", "/api/v1/namespaces/t/pods/q/binding",
                   {"metadata": {"uid": "other"}, "target": {"name": node}})[0] == 409


def watch_lines(api: ApiServer, path: str, count: int) -> list[dict[str, Any]]:
    host, port = api.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", path)
    resp = conn.getresponse()
    out = []
    while len(out) < count:
        line = resp.readline()
        if not line:
            break
        out.append(json.loads(line))
    conn.close()
    return out


def test_watch_events_bookmarks_and_gone(api: ApiServer) -> None:
    rv = api.store.resource_version
    api.store.create_pod(pod_object("t", "a", "u1"))
    api.store.set_nodes(node_objects(load_profile("dgx-h100", nodes=3)))  # one node ADDED
    api.store.delete_pod("t/a")
    events = watch_lines(api, f"/api/v1/pods?watch=true&resourceVersion={rv}&timeoutSeconds=2", 2)
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]  # the node event in between is no pod's
    assert events[1]["object"]["metadata"]["resourceVersion"] == str(api.store.resource_version)
    nodes = watch_lines(api, f"/api/v1/nodes?watch=true&resourceVersion={rv}&timeoutSeconds=2", 2)
    assert [e["type"] for e in nodes] == ["ADDED", "BOOKMARK"]  # the pods' last change moved the counter on
    assert nodes[1]["object"]["metadata"]["resourceVersion"] == str(api.store.resource_version)
    for i in range(10):  # push the history (8 events) past rv
        api.store.create_pod(pod_object("t", f"x{i}", f"ux{i}"))
    (gone,) = watch_lines(api, f"/api/v1/pods?watch=true&resourceVersion={rv}&timeoutSeconds=2", 1)
    assert gone["type"] == "ERROR" and gone["object"]["code"] == 410


def test_informer_follows_and_syncs(api: ApiServer) -> None:
    informer = Informer(ApiClient(api.url))
    informer.start()
    try:
        api.store.create_pod(pod_object("t", "a", "u1"))
        assert informer.sync() and "t/a" in informer.pods
        api.store.bind("t", "a", api.store.node_names()[0], {"fakehw.io/gpus": "1"})
        assert informer.sync() and informer.pods["t/a"]["spec"]["nodeName"]
        api.store.delete_pod("t/a")
        api.store.set_nodes(node_objects(load_profile("dgx-h100", nodes=1)))
        assert informer.sync() and "t/a" not in informer.pods and len(informer.nodes) == 1
        # A burst of changes past the API's history: the watch gets 410 and the informer relists.
        for i in range(30):
            api.store.create_pod(pod_object("t", f"b{i}", f"ub{i}"))
        assert wait_until(lambda: len(informer.pods) == 30, 10, interval=0.01)
    finally:
        informer.stop()


def test_concurrent_bindings_of_one_pod_bind_once(api: ApiServer) -> None:
    api.store.create_pod(pod_object("t", "p", "u1"))
    nodes = api.store.node_names()
    results: list[int] = []

    def bind(node: str) -> None:
        results.append(api.store.bind("t", "p", node).code)

    threads = [threading.Thread(target=bind, args=(nodes[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [201] + [409] * 7


def test_replicated_nodes_are_distinct_nodes_of_the_same_hardware() -> None:
    """A fleet made of a profile's nodes: names, GPU UUIDs, NVLink domains and cliques of each copy are its own
    (an extender keyed on any of them must not see two nodes as one), the hardware is the original's."""
    system = load_profile("gb200-nvl72")
    base = node_objects(system, {})
    fleet = replicated_nodes(base, 50)
    infos = [NodeInfo.from_object(o) for o in fleet]
    assert len(fleet) == 50 and [o["metadata"]["name"] for o in fleet[: len(base)]] == \
        [o["metadata"]["name"] for o in base]
    names = [i.name for i in infos]
    assert len(set(names)) == 50
    assert all(o["metadata"]["labels"]["kubernetes.io/hostname"] == o["metadata"]["name"] for o in fleet)
    uuids = [g.uuid for i in infos for g in i.gpus]
    assert len(set(uuids)) == len(uuids) and all(re.fullmatch(r"GPU-[0-9a-f-]{36}", u) for u in uuids)
    copy = infos[len(base)]
    assert copy.domain != infos[0].domain and copy.clique != infos[0].clique
    assert re.fullmatch(r"[0-9a-f-]{36}\.\d+", copy.clique or "")  # GFD's <ClusterUUID>.<CliqueId>
    assert (copy.latency, copy.pools, [g.memory for g in copy.gpus]) == \
        (infos[0].latency, infos[0].pools, [g.memory for g in infos[0].gpus])
    assert len({i.domain for i in infos[len(base): 2 * len(base)]}) == len({i.domain for i in infos[: len(base)]})
    with pytest.raises(ValueError, match="no nodes"):
        replicated_nodes([], 3)
