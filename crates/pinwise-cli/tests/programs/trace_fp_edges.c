/* Edge cases of `pinwise trace --fingerprint full` (trace_redundant.rs). Built at test
 * time against the libcuda stand-in (a TEST FIXTURE).
 *
 * 1. A buffer whose length is not a multiple of the 4 KiB chunk nor of 8 bytes: T
 *    (cuMemAllocHost, 5099 bytes: a second chunk of 125 words and 3 bytes) uploaded, its last
 *    byte changed, uploaded, a byte of its last whole word changed, uploaded, uploaded
 *    unchanged: 4 uploads, 1 redundant (the last), in full and in sampled mode.
 *
 * 2. An upload whose source has a page that is not present (never touched) at the copy's
 * entry: BPF cannot read that
 * page (a BPF read does not fault pages in), so the copy's full hash fails and its content
 * must be unknown, never called redundant.
 *
 * A 2 MiB anonymous mapping (no huge pages) of which only the pages holding the 8 sampled
 * lines are written; then three uploads of it to the same device range. The first copy
 * (the stand-in reads every page, mapping the untouched ones) leaves every page present:
 *   full mode:    copy 1 unknown (skipped); copy 2 fresh; copy 3 redundant (device holds)
 *   sampled mode: copy 1 fresh; copies 2 and 3 redundant */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "../../../../fixtures/include/cuda_driver_min.h"

#define CHECK(call)                                                                   \
    do {                                                                              \
        CUresult e_ = (call);                                                         \
        if (e_ != 0) {                                                                \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, e_); \
            exit(2);                                                                  \
        }                                                                             \
    } while (0)

#define SIZE (2u << 20)

int main(void) {
    CUdevice d;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&d, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, d));
    CHECK(cuCtxSetCurrent(ctx));
    unsigned char *t;
    CUdeviceptr dt;
    CHECK(cuMemAllocHost_v2((void **)&t, 5099));
    for (int i = 0; i < 5099; i++) t[i] = (unsigned char)(i * 7);
    CHECK(cuMemAlloc_v2(&dt, 5099));
    CHECK(cuMemcpyHtoD_v2(dt, t, 5099));
    t[5098] ^= 1; /* the partial last word */
    CHECK(cuMemcpyHtoD_v2(dt, t, 5099));
    t[4096 + 124 * 8 + 2] ^= 1; /* the last whole word */
    CHECK(cuMemcpyHtoD_v2(dt, t, 5099));
    CHECK(cuMemcpyHtoD_v2(dt, t, 5099));

    unsigned char *p =
        mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    madvise(p, SIZE, MADV_NOHUGEPAGE);
    /* The sampled lines (pinwise_core::fingerprint::sample_offsets): line i at
     * i * (SIZE - 64) / 7; both ends of each line are written. */
    for (uint64_t i = 0; i < 8; i++) {
        uint64_t off = i * (SIZE - 64) / 7;
        p[off] = (unsigned char)(i + 1);
        p[off + 63] = (unsigned char)(i + 1);
    }
    CUdeviceptr dev;
    CHECK(cuMemAlloc_v2(&dev, SIZE));
    for (int i = 0; i < 3; i++) CHECK(cuMemcpyHtoD_v2(dev, p, SIZE));
    printf("ok\n");
    return 0;
}
