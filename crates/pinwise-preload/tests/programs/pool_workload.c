/* A CUDA driver API program for `pinwise run --pool` tests (linked with -lcuda), built at
 * test time against the libcuda stand-in (a TEST FIXTURE). Two 16 MiB pinned buffers (big
 * enough for the pool), one 1 MiB pinned buffer (too small for it), synchronous and
 * asynchronous copies between them and device memory, at offsets; stdout carries only the
 * checksums, which a run under pinwise must reproduce byte for byte.
 *
 * POOL_QUERY (set): a cuMemHostGetFlags about the second big buffer, its answer printed.
 *
 * POOL_READY and POOL_GO (paths, optional): after round 2 the program creates POOL_READY
 * and waits (at most 30 s) until POOL_GO exists, so that a test can stop the pool service
 * in the middle of the run.
 *
 * POOL_FORK_HOLD (a path, optional): once the buffers exist (and the pool connection with
 * them), the program forks a child that outlives it: the child lets go of stdout and
 * stderr and waits (at most 30 s) until the path exists.
 *
 * POOL_GATE (a path, with the stand-in's PINWISE_STANDIN_REGISTER_GATE=<path>:16777216; build
 * with -lpthread): before the rounds, a second thread asks cuMemHostGetFlags about the
 * second big buffer (under pinwise: registered there first, and the stand-in holds that
 * registration until <path> exists); once it is held (or the query answered), this thread
 * copies the first big buffer up and down, then opens the gate. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "standin_cuda.h"

#define BIG (16u << 20)
#define SMALL (1u << 20)
#define ROUNDS 5

static uint64_t fnv(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 31 + seed * 7) ^ (i >> 11));
}

static void wait_for_go(void) {
    const char *ready = getenv("POOL_READY"), *go = getenv("POOL_GO");
    if (!ready || !go) return;
    FILE *f = fopen(ready, "w");
    if (f) fclose(f);
    for (int i = 0; i < 3000 && access(go, F_OK) != 0; i++) usleep(10000);
}

struct query {
    CUcontext ctx;
    unsigned char *p;
    unsigned int flags;
    volatile int done;
};

static void *query_flags(void *arg) {
    struct query *q = arg;
    CHECK(cuCtxSetCurrent(q->ctx));
    CHECK(cuMemHostGetFlags(&q->flags, q->p));
    __atomic_store_n(&q->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* POOL_GATE: a copy on one pool buffer while another's registration is held open. */
static void gated(CUcontext ctx, CUdeviceptr dev, unsigned char *a, unsigned char *b) {
    const char *gate = getenv("POOL_GATE");
    char waiting[4096];
    snprintf(waiting, sizeof waiting, "%s.waiting", gate);
    unlink(gate);
    unlink(waiting);
    struct query q = {ctx, b + 4096, 99, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, query_flags, &q) != 0) exit(2);
    for (int i = 0; i < 3000 && access(waiting, F_OK) != 0 &&
                    !__atomic_load_n(&q.done, __ATOMIC_ACQUIRE);
         i++)
        usleep(10000);
    fill(a, BIG, 77);
    CHECK(cuMemcpyHtoD_v2(dev, a, BIG));
    memset(a, 0, BIG);
    CHECK(cuMemcpyDtoH_v2(a, dev, BIG));
    printf("gated copy %016llx\n", (unsigned long long)fnv(a, BIG));
    FILE *f = fopen(gate, "w");
    if (f) fclose(f);
    pthread_join(t, NULL);
    printf("gated flags %u\n", q.flags);
}

int main(void) {
    CUdeviceptr dev, dev2;
    CUstream s;
    unsigned char *a, *b, *c;
    CUcontext ctx = standin_primary_context();
    CHECK(cuMemAlloc_v2(&dev, BIG));
    CHECK(cuMemAlloc_v2(&dev2, BIG));
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemAllocHost_v2((void **)&a, BIG));
    CHECK(cuMemHostAlloc((void **)&b, BIG, 0));
    CHECK(cuMemAllocHost_v2((void **)&c, SMALL));
    const char *hold = getenv("POOL_FORK_HOLD");
    if (hold) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            exit(2);
        }
        if (pid == 0) {
            int null = open("/dev/null", O_RDWR);
            dup2(null, 1);
            dup2(null, 2);
            for (int i = 0; i < 3000 && access(hold, F_OK) != 0; i++) usleep(10000);
            _exit(0);
        }
    }
    if (getenv("POOL_QUERY")) {
        /* A pointer query about the second big buffer: plain CUDA knows it as pinned. */
        unsigned int flags = 99;
        CHECK(cuMemHostGetFlags(&flags, b + 4096));
        printf("flags %u\n", flags);
    }
    if (getenv("POOL_GATE")) gated(ctx, dev, a, b);
    for (unsigned r = 0; r < ROUNDS; r++) {
        fill(a, BIG, r);
        fill(c, SMALL, r + 100);
        /* Synchronous: all of a up, back into b. */
        CHECK(cuMemcpyHtoD_v2(dev, a, BIG));
        memset(b, 0, BIG);
        CHECK(cuMemcpyDtoH_v2(b, dev, BIG));
        printf("round %u sync %016llx\n", r, (unsigned long long)fnv(b, BIG));
        /* Asynchronous, at offsets inside both allocations: part of a up into dev2, the
         * small buffer into dev2 after it, then both down into b. */
        size_t off = (size_t)(r + 1) * 4096 + 24;
        size_t n = BIG / 2 + r * 512;
        CHECK(cuMemcpyHtoDAsync_v2(dev2 + 64, a + off, n, s));
        CHECK(cuMemcpyHtoDAsync_v2(dev2 + 64 + n, c, SMALL, s));
        memset(b, 0xee, BIG);
        CHECK(cuMemcpyDtoHAsync_v2(b + 8, dev2 + 64, n + SMALL, s));
        CHECK(cuStreamSynchronize(s));
        printf("round %u async %016llx\n", r, (unsigned long long)fnv(b, BIG));
        if (r == 1) wait_for_go();
    }
    printf("small %016llx\n", (unsigned long long)fnv(c, SMALL));
    CHECK(cuMemFreeHost(a));
    CHECK(cuMemFreeHost(b));
    CHECK(cuMemFreeHost(c));
    CHECK(cuStreamDestroy_v2(s));
    CHECK(cuMemFree_v2(dev));
    CHECK(cuMemFree_v2(dev2));
    printf("done\n");
    return 0;
}
