"""``conformance run`` and ``conformance list``: run a suite against a component, list the requirements.

    conformance run --target device-plugin --plugin-cmd 'python -m my_plugin' --profile dgx-h100 [--backend docker]
    conformance run --target device-plugin=cmd:'python -m my_plugin' ...     (the same, as KIND=SPEC)
    conformance run --target device-plugin=reference ...                     (the reference plugin)
    conformance run --target device-plugin=reference --target extender=reference \
                    --profile dgx-h100 --profile gb200-nvl72 --out out/            (a matrix: 4 runs)
    conformance run --target fabric=my-fabric.yaml                            (a fabric config)
    conformance list [--target device-plugin] [--category health] [--level core]

``run`` runs each target's suite on each profile and backend through pytest in a child process (so a crashing
component cannot take the CLI with it), writes the per-requirement results file and the certification report
(results.json, report.json, junit.xml, summary.md, report.html, sealed by attestation.intoto.json and signed
with ``--sign-key``/``--sigstore`` in attestation.sigstore.json: in ``--out`` for one run, in
``--out/<target>-<profile>-<backend>/`` for several, with ``index.json`` and a combined ``summary.md``) and prints
one line per requirement. Exit status: 0 only when every required requirement of every run passed, 1 when one
did not, 2 for bad input (checked before anything runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.components import check_component
from conformance.requirements import LEVELS, catalogue
from fakehw.cli_common import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, CliError

if TYPE_CHECKING:
    from conformance.provenance.attest import Signer
    from conformance.report import Report


@dataclass(frozen=True)
class Suite:
    target: str
    package: str
    option: str
    """How the component is given to the suite (``--target KIND=cmd:...``)."""
    fuzz: str | None = "dp"
    """Prefix of the suite's fuzz options (``--dp-fuzz-examples``); None: the suite has no fuzz."""


SUITES = {"device-plugin": Suite("device-plugin", "conformance.suites.device_plugin", "--plugin-cmd"),
          "extender": Suite("extender", "conformance.suites.scheduler", "--spec", fuzz="sched"),
          "slurm": Suite("slurm", "conformance.suites.slurm", "--spec", fuzz=None),
          "ray": Suite("ray", "conformance.suites.ray", "--spec", fuzz=None),
          "fabric": Suite("fabric", "conformance.suites.fabric", "--spec", fuzz=None)}
STATUS_ORDER = ("failed", "error", "not-run", "skipped", "not-applicable", "passed")


def suite_dir(suite: Suite) -> Path:
    import importlib

    module = importlib.import_module(suite.package)
    assert module.__file__ is not None
    return Path(module.__file__).parent


def parse_target(text: str, plugin_cmd: str | None) -> tuple[Suite, str | None]:
    """``device-plugin`` (with ``--plugin-cmd``) or ``device-plugin=SPEC`` where SPEC is ``reference``,
    ``cmd:COMMAND`` or a bare command. Returns the suite and the component's command (None: the reference)."""
    kind, sep, spec = text.partition("=")
    suite = SUITES.get(kind.strip())
    if suite is None:
        raise CliError(f"no suite for target {kind!r} (targets: {', '.join(SUITES)})", EXIT_BAD_INPUT)
    if sep and plugin_cmd:
        raise CliError(f"give the component once: --target {text!r} or {suite.option}, not both", EXIT_BAD_INPUT)
    spec = spec.strip()
    if not sep:
        return suite, plugin_cmd
    if spec in ("", "reference"):
        return suite, None
    if spec.startswith("image:"):
        return suite, None  # the suite reads the image from its --target (plan_runs passes it as the spec)
    return suite, spec.removeprefix("cmd:").strip()


