// CUDA C workload for pinwise-preload's GPU script (bench/gpu/preload/run.sh), built twice:
// with the shared cudart (`nvcc -cudart shared`) and the static one (`-cudart static`).
//
// Phases, each with its own call sites:
//   A  hot pinned requests:  4 x cudaMallocHost(64 MiB), 12 rounds of H2D, kernel, D2H each
//   B  cold pinned requests: 8 x cudaHostAlloc(32 MiB, default flags), one round each
//   C  hot pageable buffer:  malloc(256 MiB), 10 rounds
//   D  cold pageable:        16 x malloc(16 MiB), one H2D each
//   E  mapped pinned:        cudaHostAlloc(1 MiB, cudaHostAllocMapped), a kernel writes it
//                            through its device pointer (pinned semantics must hold)
// stdout: one checksum line per phase (a run under pinwise must print the same bytes).
// stderr: `time_ms A=.. B=.. C=.. D=.. E=.. total=..` (the phases, CUDA init excluded) and
// `pinned_requested_peak_bytes=N` (the most pinned memory the program asks for at once).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,              \
                    cudaGetErrorString(e_));                                           \
            exit(2);                                                                   \
        }                                                                              \
    } while (0)

static const size_t MiB = 1 << 20;

__global__ void bump(unsigned char *d, size_t n, unsigned char by) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = (unsigned char)(d[i] * 3 + by);
}

__global__ void write_mapped(unsigned char *d, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = (unsigned char)(i * 7 + 1);
}

static double now_ms() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static uint64_t hash(const unsigned char *p, size_t n, uint64_t h) {
    const uint64_t *w = (const uint64_t *)p;
    for (size_t i = 0; i < n / 8; i++) h = (h ^ w[i]) * 0x100000001b3ULL;
    for (size_t i = n / 8 * 8; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    uint64_t *w = (uint64_t *)p;
    for (size_t i = 0; i < n / 8; i++) w[i] = (i + seed) * 0x9e3779b97f4a7c15ULL;
}

static uint64_t rounds(unsigned char *host, unsigned char *dev, size_t n, int count,
                       cudaStream_t s, uint64_t h) {
    for (int r = 0; r < count; r++) {
        CHECK(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, s));
        bump<<<1024, 256, 0, s>>>(dev, n, (unsigned char)r);
        CHECK(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        h = hash(host, n, h);
    }
    return h;
}

__attribute__((noinline)) static unsigned char *hot_pinned(size_t n) {
    void *p;
    CHECK(cudaMallocHost(&p, n));
    return (unsigned char *)p;
}

__attribute__((noinline)) static unsigned char *cold_pinned(size_t n) {
    void *p;
    CHECK(cudaHostAlloc(&p, n, cudaHostAllocDefault));
    return (unsigned char *)p;
}

int main(void) {
    unsigned char *dev;
    cudaStream_t s;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc((void **)&dev, 256 * MiB));
    CHECK(cudaStreamCreate(&s));
    double t0 = now_ms(), t[6];

    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < 4; i++) {
        unsigned char *p = hot_pinned(64 * MiB);
        fill(p, 64 * MiB, i);
        h = rounds(p, dev, 64 * MiB, 12, s, h);
        CHECK(cudaFreeHost(p));
    }
    printf("A hot-pinned %016llx\n", (unsigned long long)h);
    t[0] = now_ms();

    h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < 8; i++) {
        unsigned char *p = cold_pinned(32 * MiB);
        fill(p, 32 * MiB, 100 + i);
        h = rounds(p, dev, 32 * MiB, 1, s, h);
        CHECK(cudaFreeHost(p));
    }
    printf("B cold-pinned %016llx\n", (unsigned long long)h);
    t[1] = now_ms();

    unsigned char *big = (unsigned char *)malloc(256 * MiB);
    fill(big, 256 * MiB, 7);
    h = rounds(big, dev, 256 * MiB, 10, s, 0xcbf29ce484222325ULL);
    free(big);
    printf("C hot-pageable %016llx\n", (unsigned long long)h);
    t[2] = now_ms();

    h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < 16; i++) {
        unsigned char *p = (unsigned char *)malloc(16 * MiB);
        fill(p, 16 * MiB, 200 + i);
        CHECK(cudaMemcpy(dev, p, 16 * MiB, cudaMemcpyHostToDevice));
        free(p);
    }
    CHECK(cudaMemcpy(&h, dev + 12345, sizeof h, cudaMemcpyDeviceToHost));
    printf("D cold-pageable %016llx\n", (unsigned long long)h);
    t[3] = now_ms();

    unsigned char *mapped, *mapped_dev;
    CHECK(cudaHostAlloc((void **)&mapped, MiB, cudaHostAllocMapped));
    CHECK(cudaHostGetDevicePointer((void **)&mapped_dev, mapped, 0));
    write_mapped<<<64, 256, 0, s>>>(mapped_dev, MiB);
    CHECK(cudaStreamSynchronize(s));
    printf("E mapped %016llx\n", (unsigned long long)hash(mapped, MiB, 0xcbf29ce484222325ULL));
    CHECK(cudaFreeHost(mapped));
    t[4] = now_ms();

    fprintf(stderr, "time_ms A=%.1f B=%.1f C=%.1f D=%.1f E=%.1f total=%.1f\n", t[0] - t0,
            t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3], t[4] - t0);
    fprintf(stderr, "pinned_requested_peak_bytes=%zu\n", 64 * MiB);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(dev));
    return 0;
}
