/*
 * nvmlInternalGetExportTable: the private entry table the real nvidia-smi asks for by GUID.
 *
 * The table is an array of function pointers whose first word is the table's size in bytes. Slots whose
 * meaning is known answer from the snapshot (FAKEHW_NVML_TRACE=1 logs the slots a consumer calls; the known
 * ones were found that way, by writing marker values and reading them back in nvidia-smi's output).
 */
#include "internal.h"

#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static const unsigned char SMI_TABLE_GUID[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                                 0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

/* Slots nvidia-smi 535 calls whose meaning is unknown get NOT_SUPPORTED (it prints N/A), except the ones
   below that it needs to succeed. Answering success without writing the outputs makes it print stale stack
   memory, which is worse than N/A. */
static nvmlReturn_t slot_generic(int n, void *a, void *b, void *c, void *d) {
    fhw_trace("export table slot %d (%p, %p, %p, %p): not supported", n, a, b, c, d);
    return NVML_ERROR_NOT_SUPPORTED;
}

/* Slot 26: called with two strings around most operations (a logging hook); it must succeed. */
static nvmlReturn_t slot_ok(int n, void *a, void *b, void *c, void *d) {
    (void)n;
    (void)a;
    (void)b;
    (void)c;
    (void)d;
    return NVML_SUCCESS;
}

/* Slot 81: a device handle by index (index, nvmlDevice_t *). */
static nvmlReturn_t slot_handle_by_index(int n, void *a, void *b, void *c, void *d) {
    (void)n;
    (void)c;
    (void)d;
    return nvmlDeviceGetHandleByIndex_v2((unsigned int)(uintptr_t)a, (nvmlDevice_t *)b);
}

/*
 * Slots 213, 214, 215: compute, MPS compute and graphics processes of a device (device, unsigned *count, entries).
 * *count holds the capacity on entry. Each entry is 4128 bytes and begins like nvmlProcessInfo_v2_t (pid,
 * used memory at 8, GPU and compute instance ids at 16 and 20); nvidia-smi asks for names separately. The order
 * is nvidia-smi's: with 214 answering graphics processes it printed none of them, a compute-and-graphics process
 * as "M+C" and an MPS one as "G" (its man page: "C", "G", "C+G", and in 555 "M+C"; test_smi.py).
 */
