"""Idempotency keys: a client that retries a change (its answer was lost) gets the first answer, not a second change.

A mutating request may carry ``Idempotency-Key: <key>`` (the header of the IETF httpapi draft of that name; Stripe
and others use it the same way). The agent remembers, per key, a fingerprint of the request (method, path,
canonical body) and the answer it gave:

- the same key and request again: the stored answer, with ``Idempotent-Replayed: true``;
- the same key with another request: 422, nothing done;
- the same key while the first request is still running: 409, retry later.

Only successful answers are stored: a refused or failed request changed nothing, so running it again is safe.
Fault injections and heals store their key in the same journal record as the change, so a retry after an agent
restart is answered too (see :mod:`fakehw.agent.service`). Other changes (CXL, memory pools: their answers carry
access tokens, which are never written to disk) are remembered while the agent runs.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_KEYS = 10_000
TTL_S = 24 * 3600.0
KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


class IdempotencyError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Answer:
    fingerprint: str
    status: int
    payload: Any
    time: float
    durable: bool
    """Journaled with the change (kept across restarts)."""


def fingerprint(method: str, path: str, body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{method} {path}\n{canonical}".encode()).hexdigest()


def check_key(key: str) -> str:
    if not KEY_RE.match(key):
        raise IdempotencyError(400, "Idempotency-Key must be 1-255 visible ASCII characters")
    return key


class IdempotencyCache:
    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._answers: OrderedDict[str, Answer] = OrderedDict()
        self._running: dict[str, str] = {}

    def begin(self, key: str, fp: str) -> Answer | None:
        """The stored answer for ``key``, or None after marking the request as running (call :meth:`end`)."""
        with self._lock:
            self._expire()
            answer = self._answers.get(key)
            if answer is not None:
                if answer.fingerprint != fp:
                    raise IdempotencyError(422, f"Idempotency-Key {key!r} was used for a different request")
                return answer
            if key in self._running:
                raise IdempotencyError(409, f"a request with Idempotency-Key {key!r} is still running; retry later")
            self._running[key] = fp
            return None

    def end(self, key: str, status: int | None = None, payload: Any = None, durable: bool = False) -> None:
        """The request of ``key`` finished; a successful answer (``status`` < 300) is stored."""
        with self._lock:
            fp = self._running.pop(key, None)
            stored = self._answers.get(key)
            if stored is not None and stored.durable:
                return  # the change recorded its answer with itself
            if fp is not None and status is not None and status < 300:
                self._store(key, Answer(fp, status, payload, self._clock(), durable))

    def remember(self, key: str, answer: Answer) -> None:
        """Store an answer found in the journal (on replay)."""
        with self._lock:
            self._store(key, answer)

    def durable(self) -> list[tuple[str, Answer]]:
        """Journaled answers still remembered, oldest first (for compaction)."""
        with self._lock:
            self._expire()
            return [(k, a) for k, a in self._answers.items() if a.durable]

    def _store(self, key: str, answer: Answer) -> None:
        self._answers[key] = answer
        self._answers.move_to_end(key)
        while len(self._answers) > MAX_KEYS:
            self._answers.popitem(last=False)

    def _expire(self) -> None:
        horizon = self._clock() - TTL_S
        while self._answers:
            key, oldest = next(iter(self._answers.items()))
            if oldest.time >= horizon:
                break
            del self._answers[key]
