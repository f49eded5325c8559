"""Chaos without netem: impairments made of what this kernel has, each reversible and recorded in the ledger.

The kernel here has no ``sch_netem`` (and no tc gact, pedit, vlan or red), so impairments are built from the
pieces that exist (nftables with numgen, tc tbf/htb/clsact, cls_bpf), and anything that cannot be done honestly
says so instead of pretending:

============== ======================================================================================== ========
impairment     how                                                                                      honest?
============== ======================================================================================== ========
link down/up   administrative state of the switch-side veth end (the peer loses carrier)                yes
flapping       a thread toggling that state with a period, restored to up when stopped                  yes
partition      nftables ``bridge`` table in every switch: drop frames between the two MAC sets          yes
random loss    nftables ``numgen random mod 1000000 < k`` on one port and direction, with a counter     yes
bandwidth      tc ``tbf`` or ``htb`` on the egress of the cable's sending end                           yes
duplication    nftables ``netdev`` ingress ``dup to`` an injection veth whose peer is a learning-off    yes
               bridge port: each chosen frame enters the switch a second time, byte for byte
corruption     an eBPF classifier (cls_bpf, assembled in :mod:`fakehw.fabric.bpf`) flips one random bit of   yes
               one random byte after the Ethernet header in a random fraction of frames, and counts them
delay, jitter  a userspace forwarder (:mod:`fakehw.fabric.forwarder`) spliced into the cable at the switch:  yes
               the port leaves the bridge, a veth pair takes its place and its name, the process delays
               frames both ways by delay +- uniform jitter (order kept unless asked otherwise)
============== ======================================================================================== ========

Every impairment is written to the ledger with the operations that undo it (:func:`revert_recorded`), so a
teardown after a failure - or ``fakehw fabric down`` after a crash - reverts it too.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fakehw.fabric.model import NicRef, PortRef
from fakehw.fabric.netns import Netns
from fakehw.fabric.plan import BRIDGE

if TYPE_CHECKING:
    from fakehw.fabric.emulate import EmulatedFabric, Ledger

Direction = Literal["in", "out", "both"]
LOSS_SCALE = 1_000_000


class UnsupportedImpairment(NotImplementedError):
    """This impairment cannot be emulated here; the message says why (never silently ignored)."""


class ChaosError(RuntimeError):
    """An impairment could not be applied (bad target, kernel refused); nothing of it is left behind."""


UNSUPPORTED: dict[str, str] = {
    "reorder": "reordering with a probability needs sch_netem, which this kernel lacks (delay with jitter and "
               "keep_order=False reorders as a side effect)",
}
SUPPORTED = ("link-down", "flap", "partition", "loss", "bandwidth", "duplicate", "corrupt", "delay")


def capabilities() -> dict[str, tuple[bool, str]]:
    """Every impairment kind: whether it is available, and how or why not."""
    out = {k: (True, "") for k in SUPPORTED}
    out.update({k: (False, why) for k, why in UNSUPPORTED.items()})
    return out


@dataclass
class Impairment:
    id: str
    kind: str
    target: str
    params: dict[str, Any]
    undo: list[dict[str, Any]]
    """Operations that revert it, in order (also stored in the ledger)."""
    counters: list[dict[str, str]] = field(default_factory=list)
    """nft counters to read: {ns, family, table, name}."""
    _map_fd: int | None = field(default=None, repr=False)
    """The eBPF counter map of a corruption (readable by this process only)."""
    _stop: threading.Event | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "target": self.target, "params": self.params, "undo": self.undo}


# --------------------------------------------------------------------------------------------------- undo ops


def _undo(op: dict[str, Any]) -> None:
    ns = Netns.borrowed(op["ns"])
    if not ns.exists():
        return
    kind = op["op"]
    if kind == "nft-delete":
        proc = ns.run(["nft", "delete", "table", op["family"], op["table"]], check=False)
        if proc.returncode != 0 and b"No such file" not in proc.stderr:
            raise ChaosError(f"nft delete table {op['table']} in {op['ns']}: {proc.stderr.decode().strip()}")
    elif kind == "tc-delete":
        proc = ns.run(["tc", "qdisc", "del", "dev", op["ifname"], "root"], check=False)
        if proc.returncode != 0 and b"Cannot find" not in proc.stderr and b"No such" not in proc.stderr \
                and b"Invalid handle" not in proc.stderr:
            raise ChaosError(f"tc qdisc del dev {op['ifname']}: {proc.stderr.decode().strip()}")
    elif kind == "link-up":
        ns.run(["ip", "link", "set", "dev", op["ifname"], "up"], check=False)
        wait_forwarding(ns, op["ifname"])
    elif kind == "link-delete":
        ns.run(["ip", "link", "del", "dev", op["ifname"]], check=False)
    elif kind == "process-stop":
        from fakehw.fabric.emulate import stop_process

        stop_process(int(op["pid"]), str(op["marker"]))
    elif kind == "rename-back":
        ns.run(["ip", "link", "set", "dev", op["from"], "down"], check=False)
        if ns.run(["ip", "link", "set", "dev", op["from"], "name", op["to"]], check=False).returncode == 0:
            ns.run(["ip", "link", "set", "dev", op["to"], "master", BRIDGE])
            ns.run(["ip", "link", "set", "dev", op["to"], "up"])
            wait_forwarding(ns, op["to"])
    elif kind == "clsact-delete":
        ns.run(["tc", "qdisc", "del", "dev", op["ifname"], "clsact"], check=False)
    elif kind == "nft-element-delete":
        ns.run(["nft", "delete", "element", *op["element"].split(" ", 3)], check=False)
    else:
        raise ChaosError(f"unknown undo operation {kind!r}")


def wait_forwarding(ns: Netns, ifname: str, timeout: float = 5.0) -> bool:
    """Wait until a bridge port that came back up forwards again. The kernel tells the bridge about carrier
    changes through its link watcher, up to a second later; a switch port re-enabling also takes a moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = ns.run(["ip", "-j", "-d", "link", "show", "dev", ifname], check=False)
        try:
            info = json.loads(proc.stdout or b"[]")[0]
        except (ValueError, IndexError):
            return False
        slave = info.get("linkinfo", {}).get("info_slave_data", {})
        if info.get("operstate") in ("UP", "UNKNOWN") and slave.get("state", "forwarding") == "forwarding":
            return True
        time.sleep(0.02)
    return False


