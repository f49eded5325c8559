/*
 * nvmlDeviceGetFieldValues: field ids 1 ... 307 (NVML_FI_MAX of the newest header is 308). Each group of ids has
 * one handler; a handler says whether the id is its own and fills the answer. Which boards answer which group is
 * in the snapshot (GpuRecord.answers, decided in fakehw/nvml/support.py). Ids are not gated by the branch's
 * public header: late releases of a branch answer fields its CUDA header does not list yet (nvidia-smi
 * 550.163.01 asks for 226 and 227, beyond the 12.4 header's NVML_FI_MAX of 200). An unknown id answers
 * NVML_ERROR_INVALID_ARGUMENT in its nvmlReturn.
 */
#include "internal.h"

/* Field ids of later headers (the 535 ones are in nvml_abi.h). */
#define FI_NVLINK_GET_POWER_STATE 167
#define FI_NVLINK_GET_POWER_THRESHOLD 168
#define FI_PCIE_L0_TO_RECOVERY_COUNTER 169
#define FI_C2C_LINK_COUNT 170
#define FI_C2C_LINK_GET_STATUS 171
#define FI_C2C_LINK_GET_MAX_BW 172
#define FI_PCIE_COUNT_CORRECTABLE_ERRORS 173
#define FI_PCIE_COUNT_LANE_ERROR 183
#define FI_IS_RESETLESS_MIG_SUPPORTED 184
#define FI_POWER_AVERAGE 185
#define FI_POWER_INSTANT 186
#define FI_POWER_MIN_LIMIT 187
#define FI_POWER_MAX_LIMIT 188
#define FI_POWER_DEFAULT_LIMIT 189
#define FI_POWER_CURRENT_LIMIT 190
#define FI_ENERGY 191
#define FI_POWER_REQUESTED_LIMIT 192
#define FI_TEMPERATURE_SHUTDOWN_TLIMIT 193
#define FI_TEMPERATURE_SLOWDOWN_TLIMIT 194
#define FI_TEMPERATURE_MEM_MAX_TLIMIT 195
#define FI_TEMPERATURE_GPU_MAX_TLIMIT 196
#define FI_PCIE_COUNT_TX_BYTES 197
#define FI_PCIE_COUNT_RX_BYTES 198
#define FI_IS_MIG_MODE_INDEPENDENT_MIG_QUERY_CAPABLE 199
#define FI_NVLINK_GET_POWER_THRESHOLD_MAX 200
#define FI_NVLINK_COUNT_XMIT_PACKETS 201
#define FI_NVLINK_COUNT_XMIT_BYTES 202
#define FI_NVLINK_COUNT_RCV_PACKETS 203
#define FI_NVLINK_COUNT_RCV_BYTES 204
#define FI_NVLINK_COUNT_SYMBOL_BER 222
#define FI_NVLINK_GET_POWER_THRESHOLD_MIN 223
#define FI_NVLINK_GET_POWER_THRESHOLD_SUPPORTED 225
#define FI_RESET_STATUS 226
#define FI_DRAIN_AND_RESET_STATUS 227
#define FI_PCIE_OUTBOUND_ATOMICS_MASK 228
#define FI_PCIE_INBOUND_ATOMICS_MASK 229
#define FI_GET_GPU_RECOVERY_ACTION 230
#define FI_C2C_LINK_ERROR_INTR 231
#define FI_C2C_LINK_POWER_STATE 234
#define FI_NVLINK_COUNT_FEC_HISTORY_0 235
#define FI_NVLINK_COUNT_FEC_HISTORY_15 250
#define FI_PWR_SMOOTHING_FIRST 251
#define FI_PWR_SMOOTHING_LAST 268
#define FI_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN 269
#define FI_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN 271
#define FI_PWR_SMOOTHING_PRIMARY_POWER_FLOOR 275
#define FI_PWR_SMOOTHING_ADMIN_LAST 288
#define FI_NVLINK_COUNT_RAW_ERRORS_LANE0 289
#define FI_NVLINK_PLR_XMIT_RETRY_BLOCKS 295
#define FI_NVLINK_GET_DATA_RATE 296
#define FI_PWR_SMOOTHING_SOC_ENABLED 300
#define FI_REMAPPED_ROWS_COR_INACTIVE 301
#define FI_REMAPPED_ROWS_UNC_INACTIVE 302

