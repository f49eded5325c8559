"""Mutation testing of the core modules: does a realistic bug in them make some test fail? (``make mutate``)

For each area (:data:`AREAS`) Cosmic Ray enumerates the mutants of the area's modules (a chosen set of operators:
arithmetic and comparison swaps, negated conditions, flipped booleans and and/or, changed numbers, loops that run
zero times, swapped exception types, break/continue). A seeded random sample of them (``--sample``, per area) is
applied one at a time to a private copy of the tree, and the area's tests are run against it: a failing (or
timed-out) test run kills the mutant, a passing one lets it survive. The NVML shim's C getters have hand-written
mutants (:data:`C_MUTANTS`) that are applied the same way and rebuilt with the shim's own build.

The score of an area is killed / (killed + survived), with survivors listed in ``tools/mutation-equivalents.toml``
(mutants that cannot change behaviour, each with the reason) left out of both. Every survivor is printed with its
diff so it can be killed by a new test or added there with its reason. Target: 90 % per area.

Runtime: every mutant costs one run of its area's tests (seconds for most areas), so the default sample of 30 per
area takes about 20-40 minutes with ``--jobs 2`` on a 2-core machine; ``--area`` runs one area, ``--sample 0`` all of
its mutants. It is not part of ``make test``/CI for that reason.

The working copies live under ``--work`` (default /tmp/fhw-mutate) and are deleted afterwards; the tree itself is
never modified. Results are also written as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENTS = ROOT / "tools" / "mutation-equivalents.toml"
TARGET = 0.90
NOT_COPIED = (".venv", ".git", "out", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__", ".hypothesis",
              "*.egg-info", "build")
OPERATORS = (
    "core/ReplaceBinaryOperator_Add_Sub", "core/ReplaceBinaryOperator_Sub_Add", "core/ReplaceBinaryOperator_Mul_Div",
    "core/ReplaceBinaryOperator_Div_Mul", "core/ReplaceBinaryOperator_FloorDiv_Mul",
    "core/ReplaceBinaryOperator_Mod_FloorDiv", "core/ReplaceBinaryOperator_BitOr_BitAnd",
    "core/ReplaceBinaryOperator_BitAnd_BitOr", "core/ReplaceBinaryOperator_LShift_RShift",
    "core/ReplaceComparisonOperator_Eq_NotEq", "core/ReplaceComparisonOperator_NotEq_Eq",
    "core/ReplaceComparisonOperator_Lt_LtE", "core/ReplaceComparisonOperator_LtE_Lt",
    "core/ReplaceComparisonOperator_Gt_GtE", "core/ReplaceComparisonOperator_GtE_Gt",
    "core/ReplaceComparisonOperator_Lt_Gt", "core/ReplaceComparisonOperator_Gt_Lt",
    "core/ReplaceComparisonOperator_Is_IsNot", "core/ReplaceComparisonOperator_IsNot_Is",
    "core/ReplaceUnaryOperator_USub_UAdd", "core/ReplaceUnaryOperator_Delete_Not", "core/AddNot",
    "core/ReplaceTrueWithFalse", "core/ReplaceFalseWithTrue", "core/ReplaceAndWithOr", "core/ReplaceOrWithAnd",
    "core/ReplaceBreakWithContinue", "core/ReplaceContinueWithBreak", "core/NumberReplacer",
    "core/ZeroIterationForLoop", "core/ExceptionReplacer",
)
"""The bugs a person makes: not Cosmic Ray's full cross product (``+`` to ``^`` and the like die at once)."""


@dataclass(frozen=True)
class Area:
    name: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]
    select: str = ""
    """A pytest -k expression when only some tests of the files are quick enough to run per mutant."""
    timeout: float = 300.0


