"""The shim as a client of the node agent: what it sends for a MIG change, and what it makes of every answer.

``nvmlDeviceSetMigMode`` (and the other MIG changes) send a request to the agent on ``$FAKEHW_AGENT_SOCKET``
(csrc/agentc.c) and wait for the snapshot generation it answers with (docs/nvml.md, "MIG"). Here the agent is a
scripted stand-in on a unix socket, so the answers can be ones the real agent never gives: generation 0, a refusal
without a code, a peer that is not HTTP or hangs up. Expected values:

- the request: the route and body of docs/agent.md (``POST /v1/nodes/{node}/gpus/{gpu}/mig/mode``,
  ``{"enabled": true|false}``), HTTP/1.1 with a ``Content-Length`` that is the body's (RFC 9112 6.2) and
  ``Connection: close`` (agentc.c's documented one request per connection); the node and GPU are the test's input;
- a refusal carries NVML's own return code in ``detail.nvml_code`` (docs/agent.md), which the caller gets, and
  disabling MIG while GPU instances exist is ``SUCCESS`` with activation status ``IN_USE`` (docs/nvml.md's table);
- a refusal without a code NVML has: 4xx is the caller's request (``INVALID_ARGUMENT``), 5xx the agent's
  (``UNKNOWN``); an answer that is not the API's (no answer, not HTTP, a success without a non-negative
  ``generation``, a 1xx or 3xx status: RFC 9110 15, a client treats an unrecognised code as its class's x00 (so
  299 is a success), and neither class says the request succeeded or was refused) is ``UNKNOWN``, nvml.h's "any
  unexpected error"; no ``$FAKEHW_AGENT_SOCKET`` is ``NO_PERMISSION`` (docs/nvml.md) and a socket nobody listens
  on ``UNKNOWN``;
- the answer's body is the ``Content-Length`` octets after its head (RFC 9112 6.3: the field "defines the expected
  message body length in octets"; bytes after them are no part of it), and an answer that ends before them is
  incomplete ("the recipient MUST consider the message to be incomplete"), as is one whose ``Content-Length`` is
  not 1*DIGIT (RFC 9110 8.6; 6.3: "the message framing is invalid ... discard the received response"): no answer,
  ``UNKNOWN``; the field's name in any case (RFC 9110 5.1), whitespace around its value (5.5), in any position;
- the JSON is read as RFC 8259 writes it: whitespace or none around a member's colon (2: "Insignificant whitespace
  is allowed before or after any of the six structural characters"), and a key's text that is a string value, not a
  member's name, names nothing.

Every step runs in one subprocess in turn (one connection each), so the table costs about a second.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import FakeProcess
from tests.http_message import read_message
from tests.nvml.helpers import NodeSnap, subprocess_env, write_node

SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, IN_USE, UNKNOWN = 0, 2, 3, 4, 19, 999
"""nvmlReturn_t values (nvml.h)."""


def http(status: int, body: object, reason: str = "X", status_text: str | None = None) -> bytes:
    """An answer with ``status`` written in decimal, or as ``status_text`` (RFC 9112 4's 3DIGIT: ``000``)."""
    data = json.dumps(body).encode()
    code = (str(status) if status_text is None else status_text).encode()
    return b"HTTP/1.1 %s %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        code, reason.encode(), len(data), data)


def http_text(status: int, text: str) -> bytes:
    """An answer whose JSON body is ``text`` as written (RFC 8259 lets whitespace stand around any structural
    character, or none at all)."""
    data = text.encode()
    return b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (status, len(data),
                                                                                                   data)


def framed(fields: str, body: bytes) -> bytes:
    """A 200 answer with the header ``fields`` (CRLF-separated, as sent) and then ``body`` as it is: the stand-in
    sends both and closes, whatever Content-Length says."""
    return b"HTTP/1.1 200 OK\r\n" + fields.encode() + b"\r\n\r\n" + body


def refusal(status: int, nvml_code: int | None, status_text: str | None = None) -> bytes:
    detail: dict[str, object] = {} if nvml_code is None else {"nvml": "NVML_ERROR_X", "nvml_code": nvml_code}
    return http(status, {"error": "refused", "detail": detail}, status_text=status_text)


@dataclass(frozen=True)
class Step:
    id: str
    answer: bytes | None
    """What the stand-in agent sends back (None: it closes the connection without a word)."""
    status: int
    activation: int | None = None
    """The activation status written (None: same as ``status``)."""
    mode: int = 1
    socket: str = "agent"
    """"agent": the stand-in's socket; "none": the variable unset; "nobody": a path nobody listens on; "too-long": a
    path longer than any ``sun_path`` (``TOO_LONG_FOR_SUN_PATH``); "no-descriptor": the stand-in's socket, asked by
    a caller that has every descriptor its RLIMIT_NOFILE allows open (socket(2): EMFILE, "The per-process limit on
    the number of open file descriptors has been reached"), so no socket can be made and no one is asked."""


STEPS = [
    Step("generation-of-the-snapshot", http(200, {"generation": 1}), SUCCESS),
    Step("generation-0", http(200, {"generation": 0}), SUCCESS),
    Step("disable", http(200, {"generation": 1}), SUCCESS, mode=0),
    Step("negative-generation", http(200, {"generation": -1}), UNKNOWN),
    Step("success-without-a-generation", http(200, {"applied": True}), UNKNOWN),
    Step("unassigned-2xx-with-a-generation", http(299, {"generation": 1}), SUCCESS),
    Step("redirection-with-a-generation", http(300, {"generation": 1}), UNKNOWN),
    Step("unassigned-3xx-with-a-generation", http(399, {"generation": 1}), UNKNOWN),
    Step("informational-with-a-generation", http(199, {"generation": 1}), UNKNOWN),
    Step("refused-in-use", refusal(409, IN_USE), SUCCESS, activation=IN_USE, mode=0),
    Step("refused-not-supported", refusal(409, NOT_SUPPORTED), NOT_SUPPORTED),
    Step("refused-with-a-code-nvml-does-not-have", refusal(409, 1000), INVALID_ARGUMENT),
    Step("refused-4xx-without-a-code", refusal(422, None), INVALID_ARGUMENT),
    Step("refused-400-without-a-code", refusal(400, None), INVALID_ARGUMENT),
    Step("refused-5xx-without-a-code", refusal(500, None), UNKNOWN),
    Step("refused-5xx-with-a-code-nvml-does-not-have", refusal(503, 0), UNKNOWN),
    # RFC 9110 15: "Values outside the range 100..599 are invalid. [...] A client that receives a response with an
    # invalid status code SHOULD process the response as if it had a 5xx (Server Error) status code"; RFC 9112 4:
    # status-code = 3DIGIT, so 000 and 099 are status lines. A 5xx carrying NVML's code gives that code.
    Step("invalid-status-000-with-a-code", refusal(0, NOT_SUPPORTED, "000"), NOT_SUPPORTED),
    Step("invalid-status-099-with-a-code", refusal(99, NOT_SUPPORTED), NOT_SUPPORTED),
    Step("invalid-status-600-with-a-code", refusal(600, NOT_SUPPORTED), NOT_SUPPORTED),
    Step("invalid-status-000-without-a-code", refusal(0, None, "000"), UNKNOWN),
    Step("invalid-status-000-with-a-generation", http(0, {"generation": 1}, status_text="000"), UNKNOWN),
    Step("informational-100-with-a-code", refusal(100, NOT_SUPPORTED), UNKNOWN),
    Step("unassigned-3xx-with-a-code", refusal(399, NOT_SUPPORTED), UNKNOWN),
    Step("refused-499-without-a-code", refusal(499, None), INVALID_ARGUMENT),
    Step("no-whitespace", http_text(200, '{"generation":1}'), SUCCESS),
    Step("whitespace-around-the-colon", http_text(200, '{ "generation"\t:\r\n 1 }'), SUCCESS),
    Step("refused-in-use-without-whitespace", http_text(409, '{"error":"x","detail":{"nvml_code":19}}'), SUCCESS,
         activation=IN_USE, mode=0),
    Step("the-key-as-a-string-value-only", http_text(200, '{"applied": "generation", "generation_count": 1}'),
         UNKNOWN),
    Step("the-key-as-a-string-value-then-as-a-member", http_text(200, '{"applied": "generation", "generation": 1}'),
         SUCCESS),
    Step("cut-inside-the-generation", framed("Content-Length: 18", b'{"generation": 1'), UNKNOWN),
    Step("one-byte-short-of-its-length", framed("Content-Length: 18", b'{"generation": 1}'), UNKNOWN),
    Step("length-0-then-more", framed("Content-Length: 0", b'{"generation": 1}'), UNKNOWN),
    Step("length-in-lower-case-with-whitespace-not-last",
         framed("content-length:\t95 \r\nConnection: close", b'{"generation": 1}'.ljust(95)), SUCCESS),
    Step("length-with-a-leading-zero", framed("Content-Length: 017", b'{"generation": 1}'), SUCCESS),
    Step("length-that-is-not-a-number", framed("Content-Length: 1 7", b'{"generation": 1}'), UNKNOWN),
    Step("length-with-a-sign", framed("Content-Length: +17", b'{"generation": 1}'), UNKNOWN),
    Step("length-with-no-value", framed("Content-Length:", b'{"generation": 1}'), UNKNOWN),
    Step("hangs-up", None, UNKNOWN),
    Step("not-http", b"SSH-2.0-OpenSSH_9.2\r\n", UNKNOWN),
    Step("one-byte", b"H", UNKNOWN),
    Step("headers-without-an-end", b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n", UNKNOWN),
    Step("an-answer-larger-than-the-shim-reads", b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 100_000, UNKNOWN),
    Step("no-agent-socket", None, NO_PERMISSION, socket="none"),
    Step("nobody-listening", None, UNKNOWN, socket="nobody"),
    Step("socket-path-longer-than-sun-path", None, UNKNOWN, socket="too-long"),
    Step("no-descriptor-left", None, UNKNOWN, socket="no-descriptor"),
]
AGENT_STEPS = [s for s in STEPS if s.socket == "agent"]
TOO_LONG_FOR_SUN_PATH = 200
"""A unix socket's address is ``struct sockaddr_un``, whose ``sun_path`` holds the path and its NUL (POSIX
<sys/un.h>; 108 bytes on Linux, unix(7), 104 on the BSDs): a 200-character path is no socket address anywhere, so
there is no agent to ask."""


@dataclass
class Request:
    head: str
    body: bytes


class StandInAgent:
    """Answers one connection per step, in order, with the step's bytes; keeps what each request was."""

    def __init__(self, path: Path, answers: list[bytes | None]):
        self.requests: list[Request] = []
        self._answers = answers
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(4)
        self._sock.settimeout(60)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        for answer in self._answers:
            conn, _ = self._sock.accept()
            with conn:
                conn.settimeout(30)
                self.requests.append(_read_request(conn))
                if answer is not None:
                    with contextlib.suppress(OSError):  # the shim stops reading at 16 KiB and closes
                        conn.sendall(answer)

    def close(self) -> None:
        self._thread.join(timeout=60)
        self._sock.close()


def _read_request(conn: socket.socket) -> Request:
    head, _, body = read_message(conn).partition(b"\r\n\r\n")
    return Request(head.decode(), body)


CALLER = r"""
import ctypes, json, os, resource, sys, tempfile
lib = ctypes.CDLL(sys.argv[1])
assert lib.nvmlInit_v2() == 0
device = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device)) == 0
out = []
for step in json.loads(sys.stdin.read()):
    if step["socket"] is None:
        os.environ.pop("FAKEHW_AGENT_SOCKET", None)
    else:
        os.environ["FAKEHW_AGENT_SOCKET"] = step["socket"]
    activation = ctypes.c_int(-7)
    with tempfile.TemporaryFile() as trace:
        saved = os.dup(2)
        os.dup2(trace.fileno(), 2)
        limit, fillers = resource.getrlimit(resource.RLIMIT_NOFILE), []
        if step.get("fill"):  # every descriptor the limit allows taken
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit[0], 256), limit[1]))
            try:
                while True:
                    fillers.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                pass
        try:
            status = lib.nvmlDeviceSetMigMode(device, step["mode"], ctypes.byref(activation))
        finally:
            for fd in fillers:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, limit)
            os.dup2(saved, 2)
            os.close(saved)
        trace.seek(0)
        try:
            os.fstat(0)
            stdin_open = True
        except OSError:
            stdin_open = False
        out.append({"status": status, "activation": activation.value, "trace": trace.read().decode(),
                    "stdin_open": stdin_open})
lib.nvmlShutdown()
print(json.dumps(out))
"""


def socket_paths(tmp: Path) -> dict[str, str | None]:
    """The ``FAKEHW_AGENT_SOCKET`` of each ``Step.socket`` kind, for a stand-in agent listening at tmp/agent.sock."""
    return {"agent": str(tmp / "agent.sock"), "none": None, "nobody": str(tmp / "nobody.sock"),
            "too-long": str(tmp / ("a" * TOO_LONG_FOR_SUN_PATH))[:TOO_LONG_FOR_SUN_PATH],
            "no-descriptor": str(tmp / "agent.sock")}


def steps_plan(tmp: Path) -> list[dict[str, Any]]:
    """CALLER's plan for STEPS against a stand-in agent at tmp/agent.sock: each step's mode and socket, and whether
    the caller first takes every descriptor it may have ("no-descriptor")."""
    sockets = socket_paths(tmp)
    return [{"mode": s.mode, "socket": sockets[s.socket], "fill": s.socket == "no-descriptor"} for s in STEPS]


@dataclass
class Outcome:
    results: dict[str, dict[str, Any]]
    requests: dict[str, Request]
    snap: NodeSnap


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory, nvml_library: Path) -> Iterator[Outcome]:
    tmp = tmp_path_factory.mktemp("agent-client")
    snap = write_node(tmp / "nvml.snapshot", "dgx-a100", processes=[FakeProcess("gpu1", 7, 1 << 20)])
    before = snap.path.read_bytes()
    agent = StandInAgent(tmp / "agent.sock", [s.answer for s in AGENT_STEPS])
    plan = steps_plan(tmp)
    try:
        proc = subprocess.run([sys.executable, "-c", CALLER, str(nvml_library)], input=json.dumps(plan),
                              env=subprocess_env(snap.path, FAKEHW_NVML_TRACE="1"), capture_output=True, text=True,
                              timeout=120, check=False)
    finally:
        agent.close()
    assert proc.returncode == 0, proc.stderr
    assert snap.path.read_bytes() == before, "the shim wrote to the snapshot (docs/nvml.md: it never writes anything)"
    results = dict(zip((s.id for s in STEPS), json.loads(proc.stdout), strict=True))
    yield Outcome(results, dict(zip((s.id for s in AGENT_STEPS), agent.requests, strict=True)), snap)


@pytest.mark.parametrize("step", STEPS, ids=[s.id for s in STEPS])
def test_every_answer_of_the_agent_becomes_the_return_code_nvml_documents(step: Step, outcome: Outcome) -> None:
    result = outcome.results[step.id]
    assert result["status"] == step.status, result["trace"]
    expected_activation = step.status if step.activation is None else step.activation
    if step.status != NO_PERMISSION:  # refused before any request: activationStatus is not written
        assert result["activation"] == expected_activation, result["trace"]


@pytest.mark.parametrize("step", AGENT_STEPS, ids=[s.id for s in AGENT_STEPS])
def test_a_mig_mode_change_is_one_request_on_the_agent_s_documented_route(step: Step, outcome: Outcome) -> None:
    request = outcome.requests[step.id]
    request_line, *header_lines = request.head.split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    node, gpu = outcome.snap.node.name, outcome.snap.node.gpus[0].name
    assert request_line == f"POST /v1/nodes/{node}/gpus/{gpu}/mig/mode HTTP/1.1"
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(request.body)
    assert json.loads(request.body) == {"enabled": step.mode == 1}


def test_a_change_the_agent_could_not_be_asked_for_says_why_in_the_trace(outcome: Outcome) -> None:
    """FAKEHW_NVML_TRACE=1 logs why a MIG change was not applied (docs/nvml.md: what the trace logs)."""
    assert "FAKEHW_AGENT_SOCKET is not set" in outcome.results["no-agent-socket"]["trace"]
    assert "cannot connect to the agent socket" in outcome.results["nobody-listening"]["trace"]
    assert "no answer from the agent" in outcome.results["hangs-up"]["trace"]
    assert "not HTTP" in outcome.results["not-http"]["trace"]
    assert "not HTTP" in outcome.results["one-byte"]["trace"]  # an answer, however short, is not no answer
    assert "cannot create a socket" in outcome.results["no-descriptor-left"]["trace"]
    assert "shorter than its Content-Length" in outcome.results["cut-inside-the-generation"]["trace"]
    for step in ("length-that-is-not-a-number", "length-with-a-sign", "length-with-no-value"):
        assert "Content-Length that is not a length" in outcome.results[step]["trace"], step


def test_a_socket_path_too_long_for_sun_path_asks_no_one_and_leaves_the_callers_files_alone(
        outcome: Outcome) -> None:
    """A ``FAKEHW_AGENT_SOCKET`` longer than ``sun_path`` (``TOO_LONG_FOR_SUN_PATH``) names no socket: the change is
    UNKNOWN like any agent that cannot be reached (docs/nvml.md's table), the trace says that the path is too long
    (docs/nvml.md: the trace says which failure it was), and the caller's own files are not touched: its stdin
    (fd 0, the pipe the test's plan came through) is still open after every step. A refusal that returned 0 instead
    of -1 would take fd 0 for the agent's socket, write the request into the caller's stdin and close it."""
    result = outcome.results["socket-path-longer-than-sun-path"]
    assert result["status"] == UNKNOWN, result["trace"]
    assert "longer than a unix socket path" in result["trace"], result["trace"]
    assert [r["stdin_open"] for r in outcome.results.values()] == [True] * len(STEPS)


def enable_mig_interposed(tmp_path: Path, nvml_library: Path, interposer: str,
                          **env: str) -> tuple[subprocess.CompletedProcess[str], StandInAgent, NodeSnap]:
    """Enable MIG on dgx-a100's gpu0 against a stand-in agent answering generation 1, with ``interposer`` (C
    source of system calls that fail as POSIX allows) built and preloaded, and ``env`` added: (the caller's exit,
    the agent with what it was sent, the node's snapshot). The caller exited 0."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    src = tmp_path / "interposer.c"
    src.write_text(interposer)
    lib = tmp_path / "interposer.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", str(src), "-o", str(lib), "-ldl"], check=True)
    snap = write_node(tmp_path / "nvml.snapshot", "dgx-a100")
    agent = StandInAgent(tmp_path / "agent.sock", [http(200, {"generation": 1})])
    plan = [{"mode": 1, "socket": str(tmp_path / "agent.sock")}]
    try:
        proc = subprocess.run([sys.executable, "-c", CALLER, str(nvml_library)], input=json.dumps(plan),
                              env=subprocess_env(snap.path, FAKEHW_NVML_TRACE="1", LD_PRELOAD=str(lib), **env),
                              capture_output=True, text=True, timeout=90, check=False)
    finally:
        agent.close()
    assert proc.returncode == 0, proc.stderr
    return proc, agent, snap


SOCKET_INTERPOSER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

/* send and recv as POSIX allows them to behave on a stream socket: every other call interrupted by a signal before
   any data moved (-1, EINTR; errno stays EINTR through the successful call after it, which need not clear it), the
   others moving at most 7 bytes. */
long fhw_test_sends, fhw_test_recvs;

ssize_t send(int fd, const void *buf, size_t n, int flags) {
    static ssize_t (*real)(int, const void *, size_t, int);
    if (real == NULL) real = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    if (++fhw_test_sends % 2 == 1) {
        errno = EINTR;
        return -1;
    }
    return real(fd, buf, n < 7 ? n : 7, flags);
}

ssize_t recv(int fd, void *buf, size_t n, int flags) {
    static ssize_t (*real)(int, void *, size_t, int);
    if (real == NULL) real = (ssize_t (*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
    if (++fhw_test_recvs % 2 == 1) {
        errno = EINTR;
        return -1;
    }
    return real(fd, buf, n < 7 ? n : 7, flags);
}
"""


def test_a_change_sent_and_answered_in_short_interrupted_pieces_is_the_same_request_and_answer(
        tmp_path: Path, nvml_library: Path) -> None:
    """POSIX send(2) and recv(2) on a stream socket may move fewer bytes than asked, and fail with EINTR when a
    signal arrives first; a client sends the rest and retries. Through interposed send and recv that do both (every
    other call EINTR, at most 7 bytes a call) enabling MIG is still one request on the documented route with the
    body its Content-Length gives (the same bytes as without the interposer: docs/agent.md's route and body), and
    the agent's answer, read 7 bytes at a time, still gives SUCCESS (docs/nvml.md: the generation answered)."""
    proc, agent, snap = enable_mig_interposed(tmp_path, nvml_library, SOCKET_INTERPOSER)
    [result] = json.loads(proc.stdout)
    assert result["status"] == SUCCESS, result["trace"]
    [request] = agent.requests
    request_line, *header_lines = request.head.split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    assert request_line == f"POST /v1/nodes/{snap.node.name}/gpus/{snap.node.gpus[0].name}/mig/mode HTTP/1.1"
    assert int(headers["content-length"]) == len(request.body)
    assert json.loads(request.body) == {"enabled": True}


POLL_INTERPOSER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

/* poll as POSIX allows it to fail: FHW_TEST_POLL=eintr interrupts every other call by a signal before any
   descriptor was ready (-1, EINTR); =eagain-on-read fails every wait for input (-1, EAGAIN: "the allocation of
   internal data structures failed"), the waits to send going through. */
long fhw_test_polls;

int poll(struct pollfd *fds, nfds_t n, int timeout) {
    static int (*real)(struct pollfd *, nfds_t, int);
    if (real == NULL) real = (int (*)(struct pollfd *, nfds_t, int))dlsym(RTLD_NEXT, "poll");
    const char *how = getenv("FHW_TEST_POLL");
    if (how != NULL && strcmp(how, "eintr") == 0 && ++fhw_test_polls % 2 == 1) {
        errno = EINTR;
        return -1;
    }
    if (how != NULL && strcmp(how, "eagain-on-read") == 0 && n == 1 && (fds[0].events & POLLIN)) {
        errno = EAGAIN;
        return -1;
    }
    return real(fds, n, timeout);
}
"""


def change_through_poll(tmp_path: Path, nvml_library: Path, how: str) -> dict[str, Any]:
    """Enable MIG on dgx-a100's gpu0 against a stand-in agent answering generation 1, with poll interposed."""
    proc, agent, _ = enable_mig_interposed(tmp_path, nvml_library, POLL_INTERPOSER, FHW_TEST_POLL=how)
    [result] = json.loads(proc.stdout)
    assert len(agent.requests) == 1
    return dict(result)


def test_a_change_whose_waits_are_interrupted_by_signals_is_still_made(tmp_path: Path, nvml_library: Path) -> None:
    """POSIX poll(2): EINTR, "A signal was caught during poll()", is no answer about the socket, and the wait may
    be made again; a signal in the caller (a timer, a child's exit) is not the agent failing. With every other poll
    interrupted, enabling MIG is still SUCCESS (docs/nvml.md: the change waits for the generation the agent
    answers), as with send and recv interrupted above."""
    result = change_through_poll(tmp_path, nvml_library, "eintr")
    assert result["status"] == SUCCESS, result["trace"]


def test_a_change_whose_wait_for_the_answer_fails_is_no_answer(tmp_path: Path, nvml_library: Path) -> None:
    """When the wait for the agent's answer fails (POSIX poll(2): EAGAIN, "The allocation of internal data
    structures failed"), nothing was read: the change is UNKNOWN, and the trace says "no answer from the agent"
    (docs/nvml.md: no answer is UNKNOWN and the trace says which failure it was), not that an answer was bad."""
    result = change_through_poll(tmp_path, nvml_library, "eagain-on-read")
    assert result["status"] == UNKNOWN
    assert "no answer from the agent" in result["trace"], result["trace"]


LATE_CALLER = r"""
import ctypes, json, resource, sys, time
lib = ctypes.CDLL(sys.argv[1])
assert lib.nvmlInit_v2() == 0
device = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device)) == 0
activation = ctypes.c_int(-7)


def cpu():
    use = resource.getrusage(resource.RUSAGE_THREAD)
    return use.ru_utime + use.ru_stime


start, start_cpu = time.monotonic(), cpu()
status = lib.nvmlDeviceSetMigMode(device, 1, ctypes.byref(activation))
took, cpu_used = time.monotonic() - start, cpu() - start_cpu
current, pending = ctypes.c_uint(7), ctypes.c_uint(7)
mode = lib.nvmlDeviceGetMigMode(device, ctypes.byref(current), ctypes.byref(pending))
lib.nvmlShutdown()
print(json.dumps({"status": status, "activation": activation.value, "took": took, "mode": mode,
                  "current": current.value, "cpu": cpu_used}))
"""
LATE_BY = 0.3
"""Seconds between the stand-in's answer and the snapshot generation it named appearing (the real agent renders it
before it answers; a slow disk or another writer's turn is what this stands for)."""


def test_a_change_waits_for_a_generation_that_appears_after_the_answer(tmp_path: Path, nvml_library: Path) -> None:
    """docs/nvml.md ("Changes go through the agent"): the shim waits until this process reads the snapshot
    generation the agent answers with, so the caller's next call sees the change; only a generation not read
    within 10 s is TIMEOUT. The stand-in answers generation 2 and the node's gpu0 with MIG on appears as generation
    2 LATE_BY seconds later: nvmlDeviceSetMigMode answers SUCCESS (activation SUCCESS) no sooner than that, and the
    next nvmlDeviceGetMigMode reads current mode NVML_DEVICE_MIG_ENABLE (1). And it waits asleep: the calling thread
    uses less than 0.025 s of CPU over the wait (getrusage(2) RUSAGE_THREAD, user and system; about 0.005 s here),
    where one that polls without sleeping (fresh seed 10692 rerun's mig.c:638, its 2 ms pause made 0 ns) used
    0.057 s. Before this test no change ever waited
    (the stand-in's generations were the snapshot's own): seed 10630's mig.c:638, a deadline 10 s in the past,
    survived."""
    snap = write_node(tmp_path / "nvml.snapshot", "dgx-a100")
    enabled = tmp_path / "mig-on.yaml"
    enabled.write_text("extends: dgx-a100\ngroups:\n  - name: dgx-a100\n    node:\n      gpus:\n"
                       "        - {name: gpu0, mig: {enabled: true, instances: []}}\n")
    agent = StandInAgent(tmp_path / "agent.sock", [http(200, {"generation": 2})])

    def render_late() -> None:
        deadline = time.monotonic() + 60
        while not agent.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(LATE_BY)
        write_node(snap.path, enabled, generation=2)

    writer = threading.Thread(target=render_late, daemon=True)
    writer.start()
    try:
        proc = subprocess.run([sys.executable, "-c", LATE_CALLER, str(nvml_library)], capture_output=True, text=True,
                              timeout=60, check=False,
                              env=subprocess_env(snap.path, FAKEHW_AGENT_SOCKET=str(tmp_path / "agent.sock")))
    finally:
        agent.close()
        writer.join(timeout=60)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["status"], result["activation"], result["mode"], result["current"]) == (SUCCESS, SUCCESS, SUCCESS, 1)
    assert result["took"] >= LATE_BY - 0.05
    assert result["cpu"] < 0.025, result


