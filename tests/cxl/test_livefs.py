"""The live /sys (fakehw.livefs): kernel errno values for writers, writes that act through the agent, reads that are
current, and real `cxl` (ndctl) commands whose writes the agent sees.

Expected errno values are the kernel's: kernfs refuses to open an attribute without a store method for writing
(EACCES, even for root) and one without a show method for reading (EACCES); a directory without ->create gives
EACCES to creat(2), vfs gives EPERM to mkdir/unlink without the inode operation; bus bind_store/unbind_store answer
ENODEV for a device that is not on the bus or not bound to that driver and the probe's error (ENXIO) when a device
fails to probe, and a device already bound is EBUSY (drivers/base/bus.c, drivers/base/dd.c).
"""

from __future__ import annotations

import base64
import errno
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakehw.agent.client import AgentClient, AgentRequestError
from fakehw.agent.server import UnixAgentServer, serve
from fakehw.agent.service import AgentService
from fakehw.agent.statedir import RUNTIME_FILES
from fakehw.livefs import LiveMount, unavailable
from fakehw.model import load_profile
from testbed.nodeview import Bind, NodeView, command

NODE = "cxl-host-0"
ROOT = Path(__file__).resolve().parents[2]
NDCTL81 = ROOT / ".cache/ndctl-81/bin/cxl"

pytestmark = pytest.mark.skipif(unavailable() is not None or os.geteuid() != 0,
                                reason=f"a live /sys needs root and FUSE: {unavailable() or 'not root'}")


@dataclass
class Live:
    svc: AgentService
    sys: Path
    """The mounted live sys."""
    node_dir: Path
    client: AgentClient


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    base = Path(tempfile.mkdtemp(prefix="fhw-lv-", dir="/tmp"))  # short: the socket path has a 107-byte limit
    svc = AgentService(load_profile("cxl-pool"), base / "state", nodes=[NODE])
    server = UnixAgentServer(base / "agent.sock", svc)
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=([server], stop), daemon=True)
    thread.start()
    mount = LiveMount(svc.node_dir(NODE) / "root" / "sys", base / "live-sys", base / "agent.sock", NODE)
    try:
        mount.start()
        yield Live(svc, base / "live-sys", svc.node_dir(NODE), AgentClient(base / "agent.sock"))
    finally:
        mount.stop()
        stop.set()
        thread.join(timeout=10)
        svc.close()
        shutil.rmtree(base, ignore_errors=True)


def _online(live: Live, memdev: str) -> bool:
    view = live.svc.platform.view(NODE).cxl.memdev(memdev)
    assert view is not None
    return view.online


def _errno_of(action: object) -> int:
    assert callable(action)
    with pytest.raises(OSError) as info:
        action()
    return info.value.errno or 0


def _write(path: Path, data: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)


def _journal(live: Live) -> str:
    return (live.svc.state_dir / "platform.jsonl").read_text()


# --------------------------------------------------------------------------------------------------- errno


def test_reads_pass_through_and_follow_the_agent_at_once(live: Live) -> None:
    mem0 = live.sys / "bus/cxl/devices/mem0"
    rendered = live.node_dir / "root/sys/bus/cxl/devices/mem0"
    assert (mem0 / "serial").read_bytes() == (rendered / "serial").read_bytes() != b""
    assert os.readlink(mem0 / "driver") == os.readlink(rendered / "driver")
    live.svc.platform.set_memdev(NODE, "mem1", False)
    try:
        assert not (live.sys / "bus/cxl/devices/mem1/driver").is_symlink()  # no stale cached attribute
    finally:
        live.svc.platform.set_memdev(NODE, "mem1", True)
    assert (live.sys / "bus/cxl/devices/mem1/driver").is_symlink()


def test_what_the_kernel_cached_is_dropped_when_the_agent_changes_it(live: Live) -> None:
    """Reads are cached by the kernel (that is what makes them fast) and still current: a file read, then
    changed by a write through the mount or by the agent, reads the new content at once."""
    offer = live.sys / "bus/cxl/devices/decoder0.1/create_ram_region"  # cfmws0 of cxl-pool
    first = offer.read_text()
    assert offer.read_text() == first  # now in the page cache
    _write(offer, first)  # takes the offered id: the root decoder offers the next one
    second = offer.read_text()
    assert second != first, "the written attribute was served from the page cache"
    region = first.strip()
    assert (live.sys / f"bus/cxl/devices/{region}/commit").read_text() == "0\n"
    name = live.svc.platform.create_region(NODE, {"window": "cfmws1", "targets": ["mem5"], "size": "256MiB"})["name"]
    assert (live.sys / f"bus/cxl/devices/{name}/commit").read_text() == "1\n"
    assert offer.read_text() == second
    _write(live.sys / "bus/cxl/devices/decoder0.1/delete_region", region)
    assert not (live.sys / f"bus/cxl/devices/{region}").exists()
    live.svc.platform.destroy_region(NODE, name)
    assert not (live.sys / f"bus/cxl/devices/{name}").exists()