AREAS = (
    Area("model/topology", ("fakehw/model/topology.py",), ("tests/model",)),
    Area("nvml snapshot", ("fakehw/nvml/snapshot.py",),
         ("tests/nvml/test_layout.py", "tests/nvml/test_determinism.py", "tests/nvml/test_visibility.py",
          "tests/nvml/test_pynvml.py", "tests/nvml/test_events.py", "tests/nvml/test_live.py")),
    Area("agent faults/journal", ("fakehw/agent/faults.py", "fakehw/agent/journal.py"),
         ("tests/agent/test_fault_requests.py", "tests/agent/test_fault_defaults.py",
          "tests/hostile/test_journal_damage.py", "tests/hostile/test_journal_upgrade.py",
          "tests/hostile/test_journal_durability.py")),
    Area("sysfs renderers", ("fakehw/sysfs/node.py", "fakehw/sysfs/pci.py", "fakehw/sysfs/cpu.py",
                             "fakehw/sysfs/nvidia.py", "fakehw/sysfs/cxl.py"),
         ("tests/sysfs/test_consumers.py", "tests/sysfs/test_hwloc_profiles.py",
          "tests/sysfs/test_pci.py", "tests/sysfs/test_memory.py", "tests/sysfs/test_real_layouts.py",
          "tests/sysfs/test_kernel_abi.py"),
         # Per mutant: the tests whose expected values come from outside the renderers (lspci, lscpu, numactl,
         # hwloc, lsmem, numastat, the kernel's ABI, real machines' layouts), on the profiles that exercise every
         # renderer (x86 DGX, Grace, GB200, RISC-V, CXL pool, ndctl's cxl_test topology). The all-profile sweeps,
         # test_tree's writer tests (tree.py is not in this area) and the CXL state machine (minutes; the region
         # and decoder files it reads are read by test_kernel_abi too) run in `make test`.
         select="not (lscpu or hwloc_sees or pci_hierarchy or gpu_link_speed) or dgx-h100] or cxl-pool] "
                "or gb200-nvl72] or gh200] or riscv-nvlink-fusion] or cxl-test] or h100] or t4]", timeout=600.0),
    Area("reference plugin allocation", ("testbed/reference/device_plugin/allocator.py",),
         ("tests/conformance/test_device_plugin_units.py", "tests/conformance/test_allocator_rules.py")),
    Area("extender policy", ("testbed/reference/extender/policy.py",),
         ("tests/scheduler/test_reference_policy.py", "tests/scheduler/test_reference_policy_rules.py",
          "tests/scheduler/test_reference_policy_pools.py")),
    Area("fabric lint", ("fakehw/fabric/lint.py",),
         ("tests/fabric/test_fabric_lint.py", "tests/fabric/test_fabric_lint_scope.py")),
    Area("report verify", ("conformance/report/model.py", "conformance/provenance/verify.py",
                           "conformance/provenance/statement.py", "conformance/provenance/dsse.py",
                           "conformance/catalogue_versions.py"),
         ("tests/conformance/test_report_tamper.py", "tests/conformance/test_catalogue_versions.py",
          "tests/conformance/test_provenance_rules.py", "tests/conformance/test_report_signing.py"),
         select="not signing or a_keyless_run or bad_keys or payload_type or signing_refuses or ed25519"),
)


@dataclass(frozen=True)
class CMutant:
    file: str
    before: str
    after: str
    why: str


NVML_C_AREA = Area("nvml C getters", ("fakehw/nvml/csrc",),
                   ("tests/nvml/test_pynvml.py", "tests/nvml/test_visibility.py", "tests/nvml/test_determinism.py",
                    "tests/nvml/test_events.py", "tests/nvml/test_live.py", "tests/nvml/test_topology.py"))
C_MUTANTS_FILE = ROOT / "tools" / "nvml-c-mutants.toml"


def c_mutants() -> list[CMutant]:
    data = tomllib.loads(C_MUTANTS_FILE.read_text())
    return [CMutant(**m) for m in data["mutant"]]


@dataclass
class Outcome:
    area: str
    module: str
    operator: str
    line: int
    diff: str
    result: str
    """killed, survived, equivalent, timeout or error."""
    seconds: float = 0.0
    reason: str = ""


@dataclass
class Score:
    area: str
    sampled: int = 0
    killed: int = 0
    survived: int = 0
    equivalent: int = 0
    errors: int = 0
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def score(self) -> float:
        judged = self.killed + self.survived
        return self.killed / judged if judged else 1.0


