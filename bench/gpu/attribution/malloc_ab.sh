#!/usr/bin/env bash
# The malloc-family hooks' cost per malloc+free pair (bench/gpu/attribution/malloc_cost.c,
# no CUDA involved), plain and under each given build of libpinwise_preload.so, interleaved:
# for comparing two builds of the library on one machine (the dev VM or the GPU machine).
#
#   bash bench/gpu/attribution/malloc_ab.sh NAME=LIB.so[,VAR=VALUE...] [NAME=LIB.so ...]
#   e.g. bash bench/gpu/attribution/malloc_ab.sh before=/tmp/old.so after=target/release/libpinwise_preload.so
#        (`off=LIB.so,PINWISE_MALLOC_HOOKS=0`: that build's runs with that environment;
#        bench/gpu/lib/builds.sh)
#
# Env: REPEATS (default 7) rounds, each running plain, then (PLAIN_MT=1, the default)
# plain_mt, then every library once, in the default configuration (hooks on, stacks on);
# EXTRA_ENV (e.g. "PINWISE_STACKS=0") is set for the library runs. plain_mt is the plain
# program with one idle thread started first (MALLOC_COST_THREADS=1): glibc's malloc locks
# its arena only in a process with several threads, which pinwise's drain thread makes any
# process after its first tracked allocation and which every CUDA program is anyway.
# PIN_CPU (e.g. 3) holds every run to that one CPU (taskset): less noise from the scheduler.
# CC_EXTRA (e.g. "-L/tmp/x -lfree_shim -Wl,-rpath,/tmp/x") is added to the benchmark's
# compile command: for linking a library that defines `free` itself, after which pinwise
# treats the heap as another allocator's.
#
# Prints (and writes to $OUT/malloc_ab.md; raw rows in $OUT/malloc_ab.tsv; OUT defaults to
# ./bench-out) per phase and configuration the median of the runs' medians, its min-max over
# the runs and its difference to plain; then each round's run paired with that round's
# plain run: the median of the per-round differences and its 95 % bootstrap interval
# (bench/lib/median_ci.py); with PLAIN_MT=1 the same paired with plain_mt.
set -eu
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out}
REPEATS=${REPEATS:-7}
PLAIN_MT=${PLAIN_MT:-1}
mkdir -p "$OUT"
exe="$OUT/malloc_cost"
# shellcheck disable=SC2086
cc -O2 -pthread -o "$exe" "$ROOT/bench/gpu/attribution/malloc_cost.c" ${CC_EXTRA:-}
source "$ROOT/bench/gpu/lib/builds.sh"
parse_builds "$@" || { echo "usage: malloc_ab.sh NAME=LIB.so[,VAR=VALUE...] ..." >&2; exit 2; }
names=(plain "${names[@]}")
libs=("" "${libs[@]}")
envs=("" "${envs[@]}")
if [[ $PLAIN_MT == 1 ]]; then
  names+=(plain_mt)
  libs+=("")
  envs+=("")
