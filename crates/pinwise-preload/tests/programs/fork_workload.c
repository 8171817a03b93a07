/* A program that forks, for pinwise-preload's tests (cudart stand-in, a TEST FIXTURE).
 *
 * The parent copies a pinned and a pageable buffer until both are hot, then forks:
 * - a child that never uses CUDA reads and frees the (maybe registered) buffers and exits;
 * - a child that execs this program again in "worker" mode does CUDA work of its own
 *   (a new process image: pinwise starts afresh in it).
 * The parent goes on copying after both have ended. stdout carries the checksums all three
 * compute (the children's lines first, in order); stderr the parent's calls. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

static unsigned long n_alloc, n_free, n_htod, n_dtoh;

static uint64_t rounds(unsigned char *buf, size_t n, void *dev, int count) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int r = 0; r < count; r++) {
        buf[r % n] ^= 0x33;
        CHECK(cudaMemcpy(dev, buf, n, 1));
        n_htod++;
        memset(buf, 0, n);
        CHECK(cudaMemcpy(buf, dev, n, 2));
        n_dtoh++;
        h = fnv1a(buf, n, h);
    }
    return h;
}

static int worker(void) {
    void *dev, *pinned;
    CHECK(cudaMalloc(&dev, 1 << 20));
    CHECK(cudaMallocHost(&pinned, 1 << 20));
    memset(pinned, 0x42, 1 << 20);
    printf("worker %016llx\n", (unsigned long long)rounds(pinned, 1 << 20, dev, 3));
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(dev));
    fprintf(stderr, "worker calls: alloc=1 free=1 htod=3 dtoh=3\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "worker") == 0) return worker();
    const size_t n = 4 << 20;
    void *dev;
    unsigned char *pinned, *pageable = malloc(n);
    CHECK(cudaMalloc(&dev, n));
    CHECK(cudaMallocHost((void **)&pinned, n));
    n_alloc++;
    memset(pinned, 1, n);
    memset(pageable, 2, n);
    uint64_t a = rounds(pinned, n, dev, 8), b = rounds(pageable, n, dev, 8);
    fflush(stdout);

    pid_t reader = fork();
    if (reader == 0) {
        /* No CUDA here. */
        uint64_t h = fnv1a(pinned, n, fnv1a(pageable, n, 0xcbf29ce484222325ULL));
        free(pageable);
        printf("reader %016llx\n", (unsigned long long)h);
        fflush(stdout);
        exit(0);
    }
    waitpid(reader, NULL, 0);
    pid_t exec_child = fork();
    if (exec_child == 0) {
        execl("/proc/self/exe", argv[0], "worker", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(exec_child, &status, 0);
    printf("parent %016llx %016llx %016llx worker-status=%d\n", (unsigned long long)a,
           (unsigned long long)b, (unsigned long long)rounds(pageable, n, dev, 4),
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    CHECK(cudaFreeHost(pinned));
    n_free++;
    free(pageable);
    CHECK(cudaFree(dev));
    fprintf(stderr, "calls: alloc=%lu free=%lu htod=%lu dtoh=%lu\n", n_alloc, n_free, n_htod, n_dtoh);
    return 0;
}
