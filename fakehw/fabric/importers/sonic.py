"""SONiC ``config_db.json`` -> an :class:`ImportedSwitch`.

Tables read (SONiC's Configuration.md names them; keys are ``TABLE|key`` in findings): DEVICE_METADATA (hostname,
buffer_model), PORT (mtu, admin_status, pfc_asym), VLAN and VLAN_MEMBER (tagging_mode), PORT_QOS_MAP
(dscp_to_tc_map, dot1p_to_tc_map, tc_to_pg_map, tc_to_queue_map, pfc_enable), DSCP_TO_TC_MAP, DOT1P_TO_TC_MAP,
TC_TO_PRIORITY_GROUP_MAP, TC_TO_QUEUE_MAP, BUFFER_POOL, BUFFER_PROFILE, BUFFER_PG, BUFFER_QUEUE, QUEUE (scheduler,
wred_profile), SCHEDULER, WRED_PROFILE, PFC_WD, DEVICE_NEIGHBOR.

How SONiC's terms become the model's (the model's "priority" is the switch-internal traffic class, TC):

- trust: dscp when the port binds a DSCP_TO_TC_MAP, pcp when it binds only a DOT1P_TO_TC_MAP (the map becomes
  ``pcpToPriority``); unmapped DSCPs go to TC 0.
- PFC: ``pfc_enable`` lists the lossless priorities.
- ECN: a TC is marked when the queue TC_TO_QUEUE_MAP gives it has a WRED_PROFILE with ``wred_green_enable`` true
  and an ``ecn`` mode that marks green (RoCE is never policed, so it is green); the thresholds are that profile's
  green ones (bytes).
- CNP priority: the TC whose queue's SCHEDULER is STRICT (the highest such TC when several are).
- headroom: a TC has lossless buffers when TC_TO_PRIORITY_GROUP_MAP gives it a priority group whose BUFFER_PG
  profile reserves headroom (``xoff``) and, when its queue has a BUFFER_QUEUE entry, that profile's pool is a
  lossless one. With ``buffer_model: dynamic`` SONiC creates the lossless priority groups of ``pfc_enable``
  itself.
- PFC watchdog: ``PFC_WD|<port>`` (action, detection_time and restoration_time in ms, the ranges of SONiC's YANG
  model, both at least ``PFC_WD|GLOBAL.POLL_INTERVAL``); a port without an entry, or whose entry lacks
  detection_time (orchagent then starts none), runs no watchdog.

Features that change how RoCE is forwarded and that the model cannot represent are errors at their key: a cabled
port in a PORTCHANNEL, a routed (INTERFACE) cabled port, VXLAN tunnels, data-plane ACLs, asymmetric PFC, the PFC
watchdog's BIG_RED_SWITCH.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from fakehw.fabric.importers.assemble import ImportedPort, ImportedSwitch
from fakehw.fabric.importers.source import SourceFile, as_int, int_list, read_json
from fakehw.fabric.loader import ImportNote, NoteKind, SourceKey

DEFAULT_MTU = 9100
"""SONiC's port MTU when PORT gives none."""

READ = {"DEVICE_METADATA", "PORT", "VLAN", "VLAN_MEMBER", "PORT_QOS_MAP", "DSCP_TO_TC_MAP", "DOT1P_TO_TC_MAP",
        "TC_TO_PRIORITY_GROUP_MAP", "TC_TO_QUEUE_MAP", "BUFFER_POOL", "BUFFER_PROFILE", "BUFFER_PG", "BUFFER_QUEUE",
        "QUEUE", "SCHEDULER", "WRED_PROFILE", "PFC_WD", "DEVICE_NEIGHBOR", "PORTCHANNEL_MEMBER", "INTERFACE",
        "ACL_TABLE", "ACL_RULE", "VXLAN_TUNNEL", "VXLAN_TUNNEL_MAP", "VXLAN_EVPN_NVO"}