#define FI_MAX 308
#define VT_DOUBLE NVML_VALUE_TYPE_DOUBLE
#define VT_UINT NVML_VALUE_TYPE_UNSIGNED_INT
#define VT_ULL NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
#define VT_SINT 5 /* NVML_VALUE_TYPE_SIGNED_INT (later headers) */

/* The answer a handler fills. */
typedef struct {
    nvmlReturn_t ret;
    unsigned int type;
    unsigned long long u;
    long long s;
} fv_answer_t;

static void answer_u(fv_answer_t *a, unsigned int type, unsigned long long u) {
    a->ret = NVML_SUCCESS;
    a->type = type;
    a->u = u;
}

static void answer_code(fv_answer_t *a, nvmlReturn_t r) { a->ret = r; }

/* ------------------------------------------------------------------------------------------ 1-166 */

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

static uint64_t link_sum(fhw_ctx_t *c, unsigned int counter) {
    uint64_t sum = 0;
    for (unsigned int l = 0; l < c->g->nvlink_count; l++)
        if (c->g->links[l].present) sum += fhw_link_error(c, &c->g->links[l], l, counter);
    return sum;
}

static int f_ecc(fhw_ctx_t *c, unsigned int id, fv_answer_t *a) {
    const fhw_gpu_t *g = c->g;
    if (id == NVML_FI_DEV_ECC_CURRENT || id == NVML_FI_DEV_ECC_PENDING) {
        answer_u(a, VT_UINT, id == NVML_FI_DEV_ECC_CURRENT ? g->ecc_current : g->ecc_pending);
    } else if (id >= NVML_FI_DEV_ECC_SBE_VOL_TOTAL && id <= NVML_FI_DEV_ECC_DBE_AGG_TOTAL) {
        unsigned int k = id - NVML_FI_DEV_ECC_SBE_VOL_TOTAL; /* sbe vol, dbe vol, sbe agg, dbe agg */
        unsigned long long u = 0;
        for (int l = 0; l < FHW_ECC_LOCATIONS; l++) u += g->ecc_counts[k % 2][k / 2][l];
        if (g->ecc_current) answer_u(a, VT_ULL, u);
        else answer_code(a, NVML_ERROR_NOT_SUPPORTED);
    } else if (id >= NVML_FI_DEV_ECC_SBE_VOL_L1 && id <= NVML_FI_DEV_ECC_DBE_AGG_CBU) {
        /* 7..17 volatile, 18..28 aggregate: L1, L2, DEV, REG, TEX pairs (sbe, dbe), then CBU dbe. */
        static const signed char loc[11] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 6};
        static const signed char err[11] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1};
        unsigned int k = id - NVML_FI_DEV_ECC_SBE_VOL_L1;
        unsigned int counter = k >= 11;
        k %= 11;
        if (g->ecc_current) answer_u(a, VT_ULL, g->ecc_counts[(int)err[k]][counter][(int)loc[k]]);
        else answer_code(a, NVML_ERROR_NOT_SUPPORTED);
    } else {
        return 0;
    }
    return 1;
}

static unsigned int retired_listed(unsigned int n) {
    return n > FHW_RETIRED_PAGES_MAX ? FHW_RETIRED_PAGES_MAX : n;
}