def revert_one(ledger: Ledger, impairment_id: str) -> bool:
    """Undo one recorded impairment by id (from any process); False if the ledger does not list it."""
    rec = next((r for r in ledger.impairments if r["id"] == impairment_id), None)
    if rec is None:
        return False
    for op in rec["undo"]:
        _undo(op)
    ledger.impairments = [r for r in ledger.impairments if r["id"] != impairment_id]
    ledger.save()
    return True


def revert_recorded(ledger: Ledger) -> tuple[list[str], list[str]]:
    """Undo every impairment a ledger still lists (newest first). Returns (reverted ids, errors)."""
    reverted, errors = [], []
    for rec in reversed(list(ledger.impairments)):
        try:
            for op in rec["undo"]:
                _undo(op)
            reverted.append(f"{rec['kind']} {rec['id']}")
        except Exception as exc:
            errors.append(f"revert {rec.get('kind')} {rec.get('id')}: {exc}")
    ledger.impairments = []
    ledger.save()
    return reverted, errors


# --------------------------------------------------------------------------------------------------- stats


def binomial_interval(n: int, p: float, alpha: float = 1e-6) -> tuple[int, int]:
    """The central interval [lo, hi] holding a Binomial(n, p) count with probability at least 1 - alpha.

    Used to judge measured loss and duplication: a correct impairment fails the check with probability at most
    ``alpha``; one with another rate fails it almost surely for the sample sizes the tests use."""
    if not 0 <= p <= 1 or n < 0:
        raise ValueError(f"bad binomial parameters n={n}, p={p}")
    if p in (0.0, 1.0):
        k = int(n * p)
        return k, k

    def logpmf(k: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + \
            (n - k) * math.log1p(-p)

    pmf = [math.exp(logpmf(k)) for k in range(n + 1)]
    lo, acc = 0, 0.0
    while lo < n and acc + pmf[lo] <= alpha / 2:
        acc += pmf[lo]
        lo += 1
    hi, acc = n, 0.0
    while hi > 0 and acc + pmf[hi] <= alpha / 2:
        acc += pmf[hi]
        hi -= 1
    return lo, hi


# --------------------------------------------------------------------------------------------------- engine


def _chance(rate: float) -> str | None:
    """The nft match that is true with probability ``rate`` ("" always, None never)."""
    k = round(rate * LOSS_SCALE)
    if k <= 0:
        return None
    if k >= LOSS_SCALE:
        return ""
    return f"numgen random mod {LOSS_SCALE} < {k}"


def parse_target(text: str) -> NicRef | PortRef:
    """``node/nic`` or ``switch/port`` as written in configs (which one is decided against the fabric)."""
    owner, sep, item = text.partition("/")
    if not sep or not owner or not item:
        raise ChaosError(f"a target is node/nic or switch/port, got {text!r}")
    return NicRef(owner, item)


class Chaos:
    """Impairments on one emulated fabric. Everything applied is reverted by :meth:`clear`, by the fabric's
    teardown (registered automatically) and, from the ledger, by ``fakehw fabric down``."""

    def __init__(self, fabric: EmulatedFabric) -> None:
        self.fabric = fabric
        self.active: dict[str, Impairment] = {}
        self._ids = itertools.count(1)
        self._tag = secrets.token_hex(2)  # impairments of several processes on one fabric never share a name
        fabric.on_teardown("chaos", self.clear)

    # ---- targets

    def _resolve(self, target: NicRef | PortRef | str) -> PortRef:
        """The switch port at the fabric end of ``target`` (a NIC's cable, or a port itself)."""
        model = self.fabric.model
        if isinstance(target, str):
            target = parse_target(target)
        if isinstance(target, NicRef):
            if model.switch(target.node) is not None:
                target = PortRef(target.node, target.nic)
            else:
                nic = next((n for n in model.nics if n.node == target.node and target.nic in (n.nic.name,
                                                                                            n.nic.netdev)), None)
                if nic is None:
                    raise ChaosError(f"{target} is neither a NIC nor a switch port of fabric {model.name}")
                if nic.peer is None:
                    raise ChaosError(f"{target} is not cabled")
                return nic.peer
        if target not in self.fabric.plan.ports:
            raise ChaosError(f"{target} is not a switch port of fabric {model.name}")
        return target

    def _port(self, ref: PortRef) -> tuple[Netns, str]:
        port = self.fabric.plan.ports[ref]
        return self.fabric.netns(port.ns), port.ifname

    def _far_end(self, ref: PortRef) -> tuple[Netns, str]:
        """The other end of a port's cable (the NIC, or the peer switch's port)."""
        link = next((lk for lk in self.fabric.plan.links if ref in (lk.a_ref, lk.b_ref)), None)
        if link is None:
            raise ChaosError(f"{ref} has no cable")
        end = link.b if link.a_ref == ref else link.a
        return self.fabric.netns(end.ns), end.ifname

    def _new(self, kind: str, target: str, params: dict[str, Any]) -> Impairment:
        return Impairment(f"c{self._tag}{next(self._ids)}", kind, target, params, [])

    def _record_first(self, imp: Impairment) -> None:
        """Put the undo list in the ledger before touching the kernel, so a crash half-way is still undone."""
        self.fabric.ledger.impairments.append(imp.record())
        self.fabric.ledger.save()

    def _apply(self, imp: Impairment, steps: Sequence[tuple[Netns, list[str], bytes | None]]) -> Impairment:
        self._record_first(imp)
        try:
            for ns, argv, data in steps:
                ns.run(argv, input=data)
        except Exception as exc:
            self._drop(imp)
            raise ChaosError(f"{imp.kind} on {imp.target}: {exc}") from None
        self.active[imp.id] = imp
        return imp

    def _drop(self, imp: Impairment) -> None:
        errors = []
        for op in imp.undo:
            try:
                _undo(op)
            except Exception as exc:
                errors.append(str(exc))
        self.fabric.ledger.impairments = [r for r in self.fabric.ledger.impairments if r["id"] != imp.id]
        self.fabric.ledger.save()
        self.active.pop(imp.id, None)
        if errors:
            raise ChaosError(f"reverting {imp.kind} on {imp.target}: {'; '.join(errors)}")

    # ---- impairments

    def link_down(self, target: NicRef | PortRef | str) -> Impairment:
        ref = self._resolve(target)
        ns, ifname = self._port(ref)
        imp = self._new("link-down", str(ref), {})
        imp.undo = [{"op": "link-up", "ns": ns.path, "ifname": ifname}]
        return self._apply(imp, [(ns, ["ip", "link", "set", "dev", ifname, "down"], None)])

    def flap(self, target: NicRef | PortRef | str, period: float, *, duration: float | None = None,
             cycles: int | None = None) -> Impairment:
        """Take the link down for half of every ``period`` seconds, in a thread, until ``duration`` or ``cycles``
        run out or the impairment is reverted; the link is always left up."""
        if period < 0.02:
            raise ChaosError(f"flap period {period} s is shorter than 20 ms")
        ref = self._resolve(target)
        ns, ifname = self._port(ref)
        imp = self._new("flap", str(ref), {"period": period, "duration": duration, "cycles": cycles,
                                           "transitions": 0})
        imp.undo = [{"op": "link-up", "ns": ns.path, "ifname": ifname}]
        self._record_first(imp)
        stop = threading.Event()

        def run() -> None:
            h = ns.iproute()
            try:
                index = h.link_lookup(ifname=ifname)[0]
                end = time.monotonic() + duration if duration is not None else math.inf
                n = 0
                while not stop.is_set() and time.monotonic() < end and (cycles is None or n < cycles):
                    h.link("set", index=index, state="down")
                    imp.params["transitions"] += 1
                    if stop.wait(period / 2):
                        break
                    h.link("set", index=index, state="up")
                    imp.params["transitions"] += 1
                    n += 1
                    stop.wait(period / 2)
            finally:
                with contextlib.suppress(Exception):
                    h.link("set", index=h.link_lookup(ifname=ifname)[0], state="up")
                h.close()
                wait_forwarding(ns, ifname)

        imp._stop = stop
        imp._thread = threading.Thread(target=run, name=f"flap-{ifname}", daemon=True)
        imp._thread.start()
        self.active[imp.id] = imp
        return imp

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> Impairment:
        """Drop every frame between the NICs of the nodes in ``side_a`` and those in ``side_b``, in every switch."""
        a, b = sorted(set(side_a)), sorted(set(side_b))
        nodes = {n.name for n in self.fabric.model.system.nodes}
        bad = [n for n in (*a, *b) if n not in nodes]
        if bad or not a or not b or set(a) & set(b):
            raise ChaosError(f"a partition needs two disjoint, non-empty sets of nodes (unknown: {bad})")
        macs_a = [n.mac for r, n in self.fabric.plan.nics.items() if r.node in a]
        macs_b = [n.mac for r, n in self.fabric.plan.nics.items() if r.node in b]
        imp = self._new("partition", f"{','.join(a)} | {','.join(b)}", {"a": a, "b": b})
        table = f"fh{imp.id}"
        ruleset = (
            f"table bridge {table} {{\n"
            f"  set side_a {{ type ether_addr; elements = {{ {', '.join(macs_a)} }} }}\n"
            f"  set side_b {{ type ether_addr; elements = {{ {', '.join(macs_b)} }} }}\n"
            f"  chain forward {{ type filter hook forward priority -100; policy accept;\n"
            f"    ether saddr @side_a ether daddr @side_b counter drop\n"
            f"    ether saddr @side_b ether daddr @side_a counter drop\n"
            f"  }}\n}}\n"
        )
        steps = []
        for sw in self.fabric.model.switches:
            ns = self.fabric.switch_netns(sw.name)
            imp.undo.append({"op": "nft-delete", "ns": ns.path, "family": "bridge", "table": table})
            imp.counters.append({"ns": ns.path, "family": "bridge", "table": table})
            steps.append((ns, ["nft", "-f", "-"], ruleset.encode()))
        return self._apply(imp, steps)

    def loss(self, target: NicRef | PortRef | str, rate: float, direction: Direction = "both") -> Impairment:
        """Drop each frame crossing the target's switch port with probability ``rate`` (per direction).

        ``in``: frames from the cable into the switch; ``out``: frames from the switch into the cable."""
        if not 0 <= rate <= 1:
            raise ChaosError(f"loss rate {rate} is not between 0 and 1")
        ref = self._resolve(target)
        ns, ifname = self._port(ref)
        imp = self._new("loss", str(ref), {"rate": rate, "direction": direction})
        table = f"fh{imp.id}"
        chance = _chance(rate)
        # Inbound frames are judged at prerouting, which sees each frame once: the forward hook runs once per
        # copy, and a frame to a MAC the switch has not learned is copied to every port (one draw per copy).
        # Outbound frames are judged at postrouting, where each copy is one frame into one cable.
        chains = []
        if direction in ("in", "both") and chance is not None:
            chains.append(("prerouting", f"iifname \"{ifname}\" {chance} counter name dropped_in drop"))
        if direction in ("out", "both") and chance is not None:
            chains.append(("postrouting", f"oifname \"{ifname}\" {chance} counter name dropped_out drop"))
        ruleset = (f"table bridge {table} {{\n  counter dropped_in {{ }}\n  counter dropped_out {{ }}\n"
                   + "".join(f"  chain {hook} {{ type filter hook {hook} priority -100; policy accept;\n"
                             f"    {rule}\n  }}\n" for hook, rule in chains)
                   + "}\n")
        imp.undo = [{"op": "nft-delete", "ns": ns.path, "family": "bridge", "table": table}]
        imp.counters = [{"ns": ns.path, "family": "bridge", "table": table}]
        return self._apply(imp, [(ns, ["nft", "-f", "-"], ruleset.encode())])

    def bandwidth(self, target: NicRef | PortRef | str, rate_mbit: float, direction: Literal["in", "out"] = "out",
                  kind: Literal["tbf", "htb"] = "tbf", burst_bytes: int = 16_000,
                  latency_ms: float = 50) -> Impairment:
        """Limit one direction of a cable to ``rate_mbit`` with tc ``tbf`` (drops beyond ``latency_ms`` of
        queue) or ``htb`` (one class carrying everything). ``out``: switch to cable; ``in``: cable to switch."""
        if rate_mbit <= 0:
            raise ChaosError(f"bandwidth {rate_mbit} Mbit/s must be positive")
        ref = self._resolve(target)
        ns, ifname = self._port(ref) if direction == "out" else self._far_end(ref)
        imp = self._new("bandwidth", str(ref), {"rate_mbit": rate_mbit, "direction": direction, "kind": kind})
        rate = f"{int(rate_mbit * 1000)}kbit"
        imp.undo = [{"op": "tc-delete", "ns": ns.path, "ifname": ifname}]
        if kind == "tbf":
            steps = [(ns, ["tc", "qdisc", "replace", "dev", ifname, "root", "tbf", "rate", rate, "burst",
                           str(burst_bytes), "latency", f"{latency_ms}ms"], None)]
        elif kind == "htb":
            steps = [
                (ns, ["tc", "qdisc", "replace", "dev", ifname, "root", "handle", "1:", "htb", "default", "10"], None),
                (ns, ["tc", "class", "add", "dev", ifname, "parent", "1:", "classid", "1:10", "htb", "rate", rate,
                      "ceil", rate, "burst", str(burst_bytes)], None),
                (ns, ["tc", "qdisc", "add", "dev", ifname, "parent", "1:10", "handle", "10:", "pfifo", "limit",
                      "100"], None),
            ]
        else:
            raise ChaosError(f"bandwidth kind {kind!r} is not tbf or htb")
        return self._apply(imp, steps)

    def duplicate(self, target: NicRef | PortRef | str, rate: float) -> Impairment:
        """Deliver each frame entering the switch through the target's port twice, with probability ``rate``.

        The copy is made by nftables (``dup to``) onto an injection veth whose other end is a bridge port with
        learning off, so it is forwarded like the original and the bridge's MAC table is not disturbed."""
        if not 0 <= rate <= 1:
            raise ChaosError(f"duplication rate {rate} is not between 0 and 1")
        ref = self._resolve(target)
        ns, ifname = self._port(ref)
        port = self.fabric.plan.ports[ref]
        imp = self._new("duplicate", str(ref), {"rate": rate})
        inject, bridge_side = f"dupi{imp.id[-6:]}"[:15], f"dupb{imp.id[-6:]}"[:15]
        table = f"fh{imp.id}"
        chance = _chance(rate)
        # copy only frames the port itself accepts (the VLAN rules see the original, not the copy's way in)
        matches = []
        if port.vlan.tagged:
            matches.append(f"vlan id {{ {', '.join(str(v) for v in sorted(port.vlan.tagged))} }}")
        if port.vlan.untagged is not None:
            matches.append("ether type != 8021q")
        rules = "".join(f"    {m} {chance} counter name duplicated dup to \"{inject}\"\n"
                        for m in matches) if chance is not None else ""
        ruleset = (f"table netdev {table} {{\n  counter duplicated {{ }}\n"
                   f"  chain ingress {{ type filter hook ingress device \"{ifname}\" priority -100; policy accept;\n"
                   f"{rules}  }}\n}}\n")
        imp.undo = [
            {"op": "nft-delete", "ns": ns.path, "family": "netdev", "table": table},
            {"op": "link-delete", "ns": ns.path, "ifname": inject},
        ]
        imp.counters = [{"ns": ns.path, "family": "netdev", "table": table}]
        steps: list[tuple[Netns, list[str], bytes | None]] = [
            (ns, ["ip", "link", "add", inject, "mtu", str(port.mtu), "type", "veth", "peer", "name", bridge_side,
                  "mtu", str(port.mtu)], None),
            (ns, ["ip", "link", "set", bridge_side, "master", BRIDGE], None),
            (ns, ["ip", "link", "set", "dev", bridge_side, "type", "bridge_slave", "learning", "off"], None),
        ]
        if port.vlan.untagged is not None:
            # untagged copies may leave through the ports of the same untagged VLAN
            element = f"bridge fakehw_vlan untagged_{port.vlan.untagged} {{ \"{bridge_side}\" }}"
            imp.undo.insert(0, {"op": "nft-element-delete", "ns": ns.path, "element": element})
            steps.append((ns, ["nft", "add", "element", *element.split(" ", 3)], None))
        steps += [
            (ns, ["ip", "link", "set", bridge_side, "up"], None),
            (ns, ["ip", "link", "set", inject, "up"], None),
            (ns, ["nft", "-f", "-"], ruleset.encode()),
        ]
        return self._apply(imp, steps)

    def corrupt(self, target: NicRef | PortRef | str, rate: float, direction: Literal["in", "out"] = "in"
                ) -> Impairment:
        """Flip one random bit of one random byte beyond the Ethernet header in each frame with probability
        ``rate``, like netem's corrupt, with an eBPF program on the target's switch port (``in``: frames from
        the cable, ``out``: frames to it). Counters: ``seen`` and ``corrupted``."""
        from fakehw.fabric.bpf import BpfError, corrupt_program, create_counter_map, load_program

        if not 0 <= rate <= 1:
            raise ChaosError(f"corruption rate {rate} is not between 0 and 1")
        ref = self._resolve(target)
        ns, ifname = self._port(ref)
        imp = self._new("corrupt", str(ref), {"rate": rate, "direction": direction})
        imp.undo = [{"op": "clsact-delete", "ns": ns.path, "ifname": ifname}]
        self._record_first(imp)
        try:
            map_fd = create_counter_map()
            prog_fd = load_program(corrupt_program(rate, map_fd), "fhcorrupt")
        except BpfError as exc:
            self._drop(imp)
            raise UnsupportedImpairment(f"corrupt: eBPF is not usable here: {exc}") from None
        h = ns.iproute()
        try:
            index = h.link_lookup(ifname=ifname)[0]
            existing = {q.get_attr("TCA_KIND") for q in h.get_qdiscs(index=index)}
            if "clsact" not in existing:
                h.tc("add", "clsact", index)
            h.tc("add-filter", "bpf", index, ":1", fd=prog_fd, name="fhcorrupt",
                 parent="ffff:fff2" if direction == "in" else "ffff:fff3", classid=1, direct_action=True)
        except Exception as exc:
            os.close(map_fd)
            self._drop(imp)
            raise ChaosError(f"corrupt on {ref}: attaching the eBPF program failed: {exc}") from None
        finally:
            os.close(prog_fd)
            h.close()
        imp._map_fd = map_fd
        self.active[imp.id] = imp
        return imp

    def delay(self, target: NicRef | PortRef | str, ms: float, jitter_ms: float = 0.0, *,
              keep_order: bool = True, seed: int = 0) -> Impairment:
        """Delay every frame on the target's cable, both ways, by ``ms`` +- uniform ``jitter_ms``, through a
        userspace forwarder (:mod:`fakehw.fabric.forwarder`) spliced in at the switch port."""
        import subprocess
        import sys
        import tempfile

        from fakehw.fabric.forwarder import MARKER

        if ms < 0 or jitter_ms < 0 or ms > 10_000:
            raise ChaosError(f"delay {ms} ms / jitter {jitter_ms} ms out of range")
        ref = self._resolve(target)
        ns, ifname = self._port(ref)
        mtu = str(self.fabric.plan.ports[ref].mtu)
        imp = self._new("delay", str(ref), {"ms": ms, "jitter_ms": jitter_ms, "keep_order": keep_order})
        renamed, inject = f"dl{imp.id}"[:15], f"dj{imp.id}"[:15]
        workdir = Path(self.fabric.ledger.state_dir or tempfile.gettempdir())
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / f"forwarder-{self.fabric.plan.run_id}-{imp.id}.json"
        imp.undo = [
            {"op": "link-delete", "ns": ns.path, "ifname": ifname},
            {"op": "rename-back", "ns": ns.path, "from": renamed, "to": ifname},
        ]
        self._record_first(imp)
        steps: list[tuple[Netns, list[str], bytes | None]] = [
            (ns, ["ip", "link", "set", "dev", ifname, "down"], None),
            (ns, ["ip", "link", "set", "dev", ifname, "nomaster"], None),
            (ns, ["ip", "link", "set", "dev", ifname, "name", renamed], None),
            (ns, ["ip", "link", "add", ifname, "mtu", mtu, "type", "veth", "peer", "name", inject, "mtu", mtu], None),
            (ns, ["ip", "link", "set", "dev", ifname, "master", BRIDGE], None),
            (ns, ["ip", "link", "set", "dev", ifname, "up"], None),
            (ns, ["ip", "link", "set", "dev", inject, "up"], None),
            (ns, ["ip", "link", "set", "dev", renamed, "up"], None),
        ]
        try:
            for step_ns, argv, data in steps:
                step_ns.run(argv, input=data)
            config.write_text(json.dumps({"ns": ns.path, "port": renamed, "inject": inject, "delay": ms / 1000,
                                          "jitter": jitter_ms / 1000, "keep_order": keep_order, "seed": seed}))
            proc = subprocess.Popen([sys.executable, "-m", MARKER, str(config)], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            marker = f"{MARKER} {config}"
            imp.undo.insert(0, {"op": "process-stop", "ns": ns.path, "pid": proc.pid, "marker": marker})
            self.fabric.ledger.impairments[-1] = imp.record()
            self.fabric.record_process(proc.pid, "forwarder", marker)
            assert proc.stdout is not None
            import select as _select

            ready, _, _ = _select.select([proc.stdout], [], [], 15)
            if not ready or proc.stdout.readline().strip() != b"ready":
                raise ChaosError("the forwarder did not start")
            proc.stdout.close()
            wait_forwarding(ns, ifname)
        except Exception as exc:
            self._drop(imp)
            raise ChaosError(f"delay on {ref}: {exc}") from None
        self.active[imp.id] = imp
        return imp

    def apply(self, kind: str, target: str | None = None, **params: Any) -> Impairment:
        """Apply an impairment by name (what scenario files and the CLI use); unknown or unsupported kinds
        raise with the reason."""
        if kind in UNSUPPORTED:
            raise UnsupportedImpairment(f"{kind}: {UNSUPPORTED[kind]}")
        if kind == "partition":
            return self.partition(params.pop("side_a"), params.pop("side_b"))
        table: dict[str, Callable[..., Impairment]] = {
            "link-down": self.link_down, "flap": self.flap, "loss": self.loss, "bandwidth": self.bandwidth,
            "duplicate": self.duplicate, "corrupt": self.corrupt, "delay": self.delay}
        fn = table.get(kind)
        if fn is None:
            raise ChaosError(f"unknown impairment {kind!r} (known: {', '.join((*SUPPORTED, *UNSUPPORTED))})")
        if target is None:
            raise ChaosError(f"{kind} needs a target (node/nic or switch/port)")
        return fn(target, **params)

    # ---- inspection and revert

    def counters(self, imp: Impairment) -> dict[str, int]:
        """Named nft counters of an impairment, summed over the switches it touches (eBPF counters for
        corruption)."""
        totals: dict[str, int] = {}
        if imp._map_fd is not None:
            from fakehw.fabric.bpf import read_counter

            return {"seen": read_counter(imp._map_fd, 0), "corrupted": read_counter(imp._map_fd, 1)}
        for c in imp.counters:
            text = Netns.borrowed(c["ns"]).run(["nft", "list", "table", c["family"], c["table"]]).stdout.decode()
            for name, packets in re.findall(r"counter (\w+) \{\s*packets (\d+)", text):
                totals[name] = totals.get(name, 0) + int(packets)
            anonymous = sum(int(x) for x in re.findall(r"counter packets (\d+)", text))
            if anonymous:
                totals["anonymous"] = totals.get("anonymous", 0) + anonymous
        return totals

    def revert(self, imp: Impairment) -> None:
        if imp._stop is not None:
            imp._stop.set()
        if imp._thread is not None:
            imp._thread.join(10)
        try:
            self._drop(imp)
        finally:
            if imp._map_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(imp._map_fd)
                imp._map_fd = None

    def clear(self) -> None:
        errors = []
        for imp in list(self.active.values())[::-1]:
            try:
                self.revert(imp)
            except Exception as exc:
                errors.append(str(exc))
        if errors:
            raise ChaosError("; ".join(errors))
