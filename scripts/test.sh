#!/usr/bin/env bash
# Runs pinwise's whole test suite, after setting the machine up (scripts/setup.sh).
# Checks formatting and lints first, as CI does. Tests that need BPF run for real as root;
# under CI=true they fail when BPF is unavailable, elsewhere they skip with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
PINWISE_SETUP_TESTS=1 bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

# Test artefacts kept for people to look at (the HTML report's screenshots at 1000, 1400 and
# 1920 px, and the pages themselves).
export PINWISE_TEST_ARTIFACTS="${PINWISE_TEST_ARTIFACTS:-$PWD/target/test-artifacts}"
# Bounded fuzz runs of the readers (fuzz/README.md): seconds per target.
export PINWISE_FUZZ_SECONDS="${PINWISE_FUZZ_SECONDS:-45}"
echo "[test] cargo fmt --check"
cargo fmt --all -- --check
echo "[test] cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "[test] building the workspace (the CPU stand-ins for libcuda/libcudart are test fixtures)"
cargo build --workspace --all-targets --locked
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast "$@"
else
  cargo test --workspace --locked --no-fail-fast "$@"
fi
echo "[test] install path: cargo install into a temporary root (scripts/check-install.sh)"
bash scripts/check-install.sh
echo "[test] packages: the Python wheel in a fresh venv and the .deb (scripts/check-packages.sh)"
bash scripts/check-packages.sh
