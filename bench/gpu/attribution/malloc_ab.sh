#!/usr/bin/env bash
# The malloc-family hooks' cost per malloc+free pair (bench/gpu/attribution/malloc_cost.c,
# no CUDA involved), plain and under each given build of libpinwise_preload.so, interleaved:
# for comparing two builds of the library on one machine (the dev VM or the GPU machine).
#
#   bash bench/gpu/attribution/malloc_ab.sh NAME=LIB.so [NAME=LIB.so ...]
#   e.g. bash bench/gpu/attribution/malloc_ab.sh before=/tmp/old.so after=target/release/libpinwise_preload.so
#
# Env: REPEATS (default 7) rounds, each running plain then every library once, in the
# default configuration (hooks on, stacks on); EXTRA_ENV (e.g. "PINWISE_STACKS=0") is set
# for the library runs. Prints per phase and configuration the median of the runs' medians,
# its min-max over the runs, and the median's difference to plain. Raw rows go to
# $OUT/malloc_ab.tsv (OUT defaults to ./bench-out). PIN_CPU (e.g. 3) holds every run to that
# one CPU (taskset): less noise from the scheduler on a shared host. The second table pairs
# each round's library run with that round's plain run: the median of the per-round
# differences and its 95 % bootstrap interval.
set -eu
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out}
REPEATS=${REPEATS:-7}
mkdir -p "$OUT"
exe="$OUT/malloc_cost"
cc -O2 -o "$exe" "$ROOT/bench/gpu/attribution/malloc_cost.c"
names=(plain)
libs=("")
for a in "$@"; do
  names+=("${a%%=*}")
  libs+=("$(realpath "${a#*=}")")
done
tsv="$OUT/malloc_ab.tsv"
: > "$tsv"
for ((r = 1; r <= REPEATS; r++)); do
  for i in "${!names[@]}"; do
    if [[ -z ${libs[$i]} ]]; then
      ${PIN_CPU:+taskset -c "$PIN_CPU"} env -u LD_PRELOAD "$exe"
    else
      # shellcheck disable=SC2086
      ${PIN_CPU:+taskset -c "$PIN_CPU"} env LD_PRELOAD="${libs[$i]}" ${EXTRA_ENV:-} "$exe"
    fi | awk -v c="${names[$i]}" -v r="$r" '{print c "\t" r "\t" $1 "\t" $2}' >> "$tsv"
  done
done
echo "malloc_cost.c, ns per malloc+free pair: median over $REPEATS interleaved runs of each run's median (min-max of the runs), [difference of the medians to plain]"
echo "machine: $(hostname), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%dT%H:%MZ); EXTRA_ENV='${EXTRA_ENV:-}' PIN_CPU='${PIN_CPU:-}'"
python3 - "$tsv" "${names[@]}" <<'PY'
import random, sys, statistics
from collections import defaultdict
tsv, names = sys.argv[1], sys.argv[2:]
v = defaultdict(list)
by_round = defaultdict(dict)
phases = []
for line in open(tsv):
    c, r, p, x = line.split("\t")
    v[(p, c)].append(float(x))
    by_round[(p, c)][r] = float(x)
    if p not in phases:
        phases.append(p)
print("| phase | " + " | ".join(names) + " |")
print("|---" * (len(names) + 1) + "|")
for p in phases:
    if p == "tracked_first":
        continue
    base = statistics.median(v[(p, "plain")])
    row = []
    for c in names:
        xs = v[(p, c)]
        m = statistics.median(xs)
        cell = f"{m:.1f} ({min(xs):.1f}-{max(xs):.1f})"
        if c != "plain":
            cell += f" [{m - base:+.1f}]"
        row.append(cell)
    print(f"| {p} | " + " | ".join(row) + " |")
print()
print("paired: median over rounds of (library - plain of the same round), ns per pair [95 % bootstrap interval]")
print("| phase | " + " | ".join(names[1:]) + " |")
print("|---" * len(names) + "|")
rnd = random.Random(1)
for p in phases:
    if p == "tracked_first":
        continue
    row = []
    for c in names[1:]:
        ds = [x - by_round[(p, "plain")][r] for r, x in by_round[(p, c)].items() if r in by_round[(p, "plain")]]
        if not ds:
            row.append("-")
            continue
        meds = sorted(statistics.median(rnd.choices(ds, k=len(ds))) for _ in range(2000))
        row.append(f"{statistics.median(ds):+.1f} [{meds[50]:+.1f}, {meds[1949]:+.1f}]")
    print(f"| {p} | " + " | ".join(row) + " |")
PY
