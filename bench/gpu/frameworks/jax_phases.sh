#!/usr/bin/env bash
# Where JAX's slowdown under pinwise comes from (issue 10): jax_transfers.py's phases (put, jit,
# cb) and its resource use (CPU time user/kernel, page faults, context switches) plain, with an
# empty LD_PRELOAD library (any preload at all), with pinwise's preload loaded but disabled,
# under `pinwise run` (adaptive), and under `pinwise run --no-malloc-hooks --no-stacks`,
# interleaved (the order rotates each round), REPEATS rounds (default 10).
# Writes $OUT/jaxph/{runs.tsv,summary.md}.
#   bash bench/gpu/frameworks/jax_phases.sh [PROGRAM.py]
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD; SRC=$ROOT/bench/gpu/frameworks
PW=$ROOT/target/release/pinwise; LIB=$ROOT/target/release/libpinwise_preload.so
REPEATS=${REPEATS:-10}; BUDGET_S=${BUDGET_S:-330}
D=${OUT:-$ROOT/bench-out}/jaxph; mkdir -p "$D"
prog=$SRC/${1:-jax_transfers.py}
export PYTHONUNBUFFERED=1
echo 'void pinwise_empty_preload(void) {}' > "$D/empty.c"
gcc -shared -fPIC -o "$D/empty.so" "$D/empty.c" || exit 1
variants=(plain empty disabled run bare)
printf 'variant\trep\trc\twall_s\tput\tjit\tcb\ttotal\tutime\tstime\tminflt\tnvcsw\tnivcsw\tmaxrss\n' > "$D/runs.tsv"
field() { grep -o "$1=[0-9.]*" "$2" | tail -1 | cut -d= -f2; }
for rep in $(seq 1 "$REPEATS"); do
  for k in 0 1 2 3 4; do
    (( SECONDS > BUDGET_S )) && break 2
    v=${variants[$(( (k + rep) % 5 ))]}
    e=$D/$v.$rep.err; o=$D/$v.$rep.out
    st=(--stats-json "$D/$v.$rep.stats.json" --force)
    t0=$(date +%s.%N)
    case $v in
      plain) timeout 120 python3 "$SRC/rusage_run.py" "$prog" > "$o" 2> "$e" ;;
      empty) timeout 120 env LD_PRELOAD="$D/empty.so" python3 "$SRC/rusage_run.py" "$prog" > "$o" 2> "$e" ;;
      disabled) timeout 120 env PINWISE_DISABLE=1 LD_PRELOAD="$LIB" python3 "$SRC/rusage_run.py" "$prog" > "$o" 2> "$e" ;;
      run) timeout 120 "$PW" run "${st[@]}" -- python3 "$SRC/rusage_run.py" "$prog" > "$o" 2> "$e" ;;
      bare) timeout 120 "$PW" run --no-malloc-hooks --no-stacks "${st[@]}" -- python3 "$SRC/rusage_run.py" "$prog" > "$o" 2> "$e" ;;
    esac
    rc=$?; t1=$(date +%s.%N)
    printf '%s\t%s\t%s\t%s' "$v" "$rep" "$rc" "$(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.3f", b-a}')" >> "$D/runs.tsv"
    for f in put jit cb total utime_s stime_s minflt nvcsw nivcsw maxrss_kib; do printf '\t%s' "$(field $f "$e")" >> "$D/runs.tsv"; done
    printf '\n' >> "$D/runs.tsv"
  done
done
ref=$(ls "$D"/plain.*.out 2>/dev/null | head -1)
for o in "$D"/*.out; do cmp -s "$o" "$ref" || echo "OUTPUT DIFFERS from $(basename "$ref"): $(basename "$o")"; done > "$D/diffs.txt"
python3 - "$D" <<'PY' > "$D/summary.md"
import csv, statistics, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/runs.tsv"), delimiter="\t"))
cols = ["wall_s", "put", "jit", "cb", "total", "utime", "stime", "minflt", "nvcsw", "nivcsw", "maxrss"]
print("Medians (min-max) per variant; ratio to plain's median in brackets. put/jit/cb/total in ms.\n")
print("| variant | n | bad rc | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 3) + "|")
def vals(v, c):
    return [float(r[c]) for r in rows if r["variant"] == v and r[c] not in ("", "-")]
base = {c: (statistics.median(vals("plain", c)) if vals("plain", c) else None) for c in cols}
for v in ["plain", "empty", "disabled", "run", "bare"]:
    rs = [r for r in rows if r["variant"] == v]
    if not rs: continue
    cells = []
    for c in cols:
        xs = vals(v, c)
        if not xs: cells.append("-"); continue
        m = statistics.median(xs)
        ratio = f" [{m / base[c]:.3f}]" if base[c] else ""
        cells.append(f"{m:.4g} ({min(xs):.4g}-{max(xs):.4g}){ratio}")
    bad = sum(1 for r in rs if r["rc"] != "0")
    print(f"| {v} | {len(rs)} | {bad} | " + " | ".join(cells) + " |")
PY
cat "$D/summary.md"; cat "$D/diffs.txt" 2>/dev/null
