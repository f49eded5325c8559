"""Certification reports: build from results, seal, verify, render (JSON, JUnit, Markdown, HTML)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.report.html import to_html
from conformance.report.model import (
    UNSIGNED,
    Report,
    ReportError,
    Signing,
    build_report,
    load_report,
    report_json_schema,
    verify,
)
from conformance.report.text import to_junit, to_markdown
from fakehw.render.atomic import atomic_write

FORMATS = {"json": "report.json", "junit": "junit.xml", "md": "summary.md", "html": "report.html"}


def render(report: Report, fmt: str) -> str:
    if fmt == "json":
        return report.to_json()
    if fmt == "junit":
        return to_junit(report)
    if fmt == "md":
        return to_markdown(report)
    if fmt == "html":
        return to_html(report)
    raise ReportError(f"unknown format {fmt!r} (formats: {', '.join(FORMATS)})")


def report_from_results(path: Path, signing: Signing = UNSIGNED) -> Report:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc})") from None
    return build_report(data, signing=signing)


def write_reports(report: Report, out_dir: Path, formats: tuple[str, ...] = tuple(FORMATS)) -> dict[str, Path]:
    """Write each format to its conventional file name in ``out_dir`` (atomically)."""
    written = {}
    for fmt in formats:
        path = out_dir / FORMATS[fmt]
        atomic_write(path, render(report, fmt).encode())
        written[fmt] = path
    return written


__all__ = ["FORMATS", "Report", "ReportError", "build_report", "load_report", "render", "report_from_results",
           "report_json_schema", "verify", "write_reports"]
