"""A long-running monitor keeps getting handles for new MIG instances after every registry slot was claimed once.

The shim gives each GPU instance it ever saw a slot of a fixed registry (mig.c: FHW_MAX_GIS = 32 GPUs x 8 slots),
keyed by the instance's GPU and creation serial, so a destroyed instance's handle never names a new one. A process
that lives through more create/destroy cycles than the registry has slots (a monitor on a node whose jobs
repartition their GPUs all day) must still get a handle for a new instance: the slot of an instance that is gone is
reused. nvml.h: nvmlDeviceGetGpuInstances lists "GPU instances for given profile ID" that exist; each answers
nvmlGpuInstanceGetInfo.

Expected values, from outside the code: the instances are the test's input (id, placement start, serial, written
into the snapshot the way the agent records them); the profile id of 1g.10gb (19) is the published
``nvidia-smi mig -lgip`` of an H100 80GB (migtools.H100_80GB_LGIP), its placement size (1 memory slice) the MIG user
guide's ``-lgipp`` table (migtools.LGIPP: ``{0,1,2,3,4,5,6}:1``).

Reaching exhaustion fast: the node's 8 H100s each get seven fresh 1g.10gb instances per round (56 new serials a
round), written straight into the snapshot and read by one process; five rounds claim 280 > 256 slots.
"""

from __future__ import annotations

from pathlib import Path

from tests.nvml.helpers import run_python, write_node
from tests.nvml.migtools import H100_80GB_LGIP, LGIPP

ROUNDS = 6
PROFILE_1G = next(row for row in H100_80GB_LGIP if row[0] == "MIG 1g.10gb")
ONE_G_ID = PROFILE_1G[1]
ONE_G_COUNT = PROFILE_1G[2]
ONE_G_SIZE = int(LGIPP[ONE_G_ID].rsplit(":", 1)[1])

SCRIPT = """
import ctypes, dataclasses, json, sys
import pynvml as n
from pathlib import Path
from fakehw.agent.mig import GpuInstance, GpuMig, NodeMig
from fakehw.model import load_profile
from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import build_snapshot
from tests.nvml.helpers import faults_state

path, rounds, per_gpu = %r, %d, %d
path = Path(path)
system = load_profile("dgx-h100")
node = system.nodes[0]

def write(r):
    gpus = {}
    for g in node.gpus:
        gis = tuple(GpuInstance(1 + k, "1g.10gb", k, 1 + r * per_gpu + k) for k in range(per_gpu))
        gpus[g.name] = GpuMig(g.name, True, True, gis, 1 + (r + 1) * per_gpu)
    state, events = faults_state(node, [], system.seed, generation=r + 2)
    state = dataclasses.replace(state, mig=NodeMig(node.name, gpus))
    write_snapshot(path, build_snapshot(system, node, state, events).to_bytes())

write(0)
n.nvmlInit()
out = []
for r in range(rounds):
    if r:
        write(r)
    seen = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        infos = []
        handles = (n.c_nvmlGpuInstance_t * 8)()
        count = ctypes.c_uint(0)
        n.nvmlDeviceGetGpuInstances(h, %d, handles, ctypes.byref(count))
        for gi in handles[:count.value]:
            info = n.nvmlGpuInstanceGetInfo(gi)
            infos.append([info.id, info.profileId, info.placement.start, info.placement.size])
        seen.append(sorted(infos))
    out.append(seen)
n.nvmlShutdown()
print(json.dumps(out))
"""


def test_new_instances_get_handles_after_every_registry_slot_was_claimed(tmp_path: Path) -> None:
    path = tmp_path / "snap.bin"
    write_node(path, "dgx-h100")
    rounds = run_python(SCRIPT % (str(path), ROUNDS, ONE_G_COUNT, ONE_G_ID), path, timeout=300)
    expected = [[gid, ONE_G_ID, gid - 1, ONE_G_SIZE] for gid in range(1, ONE_G_COUNT + 1)]
    for r, gpus in enumerate(rounds):
        assert len(gpus) == 8, r
        for i, infos in enumerate(gpus):
            assert infos == expected, (r, i)
