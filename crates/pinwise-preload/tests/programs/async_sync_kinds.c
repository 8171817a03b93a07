/* Asynchronous downloads (cuMemcpyDtoHAsync) completed by each kind of call, for the
 * redundant-transfer tests of `pinwise trace` (trace_async_downloads.rs, which fingerprints
 * a download when a call that guarantees its completion returns) and of `pinwise run`
 * (async_downloads.rs, which polls an event of its own): both must report the same. Built
 * at test time against the libcuda stand-in (a TEST FIXTURE), whose streams run on worker
 * threads; async copies are delayed by 20 ms, so the queries below see CUDA_ERROR_NOT_READY
 * first.
 *
 * Host buffers (cuMemAllocHost, 64 KiB each, in this order): S (the source), then R0..R4,
 * one per kind of completion, then U, then W, then C. Device buffers d0..d4, dU, dW, dC.
 *   First, S -> dW and W <- dW async on sW, stream-synchronized.
 *   Round 0: S -> dk, then Rk <- dk async, completed by kind k:
 *     0 cuStreamSynchronize(s0)      1 cuCtxSynchronize (download on the legacy stream, 0)
 *     2 cuEventRecord(e2, s2) + cuEventSynchronize(e2)
 *     3 cuEventRecord(e3, s3) + cuEventQuery(e3) until CUDA_SUCCESS
 *     4 cuStreamQuery(s4) until CUDA_SUCCESS
 *   Round 1: the same downloads again (same bytes: redundant).
 *   Round 2: S changes, S -> dk, downloads again (new bytes: not redundant).
 *   Each Rk: 3 downloads, 1 redundant.
 *   Then the calls that must NOT be taken for W's completion: S (changed) -> dW, and with
 *   async copies delayed by 200 ms: cuEventRecord(eW, sW) BEFORE W <- dW async on sW, then
 *   cuEventSynchronize(eW) (returns at once), cuStreamSynchronize(s0) (another stream),
 *   cuStreamQuery(sW) (not ready); only then
 *   cuStreamSynchronize(sW). W: 2 downloads, none redundant (a tracer that hashed W at one
 *   of the first calls would find the first download's bytes still there: "redundant").
 *   Then C: S -> dC, C <- dC async on sC, stream-synchronized (fingerprinted); S changes,
 *   S -> dC, and C <- dC async on sC while sC is being captured into a graph (the copy does
 *   not run: it is a graph node), the capture ended, cuStreamSynchronize(sC) (returns at
 *   once: nothing ran, C still holds the first bytes). That second download must be
 *   unknown (a tracer that hashed it at the sync would call it redundant). C: 1 download.
 *   S: 15 uploads (10 to d0..d4, 2 each to dW and dC, 1 to dU), none redundant.
 *   Last, U <- dU async on stream sU, never synchronized before the program ends: unknown.
 *   Unknown downloads: U's and C's captured one.
 * After each completion a pause (the program computing) lets `pinwise run`'s drain thread
 * (10 ms period) hash and apply the download before the next copy.
 * stdout carries a checksum of what came back, the same with or without pinwise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "standin_cuda.h"

#define CUDA_ERROR_NOT_READY 600

#define K64 (64u << 10)
#define KINDS 5

static unsigned char *host(unsigned seed) {
    void *p;
    CHECK(cuMemAllocHost_v2(&p, K64));
    unsigned char *b = p;
    for (size_t i = 0; i < K64; i++) b[i] = (unsigned char)((i * 131 + seed) >> 3);
    return b;
}

/* Waits for a query to say CUDA_SUCCESS; counts the CUDA_ERROR_NOT_READY answers. */
static int not_ready;
static void poll_until_done(CUresult (*query)(void *), void *what) {
    for (;;) {
        CUresult r = query(what);
        if (r == 0) return;
        if (r != CUDA_ERROR_NOT_READY) {
            fprintf(stderr, "query failed: %d\n", r);
            exit(2);
        }
        not_ready++;
        usleep(1000);
    }
}
static CUresult query_event(void *e) { return cuEventQuery((CUevent)e); }
static CUresult query_stream(void *s) { return cuStreamQuery((CUstream)s); }

