#!/usr/bin/env bash
# Asynchronous downloads on the GPU machine (issue 17): does `pinwise trace --fingerprint`
# find a PyTorch loop's redundant non-blocking downloads (fingerprinted when the
# synchronization returns), as `pinwise run` does; and what do asynchronous-download
# fingerprints cost: in the preload, its CUDA event per download (created, recorded after the
# copy, queried by the drain thread); in the tracer, the probes on each sync call and the
# hash at its return.
#
# Needs, carried from the build machine at the same relative paths in a copy of the repo:
#   target/release/pinwise                   cargo build --release -p pinwise-cli
#   target/release/libpinwise_preload.so     cargo build --release -p pinwise-preload
# and on the machine: PyTorch (PYTHON, default /opt/torch/.venv/bin/python), a C compiler,
# CUDA's stub libcuda (CUDA, default /usr/local/cuda), root for `pinwise trace`.
#
# What it does (about 6 minutes; no new runs past $BUDGET_S seconds, default 480):
#   1. torch_async.py plain (its checksum), under `pinwise run --fingerprint full -o` and
#      under `pinwise trace --fingerprint full` and `--fingerprint sampled
#      --fingerprint-check 0`: same checksum; the 4 MiB pinned buffer (downloads completed
#      by torch.cuda.synchronize(), cuCtxSynchronize) and the 2 MiB one (completed by
#      current_stream().synchronize(), cuStreamSynchronize) each reported with STEPS-1
#      redundant downloads of STEPS and "fetch it once" (two checks per run: a failure of
#      one says which kind of completion the tracer did not take on this driver), and
#      >= 2*STEPS+STEPS downloads fingerprinted;
#   2. async_cost.c: SIZE 0 (cuStreamSynchronize of an idle stream alone), 4 KiB, 1 MiB and
#      64 MiB (cuMemcpyDtoHAsync into pinned memory + cuStreamSynchronize), plain, under
#      `pinwise run --fingerprint off|sampled|full` and under `pinwise trace` without
#      fingerprints, `--fingerprint sampled --fingerprint-check 0` and `--fingerprint full`,
#      REPEATS (default 5) rounds interleaved; per variant the median over rounds of each
#      run's median ns per iteration, and the range over rounds, wall and calling-thread CPU.
#      run sampled - run off at 4 KiB is the preload's per-download event (the 8-line hash
#      is well under a microsecond there); trace - trace none at SIZE 0 is a sync call's
#      probes with nothing pending.
# Writes everything under $OUT/redundant-async/ (results.md, every run's output, histories,
# reports). Exit status 0 when every check passed.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out}
dir="$OUT/redundant-async"
mkdir -p "$dir"
PW=${PINWISE:-$ROOT/target/release/pinwise}
LIB=${PRELOAD_LIB:-$ROOT/target/release/libpinwise_preload.so}
SRC="$ROOT/bench/gpu/redundant"
PY=${PYTHON:-/opt/torch/.venv/bin/python}
[[ -x $PY ]] || PY=python3
CUDA=${CUDA:-/usr/local/cuda}
BUDGET_S=${BUDGET_S:-480}
REPEATS=${REPEATS:-5}
STEPS=${STEPS:-30}
START=$(date +%s)
status=0

if [[ ! -x $PW || ! -f $LIB ]]; then
  echo "SUMMARY: missing $PW or $LIB (cargo build --release -p pinwise-cli -p pinwise-preload)"
  exit 2
fi
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "kernel: $(uname -r)"
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version --format=csv,noheader 2>&1 || true
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  echo "pinwise: $("$PW" --version 2>&1)"
} > "$dir/machine.txt"
over_budget() { (( $(date +%s) - START > BUDGET_S )); }
checks=()
check() { # OK? MESSAGE
  if [[ $1 == 1 ]]; then checks+=("PASS $2"); else checks+=("FAIL $2"); status=1; fi
}

