/*
 * overhead.c: micro-benchmarks for the cost of tracing (run plain, then under
 * `pinwise trace`; bench/gpu/trace/run.sh compares the two).
 *
 * Built with nvcc against the real driver on the GPU machine, or with -DPINWISE_STANDIN
 * against pinwise's CPU stand-in for libcuda (a TEST FIXTURE: its timings are not GPU
 * timings, and everything printed from it says `"device":"standin"`).
 *
 *   overhead calls KIND N     N calls of one probed kind; prints ns per call
 *       KIND: htod, htod_async, dtoh, unified, copy2d   (copies of 0 bytes: the probe, not
 *             the bus, is what is measured), host_alloc (cuMemHostAlloc + cuMemFreeHost of
 *             4 KiB), register (cuMemHostRegister + cuMemHostUnregister of 64 KiB),
 *             dev_alloc (cuMemAlloc + cuMemFree of 4 KiB), mmap (mmap + munmap of 2 MiB)
 *   overhead loop SIZE N      N synchronous HtoD copies of SIZE bytes from pinned memory
 *   overhead rate THREADS SECONDS   every thread issues 0-byte async copies as fast as it
 *                             can; prints the calls made (each is one traced event)
 *
 * Output: one JSON line on stdout.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifdef PINWISE_STANDIN
#include "../../../fixtures/include/cuda_driver_min.h"
#define DEVICE_NAME "standin"
#else
#include <cuda.h>
#define DEVICE_NAME "gpu"
#endif

static CUcontext ctx;
/* Bytes per probe-cost copy: 0 where the driver accepts empty copies, else 1. */
static size_t copy_bytes = 0;

static void check(CUresult e, const char *what)
{
	if (e != 0) {
		fprintf(stderr, "overhead: %s failed: error %d\n", what, (int)e);
		exit(2);
	}
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void init(void)
{
	CUdevice dev;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

static int calls(const char *kind, long n)
{
	void *h = NULL;
	CUdeviceptr d = 0;
	CUstream s;
	check(cuMemHostAlloc(&h, 1 << 20, 0), "cuMemHostAlloc");
	check(cuMemAlloc(&d, 1 << 20), "cuMemAlloc");
	check(cuStreamCreate(&s, 0), "cuStreamCreate");
	void *reg = aligned_alloc(4096, 64 * 1024);
	memset(reg, 1, 64 * 1024);
	CUDA_MEMCPY2D c2d;
	memset(&c2d, 0, sizeof c2d);
	c2d.srcMemoryType = CU_MEMORYTYPE_HOST;
	c2d.srcHost = h;
	c2d.srcPitch = 1;
	c2d.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c2d.dstDevice = d;
	c2d.dstPitch = 1;
	c2d.WidthInBytes = 1;
	c2d.Height = 1;
	if (cuMemcpyHtoD(d, h, 0) != 0)
		copy_bytes = 1;

	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
		if (!strcmp(kind, "htod")) {
			check(cuMemcpyHtoD(d, h, copy_bytes), "cuMemcpyHtoD");
		} else if (!strcmp(kind, "htod_async")) {
			check(cuMemcpyHtoDAsync(d, h, copy_bytes, s), "cuMemcpyHtoDAsync");
		} else if (!strcmp(kind, "dtoh")) {
			check(cuMemcpyDtoH(h, d, copy_bytes), "cuMemcpyDtoH");
		} else if (!strcmp(kind, "unified")) {
			check(cuMemcpy(d, (CUdeviceptr)(unsigned long)h, copy_bytes), "cuMemcpy");
		} else if (!strcmp(kind, "copy2d")) {
			check(cuMemcpy2D(&c2d), "cuMemcpy2D");
		} else if (!strcmp(kind, "host_alloc")) {
			void *p;
			check(cuMemHostAlloc(&p, 4096, 0), "cuMemHostAlloc");
			check(cuMemFreeHost(p), "cuMemFreeHost");
		} else if (!strcmp(kind, "register")) {
			check(cuMemHostRegister(reg, 64 * 1024, 0), "cuMemHostRegister");
			check(cuMemHostUnregister(reg), "cuMemHostUnregister");
		} else if (!strcmp(kind, "dev_alloc")) {
			CUdeviceptr p;
			check(cuMemAlloc(&p, 4096), "cuMemAlloc");
			check(cuMemFree(p), "cuMemFree");
		} else if (!strcmp(kind, "mmap")) {
			void *p = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED) {
				fprintf(stderr, "overhead: mmap failed\n");
				exit(2);
			}
			munmap(p, 2 << 20);
		} else {
			fprintf(stderr, "overhead: unknown kind %s\n", kind);
			return 2;
		}
	}
	check(cuStreamSynchronize(s), "cuStreamSynchronize");
	double t1 = now_ns();
	printf("{\"device\":\"%s\",\"mode\":\"calls\",\"kind\":\"%s\",\"calls\":%ld,"
	       "\"copy_bytes\":%zu,\"ns_per_call\":%.1f}\n",
	       DEVICE_NAME, kind, n, copy_bytes, (t1 - t0) / n);
	return 0;
}

