"""Ray's GPU autodetection against the model: count, accelerator type, per-task visibility."""

from __future__ import annotations

import pytest

from conformance.suites.ray.conftest import RayView


def accelerator_type(view: RayView) -> str:
    """What Ray names the model's GPU: the word after the vendor in the product name (NVIDIA H100 80GB HBM3)."""
    return view.node.gpus[0].sku.name.split()[1]


@pytest.mark.requirement("RAY-GPU-001")
def test_gpu_count(ray_views: list[RayView]) -> None:
    for v in ray_views:
        got = v.full["resources"].get("GPU", 0)
        assert got == len(v.node.gpus), f"{v.node.name}: Ray offers {got} GPUs, the model has {len(v.node.gpus)} " \
                                        f"({v.full['resources']})"


@pytest.mark.requirement("RAY-GPU-002")
def test_accelerator_type(ray_views: list[RayView]) -> None:
    for v in ray_views:
        want = f"accelerator_type:{accelerator_type(v)}"
        types = sorted(k for k in v.full["resources"] if k.startswith("accelerator_type:"))
        assert types == [want], f"{v.node.name} ({v.node.gpus[0].sku.name}): Ray reports {types}, expected {want}"


@pytest.mark.requirement("RAY-GPU-003")
def test_tasks_get_disjoint_gpus(ray_views: list[RayView]) -> None:
    for v in ray_views:
        tasks = v.full["tasks"]
        assert all(t["together"] for t in tasks), f"{v.node.name}: the tasks did not run at the same time: {tasks}"
        seen: list[str] = []
        for t in tasks:
            assert len(t["gpu_ids"]) == 1 and t["cuda"] == ",".join(t["gpu_ids"]), t
            seen += t["gpu_ids"]
        assert len(seen) == len(set(seen)), f"{v.node.name}: tasks share GPUs: {tasks}"
        assert {int(x) for x in seen} <= set(range(len(v.node.gpus))), tasks


@pytest.mark.requirement("RAY-GPU-004")
def test_cuda_visible_devices_limits_gpus(ray_views: list[RayView]) -> None:
    for v in ray_views:
        got = v.limited["resources"].get("GPU", 0)
        assert got == len(v.visible), f"{v.node.name}: started with CUDA_VISIBLE_DEVICES={v.limited['visible']}, " \
                                      f"Ray offers {got} GPUs"
        ids = {t["cuda"] for t in v.limited["tasks"]}
        assert ids == {str(i) for i in v.visible}, f"{v.node.name}: tasks got {sorted(ids)} of {v.visible}"
