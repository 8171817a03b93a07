#!/usr/bin/env bash
# Where the DataLoader's start is slower under pinwise (issue 10): dl_phases.py (torch_dataloader.py
# with its DataLoader's phases timed: the iterator's creation and its forks, each worker's start,
# the first batch made in a worker, the pin thread's first pin, the first batch in the main
# process, the workers' shutdown; page faults of the main process and of the workers) plain and
# under variants, interleaved (the order rotates each round), REPEATS rounds (default 7), until
# BUDGET_S seconds (default 420) have gone. Prints a table of medians (min-max) per phase and
# variant, and each variant's median of paired differences from plain in the same round.
# Writes $OUT/dlph-{runs.tsv,summary.md,machine.txt} and $OUT/dlph.tgz (every run's stdout,
# stderr and statistics, from /tmp/pw-dlph).
#
#   bash bench/gpu/frameworks/dl_phases.sh [--dry-run]
#
# VARIANTS (default "plain run disabled nomalloc nostacks"), any of:
#   plain     python3 dl_phases.py
#   empty     an empty library in LD_PRELOAD (what preloading anything costs)
#   disabled  pinwise's preload loaded, PINWISE_DISABLE=1 (every hook forwards)
#   run       pinwise run (adaptive)
#   nomalloc  pinwise run --no-malloc-hooks
#   nostacks  pinwise run --no-stacks
#   bare      pinwise run --no-malloc-hooks --no-stacks
#   mt16m     pinwise run --min-tracked 16M (the malloc hooks on, almost nothing recorded)
#   alt       pinwise run --preload $ALT_PRELOAD (another build of the library, e.g. the one
#             before a change: .device-carry/main/libpinwise_preload.so)
# pinwise is target/release/pinwise (from .device-carry/ when present, as suite.sh does), or
# $PINWISE with $PRELOAD. PIN_CPUS: taskset list for every run. --dry-run: print the runs'
# commands in their order and check the files they need, run nothing.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD; SRC=$ROOT/bench/gpu/frameworks
dry=0
for a in "$@"; do
  case $a in
    --dry-run) dry=1 ;;
    *) echo "usage: dl_phases.sh [--dry-run]" >&2; exit 2 ;;
  esac
done
if [[ -d .device-carry && -z ${PINWISE:-} ]] && ((!dry)); then
  mkdir -p target/release && cp -a .device-carry/. target/release/
fi
PW=${PINWISE:-$ROOT/target/release/pinwise}
LIB=${PRELOAD:-$(dirname "$PW")/libpinwise_preload.so}
REPEATS=${REPEATS:-7}; BUDGET_S=${BUDGET_S:-420}
read -r -a variants <<< "${VARIANTS:-plain run disabled nomalloc nostacks}"
nv=${#variants[@]}
for v in "${variants[@]}"; do
  case $v in plain|empty|disabled|run|nomalloc|nostacks|bare|mt16m|alt) ;;
    *) echo "dl_phases.sh: unknown variant '$v'" >&2; exit 2 ;;
  esac
done
[[ " ${variants[*]} " == *" plain "* ]] || { echo "dl_phases.sh: VARIANTS needs plain" >&2; exit 2; }
# Runs write under /tmp (dozens of files); $OUT gets runs.tsv, summary.md, machine.txt and one
# archive of everything (the device tool brings back a few files per call).
FINAL=${OUT:-$ROOT/bench-out}
D=/tmp/pw-dlph
((dry)) || rm -rf "$D"
prog=$SRC/dl_phases.py
missing=0
for f in "$prog" "$SRC/dl_phases_summary.py"; do [[ -f $f ]] || { echo "missing: $f" >&2; missing=1; }; done
for v in "${variants[@]}"; do
  case $v in
    plain|empty) ;;
    disabled) [[ -f $LIB ]] || { echo "missing: $LIB (variant $v)" >&2; missing=1; } ;;
    alt) [[ -x $PW && -f ${ALT_PRELOAD:-} ]] || { echo "missing: $PW or ALT_PRELOAD '${ALT_PRELOAD:-}' (variant $v)" >&2; missing=1; } ;;
    *) [[ -x $PW ]] || { echo "missing: $PW (variant $v)" >&2; missing=1; } ;;
  esac
done
((missing && !dry)) && exit 1
if ((!dry)) && ! python3 -c 'import torch' 2>/dev/null; then
  echo "dl_phases.sh: python3 cannot import torch" >&2; exit 1