static int loop(size_t size, long n)
{
	void *h = NULL;
	CUdeviceptr d = 0;
	check(cuMemHostAlloc(&h, size, 0), "cuMemHostAlloc");
	check(cuMemAlloc(&d, size), "cuMemAlloc");
	memset(h, 7, size);
	check(cuMemcpyHtoD(d, h, size), "warm-up copy");
	double t0 = now_ns();
	for (long i = 0; i < n; i++)
		check(cuMemcpyHtoD(d, h, size), "cuMemcpyHtoD");
	double t1 = now_ns();
	double per = (t1 - t0) / n;
	printf("{\"device\":\"%s\",\"mode\":\"loop\",\"bytes\":%zu,\"copies\":%ld,"
	       "\"ns_per_copy\":%.1f,\"gb_per_s\":%.3f}\n",
	       DEVICE_NAME, size, n, per, size / per);
	return 0;
}

struct rate_arg {
	double seconds;
	long calls;
};

static void *rate_worker(void *p)
{
	struct rate_arg *a = p;
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	void *h = NULL;
	CUdeviceptr d = 0;
	CUstream s;
	check(cuMemHostAlloc(&h, 4096, 0), "cuMemHostAlloc");
	check(cuMemAlloc(&d, 4096), "cuMemAlloc");
	check(cuStreamCreate(&s, 0), "cuStreamCreate");
	size_t bytes = cuMemcpyHtoD(d, h, 0) == 0 ? 0 : 1;
	double end = now_ns() + a->seconds * 1e9;
	long calls = 1; /* the probe copy above */
	while (now_ns() < end) {
		for (int i = 0; i < 64; i++)
			check(cuMemcpyHtoDAsync(d, h, bytes, s), "cuMemcpyHtoDAsync");
		calls += 64;
	}
	check(cuStreamSynchronize(s), "cuStreamSynchronize");
	a->calls = calls;
	return NULL;
}

static int rate(int threads, double seconds)
{
	pthread_t tid[256];
	struct rate_arg args[256];
	double t0 = now_ns();
	for (int i = 0; i < threads; i++) {
		args[i].seconds = seconds;
		args[i].calls = 0;
		pthread_create(&tid[i], NULL, rate_worker, &args[i]);
	}
	long total = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		total += args[i].calls;
	}
	double t1 = now_ns();
	printf("{\"device\":\"%s\",\"mode\":\"rate\",\"threads\":%d,\"calls\":%ld,"
	       "\"seconds\":%.3f,\"calls_per_s\":%.0f}\n",
	       DEVICE_NAME, threads, total, (t1 - t0) / 1e9, total / ((t1 - t0) / 1e9));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: overhead calls KIND N | loop SIZE N | rate THREADS SECONDS\n");
		return 2;
	}
	init();
	if (!strcmp(argv[1], "calls"))
		return calls(argv[2], atol(argv[3]));
	if (!strcmp(argv[1], "loop"))
		return loop((size_t)atol(argv[2]), atol(argv[3]));
	if (!strcmp(argv[1], "rate")) {
		int t = atoi(argv[2]);
		if (t < 1 || t > 256)
			t = 1;
		return rate(t, atof(argv[3]));
	}
	fprintf(stderr, "overhead: unknown mode %s\n", argv[1]);
	return 2;
}
