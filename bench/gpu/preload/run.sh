#!/usr/bin/env bash
# pinwise-preload and `pinwise run` on the GPU machine, in one go (no Rust needed there).
#
# Needs, carried from the build machine at the same relative paths in a copy of the repo:
#   target/release/pinwise                   cargo build --release -p pinwise-cli
#   target/release/libpinwise_preload.so     cargo build --release -p pinwise-preload
# (the release profile keeps debug info: `strip --strip-debug` both before carrying them, to
# stay under the carry limit; about 3 MB for the library), and on the machine: nvcc
# (/usr/local/cuda/bin), a C compiler, python3 with PyTorch.
#
# What it does (about 3 minutes; every command has its own time limit, and the script stops
# starting new ones past $BUDGET_S seconds, default 330):
#   1. builds bench/gpu/preload/xfer.cu twice (shared and static cudart) and hook_cost.c;
#   2. runs xfer (shared), xfer (static), torch_xfer.py and capture.py (a CUDA graph) plain, then under
#      `pinwise run --mode profile`, `--mode use` (following that profile) and
#      `--mode adaptive`; checks each run prints the same checksums as the plain run; takes
#      wall time, the programs' own phase times, and peak pinned bytes (plain: what the
#      program itself pins at most; pinwise: the library's peak, pool and promotions
#      included);
#   3. times hook_cost plain and under `pinwise run`: the added cost per intercepted call;
#      and reads the library's own sampled bookkeeping time.
# Writes everything under $OUT/preload/ (results.json, results.md, every run's stdout,
# stderr, statistics, histories and profiles). Prints the tables last.
# Exit status: 0 when every run under pinwise printed what the plain run printed.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out}
dir="$OUT/preload"
mkdir -p "$dir"
PW="$ROOT/target/release/pinwise"
LIB="$ROOT/target/release/libpinwise_preload.so"
SRC="$ROOT/bench/gpu/preload"
CUDA=${CUDA_HOME:-/usr/local/cuda}
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-330}
export PATH="$CUDA/bin:$PATH"

if [[ ! -x $PW || ! -f $LIB ]]; then
  echo "SUMMARY: missing $PW or $LIB (build them with: cargo build --release -p pinwise-cli -p pinwise-preload)"
  exit 2
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "kernel: $(uname -r)"
  echo "glibc: $(ldd --version 2>&1 | head -n1)"
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv 2>&1 || true
  nvcc --version 2>&1 | tail -n2
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  echo "pinwise: $("$PW" --version 2>&1)"
} > "$dir/machine.txt"

# ---- build ----
: > "$dir/build.log"
nvcc -O2 -cudart shared -Xlinker -rpath -Xlinker "$CUDA/lib64" -o "$dir/xfer_shared" "$SRC/xfer.cu" >> "$dir/build.log" 2>&1
nvcc -O2 -cudart static -o "$dir/xfer_static" "$SRC/xfer.cu" >> "$dir/build.log" 2>&1
${CC:-cc} -O2 -o "$dir/hook_cost" "$SRC/hook_cost.c" -L"$CUDA/lib64/stubs" -lcuda >> "$dir/build.log" 2>&1
{ echo "--- ldd xfer_shared"; ldd "$dir/xfer_shared"; echo "--- ldd xfer_static"; ldd "$dir/xfer_static"; } >> "$dir/build.log" 2>&1

# ---- runs ----
# One line per run in runs.tsv: program, run, exit status, wall seconds.
: > "$dir/runs.tsv"
run_one() { # NAME RUN LIMIT CMD...
  local name=$1 run=$2 limit=$3; shift 3
  if (( SECONDS > BUDGET_S )); then
    printf '%s\t%s\tskipped\t-\n' "$name" "$run" >> "$dir/runs.tsv"
    return
  fi
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout "$limit" "$@" > "$dir/$name.$run.out" 2> "$dir/$name.$run.err"
  rc=$?
  t1=$(date +%s.%N)
  printf '%s\t%s\t%s\t%s\n' "$name" "$run" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" >> "$dir/runs.tsv"
}

run_case() { # NAME LIMIT CMD...
  local name=$1 limit=$2; shift 2
  run_one "$name" plain "$limit" "$@"
  for mode in profile use adaptive; do
    run_one "$name" "$mode" "$limit" "$PW" run --mode "$mode" \
      --profile "$dir/$name.profile.json" \
      --stats-json "$dir/$name.$mode.stats.json" \
      -o "$dir/$name.$mode.history.bin" -- "$@"
  done
}

if [[ -x $dir/xfer_shared ]]; then run_case xfer_shared 120 "$dir/xfer_shared"; fi
if [[ -x $dir/xfer_static ]]; then run_case xfer_static 120 "$dir/xfer_static"; fi
run_case torch 180 "$PY" "$SRC/torch_xfer.py"
# PyTorch CUDA graphs: a stream capture whose copies read a buffer pinwise may have promoted.
if [[ -f $SRC/capture.py ]]; then run_case torch_capture 180 "$PY" "$SRC/capture.py"; fi
if [[ -x $dir/hook_cost ]]; then
  run_one hook_cost plain 120 "$dir/hook_cost" 1
  run_one hook_cost adaptive 120 "$PW" run --mode adaptive \
    --stats-json "$dir/hook_cost.adaptive.stats.json" -- "$dir/hook_cost" 1
fi

