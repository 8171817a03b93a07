"""Redundant uploads in a PyTorch loop (issue 17), for bench/gpu/redundant/run.sh.

Every step uploads a constant 64 MiB lookup table into the same device tensor (redundant
from the second step on: the device already holds it) and a fresh 4 MiB batch (never
redundant), runs a kernel on both, and keeps a checksum of the results. pinwise should report
the table's uploads as redundant ("keep it on the device") with the wasted time, and the
batch's as not redundant.

    python torch_constant.py [STEPS]
prints `checksum <hex>` (the same with or without pinwise) and `steps N table_bytes B`.
"""
import sys

import torch


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(17)
    table = torch.randn(16 << 20, generator=gen)  # 64 MiB, pageable, constant
    table_dev = torch.empty_like(table, device=dev)
    batch_dev = torch.empty(1 << 20, device=dev)
    acc = torch.zeros((), dtype=torch.float64, device=dev)
    for step in range(steps):
        batch = torch.randn(1 << 20, generator=gen)  # 4 MiB, new bytes each step
        table_dev.copy_(table)  # the redundant upload
        batch_dev.copy_(batch)
        acc += (table_dev[: 1 << 20] * batch_dev).sum(dtype=torch.float64)
    torch.cuda.synchronize()
    print(f"checksum {float(acc.item()):.6e}")
    print(f"steps {steps} table_bytes {table.numel() * 4}")


if __name__ == "__main__":
    main()
