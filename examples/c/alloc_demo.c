/*
 * pinwise C example: the smart pinning allocator from C.
 *
 * Each iteration allocates a hot buffer (copied to the device and back many times) and a
 * cold one (copied once), checks that the bytes survive the round trip, and frees both.
 * The allocator decides which to pin: in adaptive mode it learns within the run; a profile
 * run writes a profile that a use run follows from its first iteration.
 *
 *   alloc_demo [adaptive | profile FILE | use FILE] [size_mib] [iterations]
 *
 * Build (against libpinwise.so and libcuda.so.1; on a machine without a GPU, pinwise's CPU
 * stand-in for libcuda is a test fixture and the program says so):
 *
 *   cc -O2 -Iinclude examples/c/alloc_demo.c -Ltarget/release -lpinwise -lcuda -o alloc_demo
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pinwise.h"

/* The few CUDA driver entry points the example needs for device memory (no cuda.h needed). */
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
CUresult cuMemFree_v2(CUdeviceptr dptr);

#define CHECK_CU(call)                                                         \
  do {                                                                         \
    CUresult rc_ = (call);                                                     \
    if (rc_ != 0) {                                                            \
      fprintf(stderr, "alloc_demo: %s failed with CUDA error %d\n", #call, rc_); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

#define CHECK_PW(cond, what)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "alloc_demo: %s failed: %s\n", what,                     \
              pinwise_alloc_last_error());                                     \
      return 1;                                                                \
    }                                                                          \
  } while (0)

int main(int argc, char **argv) {
  PinwiseAllocConfig cfg;
  pinwise_alloc_config_init(&cfg);
  int arg = 1;
  const char *mode = argc > arg ? argv[arg++] : "adaptive";
  if (strcmp(mode, "profile") == 0 || strcmp(mode, "use") == 0) {
    if (argc <= arg) {
      fprintf(stderr, "usage: %s [adaptive | profile FILE | use FILE] [size_mib] [iterations]\n", argv[0]);
      return 2;
    }
    cfg.mode = strcmp(mode, "profile") == 0 ? PINWISE_MODE_PROFILE : PINWISE_MODE_USE;
    cfg.profile_path = argv[arg++];
  } else if (strcmp(mode, "adaptive") != 0) {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  size_t size = (size_t)(argc > arg ? atoi(argv[arg++]) : 4) << 20;
  int iterations = argc > arg ? atoi(argv[arg++]) : 6;

  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr d_buf;
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGet(&dev, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  CHECK_CU(cuMemAlloc_v2(&d_buf, size));

  PinwiseAllocator *a = pinwise_alloc_create(&cfg);
  CHECK_PW(a != NULL, "pinwise_alloc_create");
  if (pinwise_alloc_is_fixture(a) == 1) {
    printf("note: running on the CPU stand-in for libcuda (a test fixture, not a GPU)\n");
  }

  int hot_pinned_first = -1;
  for (int it = 0; it < iterations; it++) {
    unsigned char *hot = pinwise_alloc(a, size, 0);
    CHECK_PW(hot != NULL, "allocating the hot buffer");
    unsigned char *cold = pinwise_alloc(a, size, 0);
    CHECK_PW(cold != NULL, "allocating the cold buffer");
    if (it == 0) {
      hot_pinned_first = pinwise_alloc_is_pinned(a, hot);
    }
    memset(hot, 0x40 + it, size);
    for (int r = 0; r < 8; r++) {
      CHECK_PW(pinwise_alloc_copy_htod(a, d_buf, hot, size, 0, 0) == 0, "copy to device");
      CHECK_PW(pinwise_alloc_copy_dtoh(a, hot, d_buf, size, 0, 0) == 0, "copy from device");
    }
    /* The cold buffer: filled from the device once, and checked. */
    CHECK_PW(pinwise_alloc_copy_dtoh(a, cold, d_buf, size, 0, 0) == 0, "copy to the cold buffer");
    for (size_t i = 0; i < size; i += 4093) {
      if (cold[i] != (unsigned char)(0x40 + it) || hot[i] != (unsigned char)(0x40 + it)) {
        fprintf(stderr, "alloc_demo: data corrupted at iteration %d, byte %zu\n", it, i);
        return 1;
      }
    }
    CHECK_PW(pinwise_alloc_free(a, cold) == 0, "freeing the cold buffer");
    CHECK_PW(pinwise_alloc_free(a, hot) == 0, "freeing the hot buffer");
  }

  /* Freeing a pointer pinwise did not hand out is refused, with a reason. */
  int not_ours = 0;
  if (pinwise_alloc_free(a, &not_ours) != -1 || strstr(pinwise_alloc_last_error(), "not allocated") == NULL) {
    fprintf(stderr, "alloc_demo: a foreign pointer was not refused\n");
    return 1;
  }

  PinwiseAllocStats st;
  CHECK_PW(pinwise_alloc_get_stats(a, &st) == 0, "pinwise_alloc_get_stats");
  printf("mode %s: %d iterations of %zu MiB\n", mode, iterations, size >> 20);
  printf("hot buffer pinned at the first iteration: %s\n", hot_pinned_first == 1 ? "yes" : "no");
  printf("allocations %llu, pinned %llu, pool hits %llu, promotions %llu, fallbacks %llu\n",
         (unsigned long long)st.allocations, (unsigned long long)st.pinned_allocations,
         (unsigned long long)st.pool_hits, (unsigned long long)st.promotions,
         (unsigned long long)st.fallbacks);
  printf("transfers pinned %llu, pageable %llu; pinned bytes peak %llu\n",
         (unsigned long long)st.transfers_pinned, (unsigned long long)st.transfers_pageable,
         (unsigned long long)st.pinned_bytes_peak);

  CHECK_PW(pinwise_alloc_destroy(a) == 0, "pinwise_alloc_destroy");
  CHECK_CU(cuMemFree_v2(d_buf));
  return 0;
}
