"""Memory pools at run time: reservations, bursts, access tokens, mappings and the audit trail.

A memory pool (``gpu.memoryPool.<name>`` of the design) offers capacity of one tier on one node. Tenants get it
two ways:

- a **reservation** is guaranteed: it is granted only while the reservations of the pool fit its capacity, and
  bursts in the way are preempted to make room;
- a **burst** is opportunistic: it takes free capacity now and is preempted (revoked) when a reservation needs the
  room or the pool loses capacity.

Every grant yields an ephemeral **access token** (``fhw1.<token id>.<secret>``). Only a hash of the secret is
kept, so neither the journal nor the audit log can leak a usable token. A **mapping** (a consumer attaching part
of a grant) is made only with a valid token for that node, pool and range; every refusal is logged. A grant ends
when it is released (with its token), when its token expires, or when it is preempted; its token is revoked and
its mappings are torn down, each step an audit entry.

The ledger is a plain state machine: methods check a request and return the facts that change the state;
:meth:`PoolLedger.apply` applies journaled facts (also on replay). Capacity is supplied by the caller because it
depends on the hardware (CXL state, faults): see :mod:`fakehw.agent.platform`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fakehw.agent.cxl import _holes, size_text

GrantKind = Literal["reservation", "burst"]
TOKEN_PREFIX = "fhw1"
DEFAULT_TTL_S = 3600.0
MAX_TTL_S = 30 * 24 * 3600.0
MAX_GRANTS_PER_POOL = 4096
MAX_REVOKED_TOKENS = 10_000
TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$")

Fact = dict[str, Any]


class PoolError(Exception):
    """A pool request the platform refuses. ``status``: 403 bad token, 404 unknown, 409 conflict, 422 invalid."""

    def __init__(self, status: int, message: str, audit: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.audit = audit
        """For a refused mapping: the audit entry to record."""


@dataclass(frozen=True, slots=True)
class Grant:
    id: str
    node: str
    pool: str
    tenant: str
    kind: GrantKind
    start: int
    size: int
    token_id: str
    token_hash: str
    issued: float
    expires: float

    @property
    def end(self) -> int:
        return self.start + self.size

    def public(self) -> dict[str, Any]:
        """Everything but the token hash."""
        return {"id": self.id, "node": self.node, "pool": self.pool, "tenant": self.tenant, "kind": self.kind,
                "start": self.start, "size": self.size, "token_id": self.token_id, "issued": self.issued,
                "expires": self.expires}

    def to_json(self) -> dict[str, Any]:
        return {**self.public(), "token_hash": self.token_hash}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Grant:
        return cls(str(d["id"]), str(d["node"]), str(d["pool"]), str(d["tenant"]),
                   "burst" if d["kind"] == "burst" else "reservation", int(d["start"]), int(d["size"]),
                   str(d["token_id"]), str(d["token_hash"]), float(d["issued"]), float(d["expires"]))


@dataclass(frozen=True, slots=True)
class PoolMapping:
    """Part of a grant attached by a consumer (``who``), made with the grant's token."""

    id: str
    grant: str
    node: str
    pool: str
    who: str
    offset: int
    length: int
    created: float

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "grant": self.grant, "node": self.node, "pool": self.pool, "who": self.who,
                "offset": self.offset, "length": self.length, "created": self.created}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PoolMapping:
        return cls(str(d["id"]), str(d["grant"]), str(d["node"]), str(d["pool"]), str(d["who"]), int(d["offset"]),
                   int(d["length"]), float(d["created"]))


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """What the audit trail keeps of a token: who held it, for what range, when, and when it was revoked."""

    token_id: str
    grant: str
    node: str
    pool: str
    tenant: str
    kind: GrantKind
    start: int
    end: int
    issued: float
    expires: float
    revoked: float | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"token_id": self.token_id, "grant": self.grant, "node": self.node, "pool": self.pool,
                "tenant": self.tenant, "kind": self.kind, "start": self.start, "end": self.end,
                "issued": self.issued, "expires": self.expires, "revoked": self.revoked, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class PoolUsage:
    reserved: int
    bursting: int
    grants: int
    tenants: tuple[str, ...]

    @property
    def used(self) -> int:
        return self.reserved + self.bursting


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _ids(prefix: str, value: str) -> int:
    try:
        return int(value.rsplit("-", 1)[-1]) if value.startswith(prefix) else 0
    except ValueError:
        return 0


