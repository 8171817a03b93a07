/*
 * floor_shim.c: the cheapest copy hook, to measure the floor of "bookkeeping per intercepted
 * copy" (issue 10: <= 100 ns median in the framework programs) in the same programs on the
 * same host as pinwise. An LD_PRELOAD library, C only, x86-64 only, no pinwise code.
 *
 * It intercepts the driver's copy entry points the way pinwise-preload does
 * (crates/pinwise-preload/src/exports/driver.rs, hooks/procaddr.rs, exports/dl.rs):
 * - it exports them (programs linked with -lcuda);
 * - it answers `dlsym(handle, NAME)` of a hooked name with its wrapper (cudart 12/13 and
 *   frameworks dlopen libcuda.so.1 and dlsym cuGetProcAddress_v2; ctypes does dlsym too);
 *   every other dlsym is a tail jump to the real one, so RTLD_NEXT keeps its meaning;
 * - it wraps cuGetProcAddress/_v2 and replaces an answer for a hooked base name by the
 *   wrapper of that variant (by identity with libcuda's export, else by the driver's rule
 *   for CUDA versions up to 13.0, as pinwise does; otherwise the answer passes unwrapped).
 * Hooked copies (and their per-thread-stream variants): cuMemcpyHtoD_v2, cuMemcpyDtoH_v2,
 * cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2, cuMemcpy, cuMemcpyAsync. Hooked to fill the
 * range table: cuMemHostAlloc, cuMemAllocHost_v2, cuMemHostRegister(_v2), and to empty it:
 * cuMemFreeHost, cuMemHostUnregister. Everything is forwarded unchanged, with the driver's
 * return value; nothing else of the program's is touched.
 *
 * Per intercepted copy: rdtsc at entry, the level's bookkeeping, rdtsc again, the difference
 * into a histogram (after the second read: outside the figure), then the forward.
 * FLOOR_LEVEL:
 *   0  nothing between the two reads (the measurement's own floor);
 *   1  the least a recorder needs: look the host address up in a static, page-aligned
 *      table of at most 64 ranges (pinned allocations and registrations), bump a shared
 *      counter (on the table's page), push a 32-byte event (address, size, kind,
 *      timestamp) into a per-thread ring in static TLS (initial-exec);
 *   2  level 1 plus a read and a write of one line on each of FLOOR_PAGES (default 8, at
 *      most 256) more pages, each in its own heap block: a design that touches N more pages.
 * FLOOR_PARTS (levels 1 and 2; default tcr): which of level 1's parts are done: t the table
 * lookup, c the counter, r the ring (to see what each costs).
 * At exit (destructor) a process that reached any hook writes one line to stderr, or
 * appends it to the file FLOOR_OUT (created 0600, not through a symlink):
 *   floor level=L copies=C median_ns=M p10=.. p90=.. mean_ns=.. parts=.. read_ns=.. ns_per_tick=..
 *     pid=.. pages=.. counted=.. ranges=.. ranges_added=.. range_overflow=.. dlsym_wraps=..
 *     procaddr_wraps=.. procaddr_rule=.. procaddr_ours=.. procaddr_passed=..
 * copies: timed copies (every intercepted one); ticks become ns at the rate measured against
 * CLOCK_MONOTONIC over the process's life. Like pinwise's hook_ns_net_median, the figure
 * includes about one counter read (read_ns: the median cost of one read, measured as
 * pinwise does); the histogram has pinwise's buckets (4 ticks wide up to 512, then 2^(1/16)).
 * A forked child starts with an empty histogram.
 *   gcc -O2 -shared -fPIC -o floor_shim.so floor_shim.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#if !defined(__x86_64__)
#error "floor_shim.c is x86-64 only (rdtsc, the dlsym trampoline)"
#endif

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
#define CUDA_ERROR_NOT_INITIALIZED 3
#define PER_THREAD_FLAG 2ULL
#define RULES_KNOWN_UP_TO 13000

#define RELAXED __ATOMIC_RELAXED
#define LOAD(p) __atomic_load_n((p), RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), RELAXED)
#define ADD(p, v) __atomic_fetch_add((p), (v), RELAXED)

/* ---------------- the hooked variants ---------------- */

