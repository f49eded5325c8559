"""MIG test helpers: published ``nvidia-smi mig`` outputs, a parser for them, and a node with its agent.

The published tables are transcribed from real hardware (sources beside each); tests compare what the real
``nvidia-smi`` prints against the fake with them, column by column, so the expected values never come from the
catalogue the fake is built from.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fakehw.nvml.smi import RealNvidia, run_nvidia_smi
from testbed.api import Testbed
from testbed.environment import merged_environment


@dataclass(frozen=True)
class LgipRow:
    """One profile of ``nvidia-smi mig -lgip``: both lines of its box."""

    gpu: int
    name: str
    id: int
    free: int
    total: int
    memory_gib: str
    p2p: str
    sm: int
    dec: int
    enc: int
    ce: int
    jpeg: int
    ofa: int

    def published(self) -> tuple[str, int, int, str, int, int, int, int, int, int]:
        """The columns that describe the profile (not the GPU's current state)."""
        return (self.name, self.id, self.total, self.memory_gib, self.sm, self.dec, self.enc, self.ce, self.jpeg,
                self.ofa)


# name, ID, instances total, memory GiB, SM, DEC, ENC, CE, JPEG, OFA.
H100_80GB_LGIP = [
    # `nvidia-smi mig -lgip` of an H100 80GB HBM3 (jbarrow.ai/field_notes/nvidia-mig), all seven profiles.
    ("MIG 1g.10gb", 19, 7, "9.75", 16, 1, 0, 1, 1, 0),
    ("MIG 1g.10gb+me", 20, 1, "9.75", 16, 1, 0, 1, 1, 1),
    ("MIG 1g.20gb", 15, 4, "19.62", 26, 1, 0, 1, 1, 0),
    ("MIG 2g.20gb", 14, 3, "19.62", 32, 2, 0, 2, 2, 0),
    ("MIG 3g.40gb", 9, 2, "39.50", 60, 3, 0, 3, 3, 0),
    ("MIG 4g.40gb", 5, 1, "39.50", 64, 4, 0, 4, 4, 0),
    ("MIG 7g.80gb", 0, 1, "79.25", 132, 7, 0, 8, 7, 1),
]
A100_80GB_LGIP = [
    # `nvidia-smi mig -lgip` of an A100-SXM4-80GB (NVIDIA/mig-parted#97): the rows that output shows.
    ("MIG 1g.10gb", 19, 7, "9.50", 14, 0, 0, 1, 0, 0),
    ("MIG 1g.10gb+me", 20, 1, "9.50", 14, 1, 0, 1, 1, 1),
    ("MIG 2g.20gb", 14, 3, "19.50", 28, 1, 0, 2, 0, 0),
    ("MIG 3g.40gb", 9, 2, "39.25", 42, 2, 0, 3, 0, 0),
]
# `nvidia-smi mig -lgipp` (NVIDIA MIG user guide, A100 and H100 alike).
LGIPP = {19: "{0,1,2,3,4,5,6}:1", 20: "{0,1,2,3,4,5,6}:1", 15: "{0,2,4,6}:2", 14: "{0,2,4}:2", 9: "{0,4}:4",
         5: "{0}:4", 0: "{0}:8"}

_ROW1 = re.compile(r"^\|\s+(\d+)\s+(MIG \S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|$")
_ROW2 = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+\|$")


def parse_lgip(text: str) -> list[LgipRow]:
    lines = text.splitlines()
    rows = []
    for i, line in enumerate(lines):
        m = _ROW1.match(line)
        if m is None:
            continue
        n = _ROW2.match(lines[i + 1])
        assert n is not None, f"no second line after {line!r}"
        g = m.groups()
        rows.append(LgipRow(int(g[0]), g[1], int(g[2]), int(g[3]), int(g[4]), g[5], g[6], int(g[7]), int(g[8]),
                            int(g[9]), int(n[1]), int(n[2]), int(n[3])))
    return rows


_LGI = re.compile(r"^\|\s+(\d+)\s+(MIG \S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s+\|$")


def parse_lgi(text: str) -> dict[int, tuple[str, int, int, int]]:
    """``-lgi``: GPU instance id -> (name, profile ID, placement start, size)."""
    out = {}
    for line in text.splitlines():
        m = _LGI.match(line)
        if m:
            out[int(m[4])] = (m[2], int(m[3]), int(m[5]), int(m[6]))
    return out


_LCI = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(MIG \S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s+\|$")


def parse_lci(text: str) -> dict[tuple[int, int], tuple[str, int, int, int]]:
    """``-lci``: (GPU instance id, compute instance id) -> (name, profile ID, placement start, size)."""
    out = {}
    for line in text.splitlines():
        m = _LCI.match(line)
        if m:
            out[(int(m[2]), int(m[5]))] = (m[3], int(m[4]), int(m[6]), int(m[7]))
    return out


@dataclass
class MigNode:
    """A node of a running testbed (agent included) and the real nvidia-smi pointed at it."""

    tb: Testbed
    name: str
    real: RealNvidia

    @property
    def env(self) -> dict[str, str]:
        return merged_environment(self.tb.node(self.name).env)

    @property
    def snapshot(self) -> Path:
        return Path(self.env["FAKEHW_NVML_SNAPSHOT"])

    @property
    def root(self) -> Path:
        return Path(self.env["FAKEHW_ROOT"])

    def smi(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = run_nvidia_smi(list(args), self.snapshot, self.real, env=self.env, sysfs=False)
        assert "Mismatch" not in proc.stdout + proc.stderr
        return proc

    def ok(self, *args: str) -> str:
        proc = self.smi(*args)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"nvidia-smi {' '.join(args)} exited {proc.returncode}: {out}"
        for bad in ("Function Not Found", "Unknown Error", "Not Supported", "Invalid Argument"):
            assert bad not in out, f"{bad!r} in nvidia-smi {' '.join(args)}:\n{out}"
        return proc.stdout
