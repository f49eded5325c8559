"""The hosts' own RoCE settings, in the forms operators keep them, as per-NIC ``hosts`` entries.

A hosts directory holds one directory per node (named like the profile's nodes), each with any of:

- ``netplan/*.yaml`` - netplan: ``ethernets.<netdev>.mtu``; a ``vlans`` entry whose ``link`` is the NIC's netdev
  means RoCE leaves tagged with its ``id`` (its MTU, capped by the parent's, is the NIC's MTU); a NIC that is a
  bond member is an error (not modelled).
- ``mlnx_qos/<netdev>.txt`` - the output of ``mlnx_qos -i <netdev>``: ``Priority trust state``, the
  ``dscp2prio`` table and the ``PFC configuration`` ``enabled`` row.
- ``cma_roce_tos/<rdma device>.txt`` - the output of ``cma_roce_tos -d <mlx5_N>``: the TOS RDMA-CM gives RoCE
  connections; DSCP = TOS >> 2, and the priority is ``dscp2prio`` of it (trust dscp) or TOS >> 5 (trust pcp).
- ``sys/class/net/<netdev>/ecn/roce_np/{cnp_dscp,cnp_802p_prio}`` and ``ecn/roce_{rp,np}/enable/<prio>`` - the
  sysfs values (copied files): the CNP class, and whether DCQCN reacts (rp) and notifies (np) on the RoCE
  priority.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fakehw.fabric.importers.assemble import HostSettings
from fakehw.fabric.importers.source import fail, read_yaml
from fakehw.fabric.loader import ImportNote, SourceKey

_INT = re.compile(r"-?\d+")


def read_hosts(root: Path, display: str) -> HostSettings:
    out = HostSettings()
    if not root.is_dir():
        fail(display, "", "the hosts directory does not exist")
    for node_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        node = node_dir.name
        nics: dict[str, dict[str, Any]] = {}
        at: dict[tuple[str, ...], SourceKey] = {}
        qos: dict[str, dict[str, Any]] = {}
        for f in sorted((node_dir / "netplan").glob("*.y*ml")):
            _netplan(f, f"{display}/{node}/netplan/{f.name}", nics, at, out.notes)
        for f in sorted((node_dir / "mlnx_qos").glob("*.txt")):
            qos[f.stem] = _mlnx_qos(f, f"{display}/{node}/mlnx_qos/{f.name}")
        tos: dict[str, tuple[int, SourceKey]] = {}
        for f in sorted((node_dir / "cma_roce_tos").glob("*.txt")):
            name = f"{display}/{node}/cma_roce_tos/{f.name}"
            tos[f.stem] = (_first_int(f, name, "cma_roce_tos output", 0, 255), SourceKey(name, "default_roce_tos", 1))
        sysfs = node_dir / "sys" / "class" / "net"
        netdevs = set(nics) | set(qos) | ({p.name for p in sysfs.iterdir()} if sysfs.is_dir() else set())
        for netdev in sorted(netdevs):
            entry = nics.setdefault(netdev, {})
            roce: dict[str, Any] = {}
            rat: dict[str, SourceKey] = {}
            q = qos.get(netdev)
            if q is not None:
                roce["trust"], roce["pfcPriorities"] = q["trust"], q["pfc"]
                rat["trust"], rat["pfcPriorities"] = q["at"], q["pfc_at"]
            for rdma, (value, where) in tos.items():
                if rdma == netdev or _rdma_of(node_dir, rdma) == netdev:
                    roce["dscp"] = value >> 2
                    rat["dscp"] = rat["priority"] = where
                    if q is not None:
                        roce["priority"] = q["dscp2prio"].get(value >> 2, 0) if q["trust"] == "dscp" else value >> 5
            np_dir = sysfs / netdev / "ecn" / "roce_np"
            base = f"{display}/{node}/sys/class/net/{netdev}/ecn"
            for fname, key in (("cnp_dscp", "cnpDscp"), ("cnp_802p_prio", "cnpPriority")):
                if (np_dir / fname).is_file():
                    hi = 63 if fname == "cnp_dscp" else 7
                    roce[key] = _first_int(np_dir / fname, f"{base}/roce_np/{fname}", fname, 0, hi)
                    rat[key] = SourceKey(f"{base}/roce_np/{fname}", fname, 1)
            prio = roce.get("priority")
            if prio is not None and (sysfs / netdev / "ecn" / "roce_rp" / "enable" / str(prio)).is_file():
                flags = [_first_int(sysfs / netdev / "ecn" / side / "enable" / str(prio),
                                    f"{base}/{side}/enable/{prio}", "enable flag", 0, 1) for side in ("roce_rp",
                                                                                                     "roce_np")
                         if (sysfs / netdev / "ecn" / side / "enable" / str(prio)).is_file()]
                roce["ecn"] = all(flags)
                rat["ecn"] = SourceKey(f"{base}/roce_rp/enable/{prio}", f"roce_rp/enable/{prio}", 1)
            if roce:
                entry["roce"] = roce
            if not entry:
                continue
            pattern = f"{node}/{netdev}"
            out.entries[pattern] = entry
            for key in ("mtu", "vlan"):
                if (netdev, key) in at:
                    out.at[(pattern, key)] = at[(netdev, key)]
            for key, where in rat.items():
                if key in roce:
                    out.at[(pattern, "roce", key)] = where
            out.at[(pattern,)] = SourceKey(f"{display}/{node}", netdev)
    return out


def _rdma_of(node_dir: Path, rdma: str) -> str | None:
    """Which netdev an RDMA device is, when the host directory says (``rdma_link.txt``: lines ``mlx5_0 enp24s0np0``
    as ``rdma link`` or ``ibdev2netdev`` print them)."""
    f = node_dir / "ibdev2netdev.txt"
    if not f.is_file():
        return None
    for line in f.read_text().splitlines():
        words = line.replace("==>", " ").split()
        if words and words[0] == rdma:
            return next((w for w in words[1:] if not w.isdigit() and w not in ("port",)), None)
    return None


def _first_int(path: Path, name: str, what: str, lo: int, hi: int) -> int:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        fail(name, "", f"cannot read: {exc}")
    m = _INT.search(text)
    if m is None:
        fail(name, what, f"expected a number ({what}), got {text.strip()[:40]!r}", 1)
    value = int(m.group())
    if not lo <= value <= hi:
        fail(name, what, f"{what} {value} is outside {lo}-{hi}", 1)
    return value


def _mlnx_qos(path: Path, name: str) -> dict[str, Any]:
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        fail(name, "", f"cannot read: {exc}")
    trust = None
    dscp2prio: dict[int, int] = {}
    pfc: list[int] | None = None
    trust_line = pfc_line = 1
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if text.lower().startswith("priority trust state:"):
            trust = text.split(":", 1)[1].strip().lower()
            trust_line = n
            if trust not in ("dscp", "pcp"):
                fail(name, "Priority trust state", f"trust state must be dscp or pcp, got {trust!r}", n)
        elif text.startswith("prio:") and "dscp:" in text:
            prio_text, _, dscps = text.partition("dscp:")
            prio = int(prio_text.removeprefix("prio:").strip())
            for d in dscps.split(","):
                if d.strip():
                    dscp2prio[int(d)] = prio
        elif text.startswith("enabled"):
            flags = text.split()[1:]
            if len(flags) != 8 or any(f not in ("0", "1") for f in flags):
                fail(name, "PFC configuration.enabled", f"expected eight 0/1 flags, got {' '.join(flags)!r}", n)
            pfc = [i for i, f in enumerate(flags) if f == "1"]
            pfc_line = n
    if trust is None:
        fail(name, "Priority trust state", "no 'Priority trust state:' line: not the output of mlnx_qos -i")
    if pfc is None:
        fail(name, "PFC configuration", "no PFC 'enabled' row: not the output of mlnx_qos -i")
    return {"trust": trust, "dscp2prio": dscp2prio, "pfc": pfc, "at": SourceKey(name, "Priority trust state",
                                                                                 trust_line),
            "pfc_at": SourceKey(name, "PFC configuration.enabled", pfc_line)}


def _netplan(path: Path, name: str, nics: dict[str, dict[str, Any]], at: dict[tuple[str, ...], SourceKey],
             notes: list[ImportNote]) -> None:
    src = read_yaml(path, name)
    net = src.data.get("network") if isinstance(src.data, dict) else None
    if not isinstance(net, dict):
        src.fail("network", (), "a netplan file has a top-level 'network' mapping")
    eths = net.get("ethernets") or {}
    for dev, body in eths.items():
        body = body or {}
        if "mtu" in body:
            nics.setdefault(dev, {})["mtu"] = int(body["mtu"])
            at[(dev, "mtu")] = src.at(f"network.ethernets.{dev}.mtu", ("network", "ethernets", dev, "mtu"))
    for vname, body in (net.get("vlans") or {}).items():
        body = body or {}
        link = body.get("link")
        if link is None or "id" not in body:
            src.fail(f"network.vlans.{vname}", ("network", "vlans", vname), "a VLAN needs id and link")
        entry = nics.setdefault(str(link), {})
        entry["vlan"] = int(body["id"])
        at[(str(link), "vlan")] = src.at(f"network.vlans.{vname}.id", ("network", "vlans", vname, "id"))
        parent = int((eths.get(link) or {}).get("mtu", 1500))
        mtu = min(int(body.get("mtu", parent)), parent)
        entry["mtu"] = mtu
        at[(str(link), "mtu")] = src.at(f"network.vlans.{vname}.mtu", ("network", "vlans", vname, "mtu")) \
            if "mtu" in body else src.at(f"network.ethernets.{link}.mtu", ("network", "ethernets", link))
    for bname, body in (net.get("bonds") or {}).items():
        for member in (body or {}).get("interfaces", []):
            src.fail(f"network.bonds.{bname}.interfaces", ("network", "bonds", bname, "interfaces"),
                     f"{member} is bonded: link aggregation of RoCE NICs is not modelled")
    for key in net:
        if key not in ("version", "renderer", "ethernets", "vlans", "bonds"):
            notes.append(src.note(f"network.{key}", ("network", key), "ignored", "not relevant to RoCE"))
