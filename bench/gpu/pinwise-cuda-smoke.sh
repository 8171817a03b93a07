#!/usr/bin/env bash
# pinwise-cuda against the real CUDA driver, on the GPU machine (no Rust needed there).
#
# Needs, carried from the build machine at the same relative paths:
#   target/release/examples/cuda_smoke       cargo build --release -p pinwise-cuda --example cuda_smoke
#   target/release/libpinwise_standin_cuda.so (optional) cargo build --release -p pinwise-standin-cuda
#
# Runs the smoke check on the real libcuda.so.1 (devices, NVML PCIe link, copies in every
# form with byte checks, 2D/3D struct layouts, and the CUresult the driver gives for misuse),
# then the same on the CPU stand-in (a TEST FIXTURE) when it was carried, and compares the
# misuse codes: every difference is a place where the stand-in does not behave like the
# driver. Writes under $OUT/pinwise-cuda/; prints a short summary last.
# Exit status: 0 when every check passed on the real driver.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/bench-out}
dir="$OUT/pinwise-cuda"
mkdir -p "$dir"
bin=target/release/examples/cuda_smoke
standin=target/release/libpinwise_standin_cuda.so

if [[ ! -x $bin ]]; then
  echo "SUMMARY: missing $bin (build it with: cargo build --release -p pinwise-cuda --example cuda_smoke)"
  exit 2
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "kernel: $(uname -r)"
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv 2>&1 || true
} > "$dir/machine.txt"

unset PINWISE_LIBCUDA
"$bin" --json "$dir/real.json" > "$dir/real.txt" 2>&1
real_rc=$?

standin_rc=skipped
if [[ -f $standin ]]; then
  tmp=$(mktemp -d)
  ln -s "$PWD/$standin" "$tmp/libcuda.so.1"
  PINWISE_LIBCUDA="$tmp/libcuda.so.1" "$bin" --json "$dir/standin.json" > "$dir/standin.txt" 2>&1
  standin_rc=$?
  # Misuse codes that differ between the real driver and the stand-in.
  python3 - "$dir/real.json" "$dir/standin.json" > "$dir/probe-differences.txt" <<'PY'
import json, sys
real = {p["name"]: p for p in json.load(open(sys.argv[1]))["probes"]}
standin = {p["name"]: p for p in json.load(open(sys.argv[2]))["probes"]}
diffs = 0
for name, r in real.items():
    s = standin.get(name)
    if s is None or s["code"] != r["code"]:
        diffs += 1
        print(f"{name}: real {r['code']} {r['cuda_name']}, stand-in "
              + (f"{s['code']} {s['cuda_name']}" if s else "missing"))
print(f"{diffs} of {len(real)} probes differ")
# Stream-capture facts (statuses, modes) are part of the stand-in's model of the driver too.
rf = json.load(open(sys.argv[1])).get("facts", {})
sf = json.load(open(sys.argv[2])).get("facts", {})
keys = [k for k in rf if k.startswith("capture_")]
fd = [k for k in keys if sf.get(k) != rf[k]]
for k in fd:
    print(f"fact {k}: real {rf[k]}, stand-in {sf.get(k, 'missing')}")
print(f"{len(fd)} of {len(keys)} capture facts differ")
PY
fi

cat "$dir/machine.txt"
cat "$dir/real.txt"
[[ -f $dir/probe-differences.txt ]] && { echo "--- probe differences (real driver vs stand-in):"; cat "$dir/probe-differences.txt"; }
echo "SUMMARY: real driver: $(tail -n1 "$dir/real.txt") (exit $real_rc); stand-in run: exit $standin_rc; files in $dir"
exit $real_rc
