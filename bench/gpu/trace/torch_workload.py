"""A small PyTorch program with a known number of host<->device copies of 64 MiB, from
and to a pinned and a pageable tensor; prints what it did as one JSON line (the last line
of its output). Run under `pinwise trace` by bench/gpu/trace/run.sh.

usage: python3 torch_workload.py [REPS]
"""
import json
import sys
import time

import torch

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
BYTES = 64 << 20
ELEMS = BYTES // 4

dev = torch.device("cuda")
torch.empty(1, device=dev)  # create the context before the measured part
pinned = torch.empty(ELEMS, dtype=torch.float32, pin_memory=True)
pageable = torch.empty(ELEMS, dtype=torch.float32)
pinned.fill_(1.0)
pageable.fill_(2.0)
gpu = torch.empty(ELEMS, dtype=torch.float32, device=dev)
torch.cuda.synchronize()

t0 = time.perf_counter()
for _ in range(REPS):
    gpu.copy_(pinned, non_blocking=True)
torch.cuda.synchronize()
for _ in range(REPS):
    gpu.copy_(pageable)
torch.cuda.synchronize()
for _ in range(REPS):
    pinned.copy_(gpu, non_blocking=True)
torch.cuda.synchronize()
for _ in range(REPS):
    pageable.copy_(gpu)
torch.cuda.synchronize()
elapsed = time.perf_counter() - t0

print(json.dumps({
    "bytes": BYTES,
    "reps": REPS,
    "HtoD": {"pinned": REPS, "pageable": REPS},
    "DtoH": {"pinned": REPS, "pageable": REPS},
    "copy_seconds": elapsed,
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
}))
