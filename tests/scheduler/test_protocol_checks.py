"""Bad extender answers become failed checks with the offending body, never exceptions; config errors are clear."""

from __future__ import annotations

import json

import pytest

from fakehw.model import load_profile
from fakehw.views.k8s import node_objects, pod_object
from testbed.extender.process import ExtenderTarget, TargetError
from testbed.extender.protocol import (
    ConfigError,
    ExtenderClient,
    ExtenderConfig,
    decode_filter,
    decode_priorities,
    extender_args,
    preemption_args,
)
from tests.scheduler.conftest import ScriptedExtender

NODES = node_objects(load_profile("dgx-h100", nodes=3))
NAMES = [n["metadata"]["name"] for n in NODES]
POD = pod_object("t", "p", "uid-1", gpus=1)


def client(ext: ScriptedExtender, **kw: object) -> ExtenderClient:
    stanza = {"urlPrefix": ext.url, "filterVerb": "filter", "prioritizeVerb": "prioritize", "bindVerb": "bind",
              "preemptVerb": "preempt", "nodeCacheCapable": True, "httpTimeout": "2s", **kw}
    return ExtenderClient(ExtenderConfig.from_stanza(stanza))


def failed(result: object) -> dict[str, str]:
    return {c.name: c.message for c in result.failed_checks}  # type: ignore[attr-defined]


def test_good_filter_answer(scripted: ScriptedExtender) -> None:
    scripted.script.json("filter", {"NodeNames": NAMES[:2], "FailedNodes": {NAMES[2]: "full"},
                                    "FailedAndUnresolvableNodes": {}, "Error": ""})
    r = client(scripted).filter(extender_args(POD, NODES, True), NAMES)
    assert r.ok and r.value is not None and r.value.passed == tuple(NAMES[:2]) and not r.failed_checks
    verb, sent = scripted.script.requests[0]
    assert verb == "filter" and sent["NodeNames"] == NAMES and sent["Nodes"] is None and sent["Pod"]["metadata"]["uid"]


def test_objects_are_sent_when_not_node_cache_capable(scripted: ScriptedExtender) -> None:
    scripted.script.call("filter", lambda req: {"Nodes": {"items": req["Nodes"]["items"][:1]}, "NodeNames": None,
                                                "FailedNodes": {n: "no" for n in NAMES[1:]}})
    r = client(scripted, nodeCacheCapable=False).filter(extender_args(POD, NODES, False), NAMES)
    assert r.ok and r.value is not None and r.value.passed == (NAMES[0],) and not r.failed_checks
    assert scripted.script.requests[0][1]["NodeNames"] is None


def test_malformed_json_is_a_failed_check_with_the_body(scripted: ScriptedExtender) -> None:
    scripted.script.raw("filter", b"{this is not json")
    r = client(scripted).filter(extender_args(POD, NODES, True), NAMES)
    assert not r.ok and "not JSON" in (r.error or "")
    assert failed(r)["json"].startswith("the body is not JSON")
    assert next(c for c in r.failed_checks if c.name == "json").evidence["body"] == "{this is not json"


def test_non_200_is_a_failed_check_with_status_and_body(scripted: ScriptedExtender) -> None:
    scripted.script.raw("filter", b"boom", status=503)
    r = client(scripted).filter(extender_args(POD, NODES, True), NAMES)
    assert not r.ok and r.status == 503 and r.error == f"HTTP 503 from {scripted.url}/filter"
    check = next(c for c in r.failed_checks if c.name == "status")
    assert check.evidence == {"status": 503, "body": "boom"} and "only 200" in check.message


def test_snake_case_keys_are_dropped_as_go_would(scripted: ScriptedExtender) -> None:
    scripted.script.json("filter", {"node_names": NAMES, "failed_nodes": {}, "error": ""})
    r = client(scripted).filter(extender_args(POD, NODES, True), NAMES)
    assert r.ok and r.value is not None and r.value.passed == ()  # kube-scheduler sees no node passing
    msgs = failed(r)
    assert "node_names" in msgs["json-keys"] and "Go field names" in msgs["json-keys"]
    assert "neither passed nor failed" in msgs["accounted"]
    assert "node_names" in next(c for c in r.failed_checks if c.name == "json-keys").evidence["body"]