static int f_retired_remapped(fhw_ctx_t *c, unsigned int id, fv_answer_t *a) {
    const fhw_gpu_t *g = c->g;
    if (id == NVML_FI_DEV_RETIRED_SBE || id == NVML_FI_DEV_RETIRED_DBE || id == NVML_FI_DEV_RETIRED_PENDING ||
        id == NVML_FI_DEV_RETIRED_PENDING_SBE || id == NVML_FI_DEV_RETIRED_PENDING_DBE) {
        nvmlReturn_t r = FHW_ANSWER(c, FHW_ANS_RETIRED_PAGES);
        if (r != NVML_SUCCESS) answer_code(a, r);
        /* The count nvmlDeviceGetRetiredPages lists: the record keeps at most FHW_RETIRED_PAGES_MAX addresses. */
        else if (id == NVML_FI_DEV_RETIRED_SBE) answer_u(a, VT_ULL, retired_listed(g->retired_sbe));
        else if (id == NVML_FI_DEV_RETIRED_DBE) answer_u(a, VT_ULL, retired_listed(g->retired_dbe));
        else if (id == NVML_FI_DEV_RETIRED_PENDING_SBE) answer_u(a, VT_ULL, g->retired_pending_sbe);
        else answer_u(a, VT_ULL, g->retired_pending);
    } else if ((id >= NVML_FI_DEV_REMAPPED_COR && id <= NVML_FI_DEV_REMAPPED_FAILURE) ||
               id == FI_REMAPPED_ROWS_COR_INACTIVE || id == FI_REMAPPED_ROWS_UNC_INACTIVE) {
        nvmlReturn_t r = FHW_ANSWER(c, FHW_ANS_REMAPPED_ROWS);
        const uint32_t vals[4] = {g->remap_corr, g->remap_unc, g->remap_pending, g->remap_failure};
        if (r != NVML_SUCCESS) answer_code(a, r);
        else if (id >= FI_REMAPPED_ROWS_COR_INACTIVE) answer_u(a, VT_UINT, 0);
        else answer_u(a, VT_UINT, vals[id - NVML_FI_DEV_REMAPPED_COR]);
    } else {
        return 0;
    }
    return 1;
}

static int f_nvlink_counters(fhw_ctx_t *c, unsigned int id, fv_answer_t *a) {
    const fhw_gpu_t *g = c->g;
    unsigned int link = 0;
    for (size_t i = 0; i < sizeof lane_fields / sizeof lane_fields[0]; i++)
        if (per_link_field(id, lane_fields[i].lo, lane_fields[i].hi, &link)) {
            const fhw_link_t *k;
            nvmlReturn_t r = fhw_link_of(c, link, &k);
            if (r == NVML_SUCCESS) answer_u(a, VT_ULL, fhw_link_error(c, k, link, lane_fields[i].counter));
            else answer_code(a, r);
            return 1;
        }
    static const struct {
        unsigned int id, counter;
    } totals[] = {
        {NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, 2}, {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, 3},
        {NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, 0},   {NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, 1},
        {NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL, 4},
    };
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++)
        if (id == totals[i].id) {
            if (g->nvlink_count == 0) answer_code(a, NVML_ERROR_NOT_SUPPORTED);
            else answer_u(a, VT_ULL, link_sum(c, totals[i].counter));
            return 1;
        }
    if (per_link_field(id, NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L0, NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L6, &link) ||
        per_link_field(id, NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L0, NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L6, &link)) {
        unsigned int counter = (id >= NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L0 && id < NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L0 + 6) ||
                               id >= NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L6;
        const fhw_link_t *k;
        nvmlReturn_t r = fhw_link_of(c, link, &k);
        if (r == NVML_SUCCESS) answer_u(a, VT_ULL, k->util_rx[counter] + k->util_tx[counter]);
        else answer_code(a, r);
        return 1;
    }
    if (id == NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL || id == NVML_FI_DEV_NVLINK_BANDWIDTH_C1_TOTAL) {
        unsigned int counter = id == NVML_FI_DEV_NVLINK_BANDWIDTH_C1_TOTAL;
        unsigned long long u = 0;
        for (unsigned int l = 0; l < g->nvlink_count; l++) u += g->links[l].util_rx[counter] + g->links[l].util_tx[counter];
        if (g->nvlink_count == 0) answer_code(a, NVML_ERROR_NOT_SUPPORTED);
        else answer_u(a, VT_ULL, u);
        return 1;
    }
    if (id >= NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX && id <= NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX) {
        int tx = id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX || id == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX;
        unsigned long long u = 0;
        for (unsigned int l = 0; l < g->nvlink_count; l++) u += tx ? g->links[l].util_tx[0] : g->links[l].util_rx[0];
        if (g->nvlink_count == 0) answer_code(a, NVML_ERROR_NOT_SUPPORTED);
        else answer_u(a, VT_ULL, u / 1024); /* KiB */
        return 1;
    }
    return 0;
}

