"""A Python program for `pinwise trace`'s Python frames: it pins a buffer, makes pageable
buffers (bytearrays: the interpreter's allocator, malloc underneath) and copies them through
the cudart stand-in (a TEST FIXTURE) with ctypes, from named functions, one of them on a
second thread, and pins one in a forked child. The lines the test expects carry a
`# site:` marker.
Usage: python3 py_trace_sites.py /path/to/libcudart.so
stdout: `total <bytes>`."""
import ctypes
import os
import sys
import threading
import time

cudart = ctypes.CDLL(sys.argv[1])


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} failed: {rc}")


def pin_buffer(n):
    p = ctypes.c_void_p()
    check(cudart.cudaMallocHost(ctypes.byref(p), ctypes.c_size_t(n)), "cudaMallocHost")  # site: pin
    return p


def make_buffer(n):
    return bytearray(n)  # site: make


def upload(dev, buf):
    view = (ctypes.c_char * len(buf)).from_buffer(buf)
    check(cudart.cudaMemcpy(dev, view, ctypes.c_size_t(len(buf)), 1), "cudaMemcpy")  # site: upload


def worker(dev):
    small = bytearray(16 * 1024)
    upload(dev, small)  # site: worker


def in_child():
    p = ctypes.c_void_p()
    rc = cudart.cudaMallocHost(ctypes.byref(p), ctypes.c_size_t(1 << 16))  # site: child
    # in_child's code object was never named before (the parent never ran it): the child
    # lives on a moment so that the tracer reads it (see the end of the module).
    time.sleep(0.3)
    os._exit(0 if rc == 0 else 3)


def main():
    dev = ctypes.c_void_p()
    check(cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(1 << 20)), "cudaMalloc")
    pinned = pin_buffer(1 << 20)  # site: main-pin
    total = 0
    for i in range(3):
        b = make_buffer(256 * 1024)  # site: main-make
        b[0] = i
        upload(dev, b)  # site: main-upload
        total += len(b)
        del b
    # Below the malloc threshold: its record is made by its first copy (sampled).
    small = bytearray(32 * 1024)
    upload(dev, small)  # site: main-small
    t = threading.Thread(target=worker, args=(dev,))
    t.start()
    t.join()
    child = os.fork()
    if child == 0:
        in_child()  # site: main-fork
    _, status = os.waitpid(child, 0)
    check(status, "the forked child")
    cudart.cudaFreeHost(pinned)
    cudart.cudaFree(dev)
    print("total", total)


main()  # site: module
# The tracer names frames by reading this process soon after each event; the module's own
# code object lives only while the module runs: keep it running a moment for a debug-build
# tracer on a busy machine (an event read after the process exited keeps only the frames
# whose code objects it had read before).
time.sleep(0.5)
