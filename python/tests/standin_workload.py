"""A CUDA workload for the Python package's tests, through the cudart stand-in (a TEST
FIXTURE: CPU memory, not a GPU) with ctypes: one pinned buffer and three pageable ones
copied to a device buffer, one download.

Usage: python3 standin_workload.py LIBCUDART [--wait] [--exit N]
  --wait: say `ready` and wait for a line on stdin before copying (for a tracer attaching).
  --exit N: exit with status N at the end.
stdout: `htod 5 dtoh 1` (the copies made), after `ready` with --wait."""
import ctypes
import sys

PINNED = 1 << 20
PAGEABLE = 256 * 1024

cudart = ctypes.CDLL(sys.argv[1])


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} failed: {rc}")


def upload(dev, host, n):
    check(cudart.cudaMemcpy(dev, host, ctypes.c_size_t(n), 1), "cudaMemcpy HtoD")


def main():
    if "--wait" in sys.argv:
        print("ready", flush=True)
        sys.stdin.readline()
    dev = ctypes.c_void_p()
    check(cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(PINNED)), "cudaMalloc")
    pinned = ctypes.c_void_p()
    check(cudart.cudaMallocHost(ctypes.byref(pinned), ctypes.c_size_t(PINNED)), "cudaMallocHost")
    htod = 0
    for i in range(3):
        buf = bytearray(PAGEABLE)
        buf[0] = i
        upload(dev, (ctypes.c_char * PAGEABLE).from_buffer(buf), PAGEABLE)
        htod += 1
    for _ in range(2):
        upload(dev, pinned, PINNED)
        htod += 1
    check(cudart.cudaMemcpy(pinned, dev, ctypes.c_size_t(PINNED), 2), "cudaMemcpy DtoH")
    cudart.cudaFreeHost(pinned)
    cudart.cudaFree(dev)
    print(f"htod {htod} dtoh 1", flush=True)


main()
if "--exit" in sys.argv:
    sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
