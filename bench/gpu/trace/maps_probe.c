/*
 * maps_probe.c: how the real driver's pinned and registered host memory looks in
 * /proc/self/smaps (issue 11, item 5: what `pinwise trace --pid` can learn at attach time).
 * Allocates host memory of each kind pinwise meets, then prints, for each, the smaps entry
 * that holds it (header line, VmFlags, Locked) and /proc/self/status's VmLck and VmPin.
 * Controls: a MAP_SHARED|MAP_ANONYMOUS mapping and a private one, neither pinned.
 * Run by bench/gpu/trace/maps_probe.sh on the GPU machine; driver API only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "cuda_driver_min.h"

#define CHECK(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "%s: %d\n", #x, (int)r_); exit(2); } } while (0)
#define MIB ((size_t)1 << 20)

static void show(const char *what, const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    unsigned long a = (unsigned long)p, lo, hi;
    int in = 0;
    char perms[8];
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && strchr(line, '-') < strchr(line, ' ')) {
            in = lo <= a && a < hi;
            if (in) printf("%s %#lx: %s", what, a, line);
            continue;
        }
        if (in && (!strncmp(line, "VmFlags", 7) || !strncmp(line, "Locked", 6) || !strncmp(line, "Rss", 3) ||
                   !strncmp(line, "Shared", 6) || !strncmp(line, "Anonymous", 9)))
            printf("%s   %s", what, line);
    }
    if (f) fclose(f);
}

static void status(const char *when) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmLck", 5) || !strncmp(line, "VmPin", 5)) printf("status %s %s", when, line);
    if (f) fclose(f);
}

static char *touched(int flags, size_t n) {
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) exit(4);
    memset(p, 7, n);
    return p;
}

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    status("start");
    char *shared_ctl = touched(MAP_SHARED, 4 * MIB);
    char *private_ctl = touched(MAP_PRIVATE, 4 * MIB);
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    status("after-context");
    void *alloc_host, *host_alloc, *host_big, *small;
    CHECK(cuMemAllocHost(&alloc_host, 4 * MIB));
    CHECK(cuMemHostAlloc(&host_alloc, 4 * MIB, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    CHECK(cuMemHostAlloc(&host_big, 64 * MIB, 0));
    CHECK(cuMemAllocHost(&small, 4096));
    char *reg = touched(MAP_PRIVATE, 8 * MIB);
    CHECK(cuMemHostRegister(reg, 8 * MIB, 0));
    char *reg_malloc = malloc(8 * MIB);
    memset(reg_malloc, 3, 8 * MIB);
    CHECK(cuMemHostRegister(reg_malloc, 8 * MIB, 0));
    char *unreg = touched(MAP_PRIVATE, 8 * MIB);
    CHECK(cuMemHostRegister(unreg, 8 * MIB, 0));
    CHECK(cuMemHostUnregister(unreg));
    status("after-pinning");
    show("shared_control", shared_ctl);
    show("private_control", private_ctl);
    show("cuMemAllocHost_4M", alloc_host);
    show("cuMemHostAlloc_4M_portable_devicemap", host_alloc);
    show("cuMemHostAlloc_64M", host_big);
    show("cuMemAllocHost_4K", small);
    show("registered_mmap_8M", reg);
    show("registered_malloc_8M", reg_malloc);
    show("unregistered_again_8M", unreg);
    CHECK(cuMemFreeHost(host_big));
    status("after-free-64M");
    return 0;
}