static int f_nvlink_speed(fhw_ctx_t *c, unsigned int id, fv_answer_t *a) {
    const fhw_gpu_t *g = c->g;
    unsigned int link = 0;
    if (id == NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON) {
        unsigned int u = 0;
        for (unsigned int l = 0; l < g->nvlink_count; l++)
            if (g->links[l].up) u = g->links[l].speed_mbps;
        if (g->nvlink_count == 0) answer_code(a, NVML_ERROR_NOT_SUPPORTED);
        else answer_u(a, VT_UINT, u);
        return 1;
    }
    if (per_link_field(id, NVML_FI_DEV_NVLINK_SPEED_MBPS_L0, NVML_FI_DEV_NVLINK_SPEED_MBPS_L6, &link)) {
        const fhw_link_t *k;
        nvmlReturn_t r = fhw_link_of(c, link, &k);
        if (r == NVML_SUCCESS) answer_u(a, VT_UINT, k->speed_mbps);
        else answer_code(a, r);
        return 1;
    }
    if (id == NVML_FI_DEV_NVLINK_LINK_COUNT) {
        if (g->nvlink_count == 0) answer_code(a, NVML_ERROR_NOT_SUPPORTED);
        else answer_u(a, VT_UINT, g->nvlink_count);
        return 1;
    }
    if (id == NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT) {
        answer_u(a, VT_UINT, g->nvswitch_links);
        return 1;
    }
    return 0;
}

