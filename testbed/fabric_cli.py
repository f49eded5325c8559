"""``testbed fabric``: an emulated RoCE fabric for a running cluster.

On the Docker backend every node's NICs are put into its container's network namespace, so tools inside the
container see ``enp24s0np0`` and friends cabled to the fabric's switches; on the local backend the fabric makes
a namespace per node. The fabric's state lives in the cluster directory (``<cluster>/fabric``) and goes away
with ``testbed fabric down`` (``testbed down`` of the cluster does not tear it down for you: down it first).

    testbed up --backend docker --profile dgx-h100-roce --nodes 4
    testbed fabric up dgx-h100-rail --name rails
    testbed fabric probe --name rails
    testbed fabric down --name rails
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fakehw.cli_common import EXIT_BAD_INPUT, CliError


def _state(args: argparse.Namespace) -> tuple[Any, Path]:
    from testbed.api import Testbed
    from testbed.cluster import default_state_dir

    tb = Testbed.attach(args.name, Path(args.state_dir) if args.state_dir else default_state_dir())
    return tb, tb.record.dir / "fabric"


def cmd_up(args: argparse.Namespace) -> int:
    from fakehw.fabric import cli_runtime

    tb, state = _state(args)
    model = cli_runtime._load_model(args.config)
    nodes = [n.name for n in model.system.nodes]
    missing = [n for n in nodes if n not in tb.record.nodes]
    if missing:
        raise CliError(f"fabric {args.config} cables node(s) {', '.join(missing)}, which cluster {tb.name} does not "
                       f"have (nodes: {', '.join(tb.record.nodes)})", EXIT_BAD_INPUT)
    attach = []
    for node in nodes:
        path = tb.backend.netns_path(tb.record, node)
        if path is not None:
            attach.append(f"{node}={path}")
    return cli_runtime.cmd_up(argparse.Namespace(config=args.config, state_dir=str(state), run_id=None,
                                                 attach=attach, no_responder=False, show=0))


def cmd_probe(args: argparse.Namespace) -> int:
    from fakehw.fabric import cli_runtime

    _, state = _state(args)
    return cli_runtime.cmd_probe(argparse.Namespace(state_dir=str(state), mtu=args.mtu, json=args.json,
                                                    verbose=args.verbose))


def cmd_down(args: argparse.Namespace) -> int:
    from fakehw.fabric import cli_runtime

    _, state = _state(args)
    return cli_runtime.cmd_down(argparse.Namespace(state_dir=str(state)))


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    from fakehw.fabric import cli_runtime

    fab = sub.add_parser("fabric", help="an emulated RoCE fabric for the cluster's nodes (root)")
    fsub = fab.add_subparsers(title="fabric commands", metavar="COMMAND")
    p = fsub.add_parser("up", help="build a fabric config over the cluster's nodes", parents=[common])
    p.add_argument("config", help="built-in fabric name (fakehw fabric list) or YAML file")
    p.set_defaults(func=cmd_up)
    p = fsub.add_parser("probe", help="measure the fabric's dynamic requirements", parents=[common])
    cli_runtime.add_probe_options(p)
    p.set_defaults(func=cmd_probe)
    p = fsub.add_parser("down", help="tear the fabric down", parents=[common])
    p.set_defaults(func=cmd_down)
