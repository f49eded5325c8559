"""``testbed cxl ...`` and ``testbed pool ...``: CXL operations and memory-pool grants through the agent.

    testbed cxl show cxl-host-0                                  memdevs, regions, extents, NUMA memory
    testbed cxl create-region cxl-host-0 --window cfmws0 --targets mem1,mem2 --size 2GiB
    testbed cxl destroy-region cxl-host-0 region5
    testbed cxl offline cxl-host-0 mem0      /  testbed cxl online cxl-host-0 mem0
    testbed cxl pools                                            who holds which logical device, extents
    testbed cxl assign pool0 9 cxl-host-1    /  testbed cxl release pool0 9
    testbed cxl add-extent pool0 cxl-host-1 1GiB    /  testbed cxl release-extent pool0 pool0-e000001
    testbed pool list cxl-host-0
    testbed pool reserve cxl-host-0 cxl-pooled team-a 4GiB       prints the grant and its access token
    testbed pool burst cxl-host-0 cxl-pooled team-b 2GiB
    testbed pool map cxl-host-0 cxl-pooled --token TOKEN --who pod-7
    testbed pool release g-000001 --token TOKEN
    testbed pool audit [--node N] [--pool P]

Refusals print the agent's reason and exit 2.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakehw.agent.client import AgentApi
from fakehw.cli_common import EXIT_BAD_INPUT, AddCommand, CliError
from fakehw.model.units import format_size
from testbed.api import Testbed

NODE_HELP = "node name, e.g. cxl-host-0 ('testbed status' lists them)"
POOLED_HELP = "pooled CXL device, e.g. pool0 ('testbed cxl pools' lists them)"
LD_HELP = "logical device index within the pooled device (0-based)"
MEMORY_POOL_HELP = "memory pool name, e.g. cxl-pooled ('testbed pool list NODE' lists them)"


def _size(value: int) -> str:
    return format_size(value) if value else "0"


def register(add: AddCommand, state_dir_of: Callable[[argparse.Namespace], Path]) -> None:
    """Add the ``cxl`` and ``pool`` commands to the testbed CLI (``add`` is the CLI's subcommand helper)."""
    leaf = argparse.ArgumentParser(add_help=False)
    leaf.add_argument("--name", default=argparse.SUPPRESS, help="cluster name (default: default)")
    leaf.add_argument("--state-dir", default=argparse.SUPPRESS, metavar="DIR", help="where clusters live")
    leaf.add_argument("--json", action="store_true", help="print the agent's JSON answer")
    cli = _Commands(add, state_dir_of, leaf)
    _register_cxl(cli)
    _register_pool(cli)


@dataclass(frozen=True)
class _Commands:
    """What every ``cxl``/``pool`` action shares: how it reaches the agent, prints, and is added to its group."""

    add: AddCommand
    state_dir_of: Callable[[argparse.Namespace], Path]
    leaf: argparse.ArgumentParser
    """The options every action takes (cluster, state dir, --json)."""

    def client(self, args: argparse.Namespace) -> AgentApi:
        return Testbed.attach(args.name, self.state_dir_of(args)).agent(getattr(args, "node", None))

    @staticmethod
    def show(args: argparse.Namespace, value: Any, text: Callable[[Any], str]) -> int:
        print(json.dumps(value, indent=2) if args.json else text(value))
        return 0

    def group(self, name: str, helptext: str) -> argparse._SubParsersAction[argparse.ArgumentParser]:
        def usage(_args: argparse.Namespace) -> int:
            raise CliError(f"say what to do: testbed {name} ACTION ... (see testbed {name} --help)", EXIT_BAD_INPUT)

        parser = self.add(name, helptext, usage)
        return parser.add_subparsers(title="actions", metavar="ACTION")

    def action(self, sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, helptext: str,
               func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=helptext, parents=[self.leaf])
        p.set_defaults(func=func)
        return p


def _register_cxl(cli: _Commands) -> None:
    """``testbed cxl ...``: regions, memdevs online/offline, pooled logical devices, dynamic capacity."""
    cxl = cli.group("cxl", "CXL at run time: regions, memdevs online/offline, pooled LDs, dynamic capacity")

    def cxl_show(args: argparse.Namespace) -> int:
        return cli.show(args, cli.client(args).cxl(args.node), _cxl_text)

    p = cli.action(cxl, "show", "a node's CXL memdevs, regions, extents and NUMA memory", cxl_show)
    p.add_argument("node", help=NODE_HELP)

    def create(args: argparse.Namespace) -> int:
        targets = [t for t in args.targets.split(",") if t]
        r = cli.client(args).create_region(args.node, args.window, targets, args.granularity, args.size, args.mode,
                                       args.region)
        return cli.show(args, r, lambda r: f"{r['name']}: {_size(r['size'])} {r['mode']} over "
                    f"{','.join(r['targets'])} in {r['window']} (NUMA node {r['numa']})")

    p = cli.action(cxl, "create-region", "create a region over memory devices through a window", create)
    p.add_argument("node", help="node the region is created on")
    p.add_argument("--window", required=True, help="root decoder / fixed memory window, e.g. cfmws0")
    p.add_argument("--targets", required=True, help="memory devices, comma separated: mem1,mem2")
    p.add_argument("--granularity", type=int, help="interleave granularity in bytes (default: the window's)")
    p.add_argument("--size", help="e.g. 2GiB (default: all that fits)")
    p.add_argument("--mode", choices=("ram", "pmem"), help="region type: ram (volatile) or pmem (default: ram)")
    p.add_argument("--region", metavar="regionN", help="name (default: the next free regionN)")

    def destroy(args: argparse.Namespace) -> int:
        r = cli.client(args).destroy_region(args.node, args.region)
        return cli.show(args, r, lambda r: f"destroyed {r['destroyed']['name']}")

    p = cli.action(cxl, "destroy-region", "destroy a region", destroy)
    p.add_argument("node", help="node holding the region")
    p.add_argument("region", help="region name, e.g. region5 ('testbed cxl show NODE' lists them)")

    for verb, online in (("online", True), ("offline", False)):
        def toggle(args: argparse.Namespace, online: bool = online) -> int:
            m = cli.client(args).memdev_online(args.node, args.memdev, online)
            return cli.show(args, m, lambda m: f"{m['name']} ({m['memdev']}) is "
                        f"{'online' if m['online'] else 'offline'}{'' if m['changed'] else ' (unchanged)'}")

        p = cli.action(cxl, verb, f"bring a memory device {verb}", toggle)
        p.add_argument("node", help="node holding the memory device")
        p.add_argument("memdev", help="memory device, e.g. mem0 ('testbed cxl show NODE' lists them)")

    def pools(args: argparse.Namespace) -> int:
        return cli.show(args, cli.client(args).cxl_pools(), _pools_text)

    cli.action(cxl, "pools", "pooled devices: logical device owners, extents, free capacity", pools)

    def assign(args: argparse.Namespace) -> int:
        r = cli.client(args).assign_ld(args.pool, args.ld, args.node)
        return cli.show(args, r, lambda r: f"logical device {r['ld']} of {r['pool']} -> {r['node']}"
                    + ("" if r["changed"] else " (already)"))

    p = cli.action(cxl, "assign", "assign a logical device of a pooled device to a host", assign)
    p.add_argument("pool", help=POOLED_HELP)
    p.add_argument("ld", type=int, help=LD_HELP)
    p.add_argument("node", help="host to give the logical device to (one of the hosts the pooled device serves)")

    def release(args: argparse.Namespace) -> int:
        r = cli.client(args).release_ld(args.pool, args.ld, args.holder)
        return cli.show(args, r, lambda r: f"logical device {r['ld']} of {r['pool']} released from {r['node']}")

    p = cli.action(cxl, "release", "release a logical device from its host", release)
    p.add_argument("pool", help=POOLED_HELP)
    p.add_argument("ld", type=int, help=LD_HELP)
    p.add_argument("--node", dest="holder", help="refuse unless this host holds it")

    def add_extent(args: argparse.Namespace) -> int:
        e = cli.client(args).add_extent(args.pool, args.host, args.size, args.offset)
        return cli.show(args, e, lambda e: f"{e['id']}: {_size(e['length'])} at offset {e['offset']:#x} of "
                    f"{e['pool']} -> {e['node']}")

    p = cli.action(cxl, "add-extent", "add a dynamic-capacity extent of a pooled device to a host", add_extent)
    p.add_argument("pool", help=POOLED_HELP)
    p.add_argument("host", help="host that gets the extent (one of the hosts the pooled device serves)")
    p.add_argument("size", help="a multiple of 256MiB, e.g. 1GiB")
    p.add_argument("--offset", type=lambda v: int(v, 0), help="device offset (default: first free range)")

    def release_extent(args: argparse.Namespace) -> int:
        e = cli.client(args).release_extent(args.pool, args.extent)
        return cli.show(args, e, lambda e: f"released {e['released']['id']}")

    p = cli.action(cxl, "release-extent", "release a dynamic-capacity extent", release_extent)
    p.add_argument("pool", help=POOLED_HELP)
    p.add_argument("extent", help="extent id, e.g. pool0-e000001 ('testbed cxl pools' lists them)")


def _register_pool(cli: _Commands) -> None:
    """``testbed pool ...``: memory pools, grants, token-checked mappings, the audit log."""
    pool = cli.group("pool", "memory pools: list, reserve, burst, map with a token, release, audit log")

    def plist(args: argparse.Namespace) -> int:
        return cli.show(args, cli.client(args).pools(args.node), _memory_pools_text)

    p = cli.action(pool, "list", "a node's memory pools: capacity, latency, policy, grants", plist)
    p.add_argument("node", help=NODE_HELP)

    for verb, burst in (("reserve", False), ("burst", True)):
        def grant(args: argparse.Namespace, burst: bool = burst) -> int:
            r = cli.client(args).reserve(args.node, args.pool, args.tenant, args.size, args.ttl, burst=burst)
            g = r["grant"]
            return cli.show(args, r, lambda r: f"{g['id']}: {g['kind']} of {_size(g['size'])} in {g['pool']} on "
                        f"{g['node']} for {g['tenant']} until {time.strftime('%H:%M:%S', time.localtime(g['expires']))}"
                        + (f" (preempted {', '.join(r['preempted'])})" if r["preempted"] else "")
                        + f"\ntoken: {r['token']}")

        p = cli.action(pool, verb, "guaranteed reservation" if not burst else "opportunistic, preemptible burst",
                   grant)
        p.add_argument("node", help="node whose memory pool to draw from")
        p.add_argument("pool", help=MEMORY_POOL_HELP)
        p.add_argument("tenant", help="who the grant is for, e.g. team-a (1-128 letters, digits and . _ : / @ -)")
        p.add_argument("size", help="e.g. 4GiB")
        p.add_argument("--ttl", type=float, help="seconds until the token expires (default 3600)")

    def prelease(args: argparse.Namespace) -> int:
        r = cli.client(args).release_grant(args.grant, args.token)
        return cli.show(args, r, lambda r: f"released {r['released']['id']}")

    p = cli.action(pool, "release", "release a grant (needs its token)", prelease)
    p.add_argument("grant", help="grant id, e.g. g-000001 (printed by reserve/burst)")
    p.add_argument("--token", required=True, help="the grant's access token, as printed by reserve/burst (required)")

    def pmap(args: argparse.Namespace) -> int:
        m = cli.client(args).map_pool(args.node, args.pool, args.token, args.who, args.offset, args.length)
        return cli.show(args, m, lambda m: f"{m['id']}: {m['who']} maps {_size(m['length'])} of {m['grant']}")

    p = cli.action(pool, "map", "map part of a grant (refused and logged without a valid token)", pmap)
    p.add_argument("node", help="node of the grant")
    p.add_argument("pool", help=MEMORY_POOL_HELP)
    p.add_argument("--token", help="the grant's access token (the grant is found by it); without one the mapping is "
                                   "refused and the refusal audited")
    p.add_argument("--who", required=True, help="the consumer, e.g. ns/pod")
    p.add_argument("--offset", type=int, default=0, help="start of the mapping within the grant, bytes (default: 0)")
    p.add_argument("--length", type=int, help="bytes to map (default: from --offset to the end of the grant)")

    def punmap(args: argparse.Namespace) -> int:
        r = cli.client(args).unmap_pool(args.mapping, args.token)
        return cli.show(args, r, lambda r: f"unmapped {r['unmapped']['id']}")

    p = cli.action(pool, "unmap", "remove a mapping (needs the grant's token)", punmap)
    p.add_argument("mapping", help="mapping id, e.g. m-000001 (printed by map)")
    p.add_argument("--token", required=True, help="access token of the grant the mapping belongs to (required)")

    def audit(args: argparse.Namespace) -> int:
        entries = cli.client(args).audit(args.node, args.pool, args.since)
        return cli.show(args, entries, _audit_text)

    p = cli.action(pool, "audit", "the audit log: grants, revocations, mappings, refusals", audit)
    p.add_argument("--node", default=None, help="only entries of this node (default: every node)")
    p.add_argument("--pool", help="only entries of this memory pool (default: every pool)")
    p.add_argument("--since", type=int, default=0,
                   help="only entries whose sequence number is above this (default: 0; at most 1000 are shown)")

    def tokens(args: argparse.Namespace) -> int:
        return cli.show(args, cli.client(args).pool_tokens(args.node), _tokens_text)

    p = cli.action(pool, "tokens", "token records (never the secrets): who, range, issued, revoked", tokens)
    p.add_argument("--node", default=None, help="only tokens of grants on this node (default: every node)")


# --------------------------------------------------------------------------------------------------- text


def _cxl_text(v: dict[str, Any]) -> str:
    lines = [f"{v['node']}: NUMA memory " + ", ".join(f"node{k}={_size(b)}" for k, b in v["numa_memory"].items())]
    for m in v["memdevs"]:
        size = m["ram_size"] or m["pmem_size"] or m["dynamic_ram_size"]
        lines.append(f"  {m['memdev']:<6} {m['name']:<12} {_size(size):>8}  {m['port']:<14} "
                     f"{'online' if m['online'] else 'OFFLINE'}")
    for r in v["regions"]:
        lines.append(f"  {r['name']:<9} {r['mode']:<5} {_size(r['size']):>8} "
                     f"{r['window']:<8} {','.join(r['targets'])} numa={r['numa']} "
                     f"{'active' if r['active'] else 'INACTIVE'} ({r['origin']})")
    return "\n".join(lines)


def _pools_text(pools: list[dict[str, Any]]) -> str:
    lines = []
    for p in pools:
        owners = ", ".join(f"{ld}:{n}" for ld, n in p["owners"].items() if n) or "none"
        lines.append(f"{p['name']}: {_size(p['capacity'])} in {p['logical_devices']} LDs of {_size(p['ld_size'])}, "
                     f"free {_size(p['free'])}; assigned {owners}")
        lines += [f"  extent {e['id']}: {_size(e['length'])} at {e['offset']:#x} -> {e['node']}" for e in p["extents"]]
    return "\n".join(lines) or "no pooled CXL devices"


def _memory_pools_text(pools: list[dict[str, Any]]) -> str:
    lines = []
    for p in pools:
        lat = p["latency"]
        lines.append(f"{p['name']:<16} {p['tier']:<16} {p['policy']:<9} available {_size(p['available']):>7} "
                     f"reserved {_size(p['reserved']):>7} bursting {_size(p['bursting']):>7} free "
                     f"{_size(p['free']):>7}  {lat['domain']} ~{lat['ns']} ns")
        lines += [f"  {g['id']} {g['kind']:<11} {g['tenant']:<16} {_size(g['size'])}" for g in p["grants"]]
    return "\n".join(lines) or "no memory pools"


def _audit_text(entries: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{e['seq']:>6} {time.strftime('%H:%M:%S', time.localtime(e['time']))} {e['action']:<18} "
        f"{e['node']}/{e['pool']} {e['who']} {e.get('grant') or '-'} {e.get('token_id') or '-'} "
        f"[{e['start']:#x}, {e['end']:#x}) {e.get('reason', '')}" for e in entries) or "no audit entries"


def _tokens_text(tokens: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{t['token_id']} {t['grant']} {t['node']}/{t['pool']} {t['tenant']} {t['kind']} [{t['start']:#x}, "
        f"{t['end']:#x}) issued {time.strftime('%H:%M:%S', time.localtime(t['issued']))} "
        + (f"revoked {time.strftime('%H:%M:%S', time.localtime(t['revoked']))} ({t['reason']})"
           if t["revoked"] else "live") for t in tokens) or "no tokens"
