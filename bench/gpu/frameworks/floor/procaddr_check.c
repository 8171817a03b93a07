/*
 * procaddr_check.c: TEST program for check.sh. Loads fake_driver.so (a TEST FIXTURE) with
 * dlopen, finds its cuGetProcAddress_v2 with dlsym (as cudart does), asks for cuMemcpyHtoD
 * and cuMemcpyDtoH (CUDA 13.0; default and per-thread stream) and for cuMemcpyDtoH as CUDA
 * 14.0 would (a version newer than floor_shim's rule knows: the answer must pass
 * unwrapped), and copies ROUNDS (default 100) times through each answer. Prints the copies
 * made through the CUDA 13.0 answers, the fake driver's call count and a checksum: the
 * same with and without floor_shim.so.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*gpa_fn)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t);

int main(int argc, char **argv) {
	if (argc != 2) { fprintf(stderr, "usage: procaddr_check PATH/fake_driver.so\n"); return 2; }
	long rounds = getenv("ROUNDS") ? atol(getenv("ROUNDS")) : 100;
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
	gpa_fn gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
	uint64_t (*calls)(void) = (uint64_t (*)(void))dlsym(lib, "fake_calls");
	if (!gpa || !calls) { fprintf(stderr, "dlsym: %s\n", dlerror()); return 2; }
	htod_fn htod; dtoh_fn dtoh, dtoh_ptds, dtoh_new;
	int st;
	if (gpa("cuMemcpyHtoD", (void **)&htod, 13000, 0, &st) || gpa("cuMemcpyDtoH", (void **)&dtoh, 13000, 0, &st) ||
	    gpa("cuMemcpyDtoH", (void **)&dtoh_ptds, 13000, 2, &st) || gpa("cuMemcpyDtoH", (void **)&dtoh_new, 14000, 0, &st)) {
		fprintf(stderr, "cuGetProcAddress_v2 failed\n");
		return 2;
	}
	static unsigned char host[4096], dev[4096], back[4096];
	uint64_t h = 0xcbf29ce484222325ULL, copies = 0;
	for (long r = 0; r < rounds; r++) {
		for (int i = 0; i < 4096; i++) host[i] = (unsigned char)(i ^ r);
		if (htod((CUdeviceptr)(uintptr_t)dev, host, sizeof host)) return 2;
		if (dtoh(back, (CUdeviceptr)(uintptr_t)dev, sizeof back)) return 2;
		if (dtoh_ptds(back + 1, (CUdeviceptr)(uintptr_t)dev, sizeof back - 1)) return 2;
		if (dtoh_new(back + 2, (CUdeviceptr)(uintptr_t)dev, sizeof back - 2)) return 2;
		copies += 3;
		for (int i = 0; i < 4096; i++) h = (h ^ back[i]) * 0x100000001b3ULL;
	}
	printf("copies=%llu driver_calls=%llu checksum=%016llx\n", (unsigned long long)copies,
	       (unsigned long long)calls(), (unsigned long long)h);
	return 0;
}
