/*
 * Events: the snapshot carries the node's recent events (oldest first, each with the agent's sequence number).
 * An event set remembers, per device, the registered event types and the sequence number at registration,
 * and the last sequence number it delivered; a wait delivers the next matching event, then reports a lost
 * GPU, else sleeps on inotify (the writer closes the snapshot after an update in place, or renames a new one into
 * the directory) until the timeout.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <unistd.h>

#define FHW_EVENTSET_MAGIC 0x66687765u
#define SUPPORTED_EVENTS                                                                                \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState |           \
     nvmlEventTypeXidCriticalError | nvmlEventTypeClock | nvmlEventTypePowerSourceChange)
#define POLL_FALLBACK_MS 2
#define POLL_CAP_MS 100

struct nvmlEventSet_st {
    uint32_t magic;
    pthread_mutex_t lock;
    unsigned long long mask[FHW_MAX_GPUS];
    uint64_t since[FHW_MAX_GPUS];
    uint64_t cursor;
    int inotify_fd;
    struct nvmlEventSet_st *next;
};

/* Live sets, so a stale or foreign handle is refused instead of dereferenced. */
static pthread_mutex_t g_sets_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvmlEventSet_st *g_sets;

static int set_live(nvmlEventSet_t set) {
    int found = 0;
    pthread_mutex_lock(&g_sets_lock);
    for (struct nvmlEventSet_st *s = g_sets; s; s = s->next)
        if (s == set) {
            found = s->magic == FHW_EVENTSET_MAGIC;
            break;
        }
    pthread_mutex_unlock(&g_sets_lock);
    return found;
}

static nvmlReturn_t e_create(fhw_ctx_t *c, nvmlEventSet_t *out) {
    if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *set = calloc(1, sizeof *set);
    if (set == NULL) return NVML_ERROR_MEMORY;
    set->magic = FHW_EVENTSET_MAGIC;
    pthread_mutex_init(&set->lock, NULL);
    set->cursor = c->s->hdr->event_last_seq;
    set->inotify_fd = -1;
    pthread_mutex_lock(&g_sets_lock);
    set->next = g_sets;
    g_sets = set;
    pthread_mutex_unlock(&g_sets_lock);
    *out = set;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) { FHW_SYS_CALL(e_create(&C, set)); }

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    pthread_mutex_lock(&g_sets_lock);
    struct nvmlEventSet_st **pp = &g_sets;
    while (*pp && *pp != set) pp = &(*pp)->next;
    if (*pp == NULL) {
        pthread_mutex_unlock(&g_sets_lock);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *pp = set->next;
    pthread_mutex_unlock(&g_sets_lock);
    pthread_mutex_lock(&set->lock);
    set->magic = 0;
    if (set->inotify_fd >= 0) close(set->inotify_fd);
    pthread_mutex_unlock(&set->lock);
    pthread_mutex_destroy(&set->lock);
    free(set);
    return NVML_SUCCESS;
}

