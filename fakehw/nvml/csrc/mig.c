/*
 * MIG: mode, GPU instance profiles, GPU instances, compute instances and MIG devices.
 *
 * Everything read comes from the snapshot (profiles with their remaining capacity and placements, GPU instance
 * records, MIG device records = compute instances, compute instance profiles). Changes (SetMigMode, create and
 * destroy) go to the node agent, which checks them against the GPU's MIG geometry, journals and applies them and
 * renders a new snapshot generation before it answers; the call then waits until this process sees that
 * generation, so its own next call (and every other process's) sees the change. Refusals come back with the NVML
 * return code the real library gives for the same request.
 *
 * Handles: a MIG device (and its compute instance) is known by its UUID, a GPU instance by its GPU and creation
 * serial; each gets a stable slot in a registry the first time a snapshot shows it, so a handle survives new
 * generations and a handle of a destroyed instance answers INVALID_ARGUMENT instead of naming a new one. When
 * every slot has been used, slots of instances that are gone are reused ("handles may be reused", nvml.h).
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MIG_WAIT_MS 10000

/* ------------------------------------------------------------------------------------------ handle registry */

/* Only touched by fhw_mig_reset/fhw_mig_map, which run under the init or reload lock. */
static char reg_mig[FHW_MAX_MIGS][96]; /* MIG device UUID; "" = free */
static struct {
    char gpu[96]; /* parent GPU UUID; "" = free */
    uint64_t serial;
} reg_gi[FHW_MAX_GIS];

void fhw_mig_reset(void) {
    memset(reg_mig, 0, sizeof reg_mig);
    memset(reg_gi, 0, sizeof reg_gi);
}

static int dev_of_slot(const fhw_snap_t *s, uint32_t slot) {
    for (int d = 0; d < FHW_MAX_GPUS; d++)
        if (s->dev_slot[d] == (int)slot) return d;
    return -1;
}

static int mig_key_eq(int h, const fhw_snap_t *s, uint32_t i) { return strcmp(reg_mig[h], s->migs[i].uuid) == 0; }
static int gi_key_eq(int h, const fhw_snap_t *s, uint32_t i) {
    return reg_gi[h].serial == s->gis[i].serial && strcmp(reg_gi[h].gpu, s->gpus[s->gis[i].parent].uuid) == 0;
}
static int mig_free(int h) { return reg_mig[h][0] == '\0'; }
static int gi_free(int h) { return reg_gi[h].gpu[0] == '\0'; }
static void mig_claim(int h, const fhw_snap_t *s, uint32_t i) {
    snprintf(reg_mig[h], sizeof reg_mig[h], "%s", s->migs[i].uuid);
}
static void gi_claim(int h, const fhw_snap_t *s, uint32_t i) {
    snprintf(reg_gi[h].gpu, sizeof reg_gi[h].gpu, "%s", s->gpus[s->gis[i].parent].uuid);
    reg_gi[h].serial = s->gis[i].serial;
}

typedef struct {
    int cap;
    int (*eq)(int, const fhw_snap_t *, uint32_t);
    int (*is_free)(int);
    void (*claim)(int, const fhw_snap_t *, uint32_t);
} registry_t;

/* The tables map_records fills (fhw_snap_t's mig_* and gi_* arrays), passed as arrays of their size rather than
   as bare pointers, so a build with UBSan's bounds checks sees an index past one (next to each other in fhw_snap_t,
   a write one past a table lands in the next, which no other sanitizer can tell from a field). */
_Static_assert(FHW_MAX_MIGS == FHW_MAX_GIS, "both registries' tables are one array type");
typedef int table_t[FHW_MAX_GIS];

/* Give each of `count` records whose GPU is visible (parent_of) a handle: the registered one, else a free slot,
   else the slot of an instance this snapshot no longer has. */
static void map_records(const registry_t *r, const fhw_snap_t *s, uint32_t count, uint32_t (*parent_of)(
                            const fhw_snap_t *, uint32_t), table_t *slot, table_t *dev, table_t *handle) {
    char seen[FHW_MAX_GIS] = {0};
    for (int h = 0; h < r->cap; h++) (*slot)[h] = (*dev)[h] = -1;
    for (uint32_t i = 0; i < count; i++) (*handle)[i] = -1;
    for (uint32_t i = 0; i < count; i++) {
        if (dev_of_slot(s, parent_of(s, i)) < 0) continue;
        for (int h = 0; h < r->cap; h++)
            if (!r->is_free(h) && r->eq(h, s, i)) {
                (*handle)[i] = h;
                seen[h] = 1;
                break;
            }
    }
    for (uint32_t i = 0; i < count; i++) {
        int d = dev_of_slot(s, parent_of(s, i));
        if (d < 0) continue;
        if ((*handle)[i] < 0) {
            int h = -1;
            for (int k = 0; k < r->cap && h < 0; k++)
                if (r->is_free(k)) h = k;
            for (int k = 0; k < r->cap && h < 0; k++)
                if (!seen[k]) h = k;
            if (h < 0) continue; /* more live instances than slots: cannot happen within the format's limits */
            r->claim(h, s, i);
            seen[h] = 1;
            (*handle)[i] = h;
        }
        (*slot)[(*handle)[i]] = (int)i;
        (*dev)[(*handle)[i]] = d;
    }
}

