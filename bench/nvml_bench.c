/*
 * ns per call of hot NVML getters of the fake library, 1 and 2 threads (run by bench_nvml_c.py, which builds
 * this against the shim's sources at -O2 and hands it a snapshot).
 */
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t *);
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned int, unsigned int *);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t, unsigned int, unsigned int *);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);

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

static void *run(void *arg) {
    job_t *job = arg;
    nvmlDevice_t dev;
    if (nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS) abort();
    nvmlMemory_t mem;
    nvmlPciInfo_t pci;
    unsigned int u;
    volatile unsigned long long sink = 0;
    double start = now_ns();
    for (long i = 0; i < job->iterations; i++) {
        nvmlReturn_t r;
        switch (job->which) {
        case 0: r = nvmlDeviceGetMemoryInfo(dev, &mem); sink += mem.total; break;
        case 1: r = nvmlDeviceGetPciInfo_v3(dev, &pci); sink += pci.bus; break;
        case 2: r = nvmlDeviceGetNvLinkState(dev, (unsigned int)(i % 18), &u); sink += u; break;
        default: r = nvmlDeviceGetTemperature(dev, 0, &u); sink += u; break;
        }
        if (r != NVML_SUCCESS) abort();
    }
    job->ns = (now_ns() - start) / (double)job->iterations;
    (void)sink;
    return NULL;
}

int main(int argc, char **argv) {
    long iterations = argc > 1 ? atol(argv[1]) : 2000000;
    if (nvmlInit_v2() != NVML_SUCCESS) {
        fprintf(stderr, "nvmlInit failed: is FAKEHW_NVML_SNAPSHOT set?\n");
        return 1;
    }
    static const char *names[] = {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetNvLinkState",
                                  "nvmlDeviceGetTemperature"};
    for (int which = 0; which < 4; which++) {
        job_t one = {which, iterations, 0};
        run(&one);
        job_t two[2] = {{which, iterations, 0}, {which, iterations, 0}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, run, &two[i]);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        printf("%-28s %8.1f ns/call (1 thread)   %8.1f ns/call per thread (2 threads)\n", names[which], one.ns,
               (two[0].ns + two[1].ns) / 2);
    }
    return 0;
}
