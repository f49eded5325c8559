"""The reference device plugin (see :mod:`.plugin`) and its mutants (:mod:`.mutants`).

Run it with ``python -m testbed.reference.device_plugin`` on a node (NVML must be reachable: the fake
``libnvidia-ml.so.1`` through the node's environment, or the real driver).
"""
