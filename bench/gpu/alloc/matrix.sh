#!/usr/bin/env bash
# The allocator matrix on the GPU machine (issue 13), in one device call of at most 10 minutes:
#   1. `pinwise calibrate` on this GPU -> gpu-calibration.csv, then
#      `pinwise calibrate --probe-round-trips` (small round trips timed four ways) -> the log
#   2. `pinwise bench alloc --matrix --calibration gpu-calibration.csv --repeats 3`:
#      sizes 4 KiB..1 GiB x 7 shapes (hot 1-4, cold 0-8, round trips 1-16, two with mixed
#      sizes) x pageable, pin-each, caching-pool, smart (use mode) and adaptive; per size the
#      worst smart/best and adaptive/best over shapes, and smart's pinned / hot working set.
#      Iterations are planned from this GPU's calibration to fit the time budget
#      ($MATRIX_BUDGET, default 400 s); cells that do not fit are listed as not run.
# Step 1 times each upload of a buffer the CPU has just written (the default since cache
# version 2: bench/results/calibration-written-first.md); CALIBRATE_ARGS=--copies-unwritten
# times them the older way, for comparison. The calibration's source line says which.
# With MATRIX_AUTO=1 (a second device call), step 1 is skipped and the matrix runs without
# --calibration on an empty cache directory: the automatic per-GPU calibration (first use,
# cached) is measured and used; its file is kept as gpu-calibration.csv and the log shows
# its announcement.
# Writes into $OUT (4 files, so that two runs fit the device tool's limit of 8 files):
#   gpu-alloc-matrix.md         the report (which calibration it used, worst per size, every
#                               cell, what was left out)
#   gpu-alloc-matrix-runs.csv   every run
#   gpu-calibration.csv         the calibration it used
#   gpu-alloc-matrix.log        machine, calibrate and bench output
# (the worst-per-size CSV is left out: its table is in the report).
#
# Both variants in one device call of at most 10 minutes (MATRIX_END_BY, epoch seconds,
# is when both must have finished: each run's time budget is lowered to fit what is left):
#   export MATRIX_END_BY=$(( $(date +%s) + 570 ))
#   OUT=$OUT/own MATRIX_BUDGET=240 bash bench/gpu/alloc/matrix.sh
#   OUT=$OUT/auto MATRIX_AUTO=1 MATRIX_BUDGET=240 bash bench/gpu/alloc/matrix.sh
#
# On the development machine (the GPU machine has no Rust):
#   bash bench/gpu/pack.sh                      # release build -> .device-carry/
# then one device call, carrying .device-carry:
#   bash bench/gpu/alloc/matrix.sh
# (binaries: .device-carry/ is copied into target/release/ as bench/gpu/session.sh does;
#  PINWISE_BIN overrides the pinwise binary.)
# A dry run on the CPU stand-in (TEST FIXTURE numbers only, labelled so in every file):
#   PINWISE_BIN=target/debug/pinwise PINWISE_LIBCUDA=<dir>/libcuda.so.1 (-> the stand-in) \
#   OUT=/tmp/x MATRIX_ARGS=--quick CALIBRATE_ARGS="--sizes 4K,1M" bash bench/gpu/alloc/matrix.sh
set -u
cd "$(dirname "$0")/../../.."
: "${OUT:?set OUT to the output directory}"
mkdir -p "$OUT" target/release
if [[ -d .device-carry ]]; then
  cp -a .device-carry/. target/release/
fi
PW=${PINWISE_BIN:-target/release/pinwise}
BUDGET=${MATRIX_BUDGET:-400}
LOG="$OUT/gpu-alloc-matrix.log"
WORK=$(mktemp -d /tmp/pinwise-matrix.XXXXXX)
status=0

if [[ ! -x $PW ]]; then
  echo "missing $PW: run bench/gpu/pack.sh on the development machine and carry .device-carry" | tee "$LOG" >&2
  exit 2
