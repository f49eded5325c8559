/* System-level queries, device enumeration, handles by index/UUID/bus id/serial, error strings. */
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ errors */

/* The real library's own texts (libnvidia-ml 535.261.03, 550.163.01 and 555.58.02 from Debian answer these; nvml.h's
   enum comments are other words): what nvidia-smi prints after "Failed to initialize NVML: ", and pynvml's
   NVMLError text. 535 has no text for 28 and 29 (it answers "Unknown Error"), so a snapshot of that branch, once
   loaded, answers as it does. */
const char *nvmlErrorString(nvmlReturn_t result) {
    int branch = atomic_load_explicit(&fhw_branch_now, memory_order_relaxed);
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "vGPU ECC not supported";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Invalid Frequency";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY: return "System is not in ready state";
    case NVML_ERROR_GPU_NOT_FOUND:
        if (branch == 0 || branch >= 550) return "No supported GPUs were found";
        break;
    case NVML_ERROR_INVALID_STATE:
        if (branch == 0 || branch >= 550) return "Resource not in correct state to perform requested operation";
        break;
    default: break;
    }
    return "Unknown Error";
}

/* ------------------------------------------------------------------------------------------ system */

static nvmlReturn_t sys_driver_version(fhw_ctx_t *c, char *version, unsigned int length) {
    return fhw_copy_str(version, length, c->s->hdr->driver_version, sizeof c->s->hdr->driver_version);
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    FHW_SYS_CALL(sys_driver_version(&C, version, length));
}

static nvmlReturn_t sys_nvml_version(fhw_ctx_t *c, char *version, unsigned int length) {
    return fhw_copy_str(version, length, c->s->hdr->nvml_version, sizeof c->s->hdr->nvml_version);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    /* Like the real library, this one answers before nvmlInit too: it only needs the snapshot. */
    if (!fhw_initialized()) {
        nvmlReturn_t r = nvmlInitWithFlags(0);
        if (r != NVML_SUCCESS) return r;
        fhw_ctx_t C;
        r = fhw_enter(&C);
        if (r == NVML_SUCCESS) {
            r = sys_nvml_version(&C, version, length);
            fhw_leave(&C);
        }
        nvmlShutdown();
        return r;
    }
    FHW_SYS_CALL(sys_nvml_version(&C, version, length));
}

