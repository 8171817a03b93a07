#!/usr/bin/env bash
# What `pinwise run` promotes in a JAX program and what it cost (issue 10): one run of
# jax_transfers.py with a history and debug logs, its report (text and JSON), and the
# preload's statistics. Writes $OUT/jaxpromo/.
#   bash bench/gpu/frameworks/jax_promotions.sh [PROGRAM.py]
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD; SRC=$ROOT/bench/gpu/frameworks; PW=$ROOT/target/release/pinwise
D=${OUT:-$ROOT/bench-out}/jaxpromo; mkdir -p "$D"
prog=$SRC/${1:-jax_transfers.py}
timeout 150 "$PW" run -vv -o "$D/history.json" --stats-json "$D/stats.json" --force -- python3 "$prog" \
  > "$D/out.txt" 2> "$D/err.txt"; echo "rc=$?"
grep -i -E 'promot|demot|unregist' "$D/err.txt" | head -60
"$PW" report "$D/history.json" > "$D/report.txt" 2>&1
"$PW" report --json "$D/history.json" > "$D/report.json" 2>&1
sed -n 1,80p "$D/report.txt"
