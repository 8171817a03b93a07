"""Summary of dl_phases.sh's runs.tsv: per phase (column) and variant, the median and min-max
over the runs that exited 0; then per variant, the median of its paired differences from plain
(variant - plain, the same round) with a 95 % bootstrap interval of that median.
    python3 dl_phases_summary.py RUNS.tsv"""
import csv
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
from median_ci import median_interval  # noqa: E402

FIXED = ("variant", "rep", "rc", "same_out")


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def fmt(x):
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def main():
    rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
    if not rows:
        print("no runs")
        return
    fields = [f for f in rows[0] if f not in FIXED]
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    ok = [r for r in rows if r["rc"] == "0"]
    bad = [f"{r['variant']}.{r['rep']} rc={r['rc']}" for r in rows if r["rc"] != "0"]
    diff = [f"{r['variant']}.{r['rep']}" for r in ok if r["same_out"] == "0"]
    print(f"runs: {len(rows)}; exit != 0: {len(bad)} {' '.join(bad)}; "
          f"stdout different from plain's: {len(diff)} {' '.join(diff)}\n")
    print("medians (min-max) over the runs; ms unless the name says otherwise\n")
    print("| phase | " + " | ".join(f"{v} (n={sum(r['variant'] == v for r in ok)})"
                                    for v in variants) + " |")
    print("|---|" + "---|" * len(variants))
    for f in fields:
        cells = []
        for v in variants:
            xs = [x for x in (num(r[f]) for r in ok if r["variant"] == v) if x is not None]
            cells.append(f"{fmt(statistics.median(xs))} ({fmt(min(xs))}-{fmt(max(xs))})"
                         if xs else "-")
        print(f"| {f} | " + " | ".join(cells) + " |")
    others = [v for v in variants if v != "plain"]
    if not others:
        return
    print("\npaired differences variant - plain (same round): median [95 % interval], rounds\n")
    print("| phase | " + " | ".join(others) + " |")
    print("|---|" + "---|" * len(others))
    plain = {r["rep"]: r for r in ok if r["variant"] == "plain"}
    for f in fields:
        cells = []
        for v in others:
            ds = []
            for r in ok:
                if r["variant"] != v or r["rep"] not in plain:
                    continue
                a, b = num(r[f]), num(plain[r["rep"]][f])
                if a is not None and b is not None:
                    ds.append(a - b)
            if len(ds) >= 2:
                lo, hi = median_interval(ds)
                cells.append(f"{fmt(statistics.median(ds))} [{fmt(lo)}, {fmt(hi)}] {len(ds)}")
            elif ds:
                cells.append(f"{fmt(ds[0])} (1 round)")
            else:
                cells.append("-")
        print(f"| {f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
