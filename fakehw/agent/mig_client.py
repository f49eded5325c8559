"""Client verbs for the MIG routes (mixed into :class:`fakehw.agent.client.AgentClient`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote


def _q(value: str) -> str:
    return quote(value, safe="")


class MigClientMixin:
    """``request(method, path, body)`` is provided by the client class."""

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        raise NotImplementedError

    def mig(self, node: str) -> dict[str, Any]:
        """MIG mode and instances of the node's MIG-capable GPUs."""
        return self.request("GET", f"/v1/nodes/{_q(node)}/mig")  # type: ignore[no-any-return]

    def _gpu(self, node: str, gpu: str) -> str:
        return f"/v1/nodes/{_q(node)}/gpus/{_q(gpu)}/mig"

    def set_mig_mode(self, node: str, gpu: str, enabled: bool) -> dict[str, Any]:
        return self.request("POST", f"{self._gpu(node, gpu)}/mode", {"enabled": enabled})  # type: ignore[no-any-return]

    def create_gpu_instance(self, node: str, gpu: str, profile: int | str,
                            placement: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"profile": profile}
        if placement is not None:
            body["placement"] = placement
        return self.request("POST", f"{self._gpu(node, gpu)}/gpu-instances", body)  # type: ignore[no-any-return]

    def destroy_gpu_instance(self, node: str, gpu: str, gi: int) -> dict[str, Any]:
        return self.request("DELETE", f"{self._gpu(node, gpu)}/gpu-instances/{gi}")  # type: ignore[no-any-return]

    def create_compute_instance(self, node: str, gpu: str, gi: int, profile: int | str | None = None,
                                placement: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if profile is not None:
            body["profile"] = profile
        if placement is not None:
            body["placement"] = placement
        path = f"{self._gpu(node, gpu)}/gpu-instances/{gi}/compute-instances"
        return self.request("POST", path, body)  # type: ignore[no-any-return]

    def destroy_compute_instance(self, node: str, gpu: str, gi: int, ci: int) -> dict[str, Any]:
        path = f"{self._gpu(node, gpu)}/gpu-instances/{gi}/compute-instances/{ci}"
        return self.request("DELETE", path)  # type: ignore[no-any-return]
