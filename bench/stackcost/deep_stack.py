"""Large allocations under a deep Python stack, for the cost of a stack capture.

    python3 deep_stack.py [N] [recursive|distinct]

N allocations (bytearray/bytes of 150-300 KB, from three lines) under 28 Python frames:
`recursive` (default) through 25 frames of one function, `distinct` through 25 different
functions. Sleeps 12 ms every 20 allocations, so that the stack-capture budget refills.
"""
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
MODE = sys.argv[2] if len(sys.argv) > 2 else "recursive"


def leaf(i):
    k = i % 3
    if k == 0:
        return len(bytearray(200_000))
    if k == 1:
        return len(bytearray(300_000))
    return len(bytes(150_000))


def rec(d, i):
    if d == 0:
        return leaf(i)
    return rec(d - 1, i)


ns = {"leaf": leaf}
src = "def g0(i): return leaf(i)\n" + "".join(
    f"def g{d}(i): return g{d - 1}(i)\n" for d in range(1, 25)
)
exec(compile(src, "distinct_frames.py", "exec"), ns)
top = ns["g24"] if MODE == "distinct" else (lambda i: rec(24, i))

s = 0
for i in range(N):
    s += top(i)
    if i % 20 == 0:
        time.sleep(0.012)
print(s)
