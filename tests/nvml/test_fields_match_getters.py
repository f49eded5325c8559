"""nvmlDeviceGetFieldValues answers what the direct getter answers for the same counter, on every built-in board.

Oracle: nvml.h 13.4.92 documents each ``NVML_FI_DEV_*`` id with the counter it is, and the same header documents a
direct getter for most of those counters. The pairing table :data:`PAIRS` is written from those comments (quoted
per row); it is not derived from fields.c or device.c. A field and its getter must agree on the return code and,
on success, on the value. The getter side is itself held to the real boards by tests/nvml/test_captures.py (the
captures in ../shared/reference/captures print ECC counts, retired pages, row remapping and NVLink state of real
A100/H100/B200/GB200/GB300/L40S/T4 boards), so agreement here carries that outside oracle over to the fields.

The state is one where the counters are not zero and differ from each other (faults injected through the agent's
own fault kinds, counts chosen distinct: a summand taken from the wrong location or the wrong error type changes a
total). All calls of a board run in one subprocess, so the sweep costs one interpreter per profile.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from fakehw.agent.faults import FAULT_ADAPTER, check_target
from fakehw.model import load_profile
from fakehw.nvml.snapfile import write_snapshot
from tests.nvml.helpers import run_python, write_node

PROFILES = sorted(p.stem for p in (Path(__file__).parents[2] / "fakehw" / "profiles").glob("*.yaml")
                  if not p.stem.startswith("cxl"))
"""Every built-in profile with GPUs (the cxl-* ones have none)."""

# (field id, scopeId, getter expression in the subprocess, the nvml.h comment that pairs them)
# In the expressions, ``h`` is the device handle and ``n`` is pynvml.
PAIRS: list[tuple[int, int, str, str]] = [
    (1, 0, "n.nvmlDeviceGetEccMode(h)[0]", "1 ECC_CURRENT 'Current ECC mode. 1=Active. 0=Inactive'"),
    (2, 0, "n.nvmlDeviceGetEccMode(h)[1]", "2 ECC_PENDING 'Pending ECC mode. 1=Active. 0=Inactive'"),
    (3, 0, "n.nvmlDeviceGetTotalEccErrors(h, 0, 0)", "3 'Total single bit volatile ECC errors'"),
    (4, 0, "n.nvmlDeviceGetTotalEccErrors(h, 1, 0)", "4 'Total double bit volatile ECC errors'"),
    (5, 0, "n.nvmlDeviceGetTotalEccErrors(h, 0, 1)", "5 'Total single bit aggregate (persistent) ECC errors'"),
    (6, 0, "n.nvmlDeviceGetTotalEccErrors(h, 1, 1)", "6 'Total double bit aggregate (persistent) ECC errors'"),
    (29, 0, "len(n.nvmlDeviceGetRetiredPages(h, 0))",
     "29 'Number of retired pages because of single bit errors' (cause MULTIPLE_SINGLE_BIT_ECC_ERRORS)"),
    (30, 0, "len(n.nvmlDeviceGetRetiredPages(h, 1))",
     "30 'Number of retired pages because of double bit errors' (cause DOUBLE_BIT_ECC_ERROR)"),
    (31, 0, "n.nvmlDeviceGetRetiredPagesPendingStatus(h)", "31 'If any pages are pending retirement. 1=yes. 0=no.'"),
    (83, 0, "n.nvmlDeviceGetTotalEnergyConsumption(h)",
     "83 'Total energy consumption for the GPU in mJ since the driver was last reloaded'"),
    (191, 0, "n.nvmlDeviceGetTotalEnergyConsumption(h)",
     "191 'Same as NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION for the GPU' (scope 0: NVML_POWER_SCOPE_GPU)"),
    (94, 0, "n.nvmlDeviceGetPcieReplayCounter(h)", "94 'PCIe replay counter'"),
    (142, 0, "n.nvmlDeviceGetRemappedRows(h)[0]", "142 'Number of remapped rows due to correctable errors'"),
    (143, 0, "n.nvmlDeviceGetRemappedRows(h)[1]", "143 'Number of remapped rows due to uncorrectable errors'"),
    (144, 0, "n.nvmlDeviceGetRemappedRows(h)[2]", "144 'If any rows are pending remapping. 1=yes 0=no'"),
    (145, 0, "n.nvmlDeviceGetRemappedRows(h)[3]", "145 'If any rows failed to be remapped 1=yes 0=no'"),
    (187, 0, "n.nvmlDeviceGetPowerManagementLimitConstraints(h)[0]", "187 'Minimum power limit in milliwatts.'"),
    (188, 0, "n.nvmlDeviceGetPowerManagementLimitConstraints(h)[1]", "188 'Maximum power limit in milliwatts.'"),
    (189, 0, "n.nvmlDeviceGetPowerManagementDefaultLimit(h)",
     "189 'Default power limit in milliwatts (limit which device boots with).'"),
    (190, 0, "n.nvmlDeviceGetEnforcedPowerLimit(h)",
     "190 'Limit currently enforced in milliwatts (This includes other limits set elsewhere...)'"),
    (192, 0, "n.nvmlDeviceGetPowerManagementLimit(h)",
     "192 'Power limit requested by NVML or any other userspace client.'"),
]

# nvml.h on nvmlDeviceGetViolationStatus (deprecated 13.0: "Use nvmlDeviceGetFieldValues to query this data.
# Translations are as follows"): NVML_PERF_POLICY_POWER (0) -> NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP (= 74),
# THERMAL (1) -> ..._SW_THERM_SLOWDOWN (269), SYNC_BOOST (2) -> ..._SYNC_BOOST (= 76), BOARD_LIMIT (3) -> 77,
# LOW_UTILIZATION (4) -> 78, RELIABILITY (5) -> 79, TOTAL_BASE_CLOCKS (11) -> 81 (TOTAL_APP_CLOCKS: "DEPRECATED, Do
# not use").
for _policy, _fid in ((0, 74), (1, 269), (2, 76), (3, 77), (4, 78), (5, 79), (11, 81)):
    PAIRS.append((_fid, 0, f"n.nvmlDeviceGetViolationStatus(h, {_policy}).violationTime",
                  f"{_fid}: nvmlDeviceGetViolationStatus translation of NVML_PERF_POLICY {_policy}"))

# 7-28: '<location> single/double bit volatile/aggregate ECC errors' vs nvmlDeviceGetMemoryErrorCounter(error type,
# counter type, location); nvml.h's nvmlMemoryLocation_t: L1_CACHE 0, L2_CACHE 1, DEVICE_MEMORY 2, REGISTER_FILE 3,
# TEXTURE_MEMORY 4, CBU 6; nvmlMemoryErrorType_t CORRECTED 0 (single bit), UNCORRECTED 1 (double bit);
# nvmlEccCounterType_t VOLATILE 0, AGGREGATE 1.
_LOCATED = [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3), (0, 4), (1, 4), (1, 6)]
for _counter, _first in ((0, 7), (1, 18)):
    for _i, (_err, _loc) in enumerate(_LOCATED):
        PAIRS.append((_first + _i, 0, f"n.nvmlDeviceGetMemoryErrorCounter(h, {_err}, {_counter}, {_loc})",
                      f"{_first + _i}: ECC error type {_err}, counter {_counter}, location {_loc}"))

# Per-lane NVLink error counters: 'NVLink flow control CRC Error Counter for Lane N' (32-37, L6-L11 at 96-101),
# 'NVLink data CRC Error Counter' (39-44, 102-107), 'NVLink Replay Error Counter' (46-51, 108-113), 'NVLink
# Recovery Error Counter' (53-58, 114-119), 'NVLink data ECC Error Counter for Link N' (148-153, 154-159) vs
# nvmlDeviceGetNvLinkErrorCounter(link, NVML_NVLINK_ERROR_DL_CRC_FLIT 2 / CRC_DATA 3 / REPLAY 0 / RECOVERY 1 /
# ECC_DATA 4); their _TOTAL (38, 45, 52, 59; 160 'total for all Links') is the sum over the device's links.
_LANES = {2: (32, 96), 3: (39, 102), 0: (46, 108), 1: (53, 114), 4: (148, 154)}
_TOTALS = {2: 38, 3: 45, 0: 52, 1: 59, 4: 160}
LINKS = 12
"""Lanes 0-11: the per-lane field ids nvml.h has (links beyond 11 are asked through the scoped fields)."""
for _c, (_lo, _hi) in _LANES.items():
    for _link in range(LINKS):
        _fid = _lo + _link if _link < 6 else _hi + _link - 6
        PAIRS.append((_fid, 0, f"n.nvmlDeviceGetNvLinkErrorCounter(h, {_link}, {_c})",
                      f"{_fid}: NVLink error counter {_c} of lane {_link}"))
    PAIRS.append((_TOTALS[_c], 0, f"sum_links(h, {_c})", f"{_TOTALS[_c]}: NVLink error counter {_c}, total"))
# Link-scoped (scopeId = link): 161 'NVLink Replay Error Counter', 162 'NVLink Recovery Error Counter' (both 'This is
# unsupported for Blackwell+': paired on earlier architectures only, see BLACKWELL_UNSUPPORTED), 165 'NVLink
# State - one of NVML_NVLINK_STATE_* values', 166 'NVLink Version' vs nvmlDeviceGetNvLinkErrorCounter /
# nvmlDeviceGetNvLinkState / nvmlDeviceGetNvLinkVersion of that link (18 = NVML_NVLINK_MAX_LINKS links).
for _link in range(18):
    PAIRS += [
        (161, _link, f"n.nvmlDeviceGetNvLinkErrorCounter(h, {_link}, 0)", f"161 scope {_link}"),
        (162, _link, f"n.nvmlDeviceGetNvLinkErrorCounter(h, {_link}, 1)", f"162 scope {_link}"),
        (165, _link, f"n.nvmlDeviceGetNvLinkState(h, {_link})", f"165 scope {_link}"),
        (166, _link, f"n.nvmlDeviceGetNvLinkVersion(h, {_link})", f"166 scope {_link}"),
    ]

BLACKWELL_UNSUPPORTED = (161, 162)
"""nvml.h on 161-163: "This is unsupported for Blackwell+" (the getter stays; the field answers NOT_SUPPORTED)."""

SCRIPT = """
import json, pynvml as n
pairs = json.loads(%r)
blackwell_unsupported = json.loads(%r)
def sum_links(h, c):
    total = 0
    for link in range(18):
        try:
            total += n.nvmlDeviceGetNvLinkErrorCounter(h, link, c)
        except n.NVMLError as e:
            if e.value == n.NVML_ERROR_NOT_SUPPORTED and link == 0:
                raise
    return total
