"""Mutation testing of the core modules: does a realistic bug in them make some test fail? (``make mutate``)

For each area (:data:`AREAS`) Cosmic Ray enumerates the mutants of the area's modules (a chosen set of operators:
arithmetic and comparison swaps, negated conditions, flipped booleans and and/or, changed numbers, loops that run
zero times, swapped exception types, break/continue). A seeded random sample of them (``--sample``, per area) is
applied one at a time to a private copy of the tree, and the area's tests are run against it: a failing (or
timed-out) test run kills the mutant, a passing one lets it survive. The NVML shim's C sources get a seeded sample of
mechanical mutants (``tools/c_mutants.py``: the C forms of the same operators, each compiled before it counts, and
left out when the compiler turns it into the original's own code in every build the tests run), or
with ``--c-last``/``--c-written`` the hand-written ones (``tools/nvml-c-mutants.toml``); either is applied the same
way and rebuilt with the shim's own build.

The score of an area is killed / (killed + survived), with survivors listed in ``tools/mutation-equivalents.toml``
(mutants that cannot change behaviour, each with the reason) left out of both. Every survivor is printed with its
diff so it can be killed by a new test or added there with its reason. Entries of that file that match no mutant
of the run's modules any more (the code changed or moved) are listed in a warning at the end, so they do not rot.
Target: 90 % per area.

Runtime: every mutant costs one run of its area's tests (seconds for most areas), so the default sample of 30 per
area takes about 20-40 minutes with ``--jobs 2`` on a 2-core machine; ``--area`` runs one area, ``--sample 0`` all of
its mutants. It is not part of ``make test``/CI for that reason.

The working copies live under ``--work`` and are deleted afterwards (default: a new directory of its own under
$TMPDIR; a directory given is locked for the run, so two runs side by side never share one); the tree itself is
never modified. Results are also written as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import importlib.util
import json
import os
import pickle
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# tools/ is no package: its directory is put on sys.path above
from c_mutants import CMutation, SameCode, compiles, mutations, shim_cflags

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
    Area("nvml snapshot", ("fakehw/nvml/snapshot.py", "fakehw/nvml/snapfile.py", "fakehw/nvml/layout.py"),
         ("tests/nvml/test_layout.py", "tests/nvml/test_determinism.py", "tests/nvml/test_visibility.py",
          "tests/nvml/test_pynvml.py", "tests/nvml/test_events.py", "tests/nvml/test_live.py",
          "tests/nvml/test_captures.py", "tests/nvml/test_snapfile.py")),
    Area("agent faults/journal", ("fakehw/agent/faults.py", "fakehw/agent/journal.py"),
         ("tests/agent/test_fault_requests.py", "tests/agent/test_fault_defaults.py",
          "tests/hostile/test_journal_damage.py", "tests/hostile/test_journal_upgrade.py",
          "tests/hostile/test_journal_durability.py", "tests/agent/test_snapshot_compaction.py")),
    Area("sysfs renderers", ("fakehw/sysfs/node.py", "fakehw/sysfs/pci.py", "fakehw/sysfs/cpu.py",
                             "fakehw/sysfs/nvidia.py", "fakehw/sysfs/cxl.py"),
         ("tests/sysfs/test_consumers.py", "tests/sysfs/test_hwloc_profiles.py",
          "tests/sysfs/test_pci.py", "tests/sysfs/test_memory.py", "tests/sysfs/test_real_layouts.py",
          "tests/sysfs/test_kernel_abi.py", "tests/sysfs/test_cpu_caches.py"),
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
          "tests/scheduler/test_reference_policy_pools.py", "tests/scheduler/test_reference_policy_snapshot.py",
          "tests/scheduler/test_reference_policy_gangs.py")),
    Area("fabric lint", ("fakehw/fabric/lint.py",),
         ("tests/fabric/test_fabric_lint.py", "tests/fabric/test_fabric_lint_scope.py",
          "tests/fabric/test_fabric_lint_report.py")),
    Area("report verify", ("conformance/report/model.py", "conformance/provenance/verify.py",
                           "conformance/provenance/statement.py", "conformance/provenance/dsse.py",
                           "conformance/catalogue_versions.py"),
         ("tests/conformance/test_report_tamper.py", "tests/conformance/test_catalogue_versions.py",
          "tests/conformance/test_provenance_rules.py", "tests/conformance/test_report_signing.py"),
         # Not per mutant: the encrypted-key test and the keyless forgeries (each runs a suite, 2-5 s). What they
         # kill in the area (the loader's encrypted-key branch, a keyless run verified with --key) is killed in
         # milliseconds by test_provenance_rules.py; the other forgeries exercise keyless.py and sigstore.
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
                    "tests/nvml/test_events.py", "tests/nvml/test_live.py", "tests/nvml/test_topology.py",
                    "tests/nvml/test_captures.py", "tests/nvml/test_enum_bounds.py",
                    "tests/nvml/test_board_getters.py", "tests/nvml/test_session_and_fan_getters.py",
                    "tests/nvml/test_more_board_getters.py", "tests/nvml/test_link_fields.py",
                    # Every entry point before nvmlInit (NVML_ERROR_UNINITIALIZED, nvml.h; one process, < 1 s).
                    "tests/nvml/test_uninitialized.py",
                    # Every NULL output and foreign device handle nvml.h documents as NVML_ERROR_INVALID_ARGUMENT
                    # (one process per board, six boards: a few seconds).
                    "tests/nvml/test_documented_argument_errors.py",
                    "tests/nvml/test_versioned_struct_answers.py", "tests/nvml/test_setters_no_board_offers.py",
                    "tests/nvml/test_fields_no_captured_board_has.py",
                    # Every field id nvml.h pairs with a direct getter, on every built-in board with distinct
                    # non-zero counters: field and getter must agree (one subprocess per board, ~4 s together).
                    "tests/nvml/test_fields_match_getters.py",
                    # Every caller's length, count and struct version at the bounds nvml.h documents (the header
                    # compiled for its sizes and version words), a canary past each: six boards, a process each: 2-9 s.
                    "tests/nvml/test_buffer_sizes_and_versions.py",
                    # Every function nvml.h says takes a MIG device handle, given one (dgx-a100's gpu7, one process,
                    # about 1 s): not refused as an invalid device (2026-11-29: the two GPM ones were).
                    "tests/nvml/test_mig_handles_nvml_h_takes.py",
                    # Branches of device.c, links.c, gpm.c and fields.c no test above takes (h-cdev, h-cdev3: about
                    # 3 s).
                    "tests/nvml/test_getter_branches.py",
                    # The loader (core.c's fhw_validate, gpu_ok, snap_load) and its staleness checks: every rule of
                    # the snapshot format broken once and each bound met once; bad files, a file going bad and
                    # coming back under a running process (seed 10604's core.c:518), bad arguments (a few seconds
                    # together; 7 % of the mechanical mutants are in the loader, which no test above gives a bad
                    # file).
                    "tests/nvml/test_snapshot_validation.py", "tests/nvml/test_robustness.py",
                    # The shim as the agent's client (agentc.c, mig.c's agent_change) against a scripted stand-in
                    # agent: answers the real agent never gives (seed 10603's open mig.c:673, generation 0).
                    "tests/nvml/test_mig_agent_client.py",
                    # The same table with every read/write/recv/send/pread/poll interrupted once, then one byte
                    # short (POSIX EINTR and short counts), and the client's bounds: an answer filling its buffer
                    # exactly, a peer that never answers (a clock 1000 times fast), an answer still arriving at the
                    # bound (a clock that jumps 31 s), complete answers (RFC 9112 6.3) and one longer than the
                    # buffer from peers that then hold the connection: about 20 s.
                    "tests/nvml/test_interrupted_system_calls.py",
                    # MIG reconfiguration through the agent while a process holds handles (mig.c's handle registry;
                    # seed 10601's mutant mig.c:86 reused a destroyed instance's handle): about 40 s.
                    "tests/nvml/test_mig_pynvml.py",
                    # The GI registry exhausted by one process (280 instances over 6 snapshots, ~5 s): a new
                    # instance reuses a gone one's slot (mig.c:88's second loop).
                    "tests/nvml/test_mig_handle_reuse.py",
                    # Every GPU instance profile's compute instance profiles on every MIG board (nvml.h's shared
                    # engines, the MIG user guide's and published -lgip SMs), NULL arrays, a lost GPU's GPU
                    # instance (seed 10621's mig.c:183, 406, 142); addresses next to the instance handles, placement
                    # sizes and counts, MIG devices given to MIG-management calls, undefined CI profile versions
                    # (h-cmig5, seed 10730's mig.c:206 and :491): about 2 s.
                    "tests/nvml/test_mig_ci_profiles.py",
                    # Every call of the shim's sources under AddressSanitizer and UBSan (a write one past a buffer
                    # changes no answer: seed 10604's system.c:185): one sanitized build, about 30 s.
                    "tests/nvml/test_sanitizers.py::test_every_call_under_sanitizers",
                    # Four reader threads while the file is replaced 400 times (core.c's hazard slots, one per
                    # thread; seed 10610's core.c:555 gave every new thread the first thread's slot): about 6 s.
                    "tests/nvml/test_sanitizers.py::test_readers_never_see_a_half_written_snapshot",
                    # Every GPU and compute instance call under the sanitizers on snapshots whose compute instance
                    # profiles are the file's last bytes (mig.c:183's lookup one record too far), and an agent
                    # answer longer than the client's buffer (agentc.c:113's NUL one past it): under 1 s together.
                    "tests/nvml/test_sanitizers.py::test_every_mig_call_under_sanitizers",
                    "tests/nvml/test_sanitizers.py::test_an_agent_answer_longer_than_the_client_reads_under_sanitizers",
                    # A snapshot with the format's 256 GPU instance records: nothing written past the registry's
                    # tables (mig.c map_records, seed 10624's open mig.c:71): under 1 s.
                    "tests/nvml/test_sanitizers.py::test_a_full_gpu_instance_table_under_sanitizers",
                    # Every call, and the system-wide walks over the visible GPUs (GPU sets, NVLink bandwidth mode,
                    # handles by serial, UUID and bus id, an event set of every GPU), on a node of NV_MAX_DEVICES
                    # (32) GPUs: a walk one past the last reads past the per-GPU tables (seed 10712's system.c:395;
                    # kills `d < vis->count` as `<=` at system.c:174, 300, 395, events.c:147, links.c:279): < 1 s.
                    "tests/nvml/test_sanitizers.py::test_every_call_on_a_node_of_the_most_gpus_under_sanitizers",
                    # The event calls and the export table's unknown-GUID refusal with FAKEHW_NVML_TRACE set, so the
                    # trace-only formatting runs under the sanitizers (seed 10613's export.c:354, a GUID's hex one
                    # byte past its buffer): about 1 s.
                    "tests/nvml/test_sanitizers.py::test_events_under_sanitizers",
                    # The export table (export.c) is read only by the real nvidia-smi: its quick runs of each
                    # release judge it (the mechanical sample of seed 10601 found a loop that never ran there).
                    "tests/nvml/test_smi.py::test_each_nvidia_smi_accepts_only_its_own_release",
                    "tests/nvml/test_smi.py::test_the_runner_picks_the_branch_of_the_snapshot",
                    # nvidia-smi topo -m reads its cells through the export table (seed 10603's export.c:173).
                    "tests/nvml/test_smi.py::test_topology_matrix_sees_a_link_fault",
                    # nvidia-smi -q against the captured boards, -L, and topo -m beside fakehw topo (about 10 s):
                    # with them the area's tests run 89 % of export.c's lines and each of its 25 functions (67 %
                    # and 20 without; tools/c-coverage.py, 2026-11-28).
                    "tests/nvml/test_smi.py::test_query_runs_cleanly_with_no_more_na_than_the_real_board",
                    "tests/nvml/test_smi.py::test_list",
                    "tests/nvml/test_smi.py::test_query_compute_apps_lists_each_gpu_s_compute_processes",
                    "tests/nvml/test_smi.py::test_query_shows_each_process_with_the_type_its_release_documents",
                    # A MIG GPU's processes under their own MIG devices' instance ids (-q -x; export.c's filter by
                    # compute instance, seed 10619's export.c:65): about 3 s for the three releases.
                    "tests/nvml/test_smi.py::test_query_lists_each_mig_device_s_processes_under_its_own_instances",
                    "tests/nvml/test_smi.py::test_fakehw_topo_prints_what_nvidia_smi_535_prints",
                    # The host's PCIe gen, a GPU's outbound atomics and its memory's NUMA node (export.c slots 230,
                    # 226, 241: no 535-555 board has them) on an edited snapshot, -q -x and topo -m: about 1 s.
                    "tests/nvml/test_smi.py::"
                    "test_query_and_topology_print_the_host_s_pcie_gen_the_gpu_s_atomics_and_its_memory_s_numa_node"))
C_MUTANTS_FILE = ROOT / "tools" / "nvml-c-mutants.toml"
C_SOURCES = "fakehw/nvml/csrc"


def is_c(area: Area) -> bool:
    """Whether ``area`` is the C area (or a cut of it to some of its files, see :func:`restrict`)."""
    return area.name == NVML_C_AREA.name


def c_files(area: Area) -> list[str]:
    """The C files of the C area ``area``: every ``*.c`` of a directory it names, and the files it names."""
    files: list[str] = []
    for module in area.modules:
        path = ROOT / module
        files += sorted(str(p.relative_to(ROOT)) for p in path.glob("*.c")) if path.is_dir() else [module]
    return files


def c_generated(area: Area, sources: dict[str, str] | None = None) -> list[CMutation]:
    """Every mechanical mutant of the C area's files (``tools/c_mutants.py``), compiling or not; ``sources``: the
    files' text when the caller read them already."""
    sources = sources or {f: (ROOT / f).read_text() for f in c_files(area)}
    return [m for f, text in sources.items() for m in mutations(f, text)]


