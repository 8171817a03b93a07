/* Asynchronous copies on the program's own pageable memory, relying on what CUDA promises
 * for pageable memory: cudaMemcpyAsync from pageable memory has read the buffer when it
 * returns (the program overwrites it at once), and cudaMemcpyAsync into pageable memory has
 * written it when it returns (the program reads it at once, without synchronizing).
 * pinwise registers such buffers once they are hot; the promises must still hold. Run with
 * PINWISE_STANDIN_ASYNC_DELAY_US so that a copy on pinned memory really is late (the
 * cudart stand-in: a TEST FIXTURE). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

int main(void) {
    const size_t n = 8 << 20;
    void *dev;
    cudaStream_t s;
    unsigned char *out = malloc(n), *in = malloc(n);
    CHECK(cudaMalloc(&dev, n));
    CHECK(cudaStreamCreate(&s));
    unsigned long htod = 0, dtoh = 0;
    for (int r = 0; r < 8; r++) {
        memset(out, r + 1, n);
        CHECK(cudaMemcpyAsync(dev, out, n, 1, s));
        htod++;
        memset(out, 0xEE, n); /* allowed: the copy has read pageable memory already */
        CHECK(cudaMemcpyAsync(in, dev, n, 2, s));
        dtoh++;
        /* allowed: the copy into pageable memory is done */
        unsigned long long sum = 0;
        for (size_t i = 0; i < n; i += 4096) sum += in[i];
        printf("round %d sum %llu\n", r, sum);
    }
    CHECK(cudaStreamSynchronize(s));
    fprintf(stderr, "calls: htod=%lu dtoh=%lu\n", htod, dtoh);
    return 0;
}
