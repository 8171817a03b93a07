#!/usr/bin/env bash
# pinwise-alloc on the GPU machine, in one go:
#   1. `pinwise calibrate`: this GPU's transfer and pinning costs -> calibration.csv
#   2. `pinwise bench alloc --calibration calibration.csv`: the seed's experiment (pageable,
#      pin-each, caching pool, smart profile+use, adaptive, misaligned profile, 1.1x budget)
#      -> alloc-runs.csv, alloc-summary.csv, alloc.md, alloc.svg
#   3. the C example (examples/c/alloc_demo.c) against libpinwise.so and the real libcuda,
#      in adaptive, profile and use modes (a GPU-only check: the use run pins the hot buffer
#      from its first iteration, bytes survive the round trips)
#
# Run from the repository root of a copy that carries the release build made on the
# development machine (no Rust needed here):
#   cargo build --release -p pinwise-cli -p pinwise-capi      # on the development machine
#   OUT=/some/dir bash bench/gpu/alloc/run.sh [extra `pinwise bench alloc` arguments]
# Everything goes under $OUT/alloc/; the last lines printed are the summary.
# (A dry run on the development machine, on the CPU stand-in -- fixture numbers only:
#   PINWISE_BIN=target/debug/pinwise PINWISE_LIB=target/debug/libpinwise.so \
#   PINWISE_LIBCUDA=<dir with libcuda.so.1 -> the stand-in> OUT=/tmp/x \
#   bash bench/gpu/alloc/run.sh --quick --sizes 64K,1M )
# Budget: calibrate well under a minute; the default bench about 4 minutes on an H200.
set -uo pipefail
cd "$(dirname "$0")/../../.."
: "${OUT:?set OUT to the output directory}"
R="$OUT/alloc"
mkdir -p "$R"
PW=${PINWISE_BIN:-target/release/pinwise}
LIB=${PINWISE_LIB:-target/release/libpinwise.so}
status=0

if [[ ! -x $PW ]]; then
  echo "missing $PW: build it on the development machine (cargo build --release -p pinwise-cli)" >&2
  exit 2
fi

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(uname -a)"
  nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.total --format=csv 2>&1 || true
  echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
  echo "memlock: $(ulimit -l)"
  grep -E 'MemTotal|MemAvailable' /proc/meminfo
} > "$R/machine.txt"

echo "== calibrate"
start=$(date +%s)
if ! timeout 120 "$PW" calibrate --out "$R/calibration.csv" > "$R/calibrate.log" 2>&1; then
  echo "calibrate FAILED (see calibrate.log); the bench uses the built-in H200 calibration" >&2
  status=1
fi
echo "calibrate: $(( $(date +%s) - start )) s"
cal=()
[[ -s $R/calibration.csv ]] && cal=(--calibration "$R/calibration.csv")

echo "== bench alloc"
start=$(date +%s)
if ! timeout 420 "$PW" bench alloc "${cal[@]}" --out "$R" "$@" > "$R/bench.log" 2>&1; then
  echo "bench alloc FAILED (see bench.log)" >&2
  status=1
fi
echo "bench alloc: $(( $(date +%s) - start )) s"

echo "== C example"
if [[ -f $LIB ]] && command -v cc >/dev/null; then
  libdir=$(cd "$(dirname "$LIB")" && pwd)
  if [[ -n ${PINWISE_LIBCUDA:-} ]]; then
    cudadir=$(dirname "$PINWISE_LIBCUDA")   # a dry run on the CPU stand-in (test fixture)
  else
    cudadir=$(dirname "$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')")
  fi
  if cc -O2 -Iinclude examples/c/alloc_demo.c -L"$libdir" -lpinwise -Wl,-rpath,"$libdir" \
       -L"$cudadir" -l:libcuda.so.1 -o "$R/alloc_demo" > "$R/c-example.log" 2>&1; then
    {
      "$R/alloc_demo" adaptive 64 6 &&
      "$R/alloc_demo" profile "$R/c-example.profile.json" 64 6 &&
      "$R/alloc_demo" use "$R/c-example.profile.json" 64 6
    } >> "$R/c-example.log" 2>&1 || { echo "C example FAILED (see c-example.log)" >&2; status=1; }
    grep -q "hot buffer pinned at the first iteration: yes" "$R/c-example.log" \
      && echo "C example: use run pinned the hot buffer from the first iteration" \
      || { echo "C example: use run did NOT pin the hot buffer first (see c-example.log)"; status=1; }
  else
    echo "C example did not build (see c-example.log)"; status=1
  fi
else
  echo "C example skipped: no $LIB or no cc"
fi

echo "== summary ($R)"
grep -E "^calibrated|TEST FIXTURE" "$R/calibrate.log" 2>/dev/null
sed -n '/size  *best other/,$p' "$R/bench.log" 2>/dev/null
ls "$R"
exit $status
