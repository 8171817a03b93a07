"""Peak pinned bytes under `pinwise run` against the plain run's (issue 10: "peak pinned bytes
under pinwise <= the plain run's in every program"), from a suite's results.csv
(bench/gpu/frameworks/summarize.py). For each program: the plain peak (what `pinwise trace`
saw the program pin by itself, peak_pinned.py), and per mode the largest peak of a run
(`pinned_bytes_peak_max`: every byte locked in the process, pinwise's and the program's own)
and the program's own peak as pinwise counted it (`own_pinned_MiB`, the ceiling of pinwise's
pins where the program pins). Where the program pins nothing of note (less than 1 MiB at
once: pinwise_core::decide::ceiling::OF_NOTE), promotions of hot pageable buffers are the
speed-up and the budget bounds them: such rows are shown, not judged.
A program's peak may exceed plain's by page rounding of its requests (SLACK_MIB, default
0.5). Exit status 1 if a program that pins exceeds it in some mode.
  python3 bench/gpu/frameworks/peak_check.py DIR/results.csv"""
import csv, os, sys
from collections import defaultdict

slack = float(os.environ.get("SLACK_MIB", "0.5"))
rows = defaultdict(dict)
for r in csv.DictReader(open(sys.argv[1])):
    if r["metric"] in ("peak_pinned_MiB", "own_pinned_MiB"):
        rows[r["program"]][(r["run"], r["metric"])] = float(r["max"])
bad = 0
print("| program | plain MiB | mode | pinwise peak MiB | program's own (pinwise's count) MiB | verdict |")
print("|---|---|---|---|---|---|")
for prog, m in sorted(rows.items()):
    plain = m.get(("plain", "peak_pinned_MiB"))
    for mode in ("profile", "use", "adaptive"):
        peak = m.get((mode, "peak_pinned_MiB"))
        if peak is None:
            continue
        own = m.get((mode, "own_pinned_MiB"))
        if plain is None:
            verdict = "no plain figure"
        elif plain < 1:
            verdict = "pins nothing of note (< 1 MiB): bounded by the budget"
        elif peak <= plain + slack:
            verdict = "ok"
        else:
            verdict = "OVER"
            bad += 1
        fmt = lambda x: "-" if x is None else f"{x:.1f}"
        print(f"| {prog} | {fmt(plain)} | {mode} | {fmt(peak)} | {fmt(own)} | {verdict} |")
print(f"\nprograms x modes over the plain peak: {bad}")
sys.exit(1 if bad else 0)
