"""Runtime fabric commands: ``up``, ``status``, ``probe``, ``chaos``, ``down``, ``fuzz``, ``replay``.

``up`` builds the emulated fabric, starts a responder on every NIC and leaves both running; the state directory
holds the ledger (``fabric.json``) and the config reference, so ``probe``, ``chaos`` and ``down`` work from other
processes, and ``down`` also cleans up after a process that died. Heavy imports (pyroute2, scapy) happen inside
the commands so ``fakehw --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fakehw.cli_common import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, CliError

STATE_HELP = "directory for the fabric's ledger and the responder's files"


def _load_model(ref: str) -> Any:
    from fakehw.fabric.loader import FabricError
    from fakehw.fabric.model import load_fabric

    try:
        return load_fabric(ref)
    except FabricError as exc:
        raise CliError(f"fabric config {ref} is not valid:\n{exc}", EXIT_BAD_INPUT) from None


def _require_root() -> None:
    from fakehw.fabric.emulate import root_problem

    problem = root_problem()
    if problem:
        raise CliError(problem)


def _attach(fabric_state: Path) -> Any:
    """Re-open a fabric built by ``up`` (in this or another process)."""
    from fakehw.fabric.emulate import EmulatedFabric, Ledger
    from fakehw.fabric.plan import plan

    try:
        ledger = Ledger.load(fabric_state)
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    model = _load_model(ledger.source)
    attachments = _read_attachments(fabric_state)
    return EmulatedFabric(model, plan(model, ledger.run_id, attachments), ledger)


def _read_attachments(state: Path) -> dict[str, Any]:
    from fakehw.fabric.plan import NodeAttachment

    path = state / "attachments.json"
    if not path.exists():
        return {}
    return {k: NodeAttachment(v) for k, v in json.loads(path.read_text()).items()}


def cmd_up(args: argparse.Namespace) -> int:
    from fakehw.fabric.emulate import EmulatedFabric, FabricBuildError, Ledger
    from fakehw.fabric.plan import EmulationError, NodeAttachment
    from fakehw.fabric.traffic import start_responder

    _require_root()
    model = _load_model(args.config)
    state = Path(args.state_dir)
    try:
        if Ledger.load(state):
            raise CliError(f"{state} already holds a fabric; run 'fakehw fabric down --state-dir {state}' first",
                           EXIT_BAD_INPUT)
    except FileNotFoundError:
        pass
    attachments: dict[str, NodeAttachment] = {}
    for item in args.attach or []:
        node, sep, path = item.partition("=")
        if not sep or not path:
            raise CliError(f"--attach takes NODE=NETNS_PATH, got {item!r}", EXIT_BAD_INPUT)
        attachments[node] = NodeAttachment(path)
    try:
        fabric = EmulatedFabric.build(model, state_dir=state, run_id=args.run_id, attachments=attachments)
    except EmulationError as exc:
        raise CliError(f"cannot emulate {model.name}: {exc}", EXIT_BAD_INPUT) from None
    except FabricBuildError as exc:
        raise CliError(str(exc)) from None
    state.mkdir(parents=True, exist_ok=True)
    (state / "attachments.json").write_text(json.dumps({k: v.path for k, v in attachments.items()}))
    if not args.no_responder:
        responder = start_responder(fabric, workdir=state)
        fabric._teardown_hooks.clear()  # the responder outlives this command; the ledger keeps its pid
        print(f"responder pid {responder.pid} on {len(responder.nics)} NIC(s)")
    print(f"fabric {model.name} up: run {fabric.plan.run_id}, {len(fabric.plan.namespaces)} namespace(s), "
          f"{len(fabric.plan.links)} link(s) in {fabric.build_seconds:.2f} s; state in {state}")
    for key, ns in sorted(fabric.plan.namespaces.items())[: args.show]:
        print(f"  {key:<28} ip netns exec {ns.name} ...")
    return EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    from fakehw.fabric.emulate import Ledger, teardown_ledger

    _require_root()
    try:
        ledger = Ledger.load(args.state_dir)
    except FileNotFoundError as exc:
        print(f"fakehw fabric down: nothing to do ({exc})", file=sys.stderr)
        return EXIT_OK
    except ValueError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    report = teardown_ledger(ledger)
    print(f"fabric {ledger.fabric} (run {ledger.run_id}) down: {len(report.removed_netns)} namespace(s), "
          f"{len(report.removed_links)} borrowed link(s), {len(report.stopped)} process(es), "
          f"{len(report.reverted)} impairment(s) reverted in {report.seconds:.2f} s")
    for err in report.errors:
        print(f"  error: {err}", file=sys.stderr)
    if report.leftovers:
        print("left over: " + ", ".join(report.leftovers), file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from fakehw.fabric.emulate import Ledger, leftovers

    try:
        ledger = Ledger.load(args.state_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    present = leftovers(ledger)
    data = {"fabric": ledger.fabric, "run": ledger.run_id, "source": ledger.source, "complete": ledger.complete,
            "namespaces": len(ledger.owned_netns), "processes": ledger.processes,
            "impairments": ledger.impairments, "present": len(present)}
    print(json.dumps(data, indent=2) if args.json else
          f"fabric {ledger.fabric} run {ledger.run_id}: {len(present)} resource(s) present, "
          f"{len(ledger.processes)} process(es), {len(ledger.impairments)} impairment(s) active")
    return EXIT_OK


def cmd_probe(args: argparse.Namespace) -> int:
    from fakehw.fabric.checks import run_checks
    from fakehw.fabric.lint import lint
    from fakehw.fabric.traffic import Prober

    _require_root()
    fabric = _attach(Path(args.state_dir))
    prober = Prober(fabric)
    try:
        report = run_checks(fabric, lint(fabric.model), prober, mtu=args.mtu)
    finally:
        prober.close()
    print(report.dumps() if args.json else report.format(verbose=args.verbose))
    return EXIT_OK if report.passed else EXIT_FAILURE


def register(fsub: Any) -> None:
    p = fsub.add_parser("up", help="build the emulated fabric and start its responder (root)")
    p.add_argument("config", help="built-in fabric name or YAML file")
    p.add_argument("--state-dir", required=True, metavar="DIR", help=STATE_HELP)
    p.add_argument("--run-id", metavar="ID", help="name prefix fh<ID> (default random)")
    p.add_argument("--attach", action="append", metavar="NODE=NETNS",
                   help="put a node's NICs into an existing namespace (e.g. /proc/<pid>/ns/net)")
    p.add_argument("--no-responder", action="store_true",
                   help="build namespaces and links only; start no RoCE responder on the NICs (probes then "
                        "get no answers)")
    p.add_argument("--show", type=int, default=0, metavar="N", help="list the first N namespaces")
    p.set_defaults(func=cmd_up)

    p = fsub.add_parser("down", help="remove everything a fabric run created (also after a crash)")
    p.add_argument("--state-dir", required=True, metavar="DIR", help=STATE_HELP)
    p.set_defaults(func=cmd_down)

    p = fsub.add_parser("status", help="what a fabric run has running")
    p.add_argument("--state-dir", required=True, metavar="DIR", help=STATE_HELP)
    p.add_argument("--json", action="store_true",
                   help="print fabric, run, source, complete, counts, processes and impairments as JSON")
    p.set_defaults(func=cmd_status)

    p = fsub.add_parser("probe", help="measure the dynamic requirements on a running fabric (root)")
    p.add_argument("--state-dir", required=True, metavar="DIR", help=STATE_HELP)
    add_probe_options(p)
    p.set_defaults(func=cmd_probe)

    register_fuzz(fsub)
    register_chaos(fsub)


def add_probe_options(p: argparse.ArgumentParser) -> None:
    """The options of a probe run (``fakehw fabric probe`` and ``testbed fabric probe``)."""
    p.add_argument("--mtu", choices=["none", "sample", "all"], default="sample",
                   help="largest-payload measurement: none, one path per MTU profile (default: sample), every path")
    p.add_argument("--json", action="store_true", help="print the probe report as JSON")
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="list passing checks too (and log debug messages)")


def cmd_fuzz(args: argparse.Namespace) -> int:
    if args.replay:
        from fakehw.fabric.fuzz import replay

        try:
            same, why = replay(args.replay)
        except ValueError as exc:
            raise CliError(str(exc), EXIT_BAD_INPUT) from None
        print(("replay ok: " if same else "replay MISMATCH: ") + why)
        return EXIT_OK if same else EXIT_FAILURE
    if args.count < 1:
        raise CliError("--count must be at least 1", EXIT_BAD_INPUT)
    if args.target == "parser":
        from fakehw.fabric.fuzz import fuzz_parser

        report = fuzz_parser(args.seed, args.count)
    else:
        report = _fuzz_responder(args)
    if args.report:
        report.write(args.report)
    print(f"fuzz {report.target}: {report.count} packets, seed {report.seed}, {report.rate:.0f} packets/s, "
          f"{len(report.findings)} finding(s); sha256 {report.digest}")
    for f in report.findings[:10]:
        print(f"  packet {f.index} ({f.kind}): {f.what}: {f.detail[:200]}")
    if args.report:
        print(f"report: {args.report} (replay: fakehw fabric fuzz --replay {args.report})")
    return EXIT_OK if not report.findings else EXIT_FAILURE


def _fuzz_responder(args: argparse.Namespace) -> Any:
    from fakehw.fabric.emulate import EmulatedFabric, FabricBuildError
    from fakehw.fabric.fuzz import fuzz_responder
    from fakehw.fabric.model import NicRef

    _require_root()

    def ref(text: str) -> NicRef:
        node, sep, nic = text.partition("/")
        if not sep:
            raise CliError(f"expected NODE/NIC, got {text!r}", EXIT_BAD_INPUT)
        return NicRef(node, nic)

    a, b = ref(args.source), ref(args.dest)
    if args.state_dir:
        fabric = _attach(Path(args.state_dir))
        return _checked_fuzz(fabric, a, b, args, fuzz_responder)
    model = _load_model(args.config)
    try:
        with EmulatedFabric.build(model) as fabric:
            return _checked_fuzz(fabric, a, b, args, fuzz_responder)
    except FabricBuildError as exc:
        raise CliError(str(exc)) from None


def _checked_fuzz(fabric: Any, a: Any, b: Any, args: argparse.Namespace, run: Any) -> Any:
    for r in (a, b):
        if r not in fabric.plan.nics:
            raise CliError(f"{r} is not a NIC of fabric {fabric.model.name}", EXIT_BAD_INPUT)
    return run(fabric, a, b, args.seed, args.count)


def cmd_chaos(args: argparse.Namespace) -> int:
    from fakehw.fabric.chaos import Chaos, ChaosError, UnsupportedImpairment, capabilities, revert_one

    if args.kind == "kinds":
        for kind, (ok, why) in capabilities().items():
            print(f"{kind:<10} {'available' if ok else 'unsupported: ' + why}")
        return EXIT_OK
    _require_root()
    fabric = _attach(Path(args.state_dir))
    if args.kind == "list":
        for rec in fabric.ledger.impairments:
            print(f"{rec['id']}  {rec['kind']:<10} {rec['target']}  {json.dumps(rec['params'])}")
        return EXIT_OK
    if args.kind == "revert":
        targets = [r["id"] for r in fabric.ledger.impairments] if args.target in (None, "all") else [args.target]
        for imp_id in targets:
            if not revert_one(fabric.ledger, imp_id):
                raise CliError(f"no impairment {imp_id!r} (fakehw fabric chaos list --state-dir ...)", EXIT_BAD_INPUT)
            print(f"reverted {imp_id}")
        return EXIT_OK
    params: dict[str, Any] = {}
    if args.kind == "partition":
        if not args.side_a or not args.side_b:
            raise CliError("partition needs --side-a and --side-b (comma-separated node names)", EXIT_BAD_INPUT)
        params = {"side_a": args.side_a.split(","), "side_b": args.side_b.split(",")}
    elif args.kind in ("loss", "duplicate", "corrupt"):
        params = {"rate": args.rate}
        if args.kind == "loss":
            params["direction"] = args.direction
    elif args.kind == "bandwidth":
        params = {"rate_mbit": args.mbit, "direction": "in" if args.direction == "in" else "out",
                  "kind": args.shaper}
    elif args.kind == "flap":
        params = {"period": args.period, "duration": args.duration}
    elif args.kind == "delay":
        params = {"ms": args.ms, "jitter_ms": args.jitter_ms}
    chaos = Chaos(fabric)
    try:
        imp = chaos.apply(args.kind, args.target, **params)
    except UnsupportedImpairment as exc:
        raise CliError(f"unsupported on this kernel: {exc}") from None
    except ChaosError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    if imp._thread is not None:  # flapping runs in the foreground for its duration
        print(f"{imp.id}: flapping {imp.target} every {args.period} s for {args.duration} s")
        imp._thread.join()
        chaos.revert(imp)
        print(f"{imp.id}: done, {imp.params['transitions']} transitions, link up")
        return EXIT_OK
    print(f"{imp.id}: {imp.kind} on {imp.target} {json.dumps(imp.params)} (revert: fakehw fabric chaos revert "
          f"{imp.id} --state-dir {args.state_dir})")
    return EXIT_OK


def register_chaos(fsub: Any) -> None:
    p = fsub.add_parser("chaos", help="impairments on a running fabric: loss, partition, bandwidth, flap, ...")
    p.add_argument("kind", choices=["kinds", "list", "revert", "link-down", "flap", "partition", "loss", "bandwidth",
                                    "duplicate", "corrupt", "delay", "reorder"],
                   help="kinds: which impairments this kernel supports (needs no fabric); list: the active ones; "
                        "revert: undo TARGET; any other: the impairment to apply to TARGET (partition takes "
                        "--side-a/--side-b instead; reorder is refused: it needs sch_netem)")
    p.add_argument("target", nargs="?", help="node/nic or switch/port (revert: an impairment id or all)")
    p.add_argument("--state-dir", metavar="DIR", help=STATE_HELP)
    p.add_argument("--rate", type=float, default=0.01, help="loss/duplication probability (0-1)")
    p.add_argument("--direction", choices=["in", "out", "both"], default="both",
                   help="in: from the cable into the switch; out: from the switch into the cable")
    p.add_argument("--mbit", type=float, default=100.0, help="bandwidth limit, Mbit/s")
    p.add_argument("--shaper", choices=["tbf", "htb"], default="tbf",
                   help="bandwidth: tc qdisc enforcing --mbit, tbf (token bucket) or htb (one class) (default: tbf)")
    p.add_argument("--period", type=float, default=1.0, help="flap period, s")
    p.add_argument("--duration", type=float, default=10.0, help="flap duration, s")
    p.add_argument("--side-a", metavar="NODES",
                   help="partition: comma-separated node names on one side (required for partition)")
    p.add_argument("--side-b", metavar="NODES",
                   help="partition: comma-separated node names on the other side, disjoint from --side-a")
    p.add_argument("--ms", type=float, default=1.0, help="delay, ms (both directions of the cable)")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="uniform jitter around the delay, ms")
    p.set_defaults(func=_chaos_entry)


def _chaos_entry(args: argparse.Namespace) -> int:
    if args.kind != "kinds" and not args.state_dir:
        raise CliError("--state-dir is required (the fabric started with 'fakehw fabric up')", EXIT_BAD_INPUT)
    return cmd_chaos(args)


def register_fuzz(fsub: Any) -> None:
    p = fsub.add_parser("fuzz", help="scapy fuzz() of BTH/RETH/AETH/PFC at the codec or the responder")
    p.add_argument("--seed", type=int, default=1, help="random seed (recorded; the same seed, the same bytes)")
    p.add_argument("--count", type=int, default=10_000,
                   help="number of fuzzed packets to send, at least 1 (default: 10000)")
    p.add_argument("--target", choices=["parser", "responder"], default="parser",
                   help="parser: the codec and responder logic in process, no root; responder: a live responder "
                        "on an emulated fabric, root (default: parser)")
    p.add_argument("--report", metavar="FILE", help="write the JSON report here")
    p.add_argument("--replay", metavar="REPORT", help="regenerate a recorded run and compare byte for byte")
    p.add_argument("--config", default="dgx-h100-rail", help="fabric to build for --target responder")
    p.add_argument("--state-dir", metavar="DIR", help="use a fabric started with 'fakehw fabric up' instead")
    p.add_argument("--from", dest="source", default="dgx-h100-0/mlx5_0", metavar="NODE/NIC",
                   help="--target responder: the NIC sending the packets (default: dgx-h100-0/mlx5_0)")
    p.add_argument("--to", dest="dest", default="dgx-h100-1/mlx5_0", metavar="NODE/NIC",
                   help="--target responder: the NIC whose responder receives them (default: dgx-h100-1/mlx5_0)")
    p.set_defaults(func=cmd_fuzz)
