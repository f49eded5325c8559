"""Kubernetes clusters of fake nodes: kind configs and the manifests both Kubernetes backends apply."""
