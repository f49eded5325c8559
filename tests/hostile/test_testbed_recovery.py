"""A testbed whose agent journal was damaged: restart-agent refuses with the remedy, --salvage-journal recovers."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import cli as testbed_cli
from testbed.cluster import find_cluster


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = testbed_cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_restart_agent_refuses_a_damaged_journal_and_salvages_on_request(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    state = ["--state-dir", str(tmp_path / "s")]
    code, out = run(capsys, "up", "--profile", "gh200", "--name", "hostile", *state)
    assert code == 0, out
    try:
        assert run(capsys, "inject", "gh200-0", "xid", "gpu0", "code=13", "--name", "hostile", *state)[0] == 0
        record = find_cluster("hostile", tmp_path / "s")
        assert record is not None
        run(capsys, "restart-agent", "--name", "hostile", *state)
        journal = record.agent_dir / "journal.jsonl"
        journal.write_bytes(journal.read_bytes().replace(b'"code":13', b'"code":31'))  # altered on disk
        code, out = run(capsys, "restart-agent", "--name", "hostile", *state)
        assert code != 0 and "fails its checksum" in out and "--salvage-journal" in out, out
        code, out = run(capsys, "restart-agent", "--name", "hostile", "--salvage-journal", *state)
        assert code == 0, out
        assert list(record.agent_dir.glob("journal.jsonl.damaged-*")), "the damaged journal is kept"
    finally:
        run(capsys, "down", "--name", "hostile", *state)
