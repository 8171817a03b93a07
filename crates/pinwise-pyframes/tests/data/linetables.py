"""Writes the line-table test vectors for src/linetable.rs: for every code object of a
sample program, its co_linetable (hex), co_firstlineno, and the (start, end, line) ranges
of co_lines(). Run with each CPython version:

    python3.X linetables.py > linetables-3.X.txt
"""
import sys

SAMPLE = '''
import os

def simple(a, b):
    c = a + b
    return c * 2

def branches(x):
    if x > 3:
        y = [i for i in range(x)]
    else:
        y = None
    for i in range(3):
        try:
            x += 1 / i
        except ZeroDivisionError:
            x -= 1
    return (x,
            y)

class K:
    def method(self, q):
        while q:
            q -= 1
            if q == 7:
                break
        with open(os.devnull) as f:
            f.read()
        return lambda z: z + q

async def coro(n):
    return n

def gen(n):
    yield from range(n)
    yield n

def long_jump():
    a = 1
''' + "\n" * 300 + '''
    b = 2
    return a + b
'''


def walk(code):
    yield code
    for c in code.co_consts:
        if hasattr(c, "co_lines"):
            yield from walk(c)


def main():
    top = compile(SAMPLE, "sample.py", "exec")
    out = sys.stdout
    out.write("# %s\n" % sys.version.split()[0])
    for code in walk(top):
        out.write("code %d %s\n" % (code.co_firstlineno, code.co_linetable.hex()))
        for start, end, line in code.co_lines():
            out.write("%d %d %s\n" % (start, end, line))


main()
