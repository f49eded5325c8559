"""Every system call the shim makes to the agent or the snapshot interrupted once and then short: same answers.

POSIX lets read(2), recv(2), write(2), send(2) and pread(2) move fewer bytes than asked ("the number of bytes
actually read/written"), and lets them and poll(2) fail with EINTR when a signal arrives first; a client retries and
asks for the rest. Here one LD_PRELOAD interposer (``CHOPPY``, built by the test like test_robustness.py's pread
one) makes every such call of the process, the shim's included, alternate: -1 with errno EINTR (left set through
the next, successful call, which need not clear it), then at most ONE byte. Under it the whole MIG agent-client
table of test_mig_agent_client.py (the snapshot read by pread at init, the request sent and the answer received
through poll/send/recv) must give the same return codes and the same requests as its documented expectations
(docs/agent.md's route and body, docs/nvml.md's table of answers): the expected values are that file's, taken from
docs/agent.md, docs/nvml.md and nvml.h, not recomputed here.

The agent client's bounds (agentc.c reads at most 16383 bytes, "bounded in size and time", docs/nvml.md): an answer
that fills the buffer exactly is read whole; a peer that takes the request and never answers is UNKNOWN with "no
answer from the agent" in the trace (docs/nvml.md: "no answer ... UNKNOWN; the trace says which"). The 30 s bound
is reached in about 30 ms by the same interposer's clock switch (CLOCK_MONOTONIC_COARSE, which the shim's
deadline reads, running 1000 times fast, and poll's timeouts cut by as much).

Not reached by an interposer: system.c's fread of /proc files (glibc's stdio calls its internal read, which
LD_PRELOAD does not replace; and fread itself returns short only at end of file or on an error, POSIX fread).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.http_message import read_message
from tests.nvml.helpers import build_preload, subprocess_env, write_node
from tests.nvml.test_mig_agent_client import (
    AGENT_STEPS,
    CALLER,
    INVALID_ARGUMENT,
    STEPS,
    SUCCESS,
    UNKNOWN,
    StandInAgent,
    http,
    steps_plan,
)

CHOPPY = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* FHW_TEST_CHOPPY=1: every read, write, recv, send, pread, pread64 and poll (reads and writes only of
   descriptors past the standard three: the caller's json on stdin and stdout is the test's, not the shim's)
   alternates, each function on its own count (two calls in turn are not always the one interrupted), between
   failing with EINTR before anything moved and going through, the data calls then moving at most one byte.
   FHW_TEST_CLOCK=fast: CLOCK_MONOTONIC_COARSE runs 1000 times fast from its first reading, and poll waits a
   thousandth of its timeout. FHW_TEST_CLOCK=late: CLOCK_MONOTONIC_COARSE reads 31 s later from the moment a recv
   of a descriptor past the standard three first moves a byte (the rest of the answer arriving past a 30 s bound,
   as from a peer that drips it, without a test waiting 30 s); FHW_TEST_LATE_MS=N makes it N ms later instead. */
static int choppy(long *calls) {
    const char *on = getenv("FHW_TEST_CHOPPY");
    if (on == NULL || strcmp(on, "1") != 0) return 0;
    if (++*calls % 2 == 1) {
        errno = EINTR;
        return -1;
    }
    return 1;
}

static int fast(void) {
    const char *how = getenv("FHW_TEST_CLOCK");
    return how != NULL && strcmp(how, "fast") == 0;
}

static int late(void) {
    const char *how = getenv("FHW_TEST_CLOCK");
    return how != NULL && strcmp(how, "late") == 0;
}

static int answer_begun; /* FHW_TEST_CLOCK=late: a recv has moved a byte */

#define REAL(name) \
    static long calls; \
    static __typeof__(&name) real; \
    if (real == NULL) real = (__typeof__(&name))dlsym(RTLD_NEXT, #name)
#define CHOP(n) \
    do { \
        int c = fd > 2 ? choppy(&calls) : 0; \
        if (c < 0) return -1; \
        if (c > 0 && n > 1) n = 1; \
    } while (0)

ssize_t read(int fd, void *buf, size_t n) {
    REAL(read);
    CHOP(n);
    return real(fd, buf, n);
}
ssize_t write(int fd, const void *buf, size_t n) {
    REAL(write);
    CHOP(n);
    return real(fd, buf, n);
}
ssize_t recv(int fd, void *buf, size_t n, int flags) {
    REAL(recv);
    CHOP(n);
    ssize_t r = real(fd, buf, n, flags);
    if (r > 0 && fd > 2) answer_begun = 1;
    return r;
}
ssize_t send(int fd, const void *buf, size_t n, int flags) {
    REAL(send);
    CHOP(n);
    return real(fd, buf, n, flags);
}
ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    REAL(pread);
    CHOP(n);
    return real(fd, buf, n, off);
}
ssize_t pread64(int fd, void *buf, size_t n, off_t off) {
    REAL(pread64);
    CHOP(n);
    return real(fd, buf, n, off);
}
int poll(struct pollfd *fds, nfds_t n, int timeout) {
    REAL(poll);
    if (choppy(&calls) < 0) return -1;
    if (fast() && timeout > 0) timeout = timeout / 1000 + 1;
    return real(fds, n, timeout);
}
int clock_gettime(clockid_t clk, struct timespec *ts) {
    REAL(clock_gettime);
    static long long base_ns = -1;
    int r = real(clk, ts);
    if (r == 0 && clk == CLOCK_MONOTONIC_COARSE && late() && answer_begun) {
        const char *ms = getenv("FHW_TEST_LATE_MS"); /* how much later; 31 s unless given */
        long long add_ns = (ms != NULL ? atoll(ms) : 31000) * 1000000LL + ts->tv_nsec;
        ts->tv_sec += add_ns / 1000000000LL;
        ts->tv_nsec = add_ns % 1000000000LL;
        return 0;
    }
    if (r != 0 || clk != CLOCK_MONOTONIC_COARSE || !fast()) return r;
    long long t = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec;
    if (base_ns < 0) base_ns = t;
    t = base_ns + (t - base_ns) * 1000;
    ts->tv_sec = t / 1000000000LL;
    ts->tv_nsec = t % 1000000000LL;
    return 0;
}
"""

