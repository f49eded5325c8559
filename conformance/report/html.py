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

from conformance.report.model import Report
from conformance.report.text import STATUS_MARK, VERDICT_TEXT, provenance_facts
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
body{font-family:-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
.banner{padding:18px 22px;border-radius:8px;color:#fff;font-size:28px;font-weight:700}
.sub{font-size:15px;font-weight:400;opacity:.95;margin-top:4px}
table{border-collapse:collapse;margin:12px 0;width:100%}
th,td{border-bottom:1px solid #ddd;padding:6px 8px;text-align:left;vertical-align:top;font-size:14px}
th{background:#f0f2f5}
.passed{color:#1b7f3b;font-weight:700}.failed,.error{color:#b3261e;font-weight:700}
.skipped,.not-run{color:#8a6d00;font-weight:700}
.not-applicable{color:#555;font-weight:700}
details pre{white-space:pre-wrap;background:#f6f6f6;padding:8px;font-size:12px}
.mono{font-family:monospace;font-size:12px}
"""


def to_html(report: Report) -> str:
    m = report.manifest
    verdict = report.verdicts.overall
    try:
        system = load_profile(m.profile) if m.profile else None
    except ProfileError:
        system = None
    components = ", ".join(f"{c.kind}: {c.spec}" + (f" ({c.version})" if c.version else "") for c in m.components)
    rows_manifest = [
        ("component(s)", components or "-"),
        ("profile", f"{m.profile} (sha256:{m.profile_digest})"),
        ("backend", str(m.backend)),
        ("architectures", ", ".join(m.architectures) or "-"),
        ("images", ", ".join(f"{k}: {v}" for k, v in m.images.items()) or "-"),
        ("versions", ", ".join(f"{k} {v}" for k, v in m.versions.items() if v)),
        ("generated", report.generated),
        *provenance_facts(report),
    ]
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>fakehw certification: {escape(VERDICT_TEXT[verdict])}</title><style>{_CSS}</style></head><body>",
        f'<div class="banner" style="background:{_VERDICT_COLOUR[verdict]}" id="verdict">'
        f"{escape(VERDICT_TEXT[verdict])}<div class=sub>{escape(components)} on {escape(str(m.profile))} "
        f"({escape(str(m.backend))})</div></div>",
        "<h2>Environment</h2><table>",
        *[f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows_manifest],
        "</table><h2>Verdict per level</h2><table><tr><th>level</th><th>verdict</th><th>required passed</th>"
        "<th>failing</th></tr>",
    ]
    for level, v in report.verdicts.levels.items():
        if not v.required:
            continue
        cls = {"pass": "passed", "n/a": "not-applicable"}.get(v.verdict, "failed")
        na = f"; not applicable: {', '.join(v.not_applicable)}" if v.not_applicable else ""
        parts.append(f"<tr><td>{level}</td><td class={cls}>{v.verdict.upper()}</td>"
                     f"<td>{v.passed}/{v.required - len(v.not_applicable)}</td>"
                     f"<td class=mono>{escape(', '.join(v.failing) + na)}</td></tr>")
    parts.append("</table>")
    if system is not None:
        parts.append(f"<h2>Topology of {escape(system.name)}</h2><figure>{topology_svg(system)}</figure>")
    s = report.summary
    parts.append(f"<h2>Requirements</h2><p>{s.get('passed', 0)} passed, {s.get('failed', 0)} failed, "
                 f"{s.get('error', 0)} errors, {s.get('skipped', 0)} skipped, "
                 f"{s.get('not-applicable', 0)} not applicable, {s.get('not-run', 0)} not run</p>")
    parts.append("<table id=requirements><tr><th>status</th><th>requirement</th><th>level</th><th>category</th>"
                 "<th>title</th><th>s</th></tr>")
    for r in report.results:
        detail = ""
        if r.message or r.evidence or r.seeds:
            body = escape(r.message)
            for e in r.evidence:
                body += f"\n{escape(e.label)}: {escape(json.dumps(e.value, sort_keys=True, indent=1)[:4000])}"
            if r.seeds:
                body += "\nseeds: " + escape(", ".join(r.seeds))
            detail = f"<details><summary>details</summary><pre>{body}</pre></details>"
        parts.append(f"<tr><td class={r.status}>{STATUS_MARK[r.status]} {r.status}</td><td class=mono>{r.id}</td>"
                     f"<td>{r.level}</td><td>{escape(r.category)}</td><td>{escape(r.title)}{detail}</td>"
                     f"<td>{r.duration:.2f}</td></tr>")
    parts.append(f"</table><p class=mono>sha256 {report.sha256} &mdash; check with <code>conformance verify "
                 "report.json</code></p></body></html>")
    return "\n".join(parts) + "\n"


def index_html(runs: list[dict[str, Any]], certified: bool, base: Path) -> str:
    """A page over several runs (``conformance run`` with a matrix): the overall verdict and each run's report."""
    verdict = "certified" if certified else "not-certified"
    rows = []
    for run in runs:
        report = Path(run["dir"]) / "report.html"
        link = escape(str(report.relative_to(base)) if report.is_relative_to(base) else str(report))
        text = run["verdict"] or ("CERTIFIED" if run["certified"] else "NOT CERTIFIED")
        cls = "passed" if run["certified"] else "failed"
        rows.append(f"<tr><td>{escape(run['target'])}</td><td class=mono>{escape(run['component'])}</td>"
                    f"<td>{escape(run['profile'])}</td><td>{escape(run['backend'])}</td><td class={cls}>{escape(text)}"
                    f"</td><td>{run['seconds']}</td><td><a href=\"{link}\">report</a></td></tr>")
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>fakehw certification: "
            f"{escape(VERDICT_TEXT[verdict])}</title><style>{_CSS}</style></head><body>"
            f'<div class="banner" style="background:{_VERDICT_COLOUR[verdict]}" id="verdict">'
            f"{escape(VERDICT_TEXT[verdict])}<div class=sub>{len(runs)} run(s)</div></div>"
            "<h2>Runs</h2><table><tr><th>target</th><th>component</th><th>profile</th><th>backend</th><th>verdict</th>"
            "<th>s</th><th></th></tr>" + "".join(rows) + "</table></body></html>\n")