STDIN_CLOSED_CALLER = r"""
import ctypes, json, os, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.nvmlInit_v2() == 0
device = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device)) == 0
os.close(0)
activation = ctypes.c_int(-7)
status = lib.nvmlDeviceSetMigMode(device, 1, ctypes.byref(activation))
try:
    os.fstat(0)
    zero_open = True
except OSError:
    zero_open = False
lib.nvmlShutdown()
print(json.dumps({"status": status, "activation": activation.value, "zero_open": zero_open}))
"""


def test_a_change_made_with_descriptor_0_free_uses_it_for_the_agent_and_gives_it_back(
        tmp_path: Path, nvml_library: Path) -> None:
    """A caller that closed its standard input (a daemon that detached from its terminal) leaves descriptor 0
    free, and POSIX socket(2) returns "a non-negative integer" (Linux: the lowest free descriptor, 0 here), which
    is a socket like any other: enabling MIG through a stand-in agent answering generation 1 (the snapshot's own)
    is one request on docs/agent.md's route and SUCCESS with activation SUCCESS (docs/nvml.md), and the client
    closes that descriptor again when the one-request connection is done (agentc.c: "Connection: close"), so
    descriptor 0 is free afterwards. A client that took 0 for a failure (`fd <= 0`) would ask no one and answer
    UNKNOWN, and leak the socket on descriptor 0."""
    snap = write_node(tmp_path / "nvml.snapshot", "dgx-a100")
    sock = tmp_path / "agent.sock"
    agent = StandInAgent(sock, [http(200, {"generation": 1})])
    try:
        proc = subprocess.run([sys.executable, "-c", STDIN_CLOSED_CALLER, str(nvml_library)], capture_output=True,
                              text=True, timeout=60, check=False,
                              env=subprocess_env(snap.path, FAKEHW_NVML_TRACE="1", FAKEHW_AGENT_SOCKET=str(sock)))
    finally:
        agent.close()
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["status"], result["activation"]) == (SUCCESS, SUCCESS), proc.stderr
    assert not result["zero_open"], "the agent's socket was left open on descriptor 0"
    [request] = agent.requests
    assert request.head.split("\r\n")[0] == (
        f"POST /v1/nodes/{snap.node.name}/gpus/{snap.node.gpus[0].name}/mig/mode HTTP/1.1")