#define SMI_PROCESS_ENTRY 4128
static nvmlReturn_t slot_processes(int n, void *a, void *b, void *c, void *d) {
    (void)d;
    unsigned int *count = b;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int cap = *count;
    unsigned int kind = n == 213 ? 1 : n == 214 ? 4 : 2;
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter_dev(&C, (nvmlDevice_t)a, FHW_ALLOW_MIG);
    if (r != NVML_SUCCESS) return r;
    unsigned int found = 0;
    for (unsigned int i = 0; i < C.g->process_count; i++) {
        const fhw_process_t *p = &C.s->processes[C.g->process_first + i];
        if (!(p->kinds & kind)) continue;
        if (C.m && (p->gpu_instance_id != C.m->gpu_instance_id || p->compute_instance_id != C.m->compute_instance_id))
            continue;
        if (found < cap && c != NULL) {
            unsigned char *e = (unsigned char *)c + (size_t)found * SMI_PROCESS_ENTRY;
            memset(e, 0, SMI_PROCESS_ENTRY);
            nvmlProcessInfo_v2_t info = {p->pid, p->used_memory, p->gpu_instance_id, p->compute_instance_id};
            memcpy(e, &info, sizeof info);
        }
        found++;
    }
    fhw_leave(&C);
    *count = found;
    return found > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

/* Slot 230: the host's maximum PCIe generation (device, unsigned *). Every capture but one prints N/A for it
   (max_host_link_gen), so the board does not report it unless the snapshot names the host's. */
static nvmlReturn_t slot_host_pcie_gen(int n, void *a, void *b, void *c, void *d) {
    (void)n;
    (void)c;
    (void)d;
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter_dev(&C, (nvmlDevice_t)a, 0);
    if (r != NVML_SUCCESS) return r;
    if (b == NULL) r = NVML_ERROR_INVALID_ARGUMENT;
    else if (C.s->hdr->host_pcie_gen_max == 0) r = NVML_ERROR_NOT_SUPPORTED;
    else *(unsigned int *)b = C.s->hdr->host_pcie_gen_max;
    fhw_leave(&C);
    return r;
}

/* Slot 241: the GPU's own NUMA node, when its memory is one (device, int *, 1, 8); N/A otherwise. */
static nvmlReturn_t slot_gpu_numa_id(int n, void *a, void *b, void *c, void *d) {
    (void)n;
    (void)c;
    (void)d;
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter_dev(&C, (nvmlDevice_t)a, 0);
    if (r != NVML_SUCCESS) return r;
    if (b == NULL) r = NVML_ERROR_INVALID_ARGUMENT;
    else if (C.g->gpu_numa_id < 0) r = NVML_ERROR_NOT_SUPPORTED;
    else *(int *)b = C.g->gpu_numa_id;
    fhw_leave(&C);
    return r;
}

/* An endpoint of the topology matrix: a GPU slot or a NIC index of the snapshot. */
typedef struct {
    int gpu, nic;
} endpoint_t;

static int find_endpoint(const fhw_snap_t *s, const char *desc, endpoint_t *out) {
    /* nvml.h's busId: NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE (32) bytes, its NUL terminator among them. A record without
       one names no endpoint, and nothing past its 32 bytes is read; with one, the id is parsed where it stands. */
    if (memchr(desc, '\0', 32) == NULL) return 0;
    fhw_pci_addr_t p;
    if (!fhw_parse_bus_id(desc, &p)) return 0;
    for (uint32_t i = 0; i < s->hdr->gpu_count; i++) {
        const fhw_gpu_t *g = &s->gpus[i];
        if (g->pci_domain == p.domain && g->pci_bus == p.bus && g->pci_device == p.device && g->pci_function == p.function) {
            *out = (endpoint_t){(int)i, -1};
            return 1;
        }
    }
    for (uint32_t i = 0; i < s->hdr->nic_count; i++) {
        const fhw_nic_t *k = &s->nics[i];
        if (k->domain == p.domain && k->bus == p.bus && k->device == p.device && k->function == p.function) {
            *out = (endpoint_t){-1, (int)i};
            return 1;
        }
    }
    return 0;
}

/*
 * Slot 23: the cell of the topology matrix between two endpoints, each described by a record that starts with
 * its 32-byte PCI bus id (descA, descB, int *cell). Cells: 0 PIX, 1 PXB, 2 PHB, 3 NODE, 4 SYS, 4 + n NV<n>.
 */
static int level_cell(unsigned int level) {
    switch (level) {
    case NVML_TOPOLOGY_SINGLE: return 0;
    case NVML_TOPOLOGY_MULTIPLE: return 1;
    case NVML_TOPOLOGY_HOSTBRIDGE: return 2;
    case NVML_TOPOLOGY_NODE: return 3;
    case NVML_TOPOLOGY_SYSTEM: return 4;
    default: return -1;
    }
}

static nvmlReturn_t slot_topology_cell(int n, void *a, void *b, void *c, void *d) {
    (void)n;
    (void)d;
    if (a == NULL || b == NULL || c == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter(&C);
    if (r != NVML_SUCCESS) return r;
    endpoint_t x, y;
    int cell = -1;
    if (find_endpoint(C.s, a, &x) && find_endpoint(C.s, b, &y)) {
        if (x.gpu >= 0 && y.gpu >= 0) {
            const fhw_gpu_t *g = &C.s->gpus[x.gpu];
            cell = g->nvlink_bond[y.gpu] ? 4 + g->nvlink_bond[y.gpu] : level_cell(g->topo_level[y.gpu]);
        } else if (x.gpu >= 0 || y.gpu >= 0) {
            const fhw_nic_t *k = &C.s->nics[x.gpu >= 0 ? y.nic : x.nic];
            cell = level_cell(k->gpu_level[x.gpu >= 0 ? x.gpu : y.gpu]);
        } else {
            cell = level_cell(C.s->nics[x.nic].nic_level[y.nic]);
        }
    }
    fhw_leave(&C);
    if (cell < 0) return NVML_ERROR_NOT_SUPPORTED;
    *(int *)c = cell;
    return NVML_SUCCESS;
}

/*
 * Slots of nvidia-smi 550 and 555 for values the public API of their time did not carry (found by answering a
 * marker from one slot at a time and reading where it appears in "nvidia-smi -q"; each takes the device first):
 * 226 PCIe atomics the GPU issues (mask), 231 GPU part number (char *, size), 240 T.Limit margin (int *), 242
 * addressing mode (NONE 0, HMM 1, ATS 2), 249 sparse operation mode (243 in 535). nvidia-smi 535 calls 226,
 * 231 and 240 too. The answers are the snapshot's, so the board decides N/A exactly as through the public calls.
 */
typedef nvmlReturn_t (*device_slot_fn)(fhw_ctx_t *c, void *out, uintptr_t size);

static nvmlReturn_t s_atomics_outbound(fhw_ctx_t *c, void *out, uintptr_t size) {
    (void)size;
    if (c->g->pcie_atomics_outbound == 0) return NVML_ERROR_NOT_SUPPORTED;
    *(unsigned int *)out = c->g->pcie_atomics_outbound;
    return NVML_SUCCESS;
}

static nvmlReturn_t s_gpu_part_number(fhw_ctx_t *c, void *out, uintptr_t size) {
    if (c->g->gpu_part_number[0] == '\0') return NVML_ERROR_NOT_SUPPORTED;
    return fhw_copy_str(out, (unsigned int)(size > 4096 ? 4096 : size), c->g->gpu_part_number,
                        sizeof c->g->gpu_part_number);
}

static nvmlReturn_t s_margin(fhw_ctx_t *c, void *out, uintptr_t size) {
    (void)size;
    FHW_REQUIRE(c, FHW_ANS_TLIMIT);
    *(int *)out = c->g->temp_margin;
    return NVML_SUCCESS;
}

static nvmlReturn_t s_addressing(fhw_ctx_t *c, void *out, uintptr_t size) {
    (void)size;
    FHW_REQUIRE(c, FHW_ANS_ADDRESSING_MODE);
    *(unsigned int *)out = c->g->addressing_mode;
    return NVML_SUCCESS;
}

static nvmlReturn_t s_sparse(fhw_ctx_t *c, void *out, uintptr_t size) {
    (void)size;
    FHW_REQUIRE(c, FHW_ANS_SPARSE_OPERATION);
    *(unsigned int *)out = 0; /* Disabled, as the H100 capture says */
    return NVML_SUCCESS;
}

static nvmlReturn_t device_slot(int n, void *device, void *out, void *size) {
    device_slot_fn fn = n == 226 ? s_atomics_outbound : n == 231 ? s_gpu_part_number : n == 240 ? s_margin
                      : n == 242 ? s_addressing : s_sparse;
    if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    fhw_ctx_t C;
    nvmlReturn_t r = fhw_enter_dev(&C, (nvmlDevice_t)device, 0);
    if (r != NVML_SUCCESS) return r;
    r = fn(&C, out, (uintptr_t)size);
    fhw_leave(&C);
    return r;
}

static nvmlReturn_t slot_device(int n, void *a, void *b, void *c, void *d) {
    (void)d;
    return device_slot(n, a, b, c);
}

/* nvidia-smi 535 asks for the sparse operation mode in slot 243 (550 and 555 moved it to 249). */
static nvmlReturn_t slot_sparse_535(int n, void *a, void *b, void *c, void *d) {
    (void)n;
    (void)d;
    return device_slot(249, a, b, c);
}

static int caller_branch(void);

typedef nvmlReturn_t (*slot_fn)(int, void *, void *, void *, void *);
static slot_fn slot_impl(int n) {
    switch (n) {
    case 23: return slot_topology_cell;
    case 26: return slot_ok;
    case 81: return slot_handle_by_index;
    case 213:
    case 214:
    case 215: return slot_processes;
    case 226:
    case 231:
    case 240:
    case 242: return slot_device;
    case 243: return caller_branch() == 535 ? slot_sparse_535 : slot_generic;
    case 249: return caller_branch() != 535 ? slot_device : slot_generic; /* 550, 555 and later numbering */
    case 230: return slot_host_pcie_gen;
    case 241: return slot_gpu_numa_id;
    default: return slot_generic;
    }
}

#include "export_slots.h" /* generated: FHW_EXPORT_SLOTS thunks slot_<n> calling slot_impl(n) */

/*
 * nvidia-smi ships with the libnvidia-ml of its own driver release (Debian's nvidia-smi depends on exactly its
 * libnvidia-ml1 version) and asks for this table right after nvmlInit; when the library refuses it, nvidia-smi
 * prints "Mismatch in versions between nvidia-smi and NVML" and exits. The fake plays the library of the
 * snapshot's driver, so it refuses a program built for another driver release: the release an nvidia-smi was
 * built for is the one NUL-delimited "NNN.NN.NN" string in its read-only image (535.261.03, 550.163.01 and
 * 555.58.02 each carry exactly their own), or "NNN.NN" for the two-part releases (NVIDIA/open-gpu-kernel-modules'
 * CHANGELOG.md: 515.57, 515.76, 525.53, 535.98). A caller without such a string (a test harness) gets the table.
 */
typedef struct {
    char version[32];
} caller_version_t;

/* The scan reads whole read-only segments, so under AddressSanitizer it would cross the redzones between the
   program's own constants: it is not instrumented. */
#define FHW_UNINSTRUMENTED __attribute__((no_sanitize_address))

FHW_UNINSTRUMENTED static int version_at(const unsigned char *p, const unsigned char *end, char *out, size_t cap) {
    const unsigned char *q = p;
    int groups = 0, digits = 0;
    while (q < end && *q != 0) {
        if (*q >= '0' && *q <= '9') {
            digits++;
        } else if (*q == '.' && digits > 0) {
            groups++;
            digits = 0;
        } else {
            return 0;
        }
        if (q - p > 12) return 0;
        q++;
    }
    if (q >= end || groups > 2 || digits != 2 || p[3] != '.' || (size_t)(q - p) >= cap) return 0;
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = '\0';
    return 1;
}

FHW_UNINSTRUMENTED static int scan_main_program(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    caller_version_t *found = data;
    for (int i = 0; i < info->dlpi_phnum && !found->version[0]; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R) || (ph->p_flags & PF_W)) continue;
        const unsigned char *start = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        const unsigned char *end = start + ph->p_filesz;
        /* The shortest release, "NNN.NN" and its NUL, is 7 bytes: one may end at the segment's last byte. */
        for (const unsigned char *p = start + 1; p + 7 <= end; p++) {
            if (p[-1] != 0 || p[0] < '3' || p[0] > '9') continue;
            if (version_at(p, end, found->version, sizeof found->version)) break;
        }
    }
    return 1; /* the first object is the main program: stop there */
}

