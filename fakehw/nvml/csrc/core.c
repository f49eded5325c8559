/*
 * Core of the shim: loading and validating the snapshot, noticing a new generation, hazard-pointer
 * reclamation, nvmlInit/nvmlShutdown, device visibility and handle bookkeeping.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

fhw_device_t fhw_devices[FHW_MAX_GPUS];
fhw_mig_handle_t fhw_migs[FHW_MAX_MIGS];
struct nvmlGpuInstance_st fhw_gis[FHW_MAX_GIS];
struct nvmlComputeInstance_st fhw_cis[FHW_MAX_MIGS];

static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_reload_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_refcount;
static _Atomic(fhw_snap_t *) g_current;
static fhw_snap_t *g_retired; /* under g_reload_lock */
static char g_path[PATH_MAX];
static fhw_visible_t g_vis;
static int g_trace;

/* ------------------------------------------------------------------------------------------ helpers */

int64_t fhw_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int fhw_trace_enabled(void) { return g_trace; }

void fhw_trace(const char *fmt, ...) {
    if (!g_trace) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("fakehw-nvml: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

nvmlReturn_t fhw_copy_str(char *dst, unsigned int length, const char *src, size_t src_cap) {
    if (dst == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strnlen(src, src_cap);
    if ((size_t)length < n + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return NVML_SUCCESS;
}

const char *fhw_snapshot_path(void) { return g_path; }
const fhw_visible_t *fhw_visible(void) { return &g_vis; }
int fhw_initialized(void) { return atomic_load_explicit(&g_refcount, memory_order_acquire) > 0; }

nvmlDevice_t fhw_device_handle(int id) { return (nvmlDevice_t)&fhw_devices[id]; }
nvmlDevice_t fhw_mig_device_handle(int id) { return (nvmlDevice_t)(void *)&fhw_migs[id]; }

int fhw_device_id_of(nvmlDevice_t h) {
    uintptr_t p = (uintptr_t)h, b = (uintptr_t)fhw_devices;
    if (p < b || p >= b + sizeof fhw_devices || (p - b) % sizeof(fhw_device_t) != 0) return -1;
    int id = (int)((p - b) / sizeof(fhw_device_t));
    return id < g_vis.count ? id : -1;
}

int fhw_mig_id_of(nvmlDevice_t h) {
    uintptr_t p = (uintptr_t)h, b = (uintptr_t)fhw_migs;
    if (p < b || p >= b + sizeof fhw_migs || (p - b) % sizeof(fhw_mig_handle_t) != 0) return -1;
    return (int)((p - b) / sizeof(fhw_mig_handle_t)); /* valid in a snapshot when its mig_slot[id] >= 0 */
}

/* ------------------------------------------------------------------------------------------ branches */

_Atomic int fhw_branch_now;

typedef struct {
    const char *name;
    int since;
} fhw_since_entry_t;
extern const size_t fhw_since_count;
extern const fhw_since_entry_t fhw_since_table[];

int fhw_since(const char *name) {
    size_t lo = 0, hi = fhw_since_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = strcmp(name, fhw_since_table[mid].name);
        if (cmp == 0) return fhw_since_table[mid].since;
        if (cmp < 0) hi = mid;
        else lo = mid + 1;
    }
    return 0;
}

nvmlReturn_t fhw_gate(int since) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    int branch = atomic_load_explicit(&fhw_branch_now, memory_order_relaxed);
    return branch >= since ? NVML_SUCCESS : NVML_ERROR_FUNCTION_NOT_FOUND;
}

/* What every generated stub does: the branch's answer for a function the shim does not implement. */
nvmlReturn_t fhw_stub(const char *name, int since) {
    nvmlReturn_t r = fhw_gate(since);
    if (r != NVML_SUCCESS) return r;
    fhw_trace("%s is not implemented: NOT_SUPPORTED", name);
    return NVML_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------------------------ CRC-32 */

/* Slicing by 8: table k holds the CRC of a byte followed by k zero bytes, so eight input bytes fold in with
   eight lookups and no per-byte dependency chain (about 8x the byte-at-a-time loop; nvmlInit spent most of its
   time here). Same polynomial and result as zlib's crc32. */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) {
            uint32_t prev = crc_table[t - 1][i];
            crc_table[t][i] = crc_table[0][prev & 0xFF] ^ (prev >> 8);
        }
}

static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        /* little-endian loads assembled bytewise: no alignment or byte-order assumption */
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

uint32_t fhw_crc32(const uint8_t *data, size_t size) {
    static const uint8_t zeros[8];
    pthread_once(&crc_once, crc_init);
    /* The superseded and checksum fields (adjacent, 8 bytes) count as zero. */
    uint32_t crc = crc_update(0, data, FHW_SUPERSEDED_OFFSET);
    crc = crc_update(crc, zeros, 8);
    return crc_update(crc, data + FHW_SUPERSEDED_OFFSET + 8, size - FHW_SUPERSEDED_OFFSET - 8);
}

/* ------------------------------------------------------------------------------------------ validation */

#define NUL_IN(field) (memchr((field), 0, sizeof(field)) != NULL)

static int section_ok(uint64_t offset, uint64_t count, uint64_t rsize, uint64_t expect_rsize, uint64_t size,
                      uint64_t max_count) {
    if (count > max_count) return 0;
    if (count == 0) return 1;
    if (rsize != expect_rsize) return 0;
    if (offset % 8 != 0 || offset < sizeof(fhw_header_t) || offset > size) return 0;
    return count * rsize <= size - offset; /* no overflow: count and rsize are small */
}

static int gpu_ok(const fhw_header_t *h, const fhw_gpu_t *g) {
    if (!NUL_IN(g->uuid) || !NUL_IN(g->name) || !NUL_IN(g->serial) || !NUL_IN(g->board_part_number) ||
        !NUL_IN(g->vbios_version) || !NUL_IN(g->inforom_image) || !NUL_IN(g->inforom_oem) ||
        !NUL_IN(g->inforom_ecc) || !NUL_IN(g->inforom_power) || !NUL_IN(g->gsp_firmware) ||
        !NUL_IN(g->bus_id) || !NUL_IN(g->bus_id_legacy) || !NUL_IN(g->model_name) ||
        !NUL_IN(g->gpu_part_number))
        return 0;
    if (g->uuid[0] == '\0') return 0;
    if (g->nvlink_count > FHW_MAX_LINKS) return 0;
    if (g->mig_count > FHW_MAX_MIG_PER_GPU || (uint64_t)g->mig_first + g->mig_count > h->mig_count) return 0;
    if ((uint64_t)g->mig_profile_first + g->mig_profile_count > h->mig_profile_count) return 0;
    if ((uint64_t)g->process_first + g->process_count > h->process_count) return 0;
    if (g->pstate > 15 && g->pstate != NVML_PSTATE_UNKNOWN) return 0;
    for (int c = 0; c < FHW_P2P_CAPS; c++)
        for (int j = 0; j < FHW_MAX_GPUS; j++)
            if (g->p2p[c][j] > NVML_P2P_STATUS_UNKNOWN) return 0;
    for (int l = 0; l < FHW_MAX_LINKS; l++) {
        const fhw_link_t *k = &g->links[l];
        if (!NUL_IN(k->remote_bus_id) || !NUL_IN(k->remote_bus_id_legacy)) return 0;
    }
    return 1;
}

nvmlReturn_t fhw_validate(const uint8_t *data, size_t size, const char **why) {
#define BAD(code, text)            \
    do {                           \
        if (why) *why = (text);    \
        return (code);             \
    } while (0)
    if (size < sizeof(fhw_header_t)) BAD(NVML_ERROR_UNKNOWN, "shorter than the header");
    if (size > FHW_MAX_SNAPSHOT_BYTES) BAD(NVML_ERROR_UNKNOWN, "larger than the maximum size");
    if ((uintptr_t)data % 8 != 0) BAD(NVML_ERROR_UNKNOWN, "misaligned buffer");
    const fhw_header_t *h = (const fhw_header_t *)data;
    if (memcmp(h->magic, FHW_MAGIC, sizeof FHW_MAGIC) != 0) BAD(NVML_ERROR_UNKNOWN, "bad magic");
    if (h->byte_order != FHW_BYTE_ORDER_MARK) BAD(NVML_ERROR_UNKNOWN, "wrong byte order");
    if (h->format_version != FHW_FORMAT_VERSION)
        BAD(NVML_ERROR_LIB_RM_VERSION_MISMATCH, "snapshot format version differs from the library's");
    if (h->header_size != sizeof(fhw_header_t)) BAD(NVML_ERROR_UNKNOWN, "header size differs");
    if (h->total_size != size) BAD(NVML_ERROR_UNKNOWN, "size differs from the header's (truncated?)");
    if (fhw_crc32(data, size) != h->checksum) BAD(NVML_ERROR_UNKNOWN, "checksum mismatch");
    if (!NUL_IN(h->driver_version) || !NUL_IN(h->nvml_version) || !NUL_IN(h->hostname) || !NUL_IN(h->node_name) ||
        !NUL_IN(h->profile))
        BAD(NVML_ERROR_UNKNOWN, "unterminated header string");
    if (!section_ok(h->gpu_offset, h->gpu_count, h->gpu_record_size, sizeof(fhw_gpu_t), size, FHW_MAX_GPUS))
        BAD(NVML_ERROR_UNKNOWN, "bad GPU section");
    if (!section_ok(h->mig_offset, h->mig_count, h->mig_record_size, sizeof(fhw_mig_t), size, FHW_MAX_MIGS))
        BAD(NVML_ERROR_UNKNOWN, "bad MIG section");
    if (!section_ok(h->mig_profile_offset, h->mig_profile_count, h->mig_profile_record_size,
                    sizeof(fhw_mig_profile_t), size, FHW_MAX_MIG_PROFILES))
        BAD(NVML_ERROR_UNKNOWN, "bad MIG profile section");
    if (!section_ok(h->process_offset, h->process_count, h->process_record_size, sizeof(fhw_process_t), size,
                    FHW_MAX_PROCESSES))
        BAD(NVML_ERROR_UNKNOWN, "bad process section");
    if (!section_ok(h->event_offset, h->event_count, h->event_record_size, sizeof(fhw_event_t), size,
                    FHW_MAX_EVENTS))
        BAD(NVML_ERROR_UNKNOWN, "bad event section");
    if (!section_ok(h->nic_offset, h->nic_count, h->nic_record_size, sizeof(fhw_nic_t), size, FHW_MAX_NICS))
        BAD(NVML_ERROR_UNKNOWN, "bad NIC section");
    if (!section_ok(h->gi_offset, h->gi_count, h->gi_record_size, sizeof(fhw_gi_t), size, FHW_MAX_GIS))
        BAD(NVML_ERROR_UNKNOWN, "bad GPU instance section");
    if (!section_ok(h->ci_profile_offset, h->ci_profile_count, h->ci_profile_record_size, sizeof(fhw_ci_profile_t),
                    size, FHW_MAX_CI_PROFILES))
        BAD(NVML_ERROR_UNKNOWN, "bad compute instance profile section");
    if (!section_ok(h->platform_offset, h->platform_count, h->platform_record_size, sizeof(fhw_platform_t), size,
                    FHW_MAX_GPUS) ||
        (h->platform_count != 0 && h->platform_count != h->gpu_count))
        BAD(NVML_ERROR_UNKNOWN, "bad platform section");
    const fhw_gpu_t *gpus = (const fhw_gpu_t *)(data + h->gpu_offset);
    for (uint32_t i = 0; i < h->gpu_count; i++)
        if (!gpu_ok(h, &gpus[i])) BAD(NVML_ERROR_UNKNOWN, "bad GPU record");
    const fhw_mig_t *migs = (const fhw_mig_t *)(data + h->mig_offset);
    const fhw_gi_t *gis = (const fhw_gi_t *)(data + h->gi_offset);
    for (uint32_t i = 0; i < h->gi_count; i++)
        if (gis[i].parent >= h->gpu_count || (uint64_t)gis[i].mig_first + gis[i].mig_count > h->mig_count)
            BAD(NVML_ERROR_UNKNOWN, "bad GPU instance record");
    /* A MIG device is a compute instance inside a GPU instance of its own GPU (MIG user guide, "Concepts"; nvml.h's
       nvmlComputeInstanceInfo_t names both the device and the GPU instance, whose own info names the device). */
    for (uint32_t i = 0; i < h->mig_count; i++)
        if (migs[i].parent >= h->gpu_count || !NUL_IN(migs[i].uuid) || !NUL_IN(migs[i].name) ||
            migs[i].uuid[0] == '\0' || migs[i].gi_record >= h->gi_count ||
            gis[migs[i].gi_record].parent != migs[i].parent)
            BAD(NVML_ERROR_UNKNOWN, "bad MIG record");
    const fhw_ci_profile_t *cips = (const fhw_ci_profile_t *)(data + h->ci_profile_offset);
    for (uint32_t i = 0; i < h->ci_profile_count; i++)
        if (cips[i].parent >= h->gpu_count || cips[i].placement_count > FHW_MAX_PLACEMENTS || !NUL_IN(cips[i].name))
            BAD(NVML_ERROR_UNKNOWN, "bad compute instance profile record");
    const fhw_mig_profile_t *profs = (const fhw_mig_profile_t *)(data + h->mig_profile_offset);
    for (uint32_t i = 0; i < h->mig_profile_count; i++)
        if (profs[i].parent >= h->gpu_count || profs[i].placement_count > FHW_MAX_PLACEMENTS ||
            !NUL_IN(profs[i].name))
            BAD(NVML_ERROR_UNKNOWN, "bad MIG profile record");
    const fhw_process_t *procs = (const fhw_process_t *)(data + h->process_offset);
    for (uint32_t i = 0; i < h->process_count; i++)
        if (procs[i].gpu >= h->gpu_count || !NUL_IN(procs[i].name)) BAD(NVML_ERROR_UNKNOWN, "bad process record");
    const fhw_event_t *events = (const fhw_event_t *)(data + h->event_offset);
    for (uint32_t i = 0; i < h->event_count; i++) {
        if (events[i].gpu >= h->gpu_count) BAD(NVML_ERROR_UNKNOWN, "bad event record");
        if (i > 0 && events[i].seq <= events[i - 1].seq) BAD(NVML_ERROR_UNKNOWN, "events out of order");
        if (events[i].seq > h->event_last_seq) BAD(NVML_ERROR_UNKNOWN, "event beyond the last sequence number");
    }
    const fhw_nic_t *nics = (const fhw_nic_t *)(data + h->nic_offset);
    for (uint32_t i = 0; i < h->nic_count; i++)
        if (!NUL_IN(nics[i].name) || !NUL_IN(nics[i].bus_id)) BAD(NVML_ERROR_UNKNOWN, "bad NIC record");
    return NVML_SUCCESS;
#undef BAD
}

/* ------------------------------------------------------------------------------------------ SIGBUS guard */

/* The superseded flag is read through a shared mapping of the snapshot's first page (the data itself is a private
   copy). When the file is truncated under a reader (rewritten in place, `cp backup nvml.snapshot`), touching that
   page raises SIGBUS. This handler takes exactly those faults: it puts an anonymous page flagged "superseded" in
   place of the lost one and returns, so the read completes, the reader reloads the path and answers from what it
   finds there (NVML_ERROR_UNKNOWN while the file is torn). Any other SIGBUS goes to the handler installed before,
   is ignored when that was SIG_IGN and the signal was sent, or kills the process as it would have. The library is
   never unloaded (-z nodelete), so neither is the handler. */
#define FHW_GUARDED_MAPS 64

static _Atomic(uintptr_t) g_guarded[FHW_GUARDED_MAPS];
static size_t g_guard_len;
static struct sigaction g_prev_bus;
static pthread_once_t g_guard_once = PTHREAD_ONCE_INIT;
static int g_guard_ok;

static void bus_handler(int sig, siginfo_t *info, void *ctx) {
    uintptr_t addr = (uintptr_t)info->si_addr;
    for (int i = 0; i < FHW_GUARDED_MAPS; i++) {
        uintptr_t start = atomic_load(&g_guarded[i]);
        if (start == 0 || addr < start || addr >= start + g_guard_len) continue;
        void *page = mmap((void *)start, g_guard_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                          -1, 0);
        if (page == MAP_FAILED) break;
        *(volatile uint32_t *)((uint8_t *)page + FHW_SUPERSEDED_OFFSET) = FHW_REPLACED;
        return; /* the faulting read runs again, on the new page */
    }
    if (g_prev_bus.sa_flags & SA_SIGINFO) {
        if (g_prev_bus.sa_sigaction != NULL) {
            g_prev_bus.sa_sigaction(sig, info, ctx);
            return;
        }
    } else if (g_prev_bus.sa_handler == SIG_IGN) {
        /* Ignored and sent by kill, sigqueue or raise (si_code SI_USER or below): no effect, as POSIX has it. An
           ignored fault (si_code > 0) would only fault again: the default action, as the kernel's choice too. */
        if (info->si_code <= SI_USER) return;
    } else if (g_prev_bus.sa_handler != SIG_DFL) {
        g_prev_bus.sa_handler(sig);
        return;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &dfl, NULL);
    raise(SIGBUS); /* delivered when the handler returns: the default action, as without us */
}

static void guard_install(void) {
    long page = sysconf(_SC_PAGESIZE);
    g_guard_len = (size_t)(page > 0 ? page : 4096);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = bus_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART; /* SA_ONSTACK: Go runtimes require it of foreign handlers */
    sigemptyset(&sa.sa_mask);
    g_guard_ok = sigaction(SIGBUS, &sa, &g_prev_bus) == 0;
}

/* Register a mapped first page; 0 when it cannot be guarded (then it must not be read). */
static int guard_add(void *map) {
    pthread_once(&g_guard_once, guard_install);
    if (!g_guard_ok) return 0;
    for (int i = 0; i < FHW_GUARDED_MAPS; i++) {
        uintptr_t none = 0;
        if (atomic_compare_exchange_strong(&g_guarded[i], &none, (uintptr_t)map)) return 1;
    }
    return 0;
}

static void guard_remove(void *map) {
    for (int i = 0; i < FHW_GUARDED_MAPS; i++) {
        uintptr_t mine = (uintptr_t)map;
        if (atomic_compare_exchange_strong(&g_guarded[i], &mine, 0)) return;
    }
}

/* ------------------------------------------------------------------------------------------ loading */

static void snap_free(fhw_snap_t *s) {
    if (s == NULL) return;
    if (s->map) {
        guard_remove(s->map);
        munmap(s->map, s->map_len);
    }
    free(s->data);
    free(s);
}

static void snap_map_devices(fhw_snap_t *s) {
    for (int d = 0; d < FHW_MAX_GPUS; d++) s->dev_slot[d] = -1;
    if (s->status == NVML_SUCCESS) {
        atomic_store_explicit(&fhw_branch_now, (int)s->hdr->driver_branch, memory_order_relaxed);
        for (int d = 0; d < g_vis.count; d++)
            for (uint32_t i = 0; i < s->hdr->gpu_count; i++)
                if (strcmp(s->gpus[i].uuid, g_vis.uuid[d]) == 0) {
                    s->dev_slot[d] = (int)i;
                    break;
                }
    }
    fhw_mig_map(s);
}

static size_t pread_all(int fd, uint8_t *buf, size_t size) {
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    return got;
}

/* Read the file into s->data, consistently: the writer changes a snapshot in place between two writes of its
   `superseded` word (odd while it writes, the next even value after), so a copy as long as the file whose word,
   and the mapped word before and after the read, are one even value is whole. A writer that stays odd longer than
   FHW_LOAD_WAITS x 50 us (it died mid-update) is not waited for: the checksum judges what was read. Without the
   mapping (a file too short for the word) the checksum alone judges. Returns the bytes read. */
#define FHW_LOAD_WAITS 200
static size_t read_whole(int fd, fhw_snap_t *s, size_t size) {
    size_t got = 0;
    for (int waits = 0;; waits++) {
        uint32_t before = s->superseded != NULL ? *s->superseded : 0;
        int settled = waits >= FHW_LOAD_WAITS;
        if ((before & 1u) && before != FHW_REPLACED && !settled) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
            continue;
        }
        atomic_thread_fence(memory_order_acquire);
        got = pread_all(fd, s->data, size);
        atomic_thread_fence(memory_order_acquire);
        s->seq = before;
        if (s->superseded == NULL || settled) return got;
        /* A copy shorter than the file fstat gave (cut under us, perhaps inside the word: then it holds no word,
           not a word of 0) is no copy of the file: read again. size >= the header, so the word is in a whole one. */
        if (got == size) {
            uint32_t copied;
            memcpy(&copied, s->data + FHW_SUPERSEDED_OFFSET, sizeof copied);
            if (*s->superseded == before && copied == before) return got;
        }
    }
}