enum {
	V_HTOD, V_HTOD_PTDS, V_DTOH, V_DTOH_PTDS,
	V_HTOD_ASYNC, V_HTOD_ASYNC_PTSZ, V_DTOH_ASYNC, V_DTOH_ASYNC_PTSZ,
	V_MEMCPY, V_MEMCPY_PTDS, V_MEMCPY_ASYNC, V_MEMCPY_ASYNC_PTSZ,
	V_HOST_ALLOC, V_ALLOC_HOST, V_FREE_HOST, V_REGISTER, V_REGISTER_V2, V_UNREGISTER,
	V_GPA, V_GPA_V2, NV
};

struct variant {
	const char *symbol, *base;
	int since, per_thread;
};

static const struct variant V[NV] = {
	[V_HTOD] = { "cuMemcpyHtoD_v2", "cuMemcpyHtoD", 3020, 0 },
	[V_HTOD_PTDS] = { "cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoD", 7000, 1 },
	[V_DTOH] = { "cuMemcpyDtoH_v2", "cuMemcpyDtoH", 3020, 0 },
	[V_DTOH_PTDS] = { "cuMemcpyDtoH_v2_ptds", "cuMemcpyDtoH", 7000, 1 },
	[V_HTOD_ASYNC] = { "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync", 3020, 0 },
	[V_HTOD_ASYNC_PTSZ] = { "cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyHtoDAsync", 7000, 1 },
	[V_DTOH_ASYNC] = { "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync", 3020, 0 },
	[V_DTOH_ASYNC_PTSZ] = { "cuMemcpyDtoHAsync_v2_ptsz", "cuMemcpyDtoHAsync", 7000, 1 },
	[V_MEMCPY] = { "cuMemcpy", "cuMemcpy", 4000, 0 },
	[V_MEMCPY_PTDS] = { "cuMemcpy_ptds", "cuMemcpy", 7000, 1 },
	[V_MEMCPY_ASYNC] = { "cuMemcpyAsync", "cuMemcpyAsync", 4000, 0 },
	[V_MEMCPY_ASYNC_PTSZ] = { "cuMemcpyAsync_ptsz", "cuMemcpyAsync", 7000, 1 },
	[V_HOST_ALLOC] = { "cuMemHostAlloc", "cuMemHostAlloc", 2020, 0 },
	[V_ALLOC_HOST] = { "cuMemAllocHost_v2", "cuMemAllocHost", 3020, 0 },
	[V_FREE_HOST] = { "cuMemFreeHost", "cuMemFreeHost", 2000, 0 },
	[V_REGISTER] = { "cuMemHostRegister", "cuMemHostRegister", 4000, 0 },
	[V_REGISTER_V2] = { "cuMemHostRegister_v2", "cuMemHostRegister", 6050, 0 },
	[V_UNREGISTER] = { "cuMemHostUnregister", "cuMemHostUnregister", 4000, 0 },
	[V_GPA] = { "cuGetProcAddress", "cuGetProcAddress", 11030, 0 },
	[V_GPA_V2] = { "cuGetProcAddress_v2", "cuGetProcAddress", 12000, 0 },
};

/* Our wrappers (defined below, with the exports: relocated before any code runs) and the
 * real functions (0: not known yet). */
static void *const wrappers[NV];
static void *real_fn[NV];
/* The loaded libcuda, once known. */
static void *libcuda;

/* ---------------- the real dlsym ---------------- */

typedef void *(*dlsym_fn)(void *, const char *);
static void *no_dlsym(void *h, const char *n) { (void)h; (void)n; return NULL; }
/* Read by the trampoline's tail jump: never NULL once floor_dlsym_decide ran. */
__attribute__((visibility("hidden"))) dlsym_fn floor_real_dlsym;

static dlsym_fn real_dlsym(void) {
	dlsym_fn f = __atomic_load_n(&floor_real_dlsym, __ATOMIC_ACQUIRE);
	if (f) return f;
	static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5" };
	for (size_t i = 0; i < 2 && !f; i++) f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
	if (!f) f = no_dlsym;
	__atomic_store_n(&floor_real_dlsym, f, __ATOMIC_RELEASE);
	return f;
}

static int is_wrapper(void *p) {
	for (int i = 0; i < NV; i++)
		if (p && p == wrappers[i]) return 1;
	return 0;
}

