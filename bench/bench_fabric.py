"""Emulated fabric: build and teardown time for 4, 16 and 64 DGX H100 nodes (rail-optimised: 8 leaves, 8 NICs per
node); frames per second through it - scapy building and sending each frame against a raw AF_PACKET socket
sending prebuilt bytes, in the same run - and answered RoCE probes per second (request -> responder -> ACK).

Needs root (network namespaces); prints why and exits 0 otherwise. Figures only, nothing asserted.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import row


def main() -> int:
    from fakehw.fabric.emulate import EmulatedFabric, root_problem

    problem = root_problem()
    if problem:
        print(f"bench_fabric: skipped: {problem}")
        return 0
    from fakehw.fabric.generate import rail_optimised, to_yaml
    from fakehw.fabric.lint import lint
    from fakehw.fabric.loader import load_fabric_spec
    from fakehw.fabric.model import NicRef, resolve

    print("fabric build/teardown (dgx-h100 rail-optimised; namespaces per node and per leaf, one veth per NIC)")
    for nodes, repeat in ((4, 3), (16, 3), (64, 2)):
        text = to_yaml(rail_optimised("dgx-h100-roce", nodes, name=f"bench-{nodes}"))
        start = time.perf_counter()
        model = resolve(load_fabric_spec(f"bench-{nodes}.yaml", text))
        report = lint(model)
        lint_s = time.perf_counter() - start
        builds, downs = [], []
        for _ in range(repeat):
            fabric = EmulatedFabric.build(model)
            builds.append(fabric.build_seconds)
            down = fabric.teardown()
            downs.append(down.seconds)
            if down.leftovers:
                print(f"  LEFTOVERS: {down.leftovers}")
        row(f"{nodes} nodes: {len(fabric.plan.namespaces)} netns, {len(fabric.plan.links)} links",
            f"build {statistics.median(builds):6.2f} s", f"teardown {statistics.median(downs):5.2f} s*",
            f"(load+lint {lint_s:.2f} s, {len(report.paths)} paths)")

    print("  * until every process, socket and mount of the run is gone; the kernel frees the namespaces after")
    from fakehw.fabric.model import load_fabric
    from fakehw.fabric.traffic import Prober, start_responder

    print("traffic through the emulated fabric (dgx-h100-0/mlx5_0 -> leaf-rail0 -> dgx-h100-1/mlx5_0)")
    model = load_fabric("dgx-h100-rail")
    a, b = NicRef("dgx-h100-0", "mlx5_0"), NicRef("dgx-h100-1", "mlx5_0")
    with EmulatedFabric.build(model) as fabric:
        prober = Prober(fabric)
        capture = fabric.socket(b)
        count = 3000

        def delivered(wanted: set[bytes]) -> int:
            n = 0
            while (r := capture.recv(0.3)) is not None:
                n += r.frame in wanted
            return n

        # scapy: build every frame and send it through scapy's own L2 socket (opened inside the node)
        from scapy.arch.linux import L2Socket

        na, nb = fabric.plan.nics[a], fabric.plan.nics[b]
        from fakehw.fabric.layers import roce_frame

        assert na.ip is not None and nb.ip is not None
        scapy_sock = fabric.node_netns("dgx-h100-0").call(lambda: L2Socket(iface=na.ifname))
        capture.drain()
        pkts = []
        start = time.perf_counter()
        for psn in range(count):
            pkt = roce_frame(src_mac=na.mac, dst_mac=nb.mac, src_ip=na.ip, dst_ip=nb.ip, opcode=4, dqpn=0x77,
                             psn=psn, payload=bytes(64), vlan=na.vlan, pcp=3, dscp=26, ecn=2)
            scapy_sock.send(pkt)
            pkts.append(pkt)
        scapy_s = time.perf_counter() - start
        sent = {bytes(p) for p in pkts}
        scapy_ok = delivered(sent)
        scapy_sock.close()
        row(f"scapy build+send, {count} x 64 B SEND", f"{count / scapy_s:9.0f} frames/s", f"delivered {scapy_ok}")

        # raw socket baseline: the same frames, prebuilt, through an AF_PACKET socket
        frames = list(sent)
        sock = prober.sock(a)
        capture.drain()
        start = time.perf_counter()
        for f in frames:
            sock.send(f)
        raw_s = time.perf_counter() - start
        raw_ok = delivered(set(frames))
        row(f"raw AF_PACKET send, same {len(frames)} frames", f"{len(frames) / raw_s:9.0f} frames/s",
            f"delivered {raw_ok}  ({(len(frames) / raw_s) / (count / scapy_s):.0f}x scapy)")

        # answered probes: scapy-built request, responder process, ACK matched by PSN
        start_responder(fabric, [a, b])
        pairs = [(a, b)] * 100
        prober.probe_pairs(pairs)  # warm up
        start = time.perf_counter()
        answered = 0
        for _ in range(10):
            answered += sum(r.ok for r in prober.probe_pairs(pairs, retries=0))
        probe_s = time.perf_counter() - start
        row("RoCE probes (SEND+ACKREQ -> ACK), batches of 100", f"{answered / probe_s:9.0f} probes/s",
            f"answered {answered}/1000")
        # the responder's own round-trip capacity: the same requests prebuilt (by scapy, untimed), sent raw
        built = [prober.request(a, b) for _ in range(2000)]
        pending = {}
        start = time.perf_counter()
        for psn, frame in built:
            pending[(a, psn)] = (b, time.monotonic())
            sock.send(frame)
        got = prober._collect(pending, 5.0)
        rt_s = time.perf_counter() - start
        row("RoCE round trips, prebuilt requests sent raw", f"{len(got) / rt_s:9.0f} probes/s",
            f"answered {len(got)}/{len(built)}")
        start = time.perf_counter()
        m = prober.measure_payload(a, b)
        row("largest-payload measurement, both directions", f"{time.perf_counter() - start:9.2f} s",
            f"{m.largest} B in {m.probes} probes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
