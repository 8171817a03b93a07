#!/usr/bin/env bash
# What `pinwise trace --fingerprint` adds to a sync call and to an asynchronous download
# (issue 17): bench/gpu/redundant/async_cost.c (SIZE 0: cuStreamSynchronize of an idle
# stream, nothing pending; 4 KiB and 1 MiB: cuMemcpyDtoHAsync + cuStreamSynchronize, the
# download hashed at the sync's return) under `pinwise trace` without fingerprints, with
# `--fingerprint sampled --fingerprint-check 0` and with `--fingerprint full`, ROUNDS rounds
# interleaved; prints each variant's median over rounds (and the range) of the per-iteration
# median, wall and calling-thread CPU time, ns. Needs root. By default it links pinwise's CPU
# stand-in for libcuda (a TEST FIXTURE: nothing GPU-related is measured); with
# LIBCUDA_DIR=dir (holding libcuda.so) it links that instead.
#
#   PINWISE=target/debug/pinwise ROUNDS=5 bash bench/trace-fingerprint/async.sh
set -euo pipefail
ROUNDS=${ROUNDS:-5}
SIZES=${SIZES:-0 4096 1048576}
source "$(dirname "$0")/common.sh"
cc_cost async_cost
for ((r = 1; r <= ROUNDS; r++)); do
	for size in $SIZES; do
		for mode in none sampled full; do
			case $mode in
			none) flags=() ;;
			sampled) flags=(--fingerprint sampled --fingerprint-check 0) ;;
			full) flags=(--fingerprint full) ;;
			esac
			rm -f "$out/t.bin"
			line=$(LD_LIBRARY_PATH=$libdir "$PINWISE" trace "${flags[@]}" -o "$out/t.bin" -- \
				"$out/async_cost" "$size" 200 5 2>/dev/null)
			echo "$mode $line"
		done
	done
done >"$out/raw.txt"
python3 - "$out/raw.txt" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    mode, size, med, _min, _n, cpu = line.split()
    d[(int(size), mode)].append((int(med), int(cpu)))
print("| SIZE | variant | wall median (range) | CPU median (range) |")
print("|---|---|---|---|")
for (size, mode) in sorted(d, key=lambda k: (k[0], ["none", "sampled", "full"].index(k[1]))):
    w = [x[0] for x in d[(size, mode)]]
    c = [x[1] for x in d[(size, mode)]]
    fmt = lambda v: f"{statistics.median(v):,.0f} ({min(v):,}–{max(v):,})"
    print(f"| {size} | {mode} | {fmt(w)} | {fmt(c)} |")
PY
