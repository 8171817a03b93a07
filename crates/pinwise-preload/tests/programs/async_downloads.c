/* Asynchronous downloads (cuMemcpyDtoHAsync) for the redundant-transfer tests of `pinwise
 * run` (async_downloads.rs): their bytes arrive when the stream gets to the copy, and pinwise
 * fingerprints them then, on its drain thread. Built at test time against the libcuda
 * stand-in (a TEST FIXTURE), whose streams run on worker threads.
 *
 * Host buffers (cuMemAllocHost, in this order): S (64 KiB), R (64 KiB), Q (64 KiB).
 *   S to dR; R <- dR async three times, each waited for and followed by a pause (the program
 *   computing): the second brings the same bytes as the first (redundant), then S changes
 *   and is sent to dR again, and the third brings new bytes: R downloads 3, 1 redundant.
 *   Q <- dR async while the stand-in delays async copies by 300 ms, and at once Q -> dQ on
 *   the same stream (a copy that touches Q before the download completed): that download
 *   gets no fingerprint (unknown, skipped); then Q <- dR async again, waited for: Q
 *   downloads fingerprinted 1, none redundant.
 * stdout carries a checksum of what came back, the same with or without pinwise.
 *
 * With the argument `release`: R <- dR async while the stand-in delays async copies, and the
 * primary context released at once, the download still queued (its events die with the
 * context: pinwise must give it up before, never query a dead event), then a pause. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "standin_cuda.h"

#define K64 (64u << 10)

static unsigned char *host(unsigned seed) {
    void *p;
    CHECK(cuMemAllocHost_v2(&p, K64));
    unsigned char *b = p;
    for (size_t i = 0; i < K64; i++) b[i] = (unsigned char)((i * 131 + seed) >> 3);
    return b;
}

int main(int argc, char **argv) {
    CUdevice d;
    CUstream s;
    standin_primary_context();
    CHECK(cuDeviceGet(&d, 0));
    CHECK(cuStreamCreate(&s, 0));
    unsigned char *src = host(1), *r = host(2), *q = host(3);
    CUdeviceptr dR, dQ;
    CHECK(cuMemAlloc_v2(&dR, K64));
    CHECK(cuMemAlloc_v2(&dQ, K64));
    uint64_t h = 0xcbf29ce484222325ULL;

    CHECK(cuMemcpyHtoD_v2(dR, src, K64));
    if (argc > 1 && strcmp(argv[1], "release") == 0) {
        pinwise_standin_set_async_delay_us(200 * 1000);
        CHECK(cuMemcpyDtoHAsync_v2(r, dR, K64, s));
        CHECK(cuDevicePrimaryCtxRelease(d));
        usleep(300 * 1000);
        printf("released\n");
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        if (i == 2) {
            src[5] ^= 0xff;
            CHECK(cuMemcpyHtoD_v2(dR, src, K64));
        }
        CHECK(cuMemcpyDtoHAsync_v2(r, dR, K64, s));
        CHECK(cuStreamSynchronize(s));
        h = fnv1a(r, K64, h);
        usleep(300 * 1000);
    }

    pinwise_standin_set_async_delay_us(300 * 1000);
    CHECK(cuMemcpyDtoHAsync_v2(q, dR, K64, s));
    CHECK(cuMemcpyHtoDAsync_v2(dQ, q, K64, s));
    CHECK(cuStreamSynchronize(s));
    pinwise_standin_set_async_delay_us(0);
    h = fnv1a(q, K64, h);
    usleep(300 * 1000);
    CHECK(cuMemcpyDtoHAsync_v2(q, dR, K64, s));
    CHECK(cuStreamSynchronize(s));
    h = fnv1a(q, K64, h);
    usleep(300 * 1000);

    printf("checksum %016llx\n", (unsigned long long)h);
    return 0;
}
