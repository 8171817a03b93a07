/* Every function of the malloc family, and the calls a cheap "not tracked" test must not get
 * wrong: free(NULL), realloc(NULL, n), realloc(p, 0), a tracked block shrunk by realloc, a
 * small block grown into a tracked one, a tracked block freed by another thread, many small
 * blocks freed while tracked ones are live, failed calls (calloc overflow, a bad alignment).
 * Each allocation at or above 64 KiB comes from its own (noinline) function; one is copied
 * through the cudart stand-in (a TEST FIXTURE), so that the run writes a history.
 *
 * stdout: a checksum (a run under pinwise must print the same); stderr: the calls. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

#define NOINLINE __attribute__((noinline))
#define K 1024

static unsigned long long sum;
static unsigned long tracked;

static void touch(void *p, size_t n) {
    unsigned char *c = p;
    for (size_t i = 0; i < n; i += 4096) c[i] = (unsigned char)(i / 4096 + 1);
    c[n - 1] = 7;
    sum += c[n - 1] + c[0];
}

NOINLINE void *f_malloc(size_t n) { return malloc(n); }
NOINLINE void *f_calloc(size_t n) { return calloc(2, n / 2); }
NOINLINE void *f_realloc_null(size_t n) { return realloc(NULL, n); }
NOINLINE void *f_posix_memalign(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, 64, n) == 0 ? p : NULL;
}
NOINLINE void *f_aligned_alloc(size_t n) { return aligned_alloc(4096, n); }
NOINLINE void *f_memalign(size_t n) { return memalign(256, n); }
NOINLINE void *f_valloc(size_t n) { return valloc(n); }
NOINLINE void *f_reallocarray(size_t n) { return reallocarray(NULL, n / K, K); }
NOINLINE void *f_grow(void *p, size_t n) { return realloc(p, n); }
NOINLINE void *f_zeroed_away(size_t n) { return malloc(n); }
NOINLINE void *f_thread_block(size_t n) { return malloc(n); }

static void *free_in_thread(void *p) {
    free(p);
    return NULL;
}

static void check(void *p, const char *what) {
    if (!p) {
        fprintf(stderr, "%s failed\n", what);
        exit(2);
    }
}

int main(void) {
    void *dev;
    CHECK(cudaMalloc(&dev, 256 * K));
    /* One block of each function, live together, then freed in another order. */
    void *b[8];
    size_t n = 100 * K;
    b[0] = f_malloc(n);
    b[1] = f_calloc(n);
    b[2] = f_realloc_null(n);
    b[3] = f_posix_memalign(n);
    b[4] = f_aligned_alloc(128 * K);
    b[5] = f_memalign(n);
    b[6] = f_valloc(n);
    b[7] = f_reallocarray(n);
    for (int i = 0; i < 8; i++) {
        check(b[i], "an allocation");
        touch(b[i], i == 4 ? 128 * K : n);
        tracked++;
    }
    CHECK(cudaMemcpy(dev, b[0], n, 1));
    /* Small blocks come and go while the tracked ones are live: none is recorded. */
    for (int i = 0; i < 10000; i++) {
        void *s = malloc(16 + (size_t)(i % 64) * 64);
        touch(s, 16);
        if (i % 3 == 0) s = realloc(s, 4096);
        free(s);
    }
    free(NULL);
    void *r = realloc(NULL, 10);
    check(r, "realloc(NULL, 10)");
    free(r);
    for (int i = 7; i >= 0; i--) free(b[i]);
    /* A small block grown into a tracked one, then shrunk below the threshold (the tracked
     * block's free is recorded, the small one is not). */
    void *g = malloc(16);
    check(g, "malloc(16)");
    g = f_grow(g, 200 * K);
    check(g, "realloc to 200K");
    touch(g, 200 * K);
    tracked++;
    g = realloc(g, 100);
    check(g, "realloc to 100");
    free(g);
    /* realloc(p, 0) frees a tracked block. */
    void *z = f_zeroed_away(n);
    check(z, "f_zeroed_away");
    touch(z, n);
    tracked++;
    void *gone = realloc(z, 0);
    free(gone); /* NULL with glibc; a minimal block with others */
    /* A tracked block freed by another thread. */
    void *t = f_thread_block(n);
    check(t, "f_thread_block");
    touch(t, n);
    tracked++;
    pthread_t th;
    if (pthread_create(&th, NULL, free_in_thread, t) != 0 || pthread_join(th, NULL) != 0) return 2;
    /* Failed calls record nothing. */
    errno = 0;
    void *big = calloc(SIZE_MAX / 2, 4);
    int overflow = big == NULL && errno == ENOMEM;
    void *bad = NULL;
    int einval = posix_memalign(&bad, 3, n) == EINVAL;
    CHECK(cudaFree(dev));
    printf("sum %llu overflow %d einval %d\n", sum, overflow, einval);
    fprintf(stderr, "calls: tracked=%lu\n", tracked);
    return 0;
}