EVERY_DEVICE_CALLER = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.nvmlInit_v2() == 0
count = ctypes.c_uint(0)
assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
out = []
for i in range(count.value):
    device = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(device)) == 0
    activation = ctypes.c_int(-7)
    out.append(lib.nvmlDeviceSetMigMode(device, 1, ctypes.byref(activation)))
lib.nvmlShutdown()
print(json.dumps(out))
"""
UNRESERVED_NODE = "aAzZ09-_."
UNRESERVED_GPU = "zZaA90._-"
"""Names made of RFC 3986's unreserved characters (2.3: ALPHA, DIGIT, "-", ".", "_"; each letter and digit range
at both ends), which a URI carries as they are: "URIs that differ in the replacement of an unreserved character
with its corresponding percent-encoded US-ASCII octet are equivalent"."""
NOT_IN_A_PATH = ["x`y", "x{y", "x[y", "x/y", "x y", "x%y", ""]
"""GPU names a request path cannot carry as they are (RFC 3986 3.3: a segment is pchar = unreserved / pct-encoded /
sub-delims / ":" / "@"; "`", "{", "[" and " " are none of them, "/" ends the segment, "%" starts a percent-encoding
that "%y" is not; an empty name makes ``/gpus//mig``, a route that names no GPU)."""


