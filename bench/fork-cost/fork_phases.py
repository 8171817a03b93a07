"""A DataLoader-shaped program on the cudart stand-in (a TEST FIXTURE: its times are dev-VM
figures, never GPU ones), to see what pinwise changes in a parent that used CUDA and then
forks workers (issue 10: torch_dataloader.py's `train - iter_med` is longer under pinwise).

The parent: starts CUDA (cudaMalloc, cudaMemcpy from bytearrays), makes ALLOCS pageable
allocations of 64 KiB-880 KiB at a few Python sites (the interpreter's own blocks that
pinwise records while torch imports), keeps KEEP of them, and touches BALLAST_MIB MiB
(default 256: the resident memory torch and CUDA give the real program); then EPOCHS times what a
`DataLoader(num_workers=WORKERS, pin_memory=True)` iterator does:
  - forks WORKERS processes (multiprocessing, fork start method), each with an index queue;
  - a pin thread takes the workers' batches and copies each into a pinned block from its own
    cache (cudaHostAlloc for a new block, as PyTorch's caching host allocator does);
  - the main thread copies each pinned batch to the device (cudaMemcpy) and gives the block
    back; BATCHES batches of 64 items of 12 KiB (768 KiB);
  - then shuts the workers down (None on each index queue, join).
Then FORKS bare forks (child `os._exit(0)` at once), timed in the parent (fork_call: the call's
wall time, fork_cpu: the forking thread's CPU time in it, fork_wait: until the child was
reaped; medians), the child's minor faults from wait4.

stdout: one `k=v` line per epoch (`epoch=`), one `fork` line; times in ms:
  create   starting the workers (the WORKERS `Process.start`, forks included)
  fork_max the longest single `Process.start`
  wstart   the last worker's first instruction, from the iterator's start
  made     the first batch made in a worker, from the iterator's start
  recv     the first batch received by the pin thread
  pinned   the first batch pinned (its cudaHostAlloc and copy done)
  first    the first batch in the main thread
  batches  first batch to last in the main thread
  shutdown the workers' shutdown (join)
  total    the whole epoch
  p_minflt the parent's minor faults during the epoch; c_minflt the workers' (sum, from
           their own getrusage at their end); p_rss_kib, p_pte_kib, p_maps: the parent's
           resident memory, page tables and mappings before the epoch.
Usage: python3 fork_phases.py /path/to/libcudart.so"""
import ctypes
import os
import queue
import resource
import statistics
import sys
import threading
import time
import multiprocessing as mp

ALLOCS = int(os.environ.get("ALLOCS", "6500"))
KEEP = int(os.environ.get("KEEP", "120"))
EPOCHS = int(os.environ.get("EPOCHS", "3"))
WORKERS = int(os.environ.get("WORKERS", "4"))
BATCHES = int(os.environ.get("BATCHES", "60"))
FORKS = int(os.environ.get("FORKS", "20"))
# Resident memory of the parent's own (torch and CUDA's, in the real program), touched.
BALLAST_MIB = int(os.environ.get("BALLAST_MIB", "256"))
ITEM = 12 * 1024
PER_BATCH = 64

cudart = ctypes.CDLL(sys.argv[1])
cudart.cudaHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
cudart.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]


def ms(a, b):
    return (b - a) * 1e3


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def maps_count():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


