"""``conformance``: certification runs (``run``, ``list``) and reports (``report``, ``verify``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fakehw import __version__
from fakehw.cli_common import run_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conformance", description="Conformance suites and certification reports.")
    parser.add_argument("--version", action="version", version=f"conformance {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log debug messages")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    from conformance import cli_report, cli_run

    cli_run.register(sub)
    cli_report.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("conformance", build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
