#!/usr/bin/env bash
# fork_phases.py (a DataLoader-shaped Python program on the CPU stand-in for libcudart, a TEST
# FIXTURE: dev-VM figures, never GPU ones) plain and under pinwise variants, interleaved (the
# order rotates each round), REPEATS rounds (default 7). Each run's first epoch (what one
# DataLoader iteration does) and its bare forks go to $OUT/forkcost/runs.tsv (the layout of
# bench/gpu/frameworks/dl_phases.sh's), then the summary of dl_phases_summary.py.
#   bash bench/fork-cost/run.sh
# VARIANTS (default "plain run disabled nomalloc nostacks"): as dl_phases.sh's (alt: the library
# ALT_PRELOAD). ALLOCS, KEEP,
# EPOCHS, WORKERS, BATCHES, FORKS, BALLAST_MIB: fork_phases.py's. pinwise: target/release, else target/debug
# (PINWISE and PRELOAD override). PREFIX: words put before every command (e.g. `chrt -f 10`:
# real-time priority, so that other tasks on a shared machine do not preempt the runs).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
W=$(mktemp -d /tmp/forkcost.XXXXXX)
trap 'rm -rf "$W"' EXIT
source "$ROOT/bench/lib/libcuda_dir.sh"
LIBCUDA_DIR='' libcuda_dir "$ROOT" "$W"
cudart=$(ls "$ROOT"/target/release/libpinwise_standin_cudart.so 2>/dev/null ||
  ls "$ROOT"/target/debug/libpinwise_standin_cudart.so)
ln -sf "$cudart" "$libdir/libcudart.so.13"
export LD_LIBRARY_PATH=$libdir
PW=${PINWISE:-$(ls "$ROOT"/target/release/pinwise 2>/dev/null || ls "$ROOT"/target/debug/pinwise)}
LIB=${PRELOAD:-$(dirname "$PW")/libpinwise_preload.so}
REPEATS=${REPEATS:-7}
read -r -a variants <<< "${VARIANTS:-plain run disabled nomalloc nostacks}"
nv=${#variants[@]}
D=${OUT:-$ROOT/bench-out}/forkcost; mkdir -p "$D"
prog=(python3 "$ROOT/bench/fork-cost/fork_phases.py" "$libdir/libcudart.so.13")
{
  echo "# fork-cost/run.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC') REPEATS=$REPEATS VARIANTS='${variants[*]}' pinwise=$PW"
  echo "# $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r), $(python3 --version); loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# PREFIX='${PREFIX:-}' ALLOCS=${ALLOCS:-6500} KEEP=${KEEP:-120} EPOCHS=${EPOCHS:-3} WORKERS=${WORKERS:-4} BATCHES=${BATCHES:-60} FORKS=${FORKS:-20} BALLAST_MIB=${BALLAST_MIB:-256}"
} > "$D/machine.txt"
cat "$D/machine.txt"
header=
for rep in $(seq 1 "$REPEATS"); do
  for k in $(seq 0 $((nv - 1))); do
    v=${variants[$(( (k + rep) % nv ))]}
    st=(--stats-json "$D/$v.$rep.stats.json" --force)
    case $v in
      plain) cmd=("${prog[@]}") ;;
      disabled) cmd=(env PINWISE_DISABLE=1 LD_PRELOAD="$LIB" "${prog[@]}") ;;
      run) cmd=("$PW" run "${st[@]}" -- "${prog[@]}") ;;
      nomalloc) cmd=("$PW" run --no-malloc-hooks "${st[@]}" -- "${prog[@]}") ;;
      nostacks) cmd=("$PW" run --no-stacks "${st[@]}" -- "${prog[@]}") ;;
      bare) cmd=("$PW" run --no-malloc-hooks --no-stacks "${st[@]}" -- "${prog[@]}") ;;
      mt16m) cmd=("$PW" run --min-tracked 16M "${st[@]}" -- "${prog[@]}") ;;
      alt) cmd=("$PW" run --preload "${ALT_PRELOAD:?alt needs ALT_PRELOAD}" "${st[@]}" -- "${prog[@]}") ;;
      *) echo "unknown variant $v" >&2; exit 2 ;;
    esac
    o=$D/$v.$rep.out
    timeout 300 ${PREFIX:-} "${cmd[@]}" > "$o" 2> "$D/$v.$rep.err"
    rc=$?
    # epoch 0's fields and the bare forks' (k=v on the `epoch=0` and `fork` lines)
    line=$( (grep '^epoch=0 ' "$o"; grep '^fork ' "$o") | tr '\n' ' ' | sed 's/^epoch=0 //; s/ fork / /')
    if [[ -z $header ]]; then
      header=$(tr ' ' '\n' <<< "$line" | grep = | cut -d= -f1 | tr '\n' '\t' | sed 's/\t$//')
      printf 'variant\trep\trc\tsame_out\t%s\n' "$header" > "$D/runs.tsv"
    fi
    printf '%s\t%s\t%s\t-' "$v" "$rep" "$rc" >> "$D/runs.tsv"
    for f in $header; do
      x=$(tr ' ' '\n' <<< "$line" | sed -n "s/^$f=//p" | head -1)
      printf '\t%s' "${x:--}" >> "$D/runs.tsv"
    done
    printf '\n' >> "$D/runs.tsv"
  done
done
python3 "$ROOT/bench/gpu/frameworks/dl_phases_summary.py" "$D/runs.tsv" | tee "$D/summary.md"
