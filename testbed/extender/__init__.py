"""The kube-scheduler side of the HTTP extender protocol, and the cluster API extenders read (see docs/scheduler.md).

- :mod:`testbed.extender.protocol`: configuration stanza, requests, Go-style decoding and checks of answers;
- :mod:`testbed.extender.scheduler`: kube-scheduler's cycle (in-tree filter, extenders, preemption, scores, bind);
- :mod:`testbed.extender.apiserver`: the store of Nodes and Pods and a minimal Kubernetes API (list, watch, binding);
- :mod:`testbed.extender.harness`: all of it over a testbed cluster; :mod:`testbed.extender.process`: the
  extender under test (reference, command or URL) and a delaying proxy for chaos.
"""