def pytest_argv(args: argparse.Namespace, suite: Suite, results: Path) -> list[str]:
    argv = [sys.executable, "-m", "pytest", str(suite_dir(suite)), "-p", "no:cacheprovider", "--import-mode=importlib",
            "--profile", args.profile, "--backend", args.backend, "--conformance-results", str(results),
            "--conformance-complete", "--conformance-no-table", "-q" if not args.verbose else "-v", "-rN"]
    # One --target per run: the report names every --target as a component that was certified.
    if args.plugin_cmd:
        argv += ["--target", f"{suite.target}=cmd:{args.plugin_cmd}"]
    elif args.spec:
        argv += ["--target", f"{suite.target}={args.spec}"]
    else:
        argv += ["--target", f"{suite.target}=reference"]
    for name in ("fuzz_examples", "fuzz_steps", "fuzz_seed"):
        value = getattr(args, name)
        if value is not None and suite.fuzz:
            argv += [f"--{suite.fuzz}-{name.replace('_', '-')}", str(value)]
    if args.timeout_scale is not None:
        argv += ["--dp-timeout-scale", str(args.timeout_scale)]
    if args.keyword:
        argv += ["-k", args.keyword]
    return argv + list(args.pytest_args or [])


def summarize(doc: dict[str, Any]) -> tuple[list[str], bool]:
    """Lines of the per-requirement summary, and whether every required requirement passed."""
    cat = catalogue()
    lines = []
    ok = True
    reqs: dict[str, Any] = doc.get("requirements", {})
    messages = {t["nodeid"]: t.get("message", "") for t in doc.get("tests", [])}
    required_passed = 0
    for req_id, entry in sorted(reqs.items()):
        req = cat.get(req_id)
        status = str(entry.get("status", "not-run"))
        required = req.required if req is not None else True
        if status not in ("passed", "not-applicable") and required:
            ok = False
        required_passed += required and status == "passed"
        mark = "" if required else " (recommended)"
        lines.append(f"{status.upper():14} {req_id:15} {entry.get('title', '')}{mark}")
        if status in ("failed", "error", "skipped", "not-applicable"):  # say why, not only the status
            for nodeid in entry.get("tests", []):
                first = (messages.get(nodeid) or "").strip().splitlines()[:1]
                if first:
                    lines.append(f"{'':14} {'':15}   {first[0][:160]}")
    counts: dict[str, int] = {}
    for entry in reqs.values():
        counts[str(entry.get("status"))] = counts.get(str(entry.get("status")), 0) + 1
    # the report's rule (conformance.report.model.derive_verdicts): a finished run, and at least one required
    # requirement passed
    complete = bool(doc.get("complete", True))
    ok = ok and complete and required_passed > 0
    verdict = ("CERTIFIED: every required requirement that applies passed" if ok
               else "NOT CERTIFIED" + ("" if complete else " (partial: the run did not finish)"))
    lines.append("")
    lines.append(", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s)) +
                 f" of {len(reqs)} requirements; {verdict}")
    return lines, ok


def write_report(results: Path, out: Path, signer: Signer) -> Report | None:
    """The sealed (and signed) certification report next to the results (None, said on stderr, when it cannot be
    built or signed)."""
    from conformance.cli_report import signing_words
    from conformance.provenance.attest import write_run
    from conformance.provenance.dsse import SignatureError
    from conformance.report import ReportError

    try:
        written = write_run(results, out, signer)
    except (ReportError, SignatureError) as exc:
        print(f"conformance: no report: {exc}", file=sys.stderr)
        return None
    print(f"conformance: {out}: sealed; {signing_words(signer.mode, written.signed)}")
    return written.report


@dataclass(frozen=True)
class Run:
    """One cell of the matrix: a component on a profile and a backend."""

    suite: Suite
    plugin_cmd: str | None
    spec: str | None
    profile: str
    backend: str

    @property
    def label(self) -> str:
        return f"{self.suite.target} on {self.profile} ({self.backend})"

    @property
    def slug(self) -> str:
        profile = Path(self.profile).stem if self.profile.endswith((".yaml", ".yml")) else self.profile
        return f"{self.suite.target}-{profile}-{self.backend}"