int main(void) {
    standin_primary_context();
    CUstream s[KINDS], sU, sW, sC;
    CUevent e2, e3, eW;
    for (int k = 0; k < KINDS; k++) CHECK(cuStreamCreate(&s[k], 0));
    CHECK(cuStreamCreate(&sU, 0));
    CHECK(cuStreamCreate(&sW, 0));
    CHECK(cuStreamCreate(&sC, 0));
    CHECK(cuEventCreate(&eW, 0));
    CHECK(cuEventCreate(&e2, 0));
    CHECK(cuEventCreate(&e3, 0));
    unsigned char *src = host(1), *r[KINDS], *u, *w, *c;
    for (int k = 0; k < KINDS; k++) r[k] = host(10 + k);
    u = host(20);
    w = host(30);
    c = host(40);
    CUdeviceptr dk[KINDS], dU, dW, dC;
    for (int k = 0; k < KINDS; k++) CHECK(cuMemAlloc_v2(&dk[k], K64));
    CHECK(cuMemAlloc_v2(&dU, K64));
    CHECK(cuMemAlloc_v2(&dW, K64));
    CHECK(cuMemAlloc_v2(&dC, K64));
    pinwise_standin_set_async_delay_us(20 * 1000);
    uint64_t h = 0xcbf29ce484222325ULL;

    CHECK(cuMemcpyHtoD_v2(dW, src, K64));
    CHECK(cuMemcpyDtoHAsync_v2(w, dW, K64, sW));
    CHECK(cuStreamSynchronize(sW));
    h = fnv1a(w, K64, h);
    usleep(100 * 1000);

    for (int round = 0; round < 3; round++) {
        if (round == 2) src[7] ^= 0x5a;
        for (int k = 0; k < KINDS; k++) {
            if (round != 1) CHECK(cuMemcpyHtoD_v2(dk[k], src, K64));
            switch (k) {
            case 0:
                CHECK(cuMemcpyDtoHAsync_v2(r[0], dk[0], K64, s[0]));
                CHECK(cuStreamSynchronize(s[0]));
                break;
            case 1:
                CHECK(cuMemcpyDtoHAsync_v2(r[1], dk[1], K64, 0));
                CHECK(cuCtxSynchronize());
                break;
            case 2:
                CHECK(cuMemcpyDtoHAsync_v2(r[2], dk[2], K64, s[2]));
                CHECK(cuEventRecord(e2, s[2]));
                CHECK(cuEventSynchronize(e2));
                break;
            case 3:
                CHECK(cuMemcpyDtoHAsync_v2(r[3], dk[3], K64, s[3]));
                CHECK(cuEventRecord(e3, s[3]));
                poll_until_done(query_event, e3);
                break;
            case 4:
                CHECK(cuMemcpyDtoHAsync_v2(r[4], dk[4], K64, s[4]));
                poll_until_done(query_stream, s[4]);
                break;
            }
            h = fnv1a(r[k], K64, h);
            usleep(100 * 1000);
        }
    }

    CHECK(cuMemcpyHtoD_v2(dW, src, K64));
    pinwise_standin_set_async_delay_us(200 * 1000);
    CHECK(cuEventRecord(eW, sW));
    CHECK(cuMemcpyDtoHAsync_v2(w, dW, K64, sW));
    CHECK(cuEventSynchronize(eW));
    CHECK(cuStreamSynchronize(s[0]));
    if (cuStreamQuery(sW) != CUDA_ERROR_NOT_READY) {
        fprintf(stderr, "W's download was done too soon for this test\n");
        exit(3);
    }
    CHECK(cuStreamSynchronize(sW));
    h = fnv1a(w, K64, h);
    usleep(100 * 1000);

    pinwise_standin_set_async_delay_us(20 * 1000);
    CHECK(cuMemcpyHtoD_v2(dC, src, K64));
    CHECK(cuMemcpyDtoHAsync_v2(c, dC, K64, sC));
    CHECK(cuStreamSynchronize(sC));
    h = fnv1a(c, K64, h);
    usleep(100 * 1000);
    src[9] ^= 0x33;
    CHECK(cuMemcpyHtoD_v2(dC, src, K64));
    CUgraph g;
    CHECK(cuStreamBeginCapture_v2(sC, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuMemcpyDtoHAsync_v2(c, dC, K64, sC));
    CHECK(cuStreamEndCapture(sC, &g));
    CHECK(cuStreamSynchronize(sC));
    h = fnv1a(c, K64, h);
    CHECK(cuGraphDestroy(g));
    usleep(100 * 1000);

    CHECK(cuMemcpyHtoD_v2(dU, src, K64));
    pinwise_standin_set_async_delay_us(300 * 1000);
    CHECK(cuMemcpyDtoHAsync_v2(u, dU, K64, sU));
    printf("checksum %016llx\n", (unsigned long long)h);
    fflush(stdout);
    fprintf(stderr, "not ready answers: %d\n", not_ready);
    /* Ends with U's download in flight (the stand-in's worker dies with the process). */
    return 0;
}
