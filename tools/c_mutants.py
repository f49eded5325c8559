"""Mechanical mutants of the NVML shim's C sources, drawn at random like Cosmic Ray's for the Python areas.

The hand-written C mutants (``tools/nvml-c-mutants.toml``) are bugs a person chose, so their score says as much
about the chooser as about the tests. These are made by rule instead, in every function body of
``fakehw/nvml/csrc/*.c``, with the C forms of the operators :data:`mutate.OPERATORS` applies to Python: a comparison
swapped (``==``/``!=``, ``<``/``<=``, ``<``/``>``, ...), an arithmetic or bitwise operator swapped (``+``/``-``,
``*``/``/``, ``%``/``/``, ``|``/``&``, ``<<``/``>>``), ``&&``/``||`` swapped, a condition negated (``if (!(...))``),
a ``!`` dropped, a unary minus made plus, ``break``/``continue`` swapped, an integer constant moved by one either way,
and an NVML error code replaced by ``NVML_ERROR_UNKNOWN`` (the C form of Cosmic Ray's exception replacer: a caller
that tells errors apart is handed the wrong one).

The tokenizer is small and knows only what it must: comments, string and character literals and preprocessor
lines are left alone, and a mutant is placed only inside a function body (a brace at file scope after a ``)``), so
tables and initializers at file scope are not touched. Some mutants are not C (a ``*`` in a declaration read as a
product): :func:`compiles` asks the compiler, with the shim's own flags and ``-Werror``, before a mutant counts.
"""

from __future__ import annotations

import bisect
import re
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

_TOKEN = re.compile(r"""
    (?P<skip>//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|^[ \t]*\#(?:\\\n|[^\n])*)
  | (?P<number>0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*(?![.\w]))
  | (?P<float>\d+\.\d*(?:[eE][-+]?\d+)?[fFlL]?|\d+[eE][-+]?\d+[fFlL]?)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<op>->|\+\+|--|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|[-+*/%<>!&|^=?:;,.(){}\[\]~])
  | (?P<space>\s+)
""", re.VERBOSE | re.DOTALL | re.MULTILINE)

BINARY_SWAPS = {"+": "-", "-": "+", "*": "/", "/": "*", "%": "/", "|": "&", "&": "|", "<<": ">>"}
"""Arithmetic and bitwise operators and what each becomes (Cosmic Ray's ReplaceBinaryOperator pairs)."""
COMPARISON_SWAPS = {"==": ("!=",), "!=": ("==",), "<": ("<=", ">"), "<=": ("<",), ">": (">=", "<"), ">=": (">",)}
"""Comparisons and what each becomes (Cosmic Ray's ReplaceComparisonOperator pairs)."""
LOGICAL_SWAPS = {"&&": "||", "||": "&&"}
JUMP_SWAPS = {"break": "continue", "continue": "break"}
KEYWORDS = frozenset({"return", "case", "sizeof", "if", "while", "for", "switch", "else", "do", "goto"})
"""Words after which an operator is unary (``return -1``, ``case -2``), unlike after any other name."""
UNKNOWN_ERROR = "NVML_ERROR_UNKNOWN"
OTHER_PROCESS_CALLS = frozenset({"sched_setaffinity", "sched_setscheduler", "kill", "prlimit"})
"""Calls whose first argument names a process (0: the caller). Moved by one, that 0 names init, pid 1: a mutant
run as root would re-pin or signal the machine's init (seen: `sched_setaffinity(1, ...)` drawn for
nvmlDeviceSetCpuAffinity set pid 1's CPUs), so those constants are not mutated."""

Add = Callable[[str, int, int, str], None]
"""How an operator hands over a mutant: (operator, start, end, replacement)."""


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass(frozen=True)
class CMutation:
    """One mechanical mutant: ``file``'s characters ``start:end`` replaced by ``replacement``."""

    file: str
    """The path inside the repository (``fakehw/nvml/csrc/links.c``)."""
    operator: str
    start: int
    end: int
    replacement: str
    line: int

    def apply(self, source: str) -> str:
        return source[:self.start] + self.replacement + source[self.end:]