@dataclass
class PoolLedger:
    """Live grants and mappings of every pool an agent serves, and the records of all tokens it issued."""

    grants: dict[str, Grant] = field(default_factory=dict)
    mappings: dict[str, PoolMapping] = field(default_factory=dict)
    tokens: dict[str, TokenRecord] = field(default_factory=dict)
    seq: int = 0

    # ------------------------------------------------------------------------------------------ queries

    def live(self, node: str, pool: str) -> list[Grant]:
        return sorted((g for g in self.grants.values() if g.node == node and g.pool == pool), key=lambda g: g.id)

    def usage(self, node: str, pool: str) -> PoolUsage:
        live = self.live(node, pool)
        return PoolUsage(sum(g.size for g in live if g.kind == "reservation"),
                         sum(g.size for g in live if g.kind == "burst"), len(live),
                         tuple(sorted({g.tenant for g in live})))

    # ------------------------------------------------------------------------------------------ requests

    def grant(
        self,
        node: str,
        pool: str,
        tenant: str,
        size: int,
        kind: GrantKind,
        now: float,
        capacity: int,
        address_space: int,
        exclusive: bool,
        ttl: float | None = None,
    ) -> tuple[list[Fact], Grant, str]:
        """Check a reservation or burst; return (facts, grant, token). Preemptions are among the facts."""
        if not isinstance(tenant, str) or not TENANT_RE.match(tenant):
            raise PoolError(422, "tenant must be 1-128 characters: letters, digits and . _ : / @ - (e.g. "
                            "team-a/pod-7)")
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise PoolError(422, f"size must be a positive number of bytes, not {size!r}")
        ttl = DEFAULT_TTL_S if ttl is None else ttl
        if not 1 <= ttl <= MAX_TTL_S:
            raise PoolError(422, f"ttl must be 1..{int(MAX_TTL_S)} seconds, not {ttl}")
        live = self.live(node, pool)
        if len(live) >= MAX_GRANTS_PER_POOL:
            raise PoolError(409, f"pool {pool} already has {len(live)} grants")
        victims: list[Grant] = []
        if exclusive:
            others = [g for g in live if g.tenant != tenant]
            holders = sorted({g.tenant for g in others if g.kind == "reservation"})
            if holders:
                raise PoolError(409, f"pool {pool} is exclusive and held by tenant {holders[0]}")
            if others and kind == "burst":
                raise PoolError(409, f"pool {pool} is exclusive and bursting for tenant {others[0].tenant}")
            victims.extend(others)  # a reservation preempts another tenant's bursts in an exclusive pool
        usage = self.usage(node, pool)
        if kind == "reservation":
            if usage.reserved + size > capacity:
                raise PoolError(409, f"cannot reserve {size_text(size)} of pool {pool} on {node}: "
                                f"{size_text(max(0, capacity - usage.reserved))} of its {size_text(capacity)} is "
                                "not reserved")
        elif usage.used + size > capacity:
            raise PoolError(409, f"cannot burst {size_text(size)} into pool {pool} on {node}: "
                            f"{size_text(max(0, capacity - usage.used))} of its {size_text(capacity)} is free")
        # Room: preempt bursts, newest first, until the grant fits in total and finds a contiguous range.
        bursts = sorted((g for g in live if g.kind == "burst" and g not in victims), key=lambda g: g.id, reverse=True)
        while True:
            keep = [g for g in live if g not in victims]
            used = sum(g.size for g in keep)
            start = None
            if used + size <= capacity:
                start = next((s for s, length in _holes([(g.start, g.size) for g in keep], 0, address_space)
                              if length >= size), None)
            if start is not None:
                break
            if kind == "burst" or not bursts:
                free = sum(length for _, length in _holes([(g.start, g.size) for g in keep], 0, address_space))
                raise PoolError(409, f"pool {pool} on {node} has no contiguous {size_text(size)} free "
                                f"({size_text(min(free, capacity - used))} free in pieces); release grants first")
            victims.append(bursts.pop(0))
        facts: list[Fact] = [self._revoke_fact(v, now, f"preempted by a reservation of {tenant}") for v in victims]
        grant_id = f"g-{self.seq + 1:06d}"
        token_id = f"t-{self.seq + 1:06d}"
        secret = secrets.token_urlsafe(24)
        token = f"{TOKEN_PREFIX}.{token_id}.{secret}"
        grant = Grant(grant_id, node, pool, tenant, kind, start, size, token_id, hash_secret(secret), now,
                      now + ttl)
        facts.append({"fact": "grant", "grant": grant.to_json()})
        return facts, grant, token

    def release(self, grant_id: str, token: str | None, now: float) -> tuple[list[Fact], Grant]:
        """Check a release; a refusal raises :class:`PoolError` carrying the audit entry to log."""
        grant = self.grants.get(grant_id)
        if grant is None:
            raise PoolError(404, f"no live grant {grant_id!r}",
                            _refusal("release-refused", None, grant_id, token, "no such live grant"))
        problem = self._token_problem(token, grant)
        if problem:
            raise PoolError(403, f"cannot release {grant_id}: {problem}",
                            _refusal("release-refused", grant, grant_id, token, problem))
        return [self._revoke_fact(grant, now, "released")], grant

    def map(self, node: str, pool: str, token: str | None, who: str, offset: int, length: int | None,
            now: float) -> tuple[list[Fact], PoolMapping]:
        """Check a mapping request; a refusal raises :class:`PoolError` carrying the audit entry to log."""
        if not isinstance(who, str) or not TENANT_RE.match(who):
            raise PoolError(422, "who must name the consumer: 1-128 letters, digits and . _ : / @ -")

        def refuse(reason: str, grant: Grant | None = None, status: int = 403) -> PoolError:
            token_id = _token_id(token)
            return PoolError(status, f"mapping refused: {reason}", {
                "action": "map-refused", "node": node, "pool": pool, "who": who, "grant": grant.id if grant else None,
                "token_id": token_id, "start": offset, "end": offset + (length or 0), "reason": reason})

        token_id = _token_id(token)
        record = self.tokens.get(token_id or "")
        grant = self.grants.get(record.grant) if record else None
        if token is None or token == "":
            raise refuse("no access token")
        if record is None:
            raise refuse("unknown or malformed access token")
        if grant is None:
            raise refuse(f"token {token_id} was revoked ({record.reason})" if record.revoked is not None
                         else f"token {token_id} has no live grant")
        problem = self._token_problem(token, grant)
        if problem:
            raise refuse(problem, grant)
        if grant.expires <= now:
            raise refuse(f"token {token_id} expired", grant)
        if grant.node != node or grant.pool != pool:
            raise refuse(f"token {token_id} is for pool {grant.pool} on {grant.node}, not {pool} on {node}", grant)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise refuse(f"offset must be a byte offset within the grant, not {offset!r}", grant, 422)
        length = grant.size - offset if length is None else length
        if isinstance(length, bool) or not isinstance(length, int) or length <= 0 or offset + length > grant.size:
            raise refuse(f"range {offset}+{length} is outside the {grant.size}-byte grant {grant.id}", grant)
        mapping = PoolMapping(f"m-{self.seq + 1:06d}", grant.id, node, pool, who, offset, length, now)
        return [{"fact": "map", "mapping": mapping.to_json()}], mapping

    def unmap(self, mapping_id: str, token: str | None, now: float) -> tuple[list[Fact], PoolMapping]:
        """Check an unmap; a refusal raises :class:`PoolError` carrying the audit entry to log."""
        mapping = self.mappings.get(mapping_id)
        if mapping is None:
            raise PoolError(404, f"no live mapping {mapping_id!r}",
                            _refusal("unmap-refused", None, mapping_id, token, "no such live mapping"))
        grant = self.grants[mapping.grant]
        problem = self._token_problem(token, grant)
        if problem:
            entry = _refusal("unmap-refused", grant, mapping_id, token, problem)
            entry.update(who=mapping.who, start=grant.start + mapping.offset,
                         end=grant.start + mapping.offset + mapping.length)
            raise PoolError(403, f"cannot unmap {mapping_id}: {problem}", entry)
        return [{"fact": "unmap", "mapping": mapping_id, "time": now, "reason": "unmapped"}], mapping

    # ------------------------------------------------------------------------------------------ reconciling

    def expire(self, now: float) -> list[Fact]:
        """Facts revoking every grant whose token has expired."""
        return [self._revoke_fact(g, now, "token expired") for g in sorted(self.grants.values(), key=lambda g: g.id)
                if g.expires <= now]

    def shrink(self, node: str, pool: str, capacity: int, now: float, why: str) -> list[Fact]:
        """Facts preempting grants until the pool's grants fit ``capacity``: bursts first, newest first."""
        live = self.live(node, pool)
        used = sum(g.size for g in live)
        facts: list[Fact] = []
        order = sorted(live, key=lambda g: (g.kind == "reservation", -int(g.id.split("-")[1])))
        for g in order:
            if used <= capacity:
                break
            facts.append(self._revoke_fact(g, now, f"preempted: {why}"))
            used -= g.size
        return facts

    def drop_pool(self, node: str, pools: Iterable[str], now: float) -> list[Fact]:
        """Facts revoking grants of pools that no longer exist (the profile changed under a kept journal)."""
        names = set(pools)
        return [self._revoke_fact(g, now, "pool no longer exists") for g in self.grants.values()
                if g.node == node and g.pool not in names]

    # ------------------------------------------------------------------------------------------ facts

    def _revoke_fact(self, grant: Grant, now: float, reason: str) -> Fact:
        return {"fact": "revoke", "grant": grant.id, "time": now, "reason": reason}

    def apply(self, fact: Mapping[str, Any], audit: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Apply a journaled fact; ``audit`` receives the audit entry it implies (not on replay)."""
        kind = fact["fact"]
        if kind == "grant":
            g = Grant.from_json(fact["grant"])
            self.grants[g.id] = g
            self.tokens[g.token_id] = TokenRecord(g.token_id, g.id, g.node, g.pool, g.tenant, g.kind, g.start, g.end,
                                                  g.issued, g.expires)
            self.seq = max(self.seq, _ids("g-", g.id), _ids("t-", g.token_id))
            if audit:
                audit({"action": f"grant-{g.kind}", "node": g.node, "pool": g.pool, "who": g.tenant, "grant": g.id,
                       "token_id": g.token_id, "start": g.start, "end": g.end,
                       "reason": f"expires {g.expires:.0f}"})
        elif kind == "revoke":
            gone = self.grants.pop(str(fact["grant"]), None)
            if gone is None:
                return
            g = gone
            when, reason = float(fact["time"]), str(fact["reason"])
            for m in [m for m in self.mappings.values() if m.grant == g.id]:
                del self.mappings[m.id]
                if audit:
                    audit({"action": "unmap", "node": m.node, "pool": m.pool, "who": m.who, "grant": g.id,
                           "token_id": g.token_id, "start": g.start + m.offset, "end": g.start + m.offset + m.length,
                           "reason": f"grant revoked: {reason}"})
            rec = self.tokens.get(g.token_id)
            if rec is not None:
                self.tokens[g.token_id] = TokenRecord(rec.token_id, rec.grant, rec.node, rec.pool, rec.tenant,
                                                      rec.kind, rec.start, rec.end, rec.issued, rec.expires, when,
                                                      reason)
            self._trim_tokens()
            if audit:
                audit({"action": "revoke", "node": g.node, "pool": g.pool, "who": g.tenant, "grant": g.id,
                       "token_id": g.token_id, "start": g.start, "end": g.end, "reason": reason})
        elif kind == "map":
            m = PoolMapping.from_json(fact["mapping"])
            self.mappings[m.id] = m
            self.seq = max(self.seq, _ids("m-", m.id))
            owner = self.grants.get(m.grant)
            if audit and owner is not None:
                audit({"action": "map", "node": m.node, "pool": m.pool, "who": m.who, "grant": owner.id,
                       "token_id": owner.token_id, "start": owner.start + m.offset,
                       "end": owner.start + m.offset + m.length, "reason": ""})
        elif kind == "unmap":
            m2 = self.mappings.pop(str(fact["mapping"]), None)
            owner = self.grants.get(m2.grant) if m2 else None
            if audit and m2 is not None and owner is not None:
                audit({"action": "unmap", "node": m2.node, "pool": m2.pool, "who": m2.who, "grant": owner.id,
                       "token_id": owner.token_id, "start": owner.start + m2.offset,
                       "end": owner.start + m2.offset + m2.length, "reason": str(fact.get("reason", ""))})
        else:
            raise ValueError(f"unknown pool fact {kind!r}")

    def _trim_tokens(self) -> None:
        revoked = [t for t in self.tokens.values() if t.revoked is not None]
        if len(revoked) > MAX_REVOKED_TOKENS:
            for t in sorted(revoked, key=lambda t: t.revoked or 0.0)[: len(revoked) - MAX_REVOKED_TOKENS]:
                del self.tokens[t.token_id]

    def _token_problem(self, token: str | None, grant: Grant) -> str:
        """Why ``token`` does not open ``grant`` ("" when it does)."""
        if not token:
            return "no access token"
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
            return "malformed access token"
        if parts[1] != grant.token_id or not hmac.compare_digest(hash_secret(parts[2]), grant.token_hash):
            return f"the token does not belong to grant {grant.id}"
        return ""

    # ------------------------------------------------------------------------------------------ snapshot

    def to_json(self) -> dict[str, Any]:
        return {
            "grants": [g.to_json() for g in sorted(self.grants.values(), key=lambda g: g.id)],
            "mappings": [m.to_json() for m in sorted(self.mappings.values(), key=lambda m: m.id)],
            "tokens": [t.to_json() for t in sorted(self.tokens.values(), key=lambda t: t.token_id)],
            "seq": self.seq,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PoolLedger:
        ledger = cls(seq=int(d.get("seq", 0)))
        for raw in d.get("grants", []):
            g = Grant.from_json(raw)
            ledger.grants[g.id] = g
        for raw in d.get("mappings", []):
            m = PoolMapping.from_json(raw)
            ledger.mappings[m.id] = m
        for raw in d.get("tokens", []):
            ledger.tokens[str(raw["token_id"])] = TokenRecord(
                str(raw["token_id"]), str(raw["grant"]), str(raw["node"]), str(raw["pool"]), str(raw["tenant"]),
                "burst" if raw["kind"] == "burst" else "reservation", int(raw["start"]), int(raw["end"]),
                float(raw["issued"]), float(raw["expires"]),
                None if raw.get("revoked") is None else float(raw["revoked"]), str(raw.get("reason", "")))
        return ledger


def _refusal(action: str, grant: Grant | None, target: str, token: str | None, reason: str) -> dict[str, Any]:
    """The audit entry of a refused release or unmap (``target``: the grant or mapping asked for)."""
    return {"action": action, "node": grant.node if grant else None, "pool": grant.pool if grant else None,
            "who": grant.tenant if grant else None, "grant": grant.id if grant else None, "target": target,
            "token_id": _token_id(token), "start": grant.start if grant else None,
            "end": grant.end if grant else None, "reason": reason}


def _token_id(token: str | None) -> str | None:
    if not token:
        return None
    parts = token.split(".")
    return parts[1] if len(parts) == 3 and parts[0] == TOKEN_PREFIX else None
