/* Stream capture (a CUDA graph, as torch.cuda.graph makes one) on buffers pinwise
 * registered in place. Built at test time against the libcuda stand-in (a TEST FIXTURE),
 * which models capture: work on a capturing stream is recorded, not run; waiting for the
 * stream, or a "potentially unsafe" call (registering memory...) from a thread whose
 * capture mode prohibits it, invalidates the capture, and cuStreamEndCapture then fails.
 *
 * 1. Two pageable buffers are made hot with asynchronous round trips on a stream (pinwise
 *    registers them in place and, to keep pageable semantics, waits for the stream after
 *    each copy on them).
 * 2. A global-mode capture begins on that stream; both buffers are copied in it. Meanwhile
 *    another thread makes a buffer of its own hot on another stream (registered during
 *    the capture) and frees it (registration given back during the capture); the capturing
 *    thread, in relaxed mode, frees pinned allocations used on the capturing stream and
 *    allocates another. None of this may invalidate the capture.
 *    The capture also uploads a 2 MiB pinned allocation (cuMemAllocHost, made before it
 *    and never copied before: pinwise serves such a request pageable first, and must
 *    register it before the capture begins, since a captured copy needs page-locked memory).
 * 3. The graph is replayed three times with new contents; each replay must move them.
 * stdout carries what a run under pinwise must reproduce byte for byte; stderr the calls. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin_cuda.h"

enum { ROUNDS = 12 };
static const size_t N = 8 << 20;
static CUcontext ctx;
static CUdeviceptr dev, dev_side;
static CUstream side;
static unsigned long n_htod, n_dtoh;

static uint64_t fnv(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i += 7) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 31 + seed * 7) >> 3);
}

/* Runs on another thread while the main thread captures: a hot buffer of its own on a
 * stream that is not captured, then freed. */
static void *elsewhere(void *arg) {
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    unsigned char *b = malloc(N);
    uint64_t h = 0;
    for (int r = 0; r < ROUNDS; r++) {
        fill(b, N, 50 + r);
        CHECK(cuMemcpyHtoDAsync_v2(dev_side, b, N, side));
        __atomic_add_fetch(&n_htod, 1, __ATOMIC_RELAXED);
        memset(b, 0, N);
        CHECK(cuMemcpyDtoHAsync_v2(b, dev_side, N, side));
        __atomic_add_fetch(&n_dtoh, 1, __ATOMIC_RELAXED);
        h ^= fnv(b, N);
    }
    CHECK(cuStreamSynchronize(side));
    free(b);
    return (void *)(uintptr_t)(h & 0xffff);
}

int main(void) {
    CUstream s;
    ctx = standin_primary_context();
    CHECK(cuMemAlloc_v2(&dev, N));
    CHECK(cuMemAlloc_v2(&dev_side, N));
    CHECK(cuStreamCreate(&s, 0));        /* blocking, like the streams PyTorch captures on */
    CHECK(cuStreamCreate(&side, 1));     /* non-blocking */
    unsigned char *src = malloc(N), *dst = malloc(N);

    /* 1. Hot buffers: asynchronous round trips, relying on pageable semantics (the buffer
     *    is read, or written, when the call returns). */
    int same = 0;
    for (int r = 0; r < ROUNDS; r++) {
        fill(src, N, r);
        CHECK(cuMemcpyHtoDAsync_v2(dev, src, N, s));
        n_htod++;
        memset(dst, 0, N);
        CHECK(cuMemcpyDtoHAsync_v2(dst, dev, N, s));
        n_dtoh++;
        same += memcmp(src, dst, N) == 0;
    }
    printf("warm-up round trips intact: %d of %d\n", same, ROUNDS);

    /* Pinned allocations used on the stream: a small one (pinwise serves it from its pool,
     * and records an event on the stream when it is freed) and a large one (pinwise may
     * serve it pageable, and waits for the stream when it is freed). */
    void *small = NULL, *large = NULL;
    CHECK(cuMemAllocHost_v2(&small, 16 << 10));
    CHECK(cuMemAllocHost_v2(&large, 1 << 20));
    memset(small, 0x5a, 16 << 10);
    memset(large, 0xa5, 1 << 20);
    CHECK(cuMemcpyHtoDAsync_v2(dev, small, 16 << 10, s));
    n_htod++;
    CHECK(cuMemcpyHtoDAsync_v2(dev, large, 1 << 20, s));
    n_htod++;
    CHECK(cuStreamSynchronize(s));

    /* 2. The capture. */
    CUgraph graph = NULL;
    CUstreamCaptureStatus status = 99;
    fill(src, N, 40);
    memset(dst, 0xEE, N);
    const size_t M2 = 2 << 20;
    unsigned char *staged = NULL, *check = malloc(M2);
    CHECK(cuMemAllocHost_v2((void **)&staged, M2));
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuStreamIsCapturing(s, &status));
    printf("capturing: status %u\n", status);
    CHECK(cuMemcpyHtoDAsync_v2(dev, src, N, s));
    n_htod++;
    CHECK(cuMemcpyDtoHAsync_v2(dst, dev, N, s));
    n_dtoh++;
    CHECK(cuMemcpyHtoDAsync_v2(dev_side, staged, M2, s));
    n_htod++;
    pthread_t t;
    void *side_sum = NULL;
    pthread_create(&t, NULL, elsewhere, NULL);
    pthread_join(t, &side_sum);
    printf("other thread during the capture: %04lx\n", (unsigned long)(uintptr_t)side_sum);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CHECK(cuThreadExchangeStreamCaptureMode(&mode));
    CHECK(cuMemFreeHost(small));
    CHECK(cuMemFreeHost(large));
    CHECK(cuMemAllocHost_v2(&small, 16 << 10));
    CHECK(cuThreadExchangeStreamCaptureMode(&mode));
    printf("destination untouched during the capture: %d\n", dst[0] == 0xEE && dst[N - 1] == 0xEE);
    CUresult end = cuStreamEndCapture(s, &graph);
    const char *name = "?";
    cuGetErrorName(end, &name);
    printf("end of capture: %s\n", name);
    if (end != 0) return 3;

    /* 3. Replays: each moves the source as it is at launch. */
    CUgraphExec exec = NULL;
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    for (int r = 0; r < 3; r++) {
        fill(src, N, 100 + r);
        fill(staged, M2, 150 + r);
        memset(dst, 0, N);
        CHECK(cuGraphLaunch(exec, s));
        CHECK(cuStreamSynchronize(s));
        printf("replay %d: %016llx same %d\n", r, (unsigned long long)fnv(dst, N),
               memcmp(src, dst, N) == 0);
        CHECK(cuMemcpyDtoH_v2(check, dev_side, M2));
        n_dtoh++;
        printf("replay %d: staged same %d\n", r, memcmp(staged, check, M2) == 0);
    }
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));
    CHECK(cuMemFreeHost(small));
    CHECK(cuMemFreeHost(staged));
    free(check);
    free(src);
    free(dst);
    fprintf(stderr, "calls: htod=%lu dtoh=%lu captured=3\n", n_htod, n_dtoh);
    return 0;
}
