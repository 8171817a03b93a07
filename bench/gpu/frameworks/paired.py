"""Paired slowdowns for bench/gpu/frameworks/run.sh (issue 10's "no program slower than plain
by more than 2 %"): run.sh interleaves plain with every mode in each round, so each round gives
one ratio mode/plain per metric, taken on the same minutes of a noisy host. Prints, per program,
metric and mode, the median of those ratios, a 95 % bootstrap interval of that median, and a
verdict: "within 2 %" when the interval's top is <= 1.02, "slower" when its bottom is > 1.02,
else "not decided" (more rounds needed). Rates (`*_per_s`) are turned into times (plain/mode),
so > 1 always means slower under pinwise.
    python3 paired.py DIR [MODE ...]     (DIR: run.sh's $OUT/frameworks; default modes: all)
Writes DIR/paired.md and DIR/paired.csv too."""
import csv
import os
import re
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
from median_ci import median_interval  # noqa: E402

d = sys.argv[1]
want = sys.argv[2:]
# run.sh's runs.tsv (name, run, rep, rc, wall) or wall.sh's (the same after a header line).
runs = [l.rstrip("\n").split("\t")[:5] for l in open(os.path.join(d, "runs.tsv")) if l.strip()]
val = defaultdict(dict)  # (name, metric) -> {(run, rep): value}
for name, run, rep, rc, wall in runs:
    if rc != "0" or rep in ("0", "rep"):
        continue
    val[(name, "wall_s")][(run, rep)] = float(wall)
    err = os.path.join(d, f"{name}.{run}.{rep}.err")
    text = open(err, errors="replace").read() if os.path.exists(err) else ""
    m = re.search(r"time_ms (.*)", text)
    if m:
        for k, v in re.findall(r"(\w+)=([0-9.]+)", m.group(1)):
            val[(name, k)][(run, rep)] = float(v)


rows = []
for (name, metric), v in sorted(val.items()):
    modes = sorted({r for r, _ in v} - {"plain"})
    for mode in modes:
        if want and mode not in want:
            continue
        ratios = []
        for (r, rep), x in v.items():
            if r != mode or ("plain", rep) not in v:
                continue
            p = v[("plain", rep)]
            if x <= 0 or p <= 0:
                continue
            ratios.append(p / x if metric.endswith("_per_s") else x / p)
        if len(ratios) < 3:
            continue
        med = statistics.median(ratios)
        lo, hi = median_interval(ratios)
        verdict = "within 2 %" if hi <= 1.02 else ("slower" if lo > 1.02 else "not decided")
        rows.append([name, metric, mode, len(ratios), round(med, 4), round(lo, 4), round(hi, 4),
                     round(min(ratios), 4), round(max(ratios), 4), verdict])
with open(os.path.join(d, "paired.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["program", "metric", "mode", "rounds", "median_ratio", "ci95_lo", "ci95_hi",
                "min", "max", "verdict"])
    w.writerows(rows)
lines = ["| program | metric | mode | rounds | median of paired ratios (mode/plain; >1 slower) | 95 % interval | min–max | verdict |",
         "|---|---|---|---|---|---|---|---|"]
for name, metric, mode, n, med, lo, hi, mn, mx, verdict in rows:
    lines.append(f"| {name} | {metric} | {mode} | {n} | {med:.3f} | {lo:.3f}–{hi:.3f} | {mn:.3f}–{mx:.3f} | {verdict} |")
open(os.path.join(d, "paired.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
