/* NVLink, topology, P2P, CPU/memory affinity and NVLink fabric. */
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

nvmlReturn_t fhw_link_of(fhw_ctx_t *c, unsigned int link, const fhw_link_t **out) {
    if (link >= FHW_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    if (c->g->nvlink_count == 0 || link >= c->g->nvlink_count || !c->g->links[link].present)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = &c->g->links[link];
    return NVML_SUCCESS;
}

#define WITH_LINK(c, link, k)                             \
    const fhw_link_t *k;                                  \
    do {                                                  \
        nvmlReturn_t lr_ = fhw_link_of((c), (link), &k);      \
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

uint64_t fhw_link_error(fhw_ctx_t *c, const fhw_link_t *k, unsigned int link, unsigned int counter) {
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
    *value = fhw_link_error(c, k, link, counter);
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
    /* nvml.h: "deviceArray is NULL with a non-zero count", whether or not the level holds a GPU */
    if (*count != 0 && devices == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    const fhw_visible_t *vis = fhw_visible();
    unsigned int n = 0;
    for (int d = 0; d < vis->count; d++) {
        int slot = c->s->dev_slot[d];
        if (d == c->dev || slot < 0 || c->g->topo_level[slot] != level) continue;
        if (n < *count) devices[n] = fhw_device_handle(d);
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

/* Pin the calling thread to the GPU's CPUs (only those this machine has). When none of them is one the thread may
   run on here (the model's CPUs do not exist on this host, or a cpuset shuts them out), sched_setaffinity(2) fails
   with EINVAL: an unexpected error (UNKNOWN, nvml.h's only code for it; a real NVML in a container answered
   nvmlDeviceSetCpuAffinity "Unknown Error", NVIDIA/nccl-tests#10), not NOT_SUPPORTED: the device supports the
   feature, as its nvmlDeviceGetCpuAffinity answer shows. */
static nvmlReturn_t a_set(fhw_ctx_t *c) {
    cpu_set_t set;
    CPU_ZERO(&set);
    long online = sysconf(_SC_NPROCESSORS_CONF);
    for (int cpu = 0; cpu < FHW_CPU_MASK_WORDS * 64 && cpu < CPU_SETSIZE; cpu++)
        if ((c->g->cpu_affinity[cpu / 64] >> (cpu % 64) & 1) && cpu < online) CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
nvmlReturn_t nvmlDeviceSetCpuAffinity(nvmlDevice_t device) { FHW_DEV_CALL(device, 0, a_set(&C)); }

static nvmlReturn_t a_clear(fhw_ctx_t *c) {
    (void)c;
    cpu_set_t set;
    CPU_ZERO(&set);
    long online = sysconf(_SC_NPROCESSORS_CONF);
    for (long cpu = 0; cpu < online && cpu < CPU_SETSIZE; cpu++) CPU_SET((int)cpu, &set);
    /* nvml.h lists UNKNOWN ("any unexpected error") for a failure here, and no OPERATING_SYSTEM */
    return sched_setaffinity(0, sizeof set, &set) == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
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

/* v2 arrived with the function (550), v3 with the 580 header. */
static const fhw_struct_version_t fabric_versions[] = {{nvmlGpuFabricInfo_v2, 550}, {nvmlGpuFabricInfo_v3, 580}};

static nvmlReturn_t f_info_v(fhw_ctx_t *c, void *info) {
    unsigned int version;
    nvmlReturn_t r = FHW_VERSIONS(c, info, fabric_versions, &version);
    if (r != NVML_SUCCESS) return r;
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

/* v4 (615): no version word; the clique list holds the one unicast clique the fabric manager assigned. */
static nvmlReturn_t f_info_v4(fhw_ctx_t *c, nvmlGpuFabricInfo_v4_t *f) {
    CHECK_PTR(f);
    if (!c->g->fabric_supported) return NVML_ERROR_NOT_SUPPORTED;
    memset(f, 0, sizeof *f);
    memcpy(f->clusterUuid, c->g->fabric_cluster_uuid, sizeof f->clusterUuid);
    f->status = (nvmlReturn_t)c->g->fabric_status;
    f->state = (nvmlGpuFabricState_t)c->g->fabric_state;
    f->healthMask = c->g->fabric_health_mask;
    f->healthSummary = (unsigned char)c->g->fabric_health_summary;
    if (c->g->fabric_state == NVML_GPU_FABRIC_STATE_COMPLETED) {
        f->cliques[0].type = 0; /* NVML_GPU_FABRIC_CLIQUE_TYPE_UNICAST_POINTER */
        f->cliques[0].id = c->g->fabric_clique_id;
        f->numCliques = 1;
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuFabricInfo_v4(nvmlDevice_t device, nvmlGpuFabricInfo_v4_t *gpuFabricInfo) {
    FHW_DEV_CALL(device, 0, f_info_v4(&C, gpuFabricInfo));
}

/* ------------------------------------------------------------------------------------------ NVLink info, modes */

static const fhw_struct_version_t nvlink_info_versions[] = {{nvmlNvLinkInfo_v1, 580}, {nvmlNvLinkInfo_v2, 580}};

/* NVLink encryption (NVLE) is a confidential-computing feature: off. No NVLink firmware images are reported. */
static nvmlReturn_t l_info(fhw_ctx_t *c, void *info) {
    unsigned int version;
    nvmlReturn_t r = FHW_VERSIONS(c, info, nvlink_info_versions, &version);
    if (r != NVML_SUCCESS) return r;
    if (c->g->nvlink_count == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (version == nvmlNvLinkInfo_v2) {
        nvmlNvLinkInfo_v2_t *v = info;
        memset(v, 0, sizeof *v);
        v->version = version;
    } else {
        nvmlNvLinkInfo_v1_t *v = info;
        memset(v, 0, sizeof *v);
        v->version = version;
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkInfo(nvmlDevice_t device, void *info) { FHW_DEV_CALL(device, 0, l_info(&C, info)); }

static const fhw_struct_version_t bw_modes_versions[] = {{nvmlNvlinkSupportedBwModes_v1, 570}};
static nvmlReturn_t l_bw_modes(fhw_ctx_t *c, nvmlNvlinkSupportedBwModes_v1_t *m) {
    nvmlReturn_t r = FHW_VERSIONS(c, m, bw_modes_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_NVLINK_BW_MODE);
    memset(m->bwModes, 0, sizeof m->bwModes);
    /* NVML_GPU_NVLINK_BW_MODE_FULL, _OFF, _MIN, _HALF, _3QUARTER */
    for (unsigned char i = 0; i < 5; i++) m->bwModes[i] = i;
    m->totalBwModes = 5;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvlinkSupportedBwModes(nvmlDevice_t device, nvmlNvlinkSupportedBwModes_v1_t *supportedBwModes) {
    FHW_DEV_CALL(device, 0, l_bw_modes(&C, supportedBwModes));
}

static const fhw_struct_version_t bw_mode_versions[] = {{nvmlNvlinkGetBwMode_v1, 570}};
static nvmlReturn_t l_bw_mode(fhw_ctx_t *c, nvmlNvlinkGetBwMode_v1_t *m) {
    nvmlReturn_t r = FHW_VERSIONS(c, m, bw_mode_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_NVLINK_BW_MODE);
    m->bIsBest = 1;
    m->bwMode = 0; /* FULL */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvlinkBwMode(nvmlDevice_t device, nvmlNvlinkGetBwMode_v1_t *getBwMode) {
    FHW_DEV_CALL(device, 0, l_bw_mode(&C, getBwMode));
}

/* Changing the mode needs root and all GPU work stopped; this library never changes the model. */
static nvmlReturn_t l_set_bw_mode(fhw_ctx_t *c, const void *m) {
    CHECK_PTR(m);
    FHW_REQUIRE(c, FHW_ANS_NVLINK_BW_MODE);
    return NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceSetNvlinkBwMode(nvmlDevice_t device, void *setBwMode) {
    FHW_DEV_CALL(device, 0, l_set_bw_mode(&C, setBwMode));
}
/* The asynchronous setter is newer than the mode itself: nvml.h documents it %RUBIN_OR_NEWER% (the synchronous one
   "For Blackwell or newer"), and no board of the model is a Rubin. */
static nvmlReturn_t l_set_bw_mode_async(fhw_ctx_t *c, const void *m) {
    (void)c;
    CHECK_PTR(m);
    return NVML_ERROR_NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceSetNvlinkBwModeAsync_v1(nvmlDevice_t device, void *setBwModeAsync) {
    FHW_DEV_CALL(device, 0, l_set_bw_mode_async(&C, setBwModeAsync));
}
