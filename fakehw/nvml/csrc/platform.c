/*
 * nvmlDeviceGetPlatformInfo: where a GPU sits in its rack (chassis serial, slot, tray, host, peer type, module id,
 * fabric GUID), answered from the snapshot's platform records (fakehw/nvml/platform_info.py computes them).
 */
#include "internal.h"

_Static_assert(sizeof(nvmlPlatformInfo_v1_t) == 44 && sizeof(nvmlPlatformInfo_v2_t) == 44, "nvml.h layout");

static nvmlReturn_t d_platform(fhw_ctx_t *c, void *out) {
    CHECK_PTR(out);
    unsigned int version = *(unsigned int *)out;
    if (version != nvmlPlatformInfo_v1 && version != nvmlPlatformInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (c->s->platform == NULL || !c->s->platform[c->slot].supported) return NVML_ERROR_NOT_SUPPORTED;
    const fhw_platform_t *p = &c->s->platform[c->slot];
    /* v1 and v2 share one layout: the second 16 bytes are the rack GUID / chassis serial, then five bytes. */
    nvmlPlatformInfo_v2_t *o = out;
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

nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, void *platformInfo) {
    FHW_DEV_CALL(device, 0, d_platform(&C, platformInfo));
}
