#!/usr/bin/env bash
# Asynchronous downloads on the GPU machine (issue 17): does `pinwise trace --fingerprint`
# find a PyTorch loop's redundant non-blocking downloads (fingerprinted when the
# synchronization returns), as `pinwise run` does; and what do asynchronous-download
# fingerprints cost: in the preload, its CUDA event per download (created, recorded after the
# copy, queried by the drain thread or by the hook of the next copy touching the buffer); in
# the tracer, the probes on each sync call and the hash at its return.
#
# Needs, carried from the build machine at the same relative paths in a copy of the repo:
#   target/release/pinwise                   cargo build --release -p pinwise-cli
#   target/release/libpinwise_preload.so     cargo build --release -p pinwise-preload
# and on the machine: PyTorch (PYTHON, default /opt/torch/.venv/bin/python), a C compiler,
# CUDA's stub libcuda (CUDA, default /usr/local/cuda), root for `pinwise trace`.
#
# What it does (no new run that could pass $BUDGET_S seconds, default 420: the checks take
# about 2 minutes, the cost rounds the rest):
#   1. torch_async.py plain (its checksum), under `pinwise run --fingerprint full -o` and
#      under `pinwise trace --fingerprint full` and `--fingerprint sampled
#      --fingerprint-check 0`: same checksum; the 4 MiB pinned buffer (downloads completed
#      by torch.cuda.synchronize(): cudaDeviceSynchronize, cuCtxSynchronize_v2 in CUDA 13)
#      and the 2 MiB one (completed by current_stream().synchronize(), cuStreamSynchronize)
#      each reported with STEPS-1 redundant downloads of STEPS and "fetch it once" (a
#      failure of one says which kind of completion was not taken on this driver), no other
#      4 MiB buffer reported (the changing result's downloads are not redundant); each
#      `.to('cpu')` 1 MiB host buffer reported redundant from its second download on; all
#      4*STEPS downloads fingerprinted, none skipped. The results are computed into device
#      tensors allocated once, so these counts are exact (see torch_async.py);
#   2. async_cost.c: SIZE 0 (cuStreamSynchronize of an idle stream alone), 4 KiB, 1 MiB and
#      64 MiB (cuMemcpyDtoHAsync into pinned memory + cuStreamSynchronize), plain, under
#      `pinwise run --fingerprint off|sampled|full` and under `pinwise trace` without
#      fingerprints, `--fingerprint sampled --fingerprint-check 0` and `--fingerprint full`,
#      REPEATS (default 5) rounds interleaved, as many as the budget allows (results.md says
#      how many each variant got); per variant the median over rounds of each run's median
#      ns per iteration, and the range over rounds, wall and calling-thread CPU.
#      run sampled - run off at 4 KiB is the preload's per-download event (the 8-line hash
#      is well under a microsecond there). Each download goes into the buffer the previous
#      one filled, so its hook settles the previous one (asks its event, hashes it): in
#      `run` the hash lands on the calling thread, like the tracer's at the sync's return
#      (run full - run off at 64 MiB is mostly that hash). trace - trace none at SIZE 0 is
#      a sync call's probes with nothing pending.
# Works in $WORK (default a new folder under /tmp) and leaves two files under $OUT:
# redundant-async-results.md and redundant-async.tar.gz (every run's output, histories,
# reports; the cost runs' trace files left out). Exit status 0 when every check passed.
#
#   OUT=/tmp/out BUDGET_S=420 bash bench/gpu/redundant/async.sh
set -u
source "$(dirname "$0")/common.sh"
BUDGET_S=${BUDGET_S:-420}
REPEATS=${REPEATS:-5}
WORK=${WORK:-$(mktemp -d /tmp/pinwise-redundant-async.XXXXXX)}
dir="$WORK/redundant-async"
setup_dir "$dir"
mkdir -p "$OUT"

# ---- 1. the PyTorch loop ----
timeout 150 "$PY" "$SRC/torch_async.py" "$STEPS" > "$dir/plain.out" 2> "$dir/plain.err"
expected=$(grep '^checksum' "$dir/plain.out")
one_case() { # NAME CMD... (writes $dir/NAME.bin)
  local name=$1; shift
  over_budget 150 && { checks+=("SKIP $name (time budget)"); return; }
  timeout 150 "$@" > "$dir/$name.out" 2> "$dir/$name.err"
  local got; got=$(grep '^checksum' "$dir/$name.out")
  check $([[ -n $expected && $got == "$expected" ]] && echo 1 || echo 0) "$name: same checksum ($got)"
  "$PW" report "$dir/$name.bin" --quiet > "$dir/$name.report.txt" 2> "$dir/$name.report.err"
  "$PW" report "$dir/$name.bin" --quiet --json > "$dir/$name.report.json" 2>> "$dir/$name.report.err"
  "$PY" - "$dir/$name.report.json" "$STEPS" > "$dir/$name.check.txt" 2>&1 <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))["redundant"]
