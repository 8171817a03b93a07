/* Threads that allocate and free tracked (1 MiB) blocks while they run and from their
 * thread-specific-data destructors, i.e. while the thread is torn down (after pinwise's own
 * per-thread state may be gone), and a fork child that does the same. Plain C, no CUDA.
 * stdout: what was done; exit status 0. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 8
#define BLOCK (1 << 20)

static pthread_key_t key;
static unsigned long checksum[THREADS];

static void at_thread_exit(void *p) {
    /* Runs while the thread is torn down. */
    free(p);
    char *q = malloc(BLOCK);
    memset(q, 7, BLOCK);
    free(q);
}

static void *worker(void *arg) {
    long i = (long)arg;
    for (int r = 0; r < 20; r++) {
        char *b = malloc(BLOCK);
        memset(b, (int)i, BLOCK);
        checksum[i] += (unsigned char)b[BLOCK - 1];
        free(b);
    }
    char *kept = malloc(BLOCK);
    memset(kept, 1, BLOCK);
    pthread_setspecific(key, kept);
    return NULL;
}

static int run_threads(void) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) return 1;
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    return 0;
}

int main(void) {
    pthread_key_create(&key, at_thread_exit);
    if (run_threads() != 0) return 1;
    pid_t child = fork();
    if (child == 0) {
        _exit(run_threads());
    }
    int status = 0;
    waitpid(child, &status, 0);
    unsigned long sum = 0;
    for (int i = 0; i < THREADS; i++) sum += checksum[i];
    printf("threads %d sum %lu child %d\n", THREADS, sum, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
