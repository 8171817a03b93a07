#!/usr/bin/env bash
# What a SIGKILL loses under `pinwise run` (issue 12), on the CPU stand-in for libcuda (a TEST
# FIXTURE: not GPU figures): KILLS runs of steady_copies.c killed at spread points of the 1 s
# flush; prints the table that bench/results/incremental-history.md records. The GPU
# counterpart is bench/gpu/safety/interrupt.sh.
#   KILLS=30 bash bench/incremental-history/measure.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -p pinwise-preload -p pinwise-cli -p pinwise-standin-cuda -p pinwise-standin-cudart
KILLS=${KILLS:-20} cargo nextest run -p pinwise-preload --test killed --run-ignored only --no-capture
