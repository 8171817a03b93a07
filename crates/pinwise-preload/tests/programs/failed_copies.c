/* Copies the driver refuses, between copies it accepts, for pinwise-preload's tests. Built at
 * test time against the libcuda stand-in (a TEST FIXTURE) with the declarations of
 * fixtures/include/cuda_driver_min.h.
 *
 * A pageable buffer is copied to a 64 KiB device buffer and back, enough times that pinwise
 * may register it in place; in between come copies the driver must refuse (past the end of
 * the device buffer, synchronous and asynchronous, and from a device address that was never
 * allocated). stdout: what the driver answered to each refused copy and a checksum (a run
 * under pinwise must print the same); stderr: `calls:` with the accepted and refused copies. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin_cuda.h"

#define N (64 * 1024)

int main(void) {
    CUdeviceptr dev;
    CUstream stream;
    standin_primary_context();
    CHECK(cuMemAlloc_v2(&dev, N));
    CHECK(cuStreamCreate(&stream, 0));
    /* Twice the device buffer, so that a copy of all of it runs past the device buffer. */
    unsigned char *buf = malloc(2 * N);
    if (!buf) return 3;
    for (size_t i = 0; i < 2 * N; i++) buf[i] = (unsigned char)(i * 7 + 1);

    unsigned long htod = 0, dtoh = 0, failed = 0;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int r = 0; r < 12; r++) {
        buf[r] = (unsigned char)(buf[r] + r);
        CHECK(cuMemcpyHtoD_v2(dev, buf, N));
        htod++;
        memset(buf, 0, N);
        CHECK(cuMemcpyDtoH_v2(buf, dev, N));
        dtoh++;
        for (size_t i = 0; i < N; i += 512) h = (h ^ buf[i]) * 0x100000001b3ULL;
        if (r % 4 == 3) {
            CUresult a = cuMemcpyHtoD_v2(dev, buf, 2 * N);
            CUresult b = cuMemcpyHtoDAsync_v2(dev, buf, 2 * N, stream);
            CUresult c = cuMemcpyDtoH_v2(buf, (CUdeviceptr)0x1000, N);
            printf("round %d: past the end %d, async past the end %d, unknown device %d\n", r,
                   a, b, c);
            failed += (a != 0) + (b != 0) + (c != 0);
        }
    }
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuStreamDestroy_v2(stream));
    CHECK(cuMemFree_v2(dev));
    free(buf);
    printf("checksum %016llx\n", (unsigned long long)h);
    fprintf(stderr, "calls: htod=%lu dtoh=%lu failed=%lu\n", htod, dtoh, failed);
    return 0;
}
