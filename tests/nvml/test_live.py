"""Live faults through the testbed: an already running NVML consumer sees every change on its next call.

The consumer (tests/nvml/consumer.py) initialises NVML once and keeps its handles; the test injects faults
through the agent, exactly as ``testbed inject`` does, and compares what the consumer reads with the state the
agent reports. Healing must give back the model's values.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fakehw.agent.state import EVENT_DOUBLE_BIT_ECC, EVENT_XID
from testbed.api import Testbed
from testbed.environment import merged_environment
from tests.nvml.captures import number
from tests.nvml.helpers import Consumer

NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_TIMEOUT = 10
CLOCKS_EVENT_REASON_GPU_IDLE = 0x1  # nvmlClocksEventReasonGpuIdle


@pytest.fixture
def consumers() -> Iterator[Callable[[Testbed, str], Consumer]]:
    made: list[Consumer] = []

    def start(tb: Testbed, node: str) -> Consumer:
        c = Consumer(merged_environment(tb.node(node).env))
        made.append(c)
        return c

    yield start
    for c in made:
        c.close()


def test_blocked_wait_receives_xid_79_then_gpu_is_lost(testbed_factory: Callable[..., Testbed],
                                                      consumers: Callable[[Testbed, str], Consumer],
                                                      h100: dict[str, str]) -> None:
    """Acceptance: a process blocked in nvmlEventSetWait_v2 gets the injected Xid 79, then GPU_IS_LOST for that
    device, while the other devices keep answering."""
    tb = testbed_factory("dgx-h100")
    node = tb.system.nodes[0]
    c = consumers(tb, node.name)
    assert c.count == len(node.gpus)
    assert c.ask({"register": EVENT_XID}) ["ok"] is True
    lost = node.gpu("gpu3")
    assert lost is not None
    c.send({"wait": 20000})  # the consumer is now blocked in nvmlEventSetWait_v2
    time.sleep(0.2)
    tb.inject(node.name, "xid", "gpu3", code=79)
    event = c._read(20)
    assert event["ok"] == {"device": lost.index, "type": EVENT_XID, "data": 79}
    assert c.call("nvmlDeviceGetMemoryInfo", f"$dev:{lost.index}") == ("err", NVML_ERROR_GPU_IS_LOST)
    assert c.call("nvmlDeviceGetUUID", f"$dev:{lost.index}") == ("err", NVML_ERROR_GPU_IS_LOST)
    for gpu in node.gpus:
        if gpu is not lost:
            assert c.call("nvmlDeviceGetUUID", f"$dev:{gpu.index}") == gpu.uuid
            total = c.call("nvmlDeviceGetMemoryInfo", f"$dev:{gpu.index}")["total"]
            assert total // 2**20 == number(h100["/fb_memory_usage/total"])
    assert c.ask({"wait": 2000}) ["err"] == NVML_ERROR_GPU_IS_LOST
    state = tb.state(node.name)
    assert next(g for g in state["gpus"] if g["name"] == "gpu3")["lost"] is True


def test_running_process_follows_faults_and_heal(testbed_factory: Callable[..., Testbed],
                                                consumers: Callable[[Testbed, str], Consumer],
                                                h100: dict[str, str]) -> None:
    tb = testbed_factory("dgx-h100")
    node = tb.system.nodes[0]
    c = consumers(tb, node.name)
    before = {g.index: (c.call("nvmlDeviceGetTemperature", f"$dev:{g.index}", 0),
                        c.call("nvmlDeviceGetPowerManagementLimit", f"$dev:{g.index}"),
                        c.call("nvmlDeviceGetCurrentClocksThrottleReasons", f"$dev:{g.index}"))
              for g in node.gpus}
    gpu = node.gpus[4]
    # an idle H100: the captured temperature and power limit, "GPU idle" the only clock event reason
    assert h100["/clocks_event_reasons/clocks_event_reason_gpu_idle"] == "Active"
    assert before[4] == (number(h100["/temperature/gpu_temp"]),
                         number(h100["/gpu_power_readings/current_power_limit"]) * 1000, CLOCKS_EVENT_REASON_GPU_IDLE)

    def gstate(name: str) -> dict[str, Any]:
        return next(g for g in tb.state(node.name)["gpus"] if g["name"] == name)

    tb.inject(node.name, "thermal", "gpu4", temperature_c=99)
    tb.inject(node.name, "power-cap", "gpu4", limit_w=gpu.sku.power.min_limit_w)
    st = gstate("gpu4")
    assert c.call("nvmlDeviceGetTemperature", "$dev:4", 0) == st["temperature_c"] == 99
    assert c.call("nvmlDeviceGetPowerManagementLimit", "$dev:4") == st["power_limit_w"] * 1000
    reasons = c.call("nvmlDeviceGetCurrentClocksThrottleReasons", "$dev:4")
    assert reasons & ~CLOCKS_EVENT_REASON_GPU_IDLE == st["throttle_reasons"] != 0

    assert c.ask({"register": EVENT_XID | EVENT_DOUBLE_BIT_ECC})["ok"] is True
    tb.inject(node.name, "ecc", "gpu1", type="dbe", count=2, location="device-memory")
    got = [c.ask({"wait": 5000})["ok"] for _ in range(2)]
    assert {(e["device"], e["type"]) for e in got} == {(1, EVENT_DOUBLE_BIT_ECC), (1, EVENT_XID)}
    assert next(e for e in got if e["type"] == EVENT_XID)["data"] == 48
    assert c.call("nvmlDeviceGetTotalEccErrors", "$dev:1", 1, 0) == sum(gstate("gpu1")["ecc_dbe"].values()) == 2

    tb.inject(node.name, "nvlink-down", "gpu2", link=5)
    assert c.call("nvmlDeviceGetNvLinkState", "$dev:2", 5) == 0
    assert c.call("nvmlDeviceGetNvLinkState", "$dev:2", 4) == 1
    tb.inject(node.name, "nvlink-errors", "gpu2", link=4, counter="replay", increment=11)
    assert c.call("nvmlDeviceGetNvLinkErrorCounter", "$dev:2", 4, 0) == 11

    tb.heal(node=node.name)
    after = {g.index: (c.call("nvmlDeviceGetTemperature", f"$dev:{g.index}", 0),
                       c.call("nvmlDeviceGetPowerManagementLimit", f"$dev:{g.index}"),
                       c.call("nvmlDeviceGetCurrentClocksThrottleReasons", f"$dev:{g.index}")) for g in node.gpus}
    assert after == before
    assert c.call("nvmlDeviceGetNvLinkState", "$dev:2", 5) == 1
    assert c.call("nvmlDeviceGetTotalEccErrors", "$dev:1", 1, 0) == 0


def test_nvlink_down_changes_both_ends_and_p2p(testbed_factory: Callable[..., Testbed],
                                               consumers: Callable[[Testbed, str], Consumer]) -> None:
    """cxl-pool pairs two GPUs by direct NVLinks: a link down is down at both GPUs; all down ends NVLink P2P."""
    tb = testbed_factory("cxl-pool")
    node = tb.system.nodes[0]
    a, b = node.gpus[0], node.gpus[1]
    c = consumers(tb, node.name)
    nvlink_cap = 2
    assert c.call("nvmlDeviceGetP2PStatus", "$dev:0", "$dev:1", nvlink_cap) == 0
    tb.inject(node.name, "nvlink-down", a.name, link=5)
    remote_port = a.ports[5].remote_port
    assert c.call("nvmlDeviceGetNvLinkState", "$dev:0", 5) == 0
    assert c.call("nvmlDeviceGetNvLinkState", f"$dev:{b.index}", remote_port) == 0
    assert c.call("nvmlDeviceGetP2PStatus", "$dev:0", "$dev:1", nvlink_cap) == 0  # 17 links left
    for link in range(len(a.ports)):
        if link != 5:
            tb.inject(node.name, "nvlink-down", a.name, link=link)
    assert c.call("nvmlDeviceGetP2PStatus", "$dev:0", "$dev:1", nvlink_cap) == 5  # NOT_SUPPORTED
    assert c.call("nvmlDeviceGetP2PStatus", "$dev:1", "$dev:0", nvlink_cap) == 5
    tb.heal(node=node.name)
    assert c.call("nvmlDeviceGetP2PStatus", "$dev:1", "$dev:0", nvlink_cap) == 0
    assert c.call("nvmlDeviceGetNvLinkState", f"$dev:{b.index}", remote_port) == 1


def test_each_xid_is_delivered_once_to_every_registered_set(testbed_factory: Callable[..., Testbed],
                                                          consumers: Callable[[Testbed, str], Consumer]) -> None:
    tb = testbed_factory("edge-pcie")
    node = tb.system.nodes[0].name
    first, second = consumers(tb, node), consumers(tb, node)
    for c in (first, second):
        assert c.ask({"register": EVENT_XID})["ok"] is True
    results: dict[str, list[dict[str, Any]]] = {}

    def waiter(name: str, c: Consumer) -> None:
        results[name] = [c.ask({"wait": 10000}, timeout=20) for _ in range(2)]

    threads = [threading.Thread(target=waiter, args=(n, c)) for n, c in (("a", first), ("b", second))]
    for t in threads:
        t.start()
    time.sleep(0.3)
    tb.inject(node, "xid", "gpu5", code=13)
    tb.inject(node, "xid", "gpu6", code=31)
    for t in threads:
        t.join(30)
    for name in ("a", "b"):
        assert [r["ok"] for r in results[name]] == [{"device": 5, "type": EVENT_XID, "data": 13},
                                                     {"device": 6, "type": EVENT_XID, "data": 31}]
    # Nothing is delivered twice.
    assert first.ask({"wait": 300})["err"] == NVML_ERROR_TIMEOUT