static uint32_t mig_parent(const fhw_snap_t *s, uint32_t i) { return s->migs[i].parent; }
static uint32_t gi_parent(const fhw_snap_t *s, uint32_t i) { return s->gis[i].parent; }

void fhw_mig_map(fhw_snap_t *s) {
    static const registry_t migs = {FHW_MAX_MIGS, mig_key_eq, mig_free, mig_claim};
    static const registry_t gis = {FHW_MAX_GIS, gi_key_eq, gi_free, gi_claim};
    uint32_t nm = s->status == NVML_SUCCESS ? s->hdr->mig_count : 0;
    uint32_t ng = s->status == NVML_SUCCESS ? s->hdr->gi_count : 0;
    map_records(&migs, s, nm, mig_parent, &s->mig_slot, &s->mig_dev, &s->mig_handle);
    map_records(&gis, s, ng, gi_parent, &s->gi_slot, &s->gi_dev, &s->gi_handle);
}

int fhw_gi_id_of(nvmlGpuInstance_t gi) {
    uintptr_t p = (uintptr_t)gi, b = (uintptr_t)fhw_gis;
    if (p < b || p >= b + sizeof fhw_gis || (p - b) % sizeof fhw_gis[0] != 0) return -1;
    return (int)((p - b) / sizeof fhw_gis[0]);
}

static int ci_id_of(nvmlComputeInstance_t ci) {
    uintptr_t p = (uintptr_t)ci, b = (uintptr_t)fhw_cis;
    if (p < b || p >= b + sizeof fhw_cis || (p - b) % sizeof fhw_cis[0] != 0) return -1;
    return (int)((p - b) / sizeof fhw_cis[0]);
}