/* Keeps `f` as the real function of variant `i` unless one is known already. */
static void offer_real(int i, void *f) {
	if (!f || is_wrapper(f)) return;
	void *expected = NULL;
	__atomic_compare_exchange_n(&real_fn[i], &expected, f, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* The handle of the library holding `addr`, without loading anything. */
static void *handle_of(void *addr) {
	Dl_info info;
	if (!addr || !dladdr(addr, &info) || !info.dli_fname) return NULL;
	return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
}

static void *libcuda_handle(void) {
	void *h = __atomic_load_n(&libcuda, __ATOMIC_ACQUIRE);
	if (h) return h;
	h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (h) __atomic_store_n(&libcuda, h, __ATOMIC_RELEASE);
	return h;
}

/* The real function of variant `i`: offered by dlsym or cuGetProcAddress, else the next
 * definition after this library, else libcuda's own export (NULL: no libcuda loaded). */
static void *real(int i) {
	void *f = __atomic_load_n(&real_fn[i], __ATOMIC_ACQUIRE);
	if (__builtin_expect(f != NULL, 1)) return f;
	f = real_dlsym()(RTLD_NEXT, V[i].symbol);
	if (!f || is_wrapper(f)) {
		void *h = libcuda_handle();
		f = h ? real_dlsym()(h, V[i].symbol) : NULL;
	}
	if (!f || is_wrapper(f)) return NULL;
	offer_real(i, f);
	return __atomic_load_n(&real_fn[i], __ATOMIC_ACQUIRE);
}

/* ---------------- counters of how copies were reached ---------------- */

static uint64_t n_dlsym_wraps, n_procaddr_wraps, n_procaddr_rule, n_procaddr_passed, n_procaddr_ours;

/* ---------------- the measurement (its own page) ---------------- */

#define HOOK_BUCKETS 256
#define LINEAR_TICKS 512
#define BUCKET_TICKS 4
#define LINEAR_BUCKETS (LINEAR_TICKS / BUCKET_TICKS)

static struct {
	int mode; /* the level and its parts, read by every hook before its first counter read */
	int level;
	uint64_t origin_ticks, origin_ns;
	uint64_t bucket[HOOK_BUCKETS];
	uint64_t ticks_sum;
	/* lower bounds of the logarithmic buckets, ticks */
	uint64_t log_lo[HOOK_BUCKETS - LINEAR_BUCKETS + 1];
} M __attribute__((aligned(4096)));

static inline uint64_t rdtsc(void) { return __rdtsc(); }

static uint64_t monotonic_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t bucket_of(uint64_t ticks) {
	if (ticks < LINEAR_TICKS) return ticks / BUCKET_TICKS;
	size_t lo = 0, hi = HOOK_BUCKETS - LINEAR_BUCKETS; /* log_lo[lo] <= ticks */
	if (ticks >= M.log_lo[hi - 1]) return HOOK_BUCKETS - 1;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (M.log_lo[mid] <= ticks) lo = mid; else hi = mid;
	}
	return LINEAR_BUCKETS + lo;
}

static double bucket_mid(size_t i) {
	if (i < LINEAR_BUCKETS) return i * BUCKET_TICKS + BUCKET_TICKS / 2.0;
	size_t k = i - LINEAR_BUCKETS;
	return (M.log_lo[k] + M.log_lo[k + 1]) / 2.0;
}

static inline void sample(uint64_t ticks) {
	ADD(&M.bucket[bucket_of(ticks)], 1);
	ADD(&M.ticks_sum, ticks);
}

/* ---------------- level 1: the range table, the counter, the ring ---------------- */

#define MAX_RANGES 64
#define MAX_PAGES 256

static struct {
	uint32_t n;
	uint32_t overflow;
	uint64_t copies;
	uint64_t added;
	struct { uintptr_t lo, hi; } r[MAX_RANGES];
	uint64_t *pages[MAX_PAGES]; /* level 2: one line on each of `npages` pages */
	uint32_t npages;
} T __attribute__((aligned(4096)));
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

struct event {
	uint64_t addr, size, kind, ts;
};
#define RING 256
static __thread struct {
	uint64_t head;
	uint64_t pad[7];
	struct event ev[RING];
} ring __attribute__((tls_model("initial-exec"), aligned(64)));

static void table_add(void *p, size_t n) {
	if (!p) return;
	pthread_mutex_lock(&table_lock);
	uint32_t k = T.n;
	if (k < MAX_RANGES) {
		STORE(&T.r[k].lo, (uintptr_t)p);
		STORE(&T.r[k].hi, (uintptr_t)p + n);
		__atomic_store_n(&T.n, k + 1, __ATOMIC_RELEASE);
		T.added++;
	} else {
		T.overflow++;
	}
	pthread_mutex_unlock(&table_lock);
}

static void table_remove(void *p) {
	if (!p) return;
	pthread_mutex_lock(&table_lock);
	uint32_t k = T.n;
	for (uint32_t i = 0; i < k; i++) {
		if (T.r[i].lo == (uintptr_t)p) {
			/* A reader may see the last entry twice or a stale one meanwhile: it only
			 * labels an event. */
			STORE(&T.r[i].lo, LOAD(&T.r[k - 1].lo));
			STORE(&T.r[i].hi, LOAD(&T.r[k - 1].hi));
			__atomic_store_n(&T.n, k - 1, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&table_lock);
}

/* 1 + the index of the range holding `a`, or 0. */
static inline uint64_t lookup(uintptr_t a) {
	uint32_t n = __atomic_load_n(&T.n, __ATOMIC_ACQUIRE);
	if (n > MAX_RANGES) n = MAX_RANGES;
	for (uint32_t i = 0; i < n; i++)
		if (a - LOAD(&T.r[i].lo) < LOAD(&T.r[i].hi) - LOAD(&T.r[i].lo)) return i + 1;
	return 0;
}

/* The parts of level 1 (FLOOR_PARTS: t, c, r; all by default). */
#define PART_TABLE 0x10
#define PART_COUNTER 0x20
#define PART_RING 0x40

/* `mode`: the level (low 4 bits) and the parts. */
__attribute__((noinline)) static void bookkeep(int mode, uintptr_t host, uintptr_t other, size_t n,
					       int kind, uint64_t ts) {
	uint64_t hit = 0;
	if (mode & PART_TABLE) {
		hit = lookup(host);
		if (!hit && other) hit = lookup(other);
	}
	if (mode & PART_COUNTER) ADD(&T.copies, 1);
	if (mode & PART_RING) {
		uint64_t h = ring.head;
		struct event *e = &ring.ev[h & (RING - 1)];
		e->addr = host;
		e->size = n;
		e->kind = (uint64_t)kind | hit << 8;
		e->ts = ts;
		ring.head = h + 1;
	}
	if ((mode & 0xf) >= 2) {
		uint32_t np = LOAD(&T.npages);
		for (uint32_t k = 0; k < np; k++) {
			uint64_t *p = LOAD(&T.pages[k]);
			STORE(p, LOAD(p) + 1);
		}
	}
}

/* The hook's timed part: entry read (t0 given), the level's work, the second read. */
#define TIMED(host, other, n, kind)                                  \
	do {                                                         \
		int mode_ = LOAD(&M.mode);                           \
		uint64_t t0_ = rdtsc();                              \
		if (mode_) bookkeep(mode_, (host), (other), (n), (kind), t0_); \
		uint64_t t1_ = rdtsc();                              \
		sample(t1_ - t0_);                                   \
	} while (0)

/* ---------------- the exported copy wrappers ---------------- */

typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*htod_async_fn)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t);
typedef CUresult (*dtoh_async_fn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*unified_fn)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*unified_async_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);

