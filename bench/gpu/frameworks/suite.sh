#!/usr/bin/env bash
# One GPU-machine call of the framework suite: puts the carried release binaries in place,
# runs run.sh on the given programs (and any extra checks named by EXTRA), packs the files.
#   bash bench/gpu/frameworks/suite.sh TAG PROGRAM.py ...
set -u
cd "$(dirname "$0")/../../.."
tag=$1; shift
mkdir -p target/release && cp -a .device-carry/. target/release/
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
FINAL=$OUT; export OUT=/tmp/pw-$tag; rm -rf $OUT; mkdir -p $OUT
rc=0
# PASSES=N (default 1): N full passes, each into $OUT/passK (each program: profile, trace,
# then REPEATS interleaved rounds of plain, profile, use, adaptive).
passes=${PASSES:-1}
if (($#)); then
  if ((passes == 1)); then
    bash bench/gpu/frameworks/run.sh "$@" > $OUT/suite.txt 2>&1 || rc=$?
    # Peak pinned under pinwise against the plain run's, per program and mode.
    python3 bench/gpu/frameworks/peak_check.py $OUT/frameworks/results.csv >> $OUT/suite.txt 2>&1 || rc=$?
    # Each round's mode/plain ratios: the 2 % bound with an interval, not just medians.
    python3 bench/gpu/frameworks/paired.py $OUT/frameworks >> $OUT/suite.txt 2>&1 || rc=$?
  else
    for k in $(seq 1 "$passes"); do
      echo "=== pass $k" >> $OUT/suite.txt
      OUT=$OUT/pass$k BUDGET_S=${PASS_BUDGET_S:-300} bash bench/gpu/frameworks/run.sh "$@" >> $OUT/suite.txt 2>&1 || rc=$?
    done
    # Every run of every pass: exit status and output against plain (runs.tsv, *.out).
    python3 bench/gpu/frameworks/passes.py $OUT >> $OUT/suite.txt 2>&1
  fi
fi
for x in ${EXTRA:-}; do
  echo "=== $x" >> $OUT/extra.txt
  case $x in
    exit_race) timeout 200 bash bench/gpu/frameworks/exit_race.sh 20 >> $OUT/extra.txt 2>&1 ;;
    attribution) timeout 240 bash bench/gpu/attribution/run.sh >> $OUT/extra.txt 2>&1 ;;
    attach) SKIP_MALLOC_COST=${SKIP_MALLOC_COST:-0} timeout 120 bash bench/gpu/trace/attach_malloc.sh >> $OUT/extra.txt 2>&1 ;;
    teardown) VARIANTS=teardown timeout 300 bash bench/gpu/frameworks/exit_race.sh ${TEARDOWN_RUNS:-40} >> $OUT/extra.txt 2>&1
      cp -a /tmp/exit_race/*.err $OUT/ 2>/dev/null ;;
    attrtrace) OUT=$OUT timeout 200 bash bench/gpu/attribution/trace.sh >> $OUT/extra.txt 2>&1 ;;
    diag) timeout 60 bash bench/gpu/frameworks/diag.sh >> $OUT/extra.txt 2>&1 ;;
    agent) timeout 400 bash bench/gpu/agent/overhead.sh >> $OUT/extra.txt 2>&1 ;;
    wall) timeout 450 bash bench/gpu/frameworks/wall.sh >> $OUT/extra.txt 2>&1 ;;
    interrupt) timeout 240 bash bench/gpu/safety/interrupt.sh >> $OUT/extra.txt 2>&1 ;;
  esac
  echo "=== $x exit $?" >> $OUT/extra.txt
done
find $OUT -type f -size +4M -delete
tar czf $FINAL/$tag.tgz -C /tmp pw-$tag
cat $OUT/suite.txt 2>/dev/null | tail -60; tail -80 $OUT/extra.txt 2>/dev/null
exit $rc
