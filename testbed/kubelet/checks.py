"""Pure checks of what a plugin sends, by the rules the kubelet applies (or should apply).

Each check returns :class:`Problem` values instead of raising, so the harness can record every problem of a
response (a malformed device list usually has several) and a suite can judge each against its own requirement.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from testbed.kubelet.api import HEALTH_VALUES, MAX_DEVICE_ID_LENGTH, VERSION, pb

DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN_RE = re.compile(rf"^{DNS_LABEL}(\.{DNS_LABEL})*$")
NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
MAX_NAME = 63
MAX_DOMAIN = 253


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a response. ``check`` is a short stable key (``device-id-too-long``)."""

    check: str
    message: str

    def __str__(self) -> str:
        return self.message


def resource_name_problems(name: str) -> list[Problem]:
    """Kubernetes extended resource names: ``<domain>/<name>`` outside ``kubernetes.io``, not ``requests.*``."""
    bad = "resource-name"
    domain, sep, short = name.partition("/")
    if not sep:
        return [Problem(bad, f"resource name {name!r} has no domain prefix (extended resources look like "
                             "'vendor.example/gpu')")]
    out = []
    if len(domain) > MAX_DOMAIN or not DNS_SUBDOMAIN_RE.match(domain):
        out.append(Problem(bad, f"resource name {name!r}: domain {domain!r} is not a DNS subdomain"))
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        out.append(Problem(bad, f"resource name {name!r}: the kubernetes.io domain is reserved for native resources"))
    if domain.startswith("requests."):
        out.append(Problem(bad, f"resource name {name!r}: the 'requests.' prefix is reserved for quota"))
    if len(short) > MAX_NAME or not NAME_RE.match(short):
        out.append(Problem(bad, f"resource name {name!r}: {short!r} is not a valid name (1-63 characters, "
                                "alphanumerics and '-', '_', '.', starting and ending alphanumeric)"))
    return out


def registration_problems(request: pb.RegisterRequest) -> list[Problem]:
    out = []
    if request.version != VERSION:
        out.append(Problem("version", f"registered with API version {request.version!r}; the kubelet supports "
                                      f"{VERSION!r} only"))
    out += resource_name_problems(request.resource_name)
    endpoint = request.endpoint
    if not endpoint or "/" in endpoint or endpoint in (".", ".."):
        out.append(Problem("endpoint", f"endpoint {endpoint!r} is not a socket file name in the plugin directory"))
    return out


def device_problems(devices: Sequence[pb.Device]) -> list[Problem]:
    """IDs non-empty, at most 63 characters, unique; health Healthy or Unhealthy; NUMA node IDs not negative."""
    out = []
    counts = Counter(d.ID for d in devices)
    for dev_id, n in counts.items():
        if n > 1:
            out.append(Problem("device-id-duplicate", f"device ID {dev_id!r} is listed {n} times"))
    for d in devices:
        if not d.ID:
            out.append(Problem("device-id-empty", "a device has an empty ID"))
        elif len(d.ID) > MAX_DEVICE_ID_LENGTH:
            out.append(Problem("device-id-too-long", f"device ID {d.ID!r} has {len(d.ID)} characters (at most "
                                                     f"{MAX_DEVICE_ID_LENGTH})"))
        if d.health not in HEALTH_VALUES:
            out.append(Problem("device-health", f"device {d.ID!r} has health {d.health!r} (must be one of "
                                                f"{', '.join(HEALTH_VALUES)})"))
        for node in d.topology.nodes:
            if node.ID < 0:
                out.append(Problem("device-numa", f"device {d.ID!r} names NUMA node {node.ID}"))
    return out


def preferred_problems(request: pb.PreferredAllocationRequest,
                       response: pb.PreferredAllocationResponse) -> list[Problem]:
    """Shape of a preferred allocation: one answer per container, exact size, from the available set, no repeats.

    Whether must-include devices are honoured is judged separately (:func:`must_include_problems`).
    """
    bad = "preferred-allocation"
    if len(response.container_responses) != len(request.container_requests):
        return [Problem(bad, f"{len(request.container_requests)} container requests got "
                             f"{len(response.container_responses)} answers")]
    out = []
    for i, (req, resp) in enumerate(zip(request.container_requests, response.container_responses, strict=True)):
        ids = list(resp.deviceIDs)
        if len(ids) != req.allocation_size:
            out.append(Problem(bad, f"container {i}: asked for {req.allocation_size} devices, got {len(ids)}: {ids}"))
        dups = sorted(d for d, n in Counter(ids).items() if n > 1)
        if dups:
            out.append(Problem(bad, f"container {i}: devices named twice: {dups}"))
        outside = sorted(set(ids) - set(req.available_deviceIDs))
        if outside:
            out.append(Problem(bad, f"container {i}: {outside} are not among the available devices"))
    return out


def must_include_problems(request: pb.PreferredAllocationRequest,
                          response: pb.PreferredAllocationResponse) -> list[Problem]:
    out = []
    for i, (req, resp) in enumerate(zip(request.container_requests, response.container_responses, strict=False)):
        missing = sorted(set(req.must_include_deviceIDs) - set(resp.deviceIDs))
        if missing:
            out.append(Problem("must-include", f"container {i}: must-include devices {missing} are missing from "
                                               f"the answer {list(resp.deviceIDs)}"))
    return out


def allocate_problems(request: pb.AllocateRequest, response: pb.AllocateResponse) -> list[Problem]:
    if len(response.container_responses) != len(request.container_requests):
        return [Problem("allocate-responses", f"{len(request.container_requests)} container requests got "
                                              f"{len(response.container_responses)} container responses")]
    return []


def summarize(problems: Iterable[Problem]) -> str:
    return "; ".join(p.message for p in problems)
