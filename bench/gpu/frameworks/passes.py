"""Totals over the passes of suite.sh (PASSES=N): runs, crashes (exit by a signal or a status
other than plain's), outputs different from the same pass's plain run, and skipped runs.
    python3 passes.py DIR        (DIR holds pass1/, pass2/, ... each with frameworks/runs.tsv)
"""
import csv
import glob
import os
import sys

root = sys.argv[1]
total = bad_rc = diff = skipped = 0
lines = []
for tsv in sorted(glob.glob(os.path.join(root, "pass*", "frameworks", "runs.tsv"))):
    d = os.path.dirname(tsv)
    rows = [r for r in csv.reader(open(tsv), delimiter="\t") if len(r) >= 4]
    plain_rc, plain_out = {}, {}
    for name, run, rep, rc, *_ in rows:
        if run == "plain" and rc != "skipped":
            plain_rc[name] = rc
            try:
                plain_out[name] = open(os.path.join(d, f"{name}.plain.{rep}.out")).read()
            except OSError:
                pass
    for name, run, rep, rc, *_ in rows:
        if rc == "skipped":
            skipped += 1
            continue
        total += 1
        want = plain_rc.get(name, "0")
        if rc != want:
            bad_rc += 1
            lines.append(f"{tsv}: {name} {run} {rep}: exit {rc} (plain {want})")
        if run == "plain" or name not in plain_out:
            continue
        try:
            out = open(os.path.join(d, f"{name}.{run}.{rep}.out")).read()
        except OSError:
            continue
        if out != plain_out[name]:
            diff += 1
            lines.append(f"{tsv}: {name} {run} {rep}: output differs from plain")
print(f"passes: {len(glob.glob(os.path.join(root, 'pass*')))}; runs {total}; "
      f"exit status other than plain's {bad_rc}; outputs different from plain {diff}; skipped {skipped}")
for l in lines:
    print("  " + l)
