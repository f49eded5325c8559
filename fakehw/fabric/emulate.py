"""Build the emulated fabric with pyroute2, keep a ledger of everything created, tear it all down again.

:meth:`EmulatedFabric.build` executes a :class:`~fakehw.fabric.plan.FabricPlan`: namespaces (or borrowed ones),
one bridge per switch, one veth pair per cable, the VLAN rules. Every resource is written to the ledger *before*
it is created, and the ledger is a JSON file in the state directory, so a teardown - in this process after an
exception, or ``fakehw fabric down`` from another one after a crash - removes exactly what this run made and
nothing of anyone else's (all names carry the run's ``fh<run id>`` prefix).

Teardown order: stop our processes (responders, flappers, forwarders), revert impairments, close our sockets,
delete the veth ends we put into borrowed namespaces, delete our namespaces. :func:`leftovers` then looks with
independent eyes (the namespace directory, the interfaces of borrowed namespaces, nft tables) and lists anything
that survived.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fakehw.fabric.model import FabricModel, NicRef, PortRef
from fakehw.fabric.netns import Netns, NetnsError, create_named, have_root, list_named, remove_named
from fakehw.fabric.plan import BRIDGE, FabricPlan, NodeAttachment, plan
from fakehw.fabric.rawio import PacketSocket
from fakehw.render.atomic import atomic_write, dump_json

LEDGER = "fabric.json"
SWITCH_IFINDEX_BASE = 100_000


class FabricBuildError(RuntimeError):
    """Building the emulated fabric failed; everything built so far has been removed again."""


def root_problem() -> str | None:
    """Why the emulated fabric cannot run here, or None."""
    if not have_root():
        return "the emulated fabric needs root (network namespaces, veth, bridges, nftables)"
    for tool in ("nft", "nsenter"):
        if not any((Path(d) / tool).is_file() for d in os.environ.get("PATH", "/usr/sbin:/usr/bin").split(":")):
            return f"{tool} is not installed (tools/install-system-deps.sh installs it)"
    return None


# --------------------------------------------------------------------------------------------------- ledger


@dataclass
class Ledger:
    """What one fabric run created. Saved atomically after every change."""

    run_id: str
    fabric: str
    source: str
    state_dir: str | None
    owned_netns: list[str] = field(default_factory=list)
    borrowed: dict[str, list[str]] = field(default_factory=dict)
    """Borrowed namespace path -> interfaces we created in it."""
    processes: list[dict[str, Any]] = field(default_factory=list)
    impairments: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False
    created: float = field(default_factory=time.time)

    def save(self) -> None:
        if self.state_dir is None:
            return
        atomic_write(Path(self.state_dir) / LEDGER, dump_json(asdict(self)))

    @classmethod
    def load(cls, state_dir: str | Path) -> Ledger:
        path = Path(state_dir) / LEDGER
        try:
            data = json.loads(path.read_text())
            return cls(**data)
        except FileNotFoundError:
            raise FileNotFoundError(f"no fabric state in {state_dir} ({LEDGER} missing)") from None
        except (json.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"{path} is not a fabric ledger: {exc}") from None


def _process_is_ours(pid: int, marker: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


def stop_process(pid: int, marker: str, timeout: float = 5.0) -> bool:
    """SIGTERM (then SIGKILL) one of our processes, identified by pid and a marker in its command line."""
    if not _process_is_ours(pid, marker):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not _process_is_ours(pid, marker):
            return True
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    return True


# --------------------------------------------------------------------------------------------------- fabric


@dataclass(frozen=True)
class TeardownReport:
    removed_netns: list[str]
    removed_links: list[str]
    stopped: list[int]
    reverted: list[str]
    errors: list[str]
    leftovers: list[str]
    seconds: float


class EmulatedFabric:
    """A built fabric: namespaces, links and the handles to drive them. Use as a context manager."""

    def __init__(self, model: FabricModel, plan_: FabricPlan, ledger: Ledger) -> None:
        self.model = model
        self.plan = plan_
        self.ledger = ledger
        self._sockets: list[PacketSocket] = []
        self._teardown_hooks: list[tuple[str, Callable[[], object]]] = []
        self.build_seconds = 0.0
        self.torn_down = False

    # ---- build

    @classmethod
    def build(cls, model: FabricModel, *, state_dir: str | Path | None = None, run_id: str | None = None,
              attachments: Mapping[str, NodeAttachment] | None = None,
              fail_after: int | None = None) -> EmulatedFabric:
        """Create the fabric. On any failure the partial fabric is removed and FabricBuildError raised.

        ``fail_after`` makes the build fail after that many links (the teardown-after-failure tests use it)."""
        problem = root_problem()
        if problem:
            raise FabricBuildError(problem)
        p = plan(model, run_id, attachments)
        ledger = Ledger(p.run_id, model.name, model.source, str(state_dir) if state_dir else None)
        fabric = cls(model, p, ledger)
        start = time.monotonic()
        try:
            fabric._build(fail_after)
        except BaseException as exc:
            report = fabric.teardown()
            detail = f"; teardown left {report.leftovers}" if report.leftovers else ""
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise FabricBuildError(f"building fabric {model.name} failed: {exc}{detail}") from exc
        fabric.build_seconds = time.monotonic() - start
        ledger.complete = True
        ledger.save()
        return fabric

    def netns(self, key: str) -> Netns:
        ns = self.plan.namespaces[key]
        return Netns(ns.path, ns.owned, ns.name)

    def node_netns(self, node: str) -> Netns:
        return self.netns(f"node:{node}")

    def switch_netns(self, switch: str) -> Netns:
        return self.netns(f"switch:{switch}")

    def _build(self, fail_after: int | None) -> None:
        p = self.plan
        handles: dict[str, Any] = {}

        def ipr(key: str) -> Any:
            if key not in handles:
                handles[key] = self.netns(key).iproute()
            return handles[key]

        try:
            for key, ns in p.namespaces.items():
                if ns.owned:
                    self.ledger.owned_netns.append(ns.name)
                    self.ledger.save()
                    create_named(ns.name)
                    n = self.netns(key)
                    n.sysctl("net.ipv6.conf.all.disable_ipv6", "1")
                    n.sysctl("net.ipv6.conf.default.disable_ipv6", "1")
                else:
                    if not Path(ns.path).exists():
                        raise NetnsError(2, f"namespace {ns.path} for {key} does not exist")
                    self.ledger.borrowed.setdefault(ns.path, [])
                if key.startswith("switch:"):
                    h = ipr(key)
                    h.link("add", ifname=BRIDGE, kind="bridge", br_stp_state=0, br_mcast_snooping=0)
                    h.link("set", index=h.link_lookup(ifname=BRIDGE)[0], state="up")
            bridges = {key: ipr(key).link_lookup(ifname=BRIDGE)[0]
                       for key in p.namespaces if key.startswith("switch:")}
            for count, link in enumerate(p.links):
                if fail_after is not None and count >= fail_after:
                    raise RuntimeError(f"injected failure after {fail_after} link(s)")
                a, b = link.a, link.b
                borrowed_ends = [(p.namespaces[end.ns].path, end.ifname) for end in (a, b)
                                 if not p.namespaces[end.ns].owned]
                for path, ifname in borrowed_ends:
                    self.ledger.borrowed[path].append(ifname)
                if borrowed_ends:
                    self.ledger.save()
                ha = ipr(a.ns)
                # The switch end gets an ifindex no peer can have (peers are numbered from 2 upwards in their
                # namespace): the kernel treats a veth whose ifindex equals its peer's like a plain device and
                # then reports its carrier changes up to a second late, which stalls the bridge after link up.
                a_index = SWITCH_IFINDEX_BASE + count
                ha.link("add", index=a_index, ifname=a.ifname, kind="veth", address=a.mac, mtu=a.mtu,
                        master=bridges[a.ns], peer={"ifname": b.ifname, "net_ns_fd": p.namespaces[b.ns].path,
                                                    "address": b.mac, "mtu": b.mtu})
                if a.up:
                    ha.link("set", index=a_index, state="up")
                hb = ipr(b.ns)
                b_index = hb.link_lookup(ifname=b.ifname)[0]
                if b.ns.startswith("switch:"):
                    hb.link("set", index=b_index, master=bridges[b.ns])
                else:
                    self.netns(b.ns).sysctl(f"net.ipv6.conf.{b.ifname}.disable_ipv6", "1")
                if b.up:
                    hb.link("set", index=b_index, state="up")
            for key, text in p.nft.items():
                self.netns(key).run(["nft", "-f", "-"], input=text.encode())
        finally:
            for h in handles.values():
                with contextlib.suppress(Exception):
                    h.close()

    # ---- handles

    def socket(self, ref: NicRef | PortRef, *, timestamps: bool = False) -> PacketSocket:
        """A packet socket on a NIC (in its node) or a switch port (in the switch); closed at teardown."""
        if isinstance(ref, NicRef):
            nic = self.plan.nics[ref]
            sock = PacketSocket(self.netns(nic.ns), nic.ifname, timestamps=timestamps)
        else:
            port = self.plan.ports[ref]
            sock = PacketSocket(self.netns(port.ns), port.ifname, timestamps=timestamps)
        self._sockets.append(sock)
        return sock

    def on_teardown(self, what: str, fn: Callable[[], object]) -> None:
        """Run ``fn`` first thing at teardown (impairments, threads); ``what`` names it in the report."""
        self._teardown_hooks.append((what, fn))

    def record_process(self, pid: int, role: str, marker: str) -> None:
        self.ledger.processes.append({"pid": pid, "role": role, "marker": marker})
        self.ledger.save()

    def forget_process(self, pid: int) -> None:
        self.ledger.processes = [x for x in self.ledger.processes if x["pid"] != pid]
        self.ledger.save()

    # ---- teardown

    def teardown(self) -> TeardownReport:
        start = time.monotonic()
        errors: list[str] = []
        reverted: list[str] = []
        while self._teardown_hooks:
            what, fn = self._teardown_hooks.pop()
            try:
                fn()
                reverted.append(what)
            except Exception as exc:  # keep going: the rest must still be removed
                errors.append(f"{what}: {exc}")
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
        self._sockets.clear()
        report = teardown_ledger(self.ledger)
        self.torn_down = True
        return TeardownReport(report.removed_netns, report.removed_links, report.stopped,
                              reverted + report.reverted, errors + report.errors, report.leftovers,
                              time.monotonic() - start)

    def __enter__(self) -> EmulatedFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.torn_down:
            self.teardown()


def teardown_ledger(ledger: Ledger) -> TeardownReport:
    """Remove everything a ledger lists (works from any process: ``fakehw fabric down``)."""
    from fakehw.fabric.chaos import revert_recorded

    start = time.monotonic()
    errors: list[str] = []
    stopped: list[int] = []
    for proc in list(ledger.processes):
        if stop_process(int(proc["pid"]), str(proc["marker"])):
            stopped.append(int(proc["pid"]))
    ledger.processes = []
    reverted, revert_errors = revert_recorded(ledger)
    errors += revert_errors
    removed_links: list[str] = []
    for path, ifnames in ledger.borrowed.items():
        if not Path(path).exists():
            continue
        ns = Netns.borrowed(path)
        try:
            h = ns.iproute()
        except OSError as exc:
            errors.append(f"{path}: {exc}")
            continue
        try:
            for ifname in ifnames:
                idx = h.link_lookup(ifname=ifname)
                if idx:
                    try:
                        h.link("del", index=idx[0])
                        removed_links.append(f"{path}:{ifname}")
                    except Exception as exc:
                        errors.append(f"delete {ifname} in {path}: {exc}")
        finally:
            h.close()
    removed: list[str] = []
    for name in ledger.owned_netns:
        try:
            if remove_named(name):
                removed.append(name)
        except OSError as exc:
            errors.append(f"remove namespace {name}: {exc}")
    ledger.save()
    left = leftovers(ledger)
    if not left and ledger.state_dir:
        state = Path(ledger.state_dir)
        ours = [state / LEDGER, state / "attachments.json",
                *state.glob(f"responder-{ledger.run_id}-*"), *state.glob(f"forwarder-{ledger.run_id}-*")]
        for file in ours:
            with contextlib.suppress(OSError):
                file.unlink()
    return TeardownReport(removed, removed_links, stopped, reverted, errors, left, time.monotonic() - start)


def leftovers(ledger: Ledger) -> list[str]:
    """Anything of this run still present: namespaces, links in borrowed namespaces, nft tables, processes."""
    prefix = f"fh{ledger.run_id}-"
    left = [f"netns {n}" for n in list_named(prefix)]
    for path, ifnames in ledger.borrowed.items():
        if not Path(path).exists():
            continue
        try:
            h = Netns.borrowed(path).iproute()
        except OSError:
            continue
        try:
            names = {link.get_attr("IFLA_IFNAME") for link in h.get_links()}
        finally:
            h.close()
        left += [f"link {ifname} in {path}" for ifname in ifnames if ifname in names]
        try:
            tables = Netns.borrowed(path).run(["nft", "list", "tables"], check=False).stdout.decode()
        except OSError:
            tables = ""
        left += [f"nft {line.strip()} in {path}" for line in tables.splitlines() if f"fh{ledger.run_id}" in line]
    left += [f"process {p['pid']} ({p['role']})" for p in ledger.processes
             if _process_is_ours(int(p["pid"]), str(p["marker"]))]
    return left
