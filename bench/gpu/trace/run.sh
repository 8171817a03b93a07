#!/usr/bin/env bash
# bench/gpu/trace/run.sh: checks and measures `pinwise trace` on the GPU machine, in one go.
#
#   OUT=/some/dir bash bench/gpu/trace/run.sh
#
# Needs: root, target/release/pinwise (built on the dev machine and carried here), and on
# the GPU machine nvcc (CUDA 13) and PyTorch in `python3`. No Rust, no network.
#
# 1. Builds bench/gpu/trace/workload.c with nvcc twice (-cudart shared, -cudart static) and
#    traces each; traces bench/gpu/trace/torch_workload.py (pinned and pageable tensors to
#    and from the GPU). Each program prints what it did; check.py compares that with what
#    pinwise recorded (counts, bytes, directions, call sites).
# 2. Measures the overhead with bench/gpu/trace/overhead.c, plain and traced: ns per call
#    for each probe kind, the slowdown of a synchronous copy loop at 4 KiB, 1 MiB and
#    64 MiB, the sustained event rate (and whether anything was dropped), the tracer's RSS.
# Everything goes under $OUT; results.md is the table; the last lines printed summarize.
#
# Without nvcc/a GPU (or with PINWISE_STANDIN=1) it runs against pinwise's CPU stand-ins
# for libcuda/libcudart (TEST FIXTURES; every output says so), built with gcc, and skips
# PyTorch: that is how it is tested on the development machine.
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out/trace}
PINWISE=${PINWISE:-$ROOT/target/release/pinwise}
SRC=$ROOT/bench/gpu/trace
BUILD=$OUT/build
TMP=$OUT/tmp
mkdir -p "$OUT" "$BUILD" "$TMP"
: > "$OUT/verdicts.txt"
START=$(date +%s)
log() { printf '[trace-bench %3ss] %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }

if [[ ! -x $PINWISE ]]; then
  echo "pinwise binary not found at $PINWISE (build it with cargo build --release and carry it)" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "run as root: pinwise trace loads BPF programs" >&2
  exit 2
fi
if ! mountpoint -q /sys/kernel/tracing 2>/dev/null; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null && log "mounted tracefs"
fi

MODE=gpu
if [[ ${PINWISE_STANDIN:-0} == 1 ]] || ! command -v nvcc >/dev/null || ! command -v nvidia-smi >/dev/null; then
  MODE=standin
fi

# A traced run: trace NAME [pinwise options...] -- CMD...; stdout of CMD to $OUT/NAME.out.
trace() {
  local name=$1; shift
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  timeout -k 10 300 "$PINWISE" trace -o "$TMP/$name.history.json" \
    --summary-json "$OUT/$name.summary.json" "${opts[@]}" -- "$@" \
    > "$OUT/$name.out" 2> "$OUT/$name.trace.log"
  local rc=$?
  [[ $rc -ne 0 ]] && log "traced run $name exited with $rc (see $OUT/$name.trace.log)"
  return $rc
}

if [[ $MODE == gpu ]]; then
  DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  log "GPU mode: $DEVICE, driver $DRIVER"
  NVCC=(nvcc -O2 -Wno-deprecated-gpu-targets)
  # Link against the toolkit's libcuda stub where there is no unversioned libcuda.so; at
  # run time the loader finds the driver's libcuda.so.1 (the stub's soname).
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
  for stubs in "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs"; do
    [[ -d $stubs ]] && NVCC+=(-L"$stubs")
  done
  "${NVCC[@]}" -o "$BUILD/workload_shared" "$SRC/workload.c" -cudart shared -lcuda -lpthread \
    && "${NVCC[@]}" -o "$BUILD/workload_static" "$SRC/workload.c" -cudart static -lcuda -lpthread \
    && "${NVCC[@]}" -o "$BUILD/overhead" "$SRC/overhead.c" -lcuda -lpthread \
    || { echo "nvcc failed" >&2; exit 1; }
  RUN_ENV=()
  SCALE=1
else
  DEVICE=standin
  DRIVER="pinwise CPU stand-in (test fixture)"
  log "STAND-IN mode: pinwise's CPU stand-ins for libcuda/libcudart (test fixtures, not a GPU)"
  STANDIN_DIR=${PINWISE_STANDIN_DIR:-}
  for d in "$ROOT/target/release" "$ROOT/target/debug"; do
    [[ -z $STANDIN_DIR && -f $d/libpinwise_standin_cuda.so ]] && STANDIN_DIR=$d
  done
  [[ -n $STANDIN_DIR ]] || { echo "stand-ins not built (cargo build --workspace)" >&2; exit 2; }
  LIBS=$BUILD/standin-libs
  mkdir -p "$LIBS"
  ln -sf "$STANDIN_DIR/libpinwise_standin_cuda.so" "$LIBS/libcuda.so.1"
  ln -sf "$LIBS/libcuda.so.1" "$LIBS/libcuda.so"
  ln -sf "$STANDIN_DIR/libpinwise_standin_cudart.so" "$LIBS/libcudart.so.13"
  ln -sf "$LIBS/libcudart.so.13" "$LIBS/libcudart.so"
  CC=(gcc -O2 -g -DPINWISE_STANDIN -L"$LIBS" -Wl,-rpath,"$LIBS")
  "${CC[@]}" -o "$BUILD/workload_shared" "$SRC/workload.c" -lcudart -lcuda -lpthread \
    && "${CC[@]}" -o "$BUILD/overhead" "$SRC/overhead.c" -lcuda -lpthread \
    || { echo "gcc failed" >&2; exit 1; }
  export LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  SCALE=${SCALE:-4}   # the stand-in's uprobes are slower: fewer iterations
fi

cat > "$OUT/meta.json" <<EOF
{"device": "$DEVICE", "driver": "$DRIVER", "kernel": "$(uname -r)", "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
 "command": "OUT=$OUT bash bench/gpu/trace/run.sh", "pinwise": "$("$PINWISE" --version 2>/dev/null)"}
EOF

# What the machine lets the tracer do (where `pinwise doctor` exists).
"$PINWISE" doctor --json > "$OUT/doctor.json" 2> "$OUT/doctor.log" || log "pinwise doctor unavailable or failed (see doctor.log)"

# ---- 1. correctness -----------------------------------------------------------------
VARIANTS=(shared)
[[ $MODE == gpu ]] && VARIANTS+=(static)
for v in "${VARIANTS[@]}"; do
  log "workload ($v cudart): plain, then traced"
  "$BUILD/workload_$v" 4 > "$OUT/workload_$v.plain.out" 2>&1 || log "plain workload_$v failed"
  trace "workload_$v" -- "$BUILD/workload_$v" 4
  python3 "$SRC/check.py" workload "$OUT/workload_$v.out" "$OUT/workload_$v.summary.json" \
    "$BUILD/workload_$v" >> "$OUT/verdicts.txt" 2>&1
done
if [[ $MODE == gpu ]] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  log "PyTorch: plain, then traced"
  python3 "$SRC/torch_workload.py" 10 > "$OUT/torch.plain.out" 2>&1 || log "plain torch run failed"
  trace torch -- python3 "$SRC/torch_workload.py" 10
  python3 "$SRC/check.py" torch "$OUT/torch.out" "$TMP/torch.history.json" >> "$OUT/verdicts.txt" 2>&1
else
  log "PyTorch skipped (${MODE} mode or no CUDA-enabled torch)"
fi

# ---- 2. overhead ----------------------------------------------------------------------
declare -A CALLS=([htod]=100000 [htod_async]=100000 [dtoh]=100000 [unified]=100000
                  [copy2d]=100000 [host_alloc]=1000 [register]=2000 [dev_alloc]=2000 [mmap]=20000)
for kind in htod htod_async dtoh unified copy2d host_alloc register dev_alloc mmap; do
  n=$(( ${CALLS[$kind]} / SCALE ))
  log "calls $kind x $n: plain and traced, 3 times each"
  for rep in 1 2 3; do
    "$BUILD/overhead" calls "$kind" "$n" > "$OUT/calls.plain.$kind.$rep.out" 2>&1
    trace "calls.traced.$kind.$rep" -- "$BUILD/overhead" calls "$kind" "$n"
    mv -f "$OUT/calls.traced.$kind.$rep.summary.json" "$OUT/calls.traced.$kind.summary.json"
  done
done
for spec in 4096:20000 1048576:5000 67108864:300; do
  size=${spec%%:*}; n=$(( ${spec##*:} / SCALE ))
  log "copy loop $size B x $n: plain and traced, 3 times each"
  for rep in 1 2 3; do
    "$BUILD/overhead" loop "$size" "$n" > "$OUT/loop.plain.$size.$rep.out" 2>&1
    trace "loop.traced.$size.$rep" -- "$BUILD/overhead" loop "$size" "$n"
  done
done
for spec in 1:4M 4:4M 8:4M 8:256K; do
  t=${spec%%:*}; ring=${spec##*:}
  log "event rate: $t threads, ring buffer $ring, 2 s"
  trace "rate.$t.$ring" --ringbuf-size "$ring" -- "$BUILD/overhead" rate "$t" 2
done

# ---- 3. table and summary -----------------------------------------------------------------
python3 "$SRC/check.py" table "$OUT" > /dev/null
# Keep the histories of the correctness runs (small); the benchmark runs' go.
for h in "$TMP"/workload_*.history.json "$TMP"/torch.history.json; do
  [[ -f $h ]] && mv "$h" "$OUT/"
done
rm -rf "$TMP"
log "done in $(( $(date +%s) - START )) s; results in $OUT/results.md"
echo
echo "== pinwise trace on $DEVICE ($MODE mode) =="
grep -E "^(PASS|FAIL) .*failed checks" "$OUT/verdicts.txt" || echo "no correctness verdicts"
awk '/^## (Cost per traced call|Transfer-heavy loop|Sustained event rate)/{show=1} /^## Tracer memory/{show=0} show' "$OUT/results.md"