def test_node_and_gpu_names_go_into_the_route_only_as_a_uri_path_may_carry_them(
        tmp_path: Path, nvml_library: Path) -> None:
    """docs/agent.md's route names the node and the GPU as path segments (``/v1/nodes/{node}/gpus/{gpu}/mig/mode``).
    dgx-a100's snapshot rewritten with node UNRESERVED_NODE, gpu0 UNRESERVED_GPU and gpu1-gpu7 the names of
    NOT_IN_A_PATH; MIG enabled on each GPU against a stand-in agent answering generation 1 (the snapshot's own): gpu0's
    change is one request on the route with both names as they are, SUCCESS (docs/nvml.md); no request carries any
    other GPU's name raw, and none of those changes answers SUCCESS (nothing was asked, so nothing changed)."""
    node = write_node(tmp_path / "written.snapshot", "dgx-a100")
    names = [UNRESERVED_GPU, *NOT_IN_A_PATH]
    assert len(names) == len(node.snapshot.gpus)
    snapshot = dataclasses.replace(
        node.snapshot, header=dataclasses.replace(node.snapshot.header, node_name=UNRESERVED_NODE),
        gpus=tuple(dataclasses.replace(g, model_name=name) for g, name in zip(node.snapshot.gpus, names, strict=True)))
    path = tmp_path / "nvml.snapshot"
    write_snapshot(path, snapshot.to_bytes())
    sock = tmp_path / "agent.sock"
    agent = StandInAgent(sock, [http(200, {"generation": 1})])
    try:
        proc = subprocess.run([sys.executable, "-c", EVERY_DEVICE_CALLER, str(nvml_library)], capture_output=True,
                              text=True, timeout=60, check=False,
                              env=subprocess_env(path, FAKEHW_NVML_TRACE="1", FAKEHW_AGENT_SOCKET=str(sock)))
    finally:
        agent.close()
    assert proc.returncode == 0, proc.stderr
    statuses = json.loads(proc.stdout)
    assert statuses[0] == SUCCESS, proc.stderr
    assert [s for s in statuses[1:] if s == SUCCESS] == [], proc.stderr
    assert [r.head.split("\r\n")[0] for r in agent.requests] == [
        f"POST /v1/nodes/{UNRESERVED_NODE}/gpus/{UNRESERVED_GPU}/mig/mode HTTP/1.1"]


