/* NVLink, topology, P2P, CPU/memory affinity, NVLink fabric and field values. */
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ per-process state */

/*
 * NVLink counter resets and utilization-counter controls are this process's own: the shim never writes the
 * snapshot, so a reset records the current value as a baseline that later reads subtract (the agent's
 * counters keep rising underneath, as another process would see them).
 */
static pthread_mutex_t g_link_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_err_base[FHW_MAX_GPUS][FHW_MAX_LINKS][5];
static uint64_t g_util_base[FHW_MAX_GPUS][FHW_MAX_LINKS][2][2];
static int g_util_frozen[FHW_MAX_GPUS][FHW_MAX_LINKS][2];
static uint64_t g_util_frozen_val[FHW_MAX_GPUS][FHW_MAX_LINKS][2][2];
static nvmlNvLinkUtilizationControl_t g_util_control[FHW_MAX_GPUS][FHW_MAX_LINKS][2];

static nvmlReturn_t link_of(fhw_ctx_t *c, unsigned int link, const fhw_link_t **out) {
    if (link >= FHW_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    if (c->g->nvlink_count == 0 || link >= c->g->nvlink_count || !c->g->links[link].present)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = &c->g->links[link];
    return NVML_SUCCESS;
}

#define WITH_LINK(c, link, k)                             \
    const fhw_link_t *k;                                  \
    do {                                                  \
        nvmlReturn_t lr_ = link_of((c), (link), &k);      \
        if (lr_ != NVML_SUCCESS) return lr_;              \
    } while (0)

/* ------------------------------------------------------------------------------------------ NVLink */

static nvmlReturn_t l_state(fhw_ctx_t *c, unsigned int link, unsigned int *isActive) {
    CHECK_PTR(isActive);
    WITH_LINK(c, link, k);
    *isActive = k->up ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *isActive) {
    FHW_DEV_CALL(device, 0, l_state(&C, link, isActive));
}

static nvmlReturn_t l_version(fhw_ctx_t *c, unsigned int link, unsigned int *version) {
    CHECK_PTR(version);
    WITH_LINK(c, link, k);
    *version = k->version;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version) {
    FHW_DEV_CALL(device, 0, l_version(&C, link, version));
}

static nvmlReturn_t l_capability(fhw_ctx_t *c, unsigned int link, unsigned int cap, unsigned int *result) {
    CHECK_PTR(result);
    if (cap >= NVML_NVLINK_CAP_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    WITH_LINK(c, link, k);
    *result = (k->capabilities >> cap) & 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link, unsigned int capability,
                                           unsigned int *capResult) {
    FHW_DEV_CALL(device, 0, l_capability(&C, link, capability, capResult));
}

static nvmlReturn_t l_remote_pci_v2(fhw_ctx_t *c, unsigned int link, nvmlPciInfo_t *p) {
    CHECK_PTR(p);
    WITH_LINK(c, link, k);
    memset(p, 0, sizeof *p);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%s", k->remote_bus_id_legacy);
    snprintf(p->busId, sizeof p->busId, "%s", k->remote_bus_id);
    p->domain = k->remote_domain;
    p->bus = k->remote_bus;
    p->device = k->remote_device;
    p->pciDeviceId = k->remote_pci_device_id;
    p->pciSubSystemId = k->remote_pci_subsystem_id;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) {
    FHW_DEV_CALL(device, 0, l_remote_pci_v2(&C, link, pci));
}

static nvmlReturn_t l_remote_pci_v1(fhw_ctx_t *c, unsigned int link, fhwPciInfoV1_t *p) {
    CHECK_PTR(p);
    WITH_LINK(c, link, k);
    memset(p, 0, sizeof *p);
    snprintf(p->busId, sizeof p->busId, "%s", k->remote_bus_id_legacy);
    p->domain = k->remote_domain;
    p->bus = k->remote_bus;
    p->device = k->remote_device;
    p->pciDeviceId = k->remote_pci_device_id;
    p->pciSubSystemId = k->remote_pci_subsystem_id;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, fhwPciInfoV1_t *pci) {
    FHW_DEV_CALL(device, 0, l_remote_pci_v1(&C, link, pci));
}

static nvmlReturn_t l_remote_type(fhw_ctx_t *c, unsigned int link, unsigned int *type) {
    CHECK_PTR(type);
    WITH_LINK(c, link, k);
    *type = k->remote_type;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link, unsigned int *pNvLinkDeviceType) {
    FHW_DEV_CALL(device, 0, l_remote_type(&C, link, pNvLinkDeviceType));
}

static uint64_t link_error(fhw_ctx_t *c, const fhw_link_t *k, unsigned int link, unsigned int counter) {
    pthread_mutex_lock(&g_link_lock);
    uint64_t base = g_err_base[c->dev][link][counter];
    pthread_mutex_unlock(&g_link_lock);
    uint64_t v = k->errors[counter];
    return v >= base ? v - base : v; /* a restarted agent reset the counters: start over */
}

static nvmlReturn_t l_error(fhw_ctx_t *c, unsigned int link, unsigned int counter, unsigned long long *value) {
    CHECK_PTR(value);
    if (counter >= NVML_NVLINK_ERROR_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    WITH_LINK(c, link, k);
    *value = link_error(c, k, link, counter);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, unsigned int counter,
                                             unsigned long long *counterValue) {
    FHW_DEV_CALL(device, 0, l_error(&C, link, counter, counterValue));
}

static nvmlReturn_t l_reset_errors(fhw_ctx_t *c, unsigned int link) {
    WITH_LINK(c, link, k);
    pthread_mutex_lock(&g_link_lock);
    for (int i = 0; i < 5; i++) g_err_base[c->dev][link][i] = k->errors[i];
    pthread_mutex_unlock(&g_link_lock);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceResetNvLinkErrorCounters(nvmlDevice_t device, unsigned int link) {
    FHW_DEV_CALL(device, 0, l_reset_errors(&C, link));
}

static nvmlReturn_t l_util(fhw_ctx_t *c, unsigned int link, unsigned int counter, unsigned long long *rx,
                           unsigned long long *tx) {
    if (rx == NULL || tx == NULL || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    WITH_LINK(c, link, k);
    pthread_mutex_lock(&g_link_lock);
    if (g_util_frozen[c->dev][link][counter]) {
        *rx = g_util_frozen_val[c->dev][link][counter][0];
        *tx = g_util_frozen_val[c->dev][link][counter][1];
    } else {
        uint64_t brx = g_util_base[c->dev][link][counter][0], btx = g_util_base[c->dev][link][counter][1];
        *rx = k->util_rx[counter] >= brx ? k->util_rx[counter] - brx : k->util_rx[counter];
        *tx = k->util_tx[counter] >= btx ? k->util_tx[counter] - btx : k->util_tx[counter];
    }
    pthread_mutex_unlock(&g_link_lock);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkUtilizationCounter(nvmlDevice_t device, unsigned int link, unsigned int counter,
                                                   unsigned long long *rxcounter, unsigned long long *txcounter) {
    FHW_DEV_CALL(device, 0, l_util(&C, link, counter, rxcounter, txcounter));
}

static nvmlReturn_t l_util_reset(fhw_ctx_t *c, unsigned int link, unsigned int counter) {
    if (counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    WITH_LINK(c, link, k);
    pthread_mutex_lock(&g_link_lock);
    g_util_base[c->dev][link][counter][0] = k->util_rx[counter];
    g_util_base[c->dev][link][counter][1] = k->util_tx[counter];
    g_util_frozen_val[c->dev][link][counter][0] = 0;
    g_util_frozen_val[c->dev][link][counter][1] = 0;
    pthread_mutex_unlock(&g_link_lock);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceResetNvLinkUtilizationCounter(nvmlDevice_t device, unsigned int link, unsigned int counter) {
    FHW_DEV_CALL(device, 0, l_util_reset(&C, link, counter));
}

static nvmlReturn_t l_util_freeze(fhw_ctx_t *c, unsigned int link, unsigned int counter, unsigned int freeze) {
    if (counter > 1 || freeze > 1) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long rx = 0, tx = 0;
    nvmlReturn_t r = l_util(c, link, counter, &rx, &tx);
    if (r != NVML_SUCCESS) return r;
    pthread_mutex_lock(&g_link_lock);
    g_util_frozen[c->dev][link][counter] = (int)freeze;
    g_util_frozen_val[c->dev][link][counter][0] = rx;
    g_util_frozen_val[c->dev][link][counter][1] = tx;
    pthread_mutex_unlock(&g_link_lock);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceFreezeNvLinkUtilizationCounter(nvmlDevice_t device, unsigned int link, unsigned int counter,
                                                      unsigned int freeze) {
    FHW_DEV_CALL(device, 0, l_util_freeze(&C, link, counter, freeze));
}

static nvmlReturn_t l_util_control_get(fhw_ctx_t *c, unsigned int link, unsigned int counter,
                                       nvmlNvLinkUtilizationControl_t *control) {
    if (control == NULL || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    WITH_LINK(c, link, k);
    (void)k;
    pthread_mutex_lock(&g_link_lock);
    *control = g_util_control[c->dev][link][counter];
    pthread_mutex_unlock(&g_link_lock);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkUtilizationControl(nvmlDevice_t device, unsigned int link, unsigned int counter,
                                                   nvmlNvLinkUtilizationControl_t *control) {
    FHW_DEV_CALL(device, 0, l_util_control_get(&C, link, counter, control));
}

static nvmlReturn_t l_util_control_set(fhw_ctx_t *c, unsigned int link, unsigned int counter,
                                       const nvmlNvLinkUtilizationControl_t *control, unsigned int reset) {
    if (control == NULL || counter > 1 || control->units >= NVML_NVLINK_COUNTER_UNIT_RESERVED)
        return NVML_ERROR_INVALID_ARGUMENT;
    WITH_LINK(c, link, k);
    (void)k;
    pthread_mutex_lock(&g_link_lock);
    g_util_control[c->dev][link][counter] = *control;
    pthread_mutex_unlock(&g_link_lock);
    return reset ? l_util_reset(c, link, counter) : NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceSetNvLinkUtilizationControl(nvmlDevice_t device, unsigned int link, unsigned int counter,
                                                   nvmlNvLinkUtilizationControl_t *control, unsigned int reset) {
    FHW_DEV_CALL(device, 0, l_util_control_set(&C, link, counter, control, reset));
}

/* ------------------------------------------------------------------------------------------ topology */

/* Enter for a pair of devices; both must be physical GPUs of this node. */
static nvmlReturn_t enter_pair(fhw_ctx_t *c, nvmlDevice_t a, nvmlDevice_t b, int *slot_b) {
    int db = fhw_device_id_of(b);
    if (fhw_initialized() && db < 0) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = fhw_enter_dev(c, a, 0);
    if (r != NVML_SUCCESS) return r;
    int sb = c->s->dev_slot[db];
    if (sb < 0 || c->s->gpus[sb].lost) {
        fhw_leave(c);
        return NVML_ERROR_GPU_IS_LOST;
    }
    *slot_b = sb;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t *pathInfo) {
    fhw_ctx_t C;
    int sb;
    nvmlReturn_t r = enter_pair(&C, device1, device2, &sb);
    if (r != NVML_SUCCESS) return r;
    if (pathInfo == NULL) r = NVML_ERROR_INVALID_ARGUMENT;
    else *pathInfo = (nvmlGpuTopologyLevel_t)C.g->topo_level[sb];
    fhw_leave(&C);
    return r;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,
                                    nvmlGpuP2PStatus_t *p2pStatus) {
    fhw_ctx_t C;
    int sb;
    nvmlReturn_t r = enter_pair(&C, device1, device2, &sb);
    if (r != NVML_SUCCESS) return r;
    if (p2pStatus == NULL || (unsigned int)p2pIndex > NVML_P2P_CAPS_INDEX_UNKNOWN) r = NVML_ERROR_INVALID_ARGUMENT;
    else if (p2pIndex == NVML_P2P_CAPS_INDEX_UNKNOWN) *p2pStatus = NVML_P2P_STATUS_UNKNOWN;
    else *p2pStatus = (nvmlGpuP2PStatus_t)C.g->p2p[p2pIndex][sb];
    fhw_leave(&C);
    return r;
}

static nvmlReturn_t t_nearest(fhw_ctx_t *c, unsigned int level, unsigned int *count, nvmlDevice_t *devices) {
    CHECK_PTR(count);
    if (level > NVML_TOPOLOGY_SYSTEM || level % 10 != 0) return NVML_ERROR_INVALID_ARGUMENT;
    const fhw_visible_t *vis = fhw_visible();
    unsigned int n = 0;
    for (int d = 0; d < vis->count; d++) {
        int slot = c->s->dev_slot[d];
        if (d == c->dev || slot < 0 || c->g->topo_level[slot] != level) continue;
        if (*count != 0) {
            if (devices == NULL) return NVML_ERROR_INVALID_ARGUMENT;
            if (n < *count) devices[n] = fhw_device_handle(d);
        }
        n++;
    }
    if (*count != 0 && n > *count) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level, unsigned int *count,
                                              nvmlDevice_t *deviceArray) {
    FHW_DEV_CALL(device, 0, t_nearest(&C, (unsigned int)level, count, deviceArray));
}

/* ------------------------------------------------------------------------------------------ affinity */

static nvmlReturn_t a_mask(const uint64_t *mask, unsigned int words, unsigned int size, unsigned long *out) {
    CHECK_PTR(out);
    if (size == 0) return NVML_ERROR_INVALID_ARGUMENT;
    const unsigned int per = (unsigned int)(sizeof(unsigned long) * 8);
    for (unsigned int i = 0; i < size; i++) {
        unsigned long v = 0;
        for (unsigned int b = 0; b < per; b++) {
            unsigned int bit = i * per + b;
            if (bit / 64 < words && (mask[bit / 64] >> (bit % 64) & 1)) v |= 1UL << b;
        }
        out[i] = v;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t a_cpu(fhw_ctx_t *c, unsigned int size, unsigned long *set) {
    return a_mask(c->g->cpu_affinity, FHW_CPU_MASK_WORDS, size, set);
}
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet) {
    FHW_DEV_CALL(device, 0, a_cpu(&C, cpuSetSize, cpuSet));
}

static nvmlReturn_t a_cpu_scope(fhw_ctx_t *c, unsigned int size, unsigned long *set, unsigned int scope) {
    if (scope > NVML_AFFINITY_SCOPE_SOCKET) return NVML_ERROR_INVALID_ARGUMENT;
    /* The profiles' NUMA nodes with CPUs are their sockets, so both scopes give the same set. */
    return a_mask(c->g->cpu_affinity, FHW_CPU_MASK_WORDS, size, set);
}
nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet,
                                                 unsigned int scope) {
    FHW_DEV_CALL(device, 0, a_cpu_scope(&C, cpuSetSize, cpuSet, scope));
}

static nvmlReturn_t a_mem(fhw_ctx_t *c, unsigned int size, unsigned long *set, unsigned int scope) {
    if (scope > NVML_AFFINITY_SCOPE_SOCKET) return NVML_ERROR_INVALID_ARGUMENT;
    return a_mask(c->g->mem_affinity, FHW_NUMA_MASK_WORDS, size, set);
}
nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize, unsigned long *nodeSet,
                                         unsigned int scope) {
    FHW_DEV_CALL(device, 0, a_mem(&C, nodeSetSize, nodeSet, scope));
}

/* Pin the calling thread to the GPU's CPUs (only those this machine has). */
static nvmlReturn_t a_set(fhw_ctx_t *c) {
    cpu_set_t set;
    CPU_ZERO(&set);
    long online = sysconf(_SC_NPROCESSORS_CONF);
    int any = 0;
    for (int cpu = 0; cpu < FHW_CPU_MASK_WORDS * 64 && cpu < CPU_SETSIZE; cpu++)
        if ((c->g->cpu_affinity[cpu / 64] >> (cpu % 64) & 1) && cpu < online) {
            CPU_SET(cpu, &set);
            any = 1;
        }
    if (!any) return NVML_ERROR_NOT_SUPPORTED; /* the model's CPUs do not exist on this host */
    return sched_setaffinity(0, sizeof set, &set) == 0 ? NVML_SUCCESS : NVML_ERROR_OPERATING_SYSTEM;
}
nvmlReturn_t nvmlDeviceSetCpuAffinity(nvmlDevice_t device) { FHW_DEV_CALL(device, 0, a_set(&C)); }

static nvmlReturn_t a_clear(fhw_ctx_t *c) {
    (void)c;
    cpu_set_t set;
    CPU_ZERO(&set);
    long online = sysconf(_SC_NPROCESSORS_CONF);
    for (long cpu = 0; cpu < online && cpu < CPU_SETSIZE; cpu++) CPU_SET((int)cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? NVML_SUCCESS : NVML_ERROR_OPERATING_SYSTEM;
}
nvmlReturn_t nvmlDeviceClearCpuAffinity(nvmlDevice_t device) { FHW_DEV_CALL(device, 0, a_clear(&C)); }

static nvmlReturn_t a_numa_id(fhw_ctx_t *c, unsigned int *node) {
    CHECK_PTR(node);
    if (c->g->gpu_numa_id < 0) return NVML_ERROR_NOT_SUPPORTED; /* GPU memory is not a NUMA node here */
    *node = (unsigned int)c->g->gpu_numa_id;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) {
    FHW_DEV_CALL(device, 0, a_numa_id(&C, node));
}

/* ------------------------------------------------------------------------------------------ fabric */

static nvmlReturn_t f_info(fhw_ctx_t *c, nvmlGpuFabricInfo_t *f) {
    CHECK_PTR(f);
    if (!c->g->fabric_supported) return NVML_ERROR_NOT_SUPPORTED;
    memset(f, 0, sizeof *f);
    memcpy(f->clusterUuid, c->g->fabric_cluster_uuid, sizeof f->clusterUuid);
    f->status = (nvmlReturn_t)c->g->fabric_status;
    f->cliqueId = c->g->fabric_clique_id;
    f->state = (nvmlGpuFabricState_t)c->g->fabric_state;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo) {
    FHW_DEV_CALL(device, 0, f_info(&C, gpuFabricInfo));
}

static nvmlReturn_t f_info_v(fhw_ctx_t *c, void *info) {
    CHECK_PTR(info);
    unsigned int version;
    memcpy(&version, info, sizeof version);
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!c->g->fabric_supported) return NVML_ERROR_NOT_SUPPORTED;
    nvmlGpuFabricInfo_v3_t v;
    memset(&v, 0, sizeof v);
    v.version = version;
    memcpy(v.clusterUuid, c->g->fabric_cluster_uuid, sizeof v.clusterUuid);
    v.status = (nvmlReturn_t)c->g->fabric_status;
    v.cliqueId = c->g->fabric_clique_id;
    v.state = (nvmlGpuFabricState_t)c->g->fabric_state;
    v.healthMask = c->g->fabric_health_mask;
    v.healthSummary = (unsigned char)c->g->fabric_health_summary;
    memcpy(info, &v, version == nvmlGpuFabricInfo_v2 ? sizeof(nvmlGpuFabricInfo_v2_t) : sizeof v);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *gpuFabricInfo) {
    FHW_DEV_CALL(device, 0, f_info_v(&C, gpuFabricInfo));
}

/* ------------------------------------------------------------------------------------------ field values */

static int per_link_field(unsigned int id, unsigned int base_lo, unsigned int base_hi, unsigned int *link) {
    /* Lanes 0-5 sit at base_lo..base_lo+5, lanes 6-11 at base_hi..base_hi+5 (the NVML numbering). */
    if (id >= base_lo && id < base_lo + 6) {
        *link = id - base_lo;
        return 1;
    }
    if (base_hi && id >= base_hi && id < base_hi + 6) {
        *link = id - base_hi + 6;
        return 1;
    }
    return 0;
}

/* Per-lane NVLink error fields: (first id of lanes 0-5, first id of lanes 6-11, counter in snapshot order). */
static const struct {
    unsigned int lo, hi, counter;
} lane_fields[] = {
    {NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6, 2},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6, 3},
    {NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6, 0},
    {NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6, 1},
    {NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0 + 6, 4},
};

static int lane_counter_field(unsigned int id, unsigned int *link, unsigned int *counter) {
    for (size_t i = 0; i < sizeof lane_fields / sizeof lane_fields[0]; i++)
        if (per_link_field(id, lane_fields[i].lo, lane_fields[i].hi, link)) {
            *counter = lane_fields[i].counter;
            return 1;
        }
    return 0;
}

static uint64_t link_sum(fhw_ctx_t *c, unsigned int counter) {
    uint64_t sum = 0;
    for (unsigned int l = 0; l < c->g->nvlink_count; l++)
        if (c->g->links[l].present) sum += link_error(c, &c->g->links[l], l, counter);
    return sum;
}

static void field_value(fhw_ctx_t *c, nvmlFieldValue_t *v) {
    const fhw_gpu_t *g = c->g;
    unsigned int id = v->fieldId, link = 0, counter_ix = 0;
    unsigned long long u = 0;
    nvmlValueType_t type = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    nvmlReturn_t r = NVML_SUCCESS;
    /* NVLink counter order in the snapshot: replay, recovery, crc-flit, crc-data, ecc-data. */
    if (id == NVML_FI_DEV_ECC_CURRENT || id == NVML_FI_DEV_ECC_PENDING) {
        u = id == NVML_FI_DEV_ECC_CURRENT ? g->ecc_current : g->ecc_pending;
        type = NVML_VALUE_TYPE_UNSIGNED_INT;
    } else if (id >= NVML_FI_DEV_ECC_SBE_VOL_TOTAL && id <= NVML_FI_DEV_ECC_DBE_AGG_TOTAL) {
        unsigned int k = id - NVML_FI_DEV_ECC_SBE_VOL_TOTAL; /* sbe vol, dbe vol, sbe agg, dbe agg */
        for (int l = 0; l < FHW_ECC_LOCATIONS; l++) u += g->ecc_counts[k % 2][k / 2][l];
        if (!g->ecc_current) r = NVML_ERROR_NOT_SUPPORTED;
    } else if (id >= NVML_FI_DEV_ECC_SBE_VOL_L1 && id <= NVML_FI_DEV_ECC_DBE_AGG_CBU) {
        /* 7..17 volatile, 18..28 aggregate: L1, L2, DEV, REG, TEX pairs (sbe, dbe), then CBU dbe. */
        static const signed char loc[11] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 6};
        static const signed char err[11] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1};
        unsigned int k = id - NVML_FI_DEV_ECC_SBE_VOL_L1;
        unsigned int counter = k >= 11;
        k %= 11;
        u = g->ecc_counts[(int)err[k]][counter][(int)loc[k]];
        if (!g->ecc_current) r = NVML_ERROR_NOT_SUPPORTED;
    } else if (id == NVML_FI_DEV_RETIRED_SBE || id == NVML_FI_DEV_RETIRED_DBE) {
        u = id == NVML_FI_DEV_RETIRED_SBE ? g->retired_sbe : g->retired_dbe;
    } else if (id == NVML_FI_DEV_RETIRED_PENDING || id == NVML_FI_DEV_RETIRED_PENDING_DBE) {
        u = g->retired_pending;
    } else if (id == NVML_FI_DEV_RETIRED_PENDING_SBE) {
        u = g->retired_pending_sbe;
    } else if (lane_counter_field(id, &link, &counter_ix)) {
        const fhw_link_t *k;
        r = link_of(c, link, &k);
        if (r == NVML_SUCCESS) u = link_error(c, k, link, counter_ix);
    } else if (id == NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL) {
        u = link_sum(c, 2);
    } else if (id == NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL) {
        u = link_sum(c, 3);
    } else if (id == NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL) {
        u = link_sum(c, 0);
    } else if (id == NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL) {
        u = link_sum(c, 1);
    } else if (id == NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL) {
        u = link_sum(c, 4);
    } else if (id == NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY || id == NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY ||
               id == NVML_FI_DEV_NVLINK_ERROR_DL_CRC || id == NVML_FI_DEV_NVLINK_GET_SPEED ||
               id == NVML_FI_DEV_NVLINK_GET_STATE || id == NVML_FI_DEV_NVLINK_GET_VERSION ||
               id == NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID) {
        /* Scoped by link: scopeId names the link. */
        const fhw_link_t *k;
        r = link_of(c, v->scopeId, &k);
        if (r == NVML_SUCCESS) {
            switch (id) {
            case NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: u = link_error(c, k, v->scopeId, 0); break;
            case NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: u = link_error(c, k, v->scopeId, 1); break;
            case NVML_FI_DEV_NVLINK_ERROR_DL_CRC: u = link_error(c, k, v->scopeId, 2) + link_error(c, k, v->scopeId, 3); break;
            case NVML_FI_DEV_NVLINK_GET_SPEED: u = k->speed_mbps; type = NVML_VALUE_TYPE_UNSIGNED_INT; break;
            case NVML_FI_DEV_NVLINK_GET_STATE: u = k->up; type = NVML_VALUE_TYPE_UNSIGNED_INT; break;
            case NVML_FI_DEV_NVLINK_GET_VERSION: u = k->version; type = NVML_VALUE_TYPE_UNSIGNED_INT; break;
            default: u = k->remote_link; type = NVML_VALUE_TYPE_UNSIGNED_INT; break;
            }
        }
    } else if (per_link_field(id, NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L0, NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L6, &link) ||
               per_link_field(id, NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L0, NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L6, &link)) {
        unsigned int counter = (id >= NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L0 && id < NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L0 + 6) ||
                               id >= NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L6;
        const fhw_link_t *k;
        r = link_of(c, link, &k);
        if (r == NVML_SUCCESS) u = k->util_rx[counter] + k->util_tx[counter];
    } else if (id == NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL || id == NVML_FI_DEV_NVLINK_BANDWIDTH_C1_TOTAL) {
        unsigned int counter = id == NVML_FI_DEV_NVLINK_BANDWIDTH_C1_TOTAL;
        for (unsigned int l = 0; l < g->nvlink_count; l++) u += g->links[l].util_rx[counter] + g->links[l].util_tx[counter];
    } else if (id >= NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX && id <= NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX) {
        int tx = id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX || id == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX;
        for (unsigned int l = 0; l < g->nvlink_count; l++) u += tx ? g->links[l].util_tx[0] : g->links[l].util_rx[0];
        u /= 1024; /* KiB */
        if (g->nvlink_count == 0) r = NVML_ERROR_NOT_SUPPORTED;
    } else if (id >= NVML_FI_DEV_NVLINK_SPEED_MBPS_L0 && id <= NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON) {
        type = NVML_VALUE_TYPE_UNSIGNED_INT;
        if (id == NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON) {
            for (unsigned int l = 0; l < g->nvlink_count; l++)
                if (g->links[l].up) u = g->links[l].speed_mbps;
            if (g->nvlink_count == 0) r = NVML_ERROR_NOT_SUPPORTED;
        } else {
            const fhw_link_t *k;
            r = link_of(c, id - NVML_FI_DEV_NVLINK_SPEED_MBPS_L0, &k);
            if (r == NVML_SUCCESS) u = k->speed_mbps;
        }
    } else if (per_link_field(id, 0xFFFF, NVML_FI_DEV_NVLINK_SPEED_MBPS_L6, &link)) {
        const fhw_link_t *k;
        type = NVML_VALUE_TYPE_UNSIGNED_INT;
        r = link_of(c, link, &k);
        if (r == NVML_SUCCESS) u = k->speed_mbps;
    } else if (id == NVML_FI_DEV_NVLINK_LINK_COUNT) {
        u = g->nvlink_count;
        type = NVML_VALUE_TYPE_UNSIGNED_INT;
        if (g->nvlink_count == 0) r = NVML_ERROR_NOT_SUPPORTED;
    } else if (id == NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT) {
        u = g->nvswitch_links;
        type = NVML_VALUE_TYPE_UNSIGNED_INT;
    } else if (id >= NVML_FI_DEV_PERF_POLICY_POWER && id <= NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS) {
        unsigned int policy = id - NVML_FI_DEV_PERF_POLICY_POWER;
        if (policy >= 6) policy += 4; /* 80, 81 -> TOTAL_APP_CLOCKS (10), TOTAL_BASE_CLOCKS (11) */
        unsigned long long rr = g->throttle_reasons;
        int hit = (policy == 0 && (rr & 0x84)) || (policy == 1 && (rr & 0x60)) || (policy >= 10 && rr);
        u = hit ? c->s->hdr->generation * 1000000000ULL : 0;
    } else if (id == NVML_FI_DEV_MEMORY_TEMP) {
        u = g->mem_temperature;
        type = NVML_VALUE_TYPE_UNSIGNED_INT;
    } else if (id == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION) {
        u = g->energy_mj;
    } else if (id == NVML_FI_DEV_PCIE_REPLAY_COUNTER) {
        u = g->pcie_replay;
    } else if (id == NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER) {
        u = 0;
    } else if (id >= NVML_FI_DEV_REMAPPED_COR && id <= NVML_FI_DEV_REMAPPED_FAILURE) {
        const uint32_t vals[4] = {g->remap_corr, g->remap_unc, g->remap_pending, g->remap_failure};
        u = vals[id - NVML_FI_DEV_REMAPPED_COR];
        type = NVML_VALUE_TYPE_UNSIGNED_INT;
    } else {
        r = NVML_ERROR_NOT_SUPPORTED;
    }
    v->timestamp = c->s->hdr->render_time_us;
    v->latencyUsec = 0;
    v->nvmlReturn = r;
    v->valueType = type;
    v->value.ullVal = 0;
    if (r == NVML_SUCCESS) {
        if (type == NVML_VALUE_TYPE_UNSIGNED_INT) v->value.uiVal = (unsigned int)u;
        else v->value.ullVal = u;
    }
}

static nvmlReturn_t fv_get(fhw_ctx_t *c, int count, nvmlFieldValue_t *values) {
    if (values == NULL || count <= 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) field_value(c, &values[i]);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    FHW_DEV_CALL(device, 0, fv_get(&C, valuesCount, values));
}
