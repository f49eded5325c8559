"""The agent's request head parser (fakehw/agent/server.py: parse_request_line, read_headers) against HTTP/1.1's
rules. Every expected answer is from the RFC named in the test's docstring (RFC 9110 HTTP Semantics, RFC 9112
HTTP/1.1, RFC 6585 for 431), not from what the parser does today."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehw.agent.server import MAX_HEADERS, Headers, _BadHead, parse_request_line, read_headers
from tests.agent.test_server import agent  # noqa: F401  (the in-process agent fixture)


def _headers(*lines: bytes) -> Headers:
    feed: Iterator[bytes] = iter([*lines, b"\r\n"])
    return read_headers(lambda: next(feed))


def _refused(*lines: bytes) -> int:
    with pytest.raises(_BadHead) as info:
        _headers(*lines)
    return info.value.status


def test_header_names_are_case_insensitive() -> None:
    """RFC 9110 5.1: 'Field names are case-insensitive.'"""
    headers = _headers(b"content-LENGTH: 5\r\n")
    assert headers.get("Content-Length") == "5" and headers.get_all("content-length") == ["5"]


def test_whitespace_around_the_value_is_not_part_of_it() -> None:
    """RFC 9112 5.1: OWS before and after the field value is excluded from it; RFC 9110 5.5: a value may hold
    inner spaces."""
    assert _headers(b"Idempotency-Key: \t key one \t\r\n").get("idempotency-key") == "key one"


def test_whitespace_before_the_colon_is_400() -> None:
    """RFC 9112 5.1: 'A server MUST reject, with a response status code of 400 (Bad Request), any received request
    message that contains whitespace between a header field name and colon.' (a smuggling vector: a proxy may read
    'Content-Length : 5' as a field and the agent not, or the other way round)."""
    assert _refused(b"Content-Length : 5\r\n") == 400
    assert _refused(b"Content-Length\t: 5\r\n") == 400


def test_obs_fold_is_400() -> None:
    """RFC 9112 5.2: a server that receives an obs-fold in a request 'MUST either reject the message by sending a
    400 (Bad Request) ... or replace each received obs-fold with one or more SP octets'; this one rejects."""
    assert _refused(b"X-A: one\r\n", b" two\r\n") == 400
    assert _refused(b"X-A: one\r\n", b"\ttwo\r\n") == 400


def test_bare_cr_and_nul_in_a_value_are_400() -> None:
    """RFC 9112 2.2: a bare CR is invalid (recipients reject it or replace it with SP); RFC 9110 5.5: a value with
    CR, LF or NUL 'MUST either reject the message or replace each of those characters with SP'."""
    assert _refused(b"X-A: one\rtwo\r\n") == 400
    assert _refused(b"X-A: one\x00two\r\n") == 400


def test_a_head_cut_short_by_the_peer_is_refused() -> None:
    """RFC 9112 2.2 and 5: a header section ends with an empty line (CRLF); a peer that closes before it sent an
    incomplete message, which must not be acted on as if it were whole (RFC 9112 8)."""
    feed = iter([b"Host: a\r\n", b"X-A: one", b""])
    with pytest.raises(_BadHead) as info:
        read_headers(lambda: next(feed))
    assert info.value.status == 400


def test_repeated_fields_are_all_kept_in_order() -> None:
    """RFC 9110 5.3: a recipient must not lose repeated fields (their order is significant): both of two
    Content-Lengths reach the server's 'send one' check instead of the last silently winning."""
    assert _headers(b"Content-Length: 1\r\n", b"content-length: 22\r\n").get_all("Content-Length") == ["1", "22"]


def test_more_fields_than_the_limit_is_431() -> None:
    """RFC 6585 5: 431 Request Header Fields Too Large is the answer when the header fields are too large in
    total; the count is bounded so a peer cannot make the parser loop for ever."""
    assert _refused(*[b"X-%d: a\r\n" % i for i in range(MAX_HEADERS + 1)]) == 431
    assert len(_headers(*[b"X-%d: a\r\n" % i for i in range(MAX_HEADERS)]).get_all("x-0") or []) == 1


