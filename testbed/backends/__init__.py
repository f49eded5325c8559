"""Testbed backends: local (default), and later docker and kubernetes, behind one interface."""

from __future__ import annotations

from testbed.backends.base import Backend, BackendError, BackendInputError, NodeInfo, UpRequest

BACKENDS = ("local",)


def get_backend(name: str) -> Backend:
    if name == "local":
        from testbed.backends.local import LocalBackend

        return LocalBackend()
    raise BackendInputError(f"unknown backend {name!r} (backends: {', '.join(BACKENDS)})")


__all__ = ["BACKENDS", "Backend", "BackendError", "BackendInputError", "NodeInfo", "UpRequest", "get_backend"]
