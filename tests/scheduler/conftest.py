"""A scripted extender: an HTTP server answering each verb with whatever a test sets (bodies, statuses, delays)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from testbed.httpservice import JsonHandler, LoopbackJsonServer, send_json_bytes

Reply = tuple[int, bytes] | Callable[[Any], tuple[int, bytes]]


@dataclass
class Script:
    replies: dict[str, Reply] = field(default_factory=dict)
    delays: dict[str, float] = field(default_factory=dict)
    requests: list[tuple[str, Any]] = field(default_factory=list)

    def json(self, verb: str, body: Any, status: int = 200) -> None:
        self.replies[verb] = (status, json.dumps(body).encode())

    def raw(self, verb: str, body: bytes, status: int = 200) -> None:
        self.replies[verb] = (status, body)

    def call(self, verb: str, fn: Callable[[Any], Any]) -> None:
        """Answer ``verb`` with ``fn(request)`` (as JSON)."""
        self.replies[verb] = lambda req: (200, json.dumps(fn(req)).encode())


class _Handler(JsonHandler):
    server: _Server

    def do_POST(self) -> None:
        raw = self.read_body()
        verb = self.path.rstrip("/").rsplit("/", 1)[-1]
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        script = self.server.script
        script.requests.append((verb, body))
        time.sleep(script.delays.get(verb, 0.0))
        reply = script.replies.get(verb, (404, b'{"Error": "no reply scripted"}'))
        status, data = reply(body) if callable(reply) else reply
        send_json_bytes(self, status, data)


class _Server(LoopbackJsonServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = Script()


@dataclass
class ScriptedExtender:
    url: str
    script: Script


@pytest.fixture
def scripted() -> Iterator[ScriptedExtender]:
    server = _Server()
    server.start_background("scripted-extender")
    try:
        yield ScriptedExtender(f"http://127.0.0.1:{server.server_address[1]}", server.script)
    finally:
        server.close()
