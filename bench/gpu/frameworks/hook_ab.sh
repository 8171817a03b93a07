#!/usr/bin/env bash
# A/B of preload builds on the bookkeeping per intercepted copy, as `pinwise run` reports it
# in its statistics (hook_ns_net_median, hook_ns_median, the stage medians, the samples and
# the timing read's cost), in short runs of PyTorch programs of this suite, the builds
# interleaved; then the same builds on the sparse-copy program (bench/gpu/preload/gap_ab.sh).
#   bash bench/gpu/frameworks/hook_ab.sh NAME=LIB.so[,VAR=VALUE...] [NAME=LIB.so ...]
# e.g. `main=.device-carry/main/libpinwise_preload.so new=target/release/libpinwise_preload.so`.
# Env: REPEATS (default 5), PROGS (default "torch_mixed.py torch_hot_pageable.py"), MODE
# (default adaptive), GAP (1, default: also gap_ab.sh with GAPS="0 200", KIND=pinned and the
# same REPEATS; 0: not), OUT (default ./bench-out). Needs target/release/pinwise (any build:
# `--preload` picks the library). Writes $OUT/hook_ab/{runs.tsv,summary.md,gap.md,gap_ab.tsv}
# and raw.tgz (each run's statistics and stderr): five files, for the device tool's limit.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
PW=${PW:-$ROOT/target/release/pinwise}
REPEATS=${REPEATS:-5}
PROGS=${PROGS:-torch_mixed.py torch_hot_pageable.py}
MODE=${MODE:-adaptive}
D=${OUT:-$ROOT/bench-out}/hook_ab
W=$(mktemp -d /tmp/hook_ab.XXXXXX)
mkdir -p "$D" "$W/raw"
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
source "$ROOT/bench/gpu/lib/builds.sh"
parse_builds "$@" || { echo "usage: hook_ab.sh NAME=LIB.so[,VAR=VALUE...] ..." >&2; exit 2; }
tsv=$D/runs.tsv
: > "$tsv"
for ((r = 1; r <= REPEATS; r++)); do
  for p in $PROGS; do
    if [[ $p == /* ]]; then prog=$p; else prog=$ROOT/bench/gpu/frameworks/$p; fi
    for k in "${!names[@]}"; do
      # Rotate the builds' order each round.
      i=$(( (k + r) % ${#names[@]} ))
      b=$(basename "$p" .py); s=$W/raw/$b.${names[$i]}.$r.stats.json
      IFS=, read -r -a extra <<< "${envs[$i]}"
      t0=$(date +%s.%N)
      env "${extra[@]}" timeout 240 "$PW" run --mode "$MODE" --preload "${libs[$i]}" \
        --stats-json "$s" -- python3 "$prog" > "$W/raw/$b.${names[$i]}.$r.out" 2> "$W/raw/$b.${names[$i]}.$r.err"
      rc=$?
      t1=$(date +%s.%N)
      stats_keys "$s" "$p" "${names[$i]}" "$r" "$rc" "$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")" -- \
        hook_ns_net_median hook_ns_median hook_samples clock_read_ns \
        hook_stages.describe_ns hook_stages.decide_ns hook_stages.record_ns >> "$tsv"
    done
  done
done
{
  echo "# hook_ab: bookkeeping per intercepted copy in the programs ($MODE mode), $REPEATS interleaved runs per build"
  echo
  echo "- machine: $(hostname), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(uname -r), $(date -u +%FT%TZ)"
  for k in "${!names[@]}"; do echo "- ${names[$k]}: ${libs[$k]} ${envs[$k]} (sha256 $(sha256sum "${libs[$k]}" | cut -c1-12))"; done
  echo
  python3 - "$tsv" "${names[@]}" <<'PY'
import sys, statistics
from collections import defaultdict
tsv, names = sys.argv[1], sys.argv[2:]
v = defaultdict(lambda: defaultdict(list))
progs = []
fails = defaultdict(int)
keys = ["wall_s", "net", "total", "samples", "read", "describe", "decide", "record"]
for line in open(tsv):
    prog, name, r, rc, *xs = line.rstrip("\n").split("\t")
    if prog not in progs: progs.append(prog)
    if rc != "0": fails[(prog, name)] += 1
    for k, x in zip(keys, xs):
        try: v[(prog, name)][k].append(float(x))
        except ValueError: pass
def cell(xs):
    return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})" if xs else "-"
print("median (min-max) over runs; ns except wall (s) and samples")
print()
print("| program | build | runs | exit≠0 | net | total | describe | decide | record | samples | read | wall s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for p in progs:
    for n in names:
        d = v[(p, n)]
        wall = f"{statistics.median(d['wall_s']):.2f}" if d["wall_s"] else "-"
        print(f"| {p} | {n} | {len(d['net'])} | {fails[(p, n)]} | " + " | ".join(cell(d[k]) for k in ["net", "total", "describe", "decide", "record", "samples"])
              + f" | {statistics.median(d['read']):.1f} | {wall} |" if d["read"] else f"| {p} | {n} | 0 | {fails[(p, n)]} | - | - | - | - | - | - | - | {wall} |")
PY
} > "$D/summary.md"
cat "$D/summary.md"
if [[ ${GAP:-1} == 1 ]]; then
  echo
  OUT=$W/gap KIND=${KIND:-pinned} GAPS=${GAPS:-0 200} REPEATS=$REPEATS bash "$ROOT/bench/gpu/preload/gap_ab.sh" "$@" | tee "$D/gap.md"
  cp "$W/gap/gap_ab.tsv" "$D/" 2>/dev/null
fi
tar -czf "$D/raw.tgz" -C "$W" raw
rm -rf "$W"
