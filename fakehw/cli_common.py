"""What the three command-line tools share: exit codes and turning errors into one clear line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

AddCommand = Callable[[str, str, Callable[[argparse.Namespace], int]], argparse.ArgumentParser]
"""How a command group adds its commands to a CLI: ``add(name, help, func)`` returns the command's parser, with
the CLI's common options and ``func`` set as what runs it."""

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


class CliError(Exception):
    """An error to show the user as ``<prog>: error: <message>`` and exit with ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.code = code


def run_cli(
    prog: str,
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    translate: Callable[[Exception], CliError | None] = lambda _e: None,
) -> int:
    """Parse ``argv`` and run the chosen subcommand; errors become messages and exit codes, never tracebacks."""
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING,
        format=f"{prog}: %(levelname)s: %(message)s",
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(func(args) or EXIT_OK)
    except CliError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        print(f"{prog}: error: {mapped}", file=sys.stderr)
        return mapped.code
