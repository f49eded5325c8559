/*
 * C tests of the shim, built with the shim's sources under AddressSanitizer and UndefinedBehaviorSanitizer
 * (tests/nvml/test_sanitizers.py compiles and runs this).
 *
 *   shim_test calls SNAPSHOT_A SNAPSHOT_B WORKDIR        every getter on every device, both snapshots
 *   shim_test threads SNAPSHOT_A SNAPSHOT_B WORKDIR      readers in threads while the file is replaced
 *   shim_test inplace SNAPSHOT_A SNAPSHOT_B WORKDIR      readers in threads while the file is updated in place
 *   shim_test fuzz SNAPSHOT_A SNAPSHOT_B WORKDIR N SEED  N mutated snapshots: never a crash, hang or overread
 *   shim_test events SNAPSHOT_A SNAPSHOT_B WORKDIR       waits, timeouts, frees under a changing file
 *   shim_test mig SNAPSHOT_A SNAPSHOT_B WORKDIR          every GPU and compute instance call on every instance
 *   shim_test agent SNAPSHOT_A SNAPSHOT_B WORKDIR N      N MIG mode changes asked of $FAKEHW_AGENT_SOCKET
 *
 * SNAPSHOT_A and SNAPSHOT_B are valid snapshots of the same node that differ in one GPU's temperature; the
 * test writes WORKDIR/nvml.snapshot the two ways the Python writer does (fakehw/nvml/snapfile.py): a temporary file,
 * rename, then the superseded word of the replaced file set to FHW_REPLACED; or in place between an odd and the
 * next even value of the word.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Entry points the test calls, with their real signatures. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t, char *, unsigned int);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int);
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t, char *, unsigned int);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t *);
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t, fhwPciInfoV1_t *);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t, unsigned int, unsigned int *);
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned int, unsigned int *);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t, unsigned int, nvmlPciInfo_t *);
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t, unsigned int, unsigned int, unsigned long long *);
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t, nvmlDevice_t, nvmlGpuTopologyLevel_t *);
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t, nvmlDevice_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t *);
nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t, nvmlGpuTopologyLevel_t, unsigned int *, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t, unsigned int, unsigned long *);
nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t, nvmlGpuFabricInfo_t *);
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t, int, nvmlFieldValue_t *);
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t, unsigned int *, unsigned int *);
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t, unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v2_t *);
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t, unsigned int, unsigned int *, unsigned long long *);
nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t, unsigned int, unsigned int *, unsigned int *);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *, nvmlDevice_t *);
nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int, unsigned int *, nvmlDevice_t *);
nvmlReturn_t nvmlSystemGetNvlinkBwMode(unsigned int *);
nvmlReturn_t nvmlSystemEventSetCreate(nvmlSystemEventSetCreateRequest_v1_t *);
nvmlReturn_t nvmlSystemRegisterEvents(nvmlSystemRegisterEventRequest_v1_t *);
nvmlReturn_t nvmlSystemEventSetWait(nvmlSystemEventSetWaitRequest_v1_t *);
nvmlReturn_t nvmlSystemEventSetFree(nvmlSystemEventSetFreeRequest_v1_t *);
nvmlReturn_t nvmlSystemGetDriverVersion(char *, unsigned int);
nvmlReturn_t nvmlSystemGetProcessName(unsigned int, char *, unsigned int);
nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *);
nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t);
nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t, nvmlGpmSample_t);
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *);
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t);
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t, nvmlEventData_t *, unsigned int);
nvmlReturn_t nvmlInternalGetExportTable(const void **, const unsigned char *);
const char *nvmlErrorString(nvmlReturn_t);
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t, unsigned int, nvmlReturn_t *);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t, unsigned int, nvmlGpuInstanceProfileInfo_t *);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t, unsigned int, nvmlGpuInstanceProfileInfo_v2_t *);
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t, unsigned int, unsigned int *);
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t, unsigned int, nvmlGpuInstancePlacement_t *,
                                                           unsigned int *);
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t, unsigned int, nvmlGpuInstance_t *, unsigned int *);
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t, unsigned int, nvmlGpuInstance_t *);
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t *);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t, unsigned int, unsigned int,
                                                          nvmlComputeInstanceProfileInfo_t *);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t, unsigned int, unsigned int,
                                                           nvmlComputeInstanceProfileInfo_v2_t *);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t, unsigned int, unsigned int *);
nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t, unsigned int,
                                                                 nvmlComputeInstancePlacement_t *, unsigned int *);
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t, unsigned int, nvmlComputeInstance_t *,
                                                unsigned int *);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t, unsigned int, nvmlComputeInstance_t *);
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t, nvmlComputeInstanceInfo_t *);
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t, fhwComputeInstanceInfoV1_t *);

static unsigned char *snap_a, *snap_b;
static size_t size_a, size_b;
static char path[4096];
static char workdir[2048];

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);      \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static unsigned char *slurp(const char *file, size_t *size) {
    FILE *f = fopen(file, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    CHECK(buf != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Replace the snapshot like the Python writer: temp file, rename, then flag the old file superseded. */
