#!/usr/bin/env bash
# A program that makes the CPU's time-stamp counter fault (prctl(PR_SET_TSC,
# PR_TSC_SIGSEGV)) and then copies, pageable and pinned, on its thread and on a thread it
# starts (crates/pinwise-preload/tests/programs/tsc_sigsegv.c), against the real libcuda:
# plain, and under `pinwise run` in every mode. pinwise's copy hooks time themselves with
# that counter (and the vDSO's clock_gettime reads it): under pinwise it must exit as
# plainly, with the same output. On the stand-in this is the CI test
# crates/pinwise-preload/tests/tsc_sigsegv.rs. If the plain run fails, the driver itself
# reads the counter after the switch: then the program cannot run on this machine at all,
# and the script says so (status 3) rather than blame pinwise.
#   bash bench/gpu/safety/tsc_sigsegv.sh        # on the GPU machine (device call)
# Needs .device-carry/ (or target/release/pinwise and libpinwise_preload.so), gcc, libcuda.
# Trying it on the development machine (CPU stand-in for libcuda, a TEST FIXTURE):
# PINWISE=$PWD/target/debug/pinwise LIBCUDA=$PWD/target/debug/libpinwise_standin_cuda.so OUT=/tmp/x bash ...
# Writes $OUT/tsc_sigsegv/ (each run's stdout, stderr, statistics) and prints a table.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
source bench/gpu/lib/carry.sh
D=${OUT:-$ROOT/bench-out}/tsc_sigsegv; rm -rf "$D"; mkdir -p "$D/lib"
libcuda=${LIBCUDA:-$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')}
[[ -n $libcuda ]] || { echo "no libcuda.so.1 in the ldconfig cache" >&2; exit 2; }
ln -sf "$libcuda" "$D/lib/libcuda.so"; ln -sf "$libcuda" "$D/lib/libcuda.so.1"
gcc -O1 -pthread -o "$D/tsc_sigsegv" crates/pinwise-preload/tests/programs/tsc_sigsegv.c \
  -L"$D/lib" -lcuda -Wl,-rpath,"$D/lib" || exit 2
"$D/tsc_sigsegv" > "$D/plain.out" 2> "$D/plain.err"
rc=$?
printf '%-22s %-6s %s\n' run status output
printf '%-22s %-6s %s\n' plain "$rc" "$(tr '\n' ' ' < "$D/plain.out")"
if [[ $rc == 127 ]]; then
  echo "the program did not start: $(cat "$D/plain.err")" >&2
  exit 2
elif [[ $rc != 0 ]]; then
  echo "the plain run failed (status $rc): the driver reads the counter itself; nothing to check" >&2
  exit 3
fi
bad=0
for mode in adaptive profile use; do
  args=(--mode "$mode" --force --stats-json "$D/$mode.stats.json")
  [[ $mode != adaptive ]] && args+=(--profile "$D/profile.json")
  "$PW" run "${args[@]}" -- "$D/tsc_sigsegv" > "$D/$mode.out" 2> "$D/$mode.err"
  rc=$?
  same=yes; cmp -s "$D/plain.out" "$D/$mode.out" || same=no
  printf '%-22s %-6s same-output=%s problems=%s\n' "run --mode $mode" "$rc" "$same" \
    "$(python3 bench/gpu/lib/stats_keys.py "$D/$mode.stats.json" -- problems)"
  [[ $rc == 0 && $same == yes ]] || bad=$((bad + 1))
done
echo "runs that did not exit as plainly: $bad"
[[ $bad == 0 ]]
