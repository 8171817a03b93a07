#!/usr/bin/env bash
# Where pinwise's wall-time overhead comes from in a Python program (issue 10): each program
# plain, under `pinwise run` (adaptive), with --no-stacks, with --no-malloc-hooks, and with the
# preload loaded but disabled (PINWISE_DISABLE=1), interleaved, REPEATS rounds (default 5).
# Writes $OUT/wall/{runs.tsv,summary.md,paired.md} and each run's statistics. PIN_CPUS as in run.sh.
#   bash bench/gpu/frameworks/wall.sh [PROGRAM.py ...]   (default: torch_mixed jax_transfers import_torch)
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD; SRC=$ROOT/bench/gpu/frameworks
PW=$ROOT/target/release/pinwise; LIB=$ROOT/target/release/libpinwise_preload.so
REPEATS=${REPEATS:-5}; BUDGET_S=${BUDGET_S:-400}
D=${OUT:-$ROOT/bench-out}/wall; mkdir -p "$D"
export PYTHONUNBUFFERED=1
progs=("$@"); ((${#progs[@]})) || progs=(torch_mixed.py jax_transfers.py import_torch.py)
printf 'prog\tvariant\trep\trc\twall_s\ttotal_ms\n' > "$D/runs.tsv"
one() { # NAME VARIANT REP CMD...
  local name=$1 v=$2 rep=$3; shift 3
  (( SECONDS > BUDGET_S )) && return
  local t0 t1 rc tot; t0=$(date +%s.%N)
  timeout 200 ${PIN_CPUS:+taskset -c "$PIN_CPUS"} "$@" > "$D/$name.$v.$rep.out" 2> "$D/$name.$v.$rep.err"; rc=$?
  t1=$(date +%s.%N)
  tot=$(grep -oE '(total|train)=[0-9.]*' "$D/$name.$v.$rep.err" | tail -1 | cut -d= -f2)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$v" "$rep" "$rc" "$(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.3f", b-a}')" "${tot:--}" >> "$D/runs.tsv"
}
variants=(plain run nostacks nomalloc disabled)
for rep in $(seq 1 "$REPEATS"); do
  for p in "${progs[@]}"; do
    name=$(basename "$p" .py); prog=$SRC/$p
    for k in 0 1 2 3 4; do
      v=${variants[$(( (k + rep) % 5 ))]}
      st=(--stats-json "$D/$name.$v.$rep.stats.json" --force)
      case $v in
        plain) one "$name" $v $rep python3 "$prog" ;;
        run) one "$name" $v $rep "$PW" run "${st[@]}" -- python3 "$prog" ;;
        nostacks) one "$name" $v $rep "$PW" run --no-stacks "${st[@]}" -- python3 "$prog" ;;
        nomalloc) one "$name" $v $rep "$PW" run --no-malloc-hooks "${st[@]}" -- python3 "$prog" ;;
        disabled) one "$name" $v $rep env PINWISE_DISABLE=1 LD_PRELOAD="$LIB" python3 "$prog" ;;
      esac
    done
  done
done
python3 - "$D" <<'PY' > "$D/summary.md"
import csv, statistics, sys, json, glob, os
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/runs.tsv"), delimiter="\t"))
print("| program | variant | n | bad rc | wall s median (min-max) | total ms median (min-max) | history records | events |")
print("|---|---|---|---|---|---|---|---|")
def med(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})" if xs else "-"
for prog in dict.fromkeys(r["prog"] for r in rows):
    for v in ["plain", "run", "nostacks", "nomalloc", "disabled"]:
        rs = [r for r in rows if r["prog"] == prog and r["variant"] == v]
        if not rs: continue
        wall = [float(r["wall_s"]) for r in rs]
        tot = [float(r["total_ms"]) for r in rs if r["total_ms"] not in ("-", "")]
        tracked, stack = [], []
        for f in glob.glob(f"{d}/{prog}.{v}.*.stats.json"):
            try:
                s = json.load(open(f))
            except Exception:
                continue
            ps = s.get("processes", [])
            tracked.append(sum(p.get("history_records", 0) for p in ps))
            stack.append(sum(p.get("events", 0) for p in ps))
        bad = sum(1 for r in rs if r["rc"] != "0")
        print(f"| {prog} | {v} | {len(rs)} | {bad} | {med(wall)} | {med(tot)} | {statistics.median(tracked) if tracked else '-'} | {statistics.median(stack) if stack else '-'} |")
PY
cat "$D/summary.md"
# Each round's variant/plain ratios (the program's own times and wall), with intervals.
python3 "$SRC/paired.py" "$D" > /dev/null && cat "$D/paired.md"
