/* A program with its "runtime" linked in, as with a static cudart: cudaMallocHost and
 * cudaFreeHost are functions of the executable that call the driver (the libcuda stand-in,
 * a TEST FIXTURE). Two call sites allocate: under pinwise, the history must name those two
 * sites, not the one place inside the runtime that calls the driver. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin_cuda.h"

/* The "static runtime". */
__attribute__((noinline)) int cudaMallocHost(void **p, size_t n) {
    static int ready;
    if (!ready) {
        int d;
        CUcontext c;
        if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) ||
            cuCtxSetCurrent(c))
            return 3;
        ready = 1;
    }
    return cuMemAllocHost_v2(p, n);
}

__attribute__((noinline)) int cudaFreeHost(void *p) { return cuMemFreeHost(p); }

__attribute__((noinline)) static void *site_one(void) {
    void *p;
    if (cudaMallocHost(&p, 1 << 20)) exit(2);
    return p;
}

__attribute__((noinline)) static void *site_two(void) {
    void *p;
    if (cudaMallocHost(&p, 1 << 20)) exit(2);
    return p;
}

int main(void) {
    for (int i = 0; i < 3; i++) {
        void *a = site_one(), *b = site_two();
        memset(a, i, 1 << 20);
        memset(b, i, 1 << 20);
        if (cudaFreeHost(a) || cudaFreeHost(b)) return 2;
    }
    printf("done\n");
    fprintf(stderr, "calls: alloc=6 free=6 sites=2\n");
    return 0;
}
