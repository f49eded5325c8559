"""The docker backend: clusters of node containers (amd64, riscv64 under QEMU), faults, isolation, clean-up.

Acceptance: ``riscv-nvlink-fusion`` and ``mixed-arch`` come up, every node's pynvml answers as the model says, an
injected Xid 79 on one node is seen only there (NVML event and a lost GPU), ``down`` leaves nothing behind (also
after a failed or crashed ``up``), and a container given 2 of 8 GPUs sees exactly those through NVML and /dev,
on an amd64 and on a riscv64 node.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fakehw.livefs.mount import live_mounts
from fakehw.model import load_profile
from testbed import BackendError, Testbed
from testbed.backends import BackendInputError
from testbed.backends.docker import DockerBackend, parse_gpu_option
from testbed.images import ImageRef
from tests.docker.probes import (
    EVENT_XID,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_TIMEOUT,
    NVML_PROBE,
    XID_PROBE,
    check_nvml,
    expected_for,
    parse,
)

BIN = Path(sys.executable).parent
Factory = Callable[..., Testbed]


def _probe(tb: Testbed, node: str) -> dict[str, Any]:
    return parse(tb.exec(node, ["python", "-c", NVML_PROBE], timeout=300))


def test_riscv_fusion_and_mixed_arch_answer_and_xid_is_seen_only_where_injected(
        docker_testbed: Factory, no_leftovers: Callable[[], list[str]]) -> None:
    import docker

    engine = docker.from_env()
    volumes_before = {v.name for v in engine.volumes.list()}
    # The two clusters come up at once, and their nodes are probed at once: each riscv64 agent renders its node
    # and each probe runs Python under QEMU, on one core each (one after the other they took twice as long).
    with ThreadPoolExecutor(max_workers=3) as pool:
        fusion_up = pool.submit(docker_testbed, "riscv-nvlink-fusion")
        mixed_up = pool.submit(docker_testbed, "mixed-arch")
        fusion, mixed = fusion_up.result(), mixed_up.result()
        probes = {(tb.name, node.name): pool.submit(_probe, tb, node.name)
                  for tb in (fusion, mixed) for node in tb.system.nodes}
        for tb in (fusion, mixed):
            assert tb.alive()
            infos = {n.name: n for n in tb.nodes()}
            for node in tb.system.nodes:
                assert infos[node.name].arch == node.cpu.arch
                answer = probes[(tb.name, node.name)].result()
                check_nvml(answer, expected_for(node))
                assert answer["driver"] == tb.system.driver.version
    assert {n.cpu.arch for n in mixed.system.nodes} == {"amd64", "riscv64"}

    # Xid 79 on the amd64 node of the mixed cluster: its NVML delivers the event and loses the GPU; the riscv64
    # node of the same cluster and the other cluster's node see nothing.
    target = next(n for n in mixed.system.nodes if n.cpu.arch == "amd64")
    gpu = target.gpus[3]
    watchers = [(mixed, n.name) for n in mixed.system.nodes] + [(fusion, fusion.record.nodes[0])]
    results: dict[str, dict[str, Any]] = {}
    ready: dict[str, Path] = {}

    def watch(tb: Testbed, name: str) -> None:
        results[f"{tb.name}/{name}"] = parse(tb.exec(name, ["python", "-c", XID_PROBE,
                                                            "/var/lib/fakehw-agent/xid-ready", "12"], timeout=300))

    threads = []
    for tb, name in watchers:
        ready[f"{tb.name}/{name}"] = tb.node(name).dir.parent.parent / "xid-ready"
        threads.append(threading.Thread(target=watch, args=(tb, name), daemon=True))
        threads[-1].start()
    deadline = time.monotonic() + 240
    while not all(p.exists() for p in ready.values()):
        assert time.monotonic() < deadline, "the NVML event listeners did not start"
        time.sleep(0.1)
    fault = mixed.inject(target.name, "xid", gpu.name, code=79)
    for t in threads:
        t.join(timeout=300)
    hit = results[f"{mixed.name}/{target.name}"]
    assert hit == {"event": {"type": EVENT_XID, "xid": 79, "uuid": gpu.uuid}}
    for key, result in results.items():
        if key != f"{mixed.name}/{target.name}":
            assert result == {"error": NVML_ERROR_TIMEOUT}, key

    other = next(n for n in mixed.system.nodes if n is not target)
    with ThreadPoolExecutor(max_workers=1) as pool:  # the riscv64 node's probe (QEMU) beside the amd64 one's
        other_answer = pool.submit(_probe, mixed, other.name)
        lost = _probe(mixed, target.name)
        assert [g.get("error") for g in lost["gpus"]] == [NVML_ERROR_GPU_IS_LOST if g.name == gpu.name else None
                                                          for g in target.gpus]
        check_nvml(other_answer.result(), expected_for(other))
    assert mixed.state(target.name)["faults"] and not mixed.state(other.name)["faults"]

    assert [f["id"] for f in mixed.heal(fault["id"])] == [fault["id"]]
    check_nvml(_probe(mixed, target.name), expected_for(target))

    mixed.down()
    fusion.down()
    assert no_leftovers() == []
    assert {v.name for v in engine.volumes.list()} <= volumes_before  # not even anonymous ones
    engine.close()
    assert not mixed.record.dir.exists() and not fusion.record.dir.exists()


@pytest.mark.parametrize("profile", ["dgx-h100", "riscv-hgx"])
def test_two_of_eight_gpus_are_exactly_what_the_container_sees(docker_testbed: Factory, profile: str,
                                                               profiles_dir: Path) -> None:
    ref = profile if profile == "dgx-h100" else str(profiles_dir / f"{profile}.yaml")
    tb = docker_testbed(ref, gpus="gpu2,gpu5")
    node = tb.system.nodes[0]
    assert len(node.gpus) == 8
    assert tb.nodes()[0].gpus == 2
    answer = _probe(tb, node.name)
    want = expected_for(node, ["gpu2", "gpu5"])
    check_nvml(answer, want)
    assert answer["dev"] == ["nvidia2", "nvidia5", "nvidiactl"]
    assert want.machine == {"dgx-h100": "x86_64", "riscv-hgx": "riscv64"}[profile]


def test_down_after_a_failed_up_leaves_nothing(docker_testbed: Factory, no_leftovers: Callable[[], list[str]],
                                               testbed_state_dir: Path) -> None:
    with pytest.raises(BackendError, match="did not answer within"):
        docker_testbed("dgx-h100", nodes=2, timeout=0.01)
    assert no_leftovers() == []
    assert [p for p in testbed_state_dir.glob("*/agents") if not p.parent.name.startswith(".trash-")] == []


def test_a_node_that_exits_while_starting_fails_up_with_its_log(
        docker_testbed: Factory, no_leftovers: Callable[[], list[str]]) -> None:
    """An image whose containers do not run an agent (the bare base image): ``up`` fails at once with the
    container's exit status and log, not after a timeout, and leaves nothing."""
    from testbed.images import ImageBuilder

    base = ImageBuilder(log=lambda _m: None).base_image("amd64").tag
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"its container exited with status 0 while its agent was starting"):
        docker_testbed("dgx-h100", image=base)
    assert time.monotonic() - start < 60
    assert no_leftovers() == []


