"""A Python program whose pageable buffers (bytearrays: the interpreter's allocator, malloc
underneath) come from a named function and are copied through the cudart stand-in (a TEST
FIXTURE) with ctypes. Usage: python3 py_sites.py /path/to/libcudart.so
stdout: `total <bytes>`."""
import ctypes
import sys

cudart = ctypes.CDLL(sys.argv[1])


def make_buffer(n):
    return bytearray(n)


def upload(dev, buf):
    view = (ctypes.c_char * len(buf)).from_buffer(buf)
    rc = cudart.cudaMemcpy(dev, view, ctypes.c_size_t(len(buf)), 1)
    if rc != 0:
        raise SystemExit(f"cudaMemcpy failed: {rc}")


def main():
    dev = ctypes.c_void_p()
    if cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(1 << 20)) != 0:
        raise SystemExit("cudaMalloc failed")
    total = 0
    for i in range(3):
        b = make_buffer(256 * 1024)
        b[0] = i
        upload(dev, b)
        total += len(b)
        del b
    cudart.cudaFree(dev)
    print("total", total)


main()
