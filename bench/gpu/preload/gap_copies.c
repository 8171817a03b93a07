/*
 * gap_copies.c: N synchronous host-to-device copies of one 64 KiB host buffer, with GAP_US
 * microseconds of sleep between them, to see whether pinwise's bookkeeping per copy
 * (`hook_ns_net_median` in `pinwise run --stats-json`) grows when copies are far apart
 * (issue 10: 150-300 ns in copy-dense programs, 1-2 us in sparse ones).
 *   gap_copies pinned|pageable GAP_US N
 * Driver API only (fixtures/include/cuda_driver_min.h). Run by gap.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuda_driver_min.h"

#define CHECK(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "%s: %d\n", #x, (int)r_); exit(2); } } while (0)

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: gap_copies pinned|pageable GAP_US N\n"); return 2; }
    int pinned = strcmp(argv[1], "pinned") == 0;
    long gap_us = atol(argv[2]), n = atol(argv[3]);
    size_t size = 64 << 10;
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    void *host;
    if (pinned) CHECK(cuMemAllocHost(&host, size));
    else host = malloc(size);
    memset(host, 5, size);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, size));
    struct timespec gap = { gap_us / 1000000, (gap_us % 1000000) * 1000 };
    for (long i = 0; i < n; i++) {
        CHECK(cuMemcpyHtoD(d, host, size));
        if (gap_us) nanosleep(&gap, NULL);
    }
    unsigned char back[16];
    CHECK(cuMemcpyDtoH(back, d, sizeof back));
    printf("checksum %u\n", back[0] + back[15]);
    return 0;
}
