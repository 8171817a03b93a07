"""floor_check.py: a TEST program for floor_shim.so (check.sh runs it against the CPU
stand-in for libcuda, a TEST FIXTURE; it runs on a GPU machine too). Through ctypes, as a
Python framework's own loader would: libcuda.so.1 opened with dlopen, cuMemcpyHtoD_v2 found
with dlsym (ctypes' attribute lookup), cuMemcpyDtoH through cuGetProcAddress_v2 (default
and per-thread stream); a cuMemHostAlloc'd buffer and a pageable one in turn, with the
interpreter's own work between copies. stdout: the copies made and a checksum of every byte
read back (the same with and without the shim). Env: ROUNDS (default 300)."""
import ctypes
import hashlib
import os
import sys

N = 64 << 10


def check(rc, what):
    if rc != 0:
        sys.exit(f"{what}: CUresult {rc}")


def main():
    rounds = int(os.environ.get("ROUNDS", "300"))
    cu = ctypes.CDLL("libcuda.so.1")
    check(cu.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    d = ctypes.c_ulonglong()
    check(cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(N)), "cuMemAlloc_v2")
    pinned = ctypes.c_void_p()
    check(cu.cuMemHostAlloc(ctypes.byref(pinned), ctypes.c_size_t(N), 0), "cuMemHostAlloc")
    pageable = ctypes.create_string_buffer(N)
    back = ctypes.create_string_buffer(N)

    htod = cu.cuMemcpyHtoD_v2
    htod.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_size_t]
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_size_t)
    gpa = cu.cuGetProcAddress_v2
    gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                    ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
    dtohs = []
    for flags in (0, 2):
        p, st = ctypes.c_void_p(), ctypes.c_int()
        check(gpa(b"cuMemcpyDtoH", ctypes.byref(p), 13000, flags, ctypes.byref(st)),
              "cuGetProcAddress_v2")
        dtohs.append(proto(p.value))

    base = bytes(range(256)) * (N // 256)
    h = hashlib.sha256()
    copies = 0
    work = list(range(20000))
    for r in range(rounds):
        data = base[r % 256:] + base[:r % 256]
        host = pinned.value if r % 2 == 0 else ctypes.addressof(pageable)
        ctypes.memmove(host, data, N)
        # the interpreter's own work between copies
        work = [(x * 31 + r) % 65521 for x in work]
        check(htod(d.value, host, N), "cuMemcpyHtoD_v2")
        check(dtohs[r % 2](back, d.value, N), "cuMemcpyDtoH")
        copies += 2
        h.update(back.raw)
    check(cu.cuMemFreeHost(pinned), "cuMemFreeHost")
    check(cu.cuMemFree_v2(d), "cuMemFree_v2")
    print(f"copies={copies} checksum={h.hexdigest()[:16]} work={sum(work) % 1000003}")


if __name__ == "__main__":
    main()
