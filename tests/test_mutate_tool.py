"""``tools/mutate.py`` (``make mutate``) run where its engine is not installed says how to get it, not a traceback."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "mutate.py"


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fakehw_mutate_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_missing_engine_is_named_with_the_command_that_installs_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    tool = _load_tool()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "cosmic_ray" else real(name, *a))
    assert tool.main(["--area", "fabric lint", "--work", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Cosmic Ray" in err and "make mutate" in err and ".[mutate]" in err
    assert list(tmp_path.iterdir()) == []  # nothing started


# ------------------------------------------------------------------------- the equivalents file (issue 16)

MODULE = "fakehw/sysfs/cxl.py"  # a module of an area with a bare `continue` on several lines
CONTINUE = 'module = "fakehw/sysfs/cxl.py"\nbefore = "continue"\nafter = "break"\nwhy = "w"\n'


def _continue_lines() -> list[int]:
    """The lines of the module with a bare ``continue`` (read here, so the tests follow the code when it moves)."""
    lines = [n for n, text in enumerate((Path(__file__).resolve().parents[1] / MODULE).read_text().splitlines(), 1)
             if text.strip() == "continue"]
    assert len(lines) >= 2, "cxl.py no longer has two `continue` lines: pick another module with repeated text"
    return lines


def _equivalents(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "equivalents.toml"
    path.write_text(text)
    return path


def test_an_entry_with_a_line_matches_only_the_survivor_reported_there(tmp_path: Path) -> None:
    tool = _load_tool()
    survivor = "-            continue\n+            break\n"
    anywhere, at_61 = tool.load_equivalents(_equivalents(tmp_path, f"[[equivalent]]\n{CONTINUE}\n"
                                                                   f"[[equivalent]]\n{CONTINUE}line = 61\n"))
    assert at_61.line == 61 and anywhere.line is None
    assert tool.equivalent(MODULE, 61, survivor, [at_61]) == "w"
    assert tool.equivalent(MODULE, 138, survivor, [at_61]) == ""
    assert tool.equivalent(MODULE, 138, survivor, [anywhere]) == "w"
    assert tool.equivalent("fakehw/sysfs/cpu.py", 61, survivor, [at_61]) == ""


def test_before_is_the_removed_line_and_after_the_added_one(tmp_path: Path) -> None:
    tool = _load_tool()
    [entry] = tool.load_equivalents(_equivalents(tmp_path, f"[[equivalent]]\n{CONTINUE}"))
    assert tool.equivalent(MODULE, 61, "-            break\n+            continue\n", [entry]) == ""


@pytest.mark.parametrize(("entry", "error"), [
    (f"{CONTINUE}line = 0\n", "`line` must be a line number (1 or more), not 0"),
    (f"{CONTINUE}line = \"61\"\n", "`line` must be a line number (1 or more), not '61'"),
    (f"{CONTINUE}line = true\n", "`line` must be a line number (1 or more), not True"),
    (f"{CONTINUE}lines = 61\n", "unknown key lines (module, before, after, why, line)"),
    (CONTINUE.replace('why = "w"\n', ""), "`why` must be a non-empty string"),
    (CONTINUE.replace('after = "break"', 'after = ""'), "`after` must be a non-empty string"),
    (CONTINUE.replace('why = "w"', 'why = "another reason"'), "records the same mutant as number 1"),
])
def test_a_malformed_entry_is_named_with_its_key(tmp_path: Path, entry: str, error: str) -> None:
    tool = _load_tool()
    path = _equivalents(tmp_path, f"[[equivalent]]\n{CONTINUE}\n[[equivalent]]\n{entry}")
    with pytest.raises(tool.EquivalentsError) as e:
        tool.load_equivalents(path)
    assert str(e.value) == (f"{path}: [[equivalent]] number 2 (module '{MODULE}', before 'continue'): "
                            f"{error}")


def test_a_malformed_file_stops_the_run_before_anything_starts(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    tool = _load_tool()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # as if the engine were installed: the file is read first
                        lambda name, *a: real("json") if name == "cosmic_ray" else real(name, *a))
    bad = _equivalents(tmp_path, "[[equivalent]]\nmodule = \n")
    monkeypatch.setattr(tool, "EQUIVALENTS", bad)
    work = tmp_path / "work"
    assert tool.main(["--area", "fabric lint", "--work", str(work)]) == 2
    assert f"tools/mutate.py: {bad}: " in capsys.readouterr().err
    assert not work.exists()


def test_stale_entries_are_those_no_mutant_matches(tmp_path: Path) -> None:
    pytest.importorskip("cosmic_ray")
    tool = _load_tool()
    first, second = _continue_lines()[:2]
    gone = next(n for n in range(first + 1, second) if n not in _mutant_lines(tool, MODULE))
    entries = tool.load_equivalents(_equivalents(tmp_path, "".join(
        f"[[equivalent]]\n{text}\n" for text in (
            CONTINUE, f"{CONTINUE}line = {first}\n", f"{CONTINUE}line = {second}\n",
            f"{CONTINUE}line = {gone}\n",  # no mutant is reported there
            CONTINUE.replace('before = "continue"', 'before = "continue  # gone"'),  # the text is gone
            CONTINUE.replace(MODULE, "fakehw/sysfs/nowhere.py"),  # in no area
            CONTINUE.replace(MODULE, "fakehw/fabric/lint.py"),  # in an area not run: not judged
            CONTINUE.replace(MODULE, "*").replace('"continue"', '"continue  # gone"')))))  # not every area: not judged
    sysfs = next(a for a in tool.AREAS if MODULE in a.modules)
    stale = tool.stale_equivalents(entries, [sysfs])
    assert [(s.entry.module, s.entry.line, s.entry.before) for s in stale] == [
        (MODULE, gone, "continue"), (MODULE, None, "continue  # gone"), ("fakehw/sysfs/nowhere.py", None, "continue")]
    assert "in no area" in stale[2].reason


def _mutant_lines(tool: ModuleType, module: str) -> set[int]:
    return {s.line for s in tool.enumerate_specs(tool.Area(module, (module,), ()))}


def test_stale_entries_are_a_warning_naming_each(capsys: pytest.CaptureFixture[str]) -> None:
    tool = _load_tool()
    entry = tool.Equivalent(MODULE, "continue", "break", "w", 61)
    tool._warn_stale([tool.Stale(entry, "no mutant of the module has these lines at line 61")])
    out = capsys.readouterr().out
    assert "WARNING: 1 entries of tools/mutation-equivalents.toml match no mutant any more" in out
    assert f"{MODULE}:61: 'continue' -> 'break': no mutant of the module has these lines at line 61" in out
    tool._warn_stale([])
    assert capsys.readouterr().out == ""


# ------------------------------------------------------------------------- signature markers are not mutated

SIGNATURES = '''from __future__ import annotations


def kw(a: int, *, b: int) -> int:
    return a * b


def kw_first(*, b: int = 2 * 3) -> int:
    return b


def pos(a: float = 6 / 3, /, b: float = 1) -> float:
    return a / b


def both(a, /, b, *, c): ...


def star_args(a, *args, b): ...


async def coro(name="éééé", *, wait=True): ...


g = lambda a, *, b: a * b


class C:
    def m(self, x: int = 2 * 2, *,
          y: int = 3) -> int:
        return x
'''


def _at(line: int, prefix: str) -> tuple[int, int]:
    """(line, character column) of what follows ``prefix`` on ``line`` of SIGNATURES."""
    assert SIGNATURES.split("\n")[line - 1].startswith(prefix)
    return line, len(prefix)


MARKERS = [_at(4, "def kw(a: int, "), _at(8, "def kw_first("), _at(12, "def pos(a: float = 6 / 3, "),
           _at(16, "def both(a, "), _at(16, "def both(a, /, b, "), _at(22, 'async def coro(name="éééé", '),
           _at(25, "g = lambda a, "), _at(29, "    def m(self, x: int = 2 * 2, ")]


def test_signature_markers_are_the_bare_star_and_slash_of_signatures(tmp_path: Path) -> None:
    tool = _load_tool()
    module = tmp_path / "m.py"
    module.write_text(SIGNATURES)
    compile(SIGNATURES, "m.py", "exec")  # the sample is Python
    spans = tool.signature_markers(module)
    assert sorted(start for start, _ in spans) == sorted(MARKERS)
    assert all(end == (line, col + 1) for (line, col), end in spans)


def test_enumeration_skips_signature_markers_but_not_arithmetic(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cosmic_ray")
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.plugins import get_operator

    tool = _load_tool()
    (tmp_path / "m.py").write_text(SIGNATURES)
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    swaps = ("core/ReplaceBinaryOperator_Mul_Div", "core/ReplaceBinaryOperator_Div_Mul")
    tree = get_ast_from_path(tmp_path / "m.py")
    offered = {start for name in swaps for node in ast_nodes(tree)
               for start, _ in get_operator(name)().mutation_positions(node)}
    assert set(MARKERS) <= offered  # Cosmic Ray does offer them: the filter is what keeps them out
    specs = [s for s in tool.enumerate_specs(tool.Area("t", ("m.py",), ())) if s.operator in swaps]
    # a * b, the default 2 * 3, the default 6 / 3, a / b, the lambda's a * b, the default 2 * 2: one mutant each
    assert sorted(s.line for s in specs) == [5, 8, 12, 13, 25, 29]
    assert len(specs) == len(offered) - len(MARKERS)


HINTED = '''from __future__ import annotations


def f(label: str = "éééé", size: int | None = None) -> int | None:
    width: int | None = size
    return width
'''


def test_type_hint_spans_are_in_characters_as_cosmic_ray_counts(tmp_path: Path) -> None:
    """A hint after non-ASCII text on its line: ``ast`` counts UTF-8 bytes, Cosmic Ray characters. The expected
    columns are where ``str.index`` finds the hints in the line (characters), not anything ``ast`` says."""
    tool = _load_tool()
    module = tmp_path / "m.py"
    module.write_text(HINTED)
    line = HINTED.split("\n")[3]
    size_hint = line.index("int | None")
    returns = line.index("int | None", size_hint + 1)
    expected = [((4, line.index("str")), (4, line.index("str") + 3)),
                ((4, size_hint), (4, size_hint + len("int | None"))),
                ((4, returns), (4, returns + len("int | None"))),
                ((5, 11), (5, 21))]
    assert sorted(tool.type_hints(module)) == expected


def test_the_recorded_equivalents_all_match_a_mutant_of_todays_code() -> None:
    """Every entry of tools/mutation-equivalents.toml still names a mutant the tool makes. An entry left behind by
    a code change hides nothing today but would hide a *different* survivor that comes to match it later, and it
    tells a reader a reason about code that no longer exists: the file is part of the score a stranger checks, so
    it is kept exact here rather than by a warning nobody reads."""
    pytest.importorskip("cosmic_ray")
    tool = _load_tool()
    stale = tool.stale_equivalents(tool.load_equivalents(), [*tool.AREAS, tool.NVML_C_AREA])
    assert not stale, "\n".join(f"{s.entry.module}:{s.entry.line or ''} {s.entry.before!r}: {s.reason}"
                                for s in stale)


# ------------------------------------------------------------------------- a timeout is tried again before it kills


def test_a_timeout_is_tried_again_with_a_longer_limit_before_it_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit comes from the baseline run; a pass slowed by load that rose since must not count as a kill (the
    journal area's seed 10131 printed 95 % with 9 kills by timeout; run again, 89 %)."""
    tool = _load_tool()
    limits: list[float] = []
    answers = iter([("timeout", 60.0), ("passed", 70.0)])

    def once(copy: Path, area: object, timeout: float) -> tuple[str, float]:
        limits.append(timeout)
        return next(answers)

    monkeypatch.setattr(tool, "_run_tests_once", once)
    assert tool.run_tests(Path("."), None, 60.0) == ("passed", 70.0)
    assert limits == [60.0, 60.0 * tool.RETRY_FACTOR]


