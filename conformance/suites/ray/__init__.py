"""Ray suite: a real Ray head node per fake node, GPU autodetection through the node's fake NVML."""
