"""The suite on the Docker backend: the plugin runs inside the node's container, the harness stays on the host.

The node container bind-mounts its agent directory from the host; the plugin directory lives inside it
(``<agent dir>/dp`` on the host, ``<container state dir>/dp`` in the container), so the harness's ``kubelet.sock``
and the plugin's sockets meet there, across the container boundary, as the kubelet's and a DaemonSet pod's do.
What NVML shows inside an allocation's container is probed in the node container with only the allocation's
device nodes (the fake NVML enumerates a GPU only when its ``/dev/nvidia<minor>`` exists).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from conformance.suites.device_plugin.support import SuiteOptions
from testbed.api import Testbed
from testbed.backends import BackendError, NodeInfo
from testbed.kubelet.launcher import ContainerCommandLauncher, ImageLauncher
from testbed.kubelet.nvmlprobe import NvmlProbe

REFERENCE_IN_CONTAINER = "python -m testbed.reference.device_plugin"
"""The reference plugin as the node image runs it (its venv's python is first on PATH)."""


def _container(testbed: Testbed, node: str) -> str:
    name = getattr(testbed.backend, "container_name", None)
    if name is None:
        raise BackendError(f"the {testbed.backend.name} backend has no node containers")
    return str(name(testbed.record, node))


def docker_launcher(testbed: Testbed, node: NodeInfo, options: SuiteOptions, workdir: Path) -> ContainerCommandLauncher:
    from testbed.backends.docker import CONTAINER_STATE

    agent_dir = node.dir.parent.parent  # <agent dir>/nodes/<node>
    host_dir = agent_dir / "dp"
    host_dir.mkdir(parents=True, exist_ok=True)
    container = _container(testbed, node.name)
    inside = f"{CONTAINER_STATE}/dp"
    probe = testbed.exec(node.name, ["sh", "-c", f"test -d {shlex.quote(inside)} && echo yes"], timeout=60)
    if b"yes" not in probe.stdout:
        raise BackendError(f"{inside} is not visible in {container}: the agent directory is not bind-mounted where "
                           "the suite expects it")
    command = REFERENCE_IN_CONTAINER if options.is_reference else options.command
    return ContainerCommandLauncher(container, command, node.name, host_dir, inside, workdir / "logs")


def docker_probe(testbed: Testbed, node: NodeInfo) -> NvmlProbe:
    container = _container(testbed, node.name)
    return NvmlProbe(["docker", "exec", "-i", container, "python", "-m", "testbed.kubelet.nvmlprobe"], timeout=120)


def image_launcher(testbed: Testbed, node: NodeInfo, image: str, workdir: Path) -> ImageLauncher:
    """The plugin's own container from ``image``, beside the node's: the kubelet's plugin directory is the host
    directory the harness's kubelet.sock is in (``<agent dir>/dp``), the node as the backend presents it to
    components (``DockerBackend.component_view``)."""
    view_of = getattr(testbed.backend, "component_view", None)
    if view_of is None:
        raise BackendError(f"the {testbed.backend.name} backend runs no component images")
    view = view_of(testbed.record, node.name)
    host_dir = node.dir.parent.parent / "dp"
    host_dir.mkdir(parents=True, exist_ok=True)
    note = (f"the plugin's own container (image {image}): the node's /sys, devices, driver root and "
            f"/var/lib/kubelet/device-plugins; not presented: {view.not_presented}")
    return ImageLauncher(image, node.name, f"{_container(testbed, node.name)}-dp", view.binds, view.env, view.labels,
                         host_dir, workdir / "logs", note)
