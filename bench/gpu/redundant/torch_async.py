"""Redundant asynchronous downloads in a PyTorch loop (issue 17), for
bench/gpu/redundant/async.sh.

Every step computes a result that does not change (a constant table scaled by 2) and one
that does (from a fresh batch), and fetches both with non-blocking device-to-host copies
(cudaMemcpyAsync into pinned buffers: their bytes arrive after the call returns), then
`torch.cuda.synchronize()` (cudaDeviceSynchronize) before reading them; it also fetches the
constant result with `.to('cpu', non_blocking=True)` (a new host tensor each step, from
PyTorch's pinned caching allocator) and synchronizes on the current stream
(`torch.cuda.current_stream().synchronize()`, cudaStreamSynchronize). pinwise should report
the constant result's downloads into the same pinned buffer as redundant ("fetch it once")
from the second step on, and the changing one's as not redundant: `pinwise trace
--fingerprint` hashes them when the synchronization returns, `pinwise run` when its own
event says the copy is done.

    python torch_async.py [STEPS]
prints `checksum <hex>` (the same with or without pinwise) and `steps N result_bytes B`.
"""
import sys

import torch


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(17)
    n = 1 << 20  # 4 MiB of float32
    table_dev = torch.randn(n, generator=gen).to(dev)
    const_host = torch.empty(n, pin_memory=True)
    fresh_host = torch.empty(n, pin_memory=True)
    acc = 0.0
    for _ in range(steps):
        batch_dev = torch.randn(n, generator=gen).to(dev)
        const_dev = table_dev * 2  # the same bytes every step
        fresh_dev = table_dev * batch_dev  # new bytes every step
        const_host.copy_(const_dev, non_blocking=True)  # redundant from the second step
        fresh_host.copy_(fresh_dev, non_blocking=True)
        torch.cuda.synchronize()
        acc += float(const_host[:4096].sum()) + float(fresh_host[:4096].sum())
        other = const_dev.to("cpu", non_blocking=True)
        torch.cuda.current_stream().synchronize()
        acc += float(other[:4096].sum())
    print(f"checksum {acc:.6e}")
    print(f"steps {steps} result_bytes {n * 4}")


if __name__ == "__main__":
    main()