# --------------------------------------------------------------------------------------------------- working copies


def make_copy(work: Path, name: str) -> Path:
    """A private copy of the tree (sources, tests, built shim) the mutants are applied to."""
    dest = work / name
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(ROOT, dest, symlinks=True, ignore=shutil.ignore_patterns(*NOT_COPIED))
    return dest


def test_argv(area: Area) -> list[str]:
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
            "-p", "no:xdist", *(("-k", area.select) if area.select else ()), *area.tests]


def run_tests(copy: Path, area: Area, timeout: float) -> tuple[str, float]:
    """``passed``, ``failed`` or ``timeout`` for the area's tests in ``copy``, and the seconds it took."""
    env = {**os.environ, "PYTHONPATH": str(copy), "FAKEHW_STATE_DIR": str(copy / ".state")}
    started = time.monotonic()
    try:
        proc = subprocess.run(test_argv(area), cwd=copy, env=env, capture_output=True, timeout=timeout, check=False,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started
    return ("passed" if proc.returncode == 0 else "failed"), time.monotonic() - started


# --------------------------------------------------------------------------------------------------- Python mutants


@dataclass(frozen=True)
class Spec:
    module: str
    operator: str
    occurrence: int
    line: int


def enumerate_specs(area: Area) -> list[Spec]:
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.plugins import get_operator

    specs = []
    for module in area.modules:
        tree = get_ast_from_path(ROOT / module)
        hints = type_hints(ROOT / module)
        for name in OPERATORS:
            operator = get_operator(name)()
            positions = [start for node in ast_nodes(tree) for start, _ in operator.mutation_positions(node)]
            specs += [Spec(module, name, i, start[0]) for i, start in enumerate(positions)
                      if not any(a <= (start[0], start[1]) < b for a, b in hints)]
    return specs


def type_hints(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Spans of the type hints nothing evaluates (every module has ``from __future__ import annotations``):
    function signatures, local variables, dataclass fields. A mutant there (``X | None`` to ``X & None``) cannot
    change behaviour. Pydantic models' fields are evaluated, so they stay."""
    import ast

    tree = ast.parse(path.read_text())
    if not any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
               any(a.name == "annotations" for a in n.names) for n in tree.body):
        return []
    spans: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            spans += [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                             *filter(None, (args.vararg, args.kwarg))) if a.annotation]
            spans += [node.returns] if node.returns else []
            spans += [n.annotation for n in ast.walk(node) if isinstance(n, ast.AnnAssign)]
        elif isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
            spans += [n.annotation for n in node.body if isinstance(n, ast.AnnAssign)]
    return [((e.lineno, e.col_offset), (e.end_lineno or e.lineno, e.end_col_offset or 0)) for e in spans]


@contextmanager
def mutated(copy: Path, spec: Spec) -> Iterator[str | None]:
    """Apply ``spec`` to the module in ``copy`` for the block; yields the diff (None: nothing to mutate)."""
    import difflib

    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.plugins import get_operator

    path = copy / spec.module
    original = path.read_text()
    mutated_code = mutate_code(original, get_operator(spec.operator)(), spec.occurrence)
    if mutated_code is None:
        yield None
        return
    _forget_bytecode(path)  # a mutant of the same size written in the same second could reuse the old .pyc
    path.write_text(mutated_code)
    try:
        yield "".join(line for line in difflib.unified_diff(original.splitlines(True), mutated_code.splitlines(True),
                                                           n=0) if line[:1] in "+-" and line[:3] not in ("+++", "---"))
    finally:
        path.write_text(original)
        _forget_bytecode(path)


