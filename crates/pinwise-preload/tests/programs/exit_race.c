/* Process exit while CUDA work is under way, as a JAX (PJRT) program ends (pinwise-preload's
 * tests; built against the libcuda stand-in, a TEST FIXTURE).
 *
 * 16 worker threads loop: each has its own stream and pinned staging buffers
 * (cuMemHostAlloc), copies asynchronously through them, allocates and frees pinned and
 * malloc'd memory, and makes synchronous copies from pageable memory, all through entry
 * points found with cuGetProcAddress_v2. Errors are ignored (after a teardown every call
 * fails). The main thread does a fixed computation, prints its checksum (stdout carries only
 * that), waits until every worker has made some rounds, and then, by argv[1]:
 *
 *   exit      calls exit(0) with the workers still running;
 *   teardown  calls exit(0); the program's atexit handler tears a "client" down the way
 *             PJRT's destructor does: destroys its streams, then frees the pinned staging
 *             buffers that were copied on them asynchronously, then releases the primary
 *             context (destroying every stream and event), while the workers go on
 *             allocating, freeing and copying without streams;
 *   threadexit the workers end their loops as the main thread calls exit(0); each, on its
 *             way out (a pthread key destructor, as thread-local caches do), destroys its
 *             stream and then frees the pinned buffers it copied on asynchronously.
 *
 * Destroying a stream before freeing host memory that was copied on it is legal CUDA: the
 * handle is dead afterwards, and the real driver may crash if anyone passes it again. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "standin_cuda.h"

#define WORKERS 16
#define STAGING 4
#define STAGE_BYTES (256 * 1024)

typedef CUresult (*host_alloc_fn)(void **, size_t, unsigned int);
typedef CUresult (*free_host_fn)(void *);
typedef CUresult (*htod_async_fn)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*dtoh_async_fn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*stream_create_fn)(CUstream *, unsigned int);
typedef CUresult (*stream_destroy_fn)(CUstream);
typedef CUresult (*stream_sync_fn)(CUstream);

static host_alloc_fn p_host_alloc;
static free_host_fn p_free_host;
static htod_async_fn p_htod_async;
static dtoh_async_fn p_dtoh_async;
static htod_fn p_htod;
static stream_create_fn p_stream_create;
static stream_destroy_fn p_stream_destroy;
static stream_sync_fn p_stream_sync;

static CUcontext ctx;
static CUdeviceptr dev;
static const char *mode = "exit";
static volatile int stop;
/* teardown: the workers stop using their streams (which die with the context). */
static volatile int streams_off;
static int rounds_done[WORKERS];
static pthread_key_t worker_key;

static void *proc(const char *name) {
    void *f = NULL;
    CUdriverProcAddressQueryResult st;
    if (cuGetProcAddress_v2(name, &f, 12000, 0, &st) != 0 || f == NULL) {
        fprintf(stderr, "cuGetProcAddress_v2(%s) failed\n", name);
        exit(2);
    }
    return f;
}

/* What a worker owns: a stream and staging buffers copied on it asynchronously. */
struct worker {
    int id;
    CUstream stream;
    void *staging[STAGING];
};

/* The worker's teardown (threadexit): stream first, then the buffers copied on it. */
static void worker_teardown(void *arg) {
    struct worker *w = arg;
    p_stream_destroy(w->stream);
    for (int i = 0; i < STAGING; i++) p_free_host(w->staging[i]);
}

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    struct worker *w = calloc(1, sizeof *w);
    w->id = id;
    cuCtxSetCurrent(ctx);
    p_stream_create(&w->stream, CU_STREAM_NON_BLOCKING);
    for (int i = 0; i < STAGING; i++) p_host_alloc(&w->staging[i], STAGE_BYTES, 0);
    if (strcmp(mode, "threadexit") == 0) pthread_setspecific(worker_key, w);
    CUdeviceptr mine = dev + (CUdeviceptr)id * STAGE_BYTES;
    for (unsigned r = 0; !stop; r++) {
        int streams = !streams_off;
        void *stage = w->staging[r % STAGING];
        if (stage && streams) {
            memset(stage, (int)(r + id), 4096);
            p_htod_async(mine, stage, STAGE_BYTES, w->stream);
            p_dtoh_async(stage, mine, STAGE_BYTES, w->stream);
            if (r % 3 == 0) p_stream_sync(w->stream);
        }
        void *tmp = NULL;
        if (p_host_alloc(&tmp, 4096 * (1 + (r + id) % 16), 0) == 0 && tmp) {
            memset(tmp, 1, 4096);
            if (streams) p_htod_async(mine, tmp, 4096, w->stream);
            p_free_host(tmp);
        }
        unsigned char *heap = malloc(8192 + 64 * (r % 32));
        if (heap) {
            memset(heap, (int)r, 8192);
            p_htod(mine, heap, 8192);
            free(heap);
        }
        __atomic_store_n(&rounds_done[id], r + 1, __ATOMIC_RELEASE);
    }
    return NULL; /* threadexit: the key's destructor tears the worker down */
}

