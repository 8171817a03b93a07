"""Tables for bench/gpu/frameworks/run.sh: results.csv (one row per program, run kind and
metric: median, min, max, n) and results.md; exit status 1 if any run crashed or printed
other output than the plain run."""
import csv, json, os, re, statistics, sys
from collections import defaultdict

d = sys.argv[1]
runs = [l.rstrip("\n").split("\t") for l in open(os.path.join(d, "runs.tsv")) if l.strip()]
read = lambda p: open(p, errors="replace").read() if os.path.exists(p) else ""
plain_out = {}
for name, run, rep, rc, wall in runs:
    if run == "plain" and rc == "0" and name not in plain_out:
        plain_out[name] = read(os.path.join(d, f"{name}.plain.{rep}.out"))
metrics = defaultdict(list)
bad = []
unchecked = []  # runs of programs with no plain run to compare with
for name, run, rep, rc, wall in runs:
    if rc == "skipped":
        continue
    out = read(os.path.join(d, f"{name}.{run}.{rep}.out"))
    plain = plain_out.get(name)
    if plain is None:
        # No plain run finished (the time budget): nothing to compare with, which is not a
        # difference; the run still counts as bad if it failed or printed nothing.
        if rc != "0" or not out:
            bad.append(f"{name} {run} #{rep}: exit {rc}, output {'empty' if not out else 'not compared (no plain run)'}")
        else:
            unchecked.append(f"{name} {run} #{rep}")
    elif rc != "0" or not out or out != plain:
        bad.append(f"{name} {run} #{rep}: exit {rc}, output {'same' if out == plain else 'DIFFERENT'}")
    if run == "trace":
        pk = read(os.path.join(d, f"{name}.trace.peak")).split()
        if pk and pk[0].isdigit():
            metrics[(name, "plain", "peak_pinned_MiB")].append(int(pk[0]) / 2**20)
    if rep == "0":
        continue
    metrics[(name, run, "wall_s")].append(float(wall))
    m = re.search(r"time_ms (.*)", read(os.path.join(d, f"{name}.{run}.{rep}.err")))
    if m:
        for k, v in re.findall(r"(\w+)=([0-9.]+)", m.group(1)):
            metrics[(name, run, k)].append(float(v))
    st = os.path.join(d, f"{name}.{run}.{rep}.stats.json")
    if os.path.exists(st):
        try:
            s = json.load(open(st))
            t = s["totals"]
            metrics[(name, run, "peak_pinned_MiB")].append(t["pinned_bytes_peak_max"] / 2**20)
            if "program_pinned_bytes_peak_max" in t:
                metrics[(name, run, "own_pinned_MiB")].append(t["program_pinned_bytes_peak_max"] / 2**20)
            metrics[(name, run, "promotions")].append(t["promotions"])
            metrics[(name, run, "demotions")].append(t.get("demotions", 0))
            metrics[(name, run, "registrations")].append(sum(p.get("registrations", 0) for p in s["processes"]))
            metrics[(name, run, "unregistrations")].append(sum(p.get("unregistrations", 0) for p in s["processes"]))
            ps = [p for p in s["processes"] if p.get("hook_ns_median") is not None]
            if ps:
                busiest = max(ps, key=lambda p: p["hook_samples"])
                metrics[(name, run, "hook_ns_median")].append(busiest["hook_ns_median"])
                for k in ("hook_ns_net_median", "clock_read_ns"):
                    if busiest.get(k) is not None:
                        metrics[(name, run, k)].append(busiest[k])
                for k, v in (busiest.get("hook_stages") or {}).items():
                    if v is not None:
                        metrics[(name, run, "hook_" + k)].append(v)
        except (KeyError, ValueError) as e:
            bad.append(f"{name} {run} #{rep}: statistics unreadable ({e})")
    elif run not in ("plain", "trace"):
        bad.append(f"{name} {run} #{rep}: no statistics file")
rows = []
for (name, run, k), v in sorted(metrics.items()):
    rows.append([name, run, k, statistics.median(v), min(v), max(v), len(v)])
with open(os.path.join(d, "results.csv"), "w", newline="") as f:
    w = csv.writer(f); w.writerow(["program", "run", "metric", "median", "min", "max", "n"]); w.writerows(rows)
with open(os.path.join(d, "results.md"), "w") as f:
    f.write(read(os.path.join(d, "machine.txt")).replace("\n", "  \n") + "\n")
    f.write("| program | metric | plain | profile | use | adaptive | use/plain | adaptive/plain |\n|---|---|---|---|---|---|---|---|\n")
    by = defaultdict(dict)
    for name, run, k, med, lo, hi, n in rows:
        by[(name, k)][run] = (med, lo, hi, n)
    for (name, k), r in sorted(by.items()):
        cell = lambda x: "-" if x not in r else f"{r[x][0]:.1f} ({r[x][1]:.1f}–{r[x][2]:.1f}, n={r[x][3]})"
        ratio = lambda x: f"{r[x][0] / r['plain'][0]:.3f}" if x in r and "plain" in r and r["plain"][0] else "-"
        f.write(f"| {name} | {k} | {cell('plain')} | {cell('profile')} | {cell('use')} | {cell('adaptive')} | {ratio('use')} | {ratio('adaptive')} |\n")
    f.write(f"\nruns: {len(runs)}; crashed or different output: {len(bad)}\n")
    for b in bad:
        f.write(f"- {b}\n")
    if unchecked:
        f.write(f"exit 0 but not compared (no plain run of the program finished): {len(unchecked)}\n")
        for u in unchecked:
            f.write(f"- {u}\n")
print(read(os.path.join(d, "results.md")))
sys.exit(1 if bad else 0)
