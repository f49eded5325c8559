"""Where tests put big throwaway trees (rendered sysfs roots, agent node directories)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def scratch_base() -> str | None:
    """tmpfs when it has room, else None (the default temp dir).

    Rendered trees are tens of thousands of small files and hard links cost an inode each, so tmpfs is much
    faster, but only when it has both inodes and space to spare.
    """
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    roomy = st.f_favail > 1_000_000 and st.f_bavail * st.f_frsize > 2**30
    return "/dev/shm" if roomy and os.access("/dev/shm", os.W_OK) else None


def cluster_scratch_base() -> str | None:
    """:func:`scratch_base` when it also lets programs run and device nodes work (Slurm's prologs, a node's device
    files): for any cluster, including those whose components run in a node view (the device-plugin and Ray
    suites: the view binds what they use under ``/dev/shm`` again, :func:`testbed.nodeview.kept_paths`)."""
    base = scratch_base()
    if base is None or os.statvfs(base).f_flag & (os.ST_NOEXEC | os.ST_NODEV):
        return None
    return base


@dataclass(frozen=True)
class ClusterScratch:
    """Where a test file's clusters go, for the test's own :func:`testbed.cluster.scratch_dir` calls (``base``)
    and for a suite it runs in a child pytest (``env``, which sets ``$FAKEHW_SCRATCH_DIR`` to the same place)."""

    base: str | None
    env: dict[str, str] = field(default_factory=dict)


def cluster_scratch() -> ClusterScratch:
    """:func:`cluster_scratch_base`, with the environment that hands it to a child (empty when there is none:
    the child then keeps the caller's ``$FAKEHW_SCRATCH_DIR`` or ``/tmp``)."""
    base = cluster_scratch_base()
    return ClusterScratch(base, {"FAKEHW_SCRATCH_DIR": base} if base else {})