static nvmlReturn_t sys_cuda(fhw_ctx_t *c, int *v) {
    if (v == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *v = c->s->hdr->cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) { FHW_SYS_CALL(sys_cuda(&C, cudaDriverVersion)); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    FHW_SYS_CALL(sys_cuda(&C, cudaDriverVersion));
}

/* The driver's branch: NVIDIA names its release branches r<branch>_00 (r580_00). */
static const fhw_struct_version_t branch_versions[] = {{nvmlSystemDriverBranchInfo_v1, 560}};
static nvmlReturn_t sys_branch(fhw_ctx_t *c, nvmlSystemDriverBranchInfo_v1_t *info, unsigned int length) {
    nvmlReturn_t r = FHW_VERSIONS(c, info, branch_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    char text[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    snprintf(text, sizeof text, "r%u_00", c->s->hdr->driver_branch);
    if (length > sizeof info->branch) length = sizeof info->branch;
    return fhw_copy_str(info->branch, length, text, sizeof text);
}
nvmlReturn_t nvmlSystemGetDriverBranch(nvmlSystemDriverBranchInfo_v1_t *branchInfo, unsigned int length) {
    FHW_SYS_CALL(sys_branch(&C, branchInfo, length));
}

/* Confidential computing is off on every captured system (protected memory 0 MiB). */
static nvmlReturn_t sys_cc_state(fhw_ctx_t *c, nvmlConfComputeSystemState_t *state) {
    (void)c;
    CHECK_PTR(state);
    memset(state, 0, sizeof *state); /* NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE, feature and dev tools off */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t *state) { FHW_SYS_CALL(sys_cc_state(&C, state)); }

static nvmlReturn_t sys_cc_caps(fhw_ctx_t *c, nvmlConfComputeSystemCaps_t *caps) {
    (void)c;
    CHECK_PTR(caps);
    memset(caps, 0, sizeof *caps); /* NVML_CC_SYSTEM_CPU_CAPS_NONE, NVML_CC_SYSTEM_GPUS_CC_NOT_CAPABLE */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetConfComputeCapabilities(nvmlConfComputeSystemCaps_t *capabilities) {
    FHW_SYS_CALL(sys_cc_caps(&C, capabilities));
}

static nvmlReturn_t sys_cc_ready(fhw_ctx_t *c, unsigned int *ready) {
    (void)c;
    CHECK_PTR(ready);
    *ready = 0; /* NVML_CC_ACCEPTING_CLIENT_REQUESTS_FALSE: CC is off */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetConfComputeGpusReadyState(unsigned int *isAcceptingWork) {
    FHW_SYS_CALL(sys_cc_ready(&C, isAcceptingWork));
}

static const fhw_struct_version_t cc_settings_versions[] = {{nvmlSystemConfComputeSettings_v1, 550}};
static nvmlReturn_t sys_cc_settings(fhw_ctx_t *c, nvmlSystemConfComputeSettings_v1_t *s) {
    nvmlReturn_t r = FHW_VERSIONS(c, s, cc_settings_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    unsigned int version = s->version;
    memset(s, 0, sizeof *s);
    s->version = version;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetConfComputeSettings(nvmlSystemConfComputeSettings_v1_t *settings) {
    FHW_SYS_CALL(sys_cc_settings(&C, settings));
}

static const fhw_struct_version_t key_rotation_versions[] = {{nvmlConfComputeGetKeyRotationThresholdInfo_v1, 550}};
static nvmlReturn_t sys_key_rotation(fhw_ctx_t *c, nvmlConfComputeGetKeyRotationThresholdInfo_v1_t *info) {
    nvmlReturn_t r = FHW_VERSIONS(c, info, key_rotation_versions, NULL);
    if (r != NVML_SUCCESS) return r;
    return NVML_ERROR_NOT_SUPPORTED; /* only in a confidential-computing environment */
}
nvmlReturn_t nvmlSystemGetConfComputeKeyRotationThresholdInfo(nvmlConfComputeGetKeyRotationThresholdInfo_v1_t *info) {
    FHW_SYS_CALL(sys_key_rotation(&C, info));
}

/* The system-wide NVLink bandwidth mode: full on a system that boots normally. nvml.h: NOT_SUPPORTED "if GPU is not
   Hopper or newer architecture", so a system with a visible GPU before Hopper, or none, refuses it. GPM's answer is
   the Hopper-or-later fact (fakehw/nvml/support.py). (Its NO_PERMISSION "if not root user" is not modelled: no
   capture shows what a user gets.) */
static nvmlReturn_t sys_bw_mode(fhw_ctx_t *c, unsigned int *mode) {
    CHECK_PTR(mode);
    const fhw_visible_t *vis = fhw_visible();
    int gpus = 0;
    for (int d = 0; d < vis->count; d++) {
        int slot = c->s->dev_slot[d];
        if (slot < 0) continue;
        if (c->s->gpus[slot].answers[FHW_ANS_GPM] != NVML_SUCCESS) return NVML_ERROR_NOT_SUPPORTED;
        gpus++;
    }
    if (gpus == 0) return NVML_ERROR_NOT_SUPPORTED;
    *mode = 0; /* NVML_GPU_NVLINK_BW_MODE_FULL */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetNvlinkBwMode(unsigned int *nvlinkBwMode) { FHW_SYS_CALL(sys_bw_mode(&C, nvlinkBwMode)); }

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (name == NULL || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/cmdline", pid);
    FILE *f = fopen(path, "re");
    size_t n = 0; /* characters of the first argument given to name: it is "cropped to provided length" (nvml.h) and
                     by nothing else, however long (proc(5) puts no limit on the command line) */
    if (f != NULL) {
        char chunk[4096];
        size_t got;
        int ended = 0;
        while (!ended && n < length - 1 && (got = fread(chunk, 1, sizeof chunk, f)) > 0) {
            size_t k = strnlen(chunk, got); /* up to the NUL that ends the first argument */
            ended = k < got;
            if (k > length - 1 - n) k = length - 1 - n;
            memcpy(name + n, chunk, k);
            n += k;
        }
        fclose(f);
    }
    name[n] = '\0';
    if (n == 0) {
        /* Kernel threads and zombies have no command line: fall back to the short name. */
        char comm[64];
        snprintf(path, sizeof path, "/proc/%u/comm", pid);
        f = fopen(path, "re");
        if (f == NULL) return NVML_ERROR_NOT_FOUND;
        size_t m = fread(comm, 1, sizeof comm - 1, f);
        fclose(f);
        comm[m] = '\0';
        comm[strcspn(comm, "\n")] = '\0';
        snprintf(name, length, "%s", comm); /* cropped, as above */
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetHicVersion(unsigned int *hwbcCount, void *hwbcEntries) {
    (void)hwbcEntries;
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (hwbcCount == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *hwbcCount = 0; /* no host interface cards on these systems */
    return NVML_SUCCESS;
}

static nvmlReturn_t zero_count(unsigned int *count) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount) { return zero_count(unitCount); }
nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount) { return zero_count(deviceCount); }
nvmlReturn_t nvmlGetBlacklistDeviceCount(unsigned int *deviceCount) { return zero_count(deviceCount); }

static nvmlReturn_t no_such_index(void) {
    return fhw_initialized() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t nvmlUnitGetHandleByIndex(unsigned int index, nvmlUnit_t *unit) {
    (void)index;
    (void)unit;
    return no_such_index();
}
nvmlReturn_t nvmlGetExcludedDeviceInfoByIndex(unsigned int index, nvmlExcludedDeviceInfo_t *info) {
    (void)index;
    (void)info;
    return no_such_index();
}
nvmlReturn_t nvmlGetBlacklistDeviceInfoByIndex(unsigned int index, nvmlExcludedDeviceInfo_t *info) {
    (void)index;
    (void)info;
    return no_such_index();
}

/* ------------------------------------------------------------------------------------------ enumeration */

static nvmlReturn_t count_devices(fhw_ctx_t *c, unsigned int *count) {
    (void)c;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)fhw_visible()->count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) { FHW_SYS_CALL(count_devices(&C, deviceCount)); }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { FHW_SYS_CALL(count_devices(&C, deviceCount)); }

static nvmlReturn_t handle_by_index(unsigned int index, nvmlDevice_t *device) {
    if (!fhw_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= (unsigned int)fhw_visible()->count) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlDevice_t h = fhw_device_handle((int)index);
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter_dev(&C, h, 0);
    if (r != NVML_SUCCESS) return r; /* e.g. GPU_IS_LOST: the real library gives no handle then either */
    fhw_leave(&C);
    *device = h;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    return handle_by_index(index, device);
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return handle_by_index(index, device);
}

typedef int (*gpu_match_fn)(const fhw_gpu_t *g, const void *arg);

/* The visible device whose GPU record matches: the first one, or with `unique` the only one (INVALID_ARGUMENT when
   two match); GPU_IS_LOST if it is lost, NOT_FOUND if none. */
static nvmlReturn_t find_device(fhw_ctx_t *c, gpu_match_fn match, const void *arg, int unique, nvmlDevice_t *device) {
    const fhw_visible_t *vis = fhw_visible();
    int found = -1;
    for (int d = 0; d < vis->count; d++) {
        int slot = c->s->dev_slot[d];
        if (slot < 0 || !match(&c->s->gpus[slot], arg)) continue;
        if (found >= 0) return NVML_ERROR_INVALID_ARGUMENT;
        found = d;
        if (!unique) break;
    }
    if (found < 0) return NVML_ERROR_NOT_FOUND;
    if (c->s->gpus[c->s->dev_slot[found]].lost) return NVML_ERROR_GPU_IS_LOST;
    *device = fhw_device_handle(found);
    return NVML_SUCCESS;
}

static int match_uuid(const fhw_gpu_t *g, const void *arg) { return strcmp(g->uuid, (const char *)arg) == 0; }
static int match_serial(const fhw_gpu_t *g, const void *arg) {
    return g->serial[0] != '\0' && strcmp(g->serial, (const char *)arg) == 0;
}

nvmlReturn_t fhw_device_by_uuid(fhw_ctx_t *c, const char *uuid, nvmlDevice_t *device) {
    if (uuid == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = find_device(c, match_uuid, uuid, 0, device);
    if (r != NVML_ERROR_NOT_FOUND) return r;
    for (uint32_t i = 0; i < c->s->hdr->mig_count; i++) {
        int m = c->s->mig_handle[i];
        if (m < 0 || strcmp(c->s->migs[i].uuid, uuid) != 0) continue;
        if (c->s->gpus[c->s->migs[i].parent].lost) return NVML_ERROR_GPU_IS_LOST;
        *device = fhw_mig_device_handle(m);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) { FHW_SYS_CALL(fhw_device_by_uuid(&C, uuid, device)); }

/* nvml.h: INVALID_ARGUMENT "if ... more than one device has the same serial (dual GPU boards)": the two GPUs of a
   GB200 compute board print one board serial (qx-gb200.xml), so neither is the device that serial names. */
static nvmlReturn_t by_serial(fhw_ctx_t *c, const char *serial, nvmlDevice_t *device) {
    if (serial == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return find_device(c, match_serial, serial, 1, device);
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device) {
    FHW_SYS_CALL(by_serial(&C, serial, device));
}

/* Accept the three forms nvml.h lists for nvmlDeviceGetHandleByPciBusId_v2 (hexadecimal, any case):
   domain:bus:device.function ("00000000:1B:00.0", "0000:1b:00.0"), domain:bus:device ("0:1b:00") and
   bus:device.function ("1b:00.0"). Nothing else: "1b:00" is not one of them (nor fakehw's PciAddress). */
int fhw_parse_bus_id(const char *text, fhw_pci_addr_t *out) {
    unsigned int a = 0, b = 0, d = 0, f = 0;
    int n = 0;
    char tail = 0;
    if (sscanf(text, "%x:%x:%x.%x%n", &a, &b, &d, &f, &n) == 4 && text[n] == '\0') {
        *out = (fhw_pci_addr_t){a, b, d, f};
        return 1;
    }
    if (sscanf(text, "%x:%x.%x%n", &b, &d, &f, &n) == 3 && text[n] == '\0') {
        *out = (fhw_pci_addr_t){0, b, d, f};
        return 1;
    }
    if (sscanf(text, "%x:%x:%x%c", &a, &b, &d, &tail) == 3) {
        *out = (fhw_pci_addr_t){a, b, d, 0};
        return 1;
    }
    return 0;
}

static int match_pci(const fhw_gpu_t *g, const void *arg) {
    const fhw_pci_addr_t *p = arg;
    return g->pci_domain == p->domain && g->pci_bus == p->bus && g->pci_device == p->device &&
           g->pci_function == p->function;
}

static nvmlReturn_t by_pci(fhw_ctx_t *c, const char *busId, nvmlDevice_t *device) {
    if (busId == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strnlen(busId, 64) >= 64) return NVML_ERROR_INVALID_ARGUMENT;
    fhw_pci_addr_t p;
    if (!fhw_parse_bus_id(busId, &p)) return NVML_ERROR_INVALID_ARGUMENT;
    return find_device(c, match_pci, &p, 0, device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    FHW_SYS_CALL(by_pci(&C, pciBusId, device));
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
    FHW_SYS_CALL(by_pci(&C, pciBusId, device));
}

/* ------------------------------------------------------------------------------------------ topology set */

static nvmlReturn_t gpu_set(fhw_ctx_t *c, unsigned int cpu, unsigned int *count, nvmlDevice_t *devices) {
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (cpu >= FHW_CPU_MASK_WORDS * 64) return NVML_ERROR_INVALID_ARGUMENT;
    const fhw_visible_t *vis = fhw_visible();
    unsigned int n = 0;
    for (int d = 0; d < vis->count; d++) {
        int slot = c->s->dev_slot[d];
        if (slot < 0) continue;
        const fhw_gpu_t *g = &c->s->gpus[slot];
        if (!(g->cpu_affinity[cpu / 64] >> (cpu % 64) & 1)) continue;
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

nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count, nvmlDevice_t *deviceArray) {
    FHW_SYS_CALL(gpu_set(&C, cpuNumber, count, deviceArray));
}
