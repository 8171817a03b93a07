"""Redundant asynchronous downloads in a PyTorch loop (issue 17), for
bench/gpu/redundant/async.sh.

Every step computes a result that does not change (a constant table scaled by 2) and one
that does (from a fresh batch), and fetches them with non-blocking device-to-host copies
(cudaMemcpyAsync into pinned buffers: their bytes arrive after the call returns):
- the constant result (4 MiB) and the changing one (4 MiB), then `torch.cuda.synchronize()`
  (cudaDeviceSynchronize);
- half the constant result (2 MiB) into another pinned buffer, then
  `torch.cuda.current_stream().synchronize()` (cudaStreamSynchronize);
- a quarter of it (1 MiB) with `.to('cpu', non_blocking=True)` (a new host tensor each step,
  from PyTorch's pinned caching allocator), then `torch.cuda.synchronize()`.
The results are computed into device tensors allocated once (`out=`), so every step's
download reads the same device range: a download is redundant when it brings the same bytes
as the previous download of that device range into the same host bytes (pinwise-core's
definition; with a fresh `table_dev * 2` each step, PyTorch's caching allocator hands out a
few different addresses in the first steps, and those downloads are rightly not redundant).
pinwise should report the 4 MiB and the 2 MiB buffers' downloads as redundant ("fetch it
once") from the second step on, each `.to('cpu')` host buffer's from its second download on,
and the changing result's as not redundant: `pinwise trace --fingerprint` hashes them when
the synchronization returns, `pinwise run` when its own event says the copy is done (or the
next copy touching the buffer asks it).

    python torch_async.py [STEPS]
prints `checksum <value>` (the same with or without pinwise) and `steps N`.
"""
import sys

import torch


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(17)
    n = 1 << 20  # 4 MiB of float32
    table_dev = torch.randn(n, generator=gen).to(dev)
    const_host = torch.empty(n, pin_memory=True)  # 4 MiB, completed by a device sync
    fresh_host = torch.empty(n, pin_memory=True)  # 4 MiB, new bytes every step
    half_host = torch.empty(n // 2, pin_memory=True)  # 2 MiB, completed by a stream sync
    const_dev = torch.empty(n, device=dev)
    fresh_dev = torch.empty(n, device=dev)
    acc = 0.0
    for _ in range(steps):
        batch_dev = torch.randn(n, generator=gen).to(dev)
        torch.mul(table_dev, 2, out=const_dev)  # the same bytes every step
        torch.mul(table_dev, batch_dev, out=fresh_dev)  # new bytes every step
        const_host.copy_(const_dev, non_blocking=True)
        fresh_host.copy_(fresh_dev, non_blocking=True)
        torch.cuda.synchronize()
        acc += float(const_host[:4096].sum()) + float(fresh_host[:4096].sum())
        half_host.copy_(const_dev[: n // 2], non_blocking=True)
        torch.cuda.current_stream().synchronize()
        acc += float(half_host[:4096].sum())
        quarter = const_dev[: n // 4].to("cpu", non_blocking=True)
        torch.cuda.synchronize()
        acc += float(quarter[:4096].sum())
    print(f"checksum {acc:.6e}")
    print(f"steps {steps}")


if __name__ == "__main__":
    main()