def _default_fabric(profile: str) -> str:
    """The built-in fabric config for ``profile`` (the healthy one that ships with the package)."""
    from fakehw.fabric.loader import builtin_fabrics, load_fabric_spec

    for name, path in builtin_fabrics().items():
        if load_fabric_spec(path).spec.profile == profile:
            return name
    raise CliError(f"no built-in fabric config for profile {profile}: give one (--target fabric=CONFIG)",
                   EXIT_BAD_INPUT)


def plan_runs(args: argparse.Namespace) -> list[Run]:
    """Every (target, profile, backend) combination, checked before anything runs."""
    from fakehw.model import ProfileError, load_profile

    targets = args.target
    args.profile = args.profile or ["dgx-h100"]
    args.backend = args.backend or ["local"]
    if (args.plugin_cmd or args.spec) and len(targets) > 1:
        raise CliError("--plugin-cmd and --spec apply to one target; give each as --target KIND=SPEC",
                       EXIT_BAD_INPUT)
    for profile in args.profile:
        try:
            load_profile(profile)
        except ProfileError as exc:
            text = str(exc)
            raise CliError(f"profile {profile} is not valid:" + (f"\n{text}" if "\n" in text else f" {text}"),
                           EXIT_BAD_INPUT) from None
    runs = []
    for text in targets:
        kind, sep, spec_text = text.partition("=")
        kind = kind.strip()
        spec: str | None = args.spec
        plugin_cmd: str | None = args.plugin_cmd
        if kind in SUITES and SUITES[kind].option == "--spec":  # these suites read SPEC themselves
            if sep and args.spec:
                raise CliError(f"give the component once: --target {text!r} or --spec, not both", EXIT_BAD_INPUT)
            suite, spec = SUITES[kind], (spec_text.strip() if sep else args.spec)
        else:
            suite, plugin_cmd = parse_target(text, args.plugin_cmd)
            if spec_text.strip().startswith("image:"):
                spec = spec_text.strip()
        for profile in args.profile:
            this_spec = spec
            if suite.target == "fabric" and not this_spec:
                this_spec = _default_fabric(profile)
            for backend in args.backend:
                runs.append(Run(suite, plugin_cmd, this_spec, profile, backend))
    checked: set[tuple[str, str | None, str | None, str]] = set()
    for run in runs:  # every component, once per backend, before any suite starts
        key = (run.suite.target, run.spec, run.plugin_cmd, run.backend)
        if key not in checked:
            checked.add(key)
            check_component(*key)
    return runs


def _pytest_args(args: argparse.Namespace, run: Run) -> argparse.Namespace:
    one = argparse.Namespace(**vars(args))
    one.profile, one.backend, one.plugin_cmd, one.spec = run.profile, run.backend, run.plugin_cmd, run.spec
    return one


def execute(args: argparse.Namespace, run: Run, out: Path, signer: Signer) -> tuple[bool, str | None, float]:
    """Run one suite into ``out``; whether every required requirement passed, the report verdict, seconds."""
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    results.unlink(missing_ok=True)  # never report an old run as this one
    argv = pytest_argv(_pytest_args(args, run), run.suite, results)
    if args.verbose:
        print("conformance: " + shlex.join(argv), file=sys.stderr)
    started = time.monotonic()
    env = dict(os.environ)
    env.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    if args.component_user:
        env["FAKEHW_COMPONENT_USER"] = args.component_user
    proc = subprocess.run(argv, env=env, check=False)
    took = time.monotonic() - started
    if not results.is_file():
        raise CliError(f"{run.label}: the suite wrote no results (pytest exit status {proc.returncode}); run with -v "
                       "to see the pytest command", EXIT_FAILURE if proc.returncode != 4 else EXIT_BAD_INPUT)
    lines, _ = summarize(json.loads(results.read_text()))
    print()
    print(f"== {run.label}, {took:.0f} s, results: {results}")
    print("\n".join(lines))
    from conformance.report.text import VERDICT_TEXT

    report = write_report(results, out, signer)
    if report is None:
        return False, None, took  # nothing sealed: nothing certified
    return report.verdicts.overall == "certified", str(VERDICT_TEXT[report.verdicts.overall]), took