static void publish(const unsigned char *data, size_t size) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/.nvml.snapshot.tmp", workdir);
    int old = open(path, O_RDWR);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, data, size) == (ssize_t)size);
    close(fd);
    CHECK(rename(tmp, path) == 0);
    if (old >= 0) {
        uint32_t replaced = FHW_REPLACED;
        struct stat st;
        if (fstat(old, &st) == 0 && st.st_size >= FHW_SUPERSEDED_OFFSET + 4)
            CHECK(pwrite(old, &replaced, 4, FHW_SUPERSEDED_OFFSET) == 4);
        close(old);
    }
}

/* Update the snapshot in place like the Python writer: the superseded word odd, the file's bytes, the word at the
   next even value. The bytes go in two writes with a pause between, the header (with the checksum) first and the
   GPU records after, so a reader that copies the file in that pause and ignores the word gets a new checksum over
   old records: a torn copy the shim must never answer from. */
static uint32_t seq_word;
static void update_in_place(const unsigned char *data, size_t size) {
    const fhw_header_t *h = (const fhw_header_t *)data;
    CHECK(h->gpu_offset > FHW_SUPERSEDED_OFFSET + 4 && h->gpu_offset < size);
    unsigned char *copy = malloc(size);
    CHECK(copy != NULL);
    memcpy(copy, data, size);
    uint32_t busy = seq_word + 1, done = seq_word + 2;
    memcpy(copy + FHW_SUPERSEDED_OFFSET, &busy, 4);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, &busy, 4, FHW_SUPERSEDED_OFFSET) == 4);
    CHECK(pwrite(fd, copy, h->gpu_offset, 0) == (ssize_t)h->gpu_offset);
    usleep(100);
    CHECK(pwrite(fd, copy + h->gpu_offset, size - h->gpu_offset, h->gpu_offset) == (ssize_t)(size - h->gpu_offset));
    CHECK(pwrite(fd, &done, 4, FHW_SUPERSEDED_OFFSET) == 4);
    close(fd);
    free(copy);
    seq_word = done;
}

/* The export table's slots (csrc/export.c) as nvidia-smi calls them, with buffers no larger than each slot's
   documented arguments: slot 23's two endpoint records are exactly their 32-byte bus ids (a record "starts with
   its 32-byte PCI bus id"), so a copy or a terminator one byte past either shows (fresh seed 10715's export.c:119,
   `text[32] = '\0'` made text[33], one past the 33-byte copy); the device slots get one unsigned int, or a string
   buffer of the size they are told; the process slots entries of 4128 bytes for the capacity they are told. */
typedef nvmlReturn_t (*export_slot_t)(void *, void *, void *, void *);

/* The device's 32-byte bus id in a heap block of exactly that size (a read past it is AddressSanitizer's), or NULL
   when the device has none. */
static char *bus_id_record(nvmlDevice_t device) {
    nvmlPciInfo_t pci;
    if (nvmlDeviceGetPciInfo_v3(device, &pci) != NVML_SUCCESS) return NULL;
    char *record = malloc(32);
    CHECK(record != NULL);
    memcpy(record, pci.busId, 32);
    return record;
}

