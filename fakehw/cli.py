"""``fakehw``: look at hardware profiles, validate and render them, run the node agent.

Exit codes: 0 success, 2 bad input (a profile that does not validate, a bad argument), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from fakehw import __version__
from fakehw.cli_common import EXIT_BAD_INPUT, CliError, run_cli
from fakehw.model import ProfileError, ProfileSpec, System, builtin_profiles, load_profile, load_spec
from fakehw.model.catalogue import catalogue
from fakehw.model.export import node_to_json
from fakehw.model.system import Node
from fakehw.model.units import format_cpulist, format_size

EPILOG = """\
examples:
  fakehw profiles                         list the built-in profiles
  fakehw show dgx-h100                    what a profile contains
  fakehw topo dgx-h100                    nvidia-smi topo -m style matrix of its first node
  fakehw topo gb200-nvl72 --node 3        ... of the fourth compute tray
  fakehw validate my-cluster.yaml         check a profile (exit 2 with file:line: path: problem)
  fakehw schema > fakehw-profile.json     JSON Schema for editors
  fakehw render dgx-h100 --out /tmp/r     write every node's files (node.json, state.json, ...)
  fakehw agent --profile dgx-h100 --state-dir /tmp/agent
"""


def _load(ref: str, nodes: int | None = None) -> System:
    try:
        return load_profile(ref, nodes=nodes)
    except ProfileError as exc:
        raise CliError(f"profile {ref} is not valid:\n{exc}", EXIT_BAD_INPUT) from None


def _pick_node(system: System, which: str | None) -> Node:
    if which is None:
        return system.nodes[0]
    if which.isdigit():
        index = int(which)
        if index >= len(system.nodes):
            raise CliError(f"{system.name} has {len(system.nodes)} node(s); there is no node {index}",
                           EXIT_BAD_INPUT)
        return system.nodes[index]
    node = system.node(which)
    if node is None:
        names = ", ".join(n.name for n in system.nodes[:8]) + (" ..." if len(system.nodes) > 8 else "")
        raise CliError(f"{system.name} has no node {which!r} (nodes: {names})", EXIT_BAD_INPUT)
    return node


# --------------------------------------------------------------------------------------------------- commands


def cmd_profiles(args: argparse.Namespace) -> int:
    rows = []
    for name, path in builtin_profiles().items():
        spec = load_spec(path).spec
        rows.append({"name": name, "description": spec.description, "projection": spec.projection})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"] or "") for r in rows)
    for r in rows:
        mark = " (projection)" if r["projection"] else ""
        print(f"{r['name']:<{width}}  {r['description']}{mark}")
    return 0


def _describe_node(node: Node) -> list[str]:
    cpu = node.cpu
    lines = [
        f"  CPU       {cpu.sockets} x {cpu.model} ({cpu.arch}), {cpu.cores_per_socket} cores/socket, "
        f"{cpu.threads_per_core} thread(s)/core = {cpu.logical_cpus} CPUs",
    ]
    numa = []
    for n in node.numa:
        where = f"cpus {format_cpulist(n.cpus)}" if n.cpus else ("CPU-less" + (f", {n.gpu} HBM" if n.gpu else ""))
        numa.append(f"node{n.id} {n.kind} {format_size(n.memory)} {where}")
    lines.append("  NUMA      " + "; ".join(numa))
    skus = Counter(g.sku.id for g in node.gpus)
    for sku_id, count in skus.items():
        sku = catalogue().gpus[sku_id]
        nv = f"NVLink{sku.nvlink.generation} x{sku.nvlink.links}" if sku.nvlink.links else "no NVLink"
        lines.append(f"  GPUs      {count} x {sku.name} ({sku_id}), {sku.memory_mib} MiB, {nv}, "
                     f"CC {sku.compute_capability}")
    mig = [f"{g.name}: {', '.join(m.profile.name for m in g.mig_instances)}" for g in node.gpus if g.mig_enabled]
    if mig:
        lines.append("  MIG       " + "; ".join(mig))
    if node.nvswitches:
        sw = Counter(s.sku.id for s in node.nvswitches)
        lines.append("  NVSwitch  " + ", ".join(f"{c} x {k}" for k, c in sw.items()))
    if any(g.c2c for g in node.gpus):
        lines.append("  C2C       " + ", ".join(f"{g.name}->cpu{g.c2c.socket} {g.c2c.bandwidth_gbs:g} GB/s"
                                             for g in node.gpus if g.c2c))
    if node.nics:
        rails = sorted({n.rail for n in node.nics if n.rail is not None})
        skus = Counter(n.sku.id for n in node.nics)
        layers = Counter("InfiniBand" if n.link_layer == "infiniband" else "Ethernet" for n in node.nics)
        names = sorted((n.name for n in node.nics), key=lambda x: (len(x), x))
        lines.append(f"  NICs      {', '.join(f'{c} x {k}' for k, c in skus.items())} "
                     f"({', '.join(f'{c} {k}' for k, c in sorted(layers.items()))}; {names[0]} .. {names[-1]}), "
                     f"rails {format_cpulist(rails) or '-'}")
    if node.cxl.memdevs:
        total = sum(m.ram_size + m.pmem_size for m in node.cxl.memdevs)
        lines.append(f"  CXL       {len(node.cxl.host_bridges)} host bridges, {len(node.cxl.switches)} switches, "
                     f"{len(node.cxl.memdevs)} memdevs ({format_size(total)}), {len(node.cxl.windows)} windows, "
                     f"{len(node.cxl.regions)} regions")
    for p in node.memory_pools:
        lines.append(f"  Pool      {p.name}: {p.tier} {format_size(p.capacity)} {p.policy}, latency domain "
                     f"{p.latency.name} (~{p.latency.latency_ns} ns, {p.bandwidth_gbs:g} GB/s)")
    return lines


def cmd_show(args: argparse.Namespace) -> int:
    if args.catalogue:
        cat = catalogue()
        if args.json:
            print(json.dumps(cat.model_dump(mode="json", by_alias=True), indent=2))
            return 0
        for sku in cat.gpus.values():
            print(f"{sku.id:18} {sku.name:26} 10de:{sku.pci_device_id:04x}  {sku.memory_mib:>6} MiB  "
                  f"NVLink{sku.nvlink.generation} x{sku.nvlink.links:<2}  CC {sku.compute_capability}  "
                  f"MIG {sku.mig.max_instances if sku.mig else '-'}")
        for sw in cat.nvswitches.values():
            print(f"{sw.id:18} {sw.name:26} 10de:{sw.pci_device_id:04x}  {sw.ports} ports")
        for nic in cat.nics.values():
            print(f"{nic.id:18} {nic.name[:26]:26} {nic.vendor_id:04x}:{nic.device_id:04x}  {nic.rate_gbps} Gb/s")
        return 0
    if not args.profile:
        raise CliError("name a profile (fakehw profiles lists them) or use --catalogue", EXIT_BAD_INPUT)
    system = _load(args.profile, args.nodes)
    if args.json:
        print(json.dumps({"name": system.name, "description": system.description, "digest": system.digest,
                          "nodes": [node_to_json(system, n) for n in system.nodes]}, indent=2))
        return 0
    print(f"{system.name}: {system.description}")
    if system.projection:
        print(f"projection: {system.projection}")
    print(f"profile digest sha256:{system.digest}")
    print(f"driver {system.driver.version} (CUDA {system.driver.cuda_version}); {len(system.nodes)} node(s), "
          f"{system.gpu_count} GPU(s)")
    seen: set[str] = set()
    for node in system.nodes:
        if node.group in seen:
            continue
        seen.add(node.group)
        members = [n.name for n in system.nodes if n.group == node.group]
        span = members[0] if len(members) == 1 else f"{members[0]} .. {members[-1]}"
        print(f"\ngroup {node.group}: {len(members)} node(s) ({span})")
        for line in _describe_node(node):
            print(line)
    for d in system.nvlink_domains:
        gpus = sum(len(n.gpus) for name in d.nodes if (n := system.node(name)))
        fabric = f", cluster {d.fabric.cluster_uuid} clique {d.fabric.clique_id}" if d.fabric else ""
        print(f"\nNVLink domain {d.name}: {len(d.nodes)} nodes, {gpus} GPUs, {len(d.switches)} switch chips{fabric}")
    for pool in system.cxl_pools:
        print(f"\nCXL pool {pool.name}: {format_size(pool.capacity)} as {pool.logical_devices} logical devices of "
              f"{format_size(pool.ld_size)}, shared by {len(pool.nodes)} hosts via {pool.host_port}")
    return 0


def cmd_topo(args: argparse.Namespace) -> int:
    from fakehw.views.topo_matrix import format_topo_matrix

    system = _load(args.profile, args.nodes)
    node = _pick_node(system, args.node)
    if len(system.nodes) > 1:
        print(f"# {node.name} ({system.name})")
    sys.stdout.write(format_topo_matrix(node, system.topology.nodes[node.name]))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    failed = 0
    for ref in args.files:
        try:
            system = load_profile(ref)
        except ProfileError as exc:
            failed += 1
            print(str(exc), file=sys.stderr)
            continue
        print(f"ok: {ref}: {system.name}, {len(system.nodes)} node(s), {system.gpu_count} GPU(s)")
    if failed:
        print(f"fakehw: {failed} of {len(args.files)} profile(s) not valid", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    schema = ProfileSpec.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "fakehw profile"
    text = json.dumps(schema, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from fakehw.agent.state import derive_state
    from fakehw.render import OUTPUTS, render_node

    system = _load(args.profile, args.nodes)
    nodes = [_pick_node(system, n) for n in args.node] if args.node else list(system.nodes)
    outputs = frozenset(o.strip() for o in args.outputs.split(",") if o.strip()) if args.outputs else None
    unknown = sorted(set(outputs or ()) - set(OUTPUTS))
    if unknown:
        raise CliError(f"unknown output(s) {', '.join(unknown)} (outputs: {', '.join(OUTPUTS)})", EXIT_BAD_INPUT)
    out = Path(args.out)
    written = unchanged = 0
    for i, node in enumerate(nodes, 1):
        state = derive_state(node, [], generation=1, seed=system.seed)
        result = render_node(system, node, state, out / node.name, initial=True, outputs=outputs)
        written += result.written
        unchanged += result.unchanged
        if not args.quiet and (i == len(nodes) or i % 100 == 0):
            print(f"rendered {i}/{len(nodes)} node(s)", file=sys.stderr)
    print(f"{len(nodes)} node(s) in {out}: {written} file(s) written, {unchanged} unchanged")
    return 0


def cmd_kinds(args: argparse.Namespace) -> int:
    from fakehw.agent.faults import describe_kinds

    kinds = describe_kinds()
    if args.json:
        print(json.dumps(kinds, indent=2))
        return 0
    for k in kinds:
        params = ", ".join(f"{n}={'<required>' if p['required'] else p['default']}"
                           for n, p in k["params"].items())  # type: ignore[attr-defined]
        print(f"{k['kind']:16} target {k['target']:10} {k['summary']}" + (f"  [{params}]" if params else ""))
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    from fakehw.agent.main import run_agent
    from fakehw.agent.progress import StartProgress
    from fakehw.agent.trust import read_token_file

    StartProgress(Path(args.state_dir))("loading the profile")
    system = _load(args.profile, args.nodes)
    for name in args.node or []:
        if system.node(name) is None:
            raise CliError(f"profile {system.name} has no node {name!r}", EXIT_BAD_INPUT)
    try:
        token = read_token_file(Path(args.token_file)) if args.token_file else None
        run_agent(system, Path(args.state_dir), args.node or None,
                  Path(args.socket) if args.socket else None, args.listen, token, salvage=args.salvage_journal,
                  files=args.files)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    return 0


# --------------------------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fakehw",
        description="Emulated GPU-fabric hardware: profiles, topology, rendering and the node agent.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fakehw {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    def profile_arg(p: argparse.ArgumentParser, required: bool = True) -> None:
        p.add_argument("profile", nargs=None if required else "?",
                       help="built-in profile name (see 'fakehw profiles') or a YAML file")
        p.add_argument("--nodes", type=int, metavar="N", help="override the node count (single-group profiles)")

    p = sub.add_parser("profiles", help="list built-in profiles")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list of {name, description, projection} instead of the table")
    p.set_defaults(func=cmd_profiles)

    p = sub.add_parser("show", help="summarise a profile (or the SKU catalogue)")
    profile_arg(p, required=False)
    p.add_argument("--json", action="store_true", help="the expanded model and topology as JSON")
    p.add_argument("--catalogue", action="store_true", help="list the GPU, NVSwitch and NIC SKUs instead")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("topo", help="nvidia-smi topo -m style matrix of one node")
    profile_arg(p)
    p.add_argument("--node", metavar="N|NAME", help="node index or name (default: the first)")
    p.set_defaults(func=cmd_topo)

    p = sub.add_parser("validate", help="check profile files; exit 2 naming file, line, path and problem")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="profile YAML files to check (built-in profile names work too); one or more")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("schema", help="print the profile JSON Schema (for editors)")
    p.add_argument("--out", metavar="FILE", help="write the schema to FILE instead of stdout")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("render", help="write every node's files (what a node needs) to a directory")
    profile_arg(p)
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory (required); each node's files go to DIR/<node name>/")
    p.add_argument("--node", action="append", metavar="N|NAME", help="only these nodes (repeatable)")
    p.add_argument("--outputs", metavar="LIST", help="comma list of model, state, nvml, root (default: all)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no 'rendered i/N node(s)' progress lines on stderr (the summary line stays)")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("kinds", help="list the fault kinds the agent can inject")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list of {kind, target, summary, params} instead of the table")
    p.set_defaults(func=cmd_kinds)

    p = sub.add_parser("agent", help="run the node agent (control API on a unix socket)")
    p.add_argument("--profile", required=True, help="built-in profile name or YAML file")
    p.add_argument("--nodes", type=int, metavar="N", help="override the node count")
    p.add_argument("--state-dir", required=True, metavar="DIR", help="journal, socket and node outputs")
    p.add_argument("--node", action="append", metavar="NAME", help="serve only these nodes (repeatable)")
    p.add_argument("--socket", metavar="PATH", help="unix socket (default: STATE_DIR/agent.sock)")
    p.add_argument("--listen", metavar="HOST:PORT", help="also serve on loopback TCP (needs --token-file)")
    p.add_argument("--token-file", metavar="FILE",
                   help="bearer token for the TCP listener (a file only you can read and write: chmod 600)")
    p.add_argument("--files", choices=("all", "on-demand"), default="all",
                   help="make every node's files (NVML snapshot, /sys tree) at start (all, the default), or a "
                        "node's only when asked with POST /v1/render (on-demand: a 10,000-node fleet starts in "
                        "seconds and costs disk only for the nodes used; the local testbed runs it so)")
    p.add_argument("--salvage-journal", action="store_true",
                   help="start from a damaged journal: use the records that check out, keep the damaged file "
                        "beside it (journal.jsonl.damaged-TIME) and report what was dropped (GET /v1/health)")
    p.set_defaults(func=cmd_agent)

    from fakehw.fabric.cli import register as register_fabric  # fakehw fabric ... (lint, up, probe, fuzz)

    register_fabric(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("fakehw", build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
