#!/usr/bin/env bash
# What `pinwise trace --malloc` adds to each malloc+free pair: malloc_cost.c run plain,
# under `pinwise trace` (malloc probes off, the default) and under `pinwise trace --malloc`,
# for a block below the threshold (100 B: the uprobe traps, BPF compares the size, no event)
# and one at it (64 KiB: an event for the malloc and one for the free, stack captured).
# Needs root. By default it links pinwise's CPU stand-in for libcuda (a TEST FIXTURE; the
# uprobe cost is this machine's, nothing GPU-related is measured); with LIBCUDA_DIR=dir
# (a directory holding libcuda.so) it links that instead (the GPU machine).
#
#   bash bench/trace-malloc/run.sh            # prints a markdown table
#   PINWISE=target/release/pinwise ROUNDS=3 bash bench/trace-malloc/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PINWISE=${PINWISE:-$root/target/release/pinwise}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-2000}
BATCHES=${BATCHES:-30}
out=$(mktemp -d /tmp/pinwise-malloc-bench.XXXXXX)
source "$root/bench/lib/libcuda_dir.sh"
libcuda_dir "$root" "$out"
gcc -O2 -o "$out/malloc_cost" "$here/malloc_cost.c" -L"$libdir" -lcuda -Wl,-rpath,"$libdir"
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
run() { # mode size -> median_ns of one run
	local mode=$1 size=$2 line
	case $mode in
	plain) line=$("$out/malloc_cost" "$size" "$ITERS" "$BATCHES") ;;
	trace) line=$("$PINWISE" trace --force -o "$out/h.json" -- "$out/malloc_cost" "$size" "$ITERS" "$BATCHES" 2>"$out/trace.err") ;;
	malloc) line=$("$PINWISE" trace --force --malloc -o "$out/h.json" -- "$out/malloc_cost" "$size" "$ITERS" "$BATCHES" 2>"$out/trace.err") ;;
	esac
	echo "$line" | sed 's/.*"median_ns": \([0-9.]*\).*/\1/'
}
echo "| block | plain CPU ns/pair | trace, no --malloc | trace --malloc | added by --malloc |"
echo "|---|---|---|---|---|"
for size in 100 65536; do
	declare -A m=()
	for mode in plain trace malloc; do
		m[$mode]=$(for _ in $(seq "$ROUNDS"); do run "$mode" "$size"; done | median)
	done
	added=$(awk -v a="${m[malloc]}" -v b="${m[trace]}" 'BEGIN {printf "%.0f", a - b}')
	echo "| $size B | ${m[plain]} | ${m[trace]} | ${m[malloc]} | $added |"
done
grep -o "malloc_entry [0-9]* ns x [0-9]*\|malloc_return [0-9]* ns x [0-9]*\|free_entry [0-9]* ns x [0-9]*" "$out/trace.err" | sed 's/^/BPF (last --malloc run, 64 KiB): /' || true
rm -rf "$out"
