"""What a starting agent is doing, for whoever waits for it: ``<state dir>/agent.progress``.

A big fleet takes a while to load (about a millisecond per node to expand the model) and a state dir with
rendered nodes takes a while to bring up to date, so a waiter cannot use a fixed time limit that a bigger fleet
would have to beat. Instead the agent says what it is doing (phase, done of total) and the waiter gives up only
when nothing moves (see :mod:`testbed.backends.startwatch`). The file is rewritten atomically
at most every :data:`INTERVAL_S` and on every change of phase; it is advice, not state (never fsynced).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

FILE = "agent.progress"
INTERVAL_S = 0.25


@dataclass
class StartProgress:
    """Writes ``agent.progress`` in ``state_dir`` (nothing when the directory does not exist yet)."""

    state_dir: Path
    _phase: str = ""
    _last: float = field(default=0.0)

    def __call__(self, phase: str, done: int = 0, total: int = 0) -> None:
        now = time.monotonic()
        if phase == self._phase and now - self._last < INTERVAL_S and done < total:
            return
        self._phase, self._last = phase, now
        doc = {"pid": os.getpid(), "phase": phase, "done": done, "total": total, "time": time.time()}
        path = self.state_dir / FILE
        tmp = path.with_name(f".{FILE}.{os.getpid()}")
        try:
            if os.stat(self.state_dir).st_uid != os.geteuid():
                return  # not ours (the agent refuses it when it gets that far): write nothing into it
            tmp.write_text(json.dumps(doc) + "\n")
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except OSError:  # advice only: a full disk or a missing directory must not stop the agent
            tmp.unlink(missing_ok=True)


def read_progress(state_dir: Path) -> dict[str, object] | None:
    """The agent's last word about its start (None when there is none or it does not parse)."""
    try:
        doc = json.loads((state_dir / FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