static void exercise_export_table(nvmlDevice_t *devs, unsigned int count) {
    static const unsigned char guid[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                           0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
    const void *const *table = NULL;
    CHECK(nvmlInternalGetExportTable((const void **)&table, guid) == NVML_SUCCESS); /* no release in this program */
    size_t slots = (size_t)(uintptr_t)table[0] / sizeof(void *);
    export_slot_t slot[256] = {0};
    for (size_t n = 1; n < slots && n < 256; n++) slot[n] = (export_slot_t)(uintptr_t)table[n];
    CHECK(slots > 249 && slot[23] != NULL);
    for (unsigned int i = 0; i < count; i++) {
        char *a = bus_id_record(devs[i]);
        if (a == NULL) continue;
        for (unsigned int j = 0; j < count; j++) {
            char *b = bus_id_record(devs[j]);
            if (b == NULL) continue;
            int cell = -1;
            nvmlReturn_t r = slot[23](a, b, &cell, NULL);
            CHECK(r == NVML_ERROR_NOT_SUPPORTED || (r == NVML_SUCCESS && cell >= 0));
            free(b);
        }
        free(a);
        const int device_slots[] = {226, 230, 240, 241, 242, 243, 249};
        for (size_t k = 0; k < sizeof device_slots / sizeof device_slots[0]; k++) {
            unsigned int *out = malloc(sizeof *out);
            CHECK(out != NULL);
            (void)slot[device_slots[k]](devs[i], out, (void *)(uintptr_t)sizeof *out, NULL);
            free(out);
        }
        for (uintptr_t size = 1; size <= 64; size *= 4) {
            char *part = malloc(size);
            CHECK(part != NULL);
            (void)slot[231](devs[i], part, (void *)size, NULL);
            free(part);
        }
        for (int n = 213; n <= 215; n++) {
            unsigned int cap = 2;
            unsigned char *entries = malloc((size_t)cap * 4128);
            CHECK(entries != NULL);
            (void)slot[n](devs[i], &cap, entries, NULL);
            free(entries);
        }
        nvmlDevice_t back;
        CHECK(slot[81]((void *)(uintptr_t)i, &back, NULL, NULL) == NVML_SUCCESS);
    }
}

/* Call (nearly) everything on every device; results are not checked, only that nothing goes wrong. */
/* GPM: two samples of the device (every NVLink of an H100 read into each), and every metric id from 0 to 127 asked
   of them one at a time, so the shim's look-up of an id nvml.h does not define goes through its whole metric table
   and a per-link or all-link rate through every link. */
static void exercise_gpm(nvmlDevice_t d) {
    nvmlGpmSample_t a = NULL, b = NULL;
    CHECK(nvmlGpmSampleAlloc(&a) == NVML_SUCCESS && nvmlGpmSampleAlloc(&b) == NVML_SUCCESS);
    if (nvmlGpmSampleGet(d, a) == NVML_SUCCESS && nvmlGpmSampleGet(d, b) == NVML_SUCCESS) {
        static nvmlGpmMetricsGet_t request;
        for (unsigned int id = 0; id < 128; id++) {
            memset(&request, 0, sizeof request);
            request.version = NVML_GPM_METRICS_GET_VERSION;
            request.numMetrics = 1;
            request.sample1 = a;
            request.sample2 = b;
            request.metrics[0].metricId = id;
            CHECK(nvmlGpmMetricsGet(&request) == NVML_SUCCESS);
        }
    }
    CHECK(nvmlGpmSampleFree(a) == NVML_SUCCESS && nvmlGpmSampleFree(b) == NVML_SUCCESS);
}

static void exercise(void) {
    unsigned int count = 0;
    if (nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) return;
    CHECK(count <= FHW_MAX_GPUS);
    char buf[128];
    (void)nvmlSystemGetDriverVersion(buf, sizeof buf);
    (void)nvmlSystemGetDriverVersion(buf, 1); /* too small: INSUFFICIENT_SIZE, no overflow */
    nvmlDevice_t devs[FHW_MAX_GPUS];
    for (unsigned int i = 0; i < count; i++) devs[i] = fhw_device_handle((int)i);
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t d = devs[i];
        nvmlMemory_t m;
        nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
        nvmlPciInfo_t p;
        fhwPciInfoV1_t p1;
        unsigned int u, v;
        unsigned long long ull;
        (void)nvmlDeviceGetName(d, buf, sizeof buf);
        (void)nvmlDeviceGetUUID(d, buf, 8);
        (void)nvmlDeviceGetSerial(d, buf, sizeof buf);
        (void)nvmlDeviceGetMemoryInfo(d, &m);
        (void)nvmlDeviceGetMemoryInfo_v2(d, &m2);
        (void)nvmlDeviceGetPciInfo_v3(d, &p);
        (void)nvmlDeviceGetPciInfo(d, &p1);
        (void)nvmlDeviceGetTemperature(d, 0, &u);
        if (nvmlDeviceGetUUID(d, buf, sizeof buf) == NVML_SUCCESS) {
            nvmlDevice_t back;
            (void)nvmlDeviceGetHandleByUUID(buf, &back);
        }
        if (nvmlDeviceGetPciInfo_v3(d, &p) == NVML_SUCCESS) {
            nvmlDevice_t back;
            (void)nvmlDeviceGetHandleByPciBusId_v2(p.busId, &back);
        }
        for (unsigned int l = 0; l < FHW_MAX_LINKS + 2; l++) {
            (void)nvmlDeviceGetNvLinkState(d, l, &u);
            (void)nvmlDeviceGetNvLinkRemotePciInfo_v2(d, l, &p);
            (void)nvmlDeviceGetNvLinkErrorCounter(d, l, l % 6, &ull);
        }
        for (unsigned int j = 0; j < count; j++) {
            nvmlGpuTopologyLevel_t level;
            nvmlGpuP2PStatus_t st;
            (void)nvmlDeviceGetTopologyCommonAncestor(d, devs[j], &level);
            for (int cap = 0; cap < 6; cap++) (void)nvmlDeviceGetP2PStatus(d, devs[j], (nvmlGpuP2PCapsIndex_t)cap, &st);
        }
        nvmlDevice_t near[FHW_MAX_GPUS];
        unsigned int n = FHW_MAX_GPUS;
        (void)nvmlDeviceGetTopologyNearestGpus(d, NVML_TOPOLOGY_SYSTEM, &n, near);
        n = 1;
        (void)nvmlDeviceGetTopologyNearestGpus(d, NVML_TOPOLOGY_NODE, &n, near);
        unsigned long mask[4];
        (void)nvmlDeviceGetCpuAffinity(d, 4, mask);
        nvmlGpuFabricInfo_t f;
        (void)nvmlDeviceGetGpuFabricInfo(d, &f);
        nvmlFieldValue_t fv[8];
        for (int k = 0; k < 8; k++) {
            memset(&fv[k], 0, sizeof fv[k]);
            fv[k].fieldId = (unsigned int)(k * 23 + 1);
            fv[k].scopeId = (unsigned int)k;
        }
        (void)nvmlDeviceGetFieldValues(d, 8, fv);
        /* nvml.h's NVLink error totals (CRC flit 38, CRC data 45, replay 52, recovery 59, ECC data 160): a sum over
           every link of the GPU, up to NVML_NVLINK_MAX_LINKS of them on an H100. */
        const unsigned int totals[5] = {38, 45, 52, 59, 160};
        for (int k = 0; k < 5; k++) {
            memset(&fv[k], 0, sizeof fv[k]);
            fv[k].fieldId = totals[k];
        }
        (void)nvmlDeviceGetFieldValues(d, 5, fv);
        /* nvml.h's per-location ECC fields, 7-17 volatile and 18-28 aggregate: each reads one error type's count in
           one location, so a table that names a third error type reads past the counts (seed 10611's fields.c:140 at
           the texture and CBU positions, which no fault can set and whose stray read found 0). */
        nvmlFieldValue_t ecc[22];
        for (int k = 0; k < 22; k++) {
            memset(&ecc[k], 0, sizeof ecc[k]);
            ecc[k].fieldId = (unsigned int)(7 + k);
        }
        (void)nvmlDeviceGetFieldValues(d, 22, ecc);
        if (nvmlDeviceGetMigMode(d, &u, &v) == NVML_SUCCESS)
            for (unsigned int k = 0; k < 8; k++) {
                nvmlDevice_t mig;
                if (nvmlDeviceGetMigDeviceHandleByIndex(d, k, &mig) == NVML_SUCCESS) {
                    (void)nvmlDeviceGetName(mig, buf, sizeof buf);
                    (void)nvmlDeviceGetMemoryInfo(mig, &m);
                }
            }
        nvmlProcessInfo_v2_t procs[4];
        n = 4;
        (void)nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs);
        unsigned long long pages[FHW_RETIRED_PAGES_MAX];
        n = FHW_RETIRED_PAGES_MAX;
        (void)nvmlDeviceGetRetiredPages(d, 1, &n, pages);
        unsigned int clocks[256];
        n = 256;
        (void)nvmlDeviceGetSupportedGraphicsClocks(d, 0, &n, clocks);
        exercise_gpm(d);
    }
    exercise_export_table(devs, count);
    /* The system-wide calls that walk every visible GPU (a GPU set per CPU, the NVLink bandwidth mode, a handle by
       a serial, UUID or bus id no GPU has, an event set holding every GPU waited on): on a node of FHW_MAX_GPUS
       GPUs (test_sanitizers.py's NV_MAX_DEVICES node) a walk one past the last reads past the per-GPU tables. */
    for (unsigned int cpu = 0; cpu < 4; cpu++) {
        nvmlDevice_t gpus[FHW_MAX_GPUS];
        unsigned int n = FHW_MAX_GPUS;
        (void)nvmlSystemGetTopologyGpuSet(cpu, &n, gpus);
    }
    unsigned int bw;
    (void)nvmlSystemGetNvlinkBwMode(&bw);
    nvmlDevice_t none;
    (void)nvmlDeviceGetHandleBySerial("no such serial", &none);
    (void)nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &none);
    (void)nvmlDeviceGetHandleByPciBusId_v2("0000:ff:1f.7", &none);
    nvmlEventSet_t set;
    if (nvmlEventSetCreate(&set) == NVML_SUCCESS) {
        for (unsigned int i = 0; i < count; i++)
            (void)nvmlDeviceRegisterEvents(devs[i], nvmlEventTypeXidCriticalError, set);
        nvmlEventData_t data;
        (void)nvmlEventSetWait_v2(set, &data, 0);
        CHECK(nvmlEventSetFree(set) == NVML_SUCCESS);
    }
    /* A system event set (575: driver bind and unbind) made, registered, waited on for 0 ms and freed: every byte
       of its record is written, so an allocation smaller than the record shows here. */
    nvmlSystemEventSetCreateRequest_v1_t screate = {.version = nvmlSystemEventSetCreateRequest_v1};
    if (nvmlSystemEventSetCreate(&screate) == NVML_SUCCESS) {
        nvmlSystemRegisterEventRequest_v1_t reg = {.version = nvmlSystemRegisterEventRequest_v1, .set = screate.set,
            .eventTypes = nvmlSystemEventTypeGpuDriverUnbind | nvmlSystemEventTypeGpuDriverBind};
        (void)nvmlSystemRegisterEvents(&reg);
        nvmlSystemEventData_v1_t sdata[2];
        nvmlSystemEventSetWaitRequest_v1_t swait = {.version = nvmlSystemEventSetWaitRequest_v1, .timeoutms = 0,
                                                    .set = screate.set, .data = sdata, .dataSize = 2};
        (void)nvmlSystemEventSetWait(&swait);
        nvmlSystemEventSetFreeRequest_v1_t sfree = {.version = nvmlSystemEventSetFreeRequest_v1, .set = screate.set};
        CHECK(nvmlSystemEventSetFree(&sfree) == NVML_SUCCESS);
    }
    /* Garbage handles are refused, never dereferenced. */
    nvmlMemory_t m;
    CHECK(nvmlDeviceGetMemoryInfo((nvmlDevice_t)(uintptr_t)0x1234, &m) == NVML_ERROR_INVALID_ARGUMENT);
    CHECK(nvmlDeviceGetMemoryInfo((nvmlDevice_t)((char *)fhw_device_handle(0) + 1), &m) == NVML_ERROR_INVALID_ARGUMENT);
    CHECK(nvmlDeviceGetMemoryInfo(NULL, &m) == NVML_ERROR_INVALID_ARGUMENT);
}

