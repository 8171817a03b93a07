"""The cost of capturing the calling thread's Python frames, at several stack depths.

    cargo build --release -p pinwise-pyframes-probe
    python3 crates/pinwise-pyframes/benches/capture.py target/release/libpinwise_pyframes_probe.so

For each depth (Python frames under the call) and mode it takes 31 samples of 2000 calls
and prints the median, min and max of the per-call means in nanoseconds, wall clock and
the thread's CPU time (which leaves out time the thread was not running, on a shared
machine):
  capture  - the allocation-free capture (what an allocation hook pays), from the same
             place again and again (the thread's hint saves two of the three reads);
  cold     - the same capture without the hint (a first capture from a place);
  resolved - capture and resolution with a warm cache (strings already read);
  fresh    - current_python_frames(): capture and resolution from scratch.
"""
import ctypes
import statistics
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.pyframes_bench.restype = ctypes.c_int64
lib.pyframes_bench.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t,
                               ctypes.POINTER(ctypes.c_double)]
SAMPLES, ITERS = 31, 2000


def at_depth(depth, mode):
    if depth > 1:
        return at_depth(depth - 1, mode)
    out = (ctypes.c_double * (2 * SAMPLES))()
    frames = lib.pyframes_bench(mode, SAMPLES, ITERS, out)
    return frames, list(out)[:SAMPLES], list(out)[SAMPLES:]


print("python %s" % sys.version.split()[0])
print("| mode | frames | wall median ns | wall min-max ns | CPU median ns | CPU min-max ns |")
print("|---|---|---|---|---|---|")
for depth in (1, 10, 30):
    for mode, name in ((0, "capture"), (3, "cold"), (1, "resolved"), (2, "fresh")):
        frames, wall, cpu = at_depth(depth, mode)
        print("| %s | %d | %.0f | %.0f-%.0f | %.0f | %.0f-%.0f |" % (
            name, frames, statistics.median(wall), min(wall), max(wall),
            statistics.median(cpu), min(cpu), max(cpu)))
