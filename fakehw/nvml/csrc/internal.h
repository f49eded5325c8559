/*
 * Internals shared by the shim's translation units.
 *
 * The shim answers NVML calls from a snapshot file the Python side writes (layout in snapshot_layout.h,
 * generated from fakehw/nvml/layout.py). It never derives anything: every answer is a field of the snapshot,
 * at most filtered (visible devices, nearest GPUs at a level) or copied into the caller's struct.
 *
 * Concurrency: the current snapshot is one immutable heap object (fhw_snap_t) behind an atomic pointer.
 * A call publishes the pointer it uses in its thread's hazard slot; a reload swaps the pointer and frees an
 * old snapshot only when no hazard slot names it. Readers therefore never lock, and a snapshot is never freed
 * under a reader.
 */
#ifndef FAKEHW_INTERNAL_H
#define FAKEHW_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "nvml_abi.h"
#include "snapshot_layout.h"

/* Argument checks every getter starts with. */
#define CHECK_PTR(p)                                         \
    do {                                                     \
        if ((p) == NULL) return NVML_ERROR_INVALID_ARGUMENT; \
    } while (0)

#define FHW_DEFAULT_SNAPSHOT "/var/lib/fakehw/nvml.snapshot"
#define FHW_MAX_SNAPSHOT_BYTES (64u << 20)
#define FHW_RECHECK_MS 10
#define FHW_REPLACED 0xFFFFFFFFu /* the superseded word of a file a newer one was renamed over */

/* An immutable, validated snapshot (or a "broken" one that only carries the error to answer with). */
typedef struct fhw_snap {
    nvmlReturn_t status;
    uint8_t *data;
    size_t size;
    const fhw_header_t *hdr;
    const fhw_gpu_t *gpus;
    const fhw_mig_t *migs;
    const fhw_mig_profile_t *mig_profiles;
    const fhw_process_t *processes;
    const fhw_event_t *events;
    const fhw_nic_t *nics;
    const fhw_gi_t *gis;
    const fhw_ci_profile_t *ci_profiles;
    const fhw_platform_t *platform; /* one per GPU slot, or none (header platform_count 0) */
    /* The first page of the file, mapped shared, to see the writer's `superseded` word change: the file's update
       counter (even: whole; odd: being changed in place; FHW_REPLACED: a newer file was renamed over it). */
    void *map;
    size_t map_len;
    const volatile uint32_t *superseded;
    uint32_t seq; /* the word's value when this copy was read: any other value means the file changed since */
    /* Identity of the file this came from, to notice a replacement by stat(). */
    int have_identity;
    dev_t st_dev;
    ino_t st_ino;
    off_t st_size;
    struct timespec st_mtim;
    _Atomic int64_t checked_ms;
    /* Visible device id -> GPU slot of this snapshot (-1: gone). */
    int dev_slot[FHW_MAX_GPUS];
    /* MIG device (= compute instance) handle id -> MIG record (-1: gone) and the visible id of its GPU; the
       reverse (record -> handle id, -1: its GPU is not visible). Same for GPU instance handles. Filled by
       fhw_mig_map when the snapshot is loaded: handles stay stable across generations (see mig.c). */
    int mig_slot[FHW_MAX_MIGS];
    int mig_dev[FHW_MAX_MIGS];
    int mig_handle[FHW_MAX_MIGS];
    int gi_slot[FHW_MAX_GIS];
    int gi_dev[FHW_MAX_GIS];
    int gi_handle[FHW_MAX_GIS];
    struct fhw_snap *retired_next;
} fhw_snap_t;

/* Handles handed to callers point into these static tables, so they stay valid across generations. Only a
 * handle's address is ever read: which table it points into and at which index (fhw_device_id_of, fhw_mig_id_of,
 * gi_id_of, ci_id_of); what it points at is opaque to callers, as NVML's handles are, and never written. */
typedef struct nvmlDevice_st {
    int unused;
} fhw_device_t;

typedef struct fhw_mig_handle {
    int unused;
} fhw_mig_handle_t;

typedef struct fhw_visible {
    int count;
    char uuid[FHW_MAX_GPUS][96];
} fhw_visible_t;

/* GPU instance and compute instance handles (addresses only, as above). A compute instance handle has the index of
 * its MIG device's handle. */
struct nvmlGpuInstance_st {
    int unused;
};
struct nvmlComputeInstance_st {
    int unused;
};

