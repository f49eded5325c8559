"""Field values for hardware no captured board has (issue 16, coverage-directed): the EDPp multiplier, which the
captures of the 595 driver print N/A, and the bank remapper's counts, a Rubin-or-newer unit. No area test asked
for them, so fields.c's f_misc branches answering them never ran.

Expected return codes come from nvml.h (13.4.92) and the real ``nvidia-smi -q -x`` captures
(../shared/reference/captures), never from the snapshot code under test.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from types import ModuleType

import pytest

from tests.nvml.captures import capture_dir
from tests.nvml.helpers import NodeSnap
from tests.nvml.test_pynvml import handles

Nvml = Callable[..., NodeSnap]

NVML_FI_DEV_EDPP_MULTIPLIER = 274
BANK_REMAPPER_FIELDS = (303, 304, 305, 306, 307)
"""nvml.h: NVML_FI_DEV_ACTIVE_BANK_REMAPPINGS (303), _INACTIVE_BANK_REMAPPINGS (304),
_BANK_REMAPPER_HISTOGRAM_MAX (305), _HISTOGRAM_NONE (306), _PENDING_BANK_REMAPPING (307), under "Bank Remapper"."""


@pytest.mark.parametrize("profile, board", [("l40s-server", "l40s"), ("t4-cloud", "t4")])
def test_edpp_and_bank_remapper_fields_are_not_supported_on_the_595_boards(
        nvml: Nvml, pynvml_module: ModuleType, profile: str, board: str) -> None:
    """qx-l40s.xml and qx-t4.xml (driver 595.91.07) print ``<edpp_multiplier>N/A</edpp_multiplier>`` for their GPU:
    field NVML_FI_DEV_EDPP_MULTIPLIER (274) answers NOT_SUPPORTED in its nvmlReturn. nvml.h's bank remapper
    (nvmlDeviceGetBankRemapperStatus_v1) is ``%RUBIN_OR_NEWER%``: fields 303-307, its counts, answer NOT_SUPPORTED
    on every GPU of these boards too, each field in the order asked and with its own id (nvml.h: each
    nvmlFieldValue_t's nvmlReturn is that field's answer)."""
    n = pynvml_module
    d = capture_dir()
    if d is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    root = ET.parse(d / f"qx-{board}.xml").getroot()
    assert root.findtext("driver_version") == "595.91.07"
    assert {g.findtext("edpp_multiplier") for g in root.iter("gpu")} == {"N/A"}
    nvml(profile)
    ids = (NVML_FI_DEV_EDPP_MULTIPLIER, *BANK_REMAPPER_FIELDS)
    for h in handles(n):
        values = n.nvmlDeviceGetFieldValues(h, list(ids))
        assert [v.fieldId for v in values] == list(ids)
        assert [v.nvmlReturn for v in values] == [n.NVML_ERROR_NOT_SUPPORTED] * len(ids)
