/*
 * fake_driver.c: TEST FIXTURE for check.sh, not a driver. A library with the real driver's
 * cuGetProcAddress_v2 contract for three copy entry points, answering as libcuda does with
 * addresses that are not looked up through the dynamic symbol table: cuMemcpyHtoD with its
 * own export's address (taken inside the library: link with -Wl,-Bsymbolic-functions, so a
 * preloaded definition of the name does not replace it), cuMemcpyDtoH and its per-thread
 * variant with functions that are not exported at all. So floor_shim's wrapping by identity,
 * by the driver's rule, and its passing of a newer version's answer are exercised. "Device"
 * addresses are host addresses here; every call is counted (fake_calls).
 */
#include <stdint.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static uint64_t calls;

uint64_t fake_calls(void) { return __atomic_load_n(&calls, __ATOMIC_RELAXED); }

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
	__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
	memcpy((void *)(uintptr_t)dst, src, n);
	return 0;
}

static CUresult dtoh_internal(void *dst, CUdeviceptr src, size_t n) {
	__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return 0;
}

static CUresult dtoh_ptds_internal(void *dst, CUdeviceptr src, size_t n) {
	__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return 0;
}

/* Exported too, with another address than the answers: identity cannot match them. */
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return dtoh_internal(dst, src, n); }
CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return dtoh_ptds_internal(dst, src, n); }

CUresult cuGetProcAddress_v2(const char *name, void **pfn, int version, uint64_t flags, int *status) {
	void *f = NULL;
	if (!name || !pfn) return 1;
	if (!strcmp(name, "cuMemcpyHtoD")) f = (void *)cuMemcpyHtoD_v2;
	else if (!strcmp(name, "cuMemcpyDtoH")) f = (flags & 2) ? (void *)dtoh_ptds_internal : (void *)dtoh_internal;
	(void)version;
	*pfn = f;
	if (status) *status = f ? 0 : 1;
	return f ? 0 : 500;
}
