#!/usr/bin/env bash
# `pinwise run --pool` on the GPU machine (issue 18): PROCS (default 4) processes of
# bench/gpu/pool/pool_app.c, each with its own SIZE_MIB (default 2048) pinned staging buffer
# (cuMemAllocHost) and ROUNDS (default 3) passes of asynchronous uploads and rotating
# downloads (CHUNK_MIB at a time), run four ways:
#   plain        without pinwise
#   pinwise      pinwise run (no pool)
#   pool         pinwise run --pool, with `pinwise pool serve` running
#   pool-absent  pinwise run --pool with no service (the fallback; one process)
#   pool-stopped pinwise run --pool with the service stopped (SIGSTOP) once every process has
#                done its first round (POOL_APP_PAUSE): each process's next copy is not
#                started within its 5 s deadline,
#                is made in the process, and the service, resumed after the run, must find
#                every such request past its deadline and copy none of them (expired_copies
#                in its status = PROCS, its copies unchanged)
# and then the latency of one 4 KiB copy request through the pool vs in-process pinned
# (`pinwise bench pool`, 2000 copies each; the pool's copy protocol has two answers per copy
# since the review fix: this is the figure to compare with bench/results/gpu-shared-pool.md).
# Checks that every process of every way exits 0 with the checksum of the plain run of the
# same seed, and records, with all processes set up (they start one after another, each
# waiting until the one before is ready, so each one's cuMemGetInfo drop around its pinned
# allocation is its own): pinned RAM (node MemAvailable drop), GPU memory (nvidia-smi
# memory.used drop; the processes' cuMemGetInfo drops), the service's RSS and status, the
# wall time of all processes copying at once, and pinwise's pool counters (--stats-json).
# Expected (and what the preload's documentation says): the pool's private buffers move the
# pinning and its GPU page tables to the service, they do not shrink them; asynchronous
# copies on pool buffers become synchronous (slower copy phase). About 2-3 minutes.
# Writes two files under $OUT: run-pool-results.md and run-pool.tgz (everything: results.md,
# results.json, machine.txt, each process's output and statistics, the service's log).
#
#   bash bench/gpu/pack.sh                  # on the development machine (release binaries)
#   bash bench/gpu/pool/run_pool.sh         # on the GPU machine, as root (device call)
#
# Needs: .device-carry/ (or target/release/pinwise), gcc, the NVIDIA driver, python3.
# Trying it on the development machine (CPU stand-in for libcuda, a TEST FIXTURE: nothing it
# prints is a GPU figure): PINWISE=target/debug/pinwise LIBCUDA=$PWD/target/debug/libpinwise_standin_cuda.so
# SIZE_MIB=64 CHUNK_MIB=16 PROCS=2 OUT=/tmp/x bash bench/gpu/pool/run_pool.sh
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
source bench/gpu/lib/carry.sh
FINAL=${OUT:-$ROOT/bench-out}
mkdir -p "$FINAL"
WORK=$(mktemp -d /tmp/run-pool.XXXXXX)
D=$WORK/run-pool; mkdir -p "$D"
PROCS=${PROCS:-4}; SIZE_MIB=${SIZE_MIB:-2048}; CHUNK_MIB=${CHUNK_MIB:-256}; ROUNDS=${ROUNDS:-3}
SOCK=/tmp/pinwise-run-pool.sock
ulimit -l unlimited 2>/dev/null
libcuda=${LIBCUDA:-$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')}
[[ -n $libcuda ]] || { echo "no libcuda.so.1 in the ldconfig cache" >&2; exit 2; }
mkdir -p "$D/lib" && ln -sf "$libcuda" "$D/lib/libcuda.so" && ln -sf "$libcuda" "$D/lib/libcuda.so.1"
gcc -O2 -I"$ROOT/fixtures/include" -o "$D/pool_app" bench/gpu/pool/pool_app.c -L"$D/lib" -lcuda -Wl,-rpath,"$D/lib" \
  || { echo "cannot build pool_app" >&2; exit 2; }
# The service and pinwise find the same libcuda as the program.
export PINWISE_LIBCUDA=$libcuda

SERVICE_PID=
stop_service() {
  [[ -n $SERVICE_PID ]] && kill "$SERVICE_PID" 2>/dev/null && wait "$SERVICE_PID" 2>/dev/null
  SERVICE_PID=
}
trap stop_service EXIT
start_service() {
  rm -f "$SOCK"
  "$PW" pool serve --socket "$SOCK" --capacity $(( (PROCS + 1) * SIZE_MIB ))M --client-budget $(( SIZE_MIB + 64 ))M \
    --no-huge-pages > "$D/service.log" 2>&1 &
  SERVICE_PID=$!
  for _ in $(seq 100); do "$PW" pool status --socket "$SOCK" > /dev/null 2>&1 && return 0; sleep 0.1; done
  echo "the pool did not start:"; cat "$D/service.log"; return 1
}

{
  date -u +%FT%TZ; uname -r; nproc
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  grep -E 'MemTotal|MemAvailable' /proc/meminfo
  echo "pinwise: $("$PW" --version 2>&1)"
  echo "libcuda: $libcuda"
  echo "PROCS=$PROCS SIZE_MIB=$SIZE_MIB CHUNK_MIB=$CHUNK_MIB ROUNDS=$ROUNDS"
} > "$D/machine.txt"

gpu_used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -n1 | grep -E '^[0-9]+$' || echo 0; }
avail_kib() { awk '/MemAvailable/ {print $2}' /proc/meminfo; }

