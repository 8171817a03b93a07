#!/usr/bin/env bash
# bench/gpu/trace/attach_malloc.sh: on the GPU machine, checks what issue 11's tracer parts
# assume about the real driver, and measures the malloc probes there.
#
#   OUT=/some/dir bash bench/gpu/trace/attach_malloc.sh
#
# Needs: root, target/release/pinwise (carried from the dev machine), gcc, the NVIDIA
# driver (libcuda.so.1). No nvcc, no network.
#
# 1. Attach (`pinwise trace --pid`): bench/gpu/trace/pin_then_copy.c pins 4 MiB with
#    cuMemAllocHost and maps 2 MiB pageable before the attach, then copies. It prints the
#    /proc/self/maps line of the pinned buffer: pinwise assumes `rw-s ... /dev/nvidiactl`
#    (crates/pinwise-trace/src/preattach.rs). PASS when the history has the 4 MiB pinned
#    allocation with its 25 copies (20 HtoD, 5 DtoH), no record for the early buffer, and
#    the report says the trace attached to a running process.
# 2. Stacks and symbols: the history of step 1 names its sites (symbols stored at trace end).
# 3. Malloc probe cost: bench/trace-malloc/run.sh against the real libcuda (CPU ns per
#    malloc+free pair, plain / traced / traced with --malloc).
# Everything goes under $OUT; the last lines printed summarize.
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out/attach-malloc}
PINWISE=${PINWISE:-$ROOT/target/release/pinwise}
mkdir -p "$OUT"
fail=0
say() { echo "[attach-malloc] $*" | tee -a "$OUT/summary.txt"; }
[[ -x $PINWISE ]] || { echo "no pinwise at $PINWISE" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "run as root" >&2; exit 2; }
# LIBCUDA=path overrides (e.g. pinwise's CPU stand-in, a test fixture, to try the script
# on the dev machine: then nothing here is a GPU figure).
libcuda=${LIBCUDA:-$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')}
extra=(); [[ -n ${LIBCUDA:-} ]] && extra=(--libcuda "$LIBCUDA")
[[ -n $libcuda ]] || { echo "no libcuda.so.1 in the ldconfig cache" >&2; exit 2; }
libdir=$(dirname "$libcuda")
mkdir -p "$OUT/lib" && ln -sf "$libcuda" "$OUT/lib/libcuda.so" && ln -sf "$libcuda" "$OUT/lib/libcuda.so.1"
gcc -O1 -g -fno-omit-frame-pointer -I"$ROOT/fixtures/include" -o "$OUT/pin_then_copy" \
  bench/gpu/trace/pin_then_copy.c -L"$OUT/lib" -lcuda -Wl,-rpath,"$OUT/lib" || exit 2

# 1. attach
coproc PROG { exec "$OUT/pin_then_copy" with-late 2> "$OUT/pin_then_copy.err"; }
read -r ready pinned early <&"${PROG[0]}"
say "program: $ready pinned=$pinned early=$early; maps lines: $(tr '\n' '|' < "$OUT/pin_then_copy.err")"
"$PINWISE" trace "${extra[@]}" --pid "$PROG_PID" -o "$OUT/attach.json" --summary-json "$OUT/attach.summary.json" \
  2> "$OUT/attach.trace.log" &
tracer=$!
for _ in $(seq 100); do grep -q "tracing PID" "$OUT/attach.trace.log" && break; sleep 0.1; done
echo go >&"${PROG[1]}"
wait "$PROG_PID"; wait "$tracer" || { say "FAIL: pinwise trace --pid failed"; fail=1; }
"$PINWISE" report "$OUT/attach.json" > "$OUT/attach.report.txt" 2>&1
python3 - "$OUT/attach.json" "$pinned" "$early" <<'PY' | tee -a "$OUT/summary.txt" || fail=1
import json, sys
h = json.load(open(sys.argv[1])); pinned = int(sys.argv[2]); early = int(sys.argv[3])
allocs = h["allocations"]
def covers(a, x): return a["start"] <= x < a["start"] + a["size"]
p = [a for a in allocs if covers(a, pinned)]
e = [a for a in allocs if covers(a, early)]
ok = len(p) == 1 and p[0]["kind"] == "PINNED_ALLOC" and not e
print(("PASS" if ok else "FAIL") + f": pre-attach pinned buffer records {[(a['kind'], a['size']) for a in p]}, early buffer records {len(e)}")
print("symbols stored:", len(h.get("symbols", [])), "stacks:", len(h.get("stacks", [])))
sys.exit(0 if ok else 1)
PY
tr -s ' \n' ' ' < "$OUT/attach.report.txt" | grep -q "attached to a running process" \
  && say "PASS: the report says what the attach could not know" \
  || { say "FAIL: no attach sentence in the report"; fail=1; }

# 3. malloc probe cost on this machine
[[ ${SKIP_MALLOC_COST:-0} == 1 ]] || LIBCUDA_DIR=$OUT/lib PINWISE=$PINWISE ROUNDS=3 bash bench/trace-malloc/run.sh \
  > "$OUT/malloc-cost.md" 2>&1 || fail=1
if [[ -f $OUT/malloc-cost.md ]]; then
  say "malloc probe cost (CPU ns per malloc+free pair):"; tee -a "$OUT/summary.txt" < "$OUT/malloc-cost.md"
fi
exit $fail
