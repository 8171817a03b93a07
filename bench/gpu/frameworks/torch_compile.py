"""torch.compile over a function fed from pinned and pageable host tensors, 30 steps.
stdout: exact integer checksum; stderr: `time_ms steps=.. iter_med=..` (compilation excluded;
iter_med: the median step times the number of steps, which a few slow steps do not move)."""
import statistics
import sys
import time

import torch

MiB = 1 << 20


@torch.compile
def step(a, b, k):
    return ((a * 3 + b) % 65521 + k).sum(dtype=torch.int64)


def main():
    dev = torch.device("cuda")
    a_host = (torch.arange(4 * MiB, dtype=torch.int32) % 251).pin_memory()
    b_host = torch.arange(4 * MiB, dtype=torch.int32) % 241
    acc = int(step(a_host.to(dev), b_host.to(dev), 0).item())  # compile
    t0 = time.monotonic()
    steps = []
    for s in range(30):
        a = time.monotonic()
        acc += int(step(a_host.to(dev, non_blocking=True), b_host.to(dev), s).item())
        steps.append(time.monotonic() - a)
    print(f"compiled {acc}")
    total = (time.monotonic() - t0) * 1e3
    iter_med = statistics.median(steps) * len(steps) * 1e3
    print(f"time_ms steps={total:.1f} iter_med={iter_med:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