/* Load the snapshot at `path`; NULL only when out of memory. Errors come back as a broken snapshot. */
static fhw_snap_t *snap_load(const char *path) {
    fhw_snap_t *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->checked_ms = fhw_now_ms();
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* O_NONBLOCK: a FIFO there must not hang us */
    if (fd < 0) {
        s->status = (errno == ENOENT || errno == ENOTDIR) ? NVML_ERROR_DRIVER_NOT_LOADED
                    : (errno == EACCES || errno == EPERM) ? NVML_ERROR_NO_PERMISSION
                                                          : NVML_ERROR_UNKNOWN;
        fhw_trace("cannot open snapshot %s: %s", path, strerror(errno));
        return s;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        s->status = NVML_ERROR_UNKNOWN;
        fhw_trace("snapshot %s is not a regular file", path);
        close(fd);
        return s;
    }
    s->have_identity = 1;
    s->st_dev = st.st_dev;
    s->st_ino = st.st_ino;
    s->st_size = st.st_size;
    s->st_mtim = st.st_mtim;
    /* The first page is mapped even when the contents turn out bad: the writer flags this very file when it
       replaces it, so a reader holding a broken snapshot notices the good one at once too. Only files long
       enough to hold the flag are mapped (reading a mapped page past the end of a file faults). */
    if (st.st_size >= (off_t)(FHW_SUPERSEDED_OFFSET + sizeof(uint32_t))) {
        long page = sysconf(_SC_PAGESIZE);
        size_t map_len = (size_t)(page > 0 ? page : 4096);
        void *map = mmap(NULL, map_len, PROT_READ, MAP_SHARED, fd, 0);
        if (map != MAP_FAILED && !guard_add(map)) { /* unguarded, a truncation would kill us: rely on stat */
            munmap(map, map_len);
            map = MAP_FAILED;
        }
        if (map != MAP_FAILED) {
            s->map = map;
            s->map_len = map_len;
            s->superseded = (const volatile uint32_t *)((const uint8_t *)map + FHW_SUPERSEDED_OFFSET);
        }
    }
    if (st.st_size < (off_t)sizeof(fhw_header_t) || st.st_size > (off_t)FHW_MAX_SNAPSHOT_BYTES) {
        s->status = NVML_ERROR_UNKNOWN;
        fhw_trace("snapshot %s has an impossible size %lld", path, (long long)st.st_size);
        close(fd);
        return s;
    }
    size_t size = (size_t)st.st_size;
    /* 8-aligned so the records can be read in place. */
    if (posix_memalign((void **)&s->data, 8, size) != 0) {
        s->data = NULL;
        close(fd);
        snap_free(s);
        return NULL;
    }
    if (read_whole(fd, s, size) != size) {
        s->status = NVML_ERROR_UNKNOWN;
        fhw_trace("snapshot %s: short read", path);
        close(fd);
        return s;
    }
    s->size = size;
    const char *why = NULL;
    s->status = fhw_validate(s->data, size, &why);
    if (s->status != NVML_SUCCESS) {
        fhw_trace("snapshot %s rejected: %s", path, why ? why : "?");
        close(fd);
        return s;
    }
    s->hdr = (const fhw_header_t *)s->data;
    s->gpus = (const fhw_gpu_t *)(s->data + s->hdr->gpu_offset);
    s->migs = (const fhw_mig_t *)(s->data + s->hdr->mig_offset);
    s->mig_profiles = (const fhw_mig_profile_t *)(s->data + s->hdr->mig_profile_offset);
    s->processes = (const fhw_process_t *)(s->data + s->hdr->process_offset);
    s->events = (const fhw_event_t *)(s->data + s->hdr->event_offset);
    s->nics = (const fhw_nic_t *)(s->data + s->hdr->nic_offset);
    s->gis = (const fhw_gi_t *)(s->data + s->hdr->gi_offset);
    s->ci_profiles = (const fhw_ci_profile_t *)(s->data + s->hdr->ci_profile_offset);
    s->platform = s->hdr->platform_count ? (const fhw_platform_t *)(s->data + s->hdr->platform_offset) : NULL;
    close(fd);
    fhw_trace("loaded snapshot %s generation %llu (%u GPUs, %u events)", path,
              (unsigned long long)s->hdr->generation, s->hdr->gpu_count, s->hdr->event_count);
    return s;
}

