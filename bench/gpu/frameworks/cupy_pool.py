"""CuPy: pinned memory pool (cupy.cuda.alloc_pinned_memory), streams, ndarray.set and
asnumpy, 40 round trips of 8 MiB. stdout: exact checksum; stderr: `time_ms total=.. iter_med=..`
(iter_med: the median round trip times their number, which a few slow rounds do not move)."""
import statistics
import sys
import time

import numpy as np
import cupy as cp

MiB = 1 << 20


def main():
    cp.zeros(1).sum()
    n = 2 * MiB  # int32: 8 MiB
    mem = cp.cuda.alloc_pinned_memory(n * 4)
    pinned = np.frombuffer(mem, np.int32, n)
    pageable = (np.arange(n, dtype=np.int32) % 233)
    stream = cp.cuda.Stream(non_blocking=True)
    d = cp.empty(n, dtype=cp.int32)
    acc = 0
    t0 = time.monotonic()
    rounds = []
    for s in range(40):
        a = time.monotonic()
        pinned[:] = (np.arange(n, dtype=np.int32) + s) % 251
        with stream:
            d.set(pinned, stream=stream)
            r = (d * 3 + 1) % 65521
            out = cp.asnumpy(r, stream=stream)
            stream.synchronize()
        acc += int(out.astype(np.int64).sum())
        acc += int(cp.asarray(pageable).sum())
        rounds.append(time.monotonic() - a)
    print(f"cupy {acc}")
    total = (time.monotonic() - t0) * 1e3
    iter_med = statistics.median(rounds) * len(rounds) * 1e3
    print(f"time_ms total={total:.1f} iter_med={iter_med:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