# ---- tables ----
"$PY" - "$dir" > "$dir/results.md" 2> "$dir/tables.err" <<'PY'
import json, os, re, sys

d = sys.argv[1]
runs = [l.rstrip("\n").split("\t") for l in open(os.path.join(d, "runs.tsv")) if l.strip()]

def read(path):
    try:
        return open(path, errors="replace").read()
    except OSError:
        return ""

def mib(b):
    return "-" if b is None else f"{b / 2**20:.1f} MiB"

results, mismatches = [], 0
print("| program | run | exit | same output | wall s | program's phases ms | peak pinned | pool hits | promotions | fallbacks | budget refusals | sampled hook ns (median) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, run, rc, wall in runs:
    if name == "hook_cost":
        continue
    out = read(os.path.join(d, f"{name}.{run}.out"))
    err = read(os.path.join(d, f"{name}.{run}.err"))
    plain = read(os.path.join(d, f"{name}.plain.out"))
    same = "-" if run == "plain" else ("yes" if out == plain and out else "NO")
    if same == "NO" and rc != "skipped":
        mismatches += 1
    m = re.search(r"time_ms .*total=([0-9.]+)", err)
    phases = m.group(1) if m else "-"
    row = {"program": name, "run": run, "exit": rc, "same_output": same, "wall_s": wall,
           "phases_ms": phases}
    peak = hits = promos = falls = refusals = hook = None
    if run == "plain":
        m = re.search(r"pinned_requested_peak_bytes=(\d+)", err)
        if m:
            peak = int(m.group(1))
        m = re.search(r"host_memory_stats (\{.*\})", err)
        if m:
            s = json.loads(m.group(1))
            row["torch_host_memory_stats"] = s
            peak = s.get("reserved_bytes.peak", s.get("allocated_bytes.peak", peak))
    else:
        try:
            st = json.load(open(os.path.join(d, f"{name}.{run}.stats.json")))
            t = st["totals"]
            peak, hits, promos = t["pinned_bytes_peak_max"], t["pool_hits"], t["promotions"]
            falls, refusals = t["fallbacks"], t["budget_refusals"]
            ps = [p for p in st["processes"] if p.get("hook_ns_median") is not None]
            if ps:
                hook = max(ps, key=lambda p: p["hook_samples"])["hook_ns_median"]
            row["stats"] = t
            row["processes"] = st["processes"]
        except (OSError, KeyError, ValueError) as e:
            row["stats_error"] = str(e)
    row.update(peak_pinned_bytes=peak, pool_hits=hits, promotions=promos, fallbacks=falls,
               budget_refusals=refusals, sampled_hook_ns=hook)
    results.append(row)
    f = lambda v: "-" if v is None else str(v)
    print(f"| {name} | {run} | {rc} | {same} | {wall} | {phases} | {mib(peak)} | {f(hits)} | "
          f"{f(promos)} | {f(falls)} | {f(refusals)} | {'-' if hook is None else f'{hook:.0f}'} |")

def costs(path):
    rows = {}
    for line in read(path).splitlines():
        p = line.split("\t")
        if len(p) >= 5:
            rows[p[0]] = (float(p[1]), float(p[2]), int(p[3]), float(p[4]))
    return rows

plain = costs(os.path.join(d, "hook_cost.plain.out"))
under = costs(os.path.join(d, "hook_cost.adaptive.out"))
hook_rows = []
print()
print("| call | plain ns (median / min wall; CPU) | under pinwise ns (median / min wall; CPU) | added ns (wall median; CPU median) |")
print("|---|---|---|---|")
for call, (pm, pmin, n, pc) in plain.items():
    if call in under:
        um, umin, _, uc = under[call]
        hook_rows.append({"call": call, "plain_median_ns": pm, "plain_min_ns": pmin,
                          "plain_cpu_ns": pc, "pinwise_median_ns": um, "pinwise_min_ns": umin,
                          "pinwise_cpu_ns": uc, "added_median_ns": um - pm,
                          "added_cpu_ns": uc - pc, "calls": n})
        print(f"| {call} | {pm:.1f} / {pmin:.1f}; {pc:.1f} | {um:.1f} / {umin:.1f}; {uc:.1f} | "
              f"{um - pm:+.1f}; {uc - pc:+.1f} |")
try:
    st = json.load(open(os.path.join(d, "hook_cost.adaptive.stats.json")))
    p = st["processes"][0]
    print(f"\nlibrary's own sampled bookkeeping per intercepted copy in hook_cost: median "
          f"{p.get('hook_ns_median')} ns, mean {p.get('hook_ns_mean')} ns over "
          f"{p.get('hook_samples')} samples")
except (OSError, KeyError, ValueError, IndexError):
    pass
json.dump({"runs": results, "hook_cost": hook_rows, "mismatches": mismatches},
          open(os.path.join(d, "results.json"), "w"), indent=1)
sys.exit(1 if mismatches else 0)
PY
tables_rc=$?

cat "$dir/machine.txt"
echo
cat "$dir/results.md"
[[ -s $dir/tables.err ]] && { echo "--- table errors:"; cat "$dir/tables.err"; }
echo
echo "SUMMARY: $(grep -c . "$dir/runs.tsv") runs in ${SECONDS}s; outputs $( ((tables_rc == 0)) && echo 'identical under pinwise' || echo 'DIFFER (see results.md)'); files in $dir"
exit $tables_rc
