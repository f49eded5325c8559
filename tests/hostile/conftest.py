"""Helpers of the hostile suite: agents as their own processes, raw HTTP, a small tmpfs in a private namespace.

Every test here reproduces an attack or failure found against the agent and its state (issue 17) and shows it
now holds. Loops are bounded, everything listens on a unix socket or loopback only, and what a test starts
(agents, mount namespaces) it stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fakehw.agent.client import AgentClient, AgentRequestError

START_TIMEOUT_S = 180.0


@dataclass
class AgentProcess:
    """``fakehw agent`` running as its own process (as the local backend runs it)."""

    proc: subprocess.Popen[bytes]
    state_dir: Path
    socket: Path
    log: Path
    port: int | None = None
    token: str | None = None
    argv: list[str] = field(default_factory=list)

    def client(self, **kwargs: object) -> AgentClient:
        return AgentClient(self.socket, **kwargs)  # type: ignore[arg-type]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def agent_argv(profile: str, state_dir: Path, sock: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "fakehw.cli", "agent", "--profile", profile, "--state-dir", str(state_dir),
            "--socket", str(sock), *extra]


def start_agent(profile: str, state_dir: Path, sock: Path | None = None, *extra: str,
                wrap: list[str] | None = None, wait: bool = True) -> AgentProcess:
    """Start an agent; with ``wait`` until it answers (or fail with its log). ``wrap`` prefixes the command."""
    sock = sock or state_dir / "agent.sock"
    log = Path(f"{sock}.log")
    argv = [*(wrap or []), *agent_argv(profile, state_dir, sock, *extra)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    agent = AgentProcess(proc, state_dir, sock, log, argv=argv)
    if wait:
        wait_ready(agent)
    return agent


def wait_ready(agent: AgentProcess) -> None:
    client = AgentClient(agent.socket, timeout=10, retries=0)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if agent.proc.poll() is not None:
            raise AssertionError(f"the agent exited ({agent.proc.returncode}):\n{agent.output()[-3000:]}")
        with contextlib.suppress(AgentRequestError):
            client.health()
            return
        time.sleep(0.05)
    agent.stop()
    raise AssertionError(f"the agent did not answer within {START_TIMEOUT_S} s:\n{agent.output()[-3000:]}")


@pytest.fixture
def agents() -> Iterator[Callable[..., AgentProcess]]:
    """``agents(profile, state_dir, ...)``: start agents that are stopped at the end of the test."""
    started: list[AgentProcess] = []

    def make(*args: object, **kwargs: object) -> AgentProcess:
        agent = start_agent(*args, **kwargs)  # type: ignore[arg-type]
        started.append(agent)
        return agent

    yield make
    for agent in started:
        agent.stop()


def raw_http(sock: Path | tuple[str, int], request: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is and read one answer: (status, headers, body)."""
    family = socket.AF_UNIX if isinstance(sock, Path) else socket.AF_INET
    with socket.socket(family) as s:
        s.settimeout(timeout)
        s.connect(str(sock) if isinstance(sock, Path) else sock)
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    return int(lines[0].split()[1]), headers, body


def http_request(method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                 content_length: bool = True) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: agent", "Connection: close"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body is not None and content_length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def error_of(body: bytes) -> str:
    return str(json.loads(body).get("error", ""))


# --------------------------------------------------------------------------------------------------- tmpfs


@dataclass
class SmallDisk:
    """A tmpfs of a given size in a private mount namespace (gone with its holder process)."""

    holder: subprocess.Popen[str]
    mountpoint: Path

    @property
    def view(self) -> Path:
        """The mount point as seen from outside the namespace."""
        return Path(f"/proc/{self.holder.pid}/root{self.mountpoint}")

    def run_inside(self) -> list[str]:
        """Prefix that runs a command inside the namespace."""
        return ["nsenter", "-t", str(self.holder.pid), "-m"]

    def free_bytes(self) -> int:
        st = os.statvfs(self.view)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int) -> Path:
        """Fill the disk until ``leave`` bytes are free; returns the filler file (remove it to free the space)."""
        filler = self.view / "filler"
        with open(filler, "ab") as fh:
            room = self.free_bytes() - leave
            while room > 0:
                try:
                    fh.write(b"\0" * min(room, 1 << 20))
                    fh.flush()
                except OSError:
                    break
                room = self.free_bytes() - leave
        return filler


def root_with_namespaces() -> str | None:
    """Why a private tmpfs cannot be made here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root (a tmpfs in a private mount namespace)"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux)"
    return None


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str], SmallDisk]]:
    """``small_disk("48m")``: a tmpfs of that size; the namespace is torn down at the end."""
    why = root_with_namespaces()
    if why is not None:
        pytest.skip(why)
    made: list[SmallDisk] = []

    def make(size: str) -> SmallDisk:
        mnt = tmp_path / f"disk{len(made)}"
        mnt.mkdir(mode=0o700)
        holder = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             f'mount -t tmpfs -o size={size},mode=0700 tmpfs "$0" && echo mounted && exec sleep 3600', str(mnt)],
            stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != "mounted":
            holder.kill()
            holder.wait()
            pytest.skip("cannot mount a tmpfs in a private mount namespace here")
        disk = SmallDisk(holder, mnt)
        made.append(disk)
        return disk

    yield make
    for disk in made:
        disk.holder.kill()
        disk.holder.wait()
