"""Client verbs for the CXL and memory-pool routes (mixed into :class:`fakehw.agent.client.AgentClient`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode


def _q(value: str) -> str:
    return quote(value, safe="")


class PlatformClientMixin:
    """``request(method, path, body)`` is provided by the client class."""

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        raise NotImplementedError

    # CXL ------------------------------------------------------------------------------------------

    def cxl(self, node: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/nodes/{_q(node)}/cxl")  # type: ignore[no-any-return]

    def create_region(self, node: str, window: str, targets: list[str], granularity: int | None = None,
                      size: int | str | None = None, mode: str | None = None,
                      name: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"window": window, "targets": targets}
        for key, value in (("granularity", granularity), ("size", size), ("mode", mode), ("name", name)):
            if value is not None:
                body[key] = value
        return self.request("POST", f"/v1/nodes/{_q(node)}/cxl/regions", body)  # type: ignore[no-any-return]

    def destroy_region(self, node: str, region: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/nodes/{_q(node)}/cxl/regions/{_q(region)}")  # type: ignore[no-any-return]

    def memdev_online(self, node: str, memdev: str, online: bool = True) -> dict[str, Any]:
        verb = "online" if online else "offline"
        return self.request("POST", f"/v1/nodes/{_q(node)}/cxl/memdevs/{_q(memdev)}/{verb}", {})  # type: ignore[no-any-return]

    def cxl_pools(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/cxl/pools")  # type: ignore[no-any-return]

    def assign_ld(self, pool: str, ld: int, node: str) -> dict[str, Any]:
        return self.request("POST", f"/v1/cxl/pools/{_q(pool)}/assign", {"ld": ld, "node": node})  # type: ignore[no-any-return]

    def release_ld(self, pool: str, ld: int, node: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"ld": ld}
        if node is not None:
            body["node"] = node
        return self.request("POST", f"/v1/cxl/pools/{_q(pool)}/release", body)  # type: ignore[no-any-return]

    def add_extent(self, pool: str, node: str, size: int | str, offset: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"node": node, "size": size}
        if offset is not None:
            body["offset"] = offset
        return self.request("POST", f"/v1/cxl/pools/{_q(pool)}/extents", body)  # type: ignore[no-any-return]

    def release_extent(self, pool: str, extent: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/cxl/pools/{_q(pool)}/extents/{_q(extent)}")  # type: ignore[no-any-return]

    # memory pools ---------------------------------------------------------------------------------

    def pools(self, node: str) -> list[dict[str, Any]]:
        return self.request("GET", f"/v1/nodes/{_q(node)}/pools")  # type: ignore[no-any-return]

    def reserve(self, node: str, pool: str, tenant: str, size: int | str, ttl: float | None = None,
                burst: bool = False) -> dict[str, Any]:
        """A reservation (or with ``burst`` a burst); the answer holds ``grant`` and the access ``token``."""
        body: dict[str, Any] = {"tenant": tenant, "size": size}
        if ttl is not None:
            body["ttl"] = ttl
        kind = "bursts" if burst else "reservations"
        return self.request("POST", f"/v1/nodes/{_q(node)}/pools/{_q(pool)}/{kind}", body)  # type: ignore[no-any-return]

    def release_grant(self, grant: str, token: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/pools/grants/{_q(grant)}", {"token": token})  # type: ignore[no-any-return]

    def map_pool(self, node: str, pool: str, token: str | None, who: str, offset: int = 0,
                 length: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"who": who, "offset": offset}
        if token is not None:
            body["token"] = token
        if length is not None:
            body["length"] = length
        return self.request("POST", f"/v1/nodes/{_q(node)}/pools/{_q(pool)}/mappings", body)  # type: ignore[no-any-return]

    def unmap_pool(self, mapping: str, token: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/pools/mappings/{_q(mapping)}", {"token": token})  # type: ignore[no-any-return]

    def pool_tokens(self, node: str | None = None) -> list[dict[str, Any]]:
        query = f"?{urlencode({'node': node})}" if node else ""
        return self.request("GET", f"/v1/pools/tokens{query}")  # type: ignore[no-any-return]

    def pool_mappings(self, node: str | None = None) -> list[dict[str, Any]]:
        query = f"?{urlencode({'node': node})}" if node else ""
        return self.request("GET", f"/v1/pools/mappings{query}")  # type: ignore[no-any-return]

    def audit(self, node: str | None = None, pool: str | None = None, since: int = 0,
              limit: int = 1000) -> list[dict[str, Any]]:
        query: dict[str, Any] = {"since": since, "limit": limit}
        if node:
            query["node"] = node
        if pool:
            query["pool"] = pool
        return self.request("GET", f"/v1/pools/audit?{urlencode(query)}")  # type: ignore[no-any-return]
