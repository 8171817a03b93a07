/* Known redundant and non-redundant copies, for the redundant-transfer tests (pinwise run
 * and pinwise trace). Built at test time against the libcuda stand-in (a TEST FIXTURE).
 * Host buffers are cuMemAllocHost allocations (one history record each), in this order:
 *
 *   A (1 MiB) to dA four times, unchanged          uploads 5: 3 redundant (device holds)
 *     then A to dA2 (same bytes, other device range)          not redundant
 *   B (1 MiB) to dB, then changed and sent again:  uploads 5
 *     one byte between the first two sampled lines   full: fresh; sampled: "redundant"
 *     one byte in the last page, not the last line   full: fresh; sampled: "redundant"
 *     the last byte                                  fresh in both
 *     unchanged                                      redundant in both (device holds)
 *   C (300 bytes: the sampled lines cover it) to dC: uploads 3: 1 byte changed then
 *     unchanged                                      1 redundant in both
 *   D (64 KiB) to dX, E (64 KiB) to dX, D to dX:   D uploads 2: 1 redundant in both (same
 *                                                  as D's upload #1; dX was overwritten)
 *   S (64 KiB) to dR, R <- dR twice, S' to dR, R <- dR:  R downloads 3: 1 redundant
 *
 * So: full mode A 3, B 1, C 1, D 1, E 0, S 0 redundant uploads, R 1 redundant download;
 * sampled mode the same except B 3 (the two changes between sampled lines are the blind
 * spot). stdout carries a checksum of what came back, the same with or without pinwise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin_cuda.h"

#define MIB (1u << 20)
#define K64 (64u << 10)

static void *host(size_t n, unsigned seed) {
    void *p;
    CHECK(cuMemAllocHost_v2(&p, n));
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((i * 131 + seed) >> 3);
    return p;
}

static CUdeviceptr dev(size_t n) {
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, n));
    return d;
}

int main(void) {
    standin_primary_context();

    unsigned char *a = host(MIB, 1), *b = host(MIB, 2), *c = host(300, 3);
    unsigned char *dd = host(K64, 4), *e = host(K64, 5), *s = host(K64, 6), *r = host(K64, 7);
    CUdeviceptr dA = dev(MIB), dA2 = dev(MIB), dB = dev(MIB), dC = dev(300), dX = dev(K64),
                dR = dev(K64);

    for (int i = 0; i < 4; i++) CHECK(cuMemcpyHtoD_v2(dA, a, MIB));
    CHECK(cuMemcpyHtoD_v2(dA2, a, MIB));

    CHECK(cuMemcpyHtoD_v2(dB, b, MIB));
    b[1000] ^= 0x5a; /* between sampled lines 0 (0..63) and 1 (at about 149 KiB) */
    CHECK(cuMemcpyHtoD_v2(dB, b, MIB));
    b[MIB - 4096 + 10] ^= 0x5a; /* last page, not in the last line (MIB-64..MIB) */
    CHECK(cuMemcpyHtoD_v2(dB, b, MIB));
    b[MIB - 1] ^= 0x5a; /* the last line */
    CHECK(cuMemcpyHtoD_v2(dB, b, MIB));
    CHECK(cuMemcpyHtoD_v2(dB, b, MIB));

    CHECK(cuMemcpyHtoD_v2(dC, c, 300));
    c[150] ^= 1;
    CHECK(cuMemcpyHtoD_v2(dC, c, 300));
    CHECK(cuMemcpyHtoD_v2(dC, c, 300));

    CHECK(cuMemcpyHtoD_v2(dX, dd, K64));
    CHECK(cuMemcpyHtoD_v2(dX, e, K64));
    CHECK(cuMemcpyHtoD_v2(dX, dd, K64));

    uint64_t h = 0xcbf29ce484222325ULL;
    CHECK(cuMemcpyHtoD_v2(dR, s, K64));
    CHECK(cuMemcpyDtoH_v2(r, dR, K64));
    h = fnv1a(r, K64, h);
    CHECK(cuMemcpyDtoH_v2(r, dR, K64));
    h = fnv1a(r, K64, h);
    s[5] ^= 0xff;
    CHECK(cuMemcpyHtoD_v2(dR, s, K64));
    CHECK(cuMemcpyDtoH_v2(r, dR, K64));
    h = fnv1a(r, K64, h);
    CHECK(cuMemcpyDtoH_v2(b, dB, MIB));
    h = fnv1a(b, MIB, h);

    printf("checksum %016llx\n", (unsigned long long)h);
    fprintf(stderr, "calls: htod=18 dtoh=4\n");
    return 0;
}