fi
tsv="$OUT/malloc_ab.tsv"
: > "$tsv"
for ((r = 1; r <= REPEATS; r++)); do
  # plain first, plain_mt (last in the tables) second, then the libraries.
  order=(0)
  [[ $PLAIN_MT == 1 ]] && order+=($((${#names[@]} - 1)))
  for ((i = 1; i <= $#; i++)); do order+=("$i"); done
  for i in "${order[@]}"; do
    if [[ -z ${libs[$i]} ]]; then
      threads=0
      [[ ${names[$i]} == plain_mt ]] && threads=1
      ${PIN_CPU:+taskset -c "$PIN_CPU"} env -u LD_PRELOAD MALLOC_COST_THREADS=$threads "$exe"
    else
      IFS=, read -r -a extra <<< "${envs[$i]}"
      # shellcheck disable=SC2086
      ${PIN_CPU:+taskset -c "$PIN_CPU"} env LD_PRELOAD="${libs[$i]}" ${EXTRA_ENV:-} "${extra[@]}" "$exe"
    fi | awk -v c="${names[$i]}" -v r="$r" '{print c "\t" r "\t" $1 "\t" $2 "\t" $6 "\t" $7 "\t" $9}' >> "$tsv"
  done
done
{
echo "malloc_cost.c, ns per malloc+free pair: median over $REPEATS interleaved runs of each run's median (min-max of the runs), [difference of the medians to plain]"
echo "machine: $(hostname), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), glibc $(ldd --version | head -1 | sed 's/.* //'), $(date -u +%Y-%m-%dT%H:%MZ); EXTRA_ENV='${EXTRA_ENV:-}' PIN_CPU='${PIN_CPU:-}' CC_EXTRA='${CC_EXTRA:-}'"
for k in "${!names[@]}"; do
  [[ -n ${libs[$k]} ]] && echo "build ${names[$k]}: ${libs[$k]} ${envs[$k]} (sha256 $(sha256sum "${libs[$k]}" | cut -c1-12))"
done
PYTHONPATH="$ROOT/bench/lib" python3 - "$tsv" "${names[@]}" <<'PY'
import random, sys, statistics
from collections import Counter, defaultdict
from median_ci import median_interval
tsv, names = sys.argv[1], sys.argv[2:]
v = defaultdict(list)
by_round = defaultdict(dict)
offsets = defaultdict(Counter)
threads = defaultdict(Counter)
binned = defaultdict(list)
phases = []
for line in open(tsv):
    c, r, p, x, *rest = line.rstrip("\n").split("\t")
    if rest and rest[0]:
        offsets[(p, c)][int(rest[0])] += 1
    if len(rest) > 1 and rest[1]:
        threads[(p, c)][int(rest[1])] += 1
    if len(rest) > 2 and rest[2]:
        binned[(p, c)].append(int(rest[2]))
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


def paired(base, cols, rnd):
    print()
    print(f"paired: median over rounds of (configuration - {base} of the same round), ns per pair [95 % bootstrap interval]")
    print("| phase | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for p in phases:
        if p == "tracked_first":
            continue
        row = []
        for c in cols:
            ds = [x - by_round[(p, base)][r] for r, x in by_round[(p, c)].items() if r in by_round[(p, base)]]
            if not ds:
                row.append("-")
                continue
            lo, hi = median_interval(ds, n=2000, rnd=rnd)
            row.append(f"{statistics.median(ds):+.1f} [{lo:+.1f}, {hi:+.1f}]")
        print(f"| {p} | " + " | ".join(row) + " |")


paired("plain", names[1:], random.Random(1))
if "plain_mt" in names:
    paired("plain_mt", [c for c in names[1:] if c != "plain_mt"], random.Random(2))
def most_common(title, table):
    if not table:
        return
    print()
    print(title)
    print("| phase | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for p in phases:
        if p == "tracked_first":
            continue
        row = []
        for c in names:
            o = table[(p, c)]
            if not o:
                row.append("-")
                continue
            x, k = o.most_common(1)[0]
            row.append(f"{x} ({k}/{sum(o.values())})")
        print(f"| {p} | " + " | ".join(row) + " |")


most_common("heap layout: the phase's last block's address modulo 4096, the most common over rounds (rounds with it / rounds); different offsets mean glibc serves the same calls from a different layout", offsets)
if binned:
    print()
    print("glibc's free memory outside the top chunk after the phase, KiB (mallinfo2 fordblks - keepcost, all arenas; median over rounds): where it is large, glibc serves the phase's blocks by splitting and coalescing free chunks")
    print("| phase | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for p in phases:
        if p == "tracked_first":
            continue
        print(f"| {p} | " + " | ".join(str(statistics.median(binned[(p, c)])) if binned[(p, c)] else "-" for c in names) + " |")
most_common("threads in the process after the phase, the most common over rounds (rounds with it / rounds); glibc's malloc locks its arena once there are two", threads)
PY
} | tee "$OUT/malloc_ab.md"