SUN_PATH = 108
"""``sizeof(struct sockaddr_un.sun_path)`` on Linux (unix(7)): the path and its terminating NUL."""


def test_a_socket_path_that_fills_sun_path_with_its_nul_is_used_and_one_byte_more_is_not(
        tmp_path: Path, nvml_library: Path) -> None:
    """POSIX <sys/un.h> and unix(7): ``sun_path`` holds a pathname and its NUL ("portable applications should ensure
    that sun_path is null-terminated"), so on Linux a path of SUN_PATH - 1 characters is the longest a client can
    name. Enabling MIG with FAKEHW_AGENT_SOCKET of that length, a stand-in agent answering generation 1 there, is
    SUCCESS (docs/nvml.md); with a path one character longer, where a socket listens too, no connection is made (the
    listener has none waiting afterwards) and the change is UNKNOWN (docs/nvml.md: no agent reached)."""
    fits = str(tmp_path / "f") + "x" * (SUN_PATH - 1 - len(str(tmp_path / "f")))
    too_long = str(tmp_path / "t") + "x" * (SUN_PATH - len(str(tmp_path / "t")))
    assert (len(fits), len(too_long)) == (SUN_PATH - 1, SUN_PATH)
    snap = write_node(tmp_path / "nvml.snapshot", "dgx-a100")
    agent = StandInAgent(Path(fits), [http(200, {"generation": 1})])
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = os.getcwd()  # Python refuses to bind SUN_PATH characters: bind the same file by a relative name
    os.chdir(tmp_path)
    try:
        listener.bind(os.path.basename(too_long))
    finally:
        os.chdir(cwd)
    listener.listen(1)
    listener.setblocking(False)
    plan = [{"mode": 1, "socket": fits}, {"mode": 1, "socket": too_long}]
    try:
        proc = subprocess.run([sys.executable, "-c", CALLER, str(nvml_library)], input=json.dumps(plan),
                              env=subprocess_env(snap.path, FAKEHW_NVML_TRACE="1"), capture_output=True, text=True,
                              timeout=90, check=False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        agent.close()
        listener.close()
    assert proc.returncode == 0, proc.stderr
    used, refused = json.loads(proc.stdout)
    assert used["status"] == SUCCESS, used["trace"]
    assert refused["status"] == UNKNOWN, refused["trace"]