def tokens(source: str) -> list[Token]:
    """The tokens of ``source`` that code is made of: comments, string and character literals, preprocessor lines
    and whitespace are matched (so nothing inside them is read as code) and dropped."""
    return [Token(m.lastgroup or "op", m.group(), m.start()) for m in _TOKEN.finditer(source)
            if m.lastgroup not in ("skip", "space")]


def _body_tokens(toks: list[Token]) -> Iterator[tuple[int, Token]]:
    """(index, token) of every token inside a function body: a ``{`` at file scope whose previous code token is
    ``)``, to its matching ``}``."""
    depth, in_body, prev = 0, False, None
    for i, t in enumerate(toks):
        if t.text == "{":
            if depth == 0:
                in_body = prev is not None and prev.text == ")"
            depth += 1
        elif t.text == "}":
            depth = max(0, depth - 1)
            if depth == 0:
                in_body = False
        elif in_body:
            yield i, t
        prev = t


def _operand_before(toks: list[Token], i: int) -> bool:
    """Whether the code token before ``toks[i]`` ends an operand (so the operator at ``i`` is binary)."""
    if i == 0:
        return False
    prev = toks[i - 1]
    return prev.kind in ("number", "float") or (prev.kind == "name" and prev.text not in KEYWORDS) or \
        prev.text in (")", "]")


def _condition_end(toks: list[Token], open_at: int) -> int | None:
    """The index of the ``)`` that closes the ``(`` at ``open_at``."""
    depth = 0
    for k in range(open_at, len(toks)):
        if toks[k].text == "(":
            depth += 1
        elif toks[k].text == ")":
            depth -= 1
            if depth == 0:
                return k
    return None


def mutations(file: str, source: str) -> list[CMutation]:
    """Every mechanical mutant of ``source`` (the file at ``file``), in the order of the text."""
    toks = tokens(source)
    line_starts = [m.end() for m in re.finditer("\n", source)]
    out: list[CMutation] = []

    def add(operator: str, start: int, end: int, replacement: str) -> None:
        line = bisect.bisect_right(line_starts, start) + 1  # the newlines before ``start``, plus one
        out.append(CMutation(file, operator, start, end, replacement, line))

    for i, t in _body_tokens(toks):
        text = t.text
        binary = _operand_before(toks, i)
        if text in COMPARISON_SWAPS:
            for new in COMPARISON_SWAPS[text]:
                add(f"comparison {text} -> {new}", t.start, t.end, new)
        elif text in BINARY_SWAPS and binary:
            add(f"operator {text} -> {BINARY_SWAPS[text]}", t.start, t.end, BINARY_SWAPS[text])
        elif text in LOGICAL_SWAPS:
            add(f"logical {text} -> {LOGICAL_SWAPS[text]}", t.start, t.end, LOGICAL_SWAPS[text])
        elif text == "!" and not binary:
            add("delete !", t.start, t.end, "")
        elif text == "-" and not binary:
            add("unary - -> +", t.start, t.end, "+")
        elif t.kind == "name" and text in JUMP_SWAPS:
            add(f"{text} -> {JUMP_SWAPS[text]}", t.start, t.end, JUMP_SWAPS[text])
        elif t.kind == "name" and text in ("true", "false"):
            add(f"{text} -> {'false' if text == 'true' else 'true'}", t.start, t.end,
                "false" if text == "true" else "true")
        elif t.kind == "name" and text.startswith("NVML_ERROR_") and text != UNKNOWN_ERROR:
            add(f"{text} -> {UNKNOWN_ERROR}", t.start, t.end, UNKNOWN_ERROR)
        elif t.kind == "number" and not _names_a_process(toks, i):
            _number_mutations(t, add)
        elif t.kind == "name" and text in ("if", "while"):
            _negations(source, toks, i, add)
    return out


def _names_a_process(toks: list[Token], i: int) -> bool:
    """Whether token ``i`` is the whole first argument of one of :data:`OTHER_PROCESS_CALLS`."""
    return i >= 2 and i + 1 < len(toks) and toks[i - 1].text == "(" and toks[i - 2].text in OTHER_PROCESS_CALLS \
        and toks[i + 1].text in (",", ")")


