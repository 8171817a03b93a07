/*
 * workload.c: a known sequence of CUDA host allocations and transfers, for checking that
 * `pinwise trace` records exactly what a program did.
 *
 * Built two ways from this one file:
 *   - in CI, against pinwise's CPU stand-ins for libcuda/libcudart (a TEST FIXTURE, not a
 *     GPU), with -DPINWISE_STANDIN (driver declarations from
 *     fixtures/include/cuda_driver_min.h, runtime ones here: no CUDA headers needed);
 *   - on the GPU machine with nvcc, `-cudart shared` and `-cudart static`
 *     (bench/gpu/trace/run.sh), against the real CUDA headers and driver.
 *
 * Each of THREADS threads does, through both the runtime and the driver API:
 *   A  cudaMallocHost(256 KiB)            10 x HtoD 64 KiB (cudaMemcpy), 5 x DtoH 32 KiB
 *   B  cuMemHostAlloc(512 KiB, PORTABLE)  7 x HtoD 4 KiB (cuMemcpyHtoD), 3 x DtoH 8 KiB
 *                                          (cuMemcpyDtoHAsync), 1 x 2D HtoD 1024 x 4
 *   C  posix_memalign(64 KiB) + cudaHostRegister   6 x cudaMemcpyDefault to the device
 *                                          (cuMemcpy: direction inferred)
 *   D  malloc(8 MiB) (an mmap: pageable)  2 x HtoD 1 MiB (cudaMemcpy)
 *   and one device-to-device cudaMemcpyDefault of 2 KiB.
 * then frees everything. It prints the totals it expects as one JSON line on stdout.
 *
 * Usage: workload [THREADS]   (default 4)
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PINWISE_STANDIN
#include "../../../fixtures/include/cuda_driver_min.h"

typedef int cudaError_t;
enum { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDefault = 4 };
#define cudaHostRegisterDefault 0
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
cudaError_t cudaHostUnregister(void *ptr);
cudaError_t cudaMalloc(void **ptr, size_t size);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
#else
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

#define KiB 1024UL
#define MiB (1024UL * 1024UL)

#define A_SIZE (256 * KiB)
#define A_HTOD 10
#define A_HTOD_BYTES (64 * KiB)
#define A_DTOH 5
#define A_DTOH_BYTES (32 * KiB)

#define B_SIZE (512 * KiB)
#define B_HTOD 7
#define B_HTOD_BYTES (4 * KiB)
#define B_DTOH 3
#define B_DTOH_BYTES (8 * KiB)
#define B_2D_WIDTH 1024
#define B_2D_HEIGHT 4

#define C_SIZE (64 * KiB)
#define C_COPIES 6
#define C_COPY_BYTES (16 * KiB)

#define D_SIZE (8 * MiB)
#define D_HTOD 2
#define D_HTOD_BYTES (1 * MiB)

#define DTOD_BYTES (2 * KiB)
#define DEVICE_BYTES (2 * MiB)

static void check_rt(cudaError_t e, const char *what)
{
	if (e != 0) {
		fprintf(stderr, "workload: %s failed: runtime error %d\n", what, (int)e);
		exit(2);
	}
}

static void check_drv(CUresult e, const char *what)
{
	if (e != 0) {
		fprintf(stderr, "workload: %s failed: driver error %d\n", what, (int)e);
		exit(2);
	}
}

static void *worker(void *arg)
{
	(void)arg;
	check_rt(cudaSetDevice(0), "cudaSetDevice");
	void *d_rt = NULL, *d2_rt = NULL;
	check_rt(cudaMalloc(&d_rt, DEVICE_BYTES), "cudaMalloc");
	check_rt(cudaMalloc(&d2_rt, DEVICE_BYTES), "cudaMalloc");
	CUdeviceptr d = 0;
	check_drv(cuMemAlloc(&d, DEVICE_BYTES), "cuMemAlloc");
	CUstream stream;
	check_drv(cuStreamCreate(&stream, 0), "cuStreamCreate");

	/* A: runtime pinned allocation. */
	void *a = NULL;
	check_rt(cudaMallocHost(&a, A_SIZE), "cudaMallocHost");
	memset(a, 1, A_SIZE);
	for (int i = 0; i < A_HTOD; i++)
		check_rt(cudaMemcpy(d_rt, a, A_HTOD_BYTES, cudaMemcpyHostToDevice), "cudaMemcpy A HtoD");
	for (int i = 0; i < A_DTOH; i++)
		check_rt(cudaMemcpy(a, d_rt, A_DTOH_BYTES, cudaMemcpyDeviceToHost), "cudaMemcpy A DtoH");

	/* B: driver pinned allocation. */
	void *b = NULL;
	check_drv(cuMemHostAlloc(&b, B_SIZE, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
	memset(b, 2, B_SIZE);
	for (int i = 0; i < B_HTOD; i++)
		check_drv(cuMemcpyHtoD(d, b, B_HTOD_BYTES), "cuMemcpyHtoD B");
	for (int i = 0; i < B_DTOH; i++)
		check_drv(cuMemcpyDtoHAsync(b, d, B_DTOH_BYTES, stream), "cuMemcpyDtoHAsync B");
	check_drv(cuStreamSynchronize(stream), "cuStreamSynchronize");
	CUDA_MEMCPY2D c2d;
	memset(&c2d, 0, sizeof(c2d));
	c2d.srcMemoryType = CU_MEMORYTYPE_HOST;
	c2d.srcHost = b;
	c2d.srcPitch = B_2D_WIDTH;
	c2d.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c2d.dstDevice = d;
	c2d.dstPitch = B_2D_WIDTH;
	c2d.WidthInBytes = B_2D_WIDTH;
	c2d.Height = B_2D_HEIGHT;
	check_drv(cuMemcpy2D(&c2d), "cuMemcpy2D B");

	/* C: registered heap memory, copied with the unified form. */
	void *c = NULL;
	if (posix_memalign(&c, 4096, C_SIZE) != 0) {
		fprintf(stderr, "workload: posix_memalign failed\n");
		exit(2);
	}
	memset(c, 3, C_SIZE);
	check_rt(cudaHostRegister(c, C_SIZE, cudaHostRegisterDefault), "cudaHostRegister");
	for (int i = 0; i < C_COPIES; i++)
		check_rt(cudaMemcpy(d_rt, c, C_COPY_BYTES, cudaMemcpyDefault), "cudaMemcpy C Default");

	/* D: a large pageable buffer. */
	void *big = malloc(D_SIZE);
	if (!big) {
		fprintf(stderr, "workload: malloc failed\n");
		exit(2);
	}
	memset(big, 4, D_SIZE);
	for (int i = 0; i < D_HTOD; i++)
		check_rt(cudaMemcpy(d_rt, big, D_HTOD_BYTES, cudaMemcpyHostToDevice), "cudaMemcpy D HtoD");

	/* Device to device, unified form. */
	check_rt(cudaMemcpy(d2_rt, d_rt, DTOD_BYTES, cudaMemcpyDefault), "cudaMemcpy DtoD");

	free(big);
	check_rt(cudaHostUnregister(c), "cudaHostUnregister");
	free(c);
	check_drv(cuMemFreeHost(b), "cuMemFreeHost");
	check_rt(cudaFreeHost(a), "cudaFreeHost");
	check_drv(cuStreamDestroy(stream), "cuStreamDestroy");
	check_drv(cuMemFree(d), "cuMemFree");
	check_rt(cudaFree(d2_rt), "cudaFree");
	check_rt(cudaFree(d_rt), "cudaFree");
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 4;
	if (threads < 1 || threads > 256) {
		fprintf(stderr, "usage: workload [THREADS 1..256]\n");
		return 2;
	}
	/* Keep malloc's mmap threshold fixed (glibc raises it after a free otherwise), so
	 * that every 8 MiB buffer is its own mapping. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	check_rt(cudaSetDevice(0), "cudaSetDevice");

	pthread_t tid[256];
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, worker, NULL) != 0) {
			fprintf(stderr, "workload: pthread_create failed\n");
			return 2;
		}
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);

	unsigned long t = (unsigned long)threads;
	unsigned long htod = A_HTOD + B_HTOD + 1 + C_COPIES + D_HTOD;
	unsigned long htod_bytes = A_HTOD * A_HTOD_BYTES + B_HTOD * B_HTOD_BYTES +
				   B_2D_WIDTH * B_2D_HEIGHT + C_COPIES * C_COPY_BYTES +
				   D_HTOD * D_HTOD_BYTES;
	unsigned long dtoh = A_DTOH + B_DTOH;
	unsigned long dtoh_bytes = A_DTOH * A_DTOH_BYTES + B_DTOH * B_DTOH_BYTES;
	printf("{\"threads\":%lu,"
	       "\"HtoD\":{\"transfers\":%lu,\"bytes\":%lu},"
	       "\"DtoH\":{\"transfers\":%lu,\"bytes\":%lu},"
	       "\"DtoD\":{\"transfers\":%lu,\"bytes\":%lu},"
	       "\"allocations\":["
	       "{\"kind\":\"PINNED_ALLOC\",\"size\":%lu,\"count\":%lu,\"transfers\":%lu,"
	       "\"HtoD_bytes\":%lu,\"DtoH_bytes\":%lu},"
	       "{\"kind\":\"PINNED_ALLOC\",\"size\":%lu,\"count\":%lu,\"transfers\":%lu,"
	       "\"HtoD_bytes\":%lu,\"DtoH_bytes\":%lu},"
	       "{\"kind\":\"REGISTERED\",\"size\":%lu,\"count\":%lu,\"transfers\":%lu,"
	       "\"HtoD_bytes\":%lu,\"DtoH_bytes\":0},"
	       "{\"kind\":\"PAGEABLE\",\"size\":%lu,\"count\":%lu,\"transfers\":%lu,"
	       "\"HtoD_bytes\":%lu,\"DtoH_bytes\":0}]}\n",
	       t, t * htod, t * htod_bytes, t * dtoh, t * dtoh_bytes, t, t * DTOD_BYTES,
	       A_SIZE, t, (unsigned long)(A_HTOD + A_DTOH), A_HTOD * A_HTOD_BYTES,
	       A_DTOH * A_DTOH_BYTES,
	       B_SIZE, t, (unsigned long)(B_HTOD + B_DTOH + 1),
	       B_HTOD * B_HTOD_BYTES + B_2D_WIDTH * B_2D_HEIGHT, B_DTOH * B_DTOH_BYTES,
	       C_SIZE, t, (unsigned long)C_COPIES, C_COPIES * C_COPY_BYTES,
	       D_SIZE, t, (unsigned long)D_HTOD, D_HTOD * D_HTOD_BYTES);
	return 0;
}
