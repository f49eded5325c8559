"""The GitHub Actions workflows and the vendor action: schema-valid, and everything they name exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent


def _load(path: Path) -> dict:  # type: ignore[type-arg]
    return yaml.load(path.read_text(), Loader=yaml.BaseLoader)  # BaseLoader keeps "on" a string key


def test_the_expected_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "e2e-kind.yml", "certify.yml"}
    assert (ROOT / "action.yml").is_file()


@pytest.mark.parametrize(("schema", "path"), [("vendor.github-workflows", p) for p in WORKFLOWS]
                         + [("vendor.github-actions", ROOT / "action.yml")], ids=lambda x: getattr(x, "name", x))
def test_schema_valid(schema: str, path: Path) -> None:
    proc = subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema", schema, str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _steps() -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    out = []
    for path in WORKFLOWS:
        for job in _load(path)["jobs"].values():
            out += [(path.name, step) for step in job.get("steps", [])]
    out += [("action.yml", step) for step in _load(ROOT / "action.yml")["runs"]["steps"]]
    return out


def test_actions_are_pinned_to_a_version() -> None:
    for where, step in _steps():
        if "uses" in step:
            assert re.search(r"@v\d", step["uses"]), f"{where}: {step['uses']} is not pinned"


def test_what_the_workflows_run_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    bake = (ROOT / "images" / "docker-bake.hcl").read_text()
    for where, step in _steps():
        run = step.get("run", "")
        for target in re.findall(r'\bmake (?:-C (?:"[^"]*"|\S+) )?([a-z-]+)', run):
            assert re.search(rf"^{target}:", makefile, re.M), f"{where}: make {target} does not exist"
        for target in [*re.findall(r"docker-bake\.hcl (\S+)", run), step.get("with", {}).get("targets", "")]:
            if target and not target.startswith("$"):
                assert f'target "{target}"' in bake, f"{where}: bake target {target} does not exist"
        for path in re.findall(r"\b(tests/[\w/.]+|tools/[\w.-]+)", run):
            assert (ROOT / path).exists(), f"{where}: {path} does not exist"


def test_reusable_workflow_inputs_are_all_used() -> None:
    certify = _load(ROOT / ".github" / "workflows" / "certify.yml")
    text = (ROOT / ".github" / "workflows" / "certify.yml").read_text()
    for name in certify["on"]["workflow_call"]["inputs"]:
        assert f"inputs.{name}" in text, f"input {name} is declared but never used"


def test_the_action_takes_the_workflows_inputs() -> None:
    """A vendor switching between the action and the reusable workflow keeps their inputs: the same names and
    defaults, except where the action cannot differ (it is fakehw itself: no fakehw-repository/ref; its report
    directory is an input, the workflow's is fixed; signing is the action's choice, ``sigstore``, because it signs
    as the caller's workflow, where the workflow always signs in a job of its own)."""
    workflow = _load(ROOT / ".github" / "workflows" / "certify.yml")["on"]["workflow_call"]["inputs"]
    action = _load(ROOT / "action.yml")["inputs"]
    assert set(workflow) - {"fakehw-repository", "fakehw-ref"} == set(action) - {"out", "sigstore"}
    for name in set(workflow) & set(action):
        assert workflow[name].get("default", "") == action[name].get("default", ""), name
    action_text = (ROOT / "action.yml").read_text()
    for name in action:
        assert f"inputs.{name}" in action_text, f"action input {name} is declared but never used"


def test_the_components_advertised_are_ones_conformance_run_accepts() -> None:
    """Every form of component the action and the workflow describe is one ``conformance run`` takes; in
    particular no image: (it runs components as commands on the nodes)."""
    for path in (ROOT / "action.yml", ROOT / ".github" / "workflows" / "certify.yml"):
        text = path.read_text()
        assert "image:<" not in text and "image:registry" not in text, path.name
        assert "url:http://<host>:<port> (extender)" in " ".join(text.split()), path.name


def test_the_kwok_job_pins_what_it_installs_and_runs_the_kwok_e2e() -> None:
    """The kwok job of e2e-kind.yml installs kind, KWOK and the NRT CRD at pinned versions (never "latest"), gives
    the e2e test the cluster, and selects a test that exists (a renamed test would otherwise skip silently)."""
    path = ROOT / ".github" / "workflows" / "e2e-kind.yml"
    job = _load(path)["jobs"]["kwok"]
    env = job["env"]
    for key in ("KIND_VERSION", "KWOK_VERSION", "NRT_API_VERSION"):
        assert re.fullmatch(r"v\d+\.\d+\.\d+", env[key]), f"{key}={env[key]} is not a pinned release"
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    assert "latest" not in runs
    for needed in ("releases/download/${KWOK_VERSION}/kwok.yaml", "releases/download/${KWOK_VERSION}/stage-fast.yaml",
                   "noderesourcetopology-api/${NRT_API_VERSION}/manifests/crd.yaml",
                   "kind.sigs.k8s.io/dl/${KIND_VERSION}", "bin/linux/amd64/$bin", "kube-scheduler"):
        assert needed in runs, f"the kwok job does not run {needed}"
    e2e = next(step for step in job["steps"] if "pytest" in step.get("run", ""))
    assert set(e2e["env"]) >= {"FAKEHW_KWOK_KUBECONFIG", "FAKEHW_KWOK_NODES"}
    selected = re.search(r"-k (\w+)", e2e["run"])
    assert selected is not None
    test_file = (ROOT / "tests" / "kubernetes" / "test_kwok.py").read_text()
    assert re.search(rf"^def test_\w*{selected.group(1)}\w*\(", test_file, re.M), "-k selects no test"
    assert int(e2e["env"]["FAKEHW_KWOK_NODES"]) >= 1000