#define FORWARD(id, type, ...)                                       \
	do {                                                         \
		type f_ = (type)real(id);                            \
		if (!f_) return CUDA_ERROR_NOT_INITIALIZED;          \
		return f_(__VA_ARGS__);                              \
	} while (0)

#define HTOD(name, id)                                                                 \
	CUresult name(CUdeviceptr dst, const void *src, size_t n) {                    \
		TIMED((uintptr_t)src, 0, n, id);                                       \
		FORWARD(id, htod_fn, dst, src, n);                                     \
	}
#define HTOD_ASYNC(name, id)                                                           \
	CUresult name(CUdeviceptr dst, const void *src, size_t n, CUstream s) {        \
		TIMED((uintptr_t)src, 0, n, id);                                       \
		FORWARD(id, htod_async_fn, dst, src, n, s);                            \
	}
#define DTOH(name, id)                                                                 \
	CUresult name(void *dst, CUdeviceptr src, size_t n) {                          \
		TIMED((uintptr_t)dst, 0, n, id);                                       \
		FORWARD(id, dtoh_fn, dst, src, n);                                     \
	}
#define DTOH_ASYNC(name, id)                                                           \
	CUresult name(void *dst, CUdeviceptr src, size_t n, CUstream s) {              \
		TIMED((uintptr_t)dst, 0, n, id);                                       \
		FORWARD(id, dtoh_async_fn, dst, src, n, s);                            \
	}
