#!/usr/bin/env bash
# One GPU-machine call: runs one phase of pinwise's GPU checks and packs everything it wrote
# into $OUT/<phase>.tgz (the device tool returns at most 8 files per call), plus the phase's
# summary as $OUT/<phase>.txt.
#
#   bash bench/gpu/session.sh PHASE        PHASE: probe | trace | alloc | preload | demo
#
# The release binaries built on the development machine travel in .device-carry/ (ignored
# by git; made by bench/gpu/pack.sh) and are put where the phase scripts expect them
# (target/release/). Nothing here needs Rust or a network.
#   probe:   pinwise doctor (screen and --json), pinwise-cuda's smoke check on the real driver
#   trace:   bench/gpu/trace/run.sh   (pinwise trace: counts, tags, overhead)
#   alloc:   bench/gpu/alloc/run.sh   (pinwise calibrate, pinwise bench alloc, the C example)
#   preload: bench/gpu/preload/run.sh (pinwise run on CUDA C and PyTorch programs)
#   demo:    pinwise demo on the GPU (the README's main command, there)
set -u
phase=${1:?usage: session.sh probe|trace|alloc|preload|demo}
cd "$(dirname "$0")/../.."
FINAL=${OUT:?OUT must be set (the device tool sets it)}
WORK=/tmp/pinwise-gpu/$phase
rm -rf "$WORK"
mkdir -p "$WORK" target/release
if [[ -d .device-carry ]]; then
  cp -a .device-carry/. target/release/
fi
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
export PATH=/usr/local/cuda/bin:$PATH
{
  echo "phase: $phase"
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>&1
  uname -r
} > "$WORK/session.txt"

status=0
case $phase in
  probe)
    target/release/pinwise doctor > "$WORK/doctor.txt" 2>&1; echo "doctor exit: $?" >> "$WORK/doctor.txt"
    target/release/pinwise doctor --json > "$WORK/doctor.json" 2> "$WORK/doctor-json.err"
    OUT=$WORK timeout 120 bash bench/gpu/pinwise-cuda-smoke.sh > "$WORK/cuda-smoke.txt" 2>&1 || status=$?
    summary="$WORK/doctor.txt"
    ;;
  trace)
    OUT=$WORK/trace timeout 560 bash bench/gpu/trace/run.sh > "$WORK/trace.txt" 2>&1 || status=$?
    summary="$WORK/trace.txt"
    ;;
  alloc)
    OUT=$WORK timeout 560 bash bench/gpu/alloc/run.sh > "$WORK/alloc.txt" 2>&1 || status=$?
    summary="$WORK/alloc.txt"
    ;;
  preload)
    OUT=$WORK timeout 500 bash bench/gpu/preload/run.sh > "$WORK/preload.txt" 2>&1 || status=$?
    summary="$WORK/preload.txt"
    ;;
  demo)
    timeout 300 target/release/pinwise demo --out-dir "$WORK/files" > "$WORK/demo.txt" 2>&1 || status=$?
    summary="$WORK/demo.txt"
    ;;
  *) echo "unknown phase $phase" >&2; exit 2 ;;
esac
echo "phase $phase exit status: $status" >> "$summary"
# Binaries the phase built are not worth carrying back.
find "$WORK" -type f -size +8M -printf '%p (%s bytes, left on the device)\n' -delete >> "$WORK/session.txt"
tar czf "$FINAL/$phase.tgz" -C /tmp/pinwise-gpu "$phase"
cp "$summary" "$FINAL/$phase.txt"
cat "$WORK/session.txt"
tail -n 60 "$summary"
exit $status
