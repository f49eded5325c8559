/* Per-device queries: identity, memory, PCI, power, thermal, clocks, utilization, ECC, processes. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

#define PHYS 0
#define ANY FHW_ALLOW_MIG

/* ------------------------------------------------------------------------------------------ identity */

static nvmlReturn_t d_name(fhw_ctx_t *c, char *name, unsigned int length) {
    if (c->m) return fhw_copy_str(name, length, c->m->name, sizeof c->m->name);
    return fhw_copy_str(name, length, c->g->name, sizeof c->g->name);
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    FHW_DEV_CALL(device, ANY, d_name(&C, name, length));
}

static nvmlReturn_t d_uuid(fhw_ctx_t *c, char *uuid, unsigned int length) {
    if (c->m) return fhw_copy_str(uuid, length, c->m->uuid, sizeof c->m->uuid);
    return fhw_copy_str(uuid, length, c->g->uuid, sizeof c->g->uuid);
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    FHW_DEV_CALL(device, ANY, d_uuid(&C, uuid, length));
}

static nvmlReturn_t d_serial(fhw_ctx_t *c, char *serial, unsigned int length) {
    if (c->g->serial[0] == '\0') return NVML_ERROR_NOT_SUPPORTED;
    return fhw_copy_str(serial, length, c->g->serial, sizeof c->g->serial);
}
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    FHW_DEV_CALL(device, ANY, d_serial(&C, serial, length));
}

/* A MIG device's index is its position among its parent's MIG devices (what nvidia-smi -q lists them by). */
static nvmlReturn_t d_index(fhw_ctx_t *c, unsigned int *index) {
    CHECK_PTR(index);
    *index = c->m ? c->m->index : (unsigned int)c->dev;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) { FHW_DEV_CALL(device, ANY, d_index(&C, index)); }

#define U32_GETTER(fn, flags, field)                                              \
    static nvmlReturn_t d_##fn(fhw_ctx_t *c, unsigned int *out) {                \
        CHECK_PTR(out);                                                           \
        *out = c->g->field;                                                       \
        return NVML_SUCCESS;                                                      \
    }                                                                             \
    nvmlReturn_t nvmlDevice##fn(nvmlDevice_t device, unsigned int *out) {         \
        FHW_DEV_CALL(device, flags, d_##fn(&C, out));                             \
    }

U32_GETTER(GetMinorNumber, PHYS, minor)
U32_GETTER(GetBrand, ANY, brand)
U32_GETTER(GetArchitecture, ANY, architecture)
U32_GETTER(GetBoardId, ANY, board_id)
U32_GETTER(GetMultiGpuBoard, ANY, multi_gpu_board)
U32_GETTER(GetMemoryBusWidth, ANY, memory_bus_width)
U32_GETTER(GetCurrPcieLinkGeneration, ANY, pcie_gen_cur)
U32_GETTER(GetGpuMaxPcieLinkGeneration, ANY, pcie_gen_gpu_max)
U32_GETTER(GetMaxPcieLinkGeneration, ANY, pcie_gen_max)
U32_GETTER(GetCurrPcieLinkWidth, ANY, pcie_width_cur)
U32_GETTER(GetMaxPcieLinkWidth, ANY, pcie_width_max)
U32_GETTER(GetPcieReplayCounter, ANY, pcie_replay)
U32_GETTER(GetPcieSpeed, ANY, pcie_speed_mbps)
U32_GETTER(GetPowerUsage, PHYS, power_usage_mw)
U32_GETTER(GetPowerManagementLimit, PHYS, power_limit_mw)
U32_GETTER(GetPowerManagementDefaultLimit, PHYS, power_default_limit_mw)
U32_GETTER(GetEnforcedPowerLimit, PHYS, power_enforced_mw)
U32_GETTER(GetBusType, ANY, bus_type)
U32_GETTER(GetComputeMode, ANY, compute_mode)
U32_GETTER(GetPersistenceMode, PHYS, persistence_mode)
U32_GETTER(GetDisplayActive, PHYS, display_active)
U32_GETTER(GetAccountingMode, PHYS, accounting_mode)
U32_GETTER(GetPerformanceState, PHYS, pstate)

/* A getter whose answer depends on the board and branch (GpuRecord.answers) before the field is read. */
#define U32_ANSWER_GETTER(fn, topic, field)                                       \
    static nvmlReturn_t d_##fn(fhw_ctx_t *c, unsigned int *out) {                \
        CHECK_PTR(out);                                                           \
        FHW_REQUIRE(c, topic);                                                    \
        *out = c->g->field;                                                       \
        return NVML_SUCCESS;                                                      \
    }                                                                             \
    nvmlReturn_t nvmlDevice##fn(nvmlDevice_t device, unsigned int *out) {         \
        FHW_DEV_CALL(device, PHYS, d_##fn(&C, out));                              \
    }

U32_ANSWER_GETTER(GetDisplayMode, FHW_ANS_DISPLAY_MODE, display_mode)
U32_ANSWER_GETTER(GetPowerState, FHW_ANS_POWER_STATE, pstate)
U32_GETTER(GetNumFans, PHYS, fan_count)
/* nvml.h: "On MIG-enabled GPUs, querying the device's core count is currently not supported using this API", and
   NOT_SUPPORTED "if this query is not supported by the device or a mig device": a MIG device handle is a valid
   handle here (its parent is MIG-enabled), answered NOT_SUPPORTED, not refused as an invalid one. */
static nvmlReturn_t d_GetNumGpuCores(fhw_ctx_t *c, unsigned int *out) {
    CHECK_PTR(out);
    if (c->m || c->g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    *out = c->g->cuda_cores;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores) {
    FHW_DEV_CALL(device, FHW_ALLOW_MIG, d_GetNumGpuCores(&C, numCores));
}
U32_GETTER(GetIrqNum, PHYS, irq)

static nvmlReturn_t d_module_id(fhw_ctx_t *c, unsigned int *out) {
    CHECK_PTR(out);
    *out = c->g->module_id;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetModuleId(nvmlDevice_t device, unsigned int *moduleId) {
    FHW_DEV_CALL(device, ANY, d_module_id(&C, moduleId));
}

static nvmlReturn_t d_cc(fhw_ctx_t *c, int *major, int *minor) {
    if (major == NULL || minor == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)c->g->cc_major;
    *minor = (int)c->g->cc_minor;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    FHW_DEV_CALL(device, ANY, d_cc(&C, major, minor));
}

static nvmlReturn_t d_part(fhw_ctx_t *c, char *out, unsigned int length) {
    if (c->g->board_part_number[0] == '\0') return NVML_ERROR_NOT_SUPPORTED;
    return fhw_copy_str(out, length, c->g->board_part_number, sizeof c->g->board_part_number);
}
nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length) {
    FHW_DEV_CALL(device, ANY, d_part(&C, partNumber, length));
}

static nvmlReturn_t d_vbios(fhw_ctx_t *c, char *out, unsigned int length) {
    return fhw_copy_str(out, length, c->g->vbios_version, sizeof c->g->vbios_version);
}
nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length) {
    FHW_DEV_CALL(device, PHYS, d_vbios(&C, version, length));
}