@pytest.mark.parametrize(("what", "expected"), [
    ("write a read-only attribute", errno.EACCES),
    ("read a write-only attribute", errno.EACCES),
    ("create a file", errno.EACCES),
    ("make a directory", errno.EPERM),
    ("remove an attribute", errno.EPERM),
    ("unbind a device that does not exist", errno.ENODEV),
    ("unbind a memdev from a driver that does not match", errno.ENODEV),
    ("bind a memdev that is bound", errno.EBUSY),
    ("bind a driver that does not exist", errno.ENOENT),
    ("write an attribute fakehw does not emulate", errno.EOPNOTSUPP),
    ("create a region under a name the root decoder does not offer", errno.EBUSY),
    ("create a region with a malformed name", errno.EINVAL),
])
def test_a_refused_write_gets_the_kernels_errno_and_changes_nothing(live: Live, what: str, expected: int) -> None:
    d = live.sys / "bus/cxl"
    actions = {
        "write a read-only attribute": lambda: _write(d / "devices/mem0/serial", "0x1\n"),
        "read a write-only attribute": lambda: (d / "drivers/cxl_mem/unbind").read_bytes(),
        "create a file": lambda: (d / "devices/mem0/new").write_text("x"),
        "make a directory": lambda: (d / "devices/newdir").mkdir(),
        "remove an attribute": lambda: (d / "devices/mem0/serial").unlink(),
        "unbind a device that does not exist": lambda: _write(d / "drivers/cxl_mem/unbind", "mem99\n"),
        "unbind a memdev from a driver that does not match": lambda: _write(d / "drivers/cxl_port/unbind", "mem0"),
        "bind a memdev that is bound": lambda: _write(d / "drivers/cxl_mem/bind", "mem0\n"),
        "bind a driver that does not exist": lambda: _write(d / "drivers/cxl_nope/bind", "mem0"),
        "write an attribute fakehw does not emulate": lambda: _write(d / "drivers_autoprobe", "0\n"),
        "create a region under a name the root decoder does not offer":
            lambda: _write(d / "devices/decoder0.0/create_ram_region", "region99\n"),
        "create a region with a malformed name": lambda: _write(d / "devices/decoder0.0/create_ram_region", "r9\n"),
    }
    if what == "bind a driver that does not exist":
        # The directory does not exist on the bus: the open fails before any store (the kernel's ENOENT too).
        assert _errno_of(actions[what]) == expected
        return
    before_serial = (live.node_dir / "root/sys/bus/cxl/devices/mem0/serial").read_bytes()
    before = _journal(live)
    assert _errno_of(actions[what]) == expected
    assert _journal(live) == before
    assert _online(live, "mem0")
    assert (live.node_dir / "root/sys/bus/cxl/devices/mem0/serial").read_bytes() == before_serial
    assert not (live.node_dir / "root/sys/bus/cxl/devices/mem0/new").exists()


def test_unbind_and_bind_act_through_the_agent_and_are_journaled(live: Live) -> None:
    drivers = live.sys / "bus/cxl/drivers/cxl_mem"
    _write(drivers / "unbind", "mem2\n")
    assert not _online(live, "mem2")
    assert '"memdev":"mem2"' in _journal(live) and '"online":false' in _journal(live)
    assert _errno_of(lambda: _write(drivers / "unbind", "mem2")) == errno.ENODEV  # not bound any more
    _write(drivers / "bind", "mem2\0")  # libcxl writes the terminating NUL too
    assert _online(live, "mem2")


def test_a_faulted_memdev_fails_its_probe_with_enxio(live: Live) -> None:
    fault = live.svc.inject(NODE, {"kind": "cxl-offline", "device": "mem3"})
    try:
        before = _journal(live)
        assert _errno_of(lambda: _write(live.sys / "bus/cxl/drivers/cxl_mem/bind", "mem3")) == errno.ENXIO
        assert _journal(live) == before
    finally:
        live.svc.heal(fault.id)


