"""The component under test, named by digest: what exactly was certified, recomputable by a stranger.

A target is given as text (``cmd:/home/me/.venv/bin/python -m my_plugin --socket-dir {plugin_dir}``); that text
names nothing a stranger can check and leaks local paths. Before the suite runs, the harness resolves it to what
will execute and hashes that:

- an executable or script: its file (a pip console script is followed to the package it imports);
- ``python -m MODULE`` / ``python FILE``: the module's package directory (or file), found with that interpreter;
- ``reference[:MUTANT]``: the reference implementation's package in this harness;
- ``image:REF``: the image digest (``@sha256:`` in the reference, else the local image's id);
- a fabric config: the YAML file; ``slurm=system|prefix:DIR``: the slurmctld and slurmd binaries; ``ray=python``:
  the ray package of that interpreter;
- ``url:URL``: nothing (a running service cannot be pinned), said so in ``hashed``.

A directory's digest is the sha256 of its ``sha256sum`` listing (``<hex>  <relative path>`` per file, sorted by
path, ``__pycache__`` and ``*.pyc`` left out), so it can be recomputed with coreutils:
``(cd DIR && find . -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -printf '%P\\n' | LC_ALL=C sort |
xargs -d '\\n' sha256sum) | sha256sum``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")
ENV_ASSIGNMENT_RE = re.compile(r"^[A-Za-z_]\w*=")
CONSOLE_SCRIPT_RE = re.compile(r"^from ([A-Za-z_][\w.]*) import ", re.M)
REFERENCE_PACKAGES = {"device-plugin": "testbed.reference.device_plugin", "extender": "testbed.reference.extender"}
MAX_SCRIPT_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class ComponentRef:
    """A component as the report and the attestation name it."""

    kind: str
    spec: str
    """The target as given, with absolute directories cut off (``/home/me/.venv/bin/python`` -> ``python``)."""
    name: str
    digest: str | None
    """``sha256:<hex>`` of what was hashed; None when nothing can be pinned (``url:``)."""
    hashed: str
    """What the digest covers, in words a stranger can act on."""


@dataclass(frozen=True, slots=True)
class Hashed:
    digest: str
    what: str


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_listing(root: Path) -> list[tuple[str, str]]:
    """``(relative path, sha256)`` of every file under ``root`` except bytecode, sorted by path."""
    out = []
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not path.is_symlink() and "__pycache__" not in rel.split("/") and \
                not rel.endswith(".pyc"):
            out.append((rel, file_digest(path)))
    return sorted(out, key=lambda item: item[0].encode())


def tree_digest(root: Path) -> Hashed:
    listing = tree_listing(root)
    text = "".join(f"{digest}  {rel}\n" for rel, digest in listing)
    return Hashed("sha256:" + hashlib.sha256(text.encode()).hexdigest(), f"{len(listing)} files")


def redact(spec: str) -> str:
    """The spec without the directories of absolute paths (they say where it was installed, not what it is)."""
    try:
        words = shlex.split(spec)
    except ValueError:
        return spec
    head = ""
    if words and ":" in words[0] and not words[0].startswith("/"):
        scheme, _, rest = words[0].partition(":")
        if scheme in ("cmd", "prefix", "python") and rest.startswith("/"):
            head, words[0] = scheme + ":", rest
    return head + " ".join(_quote(Path(w).name if w.startswith(("/", "~/")) and len(w) > 2 else w) for w in words)


def _quote(word: str) -> str:
    """shlex quoting that leaves the harness's ``{placeholder}`` words as they were written."""
    return word if re.fullmatch(r"[\w@%+=:,./{}-]+", word) else shlex.quote(word)


def _python_module(python: str, module: str) -> Path | None:
    """Where ``module`` lives for the interpreter ``python`` (its package directory or its file)."""
    probe = ("import importlib.util, json, sys\n"
             "s = importlib.util.find_spec(sys.argv[1])\n"
             "print(json.dumps(None if s is None else [s.origin, list(s.submodule_search_locations or [])]))")
    try:
        out = subprocess.run([python, "-c", probe, module], capture_output=True, text=True, timeout=60, check=False,
                             stdin=subprocess.DEVNULL)
        found = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    if not found:
        return None
    origin, locations = found
    if locations:
        return Path(locations[0])
    return Path(origin) if origin and origin not in ("built-in", "frozen") else None


def _hash_path(path: Path) -> Hashed:
    if path.is_dir():
        tree = tree_digest(path)
        return Hashed(tree.digest, f"directory {path.name} ({tree.what})")
    return Hashed("sha256:" + file_digest(path), f"file {path.name} ({path.stat().st_size} bytes)")


def _module(python: str, module: str, how: str) -> Hashed | str:
    """A module run by ``python``: its package directory; a module file inside a package: the top-level package
    (the rest of the code it runs lives there); a lone module: its file."""
    where = _python_module(python, module)
    if where is None:
        return f"{how}: {python} cannot import {module}"
    if where.is_file() and "." in module:
        top = _python_module(python, module.split(".")[0])
        if top is not None and top.is_dir():
            where = top
    hashed = _hash_path(where)
    return Hashed(hashed.digest, f"{how}: {hashed.what}")


