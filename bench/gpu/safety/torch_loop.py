"""Copies a pinned and a pageable 16 MiB tensor to the GPU until it is interrupted, and
prints how many copies had finished every 0.5 s ("copies N T", flushed; T: CLOCK_MONOTONIC
in ns, the clock of pinwise's events), for
bench/gpu/safety/interrupt.sh. Ctrl-C (KeyboardInterrupt) prints the count and exits 130."""
import sys
import time

import torch

MiB = 1 << 20
dev = torch.device("cuda")
pinned = torch.ones(16 * MiB, dtype=torch.uint8, pin_memory=True)
pageable = torch.ones(16 * MiB, dtype=torch.uint8)
n = 0
last = time.monotonic()
try:
    while True:
        pinned.to(dev, non_blocking=True)
        pageable.to(dev)
        torch.cuda.synchronize()
        n += 2
        if time.monotonic() - last > 0.5:
            print(f"copies {n} {time.monotonic_ns()}", flush=True)
            last = time.monotonic()
except KeyboardInterrupt:
    print(f"copies {n} {time.monotonic_ns()}", flush=True)
    sys.exit(130)
