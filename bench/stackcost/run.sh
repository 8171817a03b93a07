#!/usr/bin/env bash
# Interleaved runs of deep_stack.py under each given preload library; one line a run with
# the history's stack-capture figures (wall clock, from its source stats).
#   bash bench/stackcost/run.sh RUNS N MODE LIB.so...
set -u
here=$(cd "$(dirname "$0")" && pwd)
runs=$1; n=$2; mode=$3; shift 3
h=$(mktemp -d)
for _ in $(seq "$runs"); do
  for so in "$@"; do
    PINWISE_HISTORY=$h/h.json LD_PRELOAD=$so python3 "$here/deep_stack.py" "$n" "$mode" >/dev/null
    echo "$(basename "$so") $(python3 "$here/source_stats.py" "$h/h.json")"
  done
done
rm -rf "$h"
