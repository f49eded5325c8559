"""Control-API routes for CXL and memory pools (added to :data:`fakehw.agent.server.ROUTES`).

=======  ================================================  ==========================================================
GET      /v1/nodes/{node}/cxl                              the host's CXL view: memdevs, regions, extents, NUMA memory
POST     /v1/nodes/{node}/cxl/regions                      create: {"window", "targets", "granularity"?, "size"?,
                                                           "mode"?, "name"?}
DELETE   /v1/nodes/{node}/cxl/regions/{region}             destroy a region
POST     /v1/nodes/{node}/cxl/memdevs/{memdev}/{online|offline}  bring a memory device online or take it offline
POST     /v1/nodes/{node}/sysfs                            {"path", "data" (base64)}: a write(2) to a sysfs attribute
                                                           (fakehw/agent/cxlsysfs.py); 200 with "errno" 0 and
                                                           "written", or the kernel's "errno" and "error"
GET      /v1/cxl/pools                                     pooled devices: LD owners, extents, free ranges
POST     /v1/cxl/pools/{pool}/assign                       {"ld", "node"}: bind a logical device to a host
POST     /v1/cxl/pools/{pool}/release                      {"ld", "node"?}: unbind it
POST     /v1/cxl/pools/{pool}/extents                      {"node", "size", "offset"?}: add dynamic capacity
DELETE   /v1/cxl/pools/{pool}/extents/{extent}             release an extent
GET      /v1/nodes/{node}/pools                            memory pools: capacity, latency, policy, grants
POST     /v1/nodes/{node}/pools/{pool}/reservations        {"tenant", "size", "ttl"?} -> grant and token
POST     /v1/nodes/{node}/pools/{pool}/bursts              {"tenant", "size", "ttl"?} -> grant and token
DELETE   /v1/pools/grants/{grant}                          {"token"}: release a grant
POST     /v1/nodes/{node}/pools/{pool}/mappings            {"token", "who", "offset"?, "length"?}
DELETE   /v1/pools/mappings/{mapping}                      {"token"}: unmap
GET      /v1/pools/tokens[?node=]                          token records (no secrets): who, range, issued, revoked
GET      /v1/pools/mappings[?node=]                        live mappings
GET      /v1/pools/audit[?node=&pool=&since=&limit=]       the audit log
=======  ================================================  ==========================================================

Refusals are 4xx with the reason: 404 unknown node/pool/region/memdev, 409 conflicts with the state (capacity held
elsewhere or in use, no free decoder), 422 invalid requests (interleave ways, granularity, sizes), 403 a missing
or invalid access token.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fakehw.agent.cxlsysfs import PAGE, CxlSysfs, SysfsError
from fakehw.agent.platform import Platform, PlatformError

if TYPE_CHECKING:
    from fakehw.agent.service import AgentService

Handler = Callable[["AgentService", dict[str, str], dict[str, str], Any], tuple[int, Any]]


def _platform(svc: AgentService) -> Platform:
    platform: Platform | None = getattr(svc, "platform", None)
    if platform is None:
        from fakehw.agent.service import AgentError

        raise AgentError(404, "this agent has no CXL/memory-pool platform")
    return platform


def _wrap(fn: Callable[[Platform, dict[str, str], dict[str, str], Any], tuple[int, Any]]) -> Handler:
    """Run a platform call and turn its refusals into the agent's HTTP errors."""

    def handler(svc: AgentService, p: dict[str, str], q: dict[str, str], body: Any) -> tuple[int, Any]:
        from fakehw.agent.service import AgentError

        try:
            return fn(_platform(svc), p, q, body)
        except PlatformError as exc:
            raise AgentError(exc.status, exc.message) from None

    return handler


def _int_query(q: dict[str, str], name: str, default: int, lo: int, hi: int) -> int:
    try:
        value = int(q.get(name, str(default)))
    except ValueError:
        raise PlatformError(400, f"{name} must be an integer") from None
    if not lo <= value <= hi:
        raise PlatformError(400, f"{name} must be {lo}..{hi}")
    return value