/* Has the file behind `s` been replaced (or removed, or has it appeared)? */
static int snap_stale(fhw_snap_t *s, int force) {
    if (s->superseded != NULL) {
        /* Changed since this copy was read; or replaced, also when it already was as this copy was read (a reader
           that opened the path just before a rename copies the old file, word and all): reopen the path. */
        uint32_t word = *s->superseded;
        if (word != s->seq || word == FHW_REPLACED) return 1;
    }
    int64_t now = fhw_now_ms();
    int64_t last = atomic_load_explicit(&s->checked_ms, memory_order_relaxed);
    if (!force && now - last < FHW_RECHECK_MS) return 0;
    atomic_store_explicit(&s->checked_ms, now, memory_order_relaxed);
    struct stat st;
    if (stat(g_path, &st) != 0) return s->have_identity;
    if (!s->have_identity) return 1;
    return st.st_ino != s->st_ino || st.st_dev != s->st_dev || st.st_size != s->st_size ||
           st.st_mtim.tv_sec != s->st_mtim.tv_sec || st.st_mtim.tv_nsec != s->st_mtim.tv_nsec;
}

/* ------------------------------------------------------------------------------------------ hazards */

/* One cache line per thread, so two threads publishing their hazards never share a line. */
typedef struct hp_slot {
    _Atomic(fhw_snap_t *) ptr;
    _Atomic int owned;
    int depth;
    struct hp_slot *next;
} __attribute__((aligned(64))) hp_slot_t;

