"""GPU temperature thresholds are the real boards', and the thermal fault behaves as they would.

Drivers 570 and later print Hopper/Blackwell thresholds relative to T.Limit (``gpu_temp_tlimit`` is the margin
below it; ``*_tlimit_threshold`` the margin at which the board slows down or shuts down). T.Limit itself is
``gpu_temp + gpu_temp_tlimit`` (the same on every GPU of a capture, to a degree), so the absolute thresholds NVML
answers for ``NVML_TEMPERATURE_THRESHOLD_SHUTDOWN`` etc. are T.Limit minus those margins. A100 (570) prints them
absolute. The expected values come from the captures in /work/shared/reference/captures, not from the model.
"""

from __future__ import annotations

import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fakehw.agent.service import AgentService
from fakehw.agent.state import THROTTLE_HW_THERMAL
from fakehw.model import load_profile
from fakehw.model.catalogue import catalogue

CAPTURES = Path("/work/shared/reference/captures")
SKU_OF = {"qx-h100.xml": "h100-sxm5-80gb", "qx-b200.xml": "b200-sxm6-180gb", "qx-gb200.xml": "gb200",
          "qx-a100.xml": "a100-sxm4-40gb"}


def _celsius(text: str | None) -> int:
    assert text is not None and text.endswith(" C"), text
    return int(text.split()[0])


def _thresholds(capture: Path) -> dict[str, int]:
    """slowdown, shutdown and max operating temperature (absolute, C) as the board reported them."""
    gpus = ET.parse(capture).getroot().findall("gpu")
    temps = [{e.tag: e.text for e in g.iterfind("temperature/*")} for g in gpus]
    first = temps[0]
    if first.get("gpu_temp_tlimit", "N/A") == "N/A":
        return {"slowdown": _celsius(first["gpu_temp_slow_threshold"]),
                "shutdown": _celsius(first["gpu_temp_max_threshold"]),
                "max_operating": _celsius(first["gpu_temp_max_gpu_threshold"])}
    tlimit = round(statistics.median(_celsius(t["gpu_temp"]) + _celsius(t["gpu_temp_tlimit"]) for t in temps))
    return {"slowdown": tlimit - _celsius(first["gpu_temp_slow_tlimit_threshold"]),
            "shutdown": tlimit - _celsius(first["gpu_temp_max_tlimit_threshold"]),
            "max_operating": tlimit - _celsius(first["gpu_temp_max_gpu_tlimit_threshold"])}


@pytest.mark.skipif(not CAPTURES.is_dir(), reason="needs the real-hardware captures (/work/shared/reference)")
@pytest.mark.parametrize("capture", sorted(SKU_OF))
def test_thresholds_are_the_captured_boards(capture: str) -> None:
    want = _thresholds(CAPTURES / capture)
    thermal = catalogue().gpus[SKU_OF[capture]].thermal
    assert {"slowdown": thermal.slowdown_c, "shutdown": thermal.shutdown_c,
            "max_operating": thermal.max_operating_c} == want


def test_the_default_thermal_fault_throttles_below_shutdown_and_shutdown_is_unhealthy(tmp_path: Path) -> None:
    system = load_profile("dgx-h100")
    sku = system.nodes[0].gpus[0].sku
    service = AgentService(system, tmp_path, files="on-demand")  # the state is checked, not the files
    node = system.nodes[0].name
    fault = service.inject(node, {"kind": "thermal", "device": "gpu0"})
    temperature = fault.request.temperature_c  # type: ignore[attr-defined]
    assert temperature is not None and sku.thermal.slowdown_c <= temperature < sku.thermal.shutdown_c
    gpu = service.state(node).gpu("gpu0")
    assert gpu is not None and gpu.temperature_c == temperature
    assert gpu.throttle_reasons & THROTTLE_HW_THERMAL and gpu.health == "degraded"
    service.inject(node, {"kind": "thermal", "device": "gpu1", "temperature_c": sku.thermal.shutdown_c})
    hot = service.state(node).gpu("gpu1")
    assert hot is not None and hot.health == "unhealthy"
    assert f"past its {sku.thermal.shutdown_c} C shutdown temperature" in " ".join(hot.reasons)