/* The "client" torn down at exit in the teardown variant. */
static CUstream client_streams[2];
static void *client_staging[2][STAGING];
/* Copied on the legacy default stream (a handle that never dangles), freed after the
 * context is gone (the driver then answers an error; pinwise must not use an event that
 * died with the context to wait for those copies). */
static void *client_late_free;

static void client_teardown(void) {
    if (strcmp(mode, "teardown") != 0) return;
    for (int s = 0; s < 2; s++) p_stream_destroy(client_streams[s]);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < STAGING; i++) p_free_host(client_staging[s][i]);
    /* The workers' streams die with the context: they stop using them first (each finishes
     * a round begun after the flag; 2 s at most). */
    int seen[WORKERS];
    for (int i = 0; i < WORKERS; i++) seen[i] = __atomic_load_n(&rounds_done[i], __ATOMIC_ACQUIRE);
    streams_off = 1;
    for (int i = 0; i < WORKERS; i++)
        for (int waited = 0;
             waited < 2000 && __atomic_load_n(&rounds_done[i], __ATOMIC_ACQUIRE) < seen[i] + 2;
             waited++)
            usleep(1000);
    cuDevicePrimaryCtxRelease_v2(0);
    p_free_host(client_late_free);
    /* More calls after the context is gone, as late threads make them. */
    void *late = NULL;
    p_host_alloc(&late, 4096, 0);
    p_free_host(late);
}

int main(int argc, char **argv) {
    if (argc > 1) mode = argv[1];
    CUdevice d;
    if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&ctx, d) ||
        cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "no context\n");
        return 2;
    }
    p_host_alloc = (host_alloc_fn)proc("cuMemHostAlloc");
    p_free_host = (free_host_fn)proc("cuMemFreeHost");
    p_htod_async = (htod_async_fn)proc("cuMemcpyHtoDAsync");
    p_dtoh_async = (dtoh_async_fn)proc("cuMemcpyDtoHAsync");
    p_htod = (htod_fn)proc("cuMemcpyHtoD");
    p_stream_create = (stream_create_fn)proc("cuStreamCreate");
    p_stream_destroy = (stream_destroy_fn)proc("cuStreamDestroy");
    p_stream_sync = (stream_sync_fn)proc("cuStreamSynchronize");
    if (cuMemAlloc_v2(&dev, (size_t)WORKERS * STAGE_BYTES)) return 2;
    pthread_key_create(&worker_key, worker_teardown);
    atexit(client_teardown);

    /* The client: two streams, staging buffers copied on them asynchronously. The checksum
     * of what came back is the program's output. */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int s = 0; s < 2; s++) {
        if (p_stream_create(&client_streams[s], CU_STREAM_NON_BLOCKING)) return 2;
        for (int i = 0; i < STAGING; i++) {
            unsigned char *p = NULL;
            if (p_host_alloc((void **)&p, STAGE_BYTES, 0) || !p) return 2;
            client_staging[s][i] = p;
            for (size_t k = 0; k < STAGE_BYTES; k++) p[k] = (unsigned char)(k * 7 + s + i);
            if (p_htod_async(dev, p, STAGE_BYTES, client_streams[s])) return 2;
            if (p_stream_sync(client_streams[s])) return 2;
            memset(p, 0, STAGE_BYTES);
            if (p_dtoh_async(p, dev, STAGE_BYTES, client_streams[s])) return 2;
            if (p_stream_sync(client_streams[s])) return 2;
            h = fnv1a(p, STAGE_BYTES, h);
        }
    }
    if (p_host_alloc(&client_late_free, STAGE_BYTES, 0) || !client_late_free) return 2;
    memset(client_late_free, 3, STAGE_BYTES);
    if (p_htod_async(dev, client_late_free, STAGE_BYTES, 0) || p_stream_sync(0)) return 2;
    printf("checksum %016llx\n", (unsigned long long)h);

    pthread_t t[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i)) return 2;
    for (int i = 0; i < WORKERS; i++)
        while (__atomic_load_n(&rounds_done[i], __ATOMIC_ACQUIRE) < 3) usleep(200);
    printf("workers running: %d\n", WORKERS);
    fflush(stdout);
    if (strcmp(mode, "threadexit") == 0) stop = 1;
    exit(0);
}
