/* A pageable buffer freed and a smaller one allocated at the same address (through the
 * cudart stand-in, a TEST FIXTURE). The large buffer is copied a few times (not enough to
 * turn hot), the small one many times: pinwise registers the small buffer in place. The
 * registration must hold the small buffer's bytes only: the large buffer's span is memory
 * the program no longer owns there, which the allocator may give back to the system
 * (brk trim, madvise) without a free or munmap pinwise would see. */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

int main(void) {
    const size_t big = 8 << 20, small = 1 << 20;
    /* Large blocks on the heap (not mmap'd), so that the address is reused. */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    void *dev;
    unsigned long htod = 0, dtoh = 0;
    CHECK(cudaMalloc(&dev, big));
    unsigned char *a = malloc(big);
    void *above = malloc(4096); /* keeps the freed block off the top of the heap */
    memset(a, 1, big);
    CHECK(cudaMemcpy(dev, a, big, 1));
    htod++;
    uintptr_t a_addr = (uintptr_t)a;
    free(a);
    unsigned char *b = malloc(small);
    unsigned long long sum = 0;
    for (int i = 0; i < 200; i++) {
        memset(b, i, small);
        CHECK(cudaMemcpy(dev, b, small, 1));
        htod++;
        memset(b, 0, small);
        CHECK(cudaMemcpy(b, dev, small, 2));
        dtoh++;
        sum += b[i * 4099 % small];
    }
    printf("same address %d sum %llu\n", (uintptr_t)b == a_addr, sum);
    free(b);
    free(above);
    CHECK(cudaFree(dev));
    fprintf(stderr, "calls: htod=%lu dtoh=%lu small=%lu\n", htod, dtoh, (unsigned long)small);
    return 0;
}