/* A unified copy: either side may be host memory; both are looked up. */
#define UNIFIED(name, id)                                                              \
	CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n) {                    \
		TIMED((uintptr_t)src, (uintptr_t)dst, n, id);                          \
		FORWARD(id, unified_fn, dst, src, n);                                  \
	}
#define UNIFIED_ASYNC(name, id)                                                        \
	CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {        \
		TIMED((uintptr_t)src, (uintptr_t)dst, n, id);                          \
		FORWARD(id, unified_async_fn, dst, src, n, s);                         \
	}

HTOD(cuMemcpyHtoD_v2, V_HTOD)
HTOD(cuMemcpyHtoD_v2_ptds, V_HTOD_PTDS)
DTOH(cuMemcpyDtoH_v2, V_DTOH)
DTOH(cuMemcpyDtoH_v2_ptds, V_DTOH_PTDS)
HTOD_ASYNC(cuMemcpyHtoDAsync_v2, V_HTOD_ASYNC)
HTOD_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, V_HTOD_ASYNC_PTSZ)
DTOH_ASYNC(cuMemcpyDtoHAsync_v2, V_DTOH_ASYNC)
DTOH_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, V_DTOH_ASYNC_PTSZ)
UNIFIED(cuMemcpy, V_MEMCPY)
UNIFIED(cuMemcpy_ptds, V_MEMCPY_PTDS)
UNIFIED_ASYNC(cuMemcpyAsync, V_MEMCPY_ASYNC)
UNIFIED_ASYNC(cuMemcpyAsync_ptsz, V_MEMCPY_ASYNC_PTSZ)

/* ---------------- allocations and registrations (fill the table) ---------------- */

typedef CUresult (*host_alloc_fn)(void **, size_t, unsigned);
typedef CUresult (*alloc_host_fn)(void **, size_t);
typedef CUresult (*free_host_fn)(void *);
typedef CUresult (*register_fn)(void *, size_t, unsigned);
typedef CUresult (*unregister_fn)(void *);

CUresult cuMemHostAlloc(void **pp, size_t n, unsigned flags) {
	host_alloc_fn f = (host_alloc_fn)real(V_HOST_ALLOC);
	if (!f) return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = f(pp, n, flags);
	if (rc == 0 && pp) table_add(*pp, n);
	return rc;
}

CUresult cuMemAllocHost_v2(void **pp, size_t n) {
	alloc_host_fn f = (alloc_host_fn)real(V_ALLOC_HOST);
	if (!f) return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = f(pp, n);
	if (rc == 0 && pp) table_add(*pp, n);
	return rc;
}

CUresult cuMemFreeHost(void *p) {
	free_host_fn f = (free_host_fn)real(V_FREE_HOST);
	if (!f) return CUDA_ERROR_NOT_INITIALIZED;
	table_remove(p);
	return f(p);
}

CUresult cuMemHostRegister(void *p, size_t n, unsigned flags) {
	register_fn f = (register_fn)real(V_REGISTER);
	if (!f) return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = f(p, n, flags);
	if (rc == 0) table_add(p, n);
	return rc;
}

CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
	register_fn f = (register_fn)real(V_REGISTER_V2);
	if (!f) return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = f(p, n, flags);
	if (rc == 0) table_add(p, n);
	return rc;
}

CUresult cuMemHostUnregister(void *p) {
	unregister_fn f = (unregister_fn)real(V_UNREGISTER);
	if (!f) return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = f(p);
	if (rc == 0) table_remove(p);
	return rc;
}

/* ---------------- cuGetProcAddress ---------------- */

