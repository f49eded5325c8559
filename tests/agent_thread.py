"""An agent (``fakehw.agent.main.run_agent``) run on a thread of the test's own process, for tests that speak to it
over its socket and may look at what the process holds (its descriptors, its memory)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from fakehw.agent.main import run_agent


@contextlib.contextmanager
def agent_thread(**kwargs: Any) -> Iterator[None]:
    """Run ``run_agent(**kwargs)`` on a daemon thread until the block ends; the block starts once the agent is up
    (it serves its socket), and the agent is stopped after it, whether the block failed or not."""
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=run_agent, kwargs={**kwargs, "ready": ready, "stop": stop}, daemon=True)
    thread.start()
    try:
        assert ready.wait(120), "the agent did not come up"
        yield
    finally:
        stop.set()
        thread.join(10)
