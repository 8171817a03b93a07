#!/usr/bin/env bash
# Redundant transfers on the GPU machine (issue 17): is a PyTorch loop that re-uploads a
# constant tensor reported with the time it wastes, and what does fingerprinting cost per
# copy (sampled and full, in the preload and in the tracer)?
#
# Needs, carried from the build machine at the same relative paths in a copy of the repo
# (bench/gpu/frameworks/suite.sh puts .device-carry/ there):
#   target/release/pinwise                   cargo build --release -p pinwise-cli
#   target/release/libpinwise_preload.so     cargo build --release -p pinwise-preload
# and on the machine: PyTorch (PYTHON, default /opt/torch/.venv/bin/python), a C compiler,
# CUDA's stub libcuda (CUDA, default /usr/local/cuda), root for `pinwise trace`.
#
# What it does (about 6 minutes; stops starting new runs past $BUDGET_S seconds, default 480):
#   1. torch_constant.py plain (its checksum), then under `pinwise run -o` in sampled mode
#      (every copy also hashed in full: --fingerprint-check 1, so the sampled error is
#      measured) and in full mode, and under `pinwise trace --fingerprint sampled
#      --fingerprint-check 1` and `pinwise trace --fingerprint full` (every byte hashed in
#      BPF); checks the checksums, and that each report's REDUNDANT TRANSFERS section reports
#      STEPS-1 redundant uploads of the 64 MiB table with "keep it on the device" and a
#      wasted time;
#   2. fp_cost.c (4 KiB, 1 MiB, 64 MiB copies from pinned and pageable memory): plain, under
#      `pinwise run --fingerprint off|sampled|full`, and under `pinwise trace` without
#      fingerprints, with `--fingerprint sampled --fingerprint-check 0` and with
#      `--fingerprint full`, REPEATS (default 3) rounds interleaved; the added ns per copy of
#      fingerprinting = (mode) - (off) for the preload, (mode) - (no flag) for the tracer
#      (medians over rounds of each run's median), in wall time and in the copying thread's
#      CPU time.
# Writes everything under $OUT/redundant/ (results.md, every run's output, histories and
# reports). Exit status 0 when every check passed.
set -u
source "$(dirname "$0")/common.sh"
REPEATS=${REPEATS:-3}
dir="$OUT/redundant"
setup_dir "$dir"

# ---- 1. the PyTorch loop ----
timeout 300 "$PY" "$SRC/torch_constant.py" "$STEPS" > "$dir/plain.out" 2> "$dir/plain.err"
expected=$(grep '^checksum' "$dir/plain.out")
table_bytes=$(awk '/^steps/ { print $4 }' "$dir/plain.out")
want=$((STEPS - 1))
one_case() { # NAME CMD... (writes $dir/NAME.bin)
  local name=$1; shift
  over_budget && { checks+=("SKIP $name (time budget)"); return; }
  timeout 300 "$@" > "$dir/$name.out" 2> "$dir/$name.err"
  local got; got=$(grep '^checksum' "$dir/$name.out")
  check $([[ -n $expected && $got == "$expected" ]] && echo 1 || echo 0) "$name: same checksum ($got)"
  "$PW" report "$dir/$name.bin" --quiet > "$dir/$name.report.txt" 2> "$dir/$name.report.err"
  "$PW" report "$dir/$name.bin" --quiet --json > "$dir/$name.report.json" 2>> "$dir/$name.report.err"
  "$PY" - "$dir/$name.report.json" "$table_bytes" "$want" > "$dir/$name.check.txt" 2>&1 <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))["redundant"]
size, want = int(sys.argv[2]), int(sys.argv[3])
rows = [a for a in r["allocations"] if a["size"] >= size]
ok = bool(rows) and rows[0]["redundancy"]["redundant_uploads"] == want \
    and "keep it on the device" in rows[0]["advice"] and rows[0]["wasted_ns"] > 0
print("mode", r["mode"], "uploads", r["uploads"], "redundant", r["redundant_uploads"],
      "bytes", r["redundant_upload_bytes"], "wasted_ms %.3f" % (r["wasted_ns"] / 1e6),
      "checked", r["checked"], "false_positives", r["sampled_false_positives"],
      "fp_rate", r["false_positive_rate"], "skipped", r["skipped"])
for a in r["allocations"][:4]:
    print("  size", a["size"], a["redundancy"], "wasted_ms %.3f" % (a["wasted_ns"] / 1e6), a["advice"])
