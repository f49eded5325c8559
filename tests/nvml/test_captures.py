"""Readings that match real hardware: each board the built-in profiles model, against its real capture.

For every capture in ../shared/reference/captures the fake GPU of the matching profile (its default driver, the
captured board's branch) is read as that capture's nvidia-smi reads a GPU (tests/nvml/capture_view.py, with
nvidia-ml-py 13.615.71) and compared element by element (tests/nvml/captures.py): model-describing elements must
be equal, unit-describing ones of the same kind, N/A where the real board says N/A; every other difference must
carry a written reason. The counts are printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.nvml import library_dir
from tests.nvml import references
from tests.nvml.captures import capture_dir, capture_leaves, capture_serials, compare, sharing
from tests.nvml.helpers import NodeSnap

VIEW = Path(__file__).with_name("capture_view.py")
TESTS = Path(__file__).resolve().parent

BOARDS = {
    # capture: (profile, node of the profile that matches the captured host)
    "a100": (str(TESTS / "profiles" / "a100-40gb.yaml"), 0),
    "h100": ("dgx-h100", 0),
    "b200": ("dgx-b200", 0),
    "gb200": ("gb200-nvl72", 4),  # the capture's tray index is 4
    "gb300": ("gb300-nvl72", 15),  # and 15
    "l40s": ("l40s-server", 0),
    "t4": ("t4-cloud", 0),
}


def observe(snapshot: Path) -> dict[str, object]:
    env = dict(os.environ, FAKEHW_NVML_SNAPSHOT=str(snapshot), LD_LIBRARY_PATH=str(library_dir()),
               PYTHONPATH=str(references.bindings("13.615.71")))
    env.pop("FAKEHW_VISIBLE_DEVICES", None)
    proc = subprocess.run([sys.executable, str(VIEW)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout)
    return result


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_the_fake_reads_as_the_captured_board(node_snapshot: Callable[..., NodeSnap], board: str) -> None:
    if capture_dir() is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    profile, node_index = BOARDS[board]
    snap = node_snapshot(profile, node_index)
    seen = observe(snap.path)
    gpus = seen["gpus"]
    assert isinstance(gpus, list)
    result = compare(board, capture_leaves(board), gpus[0])
    print("\n" + result.summary())
    for path, reason in result.explained:
        print(f"    explained {path}: {reason}")
    assert result.diff == [], "\n".join(f"{p}: real {r!r}, fake {f!r}" for p, r, f in result.diff)
    # The comparison has teeth: most of a board is model-describing and must match exactly.
    assert len(result.match) >= 100


MULTI_GPU = ("b200", "gb200", "gb300", "h100")
"""The captures of more than one GPU (the others hold one: nothing to share or not share)."""


@pytest.mark.parametrize("board", MULTI_GPU)
def test_gpus_share_a_serial_as_the_captured_boards_do(node_snapshot: Callable[..., NodeSnap], board: str) -> None:
    """nvml.h, nvmlDeviceGetSerial: the board serial "corresponds to the value printed directly on the board", so
    GPUs of one board print one serial. The captures show which do: qx-gb200.xml and qx-gb300.xml print two serials
    for a tray's four GPUs, the first two GPUs sharing one and the last two the other (a compute board carries two
    GPUs), while qx-h100.xml and qx-b200.xml print eight serials for eight GPUs (one board each). The captures'
    serials are placeholders, but the scrub kept equal serials equal (the H100's eight are 1..8, the GB200's four
    1,1,2,2), so which GPUs share is the real boards'. The fake node matching the capture must group its GPUs
    (nvidia-smi order) the same way."""
    if capture_dir() is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    captured = capture_serials(board)
    assert len(captured) > 1
    profile, node_index = BOARDS[board]
    gpus = observe(node_snapshot(profile, node_index).path)["gpus"]
    assert isinstance(gpus, list)
    fake = [str(gpu["/serial"]) for gpu in gpus]
    assert len(fake) == len(captured)
    assert sharing(fake) == sharing(captured), (fake, captured)


def test_a_wrong_model_value_is_a_difference() -> None:
    """The comparison itself: a value off by one on a model element is reported, not excused."""
    truth = {"/max_clocks/graphics_clock": "1980 MHz", "/temperature/gpu_temp": "29 C", "/fan_speed": "N/A"}
    off = compare("h100", truth, {"/max_clocks/graphics_clock": "1965 MHz", "/temperature/gpu_temp": "31 C",
                                  "/fan_speed": "N/A"})
    assert off.diff == [("/max_clocks/graphics_clock", "1980 MHz", "1965 MHz")]
    assert off.kind == ["/temperature/gpu_temp"] and off.na == ["/fan_speed"]
    missing = compare("h100", truth, {"/temperature/gpu_temp": "N/A", "/fan_speed": "0 %"})
    assert {p for p, _, _ in missing.diff} == set(truth)
