/* Shared by the C test programs of pinwise-preload's integration tests (tests/programs/, some
 * also built by pinwise-cli's tests and bench/gpu scripts), which are built at test
 * time against the CUDA stand-ins (TEST FIXTURES: fixtures/cuda-standin, cudart-standin)
 * or a real libcuda: the driver API's declarations (fixtures/include/cuda_driver_min.h and
 * the few more some programs call), the runtime API's that the cudart programs call, the
 * libcuda stand-in's test controls, CHECK, and two helpers (fnv1a, standin_primary_context).
 *
 * CHECK(call) exits with status 2, saying where, when `call` returns non-zero. It names the
 * error with the driver's cuGetErrorName, or with cudaGetErrorName in a program that
 * defines STANDIN_RUNTIME before including this (each looked up weakly: "?" when the
 * program does not link it). Included by relative path: no -I needed. */
#ifndef PINWISE_STANDIN_CUDA_H
#define PINWISE_STANDIN_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../../../fixtures/include/cuda_driver_min.h"

/* Driver API beyond cuda_driver_min.h. */
typedef struct CUevent_st *CUevent;
CUresult cuEventCreate(CUevent *e, unsigned int flags);
CUresult cuEventRecord(CUevent e, CUstream s);
CUresult cuEventQuery(CUevent e);
CUresult cuEventSynchronize(CUevent e);
CUresult cuEventDestroy_v2(CUevent e);
CUresult cuStreamQuery(CUstream s);
CUresult cuCtxSynchronize(void);
CUresult cuCtxGetCurrent(CUcontext *pctx);
/* CUDA 13's (cudart 13's cudaDeviceSynchronize calls it): NULL is the current context. */
CUresult cuCtxSynchronize_v2(CUcontext ctx);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
#define cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2

/* Runtime API (libcudart). */
typedef int cudaError_t;
typedef void *cudaStream_t;
/* cudaMemcpyKind values. */
enum { H2D = 1, D2H = 2 };
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaHostUnregister(void *p);
const char *cudaGetErrorName(cudaError_t e);

/* The libcuda stand-in's knob (fixtures/cuda-standin/src/lib.rs): how long its
 * asynchronous copies stay in flight. */
void pinwise_standin_set_async_delay_us(uint64_t delay_us);

/* FNV-1a of `n` bytes, continuing from `h` (0xcbf29ce484222325 to start). */
static inline uint64_t fnv1a(const unsigned char *p, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

#pragma weak cuGetErrorName
#pragma weak cudaGetErrorName

/* The name of error `e` of the API the program checks (see CHECK). */
static inline const char *standin_error_name(long long e) {
    const char *n = "?";
#ifdef STANDIN_RUNTIME
    if (cudaGetErrorName) n = cudaGetErrorName((cudaError_t)e);
#else
    if (cuGetErrorName) cuGetErrorName((CUresult)e, &n);
#endif
    return n ? n : "?";
}

#define CHECK(call)                                                                    \
    do {                                                                               \
        long long e_ = (long long)(call);                                              \
        if (e_ != 0) {                                                                 \
            fprintf(stderr, "%s:%d: %s failed: %lld %s\n", __FILE__, __LINE__, #call, e_, \
                    standin_error_name(e_));                                           \
            exit(2);                                                                   \
        }                                                                              \
    } while (0)

/* Initializes the driver and makes device 0's primary context current; returns it. */
static inline CUcontext standin_primary_context(void) {
    CUdevice d;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&d, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, d));
    CHECK(cuCtxSetCurrent(ctx));
    return ctx;
}

#endif
