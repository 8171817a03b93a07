#!/usr/bin/env bash
# Prepares this machine for building and running pinwise. Idempotent: it installs only
# what is missing and says what it installs.
#
#   - Debian/Ubuntu packages: clang and llvm (compile the BPF programs), libelf-dev,
#     autoconf, automake, autopoint, flex, bison, gawk and libtool (libbpf-sys builds libelf
#     and zlib from source, position-independent, so they link into libpinwise.so),
#     zlib1g-dev and pkg-config (libbpf, linked statically), gcc and make (C examples),
#     python3 (pinwise-pyframes' tests run a Python script against the real interpreter).
#   - tracefs and debugfs, mounted if absent (uprobes and tracepoints need tracefs).
#   - Rust: needs cargo (https://rustup.rs); cargo-nextest is used when present.
set -euo pipefail

say() { printf '[setup] %s\n' "$*"; }

# Rust first: without it nothing below is of use.
if ! command -v cargo >/dev/null; then
  [[ -x "$HOME/.cargo/bin/cargo" ]] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null || { say "cargo not found: install Rust from https://rustup.rs first"; exit 1; }

PACKAGES=(clang llvm libelf-dev zlib1g-dev pkg-config gcc make autoconf automake autopoint flex bison gawk libtool python3)
# Extra packages for the test suite only (the HTML report is checked in headless Chromium;
# `pinwise agent` is scraped by a real Prometheus server; scripts/check-packages.sh installs
# the wheel into a venv (python3-venv) and builds the .deb, whose dependencies
# dpkg-shlibdeps (dpkg-dev) works out).
if [[ "${PINWISE_SETUP_TESTS:-0}" == 1 ]]; then
  PACKAGES+=(chromium prometheus python3-venv dpkg-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { say "not root and no sudo: install them as root, then run this again"; exit 1; }
    SUDO=(sudo)
  fi
  "${SUDO[@]}" apt-get update -qq
  # `env` inside sudo: sudo drops the caller's environment.
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages present: ${PACKAGES[*]}"
fi

if [[ $(id -u) -eq 0 ]]; then
  if ! mountpoint -q /sys/kernel/tracing 2>/dev/null; then
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null && say "mounted tracefs on /sys/kernel/tracing" \
      || say "could not mount tracefs (uprobes will not attach)"
  fi
  if ! mountpoint -q /sys/kernel/debug 2>/dev/null; then
    mount -t debugfs nodev /sys/kernel/debug 2>/dev/null && say "mounted debugfs on /sys/kernel/debug" || true
  fi
else
  say "not root: tracefs not checked; the eBPF tracer needs root (or CAP_BPF+CAP_PERFMON)"
fi
