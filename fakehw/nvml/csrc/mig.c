/* MIG: mode, MIG device handles, GPU instances and their (single, full-size) compute instances. */
#include "internal.h"

#include <stdio.h>

static nvmlReturn_t m_mode(fhw_ctx_t *c, unsigned int *current, unsigned int *pending) {
    if (current == NULL || pending == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *current = c->g->mig_current;
    *pending = c->g->mig_pending;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    FHW_DEV_CALL(device, 0, m_mode(&C, currentMode, pendingMode));
}

static nvmlReturn_t m_max(fhw_ctx_t *c, unsigned int *count) {
    CHECK_PTR(count);
    *count = c->g->mig_capable ? c->g->mig_max_devices : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    FHW_DEV_CALL(device, 0, m_max(&C, count));
}

static nvmlReturn_t m_by_index(fhw_ctx_t *c, unsigned int index, nvmlDevice_t *mig) {
    CHECK_PTR(mig);
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= c->g->mig_max_devices) return NVML_ERROR_INVALID_ARGUMENT;
    const fhw_visible_t *vis = fhw_visible();
    for (int m = 0; m < vis->mig_count; m++)
        if (vis->mig_parent[m] == c->dev && vis->mig_index[m] == (int)index && c->s->mig_slot[m] >= 0) {
            *mig = fhw_mig_device_handle(m);
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
    FHW_DEV_CALL(device, 0, m_by_index(&C, index, migDevice));
}

static nvmlReturn_t m_parent(fhw_ctx_t *c, nvmlDevice_t *device) {
    CHECK_PTR(device);
    if (c->m == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *device = fhw_device_handle(c->dev);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    FHW_DEV_CALL(migDevice, FHW_ALLOW_MIG, m_parent(&C, device));
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (isMigDevice == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (fhw_mig_id_of(device) >= 0) {
        *isMigDevice = 1;
        return NVML_SUCCESS;
    }
    if (fhw_device_id_of(device) >= 0) {
        *isMigDevice = 0;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}

static nvmlReturn_t m_gi_id(fhw_ctx_t *c, unsigned int *id, int compute) {
    CHECK_PTR(id);
    if (c->m == NULL) return NVML_ERROR_NOT_SUPPORTED;
    *id = compute ? c->m->compute_instance_id : c->m->gpu_instance_id;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    FHW_DEV_CALL(device, FHW_ALLOW_MIG, m_gi_id(&C, id, 0));
}
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    FHW_DEV_CALL(device, FHW_ALLOW_MIG, m_gi_id(&C, id, 1));
}

/* ------------------------------------------------------------------------------------------ profiles */

/* The GPU's profile record with NVML_GPU_INSTANCE_PROFILE_* index `index` (by_id: with unique id `index`). */
static const fhw_mig_profile_t *profile_of(fhw_ctx_t *c, unsigned int index, int by_id) {
    for (uint32_t i = 0; i < c->g->mig_profile_count; i++) {
        const fhw_mig_profile_t *p = &c->s->mig_profiles[c->g->mig_profile_first + i];
        if ((by_id ? p->profile_id : p->profile_index) == index) return p;
    }
    return NULL;
}

static void fill_profile(const fhw_mig_profile_t *p, nvmlGpuInstanceProfileInfo_t *o) {
    memset(o, 0, sizeof *o);
    o->id = p->profile_id;
    o->isP2pSupported = 0;
    o->sliceCount = p->slice_count;
    o->instanceCount = p->instance_count;
    o->multiprocessorCount = p->multiprocessors;
    o->copyEngineCount = p->copy_engines;
    o->decoderCount = p->decoders;
    o->encoderCount = p->encoders;
    o->jpegCount = p->jpegs;
    o->ofaCount = p->ofas;
    o->memorySizeMB = p->memory_mib;
}

static nvmlReturn_t m_profile(fhw_ctx_t *c, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info) {
    CHECK_PTR(info);
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    const fhw_mig_profile_t *p = profile_of(c, profile, 0);
    if (p == NULL) return NVML_ERROR_NOT_SUPPORTED;
    fill_profile(p, info);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
    FHW_DEV_CALL(device, 0, m_profile(&C, profile, info));
}

static nvmlReturn_t m_profile_v(fhw_ctx_t *c, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info) {
    CHECK_PTR(info);
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpuInstanceProfileInfo_t v1;
    nvmlReturn_t r = m_profile(c, profile, &v1);
    if (r != NVML_SUCCESS) return r;
    const fhw_mig_profile_t *p = profile_of(c, profile, 0);
    info->id = v1.id;
    info->isP2pSupported = v1.isP2pSupported;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->copyEngineCount = v1.copyEngineCount;
    info->decoderCount = v1.decoderCount;
    info->encoderCount = v1.encoderCount;
    info->jpegCount = v1.jpegCount;
    info->ofaCount = v1.ofaCount;
    info->memorySizeMB = v1.memorySizeMB;
    return fhw_copy_str(info->name, sizeof info->name, p->name, sizeof p->name);
}
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
    FHW_DEV_CALL(device, 0, m_profile_v(&C, profile, info));
}

static nvmlReturn_t m_remaining(fhw_ctx_t *c, unsigned int profile_id, unsigned int *count) {
    CHECK_PTR(count);
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    const fhw_mig_profile_t *p = profile_of(c, profile_id, 1);
    if (p == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = c->g->mig_current ? p->remaining : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int *count) {
    FHW_DEV_CALL(device, 0, m_remaining(&C, profileId, count));
}

static nvmlReturn_t m_placements(fhw_ctx_t *c, unsigned int profile_id, nvmlGpuInstancePlacement_t *out,
                                 unsigned int *count) {
    CHECK_PTR(count);
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    const fhw_mig_profile_t *p = profile_of(c, profile_id, 1);
    if (p == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (out == NULL) {
        *count = p->placement_count;
        return NVML_SUCCESS;
    }
    if (*count < p->placement_count) {
        *count = p->placement_count;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < p->placement_count; i++) {
        out[i].start = p->placement_start[i];
        out[i].size = p->slice_count;
    }
    *count = p->placement_count;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t *placements,
                                                           unsigned int *count) {
    FHW_DEV_CALL(device, 0, m_placements(&C, profileId, placements, count));
}
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t *placements, unsigned int *count) {
    FHW_DEV_CALL(device, 0, m_placements(&C, profileId, placements, count));
}

/* ------------------------------------------------------------------------------------------ instances */

static nvmlReturn_t m_instances(fhw_ctx_t *c, unsigned int profile_id, nvmlGpuInstance_t *out, unsigned int *count) {
    if (count == NULL || out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (profile_of(c, profile_id, 1) == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    const fhw_visible_t *vis = fhw_visible();
    unsigned int n = 0;
    for (int m = 0; m < vis->mig_count; m++) {
        int ms = c->s->mig_slot[m];
        if (vis->mig_parent[m] != c->dev || ms < 0 || c->s->migs[ms].profile_id != profile_id) continue;
        out[n++] = &fhw_gis[m];
    }
    *count = n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstances,
                                       unsigned int *count) {
    FHW_DEV_CALL(device, 0, m_instances(&C, profileId, gpuInstances, count));
}

static nvmlReturn_t m_instance_by_id(fhw_ctx_t *c, unsigned int id, nvmlGpuInstance_t *gi) {
    CHECK_PTR(gi);
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (!c->g->mig_current) return NVML_ERROR_INVALID_STATE;
    const fhw_visible_t *vis = fhw_visible();
    for (int m = 0; m < vis->mig_count; m++) {
        int ms = c->s->mig_slot[m];
        if (vis->mig_parent[m] == c->dev && ms >= 0 && c->s->migs[ms].gpu_instance_id == id) {
            *gi = &fhw_gis[m];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance) {
    FHW_DEV_CALL(device, 0, m_instance_by_id(&C, id, gpuInstance));
}

/* GPU and compute instance handles index the same table as MIG devices. */
static int gi_id(nvmlGpuInstance_t gi) {
    uintptr_t p = (uintptr_t)gi, b = (uintptr_t)fhw_gis;
    if (p < b || p >= b + sizeof fhw_gis || (p - b) % sizeof fhw_gis[0] != 0) return -1;
    int id = (int)((p - b) / sizeof fhw_gis[0]);
    return id < fhw_visible()->mig_count ? id : -1;
}

static int ci_id(nvmlComputeInstance_t ci) {
    uintptr_t p = (uintptr_t)ci, b = (uintptr_t)fhw_cis;
    if (p < b || p >= b + sizeof fhw_cis || (p - b) % sizeof fhw_cis[0] != 0) return -1;
    int id = (int)((p - b) / sizeof fhw_cis[0]);
    return id < fhw_visible()->mig_count ? id : -1;
}

#define MIG_CALL(id, expr)                                                                   \
    do {                                                                                     \
        if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;                             \
        int id_ = (id);                                                                      \
        if (id_ < 0) return NVML_ERROR_INVALID_ARGUMENT;                                     \
        FHW_DEV_CALL(fhw_mig_device_handle(id_), FHW_ALLOW_MIG, (expr));                     \
    } while (0)

static nvmlReturn_t gi_info(fhw_ctx_t *c, nvmlGpuInstanceInfo_t *info) {
    CHECK_PTR(info);
    memset(info, 0, sizeof *info);
    info->device = fhw_device_handle(c->dev);
    info->id = c->m->gpu_instance_id;
    info->profileId = c->m->profile_id;
    info->placement.start = c->m->start_slice;
    info->placement.size = c->m->slice_count;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    MIG_CALL(gi_id(gpuInstance), gi_info(&C, info));
}

/* The one compute instance spans the whole GPU instance: its profile is the one with the same slice count. */
static unsigned int ci_profile_index(unsigned int slices) {
    switch (slices) {
    case 1: return 0;
    case 2: return 1;
    case 3: return 2;
    case 4: return 3;
    case 7: return 4;
    case 8: return 5;
    case 6: return 6;
    default: return 0xFFFFFFFFu;
    }
}

static nvmlReturn_t ci_profile(fhw_ctx_t *c, unsigned int profile, unsigned int eng, nvmlComputeInstanceProfileInfo_t *o) {
    CHECK_PTR(o);
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || eng != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (profile != ci_profile_index(c->m->slice_count)) return NVML_ERROR_NOT_SUPPORTED;
    memset(o, 0, sizeof *o);
    o->id = c->m->ci_profile_id;
    o->sliceCount = c->m->slice_count;
    o->instanceCount = 1;
    o->multiprocessorCount = c->m->multiprocessors;
    o->sharedCopyEngineCount = c->m->copy_engines;
    o->sharedDecoderCount = c->m->decoders;
    o->sharedEncoderCount = c->m->encoders;
    o->sharedJpegCount = c->m->jpegs;
    o->sharedOfaCount = c->m->ofas;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info) {
    MIG_CALL(gi_id(gpuInstance), ci_profile(&C, profile, engProfile, info));
}

static nvmlReturn_t ci_profile_v(fhw_ctx_t *c, unsigned int profile, unsigned int eng,
                                 nvmlComputeInstanceProfileInfo_v2_t *info) {
    CHECK_PTR(info);
    if (info->version != nvmlComputeInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlComputeInstanceProfileInfo_t v1;
    nvmlReturn_t r = ci_profile(c, profile, eng, &v1);
    if (r != NVML_SUCCESS) return r;
    info->id = v1.id;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->sharedCopyEngineCount = v1.sharedCopyEngineCount;
    info->sharedDecoderCount = v1.sharedDecoderCount;
    info->sharedEncoderCount = v1.sharedEncoderCount;
    info->sharedJpegCount = v1.sharedJpegCount;
    info->sharedOfaCount = v1.sharedOfaCount;
    /* "3c.3g.40gb"-style names: compute slices, then the GPU instance's name. */
    const char *gi_name = strstr(c->m->name, "MIG ");
    gi_name = gi_name ? gi_name + 4 : c->m->name;
    memset(info->name, 0, sizeof info->name);
    if (c->m->slice_count == 0) return NVML_ERROR_UNKNOWN;
    int n = snprintf(info->name, sizeof info->name, "%uc.%s", c->m->slice_count, gi_name);
    return n > 0 && (size_t)n < sizeof info->name ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info) {
    MIG_CALL(gi_id(gpuInstance), ci_profile_v(&C, profile, engProfile, info));
}

static nvmlReturn_t ci_remaining(fhw_ctx_t *c, unsigned int profile, unsigned int *count) {
    CHECK_PTR(count);
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0; /* the full-size compute instance takes every slice */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                                unsigned int *count) {
    MIG_CALL(gi_id(gpuInstance), ci_remaining(&C, profileId, count));
}

static nvmlReturn_t ci_list(fhw_ctx_t *c, unsigned int profile, nvmlComputeInstance_t *out, unsigned int *count) {
    if (out == NULL || count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    if (profile == ci_profile_index(c->m->slice_count)) {
        out[0] = &fhw_cis[c->mig];
        *count = 1;
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t *computeInstances, unsigned int *count) {
    MIG_CALL(gi_id(gpuInstance), ci_list(&C, profileId, computeInstances, count));
}

static nvmlReturn_t ci_by_id(fhw_ctx_t *c, unsigned int id, nvmlComputeInstance_t *ci) {
    CHECK_PTR(ci);
    if (id != c->m->compute_instance_id) return NVML_ERROR_NOT_FOUND;
    *ci = &fhw_cis[c->mig];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance) {
    MIG_CALL(gi_id(gpuInstance), ci_by_id(&C, id, computeInstance));
}

static nvmlReturn_t ci_info(fhw_ctx_t *c, void *out, int with_placement) {
    CHECK_PTR(out);
    nvmlComputeInstanceInfo_t info;
    memset(&info, 0, sizeof info);
    info.device = fhw_device_handle(c->dev);
    info.gpuInstance = &fhw_gis[c->mig];
    info.id = c->m->compute_instance_id;
    info.profileId = c->m->ci_profile_id;
    info.placement.start = 0;
    info.placement.size = c->m->slice_count;
    memcpy(out, &info, with_placement ? sizeof info : sizeof(fhwComputeInstanceInfoV1_t));
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
    MIG_CALL(ci_id(computeInstance), ci_info(&C, info, 1));
}
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, fhwComputeInstanceInfoV1_t *info) {
    MIG_CALL(ci_id(computeInstance), ci_info(&C, info, 0));
}
