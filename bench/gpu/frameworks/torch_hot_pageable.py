"""PyTorch loop dominated by hot pageable uploads: 4 pageable tensors of 64 MiB (plain
torch.empty / arithmetic, never pin_memory) uploaded round robin, 40 steps, a kernel each.
stdout: exact checksum; stderr: `time_ms upload=.. total=..`."""
import sys
import time

import torch

MiB = 1 << 20


def main():
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    host = [torch.arange(16 * MiB, dtype=torch.int32) % 239 + k for k in range(4)]
    acc = torch.zeros((), dtype=torch.int64, device=dev)
    t0 = time.monotonic()
    up = 0.0
    for s in range(40):
        a = time.monotonic()
        g = host[s % 4].to(dev, non_blocking=True)
        torch.cuda.synchronize()
        up += time.monotonic() - a
        acc += (g * (s % 7 + 1)).sum(dtype=torch.int64)
    torch.cuda.synchronize()
    print(f"hot-pageable {int(acc.item())}")
    print(f"time_ms upload={up * 1e3:.1f} total={(time.monotonic() - t0) * 1e3:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