extern fhw_device_t fhw_devices[FHW_MAX_GPUS];
extern fhw_mig_handle_t fhw_migs[FHW_MAX_MIGS];
extern struct nvmlGpuInstance_st fhw_gis[FHW_MAX_GIS];
extern struct nvmlComputeInstance_st fhw_cis[FHW_MAX_MIGS];

/* What one call works with. */
typedef struct fhw_ctx {
    fhw_snap_t *s;
    const fhw_gpu_t *g;   /* the GPU (parent GPU for a MIG device) */
    const fhw_mig_t *m;   /* the MIG device, or NULL for a physical GPU */
    const fhw_gi_t *gi;   /* the GPU instance of a GPU instance call, or NULL */
    int dev;              /* visible device id (the parent's for a MIG device) */
    int mig;              /* MIG handle id or -1 */
    int slot;             /* GPU slot in the snapshot */
} fhw_ctx_t;

#define FHW_ALLOW_MIG 1   /* the call also accepts MIG device handles */
#define FHW_ALLOW_LOST 2  /* the call answers for a GPU that fell off the bus */

nvmlReturn_t fhw_enter(fhw_ctx_t *c);
nvmlReturn_t fhw_enter_dev(fhw_ctx_t *c, nvmlDevice_t h, int flags);
void fhw_leave(fhw_ctx_t *c);
int fhw_initialized(void);
const fhw_visible_t *fhw_visible(void);
nvmlDevice_t fhw_device_handle(int id);
nvmlDevice_t fhw_mig_device_handle(int id);
int fhw_mig_id_of(nvmlDevice_t h);     /* MIG handle id or -1 */
int fhw_device_id_of(nvmlDevice_t h);  /* device id or -1 (not a physical device handle) */
const char *fhw_snapshot_path(void);
/* nvmlTemperatureSensors_t: SUCCESS for the GPU die sensor, NOT_SUPPORTED for GPU_MAX, INVALID_ARGUMENT past it. */
nvmlReturn_t fhw_temperature_sensor(unsigned int sensor);
/* Re-check the snapshot file now (events: after a wake-up) and reload it when it changed. */
void fhw_refresh(int force);
int64_t fhw_now_ms(void);
int fhw_trace_enabled(void);
void fhw_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* MIG handles (mig.c): reset the handle registry (nvmlInit), map a freshly loaded snapshot's MIG devices and GPU
   instances to handle ids (called with the reload lock held, after dev_slot is filled). */
void fhw_mig_reset(void);
void fhw_mig_map(fhw_snap_t *s);
int fhw_gi_id_of(nvmlGpuInstance_t gi); /* handle id or -1 */

/* The node agent's control API (agentc.c): send one JSON request on $FAKEHW_AGENT_SOCKET. Returns the HTTP status
   (resp holds the body, NUL-terminated) or -1 when the agent cannot be reached (why says so). */
int fhw_agent_request(const char *method, const char *path, const char *body, char *resp, size_t resp_cap,
                      const char **why);
/* The integer value of "key": N in a JSON answer (0 and found=0 when absent). */
long long fhw_json_int(const char *json, const char *key, int *found);

/* Validation and loading (snapshot.c), callable from the fuzz harness. */
nvmlReturn_t fhw_validate(const uint8_t *data, size_t size, const char **why);
uint32_t fhw_crc32(const uint8_t *data, size_t size);

typedef struct {
    unsigned int domain, bus, device, function;
} fhw_pci_addr_t;
int fhw_parse_bus_id(const char *text, fhw_pci_addr_t *out);

/* NVLink helpers shared with the field values (links.c): the link record (NOT_SUPPORTED when the GPU has no such
   link), and an error counter net of this process's resets. */
nvmlReturn_t fhw_link_of(fhw_ctx_t *c, unsigned int link, const fhw_link_t **out);
uint64_t fhw_link_error(fhw_ctx_t *c, const fhw_link_t *k, unsigned int link, unsigned int counter);
uint64_t fhw_violation_ns(fhw_ctx_t *c, unsigned int policy);
/* The GPU's PCIe byte counters now (gpm.c: fields 197, 198 and GPM samples); returns the monotonic clock's now. */
int64_t fhw_pcie_bytes(const fhw_ctx_t *c, unsigned long long *tx, unsigned long long *rx);

/* Copy a NUL-terminated field into a caller buffer of `length` bytes (INSUFFICIENT_SIZE when it won't fit). */
nvmlReturn_t fhw_copy_str(char *dst, unsigned int length, const char *src, size_t src_cap);