def _console_script(path: Path) -> Hashed | None:
    """A pip-generated console script (``#!python`` + ``from pkg.mod import main``): the package it runs."""
    try:
        if path.stat().st_size > MAX_SCRIPT_BYTES:
            return None
        text = path.read_text(errors="strict")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.splitlines()
    if not lines or not lines[0].startswith("#!"):
        return None
    interpreter = lines[0][2:].strip().split()
    match = CONSOLE_SCRIPT_RE.search(text)
    if not interpreter or not PYTHON_RE.match(Path(interpreter[0]).name) or match is None or len(lines) > 20:
        return None
    result = _module(interpreter[0], match.group(1), f"console script {path.name}")
    return result if isinstance(result, Hashed) else None


def _home() -> str:
    """The home directory ``~`` means in the component's command: the component user's when one is set."""
    import pwd

    user = os.environ.get("FAKEHW_COMPONENT_USER")
    try:
        return pwd.getpwnam(user).pw_dir if user else os.path.expanduser("~")
    except KeyError:
        return os.path.expanduser("~")


def _command(words: list[str], which: Callable[[str], str | None]) -> Hashed | str:
    while words and ENV_ASSIGNMENT_RE.match(words[0]):
        words = words[1:]
    words = [_home() + w[1:] if w.startswith("~/") else w for w in words]
    if not words:
        return "empty command"
    program = words[0] if "/" in words[0] else which(words[0])
    if program is None or not Path(program).is_file():
        return f"{words[0]} is not an executable on PATH"
    if PYTHON_RE.match(Path(program).name):
        rest = words[1:]
        if len(rest) >= 2 and rest[0] == "-m":
            return _module(program, rest[1], f"python -m {rest[1]}")
        if rest and not rest[0].startswith("-") and Path(rest[0]).is_file():
            return _hash_path(Path(rest[0]))
        return f"python {' '.join(rest[:2])}: neither -m MODULE nor a script file"
    script = _console_script(Path(program))
    return script or Hashed("sha256:" + file_digest(Path(program)), f"executable {Path(program).name}")


def _image(ref: str) -> Hashed | str:
    if "@sha256:" in ref:
        return Hashed("sha256:" + ref.rsplit("@sha256:", 1)[1], f"image {ref} (manifest digest in the reference)")
    docker = shutil.which("docker")
    if docker is None:
        return f"image {ref}: no digest in the reference and no docker to look it up"
    out = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True,
                         timeout=60, check=False)
    image_id = out.stdout.strip()
    if out.returncode != 0 or not image_id.startswith("sha256:"):
        return f"image {ref}: not found locally"
    return Hashed(image_id, f"image {ref} (local image id)")


def _slurm(spec: str, which: Callable[[str], str | None]) -> Hashed | str:
    prefix = Path(spec.removeprefix("prefix:")) if spec.startswith("prefix:") else None
    found = {}
    for name in ("slurmctld", "slurmd"):
        path = (prefix / "sbin" / name) if prefix else (Path(p) if (p := which(name)) else None)
        if path is None or not path.is_file():
            return f"{name} not found"
        found[name] = file_digest(path)
    text = "".join(f"{d}  {n}\n" for n, d in sorted(found.items()))
    return Hashed("sha256:" + hashlib.sha256(text.encode()).hexdigest(), "slurmctld and slurmd (sha256sum listing)")


def _hash_target(kind: str, spec: str, which: Callable[[str], str | None]) -> Hashed | str:
    if kind in REFERENCE_PACKAGES and (spec in ("", "reference") or spec.startswith("reference:")):
        return _module(os.environ.get("FAKEHW_PYTHON", "") or _this_python(), REFERENCE_PACKAGES[kind],
                       f"fakehw reference {kind}")
    if spec.startswith("url:"):
        return f"a running service at {spec[4:]} (cannot be pinned by digest)"
    if spec.startswith("image:"):
        return _image(spec[6:])
    if kind == "slurm":
        return _slurm(spec, which)
    if kind == "ray":
        python = spec[len("python:"):] if spec.startswith("python:") else _this_python()
        return _module(python, "ray", "ray")
    if kind == "fabric":
        return _fabric(spec)
    try:
        words = shlex.split(spec.removeprefix("cmd:"))
    except ValueError as exc:
        return f"cannot parse the command: {exc}"
    return _command([w for w in words if "{" not in w], which)


def _fabric(spec: str) -> Hashed | str:
    from fakehw.fabric.loader import builtin_fabrics

    path = builtin_fabrics().get(spec) or Path(spec)
    if not Path(path).is_file():
        return f"fabric config {spec} not found"
    return Hashed("sha256:" + file_digest(Path(path)), f"fabric config {Path(path).name}")


def _this_python() -> str:
    import sys

    return sys.executable


def resolve(kind: str, spec: str, which: Callable[[str], str | None] = shutil.which) -> ComponentRef:
    """The component of ``--target KIND=SPEC`` by digest (never raises: an unresolvable one says why)."""
    result = _hash_target(kind, spec.strip(), which)
    shown = redact(spec.strip())
    name = shown
    if kind in REFERENCE_PACKAGES and (spec.strip() in ("", "reference") or spec.startswith("reference:")):
        mutant = spec.partition(":")[2]
        name = f"fakehw reference {kind}" + (f" (mutant {mutant})" if mutant else "")
    if isinstance(result, Hashed):
        return ComponentRef(kind, shown, name, result.digest, result.what)
    return ComponentRef(kind, shown, name, None, f"not pinned: {result}")
