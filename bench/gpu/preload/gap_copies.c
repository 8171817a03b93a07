/*
 * gap_copies.c: N synchronous host-to-device copies of one 64 KiB host buffer (or of NBUF
 * such buffers in turn), with GAP_US microseconds of sleep between them, to see whether
 * pinwise's bookkeeping per copy (`hook_ns_net_median` in `pinwise run --stats-json`) grows
 * when copies are far apart (issue 10: 150-300 ns in copy-dense programs, 1-2 us in sparse
 * ones), and with the number of buffers pinwise registered (NBUF pageable buffers).
 * EVICT_KIB: before each copy, write one byte every STRIDE bytes (default 64: each cache
 * line; 4096: each page, which empties the TLB more than the caches) of a scratch buffer
 * that size: the program's own work pushing pinwise's lines or pages out, without a sleep.
 * KIND pinned_async: pinned buffers copied with cuMemcpyHtoDAsync on a stream of its own
 * (each copy then waited for), as CuPy's and JAX's copies are: the hook's stream bookkeeping.
 *   gap_copies pinned|pinned_async|pageable GAP_US N [NBUF [EVICT_KIB [STRIDE]]]
 * Driver API only (fixtures/include/cuda_driver_min.h). Run by gap.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuda_driver_min.h"

#define CHECK(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "%s: %d\n", #x, (int)r_); exit(2); } } while (0)

int main(int argc, char **argv) {
    if (argc < 4 || argc > 7) {
        fprintf(stderr, "usage: gap_copies pinned|pinned_async|pageable GAP_US N [NBUF [EVICT_KIB [STRIDE]]]\n");
        return 2;
    }
    int async = strcmp(argv[1], "pinned_async") == 0;
    int pinned = async || strcmp(argv[1], "pinned") == 0;
    long gap_us = atol(argv[2]), n = atol(argv[3]);
    long nbuf = argc >= 5 ? atol(argv[4]) : 1;
    size_t evict = argc >= 6 ? (size_t)atol(argv[5]) << 10 : 0;
    volatile unsigned char *scratch = evict ? calloc(1, evict) : NULL;
    if (evict && !scratch) return 2;
    size_t stride = argc >= 7 ? (size_t)atol(argv[6]) : 64;
    if (stride < 1) return 2;
    if (nbuf < 1 || nbuf > 4096) { fprintf(stderr, "NBUF: 1 to 4096\n"); return 2; }
    size_t size = 64 << 10;
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    void **bufs = calloc(nbuf, sizeof *bufs);
    for (long b = 0; b < nbuf; b++) {
        if (pinned) CHECK(cuMemAllocHost(&bufs[b], size));
        else {
            bufs[b] = malloc(size);
            /* A block between buffers (kept): no two share a page, so pinwise registers
             * each on its own instead of merging neighbours into one registration. */
            if (nbuf > 1 && !malloc(8192)) return 2;
        }
        memset(bufs[b], 5, size);
    }
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, size));
    CUstream stream = NULL;
    if (async) CHECK(cuStreamCreate(&stream, 0));
    struct timespec gap = { gap_us / 1000000, (gap_us % 1000000) * 1000 };
    for (long i = 0; i < n; i++) {
        for (size_t j = 0; j < evict; j += stride) scratch[j]++;
        if (async) {
            CHECK(cuMemcpyHtoDAsync(d, bufs[i % nbuf], size, stream));
            CHECK(cuStreamSynchronize(stream));
        } else {
            CHECK(cuMemcpyHtoD(d, bufs[i % nbuf], size));
        }
        if (gap_us) nanosleep(&gap, NULL);
    }
    unsigned char back[16];
    CHECK(cuMemcpyDtoH(back, d, sizeof back));
    printf("checksum %u\n", back[0] + back[15]);
    return 0;
}
