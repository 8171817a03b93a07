#!/usr/bin/env python3
"""Figures from a `pinwise run` statistics file (`--stats-json` or `PINWISE_STATS_DIR`), for
the bench scripts.

    python3 bench/gpu/lib/stats_keys.py STATS.json [FIELD...] -- KEY...

prints the FIELDs (copied as given) and then each KEY's value, tab-separated, one line. A KEY
is found anywhere in the file (the first match, depth first: a summary's processes, or a
process file itself); `a.b` is key `b` inside the first `a`. Missing values, and every value
of a file that cannot be read, print as `-`. Importable: `find(obj, key)`.
"""
import json
import sys


def find(o, k):
    """The value of the first key `k` in `o` (depth first), or None."""
    if isinstance(o, dict):
        if k in o:
            return o[k]
        for v in o.values():
            x = find(v, k)
            if x is not None:
                return x
    if isinstance(o, list):
        for v in o:
            x = find(v, k)
            if x is not None:
                return x
    return None


def lookup(o, dotted):
    """`find` for a dotted key: each part inside the previous part's value."""
    for part in dotted.split("."):
        o = find(o, part)
        if o is None:
            return None
    return o


def main(argv):
    if "--" not in argv or not argv:
        sys.exit("usage: stats_keys.py STATS.json [FIELD...] -- KEY...")
    cut = argv.index("--")
    path, fields, keys = argv[0], argv[1:cut], argv[cut + 1:]
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError):
        s = {}
    values = [lookup(s, k) for k in keys]
    print(*fields, *["-" if v is None else v for v in values], sep="\t")


if __name__ == "__main__":
    main(sys.argv[1:])
