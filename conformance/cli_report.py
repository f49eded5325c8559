"""``conformance report`` and ``conformance verify``: turn results into a sealed report, and check one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.report import FORMATS, ReportError, load_report, render, report_from_results, verify, write_reports
from conformance.report.text import VERDICT_TEXT
from fakehw.cli_common import EXIT_BAD_INPUT, EXIT_FAILURE, CliError


def cmd_report(args: argparse.Namespace) -> int:
    try:
        report = report_from_results(Path(args.results))
    except ReportError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    formats = tuple(args.format) if args.format else tuple(FORMATS)
    if args.out is None and len(formats) == 1:
        sys.stdout.write(render(report, formats[0]))
    else:
        out = Path(args.out or ".")
        for fmt, path in write_reports(report, out, formats).items():
            print(f"{fmt:5} {path}", file=sys.stderr)
    print(f"verdict: {VERDICT_TEXT[report.verdicts.overall]}", file=sys.stderr)
    return 0


def _verify_one(path: Path) -> bool:
    try:
        report = load_report(path.read_text(), str(path))
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}", EXIT_BAD_INPUT) from None
    except ReportError as exc:
        print(f"{exc}", file=sys.stderr)
        return False
    problems = verify(report)
    for p in problems:
        print(f"{path}: {p}", file=sys.stderr)
    if problems:
        print(f"conformance: {path} does NOT verify", file=sys.stderr)
        return False
    print(f"{path}: intact (sha256 {report.sha256}); verdict {VERDICT_TEXT[report.verdicts.overall]}")
    return True


def cmd_verify(args: argparse.Namespace) -> int:
    paths: list[Path] = []
    for item in args.report:
        path = Path(item)
        paths += sorted(path.rglob("report.json")) if path.is_dir() else [path]
    if not paths:
        raise CliError(f"no report.json under {', '.join(args.report)}", EXIT_BAD_INPUT)
    ok = [_verify_one(p) for p in paths]
    return 0 if all(ok) else EXIT_FAILURE


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="build a sealed certification report from a results file",
                       description="Formats: json (report.json, sealed with sha256), junit (junit.xml), md "
                                   "(summary.md, for $GITHUB_STEP_SUMMARY), html (report.html, self-contained).")
    p.add_argument("results", help="results file written by a run (--conformance-results)")
    p.add_argument("--format", action="append", choices=list(FORMATS), help="repeatable; default: all four")
    p.add_argument("--out", metavar="DIR", help="write files here (default: one format to stdout, else .)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("verify", help="check report.json files: seal intact, verdicts follow from the results")
    p.add_argument("report", nargs="+", help="report.json files, or directories searched for them")
    p.set_defaults(func=cmd_verify)
