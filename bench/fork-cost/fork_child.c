/* Forks N children (default 41, at most 1000) one at a time, each exiting at once (_exit), and
 * prints the medians of their minor page faults (from wait4) and of the CPU time each had used
 * when fork() returned in it (CLOCK_THREAD_CPUTIME_ID: the kernel's return and every atfork
 * child handler, pinwise's included). What pinwise's fork handler costs a DataLoader worker,
 * without the program around it:
 *   gcc -O2 -o fork_child bench/fork-cost/fork_child.c
 *   ./fork_child; PINWISE_DISABLE=1 LD_PRELOAD=target/release/libpinwise_preload.so ./fork_child */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX 1000

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 41;
    if (n < 1 || n > MAX) return 2;
    static long faults[MAX], cpu_ns[MAX];
    for (int i = 0; i < n; i++) {
        int fds[2];
        if (pipe(fds) != 0) return 3;
        pid_t pid = fork();
        if (pid < 0) return 4;
        if (pid == 0) {
            struct timespec t;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
            long ns = t.tv_sec * 1000000000L + t.tv_nsec;
            _exit(write(fds[1], &ns, sizeof ns) == sizeof ns ? 0 : 1);
        }
        int status;
        struct rusage ru;
        if (read(fds[0], &cpu_ns[i], sizeof cpu_ns[i]) != sizeof cpu_ns[i]) return 5;
        if (wait4(pid, &status, 0, &ru) != pid || status != 0) return 6;
        faults[i] = ru.ru_minflt;
        close(fds[0]);
        close(fds[1]);
    }
    qsort(faults, n, sizeof faults[0], cmp_long);
    qsort(cpu_ns, n, sizeof cpu_ns[0], cmp_long);
    printf("child_minflt_median=%ld child_cpu_at_return_us_median=%.1f (min %.1f max %.1f) n=%d\n",
           faults[n / 2], cpu_ns[n / 2] / 1e3, cpu_ns[0] / 1e3, cpu_ns[n - 1] / 1e3, n);
    return 0;
}