def test_case_mismatched_keys_decode_but_fail_the_spelling_check(scripted: ScriptedExtender) -> None:
    scripted.script.json("filter", {"nodenames": NAMES, "Error": ""})
    r = client(scripted).filter(extender_args(POD, NODES, True), NAMES)
    assert r.ok and r.value is not None and r.value.passed == tuple(NAMES)
    assert "nodenames (field NodeNames)" in failed(r)["json-keys-case"]


@pytest.mark.parametrize(("body", "problem"), [
    ({"NodeNames": "all"}, "cannot unmarshal string into Go value of type []string"),
    ({"NodeNames": [1]}, "cannot unmarshal number into Go value of type string"),
    ({"FailedNodes": ["x"]}, "map[string]string"),
    ({"Nodes": {"items": [{"spec": {}}]}}, "not a Node object"),
    ([1, 2], "cannot unmarshal array into a Go struct"),
])
def test_wrong_types_fail_the_call(scripted: ScriptedExtender, body: object, problem: str) -> None:
    scripted.script.json("filter", body)
    r = client(scripted).filter(extender_args(POD, NODES, True), NAMES)
    assert not r.ok and problem in (r.error or "")
    assert problem in failed(r)["shape"]


def test_filter_content_checks(scripted: ScriptedExtender) -> None:
    scripted.script.json("filter", {"NodeNames": [NAMES[0], NAMES[0], "ghost"], "FailedNodes": {NAMES[0]: "x"}})
    r = client(scripted).filter(extender_args(POD, NODES, True), NAMES)
    msgs = failed(r)
    assert "ghost" in msgs["known-nodes"]
    assert NAMES[0] in msgs["consistent"]
    assert NAMES[1] in msgs["accounted"]
    assert r.value is not None and r.value.passed == (NAMES[0],)


