/* A CUDA runtime program that ends abruptly, for pinwise-preload's interruption tests:
 * `interrupted HOW [COPIES]` makes COPIES (default 40) host-to-device copies from a pinned
 * and a pageable buffer, prints "copies N" on stdout, then ends by HOW: `exit` (status 3),
 * `_exit` (status 4), `_Exit` (status 5), `abort`, `sigint`, `sigterm`, `segv` (raised at
 * itself), `handler` (its own SIGTERM handler, installed first, calls _exit(6); then it raises
 * SIGTERM), or `wait` (prints "ready" and sleeps until a signal ends it). Built at test time
 * against the cudart stand-in (a TEST FIXTURE). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

static void on_term(int sig) {
    (void)sig;
    _exit(6);
}

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "exit";
    if (!strcmp(how, "handler")) signal(SIGTERM, on_term);
    int copies = argc > 2 ? atoi(argv[2]) : 40;
    size_t n = 1 << 16;
    void *pinned, *dev;
    char *pageable = malloc(n);
    if (cudaMallocHost(&pinned, n) || cudaMalloc(&dev, n) || !pageable) return 2;
    memset(pageable, 1, n);
    memset(pinned, 2, n);
    for (int i = 0; i < copies; i++) {
        if (cudaMemcpy(dev, (i & 1) ? pinned : pageable, n, H2D)) return 2;
    }
    printf("copies %d\n", copies);
    fflush(stdout);
    if (!strcmp(how, "exit")) exit(3);
    if (!strcmp(how, "_exit")) _exit(4);
    if (!strcmp(how, "_Exit")) _Exit(5);
    if (!strcmp(how, "abort")) abort();
    if (!strcmp(how, "sigint")) raise(SIGINT);
    if (!strcmp(how, "sigterm")) raise(SIGTERM);
    if (!strcmp(how, "segv")) raise(SIGSEGV);
    if (!strcmp(how, "handler")) raise(SIGTERM);
    if (!strcmp(how, "wait")) {
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    }
    return 1;
}
