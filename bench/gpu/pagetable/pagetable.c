/*
 * pagetable.c: GPU memory consumed by pinned host memory (issue 18, item 1).
 *
 *   pagetable MODE SIZE_MIB NPROCS
 *
 * forks NPROCS children (before any CUDA call), each with its own CUDA context on device 0,
 * then creates an observer context in the parent. When every context exists and is
 * synchronised, the parent reads cuMemGetInfo (device-wide free memory), then lets the
 * children pin ONE AT A TIME, SIZE_MIB MiB each, reading cuMemGetInfo after each child has
 * pinned and synchronised (so each child's GPU cost is measured alone), and again after each
 * child has copied its whole buffer to the device once (in 256 MiB pieces into a device
 * buffer allocated before the baseline: that shows whether mappings appear lazily on use).
 * MODE:
 *   hostalloc      cuMemHostAlloc(size, 0), private to each child
 *   reg4k          mmap(MAP_PRIVATE|MAP_ANONYMOUS) + madvise(MADV_NOHUGEPAGE) +
 *                  cuMemHostRegister: 4 KiB pages, private to each child
 *   reghugetlb     mmap(MAP_HUGETLB) 2 MiB pages (needs vm.nr_hugepages reserved) +
 *                  cuMemHostRegister, private
 *   regthp         mmap + madvise(MADV_HUGEPAGE) + first touch + cuMemHostRegister; how much
 *                  really came as huge pages is read from /proc/self/smaps_rollup and printed
 *   shared4k       ONE memfd of SIZE_MIB made by the parent, mapped MAP_SHARED and
 *                  cuMemHostRegister'ed by every child: the same physical pages registered
 *                  NPROCS times (what several processes sharing a staging buffer do today)
 *   sharedhugetlb  the same with memfd_create(MFD_HUGETLB)
 * Prints CSV lines (header with `#`):
 *   row,mode,size_bytes,nprocs,proc,pin_s,copy_s,gpu_after_pin_bytes,gpu_after_copy_bytes,huge_bytes
 *   total,mode,size_bytes,nprocs,-,pin_s_sum,copy_s_sum,gpu_total_after_pins,gpu_total_after_copies,leftover_after_exit
 * gpu_* are drops of device-wide free memory (bytes). Exit status 0 on success, 3 when the
 * memory for MODE cannot be had (e.g. no huge pages), 1 on a CUDA or system error.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MAP_HUGETLB
#define MAP_HUGETLB 0x40000
#endif

#define CK(x)                                                                          \
  do {                                                                                 \
    CUresult r_ = (x);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                          \
      const char *n_ = "?";                                                            \
      cuGetErrorName(r_, &n_);                                                         \
      fprintf(stderr, "pid %d: %s failed: %s (%d)\n", (int)getpid(), #x, n_, (int)r_); \
      _exit(1);                                                                        \
    }                                                                                  \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void put(int fd, const void *p, size_t n) {
  if (write(fd, p, n) != (ssize_t)n) { perror("write"); _exit(1); }
}
static int get(int fd, void *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)p + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static long long anon_huge_bytes(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  long long kb = -1;
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "AnonHugePages: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

struct result { double pin_s, copy_s; long long huge_bytes; int status; };

static const size_t PIECE = 256u << 20;

static void child(const char *mode, size_t size, int shmfd, int cmd, int rep) {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr dbuf;
  struct result res = {0, 0, -1, 0};
  char c;
  void *p = NULL;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuMemAlloc(&dbuf, PIECE));
  CK(cuCtxSynchronize());
  put(rep, "r", 1);
  if (get(cmd, &c, 1)) _exit(1); /* 'p': pin */

  double t0 = now();
  if (!strcmp(mode, "hostalloc")) {
    CK(cuMemHostAlloc(&p, size, 0));
  } else {
    int flags = MAP_ANONYMOUS | MAP_PRIVATE, fd = -1;
    if (!strcmp(mode, "reghugetlb")) flags |= MAP_HUGETLB;
    if (!strncmp(mode, "shared", 6)) { flags = MAP_SHARED; fd = shmfd; }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, fd, 0);
    if (p == MAP_FAILED) {
      fprintf(stderr, "pid %d: mmap %zu bytes (%s): %s\n", (int)getpid(), size, mode, strerror(errno));
      res.status = 3;
      put(rep, &res, sizeof res);
      _exit(3);
    }
    if (!strcmp(mode, "reg4k")) madvise(p, size, MADV_NOHUGEPAGE);
    if (!strcmp(mode, "regthp")) {
      if (madvise(p, size, MADV_HUGEPAGE)) perror("madvise(MADV_HUGEPAGE)");
      for (size_t off = 0; off < size; off += 4096) ((volatile char *)p)[off] = 1;
    }
    CUresult r = cuMemHostRegister(p, size, 0);
    if (r != CUDA_SUCCESS) {
      const char *n = "?";
      cuGetErrorName(r, &n);
      fprintf(stderr, "pid %d: cuMemHostRegister %zu bytes (%s): %s\n", (int)getpid(), size, mode, n);
      res.status = 1;
      put(rep, &res, sizeof res);
      _exit(1);
    }
  }
  CK(cuCtxSynchronize());
  res.pin_s = now() - t0;
  res.huge_bytes = anon_huge_bytes();
  put(rep, &res, sizeof res);

  if (get(cmd, &c, 1)) _exit(1); /* 'c': copy the whole buffer once */
  t0 = now();
  for (size_t off = 0; off < size; off += PIECE) {
    size_t n = size - off < PIECE ? size - off : PIECE;
    CK(cuMemcpyHtoD(dbuf, (char *)p + off, n));
  }
  CK(cuCtxSynchronize());
  res.copy_s = now() - t0;
  put(rep, &res, sizeof res);

  if (get(cmd, &c, 1)) _exit(1); /* 'q' */
  _exit(0); /* the driver and the kernel free everything at exit; the parent checks that */
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s hostalloc|reg4k|reghugetlb|regthp|shared4k|sharedhugetlb SIZE_MIB NPROCS\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  size_t size = (size_t)strtoull(argv[2], NULL, 10) << 20;
  int n = atoi(argv[3]);
  if (size == 0 || n < 1 || n > 64) { fprintf(stderr, "bad size or process count\n"); return 2; }
  int shmfd = -1;
  if (!strncmp(mode, "shared", 6)) {
    unsigned fl = strcmp(mode, "sharedhugetlb") ? 0 : MFD_HUGETLB;
    shmfd = memfd_create("pagetable", fl);
    if (shmfd < 0 || ftruncate(shmfd, (off_t)size)) {
      fprintf(stderr, "memfd %zu bytes (%s): %s\n", size, mode, strerror(errno));
      return 3;
    }
    if (fl) { /* reserve now: a hugetlb memfd fails at fault time otherwise (SIGBUS) */
      void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, shmfd, 0);
      if (p == MAP_FAILED) { fprintf(stderr, "hugetlb memfd: %s\n", strerror(errno)); return 3; }
      munmap(p, size);
    }
  }
  int cmd[64], rep[64];
  pid_t pid[64];
  for (int i = 0; i < n; i++) {
    int a[2], b[2];
    if (pipe(a) || pipe(b)) { perror("pipe"); return 1; }
    pid[i] = fork();
    if (pid[i] < 0) { perror("fork"); return 1; }
    if (pid[i] == 0) {
      close(a[1]); close(b[0]);
      child(mode, size, shmfd, a[0], b[1]);
    }
    close(a[0]); close(b[1]);
    cmd[i] = a[1]; rep[i] = b[0];
  }
  CUdevice dev;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  char c;
  for (int i = 0; i < n; i++)
    if (get(rep[i], &c, 1)) { fprintf(stderr, "child %d did not start\n", i); return 1; }
  size_t free0, freei, total, freec;
  CK(cuCtxSynchronize());
  CK(cuMemGetInfo(&free0, &total));
  printf("# device total %zu bytes, free before pinning %zu\n", total, free0);
  printf("#row,mode,size_bytes,nprocs,proc,pin_s,copy_s,gpu_after_pin_bytes,gpu_after_copy_bytes,huge_bytes\n");
  double pin_sum = 0, copy_sum = 0;
  size_t prev = free0;
  int status = 0;
  long long after_pins = 0;
  for (int i = 0; i < n; i++) {
    struct result r;
    put(cmd[i], "p", 1);
    if (get(rep[i], &r, sizeof r) || r.status) { status = r.status ? r.status : 1; break; }
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&freei, &total));
    put(cmd[i], "c", 1);
    struct result r2;
    if (get(rep[i], &r2, sizeof r2)) { status = 1; break; }
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&freec, &total));
    printf("row,%s,%zu,%d,%d,%.4f,%.4f,%lld,%lld,%lld\n", mode, size, n, i, r.pin_s, r2.copy_s,
           (long long)prev - (long long)freei, (long long)freei - (long long)freec, r.huge_bytes);
    fflush(stdout);
    pin_sum += r.pin_s;
    copy_sum += r2.copy_s;
    after_pins += (long long)prev - (long long)freei;
    prev = freec;
  }
  for (int i = 0; i < n; i++) { put(cmd[i], "q", 1); close(cmd[i]); }
  for (int i = 0; i < n; i++) waitpid(pid[i], NULL, 0);
  /* the children's contexts are gone: free memory must come back to (about) free0 plus the
     children's context memory; leftover is what did not come back relative to the baseline */
  size_t free_end;
  usleep(200000);
  CK(cuMemGetInfo(&free_end, &total));
  if (status == 0)
    printf("total,%s,%zu,%d,-,%.4f,%.4f,%lld,%lld,%lld\n", mode, size, n, pin_sum, copy_sum, after_pins,
           (long long)free0 - (long long)prev, (long long)free0 - (long long)free_end);
  return status;
}