static caller_version_t g_caller;
static pthread_once_t g_caller_once = PTHREAD_ONCE_INIT;

static void find_caller(void) { dl_iterate_phdr(scan_main_program, &g_caller); }

static const char *caller_driver_version(void) {
    pthread_once(&g_caller_once, find_caller);
    return g_caller.version;
}

/* The branch of the calling nvidia-smi (0 when it names none): slot numbers moved between releases. */
static int caller_branch(void) { return atoi(caller_driver_version()); }

static nvmlReturn_t export_table(fhw_ctx_t *c, const void **table) {
    const char *caller = caller_driver_version();
    if (caller[0] != '\0' && strcmp(caller, c->s->hdr->driver_version) != 0) {
        fhw_trace("export table refused: the caller was built for driver %s, the snapshot's driver is %s", caller,
                  c->s->hdr->driver_version);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *table = fhw_export_table;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInternalGetExportTable(const void **table, const unsigned char *guid) {
    if (table == NULL || guid == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (memcmp(guid, SMI_TABLE_GUID, sizeof SMI_TABLE_GUID) != 0) {
        if (fhw_trace_enabled()) {
            char hex[33];
            for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", guid[i]);
            fhw_trace("export table with unknown GUID %s refused", hex);
        }
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    FHW_SYS_CALL(export_table(&C, table));
}
