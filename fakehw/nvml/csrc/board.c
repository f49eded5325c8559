/*
 * Device queries of the later headers (550 ... 615): C2C, addressing mode, PDI, hostname,
 * capabilities, performance modes and current clock frequencies, temperature V and margin, driver model, DRAM
 * encryption, power smoothing and workload power profiles, SRAM ECC status, repair status, unrepairable memory,
 * remapped rows v2, BBX, process utilization, conf compute, handle by UUID V. Whether a board answers a topic is
 * the snapshot's (GpuRecord.answers); versioned structs accept the versions the snapshot's branch knows.
 */
#include "internal.h"

#include <stdio.h>

#define PHYS 0
#define ANY FHW_ALLOW_MIG

/* ------------------------------------------------------------------------------------------ C2C */

/* nvmlC2cModeInfo_v1_t has no version word. */
static nvmlReturn_t b_c2c(fhw_ctx_t *c, nvmlC2cModeInfo_v1_t *info) {
    CHECK_PTR(info);
    FHW_REQUIRE(c, FHW_ANS_C2C);
    info->isC2cEnabled = c->g->c2c_enabled;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, nvmlC2cModeInfo_v1_t *c2cModeInfo) {
    FHW_DEV_CALL(device, PHYS, b_c2c(&C, c2cModeInfo));
}

static const fhw_struct_version_t addressing_versions[] = {{nvmlDeviceAddressingMode_v1, 580}};
static nvmlReturn_t b_addressing(fhw_ctx_t *c, nvmlDeviceAddressingMode_v1_t *mode) {
    nvmlReturn_t r = FHW_VERSIONS(c, mode, addressing_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_ADDRESSING_MODE);
    mode->value = c->g->addressing_mode;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, nvmlDeviceAddressingMode_v1_t *mode) {
    FHW_DEV_CALL(device, ANY, b_addressing(&C, mode));
}

