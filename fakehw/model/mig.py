"""MIG geometry of a GPU: where GPU and compute instances may go, which ids they get, what is left.

These are facts of the hardware and its driver, the same for every process that asks, so they live next to the
catalogue and both the profile loader (boot instances) and the agent (instances created at run time) use them.

Sources (public):

- Placements: the NVIDIA MIG user guide lists each profile's possible placements (``nvidia-smi mig -lgipp``) on
  A100/H100-class GPUs: ``1g {0..6}:1``, ``1g.20gb {0,2,4,6}:2``, ``2g {0,2,4}:2``, ``3g {0,4}:4``, ``4g {0}:4``,
  ``7g {0}:8``. They follow one rule, used here: a placement is aligned to its size in memory slices (8 on these
  GPUs) and the instance's compute slices (at most 7) start at the same slice and must fit.
- GPU instance ids: the driver numbers the 15 slice-aligned blocks of the 8 memory slices as a binary tree (id 0
  the whole GPU, 1-2 the halves, 3-6 the quarters, 7-14 the eighths; ``/proc/driver/nvidia-caps/mig-minors``
  lists exactly gi0..gi14). Real outputs fix the orientation: creating seven 1g instances on a fresh A100 gave
  ids 9, 7, 8, 11, 12, 13, 14 (never 10: the eighth at slice 7 has no compute slice), and two 3g instances gave id
  2 at placement 0:4 then id 1 at 4:4 (MIG user guide; rapidsai/dask-cuda#583). So the upper half comes first at
  every level below the root: half 1 = slices 4-7, half 2 = slices 0-3, and so on.
- Default placement (``nvidia-smi mig -cgi`` without a placement): the driver packs the smallest free block first.
  :func:`choose_gi_placement` reproduces both sequences above: it picks the free placement whose largest
  enclosing fully free block is smallest (slice 7, which has no compute slice, never counts as free), the lowest
  start on a tie.
- Compute instance profiles of a GPU instance of ``g`` compute slices: ``1c`` (``g`` instances), ``2c``
  (``g // 2``), ``3c`` (3g and 7g), ``4c`` (4g and 7g) and the full ``gc``; their SM counts split the GPU
  instance's evenly (MIG user guide ``nvidia-smi mig -lcip`` examples: 14/28/42 SMs for 1c/2c/3c of an A100 3g).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fakehw.model.catalogue import MigCapability, MigProfile

GPU_INSTANCE_PROFILE_COUNT = 0x12
"""``NVML_GPU_INSTANCE_PROFILE_COUNT`` of the newest nvml.h (CUDA 13): profile indices below it that a GPU does
not offer answer NOT_SUPPORTED, indices at or above it INVALID_ARGUMENT."""
COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
"""``NVML_COMPUTE_INSTANCE_PROFILE_COUNT`` of the newest nvml.h."""
MAX_GPU_INSTANCES = 15
"""GPU instance ids 0..14 (one per block of the memory-slice tree)."""
MAX_COMPUTE_INSTANCES = 8
"""Compute instance ids 0..7 per GPU instance (``ci0``..``ci7`` in mig-minors)."""

CI_PROFILE_INDEX = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
"""``NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE`` by compute slice count."""
_CI_SIZES = {1: (1,), 2: (1, 2), 3: (1, 2, 3), 4: (1, 2, 4), 7: (1, 2, 3, 4, 7)}


class MigGeometryError(ValueError):
    """A request that cannot be placed (no such placement, no room)."""


# --------------------------------------------------------------------------------------------------- GPU instances


def gi_placements(cap: MigCapability, profile: MigProfile) -> tuple[int, ...]:
    """Possible placement starts (in memory slices) of ``profile``; each spans ``profile.memory_slices``."""
    size = profile.memory_slices
    return tuple(s for s in range(0, cap.memory_slices, size)
                 if s + size <= cap.memory_slices and s + profile.slices <= cap.max_instances)


def gi_id(start: int, size: int, memory_slices: int = 8) -> int:
    """The GPU instance id of the block ``start:size`` of the memory-slice tree (see the module docstring)."""
    if size <= 0 or size & (size - 1) or start % size or start + size > memory_slices:
        raise MigGeometryError(f"{start}:{size} is not an aligned block of {memory_slices} memory slices")
    nodes = memory_slices // size
    base = nodes - 1
    k = start // size
    if nodes >= 2:
        half = nodes // 2
        k = k - half if k >= half else k + half
    return base + k


def gi_block(gid: int, memory_slices: int = 8) -> tuple[int, int]:
    """``(start, size)`` of GPU instance id ``gid`` (inverse of :func:`gi_id`)."""
    size = memory_slices
    while size >= 1:
        nodes = memory_slices // size
        if gid < 2 * nodes - 1:
            k = gid - (nodes - 1)
            if nodes >= 2:
                half = nodes // 2
                k = k + half if k < half else k - half
            return k * size, size
        size //= 2
    raise MigGeometryError(f"no GPU instance id {gid} on a GPU of {memory_slices} memory slices")


def _slices(start: int, size: int) -> set[int]:
    return set(range(start, start + size))


def gi_fits(cap: MigCapability, profile: MigProfile, start: int, used: set[int]) -> bool:
    """Can ``profile`` go at ``start`` with memory slices ``used`` taken?"""
    return start in gi_placements(cap, profile) and not _slices(start, profile.memory_slices) & used


def choose_gi_placement(cap: MigCapability, profile: MigProfile, used: set[int]) -> int | None:
    """Where the driver puts ``profile`` when no placement is asked for (None: no room)."""
    dead = set(range(cap.max_instances, cap.memory_slices))  # memory slices without a compute slice
    best: tuple[int, int] | None = None
    for start in gi_placements(cap, profile):
        if not gi_fits(cap, profile, start, used):
            continue
        score = _largest_free_block(start, profile.memory_slices, used | dead, cap.memory_slices)
        if best is None or (score, start) < best:
            best = (score, start)
    return None if best is None else best[1]


def _largest_free_block(start: int, size: int, taken: set[int], total: int) -> int:
    """Size of the largest aligned block containing ``start:size`` with no slice in ``taken`` (``size`` when the
    placement itself touches a taken slice: nothing larger can be free)."""
    best = size
    block = size
    while block <= total:
        s = start // block * block
        if _slices(s, block) & taken:
            break
        best = block
        block *= 2
    return best


def place_in_order(cap: MigCapability, profiles: Iterable[MigProfile]) -> list[tuple[int, int]]:
    """``(placement start, GPU instance id)`` of each profile created in turn with default placements, as
    ``nvidia-smi mig -cgi a,b,c`` does; :class:`MigGeometryError` names the first that does not fit."""
    used: set[int] = set()
    counts: dict[str, int] = {}
    out = []
    for k, p in enumerate(profiles):
        counts[p.name] = counts.get(p.name, 0) + 1
        start = choose_gi_placement(cap, p, used) if counts[p.name] <= p.max_instances else None
        if start is None:
            raise MigGeometryError(f"instance {k} ({p.name}) does not fit after the ones before it")
        used |= _slices(start, p.memory_slices)
        out.append((start, gi_id(start, p.memory_slices, cap.memory_slices)))
    return out


def gi_remaining(cap: MigCapability, profile: MigProfile, used: set[int], existing: int) -> int:
    """How many more instances of ``profile`` fit (its placements are disjoint, so free ones all count)."""
    free = sum(1 for s in gi_placements(cap, profile) if gi_fits(cap, profile, s, used))
    return max(0, min(profile.max_instances - existing, free))


# --------------------------------------------------------------------------------------------------- compute instances


@dataclass(frozen=True)
class CiProfile:
    """A compute instance profile of a GPU instance profile."""

    index: int
    """``NVML_COMPUTE_INSTANCE_PROFILE_*`` (also the profile id NVML reports)."""
    slices: int
    instances: int
    multiprocessors: int
    placements: tuple[int, ...]
    """Starts in compute slices of the GPU instance; each spans ``slices``."""
    name: str
    """``1c.3g.40gb``; the full-size one carries the GPU instance's own name."""
    full: bool
    """Spans the whole GPU instance (what ``nvidia-smi mig -cci`` creates by default)."""


