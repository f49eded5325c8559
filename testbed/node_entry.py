"""Entrypoint of the node image: make the container look like its fake node, then run the node's agent.

The docker backend starts one container per fake node with these variables (see docs/docker.md):

- ``FAKEHW_NODE``: the node this container is; ``FAKEHW_PROFILE``: built-in profile name or a path inside the
  container; ``FAKEHW_NODE_COUNT``: the ``--nodes`` override, if any;
- ``FAKEHW_DEVICE_MINORS``: the GPUs this container was given, as NVIDIA device minors (``0,3``; empty: none);
- ``FAKEHW_AGENT_UID`` / ``FAKEHW_AGENT_GID``: who the agent runs as, so the files and the control socket it
  writes into the bind-mounted state directory belong to the user who ran ``testbed up``.

Before the agent starts, the entrypoint does what the NVIDIA container runtime does for a real GPU container:
``/dev/nvidiactl`` plus one ``/dev/nvidia<minor>`` per given GPU (character devices, major 195). The fake NVML
shows a GPU only when its device node exists, so a container given 2 of 8 GPUs sees exactly those 2. It also
makes ``/var/lib/fakehw`` a link to the node's rendered directory, so the NVML snapshot is at the shim's default
path (``/var/lib/fakehw/nvml.snapshot``) and the fake root at ``/var/lib/fakehw/root``; a directory link, not a
file link, because the shim watches the snapshot's directory with inotify for the agent's renames. The agent then
runs in this process (one Python start-up, which matters under QEMU) as PID 1, so ``docker stop`` reaches it.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
STATE_DIR = Path("/var/lib/fakehw-agent")
"""The agent's state directory: bind-mounted from the host (journal, control socket, rendered node)."""
NODE_LINK = Path("/var/lib/fakehw")
"""Link to the node's rendered directory: the fake NVML's default snapshot path (fakehw.nvml.DEFAULT_SNAPSHOT)
is ``/var/lib/fakehw/nvml.snapshot``."""


class EntryError(Exception):
    """The container was started without what it needs; the message names the variable."""


@dataclass(frozen=True)
class NodeConfig:
    node: str
    profile: str
    node_count: int | None
    minors: tuple[int, ...]
    uid: int | None
    gid: int | None

    @classmethod
    def from_env(cls, env: dict[str, str]) -> NodeConfig:
        node = env.get("FAKEHW_NODE", "")
        profile = env.get("FAKEHW_PROFILE", "")
        if not node or not profile:
            raise EntryError("FAKEHW_NODE and FAKEHW_PROFILE must name the node and its profile "
                             "(the docker backend sets them: testbed up --backend docker)")
        try:
            count = int(env["FAKEHW_NODE_COUNT"]) if env.get("FAKEHW_NODE_COUNT") else None
            minors = tuple(int(m) for m in env.get("FAKEHW_DEVICE_MINORS", "").split(",") if m.strip())
            uid = int(env["FAKEHW_AGENT_UID"]) if env.get("FAKEHW_AGENT_UID") else None
            gid = int(env["FAKEHW_AGENT_GID"]) if env.get("FAKEHW_AGENT_GID") else None
        except ValueError as exc:
            raise EntryError(f"bad number in FAKEHW_NODE_COUNT, FAKEHW_DEVICE_MINORS or FAKEHW_AGENT_UID/GID: "
                             f"{exc}") from None
        if any(not 0 <= m < NVIDIACTL_MINOR for m in minors):
            raise EntryError(f"FAKEHW_DEVICE_MINORS must be 0..254, got {env.get('FAKEHW_DEVICE_MINORS')}")
        return cls(node, profile, count, minors, uid, gid)


def make_device_nodes(minors: tuple[int, ...], dev: Path = Path("/dev")) -> list[str]:
    """``nvidiactl`` and ``nvidia<minor>`` for the given GPUs; any other ``nvidia<N>`` is removed."""
    wanted = {f"nvidia{m}": m for m in minors}
    wanted["nvidiactl"] = NVIDIACTL_MINOR
    for path in dev.glob("nvidia*"):
        if path.name[6:].isdigit() and path.name not in wanted:
            path.unlink()
    made = []
    for name, minor in sorted(wanted.items()):
        path = dev / name
        if path.exists():
            path.unlink()
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
        os.chmod(path, 0o666)  # mknod applies the umask
        made.append(name)
    return made


def link_node_dir(link: Path, target: Path) -> None:
    """Point ``link`` at ``target``; an empty directory in its place is replaced, anything else is an error."""
    if link.is_symlink():
        link.unlink()
    elif link.is_dir():
        try:
            link.rmdir()
        except OSError:
            raise EntryError(f"{link} is a directory with content; the node image keeps it free for the node's "
                             "rendered files") from None
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def drop_privileges(uid: int | None, gid: int | None) -> None:
    if gid is not None and gid != os.getgid():
        os.setgroups([])
        os.setgid(gid)
    if uid is not None and uid != os.getuid():
        os.setuid(uid)


def prepare(config: NodeConfig) -> None:
    try:
        make_device_nodes(config.minors)
    except OSError as exc:
        raise EntryError(f"cannot create /dev/nvidia* ({exc}); the container needs CAP_MKNOD (docker's default)") \
            from None
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    link_node_dir(NODE_LINK, STATE_DIR / "nodes" / config.node)
    if config.uid is not None:
        os.chown(STATE_DIR, config.uid, config.gid if config.gid is not None else -1)


def main() -> int:
    try:
        config = NodeConfig.from_env(dict(os.environ))
        prepare(config)
    except EntryError as exc:
        print(f"fakehw node: error: {exc}", file=sys.stderr, flush=True)
        return 2
    drop_privileges(config.uid, config.gid)
    argv = ["agent", "--profile", config.profile, "--state-dir", str(STATE_DIR), "--node", config.node]
    if config.node_count is not None:
        argv += ["--nodes", str(config.node_count)]
    print(f"fakehw node {config.node}: /dev/nvidia* for minors {list(config.minors)}; starting the agent",
          file=sys.stderr, flush=True)
    from fakehw.cli import main as fakehw_main

    return fakehw_main(argv)


if __name__ == "__main__":
    sys.exit(main())
