/* Asynchronous downloads as CUDA 13 programs make them, for the redundant-transfer tests of
 * `pinwise trace` (crates/pinwise-cli/tests/trace_async_downloads.rs) and `pinwise run`
 * (async_downloads.rs): both must report the same. Built at test time against the libcuda
 * stand-in (a TEST FIXTURE), whose streams run on worker threads; async copies are delayed
 * by 5 ms, so each download is still in flight when its call returns. No pauses: the next
 * copy follows each completion at once, as in a training loop.
 *
 * Host buffers (cuMemAllocHost, 64 KiB each, in this order): S (the source), A, B, L.
 * Device buffers dA, dB, dL.
 *   Part 1, cuCtxSynchronize_v2 (CUDA 13's; cudart 13's cudaDeviceSynchronize calls it):
 *   three rounds; round 0: S -> dA, A <- dA async on the legacy stream (0),
 *   cuCtxSynchronize_v2(NULL); then S -> dB, B <- dB async on the legacy stream,
 *   cuCtxGetCurrent(&c) + cuCtxSynchronize_v2(c) (what cudart 13 does). Round 1: the two
 *   downloads again, without uploads (same bytes: redundant). Round 2: S changes, S -> dA,
 *   S -> dB, the two downloads again (new bytes). A and B: 3 downloads, 1 redundant each.
 *   Part 2, a loop: S -> dL once, then STEPS times L <- dL async on stream s followed by
 *   cuStreamSynchronize(s): every download the same bytes into the same buffer, the next
 *   one issued right after the previous completed. L: STEPS downloads, STEPS - 1
 *   redundant.
 *   S: 5 uploads (dA, dB twice, dL once), none redundant.
 * stdout carries a checksum of what came back, the same with or without pinwise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "standin_cuda.h"

#define K64 (64u << 10)
#define STEPS 12

static unsigned char *host_buffer(unsigned seed) {
    void *p;
    CHECK(cuMemAllocHost_v2(&p, K64));
    unsigned char *b = p;
    for (size_t i = 0; i < K64; i++) b[i] = (unsigned char)((i * 131 + seed) >> 3);
    return b;
}

static uint64_t fnv(const unsigned char *p, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

int main(void) {
    CUdevice d;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&d, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, d));
    CHECK(cuCtxSetCurrent(ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    unsigned char *src = host_buffer(1), *a = host_buffer(2), *b = host_buffer(3),
                  *l = host_buffer(4);
    CUdeviceptr dA, dB, dL;
    CHECK(cuMemAlloc_v2(&dA, K64));
    CHECK(cuMemAlloc_v2(&dB, K64));
    CHECK(cuMemAlloc_v2(&dL, K64));
    pinwise_standin_set_async_delay_us(5 * 1000);
    uint64_t h = 0xcbf29ce484222325ULL;

    for (int round = 0; round < 3; round++) {
        if (round == 2) src[7] ^= 0x5a;
        if (round != 1) CHECK(cuMemcpyHtoD_v2(dA, src, K64));
        CHECK(cuMemcpyDtoHAsync_v2(a, dA, K64, 0));
        CHECK(cuCtxSynchronize_v2(NULL));
        h = fnv(a, K64, h);
        if (round != 1) CHECK(cuMemcpyHtoD_v2(dB, src, K64));
        CHECK(cuMemcpyDtoHAsync_v2(b, dB, K64, 0));
        CUcontext current = NULL;
        CHECK(cuCtxGetCurrent(&current));
        CHECK(cuCtxSynchronize_v2(current));
        h = fnv(b, K64, h);
    }

    CHECK(cuMemcpyHtoD_v2(dL, src, K64));
    for (int step = 0; step < STEPS; step++) {
        CHECK(cuMemcpyDtoHAsync_v2(l, dL, K64, s));
        CHECK(cuStreamSynchronize(s));
        h = fnv(l, K64, h);
    }
    CHECK(cuStreamDestroy_v2(s));
    printf("checksum %016llx\n", (unsigned long long)h);
    return 0;
}
