"""The kubelet side of the Kubernetes device plugin API v1beta1, for certifying device plugins without a cluster.

- :mod:`.api`: the API as typed Python over real gRPC (messages generated from ``proto/deviceplugin.proto``);
- :mod:`.kubelet`: the harness (Registration server, ListAndWatch recording, allocation like the kubelet's device
  manager, checkpoint, restart simulation, deadlines everywhere);
- :mod:`.launcher`: starting the plugin under test as a command or inside a node container;
- :mod:`.checks` and :mod:`.exposure`: pure checks of what a plugin sends and what a container would get;
- :mod:`.nvmlprobe`: what NVML enumerates inside a container made from an Allocate answer.
"""
