"""The extender under test: which one (a target spec), its process, and a delaying proxy for chaos.

Target specs (``--target extender=SPEC``):

- ``reference`` / ``reference:MUTANT``: the reference extender (or one of its mutants), started by the harness;
- ``cmd:COMMAND``: any command, started by the harness; ``{port}`` and ``{api}`` in it are replaced by the port
  to listen on and the cluster API URL, which are also in ``$FAKEHW_EXTENDER_PORT`` and ``$FAKEHW_K8S_API``;
- ``url:http://host:port/prefix``: an extender someone else runs (restart checks then cannot restart it).

The extender's kube-scheduler stanza (verbs, weight, nodeCacheCapable, ...) comes from an optional
``?key=value&...`` suffix on the spec (e.g. ``reference?nodeCacheCapable=false``) over the reference's defaults.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from fakehw.polling import wait_until
from testbed import component_user
from testbed.extender.protocol import ConfigError, ExtenderConfig
from testbed.httpservice import JsonHandler, LoopbackJsonServer, send_json_bytes

START_TIMEOUT_S = 30.0
DEFAULT_STANZA: dict[str, Any] = {"filterVerb": "filter", "prioritizeVerb": "prioritize", "bindVerb": "bind",
                                  "preemptVerb": "preempt", "weight": 1, "nodeCacheCapable": True,
                                  "ignorable": False, "httpTimeout": "5s"}


class TargetError(ValueError):
    """A target spec that cannot be used (the message says what is expected)."""


@dataclass(frozen=True)
class ExtenderTarget:
    kind: str
    """reference, cmd or url."""
    command: tuple[str, ...] = ()
    url: str = ""
    mutant: str | None = None
    stanza: Mapping[str, Any] = field(default_factory=dict)

    @property
    def managed(self) -> bool:
        """Whether the harness runs (and may restart) the process."""
        return self.kind != "url"

    @property
    def is_reference(self) -> bool:
        return self.kind == "reference" and self.mutant is None

    def describe(self) -> str:
        if self.kind == "reference":
            return f"reference{':' + self.mutant if self.mutant else ''}"
        if self.kind == "cmd":
            return "cmd:" + shlex.join(self.command)
        return f"url:{self.url}"

    @classmethod
    def parse(cls, spec: str | None) -> ExtenderTarget:
        text = (spec or "reference").strip()
        base, _, query = text.partition("?") if not text.startswith("cmd:") else (text, "", "")
        stanza: dict[str, Any] = dict(DEFAULT_STANZA)
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key not in (*DEFAULT_STANZA, "managedResources"):
                raise TargetError(f"extender option {key!r} is not a kube-scheduler extender setting "
                                  f"({', '.join(DEFAULT_STANZA)})")
            stanza[key] = _value(value)
        if base == "reference" or base.startswith("reference:"):
            from testbed.reference.extender.mutants import MUTANTS

            mutant = base.partition(":")[2] or None
            if mutant is not None and mutant not in MUTANTS:
                raise TargetError(f"no mutant {mutant!r} (mutants: {', '.join(sorted(MUTANTS))})")
            return cls("reference", (sys.executable, "-m", "testbed.reference.extender", "--port", "{port}",
                                     "--api", "{api}", *(("--mutant", mutant) if mutant else ())),
                       mutant=mutant, stanza=stanza)
        if base.startswith("cmd:"):
            argv = tuple(shlex.split(base[4:]))
            if not argv:
                raise TargetError("cmd: needs a command, e.g. cmd:'python -m my_extender --port {port}'")
            return cls("cmd", argv, stanza=stanza)
        if base.startswith("url:"):
            url = base[4:]
            u = urlsplit(url)
            if u.scheme != "http" or not u.hostname or not u.port:
                raise TargetError(f"url: needs http://host:port[/prefix], got {url!r}")
            return cls("url", url=url.rstrip("/"), stanza=stanza)
        raise TargetError(f"extender target {text!r}: use reference, reference:MUTANT, cmd:COMMAND or url:URL")

    def config(self, url_prefix: str, **overrides: Any) -> ExtenderConfig:
        stanza = {**self.stanza, **overrides, "urlPrefix": url_prefix}
        try:
            return ExtenderConfig.from_stanza(stanza)
        except (ConfigError, ValueError, TypeError) as exc:
            raise TargetError(f"extender configuration: {exc}") from None


def _value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float) -> bool:
    """Wait until something accepts TCP connections at ``url``'s host:port."""
    u = urlsplit(url)

    def accepts() -> bool:
        try:
            with socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout=0.5):
                return True
        except OSError:
            return False

    return wait_until(accepts, timeout)


