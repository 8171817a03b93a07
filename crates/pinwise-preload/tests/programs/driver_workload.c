/* A CUDA driver API program for pinwise-preload's tests (linked with -lcuda: the exported
 * driver symbols are what it reaches). Built at test time against the libcuda stand-in (a
 * TEST FIXTURE) with the declarations of fixtures/include/cuda_driver_min.h.
 *
 * It exercises: hot and cold pinned allocations (cuMemAllocHost, cuMemHostAlloc), a mapped
 * allocation and the pointer queries on pinned requests (device pointer, flags, memory
 * type, range), entry points found through cuGetProcAddress (default and per-thread
 * variants), 2D and unified copies, the program's own registration, and hot pageable
 * buffers that are freed on another thread, reallocated and unmapped. stdout carries only
 * what a run under pinwise must reproduce byte for byte; stderr the counts of calls. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "standin_cuda.h"

static unsigned long n_alloc, n_free, n_htod, n_dtoh, n_reg;
static CUcontext ctx;
static CUdeviceptr dev;

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 29 + seed) >> 2);
}

static uint64_t rounds(unsigned char *buf, size_t n, int r_count) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int r = 0; r < r_count; r++) {
        for (size_t i = 0; i < n; i += 4096) buf[i] = (unsigned char)(buf[i] + r + 3);
        CHECK(cuMemcpyHtoD_v2(dev, buf, n));
        n_htod++;
        memset(buf, 0, n);
        CHECK(cuMemcpyDtoH_v2(buf, dev, n));
        n_dtoh++;
        h = fnv1a(buf, n, h);
    }
    return h;
}

__attribute__((noinline)) static void *alloc_hot(size_t n) {
    void *p;
    CHECK(cuMemAllocHost_v2(&p, n));
    n_alloc++;
    return p;
}

__attribute__((noinline)) static void *alloc_cold(size_t n) {
    void *p;
    CHECK(cuMemHostAlloc(&p, n, 0));
    n_alloc++;
    return p;
}

__attribute__((noinline)) static void *alloc_queried(size_t n) {
    void *p;
    CHECK(cuMemAllocHost_v2(&p, n));
    n_alloc++;
    return p;
}

static void *free_elsewhere(void *p) {
    /* A thread with no CUDA context frees a buffer pinwise may have registered. */
    free(p);
    return NULL;
}