printf '{\n' > "$D/cases.json"
first=1
run_case() { # CASE PROCS
  local case=$1 n=$2 go=$D/$1.go i
  rm -f "$go"
  sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null
  local a0 g0 a1 g1 rss=0
  a0=$(avail_kib); g0=$(gpu_used_mib)
  [[ $case == pool || $case == pool-stopped ]] && { start_service || return; }
  local pids=()
  for i in $(seq 1 "$n"); do
    local app=(env POOL_APP_PAUSE="$D/$case.pause" "$D/pool_app" "$SIZE_MIB" "$CHUNK_MIB" "$ROUNDS" "$i" "$go")
    [[ $case == pool-stopped ]] || app=("${app[@]:2}")
    local pwrun=("$PW" run --no-malloc-hooks --no-stacks --stats-json "$D/$case.$i.stats.json" --force)
    case $case in
      plain) "${app[@]}" ;;
      pinwise) "${pwrun[@]}" -- "${app[@]}" ;;
      pool | pool-stopped) "${pwrun[@]}" --pool="$SOCK" -- "${app[@]}" ;;
      pool-absent) "${pwrun[@]}" --pool=/tmp/pinwise-run-pool-nobody.sock -- "${app[@]}" ;;
    esac > "$D/$case.$i.out" 2> "$D/$case.$i.err" &
    pids+=($!)
    for _ in $(seq 1200); do grep -q '^ready' "$D/$case.$i.err" && break; kill -0 "${pids[-1]}" 2>/dev/null || break; sleep 0.1; done
    grep -q '^ready' "$D/$case.$i.err" || echo "$case: process $i did not get ready: $(tail -n 3 "$D/$case.$i.err")" >> "$D/notes.txt"
  done
  sleep 1
  a1=$(avail_kib); g1=$(gpu_used_mib)
  if [[ -n $SERVICE_PID ]]; then
    rss=$(awk '/VmRSS/ {print $2}' /proc/$SERVICE_PID/status)
    "$PW" pool status --socket "$SOCK" --json > "$D/$case.pool-status.json" 2>/dev/null
  fi
  local t0 codes=() p
  t0=$(date +%s.%N)
  touch "$go"
  if [[ $case == pool-stopped ]]; then
    for i in $(seq 1 "$n"); do
      for _ in $(seq 1200); do grep -q '^paused' "$D/$case.$i.err" && break; kill -0 "${pids[i-1]}" 2>/dev/null || break; sleep 0.1; done
      grep -q '^paused' "$D/$case.$i.err" || echo "$case: process $i did not pause: $(tail -n 3 "$D/$case.$i.err")" >> "$D/notes.txt"
    done
    kill -STOP "$SERVICE_PID"
    touch "$D/$case.pause"
  fi
  for p in "${pids[@]}"; do wait "$p"; codes+=($?); done
  local wall; wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
  if [[ $case == pool-stopped ]]; then
    kill -CONT "$SERVICE_PID"
    # The resumed service reads each process's late request and answers it Expired.
    sleep 2
    "$PW" pool status --socket "$SOCK" --json > "$D/$case.after.pool-status.json" 2>/dev/null
  fi
  stop_service
  (( first )) || printf ',\n' >> "$D/cases.json"; first=0
  printf '"%s": {"procs": %s, "ram_drop_kib": %s, "gpu_used_drop_mib": %s, "service_rss_kib": %s, "copy_wall_s": %s, "exit_codes": [%s]}' \
    "$case" "$n" $((a0 - a1)) $((g1 - g0)) "${rss:-0}" "$wall" "$(IFS=,; echo "${codes[*]}")" >> "$D/cases.json"
}
run_case plain "$PROCS"
run_case pinwise "$PROCS"
run_case pool "$PROCS"
run_case pool-absent 1
run_case pool-stopped "$PROCS"
printf '\n}\n' >> "$D/cases.json"

# One 4 KiB copy request's latency, in-process pinned vs through the pool (median, p99).
"$PW" bench pool --mode in-process --size 64M --chunk 16M --repeats 1 --latency-copies 2000 \
  < /dev/null > "$D/latency.in-process.json" 2> "$D/latency.in-process.err"
start_service && {
  "$PW" bench pool --mode pool --size 64M --chunk 16M --repeats 1 --latency-copies 2000 \
    --name run-pool-latency --socket "$SOCK" < /dev/null > "$D/latency.pool.json" 2> "$D/latency.pool.err"
  stop_service
}

