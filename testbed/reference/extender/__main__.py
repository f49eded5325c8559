"""``python -m testbed.reference.extender --port P --api URL [--mutant NAME]``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from testbed.reference.extender.mutants import MUTANTS
from testbed.reference.extender.server import Options, serve

SLOW_PER_POD_S = 0.1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.reference.extender",
                                     description="The reference kube-scheduler extender of fakehw.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("FAKEHW_EXTENDER_PORT", "8888")))
    parser.add_argument("--api", default=os.environ.get("FAKEHW_K8S_API"),
                        help="cluster API URL (default $FAKEHW_K8S_API)")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), help="run a deliberately broken variant")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    if not args.api:
        parser.error("--api (or FAKEHW_K8S_API) is required: the cluster API the extender watches")
    options = Options(mutant=args.mutant, slow_per_pod_s=SLOW_PER_POD_S if args.mutant == "slow" else 0.0,
                      own_binds_only=args.mutant == "own-binds-only",
                      forget_on_restart=args.mutant == "forget-on-restart",
                      reserve_at_filter=args.mutant == "reserve-at-filter", quadratic=args.mutant == "quadratic")
    try:
        serve(args.host, args.port, args.api, options)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"reference extender: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
