"""A real Slurm cluster over the fake nodes: munged, slurmctld and one slurmd per node, all on this host.

Debian's slurm-wlm runs several slurmd on one host when each gets its own port and ``-N <node>`` (checked with
22.05: spool, pid and log paths take ``%n``), so the local backend needs no containers: every fake node is one
slurmd process, reached at 127.0.0.1:<its port>. Everything (config, munge key and socket, state, logs) lives under
one directory; :meth:`SlurmCluster.stop` ends exactly the processes it started.

The cluster also plays the node health checker (what NHC or a site's HealthCheckProgram does): GPUs the agent
reports unhealthy are taken out of gres.conf and the node's Gres count, slurmctld and that node's slurmd are
restarted with the new configuration (running jobs survive: state is saved), and the GPU gets no new job.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fakehw.model.system import System
from fakehw.polling import wait_until
from fakehw.render.atomic import atomic_write
from testbed.extender.process import free_port
from testbed.slurm.render import ClusterLayout, NodeLayout, gres_conf, slurm_conf, task_prolog

START_TIMEOUT_S = 60.0
COMMANDS = ("slurmctld", "slurmd", "srun", "sbatch", "scontrol", "sinfo", "squeue", "scancel", "munged")


class SlurmError(Exception):
    """Slurm could not be started or did not do what was asked; the message says what and where the logs are."""


@dataclass(frozen=True)
class Binaries:
    paths: Mapping[str, str]

    def __getitem__(self, name: str) -> str:
        return self.paths[name]

    @classmethod
    def find(cls, prefix: Path | None = None, path: str | None = None) -> Binaries:
        """The Slurm and munge programs: in ``prefix``/sbin and ``prefix``/bin, then ``path`` (default: PATH and
        the sbin directories, where Debian puts the daemons)."""
        rest = path.split(os.pathsep) if path is not None else \
            [*os.environ.get("PATH", "").split(os.pathsep), "/usr/sbin", "/sbin"]
        search = ([str(prefix / "sbin"), str(prefix / "bin")] if prefix else []) + rest
        found: dict[str, str] = {}
        missing = []
        for name in COMMANDS:
            path = shutil.which(name, path=os.pathsep.join(search))
            if path is None:
                missing.append(name)
            else:
                found[name] = path
        if missing:
            raise SlurmError(f"Slurm/munge programs not found: {', '.join(missing)} (Debian: slurmctld slurmd "
                             "slurm-client munge; tools/install-system-deps.sh installs them)")
        return cls(found)


def parse_record(text: str) -> dict[str, str]:
    """One ``scontrol show ... -o`` line as key=value pairs (values may contain spaces only at the end)."""
    out: dict[str, str] = {}
    key = None
    for token in text.strip().split(" "):
        if "=" in token and not token.startswith("="):
            key, _, value = token.partition("=")
            out[key] = value
        elif key is not None:
            out[key] += " " + token
    return out


class SlurmCluster:
    """munged + slurmctld + one slurmd per node of ``system`` (those in ``node_dirs``), under ``root``."""

    def __init__(self, system: System, node_dirs: Mapping[str, Path], node_env: Mapping[str, Mapping[str, str]],
                 root: Path, name: str = "fakehw", binaries: Binaries | None = None):
        self.system = system
        self.node_dirs = dict(node_dirs)
        self.node_env = {k: dict(v) for k, v in node_env.items()}
        self.root = root
        self.bin = binaries or Binaries.find()
        self.layout = ClusterLayout(
            name=name.replace("-", "")[:20] or "fakehw", root=root, ctld_port=free_port(),
            munge_socket=root / "run" / "munge.sock",
            nodes=tuple(NodeLayout(n, free_port(), d / "root" / "dev") for n, d in self.node_dirs.items()),
            task_prolog=root / "etc" / "task_prolog.sh")
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # ----------------------------------------------------------------------------------- files

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        return env

    def write_config(self) -> None:
        etc = self.root / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        atomic_write(etc / "slurm.conf", slurm_conf(self.system, self.layout).encode())
        atomic_write(etc / "gres.conf", gres_conf(self.system, self.layout).encode())
        prolog = task_prolog(self.system, self.layout, self.node_env)
        atomic_write(etc / "task_prolog.sh", prolog.encode())
        os.chmod(etc / "task_prolog.sh", 0o755)

    def log(self, daemon: str) -> Path:
        return self.layout.log_dir / f"{daemon}.log"

    def log_tail(self, daemon: str, chars: int = 3000) -> str:
        try:
            return self.log(daemon).read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # ----------------------------------------------------------------------------------- daemons

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        for d in (self.layout.state_dir, self.layout.log_dir, self.layout.run_dir, self.root / "munge"):
            d.mkdir(parents=True, exist_ok=True)
        for d in (self.root, self.layout.run_dir):  # munged: everyone must be able to reach its socket
            os.chmod(d, 0o755)
        os.chmod(self.root / "munge", 0o700)
        for n in self.layout.nodes:
            (self.layout.spool_dir / n.name).mkdir(parents=True, exist_ok=True)
        try:
            self._start_munged()
            self.write_config()
            self.start_slurmctld()
            for n in self.layout.nodes:
                self.start_slurmd(n.name)
            self.wait_nodes(lambda s: "IDLE" in s, timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, key: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        log = open(self.layout.log_dir / f"{key}.out", "ab")  # noqa: SIM115 - kept open by the child
        try:
            proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env, start_new_session=True)
        finally:
            log.close()
        self._procs[key] = proc
        return proc

    def _start_munged(self) -> None:
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            os.chmod(key, 0o400)
        self._spawn("munged", [self.bin["munged"], "-F", f"--socket={self.layout.munge_socket}",
                               f"--key-file={key}", f"--log-file={self.layout.log_dir / 'munged.log'}",
                               f"--pid-file={self.layout.run_dir / 'munged.pid'}",
                               f"--seed-file={self.root / 'munge' / 'munged.seed'}", "--num-threads=4"])
        self._wait(lambda: self.layout.munge_socket.exists(), 15, "munged did not create its socket", "munged")

    def start_slurmctld(self) -> None:
        self._spawn("slurmctld", [self.bin["slurmctld"], "-D", "-f", str(self.conf)])
        self._wait(self._ctld_answers, 30, "slurmctld does not answer", "slurmctld")

    def stop_slurmctld(self) -> None:
        self._stop("slurmctld")

    def start_slurmd(self, node: str) -> None:
        self._spawn(f"slurmd-{node}", [self.bin["slurmd"], "-D", "-N", node, "-f", str(self.conf)])

    def kill_slurmd(self, node: str, sig: int = signal.SIGKILL) -> None:
        self._stop(f"slurmd-{node}", sig)

    def slurmd_alive(self, node: str) -> bool:
        proc = self._procs.get(f"slurmd-{node}")
        return proc is not None and proc.poll() is None

    def _stop(self, key: str, sig: int = signal.SIGTERM) -> None:
        proc = self._procs.pop(key, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def stop(self) -> None:
        """End every job's processes (scancel), then the daemons this cluster started."""
        if "slurmctld" in self._procs:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.run([self.bin["scancel"], "--full", "--state=RUNNING"], timeout=10)
                self.run([self.bin["scancel"], "--state=PENDING"], timeout=10)
        for key in [k for k in self._procs if k.startswith("slurmd-")]:
            self._stop(key)
        self._stop("slurmctld")
        self._stop("munged")

    def _ctld_answers(self) -> bool:
        return self.run([self.bin["scontrol"], "ping"], timeout=10).stdout.find(b"UP") >= 0

    def _wait(self, ok: Callable[[], bool], timeout: float, what: str, daemon: str) -> None:
        def up() -> bool:
            proc = self._procs.get(daemon)
            if proc is not None and proc.poll() is not None:
                raise SlurmError(f"{daemon} exited with status {proc.returncode}; its log ends:\n"
                                 f"{self.log_tail(daemon)}{self._out_tail(daemon)}")
            try:
                return ok()
            except (subprocess.SubprocessError, OSError):
                return False

        if wait_until(up, timeout, interval=0.1):
            return
        raise SlurmError(f"{what} within {timeout:.0f} s; its log ends:\n{self.log_tail(daemon)}"
                         f"{self._out_tail(daemon)}")

    def _out_tail(self, key: str) -> str:
        try:
            return (self.layout.log_dir / f"{key}.out").read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    # ----------------------------------------------------------------------------------- commands

    def run(self, argv: Sequence[str], timeout: float = 60, env: Mapping[str, str] | None = None,
            check: bool = False) -> subprocess.CompletedProcess[bytes]:
        full = self.env
        if env:
            full.update(env)
        proc = subprocess.run(list(argv), env=full, capture_output=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
        return proc

    def srun(self, args: Sequence[str], command: Sequence[str], timeout: float = 120,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        return self.run([self.bin["srun"], *args, *command], timeout=timeout, env=env)

    def scontrol(self, *args: str) -> str:
        return self.run([self.bin["scontrol"], *args], timeout=30).stdout.decode(errors="replace")

    def node_record(self, node: str) -> dict[str, str]:
        return parse_record(self.scontrol("show", "node", node, "-o"))

    def job_record(self, job_id: str) -> dict[str, str]:
        return parse_record(self.scontrol("show", "job", job_id, "-d", "-o"))

    def node_states(self) -> dict[str, str]:
        out = self.run([self.bin["sinfo"], "-N", "-h", "-o", "%N %T"], timeout=30).stdout.decode()
        states = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1].upper()
        return states

    def wait_nodes(self, ok: Callable[[str], bool], nodes: Sequence[str] | None = None,
                   timeout: float = START_TIMEOUT_S) -> dict[str, str]:
        want = list(nodes or [n.name for n in self.layout.nodes])
        states: dict[str, str] = {}

        def reached() -> bool:
            nonlocal states
            states = self.node_states()
            return all(ok(states.get(n, "")) for n in want)

        if wait_until(reached, timeout, interval=0.2):
            return states
        raise SlurmError(f"nodes did not reach the expected state within {timeout:.0f} s: {states}; slurmctld log "
                         f"ends:\n{self.log_tail('slurmctld')}")

    # ----------------------------------------------------------------------------------- health

    def set_drained(self, drained: Mapping[str, frozenset[int]]) -> bool:
        """Take GPUs (minors) out of service, per node; returns whether anything changed.

        Slurm has no per-GPU drain: the GPU leaves gres.conf and the node's Gres count, slurmctld and the node's
        slurmd restart with the new configuration, and the node is resumed. Jobs keep running throughout.
        """
        new = {k: frozenset(v) for k, v in drained.items() if v}
        changed = {n for n in set(new) | set(self.layout.drained)
                   if new.get(n, frozenset()) != self.layout.drained.get(n, frozenset())}
        if not changed:
            return False
        self.layout = replace(self.layout, drained=new)
        self.write_config()
        self.stop_slurmctld()
        for node in sorted(changed):
            self._stop(f"slurmd-{node}")
        self.start_slurmctld()
        for node in sorted(changed):
            self.start_slurmd(node)
        for node in sorted(changed):
            self.scontrol("update", f"NodeName={node}", "State=RESUME")
        self.wait_nodes(lambda s: "DRAIN" not in s and "DOWN" not in s and s != "" and "NOT_RESPONDING" not in s,
                        sorted(changed))
        return True

    def check_health(self, states: Mapping[str, Mapping[str, Any]]) -> dict[str, frozenset[int]]:
        """What a health-check program does: drain the GPUs the agent reports unhealthy or lost (agent state JSON
        per node), return GPUs back to service once healthy. Returns the drained minors per node."""
        drained: dict[str, frozenset[int]] = {}
        for n in self.layout.nodes:
            state = states.get(n.name) or {}
            bad = frozenset(int(g["index"]) for g in state.get("gpus", [])
                            if str(g.get("health")) in ("unhealthy", "lost"))
            if bad:
                drained[n.name] = bad
        self.set_drained(drained)
        return drained
