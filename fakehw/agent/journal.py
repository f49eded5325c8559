"""An append-only JSON-lines journal of what the agent was told, so a restarted agent comes back the same.

Each line is one record (``{"op": "inject", ...}``). Lines are appended and flushed as they happen; a torn last
line (the agent died mid-write) is ignored on replay, as is any line that does not parse, with a warning. On
start the agent compacts the journal to the records that still matter.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from fakehw.render.atomic import atomic_write

log = logging.getLogger(__name__)


class Journal:
    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held open for the agent's lifetime

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), sort_keys=True)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()

    def replay(self) -> Iterator[dict[str, Any]]:
        """Records in the order they were written; unreadable lines are skipped with a warning."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
        lines = text.split("\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                torn = number == len(lines) or (number == len(lines) - 1 and not lines[-1])
                log.warning("journal %s line %d %s; skipped", self.path, number,
                            "is torn (agent stopped mid-write)" if torn else "does not parse")
                continue
            if isinstance(record, dict) and isinstance(record.get("op"), str):
                yield record
            else:
                log.warning("journal %s line %d is not a record; skipped", self.path, number)

    def compact(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace the journal with ``records`` (atomically)."""
        data = "".join(json.dumps(r, separators=(",", ":"), sort_keys=True) + "\n" for r in records)
        with self._lock:
            self._fh.close()
            atomic_write(self.path, data.encode(), 0o600)
            self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
