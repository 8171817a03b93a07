/* The cost pinwise-preload's malloc-family hooks add (no CUDA involved: it runs the same on
 * the dev VM and on the GPU machine).
 *
 * Phases, each printed as
 * `name<TAB>median ns<TAB>p10<TAB>p90<TAB>per<TAB>offset<TAB>threads<TAB>others_ms<TAB>binned_kib`
 * (per malloc+free pair, median over BATCHES batches of PAIRS pairs each; offset: the last
 * block's address modulo 4096, which tells two runs' heap layouts apart: glibc's calloc
 * clears and posix_memalign splits at different speeds depending on it; threads: the
 * process's threads after the phase, from /proc/self/task; others_ms: the CPU time the
 * process's other threads (pinwise's drain thread) used during the phase: work there
 * competes with the phase for the core and shows up in its figure; binned_kib: glibc's free
 * memory outside the top chunk after the phase (mallinfo2's fordblks - keepcost, all
 * arenas): a heap with free chunks in its bins serves a 4 KiB block by splitting one and
 * coalescing it again on free, dearer than from the top chunk):
 *   small64_cold, small4k_cold    malloc(64) / malloc(4096) + free, before any tracked
 *                                 allocation (pinwise has no state in the process yet)
 *   tracked_first                 one 1 MiB malloc + free (creates pinwise's state)
 *   small64, small4k, calloc4k,   the same small pairs after it (free now asks
 *   memalign4k                    malloc_usable_size), calloc, posix_memalign(64, 4096)
 *   tracked1m                     1 MiB malloc + free (recorded: event, free, and the stack
 *                                 unless PINWISE_STACKS=0)
 *   linked4k                      mi_malloc(4096) + mi_free: an allocator linked into the
 *                                 executable (here two functions of this program over
 *                                 glibc's own __libc_malloc/__libc_free, named as mimalloc's),
 *                                 which pinwise patches in place: the detour's cost
 *   linked4k_live                 the same while a 1 MiB block of that allocator is live
 *                                 (recorded: its free must be found, so mi_free checks)
 *   linked4k_malloc_only,         mi_malloc + __libc_free, __libc_malloc + mi_free: which of
 *   linked4k_free_only            the two patched entries costs what linked4k costs (last,
 *                                 so that the phases before keep their heap layout)
 * Before the phases after tracked1m the program waits (up to 20 s) until the other threads
 * are idle (less than 1 ms of CPU in 50 ms): the drain thread still handling tracked1m's
 * 2,020 recorded allocations would otherwise be measured as the untracked path's cost.
 * MALLOC_COST_SETTLE=0 leaves the wait out; MALLOC_COST_SKIP_TRACKED1M=1 leaves tracked1m out
 * (the linked phases then follow a single recorded allocation, tracked_first's).
 * Run it plainly, and with LD_PRELOAD=libpinwise_preload.so (PINWISE_MALLOC_HOOKS=0/1,
 * PINWISE_STACKS=0/1): the difference is the hooks' cost.
 *
 * MALLOC_COST_THREADS=N starts N idle threads first. glibc's malloc takes its arena's lock
 * (atomic instructions) only once the process has a second thread; blocks above tcache's
 * 1032 bytes (the 4 KiB phases) and every posix_memalign pay it. pinwise's state starts a
 * thread of its own (the drain thread) with the first tracked allocation, and any CUDA
 * program runs several threads (the driver's): a plain run with one idle thread is the
 * baseline that separates the hooks' own cost from that of glibc's multi-threaded mode.
 *
 * MALLOC_COST_PAD=N keeps one malloc(N) block live from the start: it moves every later
 * block, which shows how much the phases depend on the heap's layout alone (pinwise's own
 * allocations before main move the program's blocks too). */
#define _GNU_SOURCE
#include <dirent.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>

#define BATCHES 301
#define PAIRS 2000

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static volatile uintptr_t sink;
static uintptr_t last_block;

typedef void (*pair_fn)(size_t);

/* What every pair does with its block: writes it and keeps its address (so the compiler
 * keeps the call, and the phase's line shows the layout). */
static inline void use_block(char *p) {
    p[0] = 1;
    sink += (uintptr_t)p;
    last_block = (uintptr_t)p;
}

static void pair_malloc(size_t n) {
    char *p = malloc(n);
    use_block(p);
    free(p);
}

static void pair_calloc(size_t n) {
    char *p = calloc(1, n);
    sink += (uintptr_t)p + (uintptr_t)p[0];
    last_block = (uintptr_t)p;
    free(p);
}

static void pair_memalign(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n) != 0) abort();
    sink += (uintptr_t)p;
    last_block = (uintptr_t)p;
    free(p);
}

