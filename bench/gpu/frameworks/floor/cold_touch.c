/*
 * cold_touch.c: this host's price of a cold line on a cold page, the unit a copy hook pays
 * after the program's own work between copies (bench/results/hook-floor.md).
 *
 * Each round: write W MiB of a scratch buffer (memset: the program's work, e.g. numpy
 * filling an 8 MiB array between copies in cupy_pool), then K dependent reads (a pointer
 * chase), timed with rdtsc (lfence around), one line on each of K distinct 4 KiB pages of
 * a separate buffer (pages picked at random in 64 MiB, a random line in each, madvised
 * MADV_NOHUGEPAGE; the same K pages every round, as a hook's data would be). Reported: ns
 * per read, median (p10, p90) over rounds, after taking off the median of the same
 * measurement with no read (the timer's own cost, printed). Also, as controls, K lines on
 * ONE page (a cold line on a page whose translation one read brought in), and the K pages'
 * offsets in a region advised MADV_HUGEPAGE (distinct 4 KiB pages on fewer translations, if
 * the kernel gave huge pages: its AnonHugePages is printed).
 *
 * Env: COLD_W (MiB list, default "0 8 64"), COLD_K (default "1 4 16"), ROUNDS (default 101).
 * Output: a markdown table on stdout. x86-64 only.
 *   gcc -O2 -o cold_touch cold_touch.c
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>

#define PAGE 4096
#define LINE 64
#define REGION (64u << 20)
#define MAX_K 64
#define HUGE (2u << 20)

static uint64_t monotonic_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* AnonHugePages (kB) of the mapping holding `addr`, from /proc/self/smaps (-1: unknown). */
static long anon_huge_kb(void *addr) {
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f) return -1;
	char line[512];
	int in = 0;
	long kb = -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
			in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
			continue;
		}
		if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
	}
	fclose(f);
	return kb;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int cmp_u64(const void *a, const void *b) {
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Builds a chain of `k` nodes at `addr[0..k)` (each node holds the next one's address). */
static void *chain(void **addr, int k) {
	for (int i = 0; i < k; i++) *(void **)addr[i] = i + 1 < k ? addr[i + 1] : addr[0];
	return addr[0];
}

static unsigned char *scratch;
static size_t scratch_size;
static volatile uint64_t sink;

/* One round: the write, then `k` dependent reads from `start`; ticks of the reads. */
static uint64_t round_ticks(size_t w, void *start, int k, int salt) {
	if (w) memset(scratch, salt, w);
	__asm__ volatile("" : : "r"(scratch) : "memory");
	void *p = start;
	_mm_lfence();
	uint64_t t0 = __rdtsc();
	_mm_lfence();
	for (int i = 0; i < k; i++) p = *(void *volatile *)p;
	_mm_lfence();
	uint64_t t1 = __rdtsc();
	_mm_lfence();
	sink += (uintptr_t)p;
	return t1 - t0;
}

static void measure(uint64_t *out, int rounds, size_t w, void *start, int k) {
	for (int r = 0; r < rounds; r++) out[r] = round_ticks(w, start, k, r);
	qsort(out, rounds, sizeof *out, cmp_u64);
}

static void list(const char *env, const char *dflt, long *v, int *n, int max) {
	const char *s = getenv(env);
	if (!s || !*s) s = dflt;
	char buf[256];
	snprintf(buf, sizeof buf, "%s", s);
	*n = 0;
	for (char *t = strtok(buf, " ,"); t && *n < max; t = strtok(NULL, " ,")) v[(*n)++] = atol(t);
}

int main(void) {
	long ws[8], ks[8];
	int nw, nk;
	list("COLD_W", "0 8 64", ws, &nw, 8);
	list("COLD_K", "1 4 16", ks, &nk, 8);
	int rounds = getenv("ROUNDS") ? atoi(getenv("ROUNDS")) : 101;
	if (rounds < 3 || rounds > 100000) rounds = 101;
	size_t wmax = 0;
	for (int i = 0; i < nw; i++) {
		if (ws[i] < 0 || ws[i] > 4096) { fprintf(stderr, "COLD_W: 0 to 4096 MiB\n"); return 2; }
		if ((size_t)ws[i] << 20 > wmax) wmax = (size_t)ws[i] << 20;
	}
	for (int i = 0; i < nk; i++)
		if (ks[i] < 1 || ks[i] > MAX_K) { fprintf(stderr, "COLD_K: 1 to %d\n", MAX_K); return 2; }
	scratch_size = wmax;
	if (wmax) {
		scratch = malloc(wmax);
		if (!scratch) { perror("malloc"); return 2; }
		memset(scratch, 1, wmax);
	}
	unsigned char *region = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED) { perror("mmap"); return 2; }
	madvise(region, REGION, MADV_NOHUGEPAGE);
	/* K distinct pages at random, a random line in each. */
	void *pages[MAX_K], *lines[MAX_K];
	size_t used[MAX_K];
	for (int i = 0; i < MAX_K; i++) {
		size_t pg;
		int dup;
		do {
			pg = next_rand() % (REGION / PAGE);
			dup = 0;
			for (int j = 0; j < i; j++) dup |= used[j] == pg;
		} while (dup);
		used[i] = pg;
		pages[i] = region + pg * PAGE + (next_rand() % (PAGE / LINE)) * LINE;
	}
	/* The same page offsets in a region advised MADV_HUGEPAGE (2 MiB aligned): distinct
	 * 4 KiB pages, fewer translations (if the kernel gave huge pages: AnonHugePages). */
	unsigned char *huge_map = mmap(NULL, REGION + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (huge_map == MAP_FAILED) { perror("mmap"); return 2; }
	unsigned char *huge = (unsigned char *)(((uintptr_t)huge_map + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
	madvise(huge, REGION, MADV_HUGEPAGE);
	void *hpages[MAX_K];
	for (int i = 0; i < MAX_K; i++) {
		hpages[i] = huge + ((unsigned char *)pages[i] - region);
		*(volatile unsigned char *)hpages[i] = 0;
	}
	long huge_kb = anon_huge_kb(huge);
	/* K distinct lines of one page (another page of the region), in random order. */
	size_t one;
	int dup;
	do {
		one = next_rand() % (REGION / PAGE);
		dup = 0;
		for (int j = 0; j < MAX_K; j++) dup |= used[j] == one;
	} while (dup);
	for (int i = 0; i < MAX_K; i++) lines[i] = region + one * PAGE + (size_t)i * LINE;
	for (int i = MAX_K - 1; i > 0; i--) {
		int j = (int)(next_rand() % (uint64_t)(i + 1));
		void *t = lines[i]; lines[i] = lines[j]; lines[j] = t;
	}

	uint64_t t_origin = __rdtsc(), ns_origin = monotonic_ns();
	uint64_t *v = malloc(sizeof *v * (size_t)rounds);
	if (!v) return 2;
	printf("| layout | W MiB written before | K reads | ns per read, median | p10 | p90 | timer ns (K=0) |\n");
	printf("|---|---|---|---|---|---|---|\n");
	double rate = 0;
	struct row { int layout, k; long w; uint64_t med, p10, p90, base; } rows[3 * 8 * 8];
	int nrows = 0;
	void **chains[3] = { pages, lines, hpages };
	for (int layout = 0; layout < 3; layout++)
		for (int iw = 0; iw < nw; iw++) {
			size_t w = (size_t)ws[iw] << 20;
			measure(v, rounds, w, pages[0], 0);
			uint64_t base = v[rounds / 2];
			for (int ik = 0; ik < nk; ik++) {
				int k = (int)ks[ik];
				void *start = chain(chains[layout], k);
				measure(v, rounds, w, start, k);
				rows[nrows++] = (struct row){ layout, k, ws[iw], v[rounds / 2], v[rounds / 10],
							      v[rounds - 1 - rounds / 10], base };
			}
		}
	uint64_t t_end = __rdtsc(), ns_end = monotonic_ns();
	rate = t_end > t_origin ? (double)(ns_end - ns_origin) / (double)(t_end - t_origin) : 1.0;
	for (int i = 0; i < nrows; i++) {
		struct row *r = &rows[i];
		double per = rate / r->k;
		double sub = (double)r->base;
		static const char *const names[3] = { "K pages, a line each", "K lines, one page",
						      "K pages, a line each, THP region" };
		printf("| %s | %ld | %d | %.1f | %.1f | %.1f | %.1f |\n", names[r->layout],
		       r->w, r->k, ((double)r->med - sub) * per, ((double)r->p10 - sub) * per,
		       ((double)r->p90 - sub) * per, sub * rate);
	}
	printf("\n%d rounds per row; %.4f ns per tick (against CLOCK_MONOTONIC); chase pages in a %u MiB "
	       "MADV_NOHUGEPAGE region; the THP region's AnonHugePages: %ld kB (0: no huge pages given, "
	       "its rows are 4 KiB pages too)\n", rounds, rate, REGION >> 20, huge_kb);
	return 0;
}
