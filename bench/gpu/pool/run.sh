#!/usr/bin/env bash
# The pinned pool on the GPU machine (issue 18, "done means"): PROCS processes (default 4)
# that each need the same SIZE (default 8G) of pinned staging, set up three ways:
#   in-process    each process cuMemHostAlloc's its own SIZE            (RAM x N, GPU mappings x N)
#   shm-register  one /dev/shm file, cuMemHostRegister'ed by each one    (RAM x 1, GPU mappings x N)
#   pool          the named buffer of `pinwise pool serve`, copies by the service through
#                 CUDA IPC                                               (RAM x 1, GPU mappings x 1)
#   pool-huge     the same with the service on 2 MiB huge pages (vm.nr_hugepages is raised for
#                 it and put back; skipped if they cannot be reserved)
# and measures, in one device call of about 2-3 minutes:
#   1. memory, with every process set up (they start one after another, each waiting until
#      the previous one is ready, so each one's own GPU cost is its drop of cuMemGetInfo):
#      pinned RAM (node MemAvailable drop), GPU memory (nvidia-smi memory.used drop, and the
#      processes' own cuMemGetInfo drops while pinning), the service's RSS; then all PROCS
#      copy at once (aggregate bandwidth);
#   2. one process alone: bandwidth (SIZE in CHUNK copies, REPEATS passes each direction,
#      median) through the pool vs in-process pinned, and the latency of 4 KiB copies
#      (LAT_COPIES of them, median and p99): what a copy request through the pool adds.
# Writes $OUT/pool/{results.md,results.json,machine.txt,*.json,*.err} and $OUT/pool.tgz.
#
#   bash bench/gpu/pack.sh                  # on the development machine (release binaries)
#   bash bench/gpu/pool/run.sh              # on the GPU machine, as root (device call)
#
# Needs: .device-carry/ (or target/release/pinwise), the NVIDIA driver, python3. No Rust.
# Trying it on the development machine (CPU stand-in for libcuda, a TEST FIXTURE: nothing it
# prints is a GPU figure): PINWISE=target/debug/pinwise PINWISE_LIBCUDA=...standin_cuda.so
# SIZE=64M CHUNK=16M PROCS=2 DROP_CACHES=0 HUGE=0 OUT=/tmp/x bash bench/gpu/pool/run.sh
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
source bench/gpu/lib/carry.sh
FINAL=${OUT:-$ROOT/bench-out}
D=$FINAL/pool; rm -rf "$D"; mkdir -p "$D"
PROCS=${PROCS:-4}; SIZE=${SIZE:-8G}; CHUNK=${CHUNK:-1G}; REPEATS=${REPEATS:-5}; LAT_COPIES=${LAT_COPIES:-5000}
SOCK=/tmp/pinwise-pool-bench.sock
NAME=pinwise-bench-staging
export PINWISE_POOL_SOCKET=$SOCK
ulimit -l unlimited 2>/dev/null
HP=/proc/sys/vm/nr_hugepages; HP_ORIG=$(cat $HP)
SERVICE_PID=
cleanup() {
  [[ -n $SERVICE_PID ]] && kill "$SERVICE_PID" 2>/dev/null && wait "$SERVICE_PID" 2>/dev/null
  SERVICE_PID=
  echo "$HP_ORIG" > $HP 2>/dev/null
  rm -f "/dev/shm/$NAME"
}
trap cleanup EXIT

{
  date -u +%FT%TZ; uname -r; nproc
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>&1
  grep -E 'MemTotal|MemAvailable' /proc/meminfo
  echo "pinwise: $("$PW" --version 2>&1)"
  echo "PROCS=$PROCS SIZE=$SIZE CHUNK=$CHUNK REPEATS=$REPEATS LAT_COPIES=$LAT_COPIES"
} > "$D/machine.txt"

gpu_used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -n1 | grep -E '^[0-9]+$' || echo 0; }
avail_kib() { awk '/MemAvailable/ {print $2}' /proc/meminfo; }

start_service() { # extra args
  "$PW" pool serve --socket "$SOCK" --capacity 64G --client-budget 16G "$@" > "$D/service.log" 2>&1 &
  SERVICE_PID=$!
  for _ in $(seq 100); do "$PW" pool status --socket "$SOCK" > /dev/null 2>&1 && return 0; sleep 0.1; done
  echo "the pool did not start:"; cat "$D/service.log"; return 1
}

