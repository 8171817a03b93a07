/* A thread forks children every 0.5 ms while the main thread's `_exit` waits for pinwise's
 * outputs; each child makes three host-to-device copies and prints how long each took
 * ("child PID copy K rc RC took SECONDS"). A child must not inherit the parent's ending (its
 * hooks would wait for a flush that is not its own). A child that has not finished after
 * 20 s is ended by SIGALRM (and prints nothing more). The parent's copies are device to
 * device, so its children keep pinwise on. Built at test time against the cudart stand-in
 * (a TEST FIXTURE). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

static atomic_int go;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void child(void) {
    alarm(20);
    void *dev;
    static char host[4096];
    if (cudaMalloc(&dev, 4096)) {
        printf("child %d: no device memory\n", getpid());
        fflush(stdout);
        _exit(1);
    }
    for (int k = 0; k < 3; k++) {
        double t0 = now();
        int rc = cudaMemcpy(dev, host, 4096, H2D);
        printf("child %d copy %d rc %d took %.3f\n", getpid(), k, rc, now() - t0);
        fflush(stdout);
    }
    _exit(0);
}

static void *forker(void *arg) {
    (void)arg;
    while (!atomic_load(&go)) {
    }
    for (int i = 0; i < 40; i++) {
        if (fork() == 0) child();
        struct timespec s = {0, 500 * 1000};
        nanosleep(&s, NULL);
    }
    return NULL;
}

int main(void) {
    void *a, *b;
    if (cudaMalloc(&a, 4096) || cudaMalloc(&b, 4096)) return 2;
    for (int k = 0; k < 10; k++) cudaMemcpy(b, a, 4096, 3);
    pthread_t t;
    pthread_create(&t, NULL, forker, NULL);
    printf("parent exiting\n");
    fflush(stdout);
    atomic_store(&go, 1);
    _exit(0);
}