/* Fields whose scopeId names a link (161-168, 201-222, 235-250, 289-296): the link must exist. */
static int f_nvlink_scoped(fhw_ctx_t *c, unsigned int id, unsigned int scope, fv_answer_t *a) {
    int nvlink5 = c->g->nvlink_version >= 7; /* NVML_NVLINK_VERSION_5_0: Blackwell's NVLink5 counters */
    int known = (id >= NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY && id <= FI_NVLINK_GET_POWER_THRESHOLD) ||
                id == NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID || (id >= FI_NVLINK_COUNT_XMIT_PACKETS && id <= FI_NVLINK_COUNT_SYMBOL_BER) ||
                (id >= FI_NVLINK_COUNT_FEC_HISTORY_0 && id <= FI_NVLINK_COUNT_FEC_HISTORY_15) ||
                (id >= FI_NVLINK_COUNT_RAW_ERRORS_LANE0 && id <= FI_NVLINK_GET_DATA_RATE) ||
                (id >= FI_NVLINK_GET_POWER_THRESHOLD_MIN && id <= FI_NVLINK_GET_POWER_THRESHOLD_SUPPORTED) ||
                id == FI_NVLINK_GET_POWER_THRESHOLD_MAX;
    if (!known) return 0;
    const fhw_link_t *k;
    nvmlReturn_t r = fhw_link_of(c, scope, &k);
    if (r != NVML_SUCCESS) {
        answer_code(a, r);
        return 1;
    }
    if (nvlink5 && id >= NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY && id <= NVML_FI_DEV_NVLINK_ERROR_DL_CRC) {
        answer_code(a, NVML_ERROR_NOT_SUPPORTED); /* nvml.h on 161-163: "This is unsupported for Blackwell+" */
        return 1;
    }
    switch (id) {
    case NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: answer_u(a, VT_ULL, fhw_link_error(c, k, scope, 0)); break;
    case NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: answer_u(a, VT_ULL, fhw_link_error(c, k, scope, 1)); break;
    case NVML_FI_DEV_NVLINK_ERROR_DL_CRC:
        answer_u(a, VT_ULL, fhw_link_error(c, k, scope, 2) + fhw_link_error(c, k, scope, 3));
        break;
    case NVML_FI_DEV_NVLINK_GET_SPEED: answer_u(a, VT_UINT, k->speed_mbps); break;
    case NVML_FI_DEV_NVLINK_GET_STATE: answer_u(a, VT_UINT, k->up); break;
    case NVML_FI_DEV_NVLINK_GET_VERSION: answer_u(a, VT_UINT, k->version); break;
    case NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID: answer_u(a, VT_UINT, k->remote_link); break;
    case FI_NVLINK_GET_POWER_STATE: answer_u(a, VT_UINT, 0); break; /* NVML_NVLINK_POWER_STATE_HIGH_SPEED */
    case FI_NVLINK_GET_POWER_THRESHOLD_SUPPORTED: answer_u(a, VT_UINT, 0); break;
    case FI_NVLINK_GET_POWER_THRESHOLD:
    case FI_NVLINK_GET_POWER_THRESHOLD_MIN:
    case FI_NVLINK_GET_POWER_THRESHOLD_MAX:
    case FI_NVLINK_GET_POWER_THRESHOLD_MIN + 1: answer_code(a, NVML_ERROR_NOT_SUPPORTED); break;
    case FI_NVLINK_COUNT_XMIT_PACKETS: answer_u(a, VT_ULL, nvlink5 ? k->util_tx[1] : 0); break;
    case FI_NVLINK_COUNT_XMIT_BYTES: answer_u(a, VT_ULL, nvlink5 ? k->util_tx[0] : 0); break;
    case FI_NVLINK_COUNT_RCV_PACKETS: answer_u(a, VT_ULL, nvlink5 ? k->util_rx[1] : 0); break;
    case FI_NVLINK_COUNT_RCV_BYTES: answer_u(a, VT_ULL, nvlink5 ? k->util_rx[0] : 0); break;
    case FI_NVLINK_GET_DATA_RATE: answer_u(a, VT_UINT, k->speed_mbps); break;
    default: answer_u(a, VT_ULL, 0); break; /* error, BER and FEC counters of a healthy link */
    }
    if (!nvlink5 && id >= FI_NVLINK_COUNT_XMIT_PACKETS && id != FI_NVLINK_GET_POWER_THRESHOLD_MIN &&
        id != FI_NVLINK_GET_POWER_THRESHOLD_MIN + 1 && id != FI_NVLINK_GET_POWER_THRESHOLD_SUPPORTED &&
        id != FI_NVLINK_GET_POWER_THRESHOLD_MAX)
        answer_code(a, NVML_ERROR_NOT_SUPPORTED); /* the NVLink5 counters are Blackwell's */
    return 1;
}

/* ------------------------------------------------------------------------------------------ power, thermal */