static nvmlReturn_t d_inforom(fhw_ctx_t *c, unsigned int object, char *out, unsigned int length) {
    const char *v;
    switch (object) {
    case 0: v = c->g->inforom_oem; break;
    case 1: v = c->g->inforom_ecc; break;
    case 2: v = c->g->inforom_power; break;
    /* nvml.h 13.4's NVML_INFOROM_DEN, the DRAM encryption object nvmlDeviceGetDramEncryptionMode "Requires": a board
       whose DRAM encryption is N/A (every capture) has none; nvml.h lists INVALID_ARGUMENT only for a NULL version. */
    case 3: return NVML_ERROR_NOT_SUPPORTED;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (v[0] == '\0') return NVML_ERROR_NOT_SUPPORTED;
    return fhw_copy_str(out, length, v, 16);
}
nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, unsigned int object, char *version,
                                         unsigned int length) {
    FHW_DEV_CALL(device, PHYS, d_inforom(&C, object, version, length));
}

static nvmlReturn_t d_inforom_image(fhw_ctx_t *c, char *out, unsigned int length) {
    if (c->g->inforom_image[0] == '\0') return NVML_ERROR_NOT_SUPPORTED;
    return fhw_copy_str(out, length, c->g->inforom_image, sizeof c->g->inforom_image);
}
nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length) {
    FHW_DEV_CALL(device, PHYS, d_inforom_image(&C, version, length));
}

