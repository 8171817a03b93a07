"""torch_dataloader.py (the same data, net and training: the same stdout) with its DataLoader's
start and end timed phase by phase (issue 10: under `pinwise run` its `train - iter_med`, the
workers' start and the first batch, was longer than plain's). Run by dl_phases.sh.

stderr, besides torch_dataloader.py's `time_ms` line, one line
`phases k=v ...`; times in ms from t0, just before `iter(dl)`, unless said:
  iter        iter(dl) returned (the workers forked and started, the pin thread started,
              the first indices sent)
  fork_max    the longest os.fork() call in the parent (duration); fork_sum: the 4 summed;
              fork_cpu_sum: the forking thread's CPU time in them (wall - CPU: waiting)
  child_max   the longest time from a fork's call to the child's first Python instruction;
              child_cpu_max: the most CPU time a child had used when fork returned in it
              (the kernel's return and the atfork handlers, pinwise's included)
  winit_min   the first worker's worker_init_fn (from t0); winit_max: the last one's
  made_min    the first batch collated in a worker; made_max: the last worker's first batch
  pin_start   the pin thread's first pin_memory() call (the first batch received there)
  pin_first   that call's duration; pin_med: the median call's duration
  first       the first batch in the main thread
  last        the last batch in the main thread
  shutdown    the workers' shutdown (_shutdown_workers, its duration)
  wend_max    the last worker's end (its multiprocessing finalizers, from t0)
  p_minflt    the main process's minor faults from t0 to the loop's end; c_minflt,
              c_utime_ms, c_stime_ms: the workers' (reaped at the shutdown)
  p_rss_mib, p_pte_kib, p_maps: the main process's resident memory, page tables and
              mappings at t0.
Monotonic clocks are the same in every process of the machine.
    python3 dl_phases.py             (stdout: as torch_dataloader.py's)
"""
import multiprocessing.util
import os
import resource
import statistics
import sys
import threading
import time

import torch
import torch.utils.data._utils.pin_memory as pin_module
from torch.utils.data import DataLoader, Dataset
from torch.utils.data import dataloader as dl_module
from torch.utils.data import default_collate

MARK_R, MARK_W = os.pipe()
FORKS = []  # (call start, call end, the forking thread's CPU seconds in it) in the parent
CHILD = {}  # in a forked child: the fork call's start and the child's first instruction
PINS = []  # (start, end) of each batch's pin_memory() call in the pin thread
SHUTDOWN = []
_real_fork = os.fork


def thread_cpu():
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime


def timed_fork():
    c = thread_cpu()
    a = time.monotonic()
    pid = _real_fork()
    b = time.monotonic()
    if pid == 0:
        CHILD["call"], CHILD["run"] = a, b
        # The child's CPU time when fork returned in it: its atfork handlers included.
        CHILD["cpu"] = time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
    else:
        FORKS.append((a, b, thread_cpu() - c))
    return pid


os.fork = timed_fork

_real_pin = pin_module.pin_memory


_PIN_DEPTH = [0]


def timed_pin(data, device=None):
    # pin_memory() calls itself (by this global name) for each element of a batch: only the
    # outermost call, a whole batch, is timed.
    _PIN_DEPTH[0] += 1
    a = time.monotonic()
    try:
        return _real_pin(data, device)
    finally:
        _PIN_DEPTH[0] -= 1
        if _PIN_DEPTH[0] == 0:
            PINS.append((a, time.monotonic()))


pin_module.pin_memory = timed_pin

_real_shutdown = dl_module._MultiProcessingDataLoaderIter._shutdown_workers


def timed_shutdown(self):
    first = not getattr(self, "_shutdown", True)
    a = time.monotonic()
    _real_shutdown(self)
    if first:
        SHUTDOWN.append((a, time.monotonic()))


dl_module._MultiProcessingDataLoaderIter._shutdown_workers = timed_shutdown


def mark(kind, *vals):
    os.write(MARK_W, (" ".join([kind, str(os.getpid())] + [repr(v) for v in vals]) + "\n").encode())


def worker_end():
    r = resource.getrusage(resource.RUSAGE_SELF)
    mark("end", time.monotonic(), r.ru_minflt)


