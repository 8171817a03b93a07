/*
 * malloc_cost: the time of one malloc+free pair of SIZE bytes, as batches of ITERS pairs
 * (median, 10th and 90th percentile over BATCHES batches, ns per pair), printed as one JSON
 * line. It initializes CUDA first (links libcuda: the real driver, or pinwise's CPU
 * stand-in, a test fixture), so that `pinwise trace` can trace it; the timed loop makes no
 * CUDA call. Used by run.sh to measure what `pinwise trace --malloc` adds per call.
 *
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID: user and kernel, the uprobe
 * traps and their BPF programs included), not wall time: on a loaded machine every trap is
 * a chance to be descheduled, and wall time then measures the other processes.
 *
 *   malloc_cost SIZE ITERS BATCHES
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s SIZE ITERS BATCHES\n", argv[0]);
		return 2;
	}
	size_t size = strtoull(argv[1], NULL, 0);
	long iters = strtol(argv[2], NULL, 0), batches = strtol(argv[3], NULL, 0);
	if (size == 0 || iters <= 0 || batches <= 0) {
		fprintf(stderr, "SIZE, ITERS and BATCHES must be positive\n");
		return 2;
	}
	CUdevice dev;
	CUcontext ctx;
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    cuCtxSetCurrent(ctx)) {
		fprintf(stderr, "CUDA initialization failed\n");
		return 3;
	}
	double *per = malloc(sizeof(double) * (size_t)batches);
	/* Warm-up: the heap grows to its working size once. */
	for (long i = 0; i < iters; i++) {
		volatile char *p = malloc(size);
		p[0] = 1;
		free((void *)p);
	}
	for (long b = 0; b < batches; b++) {
		uint64_t t0 = now_ns();
		for (long i = 0; i < iters; i++) {
			volatile char *p = malloc(size);
			p[0] = 1;
			free((void *)p);
		}
		per[b] = (double)(now_ns() - t0) / (double)iters;
	}
	qsort(per, (size_t)batches, sizeof(double), cmp);
	printf("{\"size\": %zu, \"iters\": %ld, \"batches\": %ld, \"median_ns\": %.1f, "
	       "\"p10_ns\": %.1f, \"p90_ns\": %.1f}\n",
	       size, iters, batches, per[batches / 2], per[batches / 10], per[batches * 9 / 10]);
	return 0;
}
