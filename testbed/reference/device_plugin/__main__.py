"""``python -m testbed.reference.device_plugin [--plugin-dir DIR] [--mutant NAME] ...``"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from testbed.kubelet.api import DEFAULT_PLUGIN_DIR
from testbed.kubelet.launcher import PLUGIN_DIR_ENV
from testbed.reference.device_plugin.mutants import MUTANTS


def _size(text: str) -> int:
    from fakehw.model.units import parse_size

    return int(parse_size(text))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m testbed.reference.device_plugin",
                                description="The fakehw reference device plugin (NVIDIA GPUs and memory pools).")
    p.add_argument("--plugin-dir", type=Path,
                   default=Path(os.environ.get(PLUGIN_DIR_ENV, DEFAULT_PLUGIN_DIR)),
                   help=f"kubelet device plugin directory (default ${PLUGIN_DIR_ENV} or {DEFAULT_PLUGIN_DIR})")
    p.add_argument("--node", default=os.environ.get("FAKEHW_NODE"),
                   help="node name, for memory pools and recovery checks (default $FAKEHW_NODE)")
    p.add_argument("--agent-socket", default=os.environ.get("FAKEHW_AGENT_SOCKET"),
                   help="fakehw agent control socket (default $FAKEHW_AGENT_SOCKET); without it: no memory pools "
                        "and Xid conditions never clear")
    p.add_argument("--dev-root", default=os.environ.get("FAKEHW_DEV_ROOT", "/dev"),
                   help="host directory of the GPU device nodes (default $FAKEHW_DEV_ROOT or /dev)")
    p.add_argument("--recheck", type=float, default=0.25,
                   help="seconds between health re-checks: how soon a repaired GPU is Healthy again (default 0.25)")
    p.add_argument("--pool-slice", type=_size, default=16 * 2**30,
                   help="capacity per memory-pool device (default 16GiB)")
    p.add_argument("--state-file", type=Path, default=None, help="checkpoint of memory-pool grants")
    p.add_argument("--mutant", choices=sorted(MUTANTS), default=None, help="run a deliberately broken variant")
    p.add_argument("--list-mutants", action="store_true", help="list the mutants and exit")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_mutants:
        for m in MUTANTS.values():
            print(f"{m.name:24} {m.description}")
        return 0
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from testbed.reference.device_plugin.plugin import PluginConfig, main_loop

    config = PluginConfig(plugin_dir=args.plugin_dir, node=args.node, agent_socket=args.agent_socket,
                          dev_root=args.dev_root, recheck_s=args.recheck, slice_bytes=args.pool_slice,
                          mutant=args.mutant, state_file=args.state_file)
    if args.mutant:
        logging.getLogger("fakehw.reference").warning("running mutant %s: %s", args.mutant,
                                                      MUTANTS[args.mutant].description)
    return main_loop(config)


if __name__ == "__main__":
    sys.exit(main())
