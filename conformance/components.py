"""The components ``conformance run`` is given are input: checked before any suite starts.

A plugin command that does not exist, an extender URL where nothing listens or a fabric file that is not there
is the user's mistake, not a certification result: ``conformance run`` exits 2 with one line naming the target
and what is wrong (docs/certification.md), instead of running a suite whose every check fails ("status 127") or
errors with fixture tracebacks. What is checked is what can be known here before anything runs; whether the
component then behaves is what the suites judge.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
from pathlib import Path
from urllib.parse import urlsplit

from fakehw.cli_common import EXIT_BAD_INPUT, CliError

CONNECT_TIMEOUT_S = 3.0
SPEC_FORMS = {
    "device-plugin": "reference, cmd:COMMAND or, on the docker backend, image:IMAGE",
    "extender": "reference, reference:MUTANT, cmd:COMMAND or url:http://HOST:PORT[/prefix]",
    "slurm": "system or prefix:DIR",
    "ray": "python or python:PATH",
    "fabric": "a built-in fabric config name, a .yaml file, sonic:DIR or nvue:DIR",
}
IMAGE_UNSUPPORTED = ("image: components are not run by 'conformance run' (its local and docker backends start the "
                     "component as a command on each node): give cmd:COMMAND")
IMAGE_REFERENCE = re.compile(r"^[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
                             r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
"""A Docker image reference: [registry[:port]/]name[/name...][:tag][@sha256:digest], lower-case name parts."""


def _bad(target: str, spec: str, why: str) -> CliError:
    return CliError(f"--target {target}={spec}: {why}", EXIT_BAD_INPUT)


def check_command(target: str, spec: str, command: str, backend: str) -> None:
    """The program a command line starts exists and is executable (on this machine: on the docker backend it
    runs inside the node containers, where it is looked for when the suite starts)."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise _bad(target, spec, f"not a command line ({exc})") from None
    while words and "=" in words[0] and not words[0].startswith(("=", "/", ".")):
        words.pop(0)  # VAR=value assignments before the program
    if not words:
        raise _bad(target, spec, f"no command (give {SPEC_FORMS[target]})")
    if backend != "local":
        return
    program = words[0].replace("{plugin_dir}", "/").replace("{node}", "node")
    if "/" in program:
        path = Path(program)
        if not path.is_file():
            raise _bad(target, spec, f"no such program {program} (give {SPEC_FORMS[target]})")
        if not os.access(path, os.X_OK):
            raise _bad(target, spec, f"{program} is not executable")
    elif shutil.which(program) is None:
        raise _bad(target, spec, f"no command {program!r} on this machine's PATH (give {SPEC_FORMS[target]})")


def check_image(target: str, spec: str, backend: str) -> None:
    """An ``image:`` component runs as its own container beside a node container, so only on the docker backend,
    and from the local image store: nothing can be pulled, so an image that is not there is named before the suite
    starts (not found by the first check that fails)."""
    ref = spec.removeprefix("image:").strip()
    if backend != "docker":
        raise _bad(target, spec, f"image: components run on the docker backend (--backend docker); on the {backend} "
                                 "backend give cmd:COMMAND")
    if not ref:
        raise _bad(target, spec, "no image given (image:REPOSITORY[:TAG] or image:REPOSITORY@sha256:DIGEST)")
    if not IMAGE_REFERENCE.match(ref):
        raise _bad(target, spec, f"{ref!r} is not an image reference (image:REPOSITORY[:TAG], lower-case name)")
    from testbed.host import engine_problem
    from testbed.images import ImageError, image_platforms

    problem = engine_problem()
    if problem is not None:
        raise _bad(target, spec, f"cannot look the image up: {problem}")
    try:
        have = image_platforms(ref)
    except ImageError as exc:
        raise _bad(target, spec, str(exc)) from None
    if have is None:
        raise _bad(target, spec, f"image {ref} is not in the local image store (nothing is pulled: build or load it "
                                 "first, e.g. docker build -t ... or docker load)")


def check_device_plugin(spec: str, command: str | None, backend: str) -> None:
    if spec.startswith("image:"):
        check_image("device-plugin", spec, backend)
        return
    if command is not None:
        check_command("device-plugin", spec, command, backend)


def check_extender(spec: str, backend: str) -> None:
    from testbed.extender.process import ExtenderTarget, TargetError

    if spec.startswith("image:"):
        raise _bad("extender", spec, IMAGE_UNSUPPORTED)
    try:
        target = ExtenderTarget.parse(spec)
    except TargetError as exc:
        raise _bad("extender", spec, str(exc)) from None
    if target.kind == "cmd":
        check_command("extender", spec, shlex.join(target.command), "local")
    elif target.kind == "url":
        _check_listening("extender", spec, target.url)


def _check_listening(target: str, spec: str, url: str) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise _bad(target, spec, f"nothing answers at {host}:{port} ({reason.lower()}); start the extender "
                                 "first, or give cmd:COMMAND to let the suite run it") from None


def check_fabric(spec: str) -> None:
    """The config loads as the suite will load it (a name, a YAML file, or an import: sonic:DIR, nvue:DIR)."""
    from fakehw.fabric.model import load_fabric
    from fakehw.model.errors import ProfileError

    try:
        load_fabric(spec)
    except ProfileError as exc:  # FabricError is one: the first problem says which file and line
        first = exc.problems[0] if exc.problems else None
        raise _bad("fabric", spec, first.message if first is not None else str(exc)) from None


def check_slurm(spec: str) -> None:
    if spec == "system":
        return  # Slurm missing here is a finding the suite reports (not applicable), not bad input
    if spec.startswith("prefix:"):
        prefix = Path(spec.removeprefix("prefix:"))
        if not prefix.is_dir():
            raise _bad("slurm", spec, f"no such directory {prefix}")
        return
    raise _bad("slurm", spec, f"use {SPEC_FORMS['slurm']}")


def check_ray(spec: str) -> None:
    if spec == "python":
        return
    if spec.startswith("python:"):
        python = spec.removeprefix("python:")
        found = python if "/" in python else shutil.which(python)
        if found is None or not Path(found).is_file() or not os.access(found, os.X_OK):
            raise _bad("ray", spec, f"no executable {python}")
        return
    raise _bad("ray", spec, f"use {SPEC_FORMS['ray']}")


def check_component(target: str, spec: str | None, command: str | None, backend: str) -> None:
    """Raise :class:`CliError` (exit 2) when the component of ``target`` cannot be run as given.

    ``spec`` is what followed ``KIND=`` (or ``--spec``); ``command`` the device plugin's command line (None: the
    reference)."""
    text = (spec or "").strip()
    if target == "device-plugin":
        check_device_plugin(text or (f"cmd:{command}" if command else "reference"), command, backend)
    elif target == "extender":
        check_extender(text or "reference", backend)
    elif target == "fabric":
        check_fabric(text)
    elif target == "slurm":
        check_slurm(text or "system")
    elif target == "ray":
        check_ray(text or "python")