steps = int(sys.argv[2])
allocs = r["allocations"]
# Only allocations with a redundant copy are listed: the changing result's 4 MiB buffer (no
# redundant download) is not, and its downloads show in the total instead.
def sized(size):
    return [a for a in allocs if a["size"] == size]
def exact(size):
    # The one buffer of this size: every download after the first redundant (each step
    # reads the same device range, whose bytes never change), with the advice.
    rows = sized(size)
    return len(rows) == 1 and rows[0]["redundancy"]["downloads"] == steps \
        and rows[0]["redundancy"]["redundant_downloads"] == steps - 1 \
        and "fetch it once" in rows[0]["advice"]
print("mode", r["mode"], "uploads", r["uploads"], "downloads", r["downloads"],
      "redundant_downloads", r["redundant_downloads"], "bytes", r["redundant_download_bytes"],
      "wasted_ms %.3f" % (r["wasted_ns"] / 1e6), "skipped", r["skipped"])
for a in allocs[:8]:
    print("  size", a["size"], a["redundancy"], "wasted_ms %.3f" % (a["wasted_ns"] / 1e6), a["advice"])
print("CTX", "OK" if exact(4 << 20) else "NOT OK")
print("STREAM", "OK" if exact(2 << 20) else "NOT OK")
# `.to('cpu')`: a host buffer from PyTorch's pinned caching allocator each step (a few
# buffers in turn): each listed one redundant from its second download on.
quarters = sized(1 << 20)
print("TO_CPU", "OK" if quarters and all(
    a["redundancy"]["redundant_downloads"] == a["redundancy"]["downloads"] - 1
    for a in quarters) else "NOT OK")
print("ALL", "OK" if r["downloads"] == 4 * steps and r["skipped"] == 0 else "NOT OK")
PYEOF
  local what
  for what in "CTX:the 4 MiB buffer (torch.cuda.synchronize) alone reported, with $((STEPS - 1)) redundant downloads of $STEPS and advice" \
    "STREAM:the 2 MiB buffer (current_stream().synchronize) reported with $((STEPS - 1)) redundant downloads of $STEPS and advice" \
    "TO_CPU:each .to('cpu') host buffer reported redundant from its second download on" \
    "ALL:all $((4 * STEPS)) downloads fingerprinted, none skipped"; do
    check $(grep -qx "${what%%:*} OK" "$dir/$name.check.txt" && echo 1 || echo 0) "$name: ${what#*:}"
  done
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
        over_budget 60 && break 3
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
        timeout 60 "${cmd[@]}" > "$dir/cost.$v.$size.$round.out" 2> "$dir/cost.$v.$size.$round.err"
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
    print("(median over rounds of per-run medians; [min-max over rounds, number of rounds])\n")
    print("| SIZE | " + " | ".join(variants) + " | " + " | ".join(f"{a} - {b}" for a, b in diffs) + " |")
    print("|---" * (1 + len(variants) + len(diffs)) + "|")
    for s in sizes:
        med = {v: statistics.median(table[(v, s)]) if table.get((v, s)) else None for v in variants}
        cell = lambda v: "-" if med[v] is None else f"{med[v]:,.0f} [{min(table[(v, s)]):,}-{max(table[(v, s)]):,}, {len(table[(v, s)])}]"
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
{
  printf '%s\n' "${checks[@]}"
  echo
  echo "elapsed: $(( $(date +%s) - START )) s of BUDGET_S=$BUDGET_S"
  echo
  cat "$dir/machine.txt"
} >> "$dir/results.md"
cp "$dir/results.md" "$OUT/redundant-async-results.md"
# Everything else in one file; the cost runs' trace file (rewritten by each run) stays out.
tar -C "$WORK" --exclude='cost-trace.bin' -czf "$OUT/redundant-async.tar.gz" redundant-async
cat "$dir/results.md"
summary
exit $status
