"""Job requirements: NVLink-aware allocation, what jobs see, disjoint GPUs."""

from __future__ import annotations

import itertools
import threading

import pytest

from conformance.suites.slurm.support import JobView, SlurmUnderTest
from fakehw.model.system import Node


def _bonds(slurm: SlurmUnderTest, node: Node, minors: tuple[int, ...]) -> list[int]:
    topo = slurm.system.topology.nodes[node.name]
    return [topo.nvlinks[a][b] for a, b in itertools.combinations(minors, 2)]


def _check_best(slurm: SlurmUnderTest, node: Node, free: tuple[int, ...], got: tuple[int, ...]) -> None:
    """``got`` (minors) must be as NVLink-joined as any set of its size among ``free``."""
    topo = slurm.system.topology.nodes[node.name]
    k = len(got)

    def links(s: tuple[int, ...]) -> int:
        return sum(topo.nvlinks[a][b] for a, b in itertools.combinations(s, 2))

    sets = list(itertools.combinations(free, k))
    best = max(links(s) for s in sets)
    joined = all(b > 0 for b in _bonds(slurm, node, got))
    can_join = any(all(topo.nvlinks[a][b] > 0 for a, b in itertools.combinations(s, 2)) for s in sets)
    assert joined or not can_join, f"{node.name}: {k} GPUs {got} are not all joined by NVLink (bonds " \
                                   f"{_bonds(slurm, node, got)}), though such a set of free GPUs {free} exists"
    assert links(got) == best, f"{node.name}: GPUs {got} share {links(got)} NVLinks; the best {k} of the free " \
                               f"{free} share {best}"


@pytest.mark.requirement("SLURM-JOB-001")
def test_multi_gpu_job_gets_nvlink_connected_gpus(slurm: SlurmUnderTest) -> None:
    for node in slurm.gpu_nodes()[:2]:
        g = len(node.gpus)
        everything = tuple(range(g))
        for k in sorted({min(2, g), min(4, g)}):
            view = slurm.probe(node.name, k)
            minors = tuple(slurm.minors(node.name)[i] for i in view.idx)
            assert len(minors) == k, view.record
            _check_best(slurm, node, everything, minors)
        if g >= 3:  # with one GPU taken by a running job, the next pair is chosen among the rest
            job, held = slurm.hold(node.name, 1, 30)
            try:
                view = slurm.probe(node.name, 2)
                minors = tuple(slurm.minors(node.name)[i] for i in view.idx)
                _check_best(slurm, node, tuple(m for m in everything if m not in held), minors)
            finally:
                slurm.cluster.run([slurm.cluster.bin["scancel"], job])


@pytest.mark.requirement("SLURM-JOB-002")
def test_allocation_is_what_the_job_sees(slurm: SlurmUnderTest) -> None:
    node = slurm.gpu_nodes()[0]
    k = min(4, len(node.gpus))
    view = slurm.probe(node.name, k)
    assert view.node == node.name
    assert len(view.idx) == k, f"no GPU index in the job record: {view.record}"
    want = slurm.uuids_of(node.name, [slurm.minors(node.name)[i] for i in view.idx])
    assert view.env["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in view.idx), view.env
    assert view.env["SLURM_STEP_GPUS"] in (",".join(str(i) for i in view.idx), None), view.env
    assert set(view.uuids) == set(want), f"the job sees {view.uuids}; Slurm allocated {want} (IDX {view.idx})"


@pytest.mark.requirement("SLURM-JOB-003")
def test_concurrent_jobs_get_disjoint_gpus(slurm: SlurmUnderTest) -> None:
    node = slurm.gpu_nodes()[0]
    g = len(node.gpus)
    sizes = [max(1, g // 2), g - max(1, g // 2)] if g > 1 else [1]
    views: list[JobView] = []
    errors: list[BaseException] = []

    def job(k: int) -> None:
        try:
            views.append(slurm.probe(node.name, k, hold_s=4.0))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=job, args=(k,)) for k in sizes if k]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors[0]
    seen = [set(v.uuids) for v in views]
    assert sum(len(s) for s in seen) == len(set().union(*seen)), f"jobs share GPUs: {[sorted(s) for s in seen]}"
    assert all(len(v.uuids) == len(v.idx) for v in views), [v.record for v in views]
