"""Finding 6: a profile's cost is bounded before any work: alias bombs, huge or sparse files, FIFOs are refused.

Before: a 645-709-byte profile of nested anchors under ``override`` expanded to 10^9 values in the digest step
(over 60-120 s, 6 GB, then a panic in pydantic-core); the 4 MiB limit was checked after reading the whole file
(an 8 GiB sparse file: MemoryError traceback). Each case runs in a child process under a 1 GiB address-space
limit, so a regression fails (MemoryError, or the time bound of the run) instead of taking the machine down.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fakehw.model.loader import MAX_EXPANDED_NODES, MAX_PROFILE_BYTES

MEMORY_LIMIT = 1 << 30
HANG_GUARD_S = 120


def alias_bomb(levels: int = 9, width: int = 10) -> str:
    """Nested anchors: ``width ** levels`` values once expanded (10^9 by default), under 800 bytes of YAML."""
    lines = ["name: bomb", "description: aliases", "groups:", "  - name: g", "    from: dgx-h100", "    override:",
             f"      a0: &a0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels + 1):
        lines.append(f"      a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def load_in_child(path: Path) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))
        from fakehw.model import load_profile
        from fakehw.model.errors import ProfileError
        try:
            load_profile({str(path)!r})
        except ProfileError as exc:
            print("refused:", exc)
            sys.exit(0)
        print("loaded")
        sys.exit(1)
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_an_alias_bomb_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    assert path.stat().st_size < 800
    proc = load_in_child(path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"the document expands to more than {MAX_EXPANDED_NODES} values" in proc.stdout


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("name: loop\ndescription: d\ngroups:\n  - name: g\n    from: dgx-h100\n"
                    "    override: &me {labels: {a: b}, again: *me}\n")
    proc = load_in_child(path)
    assert proc.returncode == 0 and "refers to a node that contains it" in proc.stdout, proc.stdout + proc.stderr


def test_aliases_within_the_limit_still_work(tmp_path: Path) -> None:
    from fakehw.model import load_profile

    path = tmp_path / "ok.yaml"
    path.write_text("name: ok\ndescription: d\ngroups:\n  - name: a\n    from: dgx-h100\n"
                    "    override: &labels {labels: {rack: r1}}\n  - name: b\n    from: dgx-h100\n"
                    "    override: *labels\n")
    system = load_profile(path)
    assert [dict(n.labels).get("rack") for n in system.nodes] == ["r1", "r1"]


def test_an_8_gib_sparse_file_is_refused_without_being_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as fh:
        fh.truncate(8 << 30)
    proc = load_in_child(path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"profile is {8 << 30} bytes, larger than the {MAX_PROFILE_BYTES}-byte limit" in proc.stdout


def test_a_fifo_named_as_a_profile_is_refused_not_waited_on(tmp_path: Path) -> None:
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    from fakehw.model.errors import ProfileError
    from fakehw.model.loader import read_profile_text

    with pytest.raises(ProfileError, match="not a regular file"):
        read_profile_text(path)


def test_the_cli_refuses_the_bomb_with_a_located_message(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    proc = subprocess.run([sys.executable, "-m", "fakehw.cli", "validate", str(path)], capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{path}:" in proc.stdout + proc.stderr and "expands to more than" in proc.stdout + proc.stderr