def _sysfs_write(pf: Platform, node: str, body: object) -> tuple[int, object]:
    """A sysfs write: the kernel's answer (``errno``) is the result, not an HTTP error."""
    if not isinstance(body, dict) or set(body) != {"path", "data"} or not isinstance(body["path"], str) \
            or not isinstance(body["data"], str):
        raise PlatformError(400, "a sysfs write is {\"path\": \"sys/...\", \"data\": \"<base64>\"}")
    if len(body["data"]) > 2 * PAGE or len(body["path"]) > PAGE:
        raise PlatformError(413, f"a sysfs write carries at most {PAGE} bytes")
    try:
        data = base64.b64decode(body["data"], validate=True)
    except (binascii.Error, ValueError):
        raise PlatformError(400, "data is not base64") from None
    pf.view(node)  # 404 for an unknown node
    try:
        done = CxlSysfs(pf).write(node, body["path"], data)
    except SysfsError as exc:
        return 200, {"errno": exc.errno, "error": exc.message}
    return 200, {"errno": 0, "written": done.count, "changed": done.changed}


ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    ("GET", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/cxl$"),
     _wrap(lambda pf, p, q, b: (200, pf.view(p["node"]).cxl.to_json()))),
    ("POST", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/cxl/regions$"),
     _wrap(lambda pf, p, q, b: (201, pf.create_region(p["node"], b)))),
    ("DELETE", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/cxl/regions/(?P<region>[^/]+)$"),
     _wrap(lambda pf, p, q, b: (200, {"destroyed": pf.destroy_region(p["node"], p["region"])}))),
    ("POST", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/cxl/memdevs/(?P<memdev>[^/]+)/online$"),
     _wrap(lambda pf, p, q, b: (200, pf.set_memdev(p["node"], p["memdev"], True)))),
    ("POST", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/cxl/memdevs/(?P<memdev>[^/]+)/offline$"),
     _wrap(lambda pf, p, q, b: (200, pf.set_memdev(p["node"], p["memdev"], False)))),
    ("POST", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/sysfs$"),
     _wrap(lambda pf, p, q, b: _sysfs_write(pf, p["node"], b))),
    ("GET", re.compile(r"^/v1/cxl/pools$"), _wrap(lambda pf, p, q, b: (200, pf.cxl_pools()))),
    ("POST", re.compile(r"^/v1/cxl/pools/(?P<pool>[^/]+)/assign$"),
     _wrap(lambda pf, p, q, b: (200, pf.assign_ld(p["pool"], b)))),
    ("POST", re.compile(r"^/v1/cxl/pools/(?P<pool>[^/]+)/release$"),
     _wrap(lambda pf, p, q, b: (200, pf.release_ld(p["pool"], b)))),
    ("POST", re.compile(r"^/v1/cxl/pools/(?P<pool>[^/]+)/extents$"),
     _wrap(lambda pf, p, q, b: (201, pf.add_extent(p["pool"], b)))),
    ("DELETE", re.compile(r"^/v1/cxl/pools/(?P<pool>[^/]+)/extents/(?P<extent>[^/]+)$"),
     _wrap(lambda pf, p, q, b: (200, {"released": pf.release_extent(p["pool"], p["extent"])}))),
    ("GET", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/pools$"), _wrap(lambda pf, p, q, b: (200, pf.pools(p["node"])))),
    ("POST", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/pools/(?P<pool>[^/]+)/reservations$"),
     _wrap(lambda pf, p, q, b: (201, pf.grant(p["node"], p["pool"], b, "reservation")))),
    ("POST", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/pools/(?P<pool>[^/]+)/bursts$"),
     _wrap(lambda pf, p, q, b: (201, pf.grant(p["node"], p["pool"], b, "burst")))),
    ("DELETE", re.compile(r"^/v1/pools/grants/(?P<grant>[^/]+)$"),
     _wrap(lambda pf, p, q, b: (200, pf.release_grant(p["grant"], b)))),
    ("POST", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/pools/(?P<pool>[^/]+)/mappings$"),
     _wrap(lambda pf, p, q, b: (201, pf.map(p["node"], p["pool"], b)))),
    ("DELETE", re.compile(r"^/v1/pools/mappings/(?P<mapping>[^/]+)$"),
     _wrap(lambda pf, p, q, b: (200, pf.unmap(p["mapping"], b)))),
    ("GET", re.compile(r"^/v1/pools/tokens$"), _wrap(lambda pf, p, q, b: (200, pf.tokens(q.get("node"))))),
    ("GET", re.compile(r"^/v1/pools/mappings$"), _wrap(lambda pf, p, q, b: (200, pf.mappings(q.get("node"))))),
    ("GET", re.compile(r"^/v1/pools/audit$"),
     _wrap(lambda pf, p, q, b: (200, pf.audit.query(q.get("node"), q.get("pool"),
                                                    _int_query(q, "since", 0, 0, 2**62),
                                                    _int_query(q, "limit", 1000, 1, 100_000))))),
]