BUFFER = 16383
"""What agentc.c reads of an answer at most (its `raw[16384]`, one byte kept for the terminating NUL)."""


@pytest.fixture(scope="module")
def choppy_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_preload(tmp_path_factory.mktemp("choppy"), "choppy", CHOPPY)


def run_caller(tmp_path: Path, nvml_library: Path, choppy_library: Path, plan: list[dict[str, Any]],
               **env: str) -> list[dict[str, Any]]:
    """test_mig_agent_client.py's CALLER (nvmlDeviceSetMigMode on dgx-a100's gpu0, one step per plan entry) with the
    interposer preloaded and ``env`` added; its results, one per step."""
    snap = write_node(tmp_path / "nvml.snapshot", "dgx-a100")
    proc = subprocess.run([sys.executable, "-c", CALLER, str(nvml_library)], input=json.dumps(plan),
                          env=subprocess_env(snap.path, FAKEHW_NVML_TRACE="1", LD_PRELOAD=str(choppy_library), **env),
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return list(json.loads(proc.stdout))


def test_the_agent_client_table_answers_the_same_with_every_call_interrupted_then_one_byte_short(
        tmp_path: Path, nvml_library: Path, choppy_library: Path) -> None:
    """Every step of test_mig_agent_client.py's STEPS (its return codes from docs/nvml.md and nvml.h) run with every
    read/write/recv/send/pread/poll interrupted once, then one byte at a time: the same codes, and each request the
    stand-in agent received is docs/agent.md's route with the body its Content-Length gives."""
    agent = StandInAgent(tmp_path / "agent.sock", [s.answer for s in AGENT_STEPS])
    plan = steps_plan(tmp_path)
    try:
        results = run_caller(tmp_path, nvml_library, choppy_library, plan, FHW_TEST_CHOPPY="1")
    finally:
        agent.close()
    got = {s.id: r["status"] for s, r in zip(STEPS, results, strict=True)}
    assert got == {s.id: s.status for s in STEPS}
    assert len(agent.requests) == len(AGENT_STEPS)
    for step, request in zip(AGENT_STEPS, agent.requests, strict=True):
        request_line, *header_lines = request.head.split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
        assert request_line.startswith("POST /v1/nodes/") and request_line.endswith("/mig/mode HTTP/1.1"), step.id
        assert int(headers["content-length"]) == len(request.body), step.id
        assert json.loads(request.body) == {"enabled": step.mode == 1}, step.id


def exactly_the_buffer() -> bytes:
    """An HTTP success of exactly BUFFER bytes (a long header makes up the size: the payload the caller keeps is
    4 KiB) whose last byte is the generation's only digit (0: docs/nvml.md, a non-negative generation is SUCCESS);
    one byte less read and the generation is gone (UNKNOWN)."""
    body = b'{"generation": 0'
    fixed = b"HTTP/1.1 200 OK\r\nX-Pad: \r\n\r\n"
    answer = fixed[:-4] + b"x" * (BUFFER - len(fixed) - len(body)) + fixed[-4:] + body
    assert len(answer) == BUFFER
    return answer


@pytest.mark.parametrize("choppy", ["0", "1"])
def test_an_answer_that_fills_the_client_s_buffer_exactly_is_read_whole(
        tmp_path: Path, nvml_library: Path, choppy_library: Path, choppy: str) -> None:
    """agentc.c reads up to its buffer (16383 bytes); an answer of exactly that size, its last byte the generation 0,
    is SUCCESS (docs/nvml.md), read in one piece or a byte at a time between interruptions."""
    agent = StandInAgent(tmp_path / "agent.sock", [exactly_the_buffer()])
    try:
        [result] = run_caller(tmp_path, nvml_library, choppy_library,
                              [{"mode": 1, "socket": str(tmp_path / "agent.sock")}], FHW_TEST_CHOPPY=choppy)
    finally:
        agent.close()
    assert result["status"] == SUCCESS, result["trace"]


class SilentAgent:
    """Takes one request and sends ``answer`` (by default nothing), then neither sends nor closes: holds the
    connection until the client closes it (against RFC 9112 9.6, which has a server close after its answer to a
    request that says "Connection: close", as the shim's does: a misbehaving peer)."""

    def __init__(self, path: Path, answer: bytes = b""):
        self.requests = 0
        self.client_hung_up = False
        """Whether the client closed the connection (rather than this agent giving up after its 120 s hold)."""
        self._answer = answer
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(1)
        self._sock.settimeout(60)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._sock.accept()
        with conn:
            conn.settimeout(120)
            read_message(conn)
            self.requests += 1
            conn.sendall(self._answer)
            try:
                while conn.recv(4096):
                    pass
                self.client_hung_up = True
            except TimeoutError:
                pass  # the client did not give up within the hold: client_hung_up stays False

    def close(self) -> None:
        self._thread.join(timeout=120)
        self._sock.close()


def change_against_a_silent_agent(tmp_path: Path, nvml_library: Path, choppy_library: Path, answer: bytes = b"",
                                  choppy: str = "0") -> tuple[SilentAgent, dict[str, Any]]:
    """One MIG change against a :class:`SilentAgent` that sends ``answer`` (nothing: it never answers) and then
    holds the connection, read whole or a byte at a time (``choppy``) on a clock 1000 times fast; the agent (once
    closed: it took exactly one request) and the change's result."""
    agent = SilentAgent(tmp_path / "agent.sock", answer)
    try:
        [result] = run_caller(tmp_path, nvml_library, choppy_library,
                              [{"mode": 1, "socket": str(tmp_path / "agent.sock")}], FHW_TEST_CHOPPY=choppy,
                              FHW_TEST_CLOCK="fast")
    finally:
        agent.close()
    assert agent.requests == 1
    return agent, result


@pytest.mark.parametrize("choppy", ["0", "1"])
def test_an_agent_that_never_answers_is_no_answer_once_the_bound_passes(
        tmp_path: Path, nvml_library: Path, choppy_library: Path, choppy: str) -> None:
    """A peer that takes the request and never answers: the client gives up at its bound ("bounded in ... time",
    agentc.c) and the change is UNKNOWN with "no answer from the agent" in the trace (docs/nvml.md's table: no
    answer is UNKNOWN, the trace says which). The clock runs 1000 times fast, so the bound passes in milliseconds."""
    agent, result = change_against_a_silent_agent(tmp_path, nvml_library, choppy_library, choppy=choppy)
    assert agent.client_hung_up  # at its own bound, not when the agent gave up
    assert result["status"] == UNKNOWN, result["trace"]
    assert "no answer from the agent" in result["trace"], result["trace"]


TIMEOUT = 10
"""NVML_ERROR_TIMEOUT (nvml.h)."""


def test_a_generation_never_read_is_timeout_once_the_bound_passes(
        tmp_path: Path, nvml_library: Path, choppy_library: Path) -> None:
    """The agent answers with a generation this process never reads (99; the snapshot stays at 1): docs/nvml.md's
    table, "the generation answered not read within 10 s", is TIMEOUT, activation status alike, and the trace says
    what was waited for. The clock runs 1000 times fast, so the 10 s pass in about 10 ms."""
    agent = StandInAgent(tmp_path / "agent.sock", [http(200, {"generation": 99})])
    try:
        [result] = run_caller(tmp_path, nvml_library, choppy_library,
                              [{"mode": 1, "socket": str(tmp_path / "agent.sock")}], FHW_TEST_CLOCK="fast")
    finally:
        agent.close()
    assert (result["status"], result["activation"]) == (TIMEOUT, TIMEOUT), result["trace"]
    assert "generation 99" in result["trace"], result["trace"]


def test_an_answer_still_arriving_when_the_bound_passes_is_no_answer(
        tmp_path: Path, nvml_library: Path, choppy_library: Path) -> None:
    """The agent's answer (a success, generation 0) begins to arrive, and the rest of it arrives 31 s later, past the
    client's 30 s bound ("bounded in size and time", agentc.c; docs/agent.md's own server cuts off a peer dripping
    bytes at 30 s): the client stops reading at the bound, and the change is UNKNOWN with "no answer from the agent"
    in the trace (docs/nvml.md's table: no answer is UNKNOWN, the trace says which), not read on for as long as a
    peer keeps dripping. Deterministic: one byte a read (the interposer), and the clock reads 31 s later from the
    first byte on (FHW_TEST_CLOCK=late), the rest of the answer already waiting in the socket. A client that saw no
    time left yet polled again (agentc.c:22's `: 0` made `: 1`) reads the whole answer: SUCCESS."""
    agent = StandInAgent(tmp_path / "agent.sock", [http(200, {"generation": 0})])
    try:
        [result] = run_caller(tmp_path, nvml_library, choppy_library,
                              [{"mode": 1, "socket": str(tmp_path / "agent.sock")}], FHW_TEST_CHOPPY="1",
                              FHW_TEST_CLOCK="late")
    finally:
        agent.close()
    assert result["status"] == UNKNOWN, result["trace"]
    assert "no answer from the agent" in result["trace"], result["trace"]


def test_the_bound_is_thirty_seconds_of_the_monotonic_clock(
        tmp_path: Path, nvml_library: Path, choppy_library: Path) -> None:
    """As the test above, with the rest of the answer arriving 30.005 s after its first byte instead of 31 s: still
    past the client's 30 s bound, so no answer (UNKNOWN, "no answer from the agent"). The bound is counted in the
    seconds CLOCK_MONOTONIC_COARSE gives (POSIX clock_gettime: `tv_sec` seconds and `tv_nsec` nanoseconds, so a
    millisecond is 1/1000 of the one and 1,000,000 of the other); a client whose milliseconds were 0.1 % short
    (core.c:38's `tv_sec * 1000` made `* 999`, seed 10620) would count 30.005 s as 29.975 s and read on: SUCCESS."""
    agent = StandInAgent(tmp_path / "agent.sock", [http(200, {"generation": 0})])
    try:
        [result] = run_caller(tmp_path, nvml_library, choppy_library,
                              [{"mode": 1, "socket": str(tmp_path / "agent.sock")}], FHW_TEST_CHOPPY="1",
                              FHW_TEST_CLOCK="late", FHW_TEST_LATE_MS="30005")
    finally:
        agent.close()
    assert result["status"] == UNKNOWN, result["trace"]
    assert "no answer from the agent" in result["trace"], result["trace"]


def complete_and_exactly_the_buffer() -> bytes:
    """An HTTP success of exactly BUFFER bytes whose Content-Length (17) covers its body, `{"generation": 0}`, to its
    last byte: by RFC 9112 6.3 ("its decimal value defines the expected message body length in octets") the message
    is complete once those octets are in, whether or not the peer then closes."""
    body = b'{"generation": 0}'
    fixed = b"HTTP/1.1 200 OK\r\nContent-Length: 17\r\nX-Pad: \r\n\r\n"
    answer = fixed[:-4] + b"x" * (BUFFER - len(fixed) - len(body)) + fixed[-4:] + body
    assert len(answer) == BUFFER
    return answer


def test_a_complete_answer_that_fills_the_buffer_is_read_without_waiting_for_the_close(
        tmp_path: Path, nvml_library: Path, choppy_library: Path) -> None:
    """The agent sends a complete success of exactly the client's buffer (16383 bytes, its Content-Length met) and
    then neither closes nor sends: the client has all of the message (RFC 9112 6.3) and no room for more, so the
    change is SUCCESS (docs/nvml.md: a non-negative generation), not "no answer" once the bound passes. The clock
    runs 1000 times fast, so a client that waited for more (agentc.c:43's `got < cap` made `<=`: one more poll with
    the buffer full) fails in milliseconds, not 30 s."""
    _, result = change_against_a_silent_agent(tmp_path, nvml_library, choppy_library,
                                              complete_and_exactly_the_buffer())
    assert result["status"] == SUCCESS, result["trace"]


COMPLETE_ANSWERS = {
    "success": (http(200, {"generation": 0}), SUCCESS),
    "refusal-without-a-body": (b"HTTP/1.1 422 X\r\nContent-Length: 0\r\n\r\n", INVALID_ARGUMENT),
}
"""Whole answers framed by their Content-Length, and what docs/nvml.md's table makes of each: a success with a
non-negative generation is SUCCESS; a 4xx refusal without an NVML code, INVALID_ARGUMENT (as the table of
test_mig_agent_client.py, "refused-4xx-without-a-code"), here with an empty body (Content-Length: 0)."""


@pytest.mark.parametrize("answer", sorted(COMPLETE_ANSWERS))
@pytest.mark.parametrize("choppy", ["0", "1"])
def test_a_complete_answer_is_read_without_waiting_for_the_close(
        tmp_path: Path, nvml_library: Path, choppy_library: Path, choppy: str, answer: str) -> None:
    """The agent sends a whole answer, its body the Content-Length's octets (17, or none), and then neither closes
    nor sends (a server ignoring the request's "Connection: close"). RFC 9112 6.3: the length "defines the expected
    message body length in octets", so the answer is complete once they are in: the change answers what the
    answer says (COMPLETE_ANSWERS), read in one piece or a byte at a time, not "no answer" once the bound passes
    (the clock runs 1000 times fast). The shim read on until the close or the bound before (a defect: the change
    failed after 30 s though the agent had answered)."""
    sent, expected = COMPLETE_ANSWERS[answer]
    _, result = change_against_a_silent_agent(tmp_path, nvml_library, choppy_library, sent, choppy)
    assert result["status"] == expected, result["trace"]


def longer_than_the_buffer() -> bytes:
    """The first BUFFER bytes of an HTTP success whose Content-Length (BUFFER) is more than the client can hold after
    the head: its body is cut off where the client's buffer ends."""
    fixed = b"HTTP/1.1 200 OK\r\nContent-Length: 16383\r\n\r\n"
    answer = fixed + b" " * (BUFFER - len(fixed))
    assert len(answer) == BUFFER
    return answer


def test_an_answer_longer_than_the_buffer_is_refused_without_waiting_for_more(
        tmp_path: Path, nvml_library: Path, choppy_library: Path) -> None:
    """The agent sends the first 16383 bytes of an answer whose Content-Length says more follow than the client's
    buffer (16383 bytes in all) has room for, and then neither sends nor closes. The client cannot hold the rest, so
    waiting for it cannot complete the answer: UNKNOWN at once, the trace naming the Content-Length it could not
    get (docs/nvml.md's table: an answer shorter than its Content-Length is UNKNOWN, the trace says which), not
    "no answer" after the bound (the clock runs 1000 times fast, so a client that polled again with its buffer
    full, agentc.c's `got < cap` made `got <= cap`, reaches the bound in milliseconds)."""
    _, result = change_against_a_silent_agent(tmp_path, nvml_library, choppy_library, longer_than_the_buffer())
    assert result["status"] == UNKNOWN, result["trace"]
    assert "shorter than its Content-Length" in result["trace"], result["trace"]
