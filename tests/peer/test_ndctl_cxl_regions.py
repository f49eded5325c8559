"""ndctl v81's shorter CXL scripts run unchanged against fakehw (tests/peer/ndctl.py says how), each on a fresh
cluster as its ``modprobe -r; modprobe`` of cxl_test asks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.peer.ndctl import run_and_judge


@pytest.mark.parametrize("name", ["cxl-region-sysfs.sh", "cxl-destroy-region.sh", "cxl-xor-region.sh",
                                  "cxl-qos-class.sh"])
def test_script_passes_unchanged_with_its_checks_run(name: str, testbed_state_dir: Path, shims: Path) -> None:
    run_and_judge(name, testbed_state_dir, shims)