@dataclass(frozen=True)
class CSample:
    """A seeded draw of mechanical C mutants, and what the draw went past."""

    drawn: list[CMutation]
    total: int
    """How many mechanical mutants the area's files have, compiling or not."""
    refused: int
    """Drawn, but not C (the compiler refused them): drawn again."""
    same_code: int
    """Drawn, but the same object code as the original in every build the tests run (:class:`c_mutants.SameCode`):
    equivalent by construction, drawn again."""


def sample_c(area: Area, sample: int, seed: int) -> CSample:
    """A seeded sample of ``sample`` (0: every one) mechanical mutants of the C area that compile with the shim's
    flags and ``-Werror`` and change the code the tests run, drawn in a random order that depends only on the seed
    and the sources. A mutant that is not C tests nothing, and one the compiler turns into the original's own
    object code cannot be killed by any test: neither belongs in a score, so the draw goes on past both."""
    from fakehw.nvml import build

    sources = {f: (ROOT / f).read_text() for f in c_files(area)}
    every = c_generated(area, sources)
    order = random.Random(f"{seed}:{area.name}").sample(every, len(every))
    want = sample or len(every)
    chosen: list[CMutation] = []
    refused = same = 0
    with tempfile.TemporaryDirectory(prefix="fakehw-c-mutants-") as tmp:
        cc = os.environ.get("CC") or "cc"
        gen = build.generate(Path(tmp))
        cflags = shim_cflags(gen, cc)
        same_code = SameCode([cflags, shim_cflags(gen, cc, sanitized=True)])
        for m in order:
            if len(chosen) == want:
                break
            mutant = m.apply(sources[m.file])
            if not compiles(mutant, cflags):
                refused += 1
            elif same_code(m.file, sources[m.file], mutant):
                same += 1
            else:
                chosen.append(m)
    return CSample(sorted(chosen, key=lambda m: (m.file, m.start, m.operator)), len(every), refused, same)


