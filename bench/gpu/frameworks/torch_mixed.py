"""PyTorch loop from issue 10: pinned and pageable uploads, round robin, plus cold pinned
state that moves rarely.

Each of 200 steps uploads one of 8 tensors made with pin_memory() and one of 8 pageable
tensors (4 MiB each, round robin, non_blocking), and every 100 steps four 64 MiB pinned
tensors (offloaded state) go to the GPU and back. stdout: exact checksums; stderr:
`time_ms upload=.. offload=.. total=..` (upload: the steps' copies and kernels).
"""
import sys
import time

import torch

MiB = 1 << 20
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def main():
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    n = MiB  # int32 elements: 4 MiB
    pinned = [(torch.arange(n, dtype=torch.int32) % 251 + k).pin_memory() for k in range(8)]
    pageable = [torch.arange(n, dtype=torch.int32) % 241 + k for k in range(8)]
    offload = [torch.full((16 * MiB,), k, dtype=torch.int32).pin_memory() for k in range(4)]
    acc = torch.zeros((), dtype=torch.int64, device=dev)
    t_up = t_off = 0.0
    t0 = time.monotonic()
    for s in range(STEPS):
        a = time.monotonic()
        g1 = pinned[s % 8].to(dev, non_blocking=True)
        g2 = pageable[s % 8].to(dev, non_blocking=True)
        acc += (g1 * 3 + g2).sum(dtype=torch.int64)
        torch.cuda.synchronize()
        t_up += time.monotonic() - a
        if s % 100 == 99:
            a = time.monotonic()
            for k, o in enumerate(offload):
                g = o.to(dev, non_blocking=True)
                g.add_(1)
                o.copy_(g, non_blocking=True)
            torch.cuda.synchronize()
            t_off += time.monotonic() - a
    torch.cuda.synchronize()
    total = time.monotonic() - t0
    print(f"upload {int(acc.item())}")
    print("offload " + " ".join(str(int(o[:: 4096].sum().item())) for o in offload))
    print(f"time_ms upload={t_up * 1e3:.1f} offload={t_off * 1e3:.1f} total={total * 1e3:.1f}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