static nvmlReturn_t e_supported(fhw_ctx_t *c, unsigned long long *types) {
    if (types == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *types = SUPPORTED_EVENTS | (c->g->mig_capable ? nvmlEventMigConfigChange : 0);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    FHW_DEV_CALL(device, 0, e_supported(&C, eventTypes));
}

static nvmlReturn_t e_register(fhw_ctx_t *c, unsigned long long types, nvmlEventSet_t set) {
    if (!set_live(set)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long supported = SUPPORTED_EVENTS | (c->g->mig_capable ? nvmlEventMigConfigChange : 0);
    if (types & ~supported) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&set->lock);
    if (set->mask[c->dev] == 0) set->since[c->dev] = c->s->hdr->event_last_seq;
    set->mask[c->dev] |= types;
    pthread_mutex_unlock(&set->lock);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
    FHW_DEV_CALL(device, 0, e_register(&C, eventTypes, set));
}

/* Visible device id of a snapshot slot, or -1. */
static int dev_of_slot(const fhw_snap_t *s, uint32_t slot) {
    const fhw_visible_t *vis = fhw_visible();
    for (int d = 0; d < vis->count; d++)
        if (s->dev_slot[d] == (int)slot) return d;
    return -1;
}

/* One look at the current snapshot: SUCCESS with an event (and, in *stamp, when the agent raised it: microseconds
 * of the Unix epoch), GPU_IS_LOST, another error, or TIMEOUT (nothing). */
static nvmlReturn_t e_poll_once(nvmlEventSet_t set, nvmlEventData_t *out, unsigned long long *stamp) {
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter(&C);
    if (r == NVML_ERROR_DRIVER_NOT_LOADED) return NVML_ERROR_GPU_IS_LOST;
    if (r != NVML_SUCCESS) return r;
    r = NVML_ERROR_TIMEOUT;
    pthread_mutex_lock(&set->lock);
    const fhw_header_t *h = C.s->hdr;
    for (uint32_t i = 0; i < h->event_count; i++) {
        const fhw_event_t *e = &C.s->events[i];
        if (e->seq <= set->cursor) continue;
        int d = dev_of_slot(C.s, e->gpu);
        if (d < 0 || !(set->mask[d] & e->event_type) || e->seq <= set->since[d]) continue;
        out->device = fhw_device_handle(d);
        out->eventType = e->event_type;
        out->eventData = e->event_data;
        out->gpuInstanceId = e->gpu_instance_id;
        out->computeInstanceId = e->compute_instance_id;
        *stamp = e->time_us > 0 ? (unsigned long long)e->time_us : 0;
        set->cursor = e->seq;
        r = NVML_SUCCESS;
        break;
    }
    if (r == NVML_ERROR_TIMEOUT) {
        const fhw_visible_t *vis = fhw_visible();
        for (int d = 0; d < vis->count; d++) {
            if (!set->mask[d]) continue;
            int slot = C.s->dev_slot[d];
            if (slot < 0 || C.s->gpus[slot].lost) {
                r = NVML_ERROR_GPU_IS_LOST;
                break;
            }
        }
    }
    pthread_mutex_unlock(&set->lock);
    fhw_leave(&C);
    return r;
}

/* Watch the snapshot's directory: the writer closes the file after an update in place (IN_CLOSE_WRITE) or renames
   a new snapshot into it (IN_MOVED_TO). */
static int e_watch(nvmlEventSet_t set) {
    pthread_mutex_lock(&set->lock);
    if (set->inotify_fd < 0) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", fhw_snapshot_path());
        char *slash = strrchr(dir, '/');
        if (slash == dir) slash[1] = '\0';
        else if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
        int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (fd >= 0 && inotify_add_watch(fd, dir, IN_MOVED_TO | IN_CREATE | IN_CLOSE_WRITE | IN_DELETE | IN_ATTRIB) < 0) {
            close(fd);
            fd = -1;
        }
        set->inotify_fd = fd;
    }
    int fd = set->inotify_fd;
    pthread_mutex_unlock(&set->lock);
    return fd;
}

