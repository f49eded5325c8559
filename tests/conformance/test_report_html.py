"""The HTML report as a reader meets it: why it is not certified comes first, in plain text (a log keeps its lines,
no JSON escapes, nothing collapsed), what does not apply is shown as such with its reason, the status icons are
drawn (Debian's default fonts have no colour emoji: a glyph would be an empty box), and the cluster that ran is
the one described (the extender suite scales one-node profiles to 4 nodes).

The pictures are taken by headless Chromium, as a person would open the file; PNGs are read with zlib.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from conformance import RESULTS_SCHEMA
from conformance.report import build_report, render
from conformance.report.html import status_icon
from conformance.report.model import Report

LOG = "plugin log:\nI1125 listening on /var/lib/kubelet/device-plugins/fake.sock\nE1125 \"gpu3\" vanished\tretrying"
NA_REASON = "the profile has no riscv64 node: nothing for RISC-V-only work to go to"


def _results(statuses: dict[str, str], nodes: int | None = None) -> dict[str, Any]:
    tests, requirements = [], {}
    for i, (req, status) in enumerate(statuses.items()):
        nodeid = f"conformance/suites/scheduler/test_x.py::test_{i}"
        test: dict[str, Any] = {"nodeid": nodeid, "outcome": status, "duration": 0.5, "requirements": [req],
                                "message": "", "evidence": []}
        if status == "failed":
            test["message"] = "AssertionError: pod p-3 got gpu0 and gpu5, which share no NVLink"
            test["evidence"] = [{"label": "binding", "value": {"pod": "p-3", "gpus": ["gpu0", "gpu5"]}},
                                {"label": "extender log", "value": LOG}]
        if status == "not-applicable":
            test["message"] = NA_REASON
        tests.append(test)
        requirements[req] = {"status": status, "duration": 0.5, "tests": [nodeid],
                             "title": req}
    env: dict[str, Any] = {"profile": "dgx-h100", "backend": "local", "architectures": ["amd64"],
                           "targets": ["extender=reference"], "harness_version": "0.1.0", "python": "3.11"}
    if nodes is not None:
        env["scheduler_nodes"] = nodes
    return {"schema": RESULTS_SCHEMA, "environment": env, "tests": tests, "requirements": requirements,
            "complete": True}


@pytest.fixture
def failing() -> Report:
    return build_report(_results({"SCHED-PROTO-001": "passed", "SCHED-TOPO-001": "failed",
                                  "SCHED-TOPO-004": "not-applicable", "SCHED-FIT-001": "passed"}, nodes=4))


def test_why_comes_first_in_plain_text(failing: Report) -> None:
    html = render(failing, "html")
    why = html.index("Why it is not certified")
    assert why < html.index("<h2>Environment") < html.index("<table id=requirements")
    section = html[why:html.index("</section>", why)]
    assert "SCHED-TOPO-001" in section and "which share no NVLink" in section
    # The log is there as it was written: its own lines and tab, its quotes as quotes (HTML-escaped), no \n or \".
    assert "I1125 listening on /var/lib/kubelet/device-plugins/fake.sock\nE1125 &quot;gpu3&quot; vanished\tretrying" \
        in section
    assert "\\n" not in section and '\\"' not in section
    assert "binding:\n  pod: p-3\n  gpus: gpu0, gpu5" in section
    # Nothing about the failure is collapsed in the table either.
    table = html[html.index("<table id=requirements"):]
    row = table[table.index("<td class=mono>SCHED-TOPO-001"):]
    assert row.index("<details open>") < row.index("</tr>")


def test_not_applicable_is_visible_with_its_reason(failing: Report) -> None:
    html = render(failing, "html")
    section = html[html.index("id=not-applicable"):]
    assert "SCHED-TOPO-004" in section[:section.index("</section>")] and NA_REASON in section
    table = html[html.index("<table id=requirements"):]
    row = table[:table.index("<td class=mono>SCHED-TOPO-004")]
    row = table[row.rindex("<tr>"):]
    row = row[:row.index("</tr>")]
    assert "not applicable" in row and "passed" not in row and NA_REASON in row
    md = render(failing, "md")
    assert md.index("**Why:**") < md.index("| level |")
    assert "`SCHED-TOPO-001`" in md.split("| level |")[0] and "which share no NVLink" in md.split("| level |")[0]
    assert f"`SCHED-TOPO-004` ({NA_REASON})" in md


def test_the_cluster_that_ran_is_described(failing: Report) -> None:
    assert failing.manifest.nodes == 4
    html = render(failing, "html")
    assert "<th>cluster that ran</th><td>4 node(s) of dgx-h100, 32 GPU(s)</td>" in html
    assert "x4 nodes: dgx-h100-0 .. dgx-h100-3" in html  # the topology picture is of the 4-node cluster
    one = build_report(_results({"SCHED-PROTO-001": "passed"}))
    assert "<td>1 node(s) of dgx-h100, 8 GPU(s)</td>" in render(one, "html")


def test_no_character_needs_an_emoji_font(failing: Report) -> None:
    html = render(failing, "html")
    wide = sorted({c for c in html if ord(c) >= 0x2190})
    assert wide == [], [f"U+{ord(c):04X}" for c in wide]


def _png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit RGB(A) PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b, c = prev[x], prev[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(v for i, v in enumerate(line) if i % channels < 3))
        prev = line
    return width, height, rows


def _chromium_screenshot(html: Path, png: Path, size: str) -> None:
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", f"--user-data-dir={html.parent / 'chrome-profile'}", "--hide-scrollbars",
                    f"--window-size={size}", f"--screenshot={png}", html.as_uri()],
                   check=True, capture_output=True, timeout=120)


needs_chromium = pytest.mark.skipif(
    not (shutil.which("chromium") and shutil.which("tesseract")),
    reason="needs Debian's chromium and tesseract-ocr (tools/install-system-deps.sh installs them)")


@needs_chromium
def test_status_icons_are_drawn_in_their_colours(tmp_path: Path) -> None:
    """Each icon, alone and large, shows its own colour over a real area (a missing glyph would be a thin box)."""
    colours = {"passed": (0x1B, 0x7F, 0x3B), "failed": (0xB3, 0x26, 0x1E), "error": (0xB3, 0x26, 0x1E),
               "skipped": (0x8A, 0x6D, 0x00), "not-applicable": (0x66, 0x66, 0x66)}
    for status, rgb in colours.items():
        page = tmp_path / f"{status}.html"
        icon = status_icon(status).replace("<svg class=icon", '<svg style="width:160px;height:160px"')
        page.write_text(f"<!doctype html><html><body style='margin:0;background:#fff'>{icon}</body></html>")
        png = tmp_path / f"{status}.png"
        _chromium_screenshot(page, png, "200,200")
        _w, _h, rows = _png_pixels(png)
        hits = sum(1 for row in rows[:160] for x in range(0, 480, 3)
                   if all(abs(row[x + i] - rgb[i]) <= 12 for i in range(3)))
        assert hits > 2000 if status != "not-applicable" else hits > 600, (status, hits)


@needs_chromium
def test_the_first_screen_says_why(failing: Report, tmp_path: Path) -> None:
    """What a reader sees without scrolling (1280x900) names the failing requirement and its message."""
    page = tmp_path / "report.html"
    page.write_text(render(failing, "html"))
    png = tmp_path / "top.png"
    _chromium_screenshot(page, png, "1280,900")
    text = subprocess.run(["tesseract", str(png), "stdout"], capture_output=True, text=True, check=True,
                          timeout=120).stdout
    flat = re.sub(r"\s+", " ", text)
    assert "NOT CERTIFIED" in flat and "Why it is not certified" in flat, flat[:600]
    assert "SCHED-TOPO-001" in flat and "share no NVLink" in flat, flat[:900]