static _Atomic(hp_slot_t *) g_slots;
/* initial-exec: the slot pointer is one load at a fixed offset from the thread pointer instead of a
   __tls_get_addr call on every entry and exit (8 bytes of the static TLS surplus glibc keeps for libraries
   loaded with dlopen). */
static __thread hp_slot_t *t_slot __attribute__((tls_model("initial-exec")));
static pthread_key_t g_slot_key;
static pthread_once_t g_slot_once = PTHREAD_ONCE_INIT;

static void hp_thread_exit(void *p) {
    hp_slot_t *slot = p;
    slot->depth = 0;
    atomic_store(&slot->ptr, NULL);
    atomic_store(&slot->owned, 0);
}

static void hp_make_key(void) { (void)pthread_key_create(&g_slot_key, hp_thread_exit); }

static hp_slot_t *hp_my_slot(void) {
    hp_slot_t *slot = t_slot;
    if (slot != NULL) return slot;
    for (slot = atomic_load(&g_slots); slot != NULL; slot = slot->next) {
        int free_ = 0;
        if (atomic_compare_exchange_strong(&slot->owned, &free_, 1)) break;
    }
    if (slot == NULL) {
        slot = aligned_alloc(64, sizeof *slot);
        if (slot == NULL) return NULL;
        memset(slot, 0, sizeof *slot);
        atomic_store(&slot->owned, 1);
        hp_slot_t *head = atomic_load(&g_slots);
        do {
            slot->next = head;
        } while (!atomic_compare_exchange_weak(&g_slots, &head, slot));
    }
    slot->depth = 0;
    t_slot = slot;
    pthread_once(&g_slot_once, hp_make_key);
    (void)pthread_setspecific(g_slot_key, slot);
    return slot;
}

