#!/usr/bin/env bash
# bench/trace-dwarf/run.sh: the BPF cost of `pinwise trace --malloc --dwarf-stacks` against
# plain `--malloc` (frame-pointer chains), on a program built without frame pointers
# (no_fp.c: 1000 recorded 1 MiB allocations). Prints, per run, the kernel's run-time
# statistics of malloc_entry and malloc_return that `pinwise trace` reports, and whether
# the recorded stacks reach `outer`. Runs anywhere with root and BPF; on the GPU machine
# use the real libcuda (the default), elsewhere LIBCUDA=<pinwise's CPU stand-in>.
#
#   PINWISE=target/release/pinwise RUNS=5 bash bench/trace-dwarf/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PINWISE=${PINWISE:-target/release/pinwise}
RUNS=${RUNS:-5}
LIBCUDA=${LIBCUDA:-$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -fomit-frame-pointer -fno-optimize-sibling-calls -o "$work/no_fp" bench/trace-dwarf/no_fp.c
echo "machine: $(hostname), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); libcuda $LIBCUDA"
for r in $(seq "$RUNS"); do
    for mode in fp dwarf; do
        extra=()
        [[ $mode == dwarf ]] && extra=(--dwarf-stacks)
        cost=$("$PINWISE" trace --malloc "${extra[@]}" --libcuda "$LIBCUDA" -o "$work/$mode$r.json" \
            -- "$work/no_fp" 2>&1 | grep -o 'malloc_entry [0-9]* ns x [0-9]*\|malloc_return [0-9]* ns x [0-9]*' | tr '\n' ' ')
        deep=$("$PINWISE" report "$work/$mode$r.json" --stacks 2>/dev/null | grep -c ' outer (no_fp.c' || true)
        echo "run $r $mode: $cost; report lines naming outer: $deep"
    done
done
