/* A program that makes the CPU's time-stamp counter fault (`prctl(PR_SET_TSC,
 * PR_TSC_SIGSEGV)`: `rdtsc` then raises SIGSEGV in this thread and the threads it starts)
 * and then copies (pageable and pinned), on this thread and on a thread started after. pinwise's copy hooks time
 * themselves with that counter: under `pinwise run` this must not crash. Built at test
 * time against the libcuda stand-in (a TEST FIXTURE).
 *
 * (A process cannot start with the counter faulting: the dynamic loader reads it first, so
 * the mode set before an exec kills the new program in ld.so, before any preload.)
 *
 * With the argument `first`, the counter is made to fault before anything else (before
 * pinwise's state or allocator exist: creating them must not read it).
 *
 * stdout: `tsc MODE` (PR_GET_TSC after setting it: 2 is PR_TSC_SIGSEGV), `sum HASH`. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "standin_cuda.h"

#define N (1 << 20)
#define COPIES 200

static CUcontext ctx;
static CUdeviceptr dev;
static unsigned char *host;

static void copies(void) {
    for (int i = 0; i < COPIES; i++) {
        host[i] = (unsigned char)i;
        CHECK(cuMemcpyHtoD_v2(dev, host, N));
        CHECK(cuMemcpyDtoH_v2(host + N, dev, N));
    }
}

static void *thread_copies(void *arg) {
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    copies();
    return NULL;
}

static int make_counter_fault(void) {
    if (prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0) != 0) {
        perror("prctl");
        return 3;
    }
    int mode = 0;
    prctl(PR_GET_TSC, &mode, 0, 0, 0);
    printf("tsc %d\n", mode);
    return 0;
}

int main(int argc, char **argv) {
    int first = argc > 1 && strcmp(argv[1], "first") == 0;
    if (first && make_counter_fault() != 0) return 3;
    ctx = standin_primary_context();
    CHECK(cuMemAlloc_v2(&dev, N));
    host = malloc(2 * N);
    memset(host, 7, 2 * N);
    /* Some copies before, as a program's start-up would make. */
    copies();
    if (!first && make_counter_fault() != 0) return 3;
    copies();
    /* Pinned requests after it too (pinwise serves them). */
    for (int i = 0; i < 4; i++) {
        void *pinned = NULL;
        CHECK(cuMemAllocHost_v2(&pinned, N));
        memcpy(pinned, host, N);
        CHECK(cuMemcpyHtoD_v2(dev, pinned, N));
        CHECK(cuMemcpyDtoH_v2(host + N, dev, N));
        CHECK(cuMemFreeHost(pinned));
    }
    pthread_t t;
    pthread_create(&t, NULL, thread_copies, NULL);
    pthread_join(t, NULL);
    uint64_t x = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < 2 * N; i += 61) x = (x ^ host[i]) * 0x100000001b3ULL;
    printf("sum %016llx\n", (unsigned long long)x);
    free(host);
    return 0;
}
