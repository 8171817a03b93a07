/* bench/trace-dwarf/no_fp.c: 1000 allocations of 1 MiB through outer -> middle -> inner ->
 * malloc, built without frame pointers (see run.sh). No CUDA call: the tracer is pointed at
 * a libcuda with --libcuda only to start. */
#include <stdlib.h>
#include <string.h>
static volatile int sink;
__attribute__((noinline)) char *inner(size_t n) { char *p = malloc(n); sink += p != 0; return p; }
__attribute__((noinline)) char *middle(size_t n) { char *p = inner(n); sink += 2; return p; }
__attribute__((noinline)) char *outer(size_t n) { char *p = middle(n); sink += 3; return p; }
int main(void) {
    for (int i = 0; i < 1000; i++) {
        char *p = outer(1 << 20);
        memset(p, 1, 4096);
        free(p);
    }
    return 0;
}
