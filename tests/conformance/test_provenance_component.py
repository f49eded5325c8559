"""Components by digest: what the harness hashes for each kind of target, checked against coreutils (the recipe the
docs give a stranger), and the local paths that must not leak into a report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.provenance.component import redact, resolve
from conformance.provenance.facts import harness, runner

ROOT = Path(__file__).parents[2]
COREUTILS_TREE = ("cd \"$1\" && find . -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -printf '%P\\n' "
                  "| LC_ALL=C sort | xargs -d '\\n' sha256sum | sha256sum | cut -d' ' -f1")


def _coreutils_tree(path: Path) -> str:
    return "sha256:" + subprocess.run(["bash", "-c", COREUTILS_TREE, "-", str(path)], capture_output=True,
                                      text=True, check=True).stdout.strip()


def _sha256sum(path: Path) -> str:
    return "sha256:" + subprocess.run(["sha256sum", str(path)], capture_output=True, text=True,
                                      check=True).stdout.split()[0]


def test_the_reference_plugin_is_its_package_directory() -> None:
    ref = resolve("device-plugin", "reference")
    assert ref.digest == _coreutils_tree(ROOT / "testbed" / "reference" / "device_plugin")
    assert ref.name == "fakehw reference device-plugin" and "directory device_plugin" in ref.hashed
    mutant = resolve("extender", "reference:split-gangs")
    assert mutant.digest == _coreutils_tree(ROOT / "testbed" / "reference" / "extender")
    assert mutant.name == "fakehw reference extender (mutant split-gangs)"


def test_python_dash_m_resolves_with_that_interpreter_and_no_venv_path_leaks() -> None:
    ref = resolve("device-plugin", f"cmd:{sys.executable} -m testbed.reference.device_plugin --x {{plugin_dir}}")
    assert ref.digest == _coreutils_tree(ROOT / "testbed" / "reference" / "device_plugin")
    assert ref.spec == "cmd:python -m testbed.reference.device_plugin --x {plugin_dir}"
    assert str(Path(sys.executable).parent) not in ref.spec + ref.name + ref.hashed


def test_a_console_script_is_followed_to_its_package() -> None:
    script = Path(sys.executable).parent / "fakehw"  # written by pip: '#!.../python' + 'from fakehw.cli import main'
    ref = resolve("device-plugin", f"cmd:{script} agent")
    assert ref.digest == _coreutils_tree(ROOT / "fakehw")
    assert ref.hashed.startswith("console script fakehw: directory fakehw")
    assert ref.spec == "cmd:fakehw agent"


def test_an_executable_and_a_script_are_their_files(tmp_path: Path) -> None:
    true = Path(shutil.which("true") or "/bin/true")
    ref = resolve("device-plugin", "cmd:FOO=1 true --flag")
    assert ref.digest == _sha256sum(true.resolve()) and ref.hashed == "executable true"
    script = tmp_path / "plugin.py"
    script.write_text("print('hello')\n")
    ref = resolve("extender", f"cmd:{sys.executable} {script} --port {{port}}")
    assert ref.digest == _sha256sum(script) and "file plugin.py" in ref.hashed


@pytest.mark.parametrize(("kind", "spec", "why"), [
    ("extender", "url:http://127.0.0.1:9", "a running service at http://127.0.0.1:9 (cannot be pinned by digest)"),
    ("device-plugin", "cmd:no-such-plugin --x", "no-such-plugin is not an executable on PATH"),
    ("device-plugin", f"cmd:{sys.executable} -m no_such_module_here", "cannot import no_such_module_here"),
    ("device-plugin", "cmd:'unbalanced", "cannot parse the command"),
    ("fabric", "/no/such/fabric.yaml", "fabric config /no/such/fabric.yaml not found"),
])
def test_what_cannot_be_pinned_says_why(kind: str, spec: str, why: str) -> None:
    ref = resolve(kind, spec)
    assert ref.digest is None and ref.hashed.startswith("not pinned: ") and why in ref.hashed


def test_a_fabric_config_and_an_image_reference() -> None:
    from fakehw.fabric.loader import builtin_fabrics

    name, path = next(iter(builtin_fabrics().items()))
    assert resolve("fabric", name).digest == _sha256sum(path)
    ref = resolve("device-plugin", "image:registry.example/plugin@sha256:" + "ab" * 32)
    assert ref.digest == "sha256:" + "ab" * 32


@pytest.mark.parametrize(("spec", "shown"), [
    ("cmd:/home/me/.venv/bin/python -m plugin", "cmd:python -m plugin"),
    ("cmd:python -m plugin --sock {plugin_dir}/x.sock", "cmd:python -m plugin --sock {plugin_dir}/x.sock"),
    ("prefix:/opt/slurm", "prefix:slurm"),
    ("cmd:/opt/p --name 'a b'", "cmd:p --name 'a b'"),
    ("url:http://10.0.0.1:8888", "url:http://10.0.0.1:8888"),
])
def test_redaction_cuts_directories_only(spec: str, shown: str) -> None:
    assert redact(spec) == shown


def test_harness_facts_come_from_git_and_the_workflow(monkeypatch: pytest.MonkeyPatch) -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    facts = harness("9.9")
    if (ROOT / ".git").exists():
        assert facts.commit == head and facts.source == "local checkout"
    monkeypatch.setenv("FAKEHW_SOURCE_COMMIT", "a" * 40)
    monkeypatch.setenv("FAKEHW_SOURCE", "https://github.com/fakehw/fakehw")
    pinned = harness("9.9")
    assert (pinned.commit, pinned.source, pinned.version) == ("a" * 40, "https://github.com/fakehw/fakehw", "9.9")
    assert pinned.digest == facts.digest and pinned.digest.startswith("sha256:")


def test_runner_facts_in_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"GITHUB_ACTIONS": "true", "GITHUB_SERVER_URL": "https://github.com",
                        "GITHUB_REPOSITORY": "vendor/plugin", "GITHUB_RUN_ID": "42", "GITHUB_RUN_ATTEMPT": "2",
                        "RUNNER_ENVIRONMENT": "github-hosted", "RUNNER_OS": "Linux", "RUNNER_ARCH": "X64",
                        "FAKEHW_BUILDER_ID": "https://github.com/fakehw/fakehw/.github/workflows/certify.yml@v1"
                        }.items():
        monkeypatch.setenv(name, value)
    facts = runner()
    assert facts.id == "https://github.com/vendor/plugin/actions/runs/42/attempts/2"
    assert facts.builder.endswith("certify.yml@v1") and facts.environment == "github-hosted"
    monkeypatch.delenv("GITHUB_ACTIONS")
    assert runner().id == "local"


def test_no_local_path_reaches_the_report(tmp_path: Path) -> None:
    """The suite is given the component by an absolute venv path; results.json and report.json name it without."""
    from conformance.provenance.attest import Signer, write_run
    from tests.conformance.runs import run_suite, write_suite

    suite = write_suite(tmp_path / "suite", "extender")
    out = tmp_path / "run"
    out.mkdir()
    run_suite(suite, out / "results.json", "extender", spec=f"cmd:{sys.executable} -m testbed.reference.extender")
    write_run(out / "results.json", out, Signer())
    venv = str(Path(sys.executable).parent)
    results = json.loads((out / "results.json").read_text())
    assert results["environment"]["targets"] == ["extender=cmd:python -m testbed.reference.extender"]
    report = json.loads((out / "report.json").read_text())
    (component,) = report["manifest"]["components"]
    assert component["spec"] == "cmd:python -m testbed.reference.extender"
    assert component["digest"] == _coreutils_tree(ROOT / "testbed" / "reference" / "extender")
    for name in ("report.json", "results.json", "summary.md", "report.html", "attestation.intoto.json", "junit.xml"):
        assert venv not in (out / name).read_text(), name
