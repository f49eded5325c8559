"""Link-scoped field values beyond state, speed and version: the link a field's scopeId names, the NVLink5-only
traffic counters, the power-threshold group.

Sources: nvml.h 13.4.92. Its link-scoped fields take "Link ID ... in the scopeId field in nvmlFieldValue_t"; a link
index the device cannot have (``NVML_NVLINK_MAX_LINKS`` = 18 is one past the last) is refused as the NVLink getters
refuse it ("NVML_ERROR_INVALID_ARGUMENT if device or link is invalid"), and a device without NVLink answers
NOT_SUPPORTED for its links as ``nvmlDeviceGetNvLinkState`` does. 201-204 are "Total Tx/Rx packets/bytes on the link
in NVLink5"; 225 ``NVML_FI_DEV_NVLINK_GET_POWER_THRESHOLD_SUPPORTED`` "Determine if Nvlink Power Threshold feature is
supported", the feature 168 (the idle period "before transitioning links to sleep state"), 223/200 (its min/max) and
224 (its units) describe; 167 is the link's power state, "0=HIGH_SPEED 1=LOW_SPEED".
"""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.nvml.test_pynvml import Nvml, handles

MAX_LINKS = 18
"""NVML_NVLINK_MAX_LINKS (nvml.h)."""
LINK_SCOPED = (146, 161, 162, 163, 164, 165, 166, 167, 168, 200, 201, 202, 203, 204, 222, 223, 224, 225, 235, 250,
               289, 296)
"""Fields nvml.h documents as taking the link in scopeId: REMOTE_NVLINK_ID, the DL error counters, speed, state,
version, power state and threshold (with its min, max, units and supported flag), the NVLink5 traffic counters,
the symbol BER, the FEC history bins (first and last), a lane's raw errors and the data rate."""
TRAFFIC = (201, 202, 203, 204)
"""XMIT_PACKETS, XMIT_BYTES, RCV_PACKETS, RCV_BYTES: "... on the link in NVLink5"."""
THRESHOLD = (168, 223, 200, 224)
"""POWER_THRESHOLD, _MIN, _MAX, _UNITS: the power-threshold feature's values."""


@pytest.mark.parametrize(("profile", "link", "status"), [
    ("dgx-h100", MAX_LINKS, "NVML_ERROR_INVALID_ARGUMENT"),
    ("dgx-b200", MAX_LINKS, "NVML_ERROR_INVALID_ARGUMENT"),
    ("edge-pcie", 0, "NVML_ERROR_NOT_SUPPORTED"),
])
def test_a_link_the_device_cannot_have_is_refused_by_every_link_scoped_field(
        nvml: Nvml, pynvml_module: ModuleType, profile: str, link: int, status: str) -> None:
    n = pynvml_module
    nvml(profile)
    h = handles(n)[0]
    with pytest.raises(n.NVMLError) as refused:
        n.nvmlDeviceGetNvLinkState(h, link)
    assert refused.value.value == getattr(n, status)
    values = n.nvmlDeviceGetFieldValues(h, [(f, link) for f in LINK_SCOPED])
    assert {v.fieldId: v.nvmlReturn for v in values} == dict.fromkeys(LINK_SCOPED, getattr(n, status))


@pytest.mark.parametrize(("profile", "nvlink5"), [("dgx-b200", True), ("dgx-h100", False)])
def test_the_traffic_counters_are_nvlink5_s(nvml: Nvml, pynvml_module: ModuleType, profile: str,
                                            nvlink5: bool) -> None:
    """A B200's links (NVLink 5) count packets and bytes both ways, a packet being at least one byte; an H100's
    (NVLink 4) do not have the counters."""
    n = pynvml_module
    nvml(profile)
    for link in (0, MAX_LINKS - 1):
        values = n.nvmlDeviceGetFieldValues(handles(n)[1], [(f, link) for f in TRAFFIC])
        if not nvlink5:
            assert [v.nvmlReturn for v in values] == [n.NVML_ERROR_NOT_SUPPORTED] * 4, link
            continue
        assert [v.nvmlReturn for v in values] == [n.NVML_SUCCESS] * 4, link
        tx_packets, tx_bytes, rx_packets, rx_bytes = (v.value.ullVal for v in values)
        assert tx_bytes >= tx_packets and rx_bytes >= rx_packets, link


@pytest.mark.parametrize("profile", ["dgx-h100", "dgx-b200"])
def test_the_power_threshold_fields_follow_their_supported_flag(nvml: Nvml, pynvml_module: ModuleType,
                                                                profile: str) -> None:
    """Where the threshold feature is not supported its values are not either, and a link that cannot be sent to
    sleep stays at HIGH_SPEED (0); where it is, its values answer."""
    n = pynvml_module
    nvml(profile)
    h = handles(n)[0]
    for link in (0, MAX_LINKS - 1):
        supported, state, *threshold = n.nvmlDeviceGetFieldValues(h, [(f, link) for f in (225, 167, *THRESHOLD)])
        assert (supported.nvmlReturn, state.nvmlReturn) == (n.NVML_SUCCESS, n.NVML_SUCCESS), link
        if supported.value.uiVal == 0:
            assert [v.nvmlReturn for v in threshold] == [n.NVML_ERROR_NOT_SUPPORTED] * len(THRESHOLD), link
            assert state.value.uiVal == 0, link
        else:
            assert [v.nvmlReturn for v in threshold] == [n.NVML_SUCCESS] * len(THRESHOLD), link


NVLINK5_ERROR_COUNTS = (*range(206, 216), 219, 221, 289, 290, 295, *range(235, 251))
"""nvml.h's NVLink5 per-link error counts: malformed packets (206), buffer overruns (207), Rx errors (208), remote
(209) and general (210) Rx errors, local link integrity (211), Tx discards (212), recoveries succeeded, failed and
all (213-215), effective errors (219), symbol errors (221), lane 0 / 1 raw errors (289, 290), PLR transmit
retry blocks (295), and the FEC error history bins 0-15 (235-250)."""


def test_a_link_that_had_no_errors_counts_none(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """A B200 (NVLink 5) with no fault injected: its links had no errors, so every NVLink5 error count of
    NVLINK5_ERROR_COUNTS is 0 on its first and last links, and the effective data rate (296, "available for
    transactions after accounting for FEC overhead") is above 0 and no more than the link's speed (164), from which
    the FEC overhead is taken."""
    n = pynvml_module
    nvml("dgx-b200")
    h = handles(n)[2]
    for link in (0, MAX_LINKS - 1):
        values = n.nvmlDeviceGetFieldValues(h, [(f, link) for f in (*NVLINK5_ERROR_COUNTS, 296, 164)])
        assert {v.fieldId: v.nvmlReturn for v in values} == dict.fromkeys((*NVLINK5_ERROR_COUNTS, 296, 164),
                                                                          n.NVML_SUCCESS), link
        assert {v.fieldId: v.value.ullVal for v in values[:-2]} == dict.fromkeys(NVLINK5_ERROR_COUNTS, 0), link
        rate, speed = values[-2].value.uiVal, values[-1].value.uiVal
        assert 0 < rate <= speed, link