static const fhw_struct_version_t pdi_versions[] = {{nvmlPdi_v1, 580}};
static nvmlReturn_t b_pdi(fhw_ctx_t *c, nvmlPdi_v1_t *pdi) {
    nvmlReturn_t r = FHW_VERSIONS(c, pdi, pdi_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_PDI);
    pdi->value = c->g->pdi;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPdi(nvmlDevice_t device, nvmlPdi_v1_t *pdi) { FHW_DEV_CALL(device, PHYS, b_pdi(&C, pdi)); }

/* The hostname a fabric manager knows the GPU's node by: the node's. */
static nvmlReturn_t b_hostname(fhw_ctx_t *c, nvmlHostname_v1_t *h) {
    CHECK_PTR(h);
    FHW_REQUIRE(c, FHW_ANS_HOSTNAME);
    memset(h->value, 0, sizeof h->value);
    snprintf(h->value, sizeof h->value, "%s", c->s->hdr->hostname);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHostname_v1(nvmlDevice_t device, nvmlHostname_v1_t *hostname) {
    FHW_DEV_CALL(device, PHYS, b_hostname(&C, hostname));
}

/* Setting it "Requires root/admin permissions" (nvml.h) on a board that has the feature; this library never writes
 * the snapshot. */
static nvmlReturn_t b_set_hostname(fhw_ctx_t *c, const nvmlHostname_v1_t *h) {
    CHECK_PTR(h);
    FHW_REQUIRE(c, FHW_ANS_HOSTNAME);
    return NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceSetHostname_v1(nvmlDevice_t device, nvmlHostname_v1_t *hostname) {
    FHW_DEV_CALL(device, PHYS, b_set_hostname(&C, hostname));
}

static const fhw_struct_version_t caps_versions[] = {{nvmlDeviceCapabilities_v1, 555}};
static nvmlReturn_t b_capabilities(fhw_ctx_t *c, nvmlDeviceCapabilities_v1_t *caps) {
    nvmlReturn_t r = FHW_VERSIONS(c, caps, caps_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    caps->capMask = 0; /* NVML_DEV_CAP_EGM off: "egm: disabled" on every captured board */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCapabilities(nvmlDevice_t device, nvmlDeviceCapabilities_v1_t *caps) {
    FHW_DEV_CALL(device, PHYS, b_capabilities(&C, caps));
}

/* ------------------------------------------------------------------------------------------ clocks, thermal */

static const fhw_struct_version_t perf_mode_versions[] = {{nvmlDevicePerfModes_v1, 570}};

/* The performance-levels string of the header's example: one level per P-state (these boards expose P0). */
static nvmlReturn_t b_perf_modes(fhw_ctx_t *c, nvmlDevicePerfModes_v1_t *m) {
    nvmlReturn_t r = FHW_VERSIONS(c, m, perf_mode_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_PERFORMANCE_MODES);
    const fhw_gpu_t *g = c->g;
    unsigned int mem = g->clocks_max[NVML_CLOCK_MEM];
    snprintf(m->str, sizeof m->str,
             "perf=0, nvclock=%u, nvclockmin=%u, nvclockmax=%u, nvclockeditable=0, memclock=%u, memclockmin=%u, "
             "memclockmax=%u, memclockeditable=0, memtransferrate=%u, memtransferratemin=%u, "
             "memtransferratemax=%u, memtransferrateeditable=0 ;",
             g->clocks_current[NVML_CLOCK_GRAPHICS], g->graphics_clock_min, g->clocks_max[NVML_CLOCK_GRAPHICS], mem,
             mem, mem, 2 * mem, 2 * mem, 2 * mem);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPerformanceModes(nvmlDevice_t device, nvmlDevicePerfModes_v1_t *perfModes) {
    FHW_DEV_CALL(device, PHYS, b_perf_modes(&C, perfModes));
}

static nvmlReturn_t b_clock_freqs(fhw_ctx_t *c, nvmlDeviceCurrentClockFreqs_v1_t *f) {
    nvmlReturn_t r = FHW_VERSIONS(c, f, perf_mode_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    const fhw_gpu_t *g = c->g;
    unsigned int gr = g->clocks_current[NVML_CLOCK_GRAPHICS], mem = g->clocks_current[NVML_CLOCK_MEM];
    snprintf(f->str, sizeof f->str,
             "nvclock=%u, nvclockmin=%u, nvclockmax=%u, nvclockeditable=0, memclock=%u, memclockmin=%u, "
             "memclockmax=%u, memclockeditable=0, memtransferrate=%u, memtransferratemin=%u, "
             "memtransferratemax=%u, memtransferrateeditable=0 ;",
             gr, gr, gr, mem, mem, mem, 2 * mem, 2 * mem, 2 * mem);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClockFreqs(nvmlDevice_t device, nvmlDeviceCurrentClockFreqs_v1_t *currentClockFreqs) {
    FHW_DEV_CALL(device, PHYS, b_clock_freqs(&C, currentClockFreqs));
}

static const fhw_struct_version_t offset_versions[] = {{nvmlClockOffset_v1, 555}};
static nvmlReturn_t b_clock_offsets(fhw_ctx_t *c, nvmlClockOffset_v1_t *o) {
    nvmlReturn_t r = FHW_VERSIONS(c, o, offset_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    /* nvml.h: INVALID_ARGUMENT "if device, type or pstate are invalid", whether or not the board offers offsets. */
    if (o->type >= NVML_CLOCK_COUNT || o->pstate > NVML_PSTATE_15) return NVML_ERROR_INVALID_ARGUMENT;
    return FHW_ANSWER(c, FHW_ANS_CLOCK_OFFSETS);
}
nvmlReturn_t nvmlDeviceGetClockOffsets(nvmlDevice_t device, nvmlClockOffset_v1_t *info) {
    FHW_DEV_CALL(device, PHYS, b_clock_offsets(&C, info));
}
nvmlReturn_t nvmlDeviceSetClockOffsets(nvmlDevice_t device, nvmlClockOffset_v1_t *info) {
    FHW_DEV_CALL(device, PHYS, b_clock_offsets(&C, info));
}

static const fhw_struct_version_t temperature_versions[] = {{nvmlTemperature_v1, 570}};
static nvmlReturn_t b_temperature_v(fhw_ctx_t *c, nvmlTemperature_v1_t *t) {
    nvmlReturn_t r = FHW_VERSIONS(c, t, temperature_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    r = fhw_temperature_sensor(t->sensorType);
    if (r != NVML_SUCCESS) return r;
    t->temperature = (int)c->g->temperature;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temperature) {
    FHW_DEV_CALL(device, PHYS, b_temperature_v(&C, temperature));
}

static const fhw_struct_version_t margin_versions[] = {{nvmlMarginTemperature_v1, 570}};
static nvmlReturn_t b_margin(fhw_ctx_t *c, nvmlMarginTemperature_v1_t *m) {
    nvmlReturn_t r = FHW_VERSIONS(c, m, margin_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_TLIMIT);
    m->marginTemperature = c->g->temp_margin;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_v1_t *marginTempInfo) {
    FHW_DEV_CALL(device, PHYS, b_margin(&C, marginTempInfo));
}

/* WDDM/TCC/MCDM are Windows driver models: Linux answers NOT_SUPPORTED (N/A in every capture). */
static nvmlReturn_t b_driver_model(fhw_ctx_t *c, unsigned int *current, unsigned int *pending) {
    (void)c;
    if (current == NULL && pending == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    FHW_DEV_CALL(device, PHYS, b_driver_model(&C, current, pending));
}
nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    FHW_DEV_CALL(device, PHYS, b_driver_model(&C, current, pending));
}

/* ------------------------------------------------------------------------------------------ power, memory */

static const fhw_struct_version_t dram_versions[] = {{nvmlDramEncryptionInfo_v1, 570}};
/* nvml.h: INVALID_ARGUMENT "if ... either current or pending is NULL" (unlike the driver model's "both"), SUCCESS
 * "if current and pending have been set". */
static nvmlReturn_t b_dram_encryption(fhw_ctx_t *c, nvmlDramEncryptionInfo_v1_t *current,
                                      nvmlDramEncryptionInfo_v1_t *pending) {
    nvmlReturn_t r = FHW_VERSIONS(c, current, dram_versions, NULL);
    if (r == NVML_SUCCESS) r = FHW_VERSIONS(c, pending, dram_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_DRAM_ENCRYPTION);
    current->encryptionState = NVML_FEATURE_DISABLED;
    pending->encryptionState = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDramEncryptionMode(nvmlDevice_t device, nvmlDramEncryptionInfo_v1_t *current,
                                             nvmlDramEncryptionInfo_v1_t *pending) {
    FHW_DEV_CALL(device, PHYS, b_dram_encryption(&C, current, pending));
}
static nvmlReturn_t b_set_dram_encryption(fhw_ctx_t *c, const nvmlDramEncryptionInfo_v1_t *mode) {
    nvmlReturn_t r = FHW_VERSIONS(c, mode, dram_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_DRAM_ENCRYPTION);
    return NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceSetDramEncryptionMode(nvmlDevice_t device, const nvmlDramEncryptionInfo_v1_t *dramEncryption) {
    FHW_DEV_CALL(device, PHYS, b_set_dram_encryption(&C, dramEncryption));
}

/* Power smoothing (Blackwell) needs root to read or change: NO_PERMISSION there, NOT_SUPPORTED elsewhere. */
static nvmlReturn_t b_smoothing(fhw_ctx_t *c, const void *arg) {
    CHECK_PTR(arg);
    return FHW_ANSWER(c, FHW_ANS_POWER_SMOOTHING);
}
nvmlReturn_t nvmlDevicePowerSmoothingActivatePresetProfile(nvmlDevice_t device, void *profile) {
    FHW_DEV_CALL(device, PHYS, b_smoothing(&C, profile));
}
nvmlReturn_t nvmlDevicePowerSmoothingUpdatePresetProfileParam(nvmlDevice_t device, void *profile) {
    FHW_DEV_CALL(device, PHYS, b_smoothing(&C, profile));
}
nvmlReturn_t nvmlDevicePowerSmoothingSetState(nvmlDevice_t device, void *state) {
    FHW_DEV_CALL(device, PHYS, b_smoothing(&C, state));
}

/* Workload power profiles: N/A on every captured board. */
static nvmlReturn_t b_power_profiles(fhw_ctx_t *c, const void *arg) {
    CHECK_PTR(arg);
    return FHW_ANSWER(c, FHW_ANS_POWER_PROFILES);
}
nvmlReturn_t nvmlDeviceWorkloadPowerProfileGetProfilesInfo(nvmlDevice_t device, void *profilesInfo) {
    FHW_DEV_CALL(device, PHYS, b_power_profiles(&C, profilesInfo));
}
nvmlReturn_t nvmlDeviceWorkloadPowerProfileGetCurrentProfiles(nvmlDevice_t device, void *currentProfiles) {
    FHW_DEV_CALL(device, PHYS, b_power_profiles(&C, currentProfiles));
}
nvmlReturn_t nvmlDeviceWorkloadPowerProfileSetRequestedProfiles(nvmlDevice_t device, void *requested) {
    FHW_DEV_CALL(device, PHYS, b_power_profiles(&C, requested));
}
nvmlReturn_t nvmlDeviceWorkloadPowerProfileClearRequestedProfiles(nvmlDevice_t device, void *requested) {
    FHW_DEV_CALL(device, PHYS, b_power_profiles(&C, requested));
}
nvmlReturn_t nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1(nvmlDevice_t device, void *update) {
    FHW_DEV_CALL(device, PHYS, b_power_profiles(&C, update));
}

/* The protected (confidential computing) share of memory: zero with CC off, as every capture shows. */
static nvmlReturn_t b_cc_memory(fhw_ctx_t *c, nvmlMemory_t *m) {
    (void)c;
    CHECK_PTR(m);
    memset(m, 0, sizeof *m);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetConfComputeProtectedMemoryUsage(nvmlDevice_t device, nvmlMemory_t *memory) {
    FHW_DEV_CALL(device, PHYS, b_cc_memory(&C, memory));
}

static nvmlReturn_t b_cc_mem_size(fhw_ctx_t *c, nvmlConfComputeMemSizeInfo_t *m) {
    CHECK_PTR(m);
    if (FHW_ANSWER(c, FHW_ANS_GPM) != NVML_SUCCESS) return NVML_ERROR_NOT_SUPPORTED; /* CC is Hopper and later */
    m->protectedMemSizeKib = 0;
    m->unprotectedMemSizeKib = c->g->mem_total >> 10;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device, nvmlConfComputeMemSizeInfo_t *memInfo) {
    FHW_DEV_CALL(device, PHYS, b_cc_mem_size(&C, memInfo));
}

/* ------------------------------------------------------------------------------------------ ECC and repair */

static const fhw_struct_version_t sram_versions[] = {{nvmlEccSramErrorStatus_v1, 550}};
static nvmlReturn_t b_sram_status(fhw_ctx_t *c, nvmlEccSramErrorStatus_v1_t *s) {
    nvmlReturn_t r = FHW_VERSIONS(c, s, sram_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_SRAM_ECC_STATUS);
    const fhw_gpu_t *g = c->g;
    unsigned int version = s->version;
    memset(s, 0, sizeof *s);
    s->version = version;
    s->aggregateCor = g->ecc_counts[0][1][NVML_MEMORY_LOCATION_SRAM];
    s->volatileCor = g->ecc_counts[0][0][NVML_MEMORY_LOCATION_SRAM];
    s->aggregateUncSecDed = g->ecc_counts[1][1][NVML_MEMORY_LOCATION_SRAM];
    s->volatileUncSecDed = g->ecc_counts[1][0][NVML_MEMORY_LOCATION_SRAM];
    s->aggregateUncBucketOther = s->aggregateUncSecDed;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_v1_t *status) {
    FHW_DEV_CALL(device, PHYS, b_sram_status(&C, status));
}

static const fhw_struct_version_t sram_unique_versions[] = {{nvmlEccSramUniqueUncorrectedErrorCounts_v1, 580}};
static nvmlReturn_t b_sram_unique(fhw_ctx_t *c, nvmlEccSramUniqueUncorrectedErrorCounts_v1_t *e) {
    nvmlReturn_t r = FHW_VERSIONS(c, e, sram_unique_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_SRAM_ECC_STATUS);
    e->entryCount = 0; /* no uncorrectable SRAM error sources on a healthy board */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSramUniqueUncorrectedEccErrorCounts(nvmlDevice_t device,
                                                              nvmlEccSramUniqueUncorrectedErrorCounts_v1_t *errorCounts) {
    FHW_DEV_CALL(device, PHYS, b_sram_unique(&C, errorCounts));
}

static const fhw_struct_version_t repair_versions[] = {{nvmlRepairStatus_v1, 580}};
static nvmlReturn_t b_repair(fhw_ctx_t *c, nvmlRepairStatus_v1_t *s) {
    nvmlReturn_t r = FHW_VERSIONS(c, s, repair_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    FHW_REQUIRE(c, FHW_ANS_REPAIR_STATUS);
    s->bChannelRepairPending = 0;
    s->bTpcRepairPending = 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRepairStatus(nvmlDevice_t device, nvmlRepairStatus_v1_t *repairStatus) {
    FHW_DEV_CALL(device, PHYS, b_repair(&C, repairStatus));
}

/* Unrepairable memory: set once a row cannot be remapped any more (a remapping failure). */
static nvmlReturn_t b_unrepairable(fhw_ctx_t *c, nvmlUnrepairableMemoryStatus_v1_t *s) {
    CHECK_PTR(s);
    FHW_REQUIRE(c, FHW_ANS_UNREPAIRABLE_MEMORY);
    s->bUnrepairableMemory = c->g->remap_failure != 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUnrepairableMemoryFlag_v1(nvmlDevice_t device, nvmlUnrepairableMemoryStatus_v1_t *status) {
    FHW_DEV_CALL(device, PHYS, b_unrepairable(&C, status));
}

static nvmlReturn_t b_remapped_v2(fhw_ctx_t *c, nvmlRemappedRowsInfo_v2_t *info) {
    CHECK_PTR(info);
    FHW_REQUIRE(c, FHW_ANS_REMAPPED_ROWS);
    memset(info, 0, sizeof *info);
    info->corrActiveRemaps = c->g->remap_corr;
    info->uncActiveRemaps = c->g->remap_unc;
    info->bPending = c->g->remap_pending;
    info->bFailureOccurred = c->g->remap_failure;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRemappedRows_v2(nvmlDevice_t device, nvmlRemappedRowsInfo_v2_t *info) {
    FHW_DEV_CALL(device, PHYS, b_remapped_v2(&C, info));
}

/* The infoROM black box (BBX): when it was last flushed and how long that took (Hopper and later HBM boards). */
static nvmlReturn_t b_bbx_flush(fhw_ctx_t *c, unsigned long long *timestamp, unsigned long *duration) {
    if (timestamp == NULL || duration == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    FHW_REQUIRE(c, FHW_ANS_BBX);
    *timestamp = c->g->bbx_flush_time_us;
    *duration = (unsigned long)c->g->bbx_flush_duration_us;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetLastBBXFlushTime(nvmlDevice_t device, unsigned long long *timestamp, unsigned long *durationUs) {
    FHW_DEV_CALL(device, PHYS, b_bbx_flush(&C, timestamp, durationUs));
}

/* nvml.h: "Cumulative number of seconds the GPU has had the driver loaded", a count that grows with the wall clock
   while the driver is loaded. The last black box flush happened "during the current run" (nvmlDeviceGetLastBBXFlush-
   Time), so the count is at least the seconds since that flush: the fake's boards have had one run, which began at
   that flush. (It was an hour plus the snapshot's generation: ten months short of the flush, and frozen between
   changes.) */
static nvmlReturn_t b_bbx_time(fhw_ctx_t *c, nvmlBBXTimeData_v1_t *t) {
    CHECK_PTR(t);
    FHW_REQUIRE(c, FHW_ANS_BBX);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long run = (long long)now.tv_sec - (long long)(c->g->bbx_flush_time_us / 1000000u);
    t->timeRun = run > 0 ? (unsigned int)run : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetBBXTimeData_v1(nvmlDevice_t device, nvmlBBXTimeData_v1_t *timeData) {
    FHW_DEV_CALL(device, PHYS, b_bbx_time(&C, timeData));
}

/* ------------------------------------------------------------------------------------------ processes */

static const fhw_struct_version_t proc_util_versions[] = {{nvmlProcessesUtilizationInfo_v1, 550}};
static nvmlReturn_t b_procs_util(fhw_ctx_t *c, nvmlProcessesUtilizationInfo_v1_t *info) {
    nvmlReturn_t r = FHW_VERSIONS(c, info, proc_util_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    if (c->g->mig_current) return NVML_ERROR_NOT_SUPPORTED; /* nvml.h: not supported on MIG-enabled GPUs */
    unsigned int n = c->g->process_count;
    if (n == 0) return NVML_ERROR_NOT_FOUND;
    /* nvml.h: samples newer than lastSeenTimeStamp only (each process's one sample has the render time). */
    if (info->lastSeenTimeStamp >= (unsigned long long)c->s->hdr->render_time_us) return NVML_ERROR_NOT_FOUND;
    if (info->procUtilArray == NULL || info->processSamplesCount < n) {
        info->processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        const fhw_process_t *p = &c->s->processes[c->g->process_first + i];
        nvmlProcessUtilizationInfo_v1_t *u = &info->procUtilArray[i];
        memset(u, 0, sizeof *u);
        u->timeStamp = (unsigned long long)c->s->hdr->render_time_us;
        u->pid = p->pid;
        u->smUtil = c->g->util_gpu / n;
        u->memUtil = c->g->util_memory / n;
    }
    info->processSamplesCount = n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device, nvmlProcessesUtilizationInfo_v1_t *info) {
    FHW_DEV_CALL(device, PHYS, b_procs_util(&C, info));
}

/* nvml.h (nvmlDeviceGetAccountingStats, whose v2 this is): NOT_SUPPORTED while accounting mode is disabled (every
 * capture), NOT_FOUND for a pid with no record (none is ever accounted here). */
static nvmlReturn_t b_accounting_v2(fhw_ctx_t *c, const void *stats) {
    CHECK_PTR(stats);
    if (!c->g->accounting_mode) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetAccountingStats_v2(nvmlDevice_t device, void *stats) {
    FHW_DEV_CALL(device, PHYS, b_accounting_v2(&C, stats));
}

/* ------------------------------------------------------------------------------------------ vGPU */

/* No vGPU host on bare metal or pass-through: N/A in every capture. */
static const fhw_struct_version_t hetero_versions[] = {{nvmlVgpuHeterogeneousMode_v1, 550}};
static nvmlReturn_t b_vgpu_hetero(fhw_ctx_t *c, const void *mode) {
    nvmlReturn_t r = FHW_VERSIONS(c, mode, hetero_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    return FHW_ANSWER(c, FHW_ANS_VGPU);
}
nvmlReturn_t nvmlDeviceGetVgpuHeterogeneousMode(nvmlDevice_t device, nvmlVgpuHeterogeneousMode_v1_t *mode) {
    FHW_DEV_CALL(device, PHYS, b_vgpu_hetero(&C, mode));
}
nvmlReturn_t nvmlDeviceSetVgpuHeterogeneousMode(nvmlDevice_t device, const nvmlVgpuHeterogeneousMode_v1_t *mode) {
    FHW_DEV_CALL(device, PHYS, b_vgpu_hetero(&C, mode));
}

/* ------------------------------------------------------------------------------------------ handles */

static const fhw_struct_version_t uuid_versions[] = {{nvmlUUID_v1, 575}};
nvmlReturn_t fhw_device_by_uuid(fhw_ctx_t *c, const char *uuid, nvmlDevice_t *device); /* system.c */

static nvmlReturn_t b_by_uuid_v(fhw_ctx_t *c, const nvmlUUID_v1_t *uuid, nvmlDevice_t *device) {
    nvmlReturn_t r = FHW_VERSIONS(c, uuid, uuid_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    CHECK_PTR(device);
    char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    if (uuid->type == NVML_UUID_TYPE_ASCII) {
        if (memchr(uuid->value.str, 0, sizeof uuid->value.str) == NULL) return NVML_ERROR_INVALID_ARGUMENT;
        snprintf(text, sizeof text, "%s", uuid->value.str);
    } else if (uuid->type == NVML_UUID_TYPE_BINARY) {
        const unsigned char *b = uuid->value.bytes;
        snprintf(text, sizeof text,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
                 b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    } else {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return fhw_device_by_uuid(c, text, device);
}
nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_v1_t *uuid, nvmlDevice_t *device) {
    FHW_SYS_CALL(b_by_uuid_v(&C, uuid, device));
}
