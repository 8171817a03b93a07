/* 32 threads copy host to device without pause (pinned and pageable buffers) and count the
 * copies that returned; after 300 ms, and once every thread could have copied (at least 32
 * copies counted, waited for at most 10 s more: a loaded machine may start the threads late),
 * the main thread reads the count N, prints "done N",
 * and ends the process by HOW: `sigterm` (raised), `_exit` (status 7), `abort`. Every copy
 * counted in N returned before the fault, so a complete history holds at least N. Built at
 * test time against the cudart stand-in (a TEST FIXTURE). */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

#define THREADS 32
static atomic_ulong copies;

static void *worker(void *arg) {
    long i = (long)arg;
    size_t n = 4096;
    void *dev, *pinned;
    char *pageable = malloc(n);
    if (cudaMalloc(&dev, n) || cudaMallocHost(&pinned, n) || !pageable) return NULL;
    memset(pageable, (int)i, n);
    for (unsigned long k = 0;; k++) {
        if (cudaMemcpy(dev, (k & 1) ? pinned : pageable, n, H2D) == 0) atomic_fetch_add(&copies, 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "sigterm";
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    struct timespec step = {0, 10 * 1000 * 1000};
    for (int k = 0; k < 1000 && atomic_load(&copies) < THREADS; k++) nanosleep(&step, NULL);
    unsigned long n = atomic_load(&copies);
    printf("done %lu\n", n);
    fflush(stdout);
    if (!strcmp(how, "_exit")) _exit(7);
    if (!strcmp(how, "abort")) abort();
    raise(SIGTERM);
    return 1;
}
