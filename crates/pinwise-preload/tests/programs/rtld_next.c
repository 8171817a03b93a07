/* A program that interposes a function of its own and finds the original with
 * dlsym(RTLD_NEXT), as profilers and sanitizers do, and looks symbols up in a library it
 * opens. pinwise intercepts dlsym: these answers must not change. No CUDA. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int puts(const char *s) {
    int (*next)(const char *) = (int (*)(const char *))dlsym(RTLD_NEXT, "puts");
    if (!next) return -1;
    fputs("[wrapped] ", stdout);
    return next(s);
}

int main(void) {
    puts("through RTLD_NEXT");
    void *m = dlopen("libm.so.6", RTLD_NOW);
    double (*cosine)(double) = (double (*)(double))dlsym(m, "cos");
    size_t (*len)(const char *) = (size_t (*)(const char *))dlsym(RTLD_DEFAULT, "strlen");
    printf("cos(0)=%.1f strlen=%zu missing=%s\n", cosine(0.0), len("pinwise"),
           dlsym(m, "no_such_symbol") ? "found" : "null");
    printf("dlerror says: %s\n", strstr(dlerror(), "no_such_symbol") ? "undefined symbol" : "?");
    printf("cuMemcpyHtoD_v2 in libm: %s\n", dlsym(m, "cuMemcpyHtoD_v2") ? "found" : "null");
    return 0;
}