def test_garbage_writes_neither_crash_the_agent_nor_touch_the_journal(live: Live) -> None:
    before = _journal(live)
    for data in (b"\xff\xfe\x00garbage", b"\n" * 5000, b"mem0" * 2000, b""):
        fd = os.open(live.sys / "bus/cxl/drivers/cxl_mem/bind", os.O_WRONLY)
        try:
            with pytest.raises(OSError):
                os.write(fd, data) if data else os.write(fd, b"\0")
        finally:
            os.close(fd)
    assert _journal(live) == before
    assert live.client.health()["status"] == "ok"


def test_the_sysfs_route_refuses_malformed_requests(live: Live) -> None:
    url = f"/v1/nodes/{NODE}/sysfs"
    for body, status in (([], 400), ({"path": "sys/bus/cxl/flush"}, 400),
                         ({"path": "sys/bus/cxl/flush", "data": "%%%"}, 400),
                         ({"path": "sys/bus/cxl/flush", "data": "A" * 10_000}, 413)):
        with pytest.raises(AgentRequestError) as info:
            live.client.request("POST", url, body)
        assert info.value.status == status, body
    with pytest.raises(AgentRequestError) as info:
        live.client.request("POST", "/v1/nodes/nope/sysfs", {"path": "sys/bus/cxl/flush", "data": ""})
    assert info.value.status == 404
    ok = live.client.request("POST", url, {"path": "sys/bus/cxl/flush", "data": base64.b64encode(b"1\n").decode()})
    assert ok == {"errno": 0, "written": 2, "changed": False}


def test_a_refused_write_does_not_stick_across_an_agent_restart(live: Live, fast_tmp: Path) -> None:
    """The restarted agent runs in this process and only this test reads its tree (no node view), so its state dir
    (~14,900 entries) is on ``fast_tmp``."""
    target = live.sys / "bus/cxl/devices/mem0/numa_node"
    before = target.read_bytes()
    assert _errno_of(lambda: _write(target, "7\n")) == errno.EACCES
    state = fast_tmp / "state"
    state.mkdir()
    for journal in RUNTIME_FILES:  # what a restarted agent comes back from (journals with their meta files)
        if (live.svc.state_dir / journal).exists():
            shutil.copy2(live.svc.state_dir / journal, state / journal)
    again = AgentService(load_profile("cxl-pool"), state, nodes=[NODE])
    try:
        assert (again.node_dir(NODE) / "root/sys/bus/cxl/devices/mem0/numa_node").read_bytes() == before
    finally:
        again.close()


# --------------------------------------------------------------------------------------------------- real tools


def _cxl_binaries() -> list[Path]:
    found = [p for p in (Path("/usr/bin/cxl"), NDCTL81) if p.exists()]
    return found


def _in_view(live: Live, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as on the node (testbed.nodeview), with the live /sys bound over the rendered one."""
    view = NodeView(root=str(live.node_dir / "root"), binds=(Bind(str(live.sys), "/sys"),))
    return subprocess.run(command(view, argv), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("cxl", _cxl_binaries(), ids=lambda p: "ndctl-81" if ".cache" in str(p) else "debian")
def test_real_cxl_disable_memdev_is_seen_by_the_agent_and_testbed_offline_by_libcxl(live: Live, cxl: Path) -> None:
    listed = _in_view(live, [str(cxl), "list", "-M", "-P", "-D", "-E", "-R"])
    assert listed.returncode == 0, listed.stderr
    assert "failed" not in listed.stderr and "add_dev" not in listed.stderr, listed.stderr
    done = _in_view(live, [str(cxl), "disable-memdev", "mem5", "--force"])
    assert done.returncode == 0, done.stderr
    assert not _online(live, "mem5")
    assert json.loads(_in_view(live, [str(cxl), "list", "-M", "-i", "-m", "mem5"]).stdout)[0]["state"] == "disabled"
    assert _in_view(live, [str(cxl), "enable-memdev", "mem5"]).returncode == 0
    assert _online(live, "mem5")
    # The other way: the testbed takes mem4 offline; libcxl sees it disabled and its region torn down at once.
    live.svc.platform.set_memdev(NODE, "mem4", False)
    try:
        assert _in_view(live, [str(cxl), "list", "-M", "-m", "mem4"]).stdout.strip() in ("", "[\n]")
        regions = json.loads(_in_view(live, [str(cxl), "list", "-R", "-i"]).stdout)
        region0 = next(r for r in regions if r["region"] == "region0")
        assert region0["decode_state"] == "reset" and region0.get("state") == "disabled"
    finally:
        live.svc.platform.set_memdev(NODE, "mem4", True)
    region0 = next(r for r in json.loads(_in_view(live, [str(cxl), "list", "-R"]).stdout) if r["region"] == "region0")
    assert region0["decode_state"] == "commit"
