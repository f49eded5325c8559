"""Fault requests without an agent process: what a request may name and ask, checked against real hardware (the
H100 capture's power limits, DGX H100's 18 NVLink ports per GPU, NVIDIA's Xid list in reference/hardware.md).
Fast enough to run per mutant (``make mutate``, area "agent faults/journal"; the journal's own tests are
tests/hostile/test_journal_damage.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from fakehw.agent.faults import (
    CRITICAL_XIDS,
    FAULT_ADAPTER,
    FAULT_KINDS,
    XID_FALLEN_OFF_BUS,
    FaultTargetError,
    check_target,
    describe_kinds,
)
from fakehw.model import load_profile
from fakehw.model.spec import Name
from fakehw.model.system import Node

REFERENCE = Path("/work/shared/reference")
H100_CAPTURE = REFERENCE / "captures" / "qx-h100.xml"


def _node(profile: str) -> Node:
    return load_profile(profile).nodes[0]


def _fault(**body: Any) -> Any:
    return FAULT_ADAPTER.validate_python(body)


def _refused(fault: Any, node: Node) -> FaultTargetError:
    with pytest.raises(FaultTargetError) as info:
        check_target(fault, node)
    return info.value


@pytest.mark.skipif(not (REFERENCE / "hardware.md").is_file(), reason="needs /work/shared/reference/hardware.md")
def test_critical_xids_are_nvidias_list_but_the_informational_one() -> None:
    table = (REFERENCE / "hardware.md").read_text().split("## Xid codes worth injecting", 1)[1].split("\n## ")[0]
    listed = {int(x) for row in table.splitlines() if row.startswith("| ") and row[2].isdigit()
              for x in re.findall(r"\d+", row.split("|")[1])}
    assert listed - {154} == CRITICAL_XIDS  # 154: "recovery action changed" says what to do, it is no fault


def test_unknown_devices_are_404_and_name_what_exists() -> None:
    node = _node("dgx-h100")
    err = _refused(_fault(kind="xid", device="gpu8", code=79), node)
    assert err.status == 404 and "no GPU 'gpu8'" in str(err) and "gpu0, gpu1" in str(err) and "gpu7" in str(err)
    check_target(_fault(kind="xid", device="gpu7", code=79), node)
    err = _refused(_fault(kind="cxl-offline", device="mem0"), node)
    assert err.status == 404 and "memdevs: none" in str(err)
    err = _refused(_fault(kind="pool-shrink", device="cxl-pooled", bytes=1), node)
    assert err.status == 404 and "pools: none" in str(err)


def test_nvlink_ports_are_those_of_an_h100() -> None:
    """DGX H100: 18 NVLink4 links per GPU (reference/hardware.md), so ports 0..17."""
    node = _node("dgx-h100")
    for kind in ("nvlink-down", "nvlink-errors"):
        check_target(_fault(kind=kind, device="gpu3", link=17), node)
        err = _refused(_fault(kind=kind, device="gpu3", link=18), node)
        assert err.status == 422 and "18 connected NVLink ports; link 18 does not exist" in str(err)
    edge = _node("edge-pcie")  # L4 on PCIe: no NVLink at all
    err = _refused(_fault(kind="nvlink-down", device=edge.gpus[0].name, link=0), edge)
    assert "0 connected NVLink ports" in str(err)
    err = _refused(_fault(kind="fabric-degraded", device=edge.gpus[0].name), edge)
    assert err.status == 422 and "in no NVLink fabric" in str(err)
    check_target(_fault(kind="fabric-degraded", device="gpu0"), node)


@pytest.mark.skipif(not H100_CAPTURE.is_file(), reason="needs the H100 nvidia-smi capture")
def test_power_caps_stay_within_the_h100s_limits() -> None:
    text = H100_CAPTURE.read_text()
    low = int(float(re.search(r"<min_power_limit>([\d.]+) W<", text).group(1)))  # type: ignore[union-attr]
    high = int(float(re.search(r"<max_power_limit>([\d.]+) W<", text).group(1)))  # type: ignore[union-attr]
    node = _node("dgx-h100")
    for ok in (low, high):
        check_target(_fault(kind="power-cap", device="gpu0", limit_w=ok), node)
    for bad in (low - 1, high + 1):
        err = _refused(_fault(kind="power-cap", device="gpu0", limit_w=bad), node)
        assert err.status == 422 and f"outside h100-sxm5-80gb's range {low}..{high} W" in str(err)


def test_pool_shrink_up_to_the_pool_and_cxl_memdevs() -> None:
    node = _node("cxl-pool")
    pool = next(p for p in node.memory_pools if p.name == "cxl-pooled")
    check_target(_fault(kind="pool-shrink", device="cxl-pooled", bytes=pool.capacity), node)
    err = _refused(_fault(kind="pool-shrink", device="cxl-pooled", bytes=pool.capacity + 1), node)
    assert err.status == 422 and f"holds {pool.capacity} bytes; cannot shrink by {pool.capacity + 1}" in str(err)
    check_target(_fault(kind="cxl-offline", device="mem0"), node)
    err = _refused(_fault(kind="cxl-offline", device="mem99"), node)
    assert err.status == 404 and "mem0" in str(err)


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "xid", "device": "gpu0", "code": 0}, "code"),
    ({"kind": "xid", "device": "gpu0", "code": 1000}, "code"),
    ({"kind": "xid", "device": "gpu0"}, "code"),
    ({"kind": "nvlink-down", "device": "gpu0", "link": 36}, "link"),
    ({"kind": "ecc", "device": "gpu0", "type": "tbe"}, "type"),
    ({"kind": "ecc", "device": "gpu0", "count": 0}, "count"),
    ({"kind": "xid", "device": "", "code": 48}, "device"),
    ({"kind": "xid", "device": "g" * 65, "code": 48}, "device"),
    ({"kind": "xid", "device": "gpu0", "code": 48, "extra": 1}, "extra"),
    ({"kind": "melt", "device": "gpu0"}, "kind"),
])
def test_malformed_requests_are_refused_naming_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        FAULT_ADAPTER.validate_python(body)
    assert field in str(info.value)


@pytest.mark.parametrize(("kind", "field", "low", "high"), [
    ("xid", "code", 1, 999),
    ("nvlink-down", "link", 0, 35),  # NVML_NVLINK_MAX_LINKS is 36 in the newest nvml.h (reference/nvml.md)
    ("nvlink-errors", "link", 0, 35),
    ("nvlink-errors", "increment", 1, 2**31),
    ("ecc", "count", 1, 1_000_000),
    ("thermal", "temperature_c", 0, 150),
    ("power-cap", "limit_w", 1, 5000),
    ("pool-shrink", "bytes", 1, 2**62),
])
def test_the_control_apis_limits_are_inclusive(kind: str, field: str, low: int, high: int) -> None:
    """A request at each limit is taken, one past it is refused (the limits bound what a caller can make the agent
    hold; the ranges are the control API's)."""
    base: dict[str, Any] = {"kind": kind, "device": "gpu0", "code": 48, "link": 0, "limit_w": 300, "bytes": 1}
    base = {k: v for k, v in base.items() if k in ("kind", "device") or k in FAULT_KINDS[kind].model_fields}
    for ok in (low, high):
        assert getattr(_fault(**{**base, field: ok}), field) == ok
    for bad in (low - 1, high + 1):
        with pytest.raises(ValidationError):
            _fault(**{**base, field: bad})


def test_a_fault_request_is_a_value() -> None:
    """Requests are compared, hashed and journaled as they were received: nothing may change one afterwards."""
    fault = _fault(kind="xid", device="gpu0", code=48)
    assert fault == _fault(kind="xid", device="gpu0", code=48) and hash(fault) == hash(_fault(kind="xid",
                                                                                              device="gpu0", code=48))
    with pytest.raises(ValidationError):
        fault.code = 79


def test_request_bounds_that_are_allowed() -> None:
    assert _fault(kind="xid", device="gpu0", code=999).code == 999
    assert _fault(kind="nvlink-down", device="gpu0", link=35).link == 35
    assert _fault(kind="nvlink-errors", device="gpu0", link=0).increment == 1
    ecc = _fault(kind="ecc", device="gpu0")
    assert (ecc.type, ecc.count, ecc.location) == ("sbe", 1, "device-memory")
    # No temperature given: the agent takes one degree past the GPU's SKU slowdown when it injects (main's thermal
    # thresholds from the real captures; tests/model/test_thermal_thresholds.py), so the request leaves it unset.
    assert _fault(kind="thermal", device="gpu0").temperature_c is None


def test_the_kinds_are_described_for_the_api() -> None:
    kinds = {k["kind"]: k for k in describe_kinds()}
    assert set(kinds) == set(FAULT_KINDS) == {"xid", "fallen-off-bus", "ecc", "nvlink-down", "nvlink-errors",
                                              "thermal", "power-cap", "fabric-degraded", "cxl-offline",
                                              "pool-shrink"}
    assert kinds["xid"]["params"]["code"]["required"] is True
    assert kinds["ecc"]["params"]["count"] == {"type": "int", "default": 1, "required": False,
                                               "description": ""}
    assert kinds["cxl-offline"]["target"] == "cxl-memdev" and kinds["pool-shrink"]["target"] == "pool"
    assert kinds["fallen-off-bus"]["params"] == {} and "device" not in kinds["xid"]["params"]
    assert all(k["summary"] for k in kinds.values())


@pytest.mark.skipif(not (REFERENCE / "hardware.md").is_file(), reason="needs /work/shared/reference/hardware.md")
def test_the_fallen_off_the_bus_xid_is_nvidias() -> None:
    """NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors, as reference/hardware.md tabulates it): Xid 79 is
    "GPU has fallen off the bus". The agent raises that code for a fallen-off-bus fault and marks the GPU lost when
    an xid fault carries it, so the constant must be that row's code."""
    table = (REFERENCE / "hardware.md").read_text().split("## Xid codes worth injecting", 1)[1].split("\n## ")[0]
    row = next(r for r in table.splitlines() if "fallen off the bus" in r)
    assert int(row.split("|")[1]) == XID_FALLEN_OFF_BUS == 79


@pytest.mark.parametrize("code", ["79", 79.0, True])
def test_an_xid_code_of_another_json_type_is_refused(code: object) -> None:
    """docs/agent.md (requests): "a field is its declared type or refused with 422 (Xid code "79", 79.0 or true are
    refused)": the request is not coerced into an Xid it did not send."""
    with pytest.raises(ValidationError) as info:
        FAULT_ADAPTER.validate_python({"kind": "xid", "device": "gpu0", "code": code})
    assert "code" in str(info.value)


@pytest.mark.parametrize("length", [1, 63])
def test_every_name_a_profile_may_give_a_device_can_be_named_in_a_request(length: int) -> None:
    """A profile names devices with 1 to 63 characters (fakehw/model/spec.py, ``Name``: "at most 63 characters",
    the first a letter or digit): a fault request must be able to name any of them."""
    name = "g" * length
    assert TypeAdapter(Name).validate_python(name) == name, "a name the profile rules allow"
    assert _fault(kind="xid", device=name, code=48).device == name


def test_a_name_longer_than_any_profile_gives_is_an_unknown_device() -> None:
    """A 64-character name is one past the longest a profile may give (63) but within the API's bound on the field
    (65 is refused as malformed, above): it is a device the node does not have, answered like every unknown device
    (docs/agent.md: 404, naming the devices there are), not as a malformed request."""
    node = _node("dgx-h100")
    err = _refused(_fault(kind="xid", device="g" * 64, code=48), node)
    assert err.status == 404 and "gpu0, gpu1" in str(err)
