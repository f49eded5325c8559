/*
 * nvmlDeviceGetPlatformInfo: where a GPU sits in its rack (chassis serial, slot, tray, host, peer type, module id,
 * fabric GUID), answered from the snapshot's platform records (fakehw/nvml/platform_info.py computes them).
 *
 * The structures are declared here under fhw names (layouts from the CUDA 13 nvml.h: nvmlPlatformInfo_v1_t and
 * _v2_t) so this file stands alone next to the header the rest of the shim uses.
 */
#include "internal.h"

typedef struct {
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char rackGuid[16]; /* v2 renames it chassisSerialNumber (same bytes) */
    unsigned char chassisPhysicalSlotNumber;
    unsigned char computeSlotIndex;
    unsigned char nodeIndex;
    unsigned char peerType;
    unsigned char moduleId;
} fhwPlatformInfoV1_t;

typedef struct {
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char chassisSerialNumber[16];
    unsigned char slotNumber;
    unsigned char trayIndex;
    unsigned char hostId;
    unsigned char peerType;
    unsigned char moduleId;
} fhwPlatformInfoV2_t;

_Static_assert(sizeof(fhwPlatformInfoV1_t) == 44 && sizeof(fhwPlatformInfoV2_t) == 44, "nvml.h layout");
#define FHW_PLATFORM_INFO_V1 NVML_STRUCT_VERSION(sizeof(fhwPlatformInfoV1_t), 1)
#define FHW_PLATFORM_INFO_V2 NVML_STRUCT_VERSION(sizeof(fhwPlatformInfoV2_t), 2)

static nvmlReturn_t d_platform(fhw_ctx_t *c, void *out) {
    CHECK_PTR(out);
    unsigned int version = *(unsigned int *)out;
    if (version != FHW_PLATFORM_INFO_V1 && version != FHW_PLATFORM_INFO_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (c->s->platform == NULL || !c->s->platform[c->slot].supported) return NVML_ERROR_NOT_SUPPORTED;
    const fhw_platform_t *p = &c->s->platform[c->slot];
    /* v1 and v2 share one layout: the second 16 bytes are the rack GUID / chassis serial, then five bytes. */
    fhwPlatformInfoV2_t *o = out;
    memset(o, 0, sizeof *o);
    o->version = version;
    memcpy(o->ibGuid, p->ib_guid, sizeof o->ibGuid);
    memcpy(o->chassisSerialNumber, p->chassis_serial, sizeof o->chassisSerialNumber);
    o->slotNumber = (unsigned char)p->slot_number;
    o->trayIndex = (unsigned char)p->tray_index;
    o->hostId = (unsigned char)p->host_id;
    o->peerType = (unsigned char)p->peer_type;
    o->moduleId = (unsigned char)p->module_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, void *platformInfo);
nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, void *platformInfo) {
    FHW_DEV_CALL(device, 0, d_platform(&C, platformInfo));
}
