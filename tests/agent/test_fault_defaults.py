"""A thermal fault without a temperature heats the GPU to 1 C past its slowdown threshold (docs/agent.md, fault
kinds), judged against the real board: the T4 capture (../shared/reference/captures/qx-t4.xml, nvidia-smi -q -x)
reports gpu_temp_slow_threshold 93 C and gpu_temp_max_threshold (shutdown) 96 C, so the default is 94 C: slowed
down, not shut down."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

import pytest

from fakehw.agent.faults import FAULT_ADAPTER, Thermal, check_target, with_device_defaults
from fakehw.model import load_profile
from fakehw.model.system import Node
from tests.nvml.captures import capture_dir


def _threshold(name: str) -> int:
    captures = capture_dir()
    if captures is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    text = ET.parse(captures / "qx-t4.xml").getroot().findtext(f"gpu/temperature/{name}")
    assert text is not None and text.endswith(" C"), text
    return int(text.split()[0])


def test_a_thermal_fault_defaults_to_one_degree_past_the_real_boards_slowdown() -> None:
    slowdown, shutdown = _threshold("gpu_temp_slow_threshold"), _threshold("gpu_temp_max_threshold")
    node = load_profile("t4-cloud").nodes[0]
    fault = FAULT_ADAPTER.validate_python({"kind": "thermal", "device": node.gpus[0].name})
    check_target(fault, node)
    filled = with_device_defaults(fault, node)
    assert isinstance(filled, Thermal)
    assert filled.temperature_c == slowdown + 1 == 94 and filled.temperature_c < shutdown


def test_a_thermal_fault_with_a_temperature_keeps_it() -> None:
    node = load_profile("t4-cloud").nodes[0]
    fault = FAULT_ADAPTER.validate_python({"kind": "thermal", "device": node.gpus[0].name, "temperature_c": 70})
    filled = with_device_defaults(fault, node)
    assert isinstance(filled, Thermal) and filled.temperature_c == 70


def _t4_node_with_thresholds(slowdown: int, shutdown: int) -> Node:
    """t4-cloud's node with its GPU's SKU given other slowdown and shutdown thresholds."""
    node = load_profile("t4-cloud").nodes[0]
    gpu = node.gpus[0]
    thermal = gpu.sku.thermal.model_copy(update={"slowdown_c": slowdown, "shutdown_c": shutdown})
    sku = gpu.sku.model_copy(update={"thermal": thermal})
    return dataclasses.replace(node, gpus=(dataclasses.replace(gpu, sku=sku), *node.gpus[1:]))


def test_the_default_throttles_and_never_shuts_the_gpu_down() -> None:
    """docs/agent.md (fault kinds): the GPU throttles *from* its SKU's slowdown threshold and is unhealthy *from* its
    shutdown threshold; the thermal kind's summary promises "just past slowdown, so clocks throttle". On a SKU whose
    two thresholds are one degree apart (none in today's catalogue: its closest pair is 91/93 C) no temperature is
    past slowdown and below shutdown, and the default must still only throttle: the slowdown threshold itself (90 C
    of 90/91), never the shutdown one."""
    node = _t4_node_with_thresholds(90, 91)
    fault = FAULT_ADAPTER.validate_python({"kind": "thermal", "device": node.gpus[0].name})
    check_target(fault, node)
    filled = with_device_defaults(fault, node)
    assert isinstance(filled, Thermal) and filled.temperature_c == 90


@pytest.mark.parametrize("body", [
    {"kind": "xid", "device": "gpu0", "code": 79},
    {"kind": "ecc", "device": "gpu0", "type": "dbe"},
    {"kind": "power-cap", "device": "gpu0", "limit_w": 60},
])
def test_a_fault_without_device_dependent_parameters_is_left_as_it_was_asked(body: dict[str, object]) -> None:
    """docs/agent.md (fault kinds): only the thermal kind has a default that depends on the GPU (its SKU's slowdown
    threshold); every other kind is injected as it was asked. Filling in the defaults leaves such a request equal to
    itself (60 W is the T4 capture's min_power_limit, so the power cap checks out on t4-cloud)."""
    node = load_profile("t4-cloud").nodes[0]
    fault = FAULT_ADAPTER.validate_python({**body, "device": node.gpus[0].name})
    check_target(fault, node)
    assert with_device_defaults(fault, node) == fault
