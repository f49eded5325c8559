"""``tools/mutate.py`` (``make mutate``) run where its engine is not installed says how to get it, not a traceback."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "mutate.py"


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fakehw_mutate_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_missing_engine_is_named_with_the_command_that_installs_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    tool = _load_tool()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "cosmic_ray" else real(name, *a))
    assert tool.main(["--area", "fabric lint", "--work", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Cosmic Ray" in err and "make mutate" in err and ".[mutate]" in err
    assert list(tmp_path.iterdir()) == []  # nothing started
