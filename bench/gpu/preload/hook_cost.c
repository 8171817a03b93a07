/* The cost pinwise-preload adds to an intercepted call: the same calls timed without and
 * with the library, by bench/gpu/preload/run.sh on the GPU machine (real driver) and by
 * `cargo bench -p pinwise-preload --bench hook_cost` against the CPU stand-in (a TEST
 * FIXTURE: its figures are not GPU figures). The difference of the two runs, per call, is
 * what the hooks cost.
 *
 * Calls (each timed in 7 repetitions of N calls; the median and the minimum ns per call):
 *   htod-0B            cuMemcpyHtoD_v2 of 0 bytes (the driver returns at once: the cleanest
 *                      view of the copy hook's own cost)
 *   htod-8B-pinned     cuMemcpyHtoD_v2 of 8 bytes from pinned memory (a real copy)
 *   htod-async-8B      cuMemcpyHtoDAsync_v2 of 8 bytes from pinned memory on a stream
 *                      (synchronized every 256 calls)
 *   pointer-attribute  cuPointerGetAttribute(MEMORY_TYPE) on pageable memory (a query hook)
 *   stream-is-capturing cuStreamIsCapturing on the stream (not hooked: the driver's own cost
 *                      of the question the copy hook asks before learning from an async copy)
 *   malloc-free-64B    malloc + free of 64 bytes (the free hook's fast path)
 * Output: `name<TAB>median_ns<TAB>min_ns<TAB>calls<TAB>cpu_median_ns`: wall-clock ns per call
 * (median and minimum of the 7 repetitions), and the calling thread's CPU time per call
 * (median; it leaves out time the thread was not running, which matters on a busy
 * machine). Linked with -lcuda; no CUDA headers needed (the declarations come from
 * fixtures/include/cuda_driver_min.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../../fixtures/include/cuda_driver_min.h"

static CUdeviceptr dev;
static void *pinned, *pageable;
static CUstream stream;
static volatile void *sink;
static long counter;

static double clock_ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void htod_0(void) { cuMemcpyHtoD_v2(dev, pageable, 0); }
static void htod_8(void) { cuMemcpyHtoD_v2(dev, pinned, 8); }
static void htod_async(void) {
    cuMemcpyHtoDAsync_v2(dev, pinned, 8, stream);
    if (++counter % 256 == 0) cuStreamSynchronize(stream);
}
static void attribute(void) {
    unsigned type;
    cuPointerGetAttribute(&type, 2, (CUdeviceptr)(uintptr_t)pageable);
}
static void is_capturing(void) {
    CUstreamCaptureStatus status;
    cuStreamIsCapturing(stream, &status);
}
static void malloc_free(void) {
    void *p = malloc(64);
    sink = p;
    free(p);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void measure(const char *name, void (*f)(void), long n) {
    double per[7], cpu[7];
    for (long i = 0; i < n / 10; i++) f(); /* warm up */
    for (int r = 0; r < 7; r++) {
        double t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        for (long i = 0; i < n; i++) f();
        cpu[r] = (clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / n;
        per[r] = (clock_ns(CLOCK_MONOTONIC) - t0) / n;
    }
    cuStreamSynchronize(stream);
    qsort(per, 7, sizeof per[0], cmp);
    qsort(cpu, 7, sizeof cpu[0], cmp);
    printf("%s\t%.1f\t%.1f\t%ld\t%.1f\n", name, per[3], per[0], n, cpu[3]);
    fflush(stdout);
}

int main(int argc, char **argv) {
    long scale = argc > 1 ? atol(argv[1]) : 1;
    int d;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&ctx, d) ||
        cuCtxSetCurrent(ctx) || cuMemAlloc_v2(&dev, 4096) || cuMemAllocHost_v2(&pinned, 4096) ||
        cuStreamCreate(&stream, 0)) {
        fprintf(stderr, "CUDA setup failed\n");
        return 2;
    }
    pageable = malloc(4096);
    memset(pageable, 1, 4096);
    measure("htod-0B", htod_0, 200000 * scale);
    measure("htod-8B-pinned", htod_8, 20000 * scale);
    measure("htod-async-8B", htod_async, 20000 * scale);
    measure("pointer-attribute", attribute, 200000 * scale);
    measure("stream-is-capturing", is_capturing, 200000 * scale);
    measure("malloc-free-64B", malloc_free, 1000000 * scale);
    return 0;
}
