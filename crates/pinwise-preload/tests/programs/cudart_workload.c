/* A CUDA runtime program for pinwise-preload's tests: pinned buffers that are hot (copied
 * often) and cold (copied once), pageable buffers that are hot and cold, a small pinned
 * buffer, synchronous and asynchronous copies. Built at test time against the cudart
 * stand-in (a TEST FIXTURE) with the prototypes below, so no CUDA headers are needed.
 *
 * It prints what it computed (checksums of everything copied back: a run under pinwise
 * must print the same bytes) and, on stderr, how many of each call it made, so that the
 * test can check the history against the program's own account. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

static unsigned long n_alloc, n_free, n_htod, n_dtoh;

/* Copies `buf` to the device and back `rounds` times, changing it on the host between
 * rounds; returns the checksum of what came back. */
static uint64_t rounds(unsigned char *buf, size_t n, void *dev, int rounds, cudaStream_t s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < n; i += 4096) buf[i] = (unsigned char)(buf[i] + r + 1);
        if (s) {
            CHECK(cudaMemcpyAsync(dev, buf, n, H2D, s));
            CHECK(cudaStreamSynchronize(s));
        } else {
            CHECK(cudaMemcpy(dev, buf, n, H2D));
        }
        n_htod++;
        memset(buf, 0, n);
        if (s) {
            CHECK(cudaMemcpyAsync(buf, dev, n, D2H, s));
            CHECK(cudaStreamSynchronize(s));
        } else {
            CHECK(cudaMemcpy(buf, dev, n, D2H));
        }
        n_dtoh++;
        h = fnv1a(buf, n, h);
    }
    return h;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 31 + seed) >> 3);
}

/* Site A: hot pinned buffers. */
__attribute__((noinline)) static void *alloc_hot(size_t n) {
    void *p = NULL;
    CHECK(cudaMallocHost(&p, n));
    n_alloc++;
    return p;
}

/* Site B: cold pinned buffers. */
__attribute__((noinline)) static void *alloc_cold(size_t n) {
    void *p = NULL;
    CHECK(cudaHostAlloc(&p, n, 0));
    n_alloc++;
    return p;
}

int main(int argc, char **argv) {
    int hot_rounds = argc > 1 ? atoi(argv[1]) : 12;
    const size_t big = 4 << 20, small = 4096, pageable = 8 << 20;
    void *dev = NULL;
    cudaStream_t s = NULL;
    CHECK(cudaMalloc(&dev, pageable));
    CHECK(cudaStreamCreate(&s));

    for (int i = 0; i < 3; i++) {
        unsigned char *hot = alloc_hot(big);
        fill(hot, big, 100 + i);
        printf("hot[%d] %016llx\n", i, (unsigned long long)rounds(hot, big, dev, hot_rounds, i == 1 ? s : NULL));
        CHECK(cudaFreeHost(hot));
        n_free++;
    }
    for (int i = 0; i < 3; i++) {
        unsigned char *cold = alloc_cold(big);
        fill(cold, big, 200 + i);
        printf("cold[%d] %016llx\n", i, (unsigned long long)rounds(cold, big, dev, 1, NULL));
        CHECK(cudaFreeHost(cold));
        n_free++;
    }
    unsigned char *tiny = alloc_hot(small);
    fill(tiny, small, 7);
    printf("small %016llx\n", (unsigned long long)rounds(tiny, small, dev, 5, s));
    CHECK(cudaFreeHost(tiny));
    n_free++;

    unsigned char *hot_pageable = malloc(pageable);
    fill(hot_pageable, pageable, 9);
    printf("pageable-hot %016llx\n", (unsigned long long)rounds(hot_pageable, pageable, dev, hot_rounds, NULL));
    free(hot_pageable);
    unsigned char *cold_pageable = malloc(pageable / 8);
    fill(cold_pageable, pageable / 8, 11);
    printf("pageable-cold %016llx\n", (unsigned long long)rounds(cold_pageable, pageable / 8, dev, 1, s));
    /* cudaMemcpyDefault: the direction comes from the pointers (unified addressing). */
    CHECK(cudaMemcpy(dev, cold_pageable, 4096, 4 /* cudaMemcpyDefault */));
    n_htod++;
    memset(cold_pageable, 0, 4096);
    CHECK(cudaMemcpy(cold_pageable, dev, 4096, 4));
    n_dtoh++;
    printf("default-kind %016llx\n", (unsigned long long)fnv1a(cold_pageable, 4096, 0xcbf29ce484222325ULL));
    free(cold_pageable);

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(dev));
    fprintf(stderr, "calls: alloc=%lu free=%lu htod=%lu dtoh=%lu\n", n_alloc, n_free, n_htod, n_dtoh);
    return 0;
}
