/*
 * pin_then_copy.c: pins 4 MiB with cuMemAllocHost, maps 2 MiB of pageable memory and 1 MiB
 * of shared anonymous memory (how driver 580 maps pinned memory; here not pinned), says
 * `ready PINNED EARLY` on stdout (and, on stderr, the /proc/self/maps lines of the first
 * two), waits for a line on stdin (a tracer attaches meanwhile: `pinwise trace --pid`), then
 * copies: 20 HtoD and 5 DtoH of the pinned buffer, 10 HtoD of the early pageable one, 5 HtoD
 * of the shared one and, unless its argument is `early-only`, 30 HtoD of 8 MiB mapped after
 * the attach.
 *
 * Built by crates/pinwise-cli/tests/trace_attach.rs against pinwise's CPU stand-in for
 * libcuda (a test fixture) and by bench/gpu/trace/attach_malloc.sh against the real driver
 * (driver API only; the declarations come from fixtures/include/cuda_driver_min.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "cuda_driver_min.h"

#define CHECK(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "%s: %d\n", #x, (int)r_); exit(2); } } while (0)
#define MIB ((size_t)1 << 20)

/* Prints to stderr the /proc/self/maps line holding `p`: on the GPU machine, how the
 * driver maps pinned memory (pinwise expects `rw-s ... /dev/nvidiactl`). */
static void show_mapping(const char *what, const void *p) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long a = (unsigned long)p, lo, hi;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi)
            fprintf(stderr, "%s %#lx in: %s", what, a, line);
    if (f) fclose(f);
}

static char *map_touched(int flags, size_t n) {
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) exit(4);
    memset(p, 7, n);
    return p;
}

int main(int argc, char **argv) {
    int late_copies = !(argc > 1 && strcmp(argv[1], "early-only") == 0);
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    void *pinned;
    CHECK(cuMemAllocHost(&pinned, 4 * MIB));
    memset(pinned, 1, 4 * MIB);
    char *early = map_touched(MAP_PRIVATE, 2 * MIB);
    char *shared = map_touched(MAP_SHARED, 1 * MIB);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 8 * MIB));
    show_mapping("pinned", pinned);
    show_mapping("early", early);
    printf("ready %lu %lu\n", (unsigned long)pinned, (unsigned long)early);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
    for (int i = 0; i < 20; i++) CHECK(cuMemcpyHtoD(d, pinned, 4 * MIB));
    for (int i = 0; i < 5; i++) CHECK(cuMemcpyDtoH(pinned, d, 4 * MIB));
    for (int i = 0; i < 10; i++) CHECK(cuMemcpyHtoD(d, early, 2 * MIB));
    for (int i = 0; i < 5; i++) CHECK(cuMemcpyHtoD(d, shared, 1 * MIB));
    if (late_copies) {
        char *late = map_touched(MAP_PRIVATE, 8 * MIB);
        for (int i = 0; i < 30; i++) CHECK(cuMemcpyHtoD(d, late, 8 * MIB));
    }
    CHECK(cuMemFree(d));
    return 0;
}
