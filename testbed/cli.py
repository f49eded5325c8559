"""``testbed``: stand up clusters of fake GPU nodes and drive them.

Exit codes: 0 success, 2 bad input (unknown profile, node, fault kind or parameter), 1 anything else; ``exec``
returns the command's own exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fakehw import __version__
from fakehw.agent.client import AgentRequestError
from fakehw.cli_common import EXIT_BAD_INPUT, AddCommand, CliError, run_cli
from fakehw.model import ProfileError
from testbed.api import Testbed
from testbed.backends import BACKENDS, BackendError, BackendInputError
from testbed.cluster import all_clusters, default_state_dir

EPILOG = """\
examples:
  testbed up                                         stand up dgx-h100 as cluster 'default' (local backend)
  testbed up --profile gb200-nvl72 --name rack        an NVL72 rack as cluster 'rack'
  testbed status --topology                          nodes, health and the topology matrix
  testbed exec dgx-h100-0 -- python -c 'import pynvml; pynvml.nvmlInit()'
  testbed inject dgx-h100-0 xid gpu3 code=79         GPU 3 falls off the bus
  testbed inject dgx-h100-0 nvlink-down gpu0 link=4
  testbed faults                                     active faults
  testbed heal --all                                 heal everything
  testbed events --follow                            stream events
  testbed down                                       tear it down (--all: every cluster)
  testbed demo                                       up, show topology and health, inject, heal, down
  testbed up --backend kubeconfig --kubeconfig ~/.kube/config --kwok --nodes 10000 --name fleet
                                                     10,000 dgx-h100 nodes as KWOK nodes in a real cluster
"""


def _translate(exc: Exception) -> CliError | None:
    if isinstance(exc, BackendInputError):
        return CliError(str(exc), EXIT_BAD_INPUT)
    if isinstance(exc, BackendError):
        return CliError(str(exc))
    if isinstance(exc, AgentRequestError):
        return CliError(exc.message, EXIT_BAD_INPUT if 400 <= exc.status < 500 else 1)
    if isinstance(exc, ProfileError):
        return CliError(str(exc), EXIT_BAD_INPUT)
    if isinstance(exc, ValueError):
        return CliError(str(exc), EXIT_BAD_INPUT)
    return None


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir) if args.state_dir else default_state_dir()


def _attach(args: argparse.Namespace) -> Testbed:
    return Testbed.attach(args.name, _state_dir(args))


NO_CLUSTER_NEEDED = frozenset({"up", "demo", "list", "host", "images"})
"""Commands that do not act on an existing cluster (``up`` and ``demo`` make theirs: 'default', 'demo')."""


def _cluster_name(args: argparse.Namespace) -> str:
    """``--name`` if given; else the only cluster of the state directory; else 'default' if it is one of them."""
    records = all_clusters(_state_dir(args))
    names = [r.name for r in records]
    if len(names) == 1:
        return names[0]
    if not names or "default" in names:
        return "default"
    raise CliError(f"{len(names)} clusters exist ({', '.join(names)}): say which with --name", EXIT_BAD_INPUT)


def _resolving_name(command: str, func: Any) -> Any:
    """``func`` with ``args.name`` filled in when ``--name`` was not given (see :func:`_cluster_name`)."""

    def run(args: argparse.Namespace) -> int:
        if getattr(args, "name", "") is None:
            if command in NO_CLUSTER_NEEDED or (command == "down" and args.all):
                args.name = "demo" if command == "demo" else "default"
            else:
                args.name = _cluster_name(args)
        return int(func(args) or 0)

    return run


def _resolve_names(parser: argparse.ArgumentParser, command: str = "") -> None:
    """Wrap the function of every (sub)command so a missing ``--name`` means the one cluster there is."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                _resolve_names(child, command or name)
    func = parser.get_default("func")
    if func is not None and command:
        parser.set_defaults(func=_resolving_name(command, func))


