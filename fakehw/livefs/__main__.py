"""``python -m fakehw.livefs --tree <root>/sys --mount DIR --socket SOCKET --node NODE``: serve until unmounted."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from fakehw.livefs.fs import agent_writer, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fakehw.livefs", description=__doc__)
    parser.add_argument("--tree", type=Path, required=True, help="the node's rendered sys directory")
    parser.add_argument("--mount", type=Path, required=True, help="where to mount it")
    parser.add_argument("--socket", required=True, help="the agent's control socket")
    parser.add_argument("--node", required=True, help="the node the tree belongs to")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.tree.is_dir():
        parser.error(f"--tree {args.tree} is not a directory")
    serve(args.tree, args.mount, agent_writer(args.socket, args.node))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