# ---- 1. the PyTorch loop ----
timeout 300 "$PY" "$SRC/torch_async.py" "$STEPS" > "$dir/plain.out" 2> "$dir/plain.err"
expected=$(grep '^checksum' "$dir/plain.out")
one_case() { # NAME CMD... (writes $dir/NAME.bin)
  local name=$1; shift
  over_budget && { checks+=("SKIP $name (time budget)"); return; }
  timeout 300 "$@" > "$dir/$name.out" 2> "$dir/$name.err"
  local got; got=$(grep '^checksum' "$dir/$name.out")
  check $([[ -n $expected && $got == "$expected" ]] && echo 1 || echo 0) "$name: same checksum ($got)"
  "$PW" report "$dir/$name.bin" --quiet > "$dir/$name.report.txt" 2> "$dir/$name.report.err"
  "$PW" report "$dir/$name.bin" --quiet --json > "$dir/$name.report.json" 2>> "$dir/$name.report.err"
  "$PY" - "$dir/$name.report.json" "$STEPS" > "$dir/$name.check.txt" 2>&1 <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))["redundant"]
steps = int(sys.argv[2])
allocs = r["allocations"]
def found(size):
    return [a for a in allocs if a["size"] == size and a["redundancy"]["downloads"] >= steps
            and a["redundancy"]["redundant_downloads"] == steps - 1
            and "fetch it once" in a["advice"]]
print("mode", r["mode"], "uploads", r["uploads"], "downloads", r["downloads"],
      "redundant_downloads", r["redundant_downloads"], "bytes", r["redundant_download_bytes"],
      "wasted_ms %.3f" % (r["wasted_ns"] / 1e6), "skipped", r["skipped"])
for a in allocs[:6]:
    print("  size", a["size"], a["redundancy"], "wasted_ms %.3f" % (a["wasted_ns"] / 1e6), a["advice"])
# The changing result's buffer has no redundant download, so it is not listed among the
# allocations with waste: its downloads show in the total instead.
print("CTX", "OK" if found(4 << 20) and r["downloads"] >= 3 * steps else "NOT OK")
print("STREAM", "OK" if found(2 << 20) else "NOT OK")
PYEOF
  check $(grep -qx "CTX OK" "$dir/$name.check.txt" && echo 1 || echo 0) \
    "$name: the 4 MiB buffer (torch.cuda.synchronize) has $((STEPS - 1)) redundant downloads of $STEPS and advice; >= $((3 * STEPS)) downloads fingerprinted"
  check $(grep -qx "STREAM OK" "$dir/$name.check.txt" && echo 1 || echo 0) \
    "$name: the 2 MiB buffer (current_stream().synchronize) has $((STEPS - 1)) redundant downloads of $STEPS and advice"
  sed -n '/REDUNDANT TRANSFERS/,/^SOURCE/p' "$dir/$name.report.txt" | head -30 > "$dir/$name.section.txt"
}
one_case run-full "$PW" run --fingerprint full -o "$dir/run-full.bin" -- "$PY" "$SRC/torch_async.py" "$STEPS"
one_case trace-full "$PW" trace --fingerprint full -o "$dir/trace-full.bin" -- "$PY" "$SRC/torch_async.py" "$STEPS"
one_case trace-sampled "$PW" trace --fingerprint sampled --fingerprint-check 0 -o "$dir/trace-sampled.bin" -- "$PY" "$SRC/torch_async.py" "$STEPS"

# ---- 2. cost per sync call and per asynchronous download ----
: > "$dir/build.log"
${CC:-cc} -O2 -o "$dir/async_cost" "$SRC/async_cost.c" -L"$CUDA/lib64/stubs" -lcuda >> "$dir/build.log" 2>&1 \
  || check 0 "async_cost.c built (see build.log)"
