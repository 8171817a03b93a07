/* Linked into a test program: the program's own `free` (delegating to glibc's), as programs
 * with a custom allocator have. pinwise's free hook is then bypassed, so pinwise must not
 * register the program's pageable memory. */
#include <stddef.h>

extern void __libc_free(void *p);

void free(void *p) { __libc_free(p); }
