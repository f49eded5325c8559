"""The real-hardware captures (``../shared/reference/captures/qx-*.xml``) as test oracles.

Each capture is a real board's ``nvidia-smi -q -x``. :func:`compare` holds what the fake reports for a GPU (read
the way those nvidia-smi releases read it, see ``capture_view.py``) against the capture's first GPU, element by
element, and sorts every element into one of:

- ``match``: the same value (required for everything that describes the model: part numbers, clocks, limits,
  thresholds, BAR sizes, remapper banks, fabric state, addressing mode, C2C, ...);
- ``na``: N/A in both;
- ``kind``: an element that describes the unit (serial, UUID, bus address, temperatures and power draw of that
  moment, counters since its boot): both have a value of the same form (digits replaced, units kept);
- ``explained``: a difference with a reason written here (schema of a newer nvidia-smi, the capture host);
- ``diff``: anything else; the tests require none.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

CAPTURES = Path(__file__).resolve().parents[3] / "shared" / "reference" / "captures"
"""../shared/reference/captures from the checkout (the worktrees and /work/main sit beside /work/shared)."""

CAPTURE_DIR_CANDIDATES = (CAPTURES, Path("/work/shared/reference/captures"))

UNIT = (
    "/serial", "/uuid", "/pdi", "/minor_number", "/board_id", "/pci/pci_bus", "/pci/pci_device", "/pci/pci_domain",
    "/pci/pci_bus_id", "/platformInfo/module_id", "/platformInfo/chassis_serial_number", "/platformInfo/slot_number",
    "/platformInfo/tray_index", "/platformInfo/gpu_fabric_guid", "/inforom_bbx_flush/latest_timestamp",
    "/inforom_bbx_flush/latest_duration", "/pci/replay_counter", "/pci/tx_util", "/pci/rx_util",
    "/temperature/gpu_temp", "/temperature/memory_temp", "/temperature/gpu_temp_tlimit",
    "/gpu_power_readings/average_power_draw", "/gpu_power_readings/instant_power_draw",
    "/gpu_memory_power_readings/average_power_draw", "/module_power_readings/average_power_draw",
    "/module_power_readings/instant_power_draw", "/bar1_memory_usage/used", "/bar1_memory_usage/free",
    "/fabric/cliqueId", "/fabric/clusterUuid", "/ecc_errors/aggregate/dram_correctable",
    "/clocks_event_reasons_counters/clocks_event_reasons_counters_sw_power_cap",
)
"""Elements that describe the unit or the moment, not the model: same form required, not the same value."""

EXPLAINED: dict[str, str] = {
    "/display_attached": "nvidia-smi 580+ reads it from its private table; no NVML call carries it, and the "
                         "nvidia-smi that could be run here (535-555) predates the element",
    "/gpu_virtualization_mode/virtualization_mode": "the capture host: cloud VMs pass the GPU through "
                                                   "(Pass-Through); the profiles model bare metal (None)",
    "/mig_devices": "schema: the capture lists no MIG devices as the text None",
    "/ecc_errors/unrepairable_memory": "the public nvmlDeviceGetUnrepairableMemoryFlag_v1 arrived with the 590 "
                                       "header (13.1); the 580 nvidia-smi of the GB200/GB300 captures reads the "
                                       "flag from its private table, which the 580 library does not export",
}
"""Elements whose values may differ, and why (checked: the reason must name the element)."""

BOARD_EXPLAINED: dict[tuple[str, str], str] = {
    ("b200", "/addressing_mode"): "the B200 capture host ran without HMM (None); the DGX B200 profile's x86 "
                                  "host has it (HMM), as the H100 and A100 hosts do",
    ("b200", "/persistence_mode"): "the B200 capture host had persistence mode off; the profiles model "
                                   "persistence mode on, as on the six other captured hosts",
    ("gb300", "/pci/pci_gpu_link_info/pcie_gen/max_host_link_gen"): "the GB300 capture's host reported its "
        "maximum PCIe generation (4); the other six print N/A, which the profiles model",
}


@dataclass
class Comparison:
    board: str
    match: list[str] = field(default_factory=list)
    na: list[str] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    explained: list[tuple[str, str]] = field(default_factory=list)
    diff: list[tuple[str, str, str]] = field(default_factory=list)
    """(element, capture's value, fake's value)."""

    def summary(self) -> str:
        return (f"{self.board}: {len(self.match)} match, {len(self.na)} N/A both, {len(self.kind)} unit values of "
                f"the same kind, {len(self.explained)} explained, {len(self.diff)} unexplained differences")


def capture_dir() -> Path | None:
    return next((d for d in CAPTURE_DIR_CANDIDATES if d.is_dir()), None)


def capture_leaves(board: str) -> dict[str, str]:
    """The first GPU of ``qx-<board>.xml`` as element path -> text (supported clocks folded to one line)."""
    d = capture_dir()
    assert d is not None, "no captures directory"
    gpu = ET.parse(d / f"qx-{board}.xml").getroot().find("gpu")
    assert gpu is not None
    out: dict[str, str] = {}

    def walk(elem: ET.Element, path: str) -> None:
        for child in elem:
            p = f"{path}/{child.tag}"
            if child.tag == "supported_clocks":
                out[p] = "; ".join(
                    f"{m.findtext('value')}: "
                    + ",".join(g.text.split()[0] for g in m.findall("supported_graphics_clock") if g.text)
                    for m in child.findall("supported_mem_clock"))
            elif child.tag in ("processes", "accounted_processes", "mig_devices") or len(child) == 0:
                out[p] = (child.text or "").strip()
            else:
                walk(child, p)

    walk(gpu, "")
    return out


def capture_serials(board: str) -> list[str]:
    """Every GPU's ``<serial>`` in ``qx-<board>.xml``, in the capture's order (nvidia-smi's: PCI bus order)."""
    d = capture_dir()
    assert d is not None, "no captures directory"
    return [gpu.findtext("serial") or "" for gpu in ET.parse(d / f"qx-{board}.xml").getroot().iter("gpu")]


def capture_module_ids(board: str) -> list[int]:
    """Every GPU's ``<platformInfo><module_id>`` in ``qx-<board>.xml``, in the capture's order."""
    d = capture_dir()
    assert d is not None, "no captures directory"
    return [int(gpu.findtext("platformInfo/module_id") or 0)
            for gpu in ET.parse(d / f"qx-{board}.xml").getroot().iter("gpu")]


def sharing(serials: list[str], labels: list[int] | None = None) -> set[frozenset[int]]:
    """Which GPUs share a serial: the sets of their positions (or of ``labels[position]``, e.g. module ids), one
    set per distinct serial. Only equality of serials counts, so placeholder serials (the captures') compare."""
    names = labels if labels is not None else list(range(len(serials)))
    groups: dict[str, set[int]] = {}
    for serial, name in zip(serials, names, strict=True):
        groups.setdefault(serial, set()).add(name)
    return {frozenset(g) for g in groups.values()}


def board_capture(board: str) -> dict[str, str]:
    """:func:`capture_leaves`, or skip the test when the captures are not on this machine."""
    if capture_dir() is None:
        import pytest

        pytest.skip("the captures (../shared/reference/captures) are not here")
    return capture_leaves(board)


def number(text: str) -> int:
    """'81559 MiB' -> 81559, '700.00 W' -> 700."""
    return int(float(text.split()[0]))


def shape(value: str) -> str:
    """The form of a value: runs of digits and hex digits folded to one, units and punctuation kept."""
    return re.sub(r"[0-9A-Fa-f]+", "9", value)


def compare(board: str, capture: dict[str, str], fake: dict[str, str]) -> Comparison:
    result = Comparison(board)
    for path, real in capture.items():
        mine = fake.get(path)
        mine = mine.strip() if mine is not None else None
        if mine is None:
            reason = EXPLAINED.get(path) or BOARD_EXPLAINED.get((board, path))
            if reason:
                result.explained.append((path, reason))
            else:
                result.diff.append((path, real, "<not reported>"))
            continue
        if real == mine:
            (result.na if real == "N/A" else result.match).append(path)
        elif path in UNIT and (real == "N/A") == (mine == "N/A") and shape(real) == shape(mine):
            result.kind.append(path)
        elif path in EXPLAINED or (board, path) in BOARD_EXPLAINED:
            result.explained.append((path, EXPLAINED.get(path) or BOARD_EXPLAINED[(board, path)]))
        else:
            result.diff.append((path, real, mine))
    return result
