#!/usr/bin/env bash
# Microseconds per stack capture in a JAX program (issue 10): jax_transfers.py under
# `pinwise run` REPEATS times (default 5), one line a run from the history's source stats
# (captures, captures skipped by the budget, total ms, wall us per capture), then the
# median us per capture. Needs `cargo build --release -p pinwise-cli -p pinwise-preload`.
#   bash bench/gpu/frameworks/stack_cost.sh
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD; PW=$ROOT/target/release/pinwise
D=${OUT:-$ROOT/bench-out}/stackcost; mkdir -p "$D"; : > "$D/runs.txt"
for r in $(seq "${REPEATS:-5}"); do
  timeout 150 "$PW" run -o "$D/h$r.json" --force -- python3 "$ROOT/bench/gpu/frameworks/jax_transfers.py" \
    > "$D/out$r.txt" 2> "$D/err$r.txt" || echo "run $r: rc=$?"
  python3 "$ROOT/bench/stackcost/source_stats.py" "$D/h$r.json" | tee -a "$D/runs.txt"
done
python3 - "$D/runs.txt" <<'PY'
import statistics, sys
us = [float(l.split("us_per_capture=")[1]) for l in open(sys.argv[1]) if "us_per_capture=" in l]
print(f"median us_per_capture={statistics.median(us):.1f} over {len(us)} runs (min {min(us)}, max {max(us)})")
PY