def _forget_bytecode(module: Path) -> None:
    for pyc in (module.parent / "__pycache__").glob(f"{module.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)


def load_equivalents() -> list[dict[str, str]]:
    if not EQUIVALENTS.is_file():
        return []
    return list(tomllib.loads(EQUIVALENTS.read_text()).get("equivalent", []))


def equivalent(module: str, diff: str, known: list[dict[str, str]]) -> str:
    """The recorded reason a survivor is equivalent ("" if it is not recorded)."""
    lines = [line[1:].strip() for line in diff.splitlines()]
    for entry in known:
        if entry["module"] in (module, "*") and entry["before"].strip() in lines and entry["after"].strip() in lines:
            return entry["why"]
    return ""


_COPY: Path | None = None


def _init_worker(work: str, counter: object) -> None:
    global _COPY
    with counter.get_lock():  # type: ignore[attr-defined]
        counter.value += 1  # type: ignore[attr-defined]
        index = counter.value  # type: ignore[attr-defined]
    _COPY = make_copy(Path(work), f"worker-{index}")


def _run_python(area: Area, spec: Spec, timeout: float) -> Outcome:
    assert _COPY is not None
    with mutated(_COPY, spec) as diff:
        if diff is None:
            return Outcome(area.name, spec.module, spec.operator, spec.line, "", "error", reason="no mutation")
        result, seconds = run_tests(_COPY, area, timeout)
    verdict = {"failed": "killed", "timeout": "killed", "passed": "survived"}[result]
    return Outcome(area.name, spec.module, spec.operator.removeprefix("core/"), spec.line, diff, verdict, seconds,
                   "timed out" if result == "timeout" else "")


def _run_c(area: Area, mutant: CMutant, timeout: float) -> Outcome:
    assert _COPY is not None
    path = _COPY / mutant.file
    original = path.read_text()
    if original.count(mutant.before) != 1:
        return Outcome(area.name, mutant.file, "hand-written", 0, mutant.before, "error",
                       reason="the mutant's text is not in the file exactly once (update tools/nvml-c-mutants.toml)")
    path.write_text(original.replace(mutant.before, mutant.after))
    try:
        build = subprocess.run([sys.executable, "-m", "fakehw.nvml.build"], cwd=_COPY, capture_output=True,
                               env={**os.environ, "PYTHONPATH": str(_COPY)}, timeout=600, check=False)
        if build.returncode != 0:
            # A mutant the compiler refuses shows nothing about the tests: an error to fix in the mutant list.
            return Outcome(area.name, mutant.file, "hand-written", 0, mutant.why, "error",
                           reason="does not build: " + build.stderr.decode(errors="replace")[-300:])
        result, seconds = run_tests(_COPY, area, timeout)
    finally:
        path.write_text(original)
        subprocess.run([sys.executable, "-m", "fakehw.nvml.build"], cwd=_COPY, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(_COPY)}, timeout=600, check=False)
    verdict = {"failed": "killed", "timeout": "killed", "passed": "survived"}[result]
    return Outcome(area.name, mutant.file, "hand-written", 0, f"-{mutant.before}\n+{mutant.after}\n({mutant.why})",
                   verdict, seconds)


# --------------------------------------------------------------------------------------------------- driver


def baseline(areas: list[Area], work: Path) -> dict[str, float]:
    """Each area's tests must pass unmutated (else its mutants prove nothing); their time sets the timeouts."""
    copy = make_copy(work, "baseline")
    seconds = {}
    for area in areas:
        result, took = run_tests(copy, area, area.timeout)
        if result != "passed":
            raise SystemExit(f"mutate: the tests of {area.name} ({' '.join(area.tests)}) do not pass unmutated "
                             f"({result}); fix them first")
        seconds[area.name] = took
        print(f"baseline {area.name:30} {took:6.1f} s", flush=True)
    shutil.rmtree(copy, ignore_errors=True)
    return seconds


