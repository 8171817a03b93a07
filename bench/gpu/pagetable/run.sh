#!/usr/bin/env bash
# GPU memory consumed by pinned host memory, per process (issue 18, item 1): one device call,
# about 4-5 minutes (stops starting new cases past $BUDGET_S seconds, default 200; a case started before it may run 100 s more).
#
#   bash bench/gpu/pagetable/run.sh            # on the GPU machine, as root (device call)
#
# Builds bench/gpu/pagetable/pagetable.c with nvcc against the real driver, then for sizes
# 1,4,16,2,8,32 GiB (that order: a budget cut drops the big ones first), 1, 2 and 4 processes
# at once, and the modes
#   hostalloc   cuMemHostAlloc                                   (private per process)
#   reg4k       mmap + MADV_NOHUGEPAGE + cuMemHostRegister       (4 KiB pages, private)
#   reghugetlb  mmap(MAP_HUGETLB) + cuMemHostRegister            (2 MiB pages, private)
#               -- or regthp (madvise(MADV_HUGEPAGE) + touch) when huge pages cannot be
#                  reserved; the table says which it got and how much was really huge
#   shared4k    one memfd registered by every process            (same pages, N registrations)
#   sharedhugetlb  the same with a hugetlb memfd (when huge pages can be reserved)
# measures the drop of device-wide free memory (cuMemGetInfo, after cuCtxSynchronize) when
# each process pins (one process at a time, so each one's cost is seen alone) and after it
# has copied its whole buffer to the device once; and the time to pin.
# Pinned RAM is kept to <= $MAX_PINNED_GIB (default 96) per case and to what MemAvailable
# allows minus 8 GiB; cases that do not fit are listed as skipped, with the reason.
# Huge pages: vm.nr_hugepages is set for each hugetlb case to exactly what it needs and put
# back to its original value after it (and on exit, whatever happens).
# Writes $OUT/pagetable/{raw.csv,results.md,machine.txt,skipped.txt,run.log} and
# $OUT/pagetable.tgz. results.md has the per-byte figure: GPU bytes per pinned byte per
# process (slope over sizes, and the ratio at the largest size), next to the 8 B / 4 KiB
# (0.00195) the seed predicts.
# CUDA_HOME (default /usr/local/cuda), SIZES, PROCS, MODES, BUDGET_S, MAX_PINNED_GIB, HUGE=thp|hugetlb
# (skips the reservation probe) override.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
CUDA=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA/bin:$PATH
FINAL=${OUT:-$ROOT/bench-out}
D=$FINAL/pagetable; rm -rf "$D"; mkdir -p "$D"
BUDGET_S=${BUDGET_S:-200}
MAX_PINNED_GIB=${MAX_PINNED_GIB:-96}
read -r -a SIZES <<< "${SIZES:-1 4 16 2 8 32}"
read -r -a PROCS <<< "${PROCS:-1 2 4}"
[[ $(id -u) -eq 0 ]] || echo "not root: huge pages cannot be reserved, large pins may hit RLIMIT_MEMLOCK" | tee -a "$D/skipped.txt"
ulimit -l unlimited 2>/dev/null

HP=/proc/sys/vm/nr_hugepages
HP_ORIG=$(cat $HP)
restore_hp() { echo "$HP_ORIG" > $HP 2>/dev/null; }
trap restore_hp EXIT
trap 'restore_hp; exit 130' INT TERM

{
  date -u +%FT%TZ; uname -r; nproc
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  nvcc --version 2>&1 | tail -n1
  grep -E 'MemTotal|MemAvailable|Hugepagesize' /proc/meminfo
  echo "nr_hugepages at start: $HP_ORIG"
  echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>&1)"
} > "$D/machine.txt"

nvcc -O2 -o "$D/pagetable" bench/gpu/pagetable/pagetable.c -L"$CUDA/lib64/stubs" -lcuda > "$D/build.log" 2>&1 \
  || { cat "$D/build.log"; echo "SUMMARY: build failed"; exit 2; }

# Can 2 MiB huge pages be reserved at all? Try 1 GiB worth.
HUGE=${HUGE:-}
if [[ -z $HUGE ]]; then HUGE=thp; if echo $((HP_ORIG + 512)) > $HP 2>/dev/null && (( $(cat $HP) >= HP_ORIG + 512 )); then HUGE=hugetlb; fi; fi
restore_hp
echo "huge pages: $HUGE (hugetlb = MAP_HUGETLB with vm.nr_hugepages reserved per case; thp = madvise(MADV_HUGEPAGE), fraction really huge measured)" >> "$D/machine.txt"
if [[ $HUGE == hugetlb ]]; then DEFMODES="hostalloc reg4k reghugetlb shared4k sharedhugetlb"; else DEFMODES="hostalloc reg4k regthp shared4k"; fi
read -r -a MODES <<< "${MODES:-$DEFMODES}"

