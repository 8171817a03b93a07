#!/usr/bin/env bash
# Builds what the GPU machine needs (release, on the development machine: the GPU machine has
# no Rust) and copies it, without debug info, into .device-carry/ (ignored by git), which the
# device call carries and bench/gpu/session.sh puts into target/release/ there.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked --workspace
cargo build --release --locked -p pinwise-cuda --example cuda_smoke
rm -rf .device-carry
mkdir -p .device-carry/examples
for f in pinwise libpinwise_preload.so libpinwise.so libpinwise_standin_cuda.so libpinwise_standin_cudart.so; do
  cp target/release/$f .device-carry/
done
cp target/release/examples/cuda_smoke .device-carry/examples/
strip --strip-debug .device-carry/* .device-carry/examples/* 2>/dev/null || true
du -sh .device-carry; ls -la .device-carry