def plan(areas: list[Area], sample: int, seed: int) -> list[tuple[Area, Spec | CMutant]]:
    jobs: list[tuple[Area, Spec | CMutant]] = []
    for area in areas:
        if area is NVML_C_AREA:
            jobs += [(area, m) for m in c_mutants()]
            continue
        specs = enumerate_specs(area)
        chosen = random.Random(f"{seed}:{area.name}").sample(specs, min(sample, len(specs))) if sample else specs
        print(f"mutants  {area.name:30} {len(specs):5} in all, {len(chosen)} sampled", flush=True)
        jobs += [(area, s) for s in sorted(chosen, key=lambda s: (s.module, s.line, s.operator))]
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/mutate.py", description=__doc__.split("\n\n")[0])
    names = [a.name for a in (*AREAS, NVML_C_AREA)]
    parser.add_argument("--area", action="append", choices=names, help="only these areas (repeatable)")
    parser.add_argument("--sample", type=int, default=30, help="mutants per area (0: all); default 30")
    parser.add_argument("--seed", type=int, default=16, help="sampling seed (default 16: the same sample each run)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested at once, each in its own copy")
    parser.add_argument("--work", default="/tmp/fhw-mutate", help="where the working copies go")
    parser.add_argument("--json", metavar="PATH", help="also write every outcome here")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("cosmic_ray") is None:
        print("tools/mutate.py: Cosmic Ray (the mutation engine) is not installed in this Python; `make mutate` "
              "installs it, or: .venv/bin/pip install -e '.[mutate]'", file=sys.stderr)
        return 2
    areas = [a for a in (*AREAS, NVML_C_AREA) if not args.area or a.name in args.area]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    times = baseline(areas, work)
    jobs = plan(areas, args.sample, args.seed)
    scores = {a.name: Score(a.name) for a in areas}
    known = load_equivalents()
    import multiprocessing

    counter = multiprocessing.Value("i", 0)
    try:
        with ProcessPoolExecutor(max_workers=args.jobs, initializer=_init_worker,
                                 initargs=(str(work), counter)) as pool:
            futures = []
            for area, item in jobs:
                timeout = max(60.0, 4 * times[area.name])
                fn = _run_c if isinstance(item, CMutant) else _run_python
                futures.append(pool.submit(fn, area, item, timeout))  # type: ignore[arg-type]
            for i, future in enumerate(futures, 1):
                _record(scores, future.result(), known, i, len(futures))
    finally:
        for copy in work.glob("worker-*"):
            shutil.rmtree(copy, ignore_errors=True)
    _print(scores, time.monotonic() - started)
    if args.json:
        Path(args.json).write_text(json.dumps({n: {**asdict(s), "score": s.score} for n, s in scores.items()},
                                              indent=2))
    return 0 if all(s.score >= TARGET for s in scores.values()) else 1


def _record(scores: dict[str, Score], outcome: Outcome, known: list[dict[str, str]], i: int, n: int) -> None:
    score = scores[outcome.area]
    score.sampled += 1
    if outcome.result == "survived" and (why := equivalent(outcome.module, outcome.diff, known)):
        outcome.result, outcome.reason = "equivalent", why
    counter = outcome.result if outcome.result in ("killed", "survived", "equivalent") else "errors"
    setattr(score, counter, getattr(score, counter) + 1)
    score.outcomes.append(outcome)
    mark = {"killed": ".", "survived": "S", "equivalent": "e"}.get(outcome.result, "E")
    print(f"[{i}/{n}] {mark} {outcome.area}: {outcome.module}:{outcome.line} {outcome.operator} "
          f"({outcome.seconds:.1f} s)", flush=True)


def _print(scores: dict[str, Score], seconds: float) -> None:
    print(f"\nmutation score per area (target {TARGET:.0%}; {seconds / 60:.1f} min)\n")
    print(f"{'area':30} {'sampled':>7} {'killed':>6} {'survived':>8} {'equiv.':>6} {'errors':>6} {'score':>6}")
    for s in scores.values():
        print(f"{s.area:30} {s.sampled:7} {s.killed:6} {s.survived:8} {s.equivalent:6} {s.errors:6} "
              f"{s.score:6.0%}{'' if s.score >= TARGET else '  < target'}")
    for s in scores.values():
        for o in s.outcomes:
            if o.result in ("survived", "error"):
                print(f"\n{o.result.upper()} {o.area}: {o.module}:{o.line} {o.operator} {o.reason}\n{o.diff.rstrip()}")


if __name__ == "__main__":
    sys.exit(main())
