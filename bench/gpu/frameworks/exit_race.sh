#!/usr/bin/env bash
# GPU check for issue 10's exit crash: builds crates/pinwise-preload/tests/programs/exit_race.c
# against the real libcuda and runs each variant (exit, teardown, threadexit) N times plain and
# under `pinwise run` in every mode, counting runs that did not exit 0, printed other output
# than the plain run, or left no statistics. On the CPU stand-in the same program is the CI
# test crates/pinwise-preload/tests/exit_race.rs (there, a stream or event used after it was
# destroyed aborts; on the real driver it is undefined behaviour, which may crash).
#   cargo build --release -p pinwise-preload -p pinwise-cli
#   bash bench/gpu/frameworks/exit_race.sh 50        (writes under $OUT/exit_race)
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
n=${1:-50}
D=${OUT:-/tmp}/exit_race; mkdir -p "$D"
PW=$ROOT/target/release/pinwise
CUDA=${CUDA_HOME:-/usr/local/cuda}
cc -O1 -o "$D/exit_race" crates/pinwise-preload/tests/programs/exit_race.c \
  -L"$CUDA/lib64/stubs" -lcuda -lpthread || exit 1
modes=("plain" "--mode adaptive" "--mode profile --profile $D/p.json" "--mode use --profile $D/p.json"
       "--mode adaptive --keep-pinned" "--mode adaptive --no-promote")
# A crash under pinwise prints where it happened (signal, address, native frames).
export PINWISE_CRASH_REPORT=1
total_bad=0
for variant in ${VARIANTS:-exit teardown threadexit}; do
  "$D/exit_race" "$variant" > "$D/$variant.plain.ref" 2>/dev/null || echo "$variant: plain run failed"
  for mode in "${modes[@]}"; do
    bad=0
    for i in $(seq "$n"); do
      rm -f "$D/stats.json"
      if [[ $mode == plain ]]; then
        "$D/exit_race" "$variant" > "$D/out" 2> "$D/err"; rc=$?; stats=ok
      else
        # shellcheck disable=SC2086
        "$PW" run $mode --stats-json "$D/stats.json" -- "$D/exit_race" "$variant" > "$D/out" 2> "$D/err"; rc=$?
        stats=$([[ -s $D/stats.json ]] && grep -q '"top_process": true' "$D/stats.json" && echo ok || echo missing)
      fi
      if (( rc != 0 )) || ! cmp -s "$D/out" "$D/$variant.plain.ref" || [[ $stats != ok ]]; then
        bad=$((bad + 1))
        tag=${mode//[ \/]/_}; cp "$D/err" "$D/$variant.${tag:0:40}.$i.err"
      fi
    done
    echo "$variant [$mode]: $bad of $n runs bad"
    total_bad=$((total_bad + bad))
  done
done
echo "total bad runs: $total_bad"
