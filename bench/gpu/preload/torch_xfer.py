"""PyTorch workload for pinwise-preload's GPU script (bench/gpu/preload/run.sh).

Phases:
  A  pinned tensors (pin_memory=True, PyTorch's caching host allocator): 4 tensors of
     64 MiB, 12 rounds each of a non-blocking copy to the GPU, a kernel, and back
  B  a hot pageable tensor (256 MiB) copied to the GPU and back 10 times
  C  cold pageable tensors: 16 fresh 16 MiB tensors, each copied to the GPU once
stdout: one checksum line per phase (integer sums computed on the GPU: exact, so a run
under pinwise must print the same bytes). stderr: `time_ms A=.. B=.. C=.. total=..` and
PyTorch's host allocator statistics when this version has them.
"""
import json
import sys
import time

import torch

MiB = 1 << 20


def checksum(t):
    return int(t.to(torch.int64).sum().item())


def main():
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)  # CUDA init, outside the timed phases
    torch.cuda.synchronize()
    t0 = time.monotonic()

    acc = 0
    for i in range(4):
        x = torch.empty(64 * MiB, dtype=torch.uint8, pin_memory=True)
        x.copy_(torch.arange(64 * MiB, dtype=torch.int64).remainder_(251).to(torch.uint8) + i)
        for r in range(12):
            g = x.to(dev, non_blocking=True)
            g.mul_(3).add_(r)
            x.copy_(g, non_blocking=True)
            torch.cuda.synchronize()
            acc += checksum(g)
        del x
    print(f"A pinned {acc}")
    t1 = time.monotonic()

    y = torch.arange(256 * MiB, dtype=torch.int64).remainder_(253).to(torch.uint8)
    acc = 0
    for r in range(10):
        g = y.to(dev)
        g.add_(r + 1)
        y.copy_(g)
        acc += checksum(g)
    del y
    print(f"B hot-pageable {acc}")
    t2 = time.monotonic()

    acc = 0
    for i in range(16):
        z = torch.full((16 * MiB,), i, dtype=torch.uint8)
        g = z.to(dev)
        acc += checksum(g)
        del z
    print(f"C cold-pageable {acc}")
    torch.cuda.synchronize()
    t3 = time.monotonic()

    ms = lambda a, b: (b - a) * 1e3
    print(
        f"time_ms A={ms(t0, t1):.1f} B={ms(t1, t2):.1f} C={ms(t2, t3):.1f} total={ms(t0, t3):.1f}",
        file=sys.stderr,
    )
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is not None:
        try:
            s = stats()
            peak = {k: v for k, v in s.items() if "peak" in k or "reserved" in k}
            print("host_memory_stats " + json.dumps(peak, sort_keys=True), file=sys.stderr)
        except Exception as e:  # statistics are optional
            print(f"host_memory_stats unavailable: {e}", file=sys.stderr)
    print(f"torch {torch.__version__} cuda {torch.version.cuda}", file=sys.stderr)


if __name__ == "__main__":
    main()
