#!/usr/bin/env bash
# Whether this machine's glibc lets pinwise's `free` hook read the chunk size itself
# (GLIBC_HEAP in crates/pinwise-preload/src/exports/libc_hooks.rs: dlsym(RTLD_NEXT, "free")
# must equal &__libc_free), or makes it call malloc_usable_size on every free. Prints both
# addresses and `equal=1|0`.
set -eu
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cat > "$T/lib.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
extern void __libc_free(void *);
void free(void *p) { ((void (*)(void *))dlsym(RTLD_NEXT, "free"))(p); }
__attribute__((constructor)) static void init(void) {
    void *n = dlsym(RTLD_NEXT, "free");
    void *l = (void *)&__libc_free;
    fprintf(stderr, "RTLD_NEXT free=%p &__libc_free=%p equal=%d\n", n, l, n == l);
}
EOF
printf '#include <stdlib.h>\nint main(void) { free(malloc(10)); return 0; }\n' > "$T/main.c"
cc -O2 -shared -fPIC -o "$T/lib.so" "$T/lib.c" -ldl
cc -O2 -o "$T/main" "$T/main.c"
ldd --version | head -1
LD_PRELOAD="$T/lib.so" "$T/main"