def test_kills_by_timeout_are_counted_apart(capsys: pytest.CaptureFixture[str]) -> None:
    tool = _load_tool()
    scores = {"a": tool.Score("a")}
    tool._record(scores, tool.Outcome("a", "m.py", "op", 1, "-x\n+y\n", "killed", 1.0, "timed out"), [], 1, 2)
    tool._record(scores, tool.Outcome("a", "m.py", "op", 2, "-x\n+z\n", "killed", 1.0), [], 2, 2)
    assert (scores["a"].killed, scores["a"].timeouts) == (2, 1)
    tool._print(scores, 60.0)
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("a "))
    assert row.split() == ["a", "2", "2", "1", "0", "0", "0", "100%"]


# ------------------------------------------------------------------------- runs side by side (issue 16)


def test_runs_without_work_get_a_directory_each_removed_at_the_end() -> None:
    """Two runs on one directory delete each other's copies (a copy of the same name is cleared first, the end of a
    run clears every ``worker-*``), and a test run whose tree vanishes fails: a kill no test made. Two runs side by
    side with the old default (/tmp/fhw-mutate) did this on 2026-11-26: one failed its baseline, the other had its
    baseline copy cleared under it."""
    tool = _load_tool()
    with tool.work_dir(None) as first, tool.work_dir(None) as second:
        assert first != second and first.is_dir() and second.is_dir()
    assert not first.exists() and not second.exists()