/* 185-192: scopeId is the power scope (GPU, module, memory), as nvidia-smi asks for its three power sections. */
static int f_power(fhw_ctx_t *c, unsigned int id, unsigned int scope, fv_answer_t *a) {
    const fhw_gpu_t *g = c->g;
    if (id < FI_POWER_AVERAGE || id > FI_POWER_REQUESTED_LIMIT) return 0;
    if (scope == NVML_POWER_SCOPE_GPU) {
        unsigned long long vals[8] = {g->power_average_mw, g->power_usage_mw, g->power_min_limit_mw,
                                      g->power_max_limit_mw, g->power_default_limit_mw, g->power_enforced_mw,
                                      g->energy_mj, g->power_limit_mw};
        if (id == FI_POWER_AVERAGE && FHW_ANSWER(c, FHW_ANS_POWER_AVERAGE) != NVML_SUCCESS)
            answer_code(a, FHW_ANSWER(c, FHW_ANS_POWER_AVERAGE));
        else answer_u(a, id == FI_ENERGY ? VT_ULL : VT_UINT, vals[id - FI_POWER_AVERAGE]);
    } else if (scope == NVML_POWER_SCOPE_MODULE) {
        unsigned long long vals[8] = {g->module_power_mw, g->module_power_mw, g->module_min_limit_mw,
                                      g->module_max_limit_mw, g->module_default_limit_mw, g->module_limit_mw,
                                      0, g->module_limit_mw};
        if (FHW_ANSWER(c, FHW_ANS_MODULE_POWER) != NVML_SUCCESS || id == FI_ENERGY)
            answer_code(a, FHW_ANSWER(c, FHW_ANS_MODULE_POWER) ? FHW_ANSWER(c, FHW_ANS_MODULE_POWER)
                                                                : NVML_ERROR_NOT_SUPPORTED);
        else answer_u(a, VT_UINT, vals[id - FI_POWER_AVERAGE]);
    } else if (scope == NVML_POWER_SCOPE_MEMORY) {
        /* Boards that meter memory report its average draw only (the captures print N/A for the rest). */
        if (id == FI_POWER_AVERAGE && FHW_ANSWER(c, FHW_ANS_MEMORY_POWER) == NVML_SUCCESS)
            answer_u(a, VT_UINT, g->memory_power_mw);
        else answer_code(a, NVML_ERROR_NOT_SUPPORTED);
    } else if (scope < NVML_POWER_SCOPE_COUNT) {
        /* NVML_POWER_SCOPE_GPU_BASE: a scope nvml.h defines, whose "GPU base Power metrics" no board here reports
         * (no capture has a base power section): the device does not support it, the scope is not invalid. */
        answer_code(a, NVML_ERROR_NOT_SUPPORTED);
    } else {
        answer_code(a, NVML_ERROR_INVALID_ARGUMENT);
    }
    return 1;
}

static int f_thermal(fhw_ctx_t *c, unsigned int id, fv_answer_t *a) {
    const fhw_gpu_t *g = c->g;
    if (id == NVML_FI_DEV_MEMORY_TEMP) {
        if (FHW_ANSWER(c, FHW_ANS_MEMORY_TEMPERATURE) != NVML_SUCCESS)
            answer_code(a, FHW_ANSWER(c, FHW_ANS_MEMORY_TEMPERATURE));
        else answer_u(a, VT_UINT, g->mem_temperature);
        return 1;
    }
    if (id < FI_TEMPERATURE_SHUTDOWN_TLIMIT || id > FI_TEMPERATURE_GPU_MAX_TLIMIT) return 0;
    nvmlReturn_t r = FHW_ANSWER(c, FHW_ANS_TLIMIT);
    if (id == FI_TEMPERATURE_MEM_MAX_TLIMIT && FHW_ANSWER(c, FHW_ANS_MEMORY_TEMPERATURE) != NVML_SUCCESS)
        r = NVML_ERROR_NOT_SUPPORTED; /* no memory sensor, no memory limit */
    if (r != NVML_SUCCESS) {
        answer_code(a, r);
        return 1;
    }
    const int32_t vals[4] = {g->tlimit_shutdown, g->tlimit_slowdown, g->tlimit_mem_max, g->tlimit_gpu_max};
    a->ret = NVML_SUCCESS;
    a->type = VT_SINT;
    a->s = vals[id - FI_TEMPERATURE_SHUTDOWN_TLIMIT];
    return 1;
}