def c_mutants() -> list[CMutant]:
    data = tomllib.loads(C_MUTANTS_FILE.read_text())
    return [CMutant(**m) for m in data["mutant"]]


def c_diff(mutant: CMutant) -> str:
    """A hand-written mutant shown and matched like a Python mutant's diff: its removed lines, then its added ones."""
    return "".join(f"-{line}\n" for line in mutant.before.splitlines()) + \
        "".join(f"+{line}\n" for line in mutant.after.splitlines())


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
    timeouts: int = 0
    """Of the killed: by a test run that timed out (twice) rather than failed."""
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


RETRY_FACTOR = 5
"""A run that times out is run again with this many times the limit before the timeout counts as a kill: the limit
comes from the baseline run, and on a machine whose load rose since then a slow pass looks like a hang (a helper's
journal sample had 9 of its 19 kills by timeout at load 10 after a baseline at load 2; run again, one survived)."""


def run_tests(copy: Path, area: Area, timeout: float) -> tuple[str, float]:
    """``passed``, ``failed`` or ``timeout`` for the area's tests in ``copy``, and the seconds it took; a timeout
    is tried once more with :data:`RETRY_FACTOR` times the limit."""
    result, seconds = _run_tests_once(copy, area, timeout)
    if result == "timeout":
        result, seconds = _run_tests_once(copy, area, timeout * RETRY_FACTOR)
    return result, seconds