python3 - "$D" <<'PY' > "$D/results.md"
import glob, json, os, sys
d = sys.argv[1]
def load(p):
    try: return json.load(open(p))
    except Exception: return None
def lines(p):
    try: return [json.loads(l) for l in open(p) if l.startswith("{")]
    except Exception: return []
cases = load(os.path.join(d, "cases.json")) or {}
print("# `pinwise run --pool` on the GPU (bench/gpu/pool/run_pool.sh)\n")
print(open(os.path.join(d, "machine.txt")).read().replace("\n", "  \n"))
MiB, GiB = 1 << 20, 1 << 30
plain = {}
for p in glob.glob(os.path.join(d, "plain.*.out")):
    for r in lines(p): plain[r["seed"]] = r["checksum"]
print("| way | processes | exit codes | checksums = plain | pinned RAM GiB (MemAvailable drop) | GPU MiB used (nvidia-smi drop) | GPU MiB at the pinned allocations (sum of cuMemGetInfo drops) | service RSS MiB | copy phase s (all at once) | copy GB/s per process (mean) | pool buffers / service copies / fallbacks / async made sync / copies not started / copies stuck |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
ok_all = True
for case, c in cases.items():
    outs = [r for p in sorted(glob.glob(os.path.join(d, f"{case}.*.out"))) for r in lines(p)]
    same = all(plain.get(r["seed"]) == r["checksum"] for r in outs) and len(outs) == c["procs"]
    ok = same and all(x == 0 for x in c["exit_codes"])
    ok_all &= ok
    gpu_pin = sum(r["pinned_alloc_gpu_bytes"] for r in outs) / MiB
    gbps = sum(r["copy_gbps"] for r in outs) / len(outs) if outs else float("nan")
    pool = [s.get("processes", [{}])[0].get("pool", {}) for s in (load(p) for p in glob.glob(os.path.join(d, f"{case}.*.stats.json"))) if s]
    tot = lambda k: sum(int(p.get(k, 0)) for p in pool)
    fb = tot("alloc_fallbacks") + tot("buffers_registered_here") + tot("buffers_left_pageable")
    pool_col = f"{tot('buffers')} / {tot('copies')} / {fb} / {tot('async_made_sync')} / {tot('copies_not_started')} / {tot('copies_stuck')}" if any(p.get("configured") for p in pool) else "-"
    print(f"| {case} | {c['procs']} | {c['exit_codes']} | {'yes' if same else 'NO'} | {c['ram_drop_kib'] / 1048576:.2f} | {c['gpu_used_drop_mib']} | {gpu_pin:.1f} | {c['service_rss_kib'] / 1024:.0f} | {c['copy_wall_s']:.2f} | {gbps:.2f} | {pool_col} |")
print(f"\nAll ways correct (exit 0, checksums equal to the plain run's): {'yes' if ok_all else 'NO'}")
st = load(os.path.join(d, "pool.pool-status.json"))
if st: print(f"\nService status with every process set up: {json.dumps(st)}")
after = load(os.path.join(d, "pool-stopped.after.pool-status.json"))
if after is not None and "pool-stopped" in cases:
    n = cases["pool-stopped"]["procs"]
    ok = after.get("expired_copies") == n
    print(f"\npool-stopped: the resumed service found {after.get('expired_copies')} late copy requests past their deadline "
          f"(expected {n}) and had made {after.get('copies')} copies in all: {'as expected' if ok else 'NOT AS EXPECTED'}")
    print(f"Service status after it resumed: {json.dumps(after)}")
lat = {m: load(os.path.join(d, f"latency.{m}.json")) for m in ("in-process", "pool")}
if all(lat.values()):
    print("\n## One 4 KiB copy request (2000 timed one by one)\n")
    print("| staging | latency µs median | p99 |\n|---|---|---|")
    for m, s in lat.items(): print(f"| {m} | {s['latency_us_median']:.1f} | {s['latency_us_p99']:.1f} |")
    print(f"\nlatency added per copy request through the pool (median): {lat['pool']['latency_us_median'] - lat['in-process']['latency_us_median']:.1f} µs")
else:
    print("\nlatency: a `pinwise bench pool` run failed (see latency.*.err in the tarball)")
notes = os.path.join(d, "notes.txt")
if os.path.exists(notes):
    print("\n## Notes\n")
    for l in open(notes): print(f"- {l.strip()}")
PY
cat "$D/results.md"
python3 -c "import json,glob,os,sys; d=sys.argv[1]; print(json.dumps({os.path.basename(p): json.load(open(p)) for p in glob.glob(d+'/*.json')}, indent=1))" "$D" > "$D/results.json" 2>/dev/null
cp "$D/results.md" "$FINAL/run-pool-results.md"
tar czf "$FINAL/run-pool.tgz" -C "$WORK" run-pool
rm -rf "$WORK"
