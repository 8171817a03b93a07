#!/usr/bin/env bash
# The floor of "bookkeeping per intercepted copy" (issue 10) in the framework programs, on
# this host: each program under floor/floor_shim.so (the cheapest copy hook: levels 0, 1, 2,
# see its header) and under `pinwise run`, interleaved, REPEATS rounds; then cold_touch (the
# host's price of a cold line on a cold page after W MiB written). What it is and how to
# read it: bench/results/hook-floor.md.
#   bash bench/gpu/frameworks/floor.sh
# Env: PROGS (default "cupy_pool.py torch_hot_pageable.py torch_mixed.py jax_exit.py": names
# in bench/gpu/frameworks/, or absolute paths; *.py run with python3, anything else as is),
# REPEATS (default 5), BUDGET_S (default 300: no run starts later than this many seconds
# after the first; the rest are listed as skipped), MODE (pinwise's, default adaptive),
# FLOOR_PAGES (level 2's extra pages, default 8), VARIANTS (default "floor0 floor1 floor2
# pinwise"; floorL.PARTS runs level L with only some of level 1's parts, FLOOR_PARTS: e.g.
# floor1.t the table lookup alone, floor1.r the ring alone), OUT (default ./bench-out). Needs gcc and
# target/release/pinwise with its libpinwise_preload.so (bench/gpu/pack.sh carries them in
# .device-carry/; PINWISE=path overrides). Writes $OUT/floor/{summary.md,runs.tsv,raw.tgz}
# (raw: each run's floor line or statistics file, stdout and stderr).
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
source "$ROOT/bench/gpu/lib/carry.sh"
REPEATS=${REPEATS:-5}
PROGS=${PROGS:-cupy_pool.py torch_hot_pageable.py torch_mixed.py jax_exit.py}
BUDGET_S=${BUDGET_S:-300}
MODE=${MODE:-adaptive}
PAGES=${FLOOR_PAGES:-8}
F=$ROOT/bench/gpu/frameworks/floor
read -r -a variants <<< "${VARIANTS:-floor0 floor1 floor2 pinwise}"
for v in "${variants[@]}"; do
  [[ $v =~ ^(floor[012](\.[tcr]+)?|pinwise)$ ]] ||
    { echo "VARIANTS: floor0, floor1, floor2 (optionally .PARTS, e.g. floor1.r) or pinwise, not '$v'" >&2; exit 2; }
done
D=${OUT:-$ROOT/bench-out}/floor
W=$(mktemp -d /tmp/floor.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$D" "$W/raw"
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
gcc -O2 -shared -fPIC -o "$W/floor_shim.so" "$F/floor_shim.c" -ldl -lpthread || exit 2
gcc -O2 -o "$W/cold_touch" "$F/cold_touch.c" || exit 2
tsv=$D/runs.tsv
: > "$tsv"
START=$SECONDS
for ((r = 1; r <= REPEATS; r++)); do
  for p in $PROGS; do
    if [[ $p == /* ]]; then prog=$p; else prog=$ROOT/bench/gpu/frameworks/$p; fi
    if [[ $prog == *.py ]]; then cmd=(python3 "$prog"); else cmd=("$prog"); fi
    b=$(basename "$p"); b=${b%.py}
    for k in "${!variants[@]}"; do
      # Rotate the variants' order each round.
      v=${variants[$(( (k + r) % ${#variants[@]} ))]}
      base=$W/raw/$b.$v.$r
      if (( SECONDS - START > BUDGET_S )); then
        printf '%s\t%s\t%s\tskipped\t-\t-\t-\n' "$b" "$v" "$r" >> "$tsv"
        continue
      fi
      t0=$(date +%s.%N)
      case $v in
        floor*)
          level=${v#floor}; parts=; [[ $level == *.* ]] && parts=${level#*.}
          env LD_PRELOAD="$W/floor_shim.so${LD_PRELOAD:+:$LD_PRELOAD}" FLOOR_LEVEL=${level%%.*} FLOOR_PARTS="$parts" \
            FLOOR_PAGES="$PAGES" FLOOR_OUT="$base.floor" timeout 240 "${cmd[@]}" > "$base.out" 2> "$base.err"
          rc=$?; res=$b.$v.$r.floor ;;
        pinwise)
          timeout 240 "$PW" run --mode "$MODE" --stats-json "$base.stats.json" -- "${cmd[@]}" \
            > "$base.out" 2> "$base.err"
          rc=$?; res=$b.$v.$r.stats.json ;;
      esac
      t1=$(date +%s.%N)
      wall=$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$b" "$v" "$r" "$rc" "$wall" \
        "$(md5sum < "$base.out" | cut -c1-12)" "$res" >> "$tsv"
      echo "round $r $b $v: exit $rc, $wall s"
    done
  done
done
elapsed=$((SECONDS - START))
{
  echo "# Hook floor: per-copy bookkeeping in the programs, floor_shim levels 0/1/2 against pinwise ($MODE)"
  echo
  echo "- machine: $(hostname), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, $(uname -r), THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
  echo "- $(date -u +%FT%TZ); pinwise $PW (sha256 $(sha256sum "$PW" | cut -c1-12)); REPEATS=$REPEATS BUDGET_S=$BUDGET_S FLOOR_PAGES=$PAGES; runs took ${elapsed} s"
  echo
  python3 "$F/floor_table.py" "$tsv" "$W/raw"
  echo
  echo "## cold_touch: this host's price of a cold line on a cold page"
  echo
  timeout 120 "$W/cold_touch"
} > "$D/summary.md" 2>&1
cat "$D/summary.md"
# Each run's result file, stdout and stderr (large stderr files left out).
find "$W/raw" -type f -size +1M -delete
tar -czf "$D/raw.tgz" -C "$W" raw
