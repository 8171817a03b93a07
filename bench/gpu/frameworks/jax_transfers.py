"""JAX program for pinwise's framework suite (bench/gpu/frameworks/run.sh).

Phases:
  put     16 MiB numpy arrays sent with jax.device_put, summed on the GPU, fetched back
          with np.asarray (XLA stages them through its own pinned buffers)
  jit     a jitted step over a 32 MiB array fed from the host every step
  cb      a jitted function with a host callback (jax.pure_callback) each step
stdout: one exact checksum line per phase (integer arithmetic), so a run under pinwise must
print the same bytes. stderr: `time_ms put=.. jit=.. cb=.. total=..`.
"""
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp

MiB = 1 << 20


def main():
    dev = jax.devices("gpu")[0]
    jnp.zeros(1).block_until_ready()  # backend start-up, outside the timed phases
    t0 = time.monotonic()

    acc = 0
    for i in range(24):
        a = (np.arange(4 * MiB, dtype=np.int32) % 251 + i).astype(np.int32)  # 16 MiB
        x = jax.device_put(a, dev)
        y = (x * 3 + 1) % 65521
        back = np.asarray(y)
        acc += int(back.astype(np.int64).sum())
    print(f"put {acc}")
    t1 = time.monotonic()

    @jax.jit
    def step(x, w):
        return (x * w + 7) % 65521

    acc = 0
    host = [(np.arange(8 * MiB, dtype=np.int32) % 241 + k).astype(np.int32) for k in range(4)]
    for s in range(40):
        out = step(jax.device_put(host[s % 4], dev), jnp.int32(s % 13 + 1))
        acc += int(np.asarray(out[:: 4096]).astype(np.int64).sum())
    print(f"jit {acc}")
    t2 = time.monotonic()

    def host_fn(v):
        return (np.asarray(v) % 97).astype(np.int32)

    @jax.jit
    def with_cb(x):
        y = jax.pure_callback(host_fn, jax.ShapeDtypeStruct(x.shape, jnp.int32), x)
        return y + x

    acc = 0
    small = jnp.arange(256 * 1024, dtype=jnp.int32)
    for s in range(20):
        acc += int(np.asarray(with_cb(small + s)).astype(np.int64).sum())
    print(f"cb {acc}")
    t3 = time.monotonic()
    ms = lambda a, b: (b - a) * 1e3
    print(f"time_ms put={ms(t0, t1):.1f} jit={ms(t1, t2):.1f} cb={ms(t2, t3):.1f} "
          f"total={ms(t0, t3):.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
