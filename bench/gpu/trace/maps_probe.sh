#!/usr/bin/env bash
# bench/gpu/trace/maps_probe.sh: on the GPU machine, prints how the driver's pinned and
# registered host memory looks in /proc/PID/smaps (see maps_probe.c). Needs gcc and
# libcuda.so.1. Output: stdout (and $OUT/maps-probe.txt when OUT is set).
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT/lib"
libcuda=$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')
ln -sf "$libcuda" "$OUT/lib/libcuda.so"
gcc -O1 -I fixtures/include -o "$OUT/maps_probe" bench/gpu/trace/maps_probe.c -L"$OUT/lib" -lcuda -Wl,-rpath,"$OUT/lib"
{ uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; "$OUT/maps_probe"; } | tee "$OUT/maps-probe.txt"