static int cmd_calls(void) {
    publish(snap_a, size_a);
    CHECK(nvmlInit_v2() == NVML_SUCCESS);
    exercise();
    publish(snap_b, size_b);
    exercise();
    /* This process's own name: test_sanitizers.py gives it a command line longer than any buffer the shim reads
       /proc/PID/cmdline into (an argument of 5000 bytes), so a read that fills its buffer shows here. */
    char name[8192];
    CHECK(nvmlSystemGetProcessName((unsigned int)getpid(), name, sizeof name) == NVML_SUCCESS && name[0] != '\0');
    CHECK(nvmlShutdown() == NVML_SUCCESS);
    CHECK(nvmlShutdown() == NVML_ERROR_UNINITIALIZED);
    for (int r = 0; r < 1000; r++) CHECK(nvmlErrorString((nvmlReturn_t)r) != NULL);
    return 0;
}

/* ---------------------------------------------------------------------------------------- threads */

static unsigned int temp_a, temp_b;
static _Atomic int stop;
static _Atomic long reads;

static void *reader(void *arg) {
    (void)arg;
    nvmlDevice_t d = fhw_device_handle(0);
    while (!atomic_load(&stop)) {
        unsigned int t = 0;
        nvmlReturn_t r = nvmlDeviceGetTemperature(d, 0, &t);
        CHECK(r == NVML_SUCCESS);
        CHECK(t == temp_a || t == temp_b); /* one snapshot or the other, never a mix or garbage */
        nvmlMemory_t m;
        CHECK(nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS && m.total > 0);
        atomic_fetch_add(&reads, 1);
    }
    return NULL;
}