IGNORED = {
    "AAA", "ACL_TABLE_TYPE", "AUTO_TECHSUPPORT", "AUTO_TECHSUPPORT_FEATURE", "BANNER_MESSAGE", "BGP_DEVICE_GLOBAL",
    "BGP_NEIGHBOR", "BGP_PEER_RANGE", "BREAKOUT_CFG", "BUFFER_PORT_EGRESS_PROFILE_LIST",
    "BUFFER_PORT_INGRESS_PROFILE_LIST", "CABLE_LENGTH", "CONSOLE_PORT", "CONSOLE_SWITCH", "CRM",
    "DEFAULT_LOSSLESS_BUFFER_PARAMETER", "DEVICE_NEIGHBOR_METADATA", "DHCP_RELAY", "DHCP_SERVER", "DNS_NAMESERVER",
    "FEATURE", "FLEX_COUNTER_TABLE", "KDUMP", "LLDP", "LOGGER", "LOOPBACK_INTERFACE", "LOSSLESS_TRAFFIC_PATTERN",
    "MAP_PFC_PRIORITY_TO_QUEUE", "MGMT_INTERFACE", "MGMT_PORT", "MGMT_VRF_CONFIG", "NTP", "NTP_SERVER",
    "PASSW_HARDENING", "PORTCHANNEL", "PORTCHANNEL_INTERFACE", "RADIUS", "RADIUS_SERVER", "RESTAPI", "SFLOW",
    "SNMP", "SNMP_AGENT_ADDRESS_CONFIG", "SNMP_COMMUNITY", "SSH_SERVER", "STATIC_ROUTE", "SYSLOG_CONFIG",
    "SYSLOG_SERVER", "SYSTEM_DEFAULTS", "TACPLUS", "TACPLUS_SERVER", "TELEMETRY", "GNMI", "VERSIONS",
    "VLAN_INTERFACE", "VRF", "WATERMARK_TABLE", "XCVRD_LOG",
}
PORT_FIELDS_READ = {"mtu", "admin_status", "pfc_asym"}
PORT_FIELDS_IGNORED = {"alias", "lanes", "speed", "index", "fec", "autoneg", "description", "tpid", "parent_port",
                       "adv_speeds", "adv_interface_types", "interface_type", "link_training", "role", "subport",
                       "dhcp_rate_limit", "mode", "asic_port_name", "coreid", "core_port_id", "num_voq"}
PORT_QOS_FIELDS = {"dscp_to_tc_map", "dot1p_to_tc_map", "tc_to_pg_map", "tc_to_queue_map", "pfc_enable",
                   "pfc_to_queue_map", "pfc_to_pg_map", "pfcwd_sw_enable", "scheduler"}
WATCHDOG_FIELDS = {"action", "detection_time", "restoration_time", "pfc_stat_history"}
GREEN_ECN = {"ecn_green", "ecn_green_yellow", "ecn_green_red", "ecn_all"}
REMARK_ACTIONS = re.compile(r"(DSCP|TC|PCP|COLOR|QOS)", re.IGNORECASE)
CONTROL_PLANE_ACL = {"CTRLPLANE"}


def read_switch(path: Path, display: str) -> ImportedSwitch:
    """One switch's config_db.json."""
    src = read_json(path, display)
    if not isinstance(src.data, dict):
        src.fail("", (), f"a config_db.json is a JSON object of tables, this file holds a {type(src.data).__name__}")
    return _Reader(src).switch()


def _ref(value: Any) -> str:
    """A map or profile name as PORT_QOS_MAP writes it: ``AZURE`` or the older ``[DSCP_TO_TC_MAP|AZURE]``."""
    text = str(value).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].partition("|")[2] or text[1:-1]
    return text


