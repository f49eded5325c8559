"""The reference extender's view of the cluster (testbed/reference/extender/policy.py, ``Snapshot`` and the node
grouping of ``Policy``): pods that go away, gang members bound without a booking, nodes of different templates.
Each expected answer is worked out by hand from the profiles' documented hardware and Kubernetes' own rules."""

from __future__ import annotations

from fakehw.views.k8s import NodeInfo
from testbed.reference.extender.policy import Flags, Placement, Policy, Refusal, Snapshot, parse_bound
from tests.scheduler.test_reference_policy import bound, infos, req


def test_a_deleted_pod_is_no_preemption_victim_and_frees_its_gpu() -> None:
    """Kubernetes' watch reports a deleted pod (DELETED), and the extender's cache drops it (``Snapshot.put`` with
    nothing). A DGX H100 (8 GPUs) whose GPUs 8 pods of priority 100 held, one of which is gone: 7 GPUs are held, 1
    is free. kube-scheduler's preemption ("Pod Priority and Preemption", kubernetes.io) evicts pods that exist, of
    lower priority: a 2-GPU pod of priority 101 needs 1 victim besides the free GPU, and the gone pod, even when
    offered, is neither a victim nor counted as holding anything."""
    nodes = infos("dgx-h100", nodes=1)
    (name,) = nodes
    held = [b for i in range(8) if (b := parse_bound(bound("x", f"x{i}", name, (i,), priority=100))) is not None]
    snap = Snapshot(nodes, held, Flags())
    snap.put("x/x0", None)
    assert sorted(snap.pods) == [f"uid-x{i}" for i in range(1, 8)]
    assert sorted(snap.use_of(name).held) == list(range(1, 8))
    victims = Policy(snap).victims(req(gpus=2, priority=101), name, ["uid-x0"])
    assert victims is not None and len(victims) == 1 and victims[0] != "uid-x0", victims


def test_a_gang_member_bound_without_a_booking_books_nothing() -> None:
    """docs/scheduler.md (gangs): the booking lives in the cluster, as the plan, domain and token the binder writes
    onto every member. A member that was bound without them (kube-scheduler binds itself when no extender binds;
    docs/scheduler.md: "without one the kubelet places it and the extender must count it") holds its own GPUs and
    books nothing. Two DGX H100 nodes (8 GPUs each, each its own NVLink domain); such a member holds GPUs 0-3 of a.
    Nothing is booked, so the next member (4 GPUs) plans its gang afresh, a node for every one of its 2 members in
    one domain (docs/scheduler.md), fewest nodes first: a has room for one 4-GPU member, b for both, so the plan
    is b's and the member passes there (a is unresolvable: the gang is booked elsewhere)."""
    nodes = infos("dgx-h100", nodes=2)
    a, b = sorted(nodes)
    first = bound("t", "m0", a, (0, 1, 2, 3), gang="g", gang_size=2)  # no gang-plan annotations
    snap = Snapshot(nodes, [x for x in (parse_bound(first),) if x is not None], Flags())
    assert sorted(snap.use_of(a).held) == [0, 1, 2, 3] and snap.use_of(a).booked == 0
    passed, failed, unresolvable = Policy(snap).filter(req(gpus=4, gang="g", gang_size=2, name="m1"), [a, b])
    assert passed == [b] and not failed and list(unresolvable) == [a], (passed, failed, unresolvable)
    assert f"booked on {nodes[b].domain}" in unresolvable[a], unresolvable


def _two_kinds() -> tuple[dict[str, NodeInfo], str, str]:
    dgx = infos("dgx-h100", nodes=1)
    tray_name = sorted(trays := infos("gb200-nvl72"))[0]
    (dgx_name,) = dgx
    return {dgx_name: dgx[dgx_name], tray_name: trays[tray_name]}, dgx_name, tray_name


def test_nodes_of_different_templates_are_judged_each_on_its_own() -> None:
    """The extender groups unused nodes by template (equal static facts) and evaluates each group once. Nodes of two
    templates are two groups: a DGX H100 has 8 GPUs (NVIDIA DGX H100 user guide; profile dgx-h100), a GB200 NVL72
    compute tray 4 (2 Grace CPUs, 4 Blackwell GPUs; profile gb200-nvl72). An 8-GPU pod fits the DGX only; the tray
    cannot hold it however many pods were evicted, so it is unresolvable (ExtenderFilterResult's
    FailedAndUnresolvableNodes). A 1-GPU pod fits both."""
    nodes, dgx, tray = _two_kinds()
    assert len(nodes[dgx].gpus) == 8 and len(nodes[tray].gpus) == 4
    policy = Policy(Snapshot(nodes, [], Flags()), {dgx: "dgx-h100", tray: "gb200-tray"}, {})
    verdicts = policy.evaluate_many(req(gpus=8), [dgx, tray])
    assert isinstance(verdicts[dgx], Placement) and isinstance(verdicts[tray], Refusal), verdicts
    passed, failed, unresolvable = policy.filter(req(name="q", gpus=8), [tray, dgx])
    assert passed == [dgx] and not failed and list(unresolvable) == [tray], (passed, failed, unresolvable)
    small = policy.evaluate_many(req(name="s", gpus=1), [dgx, tray])
    assert all(isinstance(v, Placement) for v in small.values()), small