static nvmlReturn_t e_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned long long *stamp,
                           unsigned int timeoutms) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (data == NULL || !set_live(set)) return NVML_ERROR_INVALID_ARGUMENT;
    int fd = e_watch(set);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int force = 0;
    for (;;) {
        fhw_refresh(force);
        nvmlReturn_t r = e_poll_once(set, data, stamp);
        if (r != NVML_ERROR_TIMEOUT) return r;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        /* whole milliseconds of the whole difference: each part truncated alone counted a wait 0.4 ms short of
           its timeout as done (a negative nanosecond part rounds toward zero, i.e. up) */
        long long elapsed = ((long long)(now.tv_sec - start.tv_sec) * 1000000000LL + (now.tv_nsec - start.tv_nsec))
                            / 1000000;
        if (elapsed >= (long long)timeoutms) return NVML_ERROR_TIMEOUT;
        long long left = (long long)timeoutms - elapsed;
        if (fd >= 0) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int n = poll(&p, 1, (int)(left < POLL_CAP_MS ? left : POLL_CAP_MS));
            if (n > 0) {
                char buf[4096];
                while (read(fd, buf, sizeof buf) > 0) {
                }
            }
        } else {
            struct timespec ts = {0, POLL_FALLBACK_MS * 1000000L};
            nanosleep(&ts, NULL);
        }
        force = 1;
        if (!set_live(set)) return NVML_ERROR_INVALID_ARGUMENT; /* freed by another thread */
    }
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    unsigned long long stamp;
    return e_wait(set, data, &stamp, timeoutms);
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, fhwEventDataV1_t *data, unsigned int timeoutms) {
    if (data == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlEventData_t full;
    unsigned long long stamp;
    nvmlReturn_t r = e_wait(set, &full, &stamp, timeoutms);
    if (r == NVML_SUCCESS) {
        data->device = full.device;
        data->eventType = full.eventType;
        data->eventData = full.eventData;
    }
    return r;
}

/* v3 (615): the caller's struct carries the timeout and gets the event with its GPU named by UUID. */
nvmlReturn_t nvmlEventSetWait_v3(nvmlEventSet_t set, nvmlEventSetWait_v3_t *params) {
    FHW_GATE();
    if (params == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlEventData_t full;
    unsigned long long stamp = 0;
    nvmlReturn_t r = e_wait(set, &full, &stamp, params->timeoutMs);
    if (r != NVML_SUCCESS) return r;
    unsigned int timeout = params->timeoutMs;
    memset(params, 0, sizeof *params);
    params->timeoutMs = timeout;
    int dev = fhw_device_id_of(full.device);
    const fhw_visible_t *vis = fhw_visible();
    if (dev >= 0) snprintf(params->uuid, sizeof params->uuid, "%s", vis->uuid[dev]);
    params->eventType = full.eventType;
    params->eventData = full.eventData;
    params->gpuInstanceId = full.gpuInstanceId;
    params->computeInstanceId = full.computeInstanceId;
    params->timestampUsec = stamp; /* when the event happened (nvml.h: "Event timestamp"), not when it was read */
    return NVML_SUCCESS;
}

/*
 * System event sets (575): driver bind/unbind events of the whole system. Nothing binds or unbinds a GPU in the
 * model, so a wait ends in TIMEOUT; sets are checked like device event sets so a stale handle is refused.
 */
#define FHW_SYSEVENTSET_MAGIC 0x66687773u
#define SYSTEM_EVENTS (nvmlSystemEventTypeGpuDriverUnbind | nvmlSystemEventTypeGpuDriverBind)

struct nvmlSystemEventSet_st {
    uint32_t magic;
    unsigned long long mask;
    struct nvmlSystemEventSet_st *next;
};
static struct nvmlSystemEventSet_st *g_system_sets;

static int system_set_live(nvmlSystemEventSet_t set) {
    int found = 0;
    pthread_mutex_lock(&g_sets_lock);
    for (struct nvmlSystemEventSet_st *s = g_system_sets; s; s = s->next)
        if (s == set) found = s->magic == FHW_SYSEVENTSET_MAGIC;
    pthread_mutex_unlock(&g_sets_lock);
    return found;
}

static const fhw_struct_version_t sys_create_versions[] = {{nvmlSystemEventSetCreateRequest_v1, 575}};
static nvmlReturn_t se_create(fhw_ctx_t *c, nvmlSystemEventSetCreateRequest_v1_t *req) {
    nvmlReturn_t r = FHW_VERSIONS(c, req, sys_create_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    struct nvmlSystemEventSet_st *set = calloc(1, sizeof *set);
    if (set == NULL) return NVML_ERROR_MEMORY;
    set->magic = FHW_SYSEVENTSET_MAGIC;
    pthread_mutex_lock(&g_sets_lock);
    set->next = g_system_sets;
    g_system_sets = set;
    pthread_mutex_unlock(&g_sets_lock);
    req->set = set;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemEventSetCreate(nvmlSystemEventSetCreateRequest_v1_t *request) {
    FHW_SYS_CALL(se_create(&C, request));
}

static const fhw_struct_version_t sys_free_versions[] = {{nvmlSystemEventSetFreeRequest_v1, 575}};
static nvmlReturn_t se_free(fhw_ctx_t *c, nvmlSystemEventSetFreeRequest_v1_t *req) {
    nvmlReturn_t r = FHW_VERSIONS(c, req, sys_free_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    pthread_mutex_lock(&g_sets_lock);
    struct nvmlSystemEventSet_st **pp = &g_system_sets;
    while (*pp && *pp != req->set) pp = &(*pp)->next;
    if (*pp == NULL) {
        pthread_mutex_unlock(&g_sets_lock);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    struct nvmlSystemEventSet_st *set = *pp;
    *pp = set->next;
    pthread_mutex_unlock(&g_sets_lock);
    set->magic = 0;
    free(set);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemEventSetFree(nvmlSystemEventSetFreeRequest_v1_t *request) { FHW_SYS_CALL(se_free(&C, request)); }

static const fhw_struct_version_t sys_register_versions[] = {{nvmlSystemRegisterEventRequest_v1, 575}};
static nvmlReturn_t se_register(fhw_ctx_t *c, nvmlSystemRegisterEventRequest_v1_t *req) {
    nvmlReturn_t r = FHW_VERSIONS(c, req, sys_register_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    if (!system_set_live(req->set)) return NVML_ERROR_INVALID_ARGUMENT;
    if (req->eventTypes & ~SYSTEM_EVENTS) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_sets_lock);
    req->set->mask |= req->eventTypes;
    pthread_mutex_unlock(&g_sets_lock);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemRegisterEvents(nvmlSystemRegisterEventRequest_v1_t *request) {
    FHW_SYS_CALL(se_register(&C, request));
}

static const fhw_struct_version_t sys_wait_versions[] = {{nvmlSystemEventSetWaitRequest_v1, 575}};
static nvmlReturn_t se_check_wait(fhw_ctx_t *c, nvmlSystemEventSetWaitRequest_v1_t *req) {
    nvmlReturn_t r = FHW_VERSIONS(c, req, sys_wait_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    if (!system_set_live(req->set) || (req->dataSize > 0 && req->data == NULL)) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemEventSetWait(nvmlSystemEventSetWaitRequest_v1_t *request) {
    FHW_GATE();
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter(&C);
    if (r != NVML_SUCCESS) return r;
    r = se_check_wait(&C, request);
    fhw_leave(&C);
    if (r != NVML_SUCCESS) return r;
    /* No driver bind or unbind happens to a modelled GPU: wait out the timeout (outside the snapshot). */
    struct timespec ts = {(time_t)(request->timeoutms / 1000), (long)(request->timeoutms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    request->numEvent = 0;
    return NVML_ERROR_TIMEOUT;
}