static fhw_snap_t *hp_acquire(hp_slot_t *slot) {
    if (slot->depth++ > 0) return atomic_load(&slot->ptr);
    fhw_snap_t *s;
    do {
        s = atomic_load(&g_current);
        atomic_store(&slot->ptr, s); /* seq_cst: published before g_current is read again */
    } while (s != atomic_load(&g_current));
    return s;
}

static void hp_release(hp_slot_t *slot) {
    if (--slot->depth == 0) atomic_store_explicit(&slot->ptr, NULL, memory_order_release);
}

static int hp_protected(const fhw_snap_t *s) {
    for (hp_slot_t *slot = atomic_load(&g_slots); slot != NULL; slot = slot->next)
        if (atomic_load(&slot->ptr) == s) return 1;
    return 0;
}

/* Under g_reload_lock: queue `s` and free every queued snapshot no reader names. */
static void retire_and_reclaim(fhw_snap_t *s) {
    if (s != NULL) {
        s->retired_next = g_retired;
        g_retired = s;
    }
    fhw_snap_t **pp = &g_retired;
    while (*pp != NULL) {
        fhw_snap_t *r = *pp;
        if (hp_protected(r)) {
            pp = &r->retired_next;
        } else {
            *pp = r->retired_next;
            snap_free(r);
        }
    }
}

