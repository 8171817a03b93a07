"""Hot pageable and cold pinned tensors from distinct, named Python functions (for
`pinwise run` attribution on the GPU machine: bench/gpu/attribution/run.sh).

- make_hot_batch(): pageable CPU tensors (4 MiB each, PyTorch's CPU allocator:
  posix_memalign underneath) copied to the GPU on every step: hot.
- make_cold_pinned(): pinned tensors (pin_memory(): cudaHostAlloc underneath) copied once:
  cold.
- make_scratch(): pageable tensors never copied.

stdout: one line, `checksum <exact value>` (integers in float64: a run under pinwise must
print the same); stderr: `elapsed_s <seconds>` for the copy loop.
Usage: python3 torch_sites.py [STEPS=40]
"""
import sys
import time

import torch

N = 1 << 20  # float32 elements: 4 MiB per tensor


def make_hot_batch(i):
    return torch.full((N,), float(i + 1), dtype=torch.float32)


def make_cold_pinned(i):
    t = torch.empty(N, dtype=torch.float32).pin_memory()
    t.fill_(float(10 * (i + 1)))
    return t


def make_scratch(i):
    return torch.zeros(N // 4, dtype=torch.float32) + i


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    dev = torch.device("cuda")
    hot = [make_hot_batch(i) for i in range(4)]
    cold = [make_cold_pinned(i) for i in range(4)]
    scratch = [make_scratch(i) for i in range(2)]
    acc = torch.zeros(N, dtype=torch.float64, device=dev)
    for c in cold:
        acc += c.to(dev).double()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(steps):
        for h in hot:
            h.add_(1.0)
            acc += h.to(dev).double()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    back = acc.cpu()
    checksum = float(back.sum().item()) + float(sum(s.sum().item() for s in scratch))
    print(f"checksum {checksum:.1f}")
    print(f"elapsed_s {elapsed:.6f}", file=sys.stderr)


if __name__ == "__main__":
    main()