def ci_profiles(profile: MigProfile) -> tuple[CiProfile, ...]:
    g = profile.slices
    out = []
    for c in _CI_SIZES.get(g, (g,)):
        step = 1 if c == 1 else 2 if c == 2 else 4
        starts = tuple(s for s in range(0, g, step) if s + c <= g)
        instances = len(starts) if c < g else 1
        sms = profile.multiprocessors if c == g else profile.multiprocessors * c // g
        name = profile.name if c == g else f"{c}c.{profile.name}"
        out.append(CiProfile(CI_PROFILE_INDEX[c], c, instances, sms, starts[:instances], name, c == g))
    return tuple(out)


def ci_profile(profile: MigProfile, index: int) -> CiProfile | None:
    return next((c for c in ci_profiles(profile) if c.index == index), None)


def ci_fits(ci: CiProfile, start: int, used: set[int]) -> bool:
    return start in ci.placements and not _slices(start, ci.slices) & used


def choose_ci_placement(ci: CiProfile, used: set[int]) -> int | None:
    return next((s for s in ci.placements if ci_fits(ci, s, used)), None)


def ci_remaining(ci: CiProfile, used: set[int], existing: int) -> int:
    free = sum(1 for s in ci.placements if ci_fits(ci, s, used))
    return max(0, min(ci.instances - existing, free))


def lowest_free(taken: Iterable[int], limit: int) -> int | None:
    ids = set(taken)
    return next((i for i in range(limit) if i not in ids), None)