static int f_smoothing(fhw_ctx_t *c, unsigned int id, fv_answer_t *a) {
    if (!((id >= FI_PWR_SMOOTHING_FIRST && id <= FI_PWR_SMOOTHING_LAST) ||
          (id >= FI_PWR_SMOOTHING_PRIMARY_POWER_FLOOR && id <= FI_PWR_SMOOTHING_ADMIN_LAST) ||
          id == FI_PWR_SMOOTHING_SOC_ENABLED))
        return 0;
    answer_code(a, FHW_ANSWER(c, FHW_ANS_POWER_SMOOTHING)); /* NO_PERMISSION for a non-root reader */
    return 1;
}

/* ------------------------------------------------------------------------------------------ other groups */

static int f_c2c(fhw_ctx_t *c, unsigned int id, unsigned int scope, fv_answer_t *a) {
    const fhw_gpu_t *g = c->g;
    int c2c_ids = (id >= FI_C2C_LINK_COUNT && id <= FI_C2C_LINK_GET_MAX_BW) ||
                  (id >= FI_C2C_LINK_ERROR_INTR && id <= FI_C2C_LINK_POWER_STATE);
    if (!c2c_ids) return 0;
    nvmlReturn_t r = FHW_ANSWER(c, FHW_ANS_C2C);
    if (r != NVML_SUCCESS) answer_code(a, r);
    else if (id == FI_C2C_LINK_COUNT) answer_u(a, VT_UINT, g->c2c_link_count);
    else if (scope >= g->c2c_link_count) answer_code(a, NVML_ERROR_INVALID_ARGUMENT);
    else if (id == FI_C2C_LINK_GET_STATUS) answer_u(a, VT_UINT, 1);
    else if (id == FI_C2C_LINK_GET_MAX_BW) answer_u(a, VT_UINT, g->c2c_link_bandwidth_mbps);
    else answer_u(a, VT_UINT, 0); /* error counters and power state (0: active) of a healthy link */
    return 1;
}

static int f_pcie(fhw_ctx_t *c, unsigned int id, fv_answer_t *a) {
    const fhw_gpu_t *g = c->g;
    if (id == NVML_FI_DEV_PCIE_REPLAY_COUNTER) answer_u(a, VT_ULL, g->pcie_replay);
    else if (id == NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER || id == FI_PCIE_L0_TO_RECOVERY_COUNTER ||
             (id >= FI_PCIE_COUNT_CORRECTABLE_ERRORS && id <= FI_PCIE_COUNT_LANE_ERROR))
        answer_u(a, VT_ULL, 0);
    else if (id == FI_PCIE_COUNT_TX_BYTES || id == FI_PCIE_COUNT_RX_BYTES) {
        unsigned long long tx, rx; /* bytes since boot, integrated over the throughput (gpm.c) */
        fhw_pcie_bytes(c, &tx, &rx);
        answer_u(a, VT_ULL, id == FI_PCIE_COUNT_TX_BYTES ? tx : rx);
    } else if (id == FI_PCIE_OUTBOUND_ATOMICS_MASK || id == FI_PCIE_INBOUND_ATOMICS_MASK) {
        unsigned int mask = id == FI_PCIE_OUTBOUND_ATOMICS_MASK ? g->pcie_atomics_outbound : g->pcie_atomics_inbound;
        if (mask) answer_u(a, VT_UINT, mask);
        else answer_code(a, NVML_ERROR_NOT_SUPPORTED);
    } else
        return 0;
    return 1;
}

