/* Copies whose times pinwise's history must give: two threads each make COPIES host-to-device
 * copies from a pageable buffer of their own (tracked: 64 KiB), each copy between two
 * CLOCK_MONOTONIC reads, with 0 to 100 µs of spinning between copies. Prints, after both
 * threads ended, `buf T ADDR` (thread T's buffer) and, per copy, `copy T K BEFORE AFTER`
 * (ns). Built at test time against the libcuda stand-in (a TEST FIXTURE). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "standin_cuda.h"

#define COPIES 400
#define BYTES (64 * 1024)

static CUcontext ctx;
static CUdeviceptr dev;

struct thread_copies {
    int t;
    unsigned char *buf;
    uint64_t before[COPIES], after[COPIES];
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *copies(void *arg) {
    struct thread_copies *c = arg;
    CHECK(cuCtxSetCurrent(ctx));
    c->buf = malloc(BYTES);
    memset(c->buf, c->t, BYTES);
    uint64_t x = 0x9e3779b97f4a7c15ull + (uint64_t)c->t;
    for (int k = 0; k < COPIES; k++) {
        c->before[k] = now_ns();
        CHECK(cuMemcpyHtoD_v2(dev, c->buf, 4096));
        c->after[k] = now_ns();
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t until = now_ns() + (x % 100) * 1000;
        while (now_ns() < until) {
        }
    }
    return NULL;
}

int main(void) {
    ctx = standin_primary_context();
    CHECK(cuMemAlloc_v2(&dev, BYTES));
    static struct thread_copies c[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        c[t].t = t + 1;
        pthread_create(&th[t], NULL, copies, &c[t]);
    }
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++) {
        printf("buf %d %llu\n", t, (unsigned long long)(uintptr_t)c[t].buf);
        for (int k = 0; k < COPIES; k++)
            printf("copy %d %d %llu %llu\n", t, k, (unsigned long long)c[t].before[k],
                   (unsigned long long)c[t].after[k]);
    }
    for (int t = 0; t < 2; t++) free(c[t].buf);
    return 0;
}