print("OK" if ok else "NOT OK")
PYEOF
  check $(grep -qx OK "$dir/$name.check.txt" && echo 1 || echo 0) \
    "$name: the $table_bytes-byte table reported with $want redundant uploads, advice and wasted time"
  sed -n '/REDUNDANT TRANSFERS/,/^SOURCE/p' "$dir/$name.report.txt" | head -30 > "$dir/$name.section.txt"
}
one_case run-sampled "$PW" run --fingerprint sampled --fingerprint-check 1 -o "$dir/run-sampled.bin" -- "$PY" "$SRC/torch_constant.py" "$STEPS"
one_case run-full "$PW" run --fingerprint full -o "$dir/run-full.bin" -- "$PY" "$SRC/torch_constant.py" "$STEPS"
one_case trace "$PW" trace --fingerprint sampled --fingerprint-check 1 -o "$dir/trace.bin" -- "$PY" "$SRC/torch_constant.py" "$STEPS"
one_case trace-full "$PW" trace --fingerprint full -o "$dir/trace-full.bin" -- "$PY" "$SRC/torch_constant.py" "$STEPS"

# ---- 2. cost per copy ----
: > "$dir/build.log"
${CC:-cc} -O2 -o "$dir/fp_cost" "$SRC/fp_cost.c" -L"$CUDA/lib64/stubs" -lcuda >> "$dir/build.log" 2>&1 \
  || check 0 "fp_cost.c built (see build.log)"
: > "$dir/cost.tsv"   # variant round name median_ns min_ns copies median_cpu_ns
if [[ -x $dir/fp_cost ]]; then
  for round in $(seq 1 "$REPEATS"); do
    for v in plain run-off run-sampled run-full trace-nofp trace-fp trace-full; do
      over_budget && break 2
      case $v in
        plain) cmd=("$dir/fp_cost") ;;
        run-off) cmd=("$PW" run --fingerprint off -- "$dir/fp_cost") ;;
        run-sampled) cmd=("$PW" run --fingerprint sampled --fingerprint-check 0 -- "$dir/fp_cost") ;;
        run-full) cmd=("$PW" run --fingerprint full -- "$dir/fp_cost") ;;
        trace-nofp) cmd=("$PW" trace -o "$dir/cost-trace.bin" --force -- "$dir/fp_cost") ;;
        trace-fp) cmd=("$PW" trace --fingerprint sampled --fingerprint-check 0 -o "$dir/cost-trace.bin" --force -- "$dir/fp_cost") ;;
        trace-full) cmd=("$PW" trace --fingerprint full -o "$dir/cost-trace.bin" --force -- "$dir/fp_cost") ;;
      esac
      timeout 200 "${cmd[@]}" > "$dir/cost.$v.$round.out" 2> "$dir/cost.$v.$round.err"
      awk -v v="$v" -v r="$round" -F'\t' 'NF == 5 { print v "\t" r "\t" $0 }' "$dir/cost.$v.$round.out" >> "$dir/cost.tsv"
    done
  done
fi

# ---- results ----
"$PY" - "$dir" > "$dir/results.md" <<'PYEOF'
import collections, statistics, sys, os
d = sys.argv[1]
rows = collections.defaultdict(list)
cpu = collections.defaultdict(list)
for line in open(os.path.join(d, "cost.tsv")):
    v, r, name, med, mn, n, c = line.rstrip("\n").split("\t")
    rows[(v, name)].append(int(med))
    cpu[(v, name)].append(int(c))
names = sorted({k[1] for k in rows}, key=lambda s: (s.split("-")[0], int(s.split("-")[1])))
variants = ["plain", "run-off", "run-sampled", "run-full", "trace-nofp", "trace-fp", "trace-full"]
for title, table in [("wall", rows), ("CPU time of the copying thread", cpu)]:
    med = lambda v, n: statistics.median(table[(v, n)]) if table.get((v, n)) else None
    print(f"# Fingerprint cost per host-to-device copy, {title} (ns, median over rounds of per-run medians)\n")
    print("| copy | plain | run off | run sampled | run full | sampled - off | full - off | trace | trace sampled | trace full | sampled - none | full - none |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in names:
        vals = {v: med(v, n) for v in variants}
        f = lambda x: "-" if x is None else f"{x:,.0f}"
        diff = lambda a, b: "-" if vals[a] is None or vals[b] is None else f"{vals[a] - vals[b]:+,.0f}"
        print(f"| {n} | {f(vals['plain'])} | {f(vals['run-off'])} | {f(vals['run-sampled'])} | {f(vals['run-full'])} | "
              f"{diff('run-sampled', 'run-off')} | {diff('run-full', 'run-off')} | {f(vals['trace-nofp'])} | "
              f"{f(vals['trace-fp'])} | {f(vals['trace-full'])} | {diff('trace-fp', 'trace-nofp')} | {diff('trace-full', 'trace-nofp')} |")
    print()
print("\n# PyTorch loop (torch_constant.py)\n")
for name in ["run-sampled", "run-full", "trace", "trace-full"]:
    p = os.path.join(d, name + ".check.txt")
    if os.path.exists(p):
        print(f"## {name}\n```\n{open(p).read()}```")
    p = os.path.join(d, name + ".section.txt")
    if os.path.exists(p):
        print(f"```\n{open(p).read()}```")
PYEOF
printf '%s\n' "${checks[@]}" >> "$dir/results.md"
cat "$dir/results.md"
summary
exit $status
