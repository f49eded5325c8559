"""The docker backend: one container per fake node, from the node image of that node's architecture.

``testbed up --backend docker --profile P`` makes, for a cluster:

- a private bridge network (internal: no route out) on which every node is reachable by its node name;
- per node, a container from the node image of its architecture (:mod:`testbed.images`) run with its platform,
  so a riscv64 node runs riscv64 binaries under QEMU user mode. Its entrypoint (:mod:`testbed.node_entry`) creates
  ``/dev/nvidiactl`` and ``/dev/nvidia<minor>`` for the GPUs the container was given and runs the node's own agent;
- per node, a host directory ``<cluster>/agents/<node>/`` bind-mounted as the agent's state directory. The agent's
  journal lives there (a killed and restarted container comes back with its faults), the node's renderings
  (``nvml.snapshot``, ``state.json``, the fake root) are readable from the host, and the agent's control socket is
  reached from the host through it: the control path does not use the network, so a partitioned node can still be
  driven. The fake root's ``sys/bus``, ``sys/devices`` and ``sys/class`` are mounted read-only over the container's
  own, where lspci, numactl, NFD-style labelers and device plugins read them.

Everything the backend creates carries the labels :data:`LABEL_RUN` (one id per ``up``), :data:`LABEL_CLUSTER` and
:data:`LABEL_STATE_DIR`. ``down`` removes by the run label, so it also cleans up after an ``up`` that failed half
way; :func:`remove_orphans` (``testbed down --all``) removes what crashed runs left behind.

Chaos verbs that need containers: :meth:`DockerBackend.kill_node`, ``restart_node``, ``pause_node``,
``unpause_node``, ``partition_node`` (disconnect from the cluster network) and ``unpartition_node``.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakehw import livefs
from fakehw.agent.client import AgentClient, AgentRequestError
from fakehw.livefs.nodes import NodeMounts
from fakehw.model import System
from fakehw.model.system import Node
from testbed import nodeview
from testbed.backends.base import Backend, BackendError, BackendInputError, NodeInfo, UpRequest, load_request_profile
from testbed.backends.startwatch import STALL_S, StartWatch, cgroup_cpu_seconds
from testbed.cluster import ClusterRecord, remove_tree_in_background

LABEL_TESTBED = "org.fakehw.testbed"
LABEL_RUN = "org.fakehw.run"
LABEL_CLUSTER = "org.fakehw.cluster"
LABEL_STATE_DIR = "org.fakehw.state-dir"
LABEL_NODE = "org.fakehw.node"
CONTAINER_STATE = "/var/lib/fakehw-agent"
"""The agent's state directory inside a node container (bind-mounted from the host)."""
CONTAINER_NODE_DIR = "/var/lib/fakehw"
"""The node's rendered directory inside its container (a link the entrypoint makes into the state directory)."""
CONTAINER_PROFILE_DIR = "/etc/fakehw/profile"
SYS_MOUNTS = ("bus", "devices", "class")
"""Directories of the node's fake ``sys`` mounted over the container's ``/sys``: self-contained (every link in
them points inside them) and not needed by the container runtime (unlike ``/sys/fs``)."""
CONTAINER_LIVE_SYS = "/run/fakehw/sys"
"""Where a node container gets the node's live ``/sys`` (the host's FUSE mount, :mod:`fakehw.livefs`), which the
node view then mounts over ``/sys``."""
OPTIONS = ("gpus", "image", "timeout")
"""A starting node is given up on when, for this long, its agent neither answered, reported progress, nor its
container used CPU (Python starts 5-10x slower under QEMU user mode, and slower still on a loaded machine: a
fixed limit is either too short there or far too long for a node that is stuck)."""
OCI_FAILURE = b"OCI runtime exec failed"


@dataclass(frozen=True)
class ComponentView:
    """What a component's own container (``image:`` components) is given to see its node, as a DaemonSet pod sees
    the node it runs on: ``binds`` (host path -> container path), ``env`` and the cluster's ``labels`` (so ``down``
    removes a container a crashed suite left)."""

    binds: tuple[nodeview.Bind, ...]
    env: dict[str, str]
    labels: dict[str, str]
    not_presented: str | None = None
    """What the component does not see of its node, and why (None: everything listed in docs/docker.md)."""


@dataclass(frozen=True)
class NodePlan:
    """What one node container gets: derived from the model and the ``gpus`` option before anything starts."""

    node: str
    arch: str
    container: str
    minors: tuple[int, ...]
    gpu_names: tuple[str, ...]


