/*
 * floor_check.c: a test program for floor_shim.so (check.sh builds and runs it against the
 * CPU stand-ins for libcuda and libcudart, TEST FIXTURES; it runs on a GPU machine too).
 * It copies through every path a hook must see, on THREADS threads (default 2), ROUNDS
 * rounds (default 200) each:
 *   direct   cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2 linked from libcuda (-lcuda)
 *   procaddr cuGetProcAddress_v2("cuMemcpyHtoDAsync"), ("cuMemcpyDtoHAsync"), and
 *            ("cuMemcpyDtoH", per-thread default stream flag): called through the answer
 *   dlsym    dlopen("libcuda.so.1") + dlsym(handle, "cuMemcpy"): a unified copy
 *   cudart   cudaMemcpy (the runtime finds the driver with dlopen, dlsym of
 *            cuGetProcAddress_v2 and cuGetProcAddress, as cudart 12/13 does)
 * on a cuMemHostAlloc'd buffer, a cuMemHostRegister'ed one and a malloc'd one, with a
 * write of SCRATCH_KIB (default 1024) KiB between copies. Prints (stdout) the number of
 * copies it made of the hooked kinds and a checksum of every byte it read back: both must
 * be the same with and without the shim, and the shim's `copies` must equal the former.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../../fixtures/include/cuda_driver_min.h"

typedef int cudaError_t;
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);

#define CHECK(x)                                                                  \
	do {                                                                      \
		long long r_ = (long long)(x);                                    \
		if (r_) {                                                         \
			fprintf(stderr, "%s:%d: %s = %lld\n", __FILE__, __LINE__, #x, r_); \
			exit(2);                                                  \
		}                                                                 \
	} while (0)

typedef CUresult (*htod_async_fn)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*dtoh_async_fn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t);
typedef CUresult (*unified_fn)(CUdeviceptr, CUdeviceptr, size_t);

static htod_async_fn p_htod_async;
static dtoh_async_fn p_dtoh_async;
static dtoh_fn p_dtoh_ptds;
static unified_fn p_unified;
static CUcontext ctx;
static long rounds = 200;
static size_t scratch_kib = 1024;
enum { SIZE = 64 << 10 };

struct result {
	uint64_t hash, copies;
};

static uint64_t fnv(const unsigned char *p, size_t n, uint64_t h) {
	for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

static void *worker(void *arg) {
	struct result *res = arg;
	long id = (long)res->hash;
	uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)id;
	uint64_t copies = 0;
	CHECK(cuCtxSetCurrent(ctx));
	unsigned char *pinned, *registered = aligned_alloc(4096, SIZE), *pageable = malloc(SIZE);
	unsigned char *back = malloc(SIZE), *scratch = malloc(scratch_kib << 10);
	if (!registered || !pageable || !back || !scratch) exit(2);
	CHECK(cuMemHostAlloc((void **)&pinned, SIZE, 0));
	CHECK(cuMemHostRegister(registered, SIZE, 0));
	CUdeviceptr d;
	CHECK(cuMemAlloc(&d, SIZE));
	CUstream s;
	CHECK(cuStreamCreate(&s, 0));
	unsigned char *bufs[3] = { pinned, registered, pageable };
	for (long r = 0; r < rounds; r++) {
		unsigned char *b = bufs[r % 3];
		for (size_t i = 0; i < SIZE; i++) b[i] = (unsigned char)(i * 7 + r + id);
		/* the program's own work between copies */
		memset(scratch, (int)r, scratch_kib << 10);
		switch (r % 4) {
		case 0: /* direct */
			CHECK(cuMemcpyHtoD(d, b, SIZE));
			CHECK(cuMemcpyDtoH(back, d, SIZE));
			break;
		case 1: /* through cuGetProcAddress */
			CHECK(p_htod_async(d, b, SIZE, s));
			CHECK(p_dtoh_async(back, d, SIZE, s));
			CHECK(cuStreamSynchronize(s));
			break;
		case 2: /* dlsym'd unified copy, then the per-thread-stream variant */
			CHECK(p_unified(d, (CUdeviceptr)(uintptr_t)b, SIZE));
			CHECK(p_dtoh_ptds(back, d, SIZE));
			break;
		case 3: /* the runtime */
			CHECK(cudaMemcpy((void *)(uintptr_t)d, b, SIZE, 1));
			CHECK(cudaMemcpy(back, (void *)(uintptr_t)d, SIZE, 2));
			break;
		}
		copies += 2;
		h = fnv(back, SIZE, h);
	}
	CHECK(cuStreamDestroy(s));
	CHECK(cuMemFree(d));
	CHECK(cuMemHostUnregister(registered));
	CHECK(cuMemFreeHost(pinned));
	free(registered); free(pageable); free(back); free(scratch);
	res->hash = h;
	res->copies = copies;
	return NULL;
}

int main(void) {
	long threads = getenv("THREADS") ? atol(getenv("THREADS")) : 2;
	if (getenv("ROUNDS")) rounds = atol(getenv("ROUNDS"));
	if (getenv("SCRATCH_KIB")) scratch_kib = (size_t)atol(getenv("SCRATCH_KIB"));
	if (threads < 1 || threads > 64 || rounds < 4 || scratch_kib < 1) {
		fprintf(stderr, "THREADS 1-64, ROUNDS >= 4, SCRATCH_KIB >= 1\n");
		return 2;
	}
	CUdevice dev;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CUdriverProcAddressQueryResult st;
	CHECK(cuGetProcAddress_v2("cuMemcpyHtoDAsync", (void **)&p_htod_async, 13000, 0, &st));
	CHECK(cuGetProcAddress_v2("cuMemcpyDtoHAsync", (void **)&p_dtoh_async, 13000, 0, &st));
	CHECK(cuGetProcAddress_v2("cuMemcpyDtoH", (void **)&p_dtoh_ptds, 13000, 2, &st));
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib || !(p_unified = (unified_fn)dlsym(lib, "cuMemcpy"))) {
		fprintf(stderr, "dlopen/dlsym: %s\n", dlerror());
		return 2;
	}
	pthread_t t[64];
	struct result res[64];
	for (long i = 0; i < threads; i++) {
		res[i].hash = (uint64_t)i;
		CHECK(pthread_create(&t[i], NULL, worker, &res[i]));
	}
	uint64_t h = 0, copies = 0;
	for (long i = 0; i < threads; i++) {
		CHECK(pthread_join(t[i], NULL));
		h ^= res[i].hash * (uint64_t)(2 * i + 1);
		copies += res[i].copies;
	}
	printf("copies=%llu checksum=%016llx\n", (unsigned long long)copies, (unsigned long long)h);
	return 0;
}
