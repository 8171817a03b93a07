/* The cost of fingerprinting copies (issue 17): the same host-to-device copies timed plain,
 * under `pinwise run --fingerprint off|sampled|full` and under `pinwise trace` with and
 * without `--fingerprint`, by bench/gpu/redundant/run.sh on the GPU machine. The difference
 * per copy between two runs is what fingerprinting adds there.
 *
 * Sizes 4 KiB, 1 MiB and 64 MiB, from pinned memory (cuMemAllocHost: the copy itself is as
 * steady as it gets) and from pageable memory (malloc), each copied REPS times (7
 * repetitions of N copies; the median and the minimum ns per copy). One byte of the source
 * changes before every copy, so no copy is redundant (the tracker's work is the same).
 * Output: `kind-size<TAB>median_ns<TAB>min_ns<TAB>copies<TAB>median_cpu_ns`, the last the
 * calling thread's CPU time per copy (CLOCK_THREAD_CPUTIME_ID: includes the uprobe and its
 * BPF program, which run in the thread, but not the time the thread waited for a CPU, so it
 * is steadier than the wall time on a loaded machine). Linked with -lcuda; declarations
 * from fixtures/include/cuda_driver_min.h. */
#include <string.h>
#include "cost_common.h"

static uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static void bench(const char *kind, unsigned char *src, CUdeviceptr dev, size_t size, int n) {
    uint64_t per[7], cpu[7];
    for (int r = 0; r < 7; r++) {
        uint64_t t0 = now_ns(), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < n; i++) {
            src[(size_t)i * 4099 % size] ^= 1;
            CHECK(cuMemcpyHtoD_v2(dev, src, size));
        }
        per[r] = (now_ns() - t0) / (uint64_t)n;
        cpu[r] = (clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / (uint64_t)n;
    }
    qsort(per, 7, sizeof per[0], cmp);
    qsort(cpu, 7, sizeof cpu[0], cmp);
    char name[64];
    snprintf(name, sizeof name, "%s-%zu", kind, size);
    printf("%s\t%llu\t%llu\t%d\t%llu\n", name, (unsigned long long)per[3],
           (unsigned long long)per[0], 7 * n, (unsigned long long)cpu[3]);
    fflush(stdout);
}

int main(int argc, char **argv) {
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    CUdevice d;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&d, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, d));
    CHECK(cuCtxSetCurrent(ctx));
    size_t sizes[3] = {4096, 1u << 20, 64u << 20};
    int reps[3] = {2000, 300, 10};
    CUdeviceptr dev;
    CHECK(cuMemAlloc_v2(&dev, 64u << 20));
    for (int k = 0; k < 3; k++) {
        int n = (int)(reps[k] * scale);
        if (n < 1) n = 1;
        void *pinned;
        CHECK(cuMemAllocHost_v2(&pinned, sizes[k]));
        memset(pinned, 7, sizes[k]);
        bench("pinned", pinned, dev, sizes[k], n);
        CHECK(cuMemFreeHost(pinned));
        unsigned char *pageable = malloc(sizes[k]);
        memset(pageable, 7, sizes[k]);
        bench("pageable", pageable, dev, sizes[k], n);
        free(pageable);
    }
    return 0;
}