/* Enter a GPU instance call: the snapshot, the GPU instance and its GPU. */
static nvmlReturn_t gi_enter(fhw_ctx_t *c, nvmlGpuInstance_t h) {
    int gh = fhw_gi_id_of(h);
    if (gh < 0) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = fhw_enter(c);
    if (r != NVML_SUCCESS) return r;
    int rec = c->s->gi_slot[gh];
    int slot = rec < 0 ? -1 : c->s->dev_slot[c->s->gi_dev[gh]];
    if (rec < 0 || slot < 0) {
        fhw_leave(c);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    c->gi = &c->s->gis[rec];
    c->slot = slot;
    c->dev = c->s->gi_dev[gh];
    c->g = &c->s->gpus[slot];
    if (c->g->lost) {
        fhw_leave(c);
        return NVML_ERROR_GPU_IS_LOST;
    }
    return NVML_SUCCESS;
}

#define GI_CALL(handle, expr)                                                                          \
    do {                                                                                               \
        if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;                                       \
        fhw_ctx_t C;                                                                                   \
        nvmlReturn_t r_ = gi_enter(&C, (handle));                                                      \
        if (r_ == NVML_SUCCESS) {                                                                      \
            r_ = (expr);                                                                               \
            fhw_leave(&C);                                                                             \
        }                                                                                              \
        return r_;                                                                                     \
    } while (0)

#define CI_CALL(handle, expr)                                                                          \
    do {                                                                                               \
        if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;                                       \
        int ci_ = ci_id_of(handle);                                                                    \
        if (ci_ < 0) return NVML_ERROR_INVALID_ARGUMENT;                                               \
        FHW_DEV_CALL(fhw_mig_device_handle(ci_), FHW_ALLOW_MIG, (expr));                               \
    } while (0)

static nvmlGpuInstance_t gi_handle_of(const fhw_ctx_t *c, const fhw_gi_t *gi) {
    int h = c->s->gi_handle[gi - c->s->gis];
    return h < 0 ? NULL : &fhw_gis[h];
}

/* ------------------------------------------------------------------------------------------ lookups */

static const fhw_mig_profile_t *profile_by(const fhw_ctx_t *c, unsigned int key, int by_id) {
    for (uint32_t i = 0; i < c->g->mig_profile_count; i++) {
        const fhw_mig_profile_t *p = &c->s->mig_profiles[c->g->mig_profile_first + i];
        if ((by_id ? p->profile_id : p->profile_index) == key) return p;
    }
    return NULL;
}

static const fhw_ci_profile_t *ci_profile_of(const fhw_ctx_t *c, const fhw_gi_t *gi, unsigned int index) {
    for (uint32_t i = 0; i < c->s->hdr->ci_profile_count; i++) {
        const fhw_ci_profile_t *p = &c->s->ci_profiles[i];
        if (p->parent == (uint32_t)c->slot && p->gi_profile_index == gi->profile_index && p->index == index) return p;
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------ mode and devices */

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

/* nvml.h: "Returns zero if MIG is not supported or enabled": a MIG-capable GPU whose MIG mode is off has no MIG device
   slots (NVIDIA's go-nvml maintainers, NVIDIA/go-nvml#60: "For a GPU with MIG disabled this is 0"). */
static nvmlReturn_t m_max(fhw_ctx_t *c, unsigned int *count) {
    CHECK_PTR(count);
    *count = c->g->mig_capable && c->g->mig_current ? c->g->mig_max_devices : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    FHW_DEV_CALL(device, 0, m_max(&C, count));
}

static nvmlReturn_t m_by_index(fhw_ctx_t *c, unsigned int index, nvmlDevice_t *mig) {
    CHECK_PTR(mig);
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= c->g->mig_max_devices) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->g->mig_current) return NVML_ERROR_NOT_FOUND;
    for (uint32_t k = 0; k < c->g->mig_count; k++) {
        uint32_t i = c->g->mig_first + k;
        if (c->s->migs[i].index == index && c->s->mig_handle[i] >= 0) {
            *mig = fhw_mig_device_handle(c->s->mig_handle[i]);
            return NVML_SUCCESS;
        }
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

static nvmlReturn_t m_is_mig(fhw_ctx_t *c, unsigned int *is_mig) {
    CHECK_PTR(is_mig);
    *is_mig = c->m != NULL;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    FHW_DEV_CALL(device, FHW_ALLOW_MIG | FHW_ALLOW_LOST, m_is_mig(&C, isMigDevice));
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

/* ------------------------------------------------------------------------------------------ GPU instance profiles */

typedef struct {
    unsigned int id, p2p, slices, instances, sms, ce, dec, enc, jpeg, ofa;
    unsigned long long mem;
    const char *name;
} profile_fields_t;

static profile_fields_t gi_fields(const fhw_mig_profile_t *p) {
    profile_fields_t f = {p->profile_id, 0, p->slice_count, p->instance_count, p->multiprocessors, p->copy_engines,
                          p->decoders, p->encoders, p->jpegs, p->ofas, p->memory_mib, p->name};
    return f;
}

/* profile: the NVML_GPU_INSTANCE_PROFILE_* index (by_id: the profile ID). */
static nvmlReturn_t profile_lookup(fhw_ctx_t *c, unsigned int profile, int by_id, const fhw_mig_profile_t **out) {
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (!by_id && profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    *out = profile_by(c, profile, by_id);
    return *out == NULL ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

static nvmlReturn_t m_profile(fhw_ctx_t *c, unsigned int profile, nvmlGpuInstanceProfileInfo_t *o) {
    CHECK_PTR(o);
    const fhw_mig_profile_t *p;
    nvmlReturn_t r = profile_lookup(c, profile, 0, &p);
    if (r != NVML_SUCCESS) return r;
    profile_fields_t f = gi_fields(p);
    memset(o, 0, sizeof *o);
    o->id = f.id;
    o->isP2pSupported = f.p2p;
    o->sliceCount = f.slices;
    o->instanceCount = f.instances;
    o->multiprocessorCount = f.sms;
    o->copyEngineCount = f.ce;
    o->decoderCount = f.dec;
    o->encoderCount = f.enc;
    o->jpegCount = f.jpeg;
    o->ofaCount = f.ofa;
    o->memorySizeMB = f.mem;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
    FHW_DEV_CALL(device, 0, m_profile(&C, profile, info));
}

/* Fill a v2 or v3 profile structure (the version field says which). */
static nvmlReturn_t fill_profile_v(const profile_fields_t *f, void *out) {
    unsigned int version = *(unsigned int *)out;
    if (version == nvmlGpuInstanceProfileInfo_v2) {
        nvmlGpuInstanceProfileInfo_v2_t *o = out;
        memset(o, 0, sizeof *o);
        *o = (nvmlGpuInstanceProfileInfo_v2_t){version, f->id, f->p2p, f->slices, f->instances, f->sms, f->ce, f->dec,
                                                f->enc, f->jpeg, f->ofa, f->mem, {0}};
        return fhw_copy_str(o->name, sizeof o->name, f->name, 96);
    }
    if (version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *o = out;
        memset(o, 0, sizeof *o);
        *o = (nvmlGpuInstanceProfileInfo_v3_t){version, f->id, f->slices, f->instances, f->sms, f->ce, f->dec, f->enc,
                                                f->jpeg, f->ofa, f->mem, {0}, f->p2p ? NVML_GPU_INSTANCE_PROFILE_CAPS_P2P : 0};
        return fhw_copy_str(o->name, sizeof o->name, f->name, 96);
    }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

static nvmlReturn_t m_profile_v(fhw_ctx_t *c, unsigned int profile, int by_id, void *info) {
    CHECK_PTR(info);
    unsigned int version = *(unsigned int *)info;
    if (version != nvmlGpuInstanceProfileInfo_v2 && version != nvmlGpuInstanceProfileInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const fhw_mig_profile_t *p;
    nvmlReturn_t r = profile_lookup(c, profile, by_id, &p);
    if (r != NVML_SUCCESS) return r;
    profile_fields_t f = gi_fields(p);
    return fill_profile_v(&f, info);
}
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
    FHW_DEV_CALL(device, 0, m_profile_v(&C, profile, 0, info));
}
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                      nvmlGpuInstanceProfileInfo_v2_t *info) {
    FHW_DEV_CALL(device, 0, m_profile_v(&C, profileId, 1, info));
}

static nvmlReturn_t m_remaining(fhw_ctx_t *c, unsigned int profile_id, unsigned int *count) {
    CHECK_PTR(count);
    if (!c->g->mig_capable || !c->g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    const fhw_mig_profile_t *p = profile_by(c, profile_id, 1);
    if (p == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = p->remaining;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int *count) {
    FHW_DEV_CALL(device, 0, m_remaining(&C, profileId, count));
}

/* Copy `n` placements of `size` (NULL `out`: only the count), as both placement functions do. */
static nvmlReturn_t copy_placements(const uint32_t *starts, uint32_t n, uint32_t size, nvmlGpuInstancePlacement_t *out,
                                    unsigned int *count) {
    if (out == NULL) {
        *count = n;
        return NVML_SUCCESS;
    }
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (uint32_t i = 0; i < n; i++) {
        out[i].start = starts[i];
        out[i].size = size;
    }
    *count = n;
    return NVML_SUCCESS;
}

/* All possible placements, whatever is created and whether MIG is on (nvml.h). */
static nvmlReturn_t m_placements(fhw_ctx_t *c, unsigned int profile_id, nvmlGpuInstancePlacement_t *out,
                                 unsigned int *count) {
    CHECK_PTR(count);
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    const fhw_mig_profile_t *p = profile_by(c, profile_id, 1);
    if (p == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return copy_placements(p->placement_start, p->placement_count, p->placement_size, out, count);
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

/* ------------------------------------------------------------------------------------------ GPU instances */

static nvmlReturn_t m_instances(fhw_ctx_t *c, unsigned int profile_id, nvmlGpuInstance_t *out, unsigned int *count) {
    if (count == NULL || out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->g->mig_capable || !c->g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if (profile_by(c, profile_id, 1) == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (uint32_t i = 0; i < c->s->hdr->gi_count; i++) {
        const fhw_gi_t *gi = &c->s->gis[i];
        nvmlGpuInstance_t h = gi->parent == (uint32_t)c->slot && gi->profile_id == profile_id ? gi_handle_of(c, gi)
                                                                                                : NULL;
        if (h != NULL) out[n++] = h;
    }
    *count = n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstances,
                                       unsigned int *count) {
    FHW_DEV_CALL(device, 0, m_instances(&C, profileId, gpuInstances, count));
}

static const fhw_gi_t *gi_by_id(const fhw_ctx_t *c, unsigned int id) {
    for (uint32_t i = 0; i < c->s->hdr->gi_count; i++)
        if (c->s->gis[i].parent == (uint32_t)c->slot && c->s->gis[i].id == id) return &c->s->gis[i];
    return NULL;
}

static nvmlReturn_t m_instance_by_id(fhw_ctx_t *c, unsigned int id, nvmlGpuInstance_t *out) {
    CHECK_PTR(out);
    if (!c->g->mig_capable || !c->g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    const fhw_gi_t *gi = gi_by_id(c, id);
    nvmlGpuInstance_t h = gi ? gi_handle_of(c, gi) : NULL;
    if (h == NULL) return NVML_ERROR_NOT_FOUND;
    *out = h;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance) {
    FHW_DEV_CALL(device, 0, m_instance_by_id(&C, id, gpuInstance));
}

static nvmlReturn_t gi_info(fhw_ctx_t *c, nvmlGpuInstanceInfo_t *info) {
    CHECK_PTR(info);
    memset(info, 0, sizeof *info);
    info->device = fhw_device_handle(c->dev);
    info->id = c->gi->id;
    info->profileId = c->gi->profile_id;
    info->placement.start = c->gi->placement_start;
    info->placement.size = c->gi->placement_size;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    GI_CALL(gpuInstance, gi_info(&C, info));
}

/* ------------------------------------------------------------------------------------------ compute instance profiles */

static nvmlReturn_t ci_lookup(fhw_ctx_t *c, unsigned int profile, unsigned int eng, const fhw_ci_profile_t **out) {
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || eng != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = ci_profile_of(c, c->gi, profile);
    return *out == NULL ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

static nvmlReturn_t ci_profile(fhw_ctx_t *c, unsigned int profile, unsigned int eng, nvmlComputeInstanceProfileInfo_t *o) {
    CHECK_PTR(o);
    const fhw_ci_profile_t *p;
    nvmlReturn_t r = ci_lookup(c, profile, eng, &p);
    if (r != NVML_SUCCESS) return r;
    *o = (nvmlComputeInstanceProfileInfo_t){p->index, p->slice_count, p->instance_count, p->multiprocessors,
                                            p->copy_engines, p->decoders, p->encoders, p->jpegs, p->ofas};
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info) {
    GI_CALL(gpuInstance, ci_profile(&C, profile, engProfile, info));
}

static nvmlReturn_t ci_profile_v(fhw_ctx_t *c, unsigned int profile, unsigned int eng, void *info) {
    CHECK_PTR(info);
    unsigned int version = *(unsigned int *)info;
    if (version != nvmlComputeInstanceProfileInfo_v2 && version != nvmlComputeInstanceProfileInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const fhw_ci_profile_t *p;
    nvmlReturn_t r = ci_lookup(c, profile, eng, &p);
    if (r != NVML_SUCCESS) return r;
    if (version == nvmlComputeInstanceProfileInfo_v2) {
        nvmlComputeInstanceProfileInfo_v2_t *o = info;
        *o = (nvmlComputeInstanceProfileInfo_v2_t){version, p->index, p->slice_count, p->instance_count,
                                                   p->multiprocessors, p->copy_engines, p->decoders, p->encoders,
                                                   p->jpegs, p->ofas, {0}};
        return fhw_copy_str(o->name, sizeof o->name, p->name, sizeof p->name);
    }
    nvmlComputeInstanceProfileInfo_v3_t *o = info;
    *o = (nvmlComputeInstanceProfileInfo_v3_t){version, p->index, p->slice_count, p->instance_count, p->multiprocessors,
                                               p->copy_engines, p->decoders, p->encoders, p->jpegs, p->ofas, {0}, 0};
    return fhw_copy_str(o->name, sizeof o->name, p->name, sizeof p->name);
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info) {
    GI_CALL(gpuInstance, ci_profile_v(&C, profile, engProfile, info));
}

static nvmlReturn_t ci_remaining(fhw_ctx_t *c, unsigned int profile, unsigned int *count) {
    CHECK_PTR(count);
    const fhw_ci_profile_t *p;
    nvmlReturn_t r = ci_lookup(c, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &p);
    if (r != NVML_SUCCESS) return r;
    *count = c->gi->ci_remaining[profile];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                                unsigned int *count) {
    GI_CALL(gpuInstance, ci_remaining(&C, profileId, count));
}

static nvmlReturn_t ci_placements(fhw_ctx_t *c, unsigned int profile, nvmlComputeInstancePlacement_t *out,
                                  unsigned int *count) {
    CHECK_PTR(count);
    const fhw_ci_profile_t *p;
    nvmlReturn_t r = ci_lookup(c, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &p);
    if (r != NVML_SUCCESS) return r;
    _Static_assert(sizeof(nvmlComputeInstancePlacement_t) == sizeof(nvmlGpuInstancePlacement_t), "same shape");
    return copy_placements(p->placement_start, p->placement_count, p->slice_count, (nvmlGpuInstancePlacement_t *)out,
                           count);
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                                 nvmlComputeInstancePlacement_t *placements,
                                                                 unsigned int *count) {
    GI_CALL(gpuInstance, ci_placements(&C, profileId, placements, count));
}

/* ------------------------------------------------------------------------------------------ compute instances */

static nvmlReturn_t ci_list(fhw_ctx_t *c, unsigned int profile, nvmlComputeInstance_t *out, unsigned int *count) {
    if (out == NULL || count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    const fhw_ci_profile_t *p;
    nvmlReturn_t r = ci_lookup(c, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &p);
    if (r != NVML_SUCCESS) return r;
    unsigned int n = 0;
    for (uint32_t k = 0; k < c->gi->mig_count; k++) {
        uint32_t i = c->gi->mig_first + k;
        if (c->s->migs[i].ci_profile_id == profile && c->s->mig_handle[i] >= 0) out[n++] = &fhw_cis[c->s->mig_handle[i]];
    }
    *count = n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t *computeInstances, unsigned int *count) {
    GI_CALL(gpuInstance, ci_list(&C, profileId, computeInstances, count));
}

static nvmlComputeInstance_t ci_by_id(const fhw_ctx_t *c, const fhw_gi_t *gi, unsigned int id) {
    for (uint32_t k = 0; k < gi->mig_count; k++) {
        uint32_t i = gi->mig_first + k;
        if (c->s->migs[i].compute_instance_id == id && c->s->mig_handle[i] >= 0) return &fhw_cis[c->s->mig_handle[i]];
    }
    return NULL;
}

static nvmlReturn_t ci_get_by_id(fhw_ctx_t *c, unsigned int id, nvmlComputeInstance_t *ci) {
    CHECK_PTR(ci);
    nvmlComputeInstance_t h = ci_by_id(c, c->gi, id);
    if (h == NULL) return NVML_ERROR_NOT_FOUND;
    *ci = h;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance) {
    GI_CALL(gpuInstance, ci_get_by_id(&C, id, computeInstance));
}

static nvmlReturn_t ci_info(fhw_ctx_t *c, void *out, int with_placement) {
    CHECK_PTR(out);
    const fhw_gi_t *gi = &c->s->gis[c->m->gi_record];
    /* Never NULL: the loader keeps a MIG device's GPU instance on the device's own GPU, which is visible (the
       device's handle was entered), and every GPU instance of a visible GPU has a handle (fhw_mig_map). */
    nvmlGpuInstance_t gh = gi_handle_of(c, gi);
    nvmlComputeInstanceInfo_t info;
    memset(&info, 0, sizeof info);
    info.device = fhw_device_handle(c->dev);
    info.gpuInstance = gh;
    info.id = c->m->compute_instance_id;
    info.profileId = c->m->ci_profile_id;
    info.placement.start = c->m->ci_start;
    info.placement.size = c->m->ci_slice_count;
    memcpy(out, &info, with_placement ? sizeof info : sizeof(fhwComputeInstanceInfoV1_t));
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
    CI_CALL(computeInstance, ci_info(&C, info, 1));
}
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, fhwComputeInstanceInfoV1_t *info) {
    CI_CALL(computeInstance, ci_info(&C, info, 0));
}

/* ------------------------------------------------------------------------------------------ changes (the agent) */

/* What a change names, copied out of the snapshot before the call leaves it (it must not be held while waiting:
   the caller's own next reads would see the old snapshot). */
typedef struct {
    char node[64];
    char gpu[32];
    uint32_t slot; /* GPU slot at the time of the request */
    int dev;
    unsigned int gi;
    unsigned int ci;
} target_t;

static int safe_name(const char *s) {
    if (*s == '\0') return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_' || *s == '.'))
            return 0;
    return 1;
}

static nvmlReturn_t target_of(const fhw_ctx_t *c, target_t *t) {
    memset(t, 0, sizeof *t);
    snprintf(t->node, sizeof t->node, "%s", c->s->hdr->node_name);
    snprintf(t->gpu, sizeof t->gpu, "%s", c->g->model_name);
    t->slot = (uint32_t)c->slot;
    t->dev = c->dev;
    if (!safe_name(t->node) || !safe_name(t->gpu)) return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait until this process reads a snapshot of at least `generation`. */
static nvmlReturn_t wait_generation(uint64_t generation) {
    int64_t deadline = fhw_now_ms() + MIG_WAIT_MS;
    for (;;) {
        fhw_refresh(1);
        fhw_ctx_t c;
        nvmlReturn_t r = fhw_enter(&c);
        if (r != NVML_SUCCESS) return r;
        uint64_t seen = c.s->hdr->generation;
        fhw_leave(&c);
        if (seen >= generation) return NVML_SUCCESS;
        if (fhw_now_ms() >= deadline) {
            fhw_trace("waited %d ms for snapshot generation %llu (have %llu)", MIG_WAIT_MS,
                      (unsigned long long)generation, (unsigned long long)seen);
            return NVML_ERROR_TIMEOUT;
        }
        sleep_ms(2);
    }
}

/* Send a change to the agent and wait for the generation that shows it; `created` gets "created_id". */
static nvmlReturn_t agent_change(const char *method, const char *path, const char *body, long long *created) {
    char resp[4096];
    const char *why = NULL;
    int status = fhw_agent_request(method, path, body, resp, sizeof resp, &why);
    if (status < 0) {
        fhw_trace("MIG change not applied: %s", why ? why : "agent unreachable");
        return getenv("FAKEHW_AGENT_SOCKET") ? NVML_ERROR_UNKNOWN : NVML_ERROR_NO_PERMISSION;
    }
    int found = 0;
    /* RFC 9110 15: a status outside 100..599 is invalid, and a client "SHOULD process the response as if it had a
       5xx (Server Error) status code" (600..999 already fall in this branch; 000..099 must too). */
    if (status >= 400 || status < 100) {
        long long code = fhw_json_int(resp, "nvml_code", &found);
        return found && code > 0 && code < 1000 ? (nvmlReturn_t)code
               : status / 100 == 4              ? NVML_ERROR_INVALID_ARGUMENT /* 4xx: the request */
                                                : NVML_ERROR_UNKNOWN;
    }
    if (status < 200 || status >= 300) { /* 1xx, 3xx (RFC 9110 15): neither a success nor a refusal */
        fhw_trace("MIG change not confirmed: the agent answered HTTP %d", status);
        return NVML_ERROR_UNKNOWN;
    }
    long long generation = fhw_json_int(resp, "generation", &found);
    if (!found || generation < 0) return NVML_ERROR_UNKNOWN;
    if (created != NULL) {
        *created = fhw_json_int(resp, "created_id", &found);
        if (!found) return NVML_ERROR_UNKNOWN;
    }
    return wait_generation((uint64_t)generation);
}

/* Create a GPU or compute instance of `profile` (at `start` when given); `created` gets its id. */
static nvmlReturn_t agent_create(const char *path, unsigned int profile, const unsigned int *start, long long *created) {
    char body[96];
    if (start != NULL)
        snprintf(body, sizeof body, "{\"profile\": %u, \"placement\": %u}", profile, *start);
    else
        snprintf(body, sizeof body, "{\"profile\": %u}", profile);
    return agent_change("POST", path, body, created);
}

static nvmlReturn_t set_mode_target(fhw_ctx_t *c, unsigned int mode, nvmlReturn_t *status, target_t *t) {
    if (status == NULL || (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    return target_of(c, t);
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus) {
    target_t t;
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter_dev(&C, device, 0);
    if (r != NVML_SUCCESS) return r;
    r = set_mode_target(&C, mode, activationStatus, &t);
    fhw_leave(&C);
    if (r != NVML_SUCCESS) return r;
    char path[256], body[64];
    snprintf(path, sizeof path, "/v1/nodes/%s/gpus/%s/mig/mode", t.node, t.gpu);
    snprintf(body, sizeof body, "{\"enabled\": %s}", mode ? "true" : "false");
    r = agent_change("POST", path, body, NULL);
    /* A GPU that cannot switch now (GPU instances left) is reported through the activation status. */
    *activationStatus = r;
    return r == NVML_ERROR_IN_USE ? NVML_SUCCESS : r;
}

/* After a create: the handle of GPU instance `id` of the target's GPU in the current snapshot. */
static nvmlReturn_t find_gi(const target_t *t, unsigned int id, nvmlGpuInstance_t *out) {
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter_dev(&C, fhw_device_handle(t->dev), 0);
    if (r != NVML_SUCCESS) return r;
    const fhw_gi_t *gi = gi_by_id(&C, id);
    nvmlGpuInstance_t h = gi ? gi_handle_of(&C, gi) : NULL;
    fhw_leave(&C);
    if (h == NULL) return NVML_ERROR_UNKNOWN;
    *out = h;
    return NVML_SUCCESS;
}

static nvmlReturn_t create_gi_target(fhw_ctx_t *c, unsigned int profile_id, nvmlGpuInstance_t *out, target_t *t) {
    CHECK_PTR(out);
    if (!c->g->mig_capable || !c->g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if (profile_by(c, profile_id, 1) == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return target_of(c, t);
}

static nvmlReturn_t create_gi(nvmlDevice_t device, unsigned int profile_id, const nvmlGpuInstancePlacement_t *placement,
                              nvmlGpuInstance_t *out) {
    target_t t;
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter_dev(&C, device, 0);
    if (r != NVML_SUCCESS) return r;
    r = create_gi_target(&C, profile_id, out, &t);
    const fhw_mig_profile_t *p = r == NVML_SUCCESS ? profile_by(&C, profile_id, 1) : NULL;
    if (p != NULL && placement != NULL && placement->size != p->placement_size) r = NVML_ERROR_INVALID_ARGUMENT;
    fhw_leave(&C);
    if (r != NVML_SUCCESS) return r;
    char path[256];
    snprintf(path, sizeof path, "/v1/nodes/%s/gpus/%s/mig/gpu-instances", t.node, t.gpu);
    long long id = -1;
    r = agent_create(path, profile_id, placement ? &placement->start : NULL, &id);
    return r == NVML_SUCCESS ? find_gi(&t, (unsigned int)id, out) : r;
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstance) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    return create_gi(device, profileId, NULL, gpuInstance);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *gpuInstance) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (placement == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return create_gi(device, profileId, placement, gpuInstance);
}

static nvmlReturn_t gi_target(fhw_ctx_t *c, target_t *t) {
    nvmlReturn_t r = target_of(c, t);
    t->gi = c->gi->id;
    return r;
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    target_t t;
    fhw_ctx_t C;
    nvmlReturn_t r = gi_enter(&C, gpuInstance);
    if (r != NVML_SUCCESS) return r;
    r = gi_target(&C, &t);
    fhw_leave(&C);
    if (r != NVML_SUCCESS) return r;
    char path[256];
    snprintf(path, sizeof path, "/v1/nodes/%s/gpus/%s/mig/gpu-instances/%u", t.node, t.gpu, t.gi);
    return agent_change("DELETE", path, NULL, NULL);
}

static nvmlReturn_t find_ci(const target_t *t, unsigned int id, nvmlComputeInstance_t *out) {
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter_dev(&C, fhw_device_handle(t->dev), 0);
    if (r != NVML_SUCCESS) return r;
    const fhw_gi_t *gi = gi_by_id(&C, t->gi);
    nvmlComputeInstance_t h = gi ? ci_by_id(&C, gi, id) : NULL;
    fhw_leave(&C);
    if (h == NULL) return NVML_ERROR_UNKNOWN;
    *out = h;
    return NVML_SUCCESS;
}

static nvmlReturn_t create_ci_target(fhw_ctx_t *c, unsigned int profile, nvmlComputeInstance_t *out, target_t *t) {
    CHECK_PTR(out);
    const fhw_ci_profile_t *p;
    nvmlReturn_t r = ci_lookup(c, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &p);
    return r == NVML_SUCCESS ? gi_target(c, t) : r;
}

static nvmlReturn_t create_ci(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                              const nvmlComputeInstancePlacement_t *placement, nvmlComputeInstance_t *out) {
    target_t t;
    fhw_ctx_t C;
    nvmlReturn_t r = gi_enter(&C, gpuInstance);
    if (r != NVML_SUCCESS) return r;
    r = create_ci_target(&C, profile, out, &t);
    const fhw_ci_profile_t *p = r == NVML_SUCCESS ? ci_profile_of(&C, C.gi, profile) : NULL;
    if (p != NULL && placement != NULL && placement->size != p->slice_count) r = NVML_ERROR_INVALID_ARGUMENT;
    fhw_leave(&C);
    if (r != NVML_SUCCESS) return r;
    char path[256];
    snprintf(path, sizeof path, "/v1/nodes/%s/gpus/%s/mig/gpu-instances/%u/compute-instances", t.node, t.gpu, t.gi);
    long long id = -1;
    r = agent_create(path, profile, placement ? &placement->start : NULL, &id);
    return r == NVML_SUCCESS ? find_ci(&t, (unsigned int)id, out) : r;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t *computeInstance) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    return create_ci(gpuInstance, profileId, NULL, computeInstance);
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                               const nvmlComputeInstancePlacement_t *placement,
                                                               nvmlComputeInstance_t *computeInstance) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (placement == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return create_ci(gpuInstance, profileId, placement, computeInstance);
}

static nvmlReturn_t ci_target(fhw_ctx_t *c, target_t *t) {
    nvmlReturn_t r = target_of(c, t);
    t->gi = c->m->gpu_instance_id;
    t->ci = c->m->compute_instance_id;
    return r;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    int id = ci_id_of(computeInstance);
    if (id < 0) return NVML_ERROR_INVALID_ARGUMENT;
    target_t t;
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter_dev(&C, fhw_mig_device_handle(id), FHW_ALLOW_MIG);
    if (r != NVML_SUCCESS) return r;
    r = ci_target(&C, &t);
    fhw_leave(&C);
    if (r != NVML_SUCCESS) return r;
    char path[256];
    snprintf(path, sizeof path, "/v1/nodes/%s/gpus/%s/mig/gpu-instances/%u/compute-instances/%u", t.node, t.gpu, t.gi,
             t.ci);
    return agent_change("DELETE", path, NULL, NULL);
}
