"""Ray on the fake nodes: a head node started with a node's fake NVML (see probe.py and docs/scheduler.md)."""
