"""A Python program for `pinwise trace --pid` (Python frames of a process attached to while
it runs): loads the cudart stand-in (a TEST FIXTURE) with ctypes, says `ready`, waits for a
line on stdin (the tracer is attached by then), then pins a buffer from a named function and
copies it. The lines the test expects carry a `# site:` marker.
Usage: python3 py_attach.py /path/to/libcudart.so"""
import ctypes
import sys
import time

cudart = ctypes.CDLL(sys.argv[1])


def pin_after_attach(n):
    p = ctypes.c_void_p()
    rc = cudart.cudaMallocHost(ctypes.byref(p), ctypes.c_size_t(n))  # site: pin
    if rc != 0:
        raise SystemExit(f"cudaMallocHost failed: {rc}")
    return p


def main():
    dev = ctypes.c_void_p()
    if cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(1 << 20)) != 0:
        raise SystemExit("cudaMalloc failed")
    print("ready", flush=True)
    sys.stdin.readline()
    p = pin_after_attach(1 << 20)  # site: main-pin
    if cudart.cudaMemcpy(dev, p, ctypes.c_size_t(1 << 20), 1) != 0:
        raise SystemExit("cudaMemcpy failed")
    cudart.cudaFreeHost(p)
    cudart.cudaFree(dev)
    print("done", flush=True)


main()  # site: module
# Named by reading this process soon after the event: keep the module's code alive a moment
# (see py_trace_sites.py).
time.sleep(0.3)
