"""Waiting for a condition nobody can be told about directly (a file written by another process, a
watch event, a plugin re-registering): poll it, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    """True as soon as ``predicate()`` is truthy; after ``timeout`` seconds, whether it is truthy then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