/* Replace `old` (still current) by a fresh load of the file. */
static void reload(fhw_snap_t *old) {
    pthread_mutex_lock(&g_reload_lock);
    fhw_snap_t *cur = atomic_load(&g_current);
    if (cur == old && cur != NULL) {
        fhw_snap_t *fresh = snap_load(g_path);
        if (fresh != NULL) {
            snap_map_devices(fresh);
            atomic_store(&g_current, fresh);
            retire_and_reclaim(cur);
        }
    } else {
        retire_and_reclaim(NULL);
    }
    pthread_mutex_unlock(&g_reload_lock);
}

void fhw_refresh(int force) {
    if (!fhw_initialized()) return;
    hp_slot_t *slot = hp_my_slot();
    if (slot == NULL) return;
    fhw_snap_t *s = hp_acquire(slot);
    int stale = s != NULL && snap_stale(s, force);
    hp_release(slot);
    if (stale) reload(s);
}

/* ------------------------------------------------------------------------------------------ calls */

nvmlReturn_t fhw_enter(fhw_ctx_t *c) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    hp_slot_t *slot = hp_my_slot();
    if (slot == NULL) return NVML_ERROR_MEMORY;
    for (int tries = 0;; tries++) {
        fhw_snap_t *s = hp_acquire(slot);
        if (s == NULL) {
            hp_release(slot);
            return NVML_ERROR_UNINITIALIZED;
        }
        if (tries < 2 && snap_stale(s, 0)) {
            hp_release(slot);
            reload(s);
            continue;
        }
        if (s->status != NVML_SUCCESS) {
            nvmlReturn_t st = s->status;
            hp_release(slot);
            return st;
        }
        c->s = s;
        c->g = NULL;
        c->m = NULL;
        c->gi = NULL;
        c->dev = -1;
        c->mig = -1;
        c->slot = -1;
        return NVML_SUCCESS;
    }
}

