"""Every argument of the three CLIs (``fakehw``, ``testbed``, ``conformance``) says what it is in ``--help``.

The parser trees are walked through their subparsers, so a command added later is covered without listing it here.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

import pytest

import conformance.cli
import fakehw.cli
import testbed.cli

PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "fakehw": fakehw.cli.build_parser,
    "testbed": testbed.cli.build_parser,
    "conformance": conformance.cli.build_parser,
}


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...],
                                                                                   argparse.ArgumentParser]]:
    """``(command path, parser)`` for this parser and every subparser below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from walk(child, (*path, name))


def command_paths() -> list[tuple[str, ...]]:
    return [path for prog, build in PARSERS.items() for path, _ in walk(build(), (prog,))]


def _name(action: argparse.Action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_every_argument_has_help(prog: str) -> None:
    missing = []
    for path, parser in walk(PARSERS[prog](), (prog,)):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction):
                continue
            text = action.help
            if not isinstance(text, str) or not text.strip() or text == argparse.SUPPRESS:
                missing.append(" ".join((*path, _name(action))))
    assert not missing, f"{len(missing)} argument(s) without help:\n  " + "\n  ".join(missing)


def test_the_walk_reaches_nested_commands() -> None:
    paths = {" ".join(p) for p in command_paths()}
    for expected in ("fakehw fabric chaos", "testbed cxl create-region", "testbed pool map", "testbed fabric probe",
                     "conformance run"):
        assert expected in paths


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_help_exits_zero(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        PARSERS[path[0]]().parse_args([*path[1:], "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: "), out[:200]


@pytest.mark.parametrize(("prog", "before", "after"), [
    ("conformance", [], ["run", "--target", "device-plugin"]),
    ("testbed", [], ["fabric", "probe"]),
    ("fakehw", [], ["fabric", "probe", "--state-dir", "fabric-state"]),
])
def test_verbose_counts_before_or_after_the_command(prog: str, before: list[str], after: list[str]) -> None:
    """A command with its own -v must not reset the global one given before it (argparse's subparser defaults)."""
    parse = PARSERS[prog]().parse_args
    assert parse(["-v", *after]).verbose is True
    assert parse([*after, "-v"]).verbose is True
    assert parse(after).verbose is False
