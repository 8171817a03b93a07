#!/usr/bin/env bash
# Attribution under `pinwise trace` (eBPF) on the GPU machine (issue 11, item 3): does the
# tracer's report name the Python lines of torch_sites.py that allocate the hot pageable and
# the cold pinned tensors, as `pinwise run`'s does (bench/gpu/attribution/run.sh)?
#
# Needs root (BPF), and, carried from the build machine at the same relative path in a copy
# of the repo:
#   target/release/pinwise          cargo build --release -p pinwise-cli (strip --strip-debug;
#                                   PINWISE=/path/to/pinwise uses another build)
# and on the machine python3 with PyTorch (CPython 3.10-3.13).
#
# What it does (about 2 minutes):
#   1. torch_sites.py plain (its checksum);
#   2. the same under `pinwise trace --malloc --copy-stacks 8 -o hist.json`; checks the
#      checksum is the same; `pinwise report` (text and --stacks); checks that the report
#      names make_hot_batch and make_cold_pinned as `torch_sites.py:LINE in FUNCTION`, that
#      the lines are those of the script, and prints the tracer's Python counters
#      (tracer.python_stacks, _frames_unnamed, _no_thread, _failed, _truncated) and the BPF
#      programs' cost per run (the trace's summary);
#   3. once more with `--copy-stacks 1` (every copy carries its stacks): the BPF cost per
#      run of the copy program with Python frames, for bench/results.
# Writes everything under $OUT/attribution-trace/ (results.md and every run's output).
# Exit status 0 when every check passed.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out}
dir="$OUT/attribution-trace"
mkdir -p "$dir"
PW=${PINWISE:-$ROOT/target/release/pinwise}
SRC="$ROOT/bench/gpu/attribution"
PY=${PYTHON:-python3}
STEPS=${STEPS:-40}
status=0
checks=()

if [[ ! -x $PW ]]; then
  echo "SUMMARY: missing $PW (cargo build --release -p pinwise-cli)"
  exit 2
fi
if [[ $(id -u) != 0 ]]; then
  echo "SUMMARY: run as root (pinwise trace loads BPF programs)"
  exit 2
fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "kernel: $(uname -r)"
  echo "glibc: $(ldd --version 2>&1 | head -n1)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 || true
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], sys.executable, "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  echo "pinwise: $("$PW" --version 2>&1)"
} > "$dir/machine.txt"

# The lines of torch_sites.py that create each kind of tensor.
line_of() { grep -n "^def $1" "$SRC/torch_sites.py" | cut -d: -f1; }
hot_line=$(( $(line_of make_hot_batch) + 1 ))
cold_line=$(( $(line_of make_cold_pinned) + 1 ))

# ---- 1. plain ----
timeout 300 "$PY" "$SRC/torch_sites.py" "$STEPS" > "$dir/plain.out" 2> "$dir/plain.err"
expected=$(grep '^checksum' "$dir/plain.out")

# ---- 2. traced ----
run_traced() { # $1: name, $2: --copy-stacks
  timeout 600 "$PW" trace --malloc --copy-stacks "$2" -o "$dir/$1.json" -- \
    "$PY" "$SRC/torch_sites.py" "$STEPS" > "$dir/$1.out" 2> "$dir/$1.err"
  got=$(grep '^checksum' "$dir/$1.out")
  if [[ -n $expected && $got == "$expected" ]]; then
    checks+=("PASS $1: same checksum ($got)")
  else
    checks+=("FAIL $1: checksum: plain '$expected', traced '$got' (see $1.err)"); status=1
  fi
}
run_traced traced 8
"$PW" report "$dir/traced.json" --top 12 > "$dir/report.txt" 2> "$dir/report.err"
"$PW" report "$dir/traced.json" --top 12 --stacks > "$dir/report-stacks.txt" 2>> "$dir/report.err"
for spec in "make_hot_batch:$hot_line" "make_cold_pinned:$cold_line"; do
  f=${spec%%:*}
  want="torch_sites.py:${spec##*:} in $f"
  if grep -q "$want" "$dir/report-stacks.txt"; then
    checks+=("PASS the traced report names $want")
  else
    found=$(grep -ho "[a-z_.~]*:[0-9]* in $f" "$dir/report-stacks.txt" | sort -u | tr '\n' ' ')
    checks+=("FAIL the traced report does not name '$want' (found: ${found:-nothing}; see report-stacks.txt)"); status=1
  fi
done
if grep -q "in make_hot_batch" "$dir/report.txt"; then
  checks+=("PASS a table row's user frame is make_hot_batch's line")
else
  checks+=("FAIL no table row of report.txt names make_hot_batch"); status=1
fi

# ---- 3. every copy sampled ----
run_traced traced-all-copies 1

# ---- results ----
"$PY" - "$dir" "${checks[@]}" <<'PYEOF'
import json, sys
d = sys.argv[1]
checks = sys.argv[2:]
out = ["# pinwise trace: Python frames of torch_sites.py on the GPU machine (bench/gpu/attribution/trace.sh)", ""]
out += [open(f"{d}/machine.txt").read(), "## Checks", ""] + [f"- {c}" for c in checks]
for name in ["traced", "traced-all-copies"]:
    try:
        stats = json.load(open(f"{d}/{name}.json"))["source_stats"]
    except Exception as e:
        out += ["", f"## {name}: no history ({e})"]
        continue
    out += ["", f"## {name}: tracer counters", ""]
    out += [f"- {k}: {v}" for k, v in sorted(stats.items()) if k.startswith("tracer.python") or k in ("tracer.stacks_captured", "tracer.ringbuf_drops")]
    cost = [l for l in open(f"{d}/{name}.err") if "BPF cost per run" in l]
    out += ["", "BPF cost (kernel side):", "", "```"] + [l.rstrip() for l in cost] + ["```"]
open(f"{d}/results.md", "w").write("\n".join(out) + "\n")
print("\n".join(out))
PYEOF
for c in "${checks[@]}"; do echo "SUMMARY: $c"; done
exit $status
