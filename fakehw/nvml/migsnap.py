"""The MIG part of the NVML snapshot: profiles, GPU instances, compute instances (MIG devices), compute profiles.

Built from the GPU's MIG state (:class:`fakehw.agent.mig.GpuMig`, the agent's or the profile's boot state) and
its MIG geometry (:mod:`fakehw.model.mig`): every answer the shim gives about MIG (remaining capacity, placements,
ids, what a MIG device reports) is computed here, so the C side only copies fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fakehw.agent.mig import GpuInstance, GpuMig, ci_remaining, gi_remaining, profile_of
from fakehw.model import mig as geo
from fakehw.model.catalogue import MigProfile
from fakehw.model.system import Gpu
from fakehw.nvml import layout
from fakehw.nvml.layout import CiProfileRecord, GpuInstanceRecord, MigProfileRecord, MigRecord

if layout.CI_PROFILE_COUNT != geo.COMPUTE_INSTANCE_PROFILE_COUNT:  # layout.py cannot import the model (see there)
    raise ImportError("layout.CI_PROFILE_COUNT differs from NVML_COMPUTE_INSTANCE_PROFILE_COUNT")


@dataclass
class MigRecords:
    """The MIG records of a node, in snapshot order; ``*_first`` of a GPU are the lengths before it was added."""

    profiles: list[MigProfileRecord] = field(default_factory=list)
    gis: list[GpuInstanceRecord] = field(default_factory=list)
    migs: list[MigRecord] = field(default_factory=list)
    ci_profiles: list[CiProfileRecord] = field(default_factory=list)


def _pad(values: tuple[int, ...], n: int) -> tuple[int, ...]:
    return values[:n] + (0,) * (n - len(values[:n]))


def profile_records(gpu: Gpu, slot: int, state: GpuMig) -> list[MigProfileRecord]:
    """GPU instance profiles with what is left of each (0 while MIG is disabled, as real NVML answers)."""
    cap = gpu.sku.mig
    if cap is None:
        return []
    out = []
    for p in cap.profiles[: layout.MAX_MIG_PROFILES_PER_GPU]:
        starts = geo.gi_placements(cap, p)
        out.append(MigProfileRecord(
            name=f"MIG {p.name}", parent=slot, profile_index=p.index, profile_id=p.id, slice_count=p.slices,
            instance_count=p.max_instances, remaining=gi_remaining(gpu, state, p), multiprocessors=p.multiprocessors,
            copy_engines=p.copy_engines, decoders=p.decoders, encoders=p.encoders, jpegs=p.jpegs, ofas=p.ofas,
            placement_count=len(starts), placement_start=_pad(starts, layout.MAX_PLACEMENTS), memory_mib=p.memory_mib,
            placement_size=p.memory_slices,
        ))
    return out


def ci_profile_records(gpu: Gpu, slot: int) -> list[CiProfileRecord]:
    cap = gpu.sku.mig
    if cap is None:
        return []
    out = []
    for p in cap.profiles:
        for ci in geo.ci_profiles(p):
            out.append(CiProfileRecord(
                name=f"MIG {ci.name}", parent=slot, gi_profile_index=p.index, index=ci.index, slice_count=ci.slices,
                instance_count=ci.instances, multiprocessors=ci.multiprocessors, copy_engines=p.copy_engines,
                decoders=p.decoders, encoders=p.encoders, jpegs=p.jpegs, ofas=p.ofas,
                placement_count=len(ci.placements), placement_start=_pad(ci.placements, layout.MAX_PLACEMENTS),
            ))
    return out[: layout.MAX_CI_PROFILES_PER_GPU]


def _gi_record(gpu: Gpu, slot: int, gi: GpuInstance, p: MigProfile, mig_first: int) -> GpuInstanceRecord:
    remaining = [0] * layout.CI_PROFILE_COUNT
    for ci in geo.ci_profiles(p):
        remaining[ci.index] = ci_remaining(gi, p, ci)
    return GpuInstanceRecord(
        serial=gi.serial, memory_mib=p.memory_mib, parent=slot, id=gi.id, profile_index=p.index, profile_id=p.id,
        slice_count=p.slices, placement_start=gi.start, placement_size=p.memory_slices,
        multiprocessors=p.multiprocessors, copy_engines=p.copy_engines, decoders=p.decoders, encoders=p.encoders,
        jpegs=p.jpegs, ofas=p.ofas, mig_first=mig_first, mig_count=len(gi.cis), ci_remaining=tuple(remaining),
    )


def _mig_record(gpu: Gpu, slot: int, gi: GpuInstance, p: MigProfile, index: int, gi_record: int,
                cid: int) -> MigRecord:
    c = gi.ci(cid)
    assert c is not None
    ci = geo.ci_profile(p, c.profile)
    ci_slices, ci_sms = (ci.slices, ci.multiprocessors) if ci is not None else (p.slices, p.multiprocessors)
    total = p.memory_mib * 2**20
    reserved = min(total, max(32, p.memory_mib // 160) * 2**20)
    return MigRecord(
        uuid=c.uuid, name=f"{gpu.sku.name} MIG {ci.name if ci is not None else p.name}", parent=slot, index=index,
        gpu_instance_id=gi.id, compute_instance_id=c.id, profile_id=p.id, ci_profile_id=c.profile,
        slice_count=p.slices, start_slice=gi.start, multiprocessors=ci_sms, copy_engines=p.copy_engines,
        decoders=p.decoders, encoders=p.encoders, jpegs=p.jpegs, ofas=p.ofas, mem_total=total, mem_reserved=reserved,
        mem_used=0, mem_free=total - reserved, ci_slice_count=ci_slices, ci_start=c.start,
        gi_placement_size=p.memory_slices, gi_record=gi_record,
    )


def add_gpu(out: MigRecords, gpu: Gpu, slot: int, state: GpuMig | None) -> None:
    """Append ``gpu``'s records to ``out`` (nothing for a GPU without MIG; no instances while MIG is disabled)."""
    if state is None or gpu.sku.mig is None:
        return
    out.profiles += profile_records(gpu, slot, state)
    out.ci_profiles += ci_profile_records(gpu, slot)
    if not state.current:
        return
    index = 0
    for gi in sorted(state.gis, key=lambda g: g.id)[: layout.MAX_GI_PER_GPU]:
        p = profile_of(gpu, gi)
        gi_record = len(out.gis)
        cids = sorted(c.id for c in gi.cis)
        room = max(0, layout.MAX_MIG_PER_GPU - index)
        out.gis.append(_gi_record(gpu, slot, gi, p, len(out.migs)))
        for cid in cids[:room]:
            out.migs.append(_mig_record(gpu, slot, gi, p, index, gi_record, cid))
            index += 1