class _Reader:
    def __init__(self, src: SourceFile) -> None:
        self.src = src
        self.data: dict[str, Any] = src.data
        self.notes: list[ImportNote] = []

    # ---- helpers
    def table(self, name: str) -> dict[str, Any]:
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            self.src.fail(name, (name,), f"table {name} must be a JSON object, got {type(value).__name__}")
        for key, entry in value.items():
            if not isinstance(entry, dict):
                self.src.fail(f"{name}|{key}", (name, key), f"entry {name}|{key} must be a JSON object")
        return value

    def at(self, table: str, key: str, fld: str | None = None) -> SourceKey:
        label = f"{table}|{key}" + (f".{fld}" if fld else "")
        return self.src.at(label, (table, key, fld) if fld else (table, key))

    def fail(self, table: str, key: str, fld: str | None, message: str) -> NoReturn:
        at = self.at(table, key, fld)
        self.src.fail(at.key, (table, key, fld) if fld else (table, key), message)

    def entries(self, table: str) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
        """``(key, port, rest, entry)`` for keys ``Ethernet0|3-4`` and the older ``Ethernet0,Ethernet4|3-4``."""
        for key, entry in self.table(table).items():
            ports, _, rest = key.partition("|")
            for port in ports.split(","):
                yield key, port.strip(), rest, entry

    def tc_map(self, table: str, name: str, lo: int, hi: int, where: SourceKey) -> dict[int, int]:
        maps = self.table(table)
        if name not in maps:
            known = ", ".join(maps) or "none"
            self.src.fail(where.key, (), f"names {table}|{name}, which is not defined (defined: {known})")
        out = {}
        for k, v in maps[name].items():
            src_val = as_int(self.src, f"{table}|{name}.{k}", (table, name, k), k, lo, hi, f"{table} key")
            out[src_val] = as_int(self.src, f"{table}|{name}.{k}", (table, name, k), v, 0, 7, "traffic class")
        return out

    # ---- the switch
    def switch(self) -> ImportedSwitch:
        meta = self.table("DEVICE_METADATA").get("localhost", {})
        hostname = meta.get("hostname")
        name = str(hostname) if hostname else Path(self.src.name).parent.name or Path(self.src.name).stem
        at = self.at("DEVICE_METADATA", "localhost", "hostname") if hostname else self.src.at("(file)")
        sw = ImportedSwitch(name, at, self.src)
        self._tables()
        self._ports(sw)
        self._vlans(sw)
        self._neighbors(sw)
        self._qos(sw, str(meta.get("buffer_model", "traditional")))
        self._unsupported(sw)
        self._watchdog(sw)
        sw.notes = self.notes + sw.notes
        return sw

    def _tables(self) -> None:
        for name in self.data:
            if name in READ:
                continue
            kind: NoteKind = "ignored" if name in IGNORED else "unknown"
            why = "not relevant to RoCE" if kind == "ignored" else "table not known to the SONiC importer: not read"
            self.notes.append(self.src.note(name, (name,), kind, why))

    def _ports(self, sw: ImportedSwitch) -> None:
        table = self.table("PORT")
        if not table:
            self.src.fail("PORT", ("PORT",), "the PORT table is missing or empty: a switch without ports")
        for name, entry in table.items():
            for fld in entry:
                if fld not in PORT_FIELDS_READ | PORT_FIELDS_IGNORED:
                    self.notes.append(self.src.note(f"PORT|{name}.{fld}", ("PORT", name, fld), "unknown",
                                                    "field not known to the SONiC importer: not read"))
            if str(entry.get("pfc_asym", "off")).lower() == "on":
                self.fail("PORT", name, "pfc_asym", "asymmetric PFC (pfc_asym on) is not modelled: the port "
                                                    "honours pause frames it never sends, so RoCE is not lossless "
                                                    "in one direction")
            if "mtu" in entry:
                mtu = as_int(self.src, f"PORT|{name}.mtu", ("PORT", name, "mtu"), entry["mtu"], 68, 9216, "mtu")
                mtu_at = self.at("PORT", name, "mtu")
            else:
                mtu, mtu_at = DEFAULT_MTU, self.at("PORT", name)
            admin = str(entry.get("admin_status", "down")).lower()
            if admin not in ("up", "down"):
                self.fail("PORT", name, "admin_status", f"admin_status must be up or down, got {admin!r}")
            port = ImportedPort(name, self.at("PORT", name), mtu, mtu_at, shutdown=admin != "up",
                                shutdown_at=self.at("PORT", name, "admin_status") if "admin_status" in entry
                                else self.at("PORT", name))
            if mtu < 576:
                self.fail("PORT", name, "mtu", f"mtu {mtu} is below the 576 bytes IPv4 needs")
            sw.ports[name] = port

    def _vlans(self, sw: ImportedSwitch) -> None:
        vlans: dict[str, int] = {}
        for key, entry in self.table("VLAN").items():
            vid = entry.get("vlanid", key.removeprefix("Vlan"))
            vlans[key] = as_int(self.src, f"VLAN|{key}.vlanid", ("VLAN", key), vid, 1, 4094, "vlanid")
        for key, entry in self.table("VLAN_MEMBER").items():
            vlan_name, sep, port_name = key.partition("|")
            if not sep:
                self.fail("VLAN_MEMBER", key, None, "VLAN_MEMBER keys are Vlan<id>|<port>")
            if vlan_name not in vlans:
                self.fail("VLAN_MEMBER", key, None, f"{vlan_name} is not defined in VLAN")
            at = self.at("VLAN_MEMBER", key)
            port = sw.port(port_name, at.key, at)
            mode = str(entry.get("tagging_mode", "untagged")).lower()
            vid = vlans[vlan_name]
            if mode == "tagged":
                port.tagged.append(vid)
            elif mode in ("untagged", "priority_tagged"):
                if port.untagged is not None:
                    self.fail("VLAN_MEMBER", key, "tagging_mode", f"{port_name} is already an untagged member of "
                                                                  f"VLAN {port.untagged}")
                port.untagged = vid
            else:
                self.fail("VLAN_MEMBER", key, "tagging_mode", f"tagging_mode must be tagged or untagged, got {mode!r}")
            port.vlan_at = port.vlan_at or at

    def _neighbors(self, sw: ImportedSwitch) -> None:
        for key, entry in self.table("DEVICE_NEIGHBOR").items():
            at = self.at("DEVICE_NEIGHBOR", key)
            port = sw.port(key, at.key, at)
            device, remote = entry.get("name"), entry.get("port")
            if not device or not remote:
                self.fail("DEVICE_NEIGHBOR", key, None, "a neighbour needs name (the device) and port")
            port.peer, port.peer_at = (str(device), str(remote)), at

    def _qos(self, sw: ImportedSwitch, buffer_model: str) -> None:
        pqm = self.table("PORT_QOS_MAP")
        for key, entry in pqm.items():
            for port_name in key.split(","):
                if port_name.strip() == "global":
                    continue
                at = self.at("PORT_QOS_MAP", key)
                sw.port(port_name.strip(), at.key, at)
                for fld in entry:
                    if fld not in PORT_QOS_FIELDS:
                        self.notes.append(self.src.note(f"PORT_QOS_MAP|{key}.{fld}", ("PORT_QOS_MAP", key, fld),
                                                        "unknown", "field not known to the SONiC importer: not read"))
        bound = {p.strip(): (k, e) for k, e in pqm.items() for p in k.split(",")}
        queues = {(p, q): (key, e) for key, p, rest, e in self.entries("QUEUE")
                  for q in int_list(self.src, f"QUEUE|{key}", ("QUEUE", key), rest, 0, 15, "queue")}
        pgs = {(p, g): (key, e) for key, p, rest, e in self.entries("BUFFER_PG")
               for g in int_list(self.src, f"BUFFER_PG|{key}", ("BUFFER_PG", key), rest, 0, 15, "priority group")}
        bqueues = {(p, q): (key, e) for key, p, rest, e in self.entries("BUFFER_QUEUE")
                   for q in int_list(self.src, f"BUFFER_QUEUE|{key}", ("BUFFER_QUEUE", key), rest, 0, 15, "queue")}
        for table, index in (("QUEUE", queues), ("BUFFER_PG", pgs), ("BUFFER_QUEUE", bqueues)):
            for (p, _), (key, _) in index.items():
                at = self.at(table, key)
                sw.port(p, at.key, at)
        for port in sw.ports.values():
            self._port_qos(port, bound.get(port.name), queues, pgs, bqueues, buffer_model)

    def _port_qos(self, port: ImportedPort, bound: tuple[str, dict[str, Any]] | None,
                  queues: dict[tuple[str, int], tuple[str, dict[str, Any]]],
                  pgs: dict[tuple[str, int], tuple[str, dict[str, Any]]],
                  bqueues: dict[tuple[str, int], tuple[str, dict[str, Any]]], buffer_model: str) -> None:
        key, entry = bound if bound is not None else (port.name, {})
        here = self.at("PORT_QOS_MAP", key) if bound is not None else port.at
        qos: dict[str, Any] = {"defaultPriority": 0}
        at: dict[str, SourceKey] = {"defaultPriority": here}
        if "dscp_to_tc_map" in entry:
            name = _ref(entry["dscp_to_tc_map"])
            where = self.at("PORT_QOS_MAP", key, "dscp_to_tc_map")
            qos["trust"], at["trust"] = "dscp", where
            qos["dscpToPriority"] = self.tc_map("DSCP_TO_TC_MAP", name, where=where, lo=0, hi=63)
            at["dscpToPriority"] = self.src.at(f"DSCP_TO_TC_MAP|{name}", ("DSCP_TO_TC_MAP", name))
        elif "dot1p_to_tc_map" in entry:
            name = _ref(entry["dot1p_to_tc_map"])
            where = self.at("PORT_QOS_MAP", key, "dot1p_to_tc_map")
            qos["trust"], at["trust"] = "pcp", where
            qos["pcpToPriority"] = self.tc_map("DOT1P_TO_TC_MAP", name, where=where, lo=0, hi=7)
            at["pcpToPriority"] = self.src.at(f"DOT1P_TO_TC_MAP|{name}", ("DOT1P_TO_TC_MAP", name))
        else:
            qos["trust"], at["trust"] = "dscp", here
            qos["dscpToPriority"], at["dscpToPriority"] = {}, here
        pfc: list[int] = []
        if "pfc_enable" in entry:
            pfc = int_list(self.src, f"PORT_QOS_MAP|{key}.pfc_enable", ("PORT_QOS_MAP", key, "pfc_enable"),
                           entry["pfc_enable"], 0, 7, "pfc_enable priority")
            at["pfcPriorities"] = self.at("PORT_QOS_MAP", key, "pfc_enable")
        else:
            at["pfcPriorities"] = here
        qos["pfcPriorities"] = pfc
        tc_q = self._bound_map(entry, key, "tc_to_queue_map", "TC_TO_QUEUE_MAP", identity=True)
        tc_pg = self._bound_map(entry, key, "tc_to_pg_map", "TC_TO_PRIORITY_GROUP_MAP", identity=False)
        # ECN
        marked: list[int] = []
        profile_at: SourceKey | None = None
        thresholds: tuple[float, float, int] | None = None
        for tc in range(8):
            q = tc_q.get(tc, 0)
            qkey, qentry = queues.get((port.name, q), ("", {}))
            wred = qentry.get("wred_profile")
            if wred is None:
                continue
            name = _ref(wred)
            profiles = self.table("WRED_PROFILE")
            if name not in profiles:
                self.fail("QUEUE", qkey, "wred_profile", f"names WRED_PROFILE|{name}, which is not defined")
            prof = profiles[name]
            if str(prof.get("wred_green_enable", "false")).lower() == "true" and \
                    str(prof.get("ecn", "ecn_none")).lower() in GREEN_ECN:
                marked.append(tc)
                if thresholds is None:
                    pk = f"WRED_PROFILE|{name}"
                    lo = as_int(self.src, f"{pk}.green_min_threshold", ("WRED_PROFILE", name, "green_min_threshold"),
                                prof.get("green_min_threshold", 0), 0, 2**31, "green_min_threshold")
                    hi = as_int(self.src, f"{pk}.green_max_threshold", ("WRED_PROFILE", name, "green_max_threshold"),
                                prof.get("green_max_threshold", 0), 0, 2**31, "green_max_threshold")
                    prob = as_int(self.src, f"{pk}.green_drop_probability",
                                  ("WRED_PROFILE", name, "green_drop_probability"),
                                  prof.get("green_drop_probability", 100), 0, 100, "green_drop_probability")
                    thresholds = (lo / 1024, hi / 1024, max(prob, 1))
                    profile_at = self.src.at(pk, ("WRED_PROFILE", name))
        lossless_q = tc_q.get(pfc[0], 0) if pfc else None
        if thresholds is not None:
            qos["ecn"] = {"priorities": marked, "minKB": thresholds[0], "maxKB": thresholds[1],
                          "probability": thresholds[2]}
            at["ecn"] = profile_at or here
        else:
            qos["ecn"] = {"enabled": False}
            at["ecn"] = self.at("QUEUE", f"{port.name}|{lossless_q}") if lossless_q is not None else here
        # CNP: strict queues
        strict = []
        strict_at = None
        for tc in range(8):
            qkey, qentry = queues.get((port.name, tc_q.get(tc, 0)), ("", {}))
            sched = qentry.get("scheduler")
            if sched is None:
                continue
            sname = _ref(sched)
            scheds = self.table("SCHEDULER")
            if sname not in scheds:
                self.fail("QUEUE", qkey, "scheduler", f"names SCHEDULER|{sname}, which is not defined")
            if str(scheds[sname].get("type", "")).upper() == "STRICT":
                strict.append(tc)
                strict_at = self.at("QUEUE", qkey, "scheduler")
        qos["cnpPriority"] = max(strict) if strict else None
        at["cnpPriority"] = strict_at or here
        # headroom
        headroom = self._headroom(port, pfc, tc_q, tc_pg, pgs, bqueues, buffer_model)
        qos["headroom"] = headroom
        pg0 = tc_pg.get(pfc[0], 0) if pfc else 0
        pg_hit = pgs.get((port.name, pg0))
        at["headroom"] = self.at("BUFFER_PG", pg_hit[0]) if pg_hit else at["pfcPriorities"]
        port.qos, port.qos_at = qos, at

    def _bound_map(self, entry: dict[str, Any], key: str, fld: str, table: str, identity: bool) -> dict[int, int]:
        if fld not in entry:
            return {tc: tc for tc in range(8)} if identity else {}
        where = self.at("PORT_QOS_MAP", key, fld)
        return self.tc_map(table, _ref(entry[fld]), where=where, lo=0, hi=7)

    def _headroom(self, port: ImportedPort, pfc: list[int], tc_q: dict[int, int], tc_pg: dict[int, int],
                  pgs: dict[tuple[str, int], tuple[str, dict[str, Any]]],
                  bqueues: dict[tuple[str, int], tuple[str, dict[str, Any]]], buffer_model: str) -> list[int]:
        out = []
        profiles = self.table("BUFFER_PROFILE")
        pools = self.table("BUFFER_POOL")
        for tc in range(8):
            pg = tc_pg.get(tc, 0)
            hit = pgs.get((port.name, pg))
            if hit is None:
                lossless = buffer_model == "dynamic" and tc in pfc
            else:
                pkey, pentry = hit
                prof = _ref(pentry.get("profile", "NULL"))
                if prof == "NULL":
                    lossless = buffer_model == "dynamic"
                else:
                    if prof not in profiles:
                        self.fail("BUFFER_PG", pkey, "profile", f"names BUFFER_PROFILE|{prof}, which is not defined")
                    lossless = int(str(profiles[prof].get("xoff", "0")) or 0) > 0
            qhit = bqueues.get((port.name, tc_q.get(tc, 0)))
            if lossless and qhit is not None:
                qprof = _ref(qhit[1].get("profile", ""))
                pool = _ref(profiles.get(qprof, {}).get("pool", ""))
                if qprof not in profiles:
                    self.fail("BUFFER_QUEUE", qhit[0], "profile", f"names BUFFER_PROFILE|{qprof}, which is not "
                                                                  f"defined")
                lossless = "lossless" in pool or str(pools.get(pool, {}).get("mode", "")) == "lossless"
            if lossless:
                out.append(tc)
        return out

    def _unsupported(self, sw: ImportedSwitch) -> None:
        for key in self.table("PORTCHANNEL_MEMBER"):
            pc, _, member = key.partition("|")
            sw.unsupported.setdefault(member, (self.at("PORTCHANNEL_MEMBER", key),
                                               f"{member} is cabled and a member of {pc}: link aggregation is not "
                                               "modelled (RoCE flows would hash over the members)"))
        for key in self.table("INTERFACE"):
            name = key.partition("|")[0]
            sw.unsupported.setdefault(name, (self.at("INTERFACE", key),
                                             f"{name} is cabled and a routed port: the fabric model is layer 2 "
                                             "(VLANs), routed RoCE fabrics are not modelled"))
        for table in ("VXLAN_TUNNEL", "VXLAN_TUNNEL_MAP", "VXLAN_EVPN_NVO"):
            for key in self.table(table):
                self.fail(table, key, None, "VXLAN is not modelled: RoCE inside a VXLAN tunnel takes the outer "
                                            "header's DSCP and MTU")
        acl_types = {k: str(e.get("type", "")).upper() for k, e in self.table("ACL_TABLE").items()}
        for key, acl_type in acl_types.items():
            if acl_type in CONTROL_PLANE_ACL:
                self.notes.append(self.src.note(f"ACL_TABLE|{key}", ("ACL_TABLE", key), "ignored",
                                                "control-plane ACL: not relevant to RoCE"))
        for key, entry in self.table("ACL_RULE").items():
            table = key.partition("|")[0]
            if acl_types.get(table) in CONTROL_PLANE_ACL:
                continue
            remark = [f for f in entry if REMARK_ACTIONS.search(f) and "ACTION" in f.upper()]
            what = f"remarks {', '.join(remark)}" if remark else "filters data-plane traffic"
            self.fail("ACL_RULE", key, None, f"a data-plane ACL rule that {what} is not modelled: it can reclassify "
                                             "or drop RoCE")

    def _watchdog(self, sw: ImportedSwitch) -> None:
        """PFC_WD: per port ``action`` / ``detection_time`` / ``restoration_time`` (ms) and GLOBAL
        ``POLL_INTERVAL``, range-checked as SONiC's YANG model (sonic-pfcwd) does. A port without an entry, or
        with one that lacks ``detection_time`` (orchagent then starts none), runs no watchdog."""
        table = self.table("PFC_WD")
        glob = table.get("GLOBAL", {})
        poll = None
        if "POLL_INTERVAL" in glob:
            poll = as_int(self.src, "PFC_WD|GLOBAL.POLL_INTERVAL", ("PFC_WD", "GLOBAL", "POLL_INTERVAL"),
                          glob["POLL_INTERVAL"], 100, 1000, "POLL_INTERVAL (ms)")
        if str(glob.get("BIG_RED_SWITCH", "disable")).lower() == "enable":
            self.fail("PFC_WD", "GLOBAL", "BIG_RED_SWITCH", "BIG_RED_SWITCH enable puts every lossless queue in "
                                                            "storm mitigation (PFC frames ignored): not modelled")
        for key, entry in table.items():
            if key == "GLOBAL":
                continue
            at = self.at("PFC_WD", key)
            port = sw.port(key, at.key, at)
            for fld in entry:
                if fld not in WATCHDOG_FIELDS:
                    self.notes.append(self.src.note(f"PFC_WD|{key}.{fld}", ("PFC_WD", key, fld), "unknown",
                                                    "field not known to the SONiC importer: not read"))
            action = str(entry.get("action", "drop")).lower()
            if action not in ("drop", "forward", "alert"):
                self.fail("PFC_WD", key, "action", f"action must be drop, forward or alert, got {action!r}")
            port.qos_at["pfcWatchdog"] = at
            port.qos_at["pfcWatchdog.action"] = self.at("PFC_WD", key, "action") if "action" in entry else at
            if "detection_time" not in entry:
                self.notes.append(self.src.note(at.key, ("PFC_WD", key), "info", "no detection_time: orchagent "
                                                "starts no PFC watchdog on this port"))
                port.qos["pfcWatchdog"] = {"enabled": False}
                continue
            times = {fld: self._watchdog_time(key, entry, fld, hi, poll)
                     for fld, hi in (("detection_time", 5000), ("restoration_time", 60_000)) if fld in entry}
            port.qos["pfcWatchdog"] = {"enabled": True, "action": action, "detectionMs": times["detection_time"],
                                       "restorationMs": times.get("restoration_time")}
            port.qos_at["pfcWatchdog.detectionMs"] = self.at("PFC_WD", key, "detection_time")
            if "restoration_time" in entry:
                port.qos_at["pfcWatchdog.restorationMs"] = self.at("PFC_WD", key, "restoration_time")
        for port in sw.ports.values():
            if "pfcWatchdog" not in port.qos:
                port.qos["pfcWatchdog"] = {"enabled": False}
                port.qos_at["pfcWatchdog"] = port.qos_at.get("pfcPriorities", port.at)

    def _watchdog_time(self, key: str, entry: dict[str, Any], fld: str, hi: int, poll: int | None) -> int:
        value = as_int(self.src, f"PFC_WD|{key}.{fld}", ("PFC_WD", key, fld), entry[fld], 100, hi, f"{fld} (ms)")
        if poll is not None and value < poll:
            self.fail("PFC_WD", key, fld, f"{fld} {value} ms is below PFC_WD|GLOBAL.POLL_INTERVAL {poll} ms (SONiC's "
                                          "YANG model rejects it)")
        return value
