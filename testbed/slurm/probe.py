"""Run inside a job (``srun ... python -m testbed.slurm.probe``): print what the job sees, as one JSON line.

The environment Slurm gave the job (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS, SLURM_JOB_GPUS, the node name) and
what NVML shows it (index, minor number and UUID of every GPU), through whatever ``libnvidia-ml.so.1`` the job
loads: on the testbed, the node's fake NVML.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

ENV = ("SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_STEP_ID", "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS",
       "GPU_DEVICE_ORDINAL", "FAKEHW_NODE", "FAKEHW_VISIBLE_DEVICES")


def nvml_view() -> dict[str, Any]:
    try:
        import pynvml
    except ImportError as exc:
        return {"error": f"pynvml: {exc}"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"error": f"nvmlInit: {exc}"}
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            gpus.append({"index": i, "minor": pynvml.nvmlDeviceGetMinorNumber(h),
                         "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid})
        return {"gpus": gpus}
    finally:
        pynvml.nvmlShutdown()


def allocation() -> str | None:
    """``scontrol show job <own id> -d -o`` from inside the job (while it runs, the GRES IDX is listed)."""
    job = os.environ.get("SLURM_JOB_ID")
    scontrol = shutil.which("scontrol")
    if not job or scontrol is None:
        return None
    proc = subprocess.run([scontrol, "show", "job", job, "-d", "-o"], capture_output=True, text=True, timeout=30,
                          check=False)
    return proc.stdout.strip() or proc.stderr.strip()


def main() -> int:
    print(json.dumps({"env": {k: os.environ.get(k) for k in ENV}, "nvml": nvml_view(), "job": allocation()}),
          flush=True)
    if len(sys.argv) > 1:  # keep the GPUs a while (concurrency and chaos checks)
        time.sleep(float(sys.argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