/* After a successful lookup: our wrapper instead of a hooked variant's answer. */
static void wrap_answer(const char *name, void **pfn, int version, uint64_t flags) {
	if (!name || !pfn || !*pfn) return;
	void *answer = *pfn;
	int cand[4], nc = 0;
	for (int i = 0; i < NV && nc < 4; i++)
		if (strcmp(V[i].base, name) == 0) cand[nc++] = i;
	if (!nc) return;
	if (is_wrapper(answer)) {
		/* The driver's table refers to the exported name, which is ours. */
		ADD(&n_procaddr_ours, 1);
		return;
	}
	if (!__atomic_load_n(&libcuda, __ATOMIC_ACQUIRE)) {
		void *h = handle_of(answer);
		if (h) __atomic_store_n(&libcuda, h, __ATOMIC_RELEASE);
	}
	void *lib = __atomic_load_n(&libcuda, __ATOMIC_ACQUIRE);
	int chosen = -1, by_rule = 0;
	for (int c = 0; c < nc && lib && chosen < 0; c++)
		if (real_dlsym()(lib, V[cand[c]].symbol) == answer) chosen = cand[c];
	if (chosen < 0 && version <= RULES_KNOWN_UP_TO) {
		/* The driver's rule: the newest variant not newer than the version asked for;
		 * the per-thread one when asked for and there is one. */
		int per_thread = (flags & PER_THREAD_FLAG) != 0, best_d = -1, best_p = -1;
		for (int c = 0; c < nc; c++) {
			const struct variant *v = &V[cand[c]];
			if (v->since > version) continue;
			int *best = v->per_thread ? &best_p : &best_d;
			if (*best < 0 || V[*best].since < v->since) *best = cand[c];
		}
		chosen = per_thread && best_p >= 0 ? best_p : best_d;
		by_rule = chosen >= 0;
	}
	/* As pinwise: the first real function known for the variant is the one forwarded to
	 * (the same variant either way). */
	if (chosen >= 0) offer_real(chosen, answer);
	if (chosen < 0 || !__atomic_load_n(&real_fn[chosen], __ATOMIC_ACQUIRE)) {
		ADD(&n_procaddr_passed, 1);
		return;
	}
	ADD(by_rule ? &n_procaddr_rule : &n_procaddr_wraps, 1);
	*pfn = wrappers[chosen];
}

typedef CUresult (*gpa_fn)(const char *, void **, int, uint64_t);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, uint64_t, int *);

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
	gpa_fn f = (gpa_fn)real(V_GPA);
	if (!f) return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = f(symbol, pfn, version, flags);
	if (rc == 0) wrap_answer(symbol, pfn, version, flags);
	return rc;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
	gpa_v2_fn f = (gpa_v2_fn)real(V_GPA_V2);
	if (!f) return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = f(symbol, pfn, version, flags, status);
	if (rc == 0) wrap_answer(symbol, pfn, version, flags);
	return rc;
}

/* ---------------- dlsym ---------------- */

/* Our wrapper for a hooked name looked up in a library handle (its real function kept), or
 * NULL: the trampoline then jumps to the real dlsym with the caller's own arguments and
 * return address (RTLD_NEXT and RTLD_DEFAULT lookups always go there: under
 * RTLD_DEFAULT the preloaded export is found first anyway). */
__attribute__((visibility("hidden"), used)) void *floor_dlsym_decide(void *handle, const char *name) {
	dlsym_fn rd = real_dlsym();
	if (!name || handle == RTLD_DEFAULT || handle == RTLD_NEXT) return NULL;
	int i = -1;
	for (int k = 0; k < NV; k++)
		if (strcmp(V[k].symbol, name) == 0) { i = k; break; }
	if (i < 0) return NULL;
	void *found = rd(handle, name);
	if (!found) return NULL; /* the real dlsym says why */
	if (is_wrapper(found)) return found;
	if (!__atomic_load_n(&libcuda, __ATOMIC_ACQUIRE)) {
		void *h = handle_of(found);
		if (h) __atomic_store_n(&libcuda, h, __ATOMIC_RELEASE);
	}
	offer_real(i, found);
	if (!__atomic_load_n(&real_fn[i], __ATOMIC_ACQUIRE)) return NULL;
	ADD(&n_dlsym_wraps, 1);
	return wrappers[i];
}

__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	"dlsym:\n"
	"	endbr64\n"
	"	push %rdi\n"
	"	push %rsi\n"
	"	sub $8, %rsp\n"
	"	call floor_dlsym_decide\n"
	"	add $8, %rsp\n"
	"	pop %rsi\n"
	"	pop %rdi\n"
	"	test %rax, %rax\n"
	"	jz 1f\n"
	"	ret\n"
	"1:\n"
	"	jmp *floor_real_dlsym(%rip)\n"
	".size dlsym, .-dlsym\n");

/* ---------------- the wrappers' table ---------------- */