void fhw_leave(fhw_ctx_t *c) {
    (void)c;
    hp_release(t_slot);
}

nvmlReturn_t fhw_enter_dev(fhw_ctx_t *c, nvmlDevice_t h, int flags) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    int dev = fhw_device_id_of(h);
    int mig = -1;
    if (dev < 0) {
        mig = fhw_mig_id_of(h);
        if (mig < 0) return NVML_ERROR_INVALID_ARGUMENT;
        if (!(flags & FHW_ALLOW_MIG)) return NVML_ERROR_INVALID_ARGUMENT;
    }
    nvmlReturn_t r = fhw_enter(c);
    if (r == NVML_ERROR_DRIVER_NOT_LOADED) return NVML_ERROR_GPU_IS_LOST; /* the node went away under us */
    if (r != NVML_SUCCESS) return r;
    if (mig >= 0) {
        if (c->s->mig_slot[mig] < 0) { /* destroyed (or never existed): a stale handle */
            fhw_leave(c);
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        dev = c->s->mig_dev[mig];
    }
    int slot = c->s->dev_slot[dev];
    if (slot < 0) {
        fhw_leave(c);
        return NVML_ERROR_GPU_IS_LOST;
    }
    c->slot = slot;
    c->dev = dev;
    c->g = &c->s->gpus[slot];
    if (c->g->lost && !(flags & FHW_ALLOW_LOST)) {
        fhw_leave(c);
        return NVML_ERROR_GPU_IS_LOST;
    }
    if (mig >= 0) {
        c->mig = mig;
        c->m = &c->s->migs[c->s->mig_slot[mig]];
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ visibility */

/* Is the text s exactly the token tok[0..len), compared by cmp (strncmp, or strncasecmp to ignore case)? */
static int token_is(const char *tok, size_t len, const char *s, int (*cmp)(const char *, const char *, size_t)) {
    return strlen(s) == len && cmp(tok, s, len) == 0;
}

/* Does the token tok[0..len) (followed by a comma, a space or the end) name g? Read in place, however long: an
   index with any number of leading zeros is that index, as strtoul reads it. */
static int token_matches(const fhw_gpu_t *g, const char *tok, size_t len) {
    if (len == 0) return 0; /* after the last comma of "1," or "1, ": no GPU */
    char *end = NULL;
    unsigned long idx = strtoul(tok, &end, 10);
    if (end == tok + len) return idx == g->index;
    return token_is(tok, len, g->model_name, strncmp) || token_is(tok, len, g->bus_id, strncasecmp) ||
           token_is(tok, len, g->bus_id_legacy, strncasecmp) ||
           (len >= 8 && strncmp(tok, g->uuid, len) == 0); /* a UUID or an unambiguous-enough prefix of one */
}

static int env_allows(const fhw_gpu_t *g, const char *spec) {
    if (strcmp(spec, "all") == 0) return 1;
    const char *p = spec;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        const char *start = p;
        while (*p && *p != ',') p++;
        const char *end = p;
        while (end > start && end[-1] == ' ') end--;
        if (token_matches(g, start, (size_t)(end - start))) return 1;
    }
    return 0;
}

static int devnode_allows(const fhw_gpu_t *g, const char *root) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/nvidiactl", root);
    if (access(path, F_OK) != 0) return 1; /* no device directory of a node here: everything is visible */
    snprintf(path, sizeof path, "%s/nvidia%u", root, g->minor);
    return access(path, F_OK) == 0;
}