def _client() -> Any:
    """A docker SDK client, or a BackendError that says what to install or start."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        raise BackendError("the docker backend needs the docker SDK: pip install 'fakehw[docker]'") from None
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except DockerException as exc:
        raise BackendError(f"no Docker engine answers ({exc}); run 'testbed host setup' (as root)") from None
    return client


def _not_found(exc: Exception) -> bool:
    from docker.errors import NotFound

    return isinstance(exc, NotFound)


def parse_gpu_option(value: Any, system: System) -> dict[str, tuple[str, ...]]:
    """The ``gpus`` option -> the GPU names each node's container is given.

    ``None``/``"all"``: every GPU of the node; ``"none"``/``[]``: none; ``"gpu2,gpu5"``, ``"2,5"`` or a list of
    names/indices: those GPUs on every node; a mapping ``{node: spec}``: per node (nodes left out get all).
    """
    result: dict[str, tuple[str, ...]] = {}
    if isinstance(value, Mapping):
        unknown = [n for n in value if system.node(str(n)) is None]
        if unknown:
            raise BackendInputError(f"gpus: profile {system.name} has no node(s) {', '.join(map(str, unknown))} "
                                    f"(nodes: {', '.join(n.name for n in system.nodes)})")
        for node in system.nodes:
            result[node.name] = _gpu_names(value.get(node.name), node)
        return result
    for node in system.nodes:
        result[node.name] = _gpu_names(value, node)
    return result


def _gpu_names(spec: Any, node: Node) -> tuple[str, ...]:
    if spec is None or spec == "all":
        return tuple(g.name for g in node.gpus)
    if spec == "none":
        return ()
    if isinstance(spec, str):
        tokens: list[Any] = [t.strip() for t in spec.split(",") if t.strip()]
    elif isinstance(spec, int):
        tokens = [spec]
    elif isinstance(spec, Sequence):
        tokens = list(spec)
    else:
        raise BackendInputError(f"gpus: expected 'all', 'none', a comma-separated list or a list, got {spec!r}")
    names: list[str] = []
    for token in tokens:
        text = str(token)
        gpu = node.gpu(text)
        if gpu is None and re.fullmatch(r"\d+", text) and int(text) < len(node.gpus):
            gpu = node.gpus[int(text)]
        if gpu is None:
            raise BackendInputError(f"gpus: node {node.name} has no GPU {text!r} "
                                    f"(it has {', '.join(g.name for g in node.gpus) or 'none'})")
        if gpu.name in names:
            raise BackendInputError(f"gpus: {gpu.name} is given twice for node {node.name}")
        names.append(gpu.name)
    return tuple(sorted(names, key=lambda n: node.gpu(n).index))  # type: ignore[union-attr]


class DockerBackend(Backend):
    name = "docker"
    stall_s = STALL_S
    """How long a starting node may stand still before ``up`` gives up (see :mod:`testbed.backends.startwatch`)."""

    # ------------------------------------------------------------------------------------------ up

    def up(self, request: UpRequest) -> ClusterRecord:
        unknown = sorted(set(request.options) - set(OPTIONS))
        if unknown:
            raise BackendInputError(f"the docker backend has no option(s) {', '.join(unknown)} "
                                    f"(options: {', '.join(OPTIONS)})")
        system, profile = load_request_profile(request.profile, request.nodes)
        gpus = parse_gpu_option(request.options.get("gpus"), system)
        timeout = request.options.get("timeout")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise BackendInputError(f"timeout: expected a positive number of seconds, got {timeout!r}")
        root = request.state_dir / request.name
        run = uuid.uuid4().hex[:10]
        plans = [NodePlan(node.name, node.cpu.arch, _container_name(request.name, node.name, run),
                          tuple(node.gpu(g).minor for g in gpus[node.name]),  # type: ignore[union-attr]
                          gpus[node.name]) for node in system.nodes]
        record = ClusterRecord(name=request.name, backend=self.name, profile=profile,
                               nodes=[n.name for n in system.nodes], node_count=request.nodes, root=str(root),
                               created=time.time())
        record.extra = {"run": run, "network": f"fakehw-{request.name}-{run}", "image": None,
                        "state_dir": str(request.state_dir.resolve()),
                        "nodes": {p.node: {"arch": p.arch, "container": p.container, "minors": list(p.minors),
                                           "gpus": list(p.gpu_names)} for p in plans}}
        for plan in plans:
            sock = self._socket_path(record, plan.node)
            if len(str(sock).encode()) >= 107:
                raise BackendError(f"state dir {request.state_dir} is too deep for the agents' unix sockets "
                                   f"({sock}); use a shorter --state-dir (or FAKEHW_STATE_DIR)")
        client = _client()
        root.mkdir(parents=True, exist_ok=True)
        record.save()
        try:
            images = self._images(request.options.get("image"), sorted({p.arch for p in plans}))
            record.extra["image"] = images
            # What a report needs to name exactly what ran: the image each architecture ran (content digest) and
            # the engine's version.
            record.extra["image_ids"] = {arch: client.images.get(tag).id for arch, tag in images.items()}
            record.extra["engine"] = str(client.version().get("Version", ""))
            record.save()
            labels = self._labels(record)
            self._start_live_sys(record, [p.node for p in plans])
            client.networks.create(record.extra["network"], driver="bridge", internal=True, labels=labels)
            # Creating and starting containers are independent engine calls: in parallel they take a fraction.
            with ThreadPoolExecutor(max_workers=min(8, len(plans))) as pool:
                list(pool.map(lambda plan: self._create_node(client, record, plan, images[plan.arch],
                                                                labels).start(), plans))
            self._wait_ready(client, record, [p.node for p in plans], timeout)
            for plan in plans:
                self._present_view(client, record, plan.node)
        except BaseException:
            self.down(record)
            raise
        return record

    def _images(self, ref: Any, arches: list[str]) -> dict[str, str]:
        """The node image to run per architecture: the one given (a tag holding every architecture needed, or a
        mapping architecture -> tag), or the content-addressed image of each architecture (built if missing)."""
        from testbed.images import ImageBuilder, ImageError

        if ref is None:
            try:
                builder = ImageBuilder(progress="plain")
                return {arch: builder.node_image(arch).tag for arch in arches}
            except ImageError as exc:
                raise BackendError(f"cannot build the node image: {exc}") from None
        if isinstance(ref, str) and ref:
            given = dict.fromkeys(arches, ref)
        elif isinstance(ref, Mapping) and all(isinstance(v, str) and v for v in ref.values()):
            given = {arch: ref[arch] for arch in arches if arch in ref}
            missing = [a for a in arches if a not in given]
            if missing:
                raise BackendInputError(f"image: no image given for {', '.join(missing)} (given: "
                                        f"{', '.join(sorted(map(str, ref)))})")
        else:
            raise BackendInputError(f"image: expected an image reference, got {ref!r}")
        for arch, tag in given.items():
            _check_image(tag, arch)
        return given

    def _labels(self, record: ClusterRecord) -> dict[str, str]:
        return {LABEL_TESTBED: "1", LABEL_RUN: record.extra["run"], LABEL_CLUSTER: record.name,
                LABEL_STATE_DIR: record.extra["state_dir"]}

    def _agent_dir(self, record: ClusterRecord, node: str) -> Path:
        return record.dir / "agents" / node

    def _socket_path(self, record: ClusterRecord, node: str) -> Path:
        return self._agent_dir(record, node) / "agent.sock"

    def _node_root(self, record: ClusterRecord, node: str) -> Path:
        """The node's rendered fake root on the host (the agent in its container renders it)."""
        return self._agent_dir(record, node) / "nodes" / node / "root"

    def live_mounts(self, record: ClusterRecord) -> NodeMounts:
        """The nodes' live ``/sys`` (FUSE, served on the host from the node's rendered tree, writes through the node's
        agent), at ``<cluster>/live/<node>/sys``: the same server the local backend mounts for ``testbed exec``."""
        return NodeMounts(record.dir / "live", lambda n: self._socket_path(record, n),
                          lambda n: self._node_root(record, n) / "sys")

    def _start_live_sys(self, record: ClusterRecord, nodes: list[str]) -> None:
        """Mount each node's live ``/sys`` before its container is made, so the container's bind of it holds the
        FUSE mount (the host's mounts are private: one made later would not reach the container). The tree is
        served by path, so it may be filled by the agent after this; its directories are never replaced
        (:mod:`fakehw.sysfs.tree`), and a root holding only these empty directories is still written as a new tree,
        not entry by entry (under QEMU that was most of a riscv64 node's start). Where this machine cannot (not
        root, no FUSE), the containers get the rendered tree and ``record.extra["view"]`` says what is not
        presented."""
        for node in nodes:
            root = self._node_root(record, node)
            for sub in (*(f"sys/{d}" for d in SYS_MOUNTS), "dev", "proc/driver"):
                (root / sub).mkdir(parents=True, exist_ok=True)
        why = nodeview.unavailable() or livefs.unavailable()
        record.extra["view"] = None if why is None else f"the node's live /sys and devices are not presented: {why}"
        record.save()
        if why is not None:
            return
        mounts = self.live_mounts(record)
        for node in nodes:
            try:
                mounts.ensure(node)
            except (RuntimeError, OSError) as exc:
                raise BackendError(f"cannot serve the live /sys of {node}: {exc}") from None

    def _present_view(self, client: Any, record: ClusterRecord, node: str) -> None:
        """Show the node's tree at the real paths inside its running container, as ``testbed exec`` shows it on the
        local backend (one piece of code: :mod:`testbed.nodeview`): the live ``/sys``, ``/proc/driver`` and the
        node's ``cpuinfo``/``meminfo``/``devices`` mounted in the container's mount namespace from the host (as the
        NVIDIA container runtime's hook mounts a GPU container's driver files: the container needs no capability),
        and the node's device files mirrored into its ``/dev``. Every process that enters the container later
        (``docker exec``) sees it."""
        if record.extra.get("view") is not None:
            return
        pid = self._container_pid(client, record, node)
        self._join(record, node, pid, files_only=False)
        self._sync_view(record, node, pid)

    def _join(self, record: ClusterRecord, node: str, pid: int, files_only: bool) -> None:
        view = nodeview.NodeView(root=f"{CONTAINER_STATE}/nodes/{node}/root",
                                 binds=(nodeview.Bind(CONTAINER_LIVE_SYS, "/sys"),), writable_sys=True, dev=False)
        argv = [sys.executable, "-I", nodeview.__file__, "--join", f"/proc/{pid}/ns/mnt", view.to_json()]
        done = subprocess.run(argv + (["--files"] if files_only else []), capture_output=True, text=True,
                              check=False, timeout=60)
        if done.returncode != 0:
            raise BackendError(f"node {node}: cannot show its tree in its container: "
                               f"{(done.stderr or done.stdout).strip()}")
        self._proc_mark(record, node).write_text(self._proc_files(record, node))

    def _proc_mark(self, record: ClusterRecord, node: str) -> Path:
        return self._agent_dir(record, node).parent / f".{node}.proc-files"

    def _proc_files(self, record: ClusterRecord, node: str) -> str:
        """Which files the node's ``proc/{cpuinfo,meminfo,devices}`` are now (a render replaces them by rename)."""
        proc = self._node_root(record, node) / "proc"
        marks = []
        for name in nodeview.PROC_FILES:
            with contextlib.suppress(OSError):
                marks.append(f"{name}:{(proc / name).stat().st_ino}")
        return " ".join(marks)

    def _sync_view(self, record: ClusterRecord, node: str, pid: int) -> None:
        """Before every exec: what a render replaced or added since the view was mounted (the node's proc files,
        its device files, e.g. a new CXL region's ``daxX.Y``)."""
        try:
            mounted = self._proc_mark(record, node).read_text()
        except OSError:
            mounted = ""
        if mounted != self._proc_files(record, node):
            self._join(record, node, pid, files_only=True)
        self._sync_devices(record, node, pid)

    def _sync_devices(self, record: ClusterRecord, node: str, pid: int) -> None:
        """The node's device files (those a runtime change adds or removes too: a CXL region's ``daxX.Y``) in its
        container's ``/dev``; done before every exec."""
        try:
            nodeview.mirror_devices(str(self._node_root(record, node) / "dev"), f"/proc/{pid}/root/dev")
        except OSError as exc:
            raise BackendError(f"node {node}: cannot present its devices in its container: {exc}") from None

    def _container_pid(self, client: Any, record: ClusterRecord, node: str) -> int:
        container = self._container(client, record, node)
        container.reload()
        pid = int(container.attrs["State"].get("Pid") or 0)
        if pid <= 0:
            raise BackendError(f"node {node}: its container is not running")
        return pid

    def component_view(self, record: ClusterRecord, node: str) -> ComponentView:
        """The mounts and environment of a component's container on ``node`` (``image:`` components): the node's
        ``/sys`` (live when the node's is), its device files (of the GPUs the node container was given), the node's
        rendered directory at ``/var/lib/fakehw`` (the fake NVML's snapshot), the agent's directory (its socket) and
        a driver root at ``/driver-root`` with the node image's fake ``libnvidia-ml`` for the node's architecture,
        which is also on ``LD_LIBRARY_PATH``. The kubelet's plugin directory is the caller's to add."""
        from testbed.kubelet.driver_root import CONTAINER_DRIVER_ROOT, MULTIARCH

        self._check_node(record, node)
        root = self._node_root(record, node)
        live = record.extra.get("view") is None
        sys_source = self.live_mounts(record).mountpoint(node) if live else root / "sys"
        binds = [nodeview.Bind(str(sys_source / entry.name), f"/sys/{entry.name}", read_only=not live)
                 for entry in sorted((root / "sys").iterdir(), key=lambda e: e.name) if entry.is_dir()]
        minors = record.extra["nodes"][node]["minors"]
        given = {"nvidiactl", *(f"nvidia{m}" for m in minors)}
        for entry in sorted((root / "dev").iterdir(), key=lambda e: e.name):
            gpu = entry.name == "nvidiactl" or (entry.name.startswith("nvidia") and entry.name[6:].isdigit())
            if entry.name in nodeview.CONTAINER_DEV or (gpu and entry.name not in given):
                continue
            binds.append(nodeview.Bind(str(entry), f"/dev/{entry.name}", read_only=True))
        binds.append(nodeview.Bind(str(root.parent), CONTAINER_NODE_DIR, read_only=True))
        binds.append(nodeview.Bind(str(self._agent_dir(record, node)), CONTAINER_STATE, read_only=True))
        arch = record.extra["nodes"][node]["arch"]
        machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
        driver_root = self._driver_root(record, node, machine)
        binds.append(nodeview.Bind(str(driver_root), CONTAINER_DRIVER_ROOT, read_only=True))
        env = {"FAKEHW_NODE": node, "FAKEHW_AGENT_SOCKET": f"{CONTAINER_STATE}/agent.sock",
               "FAKEHW_NVML_SNAPSHOT": f"{CONTAINER_NODE_DIR}/nvml.snapshot",
               "LD_LIBRARY_PATH": f"{CONTAINER_DRIVER_ROOT}/usr/lib/{MULTIARCH[machine]}",
               "NVIDIA_DRIVER_ROOT": CONTAINER_DRIVER_ROOT}
        missing = ("/proc/driver (a container runtime refuses binds under /proc; a hook-style mount after the "
                   "start would race the component's first reads)")
        if not live:
            missing += f"; {record.extra['view']}"
        return ComponentView(tuple(binds), env, {**self._labels(record), LABEL_NODE: node}, missing)

    def _driver_root(self, record: ClusterRecord, node: str, machine: str) -> Path:
        """``<cluster>/driver-root/<node>``: the fake NVML the node image carries (copied out of the node's
        container, so it is the one built for the node's architecture) laid out as a driver package installs it."""
        from testbed.kubelet.driver_root import DriverRootError, build_driver_root

        dest = record.dir / "driver-root" / node
        if dest.is_dir():
            return dest
        nvml = record.dir / "driver-root" / f".{node}.nvml"
        nvml.mkdir(parents=True, exist_ok=True)
        container = self.container_name(record, node)
        done = subprocess.run(["docker", "cp", f"{container}:/opt/fakehw/nvml/libnvidia-ml.so.1", str(nvml)],
                              capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise BackendError(f"node {node}: cannot copy the fake NVML out of its container: {done.stderr.strip()}")
        system = self._system(record)
        try:
            # The stand-in libcuda is compiled by this machine's compiler: for a node of another architecture
            # the driver root holds the NVML alone.
            build_driver_root(dest, {"LD_LIBRARY_PATH": str(nvml)}, system.driver.version, system.driver.cuda_version,
                              machine, libcuda=machine == os.uname().machine)
        except DriverRootError as exc:
            raise BackendError(f"node {node}: cannot lay out its driver root: {exc}") from None
        return dest

    def _system(self, record: ClusterRecord) -> System:
        from fakehw.model import load_profile

        return load_profile(record.profile, nodes=record.node_count)

    def _create_node(self, client: Any, record: ClusterRecord, plan: NodePlan, image: str,
                     labels: dict[str, str]) -> Any:
        from docker.types import EndpointConfig, Mount

        agent_dir = self._agent_dir(record, plan.node)
        fake_sys = agent_dir / "nodes" / plan.node / "root" / "sys"
        for sub in SYS_MOUNTS:
            (fake_sys / sub).mkdir(parents=True, exist_ok=True)
        mounts = [Mount(CONTAINER_STATE, str(agent_dir), type="bind")]
        mounts += [Mount(f"/sys/{sub}", str(fake_sys / sub), type="bind", read_only=True) for sub in SYS_MOUNTS]
        if record.extra.get("view") is None:
            mounts.append(Mount(CONTAINER_LIVE_SYS, str(self.live_mounts(record).mountpoint(plan.node)), type="bind"))
        profile = record.profile
        if Path(profile).is_absolute():
            mounts.append(Mount(CONTAINER_PROFILE_DIR, str(Path(profile).parent), type="bind", read_only=True))
            profile = f"{CONTAINER_PROFILE_DIR}/{Path(profile).name}"
        env = {
            "FAKEHW_NODE": plan.node,
            "FAKEHW_PROFILE": profile,
            "FAKEHW_DEVICE_MINORS": ",".join(map(str, plan.minors)),
            "FAKEHW_AGENT_UID": str(os.getuid()),
            "FAKEHW_AGENT_GID": str(os.getgid()),
            "FAKEHW_NODE_DIR": CONTAINER_NODE_DIR,
            "FAKEHW_AGENT_SOCKET": f"{CONTAINER_STATE}/agent.sock",
        }
        if record.node_count is not None:
            env["FAKEHW_NODE_COUNT"] = str(record.node_count)
        network = record.extra["network"]
        endpoint = EndpointConfig(version=client.api._version, aliases=[plan.node])
        return client.containers.create(
            image, name=plan.container, hostname=plan.node, platform=f"linux/{plan.arch}",
            environment=env, mounts=mounts, labels={**labels, LABEL_NODE: plan.node}, network=network,
            networking_config={network: endpoint}, detach=True, stop_signal="SIGTERM")

    def _wait_ready(self, client: Any, record: ClusterRecord, nodes: list[str], timeout: float | None) -> None:
        """Wait until every node's agent answers its health check; a container that exits fails at once.

        Without a ``timeout`` option there is no fixed limit (an emulated riscv64 node on a busy 2-core machine
        took 59 s in a quiet CI run and over 110 s at load 19): a node is given up on when, for
        :data:`STALL_S`, its agent neither answered, reported progress, nor its container used any CPU."""
        deadline = time.monotonic() + timeout if timeout else None
        watches = {node: StartWatch(self._agent_dir(record, node), self.stall_s) for node in nodes}
        while watches:
            for node, watch in list(watches.items()):
                try:
                    AgentClient(self._socket_path(record, node), timeout=5.0).health()
                    del watches[node]
                    continue
                except AgentRequestError:
                    pass
                container = client.containers.get(record.extra["nodes"][node]["container"])
                if container.status in ("exited", "dead"):
                    code = container.attrs.get("State", {}).get("ExitCode")
                    raise BackendError(f"node {node}: its container exited with status {code} while its agent "
                                       f"was starting; its log ends:\n{_log_tail(container)}")
                watch.poll(cgroup_cpu_seconds(container.attrs.get("State", {}).get("Pid") or 0))
                if deadline is None and watch.stalled():
                    raise BackendError(f"the agent of {node} stopped making progress while starting "
                                       f"({watch.describe()}; logs: docker logs {container.name})")
            if not watches:
                break
            if deadline is not None and time.monotonic() > deadline:
                waiting = list(watches)
                raise BackendError(f"the agents of {', '.join(waiting)} did not answer within {timeout:.0f} s "
                                   f"(logs: docker logs {record.extra['nodes'][waiting[0]]['container']})")
            time.sleep(0.1)

    # ------------------------------------------------------------------------------------------ queries

    def nodes(self, record: ClusterRecord) -> list[NodeInfo]:
        out = []
        for name in record.nodes:
            meta = record.extra["nodes"][name]
            env = {"FAKEHW_NODE": name, "FAKEHW_NODE_DIR": CONTAINER_NODE_DIR,
                   "FAKEHW_AGENT_SOCKET": f"{CONTAINER_STATE}/agent.sock", "FAKEHW_ROOT": f"{CONTAINER_NODE_DIR}/root"}
            out.append(NodeInfo(name, meta["arch"], len(meta["gpus"]),
                                self._agent_dir(record, name) / "nodes" / name, env))
        return out

    def container_name(self, record: ClusterRecord, node: str) -> str:
        self._check_node(record, node)
        return str(record.extra["nodes"][node]["container"])

    def _check_node(self, record: ClusterRecord, node: str) -> None:
        if node not in record.nodes:
            raise BackendInputError(f"cluster {record.name} has no node {node!r} (nodes: {', '.join(record.nodes)})")

    def _container(self, client: Any, record: ClusterRecord, node: str) -> Any:
        name = self.container_name(record, node)
        try:
            return client.containers.get(name)
        except Exception as exc:
            if _not_found(exc):
                raise BackendError(f"node {node}: its container {name} is gone; run 'testbed down --name "
                                   f"{record.name}' and up again") from None
            raise

    def agent(self, record: ClusterRecord, node: str) -> AgentClient:
        self._check_node(record, node)
        return AgentClient(self._socket_path(record, node))

    def alive(self, record: ClusterRecord) -> bool:
        """True when every node's container is running (or paused: it is still there and resumes)."""
        try:
            client = _client()
        except BackendError:
            return False
        states = {}
        for c in client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={record.extra.get('run')}"}):
            states[c.labels.get(LABEL_NODE)] = c.status
        return bool(record.nodes) and all(states.get(n) in ("running", "paused") for n in record.nodes)

    # ------------------------------------------------------------------------------------------ exec

    def exec(
        self,
        record: ClusterRecord,
        node: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        capture: bool = True,
        input: bytes | None = None,
        host_paths: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` in the node's container (``docker exec``) and return what it printed and its status (the
        container always shows the node's tree at the real paths, so ``host_paths`` changes nothing)."""
        self._check_node(record, node)
        if not argv:
            raise BackendInputError("nothing to run: give a command after --")
        client = _client()
        container = self._container(client, record, node)
        if container.status != "running":
            raise BackendError(f"node {node} is {container.status}, not running; "
                               f"'testbed chaos restart {node}' or 'unpause' brings it back")
        if record.extra.get("view") is None:
            self._sync_view(record, node, int(container.attrs["State"].get("Pid") or 0))
        command = list(argv)
        if timeout is not None:
            # The process inside is stopped too, not only our wait for it.
            command = ["timeout", "--kill-after=5", f"{timeout:.3f}", *command]
        api = client.api
        exec_id = api.exec_create(container.id, command, stdin=input is not None, stdout=True, stderr=True,
                                  environment=dict(env or {}), tty=False)["Id"]
        started = time.monotonic()
        sock = api.exec_start(exec_id, socket=True)
        raw: socket.socket = getattr(sock, "_sock", sock)
        try:
            if input is not None:
                raw.sendall(input)
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_WR)
            out, err = _read_frames(raw, None if timeout is None else started + timeout + 10.0, capture)
        except TimeoutError:
            raise subprocess.TimeoutExpired(list(argv), timeout or 0.0) from None
        finally:
            with contextlib.suppress(OSError):
                raw.close()
        code = None
        for _ in range(100):
            code = api.exec_inspect(exec_id).get("ExitCode")
            if code is not None:
                break
            time.sleep(0.02)
        returncode = -1 if code is None else int(code)
        if timeout is not None and returncode in (124, 137) and time.monotonic() - started >= timeout * 0.98:
            raise subprocess.TimeoutExpired(list(argv), timeout, out, err)
        text = (out + err).decode(errors="replace")
        if returncode in (126, 127) and OCI_FAILURE.decode() in text:
            if "not found" in text or "no such file" in text:
                raise BackendInputError(f"command not found on node {node}: {argv[0]}{_not_found_hint(argv[0])}")
            raise BackendError(f"cannot run {argv[0]} on node {node}: {text.strip()}")
        if returncode == 127 and timeout is not None and b"timeout: failed to run command" in err:
            raise BackendInputError(f"command not found on node {node}: {argv[0]}{_not_found_hint(argv[0])}")
        return subprocess.CompletedProcess(list(argv), returncode, out, err)

    # ------------------------------------------------------------------------------------------ chaos

    def kill_node(self, record: ClusterRecord, node: str) -> str:
        """SIGKILL the node's container: its agent dies mid-flight, as on a power loss."""
        container = self._container(_client(), record, node)
        if container.status == "paused":
            container.unpause()
        container.reload()
        if container.status == "running":
            container.kill()
        return f"node {node} killed"

    def restart_node(self, record: ClusterRecord, node: str, timeout: float | None = None) -> str:
        """Start the node's container again (killing it first if it runs); its agent replays its journal."""
        client = _client()
        container = self._container(client, record, node)
        if container.status == "paused":
            container.unpause()
        container.reload()
        if container.status in ("running", "restarting"):
            container.kill()
            container.wait(timeout=60)
        container.start()
        self._wait_ready(client, record, [node], timeout)
        self._present_view(client, record, node)  # a new container process: a new mount namespace
        faults = self.agent(record, node).faults(node)
        return f"node {node} restarted; {len(faults)} fault(s) restored from its journal"

    def pause_node(self, record: ClusterRecord, node: str) -> str:
        """Freeze every process of the node (cgroup freezer): it neither answers nor dies."""
        container = self._container(_client(), record, node)
        if container.status != "paused":
            container.pause()
        return f"node {node} paused"

    def unpause_node(self, record: ClusterRecord, node: str) -> str:
        container = self._container(_client(), record, node)
        if container.status == "paused":
            container.unpause()
        return f"node {node} unpaused"

    def partition_node(self, record: ClusterRecord, node: str) -> str:
        """Cut the node off the cluster network; its agent stays reachable (the control path is a unix socket)."""
        client = _client()
        container = self._container(client, record, node)
        network = client.networks.get(record.extra["network"])
        container.reload()
        if network.name not in container.attrs["NetworkSettings"]["Networks"]:
            return f"node {node} is already partitioned"
        network.disconnect(container)
        return f"node {node} partitioned from the other nodes"

    def unpartition_node(self, record: ClusterRecord, node: str) -> str:
        client = _client()
        container = self._container(client, record, node)
        network = client.networks.get(record.extra["network"])
        container.reload()
        if network.name in container.attrs["NetworkSettings"]["Networks"]:
            return f"node {node} is not partitioned"
        # The network's subnet is docker's choice, so the address may change; the others find the node by name.
        network.connect(container, aliases=[node])
        return f"node {node} rejoined the cluster network"

    def netns_path(self, record: ClusterRecord, node: str) -> str | None:
        """The node container's network namespace: a fabric attaches the node's NICs there, so they show inside."""
        container = self._container(_client(), record, node)
        container.reload()
        pid = int(container.attrs["State"].get("Pid") or 0)
        if pid <= 0:
            raise BackendError(f"node {node}: its container is not running, so it has no network namespace")
        return f"/proc/{pid}/ns/net"

    def node_address(self, record: ClusterRecord, node: str) -> str | None:
        """The node's IPv4 address on the cluster network (None while partitioned)."""
        container = self._container(_client(), record, node)
        container.reload()
        settings = container.attrs["NetworkSettings"]["Networks"].get(record.extra["network"])
        return (settings or {}).get("IPAddress") or None

    # ------------------------------------------------------------------------------------------ down

    def down(self, record: ClusterRecord) -> None:
        run = record.extra.get("run")
        if run:
            with contextlib.suppress(BackendError):
                _remove_labelled(_client(), f"{LABEL_RUN}={run}")
        self.live_mounts(record).stop_all()  # before the tree goes: nothing may stay mounted in it
        remove_tree_in_background(record.dir)


def _container_name(cluster: str, node: str, run: str) -> str:
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", node)
    return f"fakehw-{cluster}-{safe}-{run[:6]}"


def _not_found_hint(program: str) -> str:
    if program != "nvidia-smi":
        return ""
    return (" (node images hold no NVIDIA binary; inside a node, pynvml sees the fake GPUs: python -c 'import "
            "pynvml; ...'; the real nvidia-smi runs on local-backend clusters after tools/fetch-real-nvidia.sh)")


def _check_image(tag: str, arch: str) -> None:
    """A given image must be in the local store and hold ``arch`` (nothing can be pulled here)."""
    from testbed.images import image_platforms

    have = image_platforms(tag)
    if have is None:
        raise BackendInputError(f"image {tag} is not in the local image store (build it with 'testbed images "
                                f"build --platform linux/{arch}')")
    if arch not in have:
        raise BackendInputError(f"image {tag} has no linux/{arch} variant (it has {', '.join(sorted(have))}); "
                                f"build it with 'testbed images build --platform linux/{arch}'")


def _log_tail(container: Any, lines: int = 25) -> str:
    try:
        text: str = container.logs(tail=lines).decode(errors="replace")
    except Exception as exc:  # the log is a courtesy in an error message: never hide the real error
        return f"(no log: {exc})"
    return text.rstrip() or "(empty)"


def _read_frames(sock: socket.socket, deadline: float | None, capture: bool) -> tuple[bytes, bytes]:
    """Demultiplex docker's attach stream (8-byte headers: stream, 0, 0, 0, big-endian length) until EOF."""
    out: list[bytes] = []
    err: list[bytes] = []
    buffer = b""
    while True:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([sock], [], [], min(remaining, 1.0))
            if not ready:
                continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        buffer += chunk
        while len(buffer) >= 8:
            stream, length = buffer[0], struct.unpack(">I", buffer[4:8])[0]
            if len(buffer) < 8 + length:
                break
            data, buffer = buffer[8:8 + length], buffer[8 + length:]
            target = err if stream == 2 else out
            first = not out and not err
            if capture or (first and data.startswith(OCI_FAILURE)):
                target.append(data)  # the runtime's own failure is turned into an error, not shown as output
            else:
                pipe = sys.stderr if stream == 2 else sys.stdout
                pipe.buffer.write(data)
                pipe.flush()
    return b"".join(out), b"".join(err)


def _remove_labelled(client: Any, label: str) -> list[str]:
    """Remove containers, networks and volumes carrying ``label`` (``key=value``); return what was removed."""
    removed: list[str] = []
    for container in client.containers.list(all=True, filters={"label": label}):
        with contextlib.suppress(Exception):
            container.remove(force=True, v=True)
            removed.append(f"container {container.name}")
    for network in client.networks.list(filters={"label": label}):
        with contextlib.suppress(Exception):
            network.remove()
            removed.append(f"network {network.name}")
    for volume in client.volumes.list(filters={"label": label}):
        with contextlib.suppress(Exception):
            volume.remove(force=True)
            removed.append(f"volume {volume.name}")
    return removed


def leftovers(state_dir: Path | None = None) -> Iterator[tuple[str, str, str]]:
    """(kind, name, run) of every labelled container and network whose cluster record is gone or is in
    ``state_dir``: what ``testbed down --all`` removes."""
    client = _client()
    state = str(state_dir.resolve()) if state_dir is not None else None
    for kind, items in (("container", client.containers.list(all=True, filters={"label": LABEL_TESTBED})),
                        ("network", client.networks.list(filters={"label": LABEL_TESTBED}))):
        for item in items:
            labels = item.attrs.get("Labels") or item.attrs.get("Config", {}).get("Labels") or {}
            owner = labels.get(LABEL_STATE_DIR, "")
            cluster = labels.get(LABEL_CLUSTER, "")
            record = Path(owner) / cluster / "cluster.json"
            orphan = not record.is_file() or labels.get(LABEL_RUN) not in record.read_text()
            if orphan or owner == state:
                yield kind, item.name, labels.get(LABEL_RUN, "")


def remove_orphans(state_dir: Path | None = None) -> list[str]:
    """Remove what crashed runs left behind (and every docker-backend cluster of ``state_dir``)."""
    client = _client()
    runs = sorted({run for _, _, run in leftovers(state_dir) if run})
    removed: list[str] = []
    for run in runs:
        removed += _remove_labelled(client, f"{LABEL_RUN}={run}")
    return removed + _remove_orphan_live_sys(state_dir)


def _remove_orphan_live_sys(state_dir: Path | None) -> list[str]:
    """Unmount the live ``/sys`` of nodes whose cluster record is gone (an ``up`` killed before it could take them
    down: ``<cluster>/live/<node>/sys``); their servers end with the mount, now that no container holds it."""
    from fakehw.livefs.mount import live_mounts, unmount

    removed = []
    for point in live_mounts(state_dir):
        cluster = point.parent.parent.parent
        if point.parent.parent.name == "live" and not (cluster / "cluster.json").is_file():
            unmount(point)
            removed.append(f"live /sys mount {point}")
    return removed