int main(void) {
    const size_t big = 4 << 20;
    ctx = standin_primary_context();
    CHECK(cuMemAlloc_v2(&dev, 16 << 20));

    for (int i = 0; i < 3; i++) {
        unsigned char *p = alloc_hot(big);
        fill(p, big, i);
        printf("hot[%d] %016llx\n", i, (unsigned long long)rounds(p, big, 10));
        CHECK(cuMemFreeHost(p));
        n_free++;
    }
    for (int i = 0; i < 3; i++) {
        unsigned char *p = alloc_cold(big);
        fill(p, big, 50 + i);
        printf("cold[%d] %016llx\n", i, (unsigned long long)rounds(p, big, 1));
        CHECK(cuMemFreeHost(p));
        n_free++;
    }

    /* Queries on a pinned request (its site's first, so an adaptive allocator has no
     * history for it yet): the answers must be plain CUDA's, whatever pinwise served. */
    {
        unsigned char *p = alloc_queried(3 << 20);
        unsigned flags = 99, type = 0;
        size_t range = 0;
        CUdeviceptr dp = 0;
        fill(p, 3 << 20, 60);
        CHECK(cuMemHostGetFlags(&flags, p + 100));
        CHECK(cuPointerGetAttribute(&type, 2 /* MEMORY_TYPE */, (CUdeviceptr)(uintptr_t)p));
        CHECK(cuPointerGetAttribute(&range, 12 /* RANGE_SIZE */, (CUdeviceptr)(uintptr_t)(p + 5)));
        CHECK(cuMemHostGetDevicePointer_v2(&dp, p, 0));
        printf("queries flags=%u type=%u range=%zu devptr-is-host=%d %016llx\n", flags, type, range,
               dp == (CUdeviceptr)(uintptr_t)p, (unsigned long long)rounds(p, 3 << 20, 1));
        CHECK(cuMemFreeHost(p));
        n_free++;
    }

    /* Misuse answered as plain CUDA answers it: freeing twice, unregistering memory that
     * was allocated pinned (not registered). */
    {
        void *p = alloc_hot(big);
        CUresult unreg = cuMemHostUnregister(p);
        CHECK(cuMemFreeHost(p));
        n_free++;
        CUresult twice = cuMemFreeHost(p);
        const char *a = "?", *b = "?";
        cuGetErrorName(unreg, &a);
        cuGetErrorName(twice, &b);
        printf("misuse unregister-pinned=%s free-twice=%s\n", a, b);
    }

    /* A mapped allocation: flags that need pinned semantics. */
    unsigned char *mapped;
    CHECK(cuMemHostAlloc((void **)&mapped, 1 << 20, 0x2 | 0x1));
    n_alloc++;
    CUdeviceptr mapped_dev;
    unsigned mapped_flags;
    CHECK(cuMemHostGetDevicePointer_v2(&mapped_dev, mapped, 0));
    CHECK(cuMemHostGetFlags(&mapped_flags, mapped));
    fill(mapped, 1 << 20, 77);
    printf("mapped flags=%u devptr-is-host=%d %016llx\n", mapped_flags,
           mapped_dev == (CUdeviceptr)(uintptr_t)mapped, (unsigned long long)rounds(mapped, 1 << 20, 2));
    CHECK(cuMemFreeHost(mapped));
    n_free++;

    /* Entry points through cuGetProcAddress: the default and the per-thread variants. */
    CUresult (*htod)(CUdeviceptr, const void *, size_t) = NULL;
    CUresult (*dtoh_async_ptsz)(void *, CUdeviceptr, size_t, CUstream) = NULL;
    CUdriverProcAddressQueryResult status = -1;
    CHECK(cuGetProcAddress_v2("cuMemcpyHtoD", (void **)&htod, 13000, 0, &status));
    CHECK(cuGetProcAddress_v2("cuMemcpyDtoHAsync", (void **)&dtoh_async_ptsz, 13000, 2, &status));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    unsigned char *pg = malloc(big);
    fill(pg, big, 5);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int r = 0; r < 6; r++) {
        pg[r * 4096] ^= 0x5a;
        CHECK(htod(dev, pg, big));
        n_htod++;
        memset(pg, 0, big);
        CHECK(dtoh_async_ptsz(pg, dev, big, 0 /* the per-thread default stream */));
        CHECK(cuStreamSynchronize((CUstream)2 /* CU_STREAM_PER_THREAD */));
        n_dtoh++;
        h = fnv1a(pg, big, h);
    }
    printf("proc-address %016llx\n", (unsigned long long)h);

    /* Reallocating a (now hot, maybe registered) pageable buffer, then freeing it on a
     * thread without a context. */
    pg = realloc(pg, 2 * big);
    fill(pg + big, big, 6);
    printf("realloc %016llx\n", (unsigned long long)rounds(pg, 2 * big, 4));
    pthread_t t;
    pthread_create(&t, NULL, free_elsewhere, pg);
    pthread_join(t, NULL);

    /* 2D copies from and to a pitched pageable buffer. */
    const size_t pitch = 8192, width = 6000, height = 512;
    unsigned char *pitched = malloc(pitch * height);
    fill(pitched, pitch * height, 9);
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = 1; c.srcHost = pitched; c.srcPitch = pitch;
    c.dstMemoryType = 2; c.dstDevice = dev; c.dstPitch = width;
    c.WidthInBytes = width; c.Height = height;
    CHECK(cuMemcpy2D_v2(&c));
    n_htod++;
    memset(pitched, 0, pitch * height);
    CUDA_MEMCPY2D back = {0};
    back.srcMemoryType = 2; back.srcDevice = dev; back.srcPitch = width;
    back.dstMemoryType = 1; back.dstHost = pitched; back.dstPitch = pitch;
    back.WidthInBytes = width; back.Height = height;
    CHECK(cuMemcpy2D_v2(&back));
    n_dtoh++;
    printf("2d %016llx\n", (unsigned long long)fnv1a(pitched, pitch * height, 0xcbf29ce484222325ULL));
    free(pitched);

    /* Unified copies with a hot mmap'd buffer, then unmapped. */
    unsigned char *m = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fill(m, big, 13);
    for (int r = 0; r < 6; r++) {
        m[r] ^= 1;
        CHECK(cuMemcpy(dev, (CUdeviceptr)(uintptr_t)m, big));
        n_htod++;
        CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)m, dev, big));
        n_dtoh++;
    }
    printf("unified %016llx\n", (unsigned long long)fnv1a(m, big, 0xcbf29ce484222325ULL));
    munmap(m, big);

    /* The program's own registration of a hot buffer. */
    unsigned char *reg = malloc(big);
    fill(reg, big, 21);
    CHECK(cuMemHostRegister_v2(reg, big, 0));
    n_reg++;
    printf("registered %016llx\n", (unsigned long long)rounds(reg, big, 5));
    CHECK(cuMemHostUnregister(reg));
    free(reg);

    CHECK(cuMemFree_v2(dev));
    fprintf(stderr, "calls: alloc=%lu free=%lu htod=%lu dtoh=%lu register=%lu\n", n_alloc, n_free,
            n_htod, n_dtoh, n_reg);
    return 0;
}