static unsigned int temperature_of(const unsigned char *snap) {
    const fhw_header_t *h = (const fhw_header_t *)snap;
    const fhw_gpu_t *g = (const fhw_gpu_t *)(snap + h->gpu_offset);
    return g[0].temperature;
}

static int cmd_threads(int in_place) {
    temp_a = temperature_of(snap_a);
    temp_b = temperature_of(snap_b);
    CHECK(temp_a != temp_b);
    CHECK(!in_place || size_a == size_b);
    publish(snap_a, size_a);
    seq_word = 0;
    CHECK(nvmlInit_v2() == NVML_SUCCESS);
    enum { N = 4 };
    pthread_t t[N];
    for (int i = 0; i < N; i++) CHECK(pthread_create(&t[i], NULL, reader, NULL) == 0);
    unsigned int seen_b = 0;
    for (int i = 0; i < 400; i++) {
        if (in_place) update_in_place(i % 2 ? snap_a : snap_b, size_a);
        else publish(i % 2 ? snap_a : snap_b, i % 2 ? size_a : size_b);
        unsigned int temp;
        CHECK(nvmlDeviceGetTemperature(fhw_device_handle(0), 0, &temp) == NVML_SUCCESS);
        /* The caller that replaced the file sees the new generation on its very next call. */
        CHECK(temp == (i % 2 ? temp_a : temp_b));
        seen_b += temp == temp_b;
        usleep(200);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    CHECK(seen_b == 200);
    CHECK(nvmlShutdown() == NVML_SUCCESS);
    fprintf(stderr, "threads: %ld reads across 400 %s\n", atomic_load(&reads), in_place ? "updates in place" : "replacements");
    return 0;
}

/* ---------------------------------------------------------------------------------------- fuzz */

static uint64_t rng;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fix_checksum(unsigned char *data, size_t size) {
    if (size < sizeof(fhw_header_t)) return;
    uint32_t crc = fhw_crc32(data, size);
    memcpy(data + FHW_CHECKSUM_OFFSET, &crc, 4);
}

static size_t mutate(unsigned char *buf, size_t size, size_t cap) {
    static const uint32_t interesting[] = {0, 1, 7, 8, 17, 18, 63, 64, 65, 255, 4096, 0x7fffffff, 0xffffffff};
    int kind = (int)(next_rand() % 7);
    size_t n = 1 + next_rand() % 8;
    switch (kind) {
    case 0: /* bit flips anywhere */
        for (size_t i = 0; i < n; i++) buf[next_rand() % size] ^= (unsigned char)(1u << (next_rand() % 8));
        break;
    case 1: /* an interesting 32-bit value at an aligned offset of the header (counts, sizes, offsets) */
        for (size_t i = 0; i < n; i++) {
            uint32_t v = interesting[next_rand() % (sizeof interesting / sizeof interesting[0])];
            size_t at = (next_rand() % (sizeof(fhw_header_t) / 4)) * 4;
            memcpy(buf + at, &v, 4);
        }
        break;
    case 2: /* an interesting value inside a record */
        for (size_t i = 0; i < n; i++) {
            uint32_t v = interesting[next_rand() % (sizeof interesting / sizeof interesting[0])];
            size_t at = (next_rand() % (size / 4)) * 4;
            memcpy(buf + at, &v, 4);
        }
        break;
    case 3: /* truncation */
        size = next_rand() % size;
        break;
    case 4: /* extension with garbage */
        if (size < cap) {
            size_t extra = 1 + next_rand() % (cap - size);
            for (size_t i = 0; i < extra; i++) buf[size + i] = (unsigned char)next_rand();
            size += extra;
        }
        break;
    case 5: /* strings lose their terminators */
        for (size_t i = 0; i < 64 && i < size; i++) {
            size_t at = next_rand() % size;
            if (buf[at] == 0) buf[at] = 'A';
        }
        break;
    default: /* random bytes */
        for (size_t i = 0; i < n * 16; i++) buf[next_rand() % size] = (unsigned char)next_rand();
        break;
    }
    return size;
}

static int cmd_fuzz(long iterations, uint64_t seed) {
    rng = seed ? seed : 0x9e3779b97f4a7c15ULL;
    size_t cap = size_a + 4096;
    unsigned char *buf = malloc(cap);
    CHECK(buf != NULL);
    long accepted = 0, refused = 0;
    for (long it = 0; it < iterations; it++) {
        const unsigned char *base = it % 3 ? snap_a : snap_b;
        size_t size = it % 3 ? size_a : size_b;
        memcpy(buf, base, size);
        size = mutate(buf, size, cap);
        if (next_rand() % 4 != 0) fix_checksum(buf, size); /* mostly reach past the checksum */
        if (it % 2 == 0) {
            /* A fresh init on the mutated file. */
            publish(buf, size);
            nvmlReturn_t r = nvmlInit_v2();
            if (r == NVML_SUCCESS) {
                accepted++;
                exercise();
                CHECK(nvmlShutdown() == NVML_SUCCESS);
            } else {
                refused++;
            }
        } else {
            /* The file turns bad under an initialised library, then good again. */
            publish(snap_a, size_a);
            CHECK(nvmlInit_v2() == NVML_SUCCESS);
            exercise();
            publish(buf, size);
            exercise();
            publish(snap_b, size_b);
            unsigned int t = 0;
            nvmlReturn_t r = nvmlDeviceGetTemperature(fhw_device_handle(0), 0, &t);
            if (r != NVML_SUCCESS || t != temperature_of(snap_b)) {
                /* A file too short to carry the superseded flag is noticed by stat() within FHW_RECHECK_MS. */
                CHECK(size < FHW_SUPERSEDED_OFFSET + 4);
                usleep((FHW_RECHECK_MS + 5) * 1000);
                r = nvmlDeviceGetTemperature(fhw_device_handle(0), 0, &t);
            }
            CHECK(r == NVML_SUCCESS && t == temperature_of(snap_b));
            CHECK(nvmlShutdown() == NVML_SUCCESS);
        }
    }
    fprintf(stderr, "fuzz: %ld iterations, %ld mutated snapshots accepted, %ld refused\n", iterations, accepted,
            refused);
    free(buf);
    return 0;
}

/* ---------------------------------------------------------------------------------------- events */

static int cmd_events(void) {
    publish(snap_a, size_a);
    CHECK(nvmlInit_v2() == NVML_SUCCESS);
    nvmlEventSet_t set;
    CHECK(nvmlEventSetCreate(&set) == NVML_SUCCESS);
    CHECK(nvmlDeviceRegisterEvents(fhw_device_handle(0), nvmlEventTypeXidCriticalError, set) == NVML_SUCCESS);
    CHECK(nvmlDeviceRegisterEvents(fhw_device_handle(0), 1ULL << 40, set) == NVML_ERROR_NOT_SUPPORTED);
    nvmlEventData_t data;
    CHECK(nvmlEventSetWait_v2(set, &data, 0) == NVML_ERROR_TIMEOUT);
    CHECK(nvmlEventSetWait_v2(set, &data, 30) == NVML_ERROR_TIMEOUT);
    CHECK(nvmlEventSetWait_v2(set, NULL, 30) == NVML_ERROR_INVALID_ARGUMENT);
    CHECK(nvmlEventSetWait_v2((nvmlEventSet_t)(uintptr_t)0x5678, &data, 30) == NVML_ERROR_INVALID_ARGUMENT);
    publish(snap_b, size_b);
    CHECK(nvmlEventSetWait_v2(set, &data, 30) == NVML_ERROR_TIMEOUT);
    CHECK(nvmlEventSetFree(set) == NVML_SUCCESS);
    CHECK(nvmlEventSetFree(set) == NVML_ERROR_INVALID_ARGUMENT); /* double free refused */
    const void *table = NULL;
    static const unsigned char guid[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                           0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
    static const unsigned char other[16] = {1};
    /* an unknown table id is an invalid argument (as CUDA's cuGetExportTable answers an unknown id) */
    CHECK(nvmlInternalGetExportTable(&table, other) == NVML_ERROR_INVALID_ARGUMENT);
    nvmlReturn_t r = nvmlInternalGetExportTable(&table, guid);
    CHECK(r == NVML_SUCCESS || r == NVML_ERROR_LIB_RM_VERSION_MISMATCH);
    CHECK(nvmlShutdown() == NVML_SUCCESS);
    return 0;
}

/* ---------------------------------------------------------------------------------------- MIG */

/* Every GPU instance profile of `d`, every GPU instance of each, and every compute instance profile index nvml.h
   defines (and one past) of each instance, in every form; then each compute instance. Results are not checked: the
   sanitizers are the oracle (test_sanitizers.py gives a snapshot whose compute instance profiles are its last
   section, so a lookup that reads one record too many reads past the file's bytes). */
static void exercise_mig(nvmlDevice_t d) {
    for (unsigned int p = 0; p <= NVML_GPU_INSTANCE_PROFILE_COUNT; p++) {
        nvmlGpuInstanceProfileInfo_t info;
        if (nvmlDeviceGetGpuInstanceProfileInfo(d, p, &info) != NVML_SUCCESS) continue;
        nvmlGpuInstanceProfileInfo_v2_t v2 = {.version = nvmlGpuInstanceProfileInfo_v2};
        (void)nvmlDeviceGetGpuInstanceProfileInfoV(d, p, &v2);
        unsigned int n = 0;
        (void)nvmlDeviceGetGpuInstanceRemainingCapacity(d, info.id, &n);
        nvmlGpuInstancePlacement_t places[FHW_MAX_PLACEMENTS];
        n = FHW_MAX_PLACEMENTS;
        (void)nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, info.id, places, &n);
        nvmlGpuInstance_t gis[FHW_MAX_GIS];
        n = FHW_MAX_GIS;
        if (nvmlDeviceGetGpuInstances(d, info.id, gis, &n) != NVML_SUCCESS) continue;
        CHECK(n <= FHW_MAX_GIS);
        for (unsigned int g = 0; g < n; g++) {
            nvmlGpuInstanceInfo_t gi;
            if (nvmlGpuInstanceGetInfo(gis[g], &gi) == NVML_SUCCESS) {
                nvmlGpuInstance_t back;
                (void)nvmlDeviceGetGpuInstanceById(d, gi.id, &back);
            }
            for (unsigned int cp = 0; cp <= NVML_COMPUTE_INSTANCE_PROFILE_COUNT; cp++) {
                nvmlComputeInstanceProfileInfo_t ci;
                (void)nvmlGpuInstanceGetComputeInstanceProfileInfo(gis[g], cp, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                                                                   &ci);
                nvmlComputeInstanceProfileInfo_v2_t c2 = {.version = nvmlComputeInstanceProfileInfo_v2};
                (void)nvmlGpuInstanceGetComputeInstanceProfileInfoV(gis[g], cp, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                                                                    &c2);
                nvmlComputeInstanceProfileInfo_v3_t c3 = {.version = nvmlComputeInstanceProfileInfo_v3};
                (void)nvmlGpuInstanceGetComputeInstanceProfileInfoV(gis[g], cp, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                                                                    (nvmlComputeInstanceProfileInfo_v2_t *)&c3);
                unsigned int m = 0;
                (void)nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gis[g], cp, &m);
                nvmlComputeInstancePlacement_t cplaces[FHW_MAX_PLACEMENTS];
                m = FHW_MAX_PLACEMENTS;
                (void)nvmlGpuInstanceGetComputeInstancePossiblePlacements(gis[g], cp, cplaces, &m);
                nvmlComputeInstance_t cis[FHW_MAX_MIGS];
                m = FHW_MAX_MIGS;
                if (nvmlGpuInstanceGetComputeInstances(gis[g], cp, cis, &m) != NVML_SUCCESS) continue;
                CHECK(m <= FHW_MAX_MIGS);
                for (unsigned int k = 0; k < m; k++) {
                    nvmlComputeInstanceInfo_t cinfo;
                    fhwComputeInstanceInfoV1_t cinfo1;
                    if (nvmlComputeInstanceGetInfo_v2(cis[k], &cinfo) == NVML_SUCCESS) {
                        nvmlComputeInstance_t back;
                        (void)nvmlGpuInstanceGetComputeInstanceById(gis[g], cinfo.id, &back);
                    }
                    (void)nvmlComputeInstanceGetInfo(cis[k], &cinfo1);
                }
            }
        }
    }
}

