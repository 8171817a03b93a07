/* Pageable buffers from several allocation sites (malloc, calloc, posix_memalign,
 * realloc), each freed and allocated again in turn so that addresses are reused, copied
 * through the cudart stand-in (a TEST FIXTURE). Every function that allocates is its own
 * (noinline) call site; the test checks each allocation's record, site, call number and
 * counts, and that the stacks name these functions.
 *
 * stdout: a checksum (a run under pinwise must print the same); stderr: the calls. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

#define NOINLINE __attribute__((noinline))

static void *dev;
static unsigned long htod, dtoh;
static unsigned long long sum;

static void fill(unsigned char *p, size_t n, int seed) {
    for (size_t i = 0; i < n; i += 4096) p[i] = (unsigned char)(seed + i / 4096);
}

static void to_device(void *p, size_t n) {
    CHECK(cudaMemcpy(dev, p, n, 1));
    htod++;
}

static void from_device(void *p, size_t n) {
    CHECK(cudaMemcpy(p, dev, n, 2));
    dtoh++;
    sum += ((unsigned char *)p)[n / 2];
}

NOINLINE unsigned char *alloc_big(size_t n) { return malloc(n); }
NOINLINE unsigned char *alloc_zeroed(size_t n) { return calloc(1, n); }
NOINLINE unsigned char *alloc_aligned(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n) != 0) return NULL;
    return p;
}
NOINLINE unsigned char *grow(unsigned char *p, size_t n) { return realloc(p, n); }
NOINLINE unsigned char *alloc_small(size_t n) { return malloc(n); }

int main(void) {
    const size_t big = 4 << 20, medium = 64 << 10, aligned = 1 << 20, small = 4096;
    unsigned long n_big = 0, n_zeroed = 0, n_aligned = 0, reused = 0;
    CHECK(cudaMalloc(&dev, big));
    uintptr_t last = 0;
    for (int i = 0; i < 6; i++) {
        unsigned char *b = alloc_big(big);
        n_big++;
        reused += (uintptr_t)b == last;
        last = (uintptr_t)b;
        fill(b, big, i);
        to_device(b, big);
        to_device(b, big / 2);
        free(b);
    }
    last = 0;
    for (int i = 0; i < 6; i++) {
        unsigned char *z = alloc_zeroed(medium);
        n_zeroed++;
        reused += (uintptr_t)z == last;
        last = (uintptr_t)z;
        from_device(z, medium);
        free(z);
    }
    for (int i = 0; i < 3; i++) {
        unsigned char *a = alloc_aligned(aligned);
        n_aligned++;
        fill(a, aligned, 7 * i);
        to_device(a, aligned);
        from_device(a, aligned);
        free(a);
    }
    /* A buffer that grows: its first block (from alloc_big) is freed by realloc, the new
     * one comes from grow(). */
    unsigned char *g = alloc_big(100 << 10);
    n_big++;
    fill(g, 100 << 10, 3);
    to_device(g, 100 << 10);
    g = grow(g, 300 << 10);
    fill(g, 300 << 10, 5);
    to_device(g, 300 << 10);
    from_device(g, 300 << 10);
    free(g);
    /* Below the tracking threshold: an implicit record unless the threshold is lowered. */
    unsigned char *s = alloc_small(small);
    fill(s, small, 9);
    to_device(s, small);
    free(s);
    CHECK(cudaFree(dev));
    printf("sum %llu\n", sum);
    fprintf(stderr, "calls: big=%lu zeroed=%lu aligned=%lu grow=1 small=1 htod=%lu dtoh=%lu reused=%lu\n",
            n_big, n_zeroed, n_aligned, htod, dtoh, reused);
    return 0;
}
