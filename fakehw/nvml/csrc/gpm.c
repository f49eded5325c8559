/*
 * GPM, the GPU performance monitoring DCGM's profiling metrics come from (Hopper and later). A sample records
 * the snapshot's activity figures (fakehw/nvml/readings.py derives them from the GPU's utilization) and its NVLink
 * and PCIe counters at the moment it is taken; nvmlGpmMetricsGet turns two samples into metrics: activity
 * percentages of the later sample, and rates from the counter differences over the time between the samples.
 */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

#define FHW_GPM_MAGIC 0x66687770u
#define GPM_LINKS FHW_MAX_LINKS

struct nvmlGpmSample_st {
    uint32_t magic;
    int filled;
    int dev;
    int64_t time_ns;
    unsigned int activity[8]; /* hundredths of a percent: graphics, sm, occupancy, tensor, dram, fp64, fp32, fp16 */
    unsigned long long pcie_tx_bytes, pcie_rx_bytes;
    unsigned long long nvlink_rx[GPM_LINKS], nvlink_tx[GPM_LINKS];
    unsigned int decoders, jpegs, ofas;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample) {
    FHW_GATE();
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (gpmSample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlGpmSample_st *s = calloc(1, sizeof *s);
    if (s == NULL) return NVML_ERROR_MEMORY;
    s->magic = FHW_GPM_MAGIC;
    *gpmSample = s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
    FHW_GATE();
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (gpmSample == NULL || gpmSample->magic != FHW_GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    gpmSample->magic = 0;
    free(gpmSample);
    return NVML_SUCCESS;
}

/* The PCIe byte counters (field values 197, 198 and the GPM samples read these). The snapshot holds the current
   throughput only (KiB/s, a figure of its generation), so the counters are integrated here: at a GPU's first
   reading, its current rate over the monotonic clock's time since boot; after that, each reading adds the current
   rate over the time since the previous one. A counter so never runs backwards when a new generation lowers the
   rate (rate x time since boot did: the later sample below the earlier one, a GPM difference wrapping round to
   ~10^13 MiB/s), and its growth between two readings is the rate in between. Per process and GPU slot, like the
   resets of links.c's counters. */
typedef struct {
    int64_t time_ns; /* of the last reading; 0: boot */
    double tx, rx;   /* bytes */
} pcie_counter_t;
static pcie_counter_t pcie[FHW_MAX_GPUS];
static pthread_mutex_t pcie_lock = PTHREAD_MUTEX_INITIALIZER;

int64_t fhw_pcie_bytes(const fhw_ctx_t *c, unsigned long long *tx, unsigned long long *rx) {
    const fhw_gpu_t *g = c->g;
    pthread_mutex_lock(&pcie_lock);
    pcie_counter_t *p = &pcie[c->slot];
    int64_t now = now_ns(); /* under the lock: no reading is older than the last one */
    double seconds = (double)(now - p->time_ns) / 1e9;
    p->tx += (double)g->pcie_tx_kbs * 1024.0 * seconds;
    p->rx += (double)g->pcie_rx_kbs * 1024.0 * seconds;
    p->time_ns = now;
    *tx = (unsigned long long)p->tx;
    *rx = (unsigned long long)p->rx;
    pthread_mutex_unlock(&pcie_lock);
    return now;
}

static nvmlReturn_t g_sample(fhw_ctx_t *c, nvmlGpmSample_t s) {
    if (s == NULL || s->magic != FHW_GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    FHW_REQUIRE(c, FHW_ANS_GPM);
    const fhw_gpu_t *g = c->g;
    s->filled = 1;
    s->dev = c->dev;
    const unsigned int act[8] = {g->gpm_graphics_activity, g->gpm_sm_activity, g->gpm_sm_occupancy,
                                 g->gpm_tensor_activity,   g->gpm_dram_bw_util, g->gpm_fp64_activity,
                                 g->gpm_fp32_activity,     g->gpm_fp16_activity};
    memcpy(s->activity, act, sizeof act);
    s->time_ns = fhw_pcie_bytes(c, &s->pcie_tx_bytes, &s->pcie_rx_bytes);
    for (unsigned int l = 0; l < GPM_LINKS; l++) {
        s->nvlink_rx[l] = g->links[l].present ? g->links[l].util_rx[0] : 0;
        s->nvlink_tx[l] = g->links[l].present ? g->links[l].util_tx[0] : 0;
    }
    s->decoders = g->decoders;
    s->jpegs = g->jpegs;
    s->ofas = g->ofas;
    return NVML_SUCCESS;
}
/* nvml.h: "This API supports the device handle and MIG device handle". A MIG device's sample is its GPU's, as a
   GPU instance's is (nvmlGpmMigSampleGet below): the snapshot keeps no per-instance activity. */
nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
    FHW_DEV_CALL(device, FHW_ALLOW_MIG, g_sample(&C, gpmSample));
}

static nvmlReturn_t g_mig_sample(fhw_ctx_t *c, unsigned int gpuInstanceId, nvmlGpmSample_t s) {
    if (!c->g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int k = 0; k < c->g->mig_count; k++)
        if (c->s->migs[c->g->mig_first + k].gpu_instance_id == gpuInstanceId) return g_sample(c, s);
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample) {
    FHW_DEV_CALL(device, 0, g_mig_sample(&C, gpuInstanceId, gpmSample));
}

static nvmlReturn_t g_support(fhw_ctx_t *c, nvmlGpmSupport_t *s) {
    CHECK_PTR(s);
    if (s->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    s->isSupportedDevice = FHW_ANSWER(c, FHW_ANS_GPM) == NVML_SUCCESS;
    return NVML_SUCCESS;
}
/* nvml.h: "This API supports the device handle and MIG device handle": a MIG device answers for its GPU. */
nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport) {
    FHW_DEV_CALL(device, FHW_ALLOW_MIG, g_support(&C, gpmSupport));
}

/* Streaming (the driver sampling on its own): NVML_FEATURE_DISABLED until a process enables it. The state is this
   process's own, per GPU slot, like links.c's counter controls: the shim never writes the snapshot. nvml.h documents
   SUCCESS for a state that was set and no permission error (it was NO_PERMISSION, "needs root", until 2026-11-29). */
static unsigned char streaming[FHW_MAX_GPUS];

static nvmlReturn_t g_streaming(fhw_ctx_t *c, unsigned int *state) {
    CHECK_PTR(state);
    FHW_REQUIRE(c, FHW_ANS_GPM);
    *state = __atomic_load_n(&streaming[c->slot], __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmQueryIfStreamingEnabled(nvmlDevice_t device, unsigned int *state) {
    FHW_DEV_CALL(device, 0, g_streaming(&C, state));
}
static nvmlReturn_t g_set_streaming(fhw_ctx_t *c, unsigned int state) {
    if (state > NVML_FEATURE_ENABLED) return NVML_ERROR_INVALID_ARGUMENT; /* neither DISABLED nor ENABLED */
    FHW_REQUIRE(c, FHW_ANS_GPM);
    __atomic_store_n(&streaming[c->slot], (unsigned char)state, __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSetStreamingEnabled(nvmlDevice_t device, unsigned int state) {
    FHW_DEV_CALL(device, 0, g_set_streaming(&C, state));
}

/* ------------------------------------------------------------------------------------------ metrics */

/* What a metric is made of: an activity of the later sample (its slot in activity[], over a divisor), a PCIe or NVLink
   byte rate between the samples (NVLink: one link, or all of them for link -1), or one engine's utilization. */
typedef enum { M_ACTIVITY, M_PCIE, M_NVLINK, M_ENGINE } metric_kind_t;
enum { E_NVDEC, E_NVJPG, E_NVOFA };

typedef struct {
    unsigned int id;
    const char *short_name, *long_name, *unit;
    metric_kind_t kind;
    int which; /* M_ACTIVITY: slot; M_PCIE: 1 transmitted, 0 received; M_NVLINK: link or -1; M_ENGINE: E_* */
    int part;  /* M_ACTIVITY: divisor; M_NVLINK: 1 transmitted, 0 received; M_ENGINE: the engine's index */
} metric_info_t;

#define ACTIVITY(id, s, l, slot, divisor) {id, s, l, "%", M_ACTIVITY, slot, divisor}
#define ENGINE(id, s, l, kind, i) {id, s, l, "%", M_ENGINE, kind, i}
#define NVDEC(i) ENGINE(30 + (i), "nvdec" #i "_util", "NVDEC " #i " utilization", E_NVDEC, i)
#define NVJPG(i) ENGINE(40 + (i), "nvjpg" #i "_util", "NVJPG " #i " utilization", E_NVJPG, i)
#define NVOFA(i) ENGINE(50 + (i), "nvofa" #i "_util", "NVOFA " #i " utilization", E_NVOFA, i)
#define LINK(l)                                                                                                       \
    {62 + 2 * (l), "nvlink_l" #l "_rx", "NvLink link " #l " bytes received", "MiB/sec", M_NVLINK, l, 0},             \
        {63 + 2 * (l), "nvlink_l" #l "_tx", "NvLink link " #l " bytes transmitted", "MiB/sec", M_NVLINK, l, 1}

/* nvml.h's nvmlGpmMetricId_t, each id with its own name; the activity slots are those of g_sample. DMMA_TENSOR_UTIL
   (8) and the C2C metrics (100 and up) are not modelled: NOT_SUPPORTED, no name. */
static const metric_info_t METRICS[] = {
    ACTIVITY(1, "gr_util", "Graphics engine utilization", 0, 1),
    ACTIVITY(2, "sm_util", "SM utilization", 1, 1),
    ACTIVITY(3, "sm_occupancy", "SM occupancy", 2, 1),
    ACTIVITY(4, "integer_util", "Integer pipe utilization", 6, 1),
    ACTIVITY(5, "any_tensor_util", "Any tensor pipe utilization", 3, 1),
    /* the tensor activity split over three tensor pipes */
    ACTIVITY(6, "dfma_tensor_util", "DFMA tensor pipe utilization", 3, 3),
    ACTIVITY(7, "hmma_tensor_util", "HMMA tensor pipe utilization", 3, 3),
    ACTIVITY(9, "imma_tensor_util", "IMMA tensor pipe utilization", 3, 3),
    ACTIVITY(10, "dram_bw_util", "DRAM bandwidth utilization", 4, 1),
    ACTIVITY(11, "fp64_util", "FP64 pipe utilization", 5, 1),
    ACTIVITY(12, "fp32_util", "FP32 pipe utilization", 6, 1),
    ACTIVITY(13, "fp16_util", "FP16 pipe utilization", 7, 1),
    {20, "pcie_tx", "PCIe bytes transmitted", "MiB/sec", M_PCIE, 1, 0},
    {21, "pcie_rx", "PCIe bytes received", "MiB/sec", M_PCIE, 0, 0},
    NVDEC(0), NVDEC(1), NVDEC(2), NVDEC(3), NVDEC(4), NVDEC(5), NVDEC(6), NVDEC(7),
    NVJPG(0), NVJPG(1), NVJPG(2), NVJPG(3), NVJPG(4), NVJPG(5), NVJPG(6), NVJPG(7),
    NVOFA(0), NVOFA(1),
    {60, "nvlink_rx", "NvLink bytes received", "MiB/sec", M_NVLINK, -1, 0},
    {61, "nvlink_tx", "NvLink bytes transmitted", "MiB/sec", M_NVLINK, -1, 1},
    LINK(0), LINK(1), LINK(2), LINK(3), LINK(4), LINK(5), LINK(6), LINK(7), LINK(8),
    LINK(9), LINK(10), LINK(11), LINK(12), LINK(13), LINK(14), LINK(15), LINK(16), LINK(17),
};
_Static_assert(GPM_LINKS == 18, "nvml.h's per-link GPM metrics (62-97) are links 0-17");

static const metric_info_t *metric_info(unsigned int id) {
    for (size_t i = 0; i < sizeof METRICS / sizeof METRICS[0]; i++)
        if (METRICS[i].id == id) return &METRICS[i];
    return NULL;
}

/* One metric from two samples; a - b over dt seconds in MiB/s for the rates. */
static nvmlReturn_t metric_value(const struct nvmlGpmSample_st *a, const struct nvmlGpmSample_st *b,
                                 const metric_info_t *m, double *out) {
    double dt = (double)(b->time_ns - a->time_ns) / 1e9;
    const double mib = 1024.0 * 1024.0;
    unsigned long long d = 0;
    switch (m->kind) {
    case M_ACTIVITY:
        *out = b->activity[m->which] / 100.0 / m->part;
        return NVML_SUCCESS;
    case M_ENGINE: {
        unsigned int engines = m->which == E_NVDEC ? b->decoders : m->which == E_NVJPG ? b->jpegs : b->ofas;
        if ((unsigned int)m->part >= engines) return NVML_ERROR_NOT_SUPPORTED;
        *out = 0.0; /* no video, JPEG or optical-flow work in the model */
        return NVML_SUCCESS;
    }
    case M_PCIE:
        d = m->which ? b->pcie_tx_bytes - a->pcie_tx_bytes : b->pcie_rx_bytes - a->pcie_rx_bytes;
        break;
    case M_NVLINK:
        for (unsigned int l = 0; l < GPM_LINKS; l++)
            if (m->which < 0 || l == (unsigned int)m->which)
                d += m->part ? b->nvlink_tx[l] - a->nvlink_tx[l] : b->nvlink_rx[l] - a->nvlink_rx[l];
        break;
    }
    *out = dt > 0 ? (double)d / mib / dt : 0.0;
    return NVML_SUCCESS;
}

static nvmlReturn_t g_metrics(fhw_ctx_t *c, nvmlGpmMetricsGet_t *m) {
    CHECK_PTR(m);
    if (m->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (m->numMetrics > c->s->hdr->gpm_metric_max) return NVML_ERROR_INVALID_ARGUMENT;
    const struct nvmlGpmSample_st *a = m->sample1, *b = m->sample2;
    if (a == NULL || b == NULL || a->magic != FHW_GPM_MAGIC || b->magic != FHW_GPM_MAGIC || !a->filled ||
        !b->filled || a->dev != b->dev || b->time_ns < a->time_ns)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlGpmMetric_t *metrics = &m->metrics[0];
    for (unsigned int i = 0; i < m->numMetrics; i++) {
        nvmlGpmMetric_t *x = &metrics[i];
        const metric_info_t *info = metric_info(x->metricId);
        x->value = 0.0;
        x->nvmlReturn = info ? metric_value(a, b, info, &x->value) : NVML_ERROR_NOT_SUPPORTED;
        x->metricInfo.shortName = info ? (char *)info->short_name : NULL;
        x->metricInfo.longName = info ? (char *)info->long_name : NULL;
        x->metricInfo.unit = info ? (char *)info->unit : NULL;
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet) { FHW_SYS_CALL(g_metrics(&C, metricsGet)); }
