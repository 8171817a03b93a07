/* What the cost programs of bench/gpu/redundant (fp_cost.c, async_cost.c) share: a CUDA
 * call checked (the program exits with its CUresult named), clocks in ns, and the
 * comparison qsort uses for medians. */
#ifndef PINWISE_BENCH_COST_COMMON_H
#define PINWISE_BENCH_COST_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../../../fixtures/include/cuda_driver_min.h"

#define CHECK(call)                                                                   \
    do {                                                                              \
        CUresult e_ = (call);                                                         \
        if (e_ != 0) {                                                                \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, e_); \
            exit(2);                                                                  \
        }                                                                             \
    } while (0)

static inline uint64_t clock_ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static inline int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

#endif
