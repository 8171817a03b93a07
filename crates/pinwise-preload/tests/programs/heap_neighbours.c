/* Hot pageable buffers that lie side by side on the heap (through the cudart stand-in, a
 * TEST FIXTURE), as PyTorch's pageable tensors do once glibc's mmap threshold has risen:
 * each buffer's last page is the next one's first. They are copied round robin, many
 * times each, then freed one by one and the survivors copied again. Under pinwise every
 * buffer must be registered once, not in turns (the bug of issue 10: a neighbour's copy
 * gave the other's registration back on every round), and the bytes must be right. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

#define N 8
#define ROUNDS 25

int main(void) {
    const size_t size = 4 << 20;
    /* Keep them on the heap, next to each other (as after glibc's threshold rose). */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    unsigned char *buf[N];
    for (int i = 0; i < N; i++) {
        buf[i] = malloc(size);
        if (!buf[i]) return 3;
        memset(buf[i], i + 1, size);
    }
    int adjacent = 0;
    for (int i = 1; i < N; i++)
        if (buf[i] > buf[i - 1] && buf[i] - (buf[i - 1] + size) <= 256) adjacent++;
    fprintf(stderr, "adjacent pairs: %d\n", adjacent);
    void *dev;
    unsigned long htod = 0, dtoh = 0;
    CHECK(cudaMalloc(&dev, size));
    unsigned long long sum = 0;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < N; i++) {
            buf[i][r] = (unsigned char)(r * 3 + i);
            CHECK(cudaMemcpy(dev, buf[i], size, 1));
            htod++;
            CHECK(cudaMemcpy(buf[i], dev, size, 2));
            dtoh++;
            sum += buf[i][r] + buf[i][size - 1];
        }
    }
    printf("sum %llu\n", sum);
    /* Free every other buffer; the survivors keep moving. */
    for (int i = 0; i < N; i += 2) free(buf[i]);
    for (int r = 0; r < 4; r++)
        for (int i = 1; i < N; i += 2) {
            CHECK(cudaMemcpy(dev, buf[i], size, 1));
            htod++;
            sum += buf[i][0];
        }
    printf("after frees %llu\n", sum);
    for (int i = 1; i < N; i += 2) free(buf[i]);
    CHECK(cudaFree(dev));
    fprintf(stderr, "calls: htod=%lu dtoh=%lu\n", htod, dtoh);
    return 0;
}
