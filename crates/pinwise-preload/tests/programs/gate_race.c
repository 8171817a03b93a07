/* Copies in flight on one thread while another thread's copies make pinwise give back the
 * registration they use (pinwise-preload's copy gate). Built at test time against the
 * libcuda stand-in (a TEST FIXTURE), run with PINWISE_STANDIN_COPY_DELAY_US so that each
 * copy from registered memory stays in flight a while; the stand-in counts registrations
 * taken away under a copy in flight (`pinwise_standin_unregistered_in_use`).
 *
 * An 8 MiB buffer (page-aligned, inside a larger heap block) is uploaded until pinwise
 * registers its pages in place (hot). Then a second thread keeps uploading it synchronously
 * while the main thread uploads 4 KiB that start in the pageable bytes before it and run
 * into its first page: a copy that no registration covers but one overlaps, so pinwise
 * gives the registration back first (`release_partly_covered`; too small to be registered
 * itself). The other thread's copies then register it again, and so on.
 *
 * argv[1] == "own": the program itself registers 7 MiB of it and unregisters them while the
 * other thread copies from them (its own race: the stand-in must count it, which shows the
 * count works).
 *
 * argv[1] == "apart": the other thread uploads a second hot buffer of its own instead, while
 * the main thread alone uploads the first (making pinwise register it again) and its edge
 * (making pinwise give it back): no copy ever overlaps a registration being given back, so
 * the gate is never waited on (it is per range).
 *
 * stdout: `sum HASH` of what arrived on the device, then `unregistered_in_use N`. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "standin_cuda.h"

#define MIB ((size_t)1 << 20)
#define HOT (8 * MIB)
#define WHOLE (HOT + 16 * 1024)
#define EDGE 4096
#define ROUNDS 40

static CUcontext ctx;
static CUdeviceptr dev_a, dev_b, dev_c;
static unsigned char *buf, *src;
static size_t src_len;
static volatile int go;

static void *copier(void *arg) {
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE)) {
    }
    for (int i = 0; i < 2 * ROUNDS; i++) CHECK(cuMemcpyHtoD_v2(dev_a, src, src_len));
    return NULL;
}

static uint64_t device_hash(CUdeviceptr d, size_t n) {
    unsigned char *h = malloc(n);
    CHECK(cuMemcpyDtoH_v2(h, d, n));
    uint64_t x = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i += 4093) x = (x ^ h[i]) * 0x100000001b3ULL;
    free(h);
    return x;
}

int main(int argc, char **argv) {
    int own = argc > 1 && !strcmp(argv[1], "own");
    int apart = argc > 1 && !strcmp(argv[1], "apart");
    ctx = standin_primary_context();
    CHECK(cuMemAlloc_v2(&dev_a, WHOLE));
    CHECK(cuMemAlloc_v2(&dev_b, WHOLE));
    CHECK(cuMemAlloc_v2(&dev_c, WHOLE));
    buf = malloc(WHOLE);
    for (size_t i = 0; i < WHOLE; i++) buf[i] = (unsigned char)(i * 13 >> 4);
    /* The hot buffer: page-aligned, with pageable bytes of the same block before it. */
    unsigned char *hot = (unsigned char *)(((uintptr_t)buf + 8192) & ~(uintptr_t)4095);
    /* Hot: pinwise registers its pages in place. */
    if (!own)
        for (int i = 0; i < 6; i++) CHECK(cuMemcpyHtoD_v2(dev_a, hot, HOT));
    src = hot;
    src_len = own ? HOT - MIB : HOT;
    unsigned char *other = NULL;
    if (apart) {
        /* The other thread's buffer, hot too. */
        other = malloc(WHOLE);
        for (size_t i = 0; i < WHOLE; i++) other[i] = (unsigned char)(i * 7 >> 3);
        src = (unsigned char *)(((uintptr_t)other + 8192) & ~(uintptr_t)4095);
        for (int i = 0; i < 6; i++) CHECK(cuMemcpyHtoD_v2(dev_a, src, HOT));
    }
    pthread_t t;
    pthread_create(&t, NULL, copier, NULL);
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < ROUNDS; i++) {
        if (own) {
            CHECK(cuMemHostRegister_v2(hot, HOT - MIB, 0));
            CHECK(cuMemcpyHtoD_v2(dev_b, hot, HOT - MIB));
            CHECK(cuMemHostUnregister(hot));
        } else if (apart) {
            CHECK(cuMemcpyHtoD_v2(dev_b, hot - EDGE / 2, EDGE));
            /* Hot again: pinwise registers it again (this thread's copies only). */
            for (int j = 0; j < 6; j++) CHECK(cuMemcpyHtoD_v2(dev_c, hot, HOT));
        } else {
            CHECK(cuMemcpyHtoD_v2(dev_b, hot - EDGE / 2, EDGE));
        }
        if (!apart) usleep(3000); /* let the other thread register it again */
    }
    pthread_join(t, NULL);
    printf("sum %016llx %016llx %016llx\n", (unsigned long long)device_hash(dev_a, src_len),
           (unsigned long long)device_hash(dev_b, own ? HOT - MIB : EDGE),
           (unsigned long long)(apart ? device_hash(dev_c, HOT) : 0));
    CUresult (*in_use)(uint64_t *) =
        (CUresult(*)(uint64_t *))dlsym(RTLD_DEFAULT, "pinwise_standin_unregistered_in_use");
    uint64_t n = 0;
    if (!in_use || in_use(&n)) {
        fprintf(stderr, "the libcuda stand-in does not count unregistrations under copies\n");
        return 2;
    }
    printf("unregistered_in_use %llu\n", (unsigned long long)n);
    free(buf);
    free(other);
    return 0;
}
