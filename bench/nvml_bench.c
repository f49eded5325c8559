/*
 * The shipped fake libnvidia-ml.so.1 timed from C (run by bench_nvml_c.py, which links this against the
 * library the package installs and against libfhwnoop.so, a no-op in another shared object).
 *
 *   nvml_bench getters ITERATIONS   ns per call of hot getters, 1 and 2 threads, and the same call shape into
 *                                   the no-op (the floor any call into a shared library pays)
 *   nvml_bench init ROUNDS          ms per nvmlInit_v2 + nvmlShutdown on $FAKEHW_NVML_SNAPSHOT: best,
 *                                   median and mean of ROUNDS
 */
#include "nvml_abi.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t *);
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned int, unsigned int *);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t, unsigned int, unsigned int *);
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t, nvmlTemperature_v1_t *);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t, unsigned int *);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t, unsigned int, unsigned int *);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t, nvmlUtilization_t *);
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t, nvmlGpuFabricInfo_v3_t *);
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t, int, nvmlFieldValue_t *);
int fhw_noop(void *device, void *out, unsigned int arg);

enum { NOOP, MEMORY, PCI, NVLINK, TEMPERATURE, TEMPERATURE_V, POWER, CLOCK, UTILIZATION, FABRIC, FIELD, CASES };
static const char *NAMES[CASES] = {"no-op in another .so (floor)", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPciInfo_v3",
                                   "nvmlDeviceGetNvLinkState", "nvmlDeviceGetTemperature",
                                   "nvmlDeviceGetTemperatureV", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetClockInfo",
                                   "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetGpuFabricInfoV",
                                   "nvmlDeviceGetFieldValues (1)"};

typedef struct {
    int which;
    long iterations;
    double ns;
} job_t;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One call of case `which`; returns a value to sink so the compiler keeps the call and its reads. */
static unsigned long long call(int which, nvmlDevice_t dev, long i) {
    nvmlMemory_t mem;
    nvmlPciInfo_t pci;
    nvmlUtilization_t util;
    nvmlTemperature_v1_t temp = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
    nvmlGpuFabricInfo_v3_t fabric = {.version = nvmlGpuFabricInfo_v3};
    nvmlFieldValue_t field = {.fieldId = NVML_FI_DEV_MEMORY_TEMP};
    unsigned int u = 0;
    nvmlReturn_t r;
    switch (which) {
    case NOOP: r = (nvmlReturn_t)fhw_noop(dev, &u, 0); return u + (unsigned)r;
    case MEMORY: r = nvmlDeviceGetMemoryInfo(dev, &mem); u = (unsigned)mem.total; break;
    case PCI: r = nvmlDeviceGetPciInfo_v3(dev, &pci); u = pci.bus; break;
    case NVLINK: r = nvmlDeviceGetNvLinkState(dev, (unsigned int)(i % 18), &u); break;
    case TEMPERATURE: r = nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &u); break;
    case TEMPERATURE_V: r = nvmlDeviceGetTemperatureV(dev, &temp); u = (unsigned)temp.temperature; break;
    case POWER: r = nvmlDeviceGetPowerUsage(dev, &u); break;
    case CLOCK: r = nvmlDeviceGetClockInfo(dev, NVML_CLOCK_SM, &u); break;
    case UTILIZATION: r = nvmlDeviceGetUtilizationRates(dev, &util); u = util.gpu; break;
    case FABRIC: r = nvmlDeviceGetGpuFabricInfoV(dev, &fabric); u = fabric.state; break;
    default: r = nvmlDeviceGetFieldValues(dev, 1, &field); u = field.value.uiVal; break;
    }
    if (r != NVML_SUCCESS) {
        fprintf(stderr, "%s returned %d\n", NAMES[which], (int)r);
        exit(1);
    }
    return u;
}

static void *run(void *arg) {
    job_t *job = arg;
    nvmlDevice_t dev;
    if (nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS) abort();
    volatile unsigned long long sink = 0;
    double start = now_ns();
    for (long i = 0; i < job->iterations; i++) sink += call(job->which, dev, i);
    job->ns = (now_ns() - start) / (double)job->iterations;
    (void)sink;
    return NULL;
}

/* Best of three runs: the machine is shared, the minimum is the least disturbed. */
static double best_of(int which, long iterations, int threads) {
    double best = 1e18;
    for (int round = 0; round < 3; round++) {
        job_t jobs[2] = {{which, iterations, 0}, {which, iterations, 0}};
        pthread_t t[2];
        for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, &jobs[i]);
        for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
        double ns = threads == 1 ? jobs[0].ns : (jobs[0].ns + jobs[1].ns) / 2;
        if (ns < best) best = ns;
    }
    return best;
}

static int getters(long iterations) {
    if (nvmlInit_v2() != NVML_SUCCESS) {
        fprintf(stderr, "nvmlInit failed: is FAKEHW_NVML_SNAPSHOT set?\n");
        return 1;
    }
    double floor1 = best_of(NOOP, iterations, 1), floor2 = best_of(NOOP, iterations, 2);
    printf("  %-32s %9s %9s %12s\n", "call", "1 thread", "2 threads", "x floor (1t)");
    for (int which = 0; which < CASES; which++) {
        double one = which == NOOP ? floor1 : best_of(which, iterations, 1);
        double two = which == NOOP ? floor2 : best_of(which, iterations, 2);
        printf("  %-32s %7.1fns %7.1fns %11.2fx\n", NAMES[which], one, two, one / floor1);
    }
    return nvmlShutdown() == NVML_SUCCESS ? 0 : 1;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int init(long rounds) {
    double *took = calloc((size_t)(rounds > 0 ? rounds : 1), sizeof *took);
    double total = 0;
    if (took == NULL || rounds <= 0) return 2;
    for (long i = 0; i < rounds; i++) {
        double start = now_ns();
        if (nvmlInit_v2() != NVML_SUCCESS) {
            fprintf(stderr, "nvmlInit failed: is FAKEHW_NVML_SNAPSHOT set?\n");
            free(took);
            return 1;
        }
        took[i] = now_ns() - start;
        nvmlShutdown();
        total += took[i];
    }
    qsort(took, (size_t)rounds, sizeof *took, by_value);
    printf("%.3f %.3f %.3f\n", took[0] / 1e6, took[rounds / 2] / 1e6, total / (double)rounds / 1e6);
    free(took);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s getters ITERATIONS | init ROUNDS\n", argv[0]);
        return 2;
    }
    long n = atol(argv[2]);
    if (strcmp(argv[1], "getters") == 0) return getters(n);
    if (strcmp(argv[1], "init") == 0) return init(n);
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
