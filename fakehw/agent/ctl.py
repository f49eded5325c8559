"""``python -m fakehw.agent.ctl``: one control-API request from inside a node, answer as JSON on stdout.

Backends that can run a command where an agent lives but cannot reach its socket (``kubectl exec`` into an
agent pod of an existing cluster) use this as their transport: stdout is ``{"status": N, "body": ...}``; the
exit code is 0 whenever the agent answered (the status says how), 1 when it could not be reached.

    python -m fakehw.agent.ctl --socket /var/lib/fakehw-agent/agent.sock GET /v1/health
    python -m fakehw.agent.ctl POST /v1/faults '{"node": "n0", "kind": "xid", "device": "gpu0", "code": 79}'
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from fakehw.agent.client import AgentClient, AgentRequestError

DEFAULT_SOCKET = "/var/lib/fakehw-agent/agent.sock"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fakehw.agent.ctl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", default=DEFAULT_SOCKET)
    parser.add_argument("method", choices=["GET", "POST", "DELETE"])
    parser.add_argument("path")
    parser.add_argument("body", nargs="?", help="JSON body")
    args = parser.parse_args(argv)
    try:
        body = json.loads(args.body) if args.body else None
    except json.JSONDecodeError as exc:
        print(json.dumps({"status": 400, "body": {"error": f"body is not JSON: {exc}"}}))
        return 0
    client = AgentClient(args.socket)
    try:
        payload = client.request(args.method, args.path, body)
        status = 201 if args.method == "POST" and args.path == "/v1/faults" else 200
    except AgentRequestError as exc:
        if exc.status == 0:
            print(json.dumps({"status": 0, "body": {"error": exc.message}}))
            return 1
        payload, status = {"error": exc.message, "detail": exc.detail}, exc.status
    print(json.dumps({"status": status, "body": payload}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