def clear_previous(out: Path) -> list[Path]:
    """Remove what an earlier ``conformance run`` into ``out`` wrote (the run directories its index.json lists,
    its index and summaries), so the new index.json is the whole truth about ``out``. Only directories that hold
    a run's files and lie inside ``out`` are touched; anything else there is left alone."""
    index = out / "index.json"
    try:
        old = json.loads(index.read_text())
        runs = old.get("runs", []) if isinstance(old, dict) else []
    except (OSError, ValueError):
        return []
    removed = []
    root = out.resolve()
    for run in runs:
        path = Path(str(run.get("dir", ""))) if isinstance(run, dict) else Path()
        target = path.resolve()
        if target != root and target.is_relative_to(root) and (target / "results.json").is_file():
            shutil.rmtree(target, ignore_errors=True)
            removed.append(path)
    for name in ("index.json", "index.html", "summary.md", "results.json", "report.json", "report.html",
                 "junit.xml"):
        (out / name).unlink(missing_ok=True)
    return removed


def cmd_run(args: argparse.Namespace) -> int:
    from conformance.cli_report import signer_from_args

    signer = signer_from_args(args, defer=True)
    if args.component_user:
        from testbed.component_user import ComponentUserError, lookup

        try:
            lookup(args.component_user)
        except ComponentUserError as exc:
            raise CliError(str(exc), EXIT_BAD_INPUT) from None
    runs = plan_runs(args)
    out = Path(args.out)
    single = len(runs) == 1
    for path in clear_previous(out):
        print(f"conformance: removed {path} (an earlier run into {out})", file=sys.stderr)
    index = []
    for i, run in enumerate(runs, 1):
        component = run.plugin_cmd or run.spec or "reference"
        print(f"conformance: [{i}/{len(runs)}] {run.label}: {component}", file=sys.stderr)
        run_dir = out if single else out / run.slug
        ok, verdict, took = execute(args, run, run_dir, signer)
        index.append({"target": run.suite.target, "component": component, "profile": run.profile,
                      "backend": run.backend, "certified": ok, "verdict": verdict, "seconds": round(took, 1),
                      "dir": str(run_dir)})
    certified = all(bool(entry["certified"]) for entry in index)
    _write_index(out, index, certified, combined=not single)
    html = out / ("report.html" if single else "index.html")
    print(f"\nconformance: {sum(bool(e['certified']) for e in index)} of {len(index)} run(s) certified")
    print(f"HTML report: {html.resolve()}")
    print(f"verdict: {'CERTIFIED' if certified else 'NOT CERTIFIED'}")
    return EXIT_OK if certified else EXIT_FAILURE


def _write_index(out: Path, index: list[dict[str, Any]], certified: bool, combined: bool) -> None:
    """``index.json`` (every run and the overall verdict); for several runs also ``index.html`` and a
    ``summary.md`` of them all."""
    from conformance.report.html import index_html
    from fakehw.render.atomic import atomic_write

    doc = {"verdict": "certified" if certified else "not-certified", "runs": index}
    atomic_write(out / "index.json", (json.dumps(doc, indent=2) + "\n").encode())
    if not combined:
        return
    atomic_write(out / "index.html", index_html(index, certified, out).encode())
    lines = ["## fakehw certification matrix", "", "| target | profile | backend | verdict | seconds |",
             "|---|---|---|---|---|"]
    for e in index:
        verdict = e["verdict"] or ("CERTIFIED" if e["certified"] else "NOT CERTIFIED")
        lines.append(f"| {e['target']} | {e['profile']} | {e['backend']} | {verdict} | {e['seconds']} |")
    for e in index:
        summary = Path(e["dir"]) / "summary.md"
        if summary.is_file():
            lines += ["", summary.read_text()]
    atomic_write(out / "summary.md", ("\n".join(lines) + "\n").encode())


