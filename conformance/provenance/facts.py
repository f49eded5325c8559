"""What ran the certification: the harness (version, source, commit, content digest) and the runner.

The pytest plugin records these in the results file when the suite starts, next to the components by digest
(:mod:`conformance.provenance.component`) and the catalogue stamp; the report and the attestation carry them.

- The harness commit comes from ``$FAKEHW_SOURCE_COMMIT`` (set by the certify workflow, which checked that commit
  out) or from ``git`` when the harness runs from a checkout; a checkout with local changes says ``modified``.
  The harness digest is the directory digest of the ``fakehw``, ``testbed`` and ``conformance`` packages (build
  outputs left out), so a stranger can compare it with a release without trusting the commit.
- The runner is GitHub Actions (the run's URL, hosted or self-hosted, the workflow that certified) or ``local``
  (operating system, machine, Python; no host name).
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

from conformance.provenance.component import tree_listing


@dataclass(frozen=True, slots=True)
class HarnessFacts:
    version: str
    source: str
    """Where the harness came from: ``https://github.com/OWNER/REPO`` in the workflow, else ``local checkout``
    or ``installed package``."""
    commit: str | None
    modified: bool
    digest: str


@dataclass(frozen=True, slots=True)
class RunnerFacts:
    kind: str
    """``github-actions`` or ``local``."""
    id: str
    """The run's URL in GitHub Actions; ``local`` otherwise."""
    builder: str
    """The workflow that ran the certification (its identity in a keyless signature), or ``local``."""
    environment: str
    """``github-hosted``, ``self-hosted`` or ``local``."""
    platform: str
    isolation: str
    """How the component was kept from the harness's output: ``user NAME (uid N)`` or ``none``."""


PACKAGES = ("fakehw", "testbed", "conformance")
BUILT_DIRS = {"_lib", "_gen"}


def _package_root() -> Path:
    import conformance

    assert conformance.__file__ is not None
    return Path(conformance.__file__).resolve().parent.parent


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30, check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _built(rel: str) -> bool:
    """Files the build makes from sources that are hashed anyway (the NVML shim, generated gRPC stubs)."""
    parts = rel.split("/")
    return bool(BUILT_DIRS & set(parts[:-1])) or ".so" in parts[-1]


def harness_digest(root: Path) -> str:
    text = "".join(f"{digest}  {package}/{rel}\n" for package in PACKAGES
                   for rel, digest in tree_listing(root / package) if not _built(rel))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def harness(version: str) -> HarnessFacts:
    root = _package_root()
    digest = harness_digest(root)
    pinned = os.environ.get("FAKEHW_SOURCE_COMMIT")
    source = os.environ.get("FAKEHW_SOURCE", "")
    in_git = (root / ".git").exists()
    commit = pinned or (_git(root, "rev-parse", "HEAD") if in_git else None)
    modified = bool(in_git and _git(root, "status", "--porcelain", "--untracked-files=no", "--", *PACKAGES))
    if not source:
        source = "local checkout" if in_git else "installed package"
    return HarnessFacts(version, source, commit, modified, digest)


def isolation() -> str:
    from testbed.component_user import COMPONENT_USER_ENV, ComponentUserError, lookup

    name = os.environ.get(COMPONENT_USER_ENV, "")
    if not name:
        return "none: the component ran as the harness's user"
    try:
        user = lookup(name)
    except ComponentUserError as exc:
        return f"none: {exc}"
    return f"user {user.name} (uid {user.uid})"


def runner() -> RunnerFacts:
    env = os.environ
    here = f"{platform.system().lower()}/{platform.machine()} python {platform.python_version()}"
    if env.get("GITHUB_ACTIONS") == "true":
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        run = (f"{server}/{env.get('GITHUB_REPOSITORY', '?')}/actions/runs/{env.get('GITHUB_RUN_ID', '?')}"
               f"/attempts/{env.get('GITHUB_RUN_ATTEMPT', '1')}")
        builder = env.get("FAKEHW_BUILDER_ID") or f"{server}/{env.get('GITHUB_WORKFLOW_REF', '?')}"
        return RunnerFacts("github-actions", run, builder, env.get("RUNNER_ENVIRONMENT", "github-hosted"),
                           f"{env.get('RUNNER_OS', '?').lower()}/{env.get('RUNNER_ARCH', '?').lower()} {here}",
                           isolation())
    return RunnerFacts("local", "local", "local", "local", here, isolation())


def run_facts(targets: list[str], version: str) -> dict[str, object]:
    """The provenance part of a results file's environment: components by digest, harness, runner."""
    from dataclasses import asdict

    from conformance.provenance.component import resolve

    components = []
    for target in targets:
        kind, _, spec = target.partition("=")
        components.append(asdict(resolve(kind.strip(), spec.strip())))
    return {"components": components, "harness": asdict(harness(version)), "runner": asdict(runner())}