class CountedName(str):
    """A node name that counts how often it is compared for equality (the cost of a check, without a clock)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountedName.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_answer_checks_compare_each_name_a_bounded_number_of_times() -> None:
    """The checks of a 10,000-node answer (issue 19: ``list.count`` per name made one check 1.1 s at 10,000 nodes,
    quadratic): every name is compared for equality a bounded number of times, duplicates are still found."""
    n = 10_000
    sent = [CountedName(f"node-{i}") for i in range(n)]
    returned = [CountedName(f"node-{i}") for i in range(n)] + [CountedName("node-7"), CountedName("node-7")]
    CountedName.compared = 0
    value, error, checks = decode_filter({"NodeNames": returned}, sent, True, "")
    assert error is None and value is not None
    assert "node-7" in next(c for c in checks if c.name == "consistent").message
    priorities = [{"Host": h, "Score": 1} for h in returned]
    _, _, checks = decode_priorities(priorities, sent, "")
    assert "node-7" in next(c for c in checks if c.name == "known-nodes").message
    assert CountedName.compared < 20 * n, f"{CountedName.compared} comparisons for {n} names: not linear"


def test_error_field_fails_the_call(scripted: ScriptedExtender) -> None:
    scripted.script.json("filter", {"Error": "cannot reach my cache"})
    r = client(scripted).filter(extender_args(POD, NODES, True), NAMES)
    assert not r.ok and r.error == "extender error: cannot reach my cache"


def test_answering_the_wrong_node_form(scripted: ScriptedExtender) -> None:
    scripted.script.call("filter", lambda req: {"Nodes": {"items": NODES}})
    r = client(scripted).filter(extender_args(POD, NODES, True), NAMES)
    assert "answered with Nodes, not NodeNames" in failed(r)["node-names"]
    scripted.script.json("filter", {"NodeNames": NAMES})
    r = client(scripted, nodeCacheCapable=False).filter(extender_args(POD, NODES, False), NAMES)
    assert "sees no node passing" in failed(r)["node-names"] and r.value is not None and r.value.passed == ()


def test_priorities(scripted: ScriptedExtender) -> None:
    scripted.script.json("prioritize", [{"Host": NAMES[0], "Score": 10}, {"Host": NAMES[1], "Score": 0}])
    r = client(scripted).prioritize(extender_args(POD, NODES, True), NAMES)
    assert r.ok and not r.failed_checks and [p.score for p in r.value or ()] == [10, 0]
    scripted.script.json("prioritize", [{"Host": NAMES[0], "Score": 55}, {"Host": "ghost", "Score": 1},
                                        {"Host": NAMES[1], "Score": -1}, {"Host": NAMES[1], "Score": 2}])
    r = client(scripted).prioritize(extender_args(POD, NODES, True), NAMES)
    msgs = failed(r)
    assert f"{NAMES[0]}=55" in msgs["score-range"] and f"{NAMES[1]}=-1" in msgs["score-range"]
    assert "ghost" in msgs["known-nodes"] and "listed twice" in msgs["known-nodes"]
    assert "55" in next(c for c in r.failed_checks if c.name == "score-range").evidence["body"]


@pytest.mark.parametrize(("body", "problem"), [
    ([{"Host": "a", "Score": 7.5}], "cannot unmarshal number 7.5 into Go value of type int64"),
    ([{"Host": "a", "Score": "7"}], "cannot unmarshal string into Go value of type int64"),
    ({"Host": "a"}, "cannot unmarshal object into Go value of type HostPriorityList"),
    ([{"Host": "a", "Score": 2**70}], "overflows int64"),
])
def test_bad_priorities_fail_the_call(scripted: ScriptedExtender, body: object, problem: str) -> None:
    scripted.script.json("prioritize", body)
    r = client(scripted).prioritize(extender_args(POD, NODES, True), NAMES)
    assert not r.ok and problem in (r.error or "") and problem in failed(r)["shape"]


def test_lower_case_priority_keys(scripted: ScriptedExtender) -> None:
    scripted.script.json("prioritize", [{"host": NAMES[0], "score": 3}])
    r = client(scripted).prioritize(extender_args(POD, NODES, True), NAMES)
    assert r.ok and r.value is not None and r.value[0].score == 3
    assert "json-keys-case" in failed(r)


def test_timeouts_and_unreachable(scripted: ScriptedExtender) -> None:
    scripted.script.json("filter", {"NodeNames": NAMES})
    scripted.script.delays["filter"] = 1.5
    r = client(scripted, httpTimeout="300ms").filter(extender_args(POD, NODES, True), NAMES)
    assert not r.ok and r.timed_out and "timed out after 0.3 s" in (r.error or "") and r.elapsed < 1.4
    dead = ExtenderClient(ExtenderConfig("http://127.0.0.1:9", http_timeout=1.0))
    r = dead.filter(extender_args(POD, NODES, True), NAMES)
    assert not r.ok and not r.timed_out and "connection failed" in failed(r)["reachable"]


def test_bind_and_preempt_answers(scripted: ScriptedExtender) -> None:
    c = client(scripted)
    scripted.script.json("bind", {"Error": ""})
    r = c.bind({"PodName": "p", "PodNamespace": "t", "PodUID": "u", "Node": NAMES[0]})
    assert r.ok and r.value == ""
    assert scripted.script.requests[-1][1] == {"PodName": "p", "PodNamespace": "t", "PodUID": "u", "Node": NAMES[0]}
    scripted.script.json("bind", {"Error": "no room"})
    r = c.bind({})
    assert not r.ok and r.error == "extender bind error: no room"
    scripted.script.json("bind", {"Error": 5})
    assert "cannot unmarshal number into Go value of type string" in (c.bind({}).error or "")
    victims = {NAMES[0]: [pod_object("t", "v", "uid-v")]}
    scripted.script.json("preempt", {"NodeNameToMetaVictims": {NAMES[0]: {"Pods": [{"UID": "uid-v"}]},
                                                               "elsewhere": {"Pods": []}}})
    r = c.preempt(preemption_args(POD, victims, True), {NAMES[0]: ["uid-v"]})
    assert r.value is not None and r.value.victims[NAMES[0]] == ("uid-v",)
    assert "elsewhere" in failed(r)["known-nodes"]
    sent = scripted.script.requests[-1][1]
    assert sent["NodeNameToMetaVictims"] == {NAMES[0]: {"Pods": [{"UID": "uid-v"}], "NumPDBViolations": 0}}
    scripted.script.json("preempt", {"NodeNameToMetaVictims": {NAMES[0]: {"Pods": "all"}}})
    assert "Pods: not an array" in (c.preempt(preemption_args(POD, victims, True), {}).error or "")


def test_a_node_offered_victims_answered_with_none_is_a_failed_check(scripted: ScriptedExtender) -> None:
    """kube-scheduler's preemption (pkg/scheduler/framework/preemption, callExtenders) fails as a whole, "expected at
    least one victim pod on node", when a non-ignorable extender answers a node it was offered victims on with an
    empty list (an extender turns a node down by leaving it out). A node offered no victims and answered with none
    is no such answer."""
    c = client(scripted)
    victims = {NAMES[0]: [pod_object("t", "v", "uid-v")], NAMES[1]: []}
    scripted.script.json("preempt", {"NodeNameToMetaVictims": {NAMES[0]: {"Pods": []}, NAMES[1]: {"Pods": []}}})
    r = c.preempt(preemption_args(POD, victims, True), {NAMES[0]: ["uid-v"], NAMES[1]: []})
    assert r.value is not None and failed(r) == {"victims-per-node": failed(r)["victims-per-node"]}, failed(r)
    assert failed(r)["victims-per-node"].endswith(f"expected at least one victim pod on node): {NAMES[0]}")
    scripted.script.json("preempt", {"NodeNameToMetaVictims": {NAMES[1]: {"Pods": []}}})
    assert not c.preempt(preemption_args(POD, victims, True), {NAMES[0]: ["uid-v"], NAMES[1]: []}).failed_checks


@pytest.mark.parametrize(("stanza", "problem"), [
    ({"urlPrefix": "ftp://x"}, "not an http(s) URL"),
    ({"urlPrefix": "http://x:1", "prioritizeVerb": "p", "weight": 0}, "weight must be > 0"),
    ({"urlPrefix": "http://x:1", "httpTimeout": "soon"}, "not a duration"),
    ({"urlPrefix": "http://x:1", "enableHTTPS": True}, "plain HTTP"),
    ({"urlPrefix": "http://x:1", "bindverb": "b"}, "unknown extender keys: bindverb"),
    ({"filterVerb": "f"}, "urlPrefix is required"),
])
def test_config_errors(stanza: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        ExtenderConfig.from_stanza(stanza)


@pytest.mark.parametrize(("spec", "problem"), [
    ("reference:nope", "no mutant 'nope'"),
    ("cmd:", "needs a command"),
    ("url:https://x", "url: needs http://host:port"),
    ("ftp://x", "use reference, reference:MUTANT"),
    ("reference?color=blue", "'color' is not a kube-scheduler extender setting"),
])
def test_target_errors(spec: str, problem: str) -> None:
    with pytest.raises(TargetError, match=problem):
        ExtenderTarget.parse(spec)


def test_target_stanza_overrides() -> None:
    t = ExtenderTarget.parse("reference?nodeCacheCapable=false&weight=3")
    cfg = t.config("http://127.0.0.1:1")
    assert not cfg.node_cache_capable and cfg.weight == 3 and cfg.bind_verb == "bind"
    assert ExtenderTarget.parse("url:http://127.0.0.1:8888/ext").config("http://127.0.0.1:8888/ext").url_prefix \
        == "http://127.0.0.1:8888/ext"
    assert json.loads(json.dumps(t.describe())) == "reference"
