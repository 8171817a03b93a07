#!/usr/bin/env bash
# Runs pinwise's main job on this machine: `pinwise demo`, after setting the machine up and
# building a release. On a machine without a GPU it runs on the CPU stand-in for libcuda
# (a test fixture) and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked --workspace
exec target/release/pinwise demo "$@"