fi
mkdir -p "$D"
export PYTHONUNBUFFERED=1
if [[ " ${variants[*]} " == *" empty "* ]] && ((!dry)); then
  echo 'void pinwise_empty_preload(void) {}' > "$D/empty.c"
  gcc -shared -fPIC -o "$D/empty.so" "$D/empty.c" || exit 1
fi
cmd_of() { # VARIANT REP: the command, one word a line
  local v=$1 rep=$2
  local st=(--stats-json "$D/$v.$rep.stats.json" --force)
  case $v in
    plain) printf '%s\n' python3 "$prog" ;;
    empty) printf '%s\n' env LD_PRELOAD="$D/empty.so" python3 "$prog" ;;
    disabled) printf '%s\n' env PINWISE_DISABLE=1 LD_PRELOAD="$LIB" python3 "$prog" ;;
    run) printf '%s\n' "$PW" run "${st[@]}" -- python3 "$prog" ;;
    nomalloc) printf '%s\n' "$PW" run --no-malloc-hooks "${st[@]}" -- python3 "$prog" ;;
    nostacks) printf '%s\n' "$PW" run --no-stacks "${st[@]}" -- python3 "$prog" ;;
    bare) printf '%s\n' "$PW" run --no-malloc-hooks --no-stacks "${st[@]}" -- python3 "$prog" ;;
    mt16m) printf '%s\n' "$PW" run --min-tracked 16M "${st[@]}" -- python3 "$prog" ;;
    alt) printf '%s\n' "$PW" run --preload "${ALT_PRELOAD:-}" "${st[@]}" -- python3 "$prog" ;;
  esac
}
{
  echo "# dl_phases.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC') REPEATS=$REPEATS BUDGET_S=$BUDGET_S VARIANTS='${variants[*]}' PIN_CPUS=${PIN_CPUS:-}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/# /'
  echo "# $(uname -r); $(python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)' 2>/dev/null)"
} > "$D/machine.txt"
cat "$D/machine.txt"
fields=(train iter_med iter fork_max fork_sum fork_cpu_sum child_max child_cpu_max winit_min winit_max made_min made_max pin_start pin_first
  pin_med first last shutdown wend_max p_minflt c_minflt c_utime_ms c_stime_ms p_rss_mib p_pte_kib p_maps workers_seen)
((dry)) || { printf 'variant\trep\trc\tsame_out\twall_s'; printf '\t%s' "${fields[@]}"; printf '\n'; } > "$D/runs.tsv"
field() { grep -oE "(^| )$1=[-0-9.]+" "$2" | tail -1 | cut -d= -f2; }
for rep in $(seq 1 "$REPEATS"); do
  for k in $(seq 0 $((nv - 1))); do
    v=${variants[$(( (k + rep) % nv ))]}
    mapfile -t cmd < <(cmd_of "$v" "$rep")
    if ((dry)); then
      echo "round $rep: $v: ${PIN_CPUS:+taskset -c $PIN_CPUS }${cmd[*]}"
      continue
    fi
    (( SECONDS > BUDGET_S )) && { echo "budget of ${BUDGET_S}s spent: stopped before round $rep, $v"; break 2; }
    o=$D/$v.$rep.out; e=$D/$v.$rep.err
    t0=$(date +%s.%N)
    timeout 200 ${PIN_CPUS:+taskset -c "$PIN_CPUS"} "${cmd[@]}" > "$o" 2> "$e"
    rc=$?; t1=$(date +%s.%N)
    ref=$(ls "$D"/plain.*.out 2>/dev/null | head -1)
    same=-; [[ -n $ref && -s $o ]] && { cmp -s "$ref" "$o" && same=1 || same=0; }
    printf '%s\t%s\t%s\t%s\t%s' "$v" "$rep" "$rc" "$same" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')" >> "$D/runs.tsv"
    for f in "${fields[@]}"; do x=$(field "$f" "$e"); printf '\t%s' "${x:--}" >> "$D/runs.tsv"; done
    printf '\n' >> "$D/runs.tsv"
  done
done
((dry)) && { ((missing)) && echo "(files missing: see above)"; exit 0; }
python3 "$SRC/dl_phases_summary.py" "$D/runs.tsv" > "$D/summary.md"
cat "$D/summary.md"
mkdir -p "$FINAL"
for f in runs.tsv summary.md machine.txt; do cp "$D/$f" "$FINAL/dlph-$f"; done
find "$D" -type f -size +4M -delete
tar czf "$FINAL/dlph.tgz" -C /tmp pw-dlph