def _run_tests_once(copy: Path, area: Area, timeout: float) -> tuple[str, float]:
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
        nodes = list(ast_nodes(get_ast_from_path(ROOT / module)))  # in the order the mutating visitor counts
        unobserved = type_hints(ROOT / module) + signature_markers(ROOT / module)
        for name in OPERATORS:
            operator = get_operator(name)()
            positions = [start for node in nodes for start, _ in operator.mutation_positions(node)]
            specs += [Spec(module, name, i, start[0]) for i, start in enumerate(positions)
                      if not any(a <= (start[0], start[1]) < b for a, b in unobserved)]
    return specs


def type_hints(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Spans of the type hints nothing evaluates (every module has ``from __future__ import annotations``):
    function signatures, local variables, dataclass fields. A mutant there (``X | None`` to ``X & None``) cannot
    change behaviour. Pydantic models' fields are evaluated, so they stay."""
    import ast

    source = path.read_text()
    tree = ast.parse(source)
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
    lines = source.split("\n")
    return [(char_position(lines, e.lineno, e.col_offset),
             char_position(lines, e.end_lineno or e.lineno, e.end_col_offset or 0)) for e in spans]


def char_position(lines: list[str], line: int, byte_col: int) -> tuple[int, int]:
    """(line, character column) of ``ast``'s (line, UTF-8 byte offset): Cosmic Ray gives mutants' positions in
    characters, so a span from ``ast`` on a line with non-ASCII text before it would otherwise end too far right
    (and filter out a mutant that follows it)."""
    return line, len(lines[line - 1].encode()[:byte_col].decode(errors="replace"))


def signature_markers(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Spans of the bare ``*`` (keyword-only parameters follow) and ``/`` (positional-only ones precede) of def and
    lambda signatures. Cosmic Ray takes them for binary operators and swaps them (``*`` to ``/`` and back), but they
    are how calls must spell their arguments, not arithmetic, and the swap is not a bug a person makes: ``def f(*,
    b)`` becomes a syntax error (every test fails at import), and ``def f(a, *, b)`` to ``def f(a, /, b)`` only
    fails a call that passes ``a`` by keyword (``/`` to ``*``: one that passes ``b`` by position). The function's
    behaviour is never in question, so such a mutant dies or survives on how its callers happen to be written (two
    of them were recorded equivalent for that reason in fakehw/fabric/lint.py).

    Positions are (line, character column) as Cosmic Ray gives them; ``ast`` columns are UTF-8 byte offsets."""
    import ast
    import io
    import tokenize

    source = path.read_text()
    lines = source.split("\n")
    ops = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.OP]

    def first(op: str, after: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
        token = next(t for t in ops if t.string == op and t.start >= after)
        return token.start, token.end

    def end(e: ast.expr) -> tuple[int, int]:
        return char_position(lines, e.end_lineno or e.lineno, e.end_col_offset or 0)

    spans = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + [*args.defaults]
        ends = [end(e) for pair in zip(positional, defaults, strict=True) for e in pair if e is not None]
        if args.posonlyargs:  # the "/" follows the last positional-only parameter (and its default)
            last = len(args.posonlyargs) - 1
            pair = [e for e in (positional[last], defaults[last]) if e is not None]
            spans.append(first("/", max(end(e) for e in pair)))
        if args.kwonlyargs and args.vararg is None:  # a bare "*" follows the positional ones, or opens the list
            spans.append(first("*", max(ends, default=char_position(lines, node.lineno, node.col_offset))))
    return spans


@contextmanager
def mutated(copy: Path, spec: Spec) -> Iterator[str | None]:
    """Apply ``spec`` to the module in ``copy`` for the block; yields the diff (None: nothing to mutate)."""
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
        yield changed_lines(original, mutated_code)
    finally:
        path.write_text(original)
        _forget_bytecode(path)


def _forget_bytecode(module: Path) -> None:
    for pyc in (module.parent / "__pycache__").glob(f"{module.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)


def changed_lines(original: str, mutant: str) -> str:
    """The lines a mutant removes (``-``) and adds (``+``), without context: how a survivor is shown and matched."""
    import difflib

    return "".join(line for line in difflib.unified_diff(original.splitlines(True), mutant.splitlines(True), n=0)
                   if line[:1] in "+-" and line[:3] not in ("+++", "---"))


# --------------------------------------------------------------------------------------------------- equivalents


class EquivalentsError(ValueError):
    """tools/mutation-equivalents.toml is not what the tool reads (named with the entry and the key)."""


@dataclass(frozen=True)
class Equivalent:
    """An entry of tools/mutation-equivalents.toml: a survivor that cannot change behaviour, and why."""

    module: str
    """The module's path, or ``*`` for any module."""
    before: str
    """The original line (whitespace trimmed), a ``-`` line of the survivor's diff."""
    after: str
    """The mutated line, a ``+`` line of the survivor's diff."""
    why: str
    line: int | None = None
    """The line the survivor is reported at (``module:line``): for text that occurs on several lines of the module
    (``continue``) where only one of them is equivalent. None: any line."""

    def matches(self, module: str, line: int, diff: str) -> bool:
        removed = [d[1:].strip() for d in diff.splitlines() if d.startswith("-")]
        added = [d[1:].strip() for d in diff.splitlines() if d.startswith("+")]
        return (self.module in (module, "*") and self.line in (None, line) and self.before.strip() in removed
                and self.after.strip() in added)


def load_equivalents(path: Path | None = None) -> list[Equivalent]:
    """The entries of ``path`` (default :data:`EQUIVALENTS`; none when it does not exist); a malformed one is an
    :class:`EquivalentsError`."""
    path = path or EQUIVALENTS
    if not path.is_file():
        return []
    try:
        entries = tomllib.loads(path.read_text()).get("equivalent", [])
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise EquivalentsError(f"{path}: {e}") from e
    if not isinstance(entries, list):
        raise EquivalentsError(f"{path}: `equivalent` must be an array of tables ([[equivalent]])")
    known = [_equivalent(path, i, entry) for i, entry in enumerate(entries, 1)]
    first: dict[tuple[str, str, str, int | None], int] = {}
    for i, e in enumerate(known, 1):
        key = (e.module, e.before.strip(), e.after.strip(), e.line)
        if key in first:  # two reasons for one mutant: a reader cannot tell which one the score relied on
            raise EquivalentsError(f"{path}: [[equivalent]] number {i} (module {e.module!r}, before {e.before!r}): "
                                   f"records the same mutant as number {first[key]}")
        first[key] = i
    return known


def _equivalent(path: Path, index: int, entry: object) -> Equivalent:
    where = f"{path}: [[equivalent]] number {index}"
    if not isinstance(entry, dict):
        raise EquivalentsError(f"{where} is not a table")
    where += f" (module {entry.get('module')!r}, before {entry.get('before')!r})"
    unknown = sorted(set(entry) - {"module", "before", "after", "why", "line"})
    if unknown:
        raise EquivalentsError(f"{where}: unknown key {', '.join(unknown)} (module, before, after, why, line)")
    for key in ("module", "before", "after", "why"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise EquivalentsError(f"{where}: `{key}` must be a non-empty string")
    line = entry.get("line")
    if line is not None and (type(line) is not int or line < 1):
        raise EquivalentsError(f"{where}: `line` must be a line number (1 or more), not {line!r}")
    return Equivalent(entry["module"], entry["before"], entry["after"], entry["why"], line)


def equivalent(module: str, line: int, diff: str, known: list[Equivalent]) -> str:
    """The recorded reason a survivor is equivalent ("" if it is not recorded)."""
    return next((e.why for e in known if e.matches(module, line, diff)), "")


@dataclass(frozen=True)
class Stale:
    entry: Equivalent
    reason: str


def stale_equivalents(known: list[Equivalent], areas: list[Area]) -> list[Stale]:
    """The entries that match no mutant the tool makes any more, so they would hide nothing and only rot: their
    module is in no area, or no mutant of it (every one Cosmic Ray enumerates, not only a sample; the hand-written
    ones for C) has their lines (and line number). Judged for the modules of ``areas``; a ``*`` entry only when
    ``areas`` are all the Python areas (then no module of any area has the mutant)."""
    python = [a for a in areas if not is_c(a)]
    modules = {m for a in python for m in a.modules}
    every = set(AREAS) <= set(python)
    mutants = _ModuleMutants()
    stale = []
    for entry in known:
        if entry.module == "*":
            if every and not any(mutants.match(m, entry) for m in sorted(modules)):
                stale.append(Stale(entry, "no mutant of any area's module has these lines"))
        elif entry.module.startswith(f"{C_SOURCES}/"):
            diffs = [c_diff(m) for m in c_mutants() if m.file == entry.module]
            if any(is_c(a) for a in areas) and not any(entry.matches(entry.module, 0, d) for d in diffs) and \
                    not _c_generated_match(entry):
                stale.append(Stale(entry, f"neither a mutant in {C_MUTANTS_FILE.relative_to(ROOT)} nor a mechanical "
                                          "one (tools/c_mutants.py) has these lines"))
        elif entry.module not in {m for a in AREAS for m in a.modules}:
            stale.append(Stale(entry, "its module is in no area of tools/mutate.py"))
        elif entry.module in modules and not mutants.match(entry.module, entry):
            where = f"at line {entry.line}" if entry.line else "on any line"
            stale.append(Stale(entry, f"no mutant of the module has these lines {where} (the code changed or moved, "
                                      "or the tool no longer makes such mutants)"))
    return stale


def _c_generated_match(entry: Equivalent) -> bool:
    """Whether a mechanical mutant of the entry's C file has its lines (at its line, when it gives one)."""
    path = ROOT / entry.module
    if not path.is_file():
        return False
    source = path.read_text()
    lines = {entry.line} if entry.line else {n for n, text in enumerate(source.splitlines(), 1)
                                               if text.strip() == entry.before.strip()}
    return any(entry.matches(entry.module, m.line, changed_lines(source, m.apply(source)))
               for m in mutations(entry.module, source) if m.line in lines)


class _ModuleMutants:
    """Every mutant of a module, enumerated once, and the diffs of those an entry is checked against (made when
    first needed: each costs a parse of the module)."""

    WINDOW = 50
    """How many lines above a line with an entry's text a mutant is looked for: a mutant changes the line its
    operator is on and, for a loop's iterable or an exception type written over several lines, the lines below it."""

    def __init__(self) -> None:
        self._specs: dict[str, list[Spec]] = {}
        self._diffs: dict[Spec, str] = {}
        self._trees: dict[str, bytes] = {}
        """Per module: its parse tree, pickled. Each mutant needs a tree of its own (Cosmic Ray's visitor edits the
        tree it walks); unpickling a copy costs about a tenth of parsing the module again, which was most of the
        time of judging every entry (the test of this file took 53 s in CI)."""

    def match(self, module: str, entry: Equivalent) -> bool:
        source = (ROOT / module).read_text()
        if module not in self._specs:
            self._specs[module] = enumerate_specs(Area(module, (module,), ()))
        specs = self._specs[module]
        if entry.line is not None:
            candidates = [s for s in specs if s.line == entry.line]
        else:
            lines = {n for n, text in enumerate(source.splitlines(), 1) if text.strip() == entry.before.strip()}
            candidates = [s for s in specs if s.line in lines]  # nearly always there: looked at first
            candidates += [s for s in specs if s.line not in lines and any(n - self.WINDOW <= s.line < n
                                                                            for n in lines)]
        return any(entry.matches(module, s.line, self._diff(source, s)) for s in candidates)

    def _diff(self, source: str, spec: Spec) -> str:
        """The lines ``spec`` changes: what ``cosmic_ray.mutating.mutate_code`` makes (its visitor, on a copy of
        the module's tree instead of a new parse)."""
        if spec not in self._diffs:
            from cosmic_ray.mutating import MutationVisitor
            from cosmic_ray.plugins import get_operator

            visitor = MutationVisitor(spec.occurrence, get_operator(spec.operator)())
            mutant = visitor.walk(pickle.loads(self._tree(spec.module, source))).get_code()
            self._diffs[spec] = changed_lines(source, mutant) if visitor.mutation_applied else ""
        return self._diffs[spec]

    def _tree(self, module: str, source: str) -> bytes:
        if module not in self._trees:
            from cosmic_ray.ast import get_ast

            self._trees[module] = pickle.dumps(get_ast(source), protocol=pickle.HIGHEST_PROTOCOL)
        return self._trees[module]


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
    original = (_COPY / mutant.file).read_text()
    if original.count(mutant.before) != 1:
        return Outcome(area.name, mutant.file, "hand-written", 0, mutant.before, "error",
                       reason="the mutant's text is not in the file exactly once (update tools/nvml-c-mutants.toml)")
    outcome = _run_c_source(area, mutant.file, original.replace(mutant.before, mutant.after), timeout)
    diff = mutant.why if outcome.result == "error" else f"{c_diff(mutant)}({mutant.why})"
    return dataclasses.replace(outcome, operator="hand-written", diff=diff)


def _run_c_generated(area: Area, mutation: CMutation, timeout: float) -> Outcome:
    assert _COPY is not None
    original = (_COPY / mutation.file).read_text()
    mutated_source = mutation.apply(original)
    outcome = _run_c_source(area, mutation.file, mutated_source, timeout)
    return dataclasses.replace(outcome, operator=mutation.operator, line=mutation.line,
                               diff=changed_lines(original, mutated_source))


def _run_c_source(area: Area, file: str, mutated_source: str, timeout: float) -> Outcome:
    """The area's tests against the shim built with ``file`` holding ``mutated_source``; the file and the build
    are put back afterwards."""
    assert _COPY is not None
    path = _COPY / file
    original = path.read_text()
    path.write_text(mutated_source)
    try:
        build = _build_shim(_COPY)
        if build.returncode != 0:
            # A mutant the compiler refuses shows nothing about the tests: an error to fix in the mutant list.
            return Outcome(area.name, file, "", 0, "", "error",
                           reason="does not build: " + build.stderr.decode(errors="replace")[-300:])
        result, seconds = run_tests(_COPY, area, timeout)
    finally:
        path.write_text(original)
        _build_shim(_COPY)
    verdict = {"failed": "killed", "timeout": "killed", "passed": "survived"}[result]
    return Outcome(area.name, file, "", 0, "", verdict, seconds, "timed out" if result == "timeout" else "")


def _build_shim(copy: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "fakehw.nvml.build"], cwd=copy, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(copy)}, timeout=600, check=False)


# --------------------------------------------------------------------------------------------------- driver


WORK_LOCK = ".mutate.lock"


class WorkInUse(RuntimeError):
    """Another run holds the ``--work`` directory."""


@contextmanager
def work_dir(given: str | None) -> Iterator[Path]:
    """The directory this run's copies go to, for this run alone. Two runs sharing one delete each other's copies
    (:func:`make_copy` clears a copy of the same name first, the end of a run clears every ``worker-*``), and a test
    run whose tree disappears under it fails: a kill no test made (two runs side by side on the default directory
    did this on 2026-11-26, one failing its baseline). Without ``--work`` each run gets a new directory, removed at
    the end; a given one is locked (flock(2), released when the run ends however it ends) and a second run refused."""
    if given is None:
        path = Path(tempfile.mkdtemp(prefix="fhw-mutate-"))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
        return
    path = Path(given)
    path.mkdir(parents=True, exist_ok=True)
    with open(path / WORK_LOCK, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkInUse(f"another tools/mutate.py run is using {path} (it would delete its copies): give this "
                            "one another --work, or none (a directory of its own)") from None
        yield path


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


Job = Spec | CMutant | CMutation
"""A mutant to run: a Python one (Cosmic Ray's), a hand-written C one, or a mechanical C one."""


def plan(areas: list[Area], sample: int, seed: int, c_last: int = 0,
         c_written: bool = False) -> list[tuple[Area, Job]]:
    """The mutants to run: per Python area a seeded sample of ``sample`` (0: all); for the C area a seeded sample of
    mechanical mutants, or the hand-written ones (the last ``c_last``, or all with ``c_written``)."""
    jobs: list[tuple[Area, Job]] = []
    for area in areas:
        if is_c(area) and (c_last or c_written):
            files = set(c_files(area))
            written = [m for m in c_mutants() if m.file in files]
            jobs += [(area, m) for m in (written[-c_last:] if c_last else written)]
            continue
        if is_c(area):
            c = sample_c(area, sample, seed)
            print(f"mutants  {area.name:30} {c.total:5} in all, {len(c.drawn)} sampled ({c.refused} drawn did not "
                  f"compile, {c.same_code} compiled to the original's code in both builds the tests run; both drawn "
                  "again)", flush=True)
            jobs += [(area, m) for m in c.drawn]
            continue
        specs = enumerate_specs(area)
        chosen = random.Random(f"{seed}:{area.name}").sample(specs, min(sample, len(specs))) if sample else specs
        print(f"mutants  {area.name:30} {len(specs):5} in all, {len(chosen)} sampled", flush=True)
        jobs += [(area, s) for s in sorted(chosen, key=lambda s: (s.module, s.line, s.operator))]
    return jobs


def restrict(areas: list[Area], modules: list[str]) -> list[Area]:
    """The areas of ``areas`` that hold one of ``modules``, each cut to those modules (its tests unchanged): a sample
    of one module's mutants, to measure a module on its own (snapfile.py, 142 of the nvml snapshot area's 595
    mutants on 2026-11-27, had no sample of its own). A module no Python area of ``areas`` holds is a ValueError
    naming the ones they do."""
    python = [a for a in areas if not is_c(a)]
    held = [m for a in python for m in a.modules]
    c_area = next((a for a in areas if is_c(a)), None)
    held_c = c_files(c_area) if c_area is not None else []
    unknown = [m for m in modules if m not in held and m not in held_c]
    if unknown:
        raise ValueError(f"--module {', '.join(unknown)}: not a module of the areas run "
                         f"({', '.join([*held, *(f'{C_SOURCES}/*.c' for _ in held_c[:1])])})")
    cut = [dataclasses.replace(a, modules=tuple(m for m in a.modules if m in modules))
           for a in python if any(m in modules for m in a.modules)]
    chosen_c = tuple(m for m in modules if m in held_c)
    if c_area is not None and chosen_c:
        cut.append(dataclasses.replace(c_area, modules=chosen_c))
    return cut


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/mutate.py", description=__doc__.split("\n\n")[0])
    names = [a.name for a in (*AREAS, NVML_C_AREA)]
    parser.add_argument("--area", action="append", choices=names, help="only these areas (repeatable)")
    parser.add_argument("--sample", type=int, default=30, help="mutants per area (0: all); default 30")
    parser.add_argument("--seed", type=int, default=16,
                        help="sampling seed (default 16: the same sample each run while the modules do not change); "
                             "each seed draws from all of an area's mutants, so two seeds may share some")
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested at once, each in its own copy")
    parser.add_argument("--work", help="where the working copies go (default: a new directory under $TMPDIR)")
    parser.add_argument("--json", metavar="PATH", help="also write every outcome here")
    parser.add_argument("--module", action="append", metavar="PATH",
                        help="only these modules of the areas (repeatable; a path as in the areas, e.g. "
                             "fakehw/nvml/snapfile.py, or a C file such as fakehw/nvml/csrc/mig.c): the sample is "
                             "drawn from their mutants alone and the areas "
                             "holding none of them are left out; the tests run are still the whole area's")
    parser.add_argument("--c-last", type=int, default=0, metavar="N",
                        help="nvml C getters: the last N hand-written mutants of tools/nvml-c-mutants.toml (a new "
                             "round's fresh figure; --sample does not apply to them) instead of a sample of "
                             "mechanical ones")
    parser.add_argument("--c-written", action="store_true",
                        help="nvml C getters: every hand-written mutant of tools/nvml-c-mutants.toml (the bugs "
                             "earlier rounds chose; all killed or recorded) instead of a sample of mechanical ones")
    args = parser.parse_args(argv)
    if args.c_last < 0:
        parser.error("--c-last must be 0 (all) or a positive number of mutants")
    if importlib.util.find_spec("cosmic_ray") is None:
        print("tools/mutate.py: Cosmic Ray (the mutation engine) is not installed in this Python; `make mutate` "
              "installs it, or: .venv/bin/pip install -e '.[mutate]'", file=sys.stderr)
        return 2
    areas = [a for a in (*AREAS, NVML_C_AREA) if not args.area or a.name in args.area]
    if args.module:
        try:
            areas = restrict(areas, args.module)
        except ValueError as e:
            parser.error(str(e))
    try:
        known = load_equivalents()
    except EquivalentsError as e:
        print(f"tools/mutate.py: {e}", file=sys.stderr)
        return 2
    try:
        with work_dir(args.work) as work:
            return _run(args, areas, known, work)
    except WorkInUse as e:
        print(f"tools/mutate.py: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, areas: list[Area], known: list[Equivalent], work: Path) -> int:
    """Baseline, sample, mutants, scores: the run itself, its copies under ``work``."""
    started = time.monotonic()
    times = baseline(areas, work)
    jobs = plan(areas, args.sample, args.seed, args.c_last, args.c_written)
    scores = {a.name: Score(a.name) for a in areas}
    print(f"checking the {len(known)} entries of {EQUIVALENTS.relative_to(ROOT)} against the mutants", flush=True)
    stale = stale_equivalents(known, areas)
    import multiprocessing

    counter = multiprocessing.Value("i", 0)
    try:
        with ProcessPoolExecutor(max_workers=args.jobs, initializer=_init_worker,
                                 initargs=(str(work), counter)) as pool:
            futures = []
            for area, item in jobs:
                timeout = max(60.0, 4 * times[area.name])
                fn = _run_c if isinstance(item, CMutant) else \
                    _run_c_generated if isinstance(item, CMutation) else _run_python
                futures.append(pool.submit(fn, area, item, timeout))  # type: ignore[arg-type]
            for i, future in enumerate(futures, 1):
                _record(scores, future.result(), known, i, len(futures))
    finally:
        for copy in work.glob("worker-*"):
            shutil.rmtree(copy, ignore_errors=True)
    _print(scores, time.monotonic() - started)
    _warn_stale(stale)
    if args.json:
        Path(args.json).write_text(json.dumps({n: {**asdict(s), "score": s.score} for n, s in scores.items()},
                                              indent=2))
    return 0 if all(s.score >= TARGET for s in scores.values()) else 1


def _record(scores: dict[str, Score], outcome: Outcome, known: list[Equivalent], i: int, n: int) -> None:
    score = scores[outcome.area]
    score.sampled += 1
    if outcome.result == "survived" and (why := equivalent(outcome.module, outcome.line, outcome.diff, known)):
        outcome.result, outcome.reason = "equivalent", why
    counter = outcome.result if outcome.result in ("killed", "survived", "equivalent") else "errors"
    setattr(score, counter, getattr(score, counter) + 1)
    if outcome.result == "killed" and outcome.reason == "timed out":
        score.timeouts += 1
    score.outcomes.append(outcome)
    mark = {"killed": ".", "survived": "S", "equivalent": "e"}.get(outcome.result, "E")
    print(f"[{i}/{n}] {mark} {outcome.area}: {outcome.module}:{outcome.line} {outcome.operator} "
          f"({outcome.seconds:.1f} s)", flush=True)


def _print(scores: dict[str, Score], seconds: float) -> None:
    print(f"\nmutation score per area (target {TARGET:.0%}; {seconds / 60:.1f} min)\n")
    print(f"{'area':30} {'sampled':>7} {'killed':>6} {'(timeout)':>9} {'survived':>8} {'equiv.':>6} {'errors':>6} "
          f"{'score':>6}")
    for s in scores.values():
        print(f"{s.area:30} {s.sampled:7} {s.killed:6} {s.timeouts:9} {s.survived:8} {s.equivalent:6} {s.errors:6} "
              f"{s.score:6.0%}{'' if s.score >= TARGET else '  < target'}")
    for s in scores.values():
        for o in s.outcomes:
            if o.result in ("survived", "error"):
                print(f"\n{o.result.upper()} {o.area}: {o.module}:{o.line} {o.operator} {o.reason}\n{o.diff.rstrip()}")



def _warn_stale(stale: list[Stale]) -> None:
    """Entries of the equivalents file that hide nothing any more: to delete, or to update where the code moved."""
    if not stale:
        return
    print(f"\nWARNING: {len(stale)} entries of {EQUIVALENTS.relative_to(ROOT)} match no mutant any more "
          "(delete them, or update them where the code moved):")
    for s in stale:
        line = f":{s.entry.line}" if s.entry.line else ""
        print(f"  {s.entry.module}{line}: {s.entry.before.strip()!r} -> {s.entry.after.strip()!r}: {s.reason}")


if __name__ == "__main__":
    sys.exit(main())