def getter(h, expr):
    try:
        return [0, int(eval(expr))]
    except n.NVMLError as e:
        return [e.value, None]
n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    values = n.nvmlDeviceGetFieldValues(h, [(f, s) for f, s, _ in pairs])
    blackwell = n.nvmlDeviceGetArchitecture(h) >= 10  # NVML_DEVICE_ARCH_BLACKWELL
    for (f, s, expr), v in zip(pairs, values):
        if blackwell and f in blackwell_unsupported:
            if v.nvmlReturn != n.NVML_ERROR_NOT_SUPPORTED:
                out.append([i, f, s, "Blackwell+", [v.nvmlReturn], [n.NVML_ERROR_NOT_SUPPORTED]])
            continue
        field = [v.nvmlReturn, None]
        if v.nvmlReturn == 0:
            field[1] = v.value.uiVal if v.valueType == 1 else v.value.ullVal
        out.append([i, f, s, expr, field, getter(h, expr)])
n.nvmlShutdown()
print(json.dumps(out))
"""


def _faults(profile: str) -> list[dict[str, Any]]:
    """Distinct non-zero counts: ECC of both types at every location the fault kind has, NVLink errors of every
    counter on several links, Xids, a hot GPU and a capped one (violation times). Requests the board cannot take (no
    NVLink, a power limit below its minimum) are left out."""
    wanted: list[dict[str, Any]] = []
    for gpu, scale in (("gpu0", 1), ("gpu1", 100)):
        for i, loc in enumerate(("device-memory", "l1-cache", "l2-cache", "register-file", "dram", "sram")):
            wanted.append({"kind": "ecc", "device": gpu, "type": "sbe", "location": loc, "count": scale * (3 + i)})
            wanted.append({"kind": "ecc", "device": gpu, "type": "dbe", "location": loc, "count": scale * (11 + 2 * i)})
        for j, counter in enumerate(("replay", "recovery", "crc-flit", "crc-data", "ecc-data")):
            for link in (0, 3, 7, 11, 17):
                wanted.append({"kind": "nvlink-errors", "device": gpu, "link": link, "counter": counter,
                               "increment": scale * (5 + 7 * j + link)})
        wanted.append({"kind": "nvlink-down", "device": gpu, "link": 2})
        wanted.append({"kind": "xid", "device": gpu, "code": 48})
    wanted.append({"kind": "thermal", "device": "gpu0", "temperature_c": 90})  # hot: clocks slow down
    wanted.append({"kind": "power-cap", "device": "gpu1", "limit_w": 200})  # power violation time accrues
    node = load_profile(profile).nodes[0]
    kept = []
    for body in wanted:
        try:
            check_target(FAULT_ADAPTER.validate_python(body), node)
        except ValueError:
            continue
        kept.append(body)
    return kept


@pytest.mark.parametrize("profile", PROFILES)
def test_every_field_answers_what_its_getter_answers(tmp_path: Path, profile: str) -> None:
    snap = write_node(tmp_path / "snap.bin", profile, faults=_faults(profile))
    rows = run_python(SCRIPT % (_pairs_json(), json.dumps(BLACKWELL_UNSUPPORTED)), snap.path, timeout=120)
    disagree = [(gpu, fid, scope, expr, field, getter) for gpu, fid, scope, expr, field, getter in rows
                if field != getter]
    assert not disagree, "\n".join(map(str, disagree[:40]))
    assert any(getter[1] for *_, getter in rows), "every counter is zero: the state does not separate them"


def test_volatile_and_aggregate_ecc_fields_answer_their_own_counters(tmp_path: Path) -> None:
    """nvml.h's nvmlEccCounterType_t: volatile counts are "reset each time the driver loads", aggregate ones
    "persist across reboots", so a board that had errors before its last driver load has aggregate counts above its
    volatile ones. The fault model counts both alike, so the snapshot here is edited as such a board's: each aggregate
    ECC count 1,000 above its volatile one. Fields 3-28 must still answer what nvmlDeviceGetTotalEccErrors and
    nvmlDeviceGetMemoryErrorCounter answer for the same error type, counter type and location (the pairs above),
    e.g. field 17 ('CBU double bit volatile') the volatile count and field 28 the aggregate one."""
    snap = write_node(tmp_path / "snap.bin", "dgx-h100", faults=_faults("dgx-h100"))
    gpu = snap.snapshot.gpus[0]
    per_counter = len(gpu.ecc_counts) // 4  # [error type][counter type][location], nvml_abi.h's layout
    counts = list(gpu.ecc_counts)
    for etype in (0, 1):
        start = (etype * 2 + 1) * per_counter
        counts[start:start + per_counter] = [c + 1000 for c in counts[start:start + per_counter]]
    gpus = (dataclasses.replace(gpu, ecc_counts=tuple(counts)), *snap.snapshot.gpus[1:])
    write_snapshot(snap.path, dataclasses.replace(snap.snapshot, gpus=gpus).to_bytes())
    ecc = [(f, s, expr) for f, s, expr, _ in PAIRS if 3 <= f <= 28]
    rows = run_python(SCRIPT % (json.dumps(ecc), json.dumps(BLACKWELL_UNSUPPORTED)), snap.path, timeout=120)
    got = {fid: (field, getter) for gpu_index, fid, _, _, field, getter in rows if gpu_index == 0}
    assert len(got) == len(ecc), sorted(got)
    assert all(field == getter for field, getter in got.values()), got
    assert got[17][1][1] + 1000 == got[28][1][1], (got[17], got[28])  # the edit is seen: the counters differ


def _pairs_json() -> str:
    return json.dumps([(f, s, expr) for f, s, expr, _ in PAIRS])