/* Public entry points the shim itself calls. */
nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);

/*
 * Driver branches. The snapshot names the driver branch (535 ... 615); an entry point newer than it answers
 * NVML_ERROR_FUNCTION_NOT_FOUND, as a loader finds nothing in that branch's library. fhw_since() looks a
 * symbol up in the generated table (symbol_since.c, from nvml_symbols.txt); FHW_GATE() does it once per entry
 * point (by __func__) and then costs one load and compare per call.
 */
#define FHW_OLDEST_BRANCH 535
extern _Atomic int fhw_branch_now; /* branch of the current snapshot; 0 before nvmlInit */
int fhw_since(const char *name);   /* first branch of an exported symbol; 0 if it is not in the table */
nvmlReturn_t fhw_gate(int since);  /* UNINITIALIZED, FUNCTION_NOT_FOUND or SUCCESS */

#define FHW_GATE()                                                                                    \
    do {                                                                                              \
        static _Atomic int since_ = -1;                                                               \
        int s_ = atomic_load_explicit(&since_, memory_order_relaxed);                                 \
        if (s_ < 0) {                                                                                 \
            s_ = fhw_since(__func__);                                                                 \
            atomic_store_explicit(&since_, s_, memory_order_relaxed);                                 \
        }                                                                                             \
        if (s_ > FHW_OLDEST_BRANCH) {                                                                 \
            nvmlReturn_t g_ = fhw_gate(s_);                                                           \
            if (g_ != NVML_SUCCESS) return g_;                                                        \
        }                                                                                             \
    } while (0)

/* Topics whose answer the snapshot decides (GpuRecord.answers, see fakehw/nvml/support.py). */
#define FHW_ANSWER(c, topic) ((nvmlReturn_t)(c)->g->answers[(topic)])
#define FHW_REQUIRE(c, topic)                                       \
    do {                                                            \
        nvmlReturn_t a_ = FHW_ANSWER((c), (topic));                 \
        if (a_ != NVML_SUCCESS) return a_;                          \
    } while (0)
#define FHW_BRANCH(c) ((int)(c)->s->hdr->driver_branch)

/* Check a versioned struct's version word (sizeof | version << 24) against the versions this branch takes. */
#define FHW_CHECK_VERSION(p, expected)                                                                \
    do {                                                                                              \
        if ((p) == NULL) return NVML_ERROR_INVALID_ARGUMENT;                                          \
        if (*(const unsigned int *)(p) != (expected)) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;    \
    } while (0)

/* A struct version a branch accepts: its tag (sizeof | version << 24) and the first branch that knows it. */
typedef struct {
    unsigned int tag;
    int since;
} fhw_struct_version_t;

/* The version word of `p` is one this branch accepts (ARGUMENT_VERSION_MISMATCH otherwise); returns the tag. */
static inline nvmlReturn_t fhw_check_versions(const fhw_ctx_t *c, const void *p, const fhw_struct_version_t *ok,
                                              size_t n, unsigned int *tag) {
    if (p == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int v;
    memcpy(&v, p, sizeof v);
    for (size_t i = 0; i < n; i++)
        if (v == ok[i].tag && FHW_BRANCH(c) >= ok[i].since) {
            if (tag) *tag = v;
            return NVML_SUCCESS;
        }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}
#define FHW_VERSIONS(c, p, table, tag) fhw_check_versions((c), (p), (table), sizeof(table) / sizeof((table)[0]), (tag))

/* Function-call bodies: gate, enter, run, leave. */
#define FHW_DEV_CALL(handle, flags, expr)                                                             \
    do {                                                                                              \
        FHW_GATE();                                                                                   \
        fhw_ctx_t C;                                                                                  \
        nvmlReturn_t r_ = fhw_enter_dev(&C, (handle), (flags));                                       \
        if (r_ == NVML_SUCCESS) {                                                                     \
            r_ = (expr);                                                                              \
            fhw_leave(&C);                                                                            \
        }                                                                                             \
        return r_;                                                                                    \
    } while (0)

#define FHW_SYS_CALL(expr)                                                                            \
    do {                                                                                              \
        FHW_GATE();                                                                                   \
        fhw_ctx_t C;                                                                                  \
        nvmlReturn_t r_ = fhw_enter(&C);                                                              \
        if (r_ == NVML_SUCCESS) {                                                                     \
            r_ = (expr);                                                                              \
            fhw_leave(&C);                                                                            \
        }                                                                                             \
        return r_;                                                                                    \
    } while (0)

#endif
