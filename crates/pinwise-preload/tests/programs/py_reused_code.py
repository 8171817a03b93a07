# Defines, calls and deletes a function in a loop: each new code object tends to take the
# address of the one deleted before it, with another name and first line. Function f_<i>
# (first line i + 1) allocates a bytearray of 100,000 + i * 4,096 bytes on line i + 2.
# Prints the address of each code object, one a line.
N = 20
for i in range(N):
    src = "\n" * i + f"def f_{i}():\n    return bytearray({100_000 + i * 4096})\n"
    ns = {}
    exec(compile(src, "reused_code.py", "exec"), ns)
    f = ns[f"f_{i}"]
    print(id(f.__code__))
    b = f()
    # Break the cycle function -> globals -> function, so that the code object is freed now.
    ns.clear()
    del b, f, ns