# ---- 1. memory with PROCS processes set up, then all copy at once ----
printf '{\n' > "$D/memory.json"
first=1
memory_case() { # CASE MODE [service args]
  local case=$1 mode=$2; shift 2
  rm -f "/dev/shm/$NAME"
  [[ ${DROP_CACHES:-1} == 1 ]] && { sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null; }
  local a0 g0 a1 g1 svc_rss=0
  a0=$(avail_kib); g0=$(gpu_used_mib)
  if [[ $mode == pool ]]; then start_service "$@" || return; fi
  local pids=() fds=() i
  for i in $(seq 1 "$PROCS"); do
    mkfifo "$D/in.$case.$i"
    "$PW" bench pool --mode "$mode" --size "$SIZE" --chunk "$CHUNK" --repeats 1 --latency-copies 0 \
      --name "$NAME" --socket "$SOCK" --hold < "$D/in.$case.$i" > "$D/$case.$i.json" 2> "$D/$case.$i.err" &
    pids+=($!)
    exec {fd}> "$D/in.$case.$i"; fds+=($fd)
    for _ in $(seq 600); do grep -q '^ready' "$D/$case.$i.err" && break; kill -0 "${pids[-1]}" 2>/dev/null || break; sleep 0.1; done
    grep -q '^ready' "$D/$case.$i.err" || { echo "$case: process $i did not get ready" | tee -a "$D/notes.txt"; cat "$D/$case.$i.err"; }
  done
  sleep 1
  a1=$(avail_kib); g1=$(gpu_used_mib)
  [[ -n $SERVICE_PID ]] && svc_rss=$(awk '/VmRSS/ {print $2}' /proc/$SERVICE_PID/status)
  [[ -n $SERVICE_PID ]] && "$PW" pool status --socket "$SOCK" --json > "$D/$case.pool-status.json" 2>/dev/null
  local t0; t0=$(date +%s.%N)
  for fd in "${fds[@]}"; do exec {fd}>&-; done   # all start copying at once
  for p in "${pids[@]}"; do wait "$p"; done
  local wall; wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
  rm -f "$D"/in."$case".*
  [[ -n $SERVICE_PID ]] && { kill "$SERVICE_PID"; wait "$SERVICE_PID" 2>/dev/null; SERVICE_PID=; }
  (( first )) || printf ',\n' >> "$D/memory.json"; first=0
  printf '"%s": {"mode": "%s", "ram_drop_kib": %s, "gpu_used_drop_mib": %s, "service_rss_kib": %s, "concurrent_wall_s": %s}' \
    "$case" "$mode" $((a0 - a1)) $((g1 - g0)) "${svc_rss:-0}" "$wall" >> "$D/memory.json"
}
memory_case in-process in-process
shm_free=$(df -B1 --output=avail /dev/shm 2>/dev/null | tail -n1)
if [[ -n $shm_free ]] && (( shm_free >= $(numfmt --from=iec "$SIZE") )); then
  memory_case shm-register shm-register
else
  echo "shm-register: /dev/shm has ${shm_free:-no} free bytes, less than $SIZE: skipped" >> "$D/notes.txt"
fi
memory_case pool pool --no-huge-pages
need=$(( $(numfmt --from=iec "$SIZE") / 2097152 + 8 ))
if [[ ${HUGE:-1} == 1 ]] && echo $((HP_ORIG + need)) > $HP 2>/dev/null && (( $(cat $HP) >= HP_ORIG + need )); then
  memory_case pool-huge pool
else
  echo "pool-huge: could not reserve $need huge pages" >> "$D/notes.txt"
fi
echo "$HP_ORIG" > $HP
printf '\n}\n' >> "$D/memory.json"

# ---- 2. one process alone: bandwidth and small-copy latency ----
rm -f "/dev/shm/$NAME"
"$PW" bench pool --mode in-process --size "$SIZE" --chunk "$CHUNK" --repeats "$REPEATS" --latency-copies "$LAT_COPIES" \
  < /dev/null > "$D/solo.in-process.json" 2> "$D/solo.in-process.err"
