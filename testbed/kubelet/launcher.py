"""Starting and stopping the plugin under test: a command on this machine, or a command inside a node container.

A plugin finds the kubelet where a real one is: on the local backend the command runs in the node's view
(:mod:`testbed.nodeview`, when this machine can make one: root) where the harness's plugin directory is
``/var/lib/kubelet/device-plugins`` (so a plugin with that path built in, like NVIDIA's, registers unmodified),
the node's tree is at ``/sys``, ``/dev`` and ``/proc/driver``, and extra directories (a driver root, the CDI spec
directory) are where NVIDIA's components look for them. A plugin that takes a flag can still be given the
directory as ``{plugin_dir}`` (substituted) or the environment variable :data:`PLUGIN_DIR_ENV`. On the Docker
backend the command runs in the node's container. Output goes to a log file whose tail is evidence when a check
fails.

Processes are started in their own session and stopped by process group, so a plugin that forks helpers leaves
nothing behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from testbed import component_user, nodeview
from testbed.environment import merged_environment

PLUGIN_DIR_ENV = "FAKEHW_DEVICE_PLUGIN_DIR"
"""Environment variable naming the kubelet's device plugin directory for the plugin under test."""
KUBELET_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
"""Where the kubelet keeps ``kubelet.sock`` and plugin sockets (device plugin API v1beta1 ``DevicePluginPath``)."""


