#!/usr/bin/env bash
# `pinwise agent`'s GPU label, redundant-upload counter and fingerprint cost on the GPU
# machine (issue 14 / 17), one device call:
#   1. labels: bench/gpu/agent/workload.c (`copies 50 10 1048576 hold`, real driver) runs
#      under the agent with --fingerprint; recorded: the workload's open /dev/nvidia* fds
#      (`ls -l /proc/PID/fd`), the driver's minor numbers (`nvidia-smi -q`,
#      /proc/driver/nvidia/gpus/*/information), the agent's `gpu` label for it, and its
#      redundant uploads (expected: 49 pageable + 9 pinned = 58 of 60 HtoD fingerprinted);
#      then the same with CUDA_VISIBLE_DEVICES=0 (does the label change?).
#   2. fingerprint cost: the storm mode (THREADS x COPIES HtoD copies of BYTES) with no agent,
#      the agent, and the agent with --fingerprint, interleaved, REPEATS times (default 5):
#      wall time of each run, copies counted and fingerprinted, drops.
# Writes $OUT/agent-labels/{labels.txt,fp_cost.tsv,results.md}.
#
#   bash bench/gpu/pack.sh                       # on the development machine
#   bash bench/gpu/agent/labels.sh               # on the GPU machine (device call)
#
# Needs: root, .device-carry/ (or target/release/pinwise), gcc, curl, the NVIDIA driver.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
source bench/gpu/lib/carry.sh
[[ $(id -u) -eq 0 ]] || { echo "run as root" >&2; exit 2; }
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
FINAL=${OUT:-$ROOT/bench-out}
D=$FINAL/agent-labels; rm -rf "$D"; mkdir -p "$D"
REPEATS=${REPEATS:-5}; PORT=${PORT:-19465}
THREADS=${THREADS:-16}; COPIES=${COPIES:-20000}; BYTES=${BYTES:-4096}
libcuda=${LIBCUDA:-$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')}
[[ -n $libcuda ]] || { echo "no libcuda.so.1 in the ldconfig cache" >&2; exit 2; }
mkdir -p "$D/lib" && ln -sf "$libcuda" "$D/lib/libcuda.so" && ln -sf "$libcuda" "$D/lib/libcuda.so.1"
gcc -O1 -I"$ROOT/fixtures/include" -o "$D/workload" bench/gpu/agent/workload.c -L"$D/lib" -lcuda -Wl,-rpath,"$D/lib" -lpthread \
  || { echo "cannot build the workload" >&2; exit 2; }

AGENT_PID=
agent_start() { # extra args...
  "$PW" agent --libcuda "$libcuda" --listen 127.0.0.1:$PORT --labels-every 1s "$@" >> "$D/agent.log" 2>&1 &
  AGENT_PID=$!
  for _ in $(seq 100); do curl -sf --max-time 1 "http://127.0.0.1:$PORT/healthz" >/dev/null && return 0; sleep 0.1; done
  echo "agent did not start:"; cat "$D/agent.log"; return 1
}
agent_stop() { kill -TERM $AGENT_PID; wait $AGENT_PID; }
scrape() { curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics"; }

# 1. Labels and redundant uploads.
{
  echo "== machine"; date -u +%FT%TZ; uname -r
  nvidia-smi --query-gpu=index,pci.bus_id,name,driver_version --format=csv,noheader 2>&1
  nvidia-smi -q 2>/dev/null | grep -E "^GPU |Minor Number"
  for f in /proc/driver/nvidia/gpus/*/information; do echo "$f:"; grep -E "Device Minor|Bus Location" "$f"; done
  for cvd in unset 0; do
    echo; echo "== CUDA_VISIBLE_DEVICES=$cvd"
    agent_start --fingerprint || exit 1
    rm -f "$D/hold"; mkfifo "$D/hold"
    if [[ $cvd == unset ]]; then
      "$D/workload" copies 50 10 1048576 hold < "$D/hold" > "$D/w.out" &
    else
      CUDA_VISIBLE_DEVICES=$cvd "$D/workload" copies 50 10 1048576 hold < "$D/hold" > "$D/w.out" &
    fi
    wpid=$!
    exec 4> "$D/hold"
    for _ in $(seq 300); do grep -q done "$D/w.out" 2>/dev/null && break; sleep 0.1; done
    echo "workload: $(cat "$D/w.out")"
    echo "workload PID $wpid fds:"; ls -l /proc/"$wpid"/fd | grep -E "nvidia" | awk '{print $(NF-2), $(NF-1), $NF}'
    for f in /proc/"$wpid"/fd/*; do t=$(readlink "$f"); [[ $t == /dev/nvidia* ]] && stat -L -c "%n %t:%T" "$f" 2>/dev/null; done | sort -u -k2
    sleep 3  # a tick and a label refresh
    echo "agent series for it:"
    scrape | grep -E "^pinwise_(transfers_total|redundant_transfers_total|fingerprinted_transfers_total|redundant_transfer_bytes_total)\{" | grep "pid=\"$wpid\""
    exec 4>&-; wait "$wpid"
    agent_stop
  done
} > "$D/labels.txt" 2>&1

# 2. Fingerprint cost on the storm, interleaved: no agent, agent, agent --fingerprint.
printf 'run\trep\twall_s\tcounted\tfingerprinted\tdrops\n' > "$D/fp_cost.tsv"
run_storm() { # RUN REP
  local t0 t1 m=""
  case $1 in
    agent) agent_start || return ;;
    agent_fingerprint) agent_start --fingerprint || return ;;
  esac
  t0=$(date +%s.%N); "$D/workload" copies "$COPIES" "$THREADS" "$BYTES" storm > /dev/null; t1=$(date +%s.%N)
  if [[ $1 != none ]]; then sleep 1; m=$(scrape); agent_stop; fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')" \
    "$(echo "$m" | awk '/^pinwise_node_transfers_total\{/ {s+=$NF} END {print s+0}')" \
    "$(echo "$m" | awk '/^pinwise_fingerprinted_transfers_total\{/ {s+=$NF} END {print s+0}')" \
    "$(echo "$m" | awk '/^pinwise_ringbuf_drops_total\{/ {print $NF}')" >> "$D/fp_cost.tsv"
}
for rep in $(seq "$REPEATS"); do
  if ((rep % 2)); then order=(none agent agent_fingerprint); else order=(agent_fingerprint agent none); fi
  for r in "${order[@]}"; do run_storm "$r" "$rep"; done
done
{
  echo "# agent labels and fingerprint cost ($(date -u +%FT%TZ))"
  echo; echo '```'; cat "$D/labels.txt"; echo '```'
  echo; echo "Storm: $THREADS threads x $COPIES HtoD copies of $BYTES bytes: no agent, agent, agent --fingerprint."
  echo; echo '```'; cat "$D/fp_cost.tsv"; echo '```'
  awk -F'\t' 'NR>1 {w[$1]=w[$1]" "$3} END {for (k in w) print k": wall s"w[k]}' "$D/fp_cost.tsv"
} > "$D/results.md"
cat "$D/results.md"
