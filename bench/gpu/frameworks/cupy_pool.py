"""CuPy: pinned memory pool (cupy.cuda.alloc_pinned_memory), streams, ndarray.set and
asnumpy, 40 round trips of 8 MiB. stdout: exact checksum; stderr: `time_ms total=..`."""
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
    for s in range(40):
        pinned[:] = (np.arange(n, dtype=np.int32) + s) % 251
        with stream:
            d.set(pinned, stream=stream)
            r = (d * 3 + 1) % 65521
            out = cp.asnumpy(r, stream=stream)
            stream.synchronize()
        acc += int(out.astype(np.int64).sum())
        acc += int(cp.asarray(pageable).sum())
    print(f"cupy {acc}")
    print(f"time_ms total={(time.monotonic() - t0) * 1e3:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