class PluginProcess(ABC):
    """One run of the plugin under test."""

    describe: str = ""

    @abstractmethod
    def alive(self) -> bool: ...

    @abstractmethod
    def returncode(self) -> int | None: ...

    @abstractmethod
    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the process exits (or ``timeout`` passes); its status, or None while it runs."""

    @abstractmethod
    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""

    @abstractmethod
    def kill(self) -> None:
        """SIGKILL at once (chaos: a crash)."""

    @abstractmethod
    def log_tail(self, chars: int = 4000) -> str: ...


class PluginLauncher(ABC):
    """Knows how to start the plugin under test pointed at a plugin directory."""

    describe: str = ""

    @abstractmethod
    def start(self, plugin_dir: Path) -> PluginProcess: ...


def substitute(command: str, plugin_dir: Path, node: str) -> str:
    """``{plugin_dir}`` and ``{node}`` in a command (other braces are left alone)."""
    return command.replace("{plugin_dir}", shlex.quote(str(plugin_dir))).replace("{node}", shlex.quote(node))


class LocalProcess(PluginProcess):
    def __init__(self, proc: subprocess.Popen[bytes], log: Path, describe: str):
        self.proc = proc
        self.log = log
        self.describe = describe

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(timeout)
        return None

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        self._signal(signal.SIGKILL)  # also whatever the plugin left in its group
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            with open(self.log, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - chars))
                return fh.read().decode(errors="replace")
        except OSError:
            return ""


class CommandLauncher(PluginLauncher):
    """Runs ``command`` (a shell command line) on this machine with a node's environment, in the node's view
    when ``view`` is given: the plugin directory is then also bound at :data:`KUBELET_PLUGIN_DIR`. ``prepare`` is
    called before every start: it makes sure what the view binds is there (the node's live ``/sys`` is served:
    a server that died since the last start is replaced, so a restarted plugin never finds an empty ``/sys``)."""

    def __init__(self, command: str | Sequence[str], node: str, env: Mapping[str, str], log_dir: Path,
                 view: nodeview.NodeView | None = None, prepare: Callable[[], object] | None = None):
        self.command = command if isinstance(command, str) else shlex.join(command)
        self.node = node
        self.env = dict(env)
        self.log_dir = log_dir
        self.view = view
        self.prepare = prepare
        self.describe = self.command
        self._runs = 0

    def argv(self, shell: list[str], plugin_dir: Path) -> list[str]:
        """``shell`` (the plugin's command line, as the component user when one is set) in the node's view."""
        if self.view is None:
            return shell
        binds = (*self.view.binds, nodeview.Bind(str(plugin_dir), KUBELET_PLUGIN_DIR))
        return nodeview.command(dataclasses.replace(self.view, binds=binds), shell)

    def start(self, plugin_dir: Path) -> LocalProcess:
        self._runs += 1
        if self.prepare is not None:
            self.prepare()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"plugin-{self._runs}.log"
        plugin_dir.mkdir(parents=True, exist_ok=True)
        command = substitute(self.command, plugin_dir, self.node)
        env = merged_environment({**self.env, PLUGIN_DIR_ENV: str(plugin_dir)})
        where = "in the node's view" if self.view is not None else "on this machine"
        with open(log, "ab") as out:
            out.write(f"# {time.strftime('%H:%M:%S')} start {where}: {command}\n".encode())
            out.flush()
            # The user switch happens inside the node's view: making the view's mounts needs root.
            shell, env = component_user.wrap(["/bin/sh", "-c", f"exec {command}"], env)
            proc = subprocess.Popen(self.argv(shell, plugin_dir), env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        return LocalProcess(proc, log, command)


class ContainerProcess(PluginProcess):
    """The plugin running inside a container through ``docker exec``; its PID inside is kept in a file in the
    (bind-mounted) plugin directory so signals reach the plugin, not only the ``docker exec`` client."""

    def __init__(self, proc: subprocess.Popen[bytes], container: str, pidfile: Path, log: Path, describe: str):
        self.proc = proc
        self.container = container
        self.pidfile = pidfile
        self.log = log
        self.describe = describe

    def _pid(self) -> str | None:
        try:
            pid = self.pidfile.read_text().strip()
        except OSError:
            return None
        return pid if pid.isdigit() else None

    def _signal(self, sig: str) -> None:
        pid = self._pid()
        if pid is not None:
            subprocess.run(["docker", "exec", self.container, "kill", f"-{sig}", pid], capture_output=True,
                           timeout=30, check=False)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(timeout)
        return None

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc.poll() is None:
            self._signal("TERM")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self._signal("KILL")
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_tail(self, chars: int = 4000) -> str:
        return LocalProcess.log_tail(self, chars)  # type: ignore[arg-type]


class ContainerCommandLauncher(PluginLauncher):
    """Runs ``command`` inside a node container (Docker backend). ``plugin_dir`` is the host side of a bind mount
    that the container sees at ``container_plugin_dir``: the harness's kubelet.sock and the plugin's sockets meet
    there."""

    def __init__(self, container: str, command: str, node: str, plugin_dir: Path, container_plugin_dir: str,
                 log_dir: Path, env: Mapping[str, str] | None = None):
        self.container = container
        self.command = command
        self.node = node
        self.plugin_dir = plugin_dir
        self.container_plugin_dir = container_plugin_dir
        self.log_dir = log_dir
        self.env = dict(env or {})
        self.describe = f"{command} (in container {container})"
        self._runs = 0

    def start(self, plugin_dir: Path) -> ContainerProcess:
        self._runs += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"plugin-{self._runs}.log"
        pidfile = f".plugin-{self._runs}.pid"
        command = substitute(self.command, Path(self.container_plugin_dir), self.node)
        argv = ["docker", "exec", "-i"]
        for key, value in {**self.env, PLUGIN_DIR_ENV: self.container_plugin_dir}.items():
            argv += ["-e", f"{key}={value}"]
        script = f"echo $$ > {shlex.quote(self.container_plugin_dir + '/' + pidfile)}; exec {command}"
        argv += [self.container, "sh", "-c", script]
        with open(log, "ab") as out:
            out.write(f"# {time.strftime('%H:%M:%S')} start in {self.container}: {command}\n".encode())
            out.flush()
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        return ContainerProcess(proc, self.container, self.plugin_dir / pidfile, log, command)


class ImageProcess(ContainerProcess):
    """The component's own container (``docker run``, attached: the client's exit status is the container's);
    signals go to the container's main process through the engine."""

    def __init__(self, proc: subprocess.Popen[bytes], container: str, log: Path, describe: str):
        super().__init__(proc, container, Path("/nonexistent"), log, describe)

    def _signal(self, sig: str) -> None:
        subprocess.run(["docker", "kill", "--signal", sig, self.container], capture_output=True, timeout=30,
                       check=False)


class ImageLauncher(PluginLauncher):
    """Runs a component given as a container image (``image:REF``) beside a node container, as a DaemonSet pod
    runs beside a kubelet: its own container from its own image, no network, the kubelet's plugin directory at
    :data:`KUBELET_PLUGIN_DIR` and the node as the backend presents it to components (``binds``, ``env``: the
    node's ``/sys`` and device files, a driver root with the fake NVML; see ``DockerBackend.component_view``).
    Each start is a new container (``--rm``), named after the node and the run so it can be found and stopped."""

    def __init__(self, image: str, node: str, name: str, binds: Sequence[nodeview.Bind], env: Mapping[str, str],
                 labels: Mapping[str, str], plugin_dir: Path, log_dir: Path, view_note: str = ""):
        self.image = image
        self.plugin_dir = plugin_dir
        """The host directory the container sees at :data:`KUBELET_PLUGIN_DIR` (where the harness's kubelet is)."""
        self.view_note = view_note
        """What the container is shown of its node, in words (for the report)."""
        self.node = node
        self.name = name
        self.binds = tuple(binds)
        self.env = dict(env)
        self.labels = dict(labels)
        self.log_dir = log_dir
        self.describe = f"image {image}"
        self._runs = 0

    def argv(self, plugin_dir: Path, container: str) -> list[str]:
        argv = ["docker", "run", "--rm", "--name", container, "--network", "none", "--hostname", self.node,
                "--mount", f"type=bind,source={plugin_dir},target={KUBELET_PLUGIN_DIR}"]
        for b in self.binds:
            argv += ["--mount", f"type=bind,source={b.source},target={b.target}" + (",readonly" if b.read_only else "")]
        for key, value in {**self.env, PLUGIN_DIR_ENV: KUBELET_PLUGIN_DIR}.items():
            argv += ["--env", f"{key}={value}"]
        for key, value in self.labels.items():
            argv += ["--label", f"{key}={value}"]
        return [*argv, self.image]

    def start(self, plugin_dir: Path) -> ImageProcess:
        self._runs += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"plugin-{self._runs}.log"
        plugin_dir.mkdir(parents=True, exist_ok=True)
        container = f"{self.name}-{self._runs}"
        subprocess.run(["docker", "rm", "--force", container], capture_output=True, timeout=60, check=False)
        with open(log, "ab") as out:
            out.write(f"# {time.strftime('%H:%M:%S')} start container {container} of image {self.image}\n".encode())
            out.flush()
            proc = subprocess.Popen(self.argv(plugin_dir, container), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        return ImageProcess(proc, container, log, f"image {self.image} (container {container})")
