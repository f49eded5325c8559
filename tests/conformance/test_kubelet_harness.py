"""The kubelet harness against hostile plugins: every misbehaviour is a clear, bounded failure, never a hang.

Each test starts a real hostile plugin process (testbed/reference/device_plugin/hostile.py) that speaks real gRPC
to the harness's kubelet, with short deadlines, and checks what the harness reports and how long it took.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed import nodeview
from testbed.kubelet.kubelet import (
    CHECKPOINT_FILE,
    MAX_KEPT_UPDATES,
    AdmissionRefused,
    Kubelet,
    PluginTimeout,
    PluginViolation,
    Timeouts,
    short_tmp_dir,
)
from testbed.kubelet.launcher import KUBELET_PLUGIN_DIR, CommandLauncher, LocalProcess

FAST = Timeouts(start=4.0, rpc=1.0, dial=2.0, first_update=2.0, reregister=4.0, prestart=2.0)
SLACK_S = 3.0
"""Allowed beyond a deadline (process start, scheduling on a busy machine)."""
GPU = "nvidia.com/gpu"


class Hostile:
    def __init__(self, kubelet: Kubelet, process: LocalProcess, calls: Path):
        self.kubelet = kubelet
        self.process = process
        self.calls_file = calls

    def calls(self) -> list[str]:
        return self.calls_file.read_text().split() if self.calls_file.exists() else []


@pytest.fixture
def hostile() -> Iterator[Callable[[str], Hostile]]:
    made: list[tuple[Kubelet, LocalProcess, Path]] = []

    def start(behaviour: str) -> Hostile:
        d = short_tmp_dir("fhw-h-")
        kubelet = Kubelet(d, FAST)
        kubelet.start()
        calls = d / "calls.txt"
        cmd = f"{sys.executable} -m testbed.reference.device_plugin.hostile {behaviour} --calls {calls}"
        proc = CommandLauncher(cmd, "node", {}, d / "logs").start(d)
        made.append((kubelet, proc, d))
        return Hostile(kubelet, proc, calls)

    yield start
    for kubelet, proc, d in made:
        proc.kill()
        kubelet.stop()
        shutil.rmtree(d, ignore_errors=True)


def _violation(fn: Callable[[], object], limit: float) -> PluginViolation:
    started = time.monotonic()
    with pytest.raises(PluginViolation) as info:
        fn()
    took = time.monotonic() - started
    assert took <= limit + SLACK_S, f"took {took:.1f} s, more than the {limit:g} s deadline"
    return info.value


@pytest.mark.parametrize(("behaviour", "resource", "words"), [
    ("wrong-version", GPU, "'v1alpha1'"),
    ("bad-resource-name", "gpu", "no domain prefix"),
    ("missing-endpoint", GPU, "'nope.sock' does not exist"),
])
def test_refused_registrations(hostile: Callable[[str], Hostile], behaviour: str, resource: str,
                               words: str) -> None:
    h = hostile(behaviour)
    v = _violation(lambda: h.kubelet.wait_endpoint(resource), FAST.start)
    assert v.check == "registration-refused" and words in v.message
    assert v.evidence["registrations"][-1]["request"]["resource_name"] == resource, "the offending request is shown"
    assert h.calls() == [], "a refused plugin is never called"


def test_an_endpoint_nobody_listens_on_fails_the_registration(hostile: Callable[[str], Hostile]) -> None:
    """The kubelet dials a registered endpoint; when the dial never succeeds the registration fails and says so.

    The socket file exists (so Register is accepted) but nothing listens, so every connect is refused
    (ECONNREFUSED, unix(7)). Before this test the dial timeout raised ``grpc.FutureTimeoutError``, which is not
    ``concurrent.futures.TimeoutError``: the connecting thread died with a traceback and the registration stayed
    "pending" until the start deadline, with no reason given."""
    h = hostile("dead-endpoint")
    v = _violation(lambda: h.kubelet.wait_endpoint(GPU), FAST.start)
    assert v.check == "registration-dial-failed", v.message
    assert "dead.sock" in v.message and f"within {FAST.dial:g} s" in v.message
    assert h.calls() == [], "nothing is called on an endpoint that cannot be reached"


@pytest.mark.parametrize(("behaviour", "words"), [
    ("options-fail", "UNAVAILABLE: hostile: options are not available"),
    ("options-hang", "did not answer within its deadline"),
    ("garbage", "not a valid GetDevicePluginOptions message"),
])
def test_failing_options_call_means_no_list_and_watch(hostile: Callable[[str], Hostile], behaviour: str,
                                                      words: str) -> None:
    h = hostile(behaviour)
    v = _violation(lambda: h.kubelet.wait_endpoint(GPU), FAST.start)
    assert v.check == "registration-options-failed", v.message
    assert words in v.message and "ListAndWatch is not called" in v.message
    time.sleep(0.5)
    assert "GetDevicePluginOptions" in h.calls() and "ListAndWatch" not in h.calls()


def test_a_silent_stream_times_out(hostile: Callable[[str], Hostile]) -> None:
    h = hostile("list-hang")
    v = _violation(lambda: h.kubelet.wait_endpoint(GPU), FAST.start)
    assert isinstance(v, PluginTimeout) and "registered and listing its devices" in v.message
    assert v.evidence["stream"]["state"] == "open" and v.evidence["stream"]["updates"] == 0


def test_a_closed_stream_leaves_nothing_allocatable(hostile: Callable[[str], Hostile]) -> None:
    h = hostile("list-closes")
    ep = h.kubelet.wait_for(lambda: h.kubelet.endpoints.get(GPU) if GPU in h.kubelet.endpoints and
                            h.kubelet.endpoints[GPU].stream_state == "ended" else None, FAST.start, "stream ended")
    assert ep.stream_detail == "the plugin closed the ListAndWatch stream" and len(ep.updates) == 1
    with pytest.raises(AdmissionRefused, match="stream is ended"):
        h.kubelet.admit("pod", "main", GPU, 1)


def test_malformed_device_lists_are_recorded(hostile: Callable[[str], Hostile]) -> None:
    h = hostile("list-malformed")
    ep = h.kubelet.wait_endpoint(GPU)
    assert ep.latest is not None
    checks = {p.check for p in ep.latest.problems}
    assert checks == {"device-id-duplicate", "device-id-empty", "device-id-too-long", "device-health",
                      "device-numa"}
    messages = " ".join(p.message for p in ep.latest.problems)
    assert "80 characters" in messages and "'Sick'" in messages and "listed 2 times" in messages


def test_a_hung_allocate_is_a_timeout(hostile: Callable[[str], Hostile]) -> None:
    h = hostile("allocate-hang")
    h.kubelet.wait_endpoint(GPU)
    v = _violation(lambda: h.kubelet.allocate(GPU, [["hostile-0"]]), FAST.rpc)
    assert isinstance(v, PluginTimeout) and v.check == "Allocate-timeout"
    assert v.evidence["request"] == {"container_requests": [{"devices_ids": ["hostile-0"]}]}
    assert h.kubelet.checkpoint.assignments == [], "nothing is recorded for a failed Allocate"


def test_wrong_number_of_container_responses(hostile: Callable[[str], Hostile]) -> None:
    h = hostile("allocate-wrong-count")
    h.kubelet.wait_endpoint(GPU)
    v = _violation(lambda: h.kubelet.admit("pod", "main", GPU, 2), FAST.rpc)
    assert v.check == "allocate-responses" and "1 container requests got 0 container responses" in v.message
    assert v.evidence["response"] == {"container_responses": []}


def test_bad_preferred_allocations_are_tolerated_and_recorded(hostile: Callable[[str], Hostile]) -> None:
    h = hostile("preferred-bad")
    h.kubelet.wait_endpoint(GPU)
    a = h.kubelet.admit("pod", "main", GPU, 2)
    assert set(a.device_ids) <= {"hostile-0", "hostile-1", "hostile-2", "hostile-3"} and len(a.device_ids) == 2
    problems = " ".join(p.message for _, p in h.kubelet.problems)
    assert "asked for 2 devices, got 4" in problems and "not among the available devices" in problems


def test_a_plugin_that_never_registers(hostile: Callable[[str], Hostile]) -> None:
    h = hostile("never-registers")
    v = _violation(lambda: h.kubelet.wait_endpoint(GPU), FAST.start)
    assert isinstance(v, PluginTimeout) and v.evidence["registrations"] == []


def test_a_crashing_plugin(hostile: Callable[[str], Hostile]) -> None:
    h = hostile("crash")
    started = time.monotonic()
    v = _violation(lambda: h.kubelet.wait_endpoint(GPU, process=h.process), FAST.start)
    assert time.monotonic() - started < FAST.start, "an exited plugin is reported at once, not after the deadline"
    assert v.check == "plugin-exited" and "status 3" in v.message
    assert h.process.returncode() == 3
    assert "crashing on purpose" in h.process.log_tail()


def test_checkpoint_survives_a_kubelet_restart(hostile: Callable[[str], Hostile]) -> None:
    h = hostile("preferred-bad")
    h.kubelet.wait_endpoint(GPU)
    a = h.kubelet.admit("pod-a", "main", GPU, 1)
    assert (h.kubelet.plugin_dir / CHECKPOINT_FILE).is_file()
    h.kubelet.restart()
    assert h.kubelet.socket.exists()
    assert h.kubelet.checkpoint.find("pod-a", "main", GPU) == a
    # The hostile plugin does not register again: the harness says so within the deadline.
    v = _violation(lambda: h.kubelet.wait_endpoint(GPU, 0, FAST.reregister), FAST.reregister)
    assert isinstance(v, PluginTimeout)


def test_a_flooding_stream_is_held_bounded(hostile: Callable[[str], Hostile]) -> None:
    """A plugin that re-sends its list in a loop (NVIDIA's on a lost GPU) cannot make the harness hold every list:
    identical lists are counted, changes are kept (bounded), and waits on changes still work."""
    h = hostile("list-flood")
    ep = h.kubelet.wait_endpoint(GPU, process=h.process)
    h.kubelet.wait_for(lambda: ep.received > 20_000, 30.0, "20,000 device lists")
    assert ep.repeats > 0.9 * ep.received, (ep.repeats, ep.received)
    assert len(ep.updates) <= MAX_KEPT_UPDATES
    assert ep.first is not None and ep.first.seq <= ep.updates[0].seq
    changed = h.kubelet.wait_update(GPU, lambda u: u.health("hostile-3") == "Unhealthy", 30.0, "hostile-3 sick")
    assert changed.health("hostile-0") == "Healthy"
    assert h.kubelet.evidence(GPU)["stream"]["identical repeats"] > 0


def test_a_plugin_with_the_kubelet_path_built_in_registers_in_the_node_view(tmp_path: Path) -> None:
    """In the node's view the harness's plugin directory is /var/lib/kubelet/device-plugins: a plugin that knows
    only that path (as NVIDIA's does) registers with the harness, and its socket lands in the harness's dir."""
    if nodeview.unavailable() is not None:
        pytest.skip(nodeview.unavailable() or "")
    d = short_tmp_dir("fhw-hv-")
    kubelet = Kubelet(d, FAST)
    kubelet.start()
    view = nodeview.NodeView(str(tmp_path / "empty-root"))
    cmd = f"{sys.executable} -m testbed.reference.device_plugin.hostile preferred-bad --plugin-dir {KUBELET_PLUGIN_DIR}"
    proc = CommandLauncher(cmd, "node", {}, d / "logs", view).start(d)
    try:
        ep = kubelet.wait_endpoint(GPU, process=proc)
        assert ep.socket == d / "hostile.sock" and ep.socket.exists()
        assert "in the node's view" in proc.log_tail()
    finally:
        proc.kill()
        kubelet.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_the_launcher_prepares_the_view_before_every_start(tmp_path: Path) -> None:
    """``prepare`` runs before each start, so what the view binds (a node's live /sys) is there for a restarted
    plugin too; a ``prepare`` that fails stops the start with its error (nothing is started)."""
    calls: list[int] = []
    launcher = CommandLauncher("true", "node", {}, tmp_path / "logs", prepare=lambda: calls.append(len(calls)))
    for _ in range(2):
        launcher.start(tmp_path / "plugins").wait(30)
    assert calls == [0, 1]

    def broken() -> None:
        raise RuntimeError("cannot serve the live /sys of node")

    failing = CommandLauncher("true", "node", {}, tmp_path / "logs2", prepare=broken)
    with pytest.raises(RuntimeError, match="live /sys"):
        failing.start(tmp_path / "plugins")
    assert not (tmp_path / "logs2").exists()