static void compute_visibility(const fhw_snap_t *s) {
    memset(&g_vis, 0, sizeof g_vis);
    const char *spec = getenv("FAKEHW_VISIBLE_DEVICES");
    const char *root = getenv("FAKEHW_DEV_ROOT");
    if (root == NULL || *root == '\0') root = "/dev";
    for (uint32_t i = 0; i < s->hdr->gpu_count; i++) {
        const fhw_gpu_t *g = &s->gpus[i];
        int ok = spec != NULL ? env_allows(g, spec) : devnode_allows(g, root);
        if (!ok) continue;
        int d = g_vis.count++;
        snprintf(g_vis.uuid[d], sizeof g_vis.uuid[d], "%s", g->uuid);
    }
    fhw_mig_reset();
}

/* ------------------------------------------------------------------------------------------ init */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&g_init_lock);
    if (atomic_load(&g_refcount) > 0) {
        atomic_fetch_add(&g_refcount, 1);
        pthread_mutex_unlock(&g_init_lock);
        return NVML_SUCCESS;
    }
    const char *trace = getenv("FAKEHW_NVML_TRACE");
    g_trace = trace != NULL && *trace != '\0' && strcmp(trace, "0") != 0;
    const char *path = getenv("FAKEHW_NVML_SNAPSHOT");
    if (path == NULL || *path == '\0') path = FHW_DEFAULT_SNAPSHOT;
    if (strlen(path) >= sizeof g_path) { /* no file open(2) can open (ENAMETOOLONG): unusable, as in snap_load */
        fhw_trace("cannot open snapshot %s: %s", path, strerror(ENAMETOOLONG));
        pthread_mutex_unlock(&g_init_lock);
        return NVML_ERROR_UNKNOWN;
    }
    snprintf(g_path, sizeof g_path, "%s", path);
    fhw_snap_t *s = snap_load(g_path);
    if (s == NULL) { /* out of memory: not among nvmlInit_v2's codes in nvml.h, an unexpected error */
        fhw_trace("cannot load snapshot %s: %s", g_path, strerror(ENOMEM));
        pthread_mutex_unlock(&g_init_lock);
        return NVML_ERROR_UNKNOWN;
    }
    if (s->status != NVML_SUCCESS) {
        nvmlReturn_t st = s->status;
        snap_free(s);
        pthread_mutex_unlock(&g_init_lock);
        return st;
    }
    compute_visibility(s);
    snap_map_devices(s);
    pthread_mutex_lock(&g_reload_lock);
    fhw_snap_t *old = atomic_exchange(&g_current, s);
    retire_and_reclaim(old);
    pthread_mutex_unlock(&g_reload_lock);
    atomic_store(&g_refcount, 1);
    pthread_mutex_unlock(&g_init_lock);
    fhw_trace("initialised: %d visible GPUs, %u MIG devices in the snapshot", g_vis.count, s->hdr->mig_count);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&g_init_lock);
    int n = atomic_load(&g_refcount);
    if (n <= 0) {
        pthread_mutex_unlock(&g_init_lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    atomic_store(&g_refcount, n - 1);
    if (n == 1) {
        pthread_mutex_lock(&g_reload_lock);
        fhw_snap_t *old = atomic_exchange(&g_current, NULL);
        retire_and_reclaim(old);
        pthread_mutex_unlock(&g_reload_lock);
    }
    pthread_mutex_unlock(&g_init_lock);
    return NVML_SUCCESS;
}