# Allocation sites (the names matter only to pinwise's stacks).
def site_list(n):
    return [0] * (n // 8)


def site_bytes(n):
    return bytearray(n)


def site_join(n):
    return b"x" * n


SITES = [site_list, site_bytes, site_join]


def warm_up(dev):
    kept = []
    for i in range(ALLOCS):
        n = 64 * 1024 + (i * 7919) % (816 * 1024)
        b = SITES[i % len(SITES)](n)
        if i % (ALLOCS // KEEP or 1) == 0:
            kept.append(b)
    for i in range(8):
        b = bytearray(256 * 1024)
        b[0] = i
        view = (ctypes.c_char * len(b)).from_buffer(b)
        check(cudart.cudaMemcpy(dev, ctypes.addressof(view), len(b), 1), "cudaMemcpy")
    return kept


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} failed: {rc}")


def item(i):
    # 12 KiB from the index (the synthetic dataset's image).
    return (i.to_bytes(4, "little") * (ITEM // 4))


def worker(wid, index_q, data_q, t_iter):
    t = time.monotonic()
    data_q.put(("start", wid, t, 0))
    while True:
        r = index_q.get()
        if r is None:
            break
        b = r
        batch = b"".join(item(b * PER_BATCH + k) for k in range(PER_BATCH))
        data_q.put(("batch", b, time.monotonic(), batch))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    data_q.put(("end", wid, time.monotonic(), ru.ru_minflt))


class PinCache:
    """Pinned blocks by size, reused once given back (PyTorch's caching host allocator)."""

    def __init__(self):
        self.free = []
        self.lock = threading.Lock()

    def take(self, n):
        with self.lock:
            if self.free:
                return self.free.pop()
        p = ctypes.c_void_p()
        check(cudart.cudaHostAlloc(ctypes.byref(p), n, 0), "cudaHostAlloc")
        return p.value

    def give(self, p):
        with self.lock:
            self.free.append(p)


def epoch(dev, cache):
    ctx = mp.get_context("fork")
    marks = {}
    rss, pte, nmaps = status_kib("VmRSS"), status_kib("VmPTE"), maps_count()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    data_q = ctx.Queue()
    index_qs = [ctx.Queue() for _ in range(WORKERS)]
    procs = []
    longest = 0.0
    for w in range(WORKERS):
        p = ctx.Process(target=worker, args=(w, index_qs[w], data_q, t0), daemon=True)
        a = time.monotonic()
        p.start()
        longest = max(longest, ms(a, time.monotonic()))
        procs.append(p)
    marks["create"] = ms(t0, time.monotonic())
    out_q = queue.Queue()
    starts, ends, faults = [], [], []
    made = []

    def pin_loop():
        done = 0
        while done < WORKERS:
            kind, key, t, payload = data_q.get()
            if kind == "start":
                starts.append(t)
                continue
            if kind == "end":
                ends.append(t)
                faults.append(payload)
                done += 1
                continue
            made.append(t)
            if "recv" not in marks:
                marks["recv"] = ms(t0, time.monotonic())
            blk = cache.take(1 << 20)
            ctypes.memmove(blk, payload, len(payload))
            if "pinned" not in marks:
                marks["pinned"] = ms(t0, time.monotonic())
            out_q.put((key, blk, len(payload)))

    pin = threading.Thread(target=pin_loop, daemon=True)
    pin.start()
    sent = 0
    for _ in range(2 * WORKERS):
        if sent < BATCHES:
            index_qs[sent % WORKERS].put(sent)
            sent += 1
    got = 0
    t_first = None
    while got < BATCHES:
        key, blk, n = out_q.get()
        if t_first is None:
            t_first = time.monotonic()
        check(cudart.cudaMemcpy(dev, blk, n, 1), "cudaMemcpy")
        cache.give(blk)
        got += 1
        if sent < BATCHES:
            index_qs[sent % WORKERS].put(sent)
            sent += 1
    t_last = time.monotonic()
    for q in index_qs:
        q.put(None)
    pin.join()
    for p in procs:
        p.join()
    t_end = time.monotonic()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    marks.update(
        fork_max=longest,
        wstart=ms(t0, max(starts)),
        made=ms(t0, min(made)),
        first=ms(t0, t_first),
        batches=ms(t_first, t_last),
        shutdown=ms(t_last, t_end),
        total=ms(t0, t_end),
        p_minflt=ru1.ru_minflt - ru0.ru_minflt,
        c_minflt=sum(faults),
        p_rss_kib=rss,
        p_pte_kib=pte,
        p_maps=nmaps,
    )
    return marks


def bare_forks():
    calls, waits, faults, cpu = [], [], [], []
    for _ in range(FORKS):
        r0 = resource.getrusage(resource.RUSAGE_THREAD)
        a = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        b = time.monotonic()
        r1 = resource.getrusage(resource.RUSAGE_THREAD)
        cpu.append((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e3)
        _, status, ru = os.wait4(pid, 0)
        c = time.monotonic()
        if status != 0:
            raise SystemExit(f"fork child status {status}")
        calls.append(ms(a, b))
        waits.append(ms(a, c))
        faults.append(ru.ru_minflt)
    return {
        "fork_call": statistics.median(calls),
        "fork_cpu": statistics.median(cpu),
        "fork_wait": statistics.median(waits),
        "fork_child_minflt": statistics.median(faults),
    }


def fmt(d):
    return " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in d.items())


def main():
    dev = ctypes.c_void_p()
    check(cudart.cudaMalloc(ctypes.byref(dev), 1 << 20), "cudaMalloc")
    kept = warm_up(dev)
    ballast = bytearray(BALLAST_MIB << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    cache = PinCache()
    for e in range(EPOCHS):
        print(f"epoch={e} {fmt(epoch(dev, cache))}", flush=True)
    print(f"fork {fmt(bare_forks())}", flush=True)
    del kept, ballast


main()
