/* A program that unregisters a pageable buffer it never registered, after copying it often
 * enough that pinwise registered it in place (through the cudart stand-in, a TEST FIXTURE).
 * malloc's pointer lies inside the page-aligned range pinwise registered, not at its start:
 * the answer must still be plain CUDA's (not registered), and the buffer must stay usable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

int main(void) {
    const size_t n = 4 << 20;
    unsigned char *buf = malloc(n);
    void *dev;
    CHECK(cudaMalloc(&dev, n));
    for (int i = 0; i < 40; i++) {
        memset(buf, i, n);
        CHECK(cudaMemcpy(dev, buf, n, 1));
        CHECK(cudaMemcpy(buf, dev, n, 2));
    }
    printf("unregister %d\n", cudaHostUnregister(buf));
    memset(buf, 7, n);
    CHECK(cudaMemcpy(dev, buf, n, 1));
    memset(buf, 0, n);
    CHECK(cudaMemcpy(buf, dev, n, 2));
    printf("byte %d\n", buf[n / 2]);
    free(buf);
    return 0;
}