/* A "linked allocator": mimalloc's names, defined here (patched by pinwise like the real
 * ones). Not tail calls, so that their first bytes are a prologue pinwise can move. */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
static volatile int linked_calls;
__attribute__((noinline)) void *mi_malloc(size_t n) {
    void *p = __libc_malloc(n);
    linked_calls++;
    return p;
}
__attribute__((noinline)) void mi_free(void *p) {
    __libc_free(p);
    linked_calls++;
}

static void pair_linked(size_t n) {
    char *p = mi_malloc(n);
    use_block(p);
    mi_free(p);
}

/* The process's threads now (0 when /proc cannot be read). */
static int threads_now(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void pair_linked_malloc_only(size_t n) {
    char *p = mi_malloc(n);
    use_block(p);
    __libc_free(p);
}

static void pair_linked_free_only(size_t n) {
    char *p = __libc_malloc(n);
    use_block(p);
    mi_free(p);
}

/* CPU nanoseconds the process's other threads have used so far (each thread's CPU clock,
 * as pthread_getcpuclockid makes it from a thread id). */
static double others_cpu_ns(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    pid_t self = (pid_t)syscall(SYS_gettid);
    double ns = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid == self) continue;
        clockid_t c = (clockid_t)((~(unsigned)tid << 3) | 6); /* per-thread, scheduler clock */
        struct timespec ts;
        if (clock_gettime(c, &ts) == 0) ns += ts.tv_sec * 1e9 + ts.tv_nsec;
    }
    closedir(d);
    return ns;
}

/* Waits until the other threads use less than 1 ms of CPU in 50 ms (at most 20 s). */
static void settle_others(void) {
    for (int i = 0; i < 400; i++) {
        double a = others_cpu_ns();
        usleep(50000);
        if (others_cpu_ns() - a < 1e6) return;
    }
}

static void phase(const char *name, pair_fn f, size_t n, int batches, int pairs) {
    static double t[BATCHES];
    double others0 = others_cpu_ns();
    for (int b = 0; b < batches; b++) {
        double t0 = now_ns();
        for (int i = 0; i < pairs; i++) f(n);
        t[b] = (now_ns() - t0) / pairs;
    }
    qsort(t, batches, sizeof t[0], cmp);
    double others_ms = (others_cpu_ns() - others0) / 1e6;
    struct mallinfo2 mi = mallinfo2();
    printf("%s\t%.2f\t%.2f\t%.2f\tpair\t%u\t%d\t%.1f\t%zu\n", name, t[batches / 2],
           t[batches / 10], t[batches * 9 / 10], (unsigned)(last_block % 4096), threads_now(),
           others_ms, (mi.fordblks - mi.keepcost) >> 10);
}

static void *idle_thread(void *arg) {
    for (;;) pause();
    return arg;
}

int main(void) {
    const char *pad = getenv("MALLOC_COST_PAD");
    if (pad && atoi(pad) > 0) sink += (uintptr_t)malloc((size_t)atoi(pad));
    const char *threads = getenv("MALLOC_COST_THREADS");
    for (int i = threads ? atoi(threads) : 0; i > 0; i--) {
        pthread_t t;
        if (pthread_create(&t, NULL, idle_thread, NULL) != 0) abort();
    }
    /* Warm the allocator's caches. */
    for (int i = 0; i < 100000; i++) pair_malloc(64);
    phase("small64_cold", pair_malloc, 64, BATCHES, PAIRS);
    phase("small4k_cold", pair_malloc, 4096, BATCHES, PAIRS);
    phase("tracked_first", pair_malloc, 1 << 20, 1, 1);
    phase("small64", pair_malloc, 64, BATCHES, PAIRS);
    phase("small4k", pair_malloc, 4096, BATCHES, PAIRS);
    phase("calloc4k", pair_calloc, 4096, BATCHES, PAIRS);
    phase("memalign4k", pair_memalign, 4096, BATCHES, PAIRS);
    const char *skip = getenv("MALLOC_COST_SKIP_TRACKED1M");
    if (!skip || atoi(skip) == 0) phase("tracked1m", pair_malloc, 1 << 20, 101, 20);
    const char *settle = getenv("MALLOC_COST_SETTLE");
    if (!settle || atoi(settle) != 0) settle_others();
    phase("linked4k", pair_linked, 4096, BATCHES, PAIRS);
    {
        char *keep = mi_malloc(1 << 20);
        keep[0] = 1;
        phase("linked4k_live", pair_linked, 4096, BATCHES, PAIRS);
        mi_free(keep);
    }
    phase("linked4k_malloc_only", pair_linked_malloc_only, 4096, BATCHES, PAIRS);
    phase("linked4k_free_only", pair_linked_free_only, 4096, BATCHES, PAIRS);
    return 0;
}
