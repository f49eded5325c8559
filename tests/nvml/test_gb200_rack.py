"""GB200 surroundings: platform info consistent across the 18 trays of an NVL72 rack, and IMEX.

Expected values come from the real GB200/GB300 captures (``../shared/reference/captures``, ``<platformInfo>``) and
the NVIDIA open kernel module's capability table (``nv-caps.c``: ``fabric-imex-mgmt`` follows ``fabric-mgmt``,
``mig/config``, ``mig/monitor`` and 32 GPUs x 15 GPU instances x 9 MIG capabilities, so it is minor 4323); IMEX
channels are judged by NVIDIA's device plugin, which injects ``/dev/nvidia-caps-imex-channels/channelN`` when it
exists as a character device (``--imex-channel-ids=0 --imex-required``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

import pytest

from fakehw.model import load_profile
from fakehw.render import render_node
from testbed import nodeview
from testbed.environment import merged_environment, node_environment
from testbed.kubelet.kubelet import Kubelet, short_tmp_dir
from tests.nvml.helpers import faults_state, lib_path, snapshot_env, with_driver, write_node
from tests.nvml.test_mig_device_plugin import device_plugin  # noqa: F401 - fixture

CAPTURES = Path("/work/shared/reference/captures")
NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 0, 3, 25


class PlatformInfoV2(ctypes.Structure):
    """``nvmlPlatformInfo_v2_t`` (CUDA 13 nvml.h)."""

    _fields_ = [("version", ctypes.c_uint), ("ibGuid", ctypes.c_ubyte * 16),
                ("chassisSerialNumber", ctypes.c_ubyte * 16), ("slotNumber", ctypes.c_ubyte),
                ("trayIndex", ctypes.c_ubyte), ("hostId", ctypes.c_ubyte), ("peerType", ctypes.c_ubyte),
                ("moduleId", ctypes.c_ubyte)]


V2 = ctypes.sizeof(PlatformInfoV2) | 2 << 24


def _captured(name: str) -> list[dict[str, str]]:
    root = ET.parse(CAPTURES / name).getroot()
    return [{c.tag: c.text or "" for c in g.find("platformInfo")} for g in root.findall("gpu")]  # type: ignore[union-attr]


def _read_tray(lib: ctypes.CDLL, path: Path) -> list[tuple[int, PlatformInfoV2]]:
    out = []
    with snapshot_env(path):
        assert lib.nvmlInit_v2() == NVML_SUCCESS
        try:
            count = ctypes.c_uint()
            lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
            for i in range(count.value):
                h = ctypes.c_void_p()
                lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
                info = PlatformInfoV2(version=V2)
                out.append((lib.nvmlDeviceGetPlatformInfo(h, ctypes.byref(info)), info))
        finally:
            lib.nvmlShutdown()
    return out


def test_platform_info_is_one_rack_of_18_trays(pynvml_module: ModuleType, tmp_path: Path) -> None:
    lib = ctypes.CDLL(str(lib_path()))
    system = load_profile("gb200-nvl72")
    captured = _captured("qx-gb200.xml") + _captured("qx-gb300.xml")
    # What the captures show of every tray: slot 10 ahead of tray, host 1, switch connected, module ids 2 1 4 3.
    assert {int(c["slot_number"]) - int(c["tray_index"]) for c in captured} == {10}
    assert {(c["host_id"], c["peer_type"]) for c in captured} == {("1", "Switch Connected")}
    assert [c["module_id"] for c in _captured("qx-gb200.xml")] == ["2", "1", "4", "3"]
    serials, trays, guids = set(), [], set()
    for k, node in enumerate(system.nodes):
        answers = _read_tray(lib, write_node(tmp_path / f"t{k}" / "nvml.snapshot", system, k).path)
        assert [rc for rc, _ in answers] == [NVML_SUCCESS] * len(node.gpus)
        infos = [info for _, info in answers]
        assert [i.moduleId for i in infos] == [2, 1, 4, 3]
        assert {(i.slotNumber - i.trayIndex, i.hostId, i.peerType) for i in infos} == {(10, 1, 1)}
        assert len({i.trayIndex for i in infos}) == 1
        trays.append(infos[0].trayIndex)
        for i in infos:
            serial = bytes(i.chassisSerialNumber)
            assert len(serial.rstrip(b"\0")) == 13 and serial[13:] == b"\0\0\0"  # Blackwell: 13 bytes (nvml.h)
            serials.add(serial)
            guid = bytes(i.ibGuid)
            assert guid[8:] == bytes(8) and guid[:8] != bytes(8)  # Blackwell: 8 bytes
            guids.add(guid)
    assert len(serials) == 1 and sorted(trays) == list(range(18)) and len(guids) == 72


def test_platform_info_answers_like_nvml(pynvml_module: ModuleType, tmp_path: Path) -> None:
    lib = ctypes.CDLL(str(lib_path()))
    h100 = write_node(tmp_path / "h" / "nvml.snapshot", "dgx-h100").path
    assert {rc for rc, _ in _read_tray(lib, h100)} == {NVML_ERROR_NOT_SUPPORTED}  # the H100 capture: all N/A
    tray = write_node(tmp_path / "g" / "nvml.snapshot", "gb200-nvl72").path
    with snapshot_env(tray):
        assert lib.nvmlInit_v2() == NVML_SUCCESS
        try:
            h = ctypes.c_void_p()
            lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
            info = PlatformInfoV2(version=ctypes.sizeof(PlatformInfoV2) | 3 << 24)
            assert lib.nvmlDeviceGetPlatformInfo(h, ctypes.byref(info)) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH
            info.version = ctypes.sizeof(PlatformInfoV2) | 1 << 24  # v1: same layout, older field names
            assert lib.nvmlDeviceGetPlatformInfo(h, ctypes.byref(info)) == NVML_SUCCESS and info.moduleId == 2
        finally:
            lib.nvmlShutdown()


def _rendered(profile: str, out: Path) -> tuple[Path, dict[str, str]]:
    """One node of ``profile`` rendered into ``out`` (no agent: IMEX needs none), and its environment."""
    system = load_profile(profile)
    node = system.nodes[0]
    state, _ = faults_state(node, [], system.seed)
    render_node(system, node, state, out, initial=True)
    return out / "root", merged_environment(node_environment(node.name, out, None))


def test_imex_channel_is_injected_by_nvidias_device_plugin(fast_node_tmp: Path,
                                                           device_plugin: Path) -> None:  # noqa: F811
    root, env = _rendered("gb200-nvl72", fast_node_tmp / "node")  # a subdirectory: the shared sections go next to it
    devices = (root / "proc/devices").read_text().splitlines()
    major = next(int(line.split()[0]) for line in devices if line.endswith(" nvidia-caps-imex-channels"))
    st = (root / "dev/nvidia-caps-imex-channels/channel0").lstat()
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, 0)
    imex = root / "proc/driver/nvidia/capabilities/fabric-imex-mgmt"
    assert imex.read_text() == "DeviceFileMinor: 4323\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
    assert (root / "proc/driver/nvidia-caps/sys-minors").read_text() == "fabric-imex-mgmt 4323\n"

    plugin_dir = short_tmp_dir()
    kubelet = Kubelet(plugin_dir)
    kubelet.start()
    view = nodeview.NodeView(root=str(root), binds=(nodeview.Bind(str(plugin_dir), "/var/lib/kubelet/device-plugins"),))
    argv = nodeview.command(view, [str(device_plugin), "--imex-channel-ids=0", "--imex-required",
                                   "--pass-device-specs"])
    with open(plugin_dir / "plugin.log", "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        kubelet.wait_endpoint("nvidia.com/gpu", timeout=60)
        gpu = kubelet.available("nvidia.com/gpu")[0]
        response = kubelet.allocate("nvidia.com/gpu", [[gpu]]).container_responses[0]
        assert "/dev/nvidia-caps-imex-channels/channel0" in {d.host_path for d in response.devices}, \
            (plugin_dir / "plugin.log").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(15)
        kubelet.stop()
        shutil.rmtree(plugin_dir, ignore_errors=True)


@pytest.mark.parametrize(("profile", "driver", "channel"), [("gb200-nvl72", None, True),
                                                           ("dgx-a100", "535.261.03", False)])
def test_imex_only_where_a_rack_uses_it(fast_tmp: Path, profile: str, driver: str | None, channel: bool) -> None:
    """A 535 driver outside an NVLink rack registers no IMEX channels; an NVL72 tray has channel 0."""
    root, _ = _rendered(str(with_driver(fast_tmp / "profile", profile, driver)) if driver else profile,
                        fast_tmp / "node")
    assert ("nvidia-caps-imex-channels" in (root / "proc/devices").read_text()) == channel
    assert (root / "dev/nvidia-caps-imex-channels/channel0").exists() == channel
    params = (root / "proc/driver/nvidia/params").read_text()
    assert ("CreateImexChannel0: 1" in params) == channel
