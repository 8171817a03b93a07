/*
 * workload.c: a CUDA driver-API program with known transfer counts, for `pinwise agent`
 * tests (built against pinwise's CPU stand-in for libcuda, a test fixture) and for
 * bench/gpu/agent/overhead.sh's event storm (built against the real driver).
 *
 *   workload copies PAGEABLE PINNED BYTES [MODE]
 *
 * makes PAGEABLE HtoD copies of BYTES from mmap'd pageable memory and PINNED HtoD copies
 * of BYTES from cuMemAllocHost memory, then one DtoH of BYTES into the pinned buffer, and
 * prints `done PAGEABLE PINNED BYTES`. MODE:
 *   (none)     exit 0.
 *   hold       then wait until stdin closes.
 *   forkexec   then fork; the child execs this program (`copies PAGEABLE PINNED BYTES
 *              hold`), the parent waits for stdin to close (tests kill both with SIGKILL).
 *   vary       the pageable buffer's first byte changes before each pageable copy, so no
 *              upload repeats the previous one (without it, every pageable copy after the
 *              first, and every pinned copy after the first, re-sends the same bytes to
 *              the same device range: PAGEABLE - 1 + PINNED - 1 redundant uploads).
 *   storm      THREADS=PINNED threads each make PAGEABLE copies of BYTES (tiny copies
 *              from many threads: the event storm), then exit.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "cuda_driver_min.h"

#define CHECK(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "%s: %d\n", #x, (int)r_); exit(2); } } while (0)

static CUcontext ctx;
static CUdeviceptr dev;
static size_t bytes;
static long per_thread;

static void *storm(void *arg) {
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    char *src = malloc(bytes ? bytes : 1);
    memset(src, 1, bytes);
    for (long i = 0; i < per_thread; i++) CHECK(cuMemcpyHtoD(dev, src, bytes));
    free(src);
    return NULL;
}

static void wait_stdin(void) {
    char buf[64];
    while (fgets(buf, sizeof buf, stdin)) {}
}

int main(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[1], "copies") != 0) {
        fprintf(stderr, "usage: %s copies PAGEABLE PINNED BYTES [hold|forkexec|storm|vary]\n", argv[0]);
        return 64;
    }
    long pageable = atol(argv[2]), pinned_n = atol(argv[3]);
    bytes = (size_t)atol(argv[4]);
    const char *mode = argc > 5 ? argv[5] : "";
    CUdevice d;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&d, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, d));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc(&dev, bytes ? bytes : 1));
    if (strcmp(mode, "storm") == 0) {
        per_thread = pageable;
        long threads = pinned_n < 1 ? 1 : pinned_n;
        pthread_t *t = calloc((size_t)threads, sizeof *t);
        for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, storm, NULL);
        for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
        printf("done storm %ld %ld %zu\n", pageable, threads, bytes);
        return 0;
    }
    char *page = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return 4;
    memset(page, 7, bytes);
    void *pin;
    CHECK(cuMemAllocHost(&pin, bytes));
    memset(pin, 3, bytes);
    int vary = strcmp(mode, "vary") == 0;
    for (long i = 0; i < pageable; i++) {
        if (vary && bytes > 0) page[0] = (char)(i + 11);
        CHECK(cuMemcpyHtoD(dev, page, bytes));
    }
    for (long i = 0; i < pinned_n; i++) CHECK(cuMemcpyHtoD(dev, pin, bytes));
    CHECK(cuMemcpyDtoH(pin, dev, bytes));
    /* The output checks the bytes made the round trip (the last HtoD was from `pin`, or
     * from `page` when there were no pinned copies). */
    unsigned char want = pinned_n > 0 ? 3 : (pageable > 0 ? 7 : 3);
    printf("done %ld %ld %zu %s\n", pageable, pinned_n, bytes,
           bytes == 0 || ((unsigned char *)pin)[bytes - 1] == want ? "ok" : "CORRUPT");
    fflush(stdout);
    if (strcmp(mode, "hold") == 0) {
        wait_stdin();
    } else if (strcmp(mode, "forkexec") == 0) {
        pid_t child = fork();
        if (child == 0) {
            execl("/proc/self/exe", argv[0], "copies", argv[2], argv[3], argv[4], "hold", (char *)NULL);
            _exit(127);
        }
        wait_stdin();
    }
    CHECK(cuMemFreeHost(pin));
    return 0;
}