def test_down_all_removes_what_a_crashed_up_left(node_image_amd64: ImageRef, testbed_state_dir: Path,
                                                 no_leftovers: Callable[[], list[str]]) -> None:
    """``testbed up`` killed mid-way and its cluster directory lost: ``testbed down --all`` finds the containers
    and the network by their labels and removes them."""
    state = ["--state-dir", str(testbed_state_dir)]
    proc = subprocess.Popen([str(BIN / "testbed"), "up", "--backend", "docker", "--profile", "dgx-h100",
                             "--nodes", "2", "--name", "crash", "--image", node_image_amd64.tag, *state],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while sum(item.startswith("container") for item in no_leftovers()) < 2:
        assert proc.poll() is None, "testbed up ended before its containers existed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # The cluster directory lost (all but the nodes' live /sys mounts, which a plain rm cannot remove).
    subprocess.run(["rm", "-rf", str(testbed_state_dir / "crash")], check=False, capture_output=True)
    assert not (testbed_state_dir / "crash" / "cluster.json").exists()
    assert no_leftovers()
    down = subprocess.run([str(BIN / "testbed"), "down", "--all", *state], capture_output=True, text=True,
                          timeout=120)
    assert down.returncode == 0, down.stderr
    assert "removed leftover container" in down.stdout and "removed leftover network" in down.stdout
    assert no_leftovers() == []
    assert live_mounts(testbed_state_dir) == []


def test_exec_environment_and_bad_input(docker_testbed: Factory) -> None:
    tb = docker_testbed("dgx-h100")
    node = tb.record.nodes[0]
    out = tb.exec(node, ["sh", "-c", "hostname; echo $FAKEHW_NODE; cat; echo oops >&2; exit 3"], input=b"stdin\n")
    assert out.returncode == 3
    assert out.stdout.decode().split() == [node, node, "stdin"]
    assert out.stderr == b"oops\n"
    with pytest.raises(subprocess.TimeoutExpired):
        tb.exec(node, ["sleep", "30"], timeout=1)
    with pytest.raises(BackendInputError, match="command not found"):
        tb.exec(node, ["no-such-command"])
    with pytest.raises(BackendInputError, match="has no node"):
        tb.exec("no-such-node", ["true"])
    with pytest.raises(BackendInputError, match="nothing to run"):
        tb.exec(node, [])
    # The fake root is mounted where tools look: /sys/bus/pci lists the model's GPUs.
    listing = tb.exec(node, ["ls", "/sys/bus/pci/devices"]).stdout.decode().split()
    gpu_buses = {str(g.address).lower() for g in tb.system.nodes[0].gpus}
    assert gpu_buses <= {b.lower() for b in listing}


def test_cli_bad_input_is_exit_2_without_traceback(node_image_amd64: ImageRef, testbed_state_dir: Path) -> None:
    state = ["--state-dir", str(testbed_state_dir)]

    def testbed(*args: str) -> subprocess.CompletedProcess[str]:
        # options go right after the subcommand: exec takes everything after NODE as the command
        return subprocess.run([str(BIN / "testbed"), args[0], *state, *args[1:]], capture_output=True, text=True,
                              timeout=120)

    cases = [
        (["up", "--backend", "docker", "--profile", "dgx-h100", "--gpus", "gpu9", "--name", "bad"],
         "node dgx-h100-0 has no GPU 'gpu9'"),
        (["up", "--backend", "docker", "--profile", "riscv-nvlink-fusion", "--image", "fakehw/none:x",
          "--name", "bad"], "image fakehw/none:x is not in the local image store"),
        (["up", "--backend", "docker", "--profile", "no-such-profile", "--name", "bad"], "no-such-profile"),
        (["exec", "--name", "ex", "dgx-h100-0", "--", "no-such-command"],
         "command not found on node dgx-h100-0: no-such-command"),
        (["chaos", "--name", "ex", "kill", "no-such-node"], "has no node 'no-such-node'"),
        (["chaos", "--name", "loc", "kill", "dgx-h100-0"], "chaos verbs need containers"),
    ]
    ex = Testbed.up("dgx-h100", backend="docker", name="ex", state_dir=testbed_state_dir, image=node_image_amd64.tag)
    local = Testbed.up("dgx-h100", name="loc", state_dir=testbed_state_dir)
    try:
        for args, message in cases:
            proc = testbed(*args)
            assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
            assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
            assert "OCI runtime" not in proc.stdout + proc.stderr
        streamed = testbed("exec", "--name", "ex", "dgx-h100-0", "--", "sh", "-c", "echo out; echo err >&2; exit 5")
        assert (streamed.returncode, streamed.stdout, streamed.stderr) == (5, "out\n", "err\n")
    finally:
        ex.down()
        local.down()


def test_gpu_option_parsing_without_docker() -> None:
    system = load_profile("mixed-arch")
    assert parse_gpu_option(None, system) == {"rv-fusion-0": ("gpu0", "gpu1", "gpu2", "gpu3"),
                                              "dgx-h100-0": tuple(f"gpu{i}" for i in range(8))}
    assert parse_gpu_option("none", system) == {"rv-fusion-0": (), "dgx-h100-0": ()}
    assert parse_gpu_option({"dgx-h100-0": [5, "gpu2"]}, system)["dgx-h100-0"] == ("gpu2", "gpu5")
    assert parse_gpu_option("1,3", system)["rv-fusion-0"] == ("gpu1", "gpu3")
    bad: list[tuple[Any, str]] = [
        ("gpu7", "node rv-fusion-0 has no GPU 'gpu7'"),
        ({"nope": "all"}, "has no node(s) nope"),
        ("gpu1,1", "gpu1 is given twice"),
        (3.5, "expected 'all', 'none'"),
    ]
    for value, message in bad:
        with pytest.raises(BackendInputError) as info:
            parse_gpu_option(value, system)
        assert message in str(info.value)


def test_unknown_options_are_refused_before_anything_starts(tmp_path: Path) -> None:
    from testbed.backends.base import UpRequest

    backend = DockerBackend()
    with pytest.raises(BackendInputError, match="no option"):
        backend.up(UpRequest("dgx-h100", "x", tmp_path, options={"gpu": "all"}))
    with pytest.raises(BackendInputError, match="timeout"):
        backend.up(UpRequest("dgx-h100", "x", tmp_path, options={"timeout": -1}))
    assert not (tmp_path / "x").exists()
