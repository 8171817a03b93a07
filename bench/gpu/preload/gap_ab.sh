#!/usr/bin/env bash
# bench/gpu/preload/gap_ab.sh: gap_copies.c under each given build of libpinwise_preload.so,
# interleaved (adaptive mode, PINWISE_STATS_DIR), to compare builds' bookkeeping per
# intercepted copy (`hook_ns_net_median`, stage medians) against the gap between copies.
#   bash bench/gpu/preload/gap_ab.sh NAME=LIB.so[,VAR=VALUE...] [NAME=LIB.so[,VAR=VALUE...] ...]
# (VAR=VALUE after a comma: environment for that build's runs only, e.g.
# `huge=lib.so nohuge=lib.so,PINWISE_HUGE_TEXT=0` compares one build with a setting on and off.)
# Env: REPEATS (default 10), GAPS (default "0 20 200" µs), KIND (pinned|pinned_async|pageable, default
# pinned), NBUF (buffers copied in turn, default 1), N (copies per run; default 3000, 1500
# at gaps of 200 µs and more), EVICT_KIB (scratch KiB written before each copy, default 0)
# and EVICT_STRIDE (bytes between the writes, default 64),
# CUDA_LIB_DIR (a directory with libcuda.so; default: the system's libcuda, found
# by ldconfig; on the dev VM the stand-in's target/release). Prints per build and gap the
# median (min-max) of the runs' figures. Raw rows: $OUT/gap_ab.tsv (OUT default ./bench-out).
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out}
REPEATS=${REPEATS:-10}
GAPS=${GAPS:-0 20 200}
KIND=${KIND:-pinned}
source "$ROOT/bench/gpu/preload/gap_build.sh"
build_gap_copies "$OUT" "${CUDA_LIB_DIR:-}"
source "$ROOT/bench/gpu/lib/builds.sh"
parse_builds "$@" || { echo "usage: gap_ab.sh NAME=LIB.so[,VAR=VALUE...] ..." >&2; exit 2; }
tsv="$OUT/gap_ab.tsv"
: > "$tsv"
for ((r = 1; r <= REPEATS; r++)); do
  for gap in $GAPS; do
    n=${N:-$(( gap >= 200 ? 1500 : 3000 ))}
    for i in "${!names[@]}"; do
      sd=$(mktemp -d "$OUT/stats.XXXXXX")
      IFS=, read -r -a extra <<< "${envs[$i]}"
      env "${extra[@]}" LD_PRELOAD="${libs[$i]}" PINWISE_MODE=adaptive PINWISE_STATS_DIR="$sd" \
        "$OUT/gap_copies" "$KIND" "$gap" "$n" "${NBUF:-1}" "${EVICT_KIB:-0}" "${EVICT_STRIDE:-64}" > /dev/null
      for f in "$sd"/*.json; do
        [[ -e $f ]] || continue
        stats_keys "$f" "${names[$i]}" "$gap" "$r" -- hook_ns_net_median hook_ns_median \
          hook_stages.describe_ns hook_stages.decide_ns hook_stages.record_ns >> "$tsv"
      done
      rm -rf "$sd"
    done
  done
done
echo "gap_copies $KIND NBUF=${NBUF:-1} EVICT_KIB=${EVICT_KIB:-0} EVICT_STRIDE=${EVICT_STRIDE:-64}, $REPEATS interleaved runs per build and gap; median (min-max) over runs, ns"
echo "machine: $(hostname), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%dT%H:%MZ)"
python3 - "$tsv" "${names[@]}" <<'PY'
import sys, statistics
from collections import defaultdict
tsv, names = sys.argv[1], sys.argv[2:]
v = defaultdict(lambda: defaultdict(list))
gaps = []
for line in open(tsv):
    name, gap, r, *xs = line.rstrip("\n").split("\t")
    if gap not in gaps: gaps.append(gap)
    for k, x in zip(["net", "total", "describe", "decide", "record"], xs):
        try: v[(name, gap)][k].append(float(x))
        except ValueError: pass
def cell(xs):
    return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})" if xs else "-"
print("| build | gap µs | runs | net | total | describe | decide | record |")
print("|---|---|---|---|---|---|---|---|")
for g in gaps:
    for n in names:
        d = v[(n, g)]
        print(f"| {n} | {g} | {len(d['net'])} | " + " | ".join(cell(d[k]) for k in ["net", "total", "describe", "decide", "record"]) + " |")
PY