static void *const wrappers[NV] = {
	[V_HTOD] = (void *)cuMemcpyHtoD_v2, [V_HTOD_PTDS] = (void *)cuMemcpyHtoD_v2_ptds,
	[V_DTOH] = (void *)cuMemcpyDtoH_v2, [V_DTOH_PTDS] = (void *)cuMemcpyDtoH_v2_ptds,
	[V_HTOD_ASYNC] = (void *)cuMemcpyHtoDAsync_v2,
	[V_HTOD_ASYNC_PTSZ] = (void *)cuMemcpyHtoDAsync_v2_ptsz,
	[V_DTOH_ASYNC] = (void *)cuMemcpyDtoHAsync_v2,
	[V_DTOH_ASYNC_PTSZ] = (void *)cuMemcpyDtoHAsync_v2_ptsz,
	[V_MEMCPY] = (void *)cuMemcpy, [V_MEMCPY_PTDS] = (void *)cuMemcpy_ptds,
	[V_MEMCPY_ASYNC] = (void *)cuMemcpyAsync,
	[V_MEMCPY_ASYNC_PTSZ] = (void *)cuMemcpyAsync_ptsz,
	[V_HOST_ALLOC] = (void *)cuMemHostAlloc, [V_ALLOC_HOST] = (void *)cuMemAllocHost_v2,
	[V_FREE_HOST] = (void *)cuMemFreeHost, [V_REGISTER] = (void *)cuMemHostRegister,
	[V_REGISTER_V2] = (void *)cuMemHostRegister_v2,
	[V_UNREGISTER] = (void *)cuMemHostUnregister,
	[V_GPA] = (void *)cuGetProcAddress, [V_GPA_V2] = (void *)cuGetProcAddress_v2,
};

/* ---------------- load, fork, exit ---------------- */

static uint64_t env_u64(const char *name, uint64_t dflt, uint64_t max) {
	const char *s = getenv(name);
	if (!s || !*s) return dflt;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end) {
		fprintf(stderr, "floor_shim: %s=%s is not a number; using %llu\n", name, s,
			(unsigned long long)dflt);
		return dflt;
	}
	return v > max ? max : v;
}

static void child_after_fork(void) {
	for (size_t i = 0; i < HOOK_BUCKETS; i++) STORE(&M.bucket[i], 0);
	STORE(&M.ticks_sum, 0);
}

__attribute__((constructor)) static void on_load(void) {
	real_dlsym();
	double x = LINEAR_TICKS;
	for (size_t k = 0; k < sizeof M.log_lo / sizeof M.log_lo[0]; k++) {
		M.log_lo[k] = (uint64_t)(x + 0.5);
		x *= 1.0442737824274138; /* 2^(1/16) */
	}
	int level = (int)env_u64("FLOOR_LEVEL", 0, 2);
	if (level >= 2) {
		uint32_t np = (uint32_t)env_u64("FLOOR_PAGES", 8, MAX_PAGES);
		for (uint32_t k = 0; k < np; k++) {
			/* Its own block, a page-aligned line inside it: a page no other line uses. */
			unsigned char *b = malloc(2 * 4096);
			if (!b) break;
			uint64_t *p = (uint64_t *)(((uintptr_t)b + 4095) & ~(uintptr_t)4095);
			*p = 0;
			T.pages[k] = p;
			T.npages = k + 1;
		}
	}
	pthread_atfork(NULL, NULL, child_after_fork);
	M.origin_ticks = rdtsc();
	M.origin_ns = monotonic_ns();
	int parts = PART_TABLE | PART_COUNTER | PART_RING;
	const char *ps = getenv("FLOOR_PARTS");
	if (ps && *ps) {
		parts = 0;
		for (const char *c = ps; *c; c++) {
			if (*c == 't') parts |= PART_TABLE;
			else if (*c == 'c') parts |= PART_COUNTER;
			else if (*c == 'r') parts |= PART_RING;
			else {
				fprintf(stderr, "floor_shim: FLOOR_PARTS=%s: letters t, c, r only; using tcr\n", ps);
				parts = PART_TABLE | PART_COUNTER | PART_RING;
				break;
			}
		}
	}
	M.level = level;
	STORE(&M.mode, level ? level | parts : 0);
}

/* ns per tick since load (waits until 1 ms has passed, at most 2 ms). */
static double ns_per_tick(void) {
	for (;;) {
		uint64_t t = rdtsc(), ns = monotonic_ns();
		if (t <= M.origin_ticks || ns <= M.origin_ns) return 1.0;
		if (ns - M.origin_ns >= 1000000) return (double)(ns - M.origin_ns) / (double)(t - M.origin_ticks);
	}
}