fi

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(uname -a)"
  nvidia-smi --query-gpu=name,uuid,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.total --format=csv 2>&1 || true
  echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
  echo "memlock: $(ulimit -l)"
  grep -E 'MemTotal|MemAvailable' /proc/meminfo
  echo "pinwise: $("$PW" --version 2>&1)"
} > "$LOG"

cal=()
if [[ ${MATRIX_AUTO:-0} == 1 ]]; then
  export PINWISE_CACHE_DIR=$WORK/cache
  echo "== automatic calibration (empty cache $PINWISE_CACHE_DIR)" | tee -a "$LOG"
else
  echo "== calibrate" | tee -a "$LOG"
  start=$(date +%s)
  # shellcheck disable=SC2086
  if timeout 60 "$PW" calibrate --force -o "$OUT/gpu-calibration.csv" ${CALIBRATE_ARGS:-} >> "$LOG" 2>&1; then
    cal=(--calibration "$OUT/gpu-calibration.csv")
  else
    echo "calibrate FAILED (see the log): the matrix calibrates automatically" | tee -a "$LOG" >&2
    status=1
  fi
  echo "calibrate: $(( $(date +%s) - start )) s" | tee -a "$LOG"
  # Round trips at small sizes timed as the calibration times copies, back to back, and
  # after the CPU wrote the buffer (alloc-adaptive-analysis.md, section 4): a few seconds.
  echo "== round-trip probe" | tee -a "$LOG"
  timeout 60 "$PW" calibrate --probe-round-trips 2>&1 | tee -a "$LOG" ||
    echo "round-trip probe FAILED (see the log)" | tee -a "$LOG" >&2
fi

# Extra wall time over the budget for the run in progress when the guard trips.
LIMIT=$(( BUDGET + 60 ))
if [[ -n ${MATRIX_END_BY:-} ]]; then
  # Leave 75 s of what is left for the guard's overrun, an automatic calibration (< 10 s)
  # and copying the results; the hard limit stops 10 s before the end.
  left=$(( MATRIX_END_BY - $(date +%s) ))
  (( BUDGET > left - 75 )) && BUDGET=$(( left - 75 ))
  (( LIMIT > left - 10 )) && LIMIT=$(( left - 10 ))
  if (( BUDGET < 20 || LIMIT < 30 )); then
    echo "only ${left} s left before MATRIX_END_BY: matrix not run" | tee -a "$LOG" >&2
    exit 1
  fi
fi
echo "== bench alloc --matrix (time budget ${BUDGET} s, limit ${LIMIT} s)" | tee -a "$LOG"
start=$(date +%s)
# shellcheck disable=SC2086
if ! timeout "$LIMIT" "$PW" bench alloc --matrix "${cal[@]}" --repeats 3 \
     --time-budget "${BUDGET}s" -o "$WORK" ${MATRIX_ARGS:-} >> "$LOG" 2>&1; then
  echo "bench alloc --matrix FAILED or timed out (see the log; partial results are kept)" | tee -a "$LOG" >&2
  status=1
fi
echo "bench alloc --matrix: $(( $(date +%s) - start )) s" | tee -a "$LOG"

if [[ ${MATRIX_AUTO:-0} == 1 ]]; then
  cp "$WORK"/cache/calibration-*.csv "$OUT/gpu-calibration.csv" 2>/dev/null ||
    echo "no automatic calibration was cached (see the log)" | tee -a "$LOG"
fi
for f in alloc-matrix.md alloc-matrix-runs.csv; do
  [[ -f $WORK/$f ]] && cp "$WORK/$f" "$OUT/gpu-$f"
done
rm -rf "$WORK"

echo "== summary ($OUT)"
grep -m1 '^- calibration:' "$OUT/gpu-alloc-matrix.md" 2>/dev/null
sed -n '/^## Worst over shapes/,/^## Every cell/p' "$OUT/gpu-alloc-matrix.md" 2>/dev/null | grep -v '^## Every cell'
ls "$OUT"
exit $status
