/* A program that forks after using CUDA, for pinwise-preload's tests (cudart stand-in, a
 * TEST FIXTURE): what pinwise's fork handler costs each forked child, in page faults.
 *
 * The parent copies a pinned buffer and 16 pageable ones (each its own per-pointer counter
 * in pinwise) from two threads (each its own ring), allocates and frees 64 buffers of
 * 256 KiB (recorded by the malloc hooks, when on), then forks CHILDREN children that exit
 * at once (`_exit`), one at a time, and prints the median of their minor page faults (from
 * wait4) on stdout: `child_minflt=N`, and its calls on stderr. A DataLoader does this: its
 * workers are forked after CUDA is in use. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

#define CHILDREN 21
#define PAGEABLE 16
#define BUF (64 << 10)

static void *dev;

static void *copies(void *arg) {
    (void)arg;
    void *pinned;
    CHECK(cudaMallocHost(&pinned, BUF));
    memset(pinned, 1, BUF);
    for (int r = 0; r < 4; r++) CHECK(cudaMemcpy(dev, pinned, BUF, 1));
    CHECK(cudaFreeHost(pinned));
    return NULL;
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(void) {
    CHECK(cudaMalloc(&dev, BUF));
    pthread_t t;
    if (pthread_create(&t, NULL, copies, NULL) != 0) return 3;
    pthread_join(t, NULL);
    copies(NULL);
    unsigned char *pageable[PAGEABLE];
    for (int i = 0; i < PAGEABLE; i++) {
        pageable[i] = malloc(BUF);
        memset(pageable[i], i, BUF);
        for (int r = 0; r < 3; r++) CHECK(cudaMemcpy(dev, pageable[i], BUF, 1));
    }
    for (int i = 0; i < 64; i++) {
        unsigned char *b = malloc(256 << 10);
        b[0] = (unsigned char)i;
        free(b);
    }
    long faults[CHILDREN];
    for (int i = 0; i < CHILDREN; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return 4;
        if (pid == 0) _exit(0);
        int status;
        struct rusage ru;
        if (wait4(pid, &status, 0, &ru) != pid || status != 0) return 5;
        faults[i] = ru.ru_minflt;
    }
    for (int i = 0; i < PAGEABLE; i++) free(pageable[i]);
    CHECK(cudaFree(dev));
    qsort(faults, CHILDREN, sizeof faults[0], cmp_long);
    printf("child_minflt=%ld\n", faults[CHILDREN / 2]);
    fprintf(stderr, "calls: alloc=2 htod=%d\n", 8 + PAGEABLE * 3);
    return 0;
}
