/* A CUDA driver API program for pinwise-preload's tests of peak pinned memory: patterns of
 * frameworks that pin memory themselves, each chosen by argv[1]. Built at test time against
 * the libcuda stand-in (a TEST FIXTURE) with the declarations of
 * fixtures/include/cuda_driver_min.h.
 *
 * - `pool`: a CuPy-like pinned memory pool: one 16 MiB cuMemHostAlloc staging buffer used
 *   for every round trip, beside an 8 MiB pageable buffer uploaded and an 8 MiB pageable
 *   buffer downloaded into, 40 times each (hot pageable buffers next to the program's own
 *   pinned memory).
 * - `mixed`: a PyTorch-like loop (bench/gpu/frameworks/torch_mixed.py, smaller): 8 pinned
 *   and 8 pageable 4 MiB buffers uploaded round robin (asynchronously) for 200 steps, plus
 *   four cold 16 MiB pinned buffers uploaded and downloaded every 100 steps.
 * - `cold`: torch_mixed's shape at its sizes: 8 pinned and 8 pageable 4 MiB buffers uploaded
 *   round robin (asynchronously) for 200 steps of 20 ms (a step's compute, slept), plus four
 *   cold 64 MiB pinned buffers (offloaded state) uploaded and downloaded every 100 steps.
 *   Pinned requests served pageable first must end with the hot ones registered once each
 *   and the cold ones pageable (pinwise_core::decide::earn).
 * - `regrow`: the program frees a 32 MiB pinned buffer and then asks for a 48 MiB one
 *   (plain CUDA holds 48 MiB at most; a pool that keeps the freed one holds 80).
 * - `register`: the program registers its own 16 MiB buffer (cuMemHostRegister) and uploads
 *   from it, beside an 8 MiB pageable buffer uploaded 40 times.
 * - `hot`: the program pins nothing of note (one page for a scalar, as PyTorch does); an
 *   8 MiB pageable buffer is uploaded 40 times (pinwise may register it in place, within
 *   its budget).
 * - `late`: as `hot`, then the program asks for a 16 MiB pinned buffer and goes on with both
 *   (what pinwise pinned while the program pinned nothing must make way).
 *
 * stdout: `sum HASH` (what a run under pinwise must reproduce), then `pinned_peak BYTES`:
 * the most host bytes page-locked at once in the process, as the stand-in counted them
 * (`pinwise_standin_pinned_bytes`: whole pages of every cuMemHostAlloc and
 * cuMemHostRegister region, whoever asked). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "standin_cuda.h"

#define MIB ((size_t)1 << 20)

static CUdeviceptr dev;
static uint64_t hash = 0xcbf29ce484222325ULL;

static void mix(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i += 4093) hash = (hash ^ p[i]) * 0x100000001b3ULL;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i += 512) p[i] = (unsigned char)(i * 7 + seed);
}

static void *pinned(size_t n) {
    void *p;
    CHECK(cuMemHostAlloc(&p, n, 0));
    fill(p, n, 1);
    return p;
}

static unsigned char *pageable(size_t n) {
    unsigned char *p = malloc(n);
    if (!p) exit(2);
    fill(p, n, 2);
    return p;
}

static void round_trip(unsigned char *up, unsigned char *down, size_t n, int i) {
    up[i] ^= 1;
    CHECK(cuMemcpyHtoD_v2(dev, up, n));
    CHECK(cuMemcpyDtoH_v2(down, dev, n));
    mix(down, n);
}

static void pool(void) {
    unsigned char *staging = pinned(16 * MIB);
    unsigned char *in = pageable(8 * MIB), *out = pageable(8 * MIB);
    for (int i = 0; i < 40; i++) {
        round_trip(staging, staging, 16 * MIB, i);
        round_trip(in, out, 8 * MIB, i);
    }
    CHECK(cuMemFreeHost(staging));
    free(in);
    free(out);
}

static void mixed(void) {
    unsigned char *pin[8], *pag[8], *cold[4];
    for (int k = 0; k < 8; k++) pin[k] = pinned(4 * MIB);
    for (int k = 0; k < 8; k++) pag[k] = pageable(4 * MIB);
    for (int k = 0; k < 4; k++) cold[k] = pinned(16 * MIB);
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    for (int step = 0; step < 200; step++) {
        CHECK(cuMemcpyHtoDAsync_v2(dev, pin[step % 8], 4 * MIB, s));
        CHECK(cuMemcpyHtoDAsync_v2(dev + 4 * MIB, pag[step % 8], 4 * MIB, s));
        CHECK(cuStreamSynchronize(s));
        if (step % 100 == 99) {
            for (int k = 0; k < 4; k++) {
                cold[k][step] ^= 1;
                CHECK(cuMemcpyHtoDAsync_v2(dev, cold[k], 16 * MIB, s));
                CHECK(cuMemcpyDtoHAsync_v2(cold[k], dev, 16 * MIB, s));
            }
            CHECK(cuStreamSynchronize(s));
            for (int k = 0; k < 4; k++) mix(cold[k], 16 * MIB);
        }
    }
    CHECK(cuStreamDestroy_v2(s));
    for (int k = 0; k < 8; k++) {
        mix(pin[k], 4 * MIB);
        CHECK(cuMemFreeHost(pin[k]));
        free(pag[k]);
    }
    for (int k = 0; k < 4; k++) CHECK(cuMemFreeHost(cold[k]));
}

static void cold(void) {
    unsigned char *pin[8], *pag[8], *off[4];
    for (int k = 0; k < 8; k++) pin[k] = pinned(4 * MIB);
    for (int k = 0; k < 8; k++) pag[k] = pageable(4 * MIB);
    for (int k = 0; k < 4; k++) off[k] = pinned(64 * MIB);
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    struct timespec compute = {0, 20 * 1000 * 1000};
    for (int step = 0; step < 200; step++) {
        pin[step % 8][step] ^= 1;
        pag[step % 8][step] ^= 1;
        CHECK(cuMemcpyHtoDAsync_v2(dev, pin[step % 8], 4 * MIB, s));
        CHECK(cuMemcpyHtoDAsync_v2(dev + 4 * MIB, pag[step % 8], 4 * MIB, s));
        CHECK(cuMemcpyDtoHAsync_v2(pin[(step + 1) % 8], dev + 4 * MIB, 4096, s));
        CHECK(cuStreamSynchronize(s));
        mix(pin[(step + 1) % 8], 4096);
        nanosleep(&compute, NULL);
        if (step % 100 == 99) {
            for (int k = 0; k < 4; k++) {
                off[k][step] ^= 1;
                CHECK(cuMemcpyHtoDAsync_v2(dev + 8 * MIB, off[k], 64 * MIB, s));
                CHECK(cuMemcpyDtoHAsync_v2(off[k], dev + 8 * MIB, 64 * MIB, s));
            }
            CHECK(cuStreamSynchronize(s));
            for (int k = 0; k < 4; k++) mix(off[k], 64 * MIB);
        }
    }
    CHECK(cuStreamDestroy_v2(s));
    for (int k = 0; k < 8; k++) {
        mix(pin[k], 4 * MIB);
        CHECK(cuMemFreeHost(pin[k]));
        free(pag[k]);
    }
    for (int k = 0; k < 4; k++) CHECK(cuMemFreeHost(off[k]));
}

static void regrow(void) {
    unsigned char *a = pinned(32 * MIB);
    for (int i = 0; i < 4; i++) round_trip(a, a, 32 * MIB, i);
    CHECK(cuMemFreeHost(a));
    unsigned char *b = pinned(48 * MIB);
    for (int i = 0; i < 4; i++) round_trip(b, b, 48 * MIB, i);
    CHECK(cuMemFreeHost(b));
}

static void registered(void) {
    unsigned char *own = pageable(16 * MIB + 4096);
    unsigned char *page = (unsigned char *)(((uintptr_t)own + 4095) & ~(uintptr_t)4095);
    CHECK(cuMemHostRegister_v2(page, 16 * MIB, 0));
    unsigned char *in = pageable(8 * MIB);
    for (int i = 0; i < 40; i++) {
        round_trip(page, page, 16 * MIB, i);
        round_trip(in, in, 8 * MIB, i);
    }
    CHECK(cuMemHostUnregister(page));
    free(own);
    free(in);
}

static void hot(void) {
    unsigned char *scalar = pinned(8);
    unsigned char *in = pageable(8 * MIB);
    for (int i = 0; i < 40; i++) {
        round_trip(in, in, 8 * MIB, i);
        CHECK(cuMemcpyDtoH_v2(scalar, dev, 8));
        mix(scalar, 8);
    }
    free(in);
    CHECK(cuMemFreeHost(scalar));
}

static void late(void) {
    unsigned char *in = pageable(8 * MIB);
    for (int i = 0; i < 40; i++) round_trip(in, in, 8 * MIB, i);
    unsigned char *staging = pinned(16 * MIB);
    for (int i = 0; i < 20; i++) {
        round_trip(staging, staging, 16 * MIB, i);
        round_trip(in, in, 8 * MIB, i);
    }
    CHECK(cuMemFreeHost(staging));
    free(in);
}

int main(int argc, char **argv) {
    const char *pattern = argc > 1 ? argv[1] : "";
    standin_primary_context();
    CHECK(cuMemAlloc_v2(&dev, 128 * MIB));
    if (!strcmp(pattern, "pool")) pool();
    else if (!strcmp(pattern, "mixed")) mixed();
    else if (!strcmp(pattern, "cold")) cold();
    else if (!strcmp(pattern, "regrow")) regrow();
    else if (!strcmp(pattern, "register")) registered();
    else if (!strcmp(pattern, "hot")) hot();
    else if (!strcmp(pattern, "late")) late();
    else {
        fprintf(stderr, "usage: peak_pinned pool|mixed|cold|regrow|register|hot|late\n");
        return 2;
    }
    CHECK(cuMemFree_v2(dev));
    printf("sum %016llx\n", (unsigned long long)hash);
    CUresult (*locked)(uint64_t *, uint64_t *) =
        (CUresult(*)(uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "pinwise_standin_pinned_bytes");
    uint64_t now = 0, peak = 0;
    if (!locked || locked(&now, &peak)) {
        fprintf(stderr, "the libcuda stand-in does not count pinned bytes\n");
        return 2;
    }
    printf("pinned_peak %llu\n", (unsigned long long)peak);
    return 0;
}
