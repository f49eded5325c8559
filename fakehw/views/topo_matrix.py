"""The ``nvidia-smi topo -m`` matrix of a node, computed from the model.

The layout follows nvidia-smi 535 byte for byte: tab-separated cells, `` X `` on the diagonal, ``NV#`` where
GPUs share NVLinks and a PCIe level (PIX/PXB/PHB/NODE/SYS) elsewhere, then CPU affinity, NUMA affinity and GPU
NUMA ID columns, a legend and a NIC legend. tests/nvml/test_smi.py compares it with what the real nvidia-smi
prints against the fake NVML, so the two must agree to the byte.
"""

from __future__ import annotations

from fakehw.model.system import Node
from fakehw.model.topology import NodeTopology
from fakehw.model.units import format_cpulist

UNDERLINE_ON, UNDERLINE_OFF = "\x1b[4m", "\x1b[0m"

LEGEND = """\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def gpu_cell(topo: NodeTopology, a: int, b: int) -> str:
    if a == b:
        return " X "
    bonded = topo.nvlinks[a][b]
    return f"NV{bonded}" if bonded else topo.levels[a][b].short


def matrix_rows(topo: NodeTopology) -> list[list[str]]:
    """The matrix as cells (header row first), without affinity columns: handy for comparisons."""
    n, m = len(topo.gpus), len(topo.nics)
    header = [""] + [f"GPU{i}" for i in range(n)] + [f"NIC{k}" for k in range(m)]
    rows = [header]
    for a in range(n):
        rows.append([f"GPU{a}"] + [gpu_cell(topo, a, b) for b in range(n)]
                    + [topo.gpu_nic_levels[a][k].short for k in range(m)])
    for k in range(m):
        nic_row = [topo.gpu_nic_levels[a][k].short for a in range(n)]
        nic_row += [" X " if k == j else topo.nic_levels[k][j].short for j in range(m)]
        rows.append([f"NIC{k}", *nic_row])
    return rows


def format_topo_matrix(node: Node, topo: NodeTopology, underline: bool = True) -> str:
    """The matrix exactly as the real nvidia-smi 535 prints it (checked against the binary in tests/nvml).

    Like nvidia-smi, the header row is underlined with ANSI escapes even when the output is not a terminal
    (``underline=False`` leaves them out), the GPU NUMA ID column follows an empty cell, NIC rows carry four
    empty affinity cells, and the NIC legend ends with a blank line.
    """
    n = len(topo.gpus)
    rows = matrix_rows(topo)
    header = [*rows[0][1:], "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    on, off = (UNDERLINE_ON, UNDERLINE_OFF) if underline else ("", "")
    lines = ["\t" + on + "\t".join(header) + off]
    for a in range(n):
        gpu_numa = topo.gpu_numa_id[a]
        lines.append("\t".join([
            *rows[1 + a],
            format_cpulist(topo.cpu_affinity[a]) or "N/A",
            str(topo.numa_affinity[a]),
            "",
            "N/A" if gpu_numa is None else str(gpu_numa),
        ]))
    lines += ["\t".join([*row, "", "", "", ""]) for row in rows[1 + n:]]
    out = "\n".join(lines) + "\n\n" + LEGEND
    if topo.nics:
        out += "\nNIC Legend:\n\n" + "".join(f"  NIC{k}: {name}\n" for k, name in enumerate(topo.nics)) + "\n"
    return out
