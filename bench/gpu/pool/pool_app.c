/* The program bench/gpu/pool/run_pool.sh runs under `pinwise run --pool` and without it:
 * one SIZE pinned staging buffer (cuMemAllocHost, as a framework's pinned allocator would
 * ask), ROUNDS passes of asynchronous uploads of the whole buffer (CHUNK at a time, one
 * stream) and downloads that rotate it by one chunk, and a checksum of the result, so that a
 * copy that did not happen, or happened out of order, changes the checksum.
 *
 *   pool_app SIZE_MIB CHUNK_MIB ROUNDS SEED [GO_FILE]
 *
 * With GO_FILE, it says "ready" on stderr once set up and waits (at most 120 s) until the
 * file exists, so that the script can measure memory with every process set up. With the
 * environment variable POOL_APP_PAUSE (a path), it says "paused" on stderr after the first
 * round and waits (at most 120 s) until that path exists. stdout: one
 * JSON line (checksum, GPU memory cuMemGetInfo says the pinned allocation took, times). Built
 * by run_pool.sh with gcc against the machine's libcuda (declarations:
 * fixtures/include/cuda_driver_min.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_driver_min.h"

CUresult cuMemGetInfo_v2(size_t *free, size_t *total);

#define CHECK(call)                                                                   \
    do {                                                                              \
        CUresult e_ = (call);                                                         \
        if (e_ != 0) {                                                                \
            const char *n_ = "?";                                                     \
            cuGetErrorName(e_, &n_);                                                  \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, n_); \
            exit(2);                                                                  \
        }                                                                             \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t hash(const uint64_t *p, size_t words) {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < words; i++) {
        h ^= p[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return h;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s SIZE_MIB CHUNK_MIB ROUNDS SEED [GO_FILE]\n", argv[0]);
        return 2;
    }
    size_t size = (size_t)atol(argv[1]) << 20, chunk = (size_t)atol(argv[2]) << 20;
    int rounds = atoi(argv[3]);
    uint64_t seed = (uint64_t)atoll(argv[4]);
    const char *go = argc > 5 ? argv[5] : NULL;
    if (chunk == 0 || size % chunk != 0) {
        fprintf(stderr, "SIZE must be a multiple of CHUNK\n");
        return 2;
    }
    size_t n = size / chunk;
    CUdevice d;
    CUcontext ctx;
    CUstream s;
    CUdeviceptr dev;
    uint64_t *host;
    size_t free0, free1, total;
    double t0 = now();
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&d, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, d));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemAlloc_v2(&dev, size));
    CHECK(cuMemGetInfo_v2(&free0, &total));
    double ta = now();
    CHECK(cuMemAllocHost_v2((void **)&host, size));
    double setup_alloc = now() - ta;
    CHECK(cuMemGetInfo_v2(&free1, &total));
    uint64_t x = seed * 0x2545f4914f6cdd1dULL + 1;
    for (size_t i = 0; i < size / 8; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        host[i] = x;
    }
    double setup = now() - t0;
    if (go) {
        fprintf(stderr, "ready\n");
        for (int i = 0; i < 12000 && access(go, F_OK) != 0; i++) usleep(10000);
    }
    double tc = now();
    unsigned char *h = (unsigned char *)host;
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < size / 8; i += 512) host[i] += (uint64_t)r + 1;
        for (size_t c = 0; c < n; c++) CHECK(cuMemcpyHtoDAsync_v2(dev + c * chunk, h + c * chunk, chunk, s));
        CHECK(cuStreamSynchronize(s));
        for (size_t c = 0; c < n; c++)
            CHECK(cuMemcpyDtoHAsync_v2(h + ((c + 1) % n) * chunk, dev + c * chunk, chunk, s));
        CHECK(cuStreamSynchronize(s));
        const char *pause = getenv("POOL_APP_PAUSE");
        if (r == 0 && pause) {
            fprintf(stderr, "paused\n");
            for (int i = 0; i < 12000 && access(pause, F_OK) != 0; i++) usleep(10000);
        }
    }
    double copy_s = now() - tc;
    uint64_t sum = hash(host, size / 8);
    CHECK(cuMemFreeHost(host));
    CHECK(cuMemFree_v2(dev));
    printf("{\"seed\": %llu, \"checksum\": \"%016llx\", \"size\": %zu, \"pinned_alloc_gpu_bytes\": %lld, "
           "\"alloc_s\": %.4f, \"setup_s\": %.4f, \"copy_s\": %.4f, \"copy_gbps\": %.3f}\n",
           (unsigned long long)seed, (unsigned long long)sum, size, (long long)free0 - (long long)free1,
           setup_alloc, setup, copy_s, copy_s > 0 ? 2.0 * rounds * size / copy_s / 1e9 : 0.0);
    return 0;
}
