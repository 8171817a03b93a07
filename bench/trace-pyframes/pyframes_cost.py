"""Workload for bench/trace-pyframes: at a Python stack depth of DEPTH frames, N rounds of
cudaMallocHost + cudaFreeHost (4 KiB) and one 4 KiB cudaMemcpy, through ctypes into the
cudart given (the CPU stand-in, a TEST FIXTURE, on the dev VM).
Usage: python3 pyframes_cost.py /path/to/libcudart.so DEPTH N"""
import ctypes
import sys

cudart = ctypes.CDLL(sys.argv[1])
DEPTH = int(sys.argv[2])
N = int(sys.argv[3])


def work():
    dev = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(1 << 20)) == 0
    host = ctypes.create_string_buffer(4096)
    for _ in range(N):
        p = ctypes.c_void_p()
        assert cudart.cudaMallocHost(ctypes.byref(p), ctypes.c_size_t(4096)) == 0
        assert cudart.cudaFreeHost(p) == 0
        assert cudart.cudaMemcpy(dev, host, ctypes.c_size_t(4096), 1) == 0
    cudart.cudaFree(dev)


def nest(depth):
    if depth <= 2:
        work()
    else:
        nest(depth - 1)


nest(DEPTH)