avail_gib() { awk '/MemAvailable/ {printf "%d", $2/1048576}' /proc/meminfo; }
echo "#kind,mode,size_bytes,nprocs,proc,pin_s,copy_s,gpu_after_pin_bytes,gpu_after_copy_bytes,huge_bytes_or_leftover" > "$D/raw.csv"
: > "$D/run.log"
for s in "${SIZES[@]}"; do
  for n in "${PROCS[@]}"; do
    for m in "${MODES[@]}"; do
      case $m in shared*) ram=$s ;; *) ram=$((s * n)) ;; esac
      tag="$m ${s}GiB x$n"
      if (( SECONDS > BUDGET_S )); then echo "$tag: budget ($BUDGET_S s) spent" >> "$D/skipped.txt"; continue; fi
      if (( ram > MAX_PINNED_GIB )); then echo "$tag: needs $ram GiB pinned > $MAX_PINNED_GIB" >> "$D/skipped.txt"; continue; fi
      if [[ $m == *hugetlb ]]; then
        need=$((ram * 512))
        echo $((HP_ORIG + need)) > $HP 2>/dev/null
        got=$(( $(cat $HP) - HP_ORIG ))
        if (( got < need )); then echo "$tag: reserved only $got of $need huge pages" >> "$D/skipped.txt"; restore_hp; continue; fi
      elif (( ram + 8 > $(avail_gib) )); then
        echo "$tag: needs $ram GiB, MemAvailable $(avail_gib) GiB (8 kept free)" >> "$D/skipped.txt"; continue
      fi
      t0=$SECONDS
      echo "== $tag" >> "$D/run.log"
      timeout 100 "$D/pagetable" "$m" $((s * 1024)) "$n" > "$D/case.out" 2>> "$D/run.log"; rc=$?
      cat "$D/case.out" >> "$D/run.log"
      grep -E '^(row|total),' "$D/case.out" >> "$D/raw.csv"
      echo "rc=$rc in $((SECONDS - t0)) s" >> "$D/run.log"
      (( rc == 0 )) || echo "$tag: failed, rc=$rc (run.log)" >> "$D/skipped.txt"
      [[ $m == *hugetlb ]] && restore_hp
    done
  done
done
restore_hp
echo "nr_hugepages at end: $(cat $HP)" >> "$D/machine.txt"

python3 - "$D" <<'PY' > "$D/results.md"
import csv, os, sys
d = sys.argv[1]
rows, totals = [], []
for r in csv.reader(l for l in open(os.path.join(d, "raw.csv")) if not l.startswith("#")):
    (rows if r[0] == "row" else totals).append(r)
MiB = 1 << 20
print("# GPU memory consumed by pinned host memory (bench/gpu/pagetable/run.sh)\n")
print(open(os.path.join(d, "machine.txt")).read().replace("\n", "  \n"))
print("GPU bytes = drop of device-wide free memory (cuMemGetInfo after cuCtxSynchronize) when one")
print("process pins; processes pin one at a time. 'after copy' = further drop once that process")
print("copied its whole buffer to the device. Seed's prediction: 8 B per 4 KiB page = 2 MiB per GiB.\n")
print("| mode | procs | GiB per proc | pinned RAM GiB | GPU MiB per proc after pin (min..max) | + after copy MiB | GPU B per pinned B | pin s per proc (mean) | pin GB/s | copy GB/s | huge bytes (thp) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
groups = {}
for r in rows:
    groups.setdefault((r[1], int(r[3]), int(r[2])), []).append(r)
for (m, n, size), rs in sorted(groups.items()):
    pin = [int(r[7]) for r in rs]; cp = [int(r[8]) for r in rs]
    ps = [float(r[5]) for r in rs]; cs = [float(r[6]) for r in rs]
    ram = size * (1 if m.startswith("shared") else n) / (1 << 30)
    huge = rs[0][9] if m == "regthp" else "-"
    print(f"| {m} | {n} | {size / (1 << 30):g} | {ram:g} | {min(pin)/MiB:.1f}..{max(pin)/MiB:.1f} | {sum(cp)/len(cp)/MiB:.1f} | "
          f"{sum(pin)/len(pin)/size:.6f} | {sum(ps)/len(ps):.3f} | {size/ (sum(ps)/len(ps)) / 1e9:.2f} | "
          f"{size * len(cs) / sum(cs) / 1e9 if sum(cs) else 0:.2f} | {huge} |")
print("\n## Per-byte figure: GPU bytes per pinned byte, per process\n")
print("Least-squares slope of (GPU bytes after pin, per process) over size, all sizes measured;")
print("this removes any constant per-registration cost. 4 KiB pages at 8 B/entry would be 0.001953.\n")
print("| mode | procs | sizes | slope B/B | intercept MiB | bytes per 4 KiB page | bytes per 2 MiB page |")
print("|---|---|---|---|---|---|---|")
by = {}
for r in rows:
    by.setdefault((r[1], int(r[3])), []).append((int(r[2]), int(r[7])))
for (m, n), pts in sorted(by.items()):
    xs = sorted({x for x, _ in pts})
    if len(xs) < 2:
        print(f"| {m} | {n} | {len(xs)} | (one size only) | | | |"); continue
    k = len(pts); sx = sum(x for x, _ in pts); sy = sum(y for _, y in pts)
    sxx = sum(x * x for x, _ in pts); sxy = sum(x * y for x, y in pts)
    b = (k * sxy - sx * sy) / (k * sxx - sx * sx); a = (sy - b * sx) / k
    print(f"| {m} | {n} | {len(xs)} | {b:.6f} | {a / MiB:.1f} | {b * 4096:.2f} | {b * 2 * MiB:.0f} |")
print("\n## Whole cases (all processes)\n")
print("| mode | procs | GiB per proc | GPU MiB after all pins | GPU MiB after all copies | free-memory change after exit MiB (negative: children's contexts released) |")
print("|---|---|---|---|---|---|")
for t in totals:
    print(f"| {t[1]} | {t[3]} | {int(t[2]) / (1 << 30):g} | {int(t[7]) / MiB:.1f} | {int(t[8]) / MiB:.1f} | {int(t[9]) / MiB:.1f} |")
sk = os.path.join(d, "skipped.txt")
if os.path.exists(sk) and os.path.getsize(sk):
    print("\n## Skipped or failed\n")
    for l in open(sk): print(f"- {l.strip()}")
PY
cat "$D/results.md"
tar czf "$FINAL/pagetable.tgz" -C "$FINAL" pagetable
