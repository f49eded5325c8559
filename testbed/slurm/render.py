"""slurm.conf and gres.conf rendered from the model, as Slurm's NVML autodetection would fill them in.

Debian's slurm-wlm is built without NVML (``gpu_generic`` only), so nothing on the node detects GPUs: the testbed
writes what ``AutoDetect=nvml`` would have found, per GPU:

- ``Type``: the GPU model in lower case (``h100``, ``gb200``, ``l4``): the second word of the product name;
- ``File``: the GPU's device node. Nodes of the local backend share one host, so the path points into the node's
  fake root (``<node dir>/root/dev/nvidia<minor>``, real character devices 195:minor when the agent runs as root);
  slurmd stats it and records its major:minor, as it would ``/dev/nvidia<minor>``. No mount namespace is needed,
  and every slurmd sees its own node's devices.
- ``Cores``: Slurm core indices of the CPUs of the GPU's NUMA node (CPU affinity);
- ``Links``: the GPU's row of the NVLink bond matrix (``-1`` for itself, ``0`` where no NVLink joins them), which
  cons_tres uses to prefer GPUs joined by more links.

GPUs the health check has drained are left out of gres.conf and of the node's ``Gres=`` count (Slurm has no
per-GPU drain: a GPU it is not told about gets no job).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fakehw.model.system import Gpu, Node, System
from fakehw.model.units import format_cpulist


def gpu_type(gpu: Gpu) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100``; ``NVIDIA GB200`` -> ``gb200``."""
    words = gpu.sku.name.split()
    word = words[1] if len(words) > 1 and words[0].upper() == "NVIDIA" else words[0]
    return word.lower().replace("-", "_")


def core_ids(node: Node, cpus: Iterable[int]) -> list[int]:
    """Slurm core indices (socket-major, threads folded) of Linux CPU ids."""
    return sorted({c % node.cpu.cores for c in cpus})


@dataclass(frozen=True)
class GresLine:
    node: str
    type: str
    file: str
    minor: int
    cores: tuple[int, ...]
    links: tuple[int, ...]

    def render(self) -> str:
        out = f"NodeName={self.node} Name=gpu Type={self.type} File={self.file}"
        if self.cores:
            out += f" Cores={format_cpulist(self.cores)}"
        if any(x > 0 for x in self.links):
            out += " Links=" + ",".join(str(x) for x in self.links)
        return out


@dataclass(frozen=True)
class NodeLayout:
    """Where one fake node's daemons live and what it declares."""

    name: str
    port: int
    dev_dir: Path
    """Directory holding the node's nvidia<minor> device nodes."""


@dataclass(frozen=True)
class ClusterLayout:
    name: str
    root: Path
    ctld_port: int
    munge_socket: Path
    nodes: tuple[NodeLayout, ...]
    task_prolog: Path | None = None
    drained: Mapping[str, frozenset[int]] = field(default_factory=dict)
    """Node -> GPU minors the health check took out."""

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def spool_dir(self) -> Path:
        return self.root / "spool"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"


def gres_lines(system: System, node: Node, dev_dir: Path, drained: frozenset[int] = frozenset()) -> list[GresLine]:
    topo = system.topology.nodes[node.name]
    out = []
    keep = [g for g in node.gpus if g.minor not in drained]
    for g in keep:
        links = tuple(-1 if o.index == g.index else topo.nvlinks[g.index][o.index] for o in keep)
        out.append(GresLine(node.name, gpu_type(g), str(dev_dir / f"nvidia{g.minor}"), g.minor,
                            tuple(core_ids(node, topo.cpu_affinity[g.index])), links))
    return out


def gres_conf(system: System, layout: ClusterLayout) -> str:
    lines = ["# Rendered by fakehw (testbed.slurm) from the hardware model: what AutoDetect=nvml would find.",
             "# One line per GPU: Type from the product name, File in the node's fake root, Cores = CPU affinity,",
             "# Links = the NVLink bond matrix row (-1 = itself)."]
    for n in layout.nodes:
        node = system.node(n.name)
        if node is None or not node.gpus:
            continue
        lines += [g.render() for g in gres_lines(system, node, n.dev_dir, layout.drained.get(n.name, frozenset()))]
    return "\n".join(lines) + "\n"


