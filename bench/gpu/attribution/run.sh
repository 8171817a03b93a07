#!/usr/bin/env bash
# Attribution under `pinwise run` on the GPU machine (issue 11): does the report name the
# Python lines that allocate a PyTorch script's hot pageable and cold pinned tensors, and
# what do the malloc-family hooks and stack capture cost?
#
# Needs, carried from the build machine at the same relative paths in a copy of the repo:
#   target/release/pinwise                   cargo build --release -p pinwise-cli
#   target/release/libpinwise_preload.so     cargo build --release -p pinwise-preload
# (strip --strip-debug both to stay under the carry limit), and on the machine python3 with
# PyTorch and a C compiler.
#
# What it does (about 4 minutes; stops starting new runs past $BUDGET_S seconds, default 420):
#   1. torch_sites.py plain (its checksum), then under `pinwise run -o hist.bin`; checks the
#      checksum is the same; `pinwise report` (text, --stacks, --html) and checks that the
#      report names make_hot_batch and make_cold_pinned (the functions, in torch_sites.py,
#      that create the hot pageable and the cold pinned tensors);
#   2. times torch_sites.py plain, under pinwise with --no-malloc-hooks, with the hooks and
#      --no-stacks, and with the hooks and stacks: REPEATS (default 5) rounds, interleaved;
#      wall time of the whole command and the script's own copy-loop time;
#   3. the micro-benchmark bench/gpu/attribution/malloc_cost.c (no CUDA): plain and with the
#      library preloaded (hooks off / on without stacks / on with stacks), interleaved.
# Writes everything under $OUT/attribution/ (results.md, results.json, every run's output,
# the histories and reports). Exit status 0 when every check passed.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out}
dir="$OUT/attribution"
mkdir -p "$dir"
PW="$ROOT/target/release/pinwise"
LIB="$ROOT/target/release/libpinwise_preload.so"
SRC="$ROOT/bench/gpu/attribution"
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-420}
REPEATS=${REPEATS:-5}
STEPS=${STEPS:-40}
START=$(date +%s)
status=0

if [[ ! -x $PW || ! -f $LIB ]]; then
  echo "SUMMARY: missing $PW or $LIB (cargo build --release -p pinwise-cli -p pinwise-preload)"
  exit 2
fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "kernel: $(uname -r)"
  echo "glibc: $(ldd --version 2>&1 | head -n1)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 || true
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  echo "pinwise: $("$PW" --version 2>&1)"
} > "$dir/machine.txt"

over_budget() { (( $(date +%s) - START > BUDGET_S )); }
now() { date +%s.%N; }

# ---- 1. attribution ----
timeout 300 "$PY" "$SRC/torch_sites.py" "$STEPS" > "$dir/plain.out" 2> "$dir/plain.err"
expected=$(grep '^checksum' "$dir/plain.out")
timeout 300 "$PW" run -o "$dir/hist.bin" --stats-json "$dir/run-summary.json" -- \
  "$PY" "$SRC/torch_sites.py" "$STEPS" > "$dir/pinwise.out" 2> "$dir/pinwise.err"
got=$(grep '^checksum' "$dir/pinwise.out")
checks=()
if [[ -n $expected && $got == "$expected" ]]; then checks+=("PASS same checksum ($got)"); else checks+=("FAIL checksum: plain '$expected', pinwise '$got'"); status=1; fi
"$PW" report "$dir/hist.bin" --top 12 > "$dir/report.txt" 2> "$dir/report.err"
"$PW" report "$dir/hist.bin" --top 12 --stacks > "$dir/report-stacks.txt" 2>> "$dir/report.err"
"$PW" report "$dir/hist.bin" --top 12 --html "$dir/report.html" > /dev/null 2>> "$dir/report.err"
"$PW" export "$dir/hist.bin" --perfetto "$dir/trace.json" > /dev/null 2>> "$dir/report.err" || true
# The tables show user frames cut to their width (a Python frame keeps its end: the line and
# the function); --stacks lists them whole.
for f in make_hot_batch make_cold_pinned; do
  if grep -q ":[0-9]* in $f" "$dir/report.txt"; then
    checks+=("PASS report names $f: $(grep -ho "[a-z_.~]*:[0-9]* in $f" "$dir/report.txt" "$dir/report-stacks.txt" | sort -u | tr '\n' ' ')")
  else
    checks+=("FAIL report does not name $f (see report.txt, report-stacks.txt)"); status=1
  fi
done

