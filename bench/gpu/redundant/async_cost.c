/* The cost of fingerprinting asynchronous downloads (issue 17): `ROUNDS` rounds of `N`
 * iterations, each an asynchronous download of SIZE bytes (cuMemcpyDtoHAsync from device
 * memory into pinned memory) followed by cuStreamSynchronize of its stream; and, with SIZE
 * 0, cuStreamSynchronize of an idle stream alone (the cost of a sync call's probes with
 * nothing pending). Timed plain, under `pinwise run --fingerprint off|sampled|full` (the
 * preload's CUDA event per download, queried by its drain thread) and under `pinwise trace`
 * with and without `--fingerprint` (a sync call's probes, and the hash at its return), by
 * bench/gpu/redundant/async.sh on the GPU machine, and on the CPU stand-in for
 * bench/results/trace-fingerprint-cost.md (fixture figures, never GPU ones).
 * Usage: async_cost SIZE [N] [ROUNDS]. Output: `size<TAB>median_ns<TAB>min_ns<TAB>iterations
 * <TAB>median_cpu_ns` per iteration (CPU: the calling thread's, CLOCK_THREAD_CPUTIME_ID,
 * which includes uprobes and their BPF programs). One byte of the device buffer changes
 * before each round (a synchronous upload, outside the timed loop). */
#include "cost_common.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: async_cost SIZE [N] [ROUNDS]\n");
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0);
    int n = argc > 2 ? atoi(argv[2]) : 200;
    int rounds = argc > 3 ? atoi(argv[3]) : 7;
    if (n <= 0 || rounds <= 0 || rounds > 64) return 2;
    CUdevice d;
    CUcontext ctx;
    CUstream s;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&d, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, d));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&s, 0));
    size_t bytes = size ? size : 1;
    void *host;
    CHECK(cuMemAllocHost_v2(&host, bytes));
    CUdeviceptr dev;
    CHECK(cuMemAlloc_v2(&dev, bytes));
    unsigned char *h = host;
    for (size_t i = 0; i < bytes; i++) h[i] = (unsigned char)(i * 7);
    uint64_t wall[64], cpu[64];
    for (int r = 0; r < rounds; r++) {
        h[0] = (unsigned char)r;
        CHECK(cuMemcpyHtoD_v2(dev, host, bytes));
        uint64_t w0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < n; i++) {
            if (size) CHECK(cuMemcpyDtoHAsync_v2(host, dev, size, s));
            CHECK(cuStreamSynchronize(s));
        }
        wall[r] = (clock_ns(CLOCK_MONOTONIC) - w0) / (uint64_t)n;
        cpu[r] = (clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / (uint64_t)n;
    }
    uint64_t sorted[64];
    for (int r = 0; r < rounds; r++) sorted[r] = wall[r];
    qsort(sorted, rounds, sizeof(uint64_t), cmp);
    qsort(cpu, rounds, sizeof(uint64_t), cmp);
    printf("%zu\t%llu\t%llu\t%d\t%llu\n", size, (unsigned long long)sorted[rounds / 2],
           (unsigned long long)sorted[0], n * rounds, (unsigned long long)cpu[rounds / 2]);
    return 0;
}