def node_gres(system: System, node: Node, drained: frozenset[int]) -> str:
    counts: dict[str, int] = {}
    for g in node.gpus:
        if g.minor not in drained:
            counts[gpu_type(g)] = counts.get(gpu_type(g), 0) + 1
    return ",".join(f"gpu:{t}:{c}" for t, c in sorted(counts.items()))


def slurm_conf(system: System, layout: ClusterLayout) -> str:
    r = layout
    lines = [
        "# Rendered by fakehw (testbed.slurm) from the hardware model. Every slurmd runs on this host with its own",
        "# port (-N <node>), so node addresses are loopback; CPU layout comes from the model (config_overrides).",
        f"ClusterName={r.name}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={r.ctld_port}",
        "AuthType=auth/munge",
        f"AuthInfo=socket={r.munge_socket}",
        "CredType=cred/munge",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={r.state_dir}",
        f"SlurmdSpoolDir={r.spool_dir}/%n",
        f"SlurmctldPidFile={r.run_dir}/slurmctld.pid",
        f"SlurmdPidFile={r.run_dir}/slurmd-%n.pid",
        f"SlurmctldLogFile={r.log_dir}/slurmctld.log",
        f"SlurmdLogFile={r.log_dir}/slurmd-%n.log",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "MpiDefault=none",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_min_interval=0",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "MessageTimeout=10",
        "KillWait=2",
        "InactiveLimit=0",
        "MinJobAge=30",
    ]
    if r.task_prolog is not None:
        lines.append(f"TaskProlog={r.task_prolog}")
    for n in r.nodes:
        node = system.node(n.name)
        if node is None:
            continue
        cpu = node.cpu
        memory_mib = sum(x.memory for x in node.numa if x.kind in ("dram", "lpddr")) // 2**20
        gres = node_gres(system, node, r.drained.get(n.name, frozenset()))
        lines.append(
            f"NodeName={node.name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={n.port} CPUs={cpu.logical_cpus} "
            f"Boards=1 Sockets={cpu.sockets} CoresPerSocket={cpu.cores_per_socket} "
            f"ThreadsPerCore={cpu.threads_per_core} "
            f"RealMemory={max(1, memory_mib)}" + (f" Gres={gres}" if gres else "") + " State=UNKNOWN")
    lines.append("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO")
    return "\n".join(lines) + "\n"


def task_prolog(system: System, layout: ClusterLayout, node_env: Mapping[str, Mapping[str, str]]) -> str:
    """A TaskProlog that gives each job its node's fake hardware, showing it only the GPUs Slurm allocated.

    On a real node the job would see its GPUs through the device cgroup; here the fake NVML is told which ones
    (``FAKEHW_VISIBLE_DEVICES``): Slurm's GPU indices (CUDA_VISIBLE_DEVICES, positions in gres.conf) are mapped to
    the device minors gres.conf lists for the node.
    """
    out = ["#!/bin/sh", "# Rendered by fakehw (testbed.slurm): TaskProlog lines 'export NAME=value' reach the task.",
           'case "$SLURMD_NODENAME" in']
    for n in layout.nodes:
        node = system.node(n.name)
        if node is None:
            continue
        drained = layout.drained.get(n.name, frozenset())
        minors = " ".join(str(g.minor) for g in node.gpus if g.minor not in drained)
        out.append(f"  {n.name})")
        out.append(f'    minors="{minors}"')
        for key, value in sorted(node_env.get(n.name, {}).items()):
            out.append(f"    echo 'export {key}={value}'")
        out.append("    ;;")
    out += [
        "  *) exit 0 ;;",
        "esac",
        'idx="${CUDA_VISIBLE_DEVICES:-}"',
        'if [ -z "$idx" ] || [ "$idx" = "NoDevFiles" ]; then echo "export FAKEHW_VISIBLE_DEVICES=none"; exit 0; fi',
        'visible=""',
        'for i in $(echo "$idx" | tr "," " "); do',
        '  m=$(echo $minors | cut -d" " -f$((i + 1)))',
        '  visible="${visible:+$visible,}$m"',
        "done",
        'echo "export FAKEHW_VISIBLE_DEVICES=$visible"',
    ]
    return "\n".join(out) + "\n"