def cmd_list(args: argparse.Namespace) -> int:
    cat = catalogue()
    for name, value, known in (("target", args.target, {r.target for r in cat.requirements}),
                               ("category", args.category, {r.category for r in cat.requirements})):
        if value is not None and value not in known:
            raise CliError(f"no {name} {value!r} in the catalogue (known: {', '.join(sorted(known))})",
                           EXIT_BAD_INPUT)
    reqs = cat.select(target=args.target, category=args.category, level=args.level)
    if args.json:
        print(json.dumps([{"id": r.id, "title": r.title, "target": r.target, "category": r.category,
                           "level": r.level, "required": r.required, "rationale": r.rationale} for r in reqs],
                         indent=2))
        return EXIT_OK
    if not reqs:
        raise CliError("no requirement matches", EXIT_BAD_INPUT)
    for r in reqs:
        print(f"{r.id:15} {r.level:10} {r.category:12} {r.title}{'' if r.required else ' (recommended)'}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from conformance.cli_report import add_signing_options

    p = sub.add_parser("run", help="certify components: targets x profiles x backends",
                       description="Runs each target's suite in pytest on each profile and backend, writes the results "
                                   "and the certification report (OUT, or OUT/<target>-<profile>-<backend>/ plus "
                                   "OUT/index.json for several runs) and prints one line per requirement. Exit 0 "
                                   "only if every required requirement of every run passed.")
    p.add_argument("--target", required=True, action="append", metavar="KIND[=SPEC]",
                   help=f"what to certify: {', '.join(SUITES)}; SPEC: reference, cmd:COMMAND, or image:IMAGE "
                        "(device-plugin on --backend docker: its own container from the local image store)")
    p.add_argument("--plugin-cmd", help="command that starts the device plugin on a node (default: the reference "
                                        "plugin); {plugin_dir} and {node} are substituted")
    p.add_argument("--spec", help="the component for the extender, slurm and ray targets: extender=reference, "
                                  "reference:MUTANT, cmd:COMMAND ({port} {api}) or url:URL; slurm=system or "
                                  "prefix:DIR; ray=python or python:PATH (see docs/scheduler.md)")
    p.add_argument("--profile", action="append", help="hardware profile (name or YAML file); repeatable "
                                                       "(default dgx-h100)")
    p.add_argument("--backend", action="append", choices=["local", "docker"], help="repeatable (default local)")
    p.add_argument("--out", default="conformance-out", help="directory for results.json (default conformance-out)")
    p.add_argument("--fuzz-examples", type=int, help="isolation fuzz: runs per requirement (default 6)")
    p.add_argument("--fuzz-steps", type=int, help="isolation fuzz: steps per run (default 12)")
    p.add_argument("--fuzz-seed", type=int, help="replay an isolation fuzz run")
    p.add_argument("--timeout-scale", type=float, help="stretch the harness's deadlines (slow or emulated nodes)")
    p.add_argument("-k", dest="keyword", help="only checks matching this pytest -k expression")
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="pytest -v instead of -q, and print each pytest command line to stderr")
    p.add_argument("--component-user", metavar="USER",
                   help="start the component as this (non-root) user, so it cannot write the harness's output; "
                        "the harness must run as root (the certify workflow does both)")
    add_signing_options(p, defer_help=True)
    p.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("list", help="list the requirements of the catalogue",
                       description="One line per requirement: ID, level, category, title; '(recommended)' marks "
                                   "the ones a verdict does not depend on. Filters combine.")
    p.add_argument("--target", metavar="KIND", help=f"only this target's requirements ({', '.join(SUITES)})")
    p.add_argument("--category", help="only this category (e.g. allocation, health, isolation, pfc)")
    p.add_argument("--level", choices=list(LEVELS), help="only this certification level")
    p.add_argument("--json", action="store_true", help="as a JSON list (every field of each requirement)")
    p.set_defaults(func=cmd_list)
