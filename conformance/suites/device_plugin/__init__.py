"""The device plugin suite: certifies a Kubernetes device plugin for NVIDIA GPUs against a harness kubelet."""