start_service --no-huge-pages && {
  "$PW" bench pool --mode pool --size "$SIZE" --chunk "$CHUNK" --repeats "$REPEATS" --latency-copies "$LAT_COPIES" \
    --name "$NAME" --socket "$SOCK" < /dev/null > "$D/solo.pool.json" 2> "$D/solo.pool.err"
  kill "$SERVICE_PID"; wait "$SERVICE_PID" 2>/dev/null; SERVICE_PID=
}

python3 - "$D" "$PROCS" <<'PY' > "$D/results.md"
import glob, json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
def load(p):
    try: return json.load(open(p))
    except Exception: return None
mem = load(os.path.join(d, "memory.json")) or {}
print("# pinwise pool on the GPU (bench/gpu/pool/run.sh)\n")
print(open(os.path.join(d, "machine.txt")).read().replace("\n", "  \n"))
GiB, MiB = 1 << 30, 1 << 20
print(f"## {n} processes, each needing the same staging, all set up at once\n")
print("| setup | pinned RAM GiB (MemAvailable drop) | GPU MiB used (nvidia-smi drop, all) | GPU MiB for pinning (sum of cuMemGetInfo drops while each pinned) | service RSS MiB | setup s per process (mean) | all copying at once: aggregate GB/s |")
print("|---|---|---|---|---|---|---|")
rows = {}
for case, m in mem.items():
    procs = [load(p) for p in sorted(glob.glob(os.path.join(d, f"{case}.*.json"))) if not p.endswith("pool-status.json")]
    procs = [p for p in procs if p]
    pin = sum(p["gpu_free_before"] - p["gpu_free_after_setup"] for p in procs)
    setup = sum(p["setup_s"] for p in procs) / len(procs) if procs else float("nan")
    agg = sum(2 * p["size"] for p in procs) / m["concurrent_wall_s"] / 1e9 if procs else float("nan")
    rows[case] = (m["ram_drop_kib"] * 1024, m["gpu_used_drop_mib"], pin)
    st = load(os.path.join(d, f"{case}.pool-status.json"))
    label = f"{case} ({len(procs)} ran" + (f", {st['huge_bytes'] / GiB:.1f} GiB on 2 MiB pages" if st else "") + ")"
    print(f"| {label} | {m['ram_drop_kib'] / 1048576:.2f} | {m['gpu_used_drop_mib']} | {pin / MiB:.1f} | {m['service_rss_kib'] / 1024:.0f} | {setup:.2f} | {agg:.1f} |")
print("\nGPU MiB used includes every process's CUDA context and its device buffer (CHUNK), and for")
print("the pool the service's context: the cuMemGetInfo column is the pinning alone.\n")
solo = {k: load(os.path.join(d, f"solo.{k}.json")) for k in ("in-process", "pool")}
print("## One process alone: bandwidth and small-copy latency\n")
print("| staging | HtoD GB/s (median) | DtoH GB/s (median) | 4 KiB copy µs median | p99 |")
print("|---|---|---|---|---|")
for k, s in solo.items():
    if s: print(f"| {k} | {s['htod_gbps_median']:.2f} | {s['dtoh_gbps_median']:.2f} | {s['latency_us_median']:.1f} | {s['latency_us_p99']:.1f} |")
a, b = solo["in-process"], solo["pool"]
if a and b:
    print(f"\npool / in-process bandwidth: HtoD {b['htod_gbps_median'] / a['htod_gbps_median']:.3f}, DtoH {b['dtoh_gbps_median'] / a['dtoh_gbps_median']:.3f} (goal: >= 0.95)  ")
    print(f"latency added per copy request (median): {b['latency_us_median'] - a['latency_us_median']:.1f} µs")
notes = os.path.join(d, "notes.txt")
if os.path.exists(notes):
    print("\n## Notes\n")
    for l in open(notes): print(f"- {l.strip()}")
PY
cat "$D/results.md"
python3 -c "import json,glob,os,sys; d=sys.argv[1]; print(json.dumps({os.path.basename(p): json.load(open(p)) for p in glob.glob(d+'/*.json')}, indent=1))" "$D" > "$D/results.json" 2>/dev/null
tar czf "$FINAL/pool.tgz" -C "$FINAL" pool