: > "$dir/cost.tsv"   # variant round size median_ns min_ns iterations median_cpu_ns
iters() { case $1 in 0) echo 2000 ;; 4096) echo 2000 ;; 1048576) echo 300 ;; *) echo 10 ;; esac; }
if [[ -x $dir/async_cost ]]; then
  for round in $(seq 1 "$REPEATS"); do
    for size in 0 4096 1048576 67108864; do
      for v in plain run-off run-sampled run-full trace-none trace-sampled trace-full; do
        over_budget && break 3
        prog=("$dir/async_cost" "$size" "$(iters "$size")" 5)
        case $v in
          plain) cmd=("${prog[@]}") ;;
          run-off) cmd=("$PW" run --fingerprint off -- "${prog[@]}") ;;
          run-sampled) cmd=("$PW" run --fingerprint sampled --fingerprint-check 0 -- "${prog[@]}") ;;
          run-full) cmd=("$PW" run --fingerprint full -- "${prog[@]}") ;;
          trace-none) cmd=("$PW" trace -o "$dir/cost-trace.bin" --force -- "${prog[@]}") ;;
          trace-sampled) cmd=("$PW" trace --fingerprint sampled --fingerprint-check 0 -o "$dir/cost-trace.bin" --force -- "${prog[@]}") ;;
          trace-full) cmd=("$PW" trace --fingerprint full -o "$dir/cost-trace.bin" --force -- "${prog[@]}") ;;
        esac
        timeout 200 "${cmd[@]}" > "$dir/cost.$v.$size.$round.out" 2> "$dir/cost.$v.$size.$round.err"
        awk -v v="$v" -v r="$round" -F'\t' 'NF == 5 { print v "\t" r "\t" $0 }' "$dir/cost.$v.$size.$round.out" >> "$dir/cost.tsv"
      done
    done
  done
fi

# ---- results ----
"$PY" - "$dir" > "$dir/results.md" <<'PYEOF'
import collections, statistics, sys, os
d = sys.argv[1]
wall = collections.defaultdict(list)
cpu = collections.defaultdict(list)
for line in open(os.path.join(d, "cost.tsv")):
    v, r, size, med, mn, n, c = line.rstrip("\n").split("\t")
    wall[(v, int(size))].append(int(med))
    cpu[(v, int(size))].append(int(c))
sizes = sorted({k[1] for k in wall})
variants = ["plain", "run-off", "run-sampled", "run-full", "trace-none", "trace-sampled", "trace-full"]
diffs = [("run-sampled", "run-off"), ("run-full", "run-off"), ("trace-sampled", "trace-none"), ("trace-full", "trace-none")]
for title, table in [("wall", wall), ("CPU time of the calling thread", cpu)]:
    print(f"# Asynchronous download + cuStreamSynchronize (SIZE 0: the sync alone), {title}, ns per iteration")
    print("(median over rounds of per-run medians; [min-max over rounds])\n")
    print("| SIZE | " + " | ".join(variants) + " | " + " | ".join(f"{a} - {b}" for a, b in diffs) + " |")
    print("|---" * (1 + len(variants) + len(diffs)) + "|")
    for s in sizes:
        med = {v: statistics.median(table[(v, s)]) if table.get((v, s)) else None for v in variants}
        cell = lambda v: "-" if med[v] is None else f"{med[v]:,.0f} [{min(table[(v, s)]):,}-{max(table[(v, s)]):,}]"
        dif = lambda a, b: "-" if med[a] is None or med[b] is None else f"{med[a] - med[b]:+,.0f}"
        print(f"| {s} | " + " | ".join(cell(v) for v in variants) + " | " + " | ".join(dif(a, b) for a, b in diffs) + " |")
    print()
print("\n# PyTorch loop (torch_async.py)\n")
for name in ["run-full", "trace-full", "trace-sampled"]:
    p = os.path.join(d, name + ".check.txt")
    if os.path.exists(p):
        print(f"## {name}\n```\n{open(p).read()}```")
    p = os.path.join(d, name + ".section.txt")
    if os.path.exists(p):
        print(f"```\n{open(p).read()}```")
PYEOF
printf '%s\n' "${checks[@]}" >> "$dir/results.md"
cat "$dir/results.md"
echo "SUMMARY: $(printf '%s\n' "${checks[@]}" | grep -c '^PASS') passed, $(printf '%s\n' "${checks[@]}" | grep -c '^FAIL') failed"
exit $status