class ExtenderProcess:
    """Runs a managed target on a fixed port (kept across restarts) with its output in ``log_path``."""

    def __init__(self, target: ExtenderTarget, api_url: str, log_path: Path, port: int | None = None):
        self.target = target
        self.api_url = api_url
        self.log_path = log_path
        if port is None:
            port = (urlsplit(target.url).port or 0) if target.kind == "url" else free_port()
        self.port = port
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.target.url if self.target.kind == "url" else f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [a.replace("{port}", str(self.port)).replace("{api}", self.api_url) for a in self.target.command]

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        if not self.target.managed:
            if not wait_http(self.url, timeout):
                raise TargetError(f"nothing answers at {self.url}")
            return
        env = dict(os.environ)
        env.update({"FAKEHW_EXTENDER_PORT": str(self.port), "FAKEHW_K8S_API": self.api_url})
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            try:
                argv, env = component_user.wrap(self.argv(), env)
                self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, env=env, start_new_session=True)
            except OSError as exc:
                raise TargetError(f"cannot start {shlex.join(self.argv())}: {exc}") from None
        proc = self._proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise TargetError(f"the extender exited with status {proc.returncode} while starting; "
                                  f"its log ends:\n{self.log_tail()}")
            return self._ready()

        if wait_until(ready, timeout):
            return
        self.stop(kill=True)
        raise TargetError(f"the extender did not listen on port {self.port} within {timeout:.0f} s; its log "
                          f"ends:\n{self.log_tail()}")

    def _ready(self) -> bool:
        """Port open; if the service has /healthz, it answers 200 (others may 404: open is enough)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status in (200, 404, 405)
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def stop(self, kill: bool = False) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def restart(self, kill: bool = True) -> None:
        if not self.target.managed:
            raise TargetError("a url: target is not run by the harness and cannot be restarted")
        self.stop(kill=kill)
        self.start()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


# --------------------------------------------------------------------------------------------------- chaos


class _ProxyHandler(JsonHandler):
    server: _ProxyServer

    def do_POST(self) -> None:
        with self.server.idle:
            self.server.in_flight += 1
        try:
            self._forward()
        finally:
            with self.server.idle:
                self.server.in_flight -= 1
                self.server.idle.notify_all()

    def _forward(self) -> None:
        body = self.read_body()
        verb = self.path.rstrip("/").rsplit("/", 1)[-1]
        delay = self.server.delays.get(verb, 0.0)
        if delay:
            time.sleep(delay)
        u = urlsplit(self.server.upstream)
        conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=60)
        try:
            conn.request("POST", (u.path.rstrip("/") + self.path), body=body,
                         headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
            resp = conn.getresponse()
            data = resp.read()
            status = resp.status
        except (OSError, http.client.HTTPException) as exc:
            data, status = f'{{"Error": "proxy: upstream failed: {exc}"}}'.encode(), 502
        finally:
            conn.close()
        send_json_bytes(self, status, data)


class _ProxyServer(LoopbackJsonServer):
    def __init__(self, upstream: str):
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = upstream
        self.delays: dict[str, float] = {}
        self.in_flight = 0
        self.idle = threading.Condition()


class DelayProxy:
    """Forwards extender calls to ``upstream``, sleeping first for the verbs in :attr:`delays` (a slow extender)."""

    def __init__(self, upstream: str):
        self._server = _ProxyServer(upstream)
        self._server.start_background("delay-proxy")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def delays(self) -> dict[str, float]:
        return self._server.delays

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until every call the proxy accepted has reached the extender and come back (a caller that timed
        out does not stop the call: the extender still gets it, late)."""
        deadline = time.monotonic() + timeout
        with self._server.idle:
            while self._server.in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._server.idle.wait(left)
        return True

    def stop(self) -> None:
        self._server.close()