static nvmlReturn_t d_inforom_checksum(fhw_ctx_t *c, unsigned int *checksum) {
    CHECK_PTR(checksum);
    /* A stable function of the image version: what the board's configuration would hash to. */
    uint32_t h = 2166136261u;
    for (const char *p = c->g->inforom_image; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
    *checksum = h;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetInforomConfigurationChecksum(nvmlDevice_t device, unsigned int *checksum) {
    FHW_DEV_CALL(device, PHYS, d_inforom_checksum(&C, checksum));
}

static nvmlReturn_t d_ok(fhw_ctx_t *c) {
    (void)c;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device) { FHW_DEV_CALL(device, PHYS, d_ok(&C)); }

static nvmlReturn_t d_gsp_version(fhw_ctx_t *c, char *version) {
    CHECK_PTR(version);
    if (c->g->gsp_firmware[0] == '\0') return NVML_ERROR_NOT_SUPPORTED;
    /* The caller's buffer is NVML_GSP_FIRMWARE_VERSION_BUF_SIZE (0x40) bytes. */
    return fhw_copy_str(version, 0x40, c->g->gsp_firmware, sizeof c->g->gsp_firmware);
}
nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t device, char *version) {
    FHW_DEV_CALL(device, PHYS, d_gsp_version(&C, version));
}

static nvmlReturn_t d_gsp_mode(fhw_ctx_t *c, unsigned int *isEnabled, unsigned int *defaultMode) {
    if (isEnabled == NULL || defaultMode == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *isEnabled = c->g->gsp_firmware[0] != '\0';
    *defaultMode = *isEnabled;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t device, unsigned int *isEnabled, unsigned int *defaultMode) {
    FHW_DEV_CALL(device, PHYS, d_gsp_mode(&C, isEnabled, defaultMode));
}

static nvmlReturn_t d_attributes(fhw_ctx_t *c, nvmlDeviceAttributes_t *a) {
    CHECK_PTR(a);
    memset(a, 0, sizeof *a);
    if (c->m) {
        a->multiprocessorCount = c->m->multiprocessors;
        a->sharedCopyEngineCount = c->m->copy_engines;
        a->sharedDecoderCount = c->m->decoders;
        a->sharedEncoderCount = c->m->encoders;
        a->sharedJpegCount = c->m->jpegs;
        a->sharedOfaCount = c->m->ofas;
        a->gpuInstanceSliceCount = c->m->slice_count;
        a->computeInstanceSliceCount = c->m->ci_slice_count;
        a->memorySizeMB = c->m->mem_total >> 20;
    } else {
        a->multiprocessorCount = c->g->multiprocessors;
        a->sharedCopyEngineCount = c->g->copy_engines;
        a->sharedDecoderCount = c->g->decoders;
        a->sharedEncoderCount = c->g->encoders;
        a->sharedJpegCount = c->g->jpegs;
        a->sharedOfaCount = c->g->ofas;
        a->gpuInstanceSliceCount = c->g->mig_capable ? c->g->mig_max_devices : 0;
        a->computeInstanceSliceCount = a->gpuInstanceSliceCount;
        a->memorySizeMB = c->g->mem_total >> 20;
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
    FHW_DEV_CALL(device, ANY, d_attributes(&C, attributes));
}
nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
    FHW_DEV_CALL(device, ANY, d_attributes(&C, attributes));
}

nvmlReturn_t nvmlDeviceOnSameBoard(nvmlDevice_t device1, nvmlDevice_t device2, int *onSameBoard) {
    fhw_ctx_t C1;
    nvmlReturn_t r = fhw_enter_dev(&C1, device1, 0);
    if (r != NVML_SUCCESS) return r;
    int slot1 = C1.slot;
    unsigned int board1 = C1.g->board_id, multi1 = C1.g->multi_gpu_board;
    fhw_leave(&C1);
    fhw_ctx_t C2;
    r = fhw_enter_dev(&C2, device2, 0);
    if (r != NVML_SUCCESS) return r;
    if (onSameBoard == NULL) r = NVML_ERROR_INVALID_ARGUMENT;
    else *onSameBoard = slot1 == C2.slot || (multi1 && C2.g->multi_gpu_board && board1 == C2.g->board_id);
    fhw_leave(&C2);
    return r;
}

static nvmlReturn_t d_virt_mode(fhw_ctx_t *c, unsigned int *mode) {
    (void)c;
    CHECK_PTR(mode);
    *mode = 0; /* NVML_GPU_VIRTUALIZATION_MODE_NONE: bare metal */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, unsigned int *pVirtualMode) {
    FHW_DEV_CALL(device, PHYS, d_virt_mode(&C, pVirtualMode));
}

static nvmlReturn_t d_api_restriction(fhw_ctx_t *c, unsigned int api, unsigned int *isRestricted) {
    (void)c;
    CHECK_PTR(isRestricted);
    if (api > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *isRestricted = NVML_FEATURE_ENABLED; /* clock changes need root, as on a stock install */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetAPIRestriction(nvmlDevice_t device, unsigned int apiType, unsigned int *isRestricted) {
    FHW_DEV_CALL(device, PHYS, d_api_restriction(&C, apiType, isRestricted));
}

/* ------------------------------------------------------------------------------------------ memory */

static nvmlReturn_t d_memory(fhw_ctx_t *c, nvmlMemory_t *m) {
    CHECK_PTR(m);
    if (c->m) {
        m->total = c->m->mem_total;
        m->used = c->m->mem_used + c->m->mem_reserved;
        m->free = c->m->mem_free;
    } else {
        m->total = c->g->mem_total;
        m->used = c->g->mem_used + c->g->mem_reserved; /* v1 counts the reserved memory as used */
        m->free = c->g->mem_free;
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    FHW_DEV_CALL(device, ANY, d_memory(&C, memory));
}

static nvmlReturn_t d_memory_v2(fhw_ctx_t *c, nvmlMemory_v2_t *m) {
    CHECK_PTR(m);
    if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (c->m) {
        m->total = c->m->mem_total;
        m->reserved = c->m->mem_reserved;
        m->used = c->m->mem_used;
        m->free = c->m->mem_free;
    } else {
        m->total = c->g->mem_total;
        m->reserved = c->g->mem_reserved;
        m->used = c->g->mem_used;
        m->free = c->g->mem_free;
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    FHW_DEV_CALL(device, ANY, d_memory_v2(&C, memory));
}

static nvmlReturn_t d_bar1(fhw_ctx_t *c, nvmlBAR1Memory_t *b) {
    CHECK_PTR(b);
    b->bar1Total = c->g->bar1_total;
    b->bar1Used = c->g->bar1_used;
    b->bar1Free = c->g->bar1_total - c->g->bar1_used;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory) {
    FHW_DEV_CALL(device, ANY, d_bar1(&C, bar1Memory));
}

/* ------------------------------------------------------------------------------------------ PCI */

/* The snapshot's bus id fields have the sizes of NVML's and are NUL-terminated (validated at load). */
_Static_assert(sizeof(((fhw_gpu_t *)0)->bus_id) == NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, "bus id size");
_Static_assert(sizeof(((fhw_gpu_t *)0)->bus_id_legacy) == NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE, "bus id size");

static nvmlReturn_t d_pci_v3(fhw_ctx_t *c, nvmlPciInfo_t *p) {
    CHECK_PTR(p);
    memcpy(p->busIdLegacy, c->g->bus_id_legacy, sizeof p->busIdLegacy);
    memcpy(p->busId, c->g->bus_id, sizeof p->busId);
    p->domain = c->g->pci_domain;
    p->bus = c->g->pci_bus;
    p->device = c->g->pci_device;
    p->pciDeviceId = c->g->pci_device_id;
    p->pciSubSystemId = c->g->pci_subsystem_id;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    FHW_DEV_CALL(device, ANY, d_pci_v3(&C, pci));
}

/* The unversioned and _v2 entry points fill the older 52-byte layout: 16-byte bus id, then the ids. */
static nvmlReturn_t d_pci_v1(fhw_ctx_t *c, fhwPciInfoV1_t *p) {
    CHECK_PTR(p);
    memset(p, 0, sizeof *p);
    snprintf(p->busId, sizeof p->busId, "%s", c->g->bus_id_legacy);
    p->domain = c->g->pci_domain;
    p->bus = c->g->pci_bus;
    p->device = c->g->pci_device;
    p->pciDeviceId = c->g->pci_device_id;
    p->pciSubSystemId = c->g->pci_subsystem_id;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, fhwPciInfoV1_t *pci) {
    FHW_DEV_CALL(device, ANY, d_pci_v1(&C, pci));
}
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, fhwPciInfoV1_t *pci) {
    FHW_DEV_CALL(device, ANY, d_pci_v1(&C, pci));
}

static nvmlReturn_t d_pci_ext(fhw_ctx_t *c, nvmlPciInfoExt_v1_t *p) {
    CHECK_PTR(p);
    if (p->version != nvmlPciInfoExt_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    p->domain = c->g->pci_domain;
    p->bus = c->g->pci_bus;
    p->device = c->g->pci_device;
    p->pciDeviceId = c->g->pci_device_id;
    p->pciSubSystemId = c->g->pci_subsystem_id;
    p->baseClass = c->g->pci_base_class;
    p->subClass = c->g->pci_sub_class;
    memset(p->busId, 0, sizeof p->busId);
    snprintf(p->busId, sizeof p->busId, "%s", c->g->bus_id);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_v1_t *pci) {
    FHW_DEV_CALL(device, ANY, d_pci_ext(&C, pci));
}

static nvmlReturn_t d_pcie_throughput(fhw_ctx_t *c, unsigned int counter, unsigned int *value) {
    CHECK_PTR(value);
    if (counter == NVML_PCIE_UTIL_TX_BYTES) *value = c->g->pcie_tx_kbs;
    else if (counter == NVML_PCIE_UTIL_RX_BYTES) *value = c->g->pcie_rx_kbs;
    else return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, unsigned int counter, unsigned int *value) {
    FHW_DEV_CALL(device, PHYS, d_pcie_throughput(&C, counter, value));
}

static nvmlReturn_t d_pcie_max_speed(fhw_ctx_t *c, unsigned int *maxSpeed) {
    CHECK_PTR(maxSpeed);
    /* NVML_PCIE_LINK_MAX_SPEED_*: 1 = 2.5 GT/s ... 5 = 32 GT/s, 6 = 64 GT/s (gen n -> n). */
    *maxSpeed = c->g->pcie_gen_max;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t device, unsigned int *maxSpeed) {
    FHW_DEV_CALL(device, PHYS, d_pcie_max_speed(&C, maxSpeed));
}

/* ------------------------------------------------------------------------------------------ power */

static nvmlReturn_t d_power_constraints(fhw_ctx_t *c, unsigned int *minLimit, unsigned int *maxLimit) {
    if (minLimit == NULL || maxLimit == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *minLimit = c->g->power_min_limit_mw;
    *maxLimit = c->g->power_max_limit_mw;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                          unsigned int *maxLimit) {
    FHW_DEV_CALL(device, PHYS, d_power_constraints(&C, minLimit, maxLimit));
}

static nvmlReturn_t d_power_mode(fhw_ctx_t *c, unsigned int *mode) {
    CHECK_PTR(mode);
    *mode = c->g->power_max_limit_mw > 0 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t device, unsigned int *mode) {
    FHW_DEV_CALL(device, PHYS, d_power_mode(&C, mode));
}

static nvmlReturn_t d_energy(fhw_ctx_t *c, unsigned long long *energy) {
    CHECK_PTR(energy);
    *energy = c->g->energy_mj;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    FHW_DEV_CALL(device, PHYS, d_energy(&C, energy));
}

static nvmlReturn_t d_power_source(fhw_ctx_t *c, unsigned int *source) {
    (void)c;
    CHECK_PTR(source);
    *source = 0; /* NVML_POWER_SOURCE_AC */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPowerSource(nvmlDevice_t device, unsigned int *powerSource) {
    FHW_DEV_CALL(device, PHYS, d_power_source(&C, powerSource));
}

/* ------------------------------------------------------------------------------------------ thermal */

/* nvml.h: a sensor past nvmlTemperatureSensors_t is INVALID_ARGUMENT; NVML_TEMPERATURE_GPU_MAX (the hottest part of
   the die) is a valid sensor these boards do not report: NOT_SUPPORTED ("does not have the specified sensor"). */
nvmlReturn_t fhw_temperature_sensor(unsigned int sensor) {
    if (sensor >= NVML_TEMPERATURE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    return sensor == NVML_TEMPERATURE_GPU ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

static nvmlReturn_t d_temperature(fhw_ctx_t *c, unsigned int sensor, unsigned int *temp) {
    CHECK_PTR(temp);
    nvmlReturn_t r = fhw_temperature_sensor(sensor);
    if (r != NVML_SUCCESS) return r;
    *temp = c->g->temperature;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType, unsigned int *temp) {
    FHW_DEV_CALL(device, PHYS, d_temperature(&C, sensorType, temp));
}

static nvmlReturn_t d_temp_threshold(fhw_ctx_t *c, unsigned int type, unsigned int *temp) {
    CHECK_PTR(temp);
    unsigned int v;
    switch (type) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: v = c->g->temp_shutdown; break;
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: v = c->g->temp_slowdown; break;
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX:
        FHW_REQUIRE(c, FHW_ANS_MEMORY_MAX_THRESHOLD);
        v = c->g->temp_mem_max;
        break;
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX: v = c->g->temp_gpu_max; break;
    default: return type < 8 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT; /* acoustic, GPS: none */
    }
    if (v == 0) return NVML_ERROR_NOT_SUPPORTED;
    *temp = v;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, unsigned int thresholdType, unsigned int *temp) {
    FHW_DEV_CALL(device, PHYS, d_temp_threshold(&C, thresholdType, temp));
}

static nvmlReturn_t d_thermal_settings(fhw_ctx_t *c, unsigned int sensorIndex, nvmlGpuThermalSettings_t *t) {
    CHECK_PTR(t);
    if (sensorIndex != 0 && sensorIndex != NVML_THERMAL_TARGET_ALL) return NVML_ERROR_INVALID_ARGUMENT;
    memset(t, 0, sizeof *t);
    t->count = 1;
    t->sensor[0].controller = NVML_THERMAL_CONTROLLER_GPU_INTERNAL;
    t->sensor[0].defaultMinTemp = 0;
    t->sensor[0].defaultMaxTemp = (int)c->g->temp_gpu_max;
    t->sensor[0].currentTemp = (int)c->g->temperature;
    t->sensor[0].target = NVML_THERMAL_TARGET_GPU;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetThermalSettings(nvmlDevice_t device, unsigned int sensorIndex,
                                          nvmlGpuThermalSettings_t *pThermalSettings) {
    FHW_DEV_CALL(device, PHYS, d_thermal_settings(&C, sensorIndex, pThermalSettings));
}

/* ------------------------------------------------------------------------------------------ fans */

static nvmlReturn_t d_fan(fhw_ctx_t *c, unsigned int fan, unsigned int *speed) {
    CHECK_PTR(speed);
    if (c->g->fan_count == 0) return NVML_ERROR_NOT_SUPPORTED; /* passively cooled (SXM, PCIe L4) */
    if (fan >= c->g->fan_count) return NVML_ERROR_INVALID_ARGUMENT;
    *speed = c->g->fan_speed;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed) { FHW_DEV_CALL(device, PHYS, d_fan(&C, 0, speed)); }
nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan, unsigned int *speed) {
    FHW_DEV_CALL(device, PHYS, d_fan(&C, fan, speed));
}
nvmlReturn_t nvmlDeviceGetTargetFanSpeed(nvmlDevice_t device, unsigned int fan, unsigned int *targetSpeed) {
    FHW_DEV_CALL(device, PHYS, d_fan(&C, fan, targetSpeed));
}

static nvmlReturn_t d_fan_minmax(fhw_ctx_t *c, unsigned int *minSpeed, unsigned int *maxSpeed) {
    if (minSpeed == NULL || maxSpeed == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (c->g->fan_count == 0) return NVML_ERROR_NOT_SUPPORTED;
    *minSpeed = 30;
    *maxSpeed = 100;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinMaxFanSpeed(nvmlDevice_t device, unsigned int *minSpeed, unsigned int *maxSpeed) {
    FHW_DEV_CALL(device, PHYS, d_fan_minmax(&C, minSpeed, maxSpeed));
}

static nvmlReturn_t d_fan_policy(fhw_ctx_t *c, unsigned int fan, unsigned int *policy) {
    CHECK_PTR(policy);
    if (c->g->fan_count == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (fan >= c->g->fan_count) return NVML_ERROR_INVALID_ARGUMENT;
    *policy = 0; /* NVML_FAN_POLICY_TEMPERATURE_CONTINOUS_SW */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetFanControlPolicy_v2(nvmlDevice_t device, unsigned int fan, unsigned int *policy) {
    FHW_DEV_CALL(device, PHYS, d_fan_policy(&C, fan, policy));
}

/* ------------------------------------------------------------------------------------------ clocks */

static nvmlReturn_t d_clock(fhw_ctx_t *c, unsigned int type, unsigned int id, unsigned int *mhz) {
    CHECK_PTR(mhz);
    if (type >= NVML_CLOCK_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (id == NVML_CLOCK_ID_APP_CLOCK_TARGET || id == NVML_CLOCK_ID_APP_CLOCK_DEFAULT)
        FHW_REQUIRE(c, FHW_ANS_APPLICATIONS_CLOCKS);
    switch (id) {
    case NVML_CLOCK_ID_CURRENT: *mhz = c->g->clocks_current[type]; break;
    case NVML_CLOCK_ID_APP_CLOCK_TARGET: *mhz = c->g->clocks_app[type]; break;
    case NVML_CLOCK_ID_APP_CLOCK_DEFAULT: *mhz = c->g->clocks_app_default[type]; break;
    case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX: *mhz = c->g->clocks_max[type]; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (*mhz == 0) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, unsigned int clockType, unsigned int clockId,
                                unsigned int *clockMHz) {
    FHW_DEV_CALL(device, PHYS, d_clock(&C, clockType, clockId, clockMHz));
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock) {
    FHW_DEV_CALL(device, PHYS, d_clock(&C, type, NVML_CLOCK_ID_CURRENT, clock));
}
nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, unsigned int clockType, unsigned int *clockMHz) {
    FHW_DEV_CALL(device, PHYS, d_clock(&C, clockType, NVML_CLOCK_ID_APP_CLOCK_TARGET, clockMHz));
}
nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, unsigned int clockType,
                                                   unsigned int *clockMHz) {
    FHW_DEV_CALL(device, PHYS, d_clock(&C, clockType, NVML_CLOCK_ID_APP_CLOCK_DEFAULT, clockMHz));
}
nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t device, unsigned int clockType, unsigned int *clockMHz) {
    FHW_DEV_CALL(device, PHYS, d_clock(&C, clockType, NVML_CLOCK_ID_CUSTOMER_BOOST_MAX, clockMHz));
}

static nvmlReturn_t d_max_clock(fhw_ctx_t *c, unsigned int type, unsigned int *mhz) {
    CHECK_PTR(mhz);
    if (type >= NVML_CLOCK_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    *mhz = c->g->clocks_max[type];
    return *mhz ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock) {
    FHW_DEV_CALL(device, PHYS, d_max_clock(&C, type, clock));
}

static nvmlReturn_t d_supported_mem_clocks(fhw_ctx_t *c, unsigned int *count, unsigned int *clocks) {
    CHECK_PTR(count);
    unsigned int n = c->g->mem_clock_count;
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    CHECK_PTR(clocks);
    for (unsigned int i = 0; i < n; i++) clocks[i] = c->g->mem_clocks[i];
    *count = n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count, unsigned int *clocksMHz) {
    FHW_DEV_CALL(device, PHYS, d_supported_mem_clocks(&C, count, clocksMHz));
}

/* Graphics clocks with a memory clock: from its top down to the minimum in the board's steps, in half MHz and
   rounded down as the driver lists them (2062.5 -> 2062, 2055, 2047, ...). */
static nvmlReturn_t d_supported_gr_clocks(fhw_ctx_t *c, unsigned int mem, unsigned int *count, unsigned int *clocks) {
    CHECK_PTR(count);
    const fhw_gpu_t *g = c->g;
    unsigned int k = 0;
    while (k < g->mem_clock_count && g->mem_clocks[k] != mem) k++;
    if (k == g->mem_clock_count || g->graphics_step_x2 == 0) return NVML_ERROR_NOT_FOUND;
    unsigned int top = g->graphics_top_x2[k], bottom = g->graphics_clock_min * 2;
    unsigned int n = top >= bottom ? (top - bottom) / g->graphics_step_x2 + 1 : 1;
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    CHECK_PTR(clocks);
    for (unsigned int i = 0; i < n; i++) clocks[i] = (top - g->graphics_step_x2 * i) / 2;
    *count = n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
                                                  unsigned int *count, unsigned int *clocksMHz) {
    FHW_DEV_CALL(device, PHYS, d_supported_gr_clocks(&C, memoryClockMHz, count, clocksMHz));
}

static nvmlReturn_t d_adaptive(fhw_ctx_t *c, unsigned int *status) {
    (void)c;
    CHECK_PTR(status);
    *status = 1; /* NVML_ADAPTIVE_CLOCKING_INFO_STATUS_ENABLED */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetAdaptiveClockInfoStatus(nvmlDevice_t device, unsigned int *adaptiveClockStatus) {
    FHW_DEV_CALL(device, PHYS, d_adaptive(&C, adaptiveClockStatus));
}

static nvmlReturn_t d_minmax_pstate_clock(fhw_ctx_t *c, unsigned int type, unsigned int pstate, unsigned int *minMHz,
                                          unsigned int *maxMHz) {
    if (minMHz == NULL || maxMHz == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    /* nvml.h: NVML_ERROR_UNKNOWN "if type or pstate are invalid" (INVALID_ARGUMENT is for the NULL pointers). */
    if (type >= NVML_CLOCK_COUNT || pstate > NVML_PSTATE_15) return NVML_ERROR_UNKNOWN;
    if (pstate != NVML_PSTATE_0) return NVML_ERROR_NOT_SUPPORTED; /* the boards expose P0 only */
    *maxMHz = c->g->clocks_max[type];
    *minMHz = type == NVML_CLOCK_MEM ? c->g->clocks_max[type] : c->g->graphics_clock_min;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinMaxClockOfPState(nvmlDevice_t device, unsigned int type, unsigned int pstate,
                                              unsigned int *minClockMHz, unsigned int *maxClockMHz) {
    FHW_DEV_CALL(device, PHYS, d_minmax_pstate_clock(&C, type, pstate, minClockMHz, maxClockMHz));
}

static nvmlReturn_t d_supported_pstates(fhw_ctx_t *c, unsigned int *pstates, unsigned int size) {
    (void)c;
    CHECK_PTR(pstates);
    if (size < NVML_MAX_GPU_PERF_PSTATES * sizeof(unsigned int)) return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned int i = 0; i < NVML_MAX_GPU_PERF_PSTATES; i++) pstates[i] = NVML_PSTATE_UNKNOWN;
    pstates[0] = NVML_PSTATE_0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSupportedPerformanceStates(nvmlDevice_t device, unsigned int *pstates, unsigned int size) {
    FHW_DEV_CALL(device, PHYS, d_supported_pstates(&C, pstates, size));
}

/* ------------------------------------------------------------------------------------------ throttling */

static nvmlReturn_t d_throttle(fhw_ctx_t *c, unsigned long long *reasons, int supported) {
    CHECK_PTR(reasons);
    *reasons = supported ? c->g->supported_throttle_reasons : c->g->throttle_reasons;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
    FHW_DEV_CALL(device, PHYS, d_throttle(&C, reasons, 0));
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    FHW_DEV_CALL(device, PHYS, d_throttle(&C, reasons, 0));
}
nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
    FHW_DEV_CALL(device, PHYS, d_throttle(&C, reasons, 1));
}
nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    FHW_DEV_CALL(device, PHYS, d_throttle(&C, reasons, 1));
}

/* Time held below clocks by perf policy `policy` (nvmlPerfPolicyType_t), in ns: one generation's worth (1 s) per
   active limiter of its kind. "GPU idle" (0x1) holds nothing back: TOTAL_APP_CLOCKS is the time "held below
   application clocks by any limiter (0 - 5 above)" (nvml.h). The violation status and the perf policy fields
   (fields.c) both answer from here. */
uint64_t fhw_violation_ns(fhw_ctx_t *c, unsigned int policy) {
    unsigned long long r = c->g->throttle_reasons & ~1ULL;
    int hit = (policy == 0 && (r & 0x84)) || (policy == 1 && (r & 0x60)) || (policy >= 10 && r);
    return hit ? c->s->hdr->generation * 1000000000ULL : 0;
}

static nvmlReturn_t d_violation(fhw_ctx_t *c, unsigned int policy, nvmlViolationTime_t *v) {
    CHECK_PTR(v);
    if (policy > 11) return NVML_ERROR_INVALID_ARGUMENT;
    v->referenceTime = (unsigned long long)c->s->hdr->render_time_us;
    v->violationTime = fhw_violation_ns(c, policy);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, unsigned int perfPolicyType,
                                          nvmlViolationTime_t *violTime) {
    FHW_DEV_CALL(device, PHYS, d_violation(&C, perfPolicyType, violTime));
}

/* ------------------------------------------------------------------------------------------ utilization */

/* nvml.h, on utilization rates, encoder/decoder/JPEG/OFA utilization, their samples and process utilization: "On
   MIG-enabled GPUs, querying ... is not currently supported" (nvidia-smi prints N/A for GPU-Util there). */
static nvmlReturn_t no_mig_utilization(const fhw_ctx_t *c) {
    return c->g->mig_current ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

static nvmlReturn_t d_util(fhw_ctx_t *c, nvmlUtilization_t *u) {
    CHECK_PTR(u);
    nvmlReturn_t r = no_mig_utilization(c);
    if (r != NVML_SUCCESS) return r;
    u->gpu = c->g->util_gpu;
    u->memory = c->g->util_memory;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    FHW_DEV_CALL(device, PHYS, d_util(&C, utilization));
}

static nvmlReturn_t d_engine_util(fhw_ctx_t *c, unsigned int which, unsigned int *util, unsigned int *period) {
    if (util == NULL || period == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = no_mig_utilization(c);
    if (r != NVML_SUCCESS) return r;
    /* Every captured board answers 0 %, boards without encoders (H100, B200, GB200) included. */
    *util = which == 0 ? c->g->util_encoder : which == 1 ? c->g->util_decoder : which == 2 ? c->g->util_jpeg : c->g->util_ofa;
    *period = 167000;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    FHW_DEV_CALL(device, PHYS, d_engine_util(&C, 0, utilization, samplingPeriodUs));
}
nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    FHW_DEV_CALL(device, PHYS, d_engine_util(&C, 1, utilization, samplingPeriodUs));
}
nvmlReturn_t nvmlDeviceGetJpgUtilization(nvmlDevice_t device, unsigned int *utilization,
                                         unsigned int *samplingPeriodUs) {
    FHW_DEV_CALL(device, PHYS, d_engine_util(&C, 2, utilization, samplingPeriodUs));
}
nvmlReturn_t nvmlDeviceGetOfaUtilization(nvmlDevice_t device, unsigned int *utilization,
                                         unsigned int *samplingPeriodUs) {
    FHW_DEV_CALL(device, PHYS, d_engine_util(&C, 3, utilization, samplingPeriodUs));
}

static nvmlReturn_t d_dyn_pstates(fhw_ctx_t *c, nvmlGpuDynamicPstatesInfo_t *p) {
    CHECK_PTR(p);
    memset(p, 0, sizeof *p);
    unsigned int pct[4] = {c->g->util_gpu, c->g->util_memory, c->g->util_decoder, 0};
    for (int i = 0; i < 4; i++) {
        p->utilization[i].bIsPresent = 1;
        p->utilization[i].percentage = pct[i];
        p->utilization[i].incThreshold = 30;
        p->utilization[i].decThreshold = 15;
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDynamicPstatesInfo(nvmlDevice_t device, nvmlGpuDynamicPstatesInfo_t *pDynamicPstatesInfo) {
    FHW_DEV_CALL(device, PHYS, d_dyn_pstates(&C, pDynamicPstatesInfo));
}

/* One sample per kind: the snapshot's reading at its render time. */
static nvmlReturn_t d_samples(fhw_ctx_t *c, unsigned int type, unsigned long long last, unsigned int *valType,
                              unsigned int *count, nvmlSample_t *samples) {
    if (valType == NULL || count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long ts = (unsigned long long)c->s->hdr->render_time_us;
    unsigned int v;
    switch (type) {
    case 0: v = c->g->power_usage_mw; break;
    case 1: v = c->g->util_gpu; break;
    case 2: v = c->g->util_memory; break;
    case 3: v = c->g->util_encoder; break;
    case 4: v = c->g->util_decoder; break;
    case 5: v = c->g->clocks_current[NVML_CLOCK_GRAPHICS]; break;
    case 6: v = c->g->clocks_current[NVML_CLOCK_MEM]; break;
    case 7: v = c->g->module_power_mw; break; /* nvml.h: "module power samples ... starting Grace Hopper" */
    case 8: v = c->g->util_jpeg; break;
    case 9: v = c->g->util_ofa; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (type == 7) FHW_REQUIRE(c, FHW_ANS_MODULE_POWER); /* the module power getters' own answer */
    /* GPU, memory, encoder and decoder utilization samples (nvml.h's MIG note), and JPEG and OFA ones as
       nvmlDeviceGetJpgUtilization and nvmlDeviceGetOfaUtilization answer */
    if ((type >= 1 && type <= 4) || type >= 8) {
        nvmlReturn_t r = no_mig_utilization(c);
        if (r != NVML_SUCCESS) return r;
    }
    *valType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (last >= ts) return NVML_ERROR_NOT_FOUND;
    if (samples == NULL) {
        *count = 1;
        return NVML_SUCCESS;
    }
    if (*count == 0) return NVML_ERROR_INVALID_ARGUMENT; /* nvml.h: "sampleCount is 0 for non null samples" */
    samples[0].timeStamp = ts;
    samples[0].sampleValue.ullVal = 0;
    samples[0].sampleValue.uiVal = v;
    *count = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, unsigned int type, unsigned long long lastSeenTimeStamp,
                                  unsigned int *sampleValType, unsigned int *sampleCount, nvmlSample_t *samples) {
    FHW_DEV_CALL(device, PHYS, d_samples(&C, type, lastSeenTimeStamp, sampleValType, sampleCount, samples));
}

static nvmlReturn_t d_proc_util(fhw_ctx_t *c, nvmlProcessUtilizationSample_t *u, unsigned int *count,
                                unsigned long long last) {
    CHECK_PTR(count);
    nvmlReturn_t r = no_mig_utilization(c);
    if (r != NVML_SUCCESS) return r;
    if (c->g->process_count == 0) return NVML_ERROR_NOT_FOUND;
    /* nvml.h: "Return only samples with timestamp greater than lastSeenTimeStamp"; NOT_FOUND when there are none.
       The one sample per process is stamped with the snapshot's render time. */
    if (last >= (unsigned long long)c->s->hdr->render_time_us) return NVML_ERROR_NOT_FOUND;
    unsigned int n = c->g->process_count;
    if (u == NULL || *count < n) { /* the size query: nvidia-ml-py and go-nvml take INSUFFICIENT_SIZE as its answer */
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        const fhw_process_t *p = &c->s->processes[c->g->process_first + i];
        memset(&u[i], 0, sizeof u[i]);
        u[i].pid = p->pid;
        u[i].timeStamp = (unsigned long long)c->s->hdr->render_time_us;
        u[i].smUtil = n ? c->g->util_gpu / n : 0;
        u[i].memUtil = n ? c->g->util_memory / n : 0;
    }
    *count = n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp) {
    FHW_DEV_CALL(device, PHYS, d_proc_util(&C, utilization, processSamplesCount, lastSeenTimeStamp));
}

/* ------------------------------------------------------------------------------------------ ECC */

static nvmlReturn_t d_ecc_mode(fhw_ctx_t *c, unsigned int *current, unsigned int *pending) {
    if (current == NULL || pending == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *current = c->g->ecc_current;
    *pending = c->g->ecc_pending;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    FHW_DEV_CALL(device, PHYS, d_ecc_mode(&C, current, pending));
}

static nvmlReturn_t d_ecc_default(fhw_ctx_t *c, unsigned int *mode) {
    CHECK_PTR(mode);
    *mode = c->g->ecc_default;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDefaultEccMode(nvmlDevice_t device, unsigned int *defaultMode) {
    FHW_DEV_CALL(device, PHYS, d_ecc_default(&C, defaultMode));
}

static nvmlReturn_t ecc_args(fhw_ctx_t *c, unsigned int type, unsigned int counter) {
    if (type > 1 || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->g->ecc_current) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static nvmlReturn_t d_ecc_total(fhw_ctx_t *c, unsigned int type, unsigned int counter, unsigned long long *count) {
    CHECK_PTR(count);
    nvmlReturn_t r = ecc_args(c, type, counter);
    if (r != NVML_SUCCESS) return r;
    unsigned long long sum = 0;
    for (int l = 0; l < FHW_ECC_LOCATIONS; l++) sum += c->g->ecc_counts[type][counter][l];
    *count = sum;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int errorType, unsigned int counterType,
                                         unsigned long long *eccCounts) {
    FHW_DEV_CALL(device, PHYS, d_ecc_total(&C, errorType, counterType, eccCounts));
}

static nvmlReturn_t d_ecc_detailed(fhw_ctx_t *c, unsigned int type, unsigned int counter, nvmlEccErrorCounts_t *e) {
    CHECK_PTR(e);
    nvmlReturn_t r = ecc_args(c, type, counter);
    if (r != NVML_SUCCESS) return r;
    const uint64_t *v = c->g->ecc_counts[type][counter];
    e->l1Cache = v[NVML_MEMORY_LOCATION_L1_CACHE];
    e->l2Cache = v[NVML_MEMORY_LOCATION_L2_CACHE];
    e->deviceMemory = v[NVML_MEMORY_LOCATION_DEVICE_MEMORY];
    e->registerFile = v[NVML_MEMORY_LOCATION_REGISTER_FILE];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDetailedEccErrors(nvmlDevice_t device, unsigned int errorType, unsigned int counterType,
                                            nvmlEccErrorCounts_t *eccCounts) {
    FHW_DEV_CALL(device, PHYS, d_ecc_detailed(&C, errorType, counterType, eccCounts));
}

/* A MIG device answers too (nvidia-smi -q asks per MIG device): the model attributes errors to the physical
   GPU, not to one of its instances, so a MIG device's own counts are zero. */
static nvmlReturn_t d_mem_error(fhw_ctx_t *c, unsigned int type, unsigned int counter, unsigned int loc,
                                unsigned long long *count) {
    CHECK_PTR(count);
    nvmlReturn_t r = ecc_args(c, type, counter);
    if (r != NVML_SUCCESS) return r;
    if (loc >= NVML_MEMORY_LOCATION_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    *count = c->m ? 0 : c->g->ecc_counts[type][counter][loc];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, unsigned int errorType, unsigned int counterType,
                                             unsigned int locationType, unsigned long long *count) {
    FHW_DEV_CALL(device, ANY, d_mem_error(&C, errorType, counterType, locationType, count));
}

static nvmlReturn_t d_retired(fhw_ctx_t *c, unsigned int cause, unsigned int *count, unsigned long long *addresses,
                              unsigned long long *timestamps) {
    CHECK_PTR(count);
    if (cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    FHW_REQUIRE(c, FHW_ANS_RETIRED_PAGES); /* Ampere and later remap rows instead (N/A in the captures) */
    unsigned int n = cause == 0 ? c->g->retired_sbe : c->g->retired_dbe;
    if (n > FHW_RETIRED_PAGES_MAX) n = FHW_RETIRED_PAGES_MAX;
    const uint64_t *pages = cause == 0 ? c->g->retired_sbe_pages : c->g->retired_dbe_pages;
    if (*count < n || (n > 0 && addresses == NULL)) {
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        addresses[i] = pages[i];
        if (timestamps) timestamps[i] = c->g->retired_time;
    }
    *count = n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, unsigned int cause, unsigned int *pageCount,
                                       unsigned long long *addresses) {
    FHW_DEV_CALL(device, PHYS, d_retired(&C, cause, pageCount, addresses, NULL));
}
nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, unsigned int cause, unsigned int *pageCount,
                                          unsigned long long *addresses, unsigned long long *timestamps) {
    FHW_DEV_CALL(device, PHYS, d_retired(&C, cause, pageCount, addresses, timestamps));
}

static nvmlReturn_t d_retired_pending(fhw_ctx_t *c, unsigned int *isPending) {
    CHECK_PTR(isPending);
    FHW_REQUIRE(c, FHW_ANS_RETIRED_PAGES);
    *isPending = c->g->retired_pending;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, unsigned int *isPending) {
    FHW_DEV_CALL(device, PHYS, d_retired_pending(&C, isPending));
}

static nvmlReturn_t d_remapped(fhw_ctx_t *c, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                               unsigned int *failure) {
    if (corr == NULL || unc == NULL || pending == NULL || failure == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    FHW_REQUIRE(c, FHW_ANS_REMAPPED_ROWS); /* T4 (Turing) retires pages instead */
    *corr = c->g->remap_corr;
    *unc = c->g->remap_unc;
    *pending = c->g->remap_pending;
    *failure = c->g->remap_failure;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred) {
    FHW_DEV_CALL(device, PHYS, d_remapped(&C, corrRows, uncRows, isPending, failureOccurred));
}

static nvmlReturn_t d_remap_hist(fhw_ctx_t *c, nvmlRowRemapperHistogramValues_t *v) {
    CHECK_PTR(v);
    FHW_REQUIRE(c, FHW_ANS_REMAPPED_ROWS);
    v->max = c->g->remap_histogram[0];
    v->high = c->g->remap_histogram[1];
    v->partial = c->g->remap_histogram[2];
    v->low = c->g->remap_histogram[3];
    v->none = c->g->remap_histogram[4];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *values) {
    FHW_DEV_CALL(device, PHYS, d_remap_hist(&C, values));
}

/* ------------------------------------------------------------------------------------------ processes */

/* kind: 1 compute, 2 graphics, 4 MPS compute; `entry` is the caller's entry size (16 or 24 bytes). */
static nvmlReturn_t d_processes(fhw_ctx_t *c, unsigned int kind, unsigned int *infoCount, void *infos, size_t entry) {
    CHECK_PTR(infoCount);
    unsigned int n = 0;
    for (unsigned int i = 0; i < c->g->process_count; i++) {
        const fhw_process_t *p = &c->s->processes[c->g->process_first + i];
        if (!(p->kinds & kind)) continue;
        if (c->m && (p->gpu_instance_id != c->m->gpu_instance_id || p->compute_instance_id != c->m->compute_instance_id))
            continue;
        n++;
    }
    if (*infoCount < n || (n > 0 && infos == NULL)) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int k = 0;
    for (unsigned int i = 0; i < c->g->process_count && k < n; i++) {
        const fhw_process_t *p = &c->s->processes[c->g->process_first + i];
        if (!(p->kinds & kind)) continue;
        if (c->m && (p->gpu_instance_id != c->m->gpu_instance_id || p->compute_instance_id != c->m->compute_instance_id))
            continue;
        if (entry == sizeof(nvmlProcessInfo_v1_t)) {
            nvmlProcessInfo_v1_t *o = (nvmlProcessInfo_v1_t *)infos + k;
            memset(o, 0, sizeof *o);
            o->pid = p->pid;
            o->usedGpuMemory = p->used_memory;
        } else {
            nvmlProcessInfo_v2_t *o = (nvmlProcessInfo_v2_t *)infos + k;
            memset(o, 0, sizeof *o);
            o->pid = p->pid;
            o->usedGpuMemory = p->used_memory;
            o->gpuInstanceId = p->gpu_instance_id;
            o->computeInstanceId = p->compute_instance_id;
        }
        k++;
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

#define PROCESS_FNS(Kind, bit)                                                                                   \
    nvmlReturn_t nvmlDeviceGet##Kind##RunningProcesses(nvmlDevice_t device, unsigned int *infoCount,              \
                                                       nvmlProcessInfo_v1_t *infos) {                            \
        FHW_DEV_CALL(device, ANY, d_processes(&C, bit, infoCount, infos, sizeof(nvmlProcessInfo_v1_t)));          \
    }                                                                                                            \
    nvmlReturn_t nvmlDeviceGet##Kind##RunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,           \
                                                          nvmlProcessInfo_v2_t *infos) {                         \
        FHW_DEV_CALL(device, ANY, d_processes(&C, bit, infoCount, infos, sizeof(nvmlProcessInfo_v2_t)));          \
    }                                                                                                            \
    nvmlReturn_t nvmlDeviceGet##Kind##RunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,           \
                                                          nvmlProcessInfo_v2_t *infos) {                         \
        FHW_DEV_CALL(device, ANY, d_processes(&C, bit, infoCount, infos, sizeof(nvmlProcessInfo_v2_t)));          \
    }

PROCESS_FNS(Compute, 1)
PROCESS_FNS(Graphics, 2)
PROCESS_FNS(MPSCompute, 4)

/* ------------------------------------------------------------------------------------------ sessions */

static nvmlReturn_t d_zero_sessions(fhw_ctx_t *c, unsigned int *count) {
    (void)c;
    CHECK_PTR(count);
    *count = 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEncoderSessions(nvmlDevice_t device, unsigned int *sessionCount, void *sessionInfos) {
    (void)sessionInfos;
    FHW_DEV_CALL(device, PHYS, d_zero_sessions(&C, sessionCount));
}
nvmlReturn_t nvmlDeviceGetFBCSessions(nvmlDevice_t device, unsigned int *sessionCount, void *sessionInfo) {
    (void)sessionInfo;
    FHW_DEV_CALL(device, PHYS, d_zero_sessions(&C, sessionCount));
}
/* nvml.h: the accounting queries are NVML_ERROR_NOT_SUPPORTED while accounting mode is disabled (every capture:
 * Disabled); enabled, no process has been accounted on a fake board. */
static nvmlReturn_t d_accounting_pids(fhw_ctx_t *c, unsigned int *count) {
    CHECK_PTR(count);
    if (!c->g->accounting_mode) return NVML_ERROR_NOT_SUPPORTED;
    *count = 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count, unsigned int *pids) {
    (void)pids;
    FHW_DEV_CALL(device, PHYS, d_accounting_pids(&C, count));
}

static nvmlReturn_t d_encoder_stats(fhw_ctx_t *c, unsigned int *count, unsigned int *fps, unsigned int *latency) {
    (void)c;
    if (count == NULL || fps == NULL || latency == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = *fps = *latency = 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount, unsigned int *averageFps,
                                       unsigned int *averageLatency) {
    FHW_DEV_CALL(device, PHYS, d_encoder_stats(&C, sessionCount, averageFps, averageLatency));
}

static nvmlReturn_t d_fbc_stats(fhw_ctx_t *c, nvmlFBCStats_t *s) {
    (void)c;
    CHECK_PTR(s);
    memset(s, 0, sizeof *s);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetFBCStats(nvmlDevice_t device, nvmlFBCStats_t *fbcStats) {
    FHW_DEV_CALL(device, PHYS, d_fbc_stats(&C, fbcStats));
}

static nvmlReturn_t d_encoder_capacity(fhw_ctx_t *c, unsigned int type, unsigned int *capacity) {
    CHECK_PTR(capacity);
    if (type > 2) return NVML_ERROR_INVALID_ARGUMENT;
    if (c->g->encoders == 0) return NVML_ERROR_NOT_SUPPORTED;
    /* NVML_ENCODER_QUERY_AV1 (2): NVENC encodes AV1 from Ada (NVML_DEVICE_ARCH_ADA, 8) on (NVIDIA's AV1 / Ada blog);
       nvml.h: NOT_SUPPORTED "if device does not support the encoder specified". */
    if (type == 2 && c->g->architecture < 8) return NVML_ERROR_NOT_SUPPORTED;
    *capacity = 100; /* no encoder session runs: the whole of the maximum capacity is free */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEncoderCapacity(nvmlDevice_t device, unsigned int encoderQueryType,
                                          unsigned int *encoderCapacity) {
    FHW_DEV_CALL(device, PHYS, d_encoder_capacity(&C, encoderQueryType, encoderCapacity));
}

static nvmlReturn_t d_accounting_buffer(fhw_ctx_t *c, unsigned int *size) {
    (void)c;
    CHECK_PTR(size);
    *size = 4000;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int *bufferSize) {
    FHW_DEV_CALL(device, PHYS, d_accounting_buffer(&C, bufferSize));
}

static nvmlReturn_t d_accounting_stats(fhw_ctx_t *c, void *stats) {
    CHECK_PTR(stats);
    if (!c->g->accounting_mode) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_ERROR_NOT_FOUND; /* no process has been accounted */
}
nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid, void *stats) {
    (void)pid;
    FHW_DEV_CALL(device, PHYS, d_accounting_stats(&C, stats));
}

/* No on-board bridge chip on these boards: every capture prints N/A for its type and firmware. */
static nvmlReturn_t d_bridges(fhw_ctx_t *c, nvmlBridgeChipHierarchy_t *b) {
    (void)c;
    CHECK_PTR(b);
    return NVML_ERROR_NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetBridgeChipInfo(nvmlDevice_t device, nvmlBridgeChipHierarchy_t *bridgeHierarchy) {
    FHW_DEV_CALL(device, PHYS, d_bridges(&C, bridgeHierarchy));
}

/* ------------------------------------------------------------------------------------------ process details */

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} fhw_process_detail_t;
typedef struct {
    unsigned int version;
    unsigned int mode; /* 0 compute, 1 graphics, 2 MPS compute */
    unsigned int numProcArrayEntries;
    fhw_process_detail_t *procArray;
} fhw_process_detail_list_t;
#define FHW_PROCESS_DETAIL_LIST_V1 NVML_STRUCT_VERSION(sizeof(fhw_process_detail_list_t), 1)

static nvmlReturn_t d_process_details(fhw_ctx_t *c, fhw_process_detail_list_t *list) {
    CHECK_PTR(list);
    if (list->version != FHW_PROCESS_DETAIL_LIST_V1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    /* NVML_PROCESS_MODE_ALL (3) is in nvml.h from CUDA 13.3 (the 610 branch) on: every process, whatever its kinds. */
    int has_all = FHW_BRANCH(c) >= 610;
    if (list->mode > 3 || (list->mode == 3 && !has_all)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int kind = 1u << list->mode, n = 0;
    for (unsigned int i = 0; i < c->g->process_count; i++) {
        const fhw_process_t *p = &c->s->processes[c->g->process_first + i];
        if (list->mode != 3 && !(p->kinds & kind)) continue;
        /* A MIG device is one compute instance (nvml.h, nvmlDeviceIsMigDeviceHandle): its own processes only, as
         * the v1-v3 lists give them (nvml.h puts the same per-instance note on both). */
        if (c->m && (p->gpu_instance_id != c->m->gpu_instance_id || p->compute_instance_id != c->m->compute_instance_id))
            continue;
        if (list->procArray != NULL && n < list->numProcArrayEntries) {
            fhw_process_detail_t *o = &list->procArray[n];
            memset(o, 0, sizeof *o);
            o->pid = p->pid;
            o->usedGpuMemory = p->used_memory;
            o->gpuInstanceId = p->gpu_instance_id;
            o->computeInstanceId = p->compute_instance_id;
        }
        n++;
    }
    nvmlReturn_t r = (list->procArray == NULL || n > list->numProcArrayEntries) && n > 0 ? NVML_ERROR_INSUFFICIENT_SIZE
                                                                                       : NVML_SUCCESS;
    list->numProcArrayEntries = n;
    return r;
}
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, fhw_process_detail_list_t *plist) {
    FHW_DEV_CALL(device, ANY, d_process_details(&C, plist));
}