# ---- 2. timing of the script ----
configs=(plain nohooks nostacks stacks)
: > "$dir/timing.tsv"
for ((r = 1; r <= REPEATS; r++)); do
  for c in "${configs[@]}"; do
    over_budget && break 2
    case $c in
      plain) cmd=("$PY" "$SRC/torch_sites.py" "$STEPS") ;;
      nohooks) cmd=("$PW" run --no-malloc-hooks -- "$PY" "$SRC/torch_sites.py" "$STEPS") ;;
      nostacks) cmd=("$PW" run --no-stacks -- "$PY" "$SRC/torch_sites.py" "$STEPS") ;;
      stacks) cmd=("$PW" run -- "$PY" "$SRC/torch_sites.py" "$STEPS") ;;
    esac
    t0=$(now)
    timeout 300 "${cmd[@]}" > "$dir/t-$c-$r.out" 2> "$dir/t-$c-$r.err"
    rc=$?
    t1=$(now)
    loop=$(grep -o 'elapsed_s [0-9.]*' "$dir/t-$c-$r.err" | awk '{print $2}')
    sum=$(grep '^checksum' "$dir/t-$c-$r.out")
    [[ $sum == "$expected" ]] || { checks+=("FAIL $c round $r: checksum '$sum'"); status=1; }
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
    printf '%s\t%d\t%d\t%s\t%s\n' "$c" "$r" "$rc" "$wall" "${loop:-nan}" >> "$dir/timing.tsv"
  done
done

# ---- 3. micro-benchmark ----
cc -O2 -o "$dir/malloc_cost" "$SRC/malloc_cost.c" 2> "$dir/malloc_cost.build.log"
: > "$dir/malloc_cost.tsv"
for ((r = 1; r <= REPEATS; r++)); do
  for c in plain hooks_off hooks_nostacks hooks_stacks; do
    over_budget && break 2
    case $c in
      plain) env -u LD_PRELOAD "$dir/malloc_cost" ;;
      hooks_off) LD_PRELOAD=$LIB PINWISE_MALLOC_HOOKS=0 "$dir/malloc_cost" ;;
      hooks_nostacks) LD_PRELOAD=$LIB PINWISE_STACKS=0 "$dir/malloc_cost" ;;
      hooks_stacks) LD_PRELOAD=$LIB "$dir/malloc_cost" ;;
    esac | awk -v c="$c" -v r="$r" '{print c "\t" r "\t" $1 "\t" $2}' >> "$dir/malloc_cost.tsv"
  done
done

# ---- results ----
"$PY" - "$dir" "${checks[@]}" <<'PYEOF'
import json, statistics, sys, collections
d = sys.argv[1]
checks = sys.argv[2:]
t = collections.defaultdict(lambda: ([], []))
for line in open(f"{d}/timing.tsv"):
    c, r, rc, wall, loop = line.split("\t")
    t[c][0].append(float(wall))
    if loop.strip() != "nan":
        t[c][1].append(float(loop))
m = collections.defaultdict(list)
for line in open(f"{d}/malloc_cost.tsv"):
    c, r, phase, ns = line.split("\t")
    m[(phase, c)].append(float(ns))
med = lambda v: statistics.median(v) if v else float("nan")
out = ["# pinwise run attribution on the GPU machine (bench/gpu/attribution/run.sh)", ""]
out += [open(f"{d}/machine.txt").read(), "## Checks", ""] + [f"- {c}" for c in checks]
out += ["", "## torch_sites.py wall time (s), median of rounds (interleaved)", "",
        "| config | runs | wall median | copy loop median |", "|---|---|---|---|"]
for c in ["plain", "nohooks", "nostacks", "stacks"]:
    w, l = t[c]
    out.append(f"| {c} | {len(w)} | {med(w):.3f} | {med(l):.4f} |")
out += ["", "## malloc_cost.c, ns per malloc+free pair (median of runs' medians)", "",
        "| phase | plain | hooks off | hooks, no stacks | hooks, stacks |", "|---|---|---|---|---|"]
for phase in sorted({p for p, _ in m}):
    cells = [f"{med(m[(phase, c)]):.1f}" for c in ["plain", "hooks_off", "hooks_nostacks", "hooks_stacks"]]
    out.append(f"| {phase} | " + " | ".join(cells) + " |")
open(f"{d}/results.md", "w").write("\n".join(out) + "\n")
json.dump({"checks": checks,
           "timing": {c: {"wall_s": t[c][0], "loop_s": t[c][1]} for c in t},
           "malloc_cost": {f"{p}/{c}": v for (p, c), v in m.items()}},
          open(f"{d}/results.json", "w"), indent=1)
print("\n".join(out))
PYEOF
for c in "${checks[@]}"; do echo "SUMMARY: $c"; done
exit $status