def worker_init(_wid):
    mark("init", time.monotonic(), CHILD.get("call", 0.0), CHILD.get("run", 0.0),
         CHILD.get("cpu", 0.0))
    multiprocessing.util.Finalize(None, worker_end, exitpriority=100)


MADE = []


def collate(batch):
    out = default_collate(batch)
    if not MADE:
        MADE.append(1)
        mark("made", time.monotonic())
    return out


class Synthetic(Dataset):
    def __len__(self):
        return 64 * 60

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8, generator=g)
        return x, i % 10


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def read_marks():
    # The workers were joined at the shutdown; a worker still alive (its join timed out)
    # must not block this read.
    os.set_blocking(MARK_R, False)
    data = b""
    while True:
        try:
            chunk = os.read(MARK_R, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    marks = {}
    for line in data.decode().splitlines():
        kind, _pid, *vals = line.split()
        marks.setdefault(kind, []).append([float(v) for v in vals])
    return marks


def main():
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(8),
        torch.nn.Flatten(), torch.nn.Linear(16 * 64, 10)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    dl = DataLoader(Synthetic(), batch_size=64, num_workers=4, pin_memory=True, shuffle=False,
                    worker_init_fn=worker_init, collate_fn=collate)
    seen = 0
    rss, pte = status_kib("VmRSS"), status_kib("VmPTE")
    with open("/proc/self/maps") as f:
        nmaps = sum(1 for _ in f)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    rc0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    n = 0
    arrivals = []
    it = iter(dl)
    t_iter = time.monotonic()
    for x, y in it:
        arrivals.append(time.monotonic())
        seen += int(x.to(torch.int64).sum()) + int(y.sum())
        x = x.to(dev, non_blocking=True).float() / 255.0
        y = y.to(dev, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += x.shape[0]
    torch.cuda.synchronize()
    dt = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    rc1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"seen {seen}")
    print(f"loss {loss.item():.3f}")
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:] + [t0 + dt])]
    iter_med = statistics.median(gaps) * len(gaps) * 1e3
    print(f"time_ms train={dt * 1e3:.1f} images_per_s={n / dt:.0f} iter_med={iter_med:.1f}",
          file=sys.stderr)
    m = read_marks()

    def rel(t):
        return (t - t0) * 1e3

    inits = m.get("init", [])
    ph = {
        "iter": rel(t_iter),
        "fork_max": max((b - a) * 1e3 for a, b, _ in FORKS) if FORKS else -1,
        "fork_sum": sum((b - a) * 1e3 for a, b, _ in FORKS),
        "fork_cpu_sum": sum(c * 1e3 for _, _, c in FORKS),
        "child_max": max(((r - c) * 1e3 for _, c, r, _ in inits), default=-1),
        "child_cpu_max": max((cpu * 1e3 for _, _, _, cpu in inits), default=-1),
        "winit_min": min((rel(t) for t, _, _, _ in inits), default=-1),
        "winit_max": max((rel(t) for t, _, _, _ in inits), default=-1),
        "made_min": min((rel(t) for (t,) in m.get("made", [])), default=-1),
        "made_max": max((rel(t) for (t,) in m.get("made", [])), default=-1),
        "pin_start": rel(PINS[0][0]) if PINS else -1,
        "pin_first": (PINS[0][1] - PINS[0][0]) * 1e3 if PINS else -1,
        "pin_med": statistics.median((b - a) * 1e3 for a, b in PINS) if PINS else -1,
        "first": rel(arrivals[0]),
        "last": rel(arrivals[-1]),
        "shutdown": (SHUTDOWN[0][1] - SHUTDOWN[0][0]) * 1e3 if SHUTDOWN else -1,
        "wend_max": max((rel(t) for t, _ in m.get("end", [])), default=-1),
        "p_minflt": ru1.ru_minflt - ru0.ru_minflt,
        "c_minflt": rc1.ru_minflt - rc0.ru_minflt,
        "c_utime_ms": (rc1.ru_utime - rc0.ru_utime) * 1e3,
        "c_stime_ms": (rc1.ru_stime - rc0.ru_stime) * 1e3,
        "p_rss_mib": rss / 1024,
        "p_pte_kib": pte,
        "p_maps": nmaps,
        "workers_seen": len(inits),
    }
    print("phases " + " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in ph.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
