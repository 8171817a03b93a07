/* A CUDA runtime program that copies until it is killed, for pinwise-preload's tests of what
 * a killed run keeps: `steady_copies [PAUSE_US]` makes one 64 KiB host-to-device copy
 * (alternately from a pinned and a pageable buffer), prints "copy N T" on stdout once it
 * returned (N from 1, T its CLOCK_MONOTONIC time in ns, the clock of pinwise's events),
 * sleeps PAUSE_US microseconds (default 2000), and again, forever. Built at test time
 * against the cudart stand-in (a TEST FIXTURE). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

int main(int argc, char **argv) {
    long pause_us = argc > 1 ? atol(argv[1]) : 2000;
    size_t n = 1 << 16;
    void *pinned, *dev;
    char *pageable = malloc(n);
    if (cudaMallocHost(&pinned, n) || cudaMalloc(&dev, n) || !pageable) return 2;
    memset(pageable, 1, n);
    memset(pinned, 2, n);
    for (unsigned long i = 1;; i++) {
        if (cudaMemcpy(dev, (i & 1) ? pinned : pageable, n, H2D)) return 2;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        printf("copy %lu %llu\n", i,
               (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
        fflush(stdout);
        if (pause_us > 0) usleep((useconds_t)pause_us);
    }
}