@pytest.mark.parametrize(("line", "status"), [
    (b"GET  /v1/health HTTP/1.1\r\n", 400),  # RFC 9112 3: exactly one SP between the parts
    (b"GET /v1/health  HTTP/1.1\r\n", 400),
    (b"GET /v1/health http/1.1\r\n", 400),  # RFC 9112 2.3: HTTP-name is case-sensitive
    (b"GET /v1/health HTTP/1.1 extra\r\n", 400),
    (b"G(T /v1/health HTTP/1.1\r\n", 400),  # RFC 9110 9.1: the method is a token
    (b"GET /v1/health HTTP/2.0\r\n", 505),  # RFC 9110 15.6.6: a major version the server does not support
    (b"GET /v1/health HTTP/1.1", 400),  # the peer closed before the line ended
])
def test_malformed_request_lines_are_refused(line: bytes, status: int) -> None:
    """RFC 9112 3: 'Recipients of an invalid request-line SHOULD respond with either a 400 (Bad Request) error or a
    301 (Moved Permanently) redirect'; 505 for an unsupported major version (RFC 9110 15.6.6)."""
    with pytest.raises(_BadHead) as info:
        parse_request_line(line)
    assert info.value.status == status


def test_a_well_formed_request_line() -> None:
    """RFC 9112 3 and 2.3: method, target and version; a later 1.x minor version is HTTP/1.1-compatible
    (RFC 9110 6.2)."""
    assert parse_request_line(b"DELETE /v1/faults/f-1?x=1 HTTP/1.1\r\n") == ("DELETE", "/v1/faults/f-1?x=1", (1, 1))
    assert parse_request_line(b"GET / HTTP/1.0\r\n")[2] == (1, 0)


def _exchange(sock_path: Path, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(sock_path))
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_one_empty_line_before_the_request_line_is_ignored(agent: tuple[Path, int]) -> None:  # noqa: F811
    """RFC 9112 2.2: 'a server that is expecting to receive and parse a request-line SHOULD ignore at least one
    empty line (CRLF) received prior to the request-line'."""
    answer = _exchange(agent[0], b"\r\nGET /v1/health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_a_smuggled_length_is_refused_and_injects_nothing(agent: tuple[Path, int]) -> None:  # noqa: F811
    """RFC 9112 5.1 (400 for whitespace before the colon): the body after 'Content-Length : n' must not be read as
    a request, and the connection is closed after the 400."""
    body = b'{"node": "dgx-h100-0", "kind": "xid", "device": "gpu0", "code": 13}'
    answer = _exchange(agent[0], b"POST /v1/faults HTTP/1.1\r\nContent-Length : %d\r\n\r\n%s" % (len(body), body))
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1") == 1
    faults = _exchange(agent[0], b"GET /v1/faults HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert faults.endswith(b"[]\n")


def test_http_1_0_closes_and_1_1_keeps_the_connection(agent: tuple[Path, int]) -> None:  # noqa: F811
    """RFC 9112 9.3: HTTP/1.1 connections persist unless 'close' is sent; an HTTP/1.0 one does not persist
    without 'keep-alive'. Two requests on one HTTP/1.1 connection get two answers; on HTTP/1.0 only one."""
    two = b"GET /v1/health HTTP/1.1\r\n\r\nGET /v1/health HTTP/1.1\r\nConnection: close\r\n\r\n"
    assert _exchange(agent[0], two).count(b"HTTP/1.1 200 ") == 2
    assert _exchange(agent[0], two.replace(b"HTTP/1.1\r\n\r\n", b"HTTP/1.0\r\n\r\n", 1)).count(b"HTTP/1.1 200 ") == 1