/* One counter read, ticks: median of 9 runs of 32 back-to-back reads (as pinwise). */
static double read_ticks(void) {
	uint64_t runs[9];
	for (int r = 0; r < 9; r++) {
		uint64_t a = rdtsc();
		for (int k = 0; k < 32; k++) {
			uint64_t v = rdtsc();
			__asm__ volatile("" : : "r"(v));
		}
		runs[r] = rdtsc() - a;
	}
	for (int i = 1; i < 9; i++)
		for (int j = i; j > 0 && runs[j - 1] > runs[j]; j--) {
			uint64_t t = runs[j]; runs[j] = runs[j - 1]; runs[j - 1] = t;
		}
	return runs[4] / 33.0;
}

/* The bucket midpoint at quantile q, ticks (-1 without samples). */
static double quantile(const uint64_t *b, uint64_t total, double q) {
	if (!total) return -1;
	uint64_t seen = 0;
	for (size_t i = 0; i < HOOK_BUCKETS; i++) {
		seen += b[i];
		if ((double)seen >= q * (double)total) return bucket_mid(i);
	}
	return bucket_mid(HOOK_BUCKETS - 1);
}

__attribute__((destructor)) static void on_exit_write(void) {
	uint64_t b[HOOK_BUCKETS], total = 0;
	for (size_t i = 0; i < HOOK_BUCKETS; i++) total += b[i] = LOAD(&M.bucket[i]);
	/* A process that never reached a hook (a helper the program ran) says nothing. */
	if (!total && !LOAD(&T.added) && !LOAD(&n_dlsym_wraps) && !LOAD(&n_procaddr_wraps) &&
	    !LOAD(&n_procaddr_rule) && !LOAD(&n_procaddr_ours) && !LOAD(&n_procaddr_passed))
		return;
	double r = ns_per_tick();
	double med = quantile(b, total, 0.5), p10 = quantile(b, total, 0.1), p90 = quantile(b, total, 0.9);
	char parts[4] = "", *pp = parts;
	int mode = LOAD(&M.mode);
	if (mode & PART_TABLE) *pp++ = 't';
	if (mode & PART_COUNTER) *pp++ = 'c';
	if (mode & PART_RING) *pp++ = 'r';
	if (pp == parts) *pp++ = '-';
	*pp = 0;
	char line[512];
	int len = snprintf(line, sizeof line,
			   "floor level=%d copies=%llu median_ns=%.1f p10=%.1f p90=%.1f mean_ns=%.1f parts=%s "
			   "read_ns=%.2f ns_per_tick=%.5f pid=%d pages=%u counted=%llu ranges=%u "
			   "ranges_added=%llu range_overflow=%u dlsym_wraps=%llu procaddr_wraps=%llu "
			   "procaddr_rule=%llu procaddr_ours=%llu procaddr_passed=%llu\n",
			   M.level, (unsigned long long)total, med < 0 ? -1 : med * r,
			   p10 < 0 ? -1 : p10 * r, p90 < 0 ? -1 : p90 * r,
			   total ? (double)LOAD(&M.ticks_sum) * r / (double)total : -1, parts,
			   read_ticks() * r, r,
			   (int)getpid(), LOAD(&T.npages), (unsigned long long)LOAD(&T.copies), LOAD(&T.n),
			   (unsigned long long)LOAD(&T.added), LOAD(&T.overflow), (unsigned long long)LOAD(&n_dlsym_wraps),
			   (unsigned long long)LOAD(&n_procaddr_wraps),
			   (unsigned long long)LOAD(&n_procaddr_rule),
			   (unsigned long long)LOAD(&n_procaddr_ours),
			   (unsigned long long)LOAD(&n_procaddr_passed));
	if (len <= 0) return;
	if (len >= (int)sizeof line) len = sizeof line - 1;
	const char *path = getenv("FLOOR_OUT");
	int fd = 2, opened = 0;
	if (path && *path) {
		fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0) {
			fd = 2;
			(void)!write(2, "floor_shim: cannot open FLOOR_OUT; the line follows\n", 52);
		} else {
			opened = 1;
		}
	}
	(void)!write(fd, line, (size_t)len);
	if (opened) close(fd);
}