def test_a_work_directory_in_use_is_refused_before_anything_starts(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A ``--work`` another run holds is refused, naming it, before a baseline copy is made there; once that run
    ends the directory can be used again."""
    tool = _load_tool()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # as if the engine were installed
                        lambda name, *a: real("json") if name == "cosmic_ray" else real(name, *a))

    def no_baseline(areas: object, work: Path) -> dict[str, float]:
        raise AssertionError(f"a baseline was started in {work}")

    monkeypatch.setattr(tool, "baseline", no_baseline)
    work = tmp_path / "work"
    with tool.work_dir(str(work)):
        assert tool.main(["--area", "fabric lint", "--work", str(work)]) == 2
    assert f"tools/mutate.py: another tools/mutate.py run is using {work}" in capsys.readouterr().err
    with tool.work_dir(str(work)) as again:
        assert again == work


def test_a_negative_c_last_is_refused_with_what_it_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """``--c-last N`` picks a round of hand-written C mutants by its size; a negative N would silently pick all but
    the first |N| (a Python slice), so it is refused by argparse (exit 2) with what the option takes."""
    tool = _load_tool()
    with pytest.raises(SystemExit) as exit_info:
        tool.main(["--area", "nvml C getters", "--c-last", "-1"])
    assert exit_info.value.code == 2
    assert "--c-last must be 0 (all) or a positive number of mutants" in capsys.readouterr().err


# ------------------------------------------------------------------------- one module's sample (issue 16)


def test_module_draws_the_sample_from_that_module_alone() -> None:
    """``--module`` measures one module of an area on its own (the nvml snapshot area's pooled samples drew mostly
    from snapshot.py, never snapfile.py alone): every mutant planned is of that module, all of its mutants are
    there with ``--sample 0``, and the area keeps its tests (a mutant is still judged by the whole area's suite)."""
    pytest.importorskip("cosmic_ray")
    tool = _load_tool()
    snapshot = next(a for a in tool.AREAS if a.name == "nvml snapshot")
    [cut] = tool.restrict([*tool.AREAS, tool.NVML_C_AREA], ["fakehw/nvml/snapfile.py"])
    assert (cut.name, cut.modules, cut.tests, cut.select) == (snapshot.name, ("fakehw/nvml/snapfile.py",),
                                                            snapshot.tests, snapshot.select)
    every = tool.plan([cut], 0, 1)
    assert every and {spec.module for _, spec in every} == {"fakehw/nvml/snapfile.py"}
    assert len(every) == len(tool.enumerate_specs(tool.Area("m", ("fakehw/nvml/snapfile.py",), ())))
    sample = tool.plan([cut], 5, 1)
    assert len(sample) == 5 and {spec.module for _, spec in sample} == {"fakehw/nvml/snapfile.py"}


def test_a_module_in_no_area_run_is_refused_naming_the_areas_modules(capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt ``--module`` (or one of an area not run) would otherwise run nothing and print 100 %: it is
    refused by argparse (exit 2), naming the modules the areas run do hold."""
    tool = _load_tool()
    with pytest.raises(SystemExit) as exit_info:
        tool.main(["--area", "fabric lint", "--module", "fakehw/nvml/snapfile.py"])
    assert exit_info.value.code == 2
    assert ("--module fakehw/nvml/snapfile.py: not a module of the areas run (fakehw/fabric/lint.py)"
            in capsys.readouterr().err)


# ------------------------------------------------------------------------- mechanical C mutants (issue 16)

C_SNIPPET = """#include <stdio.h>
#define LIMIT (4 - 1)
static const int table[] = {1, 2 < 3};
/* a < b in a comment */
static int f(int a, int *p) {
    const char *s = "a < b";
    if (a < 0x10 && !p) return -1;
    return a * 2;
}
"""
"""A C file with what a mutant must not touch (a preprocessor line, a table at file scope, a comment, a string) and a
function body with one of most operators."""


def _c_tool() -> ModuleType:
    """tools/c_mutants.py, as tools/mutate.py imports it (from its own directory, which it puts on sys.path)."""
    _load_tool()
    return sys.modules["c_mutants"]


def test_mechanical_c_mutants_are_made_only_in_function_bodies_outside_comments_and_strings() -> None:
    """Each mutant of the snippet, worked out by hand from C's grammar: the body's operators get the C forms of the
    Python areas' operators (a comparison swapped, ``&&``/``||``, a condition negated, a ``!`` dropped, a unary
    minus made plus, a constant moved by one in its own base, a product made a quotient), and nothing else in the
    file changes: not the ``#define``, not the table at file scope, not the comment or the string. The ``*`` of
    ``const char *s`` is read as a product (the tokenizer does not know types); the compiler is what refuses it
    (next test)."""
    cm = _c_tool()
    mutated_lines = [(m.operator, m.line, cm.mutations("x.c", C_SNIPPET)[i].apply(C_SNIPPET).splitlines()[m.line - 1])
                     for i, m in enumerate(cm.mutations("x.c", C_SNIPPET))]
    assert mutated_lines == [
        ("operator * -> /", 6, '    const char /s = "a < b";'),
        ("negate if condition", 7, "    if (!(a < 0x10 && !p)) return -1;"),
        ("comparison < -> <=", 7, "    if (a <= 0x10 && !p) return -1;"),
        ("comparison < -> >", 7, "    if (a > 0x10 && !p) return -1;"),
        ("number 0x10 -> 0x11", 7, "    if (a < 0x11 && !p) return -1;"),
        ("number 0x10 -> 0xf", 7, "    if (a < 0xf && !p) return -1;"),
        ("logical && -> ||", 7, "    if (a < 0x10 || !p) return -1;"),
        ("delete !", 7, "    if (a < 0x10 && p) return -1;"),
        ("unary - -> +", 7, "    if (a < 0x10 && !p) return +1;"),
        ("number 1 -> 2", 7, "    if (a < 0x10 && !p) return -2;"),
        ("number 1 -> 0", 7, "    if (a < 0x10 && !p) return -0;"),
        ("operator * -> /", 8, "    return a / 2;"),
        ("number 2 -> 3", 8, "    return a * 3;"),
        ("number 2 -> 1", 8, "    return a * 1;"),
    ]


def test_a_process_argument_of_zero_is_never_moved_to_name_init() -> None:
    """sched_setaffinity(2), kill(2): pid 0 is the caller (kill: its process group), pid 1 init. A mutant moving
    that 0 by one, run as root, re-pins or signals the machine's init (h-mlink6 saw `sched_setaffinity(1, ...)`
    leave pid 1's CPUs changed), so the constant is not mutated; the rest of the call and other calls' first
    arguments are."""
    cm = _c_tool()
    source = "int f(int n) {\n    sched_setaffinity(0, sizeof n, 0);\n    kill(0, 9);\n    return g(0, 2);\n}\n"
    assert [(m.operator, m.line) for m in cm.mutations("x.c", source)] == [
        ("number 0 -> 1", 2),  # the mask pointer, not the pid
        ("number 9 -> 10", 3), ("number 9 -> 8", 3),
        ("number 0 -> 1", 4), ("number 2 -> 3", 4), ("number 2 -> 1", 4),  # not a call that names a process
    ]
    shim = Path(__file__).parent.parent / "fakehw/nvml/csrc/links.c"
    assert not [m for m in cm.mutations(str(shim), shim.read_text())
                if "sched_setaffinity(1" in m.apply(shim.read_text()).splitlines()[m.line - 1]]


def test_a_c_sample_holds_only_mutants_the_compiler_takes_and_is_the_same_for_a_seed() -> None:
    """A mutant that is not C (a cast's ``*`` made ``/``) tests nothing: the sample is drawn again past it. Every
    mutant of platform.c is either in its ``--sample 0`` plan or counted as refused, the plan holds the product
    mutant but not the cast's (both checked with the shim's own flags), and one seed draws one sample."""
    tool = _load_tool()
    [cut] = tool.restrict([*tool.AREAS, tool.NVML_C_AREA], ["fakehw/nvml/csrc/platform.c"])
    assert (cut.name, cut.modules, cut.tests) == (tool.NVML_C_AREA.name, ("fakehw/nvml/csrc/platform.c",),
                                                  tool.NVML_C_AREA.tests)
    whole = tool.sample_c(cut, 0, 1)
    assert whole.total == len(tool.c_generated(cut)) == len(whole.drawn) + whole.refused + whole.same_code
    assert whole.refused >= 1
    source = (tool.ROOT / "fakehw/nvml/csrc/platform.c").read_text()
    texts = {m.apply(source).splitlines()[m.line - 1].strip() for m in whole.drawn}
    assert "unsigned int version = *(unsigned int /)out;" not in texts
    assert "if (version == nvmlPlatformInfo_v1 && version != nvmlPlatformInfo_v2) " \
           "return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;" in texts
    assert tool.sample_c(cut, 3, 7) == tool.sample_c(cut, 3, 7)
    assert len(tool.sample_c(cut, 3, 7).drawn) == 3 and tool.sample_c(cut, 3, 7).drawn != tool.sample_c(cut, 3, 8).drawn


DEAD_STORE = """int f(int x) {
    int y = 1;
    y = x;
    return y < 4;
}
"""
"""Six mechanical mutants: the dead store's 1 made 2 or 0 changes nothing C can observe (``y`` is written again before
it is read), so an optimising compiler emits the original's code; ``<`` made ``<=`` or ``>`` and 4 made 5 or 3 change
the answer for some ``x``."""


def test_a_c_sample_goes_past_mutants_that_compile_to_the_originals_code(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """Trivial Compiler Equivalence: a mutant whose object code is the original's in every build the tests run
    cannot be killed by any test, so the draw goes on past it and counts it apart (the compiler, not a person, shows
    it equivalent). Of :data:`DEAD_STORE`'s six mutants the two of the dead store are such (worked out from C's
    semantics above); the four others are drawn."""
    tool = _load_tool()
    (tmp_path / "snippet.c").write_text(DEAD_STORE)
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    cut = dataclasses.replace(tool.NVML_C_AREA, modules=("snippet.c",))
    c = tool.sample_c(cut, 0, 1)
    lines = sorted(m.apply(DEAD_STORE).splitlines()[m.line - 1].strip() for m in c.drawn)
    assert (c.total, c.refused, c.same_code) == (6, 0, 2)
    assert lines == ["return y < 3;", "return y < 5;", "return y <= 4;", "return y > 4;"]


def test_same_code_asks_every_build_the_tests_run(tmp_path: Path) -> None:
    """A copy one byte longer than its 8-byte destination reads one byte past the source: the shipped build's
    ``-O2`` keeps only the one byte the function returns, so its code is the original's, but the sanitized harness
    (tests/nvml/test_sanitizers.py) checks the whole copy and aborts. Such a mutant can be killed (export.c's
    ``memcpy(text, desc, 32)`` to 33 was the same code at ``-O2``), so it must not be taken for equivalent: only a
    mutant that is the same code in both builds is."""
    from fakehw.nvml import build

    cm = _c_tool()
    gen = build.generate(tmp_path)
    original = "#include <string.h>\nint f(const char *src) { char buf[8]; memcpy(buf, src, 8); return buf[0]; }\n"
    longer = original.replace("src, 8)", "src, 9)")
    assert cm.SameCode([cm.shim_cflags(gen)])("f.c", original, longer)
    both = [cm.shim_cflags(gen), cm.shim_cflags(gen, sanitized=True)]
    assert not cm.SameCode(both)("f.c", original, longer)
    assert cm.SameCode(both)("f.c", DEAD_STORE, DEAD_STORE.replace("y = 1", "y = 2"))


def test_an_equivalent_may_name_a_mechanical_c_mutant_and_goes_stale_when_none_has_its_lines(
        tmp_path: Path) -> None:
    """A survivor among the mechanical C mutants is recorded like a Python one (file, original and mutated line);
    the entry is kept while a mutant of today's file has those lines and reported stale when none has."""
    tool = _load_tool()
    before = "if (c->s->platform == NULL || !c->s->platform[c->slot].supported) return NVML_ERROR_NOT_SUPPORTED;"
    entries = tmp_path / "equivalents.toml"
    entries.write_text(
        f'[[equivalent]]\nmodule = "fakehw/nvml/csrc/platform.c"\nbefore = "{before}"\n'
        f'after = "{before.replace("NOT_SUPPORTED", "UNKNOWN")}"\nwhy = "w"\n\n'
        f'[[equivalent]]\nmodule = "fakehw/nvml/csrc/platform.c"\nbefore = "{before}"\n'
        f'after = "{before.replace("NOT_SUPPORTED", "IN_USE")}"\nwhy = "no operator makes IN_USE"\n')
    stale = tool.stale_equivalents(tool.load_equivalents(entries), [tool.NVML_C_AREA])
    assert [s.entry.why for s in stale] == ["no operator makes IN_USE"]
