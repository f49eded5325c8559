"""Testbed backends: local (default), docker, kind and kubeconfig, behind one interface."""

from __future__ import annotations

from testbed.backends.base import Backend, BackendError, BackendInputError, NodeInfo, UpRequest

BACKENDS = ("local", "docker", "kind", "kubeconfig")


def get_backend(name: str) -> Backend:
    if name == "local":
        from testbed.backends.local import LocalBackend

        return LocalBackend()
    if name == "docker":
        from testbed.backends.docker import DockerBackend

        return DockerBackend()
    if name == "kind":
        from testbed.backends.kubernetes import KindBackend

        return KindBackend()
    if name == "kubeconfig":
        from testbed.backends.kubernetes import KubeconfigBackend

        return KubeconfigBackend()
    raise BackendInputError(f"unknown backend {name!r} (backends: {', '.join(BACKENDS)})")


__all__ = ["BACKENDS", "Backend", "BackendError", "BackendInputError", "NodeInfo", "UpRequest", "get_backend"]