static int f_misc(fhw_ctx_t *c, unsigned int id, fv_answer_t *a) {
    const fhw_gpu_t *g = c->g;
    int hopper_plus = FHW_ANSWER(c, FHW_ANS_GPM) == NVML_SUCCESS;
    if (id >= NVML_FI_DEV_PERF_POLICY_POWER && id <= NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS) {
        unsigned int policy = id - NVML_FI_DEV_PERF_POLICY_POWER;
        if (policy >= 6) policy += 4; /* 80, 81 -> TOTAL_APP_CLOCKS (10), TOTAL_BASE_CLOCKS (11) */
        answer_u(a, VT_ULL, fhw_violation_ns(c, policy));
    } else if (id == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION) {
        answer_u(a, VT_ULL, g->energy_mj);
    } else if (id == FI_IS_RESETLESS_MIG_SUPPORTED || id == FI_IS_MIG_MODE_INDEPENDENT_MIG_QUERY_CAPABLE) {
        answer_u(a, VT_UINT, (unsigned int)(hopper_plus && g->mig_capable));
    } else if (id == FI_RESET_STATUS || id == FI_DRAIN_AND_RESET_STATUS) {
        /* Superseded by the recovery action: the A100 capture (570) prints the deprecation. */
        if (FHW_BRANCH(c) >= 570) answer_code(a, NVML_ERROR_DEPRECATED);
        else answer_u(a, VT_UINT, 0);
    } else if (id == FI_GET_GPU_RECOVERY_ACTION) {
        answer_u(a, VT_UINT, g->lost ? 1 : 0); /* NVML_GPU_RECOVERY_ACTION_NONE / _GPU_RESET */
    } else if (id >= FI_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN && id <= FI_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN) {
        static const unsigned long long bit[3] = {0x20, 0x40, 0x80}; /* sw thermal, hw thermal, hw power brake */
        int hit = (g->throttle_reasons & bit[id - FI_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN]) != 0;
        answer_u(a, VT_ULL, hit ? c->s->hdr->generation * 1000000000ULL : 0); /* nvml.h: "in ns" */
    } else {
        /* Left to field_value's NOT_SUPPORTED: 272-274 (power sync balancing, EDPP: N/A on the L40S and T4
           captures), 297-299 (MMA stall, memory clock switch interval), 303-307 (no captured board has a bank
           remapper). */
        return 0;
    }
    return 1;
}

static void field_value(fhw_ctx_t *c, nvmlFieldValue_t *v) {
    unsigned int id = v->fieldId;
    fv_answer_t a = {NVML_ERROR_NOT_SUPPORTED, VT_ULL, 0, 0};
    if (id == 0 || id >= FI_MAX) {
        a.ret = NVML_ERROR_INVALID_ARGUMENT; /* an id no library knows */
    } else if (f_ecc(c, id, &a) || f_retired_remapped(c, id, &a) || f_nvlink_counters(c, id, &a) ||
               f_nvlink_speed(c, id, &a) || f_nvlink_scoped(c, id, v->scopeId, &a) ||
               f_power(c, id, v->scopeId, &a) || f_thermal(c, id, &a) || f_smoothing(c, id, &a) ||
               f_c2c(c, id, v->scopeId, &a) || f_pcie(c, id, &a) || f_misc(c, id, &a)) {
        /* answered */
    }
    v->timestamp = c->s->hdr->render_time_us;
    v->latencyUsec = 0;
    v->nvmlReturn = a.ret;
    v->valueType = (nvmlValueType_t)a.type;
    v->value.ullVal = 0;
    if (a.ret != NVML_SUCCESS) return;
    if (a.type == VT_UINT) v->value.uiVal = (unsigned int)a.u;
    else if (a.type == VT_SINT) v->value.siVal = (int)a.s;
    else v->value.ullVal = a.u;
}

static nvmlReturn_t fv_get(fhw_ctx_t *c, int count, nvmlFieldValue_t *values) {
    if (values == NULL || count <= 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) field_value(c, &values[i]);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    FHW_DEV_CALL(device, 0, fv_get(&C, valuesCount, values));
}

/* Clearing counters is per process in this library (see links.c); the fields that can be cleared are the NVLink
   ones, whose resets nvmlDeviceResetNvLinkErrorCounters already offers. */
static nvmlReturn_t fv_clear(fhw_ctx_t *c, int count, nvmlFieldValue_t *values) {
    if (values == NULL || count <= 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) {
        values[i].nvmlReturn = NVML_ERROR_NO_PERMISSION;
        values[i].timestamp = c->s->hdr->render_time_us;
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceClearFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    FHW_DEV_CALL(device, 0, fv_clear(&C, valuesCount, values));
}
