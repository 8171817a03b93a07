/* Copies a buffer, sends itself the dump signal, gives the library's drain thread time to
 * write, and ends with _exit (no exit handlers run: only the dump can have written the
 * history). cudart stand-in, a TEST FIXTURE. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

int main(void) {
    void *dev;
    static unsigned char buf[1 << 16];
    if (cudaMalloc(&dev, sizeof buf)) return 2;
    memset(buf, 7, sizeof buf);
    for (int i = 0; i < 5; i++)
        if (cudaMemcpy(dev, buf, sizeof buf, 1)) return 2;
    raise(SIGUSR2);
    struct timespec t = {0, 300 * 1000 * 1000};
    nanosleep(&t, NULL);
    printf("done\n");
    fflush(stdout);
    _exit(0);
}