def _number_mutations(t: Token, add: Add) -> None:
    """An integer constant plus one and minus one (Cosmic Ray's NumberReplacer), in its own base and suffix."""
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)([uUlL]*)", t.text)
    if m is None:
        return
    digits, suffix = m.groups()
    prefix, base, form = (digits[:2], 16, "x") if digits[:2] in ("0x", "0X") else \
        ("0", 8, "o") if digits.startswith("0") and len(digits) > 1 else ("", 10, "d")
    value = int(digits, base)
    for new in (value + 1, value - 1):
        if new >= 0:
            text = f"{prefix}{new:{form}}{suffix}"
            add(f"number {t.text} -> {text}", t.start, t.end, text)


def _negations(source: str, toks: list[Token], i: int, add: Add) -> None:
    """``if (c)``/``while (c)`` to ``if (!(c))`` (Cosmic Ray's AddNot): the whole parenthesized condition."""
    j = i + 1
    if j >= len(toks) or toks[j].text != "(":
        return
    close = _condition_end(toks, j)
    if close is None or close == j + 1:
        return
    start, end = toks[j].start, toks[close].end
    add(f"negate {toks[i].text} condition", start, end, f"(!{source[start:end]})")


def compiles(source: str, cflags: list[str]) -> bool:
    """Whether ``source`` (one of the shim's files, mutated) compiles with ``cflags`` and ``-Werror``."""
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write(source)
        path = Path(f.name)
    try:
        proc = subprocess.run([*cflags, "-Werror", "-fsyntax-only", str(path)], capture_output=True, text=True,
                              check=False, timeout=120)
    finally:
        path.unlink(missing_ok=True)
    return proc.returncode == 0


def object_code(source: str, cflags: list[str]) -> bytes | None:
    """The object file ``cflags`` compile ``source`` to (None if it does not compile), made comparable: read from
    standard input, so the file name recorded in it is the same for every source, with no debug information and no
    ``.comment`` naming the compiler (``-fno-ident``)."""
    with tempfile.TemporaryDirectory(prefix="fakehw-c-object-") as tmp:
        out = Path(tmp) / "mutant.o"
        proc = subprocess.run([*cflags, "-g0", "-fno-ident", "-x", "c", "-c", "-", "-o", str(out)], input=source,
                              capture_output=True, text=True, check=False, timeout=120)
        return out.read_bytes() if proc.returncode == 0 else None


class SameCode:
    """Whether a mutant compiles to its original's object code in every build the tests run: Trivial Compiler
    Equivalence (Papadakis et al., ICSE 2015). The compiler's optimiser proves such a mutant equivalent, since the
    program the tests run is the same bytes: ``rec < 0 ? -1 : x`` to ``-2`` where the -1 is never read, ``x < 4`` to
    ``x <= 3``. Each build counts: a one-byte longer ``memcpy`` into a fixed buffer can be the same code at ``-O2``
    and a different one under AddressSanitizer, which then aborts (so both the shipped build's flags and the
    sanitized harness's are given). The originals' code is compiled once per file and build."""

    def __init__(self, builds: list[list[str]]) -> None:
        self.builds = builds
        self._originals: dict[str, list[bytes | None]] = {}

    def __call__(self, file: str, original: str, mutant: str) -> bool:
        if file not in self._originals:
            self._originals[file] = [object_code(original, flags) for flags in self.builds]
        for flags, before in zip(self.builds, self._originals[file], strict=True):
            if before is None or object_code(mutant, flags) != before:
                return False
        return True


def shim_cflags(gen: Path, cc: str = "cc", sanitized: bool = False) -> list[str]:
    """The compiler and flags the shim is built with (:mod:`fakehw.nvml.build`), or with ``sanitized`` those the
    sanitized C harness builds its sources with (:data:`fakehw.nvml.build.SANITIZER_CFLAGS`), its generated headers
    in ``gen`` (:func:`fakehw.nvml.build.generate`)."""
    from fakehw.nvml import build

    flags = build.SANITIZER_CFLAGS if sanitized else build.BASE_CFLAGS
    return [*shlex.split(cc), *flags, f"-I{gen}", f"-I{build.CSRC}"]
