"""Running the component under test as another user, so it cannot touch what the harness writes.

A certification is only worth something if the component cannot edit its own results. ``conformance run
--component-user USER`` (the certify workflow runs the harness as root and the vendor's component as an
unprivileged user that has no sudo) puts ``$FAKEHW_COMPONENT_USER`` in the suite's environment; the launchers start
the component through :func:`wrap` (``setpriv`` to the user's uid, gid and groups, with a scrubbed environment)
and the kubelet harness hands the plugin directory and its ``kubelet.sock`` to that user (:func:`hand_over`), the
only place a device plugin has to write; private state directories that hold the node's view are made readable
(:func:`share_read`). Everything else the harness writes (results, reports, journals, the
agent's socket) stays root's: 0644 files, 0755 directories, the agent socket 0600.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

COMPONENT_USER_ENV = "FAKEHW_COMPONENT_USER"
SECRET_ENV = ("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_RUNTIME_TOKEN",
              "ACTIONS_RUNTIME_URL", "ACTIONS_CACHE_URL", "GITHUB_TOKEN", "FAKEHW_SIGN_KEY_PASSWORD")
"""What the component must never see: the job's OIDC and runtime tokens (it could sign or upload as the workflow),
the repository token, the signing key's password."""


class ComponentUserError(ValueError):
    """A component user that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class ComponentUser:
    name: str
    uid: int
    gid: int
    home: str


def lookup(name: str) -> ComponentUser:
    """The user ``name``, checked to be usable: it exists, is not root, and we are root (to switch to it)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ComponentUserError(f"component user {name!r} does not exist (create it: useradd --system {name})") \
            from None
    if entry.pw_uid == 0:
        raise ComponentUserError(f"component user {name!r} is root: the component could write the harness's output")
    if os.geteuid() != 0:
        raise ComponentUserError(f"running the component as {name!r} needs the harness to run as root (sudo)")
    if shutil.which("setpriv") is None:
        raise ComponentUserError("running the component as another user needs setpriv (util-linux)")
    return ComponentUser(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def current(env: Mapping[str, str] | None = None) -> ComponentUser | None:
    name = (env if env is not None else os.environ).get(COMPONENT_USER_ENV, "")
    return lookup(name) if name else None


def wrap(argv: list[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """``argv`` and ``env`` to start the component with: as the component user when one is set, always without the
    secrets in :data:`SECRET_ENV`."""
    clean = {k: v for k, v in env.items() if k not in SECRET_ENV}
    user = current(env) or current()
    if user is None:
        return list(argv), clean
    clean.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    clean.pop(COMPONENT_USER_ENV, None)
    prefix = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--inh-caps=-all", "--"]
    return prefix + list(argv), clean


def share_read(path: Path) -> None:
    """Let the component user read ``path`` (a private temporary directory holding the node's view)."""
    if current() is not None:
        os.chmod(path, os.stat(path).st_mode | 0o055)


def share_traverse(path: Path, top: Path) -> None:
    """Let the component user reach ``path`` (a file it must read, such as a node's NVML snapshot) from ``top``: the
    directories between them become traversable (``x`` for group and others), not listable; ``top`` itself is
    shared with :func:`share_read`. The node agent keeps its state directories 0700; only the path to what the
    component reads is opened, and nothing becomes writable."""
    if current() is None:
        return
    path, top = Path(os.path.abspath(path)), Path(os.path.abspath(top))
    if not path.is_relative_to(top):
        raise ValueError(f"{path} is not under {top}")
    for parent in path.parents:
        if parent == top or not parent.is_relative_to(top):
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o011)


def hand_over(path: Path) -> None:
    """Give ``path`` to the component user (the directory it creates its sockets in, the socket it dials)."""
    user = current()
    if user is not None:
        os.chown(path, user.uid, user.gid)