def _parse_params(items: Sequence[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise CliError(f"fault parameters are key=value, got {item!r}", EXIT_BAD_INPUT)
        try:
            params[key.replace("-", "_")] = json.loads(raw)
        except json.JSONDecodeError:
            params[key.replace("-", "_")] = raw
    return params


# --------------------------------------------------------------------------------------------------- commands


def _image_option(value: str | None) -> str | dict[str, str] | None:
    """``--image TAG`` (every node) or ``--image amd64=TAG,riscv64=TAG`` (per architecture)."""
    if value is None or "=" not in value:
        return value
    images: dict[str, str] = {}
    for item in value.split(","):
        arch, sep, tag = item.strip().partition("=")
        if not sep or not arch or not tag:
            raise CliError(f"--image: expected TAG or ARCH=TAG,ARCH=TAG, got {value!r}", EXIT_BAD_INPUT)
        images[arch.removeprefix("linux/")] = tag
    return images


BACKEND_OPTIONS = {"gpus": ("docker",), "image": ("docker",), "kubeconfig": ("kubeconfig",),
                   "node_image": ("kind", "kubeconfig"), "kind_image": ("kind",), "kind_path": ("kind",),
                   "kubectl_path": ("kind", "kubeconfig"), "kwok": ("kubeconfig",),
                   "kwok_workers": ("kubeconfig",)}
"""``testbed up`` options and the backends that take them (others refuse them: a typo is not silently ignored)."""


def _backend_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, backends in BACKEND_OPTIONS.items():
        value = getattr(args, key, None)
        if value is None:
            continue
        if args.backend not in backends:
            raise CliError(f"--{key.replace('_', '-')} is for the {' and '.join(backends)} backend"
                           f"{'s' if len(backends) > 1 else ''}, not {args.backend}", EXIT_BAD_INPUT)
        options[key] = _image_option(value) if key == "image" else value
    if args.backend == "kubeconfig" and "kubeconfig" not in options:
        raise CliError("the kubeconfig backend needs --kubeconfig FILE (the cluster to put the fake nodes on)",
                       EXIT_BAD_INPUT)
    return options


def cmd_up(args: argparse.Namespace) -> int:
    start = time.monotonic()
    print(f"starting cluster {args.name!r}: profile {args.profile} on the {args.backend} backend ...", file=sys.stderr)
    options = _backend_options(args)
    tb = Testbed.up(args.profile, nodes=args.nodes, backend=args.backend, name=args.name,
                    state_dir=_state_dir(args), driver=args.driver, progress=_start_reporter(start), **options)
    print(f"cluster {tb.name} is up: {len(tb.record.nodes)} node(s) in {time.monotonic() - start:.1f} s "
          f"({tb.record.dir})")
    return 0


def _start_reporter(start: float) -> Callable[[dict[str, Any]], None]:
    """Prints what a starting agent reports, once the start has taken more than a couple of seconds."""
    def report(progress: dict[str, Any]) -> None:
        if progress.get("notice"):
            print(f"  note: {progress['notice']}", file=sys.stderr, flush=True)
            return
        if time.monotonic() - start < 2.0:
            return
        done, total = progress.get("done", 0), progress.get("total", 0)
        count = f" {done}/{total}" if total else ""
        if progress.get("phase") == "kwok":
            print(f"  kwok: {done}/{total} nodes registered, {progress.get('objects', 0)} objects "
                  f"({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)
            return
        print(f"  agent: {progress.get('phase', 'starting')}{count} ({time.monotonic() - start:.0f} s)",
              file=sys.stderr, flush=True)

    return report


def _health_summary(state: dict[str, Any]) -> str:
    counts = Counter(g["health"] for g in state["gpus"])
    text = ", ".join(f"{n} {h}" for h, n in sorted(counts.items())) or "no GPUs"
    bad = [f"{g['name']}: {'; '.join(g['reasons'])}" for g in state["gpus"] if g["health"] != "healthy"]
    bad += [f"{m['name']}: offline" for m in state["memdevs"] if not m["online"]]
    return text + (f" ({' | '.join(bad)})" if bad else "")


def cmd_status(args: argparse.Namespace) -> int:
    tb = _attach(args)
    alive = tb.alive()
    rec = tb.record
    if rec.extra.get("kwok"):
        return _kwok_status(tb, alive, args.json)
    states = {n: tb.state(n) for n in rec.nodes} if alive else {}
    if args.json:
        print(json.dumps({"cluster": rec.name, "backend": rec.backend, "profile": rec.profile, "alive": alive,
                          "nodes": list(states.values())}, indent=2))
        return 0 if alive else 1
    if rec.backend == "docker":  # one agent per node container
        print(f"cluster {rec.name}: profile {rec.profile} on docker, {len(rec.nodes)} node container(s), agents "
              f"{'up' if alive else 'NOT ALL RUNNING'}")
        if not alive:
            print(f"a node container is not running: 'testbed chaos restart NODE' brings one back, 'docker ps -a "
                  f"--filter label=org.fakehw.cluster={rec.name}' shows them")
            return 1
    else:
        print(f"cluster {rec.name}: profile {rec.profile} on {rec.backend}, {len(rec.nodes)} node(s), agent "
              f"{'up' if alive else 'DOWN'} (pid {rec.agent_pid})")
    if not alive:
        print(f"the agent is not running; see {rec.dir / 'agent.log'} or run 'testbed down --name {rec.name}'")
        return 1
    arch = {n.name: n.cpu.arch for n in tb.system.nodes}
    width = max(len(n) for n in rec.nodes)
    print(f"{'NODE':<{width}}  {'ARCH':8} {'GPUS':>4}  {'FAULTS':>6}  HEALTH")
    for name in rec.nodes:
        st = states[name]
        print(f"{name:<{width}}  {arch[name]:8} {len(st['gpus']):>4}  {len(st['faults']):>6}  "
              f"{_health_summary(st)}")
    if args.topology:
        from fakehw.views.topo_matrix import format_topo_matrix

        shown: set[str] = set()
        for node in tb.system.nodes:
            if node.group in shown and not args.all_nodes:
                continue
            shown.add(node.group)
            print(f"\ntopology of {node.name}:")
            sys.stdout.write(format_topo_matrix(node, tb.system.topology.nodes[node.name]))
    return 0


def _kwok_status(tb: Testbed, alive: bool, as_json: bool) -> int:
    """A KWOK cluster has no agents: what was registered and whether its Nodes are still in the cluster."""
    rec = tb.record
    if as_json:
        print(json.dumps({"cluster": rec.name, "backend": rec.backend, "profile": rec.profile, "alive": alive,
                          "kwok": True, "nodes": rec.nodes, "kinds": rec.extra.get("kwok_kinds", []),
                          "objects": rec.extra.get("kwok_objects")}, indent=2))
        return 0 if alive else 1
    print(f"cluster {rec.name}: profile {rec.profile} as {len(rec.nodes)} KWOK node(s) in "
          f"{rec.extra['kubeconfig']} ({', '.join(rec.extra.get('kwok_kinds', []))}; "
          f"{rec.extra.get('kwok_objects', '?')} objects); {'registered' if alive else 'NOT FOUND in the cluster'}")
    return 0 if alive else 1


def cmd_inject(args: argparse.Namespace) -> int:
    tb = _attach(args)
    fault = tb.inject(args.node, args.kind, args.device, **_parse_params(args.params))
    if args.json:
        print(json.dumps(fault, indent=2))
    else:
        params = {k: v for k, v in fault.items() if k not in ("id", "node", "kind", "device", "created")}
        extra = " " + " ".join(f"{k}={v}" for k, v in params.items()) if params else ""
        print(f"{fault['id']}: {fault['kind']} on {fault['node']}/{fault['device']}{extra}")
    return 0


def cmd_heal(args: argparse.Namespace) -> int:
    if not (args.fault_id or args.node or args.device or args.kind or args.all):
        raise CliError("say what to heal: a fault id, --node/--device/--kind, or --all", EXIT_BAD_INPUT)
    tb = _attach(args)
    healed = tb.heal(args.fault_id, node=args.node, device=args.device, kind=args.kind)
    for f in healed:
        print(f"healed {f['id']}: {f['kind']} on {f['node']}/{f['device']}")
    if not healed and args.fault_id:
        raise CliError(f"cluster {tb.name} has no active fault {args.fault_id} ('testbed faults' lists them)",
                       EXIT_BAD_INPUT)
    if not healed:
        print("nothing matched; no fault healed")
    return 0


def cmd_faults(args: argparse.Namespace) -> int:
    tb = _attach(args)
    if args.node or tb.record.backend == "local":
        faults = tb.agent(args.node).faults(args.node)
    else:  # one agent per node (docker): ask each
        faults = [f for node in tb.record.nodes for f in tb.agent(node).faults(node)]
    if args.json:
        print(json.dumps(faults, indent=2))
        return 0
    for f in faults:
        params = {k: v for k, v in f.items() if k not in ("id", "node", "kind", "device", "created")}
        print(f"{f['id']}  {f['node']}/{f['device']}  {f['kind']}  " + " ".join(f"{k}={v}" for k, v in params.items()))
    if not faults:
        print("no active faults")
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    tb = _attach(args)
    since = args.since
    while True:
        batch = tb.agent(args.node).events(since=since, node=args.node, wait=20.0 if args.follow else 0.0)
        for e in batch["events"]:
            print(json.dumps(e) if args.json else
                  f"{e['seq']:>6}  {time.strftime('%H:%M:%S', time.localtime(e['time']))}  {e['node']}/{e['device']}"
                  f"  {e['kind']}  {e['data']}", flush=True)
            since = max(since, e["seq"])
        if not args.follow:
            return 0


def cmd_exec(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CliError("nothing to run: testbed exec NODE -- COMMAND [ARGS...]", EXIT_BAD_INPUT)
    tb = _attach(args)
    env: dict[str, str] | None = None
    if tb.record.backend == "local":
        env, command = local_exec(command)
    result = tb.exec(args.node, command, env=env, capture=False, timeout=None)
    return result.returncode


def local_exec(command: list[str]) -> tuple[dict[str, str], list[str]]:
    """The environment and command line of ``testbed exec`` on a local-backend node.

    The project's own environment comes first on PATH, so ``python`` there is the one with fakehw and pynvml
    whether or not a venv is active. ``nvidia-smi``, when this machine has none, is the real one run against the
    node's fake NVML (``python -m fakehw.nvml smi``), which says how to fetch it when it is not there."""
    bin_dir = str(Path(sys.executable).parent)
    path = os.pathsep.join([bin_dir, os.environ.get("PATH", os.defpath)])
    if command[0] == "nvidia-smi" and shutil.which("nvidia-smi", path=path) is None:
        command = [sys.executable, "-m", "fakehw.nvml", "smi", "--", *command[1:]]
    return {"PATH": path}, command


def cmd_env(args: argparse.Namespace) -> int:
    tb = _attach(args)
    for key, value in tb.node(args.node).env.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    if args.all:
        records = all_clusters(_state_dir(args))
        for rec in records:
            Testbed.attach(rec.name, _state_dir(args)).down()
            print(f"cluster {rec.name} is down")
        if not records:
            print("no clusters")
        from testbed.cli_docker import remove_docker_leftovers

        remove_docker_leftovers(_state_dir(args))
        return 0
    tb = _attach(args)
    tb.down()
    print(f"cluster {tb.name} is down")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    records = all_clusters(_state_dir(args))
    for rec in records:
        alive = Testbed.attach(rec.name, _state_dir(args)).alive()
        print(f"{rec.name:16} {rec.backend:8} {rec.profile:24} {len(rec.nodes):>4} node(s)  "
              f"{'up' if alive else 'down'}")
    if not records:
        print("no clusters")
    return 0


def cmd_restart_agent(args: argparse.Namespace) -> int:
    from testbed.backends.local import LocalBackend

    tb = _attach(args)
    if not isinstance(tb.backend, LocalBackend):
        raise CliError(f"restart-agent is for the local backend; this cluster runs on {tb.record.backend}")
    tb.backend.stop_agent(tb.record, kill=args.kill)
    tb.backend.start_agent(tb.record, salvage=args.salvage_journal, report=_start_reporter(time.monotonic()))
    print(f"agent of {tb.name} restarted (pid {tb.record.agent_pid})")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The embedded default job: stand up a profile, show its topology and health, exercise a fault, tear down."""
    name = args.name
    tb = Testbed.up(args.profile, nodes=args.nodes, backend=args.backend, name=name, state_dir=_state_dir(args),
                    driver=args.driver, **_backend_options(args))
    try:
        print(f"== {args.profile} on the {args.backend} backend: {len(tb.record.nodes)} node(s)\n")
        args.topology, args.json, args.all_nodes = True, False, False
        cmd_status(args)
        node = tb.record.nodes[0]
        gpus = tb.state(node)["gpus"]
        if gpus:
            device = gpus[-1]["name"]
            print(f"\n== inject: {device} of {node} falls off the bus (Xid 79)")
            fault = tb.inject(node, "xid", device, code=79)
            print(f"{node}: {_health_summary(tb.state(node))}")
            tb.heal(fault["id"])
            print(f"== heal {fault['id']}\n{node}: {_health_summary(tb.state(node))}")
    finally:
        tb.down()
    print(f"\ncluster {name} is down")
    return 0


# --------------------------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The ``testbed`` CLI: its own commands in the order ``--help`` lists them, then the Docker, platform and
    fabric groups."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--name", default=None,
                        help="cluster name (default: the only cluster there is, else 'default'; 'up' names its "
                             "cluster 'default')")
    common.add_argument("--state-dir", metavar="DIR",
                        help="where clusters live (default: $FAKEHW_STATE_DIR or /tmp/fakehw-<uid>)")

    parser = argparse.ArgumentParser(
        prog="testbed",
        description="Stand up clusters of fake GPU nodes (local backend by default) and drive them: exec, "
                    "inject and heal faults, watch events.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"testbed {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log debug messages")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    def add(name: str, help: str, func: Any) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, parents=[common])
        p.set_defaults(func=func)
        return p

    _add_up_commands(add)
    _add_fault_commands(add)
    _add_node_commands(add)

    from testbed.cli_docker import register as register_docker_commands

    register_docker_commands(add, _state_dir)

    from testbed.platform_cli import register as register_platform_commands

    register_platform_commands(add, _state_dir)

    from testbed.fabric_cli import register as register_fabric_commands

    register_fabric_commands(sub, common)
    _resolve_names(parser)
    return parser




def _add_up_commands(add: AddCommand) -> None:
    """``up`` and ``demo`` (the same options), and ``status``."""
    for name, func, helptext in (("up", cmd_up, "stand up a cluster (default: dgx-h100 on the local backend)"),
                                 ("demo", cmd_demo, "up, show topology and health, inject and heal a fault, down")):
        p = add(name, helptext, func)
        p.add_argument("--profile", default="dgx-h100", help="built-in profile or YAML file (default: dgx-h100)")
        p.add_argument("--nodes", type=int, metavar="N", help="node count (single-group profiles)")
        p.add_argument("--driver", metavar="VERSION",
                       help="the NVIDIA driver every node runs instead of the profile's, e.g. 535.261.03: the real "
                            "nvidia-smi can be had for 535, 550 and 555 only (Blackwell needs 570 or newer)")
        p.add_argument("--backend", default="local", choices=BACKENDS,
                       help="where the nodes run: local (node directories and one agent on this machine), docker "
                            "(a container per node), kind (a local Kubernetes cluster) or kubeconfig (an existing "
                            "cluster) (default: local)")
        p.add_argument("--gpus", help="docker backend: GPUs each node container gets (all, none, gpu2,gpu5 or 2,5)")
        p.add_argument("--image", metavar="TAG|ARCH=TAG,...",
                       help="docker backend: node image to run, one for every node or one per architecture "
                            "(amd64=fakehw/node:amd64,riscv64=...) (default: built from this checkout)")
        p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig backend: the cluster to put the nodes on")
        p.add_argument("--kwok", action="store_true", default=None,
                       help="kubeconfig backend: register the nodes as KWOK-managed Node objects (labels as GFD "
                            "writes them, capacity, NodeResourceTopology, DRA ResourceSlices) instead of running "
                            "agents on real nodes: a real kube-scheduler then schedules against thousands of them. "
                            "KWOK must be installed in the cluster (docs/kubernetes.md)")
        p.add_argument("--kwok-workers", type=int, metavar="N",
                       help="with --kwok: API requests in flight at most (default 16)")
        p.add_argument("--node-image", metavar="IMAGE",
                       help="kind and kubeconfig backends: the node image the cluster runs (the kubeconfig backend's "
                            "cluster must be able to pull it; default: fakehw/node:amd64)")
        p.add_argument("--kind-image", metavar="IMAGE",
                       help="kind backend: the kind node image (default: fakehw/kind-node, built from "
                            "images/kind-node where a registry is reachable)")
        p.add_argument("--kind-path", metavar="PATH", help="kind backend: the kind binary (default: on PATH)")
        p.add_argument("--kubectl-path", metavar="PATH",
                       help="kind and kubeconfig backends: the kubectl binary (default: on PATH)")

    p = add("status", "nodes, health, and optionally the topology", cmd_status)
    p.add_argument("--topology", action="store_true", help="print the topology matrix of each node type")
    p.add_argument("--all-nodes", action="store_true", help="with --topology: every node, not one per group")
    p.add_argument("--json", action="store_true",
                   help="print cluster, backend, profile, alive and every node's agent state as JSON")


def _add_fault_commands(add: AddCommand) -> None:
    """``inject``, ``heal``, ``faults`` and ``events``."""
    p = add("inject", "inject a fault: NODE KIND DEVICE [key=value ...] (see 'fakehw kinds')", cmd_inject)
    p.add_argument("node", help="node name, e.g. dgx-h100-0 ('testbed status' lists them)")
    p.add_argument("kind", help="fault kind, e.g. xid, nvlink-down, ecc, cxl-offline ('fakehw kinds' lists them)")
    p.add_argument("device", help="the device the kind targets: a GPU (gpu3), a CXL memdev (mem0) or a memory pool")
    p.add_argument("params", nargs="*", metavar="key=value",
                   help="fault parameters, e.g. code=79 link=4; values are read as JSON when they parse, else as "
                        "strings; '-' in keys becomes '_'")
    p.add_argument("--json", action="store_true", help="print the created fault record as JSON")

    p = add("heal", "heal a fault by id, or all matching --node/--device/--kind, or --all", cmd_heal)
    p.add_argument("fault_id", nargs="?", help="id of the fault to heal, e.g. f-000001 ('testbed faults' lists them)")
    p.add_argument("--node", help="heal every fault on this node (combines with --device and --kind)")
    p.add_argument("--device", help="heal every fault on this device, e.g. gpu3 (combines with --node and --kind)")
    p.add_argument("--kind", help="heal every fault of this kind, e.g. xid (combines with --node and --device)")
    p.add_argument("--all", action="store_true", help="heal every active fault of the cluster")

    p = add("faults", "list active faults", cmd_faults)
    p.add_argument("--node", help="only this node's faults (default: every node)")
    p.add_argument("--json", action="store_true", help="print the fault records as a JSON list")

    p = add("events", "show events (--follow to stream)", cmd_events)
    p.add_argument("--since", type=int, default=0,
                   help="only events whose sequence number is above this (default: 0, all events)")
    p.add_argument("--node", help="only this node's events (default: every node)")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep waiting for new events and print them as they come (Ctrl-C stops)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per event (seq, time, node, device, kind, data)")


def _add_node_commands(add: AddCommand) -> None:
    """``exec`` and ``env`` (a node's hardware for a command), then ``down``, ``list`` and ``restart-agent``."""
    p = add("exec", "run a command that sees NODE's fake hardware: exec NODE -- CMD", cmd_exec)
    p.add_argument("node", help="node whose fake hardware the command sees")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the command and its arguments, after '--'; testbed exits with its exit code. Local "
                        "backend: 'python' is this project's (fakehw, pynvml), and 'nvidia-smi' is the real one "
                        "against the node's fake NVML (tools/fetch-real-nvidia.sh fetches it; make run does)")

    p = add("env", "print the environment of NODE as shell exports", cmd_env)
    p.add_argument("node", help="node name; eval the output to run tools against its fake hardware")

    p = add("down", "tear a cluster down (--all: every cluster)", cmd_down)
    p.add_argument("--all", action="store_true",
                   help="every cluster in the state directory (not just --name), and leftover containers and "
                        "networks of crashed docker runs")

    add("list", "list clusters", cmd_list)

    p = add("restart-agent", "stop and start the agent (it comes back from its journal)", cmd_restart_agent)
    p.add_argument("--kill", action="store_true", help="SIGKILL instead of SIGTERM")
    p.add_argument("--salvage-journal", action="store_true",
                   help="the agent refused a damaged journal: start from the records that check out (the damaged "
                        "file is kept beside it; see docs/agent.md)")


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("testbed", build_parser(), argv, _translate)


if __name__ == "__main__":
    sys.exit(main())