static int cmd_mig(void) {
    for (int round = 0; round < 2; round++) {
        publish(round ? snap_b : snap_a, round ? size_b : size_a);
        CHECK(nvmlInit_v2() == NVML_SUCCESS);
        unsigned int count = 0;
        CHECK(nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS && count <= FHW_MAX_GPUS);
        for (unsigned int i = 0; i < count; i++) exercise_mig(fhw_device_handle((int)i));
        CHECK(nvmlShutdown() == NVML_SUCCESS);
    }
    return 0;
}

/* `changes` MIG mode changes of GPU 0 asked of the agent test_sanitizers.py stands in for at $FAKEHW_AGENT_SOCKET,
   each answer printed ("agent: RETURN ACTIVATION") for the test to judge; the sanitizers judge the client's buffers
   (an answer longer than the client reads must not make it write past its own). */
static int cmd_agent(long changes) {
    publish(snap_a, size_a);
    CHECK(nvmlInit_v2() == NVML_SUCCESS);
    for (long i = 0; i < changes; i++) {
        nvmlReturn_t activation = (nvmlReturn_t)-7;
        nvmlReturn_t r = nvmlDeviceSetMigMode(fhw_device_handle(0), NVML_DEVICE_MIG_ENABLE, &activation);
        fprintf(stderr, "agent: %d %d\n", (int)r, (int)activation);
    }
    CHECK(nvmlShutdown() == NVML_SUCCESS);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s calls|threads|inplace|fuzz|events|mig|agent SNAPSHOT_A SNAPSHOT_B WORKDIR [N SEED]\n", argv[0]);
        return 2;
    }
    snap_a = slurp(argv[2], &size_a);
    snap_b = slurp(argv[3], &size_b);
    snprintf(workdir, sizeof workdir, "%s", argv[4]);
    snprintf(path, sizeof path, "%s/nvml.snapshot", workdir);
    setenv("FAKEHW_NVML_SNAPSHOT", path, 1);
    unsetenv("FAKEHW_VISIBLE_DEVICES");
    int rc = 2;
    if (strcmp(argv[1], "calls") == 0) rc = cmd_calls();
    else if (strcmp(argv[1], "threads") == 0) rc = cmd_threads(0);
    else if (strcmp(argv[1], "inplace") == 0) rc = cmd_threads(1);
    else if (strcmp(argv[1], "fuzz") == 0) rc = cmd_fuzz(argc > 5 ? atol(argv[5]) : 1000, argc > 6 ? strtoull(argv[6], NULL, 0) : 1);
    else if (strcmp(argv[1], "events") == 0) rc = cmd_events();
    else if (strcmp(argv[1], "mig") == 0) rc = cmd_mig();
    else if (strcmp(argv[1], "agent") == 0) rc = cmd_agent(argc > 5 ? atol(argv[5]) : 1);
    free(snap_a);
    free(snap_b);
    return rc;
}
