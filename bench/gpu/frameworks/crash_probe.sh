#!/usr/bin/env bash
# Investigation run on the GPU machine: runs a program plain and under pinwise-preload in
# several configurations, many times, with core dumps on; prints exit statuses and, for the
# first core of each configuration, every thread's backtrace (cuda-gdb also debugs CPU code).
#   bash bench/gpu/frameworks/crash_probe.sh N PROGRAM ARGS...     (writes under $OUT/crash)
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
n=${1:?repeats}; shift
D=${OUT:-/tmp}/crash; mkdir -p "$D" /tmp/cores
LIB=$ROOT/target/release/libpinwise_preload.so
PW=$ROOT/target/release/pinwise
echo "/tmp/cores/core.%e.%p" > /proc/sys/kernel/core_pattern
ulimit -c unlimited
export PATH=/usr/local/cuda/bin:$PATH
configs=(plain adaptive disabled nodriver use_keep)
for cfg in "${configs[@]}"; do
  crashes=0
  for i in $(seq "$n"); do
    rm -f /tmp/cores/*
    st=/tmp/pw-stats-$cfg; rm -rf "$st"; mkdir -p "$st"
    case $cfg in
      plain) env "$@" ;;
      adaptive) env LD_PRELOAD=$LIB PINWISE_STATS_DIR=$st "$@" ;;
      disabled) env LD_PRELOAD=$LIB PINWISE_DISABLE=1 "$@" ;;
      nodriver) env LD_PRELOAD=$LIB PINWISE_DRIVER_HOOKS=0 PINWISE_STATS_DIR=$st "$@" ;;
      use_keep) env LD_PRELOAD=$LIB PINWISE_KEEP_PINNED=1 PINWISE_PROMOTE_PAGEABLE=0 PINWISE_STATS_DIR=$st "$@" ;;
    esac > "$D/$cfg.$i.out" 2> "$D/$cfg.$i.err"
    rc=$?
    echo "$cfg run $i exit $rc stats=$(ls $st 2>/dev/null | wc -l)"
    if (( rc != 0 )); then
      crashes=$((crashes + 1))
      core=$(ls /tmp/cores/core.* 2>/dev/null | head -n1)
      if [[ -n $core && ! -f $D/$cfg.bt.txt ]]; then
        exe=$(readlink -f "$(command -v "$1")")
        timeout 120 cuda-gdb -batch -ex 'info sharedlibrary' -ex 'thread apply all bt 40' "$exe" "$core" > "$D/$cfg.bt.txt" 2>&1
        echo "--- $cfg backtrace (crashing thread first lines):"
        grep -n -m1 -B2 -A40 'received signal\|Program terminated' "$D/$cfg.bt.txt" | head -60
      fi
    fi
  done
  echo "== $cfg: $crashes of $n runs failed"
done
