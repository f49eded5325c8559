"""A self-contained ``report.html``: verdict, manifest, a picture of the profile's topology, and the table.

No scripts, no external files: inline CSS and an inline SVG drawn from the model (one representative node per
group with its sockets, GPUs coloured by NUMA node, NVSwitch chips and link counts, C2C links, and the
multi-node NVLink domain the node belongs to).
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from conformance.report.model import Report, ReportError, RequirementResult, load_report
from conformance.report.text import VERDICT_TEXT, importance, missed_recommended, provenance_facts
from fakehw.model import ProfileError, System, load_profile

_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f")
_VERDICT_COLOUR = {"certified": "#1b7f3b", "not-certified": "#b3261e", "partial": "#8a6d00"}


def _text(x: float, y: float, text: str, size: int = 12, anchor: str = "middle", weight: str = "normal",
          fill: str = "#222") -> str:
    return (f'<text x="{x:.0f}" y="{y:.0f}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{fill}">{escape(text)}</text>')


def topology_svg(system: System) -> str:
    """One panel per node group: sockets, GPUs (coloured by NUMA node), NVSwitches and links, C2C, domains."""
    groups: list[tuple[str, int]] = []
    for node in system.nodes:
        if not groups or groups[-1][0] != node.group:
            groups.append((node.group, 0))
        groups[-1] = (groups[-1][0], groups[-1][1] + 1)
    panels: list[str] = []
    y = 10.0
    width = 60 + max(max((len(n.gpus) for n in system.nodes), default=1), 8) * 100
    for group, count in groups:
        node = next(n for n in system.nodes if n.group == group)
        has_switches = bool(node.nvswitches)
        domain = system.domain_of(node)
        height = 250 + (70 if has_switches else 0) + (60 if domain else 0)
        parts = [f'<rect x="10" y="{y:.0f}" width="{width - 20}" height="{height - 10}" rx="10" fill="#f7f7f9" '
                 'stroke="#888"/>']
        title = f"{node.name}" + (f"  (x{count} nodes: {group}-0 .. {group}-{count - 1})" if count > 1 else "")
        parts.append(_text(24, y + 22, title, 14, "start", "bold"))
        parts.append(_text(24, y + 40, f"{node.cpu.sockets} x {node.cpu.model} ({node.cpu.arch}), "
                                       f"{node.cpu.logical_cpus} CPUs, {len(node.numa)} NUMA nodes", 11, "start"))
        socket_x = {}
        for s in range(node.cpu.sockets):
            sx = 40 + s * ((width - 80) / max(1, node.cpu.sockets))
            socket_x[s] = sx + 60
            numa_ids = ",".join(str(n.id) for n in node.numa if n.socket == s)
            parts.append(f'<rect x="{sx:.0f}" y="{y + 52:.0f}" width="120" height="30" rx="4" fill="#dde3ea" '
                         'stroke="#667"/>')
            parts.append(_text(sx + 60, y + 72, f"CPU{s}  NUMA {numa_ids}", 11))
        gpu_y = y + 120
        gpu_x = {}
        for i, gpu in enumerate(node.gpus):
            gx = 40 + i * 100
            gpu_x[gpu.name] = gx + 40
            colour = _PALETTE[gpu.numa % len(_PALETTE)]
            if gpu.c2c is not None:
                parts.append(f'<line x1="{gx + 40}" y1="{gpu_y}" x2="{socket_x.get(gpu.c2c.socket, gx)}" '
                             f'y2="{y + 82:.0f}" stroke="#555" stroke-dasharray="4 3"><title>NVLink-C2C '
                             f'{gpu.c2c.bandwidth_gbs:g} GB/s</title></line>')
            parts.append(f'<rect x="{gx}" y="{gpu_y:.0f}" width="80" height="56" rx="6" fill="{colour}" '
                         f'stroke="#333"><title>{escape(gpu.sku.name)} {gpu.address.nvml_bus_id} NUMA '
                         f'{gpu.numa}</title></rect>')
            parts.append(_text(gx + 40, gpu_y + 22, f"GPU{gpu.index}", 13, weight="bold", fill="#fff"))
            parts.append(_text(gx + 40, gpu_y + 40, gpu.sku.id.split("-")[0].upper(), 10, fill="#fff"))
        for gpu in node.gpus:
            peers: dict[str, int] = {}
            for p in gpu.ports:
                if p.remote_kind == "gpu" and p.remote_id.split("/")[0] == node.name:
                    peers[p.remote_id.split("/")[1]] = peers.get(p.remote_id.split("/")[1], 0) + 1
            for peer, links in peers.items():
                if peer > gpu.name and peer in gpu_x:
                    x1, x2 = gpu_x[gpu.name], gpu_x[peer]
                    parts.append(f'<path d="M{x1},{gpu_y} Q{(x1 + x2) / 2},{gpu_y - 30} {x2},{gpu_y}" fill="none" '
                                 f'stroke="#76b900" stroke-width="3"><title>{links} NVLinks</title></path>')
                    parts.append(_text((x1 + x2) / 2, gpu_y - 18, f"NV{links}", 10, fill="#3d6b00"))
        if has_switches:
            sw_y = gpu_y + 110
            span = (width - 80) / max(1, len(node.nvswitches))
            for k, sw in enumerate(node.nvswitches):
                sx = 40 + k * span
                for gpu in node.gpus:
                    links = sum(1 for p in gpu.ports if p.remote_id == sw.id)
                    if links:
                        parts.append(f'<line x1="{gpu_x[gpu.name]}" y1="{gpu_y + 56:.0f}" x2="{sx + span / 2 - 5:.0f}" '
                                     f'y2="{sw_y:.0f}" stroke="#76b900" stroke-width="{min(6, 1 + links / 3):.1f}" '
                                     f'opacity="0.7"><title>{gpu.name} - {sw.name}: {links} links</title></line>')
                parts.append(f'<rect x="{sx:.0f}" y="{sw_y:.0f}" width="{span - 10:.0f}" height="26" rx="4" '
                             'fill="#76b900" stroke="#3d6b00"/>')
                parts.append(_text(sx + span / 2 - 5, sw_y + 17, f"{sw.name} ({sw.sku.id})", 10, fill="#fff"))
        bottom = gpu_y + 56 + (96 if has_switches else 0)
        if domain is not None:
            dy = bottom + 40
            for gpu in node.gpus:
                parts.append(f'<line x1="{gpu_x[gpu.name]}" y1="{gpu_y + 56:.0f}" x2="{gpu_x[gpu.name]}" y2="{dy:.0f}" '
                             f'stroke="#76b900" stroke-width="3"><title>{len(gpu.ports)} links into {domain.name}'
                             '</title></line>')
            gpus = sum(len(n.gpus) for name in domain.nodes if (n := system.node(name)))
            parts.append(f'<rect x="30" y="{dy:.0f}" width="{width - 60}" height="28" rx="5" fill="#3d6b00"/>')
            parts.append(_text(width / 2, dy + 19, f"NVLink domain {domain.spec_name}: {len(domain.switches)} switch "
                                                   f"chips, {len(domain.nodes)} nodes, {gpus} GPUs", 12, fill="#fff"))
        nic_text = f"{len(node.nics)} NIC(s)"
        if node.nics:
            nic_text += f" ({node.nics[0].sku.id}, MTU {node.nics[0].mtu})"
        extra = [nic_text]
        if node.cxl.memdevs:
            extra.append(f"{len(node.cxl.memdevs)} CXL memdevs")
        if node.memory_pools:
            extra.append("pools: " + ", ".join(f"{p.name} ({p.latency.name})" for p in node.memory_pools))
        parts.append(_text(24, y + height - 22, "; ".join(extra), 11, "start", fill="#444"))
        panels.append("\n".join(parts))
        y += height + 10
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y:.0f}" viewBox="0 0 {width} {y:.0f}" '
            f'font-family="sans-serif" role="img" aria-label="topology of {escape(system.name)}">'
            + "\n".join(panels) + "</svg>")


_CSS = """
body{font-family:'DejaVu Sans',-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
.banner{padding:18px 22px;border-radius:8px;color:#fff;font-size:28px;font-weight:700}
.sub{font-size:15px;font-weight:400;opacity:.95;margin-top:4px}
table{border-collapse:collapse;margin:12px 0;width:100%}
th,td{border-bottom:1px solid #ddd;padding:6px 8px;text-align:left;vertical-align:top;font-size:14px}
th{background:#f0f2f5}
.passed{color:#1b7f3b;font-weight:700}.failed,.error{color:#b3261e;font-weight:700}.recommended{color:#8a5a00;font-weight:700}
.skipped,.not-run{color:#8a6d00;font-weight:700}
.not-applicable{color:#555;font-weight:700}
.icon{width:16px;height:16px;vertical-align:-3px;margin-right:4px}
.why{border:2px solid #b3261e;border-radius:8px;padding:4px 16px;margin:16px 0;background:#fff8f7}
.why.na{border-color:#888;background:#f7f7f7}
.cause{margin:10px 0}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;padding:8px;font-size:12px;margin:4px 0}
.reason{color:#444;font-size:13px}
.mono{font-family:'DejaVu Sans Mono',monospace;font-size:12px}
#requirements td:first-child,#requirements td:nth-child(2){white-space:nowrap}
#requirements td:nth-child(2){font-size:13px}
"""

# Status icons drawn in SVG, not taken from a font: Debian's default fonts (DejaVu) have no colour emoji, and a
# missing glyph renders as an empty box. Each is a 16x16 shape with the status as its accessible name.
_ICON_SHAPES = {
    "passed": ('<circle cx="8" cy="8" r="7.5" fill="#1b7f3b"/>'
               '<path d="M4.2 8.4 7 11.1 11.9 5.3" fill="none" stroke="#fff" stroke-width="2"/>'),
    "failed": ('<circle cx="8" cy="8" r="7.5" fill="#b3261e"/>'
               '<path d="M5 5 11 11M11 5 5 11" stroke="#fff" stroke-width="2"/>'),
    "error": ('<path d="M8 .8 15.4 14.6H.6Z" fill="#b3261e"/>'
              '<path d="M8 5.2V10M8 11.6V13.2" stroke="#fff" stroke-width="1.8"/>'),
    "skipped": ('<circle cx="8" cy="8" r="7.5" fill="#8a6d00"/>'
                '<path d="M4 4.5 8 8 4 11.5ZM8 4.5 12 8 8 11.5Z" fill="#fff"/>'),
    "not-applicable": ('<circle cx="8" cy="8" r="6.5" fill="none" stroke="#666" stroke-width="2"/>'
                       '<path d="M3.5 12.5 12.5 3.5" stroke="#666" stroke-width="2"/>'),
    "not-run": '<circle cx="8" cy="8" r="6.5" fill="none" stroke="#8a6d00" stroke-width="2" stroke-dasharray="3 2"/>',
}
_STATUS_WORDS = {"not-applicable": "not applicable", "not-run": "not run"}
_CAUSE_LINES = 14
"""Lines of a failure's message and evidence shown at the top of the report (the rest is in its row)."""


def status_icon(status: str) -> str:
    word = _STATUS_WORDS.get(status, status)
    return (f'<svg class=icon viewBox="0 0 16 16" role="img" aria-label="{word}"><title>{word}</title>'
            f"{_ICON_SHAPES[status]}</svg>")


def plain(value: Any, indent: str = "") -> str:
    """Evidence as a person reads it: strings as they are (a log keeps its lines, no JSON escapes), mappings and
    lists as indented ``key: value`` lines."""
    if isinstance(value, str):
        return value if "\n" not in value else "\n".join(indent + line for line in value.splitlines())
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if "\n" in plain(item) or (isinstance(item, dict) and item):
                lines.append(f"{indent}{key}:\n{plain(item, indent + '  ')}")
            else:
                lines.append(f"{indent}{key}: {plain(item)}")
        return "\n".join(lines) if lines else indent + "{}"
    if isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value) and len(value) <= 16:
            return indent + ", ".join(plain(v) for v in value) if value else indent + "(none)"
        return "\n".join(f"{indent}- {plain(v, indent + '  ').lstrip()}" for v in value)
    return indent + json.dumps(value)


def _detail_text(r: RequirementResult) -> str:
    parts = [r.message] if r.message else []
    for e in r.evidence:
        body = plain(e.value)
        if "\n" in body and isinstance(e.value, (dict, list)):
            body = plain(e.value, "  ")
        parts.append(f"{e.label}:" + ("\n" + body if "\n" in body else f" {body}"))
    if r.seeds:
        parts.append("replay with seeds: " + ", ".join(r.seeds))
    return "\n".join(parts)


def _clip(text: str, lines: int) -> str:
    rows = text.splitlines()
    return "\n".join(rows[:lines]) + (f"\n... ({len(rows) - lines} more lines in the table below)"
                                      if len(rows) > lines else "")


def _why(report: Report) -> list[str]:
    """The causes of the verdict at the top: failed and errored requirements with their messages and evidence
    in plain text, a partial run said so, and what does not apply here (with the reason), never hidden."""
    failing = sorted((r for r in report.results if r.status in ("failed", "error") and r.required), key=lambda r: r.id)
    missed = sorted((r for r in report.results if missed_recommended(r)), key=lambda r: r.id)
    parts: list[str] = []
    if failing or report.partial:
        parts.append("<section class=why id=why><h2>Why it is not certified</h2>")
        if report.partial:
            parts.append("<p>The run did not finish (it was stopped or crashed): requirements it did not reach are "
                         "<b>not run</b>.</p>")
        parts += [_cause(r, "required") for r in failing]
        parts.append("</section>")
    if missed:
        parts.append("<section class='why recommended' id=recommended><h2>Recommended, not met</h2><p>Reported; "
                     "they do not decide the verdict.</p>")
        parts += [_cause(r, "recommended (does not decide the verdict)") for r in missed]
        parts.append("</section>")
    na = [r for r in report.results if r.status == "not-applicable"]
    if na:
        parts.append("<section class='why na' id=not-applicable><h2>Not applicable here</h2><p>Neither passed nor "
                     "failed: what they check does not exist in this run.</p>")
        for r in na:
            reason = r.message.split(": ", 1)[-1] if r.message else "(no reason given)"
            parts.append(f"<div class=cause>{status_icon(r.status)}<b>{escape(r.id)}</b> {escape(r.title)} "
                         f"<span class=reason>&mdash; {escape(reason)}</span></div>")
        parts.append("</section>")
    return parts


def _cause(r: RequirementResult, kind: str) -> str:
    return (f'<div class=cause id="why-{escape(r.id)}">{status_icon(r.status)}<b>{escape(r.id)}</b> '
            f"{escape(r.title)} <span class=reason>({r.level}, {kind}: {r.status})</span>"
            f"<pre>{escape(_clip(_detail_text(r) or '(no message recorded)', _CAUSE_LINES))}</pre></div>")


def _manifest_rows(report: Report, system: System | None) -> list[tuple[str, str]]:
    m = report.manifest
    components = ", ".join(f"{c.kind}: {c.spec}" + (f" ({c.version})" if c.version else "") for c in m.components)
    cluster = m.profile or "-"
    if system is not None:
        cluster = f"{len(system.nodes)} node(s) of {m.profile}, {sum(len(n.gpus) for n in system.nodes)} GPU(s)"
    return [
        ("component(s)", components or "-"),
        ("profile", f"{m.profile} (sha256:{m.profile_digest})"),
        ("cluster that ran", cluster),
        ("backend", str(m.backend)),
        ("architectures", ", ".join(m.architectures) or "-"),
        ("images", ", ".join(f"{k}: {v}" for k, v in m.images.items()) or "-"),
        ("versions", ", ".join(f"{k} {v}" for k, v in m.versions.items() if v)),
        ("generated", report.generated),
        *provenance_facts(report),
    ]


def _ran_system(report: Report) -> System | None:
    """The cluster the suite ran on: the profile at the node count it was scaled to (None if it cannot load)."""
    m = report.manifest
    if not m.profile:
        return None
    try:
        system = load_profile(m.profile)
        if m.nodes and m.nodes != len(system.nodes):
            system = load_profile(m.profile, nodes=m.nodes)
    except (ProfileError, ValueError):
        return None
    return system


def _requirement_row(r: RequirementResult) -> str:
    detail = ""
    text = _detail_text(r)
    if text:
        if r.status == "not-applicable":
            detail = f"<div class=reason>not applicable: {escape(r.message.split(': ', 1)[-1])}</div>"
        else:
            shown = " open" if r.status in ("failed", "error") else ""
            detail = f"<details{shown}><summary>details</summary><pre>{escape(text)}</pre></details>"
    word = _STATUS_WORDS.get(r.status, r.status)
    cls: str = r.status
    if missed_recommended(r):  # seen as a miss, not as a failure that decides a level (summary.md: the same)
        word, cls = f"{word} (recommended)", "recommended"
    return (f"<tr><td class={cls}>{status_icon(r.status)}{word}</td><td class=mono>{r.id}</td>"
            f"<td>{r.level}, {importance(r)}</td><td>{escape(r.category)}</td><td>{escape(r.title)}{detail}</td>"
            f"<td>{r.duration:.2f}</td></tr>")


def to_html(report: Report) -> str:
    m = report.manifest
    verdict = report.verdicts.overall
    system = _ran_system(report)
    components = ", ".join(f"{c.kind}: {c.spec}" + (f" ({c.version})" if c.version else "") for c in m.components)
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>fakehw certification: {escape(VERDICT_TEXT[verdict])}</title><style>{_CSS}</style></head><body>",
        f'<div class="banner" style="background:{_VERDICT_COLOUR[verdict]}" id="verdict">'
        f"{escape(VERDICT_TEXT[verdict])}<div class=sub>{escape(components)} on {escape(str(m.profile))} "
        f"({escape(str(m.backend))})</div></div>",
        *_why(report),
        "<h2>Environment</h2><table>",
        *[f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in _manifest_rows(report, system)],
        "</table><h2>Verdict per level</h2><table><tr><th>level</th><th>verdict</th><th>required passed</th>"
        "<th>failing</th><th>not applicable</th></tr>",
    ]
    for level, v in report.verdicts.levels.items():
        if not v.required:
            continue
        cls = {"pass": "passed", "n/a": "not-applicable", "incomplete": "not-run"}.get(v.verdict, "failed")
        parts.append(f"<tr><td>{level}</td><td class={cls}>{status_icon(cls)}{v.verdict.upper()}</td>"
                     f"<td>{v.passed}/{v.required - len(v.not_applicable)}</td>"
                     f"<td class=mono>{escape(', '.join(v.failing))}</td>"
                     f"<td class=mono>{escape(', '.join(v.not_applicable))}</td></tr>")
    parts.append("</table>")
    if system is not None:
        parts.append(f"<h2>Topology of {escape(system.name)}</h2><figure>{topology_svg(system)}</figure>")
    s = report.summary
    parts.append(f"<h2>Requirements</h2><p>{s.get('passed', 0)} passed, {s.get('failed', 0)} failed, "
                 f"{s.get('error', 0)} errors, {s.get('skipped', 0)} skipped, "
                 f"{s.get('not-applicable', 0)} not applicable, {s.get('not-run', 0)} not run</p>")
    parts.append("<table id=requirements><tr><th>status</th><th>requirement</th><th>level</th><th>category</th>"
                 "<th>title</th><th>s</th></tr>")
    parts += [_requirement_row(r) for r in report.results]
    parts.append(f"</table><p class=mono>sha256 {report.sha256} &mdash; check with <code>conformance verify "
                 "report.json</code></p></body></html>")
    return "\n".join(parts) + "\n"


def _failing_of(run_dir: Path) -> str:
    """The failing requirement IDs of a run, from its report (empty when it has none or no report)."""
    try:
        report = load_report((run_dir / "report.json").read_text(), str(run_dir / "report.json"))
    except (OSError, ReportError):
        return ""
    return ", ".join(r.id for r in report.results if r.status in ("failed", "error") and r.required)


def index_html(runs: list[dict[str, Any]], certified: bool, base: Path) -> str:
    """A page over several runs (``conformance run`` with a matrix): the overall verdict and each run's report."""
    verdict = "certified" if certified else "not-certified"
    rows = []
    for run in runs:
        report = Path(run["dir"]) / "report.html"
        link = escape(str(report.relative_to(base)) if report.is_relative_to(base) else str(report))
        text = run["verdict"] or ("CERTIFIED" if run["certified"] else "NOT CERTIFIED")
        cls = "passed" if run["certified"] else "failed"
        failing = _failing_of(Path(run["dir"])) if not run["certified"] else ""
        why = f"failing: {failing}" if failing else ("" if run["certified"] else "see its report")
        rows.append(f"<tr><td>{escape(run['target'])}</td><td class=mono>{escape(run['component'])}</td>"
                    f"<td>{escape(run['profile'])}</td><td>{escape(run['backend'])}</td><td class={cls}>"
                    f"{status_icon(cls)}{escape(text)}</td><td class=mono>{escape(why)}</td><td>{run['seconds']}</td>"
                    f"<td><a href=\"{link}\">report</a></td></tr>")
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>fakehw certification: "
            f"{escape(VERDICT_TEXT[verdict])}</title><style>{_CSS}</style></head><body>"
            f'<div class="banner" style="background:{_VERDICT_COLOUR[verdict]}" id="verdict">'
            f"{escape(VERDICT_TEXT[verdict])}<div class=sub>{len(runs)} run(s)</div></div>"
            "<h2>Runs</h2><table><tr><th>target</th><th>component</th><th>profile</th><th>backend</th><th>verdict</th>"
            "<th>why</th><th>s</th><th></th></tr>" + "".join(rows) + "</table></body></html>\n")
