/* Copies of growing size on one pageable buffer (through the cudart stand-in, a TEST
 * FIXTURE): many small round trips on the buffer's first 1 MiB make it hot, so pinwise
 * registers that part in place; then whole-buffer copies start inside the registration and
 * run past its end. The real driver refuses such a copy (CUDA_ERROR_INVALID_VALUE, seen on
 * an H200) and so does the stand-in: pinwise must give the partial registration back
 * before the copy goes, and the program must see every copy succeed with the right bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STANDIN_RUNTIME
#include "standin_cuda.h"

int main(void) {
    const size_t whole = 4 << 20, part = 1 << 20;
    unsigned char *buf = malloc(whole), *back = malloc(whole);
    void *dev;
    unsigned long htod = 0, dtoh = 0;
    CHECK(cudaMalloc(&dev, whole));
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 24; i++) {
            memset(buf, round * 31 + i, part);
            CHECK(cudaMemcpy(dev, buf, part, 1));
            htod++;
            CHECK(cudaMemcpy(buf, dev, part, 2));
            dtoh++;
        }
        for (size_t i = 0; i < whole; i++) buf[i] = (unsigned char)(i * 7 + round);
        CHECK(cudaMemcpy(dev, buf, whole, 1));
        htod++;
        CHECK(cudaMemcpy(back, dev, whole, 2));
        dtoh++;
        CHECK(cudaMemcpy(buf, dev, whole, 2));
        dtoh++;
        unsigned long long sum = 0;
        for (size_t i = 0; i < whole; i += 512) sum += back[i] + buf[i];
        printf("round %d sum %llu same %d\n", round, sum, memcmp(buf, back, whole) == 0);
    }
    CHECK(cudaFree(dev));
    free(buf);
    free(back);
    fprintf(stderr, "calls: htod=%lu dtoh=%lu\n", htod, dtoh);
    return 0;
}
