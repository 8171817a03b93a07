#!/usr/bin/env bash
# pinwise's framework suite on the GPU machine (issue 10): each program plain, under
# `pinwise trace`, and under `pinwise run` in every mode, interleaved, REPEATS times (default
# 5), comparing stdout (exact checksums) and exit status with the plain run, and collecting
# the programs' own phase times (`time_ms k=v` on stderr), wall time, peak pinned bytes and
# the library's sampled hook time. Writes $OUT/frameworks/{runs.tsv,results.csv,results.md}.
#   bash bench/gpu/frameworks/run.sh [PROGRAM.py ...]     (default: all programs here)
# Needs target/release/pinwise and libpinwise_preload.so (bench/gpu/pack.sh, session.sh).
# Env: REPEATS, BUDGET_S (seconds, then the remaining runs are skipped and said), MODES (the
# `pinwise run` modes interleaved with plain; default "profile use adaptive"), PIN_CPUS (a
# taskset CPU list every run is held to, e.g. 2-9: less scheduler noise on a shared host),
# NO_TRACE=1 (skip the `pinwise trace` run and its peak). `paired.py` reads the same runs.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD; SRC=$ROOT/bench/gpu/frameworks
PW=$ROOT/target/release/pinwise
REPEATS=${REPEATS:-5}; BUDGET_S=${BUDGET_S:-540}
D=${OUT:-$ROOT/bench-out}/frameworks; mkdir -p "$D"
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
progs=("$@")
((${#progs[@]})) || progs=(torch_mixed.py torch_hot_pageable.py torch_dataloader.py torch_compile.py jax_transfers.py jax_exit.py cupy_pool.py ../preload/capture.py)
{ date -u +%FT%TZ; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch,jax,cupy;print("torch",torch.__version__,"jax",jax.__version__,"cupy",cupy.__version__)' 2>&1 | tail -1; } > "$D/machine.txt"
touch "$D/runs.tsv"
one() { # NAME RUN REP CMD...
  local name=$1 run=$2 rep=$3; shift 3
  if (( SECONDS > BUDGET_S )); then printf '%s\t%s\t%s\tskipped\t-\n' "$name" "$run" "$rep" >> "$D/runs.tsv"; return; fi
  local t0 t1 rc; t0=$(date +%s.%N)
  timeout 240 ${PIN_CPUS:+taskset -c "$PIN_CPUS"} "$@" > "$D/$name.$run.$rep.out" 2> "$D/$name.$run.$rep.err"; rc=$?
  t1=$(date +%s.%N)
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$run" "$rep" "$rc" "$(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.3f", b-a}')" >> "$D/runs.tsv"
}
pwrun() { # NAME MODE REP PROG
  one "$1" "$2" "$3" "$PW" run --mode "$2" --profile "$D/$1.profile.json" \
    --stats-json "$D/$1.$2.$3.stats.json" -- python3 "$4"
}
for p in "${progs[@]}"; do
  name=$(basename "$p" .py); prog=$SRC/$p
  pwrun "$name" profile 0 "$prog"            # the profile `use` follows (not timed)
  if [[ ${NO_TRACE:-0} != 1 ]]; then
    one "$name" trace 0 "$PW" trace -o "$D/$name.trace.json" --format json -- python3 "$prog"
    # What the program pins by itself (the plain run's peak, as the tracer saw it).
    python3 "$SRC/peak_pinned.py" "$D/$name.trace.json" > "$D/$name.trace.peak" 2>&1 || true
    rm -f "$D/$name.trace.json"
  fi
  read -r -a order <<< "plain ${MODES:-profile use adaptive}"
  for rep in $(seq 1 "$REPEATS"); do
    for k in "${!order[@]}"; do
      m=${order[$(( (k + rep) % ${#order[@]} ))]}
      if [[ $m == plain ]]; then one "$name" plain "$rep" python3 "$prog"; else pwrun "$name" "$m" "$rep" "$prog"; fi
    done
  done
done
python3 "$SRC/summarize.py" "$D"
