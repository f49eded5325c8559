"""Scheduler extender suite: the harness plays kube-scheduler over the HTTP extender protocol."""
