"""Smallest JAX program of issue 10's crash report: device_put of 16 MiB numpy arrays,
results fetched with np.asarray, arrays left alive at module level until interpreter exit.
Variant by argv[1]: 'module' (globals alive at exit), 'func' (freed before exit),
'pending' (a last computation still in flight when the interpreter exits)."""
import sys

import numpy as np
import jax
import jax.numpy as jnp

MiB = 1 << 20
variant = sys.argv[1] if len(sys.argv) > 1 else "module"


def work():
    xs = [jax.device_put(np.full(4 * MiB, k, dtype=np.int32)) for k in range(8)]
    ys = [(x * 3 + 1) for x in xs]
    total = sum(int(np.asarray(y).astype(np.int64).sum()) for y in ys)
    return xs, ys, total


xs, ys, total = work()
print(f"total {total}")
if variant == "func":
    del xs, ys
elif variant == "pending":
    last = jax.device_put(np.arange(4 * MiB, dtype=np.int32)) * 2
