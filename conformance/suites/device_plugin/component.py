"""The version of a ``cmd:`` component, for the report's manifest: what the binary says, and its digest.

A certification names what was certified. For a command the suite records what ``<executable> --version``
prints (bounded: 5 s, 400 characters, only when it exits 0) and the sha256 of the executable file, so two
binaries that print the same version are still told apart. A Python module run as ``python -m pkg.mod`` is
named by the version of the distribution that provides ``pkg`` (asking the interpreter would give Python's).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

from conformance.provenance.component import file_digest
from testbed import component_user

VERSION_TIMEOUT_S = 5.0
MAX_VERSION_CHARS = 400


def _module_version(module: str) -> str | None:
    top = module.split(".")[0]
    dists = metadata.packages_distributions().get(top, [])
    for dist in dists:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return f"{module} ({dist} {metadata.version(dist)})"
    return None


def _says(executable: Path) -> str | None:
    """What ``executable --version`` prints, or None (fails, hangs, says too much). It is the vendor's code: under
    ``--component-user`` it runs as that user, like the component itself."""
    with tempfile.TemporaryDirectory(prefix="fhw-version-") as cwd:
        argv, env = component_user.wrap([str(executable), "--version"],
                                        {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": cwd})
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=VERSION_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL, check=False, env=env)
        except (OSError, subprocess.TimeoutExpired):
            return None
    text = " ".join((proc.stdout or proc.stderr).split())
    if proc.returncode != 0 or not text or len(text) > MAX_VERSION_CHARS:
        return None
    return text


def component_version(command: str) -> str | None:
    """'<what --version says> (sha256:<digest of the executable>)', or what can be told; None for nothing."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if not argv:
        return None
    found = shutil.which(argv[0])
    if found is None:
        return None
    executable = Path(found).resolve()
    if executable.name.startswith("python") and len(argv) >= 3 and argv[1] == "-m":
        return _module_version(argv[2])
    digest = f"sha256:{file_digest(executable)}"
    said = _says(executable)
    return f"{said} ({digest})" if said else digest
