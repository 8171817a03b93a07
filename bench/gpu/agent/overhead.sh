#!/usr/bin/env bash
# `pinwise agent`'s overhead on the GPU machine (issue 14), one device call:
#   1. framework programs of bench/gpu/frameworks/ run plain and with the agent attached
#      node-wide, interleaved (plain/agent, then agent/plain), REPEATS times (default 5):
#      wall time of each run, stdout compared with the plain run's, exit status; the agent's
#      CPU seconds and RSS while it ran (from its own /metrics and /proc);
#   2. an event storm: bench/gpu/agent/workload.c's `storm` mode (tiny HtoD copies from many
#      threads) plain and with the agent on a small ring buffer: the storm's time, the drops
#      the agent counted and exported, the copies it counted, and how long /metrics took to
#      answer during the storm (a stall would show there or in the storm's time).
# Writes $OUT/agent/{runs.tsv,storm.tsv,results.md} and $OUT/agent.tgz.
#
#   bash bench/gpu/pack.sh                       # on the development machine
#   bash bench/gpu/agent/overhead.sh [PROGRAM.py ...]   # on the GPU machine (device call)
#
# Needs: root, .device-carry/ (or target/release/pinwise), gcc, the NVIDIA driver, python3
# with the frameworks' packages for the programs chosen. No Rust, no network.
# LIBCUDA=path probes another driver library (pinwise's CPU stand-in, a TEST FIXTURE, to try
# the script on the development machine: then nothing here is a GPU figure).
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
source bench/gpu/lib/carry.sh
[[ $(id -u) -eq 0 ]] || { echo "run as root" >&2; exit 2; }
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
FINAL=${OUT:-$ROOT/bench-out}
D=$FINAL/agent; rm -rf "$D"; mkdir -p "$D"
REPEATS=${REPEATS:-5}; BUDGET_S=${BUDGET_S:-480}
PORT=${PORT:-19464}
progs=("$@"); ((${#progs[@]})) || progs=(torch_hot_pageable.py torch_mixed.py)

libcuda=${LIBCUDA:-$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')}
[[ -n $libcuda ]] || { echo "no libcuda.so.1 in the ldconfig cache" >&2; exit 2; }
{ date -u +%FT%TZ; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1; nproc; echo "libcuda: $libcuda"; } > "$D/machine.txt"

metric() { # NAME: the value of an unlabelled-but-node metric from the agent's /metrics
  curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics" | awk -v n="$1" '$1 ~ "^"n"[{ ]" || $1 == n {print $NF; exit}'
}
AGENT_PID=
agent_start() { # extra args...
  "$PW" agent --libcuda "$libcuda" --listen 127.0.0.1:$PORT "$@" > "$D/agent.$$.log" 2>&1 &
  AGENT_PID=$!
  for _ in $(seq 100); do curl -sf --max-time 1 "http://127.0.0.1:$PORT/healthz" >/dev/null && return 0; sleep 0.1; done
  echo "agent did not start:"; cat "$D/agent.$$.log"; return 1
}
agent_stop() { # TAG: records CPU s and RSS, then SIGTERM
  local cpu rss hwm
  cpu=$(metric pinwise_agent_cpu_seconds_total); rss=$(metric pinwise_agent_resident_memory_bytes)
  hwm=$(awk '/VmHWM/ {print $2*1024}' /proc/$AGENT_PID/status 2>/dev/null)
  printf '%s\t%s\t%s\t%s\n' "$1" "${cpu:-?}" "${rss:-?}" "${hwm:-?}" >> "$D/agent_cost.tsv"
  kill -TERM $AGENT_PID; wait $AGENT_PID; echo "agent exit $? ($1)" >> "$D/agent_exits.txt"
}

# 1. Framework programs, plain vs agent, interleaved.
printf 'program\trun\trep\trc\twall_s\tsame_stdout\n' > "$D/runs.tsv"
printf 'tag\tagent_cpu_s\tagent_rss_bytes\tagent_peak_rss_bytes\n' > "$D/agent_cost.tsv"
one() { # NAME RUN REP
  local name=$1 run=$2 rep=$3 prog=$ROOT/bench/gpu/frameworks/$1 t0 t1 rc same=-
  t0=$(date +%s.%N)
  timeout 240 python3 "$prog" > "$D/$name.$run.$rep.out" 2> "$D/$name.$run.$rep.err"; rc=$?
  t1=$(date +%s.%N)
  if [[ -f $D/$name.plain.1.out ]]; then cmp -s "$D/$name.plain.1.out" "$D/$name.$run.$rep.out" && same=yes || same=NO; fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$run" "$rep" "$rc" "$(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.3f", b-a}')" "$same" >> "$D/runs.tsv"
}
for p in "${progs[@]}"; do
  [[ -f bench/gpu/frameworks/$p ]] || { echo "no bench/gpu/frameworks/$p" >&2; continue; }
  one "$p" plain 0   # warm-up (caches, compilation), not counted
  for rep in $(seq 1 "$REPEATS"); do
    (( SECONDS > BUDGET_S )) && { echo "budget spent at $p rep $rep" >> "$D/notes.txt"; break; }
    order=(plain agent); (( rep % 2 == 0 )) && order=(agent plain)
    for run in "${order[@]}"; do
      if [[ $run == agent ]]; then
        agent_start || break 2
        one "$p" agent "$rep"
        agent_stop "$p.$rep"
      else
        one "$p" plain "$rep"
      fi
    done
  done
done

# 2. Event storm: THREADS threads x COPIES copies of 64 bytes.
THREADS=${THREADS:-32}; COPIES=${COPIES:-20000}
mkdir -p "$D/lib" && ln -sf "$libcuda" "$D/lib/libcuda.so" && ln -sf "$libcuda" "$D/lib/libcuda.so.1"
gcc -O1 -I"$ROOT/fixtures/include" -o "$D/workload" bench/gpu/agent/workload.c -L"$D/lib" -lcuda -Wl,-rpath,"$D/lib" -lpthread \
  || { echo "cannot build the storm workload" >&2; exit 2; }
printf 'run\trep\trc\twall_s\texpected_copies\tcounted_copies\tdrops\tmax_scrape_s\n' > "$D/storm.tsv"
storm() { # RUN REP
  local t0 t1 rc counted=- drops=- maxs=- scraper
  rm -f "$D/storm.done" "$D/storm.maxscrape"
  if [[ $1 == agent ]]; then
    agent_start --ringbuf-size 256K --comm workload || return
    # Scrapes during the storm, timed: the endpoint must keep answering.
    ( m=0; while kill -0 $AGENT_PID 2>/dev/null && [[ ! -f $D/storm.done ]]; do
        s=$(date +%s.%N); curl -s --max-time 10 "http://127.0.0.1:$PORT/metrics" >/dev/null
        e=$(date +%s.%N); m=$(awk -v a=$s -v b=$e -v m=$m 'BEGIN{d=b-a; print (d>m?d:m)}'); echo "$m" > "$D/storm.maxscrape"
        sleep 0.2; done ) & scraper=$!
  fi
  t0=$(date +%s.%N)
  timeout 240 "$D/workload" copies "$COPIES" "$THREADS" 64 storm > "$D/storm.$1.$2.out" 2>&1; rc=$?
  t1=$(date +%s.%N); touch "$D/storm.done"
  if [[ $1 == agent ]]; then
    wait $scraper; sleep 1.5
    counted=$(curl -s "http://127.0.0.1:$PORT/metrics" | awk '$1 ~ /^pinwise_node_transfers_total\{/ && /direction="HtoD"/ {s+=$NF} END {print s+0}')
    drops=$(metric pinwise_ringbuf_drops_total); maxs=$(cat "$D/storm.maxscrape" 2>/dev/null)
    agent_stop "storm.$2"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$rc" "$(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.3f", b-a}')" \
    $((THREADS * COPIES)) "$counted" "${drops:-?}" "${maxs:-?}" >> "$D/storm.tsv"
}
for rep in $(seq 1 "$REPEATS"); do
  (( SECONDS > BUDGET_S + 60 )) && { echo "budget spent at storm rep $rep" >> "$D/notes.txt"; break; }
  if (( rep % 2 )); then storm plain $rep; storm agent $rep; else storm agent $rep; storm plain $rep; fi
done

# 3. Summary (medians).
python3 - "$D" <<'PY' > "$D/results.md"
import csv, statistics as st, sys, os
d = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(d, "runs.tsv")), delimiter="\t"))
print("# pinwise agent overhead\n")
print(open(os.path.join(d, "machine.txt")).read().replace("\n", "  \n"))
print("| program | plain median s | agent median s | agent/plain | runs (plain, agent) | failures | stdout differs |")
print("|---|---|---|---|---|---|---|")
for p in sorted({r["program"] for r in rows}):
    def w(run): return [float(r["wall_s"]) for r in rows if r["program"] == p and r["run"] == run and r["rep"] != "0" and r["rc"] == "0"]
    pl, ag = w("plain"), w("agent")
    fails = sum(1 for r in rows if r["program"] == p and r["rc"] != "0")
    diff = sum(1 for r in rows if r["program"] == p and r["same_stdout"] == "NO")
    ratio = f"{st.median(ag)/st.median(pl):.4f}" if pl and ag else "-"
    print(f"| {p} | {st.median(pl) if pl else '-'} | {st.median(ag) if ag else '-'} | {ratio} | {len(pl)}, {len(ag)} | {fails} | {diff} |")
cost = list(csv.DictReader(open(os.path.join(d, "agent_cost.tsv")), delimiter="\t"))
print("\n## agent cost per run (its own /metrics and /proc)\n\n| run | CPU s | RSS bytes | peak RSS bytes |\n|---|---|---|---|")
for c in cost: print(f"| {c['tag']} | {c['agent_cpu_s']} | {c['agent_rss_bytes']} | {c['agent_peak_rss_bytes']} |")
storm = list(csv.DictReader(open(os.path.join(d, "storm.tsv")), delimiter="\t"))
print("\n## event storm\n\n| run | rep | rc | wall s | copies made | copies counted | drops exported | slowest scrape s |\n|---|---|---|---|---|---|---|---|")
for s in storm: print(f"| {s['run']} | {s['rep']} | {s['rc']} | {s['wall_s']} | {s['expected_copies']} | {s['counted_copies']} | {s['drops']} | {s['max_scrape_s']} |")
for run in ("plain", "agent"):
    w = [float(s["wall_s"]) for s in storm if s["run"] == run and s["rc"] == "0"]
    if w: print(f"\nstorm {run} median: {st.median(w):.3f} s over {len(w)} runs")
PY
cat "$D/results.md"
find "$D" -type f -size +4M -delete
tar czf "$FINAL/agent.tgz" -C "$FINAL" agent
