"""Control-API routes for MIG (added to :data:`fakehw.agent.server.ROUTES`).

=======  ===============================================================  ============================================
GET      /v1/nodes/{node}/mig                                             MIG mode and instances of every capable GPU
POST     /v1/nodes/{node}/gpus/{gpu}/mig/mode                             {"enabled": true|false}
POST     /v1/nodes/{node}/gpus/{gpu}/mig/gpu-instances                    {"profile": ID or name, "placement"?: start}
DELETE   /v1/nodes/{node}/gpus/{gpu}/mig/gpu-instances/{gi}               destroy a GPU instance (no compute instances)
POST     /v1/nodes/{node}/gpus/{gpu}/mig/gpu-instances/{gi}/compute-instances
                                                                          {"profile"?: index or name, "placement"?}
DELETE   /v1/nodes/{node}/gpus/{gpu}/mig/gpu-instances/{gi}/compute-instances/{ci}
=======  ===============================================================  ============================================

``profile`` of a GPU instance is the profile ID ``nvidia-smi mig -lgip`` shows (``9``) or its name (``3g.40gb``);
of a compute instance the compute profile ID ``nvidia-smi mig -lcip`` shows (``2``) or name (``1c.3g.40gb``);
without it the full-size compute instance is made (``nvidia-smi mig -cci``). A successful change answers with the
node's ``generation``: the snapshot of that generation (and every later one) shows it, which is what the NVML shim
waits for; a create also answers ``created_id`` (the new instance's id).

Refusals are 4xx with the NVML return code the real library gives in ``detail`` (``nvml``, ``nvml_code``): 404
unknown node, GPU or instance; 409 the GPU's state (MIG disabled, no room, in use, GPU lost); 422 an invalid request
(unknown profile, impossible placement).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fakehw.agent.mig import MigError, MigManager

if TYPE_CHECKING:
    from fakehw.agent.service import AgentService

Handler = Callable[["AgentService", dict[str, str], dict[str, str], Any], tuple[int, Any]]
_ID = r"(?P<{}>[0-9]{{1,3}})"


def _wrap(fn: Callable[[MigManager, dict[str, str], Any], tuple[int, dict[str, Any]]]) -> Handler:
    """Run a MIG call, answer with the node's generation after it, and turn refusals into HTTP errors."""

    def handler(svc: AgentService, p: dict[str, str], _q: dict[str, str], body: Any) -> tuple[int, Any]:
        from fakehw.agent.service import AgentError

        svc.node(p["node"])
        try:
            status, payload = fn(svc.mig, p, body)
        except MigError as exc:
            raise AgentError(exc.status, exc.message, exc.detail) from None
        return status, {**payload, "generation": svc.state(p["node"]).generation}

    return handler


def _body(body: Any, allowed: set[str], what: str) -> dict[str, Any]:
    body = {} if body is None else body
    if not isinstance(body, dict):
        raise MigError(400, "INVALID_ARGUMENT", f"expected a JSON object for the {what}")
    unknown = set(body) - allowed
    if unknown:
        raise MigError(422, "INVALID_ARGUMENT", f"unknown field(s) {', '.join(sorted(unknown))} (the {what} takes "
                       f"{', '.join(sorted(allowed))})")
    return body


def _profile(value: Any, required: bool) -> int | str | None:
    if value is None and not required:
        return None
    if isinstance(value, str) and 0 < len(value) <= 64:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 16:
        return value
    raise MigError(422, "INVALID_ARGUMENT", f"profile must be a profile ID or name, not {value!r}")


def _placement(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 64:
        return value
    raise MigError(422, "INVALID_ARGUMENT", f"placement is the start slice (a small integer), not {value!r}")


def _state(mig: MigManager, p: dict[str, str], _b: Any) -> tuple[int, dict[str, Any]]:
    return 200, mig.view(p["node"]).to_json()


def _mode(mig: MigManager, p: dict[str, str], body: Any) -> tuple[int, dict[str, Any]]:
    args = _body(body, {"enabled"}, "MIG mode")
    enabled = args.get("enabled")
    if not isinstance(enabled, bool):
        raise MigError(422, "INVALID_ARGUMENT", "enabled must be true or false")
    return 200, mig.set_mode(p["node"], p["gpu"], enabled).to_json()


def _create_gi(mig: MigManager, p: dict[str, str], body: Any) -> tuple[int, dict[str, Any]]:
    args = _body(body, {"profile", "placement"}, "GPU instance")
    gid = mig.create_gpu_instance(p["node"], p["gpu"], _profile(args.get("profile"), True),  # type: ignore[arg-type]
                                  _placement(args.get("placement")))
    gi = mig.view(p["node"]).gpus[p["gpu"]].gi(gid)
    assert gi is not None
    return 201, {"gpu_instance": gi.to_json(), "created_id": gid}


def _destroy_gi(mig: MigManager, p: dict[str, str], _b: Any) -> tuple[int, dict[str, Any]]:
    mig.destroy_gpu_instance(p["node"], p["gpu"], int(p["gi"]))
    return 200, {"destroyed": {"gpu_instance": int(p["gi"])}}


def _create_ci(mig: MigManager, p: dict[str, str], body: Any) -> tuple[int, dict[str, Any]]:
    args = _body(body, {"profile", "placement"}, "compute instance")
    gid = int(p["gi"])
    cid = mig.create_compute_instance(p["node"], p["gpu"], gid, _profile(args.get("profile"), False),
                                      _placement(args.get("placement")))
    gi = mig.view(p["node"]).gpus[p["gpu"]].gi(gid)
    ci = gi.ci(cid) if gi is not None else None
    assert ci is not None
    return 201, {"gpu_instance": gid, "compute_instance": ci.to_json(), "created_id": cid}


def _destroy_ci(mig: MigManager, p: dict[str, str], _b: Any) -> tuple[int, dict[str, Any]]:
    mig.destroy_compute_instance(p["node"], p["gpu"], int(p["gi"]), int(p["ci"]))
    return 200, {"destroyed": {"gpu_instance": int(p["gi"]), "compute_instance": int(p["ci"])}}


_GPU = r"^/v1/nodes/(?P<node>[^/]+)/gpus/(?P<gpu>[^/]+)/mig"
_GI = _GPU + "/gpu-instances/" + _ID.format("gi")

ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    ("GET", re.compile(r"^/v1/nodes/(?P<node>[^/]+)/mig$"), _wrap(_state)),
    ("POST", re.compile(_GPU + "/mode$"), _wrap(_mode)),
    ("POST", re.compile(_GPU + "/gpu-instances$"), _wrap(_create_gi)),
    ("DELETE", re.compile(_GI + "$"), _wrap(_destroy_gi)),
    ("POST", re.compile(_GI + "/compute-instances$"), _wrap(_create_ci)),
    ("DELETE", re.compile(_GI + "/compute-instances/" + _ID.format("ci") + "$"), _wrap(_destroy_ci)),
]
