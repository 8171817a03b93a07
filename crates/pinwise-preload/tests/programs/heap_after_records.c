/* The program's malloc heap after many recorded allocations (pinwise-preload's
 * tests/own_heap.rs): 2,000 blocks of 1 MiB malloc'd, written and freed (each one recorded
 * by pinwise with its stack), and the bytes in use in glibc's heap before and after, on
 * stderr: `in_use before=<KiB> after=<KiB>`. No CUDA. stdout: a checksum. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes in use in glibc's heap (every arena's; chunks served by mmap left out), in KiB. */
static size_t in_use_kib(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks >> 10;
}

__attribute__((noinline)) static unsigned long round_trip(int i) {
    unsigned char *p = malloc(1 << 20);
    if (!p) abort();
    memset(p, i & 0xff, 4096);
    unsigned long s = p[i % 4096];
    free(p);
    return s;
}

int main(void) {
    /* One recorded block first: pinwise's state (and its drain thread) exists before
     * the first figure. */
    unsigned long sum = round_trip(1);
    size_t before = in_use_kib();
    for (int i = 0; i < 2000; i++) sum += round_trip(i);
    size_t after = in_use_kib();
    printf("sum %lu\n", sum);
    fprintf(stderr, "in_use before=%zu after=%zu\n", before, after);
    return 0;
}
